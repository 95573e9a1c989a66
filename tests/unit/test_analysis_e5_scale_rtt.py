"""analysis.e5_scale_rtt: the shared flows' RTTs at two scales of a nested scale check,
and topologies.nsfnet.CoreGraph.min_hop_delays, which gives their propagation RTTs.
Hand-computed cases."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from analysis import e5_scale_rtt
from topologies.nsfnet import CoreGraph, CoreLink

MS = 1e-3
MSS_B = 1460


def diamond() -> CoreGraph:
    """0-1-3 (1 + 2 ms) and 0-2-3 (3 + 4 ms): two 2-hop paths; 0-4-5-3 (3 hops, 0.3 ms)
    is shorter in delay but not minimum-hop; core node 6 is cut off."""
    links = (CoreLink(0, 1, 1 * MS), CoreLink(1, 3, 2 * MS), CoreLink(0, 2, 3 * MS), CoreLink(2, 3, 4 * MS),
             CoreLink(0, 4, 0.1 * MS), CoreLink(4, 5, 0.1 * MS), CoreLink(5, 3, 0.1 * MS))
    return CoreGraph(core_nodes=7, links=links, edge_of=(0, 3, 6), edge_delay_s=0.1 * MS)


def test_min_hop_delays_range_over_the_minimum_hop_paths_only():
    net = diamond()
    lo, hi = net.min_hop_delays(0, 3)
    assert lo == pytest.approx(3 * MS) and hi == pytest.approx(7 * MS)
    assert net.min_hop_delays(3, 0) == pytest.approx((3 * MS, 7 * MS))
    assert net.min_hop_delays(1, 1) == (0.0, 0.0)
    with pytest.raises(ValueError, match="not reachable"):
        net.min_hop_delays(0, 6)
    assert not net.connected()


def test_propagation_rtt_is_twice_the_core_path_and_two_edge_links():
    lo, hi = e5_scale_rtt.propagation_rtt(diamond(), "h0", "h1x2")
    assert lo == pytest.approx(2 * (3 + 0.2) * MS) and hi == pytest.approx(2 * (7 + 0.2) * MS)
    with pytest.raises(ValueError, match="h<j>"):
        e5_scale_rtt.propagation_rtt(diamond(), "e0", "h1")
    with pytest.raises(ValueError, match="h<j>"):
        e5_scale_rtt.propagation_rtt(diamond(), "h0", "h1xy")
    with pytest.raises(ValueError, match="3 edge nodes"):
        e5_scale_rtt.propagation_rtt(diamond(), "h0", "h7")


def write_point(folder: Path, flows: list[tuple[int, float, float, float]]) -> Path:
    """A point folder whose flows_window.csv has (flow, start_s, goodput_Bps, srtt_s),
    every flow from h0 to h1, MSS 1460 B."""
    folder.mkdir(parents=True)
    (folder / "schedule-meta.json").write_text(json.dumps({"mss": MSS_B, "mtu": 1500}))
    pd.DataFrame([{"flow": f, "src": "h0", "dst": "h1", "start_s": t, "status": "incomplete", "window_bytes": g * 2,
                   "goodput_Bps": g, "retrans_segs": 0, "srtt_s": r} for f, t, g, r in flows]) \
        .to_csv(folder / "flows_window.csv", index=False)
    return folder


def test_read_pair_pairs_the_flows_measured_at_both_scales(tmp_path):
    # larger scale: flows 0, 1 measured; 2 starts in the window (not measured)
    large = write_point(tmp_path / "large", [(0, 1.0, 400e3, 0.040), (1, 2.0, 600e3, 0.030), (2, 8.5, 1e6, 0.02)])
    # smaller scale: the same flows and one more (3), which the larger scale does not have
    small = write_point(tmp_path / "small", [(0, 1.0, 500e3, 0.032), (1, 2.0, 600e3, 0.030), (2, 8.5, 1e6, 0.02),
                                             (3, 1.0, 9e6, 0.001)])
    p = e5_scale_rtt.read_pair(large, small, window_start_s=8.0, net=diamond())
    assert p.flows == 2
    assert p.srtt_large == pytest.approx(0.035) and p.srtt_small == pytest.approx(0.031)
    assert p.goodput_large == pytest.approx(500e3) and p.goodput_small == pytest.approx(550e3)
    assert p.observed == pytest.approx(500 / 550)
    # each flow's smaller-scale goodput times its RTT ratio: 500e3 * 32/40 + 600e3 * 1
    assert p.predicted == pytest.approx((400e3 + 600e3) / 1100e3)
    assert p.window_large == pytest.approx(((400e3 * 0.04) + (600e3 * 0.03)) / 2 / MSS_B)
    assert p.propagation == pytest.approx((2 * 3.2 * MS, 2 * 7.2 * MS))
    assert all(math.isnan(v) for v in e5_scale_rtt.read_pair(large, small, 8.0).propagation)
    with pytest.raises(ValueError, match="no flow measured in both"):
        e5_scale_rtt.read_pair(large, small, window_start_s=0.5)


def test_table_one_row_per_seed_and_the_unreadable_runs(tmp_path):
    results = tmp_path / "run"
    flows_l = [(0, 1.0, 400e3, 0.040)]
    flows_s = [(0, 1.0, 500e3, 0.032)]
    rows = []
    for i, (scale, seed, flows) in enumerate([(20, 1000, flows_l), (10, 1000, flows_s), (20, 1001, flows_l),
                                              (10, 1001, flows_s), (20, 1002, None), (10, 1002, flows_s),
                                              (20, 1003, flows_l)]):
        point = f"p{i:04d}"
        if flows is not None:
            write_point(results / "points" / point, flows)
        rows.append({"point": point, "seed": seed, "scale": scale, "arch": "sb", "pacing": "tcp", "buffer": "15 kB",
                     "duration": "10 s", "window": "2 s", "topology": "nsfnet", "abilene_nodes": 0.05,
                     "goodput_common_Bps": 1.0})
    got, unread = e5_scale_rtt.table(pd.DataFrame(rows), results)
    assert got["seed"].tolist() == [1000, 1001]          # 1002's scale-20 run unreadable, 1003 has no scale 10
    assert got["ratio"].tolist() == pytest.approx([0.8, 0.8])
    assert got["ratio the RTTs predict"].tolist() == pytest.approx([0.8, 0.8])
    assert got["srtt [ms]"].tolist() == pytest.approx([40.0, 40.0])
    # h0 -> h1 on NSFNET: core 0 -> 1, one link (4.7 ms)
    assert got["propagation RTT lo [ms]"].tolist() == pytest.approx([2 * (4.7 + 0.2)] * 2)
    assert unread["point"].tolist() == ["p0004"] and "FileNotFoundError" in unread["why"].iloc[0]
    # rows without the nested metric, or at one scale: nothing
    assert e5_scale_rtt.table(pd.DataFrame(rows).drop(columns=["goodput_common_Bps"]), results)[0].empty
    assert e5_scale_rtt.table(pd.DataFrame(rows[:1]), results)[0].empty
