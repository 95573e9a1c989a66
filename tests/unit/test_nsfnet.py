"""E5's meshes (topologies.nsfnet): the NSFNET data file against the paper's Fig. 3,
connectivity and round-trip times, the Abilene-like generator's sizes, and the Topo."""

from __future__ import annotations

import heapq
import math
from collections import Counter, deque
from pathlib import Path

import pytest

from testbed.units import FIBRE_GROUP_INDEX, SPEED_OF_LIGHT_M_PER_S
from topologies.nsfnet import (ABILENE_BACKBONE, DATA, CoreGraph, OpsMesh, TopologyDataError, abilene_like,
                               load_links, nsfnet)

#: paper Fig. 3 as printed (ms), written out here again so that the test does not trust the module
FIG3_MS = [4.7, 2.8, 7.0, 3.5, 2.8, 11.2, 3.5, 3.5, 3.5, 9.1, 2.8, 3.5, 1.4, 1.4, 0.7, 8.4, 4.9, 8.4, 5.6, 1.4, 3.5]
#: the standard 14-node NSFNET and its link lengths (km), for the proportionality check
LENGTH_KM = {(0, 1): 2100, (0, 2): 3000, (0, 7): 4800, (1, 2): 1200, (1, 3): 1500, (2, 5): 3600, (3, 4): 1200,
             (3, 10): 3900, (4, 5): 2400, (4, 6): 1200, (5, 9): 2100, (5, 13): 3600, (6, 7): 1500, (7, 8): 1500,
             (8, 9): 1500, (8, 11): 600, (8, 12): 600, (10, 11): 1200, (10, 12): 1500, (11, 13): 600,
             (12, 13): 300}


def dijkstra(graph: CoreGraph, src: int) -> dict[int, float]:
    """Smallest one-way delay (s) from ``src`` to every core node."""
    adj = graph.adjacency()
    dist = {src: 0.0}
    todo = [(0.0, src)]
    while todo:
        d, u = heapq.heappop(todo)
        if d > dist[u]:
            continue
        for v, w in adj[u]:
            if d + w < dist.get(v, math.inf):
                dist[v] = d + w
                heapq.heappush(todo, (d + w, v))
    return dist


def min_hop_worst_delay(graph: CoreGraph, src: int) -> dict[int, tuple[int, float]]:
    """(hops, largest one-way delay over the minimum-hop paths) from ``src``: what the
    emulation's minimum-hop routes with equal-cost choice may give."""
    adj = graph.adjacency()
    hop, worst = {src: 0}, {src: 0.0}
    todo = deque([src])
    while todo:
        u = todo.popleft()
        for v, w in adj[u]:
            if v not in hop:
                hop[v], worst[v] = hop[u] + 1, worst[u] + w
                todo.append(v)
            elif hop[v] == hop[u] + 1:
                worst[v] = max(worst[v], worst[u] + w)
    return {v: (hop[v], worst[v]) for v in hop}


def test_data_file_has_the_papers_delays_on_21_links_of_14_nodes():
    links = load_links()
    assert len(links) == 21
    assert {x for link in links for x in (link.a, link.b)} == set(range(14))
    assert Counter(round(link.delay_s * 1e3, 3) for link in links) == Counter(FIG3_MS)
    assert all(0.7e-3 - 1e-12 <= link.delay_s <= 11.2e-3 + 1e-12 for link in links)
    assert all(link.source for link in links)


def test_delays_follow_the_link_lengths_except_two_documented_links():
    """19 of 21 delays are 0.7 ms per 300 km of the standard lengths; the two others are
    the rows whose comment says so."""
    links = {(min(link.a, link.b), max(link.a, link.b)): link for link in load_links()}
    assert set(links) == set(LENGTH_KM)
    off = {pair for pair, link in links.items() if not math.isclose(link.delay_s * 1e3, LENGTH_KM[pair] / 300 * 0.7)}
    assert off == {(0, 1), (10, 11)}
    assert all("would give" in links[pair].source for pair in off)


def test_nsfnet_is_connected_with_degrees_2_to_4():
    g = nsfnet()
    assert g.connected() and g.core_nodes == 14 and g.edge_of == tuple(range(14))
    degrees = Counter(x for link in g.links for x in (link.a, link.b))
    assert min(degrees.values()) >= 2 and max(degrees.values()) <= 4
    assert sum(degrees.values()) / 14 == 3.0


def test_round_trip_times_are_within_the_papers_control_interval():
    """The paper: "The control interval is the maximum RTT in the network ... a bit longer
    than the maximum RTT" and d = 50 ms. Edge to edge over the smallest-delay paths the
    largest propagation RTT is 36.8 ms (< 50 ms). Over minimum-hop paths (the
    emulation's routing) the worst equal-hop choice reaches 53.6 ms (> 50 ms)."""
    g = nsfnet()
    edge = 2 * g.edge_delay_s
    rtt = [2 * (d + edge) for s in range(14) for t, d in dijkstra(g, s).items() if t != s]
    assert max(rtt) == pytest.approx(36.8e-3) and max(rtt) < 50e-3
    assert 10e-3 < sum(rtt) / len(rtt) < 30e-3
    worst = [2 * (d + edge) for s in range(14) for t, (_, d) in min_hop_worst_delay(g, s).items() if t != s]
    assert max(worst) == pytest.approx(53.6e-3)
    assert max(h for s in range(14) for h, _ in min_hop_worst_delay(g, s).values()) == 3


@pytest.mark.parametrize("edit, match", [
    (lambda rows: rows[:-1], "20 links"),
    (lambda rows: rows + ["3,12,3.5,extra"], "row 22: link 3-12|22 links|delays"),
    (lambda rows: rows[:1] + ["1,0,7.0,repeat"] + rows[2:], "row 2: link 1-0"),
    (lambda rows: rows[:1] + ["0,2,12.0,too long"] + rows[2:], "delay_ms=12.0"),
    (lambda rows: rows[:1] + ["0,14,7.0,bad node"] + rows[2:], "b=14"),
    (lambda rows: rows[:1] + ["0,2,4.9,other value"] + rows[2:], "Fig. 3 values"),
    (lambda rows: [r.replace("12,13,0.7", "12,13,x") for r in rows], "delay_ms"),
])
def test_bad_data_files_are_refused(tmp_path: Path, edit, match):
    lines = DATA.read_text().splitlines()
    head = [line for line in lines if line.startswith("#") or line.startswith("a,b")]
    rows = [line for line in lines if line not in head]
    bad = tmp_path / "nsfnet.csv"
    bad.write_text("\n".join(head + edit(rows)) + "\n")
    with pytest.raises(TopologyDataError, match=match):
        load_links(bad)


def test_disconnected_data_is_refused(tmp_path: Path):
    """Two components (rings on 0..6 and 7..13 with chords): 21 links, every node used,
    the Fig. 3 delays, yet not connected."""
    rows = ["a,b,delay_ms,source"]
    pairs = [(i, (i + 1) % 7) for i in range(7)] + [(7 + i, 7 + (i + 1) % 7) for i in range(7)]
    pairs += [(0, 2), (0, 3), (1, 4), (7, 9), (7, 10), (8, 11), (9, 12)]
    rows += [f"{a},{b},{d},test" for (a, b), d in zip(pairs, FIG3_MS)]
    path = tmp_path / "split.csv"
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(TopologyDataError, match="do not connect"):
        load_links(path)


@pytest.mark.parametrize("scale, core, edges", [(1.0, 171, 698), (0.05, 19, 35), (0.1, 27, 70), (0.001, 12, 1)])
def test_abilene_like_sizes(scale, core, edges):
    g = abilene_like(scale)
    assert (g.core_nodes, len(g.edge_of)) == (core, edges)
    assert len(g.links) == len(ABILENE_BACKBONE) + core - 11     # backbone mesh + one uplink per access router
    assert g.connected()
    assert all(link.delay_s == 1e-3 for link in g.links) and g.edge_delay_s == 0.1e-3
    assert all(e >= 11 for e in g.edge_of)                       # edge nodes only on access routers


def test_abilene_like_has_a_higher_nodal_degree_than_nsfnet_and_is_deterministic():
    nsf = nsfnet()
    nsf_ports = sum(nsf.ports(i) for i in range(14)) / 14                 # 3 core links + 1 edge
    full = abilene_like(1.0)
    full_ports = sum(full.ports(i) for i in range(full.core_nodes)) / full.core_nodes
    assert nsf_ports == 4.0 and full_ports > 6.0
    assert abilene_like(0.05, seed=3) == abilene_like(0.05, seed=3) != abilene_like(0.05, seed=4)
    with pytest.raises(TopologyDataError, match="scale=0"):
        abilene_like(0)
    with pytest.raises(TopologyDataError, match="scale=2"):
        abilene_like(2)


def test_ops_mesh_builds_nsfnet_with_its_delays():
    topo = OpsMesh(core_arch="electronic", edge_arch="electronic", tdf=10.0)
    assert len(topo.switches()) == 28 and len(topo.hosts()) == 14 and len(topo.links()) == 21 + 14 + 14
    assert topo.nodeInfo("c0")["role"] == "core" and topo.nodeInfo("e3")["role"] == "edge"
    assert topo.nodeInfo("c0")["rate_bps"] == 1e9 and topo.nodeInfo("c0")["tdf"] == 10.0
    assert topo.nodeInfo("c0")["flow_hash"] is False
    assert OpsMesh(flow_hash=True).nodeInfo("e3")["flow_hash"] is True  # E5: one path per flow
    m_per_s = SPEED_OF_LIGHT_M_PER_S / FIBRE_GROUP_INDEX
    info = topo.linkInfo("c0", "c7")
    assert info["length_m"] / m_per_s == pytest.approx(11.2e-3)
    assert topo.linkInfo("e5", "c5")["length_m"] / m_per_s == pytest.approx(0.1e-3)
    assert topo.linkInfo("h5", "e5")["length_m"] == 0.0


def test_ops_mesh_builds_abilene_like_with_several_hosts():
    g = abilene_like(0.05)
    topo = OpsMesh(g, hosts_per_edge=2, host_rate_bps=10e9, switch="bridge")
    assert len(topo.switches()) == 19 + 35 and len(topo.hosts()) == 70
    assert topo.linkInfo("h0x1", "e0")["rate_bps"] == 10e9
    assert "role" not in topo.nodeInfo("c0")
    assert max(len(name) for name in topo.nodes()) <= 6


def test_network_by_name():
    from topologies.nsfnet import network
    assert network("nsfnet").core_nodes == 14
    assert network("abilene", 0.05) == network("abilene", 0.05)      # one network per size
    with pytest.raises(ValueError, match="accepted nsfnet, abilene"):
        network("geant")
