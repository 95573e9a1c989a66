"""Two hosts over one shaped link, optionally through one switch."""

from __future__ import annotations

from mininet.topo import Topo

from testbed.net import LinkShape


class TwoHostPath(Topo):
    """h1 -- h2, or h1 -- s1 -- h2 when ``switch`` is a switch class ("ovs", "bridge").

    ``shape`` (emulation units) applies to both directions of the h1 link, so a one-way
    delay d gives an RTT of 2d plus the base RTT.
    """

    def build(self, shape: LinkShape | None = None, switch: str = "none", **switch_opts: object) -> None:
        h1, h2 = self.addHost("h1"), self.addHost("h2")
        if switch == "none":
            self.addLink(h1, h2, shape=shape)
            return
        s1 = self.addSwitch("s1", cls=switch, **switch_opts)
        self.addLink(h1, s1, shape=shape)
        self.addLink(s1, h2)
