"""Routes of an optical fabric: minimum hop count, all equal-cost next hops.

Works on any Mininet ``Topo``: nodes are its hosts and switches, links its links (a
multigraph is fine: parallel links are separate ports). The ECMP choice itself is made
per packet by the BPF ingress program; :func:`uniformity_p_value` checks its spread.
"""

from __future__ import annotations

from collections import deque


def hop_distances(adj: dict[str, list[str]], dst: str) -> dict[str, int]:
    """Breadth-first hop count from every node to ``dst`` (unreachable nodes absent)."""
    dist = {dst: 0}
    todo = deque([dst])
    while todo:
        n = todo.popleft()
        for m in adj[n]:
            if m not in dist:
                dist[m] = dist[n] + 1
                todo.append(m)
    return dist


def next_hops(adj_ports: dict[str, list[tuple[int, str]]], dst: str, *,
              transit: set[str] | None = None) -> dict[str, list[int]]:
    """For every node, its output port ids on a minimum-hop path to ``dst``.

    ``adj_ports[n]`` lists (port id, neighbour) for each port of ``n``. Only nodes in
    ``transit`` (default: all) may appear inside a path, so hosts never forward.
    Returns {node: sorted port ids}; ``dst`` itself and unreachable nodes are absent.
    """
    # Hop distances to dst over the graph in which only transit nodes relay.
    dist = {dst: 0}
    todo = deque([dst])
    while todo:
        n = todo.popleft()
        if n != dst and transit is not None and n not in transit:
            continue
        for m in (m for _, m in adj_ports[n]):
            if m not in dist:
                dist[m] = dist[n] + 1
                todo.append(m)
    out: dict[str, list[int]] = {}
    for n, ports in adj_ports.items():
        if n == dst or n not in dist:
            continue
        hops = sorted(p for p, m in ports if m in dist and dist[m] == dist[n] - 1
                      and (m == dst or transit is None or m in transit))
        if hops:
            out[n] = hops
    return out


def uniformity_p_value(counts: list[int]) -> float:
    """P-value of Pearson's chi-square test of ``counts`` against a uniform distribution.

    Raises ValueError for fewer than two categories or no observations.
    """
    from scipy.special import chdtrc  # imported here: only tests need it

    n, k = sum(counts), len(counts)
    if k < 2 or n == 0:
        raise ValueError("need at least two categories and one observation")
    e = n / k
    return float(chdtrc(k - 1, sum((c - e) ** 2 / e for c in counts)))
