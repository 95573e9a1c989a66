"""XCP's controllers (testbed.xcp) against hand-computed feedback, the stability
condition of Katabi et al., and a fluid model of macroflows sharing one bottleneck."""

from __future__ import annotations

import math
import random

import pytest

from testbed.xcp import (ALPHA_MAX, ControlDecision, LinkController, Probe, UnstableParameterError,
                         XcpParameterError, XcpParameters, aggregate_feedback_bps, decide, initial_probe,
                         lower_feedback, next_rate_bps, shuffled_bps, stable_beta)

C = 1e9                    # the paper's 1 Gb/s
D = 0.05                   # the paper's control interval, s
PAPER = XcpParameters()    # alpha 0.4, beta 0.226, gamma 0.1, d 50 ms, TU 100 %


def bytes_at(rate_bps: float) -> float:
    """Bytes that arrive in one interval at ``rate_bps``."""
    return rate_bps * D / 8


# --- stability ----------------------------------------------------------------------

def test_paper_parameters_pass_and_match_the_condition():
    assert math.isclose(stable_beta(0.4), 0.4 ** 2 * math.sqrt(2)) and round(stable_beta(0.4), 4) == 0.2263
    assert (PAPER.alpha, PAPER.beta, PAPER.gamma, PAPER.interval_s) == (0.4, 0.226, 0.1, 0.05)
    XcpParameters(alpha=0.2, beta=0.056)        # the paper's earlier setting [1]
    assert round(ALPHA_MAX, 4) == 0.5554


@pytest.mark.parametrize("kwargs, parameter", [
    ({"alpha": 0.6, "beta": stable_beta(0.6)}, "alpha"),     # above pi/(4 sqrt 2)
    ({"alpha": 0.0, "beta": 0.0}, "alpha"),
    ({"alpha": -0.1, "beta": 0.01}, "alpha"),
    ({"alpha": 0.4, "beta": 0.3}, "beta"),                   # not alpha^2 sqrt 2
    ({"alpha": 0.4, "beta": 0.2}, "beta"),
])
def test_unstable_settings_are_refused_naming_parameter_value_and_range(kwargs, parameter):
    with pytest.raises(UnstableParameterError) as err:
        XcpParameters(**kwargs)
    assert err.value.parameter == parameter and err.value.value == kwargs[parameter]
    assert f"{parameter}={kwargs[parameter]!r}" in str(err.value)
    assert ("0.5554" if parameter == "alpha" else f"{stable_beta(kwargs['alpha']):.4f}") in str(err.value)
    assert isinstance(err.value, ValueError)


def test_outside_bound_is_an_explicit_choice():
    """The paper's Fig. 4 sweeps alpha = 0.6, outside the proof: accepted only when asked."""
    p = XcpParameters(alpha=0.6, beta=stable_beta(0.6), outside_stability_bound=True)
    assert p.alpha == 0.6
    with pytest.raises(XcpParameterError, match="alpha"):
        XcpParameters(alpha=0.0, beta=0.0, outside_stability_bound=True)


@pytest.mark.parametrize("kwargs, parameter", [
    ({"gamma": 1.5}, "gamma"), ({"gamma": -0.1}, "gamma"), ({"interval_s": 0.0}, "interval_s"),
    ({"target_utilisation": 1.2}, "target_utilisation")])
def test_other_parameters_are_checked(kwargs, parameter):
    with pytest.raises(XcpParameterError) as err:
        XcpParameters(**kwargs)
    assert err.value.parameter == parameter and not isinstance(err.value, UnstableParameterError)


# --- hand-computed feedback ---------------------------------------------------------

def test_under_utilised_link_gives_equal_increments():
    """u = 0.6 C, Q = 0, 3 macroflows: S = 0.4 C = 4e8, Phi = 0.4 S = 1.6e8 bit/s,
    h = max(0, 0.1 x 6e8 - 1.6e8) = 0, p_i = 1.6e8 / 3, n_i = 0."""
    dec = decide(C, bytes_at(0.6 * C), 0.0, 3, PAPER)
    assert dec.input_rate_bps == pytest.approx(6e8)
    assert dec.phi_bps == pytest.approx(1.6e8) and dec.shuffled_bps == 0.0
    for u_i in (5e8, 1e8, 0.0):
        assert dec.feedback_bps(u_i) == pytest.approx(1.6e8 / 3)


def test_full_link_with_persistent_queue():
    """u = C, Q = 10 000 B: S = 0, Phi = -0.226 x 8 x 10 000 / 0.05 = -361 600 bit/s;
    h = 0.1 x 1e9 - 361 600 = 99 638 400; p_i = h / 2; n_i = u_i (h + 361 600) / 1e9 =
    0.1 u_i."""
    dec = decide(C, bytes_at(C), 10_000, 2, PAPER)
    assert dec.phi_bps == pytest.approx(-361_600)
    assert dec.shuffled_bps == pytest.approx(99_638_400)
    assert dec.positive_bps() == pytest.approx(49_819_200)
    assert dec.negative_bps(7e8) == pytest.approx(7e7)
    assert dec.feedback_bps(7e8) == pytest.approx(49_819_200 - 7e7)
    assert dec.feedback_bps(3e8) == pytest.approx(49_819_200 - 3e7)


def test_overloaded_link_cuts_in_proportion():
    """u = 1.5 C, Q = 0: Phi = 0.4 x (-5e8) = -2e8; h = max(0, 1.5e8 - 2e8) = 0;
    n_i = u_i x 2e8 / 1.5e9, p_i = 0: every macroflow loses 13.3 % of its rate."""
    dec = decide(C, bytes_at(1.5 * C), 0.0, 2, PAPER)
    assert dec.phi_bps == pytest.approx(-2e8) and dec.shuffled_bps == 0.0
    assert dec.feedback_bps(1.2e9) == pytest.approx(-1.2e9 * 2e8 / 1.5e9)
    assert dec.feedback_bps(3e8) == pytest.approx(-4e7)


def test_formulas_of_the_efficiency_and_shuffling():
    assert aggregate_feedback_bps(1e8, 5000, PAPER) == pytest.approx(0.4e8 - 0.226 * 8 * 5000 / 0.05)
    assert shuffled_bps(-3e7, 1e9, 0.1) == pytest.approx(7e7)
    assert shuffled_bps(2e8, 1e9, 0.1) == 0.0
    tu = XcpParameters(target_utilisation=0.9)
    assert decide(C, bytes_at(0.9 * C), 0, 1, tu).phi_bps == pytest.approx(0.0, abs=1e-3)


def test_feedback_sums_to_phi():
    """Summed over the N macroflows (sum u_i = u) the feedback is Phi: random cases."""
    rng = random.Random(3)
    for _ in range(200):
        rates = [rng.uniform(0, 6e8) for _ in range(rng.randint(1, 6))]
        q = rng.choice([0.0, rng.uniform(0, 3e5)])
        dec = decide(C, bytes_at(sum(rates)), q, len(rates), PAPER)
        assert sum(dec.feedback_bps(r) for r in rates) == pytest.approx(dec.phi_bps, rel=1e-9, abs=1e-3)


def test_probe_takes_the_smallest_feedback_on_its_path():
    probe = initial_probe("e1-e5", 2e8, 1e9)
    assert probe == Probe("e1-e5", 2e8, 8e8)
    hop1 = ControlDecision(phi_bps=3e8, shuffled_bps=0.0, macroflows=2, input_rate_bps=4e8)   # +1.5e8
    hop2 = ControlDecision(phi_bps=-1e8, shuffled_bps=0.0, macroflows=2, input_rate_bps=1e9)  # -2e7
    after1 = lower_feedback(probe, hop1.feedback_bps(probe.rate_bps))
    assert after1.feedback_bps == pytest.approx(1.5e8)
    after2 = lower_feedback(after1, hop2.feedback_bps(probe.rate_bps))
    assert after2.feedback_bps == pytest.approx(-2e7)
    assert lower_feedback(after2, 5e8) is after2            # a larger feedback changes nothing
    assert next_rate_bps(2e8, after2.feedback_bps) == pytest.approx(1.8e8)
    assert next_rate_bps(1e7, -5e7) == 0.0 and next_rate_bps(9e8, 5e8, max_rate_bps=1e9) == 1e9


def test_link_controller_counts_probes_bytes_and_min_queue():
    link = LinkController(C, PAPER)
    first = link.on_probe(Probe(1, 1e8, 1e9))
    assert first.feedback_bps == 0.0          # before its first decision a link knows nothing: 0
    link.on_probe(Probe(2, 1e8, 1e9))
    link.on_data(bytes_at(1e8))
    link.on_data(bytes_at(1e8))
    for q in (3000, 1200, 5000):
        link.on_queue(q)
    dec = link.end_interval()
    assert dec.macroflows == 2 and dec.input_rate_bps == pytest.approx(2e8)
    assert dec.phi_bps == pytest.approx(0.4 * 8e8 - 0.226 * 8 * 1200 / 0.05)
    again = link.end_interval()               # counters were reset: an idle interval
    assert again.macroflows == 1 and again.input_rate_bps == 0.0 and again.phi_bps == pytest.approx(0.4 * C)


# --- fluid model: N macroflows, one bottleneck, discrete control intervals --------------

def fluid(rates: list[float], params: XcpParameters, intervals: int) -> list[tuple[list[float], float]]:
    """Macroflows at ``rates`` (bit/s) share one link of capacity C. Every interval each
    sends its traffic (the link counts it and samples its fluid queue at both ends of the
    interval) and one probe, answered with the link's previous decision (as a router does
    between two decisions); the edge applies the feedback for the next interval. Returns
    (rates, queue bytes) at the start of every interval, 0..intervals."""
    link = LinkController(C, params)
    q = 0.0
    history = []
    for _ in range(intervals + 1):
        history.append((list(rates), q))
        q_next = max(0.0, q + (sum(rates) - C) * params.interval_s / 8)
        for r in rates:
            link.on_data(r * params.interval_s / 8)
        link.on_queue(q)
        link.on_queue(q_next)
        answers = [link.on_probe(initial_probe(i, r, 10 * C)) for i, r in enumerate(rates)]
        link.end_interval()
        rates = [next_rate_bps(r, a.feedback_bps) for r, a in zip(rates, answers)]
        q = q_next
    return history


def test_fairness_contracts_by_one_minus_gamma_per_interval():
    """At u = C, Q = 0 Phi = 0 and h = gamma C, so r_i' = r_i + gamma C / N - gamma r_i:
    the distance to the fair share shrinks by (1 - gamma) each interval (after the link's
    first, feedback-free interval). From (C, 0): r_0(k) = C/2 + C/2 (1 - gamma)^(k-1)."""
    for gamma in (0.1, 0.3):
        hist = fluid([C, 0.0], XcpParameters(gamma=gamma), 30)
        for k, (rates, q) in enumerate(hist[1:], start=1):
            assert rates[0] == pytest.approx(C / 2 + C / 2 * (1 - gamma) ** (k - 1), rel=1e-9)
            assert sum(rates) == pytest.approx(C, rel=1e-12) and q < 1e-3


def intervals_to_fair_share(hist: list[tuple[list[float], float]], tol: float) -> int:
    """First interval from which every rate stays within ``tol`` (relative) of C / N."""
    n = len(hist[0][0])
    ok = [all(abs(r - C / n) <= tol * C / n for r in rates) for rates, _ in hist]
    for k in range(len(ok)):
        if all(ok[k:]):
            return k
    return len(ok)


def test_granted_rates_reach_the_fair_share_in_the_derived_number_of_intervals():
    """From the worst start (C, 0) at capacity the distance to the fair share is
    C/2 (1 - gamma)^(k-1), so it is within 5 % from k = 1 + ceil(ln 0.05 / ln(1 - gamma)):
    10 intervals for gamma = 0.3, 30 for the paper's gamma = 0.1 (1.5 s at d = 50 ms)."""
    for gamma, want in ((0.3, 10), (0.1, 30)):
        assert 1 + math.ceil(math.log(0.05) / math.log(1 - gamma)) == want
        assert intervals_to_fair_share(fluid([C, 0.0], XcpParameters(gamma=gamma), 60), 0.05) == want


def test_from_unequal_starts_below_capacity_the_total_fills_the_link_within_10_intervals():
    """Starts (0.5, 0.1, 0) C: the total is within 5 % of C from interval 10 on (the
    efficiency controller closes 40 % of the spare per interval), no rate goes negative,
    no standing queue is left, and every rate ends within 5 % of C/3 (measured: by
    interval 12 with gamma = 0.3, 33 with gamma = 0.1)."""
    for gamma, within in ((0.3, 15), (0.1, 45)):
        hist = fluid([0.5 * C, 0.1 * C, 0.0], XcpParameters(gamma=gamma), 60)
        assert all(abs(sum(r) - C) <= 0.05 * C for r, _ in hist[10:]), gamma
        assert all(min(r) >= 0 for r, _ in hist)
        assert intervals_to_fair_share(hist, 0.05) <= within, gamma
        assert hist[-1][1] < 1500                   # bytes


def test_overload_is_removed_and_the_queue_drained():
    """Start at twice the capacity: the queue builds, Phi turns negative (spare and queue
    terms), rates fall proportionally; from interval 20 on the total is within 5 % of C,
    and from 30 on the queue stays below 4 MSS (the probes' one-interval lag leaves a
    damped oscillation: measured up to 108 KB at interval 25)."""
    hist = fluid([1.5 * C, 0.5 * C], PAPER, 40)
    assert max(q for _, q in hist) > 1e6
    assert all(abs(sum(r) - C) <= 0.05 * C for r, _ in hist[20:])
    assert all(q < 4 * 1500 for _, q in hist[30:])
