"""k-ary fat-tree (Al-Fares et al.; the E1 paper's Fig. 3 with k = 8).

k pods, each with k/2 edge (L1, top-of-rack) and k/2 aggregation (L2) switches;
(k/2)^2 core (L3) switches; k/2 servers per edge switch. k = 4 gives 16 servers and 20
switches, k = 8 the paper's 128 servers and 80 switches. Every switch has k ports
(the paper's n_a azimuths).

Node names fit the testbed's 6-character limit: servers ``h0`` .. ``h127``, edge
switches ``e<pod>x<i>``, aggregation ``a<pod>x<i>``, core ``c<i>``.
"""

from __future__ import annotations

from dataclasses import dataclass

from mininet.topo import Topo

from testbed.errors import DefinitionError

#: largest supported k (node names and the emulation's size; k = 16 is 1024 servers)
MAX_K = 16


@dataclass(frozen=True)
class FatTreeSize:
    """Counts of a k-ary fat-tree."""

    k: int

    @property
    def servers(self) -> int:
        return self.k ** 3 // 4

    @property
    def switches(self) -> int:
        return 5 * self.k ** 2 // 4

    @property
    def core(self) -> int:
        return (self.k // 2) ** 2

    def bisection_links(self) -> int:
        """Links crossing the bisection (half the servers' NICs: full bisection bandwidth)."""
        return self.servers // 2


def check_k(k: object, key: str = "params.k") -> int:
    """``k`` as an int, or DefinitionError naming the accepted values."""
    if not isinstance(k, int) or isinstance(k, bool) or k < 2 or k % 2 or k > MAX_K:
        raise DefinitionError(key, str(k), f"an even integer from 2 to {MAX_K}")
    return k


class FatTree(Topo):
    """k-ary fat-tree of one switch class.

    ``switch`` is a switch class (a key of ``testbed.net.SWITCH_CLASSES``) and
    ``switch_opts`` its parameters, identical for every switch. ``link_opts`` are given
    to every link (e.g. rate, length, MTU), so all links are alike as in the paper.
    Switches carry ``layer`` (1 edge, 2 aggregation, 3 core) and ``pod`` in their info.
    """

    def build(self, k: int = 4, switch: str = "bridge", switch_opts: dict | None = None,
              link_opts: dict | None = None, host_opts: dict | None = None) -> None:
        k = check_k(k)
        half = k // 2
        sopts = dict(switch_opts or {})
        lopts = dict(link_opts or {})
        hopts = dict(host_opts or {})
        core = [self.addSwitch(f"c{i}", cls=switch, layer=3, pod=-1, **sopts) for i in range(half * half)]
        server = 0
        for pod in range(k):
            aggs = [self.addSwitch(f"a{pod}x{i}", cls=switch, layer=2, pod=pod, **sopts) for i in range(half)]
            edges = [self.addSwitch(f"e{pod}x{i}", cls=switch, layer=1, pod=pod, **sopts) for i in range(half)]
            for e in edges:
                for _ in range(half):
                    self.addLink(self.addHost(f"h{server}", **hopts), e, **lopts)
                    server += 1
                for a in aggs:
                    self.addLink(e, a, **lopts)
            # aggregation switch i of every pod connects to core switches i*half .. i*half+half-1
            for i, a in enumerate(aggs):
                for j in range(half):
                    self.addLink(a, core[i * half + j], **lopts)
