"""E1 analysis: aggregation over repetitions, curve labels, the figure files and the findings."""

import html
import json

import pandas as pd
import pytest

from analysis import e1, findings
from analysis.e1_findings import GAP_AGAINST, GAP_UNKNOWN, evaluate
from testbed.families.e1_fattree import E1FatTree

#: every metric E1 declares, not measured (summary.csv always has them all)
UNMEASURED = {m.name: float("nan") for m in E1FatTree.metrics}


def summary() -> pd.DataFrame:
    rows = []
    for cca in ("saw", "sack"):
        for sw, rto in (("all-optical", "1 ms"), ("hybrid:2", "1 ms"), ("electronic@1 s", "1 ms")):
            for load in ("1000 /s", "10000 /s"):
                for rep, thr in enumerate((1e9, 3e9)):
                    rows.append({"cca": cca, "switch": sw, "initial_rto": rto, "load": load,
                                 "link_length": "10 m", "rep": rep, **UNMEASURED, "throughput_bps": thr,
                                 "loss_ratio": 0.1 * rep, "oeo_fraction": 0.5, "max_buffer_bytes": 2e5})
    return pd.DataFrame(rows)


def test_aggregate_means_and_labels():
    agg = e1.aggregate(summary())
    assert set(agg["switch"]) == {"n_e = 0", "n_e = 2", "electronic, RTO 1 s"}
    assert len(agg) == 2 * 3 * 2
    row = agg.iloc[0]
    assert row["n"] == 2
    assert row["throughput_Gbit_s"] == pytest.approx(2.0)
    # two samples 1 and 3: sd = sqrt(2), t(0.975, 1) = 12.706 -> half-width 12.706
    assert row["throughput_ci95_Gbit_s"] == pytest.approx(12.706, rel=1e-3)
    assert row["max_buffer_MB"] == pytest.approx(0.2)
    assert row["packet_loss_ratio"] == pytest.approx(0.05)


def test_analyse_draws_one_figure_per_link_length(tmp_path):
    s = summary()
    s2 = s.copy()
    s2["link_length"] = "100 m"
    figs, tables = e1.analyse(pd.concat([s, s2]), {}, tmp_path)
    assert sorted(f.name for f in figs) == ["throughput_vs_load_100m.png", "throughput_vs_load_10m.png"]
    assert all(f.stat().st_size > 10_000 for f in figs)
    assert len(tables) == 4 and len(tables[0][1]) == 24
    title, found = tables[3]
    assert findings.is_findings(title, found) and set(found["verdict"]) <= set(findings.VERDICTS)
    assert (tmp_path / "findings.csv").exists() and (tmp_path / "findings.md").exists()


def test_labels_keep_the_initial_rto_of_optical_and_hybrid_curves():
    s = summary()
    s.loc[s["switch"] == "hybrid:2", "switch"] = "hybrid:2@1 s"
    s = pd.concat([summary(), s[s["switch"] == "hybrid:2@1 s"]])
    assert set(e1.aggregate(s)["switch"]) == {"n_e = 0", "n_e = 2", "n_e = 2, RTO 1 s", "electronic, RTO 1 s"}
    assert sorted({"electronic, RTO 1 s", "n_e = 2, RTO 1 s", "n_e = 2", "n_e = 0"}, key=e1._label_order) == \
        ["n_e = 0", "n_e = 2", "n_e = 2, RTO 1 s", "electronic, RTO 1 s"]



def test_an_architecture_outside_the_papers_curves_keeps_its_own_name():
    """E1 accepts any registered switch architecture; its curve must not merge with the
    paper's n_e = 0 curve (a spec like 'delay-line:5' has no n_e)."""
    s = summary()
    extra = s[s["switch"] == "all-optical"].assign(switch="delay-line:5")
    agg = e1.aggregate(pd.concat([s, extra]))
    assert {"n_e = 0", "delay-line:5"} <= set(agg["switch"])
    assert (agg[agg["switch"] == "n_e = 0"]["n"] == 2).all()  # its own repetitions only


# ---- findings --------------------------------------------------------------------------

SPREAD = (0.98, 1.0, 1.02)  # repetitions: mean x these (deterministic)


def rows(cca, switch, gbps_per_load, length="10 m", reps=SPREAD, buffer_mb=0.1, k=4, **extra):
    """Summary rows of one configuration: {load /s: mean Gb/s} x the repetitions' spread."""
    out = []
    for load, gbps in gbps_per_load.items():
        for rep, f in enumerate(reps):
            out.append({"k": k, "cca": cca, "switch": switch, "link_length": length, "load": f"{load} /s",
                        "initial_rto": "1 ms", "size_scale": "0.1 %", "rep": rep, "throughput_bps": gbps * f * 1e9,
                        "max_buffer_bytes": buffer_mb * f * 1e6, "loss_ratio": 0.01, "oeo_fraction": 0.1,
                        "retransmits": 3, **extra})
    return out


def by_id(frame):
    return {f.id: f for f in evaluate(e1.configs(pd.DataFrame(frame)))}


def test_findings_hold_fail_and_say_what_is_not_measured():
    f = by_id(rows("saw", "all-optical", {10000: 5, 100000: 20, 300000: 10})
              + rows("saw", "hybrid:2", {10000: 5, 100000: 20, 300000: 21})
              + rows("sack", "all-optical", {10000: 8, 100000: 30, 300000: 15}, buffer_mb=0))
    assert f["F1a-saw"].verdict == findings.HOLDS
    assert f["F1a-saw"].where == "SAW, 10 m, load 300000 /s"
    assert f["F1a-saw"].a.label == "n_e = 2" and f["F1a-saw"].b.label == "n_e = 0" and f["F1a-saw"].a.n == 3
    assert f["F1a-saw"].estimate == pytest.approx(2.1)
    assert f["F1b-saw"].verdict == findings.HOLDS and f["F1b-saw"].b.label == "load 100000 /s (best lower load)"
    assert f["F1c-saw"].verdict == findings.HOLDS          # 21 vs 20: no fall beyond the 10 % margin
    assert f["F3c"].verdict == findings.FAILS               # SACK above SAW over all-optical here
    assert f["F3c"].hi < 1
    for fid, needs in (("F1a-sawl", "cca = sawl"), ("F2", "sawl and saw"), ("F3a-sack", "100 m"),
                       ("F4c.2", "all-optical@1 s"), ("F4b", "hybrid:k")):
        assert f[fid].verdict == findings.NOT_MEASURED and needs in f[fid].reason, fid
    assert f["F1a-sack"].verdict == findings.NOT_MEASURED   # SACK has no hybrid here
    assert f["F5-saw"].verdict == findings.HOLDS and "size_scale 0.1 %" in f["F5-saw"].where


def test_findings_are_inconclusive_with_one_repetition_or_overlapping_intervals():
    f = by_id(rows("saw", "all-optical", {10000: 5, 300000: 10}, reps=(1.0,))
              + rows("saw", "hybrid:2", {10000: 5, 300000: 21}, reps=(1.0,))
              + rows("sawl", "hybrid:2", {300000: 22}, reps=(0.6, 1.0, 1.4))
              + rows("saw", "hybrid:2", {300000: 21}, reps=(1.0, 1.0)))
    assert f["F1a-saw"].verdict == findings.INCONCLUSIVE and "fewer than 2" in f["F1a-saw"].reason
    assert f["F2"].verdict == findings.INCONCLUSIVE and f["F2"].lo < 1 < f["F2"].hi


def test_collapse_needs_a_load_past_saturation():
    low = [dict(r, offered_load=0.3 if r["load"] == "10000 /s" else 0.8)
           for r in rows("saw", "all-optical", {10000: 5, 300000: 10}) + rows("saw", "hybrid:2", {10000: 5, 300000: 9})]
    f = by_id(low)
    assert f["F1b-saw"].verdict == f["F1c-saw"].verdict == findings.NOT_MEASURED
    assert "offers 80 % of the servers' capacity" in f["F1b-saw"].reason
    past = by_id([dict(r, offered_load=1.2) for r in low])
    assert past["F1b-saw"].verdict == findings.FAILS     # still rising past saturation: no collapse
    assert past["F1c-saw"].verdict == findings.HOLDS


def test_electronic_and_rto_findings():
    f = by_id(rows("sack", "hybrid:4", {100000: 30, 300000: 31})
              + rows("sack", "electronic", {100000: 29, 300000: 30})
              + rows("sack", "electronic@1 s", {100000: 29, 300000: 30})
              + rows("sack", "all-optical", {100000: 20, 300000: 12})
              + rows("sack", "all-optical@1 s", {300000: 6})
              + rows("sack", "hybrid:2", {300000: 25}) + rows("sack", "hybrid:2@1 s", {300000: 28})
              + rows("saw", "electronic", {300000: 3}) + rows("saw", "all-optical", {300000: 9}))
    assert f["F4a-saw"].verdict == findings.HOLDS and f["F4a-saw"].a.label == "electronic, RTO 1 ms"
    assert f["F4b"].verdict == findings.HOLDS and f["F4b"].a.label == "n_e = k" and "non-inferiority" in f["F4b"].rule
    assert f["F4c.1"].verdict == findings.HOLDS and "0.9 < a / b < 1.1" in f["F4c.1"].rule
    assert f["F4c.2"].verdict == findings.HOLDS and f["F4c.2"].a.label == "RTO 1 s"
    assert f["F4c.3"].verdict == findings.FAILS and "n_e = 2" in f["F4c.3"].where   # 28 > 25 at 1 s
    assert f["F4a-sawl"].verdict == findings.NOT_MEASURED
    assert "kernel's initial RTO" not in f["F4c.1"].side     # not recorded: nothing claimed


def test_rto_findings_say_the_initial_rto_the_kernel_used():
    """Under time dilation TCP_RTO_MAX caps the "1 s" initial RTO (12 ms of paper time at
    D = 10 000): the F4c rows must say the value the runs had, not only the label."""
    data = (rows("sack", "electronic", {300000: 30}, initial_rto_effective_s=0.001)
            + rows("sack", "electronic@1 s", {300000: 30}, initial_rto_effective_s=0.012)
            + rows("sack", "all-optical", {300000: 12}, initial_rto_effective_s=0.001)
            + rows("sack", "all-optical@1 s", {300000: 6}, initial_rto_effective_s=0.012))
    f = by_id(data)
    for fid in ("F4c.1", "F4c.2", "F4c.3"):
        assert "the kernel's initial RTO in the 'RTO 1 s' runs was 12 ms of paper time, not 1 s" in f[fid].side, fid
    assert "kernel's initial RTO" not in f["F4a-saw"].side
    undilated = [dict(r, initial_rto_effective_s=1.0 if r["switch"].endswith("@1 s") else 0.001) for r in data]
    assert "kernel's initial RTO" not in by_id(undilated)["F4c.1"].side


def test_buffer_findings_use_the_worst_hybrid_configuration():
    f = by_id(rows("sack", "hybrid:1", {300000: 30}, buffer_mb=0.5) + rows("sack", "hybrid:2", {300000: 30},
                                                                            buffer_mb=3.0)
              + rows("sack", "electronic", {300000: 30}, buffer_mb=50.0))
    assert f["F5-sack"].verdict == findings.FAILS and f["F5-sack"].a.label == "n_e = 2"
    assert f["F5-sack"].estimate == pytest.approx(3.0) and f["F5-sack"].unit == "MB"
    assert "1.1" in f["F5-sack"].rule and "x 0.1 %" in f["F5-sack"].rule
    assert f["F5-msack"].verdict == findings.NOT_MEASURED


def test_spurious_retransmissions_are_a_side_column_when_present():
    base = rows("saw", "all-optical", {300000: 10}) + rows("saw", "hybrid:4", {300000: 21})
    assert by_id(base)["F1a-saw"].side == ""
    spur = (rows("saw", "all-optical", {300000: 10}, spurious_fraction=0.0)
            + rows("saw", "hybrid:4", {300000: 21}, spurious_fraction=0.25))
    assert by_id(spur)["F1a-saw"].side == "spurious retransmissions / data segments: a 0.25, b 0"


def test_the_port_models_gap_is_written_beside_hybrid_findings_never_in_the_verdict():
    """At hybrid n_e < k the port model drops more than the paper's switch (departures
    committed at arrival): against F1a/F1c, of unknown direction for comparisons over the
    same hybrid; at n_e = k (within the bounds) no note."""
    data = (rows("saw", "all-optical", {10000: 5, 300000: 10}, offered_load=2.0)
            + rows("saw", "hybrid:2", {10000: 5, 300000: 21}, offered_load=2.0)
            + rows("sawl", "hybrid:2", {300000: 30}, offered_load=2.0))
    f = by_id(data)
    assert f["F1a-saw"].side == GAP_AGAINST and f["F1a-saw"].verdict == findings.HOLDS
    assert f["F1c-saw"].side == GAP_AGAINST
    assert f["F2"].side == GAP_UNKNOWN and f["F2"].verdict == findings.HOLDS
    assert f["F1b-saw"].side == ""                      # all-optical only
    full = by_id([dict(r, k=2) for r in data])          # hybrid:2 in a k = 2 fabric is fully buffered
    assert full["F1a-saw"].side == full["F2"].side == ""
    assert full["F1a-saw"].verdict == f["F1a-saw"].verdict and full["F2"].estimate == f["F2"].estimate


def test_the_holding_realisation_gives_hybrid_findings_a_second_number():
    """hybrid-hold:2 rows beside hybrid:2 (same loads): the hybrid findings say what the
    holding realisation (the paper's switch exactly) gives, the verdict stays the port
    model's; findings without hybrid switches and runs without holding rows are as before."""
    data = (rows("saw", "all-optical", {10000: 5, 300000: 10}, offered_load=2.0)
            + rows("saw", "hybrid:2", {10000: 5, 300000: 21}, offered_load=2.0)
            + rows("saw", "hybrid-hold:2", {10000: 5, 300000: 9}, offered_load=2.0, max_buffer_bytes=0.3e6)
            + rows("sawl", "hybrid:2", {300000: 30}, offered_load=2.0))
    f = by_id(data)
    assert f["F1a-saw"].verdict == findings.HOLDS and f["F1a-saw"].estimate == pytest.approx(2.1)
    assert f["F1a-saw"].side == GAP_AGAINST + "; holding realisation (hybrid-hold): does not hold (a / b = 0.9 [" + \
        f["F1a-saw"].side.split("[")[1]
    assert f["F5-saw"].verdict == findings.HOLDS     # the port model: 0.1 MB
    assert f["F5-saw"].side.endswith("holding realisation (hybrid-hold): does not hold (a = 0.3 [0.3, 0.3] MB)")
    assert "holding realisation" not in f["F2"].side          # no SAWL over hybrid-hold: not measured there
    assert "holding realisation" not in f["F1b-saw"].side     # all-optical only
    without = by_id([r for r in data if r["switch"] != "hybrid-hold:2"])
    assert without["F1a-saw"].side == GAP_AGAINST and without["F1a-saw"].verdict == f["F1a-saw"].verdict


def test_buffer_finding_says_whether_it_survives_the_occupancy_the_model_may_miss():
    """F5 at SAW (paper 0.14 MB, bound 0.154 MB): 0.10 MB (upper end ~0.105) holds with
    two 9064 B packets more; 0.14 MB holds too (upper end ~0.147) but not with them; at
    n_e = k the shortfall is relative."""
    def f5(switch, mb, k=4):
        return by_id(rows("saw", switch, {300000: 10}, buffer_mb=mb, k=k))["F5-saw"]

    low, near = f5("hybrid:2", 0.10), f5("hybrid:2", 0.14)
    assert low.verdict == near.verdict == findings.HOLDS
    assert "2 x 9064 B (n_e < k)" in low.side and low.side.endswith("verdict unchanged")
    assert near.side.endswith("would be inconclusive")
    full = f5("hybrid:4", 0.10)
    assert "20% (n_e = k)" in full.side and full.side.endswith("verdict unchanged")
    over = f5("hybrid:2", 0.5)
    assert over.verdict == findings.FAILS and over.side.endswith("verdict unchanged")


def test_report_shows_the_findings_first(tmp_path):
    from analysis.report import generate

    frame = pd.DataFrame(rows("saw", "all-optical", {10000: 5, 300000: 10}) + rows("saw", "hybrid:2",
                                                                                  {10000: 5, 300000: 21}))
    frame.insert(0, "point", [f"p{i:04d}" for i in range(len(frame))])
    frame = frame.assign(**{k: v for k, v in UNMEASURED.items() if k not in frame})
    frame.to_csv(tmp_path / "summary.csv", index=False)
    (tmp_path / "config.json").write_text(json.dumps({"experiment": {"name": "e1-test", "family": "e1-fattree"},
                                                      "run": {"tdf": 10000}}))
    page = generate(tmp_path).read_text()
    title = html.escape(findings.TITLE)
    assert page.index(title) < page.index("<img") < page.index("Network throughput per configuration")
    assert "class='verdict v-holds'" in page and page.count(title) == 1
    assert "F1a-saw" in (tmp_path / "report" / "findings.md").read_text()
    assert "family <code>e1-fattree</code>" in page


def test_report_names_a_declared_metric_missing_from_the_summary(tmp_path):
    """A summary.csv without a declared metric is an error naming it, not a missing curve."""
    from analysis.report import generate
    from testbed.metrics import SummaryError

    frame = pd.DataFrame(rows("saw", "all-optical", {10000: 5})).assign(
        **{k: v for k, v in UNMEASURED.items() if k != "oeo_fraction"}).drop(columns="oeo_fraction")
    frame.to_csv(tmp_path / "summary.csv", index=False)
    (tmp_path / "config.json").write_text(json.dumps({"experiment": {"name": "e1-test", "kind": "e1-fattree"},
                                                      "run": {"tdf": 10000}}))
    with pytest.raises(SummaryError, match=r"no column\(s\) oeo_fraction,? ") as exc:
        generate(tmp_path)
    assert str(tmp_path / "summary.csv") in str(exc.value)


def test_artefacts_table_sums_the_failures_a_reviewer_must_see():
    s = summary()
    s["flows_failed"] = [0] * (len(s) - 1) + [607]
    s["data_segments"], s["spurious_retransmits"] = 1000, 10
    s["memory_drops"] = 0
    art = e1.artefacts(s.drop(columns=["listen_drops"]))
    bad = art[art["failed transfers"] > 0]
    assert len(bad) == 1 and bad.iloc[0]["failed transfers"] == 607 and bad.iloc[0]["n"] == 2
    assert art["spurious share"].eq(0.01).all()
    assert art["memory drops"].eq(0).all() and art["listen drops"].isna().all()
    assert art["failed transfers"].sum() == 607


def test_runs_short_of_tcp_memory_are_left_out_and_the_verdict_with_them_is_beside():
    """A run with memory pressure or drops (the shared tcp_mem ran short: an emulation
    artefact) leaves the verdicts, figures and tables; a finding it would change gives its
    verdict with it in the side column; the artefacts table still counts it."""
    data = (rows("saw", "all-optical", {10000: 5, 300000: 10}, offered_load=2.0, memory_pressures=0, memory_drops=0)
            + rows("saw", "hybrid:2", {10000: 5, 300000: 21}, offered_load=2.0, memory_pressures=0, memory_drops=0))
    clean = by_id(data)
    # three more hybrid runs at 300000 /s, all short of memory and far lower: without the
    # rule F1a-saw would not hold
    short = rows("saw", "hybrid:2", {300000: 2}, offered_load=2.0, memory_pressures=5, memory_drops=0)
    short[1]["memory_pressures"], short[1]["memory_drops"] = 0, 900     # drops without a pressure event
    short[2]["memory_pressures"], short[2]["memory_drops"] = float("nan"), 3   # pressure not counted, drops
    f = by_id(data + short)
    assert f["F1a-saw"].verdict == clean["F1a-saw"].verdict == findings.HOLDS
    assert f["F1a-saw"].estimate == pytest.approx(clean["F1a-saw"].estimate) and f["F1a-saw"].a.n == 3
    assert "runs short of TCP memory left out" in f["F1a-saw"].side
    assert "with them: inconclusive (a / b = 1.15 [" in f["F1a-saw"].side   # (21 + 2) / 2 / 10
    assert "runs short of TCP memory" not in f["F1b-saw"].side      # all-optical only: unchanged
    assert "runs short of TCP memory" not in clean["F1a-saw"].side
    # a run made before the columns were counted (nan in both) is kept
    old = rows("saw", "hybrid:2", {300000: 21}, offered_load=2.0, memory_pressures=float("nan"),
               memory_drops=float("nan"))
    assert by_id(data + old)["F1a-saw"].a.n == 6


def test_analyse_leaves_runs_short_of_tcp_memory_out_of_figures_and_tables(tmp_path):
    s = summary()
    s["memory_pressures"], s["memory_drops"] = 0, 0
    s.loc[s.index[-1], "memory_drops"] = 42
    figs, tables = e1.analyse(s, {}, tmp_path)
    (head_title, headline), (buf_title, _), (_, art), (_, found) = tables
    assert "1 of 24 runs short of TCP memory left out" in head_title and "left out" in buf_title
    assert headline["n"].sum() == 23 and art["n"].sum() == 24 and art["memory drops"].sum() == 42
    assert "1 of 24 runs short of TCP memory left out" in (tmp_path / "findings.md").read_text()
    (tmp_path / "clean").mkdir()
    _, tables = e1.analyse(summary(), {}, tmp_path / "clean")
    assert "left out" not in tables[0][0] and "left out" not in (tmp_path / "clean" / "findings.md").read_text()


def test_the_holding_number_says_where_it_is_from_when_that_differs():
    """F5 takes the worst hybrid configuration: with hybrid:4 run only over the port
    model, the holding realisation's worst is among fewer configurations, and its note
    names them (a smaller number there is not the same configuration's)."""
    data = (rows("saw", "hybrid:2", {300000: 21}, offered_load=2.0, buffer_mb=0.1)
            + rows("saw", "hybrid:4", {300000: 21}, offered_load=2.0, buffer_mb=0.5)
            + rows("saw", "hybrid-hold:2", {300000: 21}, offered_load=2.0, buffer_mb=0.12))
    f = by_id(data)
    assert f["F5-saw"].a.label == "n_e = 4" and "largest of 2" in f["F5-saw"].where
    note = f["F5-saw"].side.split("holding realisation (hybrid-hold): ")[1]
    assert note.startswith("holds (a = 0.12 [") and " at SAW, 10 m, load 300000 /s: the largest of 1 " in note


def test_analyse_with_every_run_short_of_tcp_memory_draws_nothing_and_says_why(tmp_path):
    s = summary()
    s["memory_pressures"], s["memory_drops"] = 3, 0
    figs, tables = e1.analyse(s, {}, tmp_path)
    assert figs == [] and tables[0][1].empty and "24 of 24 runs short of TCP memory" in tables[0][0]
    assert tables[2][1]["n"].sum() == 24                     # the artefacts table keeps them
    assert set(tables[3][1]["verdict"]) == {findings.NOT_MEASURED}
