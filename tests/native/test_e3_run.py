"""E3's one command natively (root, OVS userspace datapath): ``testbed run e3-demo`` on
a small leaf-spine (2 ToRs per cluster, 2 hosts each; 6 migrations: on each sender ToR
an elephant of 100 MB on one host and 2 mice of 60 MB on the other, x 3 %) under no
direct link and on demand, 1 repetition.
Every transfer completes; on demand sends the elephants' bytes over the OSS and speeds
them up, the baseline sends nothing there; each run's controller decisions and switch
events are beside its flow results; the report holds the boxplots and the four tables."""

from __future__ import annotations

import json
import math

from helpers import require_features, require_root, run_testbed, summary_rows
from testbed.traffic.records import read_jsonl

MB = 1_000_000


def test_e3_demo_sweep_end_to_end(tmp_path):
    require_root()
    require_features("netns", "htb", "ovs-userspace")
    out = tmp_path / "run"
    sets = {"tors": 4, "cluster_size": 2, "hosts_per_tor": 2, "transfers": 6, "mice_per_elephant": 2,
            "elephant_size": "100 MB", "mouse_size": "60 MB", "scheduler": "on-demand,none",
            "datapath": "netdev", "timeout": "120 s"}
    args = [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    run_testbed("run", "e3-demo", "--native", "--reps", "1", "--out", str(out), *args, timeout=900)
    rows = {r["scheduler"]: r for r in summary_rows(out)}
    assert set(rows) == {"none", "on-demand"}
    for r in rows.values():
        assert (r["elephants"], r["elephants_complete"], r["mice"], r["mice_complete"]) == ("2", "2", "4", "4"), r
        assert r["switch_disconnects"] == "0"
    # 2 elephants of 100 MB x 3 % over the OSS under on demand; nothing without circuits
    oss = {s: float(r["oss_bytes"]) for s, r in rows.items()}
    assert oss["none"] == 0 and 200 * MB <= oss["on-demand"] <= 230 * MB, oss
    gained = float(rows["on-demand"]["elephant_throughput_mean_bps"]) / float(rows["none"]["elephant_throughput_mean_bps"])
    assert gained > 1.2, rows                      # a circuit of its own beats the shared path
    # One fabric for both points: "none" ran second on the bridges on demand had used,
    # under a new controller, and no byte crossed the OSS (no circuit left behind).
    built = {s: json.loads((out / "points" / r["point"] / "fabric.json").read_text())["built_for_this_point"]
             for s, r in rows.items()}
    assert built == {"on-demand": True, "none": False}, built
    for r in rows.values():
        point = out / "points" / r["point"]
        transfers = (point / "transfers.csv").read_text().splitlines()
        assert len(transfers) == 1 + 6
        events = read_jsonl(point / "switch-events.jsonl")
        assert {e["switch"] for e in events if e["event"] == "ready"} == {"s0", "s1", "t0", "t1", "t2", "t3", "oss"}
        reconf = read_jsonl(point / "reconfigurations.jsonl")
        if r["scheduler"] == "none":
            assert reconf == []
        else:                                       # grant both elephants' circuits, release each
            assert {c for x in reconf for c in x["added"]} == {"t0-t2", "t1-t3"}
            assert reconf[-1]["circuits"] == [] and all(x["t_done"] >= x["t_start"] for x in reconf)
            assert not math.isnan(float(r["reconfig_ms_max"]))
            broker = read_jsonl(point / "broker.jsonl")
            assert sum(b.get("event") == "release" for b in broker) == 2, broker
    report = out / "report"
    html = (report / "index.html").read_text()
    for needle in ("Table 1", "Table 2", "Table 3", "Table 4", "boxplot_throughput.png", "boxplot_completion_time.png"):
        assert needle in html, needle
    findings = json.loads((report / "e3_findings.json").read_text())
    assert findings, findings
