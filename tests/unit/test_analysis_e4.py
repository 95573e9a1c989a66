"""E4 analysis: figures, tables and findings from synthetic results folders.

Each configuration follows a hand-written story (:class:`Story`): the rate per one-RTT
bin around the move is fixed by construction (the limit before, a dip of a known depth
for a known number of bins, then the new limit alpha / RTT-after reached after a known
number of RTTs), and the summary row carries the values that story implies. The
verdicts and the per-run rate over the first second are checked against what the story
says, not against the code's own arithmetic."""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import e4, findings, report
from analysis.e4_findings import CENSOR_RTTS, evaluate
from testbed import families
from testbed.units import Dim, Quantity

METRICS = [m.name for m in families.load("e4-flowmove").metrics]
MSS = 1448
REPS = 3


@dataclass(frozen=True)
class Story:
    """One configuration: ``limit`` bit/s and ``rtt`` s before the move; after it the
    first ``dip_bins`` one-RTT bins run at (1 - dip) x the rate before, the bins up to
    ``rise`` RTTs at the rate before, then at ``end`` x alpha / RTT-after."""

    limit: float = 1e9
    rtt: float = 0.010
    ratio: float = 0.6
    limiter: str = "buffer"
    cca: str = "cubic"
    trigger: str = "time"
    dip: float = 0.4
    dip_bins: int = 1
    rise: int = 3
    end: float = 1.0
    dupacks: int = 345
    moved: int = 1

    def before_s(self) -> float:
        return max(2.0, 25 * self.rtt)

    def after_s(self) -> float:
        return max(2.0, 30 * self.rtt)

    def rate(self, k: int, f: float, dip: float) -> float:
        """bit/s in the one-RTT bin k (k = 0 starts at the move) of the repetition with
        rate factor ``f`` and dip ``dip``."""
        before = self.limit * f
        if k < 0:
            return before
        if k < self.dip_bins:
            return before * (1 - dip)
        if k < self.rise - 1:
            return before
        return self.end * self.limit / self.ratio * f

    def time_to_95(self, f: float) -> float:
        return self.rise * self.rtt if self.end * f >= 0.95 else math.nan


def spread(rep: int) -> tuple[float, float]:
    """(rate factor, dip offset) of repetition ``rep``: a small, known spread."""
    return 1 + 0.005 * (rep - 1), 0.01 * (rep - 1)


def summary_rows(story: Story, reps: int = REPS) -> list[dict]:
    rows = []
    for rep in range(reps):
        f, d = spread(rep)
        dip = max(0.0, story.dip + d) if story.dip > 0 else 0.0
        alpha = story.limit * story.rtt / 8
        lb, la = story.limit, story.limit / story.ratio
        row = {m: 0.0 for m in METRICS}
        row.update({
            "rep": rep, "seed": rep, "limit_rate": str(Quantity(story.limit, Dim.RATE)),
            "rtt": str(Quantity(story.rtt, Dim.TIME)), "rtt_ratio": story.ratio, "link_rate": "0 bit/s",
            "limiter": story.limiter, "queue": 0, "trigger": story.trigger, "before": "0 s", "after": "0 s",
            "threshold": "90 %", "emulated_rate": "20 Mbit/s", "cca": story.cca, "trace_cwnd": True,
            "capture": True, "tdf": 50.0, "buffer_bytes": alpha, "rtt_before_s": story.rtt,
            "rtt_after_s": story.rtt * story.ratio, "limit_before_bps": lb, "limit_after_bps": la,
            "moved": story.moved, "move_s": story.before_s(), "move_requested_s": story.before_s(),
            "move_lateness_s": 1e-4, "rate_before_bps": lb * f, "rate_after_bps": story.end * la * f,
            "reached_before": f, "reached_after": story.end * f, "dip_depth": dip,
            "time_to_95_s": story.time_to_95(f), "dupacks": story.dupacks + 5 * rep,
            "dupacks_any_window": story.dupacks + 20, "fast_recoveries": 1, "undos": 1, "retrans_segs": 30,
            "ssthresh_min_after": 2 ** 31 - 1, "cwnd_before": alpha / MSS, "cwnd_min_after": 0.7 * alpha / MSS,
            "rwnd_limited_share": 0.97, "paper_s_per_wall_s": 0.02, "move_phase": 0.25 * rep,
            "ooo_segments": 100 + 10 * rep})
        rows.append(row)
    return rows


def summary_of(*stories: Story, reps: int = REPS) -> pd.DataFrame:
    frame = pd.DataFrame([r for s in stories for r in summary_rows(s, reps)])
    frame.insert(0, "point", [f"p{i:04d}" for i in range(len(frame))])
    return frame


def series_rows(story: Story, rep: int) -> list[dict]:
    """throughput_series.csv of one run as the family writes it: bins of one RTT and of
    1 s from the flow's start, so the move (``before`` + a lateness of 0.3 ms x (rep + 1)
    after the start) falls inside a bin; each bin holds the integral of the story's rate."""
    f, d = spread(rep)
    dip = max(0.0, story.dip + d) if story.dip > 0 else 0.0
    n_before, n_after = round(story.before_s() / story.rtt), round(story.after_s() / story.rtt)
    edges = np.arange(-n_before, n_after + 1) * story.rtt          # one-RTT bins from the move
    cum = np.concatenate([[0.0], np.cumsum([story.rate(int(k), f, dip) * story.rtt / 8
                                            for k in range(-n_before, n_after)])])
    move_s = story.before_s() + 3e-4 * (rep + 1)
    rows = []
    for g, sources in ((story.rtt, ("capture", "socket")), (1.0, ("capture",))):
        start = -move_s + np.arange(math.ceil((move_s + story.after_s()) / g)) * g
        nbytes = np.interp(start + g, edges, cum) - np.interp(start, edges, cum)
        rows += [{"granularity_s": g, "source": src, "t_s": t, "bytes": b, "throughput_bps": 8 * b / g}
                 for src in sources for t, b in zip(start, nbytes)]
    return rows


def write_results(tmp_path: Path, summary: pd.DataFrame, stories: dict[str, Story],
                  skip: dict[str, set[str]] | None = None) -> Path:
    """A results folder with config.json, summary.csv and every point's files; ``stories``
    maps each point to its story, ``skip`` = {point: file names} leaves those out.
    Returns the report folder."""
    results = tmp_path / "results"
    (results / "report").mkdir(parents=True)
    summary.to_csv(results / "summary.csv", index=False)
    (results / "config.json").write_text(json.dumps({
        "experiment": {"name": "e4-test", "family": "e4-flowmove", "description": "synthetic"},
        "run": {"tdf": 1}}))
    for _, r in summary.iterrows():
        story, d = stories[r["point"]], results / "points" / r["point"]
        d.mkdir(parents=True)
        pd.DataFrame(series_rows(story, int(r["rep"]))).to_csv(d / "throughput_series.csv", index=False)
        w = r["buffer_bytes"] / MSS
        rtt = story.rtt
        pd.DataFrame([  # changes-only: the window holds, then one recovery right after the move
            {"t_s": -30 * rtt, "event": "ack", "cwnd": w, "ssthresh": 2 ** 31 - 1, "reordering": 3, "ca_state": 0},
            {"t_s": 0.2 * rtt, "event": "ack", "cwnd": w, "ssthresh": 2 ** 31 - 1, "reordering": 3, "ca_state": 1},
            {"t_s": 0.4 * rtt, "event": "retrans", "cwnd": 0.7 * w, "ssthresh": 0.7 * w, "reordering": 40,
             "ca_state": 3},
            {"t_s": 2 * rtt, "event": "ack", "cwnd": w, "ssthresh": 0.7 * w, "reordering": 40, "ca_state": 0},
        ]).to_csv(d / "cwnd.csv", index=False)
        t = rtt * (0.1 + 0.4 * np.arange(story.dupacks) / story.dupacks)
        pd.DataFrame({"t_s": np.concatenate([t, t[:20]]), "rfc5681": [True] * len(t) + [False] * 20}
                     ).to_csv(d / "dupacks.csv", index=False)
        (d / "e4.json").write_text(json.dumps({"capture": {"mss": MSS}}))
        for name in (skip or {}).get(r["point"], ()):
            (d / name).unlink()
    return results / "report"


def stories_of(summary: pd.DataFrame, *stories: Story, reps: int = REPS) -> dict[str, Story]:
    return {p: stories[i // reps] for i, p in enumerate(summary["point"])}


def run(tmp_path: Path, *stories: Story, reps: int = REPS, skip: dict[str, set[str]] | None = None):
    s = summary_of(*stories, reps=reps)
    out = write_results(tmp_path, s, stories_of(s, *stories, reps=reps), skip)
    figs, tables = e4.analyse(s, {}, out)
    return s, out, figs, dict(tables)


def verdicts(tables: dict[str, pd.DataFrame]) -> dict[str, pd.Series]:
    table = tables[findings.TITLE]
    return {r["id"]: r for _, r in table.iterrows()}


PAPER = (Story(limit=100e6, rtt=0.100), Story(limit=1e9, rtt=0.010), Story(limit=10e9, rtt=0.010))


# ---- findings ------------------------------------------------------------------------------

def test_the_papers_story_holds_everywhere(tmp_path):
    s, out, figs, tables = run(tmp_path, *PAPER)
    f = verdicts(tables)
    assert list(f) == ["F0", "F1", "F2", "F3", "F4"]
    for fid, r in f.items():
        assert r["verdict"] == findings.HOLDS, (fid, r["reason"])
    found = {x.id: x for x in evaluate(e4.with_first_second(s, e4.load_series(e4.PointFiles(out.parent), s)))}
    assert len(found["F1"].parts) == 3 and len(found["F3"].parts) == 6    # rate and dupACKs per configuration
    # the story rises in 3 RTTs, dips by 40 % (+-1 %) and ends at 1.667 x
    assert found["F2"].estimate == pytest.approx(3.0) and found["F2"].high == 10
    assert found["F1"].estimate == pytest.approx(0.40) and found["F1"].low == 0.05
    # F4 at 100 ms: before = 2.5 s, so the 1 s bins straddle the move; the first second
    # is ten one-RTT bins: 0.6 + 1 + 8 x 1/0.6 times the rate before
    f4_100m = next(p for p in found["F4"].parts if p.where.startswith("100 Mbit/s"))
    assert f4_100m.estimate == pytest.approx((0.6 + 1 + 8 / 0.6) / 10, rel=0.02)
    # at 10 ms: 100 bins, 98 of them at the new limit
    f4_1g = next(p for p in found["F4"].parts if p.where.startswith("1 Gbit/s"))
    assert f4_1g.estimate == pytest.approx((0.6 + 1 + 98 / 0.6) / 100, rel=0.02)


def test_no_dip_does_not_hold_and_a_slow_rise_does_not_hold(tmp_path):
    s = summary_of(Story(dip=0.0), Story(limit=100e6, rtt=0.1, rise=15))
    f = {x.id: x for x in evaluate(s)}
    assert f["F1"].verdict == findings.FAILS and f["F1"].hi <= 0.05
    assert f["F2"].verdict == findings.FAILS and f["F2"].estimate == pytest.approx(15)


def test_a_run_that_never_reaches_the_new_limit_counts_as_the_censor_bound(tmp_path):
    f = {x.id: x for x in evaluate(summary_of(Story(end=0.7)))}
    assert f["F2"].verdict == findings.FAILS and f["F2"].estimate == pytest.approx(CENSOR_RTTS)
    assert f["F3"].verdict == findings.FAILS and f["F3"].a.label.startswith("rate at the end")
    assert f["F3"].estimate == pytest.approx(0.7, rel=0.01)


def test_few_duplicate_acks_do_not_make_the_claim(tmp_path):
    f = {x.id: x for x in evaluate(summary_of(Story(dupacks=5)))}
    assert f["F3"].verdict == findings.FAILS and f["F3"].a.label.startswith("duplicate ACKs")


def test_a_lasting_dip_shows_at_1_s_granularity(tmp_path):
    # 100 ms RTT, half the rate for 10 RTTs = the whole first second
    _, _, _, tables = run(tmp_path, Story(limit=100e6, rtt=0.1, dip=0.5, dip_bins=10, rise=12))
    f = verdicts(tables)
    assert f["F4"]["verdict"] == findings.FAILS and f["F4"]["estimate"] == pytest.approx(0.5, rel=0.03)
    assert f["F1"]["verdict"] == findings.HOLDS


def test_one_repetition_is_inconclusive():
    f = {x.id: x for x in evaluate(summary_of(*PAPER, reps=1))}
    for fid in ("F0", "F1", "F2", "F3"):
        assert f[fid].verdict == findings.INCONCLUSIVE and "fewer than 2" in f[fid].reason, fid
    # no series: F4 says what it needs
    assert f["F4"].verdict == findings.NOT_MEASURED and "throughput_series.csv" in f["F4"].reason


def test_findings_judge_only_buffer_limited_cubic():
    others = summary_of(Story(cca="reno"), Story(limiter="link"))
    for x in evaluate(others):
        assert x.verdict == findings.NOT_MEASURED and "limiter = buffer, cca = cubic" in x.reason, x.id
    # a reno configuration that fails everything beside a paper one that holds: only the latter counts
    mixed = summary_of(Story(), Story(cca="reno", dip=0.0, end=0.5, dupacks=0))
    f = {x.id: x for x in evaluate(mixed)}
    assert f["F1"].verdict == findings.HOLDS and f["F3"].verdict == findings.HOLDS


def test_runs_that_did_not_move_are_left_out():
    s = summary_of(Story(trigger="threshold", moved=0))
    f = {x.id: x for x in evaluate(s)}
    assert f["F1"].verdict == findings.NOT_MEASURED and "none of 3" in f["F1"].reason
    # one of three not moved, carrying a nonsense value: left out, and said so
    s = summary_of(Story(trigger="threshold"))
    s.loc[0, ["moved", "dip_depth"]] = [0, 0.0]
    s.loc[0, "rep"] = 7
    f = {x.id: x for x in evaluate(s)}
    assert f["F1"].a.n == 2 and "1 of 3 runs not moved" in f["F1"].side


def test_runs_short_of_tcp_memory_are_left_out_and_named():
    s = summary_of(Story())
    s["memory_drops"] = [0, float("nan"), 0]      # nan: a run made before they were counted
    s.loc[0, ["memory_drops", "dip_depth", "rep"]] = [66057, 0.0, 7]
    f = {x.id: x for x in evaluate(s)}
    assert f["F1"].a.n == 2 and "1 of 3 runs short of TCP memory" in f["F1"].side
    # a memory pressure event without drops is the same artefact (the kernel shrank buffers)
    s["memory_drops"] = 0
    s["memory_pressures"] = [0, 2, 0]
    f = {x.id: x for x in evaluate(s)}
    assert f["F1"].a.n == 2 and "1 of 3 runs short of TCP memory" in f["F1"].side
    s["memory_drops"] = 5
    f = {x.id: x for x in evaluate(s)}
    assert f["F1"].verdict == findings.NOT_MEASURED and "without memory" in f["F1"].reason


# ---- helpers --------------------------------------------------------------------------------

def test_first_second_rate_takes_the_finest_bins_and_cuts_edge_bins_pro_rata():
    coarse = [{"granularity_s": 1.0, "source": "capture", "t_s": t, "bytes": b} for t, b in ((-0.5, 1000), (0.5, 3000))]
    fine = [{"granularity_s": 0.25, "source": "capture", "t_s": t, "bytes": b}
            for t, b in ((-0.25, 7), (0.0, 100), (0.25, 200), (0.5, 300), (0.75, 400), (1.0, 9))]
    socket = [{"granularity_s": 0.25, "source": "socket", "t_s": 0.0, "bytes": 10 ** 6}]
    assert e4.first_second_rate(pd.DataFrame(coarse + fine + socket)) == pytest.approx(8 * 1000)
    # only 1 s bins, the move halfway into one: half of each of the two it cuts
    assert e4.first_second_rate(pd.DataFrame(coarse)) == pytest.approx(8 * (500 + 1500))
    # bins from -0.1 s: [-0.1, 0.15) counts 0.6 of its bytes, [0.9, 1.15) 0.4
    offset = [{"granularity_s": 0.25, "source": "capture", "t_s": -0.1 + 0.25 * i, "bytes": b}
              for i, b in enumerate((100, 200, 300, 400, 500))]
    assert e4.first_second_rate(pd.DataFrame(offset)) == pytest.approx(8 * (60 + 200 + 300 + 400 + 200))
    # written twice (RTT = 1 s: both granularities) a bin counts once
    aligned = [{"granularity_s": 1.0, "source": "capture", "t_s": 0.0, "bytes": 5000}] * 2
    assert e4.first_second_rate(e4.clean_series(pd.DataFrame(aligned))) == pytest.approx(8 * 5000)
    # a series that ends before the first second is over, or starts after the move: no value
    assert math.isnan(e4.first_second_rate(pd.DataFrame(fine[:3])))
    assert math.isnan(e4.first_second_rate(pd.DataFrame(fine[2:])))


def test_window_trace_carries_the_value_held_at_the_window_start():
    trace = pd.DataFrame({"t_s": [-5.0, -1.0, 0.5, 9.0], "cwnd": [10, 20, 30, 40]})
    w = e4.window_trace(trace, -0.2, 2.0)
    assert list(w["t_s"]) == [-0.2, 0.5] and list(w["cwnd"]) == [20, 30]


def test_dupacks_per_rtt_bins():
    d = pd.DataFrame({"t_s": [-0.015, 0.001, 0.004, 0.009, 0.012, 0.5], "rfc5681": [True, True, True, False, True, True]})
    strict, any_window = e4.dupacks_per_rtt(d, 0.010, -2, 2)
    assert list(strict) == [1, 0, 2, 1] and list(any_window) == [1, 0, 3, 1]


# ---- the whole analysis ---------------------------------------------------------------------

def test_analyse_writes_figures_and_tables(tmp_path):
    s, out, figs, tables = run(tmp_path, *PAPER, Story(rtt=0.100))
    names = {p.name for p in figs}
    assert all(p.exists() and p.stat().st_size > 5_000 for p in figs)
    # three limit rates -> three groups; 1 Gbit/s has two RTTs
    assert len([n for n in names if n.startswith("throughput_1s_")]) == 3
    assert len([n for n in names if n.startswith("throughput_rtt_")]) == 3
    assert len([n for n in names if n.startswith("cwnd_")]) == 4
    assert len([n for n in names if n.startswith("dupacks_")]) == 3
    assert len([n for n in names if n.startswith("phase_")]) == 3  # one per group
    assert (out / "findings.csv").exists() and "F4" in (out / "findings.md").read_text()
    assert not any(t.startswith("Per-point files missing") for t in tables)
    paper = next(v for k, v in tables.items() if k.startswith("The paper's numbers"))
    dup = paper[paper["statement"] == "duplicate ACKs caused by the move"].iloc[0]
    assert dup["paper"].startswith("1372") and dup["ours"] == pytest.approx(345 + 5) and dup["runs"] == 3
    # (1 - 0.6) x 1.25 MB / 1448 B segments overtaken
    assert f"{0.4 * 1.25e6 / MSS:.4g}" in dup["note"]
    omitted = paper[paper["statement"] == "10 Gb/s at RTT 1000 ms"].iloc[0]
    assert "RFC 7323" in omitted["note"] and str(65535 << 14) in omitted["note"]
    tp = next(v for k, v in tables.items() if k.startswith("Throughput around the move"))
    row = tp[(tp["limit_rate"] == "1 Gbit/s") & (tp["rtt"] == "100 ms")].iloc[0]
    assert row["time to 95 % [RTTs before]"] == pytest.approx(3) and row["reached 95 % in"] == "3 of 3"
    assert row["dip_depth lo95"] < 0.40 < row["dip_depth hi95"]
    art = next(v for k, v in tables.items() if k.startswith("Artefacts"))
    assert set(art["tdf"]) == {"50"} and (art["move lateness max [RTTs before]"] > 0).all()


def test_the_omitted_case_note_only_when_10_gbits_lacks_1000_ms(tmp_path):
    s = summary_of(Story())
    assert e4.omitted_note(s) == ""
    assert "RFC 7323" in e4.omitted_note(summary_of(Story(limit=10e9)))
    assert e4.omitted_note(summary_of(Story(limit=10e9), Story(limit=10e9, rtt=1.0))) == ""


def test_missing_files_do_not_crash(tmp_path):
    s = summary_of(*PAPER)
    first = {p: {"throughput_series.csv", "cwnd.csv", "dupacks.csv", "e4.json"} for p in s["point"][:3]}
    s_out = write_results(tmp_path, s, stories_of(s, *PAPER), skip=first)
    figs, tables = e4.analyse(s, {}, s_out)
    t = dict(tables)
    missing = next(v for k, v in t.items() if k.startswith("Per-point files missing"))
    assert set(missing["point"]) == {"p0000", "p0001", "p0002"} and "missing" in set(missing["why"])
    f = verdicts(t)
    assert f["F4"]["verdict"] == findings.HOLDS and "1 not measured" in f["F4"]["reason"]
    assert len([p for p in figs if p.name.startswith("throughput_1s_")]) == 2
    # no point folder at all: tables and findings, and only the figures drawn from the
    # summary alone (reordering against the move's phase)
    empty = tmp_path / "bare" / "report"
    empty.mkdir(parents=True)
    figs, tables = e4.analyse(s, {}, empty)
    assert all(p.name.startswith("phase_") for p in figs)
    assert verdicts(dict(tables))["F4"]["verdict"] == findings.NOT_MEASURED
    # an unreadable file and a trace without rows
    point = s_out.parent / "points" / "p0003"
    (point / "dupacks.csv").write_text("")
    (point / "cwnd.csv").write_text("t_s,event,cwnd\n")
    figs, tables = e4.analyse(s, {}, s_out)
    missing = next(v for k, v in dict(tables).items() if k.startswith("Per-point files missing"))
    assert {"empty", "no rows"} <= set(missing[missing["point"] == "p0003"]["why"])


def test_the_report_is_generated_from_the_folder(tmp_path):
    s = summary_of(*PAPER)
    out = write_results(tmp_path, s, stories_of(s, *PAPER))
    index = report.generate(out.parent)
    text = index.read_text()
    assert html.escape(findings.TITLE) in text and "throughput_1s_" in text and "v-holds" in text


def test_bins_of_repetitions_are_matched_from_the_flows_start():
    # two runs whose moves fall 0.2 s and 0.7 s into a bin: bin i is the same second
    a = pd.DataFrame({"t_s": [-2.2, -1.2, -0.2, 0.8]})
    b = pd.DataFrame({"t_s": [-2.7, -1.7, -0.7, 0.3]})
    assert list(e4.numbered(a, 1.0)["bin"]) == list(e4.numbered(b, 1.0)["bin"]) == [0, 1, 2, 3]


def test_a_combined_report_reads_each_runs_own_points(tmp_path):
    # two runs whose points have the same names (p0000 ...), at 100 Mbit/s and at 10 Gbit/s:
    # each row's first second must come from its own run's series, not the other's p0000
    slow, fast = Story(limit=100e6, rtt=0.100), Story(limit=10e9, rtt=0.100)
    folders = []
    for name, story in (("slow", slow), ("fast", fast)):
        s = summary_of(story)
        folder = write_results(tmp_path / "w", s, stories_of(s, story)).parent
        folders.append(folder.rename(tmp_path / name))     # a run is named by its folder
    index = report.combine(folders, tmp_path / "both")
    assert index.exists()
    s = pd.read_csv(tmp_path / "both" / "summary.csv")
    assert list(s["point"]) == ["p0000", "p0001", "p0002"] * 2
    got = e4.with_first_second(s, e4.load_series(e4.PointFiles(tmp_path / "both"), s))
    ratio = got[e4.FIRST_SECOND] / got["rate_before_bps"]
    # the first second after the move: 0.6 + 1 + 8 / 0.6 one-RTT bins' worth of the rate before, in both runs
    assert ratio.to_numpy() == pytest.approx([(0.6 + 1 + 8 / 0.6) / 10] * 6, rel=0.02)
