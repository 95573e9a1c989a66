"""E5's XCP parameter study (analysis/e5_xcp_params.py, the paper's Fig. 4): sweeps found
in a summary, P1-P4 on hand-built sweeps whose verdicts are known by construction, and
the report of a summary that mixes a sweep with the main grid."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis import e5, e5_xcp_params, findings
from analysis.e5_findings import prepare, with_second
from tests.unit.test_analysis_e5 import TIGHT, run_rows, size

ALPHAS = (0.1, 0.4, 0.6)
GAMMAS = (0.02, 0.1, 0.2)


def sweep(goodput, drop, *, buffers=(1000, 100_000), reps=TIGHT) -> pd.DataFrame:
    """SB / XCP rows over ALPHAS x GAMMAS x buffers: goodput(b, a, g) and drop(b, a, g)."""
    rows = []
    for b in buffers:
        for a in ALPHAS:
            for g in GAMMAS:
                for r in run_rows("sb", "xcp", b, goodput(b, a, g), drop=drop(b, a, g), reps=reps):
                    rows.append({**r, "xcp_alpha": a, "xcp_gamma": g, "xcp_beta": "stable", "routing": "pair"})
    frame = pd.DataFrame(rows)
    frame["point"] = [f"p{i:04d}" for i in range(len(frame))]
    return frame


def papers_story() -> pd.DataFrame:
    """Fig. 4: at 1 kB goodput and drops grow with alpha, flat in gamma; at 100 kB goodput
    falls with gamma and nothing is dropped."""
    return sweep(lambda b, a, g: (2e5 * (1 + a) if b < 1e4 else 8e5 * (1 - g)),
                 lambda b, a, g: (0.01 * (1 + 10 * a) if b < 1e4 else 0.0))


def by_id(s: pd.DataFrame) -> dict[str, findings.Finding]:
    p = prepare(s)
    return {f.id: f for f in e5_xcp_params.evaluate(e5_xcp_params.sweeps(p, e5.CONTEXT_PARAMS))}


def test_a_sweep_is_one_group_per_buffer_and_needs_two_parameter_pairs():
    p = prepare(papers_story())
    found = e5_xcp_params.sweeps(p, e5.CONTEXT_PARAMS)
    assert len(found) == 2 and all(len(g) == 9 * 3 for g in found)
    single = prepare(papers_story().query("xcp_alpha == 0.4 and xcp_gamma == 0.1"))
    assert e5_xcp_params.sweeps(single, e5.CONTEXT_PARAMS) == []


def test_the_papers_story_holds():
    f = by_id(papers_story())
    for fid in ("P1", "P2", "P3", "P4"):
        assert f[fid].verdict == findings.HOLDS, (fid, f[fid].reason)
    assert f["P1"].a.label == "alpha = 0.6" and f["P1"].b.label == "alpha = 0.1"
    assert f["P3"].a.label == "gamma = 0.02" and f["P3"].b.label == "gamma = 0.2"
    assert f["P1"].estimate == pytest.approx(1.6 / 1.1)


def test_the_opposite_story_does_not_hold():
    s = sweep(lambda b, a, g: (2e5 * (2 - a) if b < 1e4 else 8e5 * (0.5 + g)),
              lambda b, a, g: (0.01 * (2 - a) if b < 1e4 else 0.001))
    f = by_id(s)
    for fid in ("P1", "P2", "P3", "P4"):
        assert f[fid].verdict == findings.FAILS, (fid, f[fid].reason)
    assert "27 of 27 runs dropped" in f["P4"].reason


def test_one_repetition_is_inconclusive_and_no_sweep_is_not_measured():
    f = by_id(sweep(lambda b, a, g: 1e5 * (1 + a), lambda b, a, g: 0.0, reps=(1.0,)))
    assert f["P1"].verdict == findings.INCONCLUSIVE and f["P4"].verdict == findings.HOLDS
    none = e5_xcp_params.evaluate([])
    assert [x.verdict for x in none] == [findings.NOT_MEASURED] * 4
    assert "e5-xcp-params" in none[0].reason


def test_a_small_buffer_sweep_alone_leaves_the_large_buffer_claims_not_measured():
    f = by_id(sweep(lambda b, a, g: 1e5 * (1 + a), lambda b, a, g: 0.01 * (1 + a), buffers=(1000,)))
    assert f["P1"].verdict == findings.HOLDS and f["P2"].verdict == findings.HOLDS
    assert f["P3"].verdict == findings.NOT_MEASURED and f["P4"].verdict == findings.NOT_MEASURED


def test_the_report_keeps_the_sweep_out_of_the_main_context(tmp_path):
    grid = pd.DataFrame(run_rows("sb", "none", 1500, 1e5) + run_rows("ob", "none", 1500, 8e4))
    mixed = pd.concat([grid, papers_story()], ignore_index=True)
    mixed["point"] = [f"p{i:04d}" for i in range(len(mixed))]
    figs, tables = e5.analyse(mixed, {}, tmp_path)
    names = {p.name for p in figs}
    assert {f"xcp_params_{i}_{k}.png" for i in (0, 1) for k in ("goodput",)} <= names
    assert "xcp_params_0_drops.png" in names or "xcp_params_1_drops.png" in names   # 100 kB: no drop to draw
    t = dict(tables)
    pts = next(v for k, v in t.items() if k.startswith("Points"))
    assert set(pts["pacing"]) == {"none"} and len(pts) == 2
    params = next(v for k, v in t.items() if k.startswith("XCP parameters"))
    assert len(params) == 2 * 9 and set(params["beta"]) == {"stable"}
    assert not any(k.startswith("Rows left out") for k in t)
    f = tables[-1][1]
    assert list(f[f["id"].str.startswith("P")]["verdict"]) == [findings.HOLDS] * 4
    assert f[f["id"] == "F1"]["verdict"].iloc[0] == findings.HOLDS
    both = next(v for k, v in t.items() if k.startswith("Comparisons (4: F1, P1, P2, P3)"))
    assert list(both["id"]) == ["F1", "P1", "P2", "P3"]
    assert size(1000) == "1 kB"


def test_p1_to_p3_are_also_read_paired_by_seed():
    """A small effect under the seed's +-10 % spread: inconclusive as independent samples,
    holds paired by seed (in the side column and the comparisons table); the verdict
    stays the pre-registered one."""
    seeded = (0.9, 1.0, 1.1)
    s = sweep(lambda b, a, g: 2e5 * (1 + 0.05 * a), lambda b, a, g: 0.01 * (1 + a), reps=seeded)
    sw = e5_xcp_params.sweeps(prepare(s), e5.CONTEXT_PARAMS)
    f = {x.id: x for x in with_second(e5_xcp_params.evaluate(sw), e5_xcp_params.second_reading(sw))}
    assert f["P1"].verdict == findings.INCONCLUSIVE
    assert f["P1"].side == "paired by seed (second reading): holds, 1 of 1 comparisons hold"
    assert "paired by seed" not in f["P4"].side
    assert [x.id for x in e5_xcp_params.second_reading(sw)] == ["P1", "P2", "P3"]
    assert e5_xcp_params.second_reading(e5_xcp_params.sweeps(prepare(s.drop(columns="seed")), e5.CONTEXT_PARAMS)) == []
    c = e5_xcp_params.comparisons(sw)
    assert list(c["id"]) == ["P1", "P2", "P3"] and list(c["pairs"]) == [3, 3, 3]
    p1 = c.iloc[0]
    assert p1["verdict"] == findings.INCONCLUSIVE and p1["paired_verdict"] == findings.HOLDS
    assert p1["paired_estimate"] == pytest.approx(1.03 / 1.005)
    assert e5_xcp_params.comparisons([]).empty
