"""Small optical-fabric topologies for tests and examples (switch class ``optical``).

Switch options (``model``, ``n_e``, ``rate_bps``, ``tdf``, ``flow_hash``) are passed
to every switch; ``length_m`` to every link. See testbed.net.OpticalSwitch.
"""

from __future__ import annotations

from mininet.topo import Topo


class OpticalChain(Topo):
    """h1 - s1 - ... - sN - h2: N switches in a line (N + 1 hops between the hosts)."""

    def build(self, n_switches: int = 4, length_m: float = 10.0, **switch_opts: object) -> None:
        if n_switches < 1:
            raise ValueError(f"n_switches {n_switches} must be >= 1")
        prev = self.addHost("h1")
        for i in range(1, n_switches + 1):
            s = self.addSwitch(f"s{i}", cls="optical", **switch_opts)
            self.addLink(prev, s, length_m=length_m)
            prev = s
        self.addLink(prev, self.addHost("h2"), length_m=length_m)


class OpticalStar(Topo):
    """n_senders hosts and one receiver h0 on one switch s1 (contention at s1 -> h0)."""

    def build(self, n_senders: int = 2, length_m: float = 10.0, **switch_opts: object) -> None:
        s1 = self.addSwitch("s1", cls="optical", **switch_opts)
        self.addLink(self.addHost("h0"), s1, length_m=length_m)
        for i in range(1, n_senders + 1):
            self.addLink(self.addHost(f"h{i}"), s1, length_m=length_m)


class OpticalParallel(Topo):
    """h1 - s1 = {m1..mK} = s2 - h2: K equal-cost paths between s1 and s2."""

    def build(self, n_paths: int = 4, length_m: float = 10.0, **switch_opts: object) -> None:
        h1, h2 = self.addHost("h1"), self.addHost("h2")
        s1 = self.addSwitch("s1", cls="optical", **switch_opts)
        s2 = self.addSwitch("s2", cls="optical", **switch_opts)
        self.addLink(h1, s1, length_m=length_m)
        for i in range(1, n_paths + 1):
            m = self.addSwitch(f"m{i}", cls="optical", **switch_opts)
            self.addLink(s1, m, length_m=length_m)
            self.addLink(m, s2, length_m=length_m)
        self.addLink(s2, h2, length_m=length_m)
