"""The closed-loop reference of XCP edge pacing (testbed/xcpsim.py): its mechanics on
hand-computed cases (pacer spacing, interval counting, queue samples, control channel
timing, one full feedback round), then the loop's behaviour against oracles that do not
come from the simulator: the fair share C/N, the fairness controller's contraction
(1 - gamma) per interval, the analytic equilibrium with a demand-limited macroflow,
max-min fairness on a parking lot, the queue term's job, and instability outside the
stability bound. The measured numbers are in docs/xcp-edge.md, "The reference loop"."""

from __future__ import annotations

import math
import random

import pytest

from testbed import xcp, xcpprobe
from testbed.xcpsim import (SimConfig, SimError, SimFlow, SimLink, XcpLoopSim, converged_interval, dumbbell,
                            dumbbell_path, duplex, settling_interval)

C = 100e6               # bottleneck of the loop tests, bit/s
D = 0.05                # the paper's control interval, s
PKT = 1500


def flows(n: int, starts: list[float], phases: list[float] | None = None) -> list[SimFlow]:
    return [SimFlow(f"f{k}", dumbbell_path(k), starts[k], probe_phase_s=None if phases is None else phases[k])
            for k in range(n)]


def early(n: int, seed: int) -> list[float]:
    """Probe phases drawn uniformly in [0, d/5): probes sent early in the interval."""
    rng = random.Random(seed)
    return [rng.uniform(0, D / 5) for _ in range(n)]


def run(n: int, starts: list[float], intervals: int, *, capacity: float = C, phases: list[float] | None = None,
        params: xcp.XcpParameters | None = None, core_delay_s: float = 0.005):
    cfg = SimConfig(params=params or xcp.XcpParameters())
    return XcpLoopSim(dumbbell(n, capacity, core_delay_s=core_delay_s), flows(n, starts, phases), cfg).run(intervals)


def fair(result, n: int, capacity: float = C) -> dict[str, float]:
    return {f"f{k}": capacity / n for k in range(n)}


# --- mechanics, by hand ---------------------------------------------------------------

def test_pacer_spacing_and_interval_counting():
    """One macroflow at 1.2 Mb/s over 10 Mb/s links: a 1500 B packet every 10 ms, at 0,
    10, .., 40 ms in interval 0 (5 packets); they reach c0 0.1 ms later, still in
    interval 0. The first interval's probe returns feedback 0 (no router has decided
    yet): the first controller on its path, the ingress edge's uplink, lowered the
    wanted change to 0 (the later zeros are not smaller), and the rate is unchanged."""
    r = XcpLoopSim(dumbbell(1, 10e6), [SimFlow("f0", dumbbell_path(0), 1.2e6)]).run(1)
    assert r.sent["f0"] == [5 * PKT]
    assert r.links[("c0", "c1")][0].input_bytes == 5 * PKT
    assert r.links[("i0", "c0")][0].input_bytes == 5 * PKT
    assert r.rates["f0"] == [1.2e6, 1.2e6]
    assert r.trips[0].feedback_bps == 0.0 and r.trips[0].limiter == ("i0", "c0")


def test_queue_samples_and_control_channel_store_and_forward():
    """Two macroflows released at the same instants meet at c0: the second packet finds
    the first one's 1500 B ahead (max queue 1500, persistent queue 0). Their probes, sent
    at 0, reach c0 together and share the control link c0 -> c1 (FIFO, 78 B at 100 Mb/s
    = 6.24 us each): the second waits one probe time, once. A trip: 6 control hops of
    6.24 us + 2 x (0.1 + 5 + 0.1) ms of propagation."""
    r = run(2, [25e6, 25e6], 1)
    link = r.links[("c0", "c1")][0]
    assert link.max_queue_bytes == pytest.approx(PKT) and link.persistent_queue_bytes == 0.0
    assert link.probes == 2 and link.decision.macroflows == 2
    tau = 8 * xcpprobe.FRAME_BYTES / 100e6
    assert tau == pytest.approx(6.24e-6)
    times = sorted(t.back_s - t.sent_s for t in r.trips)
    assert times[0] == pytest.approx(6 * tau + 2 * 5.2e-3, abs=2e-9)
    assert times[1] - times[0] == pytest.approx(tau, abs=2e-9)


def test_one_feedback_round_by_hand():
    """f0, f1 at 25 Mb/s over 100 Mb/s links (packets every 0.48 ms from 0). Interval 0
    at c0 -> c1: releases k = 0..103 arrive before 50 ms (k 0.48 + 0.1 < 50), 208 packets
    in all, u = 49.92 Mb/s, Q = 0 (the first of each pair finds the link idle), N = 2:
    Phi = 0.4 (100 - 49.92) Mb/s = 20.032 Mb/s, h = max(0, 4.992 - 20.032) = 0, so
    p_i = 10.016 Mb/s and n_i = 0. The uplink (105 packets, N = 1) offers 29.92 Mb/s and
    c1 -> o_k (94 packets) 30.976 Mb/s: the probe sent at 50 ms returns c0 -> c1's
    10.016 Mb/s, and the rate becomes 35.016 Mb/s. It carried u_i = 105 packets / 50 ms."""
    r = run(2, [25e6, 25e6], 2)
    assert r.links[("c0", "c1")][0].input_bytes == 208 * PKT
    assert r.links[("i0", "c0")][0].input_bytes == 105 * PKT
    assert r.links[("c1", "o0")][0].input_bytes == 94 * PKT
    dec = r.links[("c0", "c1")][0].decision
    assert dec.phi_bps == pytest.approx(20.032e6) and dec.shuffled_bps == 0.0
    second = [t for t in r.trips if t.seq == 1]
    assert len(second) == 2
    for t in second:
        assert t.feedback_bps == pytest.approx(10.016e6)
        assert t.limiter == ("c0", "c1")
        assert t.measured_bps == pytest.approx(105 * PKT * 8 / D)
        assert t.rate_after_bps == pytest.approx(35.016e6)
    assert r.rates["f0"][2] == pytest.approx(35.016e6)


def test_probes_can_carry_the_granted_rate_instead():
    """rate_estimate = "granted": u_i is R (25 Mb/s), not the 105 packets measured."""
    cfg = SimConfig(rate_estimate="granted")
    r = XcpLoopSim(dumbbell(2, C), flows(2, [25e6, 25e6]), cfg).run(2)
    assert {t.measured_bps for t in r.trips if t.seq == 1} == {25e6}


def test_a_rate_change_delay_at_the_edge_costs_nothing_measurable():
    """The real edge applies a returned feedback rate_delay_s after the probe's return
    (its agent's allowance). In the hand-computed round (25 -> 35.016 Mb/s at 60.44 ms)
    a 10 ms delay keeps the old spacing (0.48 ms) 10 ms longer instead of the new
    (0.3427 ms): 10 (1/0.3427 - 1/0.48) = 8.3 packets fewer in interval 1. From equal and
    overloaded starts a 1 ms delay moves the convergence interval by at most one
    (measured: by none, or one earlier, for delays up to 5 ms)."""
    trips = {}
    for delay in (0.0, 0.01):
        r = XcpLoopSim(dumbbell(2, C), flows(2, [25e6, 25e6], [0.0, 0.0]), SimConfig(rate_delay_s=delay)).run(2)
        trips[delay] = r
    late, prompt = trips[0.01], trips[0.0]
    for r in (late, prompt):
        trip = next(t for t in r.trips if t.flow == "f0" and t.seq == 1)
        assert trip.back_s == pytest.approx(D + 6 * 6.24e-6 + 2 * 5.2e-3, abs=1e-8)
        assert trip.rate_after_bps == pytest.approx(35.016e6)
    assert prompt.sent["f0"][1] - late.sent["f0"][1] in (8 * PKT, 9 * PKT)
    cfg = SimConfig(rate_delay_s=0.001)
    for start in (0.5, 2.0):
        now = run(4, [start * C / 4] * 4, 40, phases=[0.0] * 4)
        later = XcpLoopSim(dumbbell(4, C), flows(4, [start * C / 4] * 4, [0.0] * 4), cfg).run(40)
        assert abs(converged_interval(later, fair(later, 4), 0.05) - converged_interval(now, fair(now, 4), 0.05)) <= 1


def test_edge_buffer_drops_beyond_the_wait_bound():
    """A macroflow offered 2 C on a path of capacity C, granted about C: its edge queue's
    wait grows by one second per second and reaches 0.25 s at 0.25 s; from then on half
    of what is offered is dropped. Over 1 s: (1 - 0.25) s x C / (8 x 1500 B) = 625 drops
    at 10 Mb/s (measured 631: the granted rate sits just below C)."""
    cap = 10e6
    r = XcpLoopSim(dumbbell(1, cap), [SimFlow("f", dumbbell_path(0), cap, demand_bps=2 * cap)]).run(20)
    assert r.edge_drops["f"] == pytest.approx(0.75 * cap / 8 / PKT, rel=0.03)


def test_settling_interval():
    assert settling_interval([0, 5, 9, 10, 11, 10], 10, 0.1) == 2
    assert settling_interval([10, 10], 10, 0.0) == 0
    assert settling_interval([10, 20], 10, 0.1) is None


def twice(sim: XcpLoopSim) -> None:
    sim.run(1)
    sim.run(1)


@pytest.mark.parametrize("make, msg", [
    (lambda: SimLink("a", "b", 0, 0.001), "capacity_bps"),
    (lambda: SimLink("a", "b", 1e6, -1), "delay_s"),
    (lambda: SimFlow("f", ("a",), 1e6), "path"),
    (lambda: SimFlow("f", ("a", "b", "a"), 1e6), "path"),
    (lambda: SimFlow("f", ("a", "b"), 1e6, demand_bps=0), "demand_bps"),
    (lambda: SimConfig(rate_estimate="guess"), "rate_estimate"),
    (lambda: SimConfig(min_rate_bps=0), "min_rate_bps"),
    (lambda: SimConfig(rate_delay_s=0.05), "rate_delay_s"),
    (lambda: SimConfig(min_rate_bps=1e6, max_rate_bps=1e5), "max_rate_bps"),
    (lambda: XcpLoopSim([SimLink("a", "b", 1e6, 0)], [SimFlow("f", ("a", "b"), 1e6)]), "no link b->a"),
    (lambda: XcpLoopSim(duplex("a", "b", 1e6, 0) * 2, []), "given twice"),
    (lambda: XcpLoopSim(duplex("a", "b", 1e6, 0), [SimFlow("f", ("a", "b"), 1)] * 2), "distinct"),
    (lambda: XcpLoopSim(duplex("a", "b", 1e6, 0), []).run(0), "intervals"),
    (lambda: twice(XcpLoopSim(duplex("a", "b", 1e6, 0), [])), "run already"),
])
def test_bad_inputs_are_refused(make, msg):
    with pytest.raises(SimError, match=msg):
        make()


# --- (i) convergence to the fair share -------------------------------------------------

@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("start", ["half", "minimum"])
@pytest.mark.parametrize("phases", ["zero", "early"])
def test_equal_starts_reach_the_fair_share_within_10_intervals(n, start, phases):
    """From equal starts (C/N/2 each, or the minimum rate, one packet per interval) only
    the efficiency controller works: with probes sent early in the interval (at its start,
    or within its first fifth) every granted rate is within 5 % of C/N from interval 7
    at the latest (measured 5..7; interval 1 is the routers' first, feedback-free
    decision), and within 10 % from interval 6."""
    rate = C / n / 2 if start == "half" else 0.0
    r = run(n, [rate] * n, 40, phases=[0.0] * n if phases == "zero" else early(n, n))
    assert converged_interval(r, fair(r, n), 0.05) <= 7
    assert converged_interval(r, fair(r, n), 0.10) <= 6


def test_probes_late_in_the_interval_overshoot_and_converge_later():
    """A probe answered late in interval k changes the rate only after the boundary, so
    the decision of interval k + 1 still sees the old rate and grants the spare again:
    with every probe sent at 0.9 d the total overshoots C by more than 5 % (measured
    7 %) and the rates need more than 10 intervals (measured 14) where probes sent at
    the interval's start need 5. Why the design sends probes at the interval's start."""
    n = 4
    late = run(n, [C / n / 2] * n, 60, phases=[0.9 * D] * n)
    assert max(late.total_rate()) > 1.05 * C
    assert converged_interval(late, fair(late, n), 0.05) > 10
    prompt = run(n, [C / n / 2] * n, 60, phases=[0.0] * n)
    assert max(prompt.total_rate()) < 1.01 * C
    assert converged_interval(prompt, fair(prompt, n), 0.05) <= 5


@pytest.mark.parametrize("n", [2, 4])
def test_one_macroflow_holding_the_link_converges_at_the_shuffling_rate(n):
    """Start (C, 0, ..): at u = C, Phi ~ 0 and h = gamma C, so every interval r_i <- r_i +
    gamma C / N - gamma r_i: the distance to C/N shrinks by (1 - gamma). The first
    macroflow's distance starts at (N - 1) C/N, so it is within 5 % after
    k = ceil(ln(0.05 / (N - 1)) / ln(0.9)) intervals of shuffling: 29 (N = 2), 39 (N = 4)
    with the paper's gamma = 0.1, plus the loop's lag (first decision, probe round
    trips): measured 29 and 40. The issue's 10 intervals do not hold from this start."""
    k = math.ceil(math.log(0.05 / (n - 1)) / math.log(0.9))
    assert k == {2: 29, 4: 39}[n]
    r = run(n, [C] + [0.0] * (n - 1), 70)
    got = converged_interval(r, fair(r, n), 0.05)
    assert k <= got <= k + 3
    assert converged_interval(r, fair(r, n), 0.05) > 10


# --- (ii) efficiency once converged, (iii) the queue ----------------------------------------

@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("phases", ["zero", "early"])
def test_sum_of_rates_stays_at_capacity_once_converged(n, phases):
    """From an overload (2 C in all) the rates are within 5 % of C/N by interval 11, and
    from then on the total granted rate stays within [0.95, 1.01] C x TU (measured
    0.952 .. 1.005 C: the loop oscillates around C; a total above C builds a queue that
    the queue term then removes)."""
    r = run(n, [2 * C / n] * n, 60, phases=[0.0] * n if phases == "zero" else early(n, n))
    k = converged_interval(r, fair(r, n), 0.05)
    assert k is not None and k <= 11
    totals = r.total_rate()[k:]
    assert max(totals) <= 1.01 * C and min(totals) >= 0.95 * C


def test_overload_queue_drains_and_the_queue_term_is_what_drains_it():
    """Start at 2 C: the bottleneck's queue grows past 1 MB, then the persistent queue
    falls back to at most N packets from interval 7 on (measured: from 6). With beta = 0
    (outside the bound, asked explicitly) the spare-bandwidth term alone brings the input
    to C but leaves the queue standing: above 1.5 MB for ever."""
    n = 4
    r = run(n, [2 * C / n] * n, 60)
    link = r.links[("c0", "c1")]
    assert max(x.max_queue_bytes for x in link) > 1e6
    assert all(x.persistent_queue_bytes <= n * PKT for x in link[7:])
    no_beta = xcp.XcpParameters(alpha=0.4, beta=0.0, outside_stability_bound=True)
    r0 = run(n, [2 * C / n] * n, 60, params=no_beta)
    assert all(x.persistent_queue_bytes > 1.5e6 for x in r0.links[("c0", "c1")][10:])
    assert r0.total_rate()[-1] == pytest.approx(C, rel=0.01)


# --- (iv) stability ---------------------------------------------------------------------

def test_unstable_settings_are_refused_and_would_not_settle():
    """alpha above pi / (4 sqrt 2), or beta away from alpha^2 sqrt 2, is refused with the
    parameter, its value and the accepted range. Forced (outside_stability_bound), alpha
    = 2 never settles in this loop: the total swings between the minimum and 2 C."""
    unstable = (({"alpha": 0.6, "beta": xcp.stable_beta(0.6)}, "alpha"), ({"alpha": 0.4, "beta": 0.5}, "beta"))
    for kwargs, name in unstable:
        with pytest.raises(xcp.UnstableParameterError, match=f"XCP {name}=") as err:
            SimConfig(params=xcp.XcpParameters(**kwargs))
        assert "Katabi" in str(err.value)
    wild = xcp.XcpParameters(alpha=2.0, beta=xcp.stable_beta(2.0), outside_stability_bound=True)
    r = run(4, [2 * C / 4] * 4, 80, params=wild)
    tail = r.total_rate()[60:]
    assert min(tail) < 0.1 * C and max(tail) > 1.5 * C
    assert converged_interval(r, fair(r, 4), 0.10) is None


def test_a_probe_round_trip_longer_than_d_destabilises_the_loop():
    """The paper sets d to the largest RTT. With a 10 ms round trip the loop settles;
    with 90 ms (almost 2 d) it oscillates (measured 0.55 .. 1.18 C over intervals
    40..80) and never reaches the fair share. (Measured between: 50 ms settles by
    interval 13, 70 ms by 36.)"""
    n = 4
    ok = run(n, [C / n / 2] * n, 80, phases=[0.0] * n)
    assert converged_interval(ok, fair(ok, n), 0.05) <= 7
    slow = run(n, [C / n / 2] * n, 80, phases=[0.0] * n, core_delay_s=0.045)
    assert converged_interval(slow, fair(slow, n), 0.10) is None
    assert max(slow.total_rate()[40:]) > 1.1 * C and min(slow.total_rate()[40:]) < 0.7 * C


# --- beyond one bottleneck ---------------------------------------------------------------

def demand_limited_equilibrium(n: int, demand: float, params: xcp.XcpParameters) -> float:
    """The rate r of each of n - 1 backlogged macroflows beside one sending ``demand``
    (fractions of C) at which their feedback is zero: p_i = n_i, i.e.
    (h + Phi) / n = r h / u with u = demand + (n - 1) r, Phi = alpha (1 - u) (Q = 0),
    h = gamma u - |Phi|; solved by bisection on r in (0, (1 - demand) / (n - 1))."""
    def excess(r: float) -> float:
        u = demand + (n - 1) * r
        phi = params.alpha * (1 - u)
        h = max(0.0, params.gamma * u - abs(phi))
        return (h + max(0.0, phi)) / n - r * (h + max(0.0, -phi)) / u
    lo, hi = 1e-6, (1 - demand) / (n - 1)
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if excess(mid) > 0 else (lo, mid)
    return lo


def test_a_demand_limited_macroflow_leaves_the_link_underused():
    """f0 sends only 0.1 C; f1, f2 are backlogged. Shuffling gives f0 an equal share of
    h it does not use, so its granted rate climbs to its maximum (C) while the others
    settle where their feedback is zero: 0.4198 C each by the analytic equilibrium (the
    link at 0.94 C, not max-min's 0.45 C each). XCP's known under-use with idle grants."""
    params = xcp.XcpParameters()
    want = demand_limited_equilibrium(3, 0.1, params)
    assert want == pytest.approx(0.4198, abs=5e-4)
    fl = [SimFlow("f0", dumbbell_path(0), C / 3, demand_bps=0.1 * C)] + flows(3, [C / 3] * 3)[1:]
    r = XcpLoopSim(dumbbell(3, C), fl).run(100)
    assert r.rates["f0"][-1] == pytest.approx(C)
    for f in ("f1", "f2"):
        assert all(x == pytest.approx(want * C, rel=0.01) for x in r.rates[f][60:])
    assert sum(r.sent_rate(f)[-1] for f in r.sent) == pytest.approx((0.1 + 2 * want) * C, rel=0.02)


def test_parking_lot_reaches_max_min_fairness():
    """A crosses c0 -> c1 -> c2, B only c0 -> c1, C only c1 -> c2 (all links C): max-min
    gives each C/2. From (0.8, 0.1, 0.1) C every rate is within 2 % of C/2 from interval
    80 on (measured ~40 to 5 %)."""
    links = duplex("c0", "c1", C, 0.005) + duplex("c1", "c2", C, 0.005)
    for k, (a, b) in enumerate((("c0", "c2"), ("c0", "c1"), ("c1", "c2"))):
        links += duplex(f"i{k}", a, C, 1e-4) + duplex(b, f"o{k}", C, 1e-4)
    fl = [SimFlow("A", ("i0", "c0", "c1", "c2", "o0"), 0.8 * C), SimFlow("B", ("i1", "c0", "c1", "o1"), 0.1 * C),
          SimFlow("C", ("i2", "c1", "c2", "o2"), 0.1 * C)]
    r = XcpLoopSim(links, fl).run(120)
    assert converged_interval(r, dict.fromkeys("ABC", C / 2), 0.02) <= 80
    assert {t.limiter for t in r.trips if t.flow == "A" and t.seq > 80} <= {("c0", "c1"), ("c1", "c2")}
