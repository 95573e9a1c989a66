"""E5's XCP agent: every router's controller, every edge's probes and rate changes, and
the control channel between them, in one process on the intended timeline
(docs/xcp-edge.md, "(c) The control channel", "A probe's life", "(d) Timing and
lateness"; the channel is modelled here, "Revision").

Pure logic, no I/O: a :class:`DataPlane` gives the clock, the counters and the rate
changes (``controllers.xcp_io`` is the real one: BPF accumulators, ``xcppace`` qdiscs).

Units. Times are emulation ns of CLOCK_MONOTONIC (paper times x D); rates inside XCP's
formulas, in probes and in the records are **paper** bit/s; rates given to the pacer are
emulation bit/s (paper / D, rounded); byte counts are Ethernet frame bytes. d is the
control interval in paper s, d_e = d x D x 1e9 emulation ns (rounded), interval k =
[E + k d_e, E + (k+1) d_e) with E = ``epoch_ns``.

The loop (one step per interval k = 0, 1, ...):

1. wait until E + (k+1) d_e + M_x (M_x = ``margin_ns``: every packet dated in k has then
   been counted, docs/ib-holding.md's lookahead rule);
2. read every core node's accumulator slots (:class:`AccSlotView`, 4 per output, slot k & 3)
   and every ingress edge's pacer ring (:class:`PacerIntervalView` by interval);
3. decide every controlled output from interval k's counters with
   ``testbed.xcp.decide(C, B, Q, N)``: C its capacity (paper bit/s), B its frame bytes of
   k (u = 8 B / d), Q its persistent queue in bytes = qmin_ns / D x C / 8e9 (the
   smallest backlog an arrival found, converted from emulation ns at the output's paper
   rate; 0 with no arrival; for a core whose ``queue`` is ``voq``, an input-buffered
   node, qmin_ns and drops come from its voq qdiscs' rings, B and the packets from the
   BPF accumulators: the data plane merges them), N the probes this agent counted at it
   in k (at least 1);
   an edge uplink is decided from its pacer's ring (B: the bytes its buckets made
   eligible in k when the ring has them, ``offered_bytes``, else the bytes departing
   in k; Q from the smallest link backlog found by a departing head);
4. advance the event heap to E + (k+2) d_e, in two parts (to E + (k+1) d_e + d_e / 8,
   then the rest; step 5 after each, so the changes due first leave first): probes
   sent at E + j d_e by every active macroflow, lowered at each hop of their forward
   path by the decision of interval k(t) - 1 of that output (t the hop's intended time; interval -1: feedback 0, as
   ``xcp.LinkController`` before its first decision), counted into N of k(t), each
   control link a store-and-forward FIFO (``probe_bytes`` at ``control_rate_bps``
   paper, plus the data link's propagation, never lost), turned at the egress edge,
   returned over the reverse path; back at the ingress edge at t_ret the new rate
   R' = min(R_max, max(R_min, R + feedback)) is sent to the pacer at once as
   (class, R' / D, t_ret + Delta x D) and is in force in the model from that instant;
5. send each edge's rate changes of the part in one request.

A probe sent at E + j d_e carries u_i = 8 x (bytes the pacer released for the class in
interval j - 1) / d, and its granted R for the macroflow's first probe (its first
interval was partial; ``testbed/xcpsim.py`` does the same). A macroflow becomes active
when its pacer has released bytes for it in an interval j (its first probe at
E + (j+1) d_e), or from interval 0 with ``start_active``.

Exactness counters (docs/xcp-edge.md, "(d)"): ``acc_late`` a core slot of an interval
already decided changed after it was read (a packet counted later than M_x; for a voq
core also a change of its ring's own count of decisions, ``decided``: the qdisc decided
an arrival of that interval after the read, later than M_x - its lookahead M);
``acc_lost`` the slot of the interval to decide held a later interval (overwritten
before read); ``pacer_acc_late`` / ``pacer_acc_lost`` the same for the pacers' rings;
``late_rates`` rate changes handed to the data plane after real time had passed their
instant (the pacers count their own, :meth:`XcpAgent.summary` merges them);
``decision_lag`` real time when interval k's decisions are taken minus
E + (k+1) d_e + M_x; CPU time and the agent's late rate changes per interval step.
"""

from __future__ import annotations

import heapq
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, Protocol

from testbed import xcp, xcpprobe
from testbed.optical.xcpplan import KINDS

NS_PER_S = 1_000_000_000
#: the largest feedback a probe carries, either sign (bit/s)
RATE_MAX = xcpprobe.RATE_MAX
#: interval / qmin_ns value of an accumulator slot never used / without arrival
SLOT_NONE = 2**64 - 1
#: slots per output (core) and intervals per pacer ring
RING = 4
MAX_NODE_ID = 511          # OPTSW_MAX_NODES - 1
MAX_PORT = 63              # OPTSW_MAX_PORTS - 1
MAX_CLASS = 63             # the pacer's nclasses <= 64
#: slots found changed after they were read that xcp.json lists (the counters count all)
LATE_SLOTS_KEPT = 100
#: a step hands over the rate changes of probes back before E + (k+1) d_e + d_e / this
#: first, then the rest: the earliest are due soon after the step starts (the shortest
#: probe round trip + Delta after the interval's end, ~76 ms of emulation on NSFNET at
#: D = 20), the others at least d_e / this + Delta after it
EARLY_FLUSH_DIVISOR = 8
#: the decision every output answers with before its first one (Phi = h = 0: feedback 0)
NO_DECISION = xcp.ControlDecision(0.0, 0.0, 1, 0.0)


class XcpConfigError(ValueError):
    """A configuration value out of range; names the key, the value and what is accepted."""

    def __init__(self, key: str, value: object, accepted: str) -> None:
        self.key, self.value, self.accepted = key, value, accepted
        super().__init__(f"xcp agent config {key}={value!r}: accepted {accepted}")


def _need(ok: bool, key: str, value: object, accepted: str) -> None:
    if not ok:
        raise XcpConfigError(key, value, accepted)


def _is_num(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_port(key: str, v: object) -> None:
    _need(_is_int(v) and 0 <= v <= MAX_PORT, key, v, f"an integer 0..{MAX_PORT}")  # type: ignore[operator]


def _check_name(key: str, v: object) -> None:
    _need(isinstance(v, str) and v != "", key, v, "a non-empty string")


def _check_rate(key: str, v: object) -> None:
    _need(_is_num(v) and v > 0, key, v, "a finite number > 0 (paper bit/s)")  # type: ignore[operator]


def _check_prop(key: str, v: object) -> None:
    _need(_is_num(v) and v >= 0, key, v, "a finite number >= 0 (paper s)")  # type: ignore[operator]


def _check_node(key: str, name: object, node_id: object, names: set[str], ids: set[int]) -> None:
    """A node's name and fabric id, each not given before (added to ``names``, ``ids``)."""
    _check_name(f"{key}.name", name)
    _need(name not in names, f"{key}.name", name, "a node name not given before")
    _need(_is_int(node_id) and 0 <= node_id <= MAX_NODE_ID and node_id not in ids,  # type: ignore[operator]
          f"{key}.node_id", node_id, f"an integer 0..{MAX_NODE_ID} not given before")
    names.add(name)  # type: ignore[arg-type]
    ids.add(node_id)  # type: ignore[arg-type]


# -- configuration ------------------------------------------------------------------------------
@dataclass(frozen=True)
class OutputConfig:
    """A controlled output of a core node: ``port``, ``capacity_bps`` (paper bit/s),
    ``peer`` (the node at its far end), ``prop_s`` (paper s), ``dev`` its device ('':
    not needed; a voq core's outputs need theirs)."""

    port: int
    capacity_bps: float
    peer: str
    prop_s: float
    dev: str = ""

    def check(self, key: str) -> None:
        _check_port(f"{key}.port", self.port)
        _check_rate(f"{key}.capacity_bps", self.capacity_bps)
        _check_name(f"{key}.peer", self.peer)
        _check_prop(f"{key}.prop_s", self.prop_s)
        _need(isinstance(self.dev, str), f"{key}.dev", self.dev, "a device name ('' = none)")


#: where a core's persistent-queue samples come from: the BPF accumulators (EDT
#: architectures) or its voq qdiscs' XCP rings (ib: docs/xcp-edge.md, "IB nodes")
QUEUE_SOURCES = ("bpf", "voq")


@dataclass(frozen=True)
class CoreConfig:
    """A core node: ``name``, fabric ``node_id`` (its key in optsw_xcp_acc), its
    controlled ``outputs``, ``queue`` (QUEUE_SOURCES: where qmin_ns comes from) and, for
    ``voq``, ``netns`` the namespace of its qdiscs ('' = this one)."""

    name: str
    node_id: int
    outputs: tuple[OutputConfig, ...]
    queue: str = "bpf"
    netns: str = ""


@dataclass(frozen=True)
class EdgeConfig:
    """An ingress edge: ``name``, ``node_id``, ``netns`` and ``pacer_dev`` (where its
    xcppace qdisc is), its uplink (``uplink_port``, ``capacity_bps`` paper bit/s,
    ``peer``, ``prop_s`` paper s)."""

    name: str
    node_id: int
    netns: str
    pacer_dev: str
    uplink_port: int
    capacity_bps: float
    peer: str
    prop_s: float


@dataclass(frozen=True)
class HopConfig:
    """One output a macroflow's data cross: (``node``, ``port``); the first is its
    ingress edge's uplink, the others controlled outputs of core nodes."""

    node: str
    port: int


@dataclass(frozen=True)
class ReverseHopConfig:
    """One control link of a probe's way back: from ``node`` through ``port`` to
    ``peer``, ``prop_s`` paper s (the data link's propagation)."""

    node: str
    port: int
    peer: str
    prop_s: float


@dataclass(frozen=True)
class MacroflowConfig:
    """Macroflow ``name``: its pacer class ``cls`` at ingress edge ``src``, egress edge
    ``dst``, ``kind`` data | ack, forward ``path`` (from src's uplink to the output
    towards dst), ``reverse`` (from dst back to src), ``initial_rate_bps`` (paper, the
    rate its pacer class was installed with), bounds (None: R_min = one packet of
    ``packet_bytes`` per interval, R_max = src's uplink capacity), ``start_active``
    (probes from interval 0 instead of from its first released bytes)."""

    name: str
    cls: int
    src: str
    dst: str
    kind: str
    path: tuple[HopConfig, ...]
    reverse: tuple[ReverseHopConfig, ...]
    initial_rate_bps: float
    min_rate_bps: float | None = None
    max_rate_bps: float | None = None
    start_active: bool = False


@dataclass(frozen=True)
class AgentConfig:
    """Everything the agent needs (the module docstring gives the units). ``tdf`` = D,
    ``interval_s`` = d (paper s; XCP's ``xcp.interval_s`` is set to it),
    ``rate_delay_s`` = Delta (paper s), ``margin_ns`` = M_x (emulation ns),
    ``end_ns`` the CLOCK_MONOTONIC instant after which no interval is decided (None:
    until stopped), ``pin_dir`` the optswitch BPF pin directory (used by the real data
    plane only). :meth:`check` (run by the constructor) raises XcpConfigError naming
    the first key out of range."""

    epoch_ns: int
    tdf: float
    cores: tuple[CoreConfig, ...]
    edges: tuple[EdgeConfig, ...]
    macroflows: tuple[MacroflowConfig, ...]
    interval_s: float = 0.05
    xcp: xcp.XcpParameters = field(default_factory=xcp.XcpParameters)
    rate_delay_s: float = 0.0005
    margin_ns: int = 1_000_000
    packet_bytes: int = 1500
    probe_bytes: int = xcpprobe.FRAME_BYTES
    control_rate_bps: float = 100e6
    end_ns: int | None = None
    pin_dir: str | None = None

    def __post_init__(self) -> None:
        self.check()

    # derived --------------------------------------------------------------------------------
    @property
    def interval_ns(self) -> int:
        """d_e, emulation ns."""
        return round(self.interval_s * self.tdf * NS_PER_S)

    def params(self) -> xcp.XcpParameters:
        """XCP's parameters with interval_s = d."""
        return replace(self.xcp, interval_s=self.interval_s)

    def edge(self, name: str) -> EdgeConfig | None:
        return next((e for e in self.edges if e.name == name), None)

    def core(self, name: str) -> CoreConfig | None:
        return next((c for c in self.cores if c.name == name), None)

    def min_rate(self, mf: MacroflowConfig) -> float:
        """R_min of ``mf``, paper bit/s."""
        return mf.min_rate_bps if mf.min_rate_bps is not None else 8 * self.packet_bytes / self.interval_s

    def max_rate(self, mf: MacroflowConfig) -> float:
        """R_max of ``mf``, paper bit/s."""
        if mf.max_rate_bps is not None:
            return mf.max_rate_bps
        edge = self.edge(mf.src)
        assert edge is not None
        return edge.capacity_bps

    # validation -----------------------------------------------------------------------------
    def check(self) -> None:
        """Raise XcpConfigError for the first value out of range (see the field docs)."""
        _need(_is_int(self.epoch_ns) and self.epoch_ns >= 0, "epoch_ns", self.epoch_ns, "an integer >= 0 (ns)")
        _need(_is_num(self.tdf) and self.tdf > 0, "tdf", self.tdf, "a finite number > 0 (D)")
        _need(_is_num(self.interval_s) and self.interval_s > 0, "interval_s", self.interval_s,
              "a finite number > 0 (paper s)")
        _need(self.interval_ns >= 1, "interval_s", self.interval_s, "d x D >= 1 ns")
        _need(_is_num(self.rate_delay_s) and 0 <= self.rate_delay_s < self.interval_s, "rate_delay_s",
              self.rate_delay_s, f"0 <= rate_delay_s < interval_s = {self.interval_s} (paper s)")
        _need(_is_int(self.margin_ns) and 0 <= self.margin_ns < self.interval_ns, "margin_ns", self.margin_ns,
              f"an integer 0 <= margin_ns < d_e = {self.interval_ns} (emulation ns)")
        _need(_is_int(self.packet_bytes) and self.packet_bytes >= 1, "packet_bytes", self.packet_bytes,
              "an integer >= 1 (bytes)")
        _need(_is_int(self.probe_bytes) and self.probe_bytes >= 1, "probe_bytes", self.probe_bytes,
              "an integer >= 1 (bytes)")
        _check_rate("control_rate_bps", self.control_rate_bps)
        _need(self.end_ns is None or (_is_int(self.end_ns) and self.end_ns > self.epoch_ns), "end_ns",
              self.end_ns, f"null or an integer > epoch_ns = {self.epoch_ns}")
        _need(self.pin_dir is None or isinstance(self.pin_dir, str), "pin_dir", self.pin_dir, "null or a path")
        names: set[str] = set()
        ids: set[int] = set()
        ports_of: dict[str, dict[int, tuple[str, float]]] = {}
        for i, c in enumerate(self.cores):
            key = f"cores[{i}]"
            _check_node(key, c.name, c.node_id, names, ids)
            _need(c.queue in QUEUE_SOURCES, f"{key}.queue", c.queue, " | ".join(QUEUE_SOURCES))
            _need(isinstance(c.netns, str), f"{key}.netns", c.netns, "a namespace name ('' = this one)")
            ports_of[c.name] = {}
            for j, o in enumerate(c.outputs):
                o.check(f"{key}.outputs[{j}]")
                _need(c.queue != "voq" or o.dev != "", f"{key}.outputs[{j}].dev", o.dev,
                      "the output's device (its voq qdisc is read)")
                _need(o.port not in ports_of[c.name], f"{key}.outputs[{j}].port", o.port, "a port not given before")
                ports_of[c.name][o.port] = (o.peer, o.prop_s)
        for i, e in enumerate(self.edges):
            key = f"edges[{i}]"
            _check_node(key, e.name, e.node_id, names, ids)
            _need(isinstance(e.netns, str), f"{key}.netns", e.netns, "a namespace name ('' = this one)")
            _check_name(f"{key}.pacer_dev", e.pacer_dev)
            _check_port(f"{key}.uplink_port", e.uplink_port)
            _check_rate(f"{key}.capacity_bps", e.capacity_bps)
            _check_name(f"{key}.peer", e.peer)
            _check_prop(f"{key}.prop_s", e.prop_s)
            ports_of[e.name] = {e.uplink_port: (e.peer, e.prop_s)}
        _need(len(self.macroflows) > 0, "macroflows", [], "at least one macroflow")
        mf_names: set[str] = set()
        classes: set[tuple[str, int]] = set()
        for i, m in enumerate(self.macroflows):
            key = f"macroflows[{i}]"
            _check_name(f"{key}.name", m.name)
            _need(m.name not in mf_names, f"{key}.name", m.name, "a macroflow name not given before")
            mf_names.add(m.name)
            src = self.edge(m.src)
            _need(src is not None, f"{key}.src", m.src, f"an edge of 'edges' ({[e.name for e in self.edges]})")
            assert src is not None
            _check_name(f"{key}.dst", m.dst)
            _need(m.dst != m.src, f"{key}.dst", m.dst, "an edge other than src")
            _need(m.kind in KINDS, f"{key}.kind", m.kind, " | ".join(KINDS))
            _need(_is_int(m.cls) and 0 <= m.cls <= MAX_CLASS and (m.src, m.cls) not in classes, f"{key}.cls", m.cls,
                  f"an integer 0..{MAX_CLASS} not used by another macroflow of {m.src}")
            classes.add((m.src, m.cls))
            _need(len(m.path) >= 1, f"{key}.path", [], "at least the ingress edge's uplink")
            first = m.path[0]
            _need((first.node, first.port) == (src.name, src.uplink_port), f"{key}.path[0]",
                  [first.node, first.port], f"the uplink of {src.name}: [{src.name!r}, {src.uplink_port}]")
            at = src.name
            for j, h in enumerate(m.path):
                hk = f"{key}.path[{j}]"
                _need(h.node == at, f"{hk}.node", h.node, f"{at!r} (the far end of the previous hop)")
                _need(h.node in ports_of and h.port in ports_of[h.node], f"{hk}.port", h.port,
                      f"a controlled output of {h.node} ({sorted(ports_of.get(h.node, {}))})")
                at = ports_of[h.node][h.port][0]
            _need(at == m.dst, f"{key}.path", [[h.node, h.port] for h in m.path],
                  f"a path ending at dst {m.dst!r} (it ends at {at!r})")
            _need(len(m.reverse) >= 1, f"{key}.reverse", [], "at least one hop")
            at = m.dst
            for j, r in enumerate(m.reverse):
                hk = f"{key}.reverse[{j}]"
                _need(r.node == at, f"{hk}.node", r.node, f"{at!r} (the far end of the previous hop)")
                _check_port(f"{hk}.port", r.port)
                _check_name(f"{hk}.peer", r.peer)
                _check_prop(f"{hk}.prop_s", r.prop_s)
                known = ports_of.get(r.node, {}).get(r.port)
                _need(known is None or (known[0] == r.peer and math.isclose(known[1], r.prop_s, rel_tol=1e-9,
                                                                            abs_tol=1e-12)),
                      f"{hk}", [r.node, r.port, r.peer, r.prop_s], f"the output as configured: peer, prop_s = {known}")
                at = r.peer
            _need(at == m.src, f"{key}.reverse", [r.node for r in m.reverse], f"a path ending at src {m.src!r}")
            for name in ("min_rate_bps", "max_rate_bps"):
                v = getattr(m, name)
                _need(v is None or (_is_num(v) and v > 0), f"{key}.{name}", v, "null or a finite number > 0")
            lo, hi = self.min_rate(m), self.max_rate(m)
            _need(lo <= hi, f"{key}.max_rate_bps", m.max_rate_bps, f">= R_min = {lo}")
            _need(_is_num(m.initial_rate_bps) and lo <= m.initial_rate_bps <= hi, f"{key}.initial_rate_bps",
                  m.initial_rate_bps, f"{lo} .. {hi} (R_min .. R_max, paper bit/s)")
            _need(isinstance(m.start_active, bool), f"{key}.start_active", m.start_active, "true | false")

    # JSON -----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The JSON form (:func:`config_from_dict` reads it back)."""
        p = self.xcp
        return {
            "version": CONFIG_VERSION, "epoch_ns": self.epoch_ns, "tdf": self.tdf, "interval_s": self.interval_s,
            "xcp": {"alpha": p.alpha, "beta": p.beta, "gamma": p.gamma, "target_utilisation": p.target_utilisation,
                    "outside_stability_bound": p.outside_stability_bound},
            "rate_delay_s": self.rate_delay_s, "margin_ns": self.margin_ns, "packet_bytes": self.packet_bytes,
            "probe_bytes": self.probe_bytes, "control_rate_bps": self.control_rate_bps, "end_ns": self.end_ns,
            "pin_dir": self.pin_dir,
            "cores": [{"name": c.name, "node_id": c.node_id, "queue": c.queue, "netns": c.netns,
                       "outputs": [{"port": o.port, "capacity_bps": o.capacity_bps, "peer": o.peer, "prop_s": o.prop_s,
                                    "dev": o.dev} for o in c.outputs]} for c in self.cores],
            "edges": [{"name": e.name, "node_id": e.node_id, "netns": e.netns, "pacer_dev": e.pacer_dev,
                       "uplink_port": e.uplink_port, "capacity_bps": e.capacity_bps, "peer": e.peer,
                       "prop_s": e.prop_s} for e in self.edges],
            "macroflows": [{"name": m.name, "cls": m.cls, "src": m.src, "dst": m.dst, "kind": m.kind,
                            "path": [{"node": h.node, "port": h.port} for h in m.path],
                            "reverse": [{"node": r.node, "port": r.port, "peer": r.peer, "prop_s": r.prop_s}
                                        for r in m.reverse],
                            "initial_rate_bps": m.initial_rate_bps, "min_rate_bps": m.min_rate_bps,
                            "max_rate_bps": m.max_rate_bps, "start_active": m.start_active}
                           for m in self.macroflows],
        }

    def dumps(self) -> str:
        return json.dumps(self.to_dict(), indent=1)


CONFIG_VERSION = 1


def _take(d: Mapping[str, Any], key: str, where: str, default: Any = ...) -> Any:
    if key in d:
        return d[key]
    if default is ...:
        raise XcpConfigError(f"{where}{key}", None, "a value (missing)")
    return default


def _obj(v: Any, key: str, fields: Sequence[str]) -> Mapping[str, Any]:
    _need(isinstance(v, Mapping), key, v, "an object")
    extra = sorted(set(v) - set(fields))
    _need(not extra, f"{key}.{extra[0]}" if extra else key, v.get(extra[0]) if extra else None,
          f"one of the known keys {sorted(fields)}")
    return v


def _list(v: Any, key: str) -> list[Any]:
    _need(isinstance(v, list), key, v, "a list")
    return v


def config_from_dict(d: Any) -> AgentConfig:
    """The :class:`AgentConfig` of its JSON form (:meth:`AgentConfig.to_dict`). Raises
    XcpConfigError for a missing, unknown or out-of-range key (XCP parameters
    included: ``xcp.<name>``)."""
    top = ("version", "epoch_ns", "tdf", "interval_s", "xcp", "rate_delay_s", "margin_ns", "packet_bytes",
           "probe_bytes", "control_rate_bps", "end_ns", "pin_dir", "cores", "edges", "macroflows")
    d = _obj(d, "(config)", top)
    version = _take(d, "version", "")
    _need(version == CONFIG_VERSION, "version", version, f"{CONFIG_VERSION}")
    px = _obj(_take(d, "xcp", "", {}), "xcp", ("alpha", "beta", "gamma", "target_utilisation",
                                               "outside_stability_bound"))
    try:
        params = xcp.XcpParameters(**px)
    except xcp.XcpParameterError as exc:
        raise XcpConfigError(f"xcp.{exc.parameter}", exc.value, exc.accepted) from None
    except TypeError as exc:
        raise XcpConfigError("xcp", dict(px), f"XCP parameters ({exc})") from None
    cores = []
    for i, c in enumerate(_list(_take(d, "cores", ""), "cores")):
        c = _obj(c, f"cores[{i}]", ("name", "node_id", "outputs", "queue", "netns"))
        outs = []
        for j, o in enumerate(_list(_take(c, "outputs", f"cores[{i}]."), f"cores[{i}].outputs")):
            o = _obj(o, f"cores[{i}].outputs[{j}]", ("port", "capacity_bps", "peer", "prop_s", "dev"))
            w = f"cores[{i}].outputs[{j}]."
            outs.append(OutputConfig(_take(o, "port", w), _take(o, "capacity_bps", w), _take(o, "peer", w),
                                     _take(o, "prop_s", w), _take(o, "dev", w, "")))
        w = f"cores[{i}]."
        cores.append(CoreConfig(_take(c, "name", w), _take(c, "node_id", w), tuple(outs), _take(c, "queue", w, "bpf"),
                                _take(c, "netns", w, "")))
    edges = []
    efields = ("name", "node_id", "netns", "pacer_dev", "uplink_port", "capacity_bps", "peer", "prop_s")
    for i, e in enumerate(_list(_take(d, "edges", ""), "edges")):
        e = _obj(e, f"edges[{i}]", efields)
        edges.append(EdgeConfig(*(_take(e, k, f"edges[{i}].") for k in efields)))
    mfs = []
    mfields = ("name", "cls", "src", "dst", "kind", "path", "reverse", "initial_rate_bps", "min_rate_bps",
               "max_rate_bps", "start_active")
    for i, m in enumerate(_list(_take(d, "macroflows", ""), "macroflows")):
        w = f"macroflows[{i}]."
        m = _obj(m, f"macroflows[{i}]", mfields)
        path = []
        for j, h in enumerate(_list(_take(m, "path", w), f"{w}path")):
            h = _obj(h, f"{w}path[{j}]", ("node", "port"))
            path.append(HopConfig(_take(h, "node", f"{w}path[{j}]."), _take(h, "port", f"{w}path[{j}].")))
        rev = []
        for j, h in enumerate(_list(_take(m, "reverse", w), f"{w}reverse")):
            h = _obj(h, f"{w}reverse[{j}]", ("node", "port", "peer", "prop_s"))
            rev.append(ReverseHopConfig(*(_take(h, k, f"{w}reverse[{j}].") for k in ("node", "port", "peer", "prop_s"))))
        mfs.append(MacroflowConfig(_take(m, "name", w), _take(m, "cls", w), _take(m, "src", w), _take(m, "dst", w),
                                   _take(m, "kind", w, "data"), tuple(path), tuple(rev),
                                   _take(m, "initial_rate_bps", w), _take(m, "min_rate_bps", w, None),
                                   _take(m, "max_rate_bps", w, None), _take(m, "start_active", w, False)))
    kw = {k: d[k] for k in ("interval_s", "rate_delay_s", "margin_ns", "packet_bytes", "probe_bytes",
                            "control_rate_bps", "end_ns", "pin_dir") if k in d}
    return AgentConfig(_take(d, "epoch_ns", ""), _take(d, "tdf", ""), tuple(cores), tuple(edges), tuple(mfs),
                       xcp=params, **kw)


def config_loads(text: str) -> AgentConfig:
    """:func:`config_from_dict` of JSON ``text``. Raises XcpConfigError (also for text
    that is not JSON)."""
    try:
        d = json.loads(text)
    except json.JSONDecodeError as exc:
        raise XcpConfigError("(config)", text[:40], f"JSON ({exc})") from None
    return config_from_dict(d)


def config_from_plan(plan: Any, *, epoch_ns: int, tdf: float, pacer_devs: Mapping[str, str] | None = None,
                     initial_rate_bps: Mapping[str, float] | None = None, **kw: Any) -> AgentConfig:
    """The configuration of a ``testbed.optical.xcpplan.XcpPlan``: its core outputs,
    edges (pacer on the uplink device unless ``pacer_devs`` {edge: dev} says otherwise)
    and macroflows, initial rate TU C_uplink / (other edges) unless
    ``initial_rate_bps`` {macroflow name: paper bit/s} gives it (docs/xcp-edge.md,
    "Macroflows, ACKs, bounds"); the plan's voq cores read their queue from their voq
    qdiscs (``queue = "voq"``, their namespace, each output's device); ``kw`` the other
    AgentConfig fields. Raises XcpConfigError as the constructor."""
    params = kw.get("xcp", xcp.XcpParameters())
    by_node: dict[str, list[OutputConfig]] = {}
    for (node, port), h in sorted(plan.outputs.items()):
        by_node.setdefault(node, []).append(OutputConfig(port, h.capacity_bps, h.peer, h.prop_s, h.dev))
    cores = tuple(CoreConfig(n, plan.node_ids[n], tuple(outs),
                             *(("voq", plan.voq_cores[n]) if n in plan.voq_cores else ()))
                  for n, outs in sorted(by_node.items()))
    devs = dict(pacer_devs or {})
    edges = tuple(EdgeConfig(e.name, e.node_id, e.netns, devs.get(e.name, e.uplink_dev), e.uplink_port,
                             e.capacity_bps, e.uplink_peer, e.prop_s) for e in plan.edges)
    others = len(plan.edges) - 1
    mfs = []
    for m in plan.macroflows:
        cap = plan.edge(m.src).capacity_bps
        r0 = (initial_rate_bps or {}).get(m.name, params.target_utilisation * cap / others)
        mfs.append(MacroflowConfig(m.name, m.cls, m.src, m.dst, KINDS[m.kind],
                                   tuple(HopConfig(h.node, h.port) for h in m.path),
                                   tuple(ReverseHopConfig(h.node, h.port, h.peer, h.prop_s) for h in m.reverse),
                                   r0))
    return AgentConfig(epoch_ns, tdf, cores, edges, tuple(mfs), **kw)


# -- what the data plane gives ------------------------------------------------------------------
class AccSlotView(Protocol):
    """One accumulator slot of a core output (ebpf/optswitch.h ``struct optsw_xcp_slot``;
    ``testbed.optical.layout.AccSlot``): ``interval`` k (None or SLOT_NONE: never used),
    frame ``bytes`` and ``packets`` decided for the output with intended arrival in k
    (dropped included), ``drops``, ``qmin_ns`` the smallest backlog an arrival found
    (emulation ns; None or SLOT_NONE: none). A voq core's slot (``controllers.xcp_io``
    merges the BPF's with its qdisc's ring) may also have ``decided``: the arrivals its
    qdisc decided in k, compared with the read value for lateness like the others."""

    interval: int | None
    bytes: int
    packets: int
    drops: int
    qmin_ns: int | None


class PacerIntervalView(Protocol):
    """One interval of an xcppace ring (``testbed.optical.xcppace.PacerInterval``):
    frame bytes and packets released onto the uplink with departure in the interval,
    the smallest link backlog a departing head found (emulation ns, None: none), and
    the same bytes / packets per class. When it also has ``offered_bytes`` /
    ``offered_packets`` (what the buckets made eligible in the interval: the link's
    input, as xcpsim counts a link's input) the uplink is decided from those."""

    bytes: int
    packets: int
    qmin_ns: int | None
    class_bytes: Sequence[int]
    class_packets: Sequence[int]


class RateChange(NamedTuple):
    """A pacer rate change (``testbed.optical.xcppace.RateChange``): class, rate in
    emulation bit/s, the instant it takes effect (emulation ns)."""

    cls: int
    rate_bps: int
    effective_ns: int


class DataPlane(Protocol):
    """What the agent reads and writes (xcp-common.md (C)); names are the config's."""

    def now_ns(self) -> int:
        """CLOCK_MONOTONIC, emulation ns."""

    def sleep_until(self, t_ns: int) -> None:
        """Return once now_ns() >= t_ns (or earlier when the agent is being stopped)."""

    def read_core(self, node: str) -> Mapping[int, Sequence[AccSlotView]]:
        """{port: its RING slots, slot index = interval & (RING - 1)} of core ``node``
        (at least its controlled ports)."""

    def read_pacer(self, edge: str) -> Mapping[int, PacerIntervalView]:
        """{interval: counters} of the intervals in ``edge``'s pacer ring."""

    def set_rates(self, edge: str, changes: list[RateChange]) -> None:
        """Hand ``changes`` to ``edge``'s pacer (one request)."""


# -- the loop -------------------------------------------------------------------------------------
RATE_COLUMNS = ("interval", "macroflow", "cls", "src", "dst", "kind", "rate_bps", "measured_bps", "feedback_bps",
                "limiter_node", "limiter_port", "rate_after_bps", "send_ns", "return_ns", "effective_ns")
"""``xcp_rates.csv``: one row per probe = per interval per active macroflow. interval k
(the probe sent at E + k d_e), rate_bps R granted at E + k d_e and measured_bps u_i
(paper bit/s), feedback_bps returned (paper bit/s; empty: still in flight at the end),
limiter node name and port ('' none: no router lowered it), rate_after_bps R' (paper),
send / return / effective instants (emulation ns)."""

LINK_COLUMNS = ("interval", "node", "port", "capacity_bps", "bytes", "packets", "drops", "qmin_ns",
                "queue_bytes", "probes", "input_bps", "phi_bps", "shuffled_bps")
"""``xcp_links.csv``: one row per interval per controlled output (edge uplinks
included). bytes B (frame bytes), packets, drops, qmin_ns (emulation ns, '' none),
queue_bytes Q, probes N counted, input_bps u = 8 B / d, phi_bps Phi, shuffled_bps h
(paper bit/s)."""

_FWD, _SEND, _APPLY = 0, 1, 2      # same-instant order: probe hops, then sends, then rates in force


class _Out:
    """A controlled output: capacity (paper), decisions by interval, probes counted by
    interval, last read counters by interval (exactness checks)."""

    __slots__ = ("node", "port", "capacity_bps", "decisions", "probes")

    def __init__(self, node: str, port: int, capacity_bps: float) -> None:
        self.node, self.port, self.capacity_bps = node, port, capacity_bps
        self.decisions: dict[int, xcp.ControlDecision] = {}
        self.probes: dict[int, int] = {}


class _Fifo:
    """A control link: store-and-forward FIFO, emulation ns."""

    __slots__ = ("prop_ns", "free")

    def __init__(self, prop_ns: int) -> None:
        self.prop_ns, self.free = prop_ns, 0


class _Mf:
    __slots__ = ("cfg", "hops", "fifos", "back", "rate", "granted", "lo", "hi", "active_from", "probes_sent")

    def __init__(self, cfg: MacroflowConfig, lo: float, hi: float) -> None:
        self.cfg, self.lo, self.hi = cfg, lo, hi
        self.rate = self.granted = float(cfg.initial_rate_bps)
        self.active_from: int | None = 0 if cfg.start_active else None
        self.probes_sent = 0
        self.hops: list[_Out] = []
        self.fifos: list[_Fifo] = []
        self.back: list[_Fifo] = []


class _Probe:
    __slots__ = ("mf", "seq", "rate", "measured", "feedback", "limiter", "sent")

    def __init__(self, mf: _Mf, seq: int, rate: float, measured: int, feedback: int, sent: int) -> None:
        self.mf, self.seq, self.rate, self.measured, self.feedback, self.sent = mf, seq, rate, measured, feedback, sent
        self.limiter: tuple[str, int] | None = None


def _none(v: int | None) -> int | None:
    """None for the kernel's "none" (SLOT_NONE) or None, else v."""
    return None if v is None or v == SLOT_NONE else v


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank q-quantile (0 < q <= 1) of ``values``; None if empty."""
    if not values:
        return None
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)]


class XcpAgent:
    """See the module docstring. ``cpu_ns``: the CPU clock the per-interval CPU time is
    read from (ns)."""

    def __init__(self, cfg: AgentConfig, dp: DataPlane, *, cpu_ns: Callable[[], int] = time.thread_time_ns) -> None:
        self.cfg, self.dp, self.cpu_ns = cfg, dp, cpu_ns
        self.params = cfg.params()
        self.d_e = cfg.interval_ns
        self.E = cfg.epoch_ns
        D = cfg.tdf
        self.tau_c = round(8 * cfg.probe_bytes * D * NS_PER_S / cfg.control_rate_bps)
        self.delta_e = round(cfg.rate_delay_s * D * NS_PER_S)
        self.outputs: dict[tuple[str, int], _Out] = {}
        self.fifos: dict[tuple[str, int], _Fifo] = {}
        for c in cfg.cores:
            for o in c.outputs:
                self.outputs[(c.name, o.port)] = _Out(c.name, o.port, o.capacity_bps)
                self.fifos[(c.name, o.port)] = _Fifo(round(o.prop_s * D * NS_PER_S))
        for e in cfg.edges:
            self.outputs[(e.name, e.uplink_port)] = _Out(e.name, e.uplink_port, e.capacity_bps)
            self.fifos[(e.name, e.uplink_port)] = _Fifo(round(e.prop_s * D * NS_PER_S))
        self.mfs: list[_Mf] = []
        for m in cfg.macroflows:
            mf = _Mf(m, cfg.min_rate(m), cfg.max_rate(m))
            mf.hops = [self.outputs[(h.node, h.port)] for h in m.path]
            mf.fifos = [self.fifos[(h.node, h.port)] for h in m.path]
            for r in m.reverse:
                mf.back.append(self.fifos.setdefault((r.node, r.port), _Fifo(round(r.prop_s * D * NS_PER_S))))
            self.mfs.append(mf)
        self.edge_mfs: dict[str, list[_Mf]] = {}
        for mf in self.mfs:
            self.edge_mfs.setdefault(mf.cfg.src, []).append(mf)
        self.core_ports = {c.name: [o.port for o in c.outputs] for c in cfg.cores}
        # exactness: counters as read, per (node, port) / edge, by interval
        self._seen_core: dict[tuple[str, int], dict[int, tuple[int, int, int, int | None, int | None]]] = {
            k: {} for k in self.outputs}
        self._seen_pacer: dict[str, dict[int, tuple[int, int, tuple[int, ...]]]] = {e.name: {} for e in cfg.edges}
        self._class_bytes: dict[str, dict[int, Sequence[int]]] = {e.name: {} for e in cfg.edges}
        self.counters = {"acc_late": 0, "acc_lost": 0, "pacer_acc_late": 0, "pacer_acc_lost": 0, "late_rates": 0,
                         "probes_sent": 0, "probes_returned": 0, "rate_changes": 0}
        self.max_rate_late_ns = 0
        self.late_slots: list[dict[str, Any]] = []
        self.rate_rows: list[dict[str, Any]] = []
        self.link_rows: list[dict[str, Any]] = []
        self.steps: list[dict[str, Any]] = []
        self.activated: dict[str, int] = {m.cfg.name: 0 for m in self.mfs if m.active_from is not None}
        self._heap: list[tuple[int, int, int, int, Any]] = []
        self._seq = 0
        self._pending: dict[str, list[RateChange]] = {}
        self._inflight: dict[int, _Probe] = {}
        self.next_interval = 0          # the next interval to decide
        self.horizon = self.E           # every event before it has been processed
        self._push(self.E, _SEND, None, 0)
        self._started = False

    # -- timeline ---------------------------------------------------------------------------
    def interval_of(self, t_ns: int) -> int:
        """k with t in [E + k d_e, E + (k+1) d_e)."""
        return (t_ns - self.E) // self.d_e

    def deadline(self, k: int | None = None) -> int:
        """When interval k (default the next to decide) is read: E + (k+1) d_e + M_x."""
        k = self.next_interval if k is None else k
        return self.E + (k + 1) * self.d_e + self.cfg.margin_ns

    def _push(self, t: int, order: int, obj: Any, idx: int) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, order, self._seq, idx, obj))

    # -- run ------------------------------------------------------------------------------------
    def start(self) -> None:
        """Process interval 0 (every output answers with feedback 0 before its first
        decision) and send its rate changes. Called by :meth:`run`; call it before
        :meth:`step` when stepping by hand."""
        if not self._started:
            self._started = True
            self._advance(self.E + self.d_e)
            self._flush()

    def run(self, stop: Callable[[], bool] = lambda: False) -> None:
        """Step interval by interval until ``stop()`` is true after a wait, or the next
        deadline would pass ``end_ns``."""
        self.start()
        while True:
            t = self.deadline()
            if self.cfg.end_ns is not None and t > self.cfg.end_ns:
                return
            self.dp.sleep_until(t)
            if stop():
                return
            self.step()

    def step(self) -> int:
        """Decide the next interval k now (the caller has waited for :meth:`deadline`),
        advance the heap to E + (k+2) d_e and send the rate changes; returns k."""
        self.start()
        cpu0 = self.cpu_ns()
        k = self.next_interval
        target = self.deadline(k)
        self._read_and_decide(k)
        t_dec = self.dp.now_ns()
        self.next_interval = k + 1
        sent0 = self.counters["probes_sent"]
        late0 = self.counters["late_rates"]
        boundary = self.E + (k + 1) * self.d_e
        self._advance(boundary + self.d_e // EARLY_FLUSH_DIVISOR)
        changes = self._flush()
        self._advance(boundary + self.d_e)
        changes += self._flush()
        self.steps.append({"interval": k, "lag_ns": t_dec - target, "cpu_ns": self.cpu_ns() - cpu0,
                           "probes_sent": self.counters["probes_sent"] - sent0, "rate_changes": changes,
                           "late_rates": self.counters["late_rates"] - late0})
        return k

    # -- reading and deciding ---------------------------------------------------------------------
    def _late_slot(self, kind: str, where: str, interval: int, read_at: int, before: tuple, after: tuple) -> None:
        """Record (the first LATE_SLOTS_KEPT) slot that changed after it was read: which
        ring, interval, the interval being read when the change was seen, and the values
        before and after (for xcp.json's ``late_slots``)."""
        if len(self.late_slots) < LATE_SLOTS_KEPT:
            self.late_slots.append({"kind": kind, "where": where, "interval": interval, "seen_at_interval": read_at,
                                    "before": list(before), "after": list(after),
                                    "real_ns": self.dp.now_ns()})

    def _read_and_decide(self, k: int) -> None:
        d = self.params.interval_s
        D = self.cfg.tdf
        for c in self.cfg.cores:
            ports = self.dp.read_core(c.name)
            for port in self.core_ports[c.name]:
                slots = ports[port]
                seen = self._seen_core[(c.name, port)]
                for s in slots:
                    j = _none(s.interval)
                    if j is not None and k + 1 - RING < j < k and j in seen:
                        now = (s.bytes, s.packets, s.drops, _none(s.qmin_ns), getattr(s, "decided", None))
                        if now != seen[j]:
                            self.counters["acc_late"] += 1
                            self._late_slot("core", f"{c.name}:{port}", j, k, seen[j], now)
                            seen[j] = now
                s = slots[k % RING]
                j = _none(s.interval)
                if j == k:
                    vals = (s.bytes, s.packets, s.drops, _none(s.qmin_ns), getattr(s, "decided", None))
                else:
                    if j is not None and j > k:
                        self.counters["acc_lost"] += 1
                    vals = (0, 0, 0, None, None)
                seen[k] = vals
                seen.pop(k - RING + 1, None)
                out = self.outputs[(c.name, port)]
                qmin = vals[3]
                q = 0.0 if qmin is None else qmin / D * out.capacity_bps / 8 / NS_PER_S
                self._decide(out, k, vals[0], vals[1], vals[2], qmin, q, d)
        for e in self.cfg.edges:
            ring = self.dp.read_pacer(e.name)
            seen_p = self._seen_pacer[e.name]
            for j, iv in ring.items():
                # interval k is read after k + 1 began: the slots of k + 1 - RING and older
                # may hold k + 1 already (a class's ring and the port's are reused apart)
                if k + 1 - RING < j < k and j in seen_p:
                    now_p = (getattr(iv, "offered_bytes", iv.bytes), getattr(iv, "offered_packets", iv.packets),
                             tuple(iv.class_bytes))
                    if now_p != seen_p[j]:
                        self.counters["pacer_acc_late"] += 1
                        self._late_slot("pacer", e.name, j, k, seen_p[j], now_p)
                        seen_p[j] = now_p
            iv = ring.get(k)
            if iv is None:
                if any(j > k and (j - k) % RING == 0 for j in ring):
                    self.counters["pacer_acc_lost"] += 1
                b, pk, qmin, cb = 0, 0, None, ()
            else:
                b, pk, qmin, cb = iv.bytes, iv.packets, iv.qmin_ns, tuple(iv.class_bytes)
                b, pk = getattr(iv, "offered_bytes", b), getattr(iv, "offered_packets", pk)
            seen_p[k] = (b, pk, cb)
            seen_p.pop(k - RING + 1, None)
            hist = self._class_bytes[e.name]
            hist[k] = cb
            hist.pop(k - 2, None)
            out = self.outputs[(e.name, e.uplink_port)]
            q = 0.0 if qmin is None else qmin / D * out.capacity_bps / 8 / NS_PER_S
            self._decide(out, k, b, pk, 0, qmin, q, d)
            for mf in self.edge_mfs.get(e.name, ()):
                if mf.active_from is None and mf.cfg.cls < len(cb) and cb[mf.cfg.cls] > 0:
                    mf.active_from = k + 1
                    self.activated[mf.cfg.name] = k + 1

    def _decide(self, out: _Out, k: int, b: int, packets: int, drops: int, qmin_ns: int | None, q: float,
                d: float) -> None:
        n = out.probes.pop(k, 0)
        dec = xcp.decide(out.capacity_bps, b, q, n, self.params)
        out.decisions[k] = dec
        out.decisions.pop(k - 2, None)
        self.link_rows.append({"interval": k, "node": out.node, "port": out.port, "capacity_bps": out.capacity_bps,
                               "bytes": b, "packets": packets, "drops": drops,
                               "qmin_ns": "" if qmin_ns is None else qmin_ns, "queue_bytes": q, "probes": n,
                               "input_bps": dec.input_rate_bps, "phi_bps": dec.phi_bps,
                               "shuffled_bps": dec.shuffled_bps})

    # -- the event heap ------------------------------------------------------------------------------
    def _advance(self, horizon: int) -> None:
        """Process every event dated before ``horizon``."""
        heap = self._heap
        E, d_e, tau = self.E, self.d_e, self.tau_c
        pop, push = heapq.heappop, heapq.heappush
        while heap and heap[0][0] < horizon:
            t, order, _s, idx, obj = pop(heap)
            if order == _FWD:
                pr: _Probe = obj
                mf = pr.mf
                if idx < len(mf.hops):
                    out = mf.hops[idx]
                    k = (t - E) // d_e
                    dec = out.decisions.get(k - 1) if k > 0 else NO_DECISION
                    if dec is None:
                        raise RuntimeError(f"probe of {mf.cfg.name} at {out.node}:{out.port} at {t} needs the "
                                           f"decision of interval {k - 1}, not taken yet (horizon {horizon})")
                    own = math.floor(dec.feedback_bps(pr.measured))
                    if own > RATE_MAX:
                        own = RATE_MAX
                    elif own < -RATE_MAX:
                        own = -RATE_MAX
                    if own < pr.feedback:
                        pr.feedback, pr.limiter = own, (out.node, out.port)
                    out.probes[k] = out.probes.get(k, 0) + 1
                    fifo = mf.fifos[idx]
                else:                                 # at the egress edge (turned) or on the way back
                    b = idx - len(mf.hops)
                    if b == len(mf.back):
                        self._returned(pr, t)
                        continue
                    fifo = mf.back[b]
                dep = t if t > fifo.free else fifo.free
                fifo.free = dep + tau
                self._seq += 1                        # inline _push: the hot path of a step
                push(heap, (dep + tau + fifo.prop_ns, _FWD, self._seq, idx + 1, pr))
            elif order == _SEND:
                j = idx
                for mf in self.mfs:
                    if mf.active_from is not None and mf.active_from <= j:
                        self._send(mf, j, t)
                self._push(t + d_e, _SEND, None, j + 1)
            else:
                mf, rate = obj
                mf.rate = rate
        self.horizon = horizon

    def _send(self, mf: _Mf, j: int, t: int) -> None:
        if mf.probes_sent == 0:
            measured = round(mf.rate)
        else:
            cb = self._class_bytes[mf.cfg.src].get(j - 1, ())
            b = cb[mf.cfg.cls] if mf.cfg.cls < len(cb) else 0
            measured = round(8 * b / self.params.interval_s)
        mf.probes_sent += 1
        self.counters["probes_sent"] += 1
        pr = _Probe(mf, j, mf.rate, measured, math.floor(mf.hi - mf.rate), t)
        self._push(t, _FWD, pr, 0)

    def _returned(self, pr: _Probe, t: int) -> None:
        mf = pr.mf
        new = xcp.next_rate_bps(mf.granted, pr.feedback, mf.lo, mf.hi)
        mf.granted = new
        eff = t + self.delta_e
        self._push(eff, _APPLY, (mf, new), 0)
        self._pending.setdefault(mf.cfg.src, []).append(
            RateChange(mf.cfg.cls, max(1, round(new / self.cfg.tdf)), eff))
        self.counters["probes_returned"] += 1
        lim = pr.limiter
        self.rate_rows.append({"interval": pr.seq, "macroflow": mf.cfg.name, "cls": mf.cfg.cls, "src": mf.cfg.src,
                               "dst": mf.cfg.dst, "kind": mf.cfg.kind, "rate_bps": pr.rate,
                               "measured_bps": pr.measured, "feedback_bps": pr.feedback,
                               "limiter_node": lim[0] if lim else "", "limiter_port": lim[1] if lim else "",
                               "rate_after_bps": new, "send_ns": pr.sent, "return_ns": t, "effective_ns": eff})

    def _flush(self) -> int:
        """Send the pending rate changes, one request per edge; count those already past
        their instant. Returns how many were sent."""
        n = 0
        for edge, changes in self._pending.items():
            if not changes:
                continue
            self.dp.set_rates(edge, changes)
            now = self.dp.now_ns()
            for c in changes:
                if c.effective_ns < now:
                    self.counters["late_rates"] += 1
                    self.max_rate_late_ns = max(self.max_rate_late_ns, now - c.effective_ns)
            n += len(changes)
        self.counters["rate_changes"] += n
        self._pending = {}
        return n

    # -- records -------------------------------------------------------------------------------------
    def in_flight_rows(self) -> list[dict[str, Any]]:
        """Rows of the probes sent but not back yet (feedback and after: empty)."""
        rows = []
        for ev in self._heap:
            if ev[1] == _FWD:
                pr: _Probe = ev[4]
                rows.append({"interval": pr.seq, "macroflow": pr.mf.cfg.name, "cls": pr.mf.cfg.cls,
                             "src": pr.mf.cfg.src, "dst": pr.mf.cfg.dst, "kind": pr.mf.cfg.kind, "rate_bps": pr.rate,
                             "measured_bps": pr.measured, "feedback_bps": "", "limiter_node": "",
                             "limiter_port": "", "rate_after_bps": "", "send_ns": pr.sent, "return_ns": "",
                             "effective_ns": ""})
        return sorted(rows, key=lambda r: (r["interval"], r["macroflow"]))

    def rates_table(self) -> list[dict[str, Any]]:
        """``xcp_rates.csv``'s rows (RATE_COLUMNS), by interval then macroflow."""
        return sorted(self.rate_rows, key=lambda r: (r["interval"], r["macroflow"])) + self.in_flight_rows()

    def links_table(self) -> list[dict[str, Any]]:
        """``xcp_links.csv``'s rows (LINK_COLUMNS), by interval, node, port."""
        return sorted(self.link_rows, key=lambda r: (r["interval"], r["node"], r["port"]))

    def granted(self) -> dict[str, list[tuple[int, float]]]:
        """{macroflow: [(interval k, R granted at E + k d_e (paper bit/s))]} from its
        probes' rows."""
        out: dict[str, list[tuple[int, float]]] = {}
        for r in sorted(self.rate_rows, key=lambda r: r["interval"]):
            out.setdefault(r["macroflow"], []).append((r["interval"], r["rate_bps"]))
        return out

    def summary(self, pacer_counters: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
        """``xcp.json``: counters, decision lag and CPU per interval (p50 / p99 / max,
        ns), the steps, macroflow activation intervals, the pacers' own counters
        ({edge: counters}, when given) and whether the point is exact (every lateness
        counter 0, the pacers' ``late`` and ``late_rates`` included)."""
        lags = [s["lag_ns"] for s in self.steps]
        cpus = [s["cpu_ns"] for s in self.steps]
        exact = all(self.counters[k] == 0 for k in ("acc_late", "acc_lost", "pacer_acc_late", "pacer_acc_lost",
                                                    "late_rates"))
        for c in (pacer_counters or {}).values():
            exact = exact and not c.get("late", 0) and not c.get("late_rates", 0)
        return {
            "epoch_ns": self.E, "interval_ns": self.d_e, "tdf": self.cfg.tdf, "margin_ns": self.cfg.margin_ns,
            "rate_delay_ns": self.delta_e, "control_tau_ns": self.tau_c, "intervals": len(self.steps),
            **self.counters, "max_rate_late_ns": self.max_rate_late_ns,
            "decision_lag_ns": {"p50": percentile(lags, 0.5), "p99": percentile(lags, 0.99),
                                "max": max(lags) if lags else None},
            "cpu_ns_per_interval": {"p50": percentile(cpus, 0.5), "p99": percentile(cpus, 0.99),
                                    "max": max(cpus) if cpus else None, "total": sum(cpus)},
            "activated": dict(self.activated),
            "pacers": {k: dict(v) for k, v in (pacer_counters or {}).items()},
            "exact": exact,
            "late_slots": list(self.late_slots),
            "steps": list(self.steps),
        }
