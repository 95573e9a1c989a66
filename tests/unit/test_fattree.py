"""The k-ary fat-tree builder: sizes, port counts, and minimum-hop path structure."""

from collections import deque

import pytest

from testbed.errors import DefinitionError
from topologies.fattree import FatTree, FatTreeSize


def adjacency(topo: FatTree) -> dict[str, list[str]]:
    adj: dict[str, list[str]] = {n: [] for n in topo.nodes()}
    for a, b in topo.links():
        adj[a].append(b)
        adj[b].append(a)
    return adj


def shortest_paths(adj: dict[str, list[str]], src: str, dst: str) -> tuple[int, int]:
    """(hop count, number of distinct minimum-hop paths) from src to dst, by BFS counting."""
    dist, count = {src: 0}, {src: 1}
    q = deque([src])
    while q:
        u = q.popleft()
        for v in adj[u]:
            if v not in dist:
                dist[v], count[v] = dist[u] + 1, count[u]
                q.append(v)
            elif dist[v] == dist[u] + 1:
                count[v] += count[u]
    return dist[dst], count[dst]


@pytest.mark.parametrize("k", [4, 8])
def test_sizes_and_ports(k):
    topo = FatTree(k=k)
    size = FatTreeSize(k)
    assert len(topo.hosts()) == size.servers == k ** 3 // 4
    assert len(topo.switches()) == size.switches
    assert (size.servers, size.switches) == {4: (16, 20), 8: (128, 80)}[k]
    adj = adjacency(topo)
    assert all(len(adj[s]) == k for s in topo.switches()), "every switch has k ports (n_a = k)"
    assert all(len(adj[h]) == 1 for h in topo.hosts())
    assert len(topo.links()) == 3 * k ** 3 // 4  # servers + edge-agg + agg-core links


def test_minimum_hop_paths_k4():
    adj = adjacency(FatTree(k=4))
    assert shortest_paths(adj, "h0", "h1") == (2, 1)      # same edge switch
    assert shortest_paths(adj, "h0", "h2") == (4, 2)      # same pod: via k/2 aggregation switches
    assert shortest_paths(adj, "h0", "h15") == (6, 4)     # other pod: via (k/2)^2 core switches


def test_names_fit_the_node_name_limit():
    from testbed.names import check_node_name

    for n in FatTree(k=16).nodes():
        check_node_name(n)


@pytest.mark.parametrize("k", [3, 0, 18, "4", True])
def test_bad_k_names_the_key_and_range(k):
    with pytest.raises(DefinitionError) as e:
        FatTree(k=k)
    assert "params.k" in str(e.value) and "even integer from 2 to 16" in str(e.value)
