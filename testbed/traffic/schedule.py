"""Traffic schedules: which transfer starts when, between which hosts, of what size.

Everything here is in *paper units* (seconds, bytes); ``TrafficRun`` dilates the start
times and durations when it hands a schedule to the agents. A schedule is a plain list
of :class:`FlowSpec` and is fully determined by its builder's arguments and seed
(numpy's PCG64 generator), so the same seed gives the same transfers; the concrete
list is also written into the run's folder (``schedule.json``), so a result never
depends on re-deriving it.

Builders:

- :func:`poisson_schedule` - E1: Poisson arrivals at a total rate over the whole
  network, each between a uniformly random ordered pair of distinct hosts, sizes from a
  :class:`SizeDistribution`.
- :func:`batch` / :func:`migration_batch` - E3: N simultaneous transfers with given
  sources, destinations and sizes (7 mice per elephant).
- :func:`long_lived` - E2/E4/E5: bulk flows that run for a duration (or until the run
  stops), optionally window-capped (``SO_SNDBUF`` at the sender, ``TCP_WINDOW_CLAMP`` at
  the receiver).
- :func:`poisson_long_lived` - E5: a given number of bulk flows entering at Poisson
  instants between uniformly random pairs of distinct hosts, each running until the
  run stops.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from testbed.errors import DefinitionError

#: Largest transfer the wire protocol carries (unsigned 64-bit byte count), and a sane cap.
MAX_SIZE_BYTES = 1 << 50


# -- size distributions ----------------------------------------------------------------
class SizeDistribution:
    """A distribution of transfer sizes in bytes (sizes are integers >= 1)."""

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` sizes in bytes (int64)."""
        raise NotImplementedError

    def mean(self) -> float:
        """Expected size in bytes (of the continuous law, before rounding)."""
        raise NotImplementedError

    def variance(self) -> float:
        """Variance in bytes^2 (of the continuous law, before rounding)."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """Parameters, for the run's records."""
        return {"kind": type(self).__name__, **asdict(self)}  # type: ignore[call-overload]


@dataclass(frozen=True)
class Fixed(SizeDistribution):
    """Every transfer has ``size_bytes`` bytes."""

    size_bytes: int

    def __post_init__(self) -> None:
        _check_size("sizes.size_bytes", self.size_bytes)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, int(self.size_bytes), dtype=np.int64)

    def mean(self) -> float:
        return float(self.size_bytes)

    def variance(self) -> float:
        return 0.0


@dataclass(frozen=True)
class BimodalLognormal(SizeDistribution):
    """A mixture of two lognormals: with probability ``p_small`` a size with median
    ``median_small`` bytes and log-standard-deviation ``sigma_small``, else median
    ``median_large`` and ``sigma_large``. (Median m and sigma s mean ln(size) ~ N(ln m, s).)

    E1's files ("modes near 10 MB and 1 GB") are e.g.
    ``BimodalLognormal(0.8, 10e6, 0.5, 1e9, 0.5)``; the parameters must be written in the
    experiment's configuration.
    """

    p_small: float
    median_small: float
    sigma_small: float
    median_large: float
    sigma_large: float

    def __post_init__(self) -> None:
        if not 0.0 <= self.p_small <= 1.0:
            raise DefinitionError("sizes.p_small", self.p_small, "a probability 0..1")
        for key in ("median_small", "median_large"):
            v = getattr(self, key)
            if not (isinstance(v, (int, float)) and 1.0 <= v <= MAX_SIZE_BYTES):
                raise DefinitionError(f"sizes.{key}", v, f"a size in bytes, 1 .. {MAX_SIZE_BYTES}")
        for key in ("sigma_small", "sigma_large"):
            v = getattr(self, key)
            if not (isinstance(v, (int, float)) and 0.0 <= v <= 5.0):
                raise DefinitionError(f"sizes.{key}", v, "a log-standard-deviation 0 .. 5")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        small = rng.random(n) < self.p_small
        z = rng.standard_normal(n)
        mu = np.where(small, math.log(self.median_small), math.log(self.median_large))
        sigma = np.where(small, self.sigma_small, self.sigma_large)
        return np.maximum(1, np.rint(np.exp(mu + sigma * z))).astype(np.int64)

    def _raw_moment(self, k: int) -> float:
        """E[X^k] of the mixture: E[X^k] of a lognormal is exp(k mu + k^2 sigma^2 / 2)."""
        p = self.p_small
        m1 = math.exp(k * math.log(self.median_small) + k * k * self.sigma_small ** 2 / 2)
        m2 = math.exp(k * math.log(self.median_large) + k * k * self.sigma_large ** 2 / 2)
        return p * m1 + (1 - p) * m2

    def mean(self) -> float:
        return self._raw_moment(1)

    def variance(self) -> float:
        return self._raw_moment(2) - self._raw_moment(1) ** 2


@dataclass(frozen=True)
class EmpiricalCDF(SizeDistribution):
    """Sizes drawn from a piecewise-linear CDF given as points (size bytes, P[X <= size]).

    The first point may have a probability above 0 (an atom at that size); between
    points sizes are uniform (inverse-transform sampling with linear interpolation).
    Build it from a file with :meth:`from_file`.
    """

    sizes: tuple[float, ...]
    probs: tuple[float, ...]
    source: str = ""

    def __post_init__(self) -> None:
        where = self.source or "sizes"
        if len(self.sizes) != len(self.probs) or len(self.sizes) < 1:
            raise DefinitionError(where, len(self.sizes), "at least one (size, probability) point")
        for i, (s, p) in enumerate(zip(self.sizes, self.probs)):
            if not 1 <= s <= MAX_SIZE_BYTES:
                raise DefinitionError(f"{where} point {i + 1} size", s, f"1 .. {MAX_SIZE_BYTES} bytes")
            if not 0.0 <= p <= 1.0:
                raise DefinitionError(f"{where} point {i + 1} probability", p, "0 .. 1")
            if i and (s <= self.sizes[i - 1] or p < self.probs[i - 1]):
                raise DefinitionError(f"{where} point {i + 1}", (s, p),
                                      "sizes strictly increasing and probabilities non-decreasing")
        if abs(self.probs[-1] - 1.0) > 1e-9:
            raise DefinitionError(f"{where} last probability", self.probs[-1], "exactly 1")

    @classmethod
    def from_file(cls, path: str | Path) -> "EmpiricalCDF":
        """Read ``size_bytes probability`` lines (blank/space/comma separated; ``#``
        starts a comment). Errors name the file and line."""
        path = Path(path)
        sizes, probs = [], []
        for n, line in enumerate(path.read_text().splitlines(), start=1):
            text = line.split("#", 1)[0].replace(",", " ").split()
            if not text:
                continue
            if len(text) != 2:
                raise DefinitionError(f"{path}:{n}", line, "two numbers: size_bytes probability")
            try:
                sizes.append(float(text[0]))
                probs.append(float(text[1]))
            except ValueError as exc:
                raise DefinitionError(f"{path}:{n}", line, "two numbers: size_bytes probability") from exc
        return cls(tuple(sizes), tuple(probs), source=str(path))

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        u = rng.random(n)
        p = np.asarray(self.probs)
        s = np.asarray(self.sizes)
        # Below the first point's probability the size is the first size (the atom).
        out = np.interp(u, p, s)
        return np.maximum(1, np.rint(out)).astype(np.int64)

    def _segments(self) -> list[tuple[float, float, float]]:
        """(probability mass, low, high) pieces; an atom has low == high."""
        segs = [(self.probs[0], self.sizes[0], self.sizes[0])]
        for i in range(1, len(self.sizes)):
            segs.append((self.probs[i] - self.probs[i - 1], self.sizes[i - 1], self.sizes[i]))
        return segs

    def mean(self) -> float:
        return sum(w * (a + b) / 2 for w, a, b in self._segments())

    def variance(self) -> float:
        second = sum(w * (a * a + a * b + b * b) / 3 for w, a, b in self._segments())
        return second - self.mean() ** 2

    def describe(self) -> dict[str, Any]:
        return {"kind": "EmpiricalCDF", "source": self.source, "points": len(self.sizes),
                "mean_bytes": self.mean()}


def _check_size(key: str, v: object) -> None:
    if not (isinstance(v, (int, np.integer)) and not isinstance(v, bool) and 1 <= v <= MAX_SIZE_BYTES):
        raise DefinitionError(key, v, f"an integer number of bytes 1 .. {MAX_SIZE_BYTES}")


# -- flows and schedules ---------------------------------------------------------------
@dataclass(frozen=True)
class FlowSpec:
    """One transfer, in paper units.

    size_bytes: payload bytes; None = long-lived (sends until ``duration_s`` has passed
    or the run stops). start_s: start time relative to the run's t0. sndbuf_bytes:
    ``SO_SNDBUF`` at the sender (None = kernel autotuning). window_clamp_bytes:
    ``TCP_WINDOW_CLAMP`` set by the receiver on this connection. trace: the receiver
    keeps a per-interval throughput series for this flow alone. tag: free label
    (e.g. "mouse", "elephant").
    """

    id: int
    src: str
    dst: str
    size_bytes: int | None
    start_s: float = 0.0
    duration_s: float | None = None
    sndbuf_bytes: int | None = None
    window_clamp_bytes: int | None = None
    trace: bool = False
    tag: str = ""

    def __post_init__(self) -> None:
        where = f"flow {self.id}"
        if self.src == self.dst:
            raise DefinitionError(f"{where}.dst", self.dst, f"a host other than the source {self.src}")
        if self.size_bytes is not None:
            _check_size(f"{where}.size_bytes", self.size_bytes)
        if not (math.isfinite(self.start_s) and self.start_s >= 0):
            raise DefinitionError(f"{where}.start_s", self.start_s, "a time >= 0 s")
        if self.duration_s is not None and not (self.size_bytes is None and self.duration_s > 0):
            raise DefinitionError(f"{where}.duration_s", self.duration_s,
                                  "a time > 0 s, only for long-lived flows (size_bytes None)")
        for key in ("sndbuf_bytes", "window_clamp_bytes"):
            v = getattr(self, key)
            if v is not None and not (isinstance(v, int) and 1024 <= v <= 1 << 31):
                raise DefinitionError(f"{where}.{key}", v, "None or an integer 1024 .. 2^31 bytes")


@dataclass(frozen=True)
class Schedule:
    """An ordered list of flows (by start time, then id) plus how it was made (``meta``:
    builder, seed, parameters), in paper units."""

    flows: tuple[FlowSpec, ...]
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ids = [f.id for f in self.flows]
        if len(set(ids)) != len(ids):
            raise DefinitionError("schedule.flows", "duplicate flow ids", "unique ids (use Schedule.merge)")

    def __len__(self) -> int:
        return len(self.flows)

    def hosts(self) -> set[str]:
        return {f.src for f in self.flows} | {f.dst for f in self.flows}

    @property
    def last_start_s(self) -> float:
        return max((f.start_s for f in self.flows), default=0.0)

    @classmethod
    def merge(cls, *schedules: "Schedule") -> "Schedule":
        """One schedule holding all flows of ``schedules``, renumbered 0.. by start time."""
        flows = sorted((f for s in schedules for f in s.flows), key=lambda f: f.start_s)
        return cls(tuple(replace(f, id=i) for i, f in enumerate(flows)),
                   {"builder": "merge", "parts": [s.meta for s in schedules]})

    def to_json(self) -> str:
        return json.dumps({"meta": self.meta, "flows": [asdict(f) for f in self.flows]}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "Schedule":
        data = json.loads(text)
        return cls(tuple(FlowSpec(**f) for f in data["flows"]), data.get("meta", {}))


def poisson_schedule(hosts: Sequence[str], rate_per_s: float, duration_s: float,
                     sizes: SizeDistribution, seed: int, *, size_scale: float = 1.0,
                     start_s: float = 0.0) -> Schedule:
    """Poisson arrivals at ``rate_per_s`` requests/s *over the whole network* during
    [start_s, start_s + duration_s); each between a uniformly random ordered pair of
    distinct hosts; sizes from ``sizes`` times ``size_scale`` (the small-machine knob,
    recorded in ``meta``). Paper units."""
    if len(hosts) < 2 or len(set(hosts)) != len(hosts):
        raise DefinitionError("hosts", list(hosts), "at least two distinct host names")
    if not (math.isfinite(rate_per_s) and 0 < rate_per_s <= 1e7):
        raise DefinitionError("rate_per_s", rate_per_s, "a rate 0 < r <= 1e7 requests/s")
    if not (math.isfinite(duration_s) and 0 < duration_s <= 1e6):
        raise DefinitionError("duration_s", duration_s, "a time 0 < t <= 1e6 s")
    if not (0 < size_scale <= 1e3):
        raise DefinitionError("size_scale", size_scale, "a factor 0 < f <= 1000")
    if rate_per_s * duration_s > 5e6:
        raise DefinitionError("rate_per_s x duration_s", rate_per_s * duration_s, "at most 5e6 flows")
    rng = np.random.default_rng(seed)
    # Draw inter-arrivals in blocks until the horizon is passed (exact Poisson process).
    times: list[float] = []
    t = 0.0
    block = max(16, int(rate_per_s * duration_s * 1.1) + 16)
    while t < duration_s:
        gaps = rng.exponential(1.0 / rate_per_s, block)
        arrivals = t + np.cumsum(gaps)
        times.extend(arrivals[arrivals < duration_s].tolist())
        t = float(arrivals[-1])
    n = len(times)
    k = len(hosts)
    src = rng.integers(0, k, n)
    dst = (src + rng.integers(1, k, n)) % k  # uniform over the other k - 1 hosts
    raw = sizes.sample(rng, n)
    scaled = np.maximum(1, np.rint(raw * size_scale)).astype(np.int64)
    flows = tuple(FlowSpec(i, hosts[int(src[i])], hosts[int(dst[i])], int(scaled[i]), start_s + times[i])
                  for i in range(n))
    meta = {"builder": "poisson", "seed": seed, "rate_per_s": rate_per_s, "duration_s": duration_s,
            "start_s": start_s, "hosts": list(hosts), "sizes": sizes.describe(), "size_scale": size_scale,
            "rng": "numpy PCG64 " + np.__version__}
    return Schedule(flows, meta)


def batch(transfers: Iterable[tuple[str, str, int] | tuple[str, str, int, str]], *, at_s: float = 0.0,
          first_id: int = 0) -> Schedule:
    """Simultaneous transfers ``(src, dst, size_bytes[, tag])`` all starting at ``at_s``."""
    flows = []
    for i, t in enumerate(transfers):
        tag = t[3] if len(t) > 3 else ""  # type: ignore[misc]
        flows.append(FlowSpec(first_id + i, t[0], t[1], int(t[2]), at_s, tag=tag))
    return Schedule(tuple(flows), {"builder": "batch", "at_s": at_s, "n": len(flows)})


def migration_batch(sources: Sequence[str], destinations: Sequence[str], n_transfers: int, *,
                    mice_per_elephant: int = 7, mouse_bytes: int = 250_000_000,
                    elephant_bytes: int = 3_000_000_000, size_scale: float = 1.0,
                    at_s: float = 0.0) -> Schedule:
    """E3's VM migrations: ``n_transfers`` simultaneous transfers, one elephant per
    ``mice_per_elephant`` mice, spread round-robin over ``sources`` (so with 3 sources and
    groups of 8 every source gets the same number of elephants when n is a multiple of 24)
    and over ``destinations``. Sizes are multiplied by ``size_scale`` (recorded)."""
    if not sources or not destinations:
        raise DefinitionError("sources/destinations", (list(sources), list(destinations)), "non-empty host lists")
    if not 1 <= n_transfers <= 100_000:
        raise DefinitionError("n_transfers", n_transfers, "1 .. 100000")
    if not 0 < size_scale <= 1:
        raise DefinitionError("size_scale", size_scale, "a factor 0 < f <= 1")
    group = mice_per_elephant + 1
    transfers = []
    for i in range(n_transfers):
        elephant = i % group == 0
        size = max(1, round((elephant_bytes if elephant else mouse_bytes) * size_scale))
        transfers.append((sources[i % len(sources)], destinations[i % len(destinations)], size,
                          "elephant" if elephant else "mouse"))
    s = batch(transfers, at_s=at_s)
    return Schedule(s.flows, {"builder": "migration_batch", "n": n_transfers, "mice_per_elephant": mice_per_elephant,
                              "mouse_bytes": mouse_bytes, "elephant_bytes": elephant_bytes,
                              "size_scale": size_scale, "at_s": at_s})


def long_lived(pairs: Iterable[tuple[str, str]], *, start_s: float = 0.0, duration_s: float | None = None,
               sndbuf_bytes: int | None = None, window_clamp_bytes: int | None = None,
               trace: bool = True, first_id: int = 0, stagger_s: float = 0.0) -> Schedule:
    """Bulk flows ``(src, dst)`` starting at ``start_s`` (+ i x ``stagger_s``), running for
    ``duration_s`` (None: until the run stops), optionally window-capped."""
    flows = tuple(FlowSpec(first_id + i, a, b, None, start_s + i * stagger_s, duration_s,
                           sndbuf_bytes, window_clamp_bytes, trace, "long")
                  for i, (a, b) in enumerate(pairs))
    return Schedule(flows, {"builder": "long_lived", "start_s": start_s, "duration_s": duration_s,
                            "sndbuf_bytes": sndbuf_bytes, "window_clamp_bytes": window_clamp_bytes,
                            "stagger_s": stagger_s})


def nested_subset(schedule: Schedule, n_flows: int, seed: int) -> Schedule:
    """The first ``n_flows`` flows of a uniformly random order of ``schedule``'s flows,
    renumbered by that order (id = rank, 0 first), sorted by start time.

    The order depends on ``seed`` and the schedule only, so subsets of one schedule are
    nested: every flow of ``nested_subset(s, k, seed)`` is in ``nested_subset(s, n, seed)``
    for k <= n, with the same id. A uniformly random k-subset of flows drawn i.i.d. (for
    :func:`poisson_long_lived`: k sorted uniform instants, uniform pairs) is distributed as
    k such flows drawn directly. Raises DefinitionError naming ``n_flows`` outside
    1 .. len(schedule)."""
    flows = schedule.flows
    if isinstance(n_flows, bool) or not isinstance(n_flows, int) or not 1 <= n_flows <= len(flows):
        raise DefinitionError("n_flows", n_flows, f"an integer 1 .. {len(flows)} (the flows of the schedule)")
    order = np.random.default_rng([seed, len(flows)]).permutation(len(flows))
    kept = [replace(flows[int(i)], id=rank) for rank, i in enumerate(order[:n_flows])]
    kept.sort(key=lambda f: (f.start_s, f.id))
    return Schedule(tuple(kept), {**schedule.meta, "nested_subset": {"of_flows": len(flows), "n_flows": n_flows,
                                                                     "seed": seed}})


def poisson_long_lived(hosts: Sequence[str], n_flows: int, horizon_s: float, seed: int, *,
                       trace: bool = True, tag: str = "long") -> Schedule:
    """``n_flows`` long-lived flows entering during [0, horizon_s) at the instants of a
    Poisson process conditioned on ``n_flows`` arrivals (sorted uniform instants: "N
    flows entered the network ... according to a Poisson arrival process"), each from a
    uniformly random host to a uniformly random other host, running until the run stops;
    ``trace``: per-flow throughput series. Paper units; deterministic for ``seed``
    (numpy PCG64). Raises DefinitionError naming the argument for fewer than two
    distinct hosts, n_flows outside 1..100000 or horizon_s outside (0, 1e6]."""
    if len(hosts) < 2 or len(set(hosts)) != len(hosts):
        raise DefinitionError("hosts", list(hosts), "at least two distinct host names")
    if isinstance(n_flows, bool) or not isinstance(n_flows, int) or not 1 <= n_flows <= 100_000:
        raise DefinitionError("n_flows", n_flows, "an integer 1 .. 100000")
    if not (math.isfinite(horizon_s) and 0 < horizon_s <= 1e6):
        raise DefinitionError("horizon_s", horizon_s, "a time 0 < t <= 1e6 s")
    rng = np.random.default_rng(seed)
    starts = np.sort(rng.uniform(0.0, horizon_s, n_flows))
    k = len(hosts)
    src = rng.integers(0, k, n_flows)
    dst = (src + rng.integers(1, k, n_flows)) % k  # uniform over the other k - 1 hosts
    flows = tuple(FlowSpec(i, hosts[int(src[i])], hosts[int(dst[i])], None, float(starts[i]), trace=trace, tag=tag)
                  for i in range(n_flows))
    return Schedule(flows, {"builder": "poisson_long_lived", "seed": seed, "n_flows": n_flows,
                            "horizon_s": horizon_s, "hosts": list(hosts), "rng": "numpy PCG64 " + np.__version__})
