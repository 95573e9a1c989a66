"""E3 findings: the paper's three claims per workload with 95 % intervals over runs."""

import json

import pandas as pd
import pytest

from analysis import e3, findings
from analysis.e3_findings import evaluate
from testbed.families.e3_leafspine import E3LeafSpine


def runs(sched, n, elephant_mbps, mouse_mbps=140.0, spread=(0.99, 1.0, 1.01), sse="10 s"):
    """Summary rows of one scheduler and workload: the per-run averages times ``spread``."""
    return [{"point": f"{sched}-{n}-{rep}", "scheduler": sched, "transfers": n, "sse": sse, "rep": rep,
             "scale": "3 %", "elephant_throughput_mean_bps": elephant_mbps * f * 1e6,
             "elephant_fct_mean_s": 24e3 / (elephant_mbps * f), "mouse_throughput_mean_bps": mouse_mbps * f * 1e6,
             "mouse_fct_mean_s": 15.0} for rep, f in enumerate(spread)]


def summary():
    frame = pd.DataFrame(runs("none", 24, 600) + runs("ut", 24, 590, spread=(0.95, 1.0, 1.05))
                         + runs("ut", 24, 100, sse="2 s")      # the SSE sweep: not the headline
                         + runs("dt", 24, 650) + runs("on-demand", 24, 700, mouse_mbps=160)
                         + runs("none", 48, 310) + runs("ut", 48, 290, spread=(1.0,)))
    # the other declared metrics, as every summary.csv has them
    return frame.assign(**{m.name: 0 for m in E3LeafSpine.metrics if m.name not in frame})


def test_e3_findings_per_workload():
    f = {x.id: x for x in evaluate(e3._main_sse(summary()), e3.PAPER, "3 %")}
    assert [i for i in f if i.startswith("F1-")] == ["F1-24", "F1-48", "F1-72"]
    # UT: -1.7 % with a +-5 % spread over 3 runs: the interval straddles 1
    assert f["F1-24"].verdict == findings.INCONCLUSIVE and f["F1-24"].lo < 1 < f["F1-24"].hi
    assert f["F1-24"].a.label == "UT" and f["F1-24"].a.n == 3 and "SSE 10 s" in f["F1-24"].where
    assert f["F1-24"].paper.startswith("0.892 (550 / 616.3 Mb/s)")
    assert f["F2-24"].verdict == findings.HOLDS and f["F2-24"].estimate == pytest.approx(650 / 600)
    assert f["F3a-24"].verdict == findings.FAILS          # +17 %: below "roughly half" (> +30 %)
    assert f["F3a-24"].hi < 1.3 and "at least +30 %" in f["F3a-24"].rule
    assert f["F3b-24"].verdict == findings.HOLDS and f["F3b-24"].unit == "s"
    assert f["F3c-24"].verdict == findings.FAILS          # mice +14 %: outside the +-10 % margin
    assert f["F1-48"].verdict == findings.INCONCLUSIVE and "fewer than 2" in f["F1-48"].reason
    assert f["F3a-48"].verdict == findings.NOT_MEASURED and "on-demand and none at transfers = 48" in f["F3a-48"].reason
    assert f["F1-72"].verdict == findings.NOT_MEASURED


def test_ut_below_no_direct_link_holds_with_tight_runs():
    s = pd.DataFrame(runs("none", 24, 600) + runs("ut", 24, 580) + runs("on-demand", 24, 900))
    f = {x.id: x for x in evaluate(s)}
    assert f["F1-24"].verdict == findings.HOLDS and f["F1-24"].hi < 1
    assert f["F3a-24"].verdict == findings.HOLDS and f["F3a-24"].lo > 1.3


def test_analyse_writes_the_findings_and_the_json(tmp_path):
    out = tmp_path / "report"
    out.mkdir()
    figs, tables = e3.analyse(summary(), {}, out)
    title, table = tables[-1]
    assert findings.is_findings(title, table) and "scale 3 %" in title
    assert len(table) == 5 * 3 and (out / "findings.csv").exists() and "F3a-24" in (out / "findings.md").read_text()
    found = json.loads((out / "e3_findings.json").read_text())
    assert found["24"]["ut_worse_for_elephants"] is None      # inconclusive, no longer a sign test
    assert found["24"]["on_demand_elephant_gain_ge_30pct"] is False
    assert found["24"]["verdicts"]["F2"] == findings.HOLDS
    assert found["24"]["on-demand_elephant_gain"] == pytest.approx(700 / 600 - 1)
