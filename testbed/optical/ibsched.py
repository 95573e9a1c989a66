"""The input-buffered (IB) node of E5 as the ``voq`` qdisc realises it: a mirror in Python
of the kernel's algorithm (``kernel/sch_voq.c``; design in docs/ib-holding.md).

Semantics are those of the reference ``testbed.optical.ramsim`` (IB: N virtual output
queues per input sharing B bytes, an N x N fabric with speedup 1, an rr or iSLIP-like
scheduler run at release instants); this module does not import it, so that the tests can
hold one against the other. What this module adds is *how* the kernel gets there:

* packets reach the node in real time, each ``lateness`` ns after its intended arrival
  (the stamp the egress program leaves: ``Arrival.arrival_ns``); the real time it
  reaches the qdisc is ``Arrival.enqueue_ns``;
* the node decides the instant t (releases, scheduling, arrivals) only once real time
  has passed t + M (``lookahead_ns``), in :meth:`IbNode.advance`, which the kernel runs
  at every enqueue and dequeue of any of the node's qdiscs and from the node's timer
  (armed at the next event instant + M, :meth:`IbNode.next_wakeup_ns`);
* an arrival whose instant is not after the last decided instant (``last``) is *late*:
  counted, and decided at ``last``. With no late arrival the decisions are ramsim's; a
  lateness below M for every packet guarantees none is late (docs/ib-holding.md,
  "Exactness");
* a forwarded packet is stamped with its intended arrival at the next node, departure +
  propagation (+ tau if the peer is a host), and released at max(stamp, real time of
  its departure decision);
* with an XCP ring configured (``IbConfig.xcp_interval_ns`` d_e > 0, epoch
  ``xcp_epoch_ns`` E), every output counts the arrivals decided for it per interval
  k = (t - E) // d_e of their decided instant t and keeps the smallest backlog one of
  them found (:class:`XcpSlot`; docs/xcp-edge.md, "IB nodes"): what the output still
  had to send, in ns of its link, (out_free - t)^+ + the taus of the packets in its
  VOQs of every input, before the arrival's own decision. ``Counters.xcp`` keeps every
  interval's slot; :meth:`Counters.xcp_ring` is what the kernel's ring of
  :data:`XCP_SLOTS` shows of them.

Units: times are integer ns (intended or real, both CLOCK_MONOTONIC in the kernel),
lengths bytes. ``frame_bytes`` is the Ethernet frame without FCS (``qdisc_pkt_len``): a
packet lasts tau = frame_bytes * ps_per_byte(output) // 1000 ns and occupies
frame_bytes - 14 IP bytes (at least 0) of its input's buffer.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Iterable, Protocol, Sequence

# an output's XCP ring has the BPF accumulators' layout (kernel/voq.h VOQ_XCP_SLOTS and
# VOQ_XCP_NONE equal them; tests/unit/test_voq.py checks): interval k in slot k % XCP_SLOTS,
# XCP_NONE for a slot never used and for qmin_ns without arrival
from testbed.optical.layout import XCP_NONE, XCP_SLOTS

#: bytes of an Ethernet header: buffers count IP bytes (the paper's packet), frames last
ETH_HLEN = 14
SCHEDULERS = ("rr", "islip")
VOQ_SPLITS = ("shared", "static")
#: buckets of the enqueue-lateness histogram (bucket k: [2^k, 2^(k+1)) ns; 0 also 0 ns)
LATE_BUCKETS = 48
#: an event that never comes (compares above every int)
_INF = math.inf


@dataclass(frozen=True)
class PortParams:
    """One output port: ``ps_per_byte`` its rate (ps per byte, >= 1), ``prop_ns`` the
    propagation of its link (emulation ns, >= 0), ``peer_host`` whether the peer is an end
    host (it receives a packet when its tail arrives: the stamp adds tau)."""

    ps_per_byte: int
    prop_ns: int = 0
    peer_host: bool = False


#: most ports of one node (kernel/voq.h VOQ_MAX_PORTS)
MAX_PORTS = 64


def check_ports(ports: Sequence[PortParams]) -> None:
    """The ports of a node the voq qdisc can hold: 1..MAX_PORTS of them, each with
    ps_per_byte >= 1 and prop_ns >= 0. Raises ValueError naming the one out of range."""
    if not 1 <= len(ports) <= MAX_PORTS:
        raise ValueError(f"ports: {len(ports)} given; accepted: 1..{MAX_PORTS} ports")
    for k, p in enumerate(ports):
        if p.ps_per_byte < 1 or p.prop_ns < 0:
            raise ValueError(f"ports[{k}]={p}: accepted: ps_per_byte >= 1 and prop_ns >= 0")


@dataclass(frozen=True)
class IbConfig:
    """A node: ``ports`` (one PortParams per port; N = their number), ``buffer_bytes`` B
    per input (IP bytes), ``lookahead_ns`` M (ns, >= 1), ``scheduler`` ("rr" | "islip"),
    ``voq_split`` ("shared": the input's VOQs share B; "static": B / N per VOQ),
    ``xcp_interval_ns`` d_e of the outputs' XCP rings (ns; 0: off) and their epoch
    ``xcp_epoch_ns`` E (CLOCK_MONOTONIC ns; 0 when off). Raises ValueError naming the
    argument, its value and the accepted range."""

    ports: tuple[PortParams, ...]
    buffer_bytes: int
    lookahead_ns: int
    scheduler: str = "rr"
    voq_split: str = "shared"
    xcp_epoch_ns: int = 0
    xcp_interval_ns: int = 0

    def __post_init__(self) -> None:
        check_ports(self.ports)
        if self.buffer_bytes < 0:
            raise ValueError(f"buffer_bytes={self.buffer_bytes}: accepted range is buffer_bytes >= 0")
        if self.lookahead_ns < 1:
            raise ValueError(f"lookahead_ns={self.lookahead_ns}: accepted range is lookahead_ns >= 1")
        for name, value, accepted in (("scheduler", self.scheduler, SCHEDULERS),
                                      ("voq_split", self.voq_split, VOQ_SPLITS)):
            if value not in accepted:
                raise ValueError(f"{name}={value!r}: accepted values are {', '.join(accepted)}")
        if self.xcp_interval_ns < 0 or not 0 <= self.xcp_epoch_ns < XCP_NONE:
            raise ValueError(f"xcp_interval_ns={self.xcp_interval_ns}, xcp_epoch_ns={self.xcp_epoch_ns}: accepted: "
                             f"xcp_interval_ns >= 0 and 0 <= xcp_epoch_ns < 2^64 - 1")
        if not self.xcp_interval_ns and self.xcp_epoch_ns:
            raise ValueError(f"xcp_epoch_ns={self.xcp_epoch_ns}: accepted: 0 when xcp_interval_ns is 0 (ring off)")

    @property
    def n_ports(self) -> int:
        return len(self.ports)

    @classmethod
    def uniform(cls, n_ports: int, ps_per_byte: int, buffer_bytes: int, lookahead_ns: int, *, prop_ns: int = 0,
                peer_host: bool = False, **kw: str) -> "IbConfig":
        """A node whose ``n_ports`` ports share one rate, propagation and peer kind."""
        return cls(tuple(PortParams(ps_per_byte, prop_ns, peer_host) for _ in range(n_ports)), buffer_bytes,
                   lookahead_ns, **kw)


@dataclass(frozen=True)
class Arrival:
    """A packet reaching the node: ``arrival_ns`` its intended arrival (its head; the
    stamp), ``frame_bytes``, ``in_port`` / ``out_port`` in [0, N), ``enqueue_ns`` the real
    time it reaches the qdisc (None: on time, = arrival_ns)."""

    arrival_ns: int
    frame_bytes: int
    in_port: int
    out_port: int
    enqueue_ns: int | None = None

    @property
    def reached_ns(self) -> int:
        """Real time it reaches the qdisc (ns)."""
        return self.arrival_ns if self.enqueue_ns is None else self.enqueue_ns


@dataclass(frozen=True)
class Decision:
    """What the node did with one packet. ``kind``: "cut", "buffered" or "dropped".
    ``departure_ns``: intended instant its head leaves (None if dropped); ``stamp_ns``:
    its intended arrival at the next node; ``decided_ns``: real time of the decision that
    fixed its fate (its departure, or its drop); ``release_ns``: real time it leaves,
    max(stamp, decided); ``late``: its instant had been decided before it reached the
    node (it was decided at the last decided instant instead)."""

    kind: str
    departure_ns: int | None
    stamp_ns: int | None
    decided_ns: int
    release_ns: int | None
    late: bool


@dataclass(frozen=True)
class XcpSlot:
    """One interval of an output's XCP ring (``struct tc_voq_xcp_slot``, members in its
    order): ``interval`` k (XCP_NONE: never used), frame ``bytes`` of the arrivals
    decided for the output in k (dropped included), ``qmin_ns`` the smallest backlog one
    of them found (ns of the output's link; XCP_NONE: none), ``packets`` those arrivals,
    ``drops`` of them dropped."""

    interval: int = XCP_NONE
    bytes: int = 0
    qmin_ns: int = XCP_NONE
    packets: int = 0
    drops: int = 0


#: a slot never used (what a ring holds before its first arrival, and with the ring off)
EMPTY_XCP_SLOT = XcpSlot()


@dataclass
class Counters:
    """The qdisc's counters (kernel/voq.h, ``struct tc_voq_xstats``), per output port
    (``cut`` .. ``decided_after_stamp``: lists indexed by output) and per input
    (``in_dropped``, ``in_max_bytes``: most IP bytes waiting at the input at once), and
    for the node: ``max_node_bytes`` (most IP bytes waiting in all inputs at once),
    ``max_enqueue_late_ns`` (largest real - intended arrival at enqueue), ``late_log2``
    (its histogram), ``max_decision_lag_ns`` (largest real time - (t + M) at which an
    instant t was decided), and ``xcp``: {(output, interval k): its :class:`XcpSlot`} for
    every interval an arrival was decided in (ring on)."""

    n_ports: int
    cut: list[int] = field(default_factory=list)
    buffered: list[int] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)
    late: list[int] = field(default_factory=list)
    decided_after_stamp: list[int] = field(default_factory=list)
    in_dropped: list[int] = field(default_factory=list)
    in_max_bytes: list[int] = field(default_factory=list)
    max_node_bytes: int = 0
    max_enqueue_late_ns: int = 0
    late_log2: list[int] = field(default_factory=lambda: [0] * LATE_BUCKETS)
    max_decision_lag_ns: int = 0
    xcp: dict[tuple[int, int], XcpSlot] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("cut", "buffered", "dropped", "late", "decided_after_stamp", "in_dropped", "in_max_bytes"):
            if not getattr(self, name):
                setattr(self, name, [0] * self.n_ports)

    def xcp_ring(self, out_port: int) -> tuple[XcpSlot, ...]:
        """Output ``out_port``'s ring as the kernel dumps it now: slot s holds the latest
        interval k with k % XCP_SLOTS == s (intervals are decided in increasing order),
        else :data:`EMPTY_XCP_SLOT`."""
        ring = [EMPTY_XCP_SLOT] * XCP_SLOTS
        for (o, k), slot in sorted(self.xcp.items()):
            if o == out_port:
                ring[k % XCP_SLOTS] = slot
        return tuple(ring)


def late_bucket(late_ns: int) -> int:
    """Histogram bucket of an enqueue lateness (ns >= 0): floor(log2), 0 for 0 and 1,
    capped at LATE_BUCKETS - 1."""
    return min(max(late_ns, 1).bit_length() - 1, LATE_BUCKETS - 1)


@dataclass
class _Pkt:
    """A packet inside the node (the kernel's skb with its cb): intended arrival (moved to
    ``last`` if late), IP bytes, enqueue sequence, ports."""

    key: int
    arrival_ns: int
    frame_bytes: int
    ip_bytes: int
    in_port: int
    out_port: int
    seq: int


class IbNode:
    """The node's shared state and event loop, as the kernel keeps them (one object per
    IB node, shared by its N output qdiscs). Drive it with :meth:`enqueue` (a packet
    reaching an output's qdisc at real time ``now_ns``) and :meth:`advance` (any qdisc's
    dequeue, or the node timer at :meth:`next_wakeup_ns`); read :attr:`decisions`
    (key -> Decision) and :attr:`counters`."""

    def __init__(self, config: IbConfig) -> None:
        self.config = config
        n = config.n_ports
        self.last = -1                    # latest decided instant (the kernel starts at 0: stamps are > 0)
        self.seq = 0
        self.pending: list[deque[_Pkt]] = [deque() for _ in range(n)]   # per input, (arrival, seq) ascending
        self.voq: list[list[deque[_Pkt]]] = [[deque() for _ in range(n)] for _ in range(n)]
        self.voq_bytes = [[0] * n for _ in range(n)]
        self.in_bytes = [0] * n
        self.out_wait_ns = [0] * n            # per output: taus of the packets in its VOQs (every input)
        self.node_bytes = 0
        self.waiting = 0
        self.in_free = [0] * n
        self.out_free = [0] * n
        self.grant_ptr = [0] * n
        self.accept_ptr = [0] * n
        self.decisions: dict[int, Decision] = {}
        self.counters = Counters(n)
        self._late_keys: set[int] = set()

    # ---- the qdisc entry points ----
    def enqueue(self, key: int, arrival: Arrival, now_ns: int) -> None:
        """Packet ``key`` reaches its output's qdisc at real time ``now_ns``. Raises
        ValueError for a port out of range or a frame shorter than 1 ns at its output."""
        n = self.config.n_ports
        if not (0 <= arrival.in_port < n and 0 <= arrival.out_port < n):
            raise ValueError(f"packet {key}: ports ({arrival.in_port}, {arrival.out_port}); accepted: 0..{n - 1}")
        if self._tau(arrival.frame_bytes, arrival.out_port) < 1:
            raise ValueError(f"packet {key}: frame_bytes={arrival.frame_bytes} lasts < 1 ns at its output")
        c = self.counters
        late_ns = max(0, now_ns - arrival.arrival_ns)
        c.max_enqueue_late_ns = max(c.max_enqueue_late_ns, late_ns)
        c.late_log2[late_bucket(late_ns)] += 1
        a = arrival.arrival_ns
        if a <= self.last:
            c.late[arrival.out_port] += 1
            self._late_keys.add(key)
            a = self.last
        p = _Pkt(key, a, arrival.frame_bytes, max(arrival.frame_bytes - ETH_HLEN, 0), arrival.in_port,
                 arrival.out_port, self.seq)
        self.seq += 1
        q = self.pending[p.in_port]
        if not q or (q[-1].arrival_ns, q[-1].seq) <= (a, p.seq):
            q.append(p)
        else:                             # reordered on its input: sorted insertion (rare)
            at = next(k for k, x in enumerate(q) if (x.arrival_ns, x.seq) > (a, p.seq))
            q.insert(at, p)
        self.advance(now_ns)

    def advance(self, now_ns: int) -> None:
        """Decide every instant t <= now_ns - M not decided yet (the kernel's
        ``voq_advance``)."""
        horizon = now_ns - self.config.lookahead_ns
        while True:
            ta, tr = self._next_arrival(), self._next_release()
            t = min(ta, tr)
            if t > horizon:
                return
            self.counters.max_decision_lag_ns = max(self.counters.max_decision_lag_ns, horizon - t)
            if self.waiting and tr == t:
                self._schedule(t, now_ns)
            for q in self.pending:
                while q and q[0].arrival_ns == t:
                    self._arrive(q.popleft(), t, now_ns)
            self.last = t

    def next_wakeup_ns(self) -> int | None:
        """Real time at which the node's timer is armed: the next event instant + M (None
        when nothing is pending or waiting)."""
        t = min(self._next_arrival(), self._next_release())
        return None if t == _INF else int(t) + self.config.lookahead_ns

    # ---- internals (the kernel's static functions) ----
    def _tau(self, frame_bytes: int, out_port: int) -> int:
        return frame_bytes * self.config.ports[out_port].ps_per_byte // 1000

    def _next_arrival(self) -> float:
        return min((q[0].arrival_ns for q in self.pending if q), default=_INF)

    def _next_release(self) -> float:
        if not self.waiting:
            return _INF
        return min((x for x in (*self.in_free, *self.out_free) if x > self.last), default=_INF)

    def _arrive(self, p: _Pkt, t: int, now_ns: int) -> None:
        i, o, cfg = p.in_port, p.out_port, self.config
        backlog = max(0, self.out_free[o] - t) + self.out_wait_ns[o]
        # (the empty-VOQ test is the rule; after a maximal scheduling pass a free input
        # and a free output never leave a packet waiting between them, so it never decides)
        if self.in_free[i] <= t and self.out_free[o] <= t and not self.voq[i][o]:
            self.counters.cut[o] += 1
            self._xcp_account(p, t, backlog, False)
            self._depart(p, t, now_ns, "cut")
            return
        if cfg.voq_split == "shared":
            room = self.in_bytes[i] + p.ip_bytes <= cfg.buffer_bytes
        else:
            room = (self.voq_bytes[i][o] + p.ip_bytes) * cfg.n_ports <= cfg.buffer_bytes
        self._xcp_account(p, t, backlog, not room)
        if not room:
            self.counters.dropped[o] += 1
            self.counters.in_dropped[i] += 1
            self.decisions[p.key] = Decision("dropped", None, None, now_ns, None, p.key in self._late_keys)
            return
        self.voq[i][o].append(p)
        self.voq_bytes[i][o] += p.ip_bytes
        self.out_wait_ns[o] += self._tau(p.frame_bytes, o)
        self.in_bytes[i] += p.ip_bytes
        self.node_bytes += p.ip_bytes
        self.waiting += 1
        c = self.counters
        c.buffered[o] += 1
        c.in_max_bytes[i] = max(c.in_max_bytes[i], self.in_bytes[i])
        c.max_node_bytes = max(c.max_node_bytes, self.node_bytes)

    def _xcp_account(self, p: _Pkt, t: int, backlog_ns: int, dropped: bool) -> None:
        """``p``, decided for its output at instant t having found ``backlog_ns``, into
        the slot of interval (t - E) // d_e (ring on, t >= E): a slot of another interval
        restarts (the kernel's ``voq_xcp_account``)."""
        cfg = self.config
        if not cfg.xcp_interval_ns or t < cfg.xcp_epoch_ns:
            return
        key = (p.out_port, (t - cfg.xcp_epoch_ns) // cfg.xcp_interval_ns)
        s = self.counters.xcp.get(key, EMPTY_XCP_SLOT)
        self.counters.xcp[key] = XcpSlot(key[1], s.bytes + p.frame_bytes, min(s.qmin_ns, backlog_ns), s.packets + 1,
                                         s.drops + dropped)

    def _depart(self, p: _Pkt, t: int, now_ns: int, kind: str) -> None:
        """``p``'s head leaves at t: both its ports busy for tau, stamped, to its output's
        ready list (released at max(stamp, now))."""
        port = self.config.ports[p.out_port]
        tau = self._tau(p.frame_bytes, p.out_port)
        self.in_free[p.in_port] = self.out_free[p.out_port] = t + tau
        stamp = t + port.prop_ns + (tau if port.peer_host else 0)
        if now_ns > stamp:
            self.counters.decided_after_stamp[p.out_port] += 1
        self.decisions[p.key] = Decision(kind, t, stamp, now_ns, max(stamp, now_ns), p.key in self._late_keys)

    def _serve(self, i: int, o: int, t: int, now_ns: int) -> None:
        p = self.voq[i][o].popleft()
        self.voq_bytes[i][o] -= p.ip_bytes
        self.out_wait_ns[o] -= self._tau(p.frame_bytes, o)
        self.in_bytes[i] -= p.ip_bytes
        self.node_bytes -= p.ip_bytes
        self.waiting -= 1
        self._depart(p, t, now_ns, "buffered")

    def _schedule(self, t: int, now_ns: int) -> None:
        if self.config.scheduler == "rr":
            self._schedule_rr(t, now_ns)
        else:
            self._schedule_islip(t, now_ns)

    def _schedule_rr(self, t: int, now_ns: int) -> None:
        n = self.config.n_ports
        for o in range(n):
            if self.out_free[o] > t:
                continue
            for step in range(n):
                i = (self.grant_ptr[o] + step) % n
                if self.voq[i][o] and self.in_free[i] <= t:
                    self._serve(i, o, t, now_ns)
                    self.grant_ptr[o] = (i + 1) % n
                    break

    def _schedule_islip(self, t: int, now_ns: int) -> None:
        n = self.config.n_ports
        free_in = [self.in_free[i] <= t for i in range(n)]
        free_out = [self.out_free[o] <= t for o in range(n)]
        first = True
        while True:
            granted: list[list[int]] = [[] for _ in range(n)]      # per input: outputs granting it
            for o in range(n):
                if not free_out[o]:
                    continue
                for step in range(n):
                    i = (self.grant_ptr[o] + step) % n
                    if free_in[i] and self.voq[i][o]:
                        granted[i].append(o)
                        break
            matches = [(i, min(g, key=lambda x, i=i: (x - self.accept_ptr[i]) % n))
                       for i, g in enumerate(granted) if g]
            if not matches:
                return
            for i, o in matches:
                if first:
                    self.grant_ptr[o] = (i + 1) % n
                    self.accept_ptr[i] = (o + 1) % n
                self._serve(i, o, t, now_ns)
                free_in[i] = free_out[o] = False
            first = False



class Node(Protocol):
    """What :func:`drive` needs of a node mirror (:class:`IbNode`,
    ``testbed.optical.hybridsched.HybridNode``): the qdisc entry points and the results."""

    decisions: dict[int, Decision]

    def enqueue(self, key: int, arrival: Arrival, now_ns: int) -> None: ...

    def advance(self, now_ns: int) -> None: ...

    def next_wakeup_ns(self) -> int | None: ...


def drive(node: Node, arrivals: Sequence[Arrival], *, timer_lag_ns: int = 0,
          polls: Iterable[int] = ()) -> list[Decision]:
    """Drive ``node`` in real time over ``arrivals``; return their decisions (in input
    order).

    Real-time events, in time order: each packet's enqueue at ``enqueue_ns`` (ties in
    the order given), extra ``polls`` (real times at which some qdisc's dequeue runs
    ``advance``) and the node timer, which fires ``timer_lag_ns`` after
    ``node.next_wakeup_ns()``. Enqueues come first at equal times, then polls, then
    the timer. Raises ValueError for a negative ``timer_lag_ns`` or a bad packet.
    """
    if timer_lag_ns < 0:
        raise ValueError(f"timer_lag_ns={timer_lag_ns}: accepted range is timer_lag_ns >= 0")
    order = sorted(range(len(arrivals)), key=lambda k: arrivals[k].reached_ns)
    extra = sorted(polls)
    k = j = 0
    while True:
        wake = node.next_wakeup_ns()
        timer = None if wake is None else wake + timer_lag_ns
        nxt_enq = arrivals[order[k]].reached_ns if k < len(order) else None
        nxt_poll = extra[j] if j < len(extra) else None
        candidates = [(t, rank) for rank, t in enumerate((nxt_enq, nxt_poll, timer)) if t is not None]
        if not candidates:
            break
        t, rank = min(candidates)
        if rank == 0:
            node.enqueue(order[k], arrivals[order[k]], t)
            k += 1
        elif rank == 1:
            node.advance(t)
            j += 1
        else:
            node.advance(t)
    return [node.decisions[k] for k in range(len(arrivals))]


def run(arrivals: Sequence[Arrival], config: IbConfig, *, timer_lag_ns: int = 0,
        polls: Iterable[int] = ()) -> tuple[list[Decision], Counters]:
    """Drive one IB node over ``arrivals`` (:func:`drive`); return their decisions (in
    input order) and the counters. Raises ValueError as :func:`drive`."""
    node = IbNode(config)
    return drive(node, arrivals, timer_lag_ns=timer_lag_ns, polls=polls), node.counters
