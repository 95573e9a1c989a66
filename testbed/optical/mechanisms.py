"""How a node's packets leave its ports: the realisation of a port architecture and the
kernel mechanism installed for it on every port of the node.

A port architecture (``testbed/optical/architectures.py``) is realised in one of two ways:

* ``edt``: the egress program decides each packet when it arrives and stamps its
  departure (earliest departure time, ``skb->tstamp``); the ``fq`` qdisc releases it
  then. Every decision must therefore be known at arrival.
* ``holding``: packets are held and released by a kernel mechanism that can wait for
  later events (a burst closed by volume, a virtual output queue served in an order
  that depends on later arrivals), e.g. a qdisc module in ``kernel/``. One exists:
  ``obsburst`` (``kernel/sch_obsburst.c``, E2's burst assembler, :data:`OBSBURST`);
  an architecture realised by a mechanism that does not exist yet names what it needs
  in ``Realisation.missing``, and choosing it fails (:meth:`Realisation.require`)
  before anything is created.

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


#: how a mechanism's qdisc is configured: by ``tc`` (its arguments in ``qdisc``), or by
#: ``netlink`` (a qdisc of ours with its own options struct, which tc cannot parse: it
#: names the Python module that installs it, e.g. ``testbed.optical.obsburst``)
TC, NETLINK = "tc", "netlink"


@dataclass(frozen=True)
class Mechanism:
    """A kernel mechanism releasing a node's packets: ``qdisc`` (tc arguments after
    ``root``, or the qdisc kind when ``configured_by`` is NETLINK) installed as the root
    qdisc of every port; ``features`` the kernel features it needs; ``installer`` the
    module whose ``install(dev, netns, config, ledger)`` configures a NETLINK one (its
    options are per node: they come from the architecture's parameters)."""

    name: str
    doc: str
    qdisc: tuple[str, ...]
    features: frozenset[Feature] = frozenset()
    configured_by: str = TC
    installer: str = ""

    def __post_init__(self) -> None:
        if self.configured_by not in (TC, NETLINK):
            raise ValueError(f"configured_by {self.configured_by!r} not in {(TC, NETLINK)}")
        if self.configured_by == NETLINK and not self.installer:
            raise ValueError(f"mechanism {self.name}: a netlink-configured qdisc names its installer")

    def tc_batch(self, devs: Sequence[str]) -> str:
        """``tc -batch`` input installing the qdisc on every device of ``devs``
        (ValueError for a NETLINK mechanism: tc cannot configure it)."""
        if self.configured_by != TC:
            raise ValueError(f"mechanism {self.name} is configured through netlink by {self.installer}.install, "
                             "not by tc")
        return "".join(f"qdisc replace dev {dev} root {' '.join(self.qdisc)}\n" for dev in devs)


#: fq: releases each packet at its stamped time (no pacing, no per-flow limit, and a
#: horizon that caps rather than drops, so no stamped packet is lost in fq)
FQ = Mechanism("fq", "fq qdisc releasing each packet at its skb->tstamp", ("fq", *FQ_OPTS),
               frozenset({Feature.FQ}))


#: obsburst: E2's ingress-edge burst assembler (kernel/sch_obsburst.c, a module loaded
#: from kernel/): per class, bursts closed by Tmax or Lmax, released after the offset
#: at the optical rate, a control packet at close (docs/obs.md)
OBSBURST = Mechanism("obsburst", "obsburst qdisc module: per-class time-volume burst assembly, release "
                     "after the offset at the optical rate, control packet at close", ("obsburst",),
                     frozenset({Feature.MODULES}), NETLINK, "testbed.optical.obsburst")


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


#: held per class until the burst closes, released by the obsburst qdisc
OBS_ASSEMBLY = Realisation(HOLDING, OBSBURST)


def holding(missing: str, mechanism: Mechanism | None = None) -> Realisation:
    """A HOLDING realisation by ``mechanism``; None (and ``missing``, what it needs)
    until that mechanism exists."""
    return Realisation(HOLDING, mechanism, missing)
