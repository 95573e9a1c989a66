"""E3 schedulers of the optical space switch (pure Python, injectable clock).

A scheduler answers ``circuits(now)``: the OSS state (a frozenset of
``controllers.portmap.Circuit``) it wants at time ``now`` (seconds of its clock), and
``next_change(now)``: the next time that answer can change by the passage of time
alone (None: only events change it). The controller polls it; tests drive it with a
fake clock.

- ``none``: no circuit, plain leaf-spine (the paper's "no direct link").
- ``ut``: undifferentiated traffic. The cluster circuit is time-shared round-robin
  among the ToR ``pairs``: each holds it for ``sse_s / len(pairs)`` of every space
  switch epoch, and while it does *all* traffic between the two ToRs uses it.
- ``dt``: as UT, but the circuit carries only the ``elephants`` (src IP, dst IP) of the
  pair holding it; mice stay on the leaf-spine.
- ``on-demand``: ``request(src_ip, dst_ip)`` reserves the direct link between the two
  hosts' ToRs for one elephant transfer until ``release``; the OSS is a space switch
  (each ToR's special port in at most one circuit), so a request whose ToRs are busy
  with another circuit queues; requests for a circuit already up join it. Queued
  requests are granted in arrival order as soon as their ToRs are free (first fit).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from controllers.portmap import Circuit

Clock = Callable[[], float]
SCHEDULERS = ("none", "ut", "dt", "on-demand")


class SchedulerError(ValueError):
    """A request the scheduler cannot take (the REST API answers 4xx with the text)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class Scheduler:
    """Base: no circuit ever."""

    name = "none"

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def circuits(self, now: float) -> frozenset:
        return frozenset()

    def next_change(self, now: float) -> float | None:
        return None

    def describe(self) -> dict:
        return {"scheduler": self.name}


class UTScheduler(Scheduler):
    """Round-robin time share of every SSE among ``pairs``, from ``start`` (default: the
    clock at construction)."""

    name = "ut"

    def __init__(self, clock: Clock, pairs: Iterable[tuple[str, str]], sse_s: float,
                 start: float | None = None) -> None:
        super().__init__(clock)
        self.pairs = [tuple(p) for p in pairs]
        if not self.pairs:
            raise SchedulerError("ut/dt need at least one ToR pair")
        if not (math.isfinite(sse_s) and sse_s > 0):
            raise SchedulerError(f"sse {sse_s} s: must be a time > 0 s")
        self.sse_s = float(sse_s)
        self.start = clock() if start is None else float(start)

    @property
    def share_s(self) -> float:
        """How long one pair holds the circuit in each epoch."""
        return self.sse_s / len(self.pairs)

    def slot(self, now: float) -> int:
        return max(0, math.floor((now - self.start) / self.share_s + 1e-9))

    def holder(self, now: float) -> tuple[str, str]:
        return self.pairs[self.slot(now) % len(self.pairs)]

    def circuits(self, now: float) -> frozenset:
        a, b = self.holder(now)
        return frozenset({Circuit(a, b, None)})

    def next_change(self, now: float) -> float | None:
        if len(self.pairs) == 1:
            return None
        return self.start + (self.slot(now) + 1) * self.share_s

    def describe(self) -> dict:
        return {"scheduler": self.name, "sse_s": self.sse_s, "share_s": self.share_s,
                "pairs": [list(p) for p in self.pairs]}


class DTScheduler(UTScheduler):
    """UT for elephants only: ``elephants`` maps a ToR pair to its elephants' (src IP,
    dst IP) pairs."""

    name = "dt"

    def __init__(self, clock: Clock, pairs: Iterable[tuple[str, str]], sse_s: float,
                 elephants: Mapping[tuple[str, str], Iterable[tuple[str, str]]],
                 start: float | None = None) -> None:
        super().__init__(clock, pairs, sse_s, start)
        self.elephants = {tuple(k): frozenset(tuple(p) for p in v) for k, v in elephants.items()}

    def circuits(self, now: float) -> frozenset:
        a, b = self.holder(now)
        return frozenset({Circuit(a, b, self.elephants.get((a, b), frozenset()))})


@dataclass
class Reservation:
    """One on-demand request."""

    id: int
    src: str
    dst: str
    a: str                   # ToR of src
    b: str                   # ToR of dst
    requested: float
    state: str = "queued"    # queued | granted | released
    granted: float | None = None
    released: float | None = None

    def to_json(self) -> dict:
        return {"id": self.id, "src": self.src, "dst": self.dst, "tors": [self.a, self.b], "state": self.state,
                "requested": self.requested, "granted": self.granted, "released": self.released}


@dataclass
class OnDemandScheduler(Scheduler):
    """Reservations of the direct link; see the module docstring. ``tor_of_ip`` maps a
    host IP to its ToR, ``cluster`` a ToR to its cluster (src and dst must be in
    different clusters)."""

    clock: Clock
    tor_of_ip: Mapping[str, str]
    cluster: Mapping[str, int]
    reservations: dict[int, Reservation] = field(default_factory=dict)
    name = "on-demand"

    def __post_init__(self) -> None:
        self._ids = itertools.count(1)

    def request(self, src: str, dst: str) -> Reservation:
        for key, ip in (("src", src), ("dst", dst)):
            if ip not in self.tor_of_ip:
                raise SchedulerError(f"{key} {ip!r} is not a host address of this fabric")
        a, b = self.tor_of_ip[src], self.tor_of_ip[dst]
        if self.cluster[a] == self.cluster[b]:
            raise SchedulerError(f"src {src} (ToR {a}) and dst {dst} (ToR {b}) are in the same cluster; "
                                 "the direct link joins ToRs of different clusters")
        r = Reservation(next(self._ids), src, dst, a, b, self.clock())
        self.reservations[r.id] = r
        self._grant()
        return r

    def release(self, rid: int) -> Reservation:
        r = self.reservations.get(rid)
        if r is None:
            raise SchedulerError(f"no reservation {rid}", status=404)
        if r.state == "released":
            raise SchedulerError(f"reservation {rid} was already released", status=409)
        r.state, r.released = "released", self.clock()
        self._grant()
        return r

    def active(self) -> list[Reservation]:
        return [r for r in self.reservations.values() if r.state == "granted"]

    def queued(self) -> list[Reservation]:
        return sorted((r for r in self.reservations.values() if r.state == "queued"), key=lambda r: r.id)

    def _grant(self) -> None:
        busy: dict[str, tuple[str, str]] = {}
        for r in self.active():
            busy[r.a] = busy[r.b] = (r.a, r.b)
        for r in self.queued():
            pair = (r.a, r.b)
            if all(busy.get(t, pair) == pair for t in pair):
                r.state, r.granted = "granted", self.clock()
                busy[r.a] = busy[r.b] = pair

    def circuits(self, now: float) -> frozenset:
        by_pair: dict[tuple[str, str], set[tuple[str, str]]] = {}
        for r in self.active():
            by_pair.setdefault((r.a, r.b), set()).add((r.src, r.dst))
        return frozenset(Circuit(a, b, frozenset(p)) for (a, b), p in by_pair.items())

    def describe(self) -> dict:
        return {"scheduler": self.name}


def make(name: str, clock: Clock, *, pairs: Iterable[tuple[str, str]] = (), sse_s: float = 10.0,
         elephants: Mapping[tuple[str, str], Iterable[tuple[str, str]]] | None = None,
         tor_of_ip: Mapping[str, str] | None = None, cluster: Mapping[str, int] | None = None) -> Scheduler:
    """A scheduler by name (one of SCHEDULERS)."""
    if name == "none":
        return Scheduler(clock)
    if name == "ut":
        return UTScheduler(clock, pairs, sse_s)
    if name == "dt":
        return DTScheduler(clock, pairs, sse_s, elephants or {})
    if name == "on-demand":
        return OnDemandScheduler(clock, dict(tor_of_ip or {}), dict(cluster or {}))
    raise SchedulerError(f"scheduler {name!r} not in {SCHEDULERS}")
