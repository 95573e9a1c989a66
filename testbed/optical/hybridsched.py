"""E1's hybrid switch as the ``voq`` qdisc's ``hybrid`` scheduler realises it: a mirror in
Python of the kernel's algorithm (``kernel/sch_voq.c``; design in docs/hybrid-holding.md).

Semantics are those of the reference ``testbed.optical.eventsim`` (``simulate(...,
"hybrid", n_e, ...)``, written from Minakhmetov, Ware, Iannone, sections II and IV); this
module does not import it, so that the tests can hold one against the other. A node of
N = n_a ports with n_e buffer inputs and n_e buffer outputs:

* an arrival at t cuts through if its output is free at t (whatever waits for it);
  else it takes the lowest free buffer input for tau (OE: the buffer input is free for
  it only if released *before* t: a bufferisation ending at t still holds it, the
  paper's residual loss); else it is dropped;
* at the end of its bufferisation (t + tau) it joins its output's FIFO; FIFOs are in
  order of joining (joins of one instant in arrival order);
* a buffered packet leaves when it is first in its FIFO, its output is free and a buffer
  output is free (the lowest), holding both for tau; among heads that can leave at one
  instant, the one that joined first goes first;
* the order of one instant t: releases (ports whose tau ends at t are free at t),
  dispatch of the waiting heads, the arrivals of t in input order, the joins of t,
  dispatch again (eventsim's module docstring, "Order of the events of one instant").

How the kernel gets there is :mod:`testbed.optical.ibsched`'s (the same qdisc): packets
reach the node in real time, an instant t is decided once real time has passed t + M,
an arrival reaching the node after its instant was decided is *late* and decided at the
last decided instant; a forwarded packet is stamped with its intended arrival at the next
node (departure + propagation, + tau towards a host) and released at max(stamp, real time
of its departure decision). With no late arrival the decisions are eventsim's.

Occupancy: the buffer holds a buffered packet from its arrival until its head leaves
(eventsim's ``Stats.max_waiting``, the port model's ``max_occ_bytes``), counted in
*frame* bytes (E1's occupancy; the ``ib`` scheduler counts IP bytes, E5's). The maxima
are taken at the end of each decided instant (departures of an instant before its
arrivals, as eventsim counts). ``Counters.in_max_bytes[i]``: most bytes waiting that
came in on input i; ``in_dropped[i]``: drops of packets that came in on it.

Units: times are integer ns, lengths bytes; tau = frame_bytes * ps_per_byte(output) //
1000 ns.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Iterable, Sequence

from testbed.optical.ibsched import _INF, Arrival, Counters, Decision, IbNode, PortParams, _Pkt, check_ports, drive


@dataclass(frozen=True)
class HybridConfig:
    """A hybrid node: ``ports`` (one PortParams per azimuth; n_a = their number), ``n_e``
    buffer input = buffer output ports (0..n_a; 0 is the all-optical switch) and the
    lookahead ``lookahead_ns`` M (ns, >= 1). Raises ValueError naming the argument, its
    value and the accepted range."""

    ports: tuple[PortParams, ...]
    n_e: int
    lookahead_ns: int

    def __post_init__(self) -> None:
        check_ports(self.ports)
        if not 0 <= self.n_e <= len(self.ports):
            raise ValueError(f"n_e={self.n_e}: accepted range is 0 <= n_e <= n_a = {len(self.ports)}")
        if self.lookahead_ns < 1:
            raise ValueError(f"lookahead_ns={self.lookahead_ns}: accepted range is lookahead_ns >= 1")

    @property
    def n_ports(self) -> int:
        return len(self.ports)

    @classmethod
    def uniform(cls, n_ports: int, ps_per_byte: int, n_e: int, lookahead_ns: int, *, prop_ns: int = 0,
                peer_host: bool = False) -> "HybridConfig":
        """A node whose ``n_ports`` ports share one rate, propagation and peer kind."""
        return cls(tuple(PortParams(ps_per_byte, prop_ns, peer_host) for _ in range(n_ports)), n_e, lookahead_ns)


class HybridNode(IbNode):
    """The node's state and event loop as the kernel keeps them in ``hybrid`` mode. The
    entry points (:meth:`enqueue`, :meth:`advance`, :meth:`next_wakeup_ns`), the pending
    lists, the lateness rule, stamps and :attr:`decisions` are :class:`IbNode`'s; the
    fabric is the hybrid switch's (``IbNode._depart`` still sets the input's fabric port
    busy, as the kernel's ``voq_depart``: no hybrid rule reads it)."""

    def __init__(self, config: HybridConfig) -> None:  # (an IbNode of HybridConfig: same fields used)
        super().__init__(config)  # type: ignore[arg-type]
        n_e = config.n_e
        self.bin_free = [-1] * n_e            # instant each buffer input's bufferisation ends
        self.bout_free = [-1] * n_e           # instant each buffer output's emission ends
        self.converting: list[tuple[int, int, _Pkt]] = []   # (join instant, arrival rank, packet)
        self.fifo: list[deque[tuple[int, _Pkt]]] = [deque() for _ in range(config.n_ports)]  # (join order, p)
        self.queued = 0                       # packets in the FIFOs
        self.rank = 0                         # arrivals decided so far (eventsim's arrival rank)
        self.joins = 0                        # packets joined so far (their FIFO order)
        self.in_wait_bytes = [0] * config.n_ports   # frame bytes waiting, by input
        self.wait_bytes = 0                   # frame bytes waiting (converting or queued)

    def advance(self, now_ns: int) -> None:
        """Decide every instant t <= now_ns - M not decided yet (the kernel's
        ``voq_advance`` in hybrid mode)."""
        horizon = now_ns - self.config.lookahead_ns
        while True:
            t = min(self._next_arrival(), self._next_release(), self._next_join())
            if t > horizon:
                return
            self.counters.max_decision_lag_ns = max(self.counters.max_decision_lag_ns, horizon - t)
            self._dispatch(t, now_ns)
            for q in self.pending:
                while q and q[0].arrival_ns == t:
                    self._arrive(q.popleft(), t, now_ns)
            joining = sorted((x for x in self.converting if x[0] == t), key=lambda x: x[1])
            if joining:
                self.converting = [x for x in self.converting if x[0] != t]
                for _, _, p in joining:
                    self.fifo[p.out_port].append((self.joins, p))
                    self.joins += 1
                    self.queued += 1
                self._dispatch(t, now_ns)
            c = self.counters
            c.max_node_bytes = max(c.max_node_bytes, self.wait_bytes)
            for i, b in enumerate(self.in_wait_bytes):
                c.in_max_bytes[i] = max(c.in_max_bytes[i], b)
            self.last = t

    def next_wakeup_ns(self) -> int | None:
        """Real time at which the node's timer is armed: the next event instant + M (None
        when nothing is pending, converting or queued)."""
        t = min(self._next_arrival(), self._next_release(), self._next_join())
        return None if t == _INF else int(t) + self.config.lookahead_ns

    # ---- internals (the kernel's hybrid functions) ----
    def _next_release(self) -> float:
        if not self.queued:
            return _INF
        return min((x for x in (*self.out_free, *self.bout_free) if x > self.last), default=_INF)

    def _next_join(self) -> float:
        return min((x[0] for x in self.converting), default=_INF)

    def _arrive(self, p: _Pkt, t: int, now_ns: int) -> None:
        o, c = p.out_port, self.counters
        self.rank += 1
        if self.out_free[o] <= t:
            c.cut[o] += 1
            self._depart(p, t, now_ns, "cut")
            return
        k = next((k for k, f in enumerate(self.bin_free) if f < t), -1)
        if k < 0:
            c.dropped[o] += 1
            c.in_dropped[p.in_port] += 1
            self.decisions[p.key] = Decision("dropped", None, None, now_ns, None, p.key in self._late_keys)
            return
        tau = self._tau(p.frame_bytes, o)
        self.bin_free[k] = t + tau
        self.converting.append((t + tau, self.rank, p))
        self.in_wait_bytes[p.in_port] += p.frame_bytes
        self.wait_bytes += p.frame_bytes
        c.buffered[o] += 1

    def _dispatch(self, t: int, now_ns: int) -> None:
        """FIFO heads whose output is free leave through the lowest free buffer output,
        the earliest joined first, while a buffer output is free."""
        while self.queued:
            heads = [(q[0][0], o) for o, q in enumerate(self.fifo) if q and self.out_free[o] <= t]
            if not heads:
                return
            k = next((k for k, f in enumerate(self.bout_free) if f <= t), -1)
            if k < 0:
                return
            _, o = min(heads)
            _, p = self.fifo[o].popleft()
            self.queued -= 1
            self.bout_free[k] = t + self._tau(p.frame_bytes, o)
            self.in_wait_bytes[p.in_port] -= p.frame_bytes
            self.wait_bytes -= p.frame_bytes
            self._depart(p, t, now_ns, "buffered")


def run(arrivals: Sequence[Arrival], config: HybridConfig, *, timer_lag_ns: int = 0,
        polls: Iterable[int] = ()) -> tuple[list[Decision], Counters]:
    """Drive one hybrid node over ``arrivals`` (:func:`testbed.optical.ibsched.drive`);
    return their decisions (in input order) and the counters. Raises ValueError for a
    negative ``timer_lag_ns`` or a bad packet."""
    node = HybridNode(config)
    return drive(node, arrivals, timer_lag_ns=timer_lag_ns, polls=polls), node.counters
