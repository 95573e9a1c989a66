"""testbed/optical/burstloss.py: the obs-core reference on hand-made cases, and the burst
loss draw of the E2 contract (known splitmix64 outputs; lost fraction within a binomial
99.9 % interval)."""

from __future__ import annotations

import math

import pytest

from testbed.errors import DefinitionError
from testbed.optical import burstloss, layout
from testbed.optical.burstloss import Control, CoreReference, Data, burst_lost, merge, splitmix64
from testbed.optical.layout import CUT, DROP, PortConfig

PS = 800                       # ps per byte (10 Gbit/s)
TAU = layout.tau_ns(1000, PS)  # 800 ns for a 1000 B packet


def _core(pl_ppb: int, seed: int = 1, ring_depth: int = layout.OBS_RING) -> CoreReference:
    return CoreReference([PortConfig(PS) for _ in range(3)], pl_ppb, seed, ring_depth)


# ---- the draw ---------------------------------------------------------------------------

def test_splitmix64_gives_the_published_sequence():
    """The first outputs of splitmix64 seeded with 0 (Vigna's reference implementation:
    state += golden; output = mix(state)), i.e. splitmix64(k * golden) for k = 0, 1, 2."""
    golden = 0x9E3779B97F4A7C15
    assert [splitmix64((k * golden) % 2**64) for k in range(3)] == \
        [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]


def test_draw_is_the_contract_formula():
    seed, bid = 0xDEADBEEF12345678, 77
    x = splitmix64(seed ^ ((bid * 0x9E3779B97F4A7C15) % 2**64))
    assert burst_lost(seed, bid, x % 10**9 + 1) and not burst_lost(seed, bid, x % 10**9)


def test_draw_extremes_and_bounds():
    assert not any(burst_lost(3, i, 0) for i in range(1, 1000))
    assert all(burst_lost(3, i, 10**9) for i in range(1, 1000))
    for bad in ({"seed": -1}, {"seed": 2**64}, {"burst_id": -1}, {"pl_ppb": 10**9 + 1}, {"pl_ppb": True}):
        args = {"seed": 1, "burst_id": 1, "pl_ppb": 1} | bad
        with pytest.raises(DefinitionError):
            burst_lost(**args)


@pytest.mark.parametrize("pl", [1e-2, 1e-3])
@pytest.mark.parametrize("seed", [0, 0x5EED])
def test_lost_fraction_is_within_the_binomial_interval(pl, seed):
    """Over burst ids 1..1e6 the number lost lies in the 99.9 % interval of Binomial(1e6, pl)
    (normal approximation, z = 3.29): the draw is unbiased at the paper's Pl values."""
    n, ppb = 1_000_000, round(pl * 1e9)
    lost = sum(burst_lost(seed, i, ppb) for i in range(1, n + 1))
    half = 3.29 * math.sqrt(n * pl * (1 - pl))
    assert abs(lost - n * pl) <= half, (lost, n * pl, half)


def test_draws_of_neighbouring_seeds_are_not_the_same_bursts():
    a = {i for i in range(1, 100_000) if burst_lost(1, i, 10**7)}
    b = {i for i in range(1, 100_000) if burst_lost(2, i, 10**7)}
    assert len(a) > 500 and len(b) > 500 and len(a & b) < 0.05 * len(a)


# ---- the core, by hand ------------------------------------------------------------------

def test_before_any_control_packet_data_passes_unannounced():
    core = _core(10**9)
    out = core.run([(100, 0, Data(1000, 1)), (100 + TAU // 2, 0, Data(1000, 1))])
    assert out == [burstloss.Outcome(CUT, 100, None), burstloss.Outcome(CUT, 100 + TAU, None)]
    assert core.counters["unannounced"] == 2 and core.counters["conflicts"] == 0


def test_a_lost_burst_takes_all_of_its_packets_and_no_more():
    core = _core(10**9)  # every burst lost
    out = core.run([(0, 0, Control(1, 3)), *[(10 + i * TAU, 0, Data(1000, 2)) for i in range(4)]])
    assert [o.kind for o in out[1:]] == [DROP, DROP, DROP, CUT]
    assert [o.burst_id for o in out[1:]] == [1, 1, 1, None]
    assert out[4].dep_ns == 10 + 3 * TAU  # the output was never used by the dropped ones
    c = core.counters
    assert (c["announced"], c["bursts_lost"], c["packets_lost"], c["packets_passed"], c["unannounced"]) == \
        (1, 1, 3, 0, 1)


def test_a_kept_burst_passes_bufferless_and_counts_conflicts():
    core = _core(0)
    out = core.run([(0, 0, Control(1, 2)), (0, 1, Control(1, 1)),
                    (1000, 0, Data(1000, 2)), (1000 + TAU // 4, 1, Data(1000, 2)), (1000 + TAU // 2, 0, Data(1000, 1))])
    assert out[2:] == [burstloss.Outcome(CUT, 1000, 1), burstloss.Outcome(CUT, 1000 + TAU, 1),
                       burstloss.Outcome(CUT, 1000 + TAU // 2, 1)]
    assert core.counters["conflicts"] == 1 and core.counters["packets_passed"] == 3
    assert core.announced == {0: burstloss.deque(), 1: burstloss.deque()}


def test_control_of_the_next_burst_arriving_inside_the_previous_one():
    """The edge sends burst 2's control packet at its close while burst 1 still leaves:
    the packets after it still belong to burst 1 until it is complete."""
    core = CoreReference([PortConfig(PS)] * 2, 500_000_000, seed=0)
    lost = {i: burst_lost(0, i, 500_000_000) for i in (1, 2)}
    trace = [(0, 0, Control(1, 2)), (10, 0, Data(100, 1)), (20, 0, Control(2, 2)),
             (30, 0, Data(100, 1)), (40, 0, Data(100, 1)), (50, 0, Data(100, 1)), (60, 0, Data(100, 1))]
    out = core.run(trace)
    assert [o.burst_id for o in out if o is not None] == [1, 1, 2, 2, None]
    kinds = [DROP if lost[b] else CUT for b in (1, 1, 2, 2)] + [CUT]
    assert [o.kind for o in out if o is not None] == kinds


def test_empty_bursts_and_ring_overflow():
    core = _core(0, ring_depth=2)
    core.run([(0, 0, Control(1, 0)), (1, 0, Control(2, 1)), (2, 0, Control(3, 1)), (3, 0, Control(4, 1)),
              (4, 1, Control(1, 1))])
    c = core.counters
    assert (c["announced"], c["empty_bursts"], c["ring_overflow"]) == (5, 1, 1)
    assert [b.burst_id for b in core.announced[0]] == [2, 3]
    # burst 4 was refused: its packet is counted against nothing (no burst left).
    out = core.run([(10, 0, Data(100, 0)), (11, 0, Data(100, 0)), (12, 0, Data(100, 0))])
    assert [o.burst_id for o in out] == [2, 3, None]


def test_merge_orders_by_time_then_port_then_sequence():
    a, b, c = Data(1, 0), Data(2, 0), Control(1, 1)
    assert merge({1: [(5, a), (5, b)], 0: [(5, c), (7, a)]}) == [(5, 0, c), (5, 1, a), (5, 1, b), (7, 0, a)]


def test_bad_input_is_refused():
    with pytest.raises(DefinitionError):
        _core(10**9 + 1)
    with pytest.raises(DefinitionError):
        _core(0).data(0, 0, Data(100, 3))
    with pytest.raises(DefinitionError):
        _core(0).run([(0, 0, "frame")])  # type: ignore[list-item]
