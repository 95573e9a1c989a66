"""E5 analysis: findings on hand-built summaries whose verdicts are known by construction,
and the figures and tables written from a synthetic results folder."""

from __future__ import annotations

import html
import json
import math

import pandas as pd
import pytest

from analysis import e5, findings
from analysis.e5_findings import XCP_NOT_RUN, buffer_bytes, comparisons, evaluate, reach
from testbed.families._e5_xcp import COLUMNS as XCP_COLUMNS

TIGHT = (0.99, 1.0, 1.01)  # three repetitions: the mean times these
#: a log grid of B (bytes): 1, 2, 4, 10, 20, 40, 100, 200 MSS
GRID = (1500, 3000, 6000, 15000, 30000, 60000, 150000, 300000)


def size(b: float) -> str:
    """B as the summary writes it (the family's Quantity text)."""
    from testbed.units import Dim, format_si

    return format_si(b, Dim.SIZE)


def run_rows(arch: str, pacing: str, b: float, goodput: float, *, reps=TIGHT, drop: float = 0.01,
             occ: int = 0, late: float = 0.01, scale: int = 100) -> list[dict]:
    """The summary rows of one point: goodput (B/s) x the repetitions' spread, the core
    drop rate ``drop`` x the same, every other metric plausible."""
    out = []
    for rep, f in enumerate(reps):
        out.append({"point": "", "rep": rep, "seed": rep, "topology": "nsfnet", "arch": arch, "buffer": size(b),
                    "pacing": pacing, "routing": "flow", "cca": "reno", "flows": 1586, "scale": scale, "abilene_nodes": 0.05,
                    "flows_of_scale": 0, "common_scale": 0, "goodput_common_Bps": math.nan, "flows_common_measured": 0,
                    "xcp_alpha": 0.4, "xcp_beta": 0.226, "xcp_gamma": 0.1, "xcp_interval": "50 ms",
                    "xcp_rate_delay": "2 ms", "xcp_stability_check": True,
                    **{c: float("nan") for c in XCP_COLUMNS},
                    "rate": "1 Gbit/s",
                    "duration": "10 s", "window": "2 s", "cwnd_limit": 20, "edge_buffer": "250 ms", "bin": "500 ms",
                    "goodput_per_flow_Bps": goodput * f, "goodput_per_flow_median_Bps": goodput * f * 0.9,
                    "flows_started": 16, "flows_measured": 12, "flows_failed": 0, "core_packets": 50000,
                    "core_drop_rate": drop * f, "core_drop_rate_run": drop, "core_buffered_fraction": 0.2,
                    "edge_drops": 3, "occ_overflow": occ, "core_late": 0, "window_start_late_s": 1e-4, "link_rate_bps": 1e7,
                    "loss_events_rto": 2 + rep, "loss_events_fast": 8, "retrans_segs": 20 + rep,
                    "spurious_retrans_segs": rep, "memory_pressures": 0, "memory_drops": 0, "listen_drops": 0,
                    "lateness_p99_s": late * 1.2e-3, "lateness_p99_over_tau": late,
                    "lateness_max_s": 1e-3, "packet_hops_per_wall_s": 2e4, "paper_s_per_wall_s": 0.05})
    return out


def summary_of(curves: dict[tuple[str, str], dict[float, float]], **kw: object) -> pd.DataFrame:
    """curves: (arch, pacing) -> {B: goodput B/s}."""
    frame = pd.DataFrame([r for (a, p), pts in curves.items() for b, g in pts.items()
                          for r in run_rows(a, p, b, g, **kw)])
    frame["point"] = [f"p{i:04d}" for i in range(len(frame))]
    return frame


def by_id(s: pd.DataFrame) -> dict[str, findings.Finding]:
    return {f.id: f for f in evaluate(s)}


def saturating(reach_at: float, top: float = 1e5, grid=GRID) -> dict[float, float]:
    """A goodput curve at 50 % of ``top`` below ``reach_at`` and at ``top`` from it on."""
    return {b: (top if b >= reach_at else top / 2) for b in grid}


# ---- selection -------------------------------------------------------------------------

def test_buffer_text_is_read_as_bytes():
    assert buffer_bytes("1.5 kB") == 1500 and buffer_bytes("0 B") == 0 and buffer_bytes("1 MB") == 1e6
    assert buffer_bytes(4500) == 4500.0
    assert math.isnan(buffer_bytes("lots")) and math.isnan(buffer_bytes("15 ms"))


# ---- F1: SB beats OB in 1-6 MSS --------------------------------------------------------

IN_RANGE = (1500, 3000, 4500, 9000)


def test_f1_holds_when_sb_is_clearly_above_ob_in_the_papers_range_only():
    sb = {b: 2e5 for b in IN_RANGE} | {750: 5e4, 15000: 1e5}
    ob = {b: 1e5 for b in IN_RANGE} | {750: 6e4, 15000: 3e5}      # reversed outside 1-6 MSS: not judged
    s = summary_of({("sb", "none"): sb, ("ob", "none"): ob, ("sb", "tcp"): sb, ("ob", "tcp"): ob})
    f = by_id(s)["F1"]
    assert f.verdict == findings.HOLDS, f.reason
    assert len(f.parts) == 2 * len(IN_RANGE)
    assert {p.where.split("B = ")[1].split(" (")[0] for p in f.parts} == {"1.5 kB", "3 kB", "4.5 kB", "9 kB"}
    assert f.estimate == pytest.approx(2.0) and f.low == 1.0 and f.a.label == "SB" and f.b.label == "OB"


def test_f1_does_not_hold_when_ob_is_significantly_above_sb_at_one_b():
    sb = {b: 2e5 for b in IN_RANGE} | {3000: 1e5}
    ob = {b: 1e5 for b in IN_RANGE} | {3000: 2e5}
    f = by_id(summary_of({("sb", "none"): sb, ("ob", "none"): ob}))["F1"]
    assert f.verdict == findings.FAILS
    assert "3 kB" in f.where and f.hi < 1


def test_f1_with_one_repetition_is_inconclusive():
    s = summary_of({("sb", "none"): {3000: 2e5}, ("ob", "none"): {3000: 1e5}}, reps=(1.0,))
    f = by_id(s)["F1"]
    assert f.verdict == findings.INCONCLUSIVE and "fewer than 2" in f.reason


def test_f1_with_overlapping_noise_is_inconclusive_and_without_ob_not_measured():
    noisy = summary_of({("sb", "none"): {3000: 1.05e5}, ("ob", "none"): {3000: 1e5}}, reps=(0.6, 1.0, 1.4))
    assert by_id(noisy)["F1"].verdict == findings.INCONCLUSIVE
    only_sb = by_id(summary_of({("sb", "none"): {3000: 2e5}}))["F1"]
    assert only_sb.verdict == findings.NOT_MEASURED and "ob" in only_sb.reason


def test_f1_compares_with_ib_when_it_was_run():
    s = summary_of({("sb", "tcp"): {3000: 2e5}, ("ob", "tcp"): {3000: 1e5}, ("ib", "tcp"): {3000: 2.5e5}})
    f = by_id(s)["F1"]
    assert f.verdict == findings.FAILS and {p.b.label for p in f.parts} == {"OB", "IB"}


# ---- F2: IB beats OB with paced traffic ------------------------------------------------

def test_f2_is_not_measured_while_ib_is_not_run():
    f = by_id(summary_of({("sb", "tcp"): {3000: 2e5}, ("ob", "tcp"): {3000: 1e5}}))["F2"]
    assert f.verdict == findings.NOT_MEASURED and f.reason.startswith("ib not run")


def test_f2_judges_paced_senders_only_once_ib_rows_exist():
    s = summary_of({("ib", "tcp"): {3000: 2e5, 6000: 2e5}, ("ob", "tcp"): {3000: 1e5, 6000: 1.2e5},
                    ("ib", "none"): {3000: 1e5}, ("ob", "none"): {3000: 2e5}})   # standard: not judged
    f = by_id(s)["F2"]
    assert f.verdict == findings.HOLDS and len(f.parts) == 2
    s2 = summary_of({("ib", "tcp"): {3000: 0.5e5}, ("ob", "tcp"): {3000: 1e5}})
    assert by_id(s2)["F2"].verdict == findings.FAILS


# ---- F3: WCSB close to OB --------------------------------------------------------------

@pytest.mark.parametrize("factor, reps, verdict", [
    (1.03, TIGHT, findings.HOLDS),             # 3 % apart, tight: inside 1 +- 10 %
    (0.97, TIGHT, findings.HOLDS),
    (1.25, TIGHT, findings.FAILS),             # 25 % apart: entirely outside
    (0.80, TIGHT, findings.FAILS),
    (1.0, (0.7, 1.0, 1.3), findings.INCONCLUSIVE),   # the same mean, too noisy to show closeness
])
def test_f3_wcsb_within_or_outside_ten_percent_of_ob(factor, reps, verdict):
    ob = {b: 1e5 for b in (750, 3000, 30000)}
    s = pd.concat([summary_of({("ob", "none"): ob}),
                   summary_of({("wcsb", "none"): {b: g * factor for b, g in ob.items()}}, reps=reps)],
                  ignore_index=True)
    f = by_id(s)["F3"]
    assert f.verdict == verdict, f.reason
    assert (f.low, f.high) == (0.9, 1.1) and len(f.parts) == 3


def test_f3_fails_if_a_single_b_is_far_apart():
    ob = {b: 1e5 for b in (750, 3000, 30000)}
    wcsb = dict(ob) | {3000: 0.5e5}
    f = by_id(summary_of({("ob", "tcp"): ob, ("wcsb", "tcp"): wcsb}))["F3"]
    assert f.verdict == findings.FAILS and "3 kB" in f.where and f.estimate == pytest.approx(0.5)


# ---- F4a: standard TCP needs over 10x the buffer ---------------------------------------

def test_reach_brackets_the_crossing_by_grid_steps():
    s = summary_of({("sb", "none"): saturating(15000)})
    r = reach(e5.prepare(s), 0.9e5)
    assert (r.first, r.grid_lo, r.lo, r.hi, r.n) == (15000, 6000, 6000, 15000, 3)
    never = reach(e5.prepare(s), 2e5)
    assert never.first == math.inf and never.hi == math.inf and never.lo == 300000


def test_reach_widens_the_bracket_where_an_interval_may_already_reach():
    """A noisy point below the means' crossing whose upper bound reaches the level moves
    the bracket's lower end down; its lower end stays where the lower bounds reach."""
    curve = saturating(15000)
    tight = summary_of({("sb", "none"): {b: g for b, g in curve.items() if b != 6000}})
    noisy = summary_of({("sb", "none"): {6000: 0.8e5}}, reps=(0.5, 1.0, 1.5))    # hi95 ~ 1.8e5 >= level
    r = reach(e5.prepare(pd.concat([tight, noisy], ignore_index=True)), 0.9e5)
    assert (r.first, r.grid_lo, r.lo, r.hi) == (15000, 6000, 3000, 15000)


def test_f4a_holds_on_a_grid_that_resolves_a_large_ratio():
    # paced reaches its plateau at 3 kB, standard at 150 kB: B_none in (60k, 150k], B_tcp in (1.5k, 3k]
    s = summary_of({("sb", "tcp"): saturating(3000), ("sb", "none"): saturating(150000)})
    f = by_id(s)["F4a"]
    assert f.verdict == findings.HOLDS, f.reason
    assert f.estimate == pytest.approx(50) and f.lo == pytest.approx(20) and f.hi == pytest.approx(100)
    assert f.a.mean == 150000 and f.b.mean == 3000 and f.unit == "B"


def test_f4a_does_not_hold_when_standard_tcp_needs_only_twice_the_buffer():
    # B_none in (3k, 6k], B_tcp in (1.5k, 3k]: the ratio is below 4
    s = summary_of({("ob", "tcp"): saturating(3000), ("ob", "none"): saturating(6000)})
    f = by_id(s)["F4a"]
    assert f.verdict == findings.FAILS and f.hi == pytest.approx(4)


def test_f4a_is_inconclusive_when_the_grid_cannot_resolve_the_ratio():
    coarse = (1500, 15000, 150000)
    s = summary_of({("sb", "tcp"): saturating(15000, grid=coarse), ("sb", "none"): saturating(150000, grid=coarse)})
    f = by_id(s)["F4a"]
    # B_tcp in (1.5k, 15k], B_none in (15k, 150k]: the ratio anywhere in (1, 100)
    assert f.verdict == findings.INCONCLUSIVE and "grid cannot resolve" in f.reason
    assert f.lo == pytest.approx(1) and f.hi == pytest.approx(100)


def test_f4a_holds_when_standard_tcp_never_reaches_the_paced_level():
    s = summary_of({("sb", "tcp"): saturating(1500, grid=GRID[1:]), ("sb", "none"): saturating(1e9, top=1e5)})
    f = by_id(s)["F4a"]
    # B_tcp in (0, 3k], standard never: beyond 300 kB, ratio > 100
    assert f.verdict == findings.HOLDS and f.lo == pytest.approx(100) and f.estimate == math.inf


def test_f4a_with_one_repetition_is_inconclusive():
    s = summary_of({("sb", "tcp"): saturating(3000), ("sb", "none"): saturating(150000)}, reps=(1.0,))
    f = by_id(s)["F4a"]
    assert f.verdict == findings.INCONCLUSIVE and "fewer than 2" in f.reason


# ---- F4b-F4d: XCP ----------------------------------------------------------------------

def test_xcp_findings_are_not_measured_without_xcp_rows():
    f = by_id(summary_of({("sb", "tcp"): saturating(3000), ("sb", "none"): saturating(150000)}))
    for fid in ("F4b", "F4c", "F4d"):
        assert f[fid].verdict == findings.NOT_MEASURED and f[fid].reason == XCP_NOT_RUN


def xcp_story(xcp_reach: float, others_reach: float, xcp_drop: float) -> pd.DataFrame:
    parts = []
    for p, at, drop in (("xcp", xcp_reach, xcp_drop), ("tcp", others_reach, 0.02), ("none", others_reach, 0.05)):
        for b, g in saturating(at).items():
            parts += run_rows("sb", p, b, g, drop=drop)
    frame = pd.DataFrame(parts)
    frame["point"] = [f"p{i:04d}" for i in range(len(frame))]
    return frame


def test_xcp_findings_hold_on_the_papers_story():
    f = by_id(xcp_story(xcp_reach=3000, others_reach=150000, xcp_drop=0.001))
    assert f["F4b"].verdict == findings.HOLDS, f["F4b"].reason              # (1.5k, 3k] <= 4.5 kB
    assert f["F4c"].verdict == findings.HOLDS, f["F4c"].reason              # (60k, 150k] >= 45 kB
    assert len(f["F4c"].parts) == 2 and f["F4c"].a.lo == 60000
    assert f["F4d"].verdict == findings.HOLDS and len(f["F4d"].parts) == 2 * 3   # B = 1.5k, 3k, 6k vs tcp, none


def test_xcp_findings_fail_on_the_opposite_story():
    f = by_id(xcp_story(xcp_reach=15000, others_reach=15000, xcp_drop=0.2))
    assert f["F4b"].verdict == findings.FAILS                               # (6k, 15k]: above 3 MSS for sure
    assert f["F4c"].verdict == findings.FAILS                               # (6k, 15k]: below 30 MSS for sure
    assert f["F4d"].verdict == findings.FAILS


# ---- figures and tables ----------------------------------------------------------------

def smoke_summary() -> pd.DataFrame:
    curves = {("sb", "none"): {0: 1e4, 750: 3e4, 1500: 6e4, 15000: 1e5},
              ("ob", "none"): {0: 1e4, 750: 2e4, 1500: 3e4, 15000: 9e4},
              ("sb", "tcp"): {0: 1e4, 750: 5e4, 1500: 9e4, 15000: 1e5}}
    s = summary_of(curves)
    s.loc[s.index[4], "goodput_per_flow_Bps"] = float("nan")            # a run without measured flows
    s.loc[s["arch"] == "ob", ["lateness_p99_over_tau", "lateness_p99_s"]] = float("nan")   # no monitor
    at = (s["arch"] == "sb") & (s["pacing"] == "none") & (s["buffer"] == "15 kB")
    s.loc[at & (s["rep"] == 1), "occ_overflow"] = 7                     # not exact
    late = (s["arch"] == "sb") & (s["pacing"] == "tcp") & (s["buffer"] == "750 B")
    s.loc[late & (s["rep"] == 0), "lateness_p99_over_tau"] = 0.2        # beyond the fidelity bound
    s.loc[(s["pacing"] == "tcp") & (s["buffer"] == "15 kB"), "core_drop_rate"] = 0.0
    return s


def test_analyse_writes_the_figures_and_tables(tmp_path):
    s = smoke_summary()
    figs, tables = e5.analyse(s, {}, tmp_path)
    names = {p.name for p in figs}
    assert names == {f"{m}_{k}.png" for m in ("goodput", "drops")
                     for k in ("pacing-none", "pacing-tcp", "arch-sb", "arch-ob")}
    assert all(p.exists() and p.stat().st_size > 1000 for p in figs)
    t = dict(tables)
    title, f = tables[-1]
    assert findings.is_findings(title, f) and list(f["id"]) == ["F1", "F2", "F3", "F4a", "F4b", "F4c", "F4d",
                                                                  "P1", "P2", "P3", "P4"]
    assert set(f[f["id"].str.startswith("P")]["verdict"]) == {findings.NOT_MEASURED}   # no XCP sweep
    assert (tmp_path / "findings.csv").exists() and (tmp_path / "findings.md").exists()
    pts = next(v for k, v in t.items() if k.startswith("Points"))
    assert len(pts) == 12 and set(pts["buffer"]) == {"0 B", "750 B", "1.5 kB", "15 kB"}
    row = pts[(pts["arch"] == "sb") & (pts["pacing"] == "none") & (pts["B [bytes]"] == 15000)].iloc[0]
    assert row["fidelity"] == "not exact" and row["occ_overflow (max)"] == 7 and row["reps"] == 3
    assert row["goodput [B/s]"] == pytest.approx(1e5) and row["goodput lo95"] < 1e5 < row["goodput hi95"]
    assert set(pts[pts["arch"] == "ob"]["fidelity"]) == {"lateness unknown"}
    nan_point = pts[(pts["arch"] == "sb") & (pts["pacing"] == "none") & (pts["B [bytes]"] == 750)].iloc[0]
    assert nan_point["goodput runs"] == 2 and nan_point["reps"] == 3      # the NaN run counted, not averaged
    bad = next(v for k, v in t.items() if k.startswith("Not exact"))
    assert len(bad) == 2 and set(bad["buffer"]) == {"15 kB", "750 B"}
    assert any(w.startswith("not exact") for w in bad["why"]) and any("fidelity" in w for w in bad["why"])
    art = next(v for k, v in t.items() if k.startswith("Emulation artefacts"))
    assert art["fraction by RTO"].iloc[0] == pytest.approx((2 + 3 + 4) / (2 + 3 + 4 + 24))
    assert art["spurious fraction"].iloc[0] == pytest.approx(3 / 63)
    assert not any(k.startswith("Rows left out") or k.startswith("Scale") for k in t)


def test_a_curve_marks_flagged_points_hollow_and_skips_zero_drops_on_a_log_axis():
    import matplotlib.pyplot as plt

    s = e5.prepare(smoke_summary())
    fig, ax = plt.subplots()
    assert e5._line(ax, e5.rows(s, "sb", "none"), "goodput_per_flow_Bps", "C0", "o", "x", False) == (True, 1, 0)
    assert e5._line(ax, e5.rows(s, "sb", "tcp"), "core_drop_rate", "C0", "o", "x", True) == (True, 1, 1)
    plt.close(fig)


def test_other_contexts_are_left_out_and_scales_compared(tmp_path):
    main = summary_of({("sb", "none"): {1500: 1e5, 3000: 1.2e5}, ("ob", "none"): {1500: 0.8e5, 3000: 1e5}})
    other = summary_of({("sb", "none"): {1500: 1.02e5}}, scale=10)
    far = summary_of({("sb", "none"): {3000: 2e5}}, scale=10)
    s = pd.concat([main, other, far], ignore_index=True)
    s["point"] = [f"p{i:04d}" for i in range(len(s))]
    kept, left = e5.main_context(e5.prepare(s))
    assert set(kept["scale"]) == {100} and len(left) == 6
    scales = e5.scale_table(e5.prepare(s))
    verdicts = dict(zip(scales["buffer"], scales["within 1 +- 0.1"]))
    assert verdicts == {"1.5 kB": findings.HOLDS, "3 kB": findings.FAILS}
    assert set(scales["reference scale"]) == {10}
    figs, tables = e5.analyse(s, {}, tmp_path)
    t = dict(tables)
    left_out = next(v for k, v in t.items() if k.startswith("Rows left out"))
    assert list(left_out["runs"]) == [6] and "scale 10" in left_out["context"].iloc[0]
    f = {r["id"]: r for _, r in tables[-1][1].iterrows()}
    assert f["F1"]["a_n"] == 3 and "scale 100" in tables[-1][0]


def test_a_tie_between_contexts_keeps_the_smallest_scale():
    big = summary_of({("sb", "none"): {1500: 1e5}}, scale=100)
    small = summary_of({("sb", "none"): {1500: 1e5}}, scale=10)
    kept, left = e5.main_context(e5.prepare(pd.concat([big, small], ignore_index=True)))
    assert set(kept["scale"]) == {10} and set(left["scale"]) == {100}


def test_the_columns_read_are_the_familys():
    """Every summary column the analysis reads is a parameter or a metric of the E5 family."""
    family = pytest.importorskip("testbed.families.e5_optram")
    cls = family.E5OpticalRam
    declared = {m.name for m in cls.metrics} | {p.name for p in cls.params} | {"point", "rep", "seed"}
    assert set(e5.COLUMNS_READ) <= declared, set(e5.COLUMNS_READ) - declared
    assert set(smoke_summary().columns) == declared


def test_the_report_of_a_results_folder(tmp_path):
    """testbed report: the family's metrics are all in the synthetic summary, the
    analysis runs through the family, the findings come first."""
    pytest.importorskip("testbed.families.e5_optram")
    from analysis.report import generate

    results = tmp_path / "results"
    results.mkdir()
    smoke_summary().to_csv(results / "summary.csv", index=False)
    (results / "config.json").write_text(json.dumps({"experiment": {"name": "e5-test", "family": "e5-optram"},
                                                     "run": {"tdf": 20}}))
    index = generate(results)
    page = index.read_text()
    assert page.index(html.escape(findings.TITLE)) < page.index("goodput_pacing-none.png")
    assert "xcp not run" in page and "ib not run" in page


def test_late_ib_decisions_make_a_run_not_exact():
    """core_late > 0 (an ib arrival after its instant was decided) flags the run as not
    exact, as an occupancy overflow does; a run with neither is not flagged."""
    from analysis.e5_findings import flagged, not_exact, prepare

    s = smoke_summary()
    clean = s[(s["arch"] == "ob") & (s["buffer"] == "1.5 kB")].copy()
    assert not not_exact(clean).any()
    clean.loc[clean.index[0], "core_late"] = 2
    assert list(not_exact(clean)) == [True] + [False] * (len(clean) - 1)
    assert flagged(clean).iloc[0]
    table = e5.fidelity_table(prepare(clean))
    assert len(table) == 1 and "ib arrivals after their instant was decided" in table["why"].iloc[0]


def test_merged_occupancy_slots_say_whether_the_window_dropped():
    """occ_overflow > 0 flags the run; with no core drop in the window the reason adds
    that the window's admissions are the exact node's (an upper bound that never refused
    admits what the exact occupancy admits), with drops it does not."""
    from analysis.e5_findings import exactness_faults, not_exact, prepare

    s = smoke_summary()
    g = s[(s["arch"] == "sb") & (s["buffer"] == "1.5 kB") & (s["pacing"] == "none")].copy()
    first, second = g.index[0], g.index[1]
    g.loc[[first, second], "occ_overflow"] = 4878
    g.loc[first, "core_drop_rate"] = 0.0
    g.loc[second, "core_drop_rate"] = 1e-4
    assert list(not_exact(g)) == [True, True] + [False] * (len(g) - 2)
    quiet, dropping = exactness_faults(g.loc[first]), exactness_faults(g.loc[second])
    assert len(quiet) == 1 and "occupancy slots merged" in quiet[0] and "no core drop in the window" in quiet[0]
    assert len(dropping) == 1 and "no core drop" not in dropping[0]
    table = e5.fidelity_table(prepare(g))
    assert len(table) == 2 and sum("no core drop in the window" in why for why in table["why"]) == 1


def test_an_xcp_loop_that_was_late_makes_a_run_not_exact():
    """xcp_exact = 0 (a rate change applied after its instant, a pacer arrival after its
    instant was decided, ...) flags the run as not exact and the fidelity table says which
    counters; xcp_exact = 1 and NaN (not an XCP point) do not; the artefacts table counts
    the exact runs of each XCP point."""
    from analysis.e5_findings import flagged, not_exact, prepare

    s = smoke_summary()
    g = s[(s["arch"] == "sb") & (s["buffer"] == "1.5 kB") & (s["pacing"] == "none")].copy()
    assert len(g) >= 3 and g["xcp_exact"].isna().all()
    assert not not_exact(g).any()
    g["pacing"] = "xcp"
    g["xcp_exact"] = 1.0
    for c in ("xcp_late_rates", "xcp_pacer_late", "xcp_acc_late", "xcp_acc_lost"):
        g[c] = 0.0
    assert not not_exact(g).any()
    first = g.index[0]
    g.loc[first, ["xcp_exact", "xcp_late_rates", "xcp_pacer_late"]] = [0.0, 474.0, 2.0]
    assert list(not_exact(g)) == [True] + [False] * (len(g) - 1)
    assert flagged(g).iloc[0]
    table = e5.fidelity_table(prepare(g))
    assert len(table) == 1
    why = table["why"].iloc[0]
    assert "XCP loop was late" in why and "rate changes after their instant 474" in why
    assert "pacer arrivals after their instant 2" in why and "slots lost" not in why
    artefacts = e5.artefacts_table(prepare(g))
    assert artefacts["xcp exact runs"].iloc[0] == f"{len(g) - 1} of {len(g)}"
    assert "run" not in table.columns                     # a run's own report: its points are unique
    combined = e5.fidelity_table(prepare(g.assign(run="block-sb")))
    assert list(combined.columns[:2]) == ["run", "point"] and combined["run"].iloc[0] == "block-sb"


def test_the_context_names_abilene_nodes_only_for_the_abilene_network():
    s = summary_of({("sb", "none"): {1500: 5e5}})
    text = e5.context_text(s)
    assert text.startswith("nsfnet, ") and "abilene_nodes" not in text and "scale 100" in text
    assert "abilene_nodes 0.05" in e5.context_text(s.assign(topology="abilene"))


# ---- the second reading, paired by seed ------------------------------------------------

SEEDED = (0.9, 1.0, 1.1)   # the seed's spread: seed 0 low, seed 2 high, shared by every point


def test_comparisons_pair_the_runs_by_seed_and_leave_the_verdicts_alone():
    s = summary_of({("sb", "none"): {1500: 1.03e5, 4500: 1.2e5}, ("ob", "none"): {1500: 1e5, 4500: 1e5}},
                   reps=SEEDED)
    c = comparisons(s)
    assert list(c["id"]) == ["F1", "F1"] and list(c["pairs"]) == [3, 3]
    close = c.iloc[0]
    assert close["where"].endswith("B = 1.5 kB (1 MSS)") and close["estimate"] == pytest.approx(1.03)
    # independent samples: the seed's +-10 % swamps 3 %; paired: every seed shows the same 3 %
    assert close["verdict"] == findings.INCONCLUSIVE and close["lo95"] < 1 < close["hi95"]
    assert close["paired_verdict"] == findings.HOLDS
    assert close["paired_lo95"] == pytest.approx(1.03) and close["paired_hi95"] == pytest.approx(1.03)
    assert by_id(s)["F1"].verdict == findings.INCONCLUSIVE     # the verdict is the pre-registered reading


def test_comparisons_use_only_the_seeds_both_points_have():
    s = summary_of({("sb", "none"): {1500: 1.1e5}, ("ob", "none"): {1500: 1e5}}, reps=SEEDED)
    s = s[~((s["arch"] == "ob") & (s["seed"] == 2))]
    row = comparisons(s).iloc[0]
    assert row["n_a"] == 3 and row["n_b"] == 2 and row["pairs"] == 2
    s = s[~((s["arch"] == "sb") & (s["seed"] == 1))]
    row = comparisons(s).iloc[0]
    assert row["pairs"] == 1 and row["paired_verdict"] == findings.INCONCLUSIVE
    assert comparisons(s.drop(columns="seed")).empty


def test_the_report_lists_the_comparisons_in_both_readings(tmp_path):
    s = summary_of({("sb", "none"): {1500: 1.03e5}, ("ob", "none"): {1500: 1e5}}, reps=SEEDED)
    _, tables = e5.analyse(s, {}, tmp_path)
    title, table = next((k, v) for k, v in tables if k.startswith("Comparisons (1: F1)"))
    assert "paired by seed" in title and "not the findings' verdict" in title
    assert list(table["verdict"]) == [findings.INCONCLUSIVE] and list(table["paired_verdict"]) == [findings.HOLDS]
    found = pd.read_csv(tmp_path / "findings.csv").set_index("id")
    assert found.loc["F1", "verdict"] == findings.INCONCLUSIVE
    assert found.loc["F1", "side"] == "paired by seed (second reading): holds, 1 of 1 comparisons hold"
    assert "paired by seed" not in str(found.loc["F4a", "side"])



def test_nested_scales_are_compared_on_their_shared_flows_paired_by_seed():
    """The shared flows' goodput at scale 20 against scale 10, paired by seed: the seed's
    +-10 % cancels; without nesting (no goodput_common_Bps) no paired columns."""
    fine = summary_of({("sb", "none"): {15000: 8e5}}, reps=SEEDED, scale=10)
    coarse = summary_of({("sb", "none"): {15000: 8e5}}, reps=SEEDED, scale=20)
    s = pd.concat([fine, coarse], ignore_index=True)
    assert "shared ratio" not in e5.scale_table(e5.prepare(s))
    s["flows_of_scale"], s["common_scale"] = 10, 20
    s["goodput_common_Bps"] = s["goodput_per_flow_Bps"] * [1.0, 1.01, 0.99, 0.97, 0.985, 0.965]
    row = e5.scale_table(e5.prepare(s)).iloc[0]
    assert row["scale"] == 20 and row["reference scale"] == 10 and row["pairs"] == 3
    assert row["shared ratio"] == pytest.approx((0.97 * 0.9 + 0.985 + 0.965 * 1.1) / (0.9 + 1.01 + 0.99 * 1.1))
    assert row["shared within 1 +- 0.1"] == findings.HOLDS and row["shared hi95"] - row["shared lo95"] < 0.1
    assert row["within 1 +- 0.1"] == findings.INCONCLUSIVE     # unpaired: the seeds' spread in both groups
