"""Reference model of the optical-burst assembler at E2's ingress edge node.

Written from the words of the spec (``../shared/spec/e2-obs-multigranular.md``, "Edge
node") and the paper (Casoni, Raffaelli, section II), not from the kernel module
(``kernel/sch_obsburst.c``), which the guest test compares with it packet by packet:

    Hybrid time-volume assembly per class (mixed flows of the same class in one
    burst): a burst opens with its first packet and closes when Tmax has passed since
    it opened or when it reaches Lmax bytes, whichever first. A closed burst leaves
    after its offset time, as one unit at the optical rate.

Where the words leave a choice, the choice made (and documented in docs/obs.md):

* "Tmax has passed" at exactly ``open + Tmax``: a packet arriving at that instant is
  not in the burst (the burst closed first) and opens the next one.
* "reaches Lmax": the packet whose bytes make the burst's total >= Lmax is in it and
  the burst closes at that packet's arrival; a packet of Lmax bytes or more is a
  burst on its own.
* "as one unit at the optical rate": the packets leave back to back in arrival order,
  packet k at ``start + floor(8e9 * (bytes of packets before k) / rate)`` ns (its
  first bit; times are integer ns), where ``start = close + offset``, unless the
  class's previous burst still occupies the class's channel: then ``start`` is that
  burst's end, ``its start + floor(8e9 * its bytes / rate)``.
* Burst ids count bursts in opening order over all classes, from 1.
* Arrivals at the same instant are taken in the order given.

The model is event driven: a heap of arrival and Tmax-expiry events; an expiry
precedes an arrival at the same instant.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

TIME, VOLUME = "time", "volume"
NS_PER_S = 1_000_000_000


@dataclass(frozen=True)
class ClassParams:
    """One class: Tmax and offset in ns, Lmax in bytes, optical rate in bit/s (all in
    emulation units, i.e. paper times x D and rates / D)."""

    tmax_ns: int
    lmax_bytes: int
    offset_ns: int
    rate_bps: int

    def __post_init__(self) -> None:
        for name in ("tmax_ns", "lmax_bytes", "rate_bps"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if int(self.offset_ns) < 0:
            raise ValueError(f"offset_ns must be >= 0, got {self.offset_ns!r}")


@dataclass(frozen=True)
class Arrival:
    """A packet reaching the assembler: time (ns), length (bytes), class index."""

    t_ns: int
    length: int
    cls: int


@dataclass
class Burst:
    """A burst: id, class, when it opened and closed and why, when its first packet
    leaves (``start_ns``), its packets (indices into the arrivals) and bytes."""

    id: int
    cls: int
    open_ns: int
    close_ns: int = -1
    reason: str = ""
    start_ns: int = -1
    packets: list[int] = field(default_factory=list)
    bytes: int = 0

    @property
    def offset_ns(self) -> int:
        """What the control packet announces: first packet's departure - close."""
        return self.start_ns - self.close_ns


@dataclass(frozen=True)
class Release:
    """One packet's fate: when it leaves (ns), its burst's id, that burst's close reason."""

    t_ns: int
    burst: int
    reason: str


@dataclass(frozen=True)
class Assembly:
    releases: list[Release]   # per arrival, same order
    bursts: list[Burst]       # in opening order (ids 1, 2, ...)

    def assembly_delays_ns(self, arrivals: Sequence[Arrival]) -> list[int]:
        """Per packet: release time - arrival time."""
        return [r.t_ns - a.t_ns for r, a in zip(self.releases, arrivals)]


def serialisation_ns(nbytes: int, rate_bps: int) -> int:
    """Time to send ``nbytes`` at ``rate_bps``, ns, rounded down."""
    return nbytes * 8 * NS_PER_S // rate_bps


def assemble(arrivals: Sequence[Arrival], classes: Sequence[ClassParams]) -> Assembly:
    """Release time, burst id and close reason of every arrival (arrivals in time
    order); bursts still open after the last arrival close at their Tmax."""
    last = None
    for i, a in enumerate(arrivals):
        if not 0 <= a.cls < len(classes):
            raise ValueError(f"arrival {i}: class {a.cls} not in 0..{len(classes) - 1}")
        if a.length < 1:
            raise ValueError(f"arrival {i}: length {a.length} < 1")
        if last is not None and a.t_ns < last:
            raise ValueError(f"arrival {i} at {a.t_ns} ns is before the previous one ({last} ns)")
        last = a.t_ns

    EXPIRY, ARRIVAL = 0, 1          # an expiry precedes an arrival at the same instant
    events: list[tuple[int, int, int]] = [(a.t_ns, ARRIVAL, i) for i, a in enumerate(arrivals)]
    heapq.heapify(events)
    open_: dict[int, Burst] = {}
    bursts: list[Burst] = []
    channel_free = [0] * len(classes)

    def close(b: Burst, t: int, reason: str) -> None:
        p = classes[b.cls]
        b.close_ns, b.reason = t, reason
        b.start_ns = max(t + p.offset_ns, channel_free[b.cls])
        channel_free[b.cls] = b.start_ns + serialisation_ns(b.bytes, p.rate_bps)
        del open_[b.cls]

    while events:
        t, kind, x = heapq.heappop(events)
        if kind == EXPIRY:
            b = bursts[x - 1]
            if b.cls in open_ and open_[b.cls] is b:       # not closed by volume meanwhile
                close(b, t, TIME)
            continue
        a = arrivals[x]
        b = open_.get(a.cls)
        if b is None:
            b = Burst(len(bursts) + 1, a.cls, t)
            bursts.append(b)
            open_[a.cls] = b
            heapq.heappush(events, (t + classes[a.cls].tmax_ns, EXPIRY, b.id))
        b.packets.append(x)
        b.bytes += a.length
        if b.bytes >= classes[a.cls].lmax_bytes:
            close(b, t, VOLUME)

    releases: list[Release | None] = [None] * len(arrivals)
    for b in bursts:
        rate, before = classes[b.cls].rate_bps, 0
        for x in b.packets:
            releases[x] = Release(b.start_ns + serialisation_ns(before, rate), b.id, b.reason)
            before += arrivals[x].length
    return Assembly([r for r in releases if r is not None], bursts)
