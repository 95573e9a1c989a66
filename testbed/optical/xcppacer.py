"""E5's XCP edge pacer as the ``xcppace`` qdisc realises it: a mirror in Python of the
kernel's algorithm (``kernel/sch_xcppace.c``; design in docs/xcp-edge.md, "(a) The edge
pacer"). Same event loop, same lookahead rule, same decisions and counters; the tests
hold it against hand-computed cases, against ``testbed.xcpsim``'s pacer and first link,
and the C against it packet for packet (tests/unit/test_xcppace*.py).

The pacer, on the intended timeline (integer ns):

* a packet of class m arriving (its head) at a is received whole at ready = a + tau,
  tau = frame_bytes * ps_per_byte // 1000 (the frame at the link's rate);
* **admission** at ready, against the class's rate R in force: the wait estimate is
  w = max(0, last_e + gap(L_last, R) - ready) + ns(bucket bytes, R) (0 for the first
  term if the bucket never released a packet); w > max_wait: dropped (``drops``);
  else appended to the class's FIFO. A class of rate 0 is unused: its packets are
  dropped and counted ``unmodelled``;
* **the bucket**: the class's first packet not yet released by it becomes *eligible*
  at e = max(ready, last_e + gap(L_last, R), the instant of the class's last rate
  change), gap(L, R) = max(1, ns(L, R)), ns(b, R) = round(8e9 b / R) (half up);
* **the link**: whenever it is free and packets are eligible, the one with the earliest
  eligibility (ties: lower class) departs; the link is then busy for its tau. Its stamp
  is departure + prop_ns (its intended arrival at the next node) and it leaves the
  qdisc at max(stamp, the real time of the decision);
* **rate changes** (:class:`RateChange`) are events at their instant, before that
  instant's arrivals; one reaching the qdisc when its instant is decided already is
  applied at the last decided instant (``late_rates``; ``max_rate_late_ns`` = real time
  - (effective + M));
* at one instant: rate changes, arrivals (admission), bucket releases (class order),
  departures.

How the kernel gets there (as testbed.optical.ibsched for voq): packets and rate changes
reach the qdisc at real times; the instant t is decided once real time has passed t + M
(``lookahead_ns``), in :meth:`Pacer.advance`, which the kernel runs at every enqueue,
dequeue, rate change and from its timer (armed at the next event instant + M). An
arrival whose ready instant is not after the last decided instant is *late*: counted,
and decided at that instant.

Counters per interval k = [epoch + k d, epoch + (k+1) d) (:class:`PacerInterval`): per
class and for the port the bytes and packets departing in k; and, by eligibility (the
packet's arrival in the link's queue, as testbed.xcpsim counts a link's input), the bytes
and packets the buckets released in k and the smallest link backlog one of them found
(its departure - its eligibility, ns: known at eligibility, since the link serves
eligible packets in order). The qdisc's packet ``limit`` is not modelled
(the kernel drops at enqueue above it: ``overlimit``).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

NS_PER_S = 1_000_000_000
#: the constants of kernel/xcppace.h (tests/unit/test_xcppace.py compares them with the header)
MAX_CLASSES = 64
SLOTS = 4
LATE_BUCKETS = 48
#: rate changes that may wait for their instant in one qdisc; a request that would
#: exceed it is refused whole
MAX_PENDING = 1024
#: the module's bounds (inclusive), as kernel/xcppace.h and xp_parse() in sch_xcppace.c
LIMIT_BOUNDS = (1, 10_000_000)
TIME_BOUNDS = (0, 3_600_000_000_000)
LOOKAHEAD_BOUNDS = (1, 3_600_000_000_000)
INTERVAL_BOUNDS = (1, 3_600_000_000_000)
PS_PER_BYTE_BOUNDS = (1, 8_000_000_000)
RATE_BOUNDS = (0, 8_000_000_000_000)
CLASSES_BOUNDS = (1, MAX_CLASSES)
U64_MAX = 2**64 - 1
DEFAULT_LIMIT = 1_000_000
_INF = math.inf


class PacerError(ValueError):
    """An option, rate change or packet the xcppace qdisc would refuse; names the field,
    the value and the accepted range."""


def _check(name: str, value: object, bounds: tuple[int, int], unit: str = "") -> None:
    lo, hi = bounds
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise PacerError(f"xcppace {name}={value!r} out of range: an integer {lo}..{hi}{unit}")


def ns_at(nbytes: int, rate_bps: int) -> int:
    """round(8e9 nbytes / rate_bps) ns, halves up (the qdisc's ``xp_ns``)."""
    return (16 * NS_PER_S * nbytes + rate_bps) // (2 * rate_bps)


def gap_ns(frame_bytes: int, rate_bps: int) -> int:
    """The leaky bucket's spacing after a packet of ``frame_bytes`` at ``rate_bps``: at
    least 1 ns."""
    return max(1, ns_at(frame_bytes, rate_bps))


def late_bucket(late_ns: int) -> int:
    """Histogram bucket of an enqueue lateness (ns >= 0): floor(log2), 0 for 0 and 1,
    capped at LATE_BUCKETS - 1."""
    return min(max(late_ns, 1).bit_length() - 1, LATE_BUCKETS - 1)


@dataclass(frozen=True)
class PacerConfig:
    """One pacer: ``nclasses`` classes, the link (``ps_per_byte``, ``prop_ns``), the wait
    bound ``max_wait_ns``, the lookahead M ``lookahead_ns``, the intervals (``epoch_ns``,
    ``interval_ns``), the initial rate of each class (``rates_bps``, emulation bit/s, one
    per class, 0 = unused) and the qdisc's packet ``limit``. Emulation ns and bit/s.
    Raises PacerError naming the field, the value and the module's range."""

    nclasses: int
    ps_per_byte: int
    prop_ns: int
    max_wait_ns: int
    lookahead_ns: int
    epoch_ns: int
    interval_ns: int
    rates_bps: tuple[int, ...]
    limit: int = DEFAULT_LIMIT

    def __post_init__(self) -> None:
        _check("nclasses", self.nclasses, CLASSES_BOUNDS)
        _check("ps_per_byte", self.ps_per_byte, PS_PER_BYTE_BOUNDS, " ps per byte")
        _check("prop_ns", self.prop_ns, TIME_BOUNDS, " ns")
        _check("max_wait_ns", self.max_wait_ns, TIME_BOUNDS, " ns")
        _check("lookahead_ns", self.lookahead_ns, LOOKAHEAD_BOUNDS, " ns")
        _check("epoch_ns", self.epoch_ns, (0, U64_MAX), " ns")
        _check("interval_ns", self.interval_ns, INTERVAL_BOUNDS, " ns")
        _check("limit", self.limit, LIMIT_BOUNDS, " packets")
        if len(self.rates_bps) != self.nclasses:
            raise PacerError(f"xcppace rates_bps has {len(self.rates_bps)} rates: one per class ({self.nclasses})")
        for k, r in enumerate(self.rates_bps):
            _check(f"rates_bps[{k}]", r, RATE_BOUNDS, " bit/s (0: class unused)")


@dataclass(frozen=True)
class RateChange:
    """Class ``cls`` paces at ``rate_bps`` (emulation bit/s, >= 1) from the instant
    ``effective_ns`` (emulation ns, CLOCK_MONOTONIC) on."""

    cls: int
    rate_bps: int
    effective_ns: int


@dataclass(frozen=True)
class RateRequest:
    """One netlink request of rate ``changes`` reaching the qdisc at real time ``reached_ns``."""

    changes: tuple[RateChange, ...]
    reached_ns: int


@dataclass(frozen=True)
class Arrival:
    """A packet reaching the pacer: ``arrival_ns`` its intended arrival (its head; the
    stamp), ``frame_bytes``, ``cls`` its class, ``enqueue_ns`` the real time it reaches the
    qdisc (None: on time, = arrival_ns)."""

    arrival_ns: int
    frame_bytes: int
    cls: int
    enqueue_ns: int | None = None

    @property
    def reached_ns(self) -> int:
        """Real time it reaches the qdisc (ns)."""
        return self.arrival_ns if self.enqueue_ns is None else self.enqueue_ns


@dataclass(frozen=True)
class Decision:
    """What the pacer did with one packet. ``kind``: "released", "dropped" (wait bound)
    or "unmodelled" (class out of range or unused). ``eligible_ns``: when the bucket
    released it; ``departure_ns``: when its head left on the link; ``stamp_ns``: its
    intended arrival at the next node; ``decided_ns``: real time of the decision that
    fixed its fate; ``release_ns``: real time it leaves the qdisc, max(stamp, decided);
    ``late``: it reached the qdisc after its ready instant had been decided."""

    kind: str
    eligible_ns: int | None
    departure_ns: int | None
    stamp_ns: int | None
    decided_ns: int
    release_ns: int | None
    late: bool


@dataclass(frozen=True)
class PacerInterval:
    """Interval k of the pacer: frame ``bytes`` and ``packets`` departing onto the link
    in k, ``qmin_ns`` the smallest link backlog (departure - eligibility, ns) found by a
    packet made eligible in k (None: none; XCP's persistent queue), per class the same bytes and packets
    (``class_bytes[c]``, ``class_packets[c]``, c < nclasses), and the bytes and packets
    the buckets released (made eligible) in k (``offered_bytes``, ``offered_packets``:
    the link's input, as testbed.xcpsim counts its links' input)."""

    bytes: int
    packets: int
    qmin_ns: int | None
    class_bytes: tuple[int, ...]
    class_packets: tuple[int, ...]
    offered_bytes: int = 0
    offered_packets: int = 0


@dataclass
class Counters:
    """The qdisc's counters (kernel/xcppace.h, ``struct tc_xcppace_xstats`` and the
    classes' ``struct tc_xcppace_class_xstats``): see there for each field."""

    nclasses: int
    arrivals: int = 0
    drops: int = 0
    released: int = 0
    released_bytes: int = 0
    late: int = 0
    late_rates: int = 0
    max_rate_late_ns: int = 0
    decided_after_stamp: int = 0
    unmodelled: int = 0
    max_enqueue_late_ns: int = 0
    max_decision_lag_ns: int = 0
    before_epoch: int = 0
    rate_changes: int = 0
    late_log2: list[int] = field(default_factory=lambda: [0] * LATE_BUCKETS)
    class_arrivals: list[int] = field(default_factory=list)
    class_drops: list[int] = field(default_factory=list)
    class_released: list[int] = field(default_factory=list)
    class_released_bytes: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        for name in ("class_arrivals", "class_drops", "class_released", "class_released_bytes"):
            if not getattr(self, name):
                setattr(self, name, [0] * self.nclasses)


@dataclass
class _Pkt:
    key: int
    ready: int
    frame_bytes: int
    cls: int
    seq: int
    e: int = 0


@dataclass
class _Class:
    rate: int
    q: deque = field(default_factory=deque)     # eligible packets, then the bucket's
    nelig: int = 0
    floor: int = 0
    last_e: int = 0
    last_len: int = 0
    started: bool = False
    bucket_bytes: int = 0

    def bucket_head(self) -> _Pkt | None:
        return self.q[self.nelig] if self.nelig < len(self.q) else None

    def eligible(self, p: _Pkt) -> int:
        e = max(p.ready, self.floor)
        if self.started:
            e = max(e, self.last_e + gap_ns(self.last_len, self.rate))
        return e


class Pacer:
    """The qdisc's state and event loop, as the kernel keeps them. Drive it with
    :meth:`enqueue`, :meth:`set_rates` and :meth:`advance` (the kernel's dequeue and
    timer, at :meth:`next_wakeup_ns`); read :attr:`decisions` (key -> Decision),
    :attr:`counters`, :meth:`intervals`, :attr:`rates`."""

    def __init__(self, config: PacerConfig) -> None:
        self.config = config
        self.classes = [_Class(r) for r in config.rates_bps]
        self.last = 0
        self.link_free = 0
        self.elig_tau = 0                                 # link time of the eligible packets (ns)
        self.seq = 0
        self.pending: list[_Pkt] = []                     # by (ready, seq)
        self.rate_q: list[tuple[int, RateChange]] = []    # (instant, change), stable by instant
        self.decisions: dict[int, Decision] = {}
        self.counters = Counters(config.nclasses)
        self._late_keys: set[int] = set()
        self._next_e: list[float] = [_INF] * config.nclasses
        self._ivl: dict[int, list] = {}

    @property
    def rates(self) -> list[int]:
        """The rate in force per class (bit/s)."""
        return [c.rate for c in self.classes]

    # ---- the qdisc entry points ----
    def enqueue(self, key: int, arrival: Arrival, now_ns: int) -> None:
        """Packet ``key`` reaches the qdisc at real time ``now_ns`` (the kernel's
        xp_enqueue): a class out of range is unmodelled at once."""
        c = self.counters
        if not 0 <= arrival.cls < self.config.nclasses:
            c.unmodelled += 1
            self.decisions[key] = Decision("unmodelled", None, None, None, now_ns, None, False)
            return
        late_ns = max(0, now_ns - arrival.arrival_ns)
        c.max_enqueue_late_ns = max(c.max_enqueue_late_ns, late_ns)
        c.late_log2[late_bucket(late_ns)] += 1
        ready = arrival.arrival_ns + self._tau(arrival.frame_bytes)
        if ready <= self.last:
            c.late += 1
            self._late_keys.add(key)
            ready = self.last
        p = _Pkt(key, ready, arrival.frame_bytes, arrival.cls, self.seq)
        self.seq += 1
        at = len(self.pending)
        while at and self.pending[at - 1].ready > ready:
            at -= 1
        self.pending.insert(at, p)
        self.advance(now_ns)

    def set_rates(self, changes: Sequence[RateChange], now_ns: int) -> None:
        """A rate-change request reaching the qdisc at real time ``now_ns`` (the kernel's
        xp_change). Raises PacerError, applying none, when a class is not below
        nclasses, a rate is not 1..8e12 bit/s, the request is empty or more than
        MAX_PENDING would wait."""
        if not changes:
            raise PacerError("a rate-change request needs at least one change")
        for ch in changes:
            _check("rate change cls", ch.cls, (0, self.config.nclasses - 1))
            _check("rate change rate_bps", ch.rate_bps, (1, RATE_BOUNDS[1]), " bit/s")
            _check("rate change effective_ns", ch.effective_ns, (0, U64_MAX), " ns")
        if len(self.rate_q) + len(changes) > MAX_PENDING:
            raise PacerError(f"{len(self.rate_q)} rate changes pending and {len(changes)} more: at most "
                             f"{MAX_PENDING} may wait")
        c = self.counters
        for ch in changes:
            at = ch.effective_ns
            if at <= self.last:
                c.late_rates += 1
                c.max_rate_late_ns = max(c.max_rate_late_ns, now_ns - (ch.effective_ns + self.config.lookahead_ns))
                at = self.last
            j = len(self.rate_q)
            while j and self.rate_q[j - 1][0] > at:
                j -= 1
            self.rate_q.insert(j, (at, ch))
        self.advance(now_ns)

    def advance(self, now_ns: int) -> None:
        """Decide every instant t <= now_ns - M not decided yet (the kernel's xp_advance)."""
        horizon = now_ns - self.config.lookahead_ns
        while True:
            t = self._next_event()
            if t > horizon:
                return
            self.counters.max_decision_lag_ns = max(self.counters.max_decision_lag_ns, horizon - t)
            while self.rate_q and self.rate_q[0][0] <= t:
                self._apply_rate(self.rate_q.pop(0)[1], t)
            while self.pending and self.pending[0].ready <= t:
                self._admit(self.pending.pop(0), t, now_ns)
            for k, c in enumerate(self.classes):
                if self._next_e[k] <= t:
                    self._bucket_release(k, t)
            while self._eligible() and self.link_free <= t:
                self._depart(t, now_ns)
            self.last = t

    def next_wakeup_ns(self) -> int | None:
        """Real time at which the qdisc's timer is armed: the next event instant + M (None
        when nothing waits)."""
        t = self._next_event()
        return None if t == _INF else int(t) + self.config.lookahead_ns

    def intervals(self) -> dict[int, PacerInterval]:
        """{k: interval k} for every interval with a departure or a bucket release (all of
        them; the qdisc keeps the last SLOTS)."""
        return {k: PacerInterval(v[0], v[1], None if v[2] is None else v[2], tuple(v[5]), tuple(v[6]), v[3], v[4])
                for k, v in sorted(self._ivl.items())}

    def queued(self) -> list[tuple[int, int, int]]:
        """Per class (bytes, packets, of which eligible) in the class now."""
        return [(sum(p.frame_bytes for p in c.q), len(c.q), c.nelig) for c in self.classes]

    # ---- internals (the kernel's static functions) ----
    def _tau(self, frame_bytes: int) -> int:
        return frame_bytes * self.config.ps_per_byte // 1000

    def _eligible(self) -> bool:
        return any(c.nelig for c in self.classes)

    def _next_event(self) -> float:
        t = min(self._next_e, default=_INF)
        if self.rate_q:
            t = min(t, self.rate_q[0][0])
        if self.pending:
            t = min(t, self.pending[0].ready)
        if self._eligible():
            t = min(t, self.link_free)
        return t

    def _interval(self, t: int) -> list | None:
        if t < self.config.epoch_ns:
            return None
        k = (t - self.config.epoch_ns) // self.config.interval_ns
        n = self.config.nclasses
        return self._ivl.setdefault(k, [0, 0, None, 0, 0, [0] * n, [0] * n])

    def _apply_rate(self, ch: RateChange, t: int) -> None:
        c = self.classes[ch.cls]
        c.rate, c.floor = ch.rate_bps, t
        head = c.bucket_head()
        if head is not None:
            self._next_e[ch.cls] = c.eligible(head)
        self.counters.rate_changes += 1

    def _admit(self, p: _Pkt, t: int, now_ns: int) -> None:
        c, k, cnt = self.classes[p.cls], p.cls, self.counters
        late = p.key in self._late_keys
        if not c.rate:
            cnt.unmodelled += 1
            self.decisions[p.key] = Decision("unmodelled", None, None, None, now_ns, None, late)
            return
        cnt.arrivals += 1
        cnt.class_arrivals[k] += 1
        w = max(0, c.last_e + gap_ns(c.last_len, c.rate) - t) if c.started else 0
        w += ns_at(c.bucket_bytes, c.rate)
        if w > self.config.max_wait_ns:
            cnt.drops += 1
            cnt.class_drops[k] += 1
            self.decisions[p.key] = Decision("dropped", None, None, None, now_ns, None, late)
            return
        c.q.append(p)
        c.bucket_bytes += p.frame_bytes
        if c.bucket_head() is p:
            self._next_e[k] = c.eligible(p)

    def _bucket_release(self, k: int, t: int) -> None:
        c = self.classes[k]
        p = c.bucket_head()
        assert p is not None
        p.e = t
        c.last_e, c.last_len, c.started = t, p.frame_bytes, True
        c.nelig += 1
        c.bucket_bytes -= p.frame_bytes
        iv = self._interval(t)
        if iv is not None:
            backlog = max(self.link_free, t) - t + self.elig_tau      # = its departure - t
            iv[2] = backlog if iv[2] is None else min(iv[2], backlog)
            iv[3] += p.frame_bytes
            iv[4] += 1
        self.elig_tau += self._tau(p.frame_bytes)
        nxt = c.bucket_head()
        self._next_e[k] = _INF if nxt is None else c.eligible(nxt)

    def _depart(self, t: int, now_ns: int) -> None:
        k = min((c.q[0].e, j) for j, c in enumerate(self.classes) if c.nelig)[1]
        c, cnt = self.classes[k], self.counters
        p = c.q.popleft()
        c.nelig -= 1
        self.link_free = t + self._tau(p.frame_bytes)
        self.elig_tau -= self._tau(p.frame_bytes)
        stamp = t + self.config.prop_ns
        cnt.released += 1
        cnt.released_bytes += p.frame_bytes
        cnt.class_released[k] += 1
        cnt.class_released_bytes[k] += p.frame_bytes
        iv = self._interval(t)
        if iv is None:
            cnt.before_epoch += 1
        else:
            iv[0] += p.frame_bytes
            iv[1] += 1
            iv[5][k] += p.frame_bytes
            iv[6][k] += 1
        if now_ns > stamp:
            cnt.decided_after_stamp += 1
        self.decisions[p.key] = Decision("released", p.e, t, stamp, now_ns, max(stamp, now_ns),
                                         p.key in self._late_keys)


def run(arrivals: Sequence[Arrival], config: PacerConfig, requests: Iterable[RateRequest] = (), *,
        timer_lag_ns: int = 0) -> tuple[list[Decision], Pacer]:
    """Drive one pacer in real time over ``arrivals`` and rate ``requests``; return the
    packets' decisions (in input order) and the pacer.

    Real-time events, in time order: each packet's enqueue at its ``reached_ns`` (ties in
    the order given), each request at its ``reached_ns``, and the timer, which fires
    ``timer_lag_ns`` after :meth:`Pacer.next_wakeup_ns`. At equal times enqueues come
    first, then requests, then the timer. Raises PacerError for a refused request (as
    the kernel would refuse it) or a negative ``timer_lag_ns``.
    """
    if timer_lag_ns < 0:
        raise PacerError(f"timer_lag_ns={timer_lag_ns}: accepted range is timer_lag_ns >= 0")
    pacer = Pacer(config)
    order = sorted(range(len(arrivals)), key=lambda k: arrivals[k].reached_ns)
    reqs = sorted(requests, key=lambda r: r.reached_ns)
    k = j = 0
    while True:
        wake = pacer.next_wakeup_ns()
        cands = [(t, rank) for rank, t in enumerate((
            arrivals[order[k]].reached_ns if k < len(order) else None,
            reqs[j].reached_ns if j < len(reqs) else None,
            None if wake is None else wake + timer_lag_ns)) if t is not None]
        if not cands:
            break
        t, rank = min(cands)
        if rank == 0:
            pacer.enqueue(order[k], arrivals[order[k]], t)
            k += 1
        elif rank == 1:
            pacer.set_rates(reqs[j].changes, t)
            j += 1
        else:
            pacer.advance(t)
    return [pacer.decisions[k] for k in range(len(arrivals))], pacer
