"""A closed-loop reference of E5's XCP edge pacing (docs/xcp-edge.md): ingress edges
pace macroflows at the rates XCP grants, routers decide once per control interval from
their own counters, probes cross the control channel. Pure Python, no I/O; the oracle
of the guest test of the real loop (agents, pacer qdisc, BPF counters).

The model, packet by packet (event driven, integer ns of paper time):

* **Links** (:class:`SimLink`): one direction from node ``src`` to node ``dst``, a
  FIFO output at ``capacity_bps`` with propagation ``delay_s``; a packet arriving at
  the output at t leaves (its head) at max(t, busy_until), holds the output for its
  serialisation, and reaches ``dst`` after the propagation (cut-through: the next
  output sees its head). The queue a packet finds is (busy_until - t) x capacity, in
  bytes (the bytes ahead of it, the one being sent included: what an EDT port model
  knows exactly). ``buffer_bytes``: a packet that finds a queue above buffer_bytes -
  its own length is dropped (default: no limit).
* **Routers**: every link is controlled by an XCP agent at its ``src`` node (the
  ingress edge for its uplink, the core nodes for theirs), a
  :class:`testbed.xcp.LinkController`: it counts the bytes of every packet arriving at
  the output (dropped ones too: XCP's input traffic), takes the queue each arrival finds
  as a sample (the persistent queue is the interval's smallest sample), counts probes,
  and decides at every multiple of the control interval d (all routers in step, from
  t = 0). A packet or probe arriving at an instant kd belongs to interval k (the
  decision of k-1 comes first).
* **Macroflows** (:class:`SimFlow`): a path of nodes from its ingress edge to its egress
  edge. The ingress edge paces it with a leaky bucket of no burst allowance: a packet
  leaves the pacer no earlier than 8 x packet_bytes / R after the previous one, R the
  granted rate at that moment (a rate change re-spaces the next packet from the
  previous one's departure). ``demand_bps`` None: always backlogged; else packets come
  at that constant rate and wait in the edge's queue, dropped if their wait at the
  current rate would exceed ``edge_wait_s``.
* **Probes**: a macroflow sends one every d, at its phase ``probe_phase_s``, carrying
  u_i = its rate measured since its previous probe (bytes left the pacer / elapsed;
  ``rate_estimate = "granted"``: R instead) and the feedback it would like (its maximum
  rate - R). At each node of its forward path the controller of the next link lowers
  it (xcp.LinkController.on_probe: the decision of the previous interval); the probe
  then crosses the control link store-and-forward: it waits for the control link
  (FIFO, no loss), takes 8 x probe_bytes / control_rate_bps, and the propagation of the
  data link it runs beside. The egress edge sends it back along the reverse path
  (forwarded, not lowered); when it reaches the ingress edge, R <- R + feedback within
  [min_rate_bps, max_rate_bps] (xcp.next_rate_bps), effective at once or
  ``rate_delay_s`` later (the real edge's processing allowance, docs/xcp-edge.md).

Results (:class:`SimResult`) are sampled at every interval boundary kd: each macroflow's
granted rate, each link's decision, input, persistent queue, largest queue and drops.
Rates are in bit/s, sizes in bytes, times in s unless named ``_ns``; everything in paper
units (the emulation divides rates and multiplies times by D; the XCP loop itself is
invariant under that scaling).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from testbed import xcp, xcpprobe

NS_PER_S = 1_000_000_000
#: rate_estimate values: u_i in the probe is the measured rate, or the granted rate R
RATE_ESTIMATES = ("measured", "granted")

# event priorities at one instant: decisions first (an arrival at kd is in interval k),
# then probes, then data
_DECIDE, _PROBE, _DATA = 0, 1, 2


class SimError(ValueError):
    """A simulation input out of range; names the item, the value and what is accepted."""


def _ns(seconds: float) -> int:
    return round(seconds * NS_PER_S)


@dataclass(frozen=True)
class SimLink:
    """One direction of a link: ``src`` -> ``dst``, capacity (bit/s), propagation (s),
    the optical RAM of its output (bytes; inf: no drops). Raises SimError for a
    non-positive capacity, a negative delay or buffer."""

    src: str
    dst: str
    capacity_bps: float
    delay_s: float
    buffer_bytes: float = math.inf

    def __post_init__(self) -> None:
        if not self.capacity_bps > 0 or not math.isfinite(self.capacity_bps):
            raise SimError(f"link {self.src}->{self.dst} capacity_bps={self.capacity_bps!r}: accepted > 0, finite")
        if not 0 <= self.delay_s < math.inf:
            raise SimError(f"link {self.src}->{self.dst} delay_s={self.delay_s!r}: accepted >= 0, finite")
        if not self.buffer_bytes >= 0:
            raise SimError(f"link {self.src}->{self.dst} buffer_bytes={self.buffer_bytes!r}: accepted >= 0")


def duplex(a: str, b: str, capacity_bps: float, delay_s: float, buffer_bytes: float = math.inf) -> list[SimLink]:
    """Both directions of a link between ``a`` and ``b``."""
    return [SimLink(a, b, capacity_bps, delay_s, buffer_bytes), SimLink(b, a, capacity_bps, delay_s, buffer_bytes)]


@dataclass(frozen=True)
class SimFlow:
    """A macroflow: ``name``, its ``path`` (ingress edge .. egress edge, >= 2 nodes), its
    granted rate at ``start_s`` (bit/s), its offered rate (``demand_bps``, None: always
    backlogged), and the phase of its probes within the control interval (s; None:
    ``start_s`` modulo d)."""

    name: str
    path: tuple[str, ...]
    start_rate_bps: float
    demand_bps: float | None = None
    start_s: float = 0.0
    probe_phase_s: float | None = None

    def __post_init__(self) -> None:
        if len(self.path) < 2 or len(set(self.path)) != len(self.path):
            raise SimError(f"flow {self.name} path={self.path!r}: accepted >= 2 distinct nodes")
        if not self.start_rate_bps >= 0:
            raise SimError(f"flow {self.name} start_rate_bps={self.start_rate_bps!r}: accepted >= 0")
        if self.demand_bps is not None and not self.demand_bps > 0:
            raise SimError(f"flow {self.name} demand_bps={self.demand_bps!r}: accepted > 0 or None")
        if not self.start_s >= 0:
            raise SimError(f"flow {self.name} start_s={self.start_s!r}: accepted >= 0")

    def hops(self) -> list[tuple[str, str]]:
        """The (src, dst) links of its forward path."""
        return list(zip(self.path, self.path[1:]))


@dataclass(frozen=True)
class SimConfig:
    """The loop's parameters: XCP's (testbed.xcp.XcpParameters: alpha, beta, gamma, d,
    TU), data packet size (bytes), probe frame size (bytes, default the real probe's),
    control channel rate (bit/s, paper: 100 Mb/s), rate bounds (bit/s; None: at least
    one packet per interval, at most the capacity of the macroflow's first link), the
    edge's wait bound (s, paper: 0.25 s), what u_i a probe carries, and how long after
    a probe's return its rate change takes effect (s; the paper: at once)."""

    params: xcp.XcpParameters = field(default_factory=xcp.XcpParameters)
    packet_bytes: int = 1500
    probe_bytes: int = xcpprobe.FRAME_BYTES
    control_rate_bps: float = 100e6
    min_rate_bps: float | None = None
    max_rate_bps: float | None = None
    edge_wait_s: float = 0.25
    rate_estimate: str = "measured"
    rate_delay_s: float = 0.0

    def __post_init__(self) -> None:
        if self.packet_bytes < 1 or self.probe_bytes < 1:
            raise SimError(f"packet_bytes={self.packet_bytes!r}, probe_bytes={self.probe_bytes!r}: accepted >= 1")
        if not self.control_rate_bps > 0:
            raise SimError(f"control_rate_bps={self.control_rate_bps!r}: accepted > 0")
        if self.rate_estimate not in RATE_ESTIMATES:
            raise SimError(f"rate_estimate={self.rate_estimate!r}: accepted {', '.join(RATE_ESTIMATES)}")
        if not self.edge_wait_s >= 0:
            raise SimError(f"edge_wait_s={self.edge_wait_s!r}: accepted >= 0")
        if not 0 <= self.rate_delay_s < self.params.interval_s:
            raise SimError(f"rate_delay_s={self.rate_delay_s!r}: accepted 0 <= rate_delay_s < d")
        if self.min_rate_bps is not None and not self.min_rate_bps > 0:
            raise SimError(f"min_rate_bps={self.min_rate_bps!r}: accepted > 0 (a paced macroflow must be able to send)")
        if self.max_rate_bps is not None and not self.max_rate_bps >= self.min_rate():
            raise SimError(f"max_rate_bps={self.max_rate_bps!r}: accepted >= min_rate_bps ({self.min_rate()!r})")

    def min_rate(self) -> float:
        """The smallest granted rate, bit/s: given, or one packet per control interval."""
        if self.min_rate_bps is not None:
            return self.min_rate_bps
        return 8 * self.packet_bytes / self.params.interval_s


@dataclass(frozen=True)
class LinkInterval:
    """One link in one control interval: the decision taken at its end (xcp.ControlDecision),
    the bytes that arrived at its output (dropped ones included), its persistent queue
    (the smallest queue an arrival found, 0 without arrivals), the largest queue an
    arrival found (bytes), packets dropped, probes counted."""

    decision: xcp.ControlDecision
    input_bytes: int
    persistent_queue_bytes: float
    max_queue_bytes: float
    drops: int
    probes: int


@dataclass(frozen=True)
class ProbeTrip:
    """A probe's round trip: sent and back (s), the u_i it carried, the feedback it
    returned (bit/s), the link that set it (None: no router lowered it), the rate after."""

    flow: str
    seq: int
    sent_s: float
    back_s: float
    measured_bps: float
    feedback_bps: float
    limiter: tuple[str, str] | None
    rate_after_bps: float


@dataclass
class SimResult:
    """Samples at every interval boundary k d, k = 0 .. K: ``rates[flow][k]`` the granted
    rate at kd (bit/s), ``sent[flow][k]`` the bytes its pacer released in interval k
    (k < K), ``links[(src, dst)][k]`` the link in interval k (k < K); ``trips`` every
    returned probe; ``delivered`` bytes per flow at its egress edge; ``edge_drops`` per
    flow at its ingress edge."""

    interval_s: float
    rates: dict[str, list[float]]
    sent: dict[str, list[int]]
    links: dict[tuple[str, str], list[LinkInterval]]
    trips: list[ProbeTrip]
    delivered: dict[str, int]
    edge_drops: dict[str, int]

    def intervals(self) -> int:
        """K, the number of complete intervals."""
        return len(next(iter(self.rates.values()))) - 1

    def total_rate(self, flows: Iterable[str] | None = None) -> list[float]:
        """Sum of the granted rates of ``flows`` (default all) at every boundary, bit/s."""
        names = list(self.rates) if flows is None else list(flows)
        return [sum(self.rates[f][k] for f in names) for k in range(self.intervals() + 1)]

    def sent_rate(self, flow: str) -> list[float]:
        """The rate the pacer of ``flow`` released in each interval, bit/s."""
        return [8 * b / self.interval_s for b in self.sent[flow]]


def settling_interval(series: Sequence[float], target: float, rel_tol: float) -> int | None:
    """The first index from which every value of ``series`` stays within ``rel_tol`` x
    |target| of ``target``; None if the last value is outside."""
    bound = rel_tol * abs(target)
    k = len(series)
    while k > 0 and abs(series[k - 1] - target) <= bound:
        k -= 1
    return k if k < len(series) else None


def converged_interval(result: SimResult, targets: dict[str, float], rel_tol: float) -> int | None:
    """The first boundary k from which every flow's granted rate stays within ``rel_tol``
    of its target ({flow: bit/s}); None if one does not end there."""
    ks = [settling_interval(result.rates[f], t, rel_tol) for f, t in targets.items()]
    return None if any(k is None for k in ks) else max(ks)  # type: ignore[type-var]


@dataclass
class _Output:
    link: SimLink
    ctl: xcp.LinkController
    busy_until: int = 0
    ctl_free: int = 0           # the control link beside it (store-and-forward, FIFO)
    arrived: int = 0
    q_min: float | None = None
    q_max: float = 0.0
    drops: int = 0
    probes: int = 0


@dataclass
class _Flow:
    spec: SimFlow
    hops: list[_Output]
    back: list[_Output]
    rate: float
    max_rate: float
    last_send: int | None = None
    backlog: deque = field(default_factory=deque)   # arrival times of waiting packets (demand-limited)
    version: int = 0
    sent_interval: int = 0
    sent_since_probe: int = 0
    last_probe: int | None = None
    seq: int = 0
    delivered: int = 0
    edge_drops: int = 0


class XcpLoopSim:
    """See the module docstring. ``links``: every directed link (a path's consecutive
    nodes must be a link); ``flows``: the macroflows. Raises SimError for a flow whose
    path has no link, two links with the same ends, or two flows with one name."""

    def __init__(self, links: Sequence[SimLink], flows: Sequence[SimFlow], config: SimConfig | None = None) -> None:
        self.config = config or SimConfig()
        self.d_ns = _ns(self.config.params.interval_s)
        self.outputs: dict[tuple[str, str], _Output] = {}
        for link in links:
            key = (link.src, link.dst)
            if key in self.outputs:
                raise SimError(f"link {link.src}->{link.dst} given twice")
            self.outputs[key] = _Output(link, xcp.LinkController(link.capacity_bps, self.config.params))
        if len({f.name for f in flows}) != len(flows):
            raise SimError(f"flow names {[f.name for f in flows]}: accepted distinct names")
        self.flows: dict[str, _Flow] = {}
        for f in flows:
            missing = [h for h in f.hops() + [(b, a) for a, b in f.hops()] if h not in self.outputs]
            if missing:
                raise SimError(f"flow {f.name}: no link {missing[0][0]}->{missing[0][1]} (both directions are "
                               "needed: data forward, returning probes back)")
            hops = [self.outputs[h] for h in f.hops()]
            back = [self.outputs[(b, a)] for a, b in reversed(f.hops())]
            cap = self.config.max_rate_bps if self.config.max_rate_bps is not None else hops[0].link.capacity_bps
            rate = min(cap, max(self.config.min_rate(), f.start_rate_bps))
            self.flows[f.name] = _Flow(f, hops, back, rate, cap)
        self._events: list[tuple[int, int, int, str, tuple]] = []
        self._seq = 0
        self._ran = False
        self.trips: list[ProbeTrip] = []

    # -- events -----------------------------------------------------------------------
    def _push(self, t: int, prio: int, kind: str, args: tuple) -> None:
        self._seq += 1
        heapq.heappush(self._events, (t, prio, self._seq, kind, args))

    def _gap(self, fl: _Flow) -> int:
        return max(1, round(8 * self.config.packet_bytes * NS_PER_S / fl.rate))

    def _schedule_pacer(self, fl: _Flow, now: int) -> None:
        """(Re)schedule the flow's next release: the head may leave at max(now, last
        release + 8 L / R) if anything waits."""
        fl.version += 1
        if fl.spec.demand_bps is not None and not fl.backlog:
            return
        t = now if fl.last_send is None else max(now, fl.last_send + self._gap(fl))
        self._push(t, _DATA, "release", (fl, fl.version))

    def _release(self, fl: _Flow, version: int, now: int) -> None:
        if version != fl.version:
            return
        if fl.spec.demand_bps is not None:
            fl.backlog.popleft()
        fl.last_send = now
        size = self.config.packet_bytes
        fl.sent_interval += size
        fl.sent_since_probe += size
        self._arrive(fl, 0, now)
        self._schedule_pacer(fl, now)

    def _offer(self, fl: _Flow, now: int) -> None:
        """A demand-limited flow's packet reaches its ingress edge."""
        gap = self._gap(fl)
        ahead = len(fl.backlog)
        wait = (0 if fl.last_send is None else max(0, fl.last_send + gap - now)) + ahead * gap
        if wait > _ns(self.config.edge_wait_s):
            fl.edge_drops += 1
        else:
            fl.backlog.append(now)
            if ahead == 0:
                self._schedule_pacer(fl, now)
        spacing = round(8 * self.config.packet_bytes * NS_PER_S / fl.spec.demand_bps)  # type: ignore[operator]
        self._push(now + spacing, _DATA, "offer", (fl,))

    def _arrive(self, fl: _Flow, hop: int, now: int) -> None:
        """A packet of ``fl`` reaches the output of its hop ``hop`` at ``now``."""
        if hop == len(fl.hops):
            fl.delivered += self.config.packet_bytes
            return
        out = fl.hops[hop]
        link = out.link
        size = self.config.packet_bytes
        queue = max(0, out.busy_until - now) * link.capacity_bps / 8 / NS_PER_S
        out.ctl.on_data(size)
        out.ctl.on_queue(queue)
        out.arrived += size
        out.q_max = max(out.q_max, queue)
        out.q_min = queue if out.q_min is None else min(out.q_min, queue)
        if queue + size > link.buffer_bytes:
            out.drops += 1
            return
        dep = max(now, out.busy_until)
        out.busy_until = dep + round(8 * size * NS_PER_S / link.capacity_bps)
        self._push(dep + _ns(link.delay_s), _DATA, "arrive", (fl, hop + 1))

    def _control_hop(self, out: _Output, now: int) -> int:
        """A probe handed to the control link beside ``out`` at ``now``: its arrival at
        the far end (store-and-forward, FIFO)."""
        tau = round(8 * self.config.probe_bytes * NS_PER_S / self.config.control_rate_bps)
        dep = max(now, out.ctl_free)
        out.ctl_free = dep + tau
        return dep + tau + _ns(out.link.delay_s)

    def _probe_send(self, fl: _Flow, now: int) -> None:
        if self.config.rate_estimate == "granted" or fl.last_probe is None or now == fl.last_probe:
            measured = fl.rate
        else:
            measured = 8 * fl.sent_since_probe * NS_PER_S / (now - fl.last_probe)
        fl.last_probe, fl.sent_since_probe = now, 0
        probe = xcp.Probe(fl.spec.name, measured, fl.max_rate - fl.rate)
        self._probe_at(fl, (fl.seq, now, probe, None), 0, False, now)
        fl.seq += 1
        self._push(now + self.d_ns, _PROBE, "probe_send", (fl,))

    def _probe_at(self, fl: _Flow, trip: tuple, hop: int, back: bool, now: int) -> None:
        """The probe of ``trip`` = (seq, sent, xcp.Probe, limiter) at node ``hop`` of the
        forward path (``back``: of the reverse path)."""
        seq, sent, probe, limiter = trip
        if not back:
            if hop == len(fl.hops):                      # egress edge: turn it round
                self._probe_at(fl, trip, 0, True, now)
                return
            out = fl.hops[hop]
            out.probes += 1
            lowered = out.ctl.on_probe(probe)
            if lowered is not probe:
                limiter = (out.link.src, out.link.dst)
            t = self._control_hop(out, now)
            self._push(t, _PROBE, "probe_at", (fl, (seq, sent, lowered, limiter), hop + 1, False))
            return
        if hop == len(fl.back):                          # back at the ingress edge
            delay = _ns(self.config.rate_delay_s)
            if delay:
                self._push(now + delay, _PROBE, "apply", (fl, trip, now))
            else:
                self._apply(fl, trip, now, now)
            return
        t = self._control_hop(fl.back[hop], now)
        self._push(t, _PROBE, "probe_at", (fl, trip, hop + 1, True))

    def _apply(self, fl: _Flow, trip: tuple, back: int, now: int) -> None:
        """The returned probe of ``trip`` (back at ``back``) changes the rate at ``now``."""
        seq, sent, probe, limiter = trip
        fl.rate = xcp.next_rate_bps(fl.rate, probe.feedback_bps, self.config.min_rate(), fl.max_rate)
        self.trips.append(ProbeTrip(fl.spec.name, seq, sent / NS_PER_S, back / NS_PER_S, probe.rate_bps,
                                    probe.feedback_bps, limiter, fl.rate))
        self._schedule_pacer(fl, now)

    # -- run --------------------------------------------------------------------------
    def run(self, intervals: int) -> SimResult:
        """Simulate ``intervals`` control intervals from t = 0. Raises SimError for
        intervals < 1, or when this instance has run already (make another)."""
        if intervals < 1:
            raise SimError(f"intervals={intervals!r}: accepted >= 1")
        if self._ran:
            raise SimError("this simulation has run already: make a new XcpLoopSim")
        self._ran = True
        d = self.d_ns
        for fl in self.flows.values():
            start = _ns(fl.spec.start_s)
            phase = _ns(fl.spec.probe_phase_s) % d if fl.spec.probe_phase_s is not None else start % d
            first_probe = start - start % d + phase
            if first_probe < start:
                first_probe += d
            self._push(first_probe, _PROBE, "probe_send", (fl,))
            if fl.spec.demand_bps is None:
                self._push(start, _DATA, "start", (fl,))
            else:
                self._push(start, _DATA, "offer", (fl,))
        for k in range(1, intervals + 1):
            self._push(k * d, _DECIDE, "decide", (k,))
        rates = {name: [fl.rate] for name, fl in self.flows.items()}
        sent: dict[str, list[int]] = {name: [] for name in self.flows}
        links: dict[tuple[str, str], list[LinkInterval]] = {key: [] for key in self.outputs}
        end = intervals * d
        while self._events and self._events[0][0] <= end:
            t, _prio, _seq, kind, args = heapq.heappop(self._events)
            if kind == "decide":
                for key, out in self.outputs.items():
                    dec = out.ctl.end_interval()
                    links[key].append(LinkInterval(dec, out.arrived, out.q_min or 0.0, out.q_max, out.drops,
                                                   out.probes))
                    out.arrived, out.q_min, out.q_max, out.drops, out.probes = 0, None, 0.0, 0, 0
                for name, fl in self.flows.items():
                    rates[name].append(fl.rate)
                    sent[name].append(fl.sent_interval)
                    fl.sent_interval = 0
                if args[0] == intervals:
                    break
            elif kind == "start":
                self._schedule_pacer(args[0], t)
            elif kind == "release":
                self._release(args[0], args[1], t)
            elif kind == "offer":
                self._offer(args[0], t)
            elif kind == "arrive":
                self._arrive(args[0], args[1], t)
            elif kind == "probe_send":
                self._probe_send(args[0], t)
            elif kind == "probe_at":
                self._probe_at(args[0], args[1], args[2], args[3], t)
            elif kind == "apply":
                self._apply(args[0], args[1], args[2], t)
        return SimResult(self.config.params.interval_s, rates, sent, links, self.trips,
                         {n: fl.delivered for n, fl in self.flows.items()},
                         {n: fl.edge_drops for n, fl in self.flows.items()})


def dumbbell(n: int, capacity_bps: float, *, core_delay_s: float = 0.005, edge_delay_s: float = 0.0001,
             edge_capacity_bps: float | None = None, buffer_bytes: float = math.inf) -> list[SimLink]:
    """n ingress edges i0..i{n-1} on core node c0, the bottleneck c0 -> c1 of
    ``capacity_bps``, ``core_delay_s`` and ``buffer_bytes``, n egress edges o0..o{n-1}
    on c1; edge links ``edge_delay_s`` at ``edge_capacity_bps`` (default
    ``capacity_bps``, so that no edge link is a bottleneck for n >= 2); both directions.
    Macroflow k's path: :func:`dumbbell_path` (k)."""
    edge = edge_capacity_bps if edge_capacity_bps is not None else capacity_bps
    links = duplex("c0", "c1", capacity_bps, core_delay_s, buffer_bytes)
    for k in range(n):
        links += duplex(f"i{k}", "c0", edge, edge_delay_s) + duplex("c1", f"o{k}", edge, edge_delay_s)
    return links


def dumbbell_path(k: int) -> tuple[str, ...]:
    """The path of macroflow k over :func:`dumbbell`: i<k>, c0, c1, o<k>."""
    return (f"i{k}", "c0", "c1", f"o{k}")
