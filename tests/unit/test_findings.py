"""analysis.findings: Welch and Fieller intervals, the verdict rule, conjunctions, tables."""

import math

import pandas as pd
import pytest

from analysis import findings as F
from analysis.stats import t_quantile


def test_welch_difference_matches_scipy():
    stats = pytest.importorskip("scipy.stats")  # slow to import in the guest, fine here
    a, b = [1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.5]
    iv = F.welch_difference(a, b)
    ref = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert iv.estimate == pytest.approx(2.0 - 5.625)
    assert (iv.lo, iv.hi) == (pytest.approx(ref.low), pytest.approx(ref.high))


def test_welch_needs_two_values_per_group_and_handles_zero_variance():
    with pytest.raises(ValueError, match=">= 2 values"):
        F.welch_difference([1.0], [1.0, 2.0])
    assert F.welch_difference([2.0, 2.0], [1.0, 1.0, float("nan")]) == F.Interval(1.0, 1.0, 1.0)


def test_fieller_reduces_to_the_t_interval_for_a_constant_denominator():
    a, b = [9.0, 10.0, 11.0], [2.0, 2.0, 2.0]
    iv = F.fieller_ratio(a, b)
    t = 4.302652729911275  # t(0.975, 2)
    assert iv.estimate == pytest.approx(5.0)
    assert (iv.lo, iv.hi) == (pytest.approx((10 - t / math.sqrt(3)) / 2), pytest.approx((10 + t / math.sqrt(3)) / 2))


def test_fieller_bounds_solve_its_quadratic():
    a, b = [10.0, 12.0, 11.0, 13.0], [5.0, 6.5, 5.5]
    iv = F.fieller_ratio(a, b)
    ma, mb = sum(a) / 4, sum(b) / 3
    va, vb = F._var(a) / 4, F._var(b) / 3
    r = ma / mb
    df = (va + r * r * vb) ** 2 / (va ** 2 / 3 + (r * r * vb) ** 2 / 2)
    t = t_quantile(df, 0.95)
    for bound in (iv.lo, iv.hi):
        assert (ma - bound * mb) ** 2 == pytest.approx(t * t * (va + bound * bound * vb))
    assert iv.lo < r < iv.hi


def test_fieller_is_unbounded_when_the_denominator_may_be_zero():
    iv = F.fieller_ratio([1.0, 1.1], [0.1, -0.05])
    assert (iv.lo, iv.hi) == (-math.inf, math.inf)
    with pytest.raises(ValueError, match="denominator"):
        F.fieller_ratio([1.0, 2.0], [0.0, 0.0])


@pytest.mark.parametrize("iv, low, high, verdict", [
    (F.Interval(1.5, 1.2, 1.8), 1.0, None, F.HOLDS),
    (F.Interval(0.8, 0.7, 0.9), 1.0, None, F.FAILS),
    (F.Interval(1.0, 0.9, 1.1), 1.0, None, F.INCONCLUSIVE),
    (F.Interval(1.0, 0.95, 1.05), 0.9, 1.1, F.HOLDS),
    (F.Interval(1.3, 1.2, 1.4), 0.9, 1.1, F.FAILS),
    (F.Interval(1.1, 1.05, 1.15), 0.9, 1.1, F.INCONCLUSIVE),
    (F.Interval(0.5, 0.4, 0.6), None, 1.0, F.HOLDS),
    (F.Interval(1.0, -math.inf, math.inf), None, 1.0, F.INCONCLUSIVE),
    (F.Interval(1.0, math.nan, math.nan), 1.0, None, F.INCONCLUSIVE),
])
def test_judge(iv, low, high, verdict):
    assert F.judge(iv, low, high) == verdict


def test_judge_needs_a_bound():
    with pytest.raises(ValueError, match="bound"):
        F.judge(F.Interval(1, 0, 2), None, None)


def test_compare_verdict_paths():
    hi, lo = [20.0, 21.0, 19.0], [10.0, 10.5, 9.5]
    held = F.compare("X", "a beats b", ("a", hi), ("b", lo), low=1.0, unit="Gb/s")
    assert held.verdict == F.HOLDS and held.estimate == pytest.approx(2.0) and held.lo > 1
    assert (held.a.n, held.b.n) == (3, 3) and held.a.mean == pytest.approx(20) and held.a.lo < 20 < held.a.hi
    assert "lies inside a / b > 1" in held.reason
    assert F.compare("X", "b beats a", ("b", lo), ("a", hi), low=1.0).verdict == F.FAILS
    noisy = F.compare("X", "a beats b", ("a", [5.0, 25.0]), ("b", [10.0, 10.4]), low=1.0)
    assert noisy.verdict == F.INCONCLUSIVE and "straddles" in noisy.reason
    single = F.compare("X", "a beats b", ("a", [20.0]), ("b", lo), low=1.0)
    assert single.verdict == F.INCONCLUSIVE and "fewer than 2" in single.reason and math.isnan(single.lo)
    diff = F.compare("X", "a - b > 5", ("a", hi), ("b", lo), low=5.0, relative=False)
    assert diff.verdict == F.HOLDS and diff.effect == "a - b" and diff.estimate == pytest.approx(10)


def test_compare_falls_back_to_the_difference_for_a_zero_denominator():
    f = F.compare("X", "a beats b", ("a", [2.0, 2.2, 2.1]), ("b", [0.0, 0.0, 0.0]), low=1.0)
    assert f.verdict == F.HOLDS and f.effect == "a - b" and "difference" in f.reason
    assert F.compare("X", "a near b", ("a", [2.0, 2.2]), ("b", [0.0, 0.0]), low=0.9, high=1.1).verdict \
        == F.INCONCLUSIVE


def test_against_a_fixed_value():
    f = F.against("F5", "small", ("n_e = 2", [1e5, 1.1e5, 1.2e5]), high=0.154, scale=1e-6, unit="MB")
    assert f.verdict == F.HOLDS and f.estimate == pytest.approx(0.11) and f.b is None
    assert F.against("F5", "small", ("x", [1e6, 1.1e6]), high=0.154, scale=1e-6).verdict == F.FAILS


def test_all_of_is_a_conjunction():
    ok = F.compare("X", "c", ("a", [2.0, 2.1, 1.9]), ("b", [1.0, 1.0, 1.0]), low=1.0, where="10 m")
    close = F.compare("X", "c", ("a", [1.3, 1.35, 1.25]), ("b", [1.0, 1.0, 1.0]), low=1.0, where="100 m")
    bad = F.compare("X", "c", ("a", [0.5, 0.5, 0.5]), ("b", [1.0, 1.1, 0.9]), low=1.0, where="bad")
    unsure = F.compare("X", "c", ("a", [0.5, 2.0]), ("b", [1.0, 1.1]), low=1.0, where="unsure")
    gap = F.not_measured("X", "c", "more points")
    both = F.all_of("X", "c", [ok, close, gap], "points")
    assert both.verdict == F.HOLDS and both.where == "100 m" and "2 hold, 1 not measured" in both.reason
    assert F.all_of("X", "c", [ok, unsure, bad], "points").where == "bad"
    assert F.all_of("X", "c", [ok, unsure], "points").verdict == F.INCONCLUSIVE
    none = F.all_of("X", "c", [gap, gap], "cca = saw at two loads")
    assert none.verdict == F.NOT_MEASURED and none.reason == "needs more points"    # the parts' own reason
    empty = F.all_of("X", "c", [], "cca = saw at two loads")
    assert empty.verdict == F.NOT_MEASURED and empty.reason == "needs cca = saw at two loads"


def test_a_finding_refuses_an_unknown_verdict():
    with pytest.raises(ValueError, match="verdict"):
        F.Finding(id="X", claim="c", verdict="maybe", reason="")


def test_tables_and_files(tmp_path):
    found = [F.compare("F1", "a beats b", ("a", [2.0, 2.1, 1.9]), ("b", [1.0, 1.1, 0.9]), low=1.0, unit="Gb/s",
                       side="spurious 0.1 | 0.2"),
             F.not_measured("F2", "c beats d", "cca = sawl")]
    table = F.write(found, tmp_path, preamble="E1, size_scale 0.1 %")
    assert list(table.columns) == F.COLUMNS and list(table["verdict"]) == [F.HOLDS, F.NOT_MEASURED]
    assert (tmp_path / "findings.csv").read_text().startswith("id,claim,paper,verdict")
    md = (tmp_path / "findings.md").read_text()
    assert "size_scale 0.1 %" in md and "1 holds, 0 does not hold, 0 inconclusive, 1 not measured" in md
    assert "| F1 | a beats b | holds |" in md and "spurious 0.1 \\| 0.2" in md
    assert "a: 2 Gb/s [" in md and "a / b = 2 [" in md
    page = F.to_html(table)
    assert "class='verdict v-holds'" in page and "class='verdict v-not-measured'" in page
    assert F.is_findings(F.TITLE + ", scale 1 %", table) and not F.is_findings("Table 1", table)


def test_display_reads_a_findings_csv_back(tmp_path):
    F.write([F.not_measured("F2", "c beats d", "cca = sawl")], tmp_path)
    shown = F.display(pd.read_csv(tmp_path / "findings.csv"))
    assert shown.loc[0, "a"] == "" and shown.loc[0, "effect (95 % interval)"] == "" and shown.loc[0, "where"] == ""


def _paired_t_accepts(a: list[float], b: list[float], r: float) -> bool:
    """The paired t test of d_i = a_i - r b_i against 0 at 5 %, from its definition."""
    d = [x - r * y for x, y in zip(a, b)]
    n = len(d)
    m = sum(d) / n
    sd = math.sqrt(sum((v - m) ** 2 for v in d) / (n - 1))
    return abs(m) <= t_quantile(n - 1, 0.95) * sd / math.sqrt(n)


def test_paired_ratio_is_the_set_the_paired_t_test_accepts():
    # strongly correlated pairs (the seed sets both): a narrow paired interval
    a, b = [640.0, 602.0, 558.0, 611.0], [618.0, 575.0, 545.0, 590.0]
    iv = F.paired_ratio(a, b)
    assert iv.estimate == pytest.approx(sum(a) / sum(b))
    # scan r: accepted exactly inside [lo, hi]
    for k in range(-400, 401):
        r = iv.estimate + k * 1e-4
        inside = iv.lo + 1e-9 < r < iv.hi - 1e-9
        outside = r < iv.lo - 1e-9 or r > iv.hi + 1e-9
        if inside:
            assert _paired_t_accepts(a, b, r)
        elif outside:
            assert not _paired_t_accepts(a, b, r)
    unpaired = F.fieller_ratio(a, b)
    assert iv.hi - iv.lo < (unpaired.hi - unpaired.lo) / 3  # the pairing removes the seeds' spread
    assert iv.lo > 1 > unpaired.lo


def test_paired_difference_matches_scipy_and_drops_incomplete_pairs():
    stats = pytest.importorskip("scipy.stats")
    a, b = [3.0, 5.0, 4.5, 7.0], [2.0, 4.5, 3.0, 6.0]
    iv = F.paired_difference(a + [float("nan")], b + [1.0])
    ref = stats.ttest_rel(a, b).confidence_interval(0.95)
    assert iv.estimate == pytest.approx(1.0)
    assert (iv.lo, iv.hi) == (pytest.approx(ref.low), pytest.approx(ref.high))


def test_paired_intervals_refuse_bad_input_and_open_for_a_zero_denominator():
    with pytest.raises(ValueError, match="one length"):
        F.paired_ratio([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match=">= 2 pairs"):
        F.paired_difference([1.0, float("nan")], [1.0, 2.0])
    with pytest.raises(ValueError, match="denominator"):
        F.paired_ratio([1.0, 2.0], [1.0, -1.0])
    assert F.paired_ratio([1.0, 1.1, 0.9], [0.1, -0.05, 0.02]) == F.Interval(
        pytest.approx(3 / 0.07), -math.inf, math.inf)


def test_compare_paired_uses_the_pairs():
    a, b = [640.0, 602.0, 558.0], [618.0, 575.0, 545.0]
    unpaired = F.compare("X", "a beats b", ("a", a), ("b", b), low=1.0)
    paired = F.compare("X", "a beats b", ("a", a), ("b", b), low=1.0, paired=True)
    assert unpaired.verdict == F.INCONCLUSIVE and paired.verdict == F.HOLDS
    assert (paired.lo, paired.hi) == (F.paired_ratio(a, b).lo, F.paired_ratio(a, b).hi)
    dropped = F.compare("X", "a beats b", ("a", [1.0, float("nan")]), ("b", [1.0, 2.0]), low=1.0, paired=True)
    assert dropped.verdict == F.INCONCLUSIVE and "fewer than 2 pairs (1)" in dropped.reason
    zero = F.compare("X", "fewer drops", ("a", [0.2, 0.21, 0.22]), ("b", [0.0, 0.0, 0.0]), high=1.0, paired=True)
    assert zero.effect == "a - b" and zero.verdict == F.FAILS
