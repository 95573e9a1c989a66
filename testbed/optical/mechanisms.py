"""How a node's packets leave its ports: the realisation of a port architecture and the
kernel mechanism installed for it on every port of the node.

A port architecture (``testbed/optical/architectures.py``) is realised in one of two ways:

* ``edt``: the egress program decides each packet when it arrives and stamps its
  departure (earliest departure time, ``skb->tstamp``); the ``fq`` qdisc releases it
  then. Every decision must therefore be known at arrival.
* ``holding``: packets are held and released by a kernel mechanism that can wait for
  later events (a burst closed by volume, a virtual output queue served in an order
  that depends on later arrivals), e.g. a qdisc module in ``kernel/``. One exists:
  ``obsburst`` (``kernel/sch_obsburst.c``, E2's burst assembler,
  ``testbed.optical.obsburst.OBSBURST``);
  an architecture realised by a mechanism that does not exist yet names what it needs
  in ``Realisation.missing``, and choosing it fails (:meth:`Realisation.require`)
  before anything is created.

The fabric (``testbed/optical/fabric.py``) installs, per node, the mechanism of that
node's realisation through :meth:`Mechanism.install`; adding a mechanism is a
:class:`Mechanism` subclass in the module that owns it (with its kernel part in
``kernel/``) and its use in an architecture's realisation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from testbed import cmd
from testbed.errors import DefinitionError
from testbed.features import Feature

#: realisation names
EDT, HOLDING = "edt", "holding"

#: fq options: releases at skb->tstamp, never drops or reorders stamped packets itself
FQ_OPTS = ("limit", "1000000", "flow_limit", "1000000", "horizon", "3600s", "horizon_cap", "nopacing")


@dataclass(frozen=True)
class Mechanism:
    """A kernel mechanism releasing a node's packets, installed as the root qdisc of
    every port of the node: ``features`` the kernel features it needs. Subclasses
    implement :meth:`install` (a tc qdisc here; a qdisc of ours with its own options,
    e.g. ``testbed.optical.obsburst.ObsBurstQdisc``, in the module that owns it)."""

    name: str
    doc: str
    features: frozenset[Feature] = frozenset()

    def install(self, netns: str | None, devs: Sequence[str], options: Any, ledger: Any) -> None:
        """Make this mechanism the root qdisc of ``devs`` in ``netns`` (the qdiscs are
        recorded in ``ledger`` by the caller; a mechanism records what else it needs,
        e.g. a module). ``options``: the node architecture's
        :meth:`~testbed.optical.architectures.Assignment.mechanism_options` (None for
        most). Raises CommandError or the mechanism's own TestbedError."""
        raise NotImplementedError


@dataclass(frozen=True)
class TcQdisc(Mechanism):
    """A qdisc that ``tc`` configures: ``qdisc`` its arguments after ``root``."""

    qdisc: tuple[str, ...] = ()

    def tc_batch(self, devs: Sequence[str]) -> str:
        """``tc -batch`` input installing the qdisc on every device of ``devs``."""
        return "".join(f"qdisc replace dev {dev} root {' '.join(self.qdisc)}\n" for dev in devs)

    def install(self, netns: str | None, devs: Sequence[str], options: Any, ledger: Any) -> None:
        # one tc process per node (each costs ~0.3 s under software emulation)
        cmd.run(["tc", "-batch", "-"], input=self.tc_batch(devs), netns=netns)


#: fq: releases each packet at its stamped time (no pacing, no per-flow limit, and a
#: horizon that caps rather than drops, so no stamped packet is lost in fq)
FQ = TcQdisc("fq", "fq qdisc releasing each packet at its skb->tstamp", frozenset({Feature.FQ}),
             ("fq", *FQ_OPTS))


@dataclass(frozen=True)
class Realisation:
    """How an architecture's decisions reach the wire: ``name`` EDT or HOLDING; the
    ``mechanism`` installed on the node's ports, or None when it does not exist yet,
    with ``missing`` saying what would have to be built."""

    name: str
    mechanism: Mechanism | None
    missing: str = ""

    def __post_init__(self) -> None:
        if self.name not in (EDT, HOLDING):
            raise ValueError(f"realisation {self.name!r} not in {(EDT, HOLDING)}")
        if self.mechanism is None and not self.missing:
            raise ValueError("a realisation without a mechanism must say what is missing")

    def require(self, arch: str, key: str, value: object) -> Mechanism:
        """The mechanism, or DefinitionError(key, value) naming the missing one for
        architecture ``arch``."""
        if self.mechanism is None:
            raise DefinitionError(key, value, f"an architecture the kernel can realise now: {arch!r} is realised "
                                  f"by {self.name} (packets held until later events) and needs {self.missing}, "
                                  "which does not exist yet")
        return self.mechanism


#: decided at arrival, stamped, released by fq (every architecture of today)
EDT_FQ = Realisation(EDT, FQ)



def holding(missing: str, mechanism: Mechanism | None = None) -> Realisation:
    """A HOLDING realisation by ``mechanism``; None (and ``missing``, what it needs)
    until that mechanism exists."""
    return Realisation(HOLDING, mechanism, missing)
