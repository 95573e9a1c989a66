"""Where XCP edge pacing acts in an optical fabric: its edge nodes, macroflow classes,
paths and controlled outputs (docs/xcp-edge.md).

Pure: computed from the fabric's structure (nodes, ports, peers, rates, propagation and
its minimum-hop routes), nothing is read from or written to the kernel here. The E5
family turns a :class:`XcpPlan` into the BPF class map, the pacers' options and the
agent's configuration.

Definitions (docs/xcp-edge.md, "(a)", "Macroflows, ACKs, bounds", "(c)"):

* an **edge** is a node of role ``edge`` with exactly one port towards a switch (its
  **uplink**) and its hosts on the other ports;
* the **macroflow** (s, e, kind) carries what hosts behind edge s send to hosts behind
  edge e; kind ``data``, or ``ack`` for pure ACKs when ACK macroflows are separate;
* its **class** at s: ``2 x slot(e) + kind`` (kind 0 data, 1 ack), slot(e) = e's index
  among the other edges in name order;
* its **path**: (node, output port) from s's uplink to the last core node before e,
  following the route with one port per destination (:func:`single_routes`: the lowest
  of the equal-cost ports, which the family installs when XCP paces);
* a **controlled output**: a core node's port towards a switch (core or edge). Ports
  towards hosts are outside the optical domain; edge uplinks are controlled from their
  pacer;
* a **voq core**: a core node whose queues are in its ``voq`` qdiscs (architecture
  ``ib``): its outputs' persistent queue comes from the qdiscs' XCP rings, not from the
  BPF accumulators (which see only HOLD decisions there; docs/xcp-edge.md, "IB nodes").

Units: rates paper bit/s, propagation paper s (the fabric stores emulation values,
divided here by D).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

#: macroflow kinds: the index is the kind number (class = 2 x slot + kind)
DATA, ACK = 0, 1
KINDS = ("data", "ack")


class XcpPlanError(ValueError):
    """The fabric has no shape XCP edge pacing can act on (the message says why)."""


@dataclass(frozen=True)
class Hop:
    """One output a macroflow crosses: ``node`` (fabric node name), ``port`` (its port
    index), towards ``peer``; ``capacity_bps`` and ``prop_s`` in paper units; ``dev``
    the port's device ('' unknown)."""

    node: str
    port: int
    peer: str
    capacity_bps: float
    prop_s: float
    dev: str = ""


@dataclass(frozen=True)
class Edge:
    """An edge node: name, fabric node id, namespace, its uplink (port index, device,
    peer, capacity paper bit/s, propagation paper s) and the IPv4 addresses of the hosts
    behind it."""

    name: str
    node_id: int
    netns: str
    uplink_port: int
    uplink_dev: str
    uplink_peer: str
    capacity_bps: float
    prop_s: float
    host_ips: tuple[str, ...]


@dataclass(frozen=True)
class Macroflow:
    """Macroflow (``src``, ``dst``, ``kind``) with its class id at ``src``, its forward
    path (the uplink first) and the reverse path (from ``dst``'s uplink back to the last
    core node before ``src``), which its probes take back."""

    src: str
    dst: str
    kind: int
    cls: int
    path: tuple[Hop, ...]
    reverse: tuple[Hop, ...]

    @property
    def name(self) -> str:
        """``<src>-<dst>`` or ``<src>-<dst>-ack``."""
        return f"{self.src}-{self.dst}" + ("-ack" if self.kind == ACK else "")


@dataclass(frozen=True)
class XcpPlan:
    """Edges (name order), macroflows (by src, dst, kind), the controlled core outputs
    {(node, port): Hop}, node ids {name: id}, the class map entries {(edge node id,
    host IPv4): data class} the egress program reads, and the voq cores {core name: its
    namespace} (module docstring)."""

    edges: tuple[Edge, ...]
    macroflows: tuple[Macroflow, ...]
    outputs: Mapping[tuple[str, int], Hop]
    node_ids: Mapping[str, int]
    class_map: Mapping[tuple[int, str], int]
    nclasses: int
    voq_cores: Mapping[str, str] = field(default_factory=dict)

    def edge(self, name: str) -> Edge:
        """The edge ``name``; KeyError if none."""
        for e in self.edges:
            if e.name == name:
                return e
        raise KeyError(name)


@dataclass(frozen=True)
class NodeShape:
    """What the plan needs of one fabric node: name, id, role, namespace, and per port
    its device, peer, emulation rate (bit/s) and emulation propagation (ns)."""

    name: str
    node_id: int
    role: str
    netns: str
    devs: tuple[str, ...]
    peers: tuple[str, ...]
    rates_bps: tuple[float, ...]
    prop_ns: tuple[int, ...]


def single_routes(routes: Mapping[tuple[int, str], Sequence[int]]) -> dict[tuple[int, str], list[int]]:
    """One output port per (switch id, destination): the lowest equal-cost port (a
    static route per pair, as the paper's simulator; XCP's probes must follow the
    data). Raises XcpPlanError for a route without ports."""
    out = {}
    for key, ports in routes.items():
        if not ports:
            raise XcpPlanError(f"route {key} has no port")
        out[key] = [min(ports)]
    return out


def plan(nodes: Sequence[NodeShape], host_ips: Mapping[str, str],
         routes: Mapping[tuple[int, str], Sequence[int]], tdf: float, *, separate_acks: bool = False,
         voq_nodes: Collection[str] = ()) -> XcpPlan:
    """The :class:`XcpPlan` of a fabric: ``nodes`` every fabric node (hosts included,
    role ``host``), ``host_ips`` {host name: IPv4}, ``routes`` {(switch id, host IPv4):
    output ports} (the first of each is followed), ``tdf`` = D, ``voq_nodes`` the core
    nodes whose queues are in voq qdiscs (``ib``). Raises XcpPlanError when there are
    fewer than two edges, an edge has no or several switch ports or no host, a route is
    missing or loops, more than 64 classes would be needed at one edge (the pacer's
    bound), or a voq node is not a core node."""
    if not tdf > 0:
        raise XcpPlanError(f"D = {tdf}: must be > 0")
    by_name = {n.name: n for n in nodes}
    switches = {n.name for n in nodes if n.role != "host"}
    for name in voq_nodes:
        if name not in by_name or by_name[name].role != "core":
            raise XcpPlanError(f"voq node {name!r} is not a core node of the fabric")
    edges: list[Edge] = []
    for n in sorted((n for n in nodes if n.role == "edge"), key=lambda n: n.name):
        up = [i for i, p in enumerate(n.peers) if p in switches]
        hosts = [p for p in n.peers if p in host_ips]
        if len(up) != 1:
            raise XcpPlanError(f"edge {n.name} has {len(up)} ports towards switches; XCP pacing needs exactly one")
        if not hosts:
            raise XcpPlanError(f"edge {n.name} has no host behind it")
        i = up[0]
        edges.append(Edge(n.name, n.node_id, n.netns, i, n.devs[i], n.peers[i], n.rates_bps[i] * tdf,
                          n.prop_ns[i] / tdf / 1e9, tuple(host_ips[h] for h in sorted(hosts))))
    if len(edges) < 2:
        raise XcpPlanError(f"{len(edges)} edge node(s); XCP pacing needs at least two")
    kinds = 2 if separate_acks else 1
    nclasses = 2 * (len(edges) - 1)
    if nclasses > 64:
        raise XcpPlanError(f"{len(edges)} edges need {nclasses} classes at each edge; the pacer has at most 64")

    def hop(node: str, port: int) -> Hop:
        n = by_name[node]
        return Hop(node, port, n.peers[port], n.rates_bps[port] * tdf, n.prop_ns[port] / tdf / 1e9, n.devs[port])

    def path(src: Edge, dst: Edge) -> tuple[Hop, ...]:
        hops = [hop(src.name, src.uplink_port)]
        node, ip = src.uplink_peer, dst.host_ips[0]
        while node != dst.name:
            if node not in switches or len(hops) > len(nodes):
                raise XcpPlanError(f"the route from {src.name} to {dst.name} leaves the switches or loops at {node}")
            ports = routes.get((by_name[node].node_id, ip))
            if not ports:
                raise XcpPlanError(f"no route at {node} towards {ip} ({dst.name})")
            h = hop(node, ports[0])
            hops.append(h)
            node = h.peer
        return tuple(hops)

    macroflows, class_map = [], {}
    for s in edges:
        others = [e for e in edges if e.name != s.name]
        for slot, e in enumerate(others):
            fwd, rev = path(s, e), path(e, s)
            for ip in e.host_ips:
                class_map[(s.node_id, ip)] = 2 * slot + DATA
            for kind in range(kinds):
                macroflows.append(Macroflow(s.name, e.name, kind, 2 * slot + kind, fwd, rev))
    outputs = {}
    for n in nodes:
        if n.role == "core":
            for i, peer in enumerate(n.peers):
                if peer in switches:
                    outputs[(n.name, i)] = hop(n.name, i)
    voq_cores = {name: by_name[name].netns for name in sorted(voq_nodes)}
    return XcpPlan(tuple(edges), tuple(macroflows), outputs, {n.name: n.node_id for n in nodes}, class_map,
                   nclasses, voq_cores)
