"""The ``voq`` qdisc (``kernel/sch_voq.c``: a node that holds every packet and releases it
on the intended timeline: E5's input-buffered node, design in docs/ib-holding.md, or E1's
hybrid switch, docs/hybrid-holding.md) from Python: its options, its counters, the module
that provides it and its fabric mechanism.

* :class:`VoqOptions`: the options of one node's voq qdiscs (the fabric's node id, the
  node as :class:`~testbed.optical.ibsched.IbConfig`: ports, B, lookahead M, scheduler,
  VOQ split; the packet limit of each qdisc), checked against the module's bounds
  (:class:`VoqError` naming the field, the value and the accepted range).
  :meth:`VoqOptions.qopt` is one port's ``struct tc_voq_qopt`` (``kernel/voq.h``) as a
  :class:`Qopt`, which packs and unpacks. The same IbConfig drives the algorithm's
  mirror, :func:`testbed.optical.ibsched.run`; a
  :class:`~testbed.optical.hybridsched.HybridConfig` (ports, n_e, M) makes the node
  E1's hybrid switch (scheduler ``hybrid``), mirrored by
  :func:`testbed.optical.hybridsched.run`.
* :func:`node_options` / :func:`hybrid_node_options`: the options of a fabric node (its
  :class:`~testbed.optical.mechanisms.NodeContext`) for a buffer B / for n_e buffer
  ports, with the lookahead checked against the node's links (DefinitionError naming
  key, value and range).
* :func:`install` / :func:`remove` / :func:`read` / :func:`read_ports` put the qdisc on
  a device, take it off and read options and counters back, through rtnetlink
  in-process (:mod:`testbed.optical.qdiscnl`: ``tc`` has no parser for this qdisc);
  :func:`change` gives a live qdisc another XCP epoch and interval.
* The XCP ring (docs/xcp-edge.md, "IB nodes"): with ``IbConfig.xcp_interval_ns`` set,
  each output's qdisc counts, per control interval, the arrivals decided for it and the
  smallest backlog one of them found (:class:`~testbed.optical.ibsched.XcpSlot`,
  ``struct tc_voq_xcp_slot``), dumped with its counters (``QdiscState.xcp``,
  :func:`unpack_xcp_ring`): the XCP agent's persistent queue Q of an ib node.
* :data:`QDISC_MODULE` (``kernel/sch_voq.ko``), loaded into the run's ledger.
* :data:`VOQ`, the mechanism (:class:`VoqQdisc`): a voq qdisc on every port of the node,
  released packets stamped with their intended arrival at the next node (so the peer
  does not re-stamp them: :meth:`VoqQdisc.restamps` is all False), and the decisions'
  counters for the fabric's rows (:meth:`VoqQdisc.port_counters`).

Units: times in emulation ns (CLOCK_MONOTONIC), rates in ps per byte, buffers in IP
bytes (frame bytes less 14; hybrid: frame bytes), as the qdisc.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from testbed.errors import DefinitionError
from testbed.features import Feature
from testbed.ledger import Ledger
from testbed.optical import layout, qdiscnl
from testbed.optical.hybridsched import HybridConfig
from testbed.optical.ibsched import SCHEDULERS, VOQ_SPLITS, XCP_NONE, XCP_SLOTS, IbConfig, PortParams, XcpSlot
from testbed.optical.mechanisms import HOLDING, Mechanism, NodeContext, Realisation

MODULE_NAME = "sch_voq"
KIND = "voq"
#: the constants of kernel/voq.h (tests/unit/test_voq.py compares them with the header)
VERSION = 3
MAX_PORTS = 64
LATE_BUCKETS = 48
F_PEER_HOST = 0x1
#: what the optical switch's programs leave in skb->cb for a held packet: cb[CB_DECISION]
#: = OPTSW_HOLD (the egress program), cb[CB_IN_PORT] = the input port (the ingress program)
CB_DECISION, CB_IN_PORT, OPTSW_HOLD = 0, 1, 4
#: the scheduler codes (VOQ_SCHED_*): ibsched.SCHEDULERS in order, then E1's hybrid switch
SCHEDULER_CODES = {**{name: code for code, name in enumerate(SCHEDULERS)}, "hybrid": 2}
ETH_HLEN = 14
#: the module's bounds (inclusive), as kernel/voq.h and voq_parse() in sch_voq.c
LIMIT_BOUNDS = (1, 10_000_000)
BUFFER_BOUNDS = (0, 1_000_000_000)
LOOKAHEAD_BOUNDS = (1, 3_600_000_000_000)
PS_PER_BYTE_BOUNDS = (1, 8_000_000_000)
PROP_BOUNDS = (0, 3_600_000_000_000)
PORTS_BOUNDS = (1, MAX_PORTS)
#: the XCP ring's d_e (0: off) and epoch E (ns)
XCP_INTERVAL_BOUNDS = (0, 3_600_000_000_000)
XCP_EPOCH_BOUNDS = (0, 2**64 - 2)

#: M when the switch names none (emulation ns): docs/ib-holding.md, "Choosing M": about
#: 50 times the worst lateness measured in the guest (17 us) and below every link of E5's
#: NSFNET at D = 20 (edge links 0.1 ms x 20 = 2 ms)
DEFAULT_LOOKAHEAD_NS = 1_000_000
#: packets one voq qdisc may hold (pending, in VOQs, and decided until their stamp)
DEFAULT_LIMIT = 1_000_000

#: struct tc_voq_qopt: (member, C type) in order
QOPT_MEMBERS = (("version", "u32"), ("node_id", "u32"), ("n_ports", "u32"), ("port", "u32"), ("scheduler", "u32"),
                ("voq_split", "u32"), ("flags", "u32"), ("limit", "u32"), ("buffer_bytes", "u64"),
                ("lookahead_ns", "u64"), ("ps_per_byte", "u64"), ("prop_ns", "u64"), ("xcp_epoch_ns", "u64"),
                ("xcp_interval_ns", "u64"), ("n_e", "u32"), ("reserved", "u32"))
_QOPT = struct.Struct("=" + "".join("I" if t == "u32" else "Q" for _, t in QOPT_MEMBERS))
QOPT_SIZE = _QOPT.size                                                   # 88


class VoqError(qdiscnl.QdiscError):
    """The voq qdisc or its module could not be configured, read or (un)loaded, or its
    options are out of the module's range; ``errno`` the kernel's error number when it
    answered one (else 0)."""


def _check(name: str, value: object, bounds: tuple[int, int], unit: str = "") -> None:
    lo, hi = bounds
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise VoqError(f"voq {name}={value!r} out of range: an integer {lo}..{hi}{unit}")


@dataclass(frozen=True)
class Qopt:
    """``struct tc_voq_qopt``, the options of one voq qdisc, as the kernel takes and
    dumps them (codes, not names: ``scheduler`` an index of ibsched.SCHEDULERS,
    ``voq_split`` of ibsched.VOQ_SPLITS, ``flags`` F_PEER_HOST; ``xcp_epoch_ns`` and
    ``xcp_interval_ns`` the XCP ring's E and d_e, 0 and 0: off; ``n_e`` the hybrid
    switch's buffer ports, 0 for the other schedulers; ``reserved`` 0)."""

    version: int
    node_id: int
    n_ports: int
    port: int
    scheduler: int
    voq_split: int
    flags: int
    limit: int
    buffer_bytes: int
    lookahead_ns: int
    ps_per_byte: int
    prop_ns: int
    xcp_epoch_ns: int = 0
    xcp_interval_ns: int = 0
    n_e: int = 0
    reserved: int = 0

    def pack(self) -> bytes:
        """The TCA_OPTIONS payload (host byte order, 88 bytes)."""
        return _QOPT.pack(*(getattr(self, name) for name, _ in QOPT_MEMBERS))

    @classmethod
    def unpack(cls, data: bytes) -> "Qopt":
        """Decode a dumped TCA_OPTIONS. Raises VoqError unless it is QOPT_SIZE bytes."""
        if len(data) != QOPT_SIZE:
            raise VoqError(f"voq options are {len(data)} bytes, expected {QOPT_SIZE}")
        return cls(*_QOPT.unpack(data))


@dataclass(frozen=True)
class VoqOptions:
    """The options of one node's voq qdiscs: ``node_id`` (the qdiscs of one namespace
    naming it share the node's VOQs and scheduler), ``config`` (ports in port order with
    their rate, propagation and host flag; M; for an input-buffered node B, scheduler and
    VOQ split; for a hybrid node n_e; emulation units) and ``limit`` (packets each qdisc
    may hold). Raises VoqError naming the field, the value and the module's range when
    one is out of it."""

    node_id: int
    config: IbConfig | HybridConfig
    limit: int = DEFAULT_LIMIT

    def __post_init__(self) -> None:
        c = self.config
        _check("node_id", self.node_id, (0, 2**32 - 1))
        _check("n_ports", c.n_ports, PORTS_BOUNDS)
        _check("limit", self.limit, LIMIT_BOUNDS, " packets")
        _check("lookahead_ns", c.lookahead_ns, LOOKAHEAD_BOUNDS, " ns")
        for i, p in enumerate(c.ports):
            _check(f"port {i} ps_per_byte", p.ps_per_byte, PS_PER_BYTE_BOUNDS, " ps per byte")
            _check(f"port {i} prop_ns", p.prop_ns, PROP_BOUNDS, " ns")
        if isinstance(c, HybridConfig):
            _check("n_e", c.n_e, (0, c.n_ports), " buffer ports")
            return
        _check("buffer_bytes", c.buffer_bytes, BUFFER_BOUNDS, " bytes")
        _check("xcp_interval_ns", c.xcp_interval_ns, XCP_INTERVAL_BOUNDS, " ns (0: XCP ring off)")
        _check("xcp_epoch_ns", c.xcp_epoch_ns, XCP_EPOCH_BOUNDS, " ns")

    @property
    def n_ports(self) -> int:
        return self.config.n_ports

    def qopt(self, port: int) -> Qopt:
        """The options of the qdisc of ``port`` (0 <= port < n_ports; else VoqError)."""
        _check("port", port, (0, self.n_ports - 1))
        c, p = self.config, self.config.ports[port]
        flags = F_PEER_HOST if p.peer_host else 0
        if isinstance(c, HybridConfig):
            return Qopt(VERSION, self.node_id, c.n_ports, port, SCHEDULER_CODES["hybrid"], 0, flags, self.limit, 0,
                        c.lookahead_ns, p.ps_per_byte, p.prop_ns, n_e=c.n_e)
        return Qopt(VERSION, self.node_id, c.n_ports, port, SCHEDULER_CODES[c.scheduler],
                    VOQ_SPLITS.index(c.voq_split), flags, self.limit, c.buffer_bytes,
                    c.lookahead_ns, p.ps_per_byte, p.prop_ns, c.xcp_epoch_ns, c.xcp_interval_ns)

    def with_xcp(self, epoch_ns: int, interval_ns: int) -> "VoqOptions":
        """These options with the XCP ring at epoch ``epoch_ns`` E and interval
        ``interval_ns`` d_e (emulation ns; 0, 0: off). Raises VoqError out of the
        module's range or for a hybrid node (no ring), ValueError for an epoch with the
        ring off."""
        if isinstance(self.config, HybridConfig):
            raise VoqError("voq xcp_interval_ns: a hybrid node has no XCP ring (accepted: an input-buffered node)")
        return replace(self, config=replace(self.config, xcp_epoch_ns=epoch_ns, xcp_interval_ns=interval_ns))


def lookahead_range(context: NodeContext) -> tuple[int, int]:
    """(lo, hi): the lookaheads M (emulation ns) a node of ``context`` accepts, the
    module's bounds and below the smallest propagation of its links (a packet decided M
    after its instant still leaves at its stamp, departure + propagation: docs/ib-holding.md,
    "Where M goes"); hi < lo when none does. Raises ValueError when the propagation is
    not known (``context.prop_ns`` None)."""
    if context.prop_ns is None:
        raise ValueError("the node's link propagation is not known")
    return LOOKAHEAD_BOUNDS[0], min(LOOKAHEAD_BOUNDS[1], min(context.prop_ns) - 1)


def hybrid_lookahead_ns(context: NodeContext) -> int:
    """The default M of a hybrid node (emulation ns): :data:`DEFAULT_LOOKAHEAD_NS`, or half
    the node's shortest propagation if that is less (E1's links are 10 m and 100 m: 0.5
    and 5 ms of emulation at D = 10 000; the lateness at a switch ingress is tens of us,
    docs/hybrid-holding.md, "M at E1's scale"). Raises ValueError when the propagation is
    not known."""
    if context.prop_ns is None:
        raise ValueError("the node's link propagation is not known")
    return max(LOOKAHEAD_BOUNDS[0], min(DEFAULT_LOOKAHEAD_NS, min(context.prop_ns) // 2))


def _lookahead(context: NodeContext, key: str, default: int = DEFAULT_LOOKAHEAD_NS) -> int:
    """M of a node described by ``context`` (``context.lookahead_ns``, None:
    ``default``). Raises DefinitionError naming ``key.lookahead_ns``
    when M is not an integer within :func:`lookahead_range` (naming the shortest link),
    ``key`` when the node's propagation is unknown."""
    if context.prop_ns is None:
        raise DefinitionError(key, None, "a node whose links' propagation is known (NodeContext.prop_ns)")
    m = default if context.lookahead_ns is None else context.lookahead_ns
    lo, hi = lookahead_range(context)
    if isinstance(m, bool) or not isinstance(m, int) or not lo <= m <= hi:
        short = min(range(len(context.prop_ns)), key=lambda i: context.prop_ns[i])  # type: ignore[index]
        link = f"port {short}: {context.prop_ns[short]} ns"
        raise DefinitionError(f"{key}.lookahead_ns", m, (
            f"a lookahead M in emulation ns, an integer {lo}..{hi}, below the smallest propagation of the node's "
            f"links ({link}), so that a packet decided M after its instant still leaves at its stamp (switch "
            "option lookahead_ns; docs/ib-holding.md)") if hi >= lo else (
            f"a lookahead M in emulation ns below the smallest propagation of the node's links, but no M fits "
            f"({link}): give the node's links a propagation (length_m) above 1 ns"))
    return m


def _ports(context: NodeContext) -> list[tuple[float, int, bool]]:
    """(emulation bit/s, propagation ns, peer host) of each port of ``context``."""
    return list(zip(context.rates_bps, context.prop_ns or (), context.peer_host))


def _port_params(ports: Sequence[tuple[float, int, bool]]) -> tuple[PortParams, ...]:
    return tuple(PortParams(layout.ps_per_byte(r), prop, host) for r, prop, host in ports)


def node_options(context: NodeContext, buffer_bytes: int, *, key: str, scheduler: str = "rr",
                 voq_split: str = "shared", limit: int = DEFAULT_LIMIT) -> VoqOptions:
    """The options of the voq qdiscs of an input-buffered node described by ``context``
    with B = ``buffer_bytes`` per input (IP bytes): its node id, per port the rate (ps
    per byte of its emulation rate), propagation (emulation ns) and host flag, M =
    ``context.lookahead_ns`` (None: :data:`DEFAULT_LOOKAHEAD_NS`). Raises
    DefinitionError naming ``key.lookahead_ns`` when M is not an integer within
    :func:`lookahead_range` (naming the shortest link), and ``key`` when the node's
    propagation is unknown or a port's rate or propagation leaves the module's range."""
    m = _lookahead(context, key)
    ports = _ports(context)
    try:
        return VoqOptions(context.node_id, IbConfig(_port_params(ports), buffer_bytes, m, scheduler, voq_split), limit)
    except (ValueError, VoqError) as exc:
        raise DefinitionError(key, ports, f"ports (emulation bit/s, propagation ns, peer host) and a buffer the voq "
                                          f"qdisc can hold ({exc})") from None


def hybrid_node_options(context: NodeContext, n_e: int, *, key: str, limit: int = DEFAULT_LIMIT) -> VoqOptions:
    """The options of the voq qdiscs of a hybrid node (E1's switch, scheduler
    ``hybrid``) described by ``context`` with ``n_e`` buffer input = output ports: as
    :func:`node_options` (node id, ports) with n_e instead of a buffer and M =
    ``context.lookahead_ns``, None: :func:`hybrid_lookahead_ns`. Raises DefinitionError
    as :func:`node_options`, naming ``key`` when n_e exceeds the node's ports."""
    if context.prop_ns is None:
        raise DefinitionError(key, None, "a node whose links' propagation is known (NodeContext.prop_ns)")
    m = _lookahead(context, key, hybrid_lookahead_ns(context))
    ports = _ports(context)
    try:
        return VoqOptions(context.node_id, HybridConfig(_port_params(ports), n_e, m), limit)
    except (ValueError, VoqError) as exc:
        raise DefinitionError(key, ports, f"ports (emulation bit/s, propagation ns, peer host) and n_e buffer ports "
                                          f"the voq qdisc can hold ({exc})") from None


# -- counters ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class PortStats:
    """``struct tc_voq_port_stats``: one port of the node, as output (this qdisc: packets
    decided, cut through, buffered, dropped, late, decided after their stamp, released
    with their bytes, refused at enqueue as unmodelled or over the limit) and as input
    (its packets dropped, the most and the current IP bytes waiting in its buffer)."""

    arrivals: int
    cut: int
    buffered: int
    dropped: int
    late: int
    decided_after_stamp: int
    released: int
    released_bytes: int
    unmodelled: int
    overlimit: int
    in_dropped: int
    in_max_bytes: int
    in_bytes: int


@dataclass(frozen=True)
class NodeStats:
    """``struct tc_voq_node_stats``: the node's sums, its maxima (enqueue lateness,
    decision lag, IP bytes waiting), its live state (last decided instant, packets in
    VOQs, packets pending, member qdiscs) and the enqueue-lateness histogram
    (``late_log2[k]``: [2^k, 2^(k+1)) ns, bucket 0 also 0 ns)."""

    arrivals: int
    cut: int
    buffered: int
    dropped: int
    late: int
    decided_after_stamp: int
    max_enqueue_late_ns: int
    max_decision_lag_ns: int
    max_node_bytes: int
    last_ns: int
    waiting: int
    pending: int
    members: int
    late_log2: tuple[int, ...]


#: the u64 members of struct tc_voq_port_stats and of struct tc_voq_node_stats before
#: its late_log2[LATE_BUCKETS], in order (struct tc_voq_xstats is one of each, then the
#: XCP ring)
PORT_STATS_MEMBERS = tuple(f.name for f in fields(PortStats))
NODE_STATS_MEMBERS = tuple(f.name for f in fields(NodeStats))[:-1]
#: struct tc_voq_xcp_slot: (member, C type) in order (ibsched.XcpSlot's fields)
XCP_SLOT_MEMBERS = (("interval", "u64"), ("bytes", "u64"), ("qmin_ns", "u64"), ("packets", "u32"),
                    ("drops", "u32"))
_XCP_SLOT = struct.Struct("=" + "".join("I" if t == "u32" else "Q" for _, t in XCP_SLOT_MEMBERS))   # 32 B
#: offset of the ring (tc_voq_xstats.xcp) and the size of the whole struct
XCP_RING_OFFSET = 8 * (len(PORT_STATS_MEMBERS) + len(NODE_STATS_MEMBERS) + LATE_BUCKETS)           # 592
XSTATS_SIZE = XCP_RING_OFFSET + XCP_SLOTS * _XCP_SLOT.size                                    # 720


def _xstats_size(data: bytes) -> None:
    if len(data) != XSTATS_SIZE:
        raise VoqError(f"voq counters are {len(data)} bytes, expected {XSTATS_SIZE}")


def unpack_xstats(data: bytes) -> tuple[PortStats, NodeStats]:
    """The port and node counters of ``struct tc_voq_xstats`` (the XCP ring:
    :func:`unpack_xcp_ring`). Raises VoqError unless it is XSTATS_SIZE bytes."""
    _xstats_size(data)
    vals = struct.unpack_from(f"={XCP_RING_OFFSET // 8}Q", data)
    n_port, n_node = len(PORT_STATS_MEMBERS), len(NODE_STATS_MEMBERS)
    return PortStats(*vals[:n_port]), NodeStats(*vals[n_port:n_port + n_node], tuple(vals[n_port + n_node:]))


def unpack_xcp_ring(data: bytes) -> tuple[XcpSlot, ...]:
    """The XCP ring of ``struct tc_voq_xstats``: XCP_SLOTS slots, interval k in slot
    k % XCP_SLOTS, the kernel's values as they are (XCP_NONE for "never used" /
    "no arrival"). Raises VoqError unless it is XSTATS_SIZE bytes."""
    _xstats_size(data)
    return tuple(XcpSlot(*_XCP_SLOT.unpack_from(data, XCP_RING_OFFSET + k * _XCP_SLOT.size))
                 for k in range(XCP_SLOTS))


@dataclass(frozen=True)
class QdiscState:
    """What the kernel reports for one voq qdisc: its options, its port's and its
    node's counters, the generic counters (packets and bytes released, packets held
    now) and its output's XCP ring (:func:`unpack_xcp_ring`)."""

    qopt: Qopt
    port: PortStats
    node: NodeStats
    sent_packets: int
    sent_bytes: int
    qlen: int
    xcp: tuple[XcpSlot, ...] = ()


# -- rtnetlink (testbed.optical.qdiscnl) and the module ----------------------------------------
def install(dev: str, netns: str | None, qopt: Qopt, ledger: Ledger | None = None) -> None:
    """Make a voq qdisc with ``qopt`` the root qdisc of ``dev`` (replacing another kind;
    a voq root takes only its own options again); recorded in ``ledger`` (resource
    ``qdisc``) first. Raises VoqError with the kernel's message."""
    if ledger is not None:
        ledger.add("qdisc", dev=dev, netns=netns, parent="root")
    install_raw(dev, netns, qopt.pack())


def install_raw(dev: str, netns: str | None, options: bytes) -> None:
    """:func:`install` with ``options`` as given (unchecked: the kernel's own checks
    answer; for tests)."""
    qdiscnl.replace_root(dev, netns, KIND, options, VoqError, QDISC_MODULE)


def remove(dev: str, netns: str | None) -> None:
    """Delete the root qdisc of ``dev`` (the device falls back to its default); its
    packets leave the node (the others' stay)."""
    qdiscnl.delete_root(dev, netns, VoqError)


def change(dev: str, netns: str | None, qopt: Qopt, session: qdiscnl.Session | None = None) -> None:
    """Give the live voq root qdisc of ``dev`` the options ``qopt`` (``RTM_NEWQDISC``
    without create: the qdisc's change), on ``session`` (of ``netns``) when given: only
    ``xcp_epoch_ns`` and ``xcp_interval_ns`` may differ from its own (its XCP ring then
    restarts, every slot never used; its packets and other counters stay). Raises
    VoqError with the kernel's message (another option changed, values out of range, no
    voq qdisc there)."""
    payload = qdiscnl.attr(qdiscnl.TCA_KIND, KIND.encode() + b"\0") + qdiscnl.attr(qdiscnl.TCA_OPTIONS, qopt.pack())
    try:
        qdiscnl.device_request(dev, netns, qdiscnl.RTM_NEWQDISC, qdiscnl.NLM_F_ACK, payload, VoqError, session)
    except VoqError as exc:
        raise VoqError(f"changing {KIND} on {dev} in {netns or 'the root namespace'}: {exc.args[0]}",
                       exc.errno) from None


def _state(q: qdiscnl.RootQdisc) -> QdiscState:
    port, node = unpack_xstats(q.app)
    return QdiscState(Qopt.unpack(q.options), port, node, q.packets, q.bytes, q.qlen, unpack_xcp_ring(q.app))


def read(dev: str, netns: str | None, session: qdiscnl.Session | None = None) -> QdiscState:
    """Options and counters of the voq root qdisc of ``dev`` (on ``session``, a
    session of ``netns``, when given). Raises VoqError."""
    return _state(qdiscnl.dump_root(dev, netns, KIND, VoqError, session))


def read_ports(devs: Sequence[str], netns: str | None,
               session: qdiscnl.Session | None = None) -> dict[str, QdiscState]:
    """{device: :func:`read` of it} for ``devs`` of one namespace, from one dump (on
    ``session`` when given)."""
    return {dev: _state(q) for dev, q in qdiscnl.dump_roots(devs, netns, KIND, VoqError, session).items()}


#: the module providing the qdisc (kernel/sch_voq.ko)
QDISC_MODULE = qdiscnl.QdiscModule(MODULE_NAME, KIND, VoqError)


def ko_path() -> Path:
    return QDISC_MODULE.ko_path()


def loaded() -> bool:
    return QDISC_MODULE.loaded()


def load_module(ledger: Ledger) -> bool:
    """insmod ``kernel/sch_voq.ko`` unless loaded; True when this call loaded it (then
    recorded in ``ledger`` before loading, so teardown removes it)."""
    return QDISC_MODULE.load(ledger)


def unload_module(ledger: Ledger) -> None:
    """rmmod the module this ``ledger`` loaded; refuses one it did not load or one still
    in use (a voq qdisc holds a reference)."""
    QDISC_MODULE.unload(ledger)


def port_row(state: QdiscState) -> dict[str, int]:
    """The counter columns of one port of an ib node in the fabric's rows
    (``optical_ports.csv``) from its qdisc's ``state``: ``cut_through``, ``buffered``
    (= ``oeo``, as the other architectures' rows), ``dropped`` of the packets decided for
    this output; ``bytes`` the frame bytes released (at their stamps, not at the
    decision); ``max_occ_bytes`` the most IP bytes waiting in this port's *input*
    buffer (IB buffers by input) and ``node_max_occ_bytes`` in the node's; then the
    qdisc's own: ``late`` (decided late: not exact), ``decided_after_stamp``,
    ``released``, ``in_dropped`` (packets of this input dropped), ``qdisc_unmodelled``,
    ``qdisc_overlimit``, and the node's ``node_late``, ``node_max_enqueue_late_ns`` and
    ``node_max_decision_lag_ns``."""
    p, n = state.port, state.node
    return {"cut_through": p.cut, "buffered": p.buffered, "oeo": p.buffered, "dropped": p.dropped,
            "bytes": p.released_bytes, "max_occ_bytes": p.in_max_bytes, "node_max_occ_bytes": n.max_node_bytes,
            "late": p.late, "decided_after_stamp": p.decided_after_stamp, "released": p.released,
            "in_dropped": p.in_dropped, "qdisc_unmodelled": p.unmodelled, "qdisc_overlimit": p.overlimit,
            "node_late": n.late, "node_max_enqueue_late_ns": n.max_enqueue_late_ns,
            "node_max_decision_lag_ns": n.max_decision_lag_ns}


@dataclass(frozen=True)
class VoqQdisc(Mechanism):
    """The voq qdisc as a fabric mechanism: on every port of the node, with the options
    of the node's :class:`VoqOptions` (its architecture's ``mechanism_options``), one
    qdisc per output sharing the node. It holds every port's packets but releases them
    stamped with their intended arrival at the peer (:meth:`restamps` all False).
    :meth:`prepare` loads the module (ledgered) before the namespaces exist; install and
    reset take every voq qdisc of the node off before adding any (node-wide options
    change together: a voq root takes only its own options again)."""

    def holds(self, devs: Sequence[str], context: NodeContext | None) -> tuple[bool, ...]:
        return tuple(True for _ in devs)

    def restamps(self, devs: Sequence[str], context: NodeContext | None) -> tuple[bool, ...]:
        return tuple(False for _ in devs)

    def prepare(self, ledger: Any) -> None:
        if ledger is not None:
            load_module(ledger)

    def install(self, netns: str | None, devs: Sequence[str], options: Any, ledger: Any,
                context: NodeContext | None = None) -> None:
        if not isinstance(options, VoqOptions) or options.n_ports != len(devs):
            raise VoqError(f"the voq mechanism needs the VoqOptions of a node of {len(devs)} ports from its "
                           f"architecture's mechanism_options, got {options!r}")
        self.prepare(ledger)
        self.remove(netns, devs, context)
        for port, dev in enumerate(devs):
            install(dev, netns, options.qopt(port))

    def remove(self, netns: str | None, devs: Sequence[str], context: NodeContext | None = None) -> None:
        for dev in devs:
            remove(dev, netns)

    def reset(self, netns: str | None, devs: Sequence[str], options: Any, ledger: Any,
              context: NodeContext | None = None) -> None:
        self.install(netns, devs, options, ledger, context)

    def read(self, netns: str | None, devs: Sequence[str], context: NodeContext | None) -> dict[str, QdiscState]:
        """{device: its voq qdisc's :class:`QdiscState`} for every port (one dump)."""
        return read_ports(devs, netns)

    def port_counters(self, netns: str | None, devs: Sequence[str],
                      context: NodeContext | None) -> dict[str, dict[str, Any]]:
        """{device: :func:`port_row` of its qdisc}: the node's decisions are the qdiscs'
        (the egress program only counts ``held``)."""
        return {dev: port_row(state) for dev, state in self.read(netns, devs, context).items()}


#: voq: E5's input-buffered node (kernel/sch_voq.c, a module loaded from kernel/): per
#: input N virtual output queues sharing B, rr scheduling at release instants, decided
#: on the intended timeline M after each instant, released at the stamp (docs/ib-holding.md)
VOQ = VoqQdisc("voq", "voq qdisc module on every port: input buffers of B bytes with a virtual output queue per "
               "output, round-robin at the instants ports free, decided on the intended timeline a lookahead M "
               "late, released at the intended arrival at the next node", frozenset({Feature.MODULES}))

#: held in the node's input buffers until the scheduler serves them, released by voq
VOQ_HOLDING = Realisation(HOLDING, VOQ)
