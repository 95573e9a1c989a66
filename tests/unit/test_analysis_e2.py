"""E2 analysis: figures, tables and findings from synthetic results folders (summary.csv
and the per-point files of the E2 contract written into tmp_path)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from analysis import e2, findings
from analysis.e2_findings import evaluate, pl_text

SPREAD = (0.98, 1.0, 1.02)  # three repetitions: the mean times these
MSS = 512


def run_rows(cls: str, wm: int, pl: float, gbps: float, *, reps=SPREAD, rto_frac: float | None = None,
             seg_src: float | None = None, n_sources: int = 4) -> list[dict]:
    """Summary rows of one point: throughput ``gbps`` x the repetitions' spread; loss
    events split by ``rto_frac``; ``seg_src`` segments per source per burst."""
    n_paper = 80 if cls == "slow" else 320
    rtt = 0.030 if cls == "slow" else 0.0105
    rto_frac = (0.95 if cls == "slow" else 0.05) if rto_frac is None else rto_frac
    seg_src = (150.0 if cls == "slow" else 1.1) if seg_src is None else seg_src
    out = []
    for rep, f in enumerate(reps):
        events = 40
        out.append({"path_class": cls, "n_sources": n_sources, "n_paper": n_paper, "scale": n_paper / n_sources,
                    "wm": wm, "pl": pl, "duration": "2 s", "warmup": "0 s", "tdf": 1, "seed": rep, "rep": rep,
                    "point": "", "throughput_bps": gbps * f * 1e9,
                    "throughput_per_source_bps": gbps * f * 1e9 / n_paper,
                    "ideal_bps": MSS * 8 * wm * n_paper / rtt, "rtt_nominal_s": rtt, "bin_s": 0.1,
                    "bursts": 2000, "bursts_closed_time": 1500, "bursts_closed_volume": 500,
                    "bursts_lost": round(2000 * pl) + rep, "segments_per_burst": seg_src * n_sources * f,
                    "segments_per_source_per_burst": seg_src * f,
                    "loss_events_rto": round(events * rto_frac) + rep,
                    "loss_events_fast": round(events * (1 - rto_frac)),
                    "retrans_segs": 100 + rep, "spurious_retrans_segs": rep, "core_packets_lost": 1000,
                    "assembly_delay_p50_s": 0.005, "assembly_delay_p99_s": 0.0099, "assembly_delay_max_s": 0.01,
                    "lateness_p99_s": 2e-6, "lateness_max_s": 5e-6, "paper_s_per_wall_s": 0.05})
    return out


#: the paper's story: slow Wm 512 best, fast Wm-insensitive at Pl >= 1e-3 and very
#: sensitive to Pl, fast and slow alike at Pl >= 1e-3, fast higher at 1e-4
PAPER_LIKE = {("slow", 64, 1e-3): 0.6, ("slow", 128, 1e-3): 1.1, ("slow", 512, 1e-3): 2.1,
              ("slow", 512, 1e-4): 5.0, ("slow", 512, 1e-2): 0.30, ("slow", 128, 1e-4): 2.5,
              ("fast", 64, 1e-3): 2.2, ("fast", 128, 1e-3): 2.25, ("fast", 512, 1e-3): 2.2,
              ("fast", 64, 1e-4): 7.5, ("fast", 128, 1e-4): 9.2, ("fast", 64, 1e-2): 0.298,
              ("fast", 128, 1e-2): 0.30}


def summary_of(points: dict[tuple[str, int, float], float], **kw: object) -> pd.DataFrame:
    frame = pd.DataFrame([r for (c, w, p), g in points.items() for r in run_rows(c, w, p, g, **kw)])
    frame["point"] = [f"p{i:04d}" for i in range(len(frame))]
    return frame


def write_results(tmp_path, summary: pd.DataFrame, skip: dict[str, set[str]] | None = None):
    """A results folder: summary.csv and per run throughput_series.csv (constant rate per
    source), cwnd.csv (a slow-start sawtooth with RTO and retransmission events) and
    assembly_delay.csv (uniform histogram over 0..Tmax); ``skip`` = {point: file names}
    leaves those files out. Returns the report folder."""
    results = tmp_path / "results"
    summary.to_csv(results.mkdir() or results / "summary.csv", index=False)
    for _, r in summary.iterrows():
        d = results / "points" / r["point"]
        d.mkdir(parents=True)
        t = np.round(np.arange(1, 21) * 0.1, 6)
        per_src_bytes = r["throughput_bps"] / r["n_paper"] / 8 * 0.1
        pd.DataFrame([{"t_s": x, "src": s, "bytes": per_src_bytes} for x in t for s in range(int(r["n_sources"]))]
                     ).to_csv(d / "throughput_series.csv", index=False)
        cw, ev = [], []
        c = 1
        for i in range(200):
            c = min(c * 2, int(r["wm"])) if i % 20 else 1
            cw.append({"t_s": i * 0.01, "src": 0, "event": "rto" if i % 20 == 0 and i else "ack", "cwnd": c,
                       "ssthresh": 2 ** 31 if i < 20 else 16, "ca_state": 0})
        pd.DataFrame(cw).to_csv(d / "cwnd.csv", index=False)
        tmax = 0.01 if r["path_class"] == "slow" else 0.0005
        edges = np.linspace(0, tmax, 11)
        pd.DataFrame({"lo_s": edges[:-1], "hi_s": edges[1:], "packets": 100}).to_csv(d / "assembly_delay.csv",
                                                                                      index=False)
        for name in (skip or {}).get(r["point"], ()):
            (d / name).unlink()
    out = results / "report"
    out.mkdir()
    return out


def by_id(summary: pd.DataFrame) -> dict[str, findings.Finding]:
    return {f.id: f for f in evaluate(summary)}


# ---- findings --------------------------------------------------------------------------

def test_every_finding_holds_on_the_papers_story():
    f = by_id(summary_of(PAPER_LIKE))
    assert list(f) == ["F1a", "F1b", "F2-1e-4", "F2-1e-3", "F2-1e-2", "F3a", "F3b-1e-3", "F3b-1e-2",
                       "F3c", "F4a", "F4b"]
    for fid, finding in f.items():
        if fid != "F2-1e-2":
            assert finding.verdict == findings.HOLDS, (fid, finding.reason)
    # slow Pl 1e-2 has only Wm 512: nothing to compare with
    assert f["F2-1e-2"].verdict == findings.NOT_MEASURED and "at least one other Wm" in f["F2-1e-2"].reason
    assert f["F1a"].a.label == "fraction by RTO" and f["F1a"].low == 0.5
    assert f["F1b"].low == 10 and f["F1b"].a.mean == pytest.approx(150, rel=0.03)
    # Wm 512 vs 128 and 64 at 1e-3: the one closest to its bound is shown (vs 128)
    assert f["F2-1e-3"].b.label == "Wm 128" and f["F2-1e-3"].estimate == pytest.approx(2.1 / 1.1)
    assert f["F3b-1e-3"].rule.startswith("0.9 < a / b < 1.1")
    # 2.2 -> 0.298 (paper): x 0.135 per decade, the 1e-4 -> 1e-3 decade x 0.29
    assert f["F3c"].high == 0.5 and len(f["F3c"].parts) == 2
    assert f["F4a"].low == 0.75 and f["F4a"].high == 1.25 and len(f["F4a"].parts) == 2
    assert f["F4b"].where.startswith("Pl 1e-4") and f["F4b"].estimate == pytest.approx(7.5 / 5.0)


def test_every_finding_fails_on_the_opposite_story():
    opposite = {("slow", 128, 1e-3): 3.0, ("slow", 512, 1e-3): 2.0,       # F2: 512 below 128
                ("fast", 64, 1e-3): 2.0, ("fast", 128, 1e-3): 3.0,        # F3b: 128 brings +50 %
                ("fast", 64, 1e-4): 2.1,                                  # F3c: insensitive
                ("slow", 512, 1e-4): 6.0}                                 # F4b: slow higher at low Pl
    s = summary_of(opposite, rto_frac=0.5)
    s.loc[s["path_class"] == "slow", ["loss_events_rto", "loss_events_fast"]] = [5, 35]   # F1a: dupACKs
    s.loc[s["path_class"] == "fast", ["loss_events_rto", "loss_events_fast"]] = [35, 5]   # F3a: RTOs
    s.loc[s["path_class"] == "slow", "segments_per_source_per_burst"] = 2.0             # F1b: few per source
    f = by_id(s)
    for fid in ("F1a", "F1b", "F2-1e-3", "F3a", "F3b-1e-3", "F3c", "F4b"):
        assert f[fid].verdict == findings.FAILS, (fid, f[fid].reason)
    # F4a: fast 2.0 vs slow 2.0 at 1e-3 holds; fast x 2 breaks it
    s.loc[(s["path_class"] == "fast") & (s["pl"] == 1e-3), "throughput_bps"] *= 2
    assert by_id(s)["F4a"].verdict == findings.FAILS and by_id(s)["F4a"].lo > 1.25


def test_findings_are_inconclusive_with_noisy_or_single_repetitions():
    noisy = summary_of({k: v for k, v in PAPER_LIKE.items() if k[2] == 1e-3}, reps=(0.5, 1.0, 1.5))
    f = by_id(noisy)
    for fid in ("F2-1e-3", "F3b-1e-3", "F4a"):
        assert f[fid].verdict == findings.INCONCLUSIVE, (fid, f[fid].reason)
    # a wide spread of the loss split straddles 1/2
    split = summary_of({("slow", 512, 1e-3): 2.0})
    split["loss_events_rto"], split["loss_events_fast"] = [10, 30, 25], [30, 10, 15]
    assert by_id(split)["F1a"].verdict == findings.INCONCLUSIVE
    single = by_id(summary_of(PAPER_LIKE, reps=(1.0,)))
    assert single["F2-1e-3"].verdict == findings.INCONCLUSIVE and "fewer than 2" in single["F2-1e-3"].reason


def test_findings_without_their_points_are_not_measured_and_say_what_is_needed():
    slow_only = summary_of({("slow", 512, 1e-3): 2.0, ("slow", 512, 1e-2): 0.3})
    f = by_id(slow_only)
    assert f["F1a"].verdict == findings.HOLDS
    for fid, needs in (("F2-1e-3", "at least one other Wm"), ("F3a", "path_class = fast"),
                       ("F3b-1e-3", "Wm = 64 and at least one Wm above it"), ("F3c", "two Pl a decade apart"),
                       ("F4a", "fast Wm 64 and slow Wm 512"), ("F4b", "below 1e-3")):
        assert f[fid].verdict == findings.NOT_MEASURED and needs in f[fid].reason, (fid, f[fid].reason)
    # runs without any loss event say nothing about how losses are detected
    lossless = summary_of({("slow", 512, 1e-5): 5.5})
    lossless[["loss_events_rto", "loss_events_fast"]] = 0
    assert by_id(lossless)["F1a"].verdict == findings.NOT_MEASURED
    assert "none in 3 runs" in by_id(lossless)["F1a"].reason


def test_pl_text():
    assert [pl_text(p) for p in (1e-3, 2.5e-4, 0.0, 0.01)] == ["1e-3", "2.5e-4", "0", "1e-2"]


# ---- statistics helpers (oracles from first principles) ---------------------------------

def test_clopper_pearson_solves_its_binomial_tails():
    lo, hi = e2.clopper_pearson(0, 100)
    assert lo == 0 and hi == pytest.approx(1 - 0.025 ** (1 / 100))
    k, n = 7, 2000
    lo, hi = e2.clopper_pearson(k, n)

    def cdf(p: float, upto: int) -> float:
        return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(upto + 1))

    assert 1 - cdf(lo, k - 1) == pytest.approx(0.025, rel=1e-6)   # P(X >= k | lo) = 2.5 %
    assert cdf(hi, k) == pytest.approx(0.025, rel=1e-6)           # P(X <= k | hi) = 2.5 %
    with pytest.raises(ValueError):
        e2.clopper_pearson(3, 2)


def test_poisson_range_is_the_central_95_percent():
    for mean in (0.4, 2.0, 20.0, 300.0):
        lo, hi = e2.poisson_range(mean)
        cdf = np.cumsum([math.exp(-mean + i * math.log(mean) - math.lgamma(i + 1)) for i in range(hi + 1)])
        assert cdf[lo] >= 0.025 and (lo == 0 or cdf[lo - 1] < 0.025)
        assert cdf[hi] >= 0.975 and cdf[hi - 1] < 0.975
    assert e2.poisson_range(0.0) == (0, 0)


def test_histogram_quantile_is_linear_within_bins():
    lo, hi, n = np.array([0.0, 1.0, 2.0]), np.array([1.0, 2.0, 3.0]), np.array([10, 0, 30])
    assert e2.histogram_quantile(lo, hi, n, 0.5) == pytest.approx(2 + 10 / 30)   # 20 of 40: 10 into the last bin
    assert e2.histogram_quantile(lo, hi, n, 0.125) == pytest.approx(0.5)
    assert math.isnan(e2.histogram_quantile(lo, hi, np.zeros(3), 0.5))
    with pytest.raises(ValueError):
        e2.histogram_quantile(lo, hi, n, 1.5)


def test_average_throughput_is_bytes_since_start_over_t_scaled_to_the_papers_n():
    series = pd.DataFrame({"t_s": [0.1, 0.1, 0.2, 0.2, 0.3], "src": [0, 1, 0, 1, 0],
                           "bytes": [1000, 3000, 2000, 0, 6000]})
    avg = e2.average_throughput(series, scale=40.0)        # 2 emulated sources for 80
    # at 0.3 s: 12 000 bytes over both sources -> 96 000 bit / 0.3 s x 40
    assert list(avg.index) == [0.1, 0.2, 0.3]
    assert avg.to_numpy() == pytest.approx([32000 / 0.1 * 40, 48000 / 0.2 * 40, 96000 / 0.3 * 40])


# ---- the whole analysis ----------------------------------------------------------------

def test_analyse_writes_figures_tables_and_findings(tmp_path):
    s = summary_of(PAPER_LIKE)
    out = write_results(tmp_path, s)
    figs, tables = e2.analyse(s, {}, out)
    names = {p.name for p in figs}
    assert {"fig3_pl1e-3.png", "fig4_throughput_vs_wm.png", "fig13_fast_vs_slow.png", "assembly_delay.png",
            "cwnd_slow_wm512_pl1e-3.png", "cwnd_fast_wm64_pl1e-2.png", "cwnd_slow_wm64_pl1e-3.png"} <= names
    assert len([n for n in names if n.startswith("cwnd_")]) == len(PAPER_LIKE)
    assert all(p.exists() and p.stat().st_size > 10_000 for p in figs)
    titles = [t for t, _ in tables]
    assert findings.is_findings(*tables[-1]) and "scale slow 20, fast 80" in titles[-1]
    assert (out / "findings.csv").exists() and "F4b" in (out / "findings.md").read_text()
    assert not any(t.startswith("Per-point files missing") for t in titles)
    t = dict(tables)
    paper = next(v for k, v in t.items() if k.startswith("The paper's numbers"))
    ideal = paper[(paper["quantity"] == "ideal aggregate throughput")].iloc[0]
    assert ideal["ours"] == pytest.approx(512 * 8 * 512 * 80 / 0.030 * 1e-9) and ideal["paper"] == 5.592
    fast_any = paper[(paper["path_class"] == "fast") & (paper["pl"] == 1e-3) & (paper["paper"] == 2.2)]
    assert list(fast_any["wm"]) == [64, 128, 512]
    seg = next(v for k, v in t.items() if k.startswith("Segments per burst"))
    row = seg[(seg["path_class"] == "slow") & (seg["wm"] == 512) & (seg["pl"] == 1e-3)].iloc[0]
    assert row["segments per burst x scale"] == pytest.approx(150 * 4 * 20) and row["paper"].startswith("12 360")
    assert row["bursts closed by Lmax"] == pytest.approx(0.25)
    bursts = next(v for k, v in t.items() if k.startswith("Bursts per run"))
    b = bursts[(bursts["path_class"] == "slow") & (bursts["wm"] == 512) & (bursts["pl"] == 1e-2)].iloc[0]
    assert b["bursts"] == 6000 and b["bursts lost"] == 63 and b["asked Pl inside"] == "yes"
    assert b["lo95"] < 0.01 < b["hi95"]
    delay = next(v for k, v in t.items() if k.startswith("Assembly delay"))
    slow = delay[delay["path_class"] == "slow"].iloc[0]
    assert slow["p50_ms"] == pytest.approx(5.0) and slow["max_ms (bin upper edge)"] == pytest.approx(10.0)
    loss = next(v for k, v in t.items() if k.startswith("Loss events"))
    assert (loss[loss["path_class"] == "slow"]["fraction by RTO"] > 0.9).all()
    cwnd = next(v for k, v in t.items() if k.startswith("Figs. 5-12"))
    assert set(cwnd[cwnd["paper figure"] == "Fig. 8"]["figure"]) == {"cwnd_fast_wm512_pl1e-3.png"}
    assert set(cwnd[cwnd["paper figure"].str.startswith("Fig.")]["note"]) == {""}   # all eight paper cases drawn
    assert set(cwnd[cwnd["figure"] == "cwnd_slow_wm64_pl1e-3.png"]["paper figure"]) == {"not in the paper"}


def test_missing_point_files_are_listed_and_the_rest_is_drawn(tmp_path):
    s = summary_of({("slow", 512, 1e-3): 2.0, ("fast", 64, 1e-3): 2.2})
    slow_points = list(s[s["path_class"] == "slow"]["point"])
    skip = {p: {"throughput_series.csv", "cwnd.csv", "assembly_delay.csv"} for p in slow_points}
    out = write_results(tmp_path, s, skip)
    fast0 = s[s["path_class"] == "fast"]["point"].iloc[0]
    (out.parent / "points" / fast0 / "cwnd.csv").write_text("")              # empty file
    figs, tables = e2.analyse(s, {}, out)
    title, missing = next((k, v) for k, v in tables if k.startswith("Per-point files missing"))
    assert "(10)" in title and len(missing) == 10
    assert set(missing[missing["point"] == fast0]["why"]) == {"empty"}
    row = missing[(missing["point"] == slow_points[0]) & missing["file"].str.endswith("cwnd.csv")].iloc[0]
    assert row["why"] == "missing" and row["file"] == f"points/{slow_points[0]}/cwnd.csv"
    assert row["consequence"] == "no cwnd figure from this run"
    names = {p.name for p in figs}
    assert "cwnd_fast_wm64_pl1e-3.png" in names and "cwnd_slow_wm512_pl1e-3.png" not in names
    cwnd = next(v for k, v in tables if k.startswith("Figs. 5-12"))
    assert "no cwnd.csv in its 3 runs" in set(cwnd["note"])
    assert set(cwnd[cwnd["paper figure"] == "Fig. 6"]["note"]) == {"not measured: the run has no such point"}
    assert "fig3_pl1e-3.png" in names                                        # the fast panel still drawn
    delay = next(v for k, v in tables if k.startswith("Assembly delay"))
    assert delay.set_index("path_class").loc["slow", "packets"] == 0


def test_analyse_without_any_point_folder(tmp_path):
    s = summary_of({("fast", 64, 1e-2): 0.3})
    out = tmp_path / "results" / "report"
    out.mkdir(parents=True)
    figs, tables = e2.analyse(s, {}, out)
    assert {p.name for p in figs} == {"fig4_throughput_vs_wm.png", "fig13_fast_vs_slow.png"}
    missing = dict(tables)[next(k for k, _ in tables if k.startswith("Per-point files missing"))]
    assert len(missing) == 9 and set(missing["why"]) == {"missing"}


def test_the_columns_read_are_the_families():
    """Every summary column the analysis reads is a parameter or a metric of the E2 family."""
    family = pytest.importorskip("testbed.families.e2_obs")
    cls = next(v for v in vars(family).values() if isinstance(v, type) and hasattr(v, "metrics")
               and getattr(v, "__module__", "") == family.__name__ and hasattr(v, "params"))
    declared = {m.name for m in cls.metrics} | {p.name for p in cls.params} | {"point", "rep", "seed"}
    assert set(e2.COLUMNS_READ) <= declared, set(e2.COLUMNS_READ) - declared
    assert set(summary_of(PAPER_LIKE).columns) >= set(e2.COLUMNS_READ)


def test_a_combined_report_reads_each_runs_own_point_files(tmp_path):
    """report.combine's folder has no points/: each row's ``run`` names its source folder
    (sources.json), where its files are; the same point id in two runs stays two runs."""
    slow = summary_of({("slow", 512, 1e-3): 2.0})
    fast = summary_of({("fast", 64, 1e-3): 2.2})                 # the same point ids p0000..p0002
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    write_results(tmp_path / "a", slow)
    write_results(tmp_path / "b", fast)
    combined = tmp_path / "combined"
    (combined / "report").mkdir(parents=True)
    (tmp_path / "b" / "results").rename(tmp_path / "b" / "results-b")
    (combined / "sources.json").write_text(json.dumps(
        [{"folder": str(tmp_path / "a" / "results")}, {"folder": str(tmp_path / "b" / "results-b")}]))
    s = pd.concat([slow.assign(run="results"), fast.assign(run="results-b")], ignore_index=True)
    files, missing = e2.load_point_files(combined, s)
    assert missing.empty
    series = files["throughput_series.csv"]
    assert series["run_key"].nunique() == 6 and set(series["path_class"]) == {"slow", "fast"}
    figs, _ = e2.analyse(s, {}, combined / "report")
    assert {"cwnd_slow_wm512_pl1e-3.png", "cwnd_fast_wm64_pl1e-3.png", "fig3_pl1e-3.png"} <= {p.name for p in figs}


def test_other_scales_go_to_the_scale_table_only(tmp_path):
    """A run measuring a point at several N: the findings use each class's main scale (most
    runs; ties: the largest N); the scale table checks the per-source invariance."""
    s = pd.concat([summary_of({("slow", 512, 1e-3): 2.0, ("slow", 128, 1e-3): 1.0}, n_sources=8),
                   summary_of({("slow", 512, 1e-3): 2.0}, n_sources=4, reps=(0.97, 1.0, 1.03)),
                   summary_of({("slow", 512, 1e-3): 2.6}, n_sources=2)], ignore_index=True)
    s["point"] = [f"p{i:04d}" for i in range(len(s))]
    main = e2.main_scale(s)
    assert set(main["n_sources"]) == {8} and len(main) == 6
    table = e2.scale_table(s)
    assert list(table["n_sources"]) == [2, 4] and set(table["reference n_sources"]) == {8}
    verdicts = dict(zip(table["n_sources"], table["within 1 +- 0.1"]))
    assert verdicts == {2: findings.FAILS, 4: findings.HOLDS}
    assert table.set_index("n_sources").loc[2, "ratio"] == pytest.approx(1.3)
    out = write_results(tmp_path, s)
    figs, tables = e2.analyse(s, {}, out)
    f = {r["id"]: r for _, r in tables[-1][1].iterrows()}
    assert f["F2-1e-3"]["a_n"] == 3 and "scale 10" in f["F2-1e-3"]["where"]     # 80 / 8, the main scale only
    assert any(t.startswith("Scale invariance") for t, _ in tables)
    artefacts = next(v for k, v in tables if k.startswith("Artefacts per run"))
    assert len(artefacts) == len(s)


def test_unmeasured_metrics_and_runs_without_bursts(tmp_path):
    """NaN metrics (no fidelity monitor, no machine record) and a point whose runs closed no
    burst: the tables say nan / '–', the findings 'not measured', nothing raises."""
    s = summary_of({("slow", 512, 1e-3): 2.0, ("slow", 512, 1e-2): 0.3})
    s[["lateness_p99_s", "lateness_max_s", "paper_s_per_wall_s"]] = float("nan")
    none = s["pl"] == 1e-2
    s.loc[none, ["bursts", "bursts_closed_time", "bursts_closed_volume", "bursts_lost"]] = 0
    s.loc[none, ["segments_per_burst", "segments_per_source_per_burst"]] = float("nan")
    s.loc[none, ["loss_events_rto", "loss_events_fast"]] = 0
    out = write_results(tmp_path, s)
    for p in s[none]["point"]:
        (out.parent / "points" / p / "cwnd.csv").write_text("t_s,src,event,cwnd,ssthresh,ca_state\n")
    figs, tables = e2.analyse(s, {}, out)
    t = dict(tables)
    bursts = next(v for k, v in t.items() if k.startswith("Bursts per run")).set_index("pl")
    assert bursts.loc[1e-2, "asked Pl inside"] == "–" and math.isnan(bursts.loc[1e-2, "lo95"])
    assert bursts.loc[1e-2, "95 % range of lost per run"] == "0..0"
    missing = next(v for k, v in t.items() if k.startswith("Per-point files missing"))
    assert set(missing["why"]) == {"no rows"} and len(missing) == 3
    f = {x.id: x for x in evaluate(s)}
    assert f["F1b"].verdict == findings.HOLDS and len(f["F1b"].parts) == 2      # the Pl 1e-3 point decides
    assert f["F1b"].parts[1].verdict == findings.NOT_MEASURED and "none in 3 runs" in f["F1b"].parts[1].reason
    artefacts = next(v for k, v in t.items() if k.startswith("Artefacts per run"))
    assert artefacts["lateness max [us]"].isna().all()
