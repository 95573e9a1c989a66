"""Read the OBS counters of the optswitch maps of a run: the obs-core node's control unit
and burst loss counters, and the holding-delay histogram (docs/obs.md, "Core node
(obs-core)" and "Holding delay").

Both live in each node's ``optsw_state`` value (struct optsw_node_state in
ebpf/optswitch.h; testbed/optical/layout.py parses it), so the per-point reset of the
fabric (maps.configure_nodes) zeroes them with the rest of the node's state.

All times are emulation nanoseconds (CLOCK_MONOTONIC of the run, i.e. paper time x D);
dividing by the time dilation factor gives paper time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from testbed.optical import layout, maps


@dataclass(frozen=True)
class HoldingDelay:
    """The holding-delay histogram of one node: the time from a packet's arrival at the
    holding node before it (the obs-edge, where obsburst assembles) to its arrival here,
    for the packets that came in on ports flagged peer_holds.

    ``rows``: (lo_ns, hi_ns, packets) of every non-empty bucket, lo inclusive, hi
    exclusive, in order; the last bucket (from 31 x 2^30 ns = 33.3 s) is open-ended
    and its hi is reported as max_ns + 1. ``count``, ``early`` (arrived before their
    stamp: counted as 0 ns), ``max_ns`` (exact), ``sum_ns``, ``over`` (in the last bucket).
    """

    rows: tuple[tuple[int, int, int], ...]
    count: int
    early: int
    max_ns: int
    sum_ns: int
    over: int

    @property
    def mean_ns(self) -> float:
        """Mean holding delay (ns), 0.0 without packets."""
        return self.sum_ns / self.count if self.count else 0.0

    def quantile_ns(self, q: float) -> int:
        """The ``q`` quantile (0 < q <= 1) as the upper bound of the bucket holding it,
        capped at max_ns (resolution: a bucket is 1/16 of its power of two, so the
        value overstates by less than 6.25 %); 0 without packets. Raises ValueError
        for q outside (0, 1]."""
        if not 0 < q <= 1:
            raise ValueError(f"quantile {q!r} outside (0, 1]")
        target, acc = q * self.count, 0
        for lo, hi, n in self.rows:
            acc += n
            if acc >= target:
                return min(hi - 1, self.max_ns)
        return self.max_ns if self.count else 0


def holding_delay(hist: dict) -> HoldingDelay:
    """A :class:`HoldingDelay` from a parsed histogram (layout.parse_hold_hist)."""
    rows = []
    for i, n in enumerate(hist["buckets"]):
        if n:
            lo, hi = layout.hold_bucket_bounds(i)
            if i == layout.HOLD_BUCKETS - 1:
                hi = max(hist["max_ns"] + 1, lo + 1)
            rows.append((lo, hi, n))
    return HoldingDelay(tuple(rows), hist["count"], hist["early"], hist["max_ns"], hist["sum_ns"], hist["over"])


def read_core(pin_dir: Path, nodes: list[int] | set[int]) -> dict[int, dict[str, int]]:
    """The OBS counters (layout.OBS_FIELDS) of each node of ``nodes``: on an obs-core
    node bursts ``announced`` / ``bursts_lost`` / ``empty_bursts``, ``packets_lost`` /
    ``packets_passed`` of announced bursts, ``unannounced`` packets, ``ring_overflow``,
    ``conflicts``, ``ctrl_invalid``; on another switch ``ctrl_elsewhere`` (control
    packets it dropped). Also ``bursts_pending``: announced bursts still waiting for
    packets at the time of reading."""
    out = {}
    for node, value in maps.read_raw_states(pin_dir, nodes).items():
        obs = layout.parse_obs_state(value)
        rings = obs.pop("rings")
        out[node] = {**obs, "bursts_pending": sum(len(r) for r in rings)}
    return out


def read_holding(pin_dir: Path, nodes: list[int] | set[int]) -> dict[int, HoldingDelay]:
    """The holding-delay histogram of each node of ``nodes`` (see :class:`HoldingDelay`)."""
    return {node: holding_delay(layout.parse_hold_hist(value))
            for node, value in maps.read_raw_states(pin_dir, nodes).items()}
