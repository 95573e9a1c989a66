"""XCP's plan of a fabric (testbed/optical/xcpplan.py) on hand-built shapes whose
paths, classes and controlled outputs are known by construction."""

from __future__ import annotations

import pytest

from testbed.optical import routes as routes_mod
from testbed.optical.xcpplan import ACK, DATA, NodeShape, XcpPlanError, plan, single_routes

D = 20.0
RATE = 5e6  # emulation bit/s = 100 Mbit/s paper at D = 20


def _mesh(links: list[tuple[str, str, float]], roles: dict[str, str]) -> tuple[list[NodeShape], dict[str, str]]:
    """NodeShapes of an undirected graph: ``links`` (a, b, paper propagation s), ports
    numbered in the order the links are listed; hosts h* get 10.0.0.<n>."""
    ports: dict[str, list[tuple[str, float]]] = {n: [] for n in roles}
    for a, b, prop in links:
        ports[a].append((b, prop))
        ports[b].append((a, prop))
    nodes = [NodeShape(n, i, roles[n], f"ns-{n}", tuple(f"{n}-eth{k}" for k in range(len(ports[n]))),
                       tuple(p for p, _ in ports[n]), tuple(RATE for _ in ports[n]),
                       tuple(round(prop * D * 1e9) for _, prop in ports[n]))
             for i, n in enumerate(roles)]
    hosts = {n: f"10.0.0.{k + 1}" for k, n in enumerate(sorted(n for n, r in roles.items() if r == "host"))}
    return nodes, hosts


def _routes(nodes: list[NodeShape], hosts: dict[str, str]) -> dict[tuple[int, str], list[int]]:
    adj = {n.name: list(enumerate(n.peers)) for n in nodes}
    sw = {n.name for n in nodes if n.role != "host"}
    ids = {n.name: n.node_id for n in nodes}
    out = {}
    for h, ip in hosts.items():
        for node, ports in routes_mod.next_hops(adj, h, transit=sw).items():
            if node in sw:
                out[(ids[node], ip)] = ports
    return out


def _square() -> tuple[list[NodeShape], dict[str, str]]:
    # c0 - c1, c0 - c2, c1 - c3, c2 - c3: two equal paths c0 -> c3; one edge + host per core
    roles = {**{f"c{i}": "core" for i in range(4)}, **{f"e{i}": "edge" for i in range(4)},
             **{f"h{i}": "host" for i in range(4)}}
    links = [("c0", "c1", 0.001), ("c0", "c2", 0.002), ("c1", "c3", 0.003), ("c2", "c3", 0.004)]
    links += [(f"e{i}", f"c{i}", 0.0001) for i in range(4)] + [(f"h{i}", f"e{i}", 0.0) for i in range(4)]
    return _mesh(links, roles)


def test_paths_follow_the_lowest_equal_cost_port_and_classes_are_slots():
    nodes, hosts = _square()
    p = plan(nodes, hosts, single_routes(_routes(nodes, hosts)), D)
    assert [e.name for e in p.edges] == ["e0", "e1", "e2", "e3"]
    e0 = p.edge("e0")
    assert (e0.uplink_peer, e0.capacity_bps, e0.prop_s) == ("c0", RATE * D, pytest.approx(0.0001))
    mf = {m.name: m for m in p.macroflows}
    assert len(mf) == 12 and p.nclasses == 6  # one data macroflow per ordered pair
    # c0's ports: 0 -> c1, 1 -> c2, 2 -> e0; towards e3 both lead there in 2 hops: the lowest (c1) is taken
    assert [(h.node, h.peer) for h in mf["e0-e3"].path] == [("e0", "c0"), ("c0", "c1"), ("c1", "c3"), ("c3", "e3")]
    assert [h.prop_s for h in mf["e0-e3"].path] == pytest.approx([0.0001, 0.001, 0.003, 0.0001])
    # c3's ports: 0 -> c1, 1 -> c2, 2 -> e3; the reverse is the route from e3 to e0, not the mirror image
    assert [(h.node, h.peer) for h in mf["e0-e3"].reverse] == [("e3", "c3"), ("c3", "c1"), ("c1", "c0"), ("c0", "e0")]
    assert mf["e0-e1"].cls == 0 and mf["e0-e2"].cls == 2 and mf["e0-e3"].cls == 4 and mf["e3-e0"].cls == 0
    assert p.class_map[(e0.node_id, hosts["h3"])] == 4
    assert all(m.kind == DATA for m in p.macroflows)


def test_separate_acks_add_a_class_beside_each_data_class():
    nodes, hosts = _square()
    p = plan(nodes, hosts, single_routes(_routes(nodes, hosts)), D, separate_acks=True)
    acks = [m for m in p.macroflows if m.kind == ACK]
    assert len(acks) == 12 and {m.cls % 2 for m in acks} == {1}
    assert {(m.src, m.dst, m.cls - 1) for m in acks} == {(m.src, m.dst, m.cls) for m in p.macroflows if m.kind == DATA}
    assert p.nclasses == 6


def test_controlled_outputs_are_the_core_ports_towards_switches():
    nodes, hosts = _square()
    p = plan(nodes, hosts, single_routes(_routes(nodes, hosts)), D)
    # each core node: 2 core ports + 1 edge port; nothing of edges (pacer) or hosts
    assert len(p.outputs) == 12
    assert all(node.startswith("c") for node, _ in p.outputs)


def test_an_edge_with_two_uplinks_is_refused():
    nodes, hosts = _square()
    roles = {n.name: n.role for n in nodes}
    links = [("c0", "c1", 0.001), ("e0", "c0", 0.0001), ("e0", "c1", 0.0001), ("e1", "c1", 0.0001),
             ("h0", "e0", 0.0), ("h1", "e1", 0.0)]
    nodes, hosts = _mesh(links, {k: v for k, v in roles.items() if k in {"c0", "c1", "e0", "e1", "h0", "h1"}})
    with pytest.raises(XcpPlanError, match="e0 has 2 ports towards switches"):
        plan(nodes, hosts, single_routes(_routes(nodes, hosts)), D)


def test_a_missing_route_is_named():
    nodes, hosts = _square()
    routes = single_routes(_routes(nodes, hosts))
    c1 = next(n for n in nodes if n.name == "c1")
    del routes[(c1.node_id, hosts["h3"])]
    with pytest.raises(XcpPlanError, match="no route at c1 towards 10.0.0.4"):
        plan(nodes, hosts, routes, D)


def test_voq_nodes_are_recorded_with_their_namespace_and_outputs_with_their_devices():
    nodes, hosts = _square()
    p = plan(nodes, hosts, single_routes(_routes(nodes, hosts)), D, voq_nodes=["c3", "c1"])
    assert p.voq_cores == {"c1": "ns-c1", "c3": "ns-c3"}
    assert p.outputs[("c0", 1)].dev == "c0-eth1" and p.edge("e0").uplink_dev == "e0-eth0"
    assert plan(nodes, hosts, single_routes(_routes(nodes, hosts)), D).voq_cores == {}
    for bad in ("e0", "nowhere"):
        with pytest.raises(XcpPlanError, match=f"voq node '{bad}' is not a core node"):
            plan(nodes, hosts, single_routes(_routes(nodes, hosts)), D, voq_nodes=[bad])
