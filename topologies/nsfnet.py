"""E5's optical packet-switched meshes: NSFNET (paper Fig. 3) and an Abilene-like generator.

A core/edge network (spec ``e5-optical-ram-pacing.md``, "Network"): core OPS nodes
(cut-through, tiny optical RAM: E5's port architectures) joined by core links; one edge
node (role edge, large electronic buffers) per core node for NSFNET, several per access
router for Abilene-like; hosts behind the edge nodes run the TCP flows.

NSFNET (paper III-B): "The nodes numbered from 0 to 13 are the core nodes and the rest
are the edge nodes connected to the core nodes." "We selected a propagation delay for
links between the core and edge nodes of 0.1 ms." "The capacity of the data and XCP
control wavelengths were set to 1 Gbps for the former and 100 Mbps for the latter."
Fig. 3 prints 21 link delays (4.7, 2.8, 7.0, 3.5, 2.8, 11.2, 3.5, 3.5, 3.5, 9.1, 2.8,
3.5, 1.4, 1.4, 0.7, 8.4, 4.9, 8.4, 5.6, 1.4, 3.5 ms, in the order of the text
extraction) but the text does not say which link has which.

The mapping (``data/nsfnet.csv``, one row per link with its source): the edge list is the
14-node, 21-link NSFNET T1 backbone as commonly used in optical-network studies, with
its usual link lengths in km (0 Seattle, 1 Palo Alto, 2 San Diego, 3 Salt Lake City,
4 Boulder, 5 Houston, 6 Lincoln, 7 Champaign, 8 Pittsburgh, 9 Atlanta, 10 Ann Arbor,
11 Ithaca, 12 Princeton, 13 College Park; lengths 300 .. 4800 km). Its lengths explain
the paper's delays: 19 of the 21 Fig. 3 values are exactly 0.7 ms per 300 km of one of
these lengths (300 km -> 0.7 ms ... 4800 km -> 11.2 ms), so the paper most likely used
this graph with delays proportional to length. The Fig. 3 values are assigned to the
links by rank of length, ties in edge-list order; that reproduces the proportional
value on 19 links, and puts the two values that fit no length where the ranks put them:
4.7 ms on the first 2100 km link (0-1; the other, 5-9, has 4.9 ms = 2100 km) and the
paper's sixth 3.5 ms on the last of the four 1200 km links (10-11; the paper has only
three 2.8 ms values). Which link of a tie gets which value is not in the paper.

Abilene-like (paper III-C): "The Abilene-inspired topology in Figure 7 from Li et al.
[18] was used in the simulations. The topology has a total of 869 nodes that are divided
into two groups of 171 core nodes and 698 edge nodes." "The propagation delay of the
edge and core links corresponded to 0.1 ms and 1 ms. All the links had a 1 Gbps
capacity." It is "a larger topology with a higher nodal degree than NSFNET". The paper
gives no link list; Li et al.'s Abilene-inspired router topology is a low-degree mesh
backbone (Abilene's routers) with trees of lower-level routers below it and the
high-degree nodes at the periphery, where the end systems attach. :func:`abilene_like`
builds that shape, which is all "Abilene-like" means here:
  * backbone: Abilene's 11 PoPs and 14 links (Seattle, Sunnyvale, Los Angeles, Denver,
    Kansas City, Houston, Chicago, Indianapolis, Atlanta, New York, Washington);
  * the other core nodes (access routers, 160 at scale 1) in random recursive trees
    below it: each attaches to a uniformly chosen earlier core node (backbone or access);
  * edge nodes (698 at scale 1) only on access routers, each on a uniformly chosen one,
    so the degree grows towards the periphery and varies from router to router;
  * every core link 1 ms, every edge link 0.1 ms.
``scale`` multiplies the access routers and the edge nodes (keeping about 4.4 edge nodes
per access router, hence the nodal degree), the backbone is kept whole: scale 1 gives
the paper's 171 core and 698 edge nodes; the default 0.05 gives 19 core and 35 edge
nodes, which with one host per edge node (89 nodes) fits the emulation (at most 512
nodes a run) on a 2-core machine.

Units: delays in seconds in :class:`CoreLink`, milliseconds in the data file; rates in
bit/s; everything in paper units, the emulation applies the time dilation ``tdf``.
"""

from __future__ import annotations

import csv
import random
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from mininet.topo import Topo

from topologies.obs import length_for_delay_m

DATA = Path(__file__).parent / "data" / "nsfnet.csv"

#: paper Fig. 3, the 21 link delays (ms) in the order the text extraction lists them
PAPER_DELAYS_MS = (4.7, 2.8, 7.0, 3.5, 2.8, 11.2, 3.5, 3.5, 3.5, 9.1, 2.8, 3.5, 1.4, 1.4, 0.7, 8.4, 4.9, 8.4,
                   5.6, 1.4, 3.5)
NSFNET_CORE_NODES = 14
NSFNET_LINKS = 21
EDGE_DELAY_S = 0.1e-3          # paper III-B and III-C
ABILENE_CORE_DELAY_S = 1e-3    # paper III-C
ABILENE_CORE_NODES = 171       # paper III-C
ABILENE_EDGE_NODES = 698       # paper III-C
#: Abilene's backbone (11 PoPs, 14 links): node indices of ABILENE_POPS
ABILENE_POPS = ("Seattle", "Sunnyvale", "Los Angeles", "Denver", "Kansas City", "Houston", "Chicago",
                "Indianapolis", "Atlanta", "New York", "Washington")
ABILENE_BACKBONE = ((0, 1), (0, 3), (1, 2), (1, 3), (2, 5), (3, 4), (4, 5), (4, 7), (5, 8), (7, 6), (7, 8),
                    (6, 9), (9, 10), (8, 10))


class TopologyDataError(ValueError):
    """A topology's data is invalid; the message names the file or generator, the value
    and what is accepted."""


@dataclass(frozen=True)
class CoreLink:
    """A link between core nodes ``a`` and ``b`` (indices), one-way delay ``delay_s`` (s),
    and where the value comes from."""

    a: int
    b: int
    delay_s: float
    source: str = ""


@dataclass(frozen=True)
class CoreGraph:
    """A core/edge network: ``core_nodes`` core nodes (0..n-1), ``links`` between them,
    ``edge_of[j]`` the core node of edge node j, ``edge_delay_s`` every edge link's delay."""

    core_nodes: int
    links: tuple[CoreLink, ...]
    edge_of: tuple[int, ...]
    edge_delay_s: float = EDGE_DELAY_S

    def adjacency(self) -> dict[int, list[tuple[int, float]]]:
        """Core node -> [(neighbour, delay_s)] over the core links."""
        adj: dict[int, list[tuple[int, float]]] = {n: [] for n in range(self.core_nodes)}
        for link in self.links:
            adj[link.a].append((link.b, link.delay_s))
            adj[link.b].append((link.a, link.delay_s))
        return adj

    def connected(self) -> bool:
        """Whether every core node reaches every other over the core links."""
        return len(self.hops_from(0)) == self.core_nodes

    def hops_from(self, node: int) -> dict[int, int]:
        """Core node -> its number of core links from ``node`` (the nodes it reaches)."""
        adj = self.adjacency()
        hops = {node: 0}
        todo = deque([node])
        while todo:
            u = todo.popleft()
            for v, _ in adj[u]:
                if v not in hops:
                    hops[v] = hops[u] + 1
                    todo.append(v)
        return hops

    def min_hop_delays(self, a: int, b: int) -> tuple[float, float]:
        """The least and the largest one-way delay (s) over the minimum-hop paths between
        core nodes ``a`` and ``b`` (the emulation routes on one of them). Raises
        ValueError when ``b`` is not reachable from ``a``."""
        from_a, from_b = self.hops_from(a), self.hops_from(b)
        if b not in from_a:
            raise ValueError(f"core node {b} is not reachable from {a}")
        on_path = sorted((n for n in from_a if from_a[n] + from_b.get(n, -10**9) == from_a[b]), key=from_a.get)
        lo, hi = {a: 0.0}, {a: 0.0}
        adj = self.adjacency()
        for v in on_path[1:]:
            before = [(lo[u] + d, hi[u] + d) for u, d in adj[v] if u in lo and from_a[u] == from_a[v] - 1]
            lo[v], hi[v] = min(x for x, _ in before), max(y for _, y in before)
        return lo[b], hi[b]

    def ports(self, node: int) -> int:
        """Ports of core node ``node``: its core links and its edge nodes."""
        return sum(node in (link.a, link.b) for link in self.links) + self.edge_of.count(node)


def core(i: int) -> str:
    """Name of core node ``i``."""
    return f"c{i}"


def edge(j: int) -> str:
    """Name of edge node ``j``."""
    return f"e{j}"


def host(j: int, k: int = 0) -> str:
    """Name of host ``k`` behind edge node ``j`` (``h<j>`` for the first, ``h<j>x<k>`` after)."""
    return f"h{j}" if k == 0 else f"h{j}x{k}"


def edge_of_host(name: str) -> int:
    """The edge node a host sits behind, from its name (:func:`host`'s inverse for j).
    Raises ValueError for a name :func:`host` does not make."""
    j, _, k = name[1:].partition("x")
    if not name.startswith("h") or not j.isdigit() or (k and not k.isdigit()):
        raise ValueError(f"host {name!r} is not h<j> or h<j>x<k>")
    return int(j)


def load_links(path: Path = DATA) -> tuple[CoreLink, ...]:
    """The NSFNET core links of ``path`` (CSV: a, b, delay_ms, source; '#' comment lines).

    Raises TopologyDataError naming the file and the row unless there are 21 links on
    nodes 0..13, every node used, no self-loop or repeated pair, connected, every delay
    within 0.7 .. 11.2 ms, and the delays are the paper's Fig. 3 values (as a multiset).
    """
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    links: list[CoreLink] = []
    pairs: set[frozenset[int]] = set()
    lo, hi = min(PAPER_DELAYS_MS), max(PAPER_DELAYS_MS)
    for n, row in enumerate(rows, start=1):
        where = f"{path.name} row {n}"
        try:
            a, b, delay_ms = int(row["a"]), int(row["b"]), float(row["delay_ms"])
        except (KeyError, TypeError, ValueError):
            raise TopologyDataError(f"{where}: {row!r}; accepted: integers a, b and a number delay_ms") from None
        for name, node in (("a", a), ("b", b)):
            if not 0 <= node < NSFNET_CORE_NODES:
                raise TopologyDataError(f"{where}: {name}={node}; accepted 0..{NSFNET_CORE_NODES - 1}")
        if a == b or frozenset((a, b)) in pairs:
            raise TopologyDataError(f"{where}: link {a}-{b}; accepted: two different nodes, each pair once")
        if not lo <= delay_ms <= hi:
            raise TopologyDataError(f"{where}: delay_ms={delay_ms}; accepted {lo} .. {hi} ms (paper Fig. 3)")
        pairs.add(frozenset((a, b)))
        links.append(CoreLink(a, b, delay_ms * 1e-3, row.get("source") or ""))
    if len(links) != NSFNET_LINKS:
        raise TopologyDataError(f"{path.name}: {len(links)} links; accepted {NSFNET_LINKS}")
    used = {x for link in links for x in (link.a, link.b)}
    if used != set(range(NSFNET_CORE_NODES)):
        raise TopologyDataError(f"{path.name}: nodes {sorted(set(range(NSFNET_CORE_NODES)) - used)} have no link; "
                                f"accepted: every node 0..{NSFNET_CORE_NODES - 1} linked")
    got = sorted(round(link.delay_s * 1e3, 3) for link in links)
    if got != sorted(PAPER_DELAYS_MS):
        raise TopologyDataError(f"{path.name}: delays {got} ms; accepted: the paper's Fig. 3 values "
                                f"{sorted(PAPER_DELAYS_MS)}")
    graph = CoreGraph(NSFNET_CORE_NODES, tuple(links), tuple(range(NSFNET_CORE_NODES)))
    if not graph.connected():
        raise TopologyDataError(f"{path.name}: the links do not connect all {NSFNET_CORE_NODES} nodes")
    return tuple(links)


def nsfnet(path: Path = DATA) -> CoreGraph:
    """NSFNET: 14 core nodes, the 21 links of ``path``, one edge node per core node
    (edge node j on core node j), 0.1 ms edge links. Raises TopologyDataError (load_links)."""
    return CoreGraph(NSFNET_CORE_NODES, load_links(path), tuple(range(NSFNET_CORE_NODES)))


def abilene_like(scale: float = 0.05, seed: int = 1) -> CoreGraph:
    """An Abilene-like core/edge network (module docstring): Abilene's 11-node backbone,
    round(160 x scale) access routers (at least 1) in random recursive trees below it,
    round(698 x scale) edge nodes (at least 1) each on a random access router; core links
    1 ms, edge links 0.1 ms. Deterministic for a given ``seed``. scale = 1 is the paper's
    171 core and 698 edge nodes. Raises TopologyDataError for scale outside (0, 1]."""
    if not 0 < scale <= 1:
        raise TopologyDataError(f"abilene_like: scale={scale!r}; accepted 0 < scale <= 1 (1 = the paper's "
                                f"{ABILENE_CORE_NODES} core and {ABILENE_EDGE_NODES} edge nodes)")
    rng = random.Random(seed)
    backbone = len(ABILENE_POPS)
    access = max(1, round((ABILENE_CORE_NODES - backbone) * scale))
    edges = max(1, round(ABILENE_EDGE_NODES * scale))
    source = "paper III-C: core links 1 ms"
    links = [CoreLink(a, b, ABILENE_CORE_DELAY_S, f"{source}; Abilene backbone {ABILENE_POPS[a]}-{ABILENE_POPS[b]}")
             for a, b in ABILENE_BACKBONE]
    for node in range(backbone, backbone + access):
        links.append(CoreLink(rng.randrange(node), node, ABILENE_CORE_DELAY_S, f"{source}; access tree"))
    edge_of = tuple(rng.randrange(backbone, backbone + access) for _ in range(edges))
    return CoreGraph(backbone + access, tuple(links), edge_of)


#: the Abilene-like generator's seed in E5 (one network per size, the same for every point)
ABILENE_SEED = 1


def network(topology: str, abilene_nodes: float = 0.05) -> CoreGraph:
    """E5's core/edge network by name: ``nsfnet`` (paper Fig. 3), or ``abilene`` (the
    Abilene-like one of ``abilene_nodes``, seed :data:`ABILENE_SEED`). Raises ValueError
    for another name, TopologyDataError for the generator's bounds."""
    if topology == "nsfnet":
        return nsfnet()
    if topology == "abilene":
        return abilene_like(abilene_nodes, seed=ABILENE_SEED)
    raise ValueError(f"topology {topology!r}: accepted nsfnet, abilene")


class OpsMesh(Topo):
    """Core nodes, their core links, edge nodes and hosts of a :class:`CoreGraph`
    (default: NSFNET).

    Core nodes ``c<i>`` (switch class ``switch``; for ``optical``: role core, architecture
    ``core_arch``), edge nodes ``e<j>`` (role edge, ``edge_arch``), ``hosts_per_edge``
    hosts behind each edge node. Links: core links with their delays, edge-core links
    ``graph.edge_delay_s``, host-edge links without propagation at ``host_rate_bps``
    (None: the edge node's rate). ``rate_bps`` is the rate of every switch port (the
    paper's 1 Gb/s data wavelength); architectures are specs of
    testbed/optical/architectures.py (or Assignments). Rates in bit/s, delays in s, paper
    units; ``tdf`` is the time dilation D given to every optical switch; ``flow_hash``:
    each flow follows one of its minimum-hop paths (hash of its addresses and ports)
    instead of a random one per packet (no reordering, as ns-2's single static route).
    """

    def build(self, graph: CoreGraph | None = None, *, switch: str = "optical", core_arch: object = "electronic",
              edge_arch: object = "electronic", rate_bps: float = 1e9, tdf: float = 1.0, hosts_per_edge: int = 1,
              host_rate_bps: float | None = None, mtu: int | None = None, flow_hash: bool = False) -> None:
        graph = graph or nsfnet()
        if not 1 <= hosts_per_edge <= 9:
            raise ValueError(f"hosts_per_edge={hosts_per_edge}: accepted 1..9")

        def node_opts(role: str, arch: object) -> dict[str, object]:
            if switch != "optical":
                return {"cls": switch}
            return {"cls": switch, "role": role, "arch": arch, "rate_bps": rate_bps, "tdf": tdf,
                    "flow_hash": flow_hash}

        link = {"mtu": mtu} if mtu else {}
        cores = [self.addSwitch(core(i), **node_opts("core", core_arch)) for i in range(graph.core_nodes)]
        for c in graph.links:
            self.addLink(cores[c.a], cores[c.b], length_m=length_for_delay_m(c.delay_s), **link)
        host_link = dict(link, length_m=0.0)
        if host_rate_bps is not None:
            host_link["rate_bps"] = host_rate_bps
        for j, i in enumerate(graph.edge_of):
            e = self.addSwitch(edge(j), **node_opts("edge", edge_arch))
            self.addLink(e, cores[i], length_m=length_for_delay_m(graph.edge_delay_s), **link)
            for k in range(hosts_per_edge):
                self.addLink(self.addHost(host(j, k)), e, **host_link)
