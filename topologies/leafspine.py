"""Leaf-spine with an optical space switch (E3; the SDN-OSS paper's Fig. 2).

``spines`` spine switches ``s0..``, ``tors`` top-of-rack (leaf) switches ``t0..`` in
clusters of ``cluster_size`` consecutive ToRs (cluster 0 = "A", the senders; cluster 1 =
"B", the receivers; more clusters allowed), ``hosts_per_tor`` hosts ``h<t>x<i>`` with
IPv4 ``10.0.<t>.<i+1>`` (one /24 per ToR, /8 on the host so every peer is on-link), and
the optical space switch ``oss``.

Every ToR has one regular uplink to every spine and one *special* uplink that exists
twice as a veth pair: its leaf-spine position (to spine ``t mod spines``, link purpose
``special-ls``) and its diverted position (to the OSS, ``special-oss``). The controller
keeps exactly one of the two up (OpenFlow port-mod on the ToR side), so the installed
capacity is constant: when the direct optical link exists, the corresponding leaf-spine
link is down, and packets queued on a link that is moved away are lost with its queue.

Switches carry ``role`` (tor, spine, oss), ``index`` and ``cluster`` in their info; links
carry ``purpose`` (host, uplink, special-ls, special-oss) so the controller's fabric map
(controllers/fabric.py) is derived from the realised emulation, not re-computed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mininet.topo import Topo

from testbed.errors import DefinitionError

MAX_TORS = 32
MAX_SPINES = 8
MAX_HOSTS_PER_TOR = 200


@dataclass(frozen=True)
class LeafSpineSize:
    """Counts of a leaf-spine; ``check()`` raises DefinitionError naming the bad key."""

    spines: int = 2
    tors: int = 6
    hosts_per_tor: int = 24
    cluster_size: int = 3

    def check(self, prefix: str = "params.") -> "LeafSpineSize":
        for key, lo, hi in (("spines", 2, MAX_SPINES), ("tors", 2, MAX_TORS),
                            ("hosts_per_tor", 1, MAX_HOSTS_PER_TOR), ("cluster_size", 1, MAX_TORS)):
            v = getattr(self, key)
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                raise DefinitionError(prefix + key, v, f"an integer {lo}..{hi}")
        if self.tors % self.cluster_size or self.tors // self.cluster_size < 2:
            raise DefinitionError(prefix + "tors", self.tors,
                                  f"a multiple of cluster_size = {self.cluster_size} giving at least 2 clusters")
        return self

    @property
    def clusters(self) -> int:
        return self.tors // self.cluster_size

    def cluster_of(self, tor: int) -> int:
        return tor // self.cluster_size

    def cluster_tors(self, cluster: int) -> list[str]:
        return [tor_name(t) for t in range(cluster * self.cluster_size, (cluster + 1) * self.cluster_size)]

    @property
    def hosts(self) -> int:
        return self.tors * self.hosts_per_tor


def tor_name(t: int) -> str:
    return f"t{t}"


def host_name(t: int, i: int) -> str:
    return f"h{t}x{i}"


def host_ip(t: int, i: int) -> str:
    """The host's address (no prefix length)."""
    return f"10.0.{t}.{i + 1}"


def tor_subnet(t: int) -> str:
    return f"10.0.{t}.0/24"


class LeafSpine(Topo):
    """Leaf-spine + OSS; see the module docstring.

    ``switch`` is the switch class of every switch (a key of testbed.net.SWITCH_CLASSES;
    the controller needs ``ovs``), ``switch_opts`` its parameters (e.g. datapath,
    fail_mode), ``link_opts`` given to every link (e.g. ``shape``: rate and queue),
    ``host_link_opts`` to the host links instead if given (tests put the queue at a ToR).
    """

    def build(self, spines: int = 2, tors: int = 6, hosts_per_tor: int = 24, cluster_size: int = 3,
              switch: str = "ovs", switch_opts: dict | None = None, link_opts: dict | None = None,
              host_link_opts: dict | None = None) -> None:
        size = LeafSpineSize(spines, tors, hosts_per_tor, cluster_size).check()
        sopts = dict(switch_opts or {})
        lopts = dict(link_opts or {})
        hlopts = dict(lopts if host_link_opts is None else host_link_opts)
        spine = [self.addSwitch(f"s{s}", cls=switch, role="spine", index=s, cluster=-1, **sopts)
                 for s in range(spines)]
        oss = self.addSwitch("oss", cls=switch, role="oss", index=0, cluster=-1, **sopts)
        for t in range(tors):
            tor = self.addSwitch(tor_name(t), cls=switch, role="tor", index=t, cluster=size.cluster_of(t), **sopts)
            for i in range(hosts_per_tor):
                h = self.addHost(host_name(t, i), ip=f"{host_ip(t, i)}/8", tor=t)
                self.addLink(h, tor, purpose="host", **hlopts)
            for s in range(spines):
                self.addLink(tor, spine[s], purpose="uplink", **lopts)
            self.addLink(tor, spine[t % spines], purpose="special-ls", **lopts)
            self.addLink(tor, oss, purpose="special-oss", **lopts)

