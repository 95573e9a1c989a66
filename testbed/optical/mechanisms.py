"""How a node's packets leave its ports: the realisation of a port architecture and the
kernel mechanism installed for it on every port of the node.

A port architecture (``testbed/optical/architectures.py``) is realised in one of two ways:

* ``edt``: the egress program decides each packet when it arrives and stamps its
  departure (earliest departure time, ``skb->tstamp``); the ``fq`` qdisc releases it
  then. Every decision must therefore be known at arrival.
* ``holding``: packets are held and released by a kernel mechanism that can wait for
  later events (a burst closed by volume, a virtual output queue served in an order
  that depends on later arrivals), e.g. a qdisc module in ``kernel/``. None exists yet:
  an architecture realised so names what it needs in ``Realisation.missing``, and
  choosing it fails (:meth:`Realisation.require`) before anything is created.

The fabric (``testbed/optical/fabric.py``) installs, per node, the mechanism of that
node's realisation; adding a mechanism is a new :class:`Mechanism` here and its use in
an architecture's realisation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from testbed.errors import DefinitionError
from testbed.features import Feature

#: realisation names
EDT, HOLDING = "edt", "holding"

#: fq options: releases at skb->tstamp, never drops or reorders stamped packets itself
FQ_OPTS = ("limit", "1000000", "flow_limit", "1000000", "horizon", "3600s", "horizon_cap", "nopacing")


@dataclass(frozen=True)
class Mechanism:
    """A kernel mechanism releasing a node's packets: ``qdisc`` (tc arguments after
    ``root``) installed as the root qdisc of every port; ``features`` the kernel
    features it needs."""

    name: str
    doc: str
    qdisc: tuple[str, ...]
    features: frozenset[Feature] = frozenset()

    def tc_batch(self, devs: Sequence[str]) -> str:
        """``tc -batch`` input installing the qdisc on every device of ``devs``."""
        return "".join(f"qdisc replace dev {dev} root {' '.join(self.qdisc)}\n" for dev in devs)


#: fq: releases each packet at its stamped time (no pacing, no per-flow limit, and a
#: horizon that caps rather than drops, so no stamped packet is lost in fq)
FQ = Mechanism("fq", "fq qdisc releasing each packet at its skb->tstamp", ("fq", *FQ_OPTS),
               frozenset({Feature.FQ}))


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
