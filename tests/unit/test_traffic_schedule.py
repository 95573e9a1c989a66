"""Traffic schedules: reproducible for a seed, Poisson arrivals (KS test), uniform
distinct pairs, size distributions whose empirical moments match their parameters."""

import math

import numpy as np
import pytest
from scipy import stats

from testbed.errors import DefinitionError
from testbed.traffic.schedule import (BimodalLognormal, EmpiricalCDF, Fixed, FlowSpec, Schedule, batch,
                                      long_lived, migration_batch, nested_subset, poisson_long_lived,
                                      poisson_schedule)

HOSTS = [f"h{i}" for i in range(1, 9)]
E1_SIZES = BimodalLognormal(p_small=0.8, median_small=10e6, sigma_small=0.5, median_large=1e9, sigma_large=0.5)


def test_same_seed_same_schedule_other_seed_differs():
    a = poisson_schedule(HOSTS, 200, 5.0, E1_SIZES, seed=42)
    b = poisson_schedule(HOSTS, 200, 5.0, E1_SIZES, seed=42)
    c = poisson_schedule(HOSTS, 200, 5.0, E1_SIZES, seed=43)
    assert a.flows == b.flows and len(a) > 0
    assert a.flows != c.flows
    assert a.meta["seed"] == 42 and a.meta["sizes"]["p_small"] == 0.8


def test_schedule_json_round_trip():
    a = Schedule.merge(poisson_schedule(HOSTS, 50, 2.0, Fixed(10_000), seed=1),
                       long_lived([("h1", "h2")], duration_s=1.0, window_clamp_bytes=65536))
    b = Schedule.from_json(a.to_json())
    assert b.flows == a.flows and b.meta == a.meta
    assert [f.id for f in b.flows] == list(range(len(b)))


def test_poisson_inter_arrivals_pass_ks_test():
    rate, duration = 500.0, 40.0
    s = poisson_schedule(HOSTS, rate, duration, Fixed(1000), seed=7)
    t = np.array([f.start_s for f in s.flows])
    assert np.all(np.diff(t) >= 0) and t[-1] < duration
    # count: Poisson(rate x duration), within 4 standard deviations
    assert abs(len(t) - rate * duration) < 4 * math.sqrt(rate * duration)
    gaps = np.diff(np.concatenate([[0.0], t]))
    assert stats.kstest(gaps, "expon", args=(0, 1 / rate)).pvalue > 1e-3
    # The test can fail: evenly spaced arrivals at the same rate are rejected.
    assert stats.kstest(np.full(len(gaps), 1 / rate), "expon", args=(0, 1 / rate)).pvalue < 1e-6
    # and so is the wrong rate
    assert stats.kstest(gaps, "expon", args=(0, 1 / (1.1 * rate))).pvalue < 1e-3


def test_pairs_are_distinct_and_uniform():
    s = poisson_schedule(HOSTS, 2000, 20.0, Fixed(1000), seed=3)
    assert all(f.src != f.dst for f in s.flows)
    k = len(HOSTS)
    counts = {}
    for f in s.flows:
        counts[(f.src, f.dst)] = counts.get((f.src, f.dst), 0) + 1
    assert len(counts) == k * (k - 1)
    assert stats.chisquare(list(counts.values())).pvalue > 1e-3


def test_bimodal_lognormal_moments_match_parameters():
    rng = np.random.default_rng(11)
    n = 400_000
    x = E1_SIZES.sample(rng, n).astype(float)
    assert x.min() >= 1
    se = math.sqrt(E1_SIZES.variance() / n)
    assert abs(x.mean() - E1_SIZES.mean()) < 5 * se
    # the standard deviation within 3 % (its sampling error at this n is about 0.5 %)
    assert x.std() == pytest.approx(math.sqrt(E1_SIZES.variance()), rel=0.03)
    # the two modes: share below the geometric midpoint is p_small; medians of the parts
    mid = math.sqrt(10e6 * 1e9)
    small = x < mid
    assert small.mean() == pytest.approx(0.8, abs=0.005)
    assert np.median(x[small]) == pytest.approx(10e6, rel=0.01)
    assert np.median(x[~small]) == pytest.approx(1e9, rel=0.01)
    assert np.log(x[small]).std() == pytest.approx(0.5, rel=0.02)


def test_size_scale_shrinks_sizes_and_is_recorded():
    a = poisson_schedule(HOSTS, 100, 2.0, E1_SIZES, seed=5)
    b = poisson_schedule(HOSTS, 100, 2.0, E1_SIZES, seed=5, size_scale=0.01)
    assert [f.start_s for f in a.flows] == [f.start_s for f in b.flows]
    for fa, fb in zip(a.flows, b.flows):
        assert fb.size_bytes == max(1, int(np.rint(fa.size_bytes * 0.01)))
    assert b.meta["size_scale"] == 0.01


def test_empirical_cdf_from_file(tmp_path):
    p = tmp_path / "cdf.txt"
    p.write_text("# size_bytes cdf\n1000 0.5\n10000, 0.9\n\n100000 1.0  # tail\n")
    d = EmpiricalCDF.from_file(p)
    rng = np.random.default_rng(2)
    x = d.sample(rng, 200_000)
    assert (x == 1000).mean() == pytest.approx(0.5, abs=0.005)  # the atom at the first point
    assert x.max() <= 100000 and x.min() >= 1000
    assert x.mean() == pytest.approx(d.mean(), rel=0.01)
    assert x.std() == pytest.approx(math.sqrt(d.variance()), rel=0.02)
    # inside a segment sizes are uniform: KS against U(10000, 100000)
    seg = x[x > 10000]
    assert stats.kstest(seg, "uniform", args=(10000, 90000)).pvalue > 1e-3


@pytest.mark.parametrize("text, match", [
    ("1000 0.5\n900 1.0\n", r"cdf.txt point 2"),
    ("1000 0.5\n2000 0.9\n", r"last probability"),
    ("1000 0.5 7\n", r"cdf.txt:1"),
    ("abc 0.5\n", r"cdf.txt:1"),
])
def test_empirical_cdf_errors_name_the_file(tmp_path, text, match):
    p = tmp_path / "cdf.txt"
    p.write_text(text)
    with pytest.raises(DefinitionError, match=match):
        EmpiricalCDF.from_file(p)


def test_fixed_and_errors():
    assert Fixed(10_000).sample(np.random.default_rng(0), 3).tolist() == [10_000] * 3
    with pytest.raises(DefinitionError, match="size_bytes"):
        Fixed(0)
    with pytest.raises(DefinitionError, match="p_small"):
        BimodalLognormal(1.5, 1e6, 0.5, 1e9, 0.5)
    with pytest.raises(DefinitionError, match="rate_per_s"):
        poisson_schedule(HOSTS, 0, 1.0, Fixed(1), seed=0)
    with pytest.raises(DefinitionError, match="hosts"):
        poisson_schedule(["h1"], 1, 1.0, Fixed(1), seed=0)
    with pytest.raises(DefinitionError, match="dst"):
        FlowSpec(0, "h1", "h1", 10)
    with pytest.raises(DefinitionError, match="duration_s"):
        FlowSpec(0, "h1", "h2", 10, duration_s=1.0)
    with pytest.raises(DefinitionError, match="window_clamp_bytes"):
        FlowSpec(0, "h1", "h2", None, window_clamp_bytes=10)
    with pytest.raises(DefinitionError, match="duplicate"):
        Schedule((FlowSpec(0, "h1", "h2", 1), FlowSpec(0, "h2", "h1", 1)))


def test_migration_batch_spreads_elephants_equally():
    s = migration_batch(["a1", "a2", "a3"], ["b1", "b2", "b3"], 48, size_scale=0.01)
    assert len(s) == 48 and all(f.start_s == 0 for f in s.flows)
    eleph = [f for f in s.flows if f.tag == "elephant"]
    assert len(eleph) == 6 and all(f.size_bytes == 30_000_000 for f in eleph)
    assert all(f.size_bytes == 2_500_000 for f in s.flows if f.tag == "mouse")
    per_src = {src: sum(1 for f in eleph if f.src == src) for src in ("a1", "a2", "a3")}
    assert per_src == {"a1": 2, "a2": 2, "a3": 2}
    assert {f.src for f in s.flows} == {"a1", "a2", "a3"} and s.meta["size_scale"] == 0.01


def test_batch_and_long_lived():
    b = batch([("h1", "h2", 100), ("h2", "h1", 200, "x")], at_s=1.5)
    assert [(f.size_bytes, f.start_s, f.tag) for f in b.flows] == [(100, 1.5, ""), (200, 1.5, "x")]
    ll = long_lived([("h1", "h2"), ("h3", "h4")], start_s=1.0, stagger_s=0.5, sndbuf_bytes=1 << 20)
    assert [f.start_s for f in ll.flows] == [1.0, 1.5]
    assert all(f.size_bytes is None and f.trace and f.sndbuf_bytes == 1 << 20 for f in ll.flows)


def test_poisson_long_lived_has_n_flows_at_poisson_instants_between_uniform_pairs():
    """E5: exactly n flows; conditioned on n arrivals a Poisson process's instants are
    uniform over the horizon (KS test; gaps exponential at rate n / horizon); pairs
    uniform over the ordered pairs of distinct hosts; every flow long-lived and traced."""
    n, horizon = 4000, 40.0
    s = poisson_long_lived(HOSTS, n, horizon, seed=11)
    t = np.array([f.start_s for f in s.flows])
    assert len(s) == n and np.all(np.diff(t) >= 0) and 0 <= t[0] and t[-1] < horizon
    assert stats.kstest(t, "uniform", args=(0, horizon)).pvalue > 1e-3
    gaps = np.diff(np.concatenate([[0.0], t]))
    assert stats.kstest(gaps, "expon", args=(0, horizon / n)).pvalue > 1e-3
    # can fail: instants crowded into the first half are not uniform
    assert stats.kstest(t / 2, "uniform", args=(0, horizon)).pvalue < 1e-6
    counts: dict[tuple[str, str], int] = {}
    for f in s.flows:
        assert f.src != f.dst and f.size_bytes is None and f.duration_s is None and f.trace
        counts[(f.src, f.dst)] = counts.get((f.src, f.dst), 0) + 1
    assert len(counts) == len(HOSTS) * (len(HOSTS) - 1)
    assert stats.chisquare(list(counts.values())).pvalue > 1e-3
    assert poisson_long_lived(HOSTS, n, horizon, seed=11) == s
    assert poisson_long_lived(HOSTS, n, horizon, seed=12) != s
    assert s.meta["builder"] == "poisson_long_lived" and s.meta["n_flows"] == n


@pytest.mark.parametrize("args,key", [((["h1"], 10, 1.0), "hosts"), ((HOSTS, 0, 1.0), "n_flows"),
                                      ((HOSTS, 10, 0.0), "horizon_s"), ((HOSTS, 10, math.inf), "horizon_s")])
def test_poisson_long_lived_errors_name_the_argument(args, key):
    with pytest.raises(DefinitionError) as err:
        poisson_long_lived(*args, seed=1)
    assert err.value.key == key


def test_nested_subsets_share_their_flows_and_stay_a_poisson_schedule():
    """E5's scale check: the flows at a larger scale are a subset of those at a smaller
    one, with the same ids; a subset is again uniform instants between uniform pairs."""
    n, horizon = 4000, 40.0
    base = poisson_long_lived(HOSTS, n, horizon, seed=11)
    big, small = nested_subset(base, 2000, seed=11), nested_subset(base, 1000, seed=11)
    assert len(big) == 2000 and len(small) == 1000
    assert set(small.flows) <= set(big.flows)                    # the same flows, the same ids
    assert sorted(f.id for f in big.flows) == list(range(2000))   # id = rank in the random order
    assert [f.start_s for f in small.flows] == sorted(f.start_s for f in small.flows)
    as_base = {(f.src, f.dst, f.start_s) for f in base.flows}
    assert all((f.src, f.dst, f.start_s) in as_base for f in big.flows)
    t = np.array([f.start_s for f in small.flows])
    assert stats.kstest(t, "uniform", args=(0, horizon)).pvalue > 1e-3
    # can fail: the first 1000 flows by start time are not a uniform subset
    assert stats.kstest(np.array([f.start_s for f in base.flows[:1000]]), "uniform",
                        args=(0, horizon)).pvalue < 1e-6
    counts: dict[tuple[str, str], int] = {}
    for f in small.flows:
        counts[(f.src, f.dst)] = counts.get((f.src, f.dst), 0) + 1
    assert stats.chisquare(list(counts.values())).pvalue > 1e-3
    assert nested_subset(base, 1000, seed=11) == small and nested_subset(base, 1000, seed=12) != small
    assert nested_subset(base, n, seed=11).meta["nested_subset"] == {"of_flows": n, "n_flows": n, "seed": 11}
    for bad in (0, n + 1, 2.5):
        with pytest.raises(DefinitionError) as err:
            nested_subset(base, bad, seed=11)  # type: ignore[arg-type]
        assert err.value.key == "n_flows"
