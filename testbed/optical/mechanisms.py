"""How a node's packets leave its ports: the realisation of a port architecture and the
kernel mechanism installed for it on the ports of the node.

A port architecture (``testbed/optical/architectures.py``) is realised in one of two ways:

* ``edt``: the egress program decides each packet when it arrives and stamps its
  departure (earliest departure time, ``skb->tstamp``); the ``fq`` qdisc releases it
  then. Every decision must therefore be known at arrival.
* ``holding``: packets are held and released by a kernel mechanism that can wait for
  later events (a burst closed by volume, a virtual output queue served in an order
  that depends on later arrivals), e.g. a qdisc module in ``kernel/``. Two exist:
  ``obsburst`` (``kernel/sch_obsburst.c``, E2's burst assembler,
  ``testbed.optical.obsburst.OBSBURST``, realising ``obs-edge``) and ``voq``
  (``kernel/sch_voq.c``, E5's input buffering, ``testbed.optical.voq.VOQ``, realising
  ``ib``; docs/ib-holding.md); an architecture realised by a mechanism that does not exist yet names what it needs
  in ``Realisation.missing``, and choosing it fails (:meth:`Realisation.require`)
  before anything is created.

An EDT architecture may also be released by a qdisc of ours: the hosts' ``nic`` by
``hostnic`` (``kernel/sch_hostnic.c``, ``testbed.optical.hostnic.HOSTNIC``), which
releases like fq and orphans each packet at enqueue.

The fabric (``testbed/optical/fabric.py``) installs, per node, the mechanism of that
node's realisation through :meth:`Mechanism.install`, giving it the node's
:class:`NodeContext` (node id, time dilation, per-port rates and propagation, which
ports face hosts, the lookahead of a node that decides late). A mechanism decides per
port what it installs: ``fq`` the same on every port; the ``obsburst`` mechanism
assembles only on the ports whose peer is not a host and puts ``fq`` on the ports
towards hosts (they carry stamped packets: ACKs back to the sources); the ``voq``
mechanism (``testbed.optical.voq.VOQ``, E5's input buffering) puts its qdisc on every
port. :meth:`Mechanism.plan` says which qdisc goes on which port (no kernel needed),
:meth:`Mechanism.holds` which ports hold packets in a qdisc of the mechanism (those it
resets, reads and removes) and :meth:`Mechanism.restamps` which of them release their
packets stamped with their *arrival at this node* rather than their intended arrival at
the peer, so that the peer must treat them as arriving when they come
(``PortConfig.peer_holds``): obsburst's do (a burst leaves when it closes), voq's do
not (it stamps every packet with its intended arrival at the next node, as an EDT
architecture). A mechanism whose qdiscs take the decisions the egress program would
count reports them through :meth:`Mechanism.port_counters` (the fabric's counter rows
take them).
A mechanism that needs a kernel module loads it in :meth:`Mechanism.prepare`, which
``testbed.net.Emulation`` calls before it creates any namespace, so that the ledger
removes the module after the namespaces whose qdiscs use it. Adding a mechanism is a
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
class NodeContext:
    """What a mechanism needs to know of the node it is installed on: the time
    dilation ``tdf`` (D), the serialisation rate of each port in *emulation* bit/s
    (paper rate / D; ``rates_bps[i]`` of port ``i``), whether each port's peer is an
    end host (``peer_host[i]``), the fabric's ``node_id`` (dense, per run), the
    propagation of each port's link in *emulation* ns (``prop_ns[i]``; None: not known)
    and ``lookahead_ns``, the lookahead M in emulation ns a mechanism that decides late
    uses (the switch option ``lookahead_ns``; None: the mechanism's default). Raises
    ValueError when the lengths differ, a rate is not > 0, a propagation is negative or
    the node id is not a u32."""

    tdf: float
    rates_bps: tuple[float, ...]
    peer_host: tuple[bool, ...]
    node_id: int = 0
    prop_ns: tuple[int, ...] | None = None
    lookahead_ns: int | None = None

    def __post_init__(self) -> None:
        if len(self.rates_bps) != len(self.peer_host):
            raise ValueError(f"{len(self.rates_bps)} port rates for {len(self.peer_host)} ports")
        if not self.tdf >= 1.0 or not all(r > 0 for r in self.rates_bps):
            raise ValueError(f"tdf {self.tdf!r} must be >= 1 and every rate > 0: {self.rates_bps}")
        if self.prop_ns is not None and (len(self.prop_ns) != len(self.rates_bps) or any(p < 0 for p in self.prop_ns)):
            raise ValueError(f"propagation {self.prop_ns!r}: one value >= 0 ns per port of {len(self.rates_bps)}")
        if not 0 <= self.node_id < 2**32:
            raise ValueError(f"node id {self.node_id!r} is not a u32")

    @property
    def optical_ports(self) -> tuple[int, ...]:
        """Ports whose peer is not an end host (towards other switches)."""
        return tuple(i for i, h in enumerate(self.peer_host) if not h)

    def optical_rate_bps(self) -> float:
        """The one rate (emulation bit/s) of the ports towards other switches. Raises
        ValueError when there is no such port or their rates differ."""
        rates = sorted({self.rates_bps[i] for i in self.optical_ports})
        if len(rates) != 1:
            raise ValueError("no port towards another switch" if not rates else
                             f"ports towards other switches have different rates: {rates} bit/s")
        return rates[0]


@dataclass(frozen=True)
class Mechanism:
    """A kernel mechanism releasing a node's packets, installed as the root qdisc of
    every port of the node (which qdisc on which port: :meth:`plan`): ``features`` the
    kernel features it needs (of every qdisc it installs). Subclasses implement
    :meth:`install` (a tc qdisc here; a qdisc of ours with its own options, e.g.
    ``testbed.optical.obsburst.ObsBurstQdisc``, in the module that owns it)."""

    name: str
    doc: str
    features: frozenset[Feature] = frozenset()

    def plan(self, devs: Sequence[str], context: NodeContext | None) -> dict[str, str]:
        """{device: name of the qdisc this mechanism makes its root qdisc} for the node's
        ports ``devs`` (in port order) described by ``context``: this mechanism's own on
        every port, unless a subclass says otherwise."""
        return {dev: self.name for dev in devs}

    def holds(self, devs: Sequence[str], context: NodeContext | None) -> tuple[bool, ...]:
        """Per port of ``devs``: whether this mechanism holds its packets past the
        egress program's decision in a qdisc of its own (the ports :meth:`reset`,
        :meth:`read` and :meth:`remove` act on). None of a TcQdisc's ports."""
        return tuple(False for _ in devs)

    def restamps(self, devs: Sequence[str], context: NodeContext | None) -> tuple[bool, ...]:
        """Per port of ``devs``: whether the packets it releases carry their arrival at
        this node as ``skb->tstamp`` (not their intended arrival at the peer), so that
        the peer must take them as arriving when they come (the fabric sets
        ``PortConfig.peer_holds`` at the far end). The ports that :meth:`holds`, unless
        a subclass stamps intended arrivals."""
        return self.holds(devs, context)

    def port_counters(self, netns: str | None, devs: Sequence[str],
                      context: NodeContext | None) -> dict[str, dict[str, Any]]:
        """{device: counter columns of the port's row in the fabric's counters} for the
        ports whose decisions this mechanism takes instead of the egress program (they
        replace the program's cut/buffered/dropped there); none here."""
        return {}

    def prepare(self, ledger: Any) -> None:
        """Whatever must exist before any namespace does (e.g. a module, recorded in
        ``ledger`` so that teardown removes it after the namespaces). Nothing here."""

    def install(self, netns: str | None, devs: Sequence[str], options: Any, ledger: Any,
                context: NodeContext | None = None) -> None:
        """Make this mechanism the root qdisc of ``devs`` in ``netns`` (the qdiscs are
        recorded in ``ledger`` by the caller; a mechanism records what else it needs,
        e.g. a module). ``options``: the node architecture's
        :meth:`~testbed.optical.architectures.Assignment.options` (None for most);
        ``context``: the node's ports (:class:`NodeContext`). Raises CommandError or the
        mechanism's own TestbedError."""
        raise NotImplementedError

    def remove(self, netns: str | None, devs: Sequence[str], context: NodeContext | None = None) -> None:
        """Take the qdiscs this mechanism holds packets in off ``devs`` (before teardown,
        so that a module they use can be unloaded). Nothing for a TcQdisc."""

    def reset(self, netns: str | None, devs: Sequence[str], options: Any, ledger: Any,
              context: NodeContext | None = None) -> None:
        """Start the holding qdiscs afresh (counters and state zero) with ``options``:
        removed and installed again on the ports where this mechanism holds packets.
        Nothing for a TcQdisc (it holds none)."""

    def read(self, netns: str | None, devs: Sequence[str], context: NodeContext | None) -> dict[str, Any]:
        """{device: the kernel's state of the qdisc holding its packets (options and
        counters)} for the ports where this mechanism holds packets; none for a TcQdisc."""
        return {}


@dataclass(frozen=True)
class TcQdisc(Mechanism):
    """A qdisc that ``tc`` configures: ``qdisc`` its arguments after ``root``."""

    qdisc: tuple[str, ...] = ()

    def tc_batch(self, devs: Sequence[str]) -> str:
        """``tc -batch`` input installing the qdisc on every device of ``devs``."""
        return "".join(f"qdisc replace dev {dev} root {' '.join(self.qdisc)}\n" for dev in devs)

    def install(self, netns: str | None, devs: Sequence[str], options: Any, ledger: Any,
                context: NodeContext | None = None) -> None:
        if not devs:
            return
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


#: decided at arrival, stamped, released by fq (every architecture but obs-edge)
EDT_FQ = Realisation(EDT, FQ)


def holding(missing: str, mechanism: Mechanism | None = None) -> Realisation:
    """A HOLDING realisation by ``mechanism``; None (and ``missing``, what it needs)
    until that mechanism exists."""
    return Realisation(HOLDING, mechanism, missing)
