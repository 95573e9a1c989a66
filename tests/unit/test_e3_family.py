"""E3 family without root: definitions, the workload placement, the topology, the analysis."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from analysis import e3 as analysis
from testbed.definition import load
from testbed.errors import DefinitionError
from testbed.families.e3_leafspine import E3LeafSpine, plan_hosts, workload
from testbed.units import Dim, Quantity
from topologies.leafspine import LeafSpine, LeafSpineSize

REPO = Path(__file__).resolve().parents[2]


def values(**over):
    v = {p.name: p.parse(p.default, p.name) for p in E3LeafSpine.params}
    v.update(over)
    return v


@pytest.mark.parametrize("n", [24, 48, 72])
def test_paper_workload_spreads_equally_and_separates_elephants(n):
    size = LeafSpineSize()
    sched = workload(size, values(transfers=n))
    flows = sched.flows
    assert len(flows) == n and sum(f.tag == "elephant" for f in flows) == n // 8
    per_tor = {}
    for f in flows:
        a, b = int(f.src[1:].split("x")[0]), int(f.dst[1:].split("x")[0])
        assert a < 3 <= b and b == a + 3                      # cluster A ToR k -> cluster B ToR k
        per_tor.setdefault(a, []).append(f)
    assert sorted(len(v) for v in per_tor.values()) == [n // 3] * 3
    assert {f.size_bytes for f in flows if f.tag == "elephant"} == {3_000_000_000}
    assert {f.size_bytes for f in flows if f.tag == "mouse"} == {250_000_000}
    pairs_e = {(f.src, f.dst) for f in flows if f.tag == "elephant"}
    pairs_m = {(f.src, f.dst) for f in flows if f.tag == "mouse"}
    assert not pairs_e & pairs_m


def test_few_hosts_still_separate_elephants_from_mice():
    size = LeafSpineSize(2, 4, 2, 2)
    sched = workload(size, values(transfers=16, tors=4, hosts_per_tor=2, cluster_size=2,
                                  scale=Quantity.parse("1 %", Dim.RATIO)))
    e = {(f.src, f.dst) for f in sched.flows if f.tag == "elephant"}
    m = {(f.src, f.dst) for f in sched.flows if f.tag == "mouse"}
    assert e and m and not e & m
    assert {f.size_bytes for f in sched.flows if f.tag == "elephant"} == {30_000_000}
    with pytest.raises(DefinitionError, match="hosts_per_tor"):
        plan_hosts(LeafSpineSize(2, 4, 1, 2), 16, 7)


def test_topology_counts_and_special_links():
    topo = LeafSpine(spines=2, tors=6, hosts_per_tor=3, cluster_size=3)
    assert len(topo.hosts()) == 18 and len(topo.switches()) == 9
    purposes = [info["purpose"] for _, _, info in topo.links(withInfo=True)]
    assert purposes.count("special-ls") == purposes.count("special-oss") == 6 and purposes.count("uplink") == 12
    with pytest.raises(DefinitionError, match="cluster_size"):
        LeafSpineSize(2, 5, 2, 3).check()


def test_demo_and_paper_definitions_validate():
    for name in ("e3-demo", "e3-paper"):
        defn = load(str(REPO / "experiments" / f"{name}.toml"))
        assert defn.family == "e3-leafspine" and defn.points()


def test_analysis_tables_in_the_paper_layout(tmp_path):
    rows, points = [], tmp_path / "points"
    for i, (sched, n, rep) in enumerate([(s, n, r) for s in ("none", "on-demand") for n in (24, 48) for r in (0, 1)]):
        pid = f"p{i:04d}"
        (points / pid).mkdir(parents=True)
        e_thr = (600e6 if sched == "none" else 900e6) / (n / 24) + rep * 10e6
        pd.DataFrame([{"id": 0, "tag": "elephant", "status": "complete", "fct_s": 24e9 / e_thr,
                       "throughput_bps": e_thr},
                      {"id": 1, "tag": "mouse", "status": "complete", "fct_s": 10.0, "throughput_bps": 2e8}]
                     ).to_csv(points / pid / "transfers.csv", index=False)
        rows.append({"point": pid, "scheduler": sched, "transfers": n, "sse": "10 s", "rep": rep, "scale": "1 %",
                     **{m.name: 0 for m in E3LeafSpine.metrics}, "elephant_throughput_mean_bps": e_thr, "elephant_fct_mean_s": 24e9 / e_thr,
                     "mouse_throughput_mean_bps": 2e8, "mouse_fct_mean_s": 10.0})
    out = tmp_path / "report"
    out.mkdir()
    figs, tables = analysis.analyse(pd.DataFrame(rows), {}, out)
    assert all(f.exists() for f in figs) and len(figs) == 2
    t1 = tables[0][1]
    assert list(t1["scheduler"]) == ["No direct link", "On Demand"]
    assert t1.loc[0, "24 VMs Min"] == pytest.approx(600) and t1.loc[0, "24 VMs Max"] == pytest.approx(610)
    assert t1.loc[1, "48 VMs Ave."] == pytest.approx(455)
    assert tables[4][1].loc[3, "24 VMs Ave."] == 952.7      # the paper's Table 1 for reference
    found = json.loads((out / "e3_findings.json").read_text())
    assert found["24"]["on_demand_elephant_gain_ge_30pct"] is True
