"""E2's optical-burst-switching path (spec ``e2-obs-multigranular.md``, "Network").

    src1..srcN --access--> iedge --> core --(propagation)--> eedge --> snk1..snkN

(``iedge`` the ingress edge, ``eedge`` the egress edge.)

* ``srcI`` -- ``iedge``: the source's own access link at ``access_rate_bps`` (the
  source's NIC serialises its packets at that rate: exactly one FIFO link per source),
  no propagation;
* ``iedge`` (role edge, ``edge_arch``: E2's ``obs-edge``) assembles the sources'
  packets into bursts on its port towards the core (the ``obsburst`` qdisc) and sends
  the ACKs back to the sources through FIFO ports;
* ``iedge`` -- ``core``: no propagation (a burst reaches the core as the qdisc
  releases it);
* ``core`` (role core, ``core_arch``: ``obs-core``, bufferless, whole-burst loss);
* ``core`` -- ``eedge``: the path's one-way propagation delay ``propagation_s``;
* ``eedge`` (role edge, ``egress_arch``, default ``electronic``: burst disassembly is
  plain FIFO forwarding) -- ``snkI``: at the optical rate, no propagation.

The round trip is then 2 x propagation + assembly (at most Tmax) + offset, the RTT of
the paper's ideal throughput MSS x Wm x N / RTT (30 ms for its slow connections).
Switch options: ``rate_bps`` (the optical rate, every port that has no ``rate_bps``
of its own) and ``tdf``; link options ``rate_bps`` and ``length_m`` (paper units).
"""

from __future__ import annotations

from mininet.topo import Topo

from testbed.units import FIBRE_GROUP_INDEX, SPEED_OF_LIGHT_M_PER_S

#: node names (at most 6 characters: testbed.names): ingress edge, core, egress edge
INGRESS, CORE, EGRESS = "iedge", "core", "eedge"


def source(i: int) -> str:
    """Name of source ``i`` (1-based)."""
    return f"src{i}"


def sink(i: int) -> str:
    """Name of the sink of source ``i`` (1-based)."""
    return f"snk{i}"


def length_for_delay_m(delay_s: float) -> float:
    """Fibre length (m) whose propagation delay is ``delay_s`` (testbed.units)."""
    return delay_s * SPEED_OF_LIGHT_M_PER_S / FIBRE_GROUP_INDEX


class ObsPath(Topo):
    """N sources, an ingress edge, one core node, an egress edge and N sinks (see the
    module docstring). ``edge_arch`` / ``core_arch`` / ``egress_arch``: architecture
    specs of testbed/optical/architectures.py (or Assignments); rates in bit/s, times
    in seconds, all paper units."""

    def build(self, n_sources: int = 4, *, edge_arch: object = "electronic", core_arch: object = "electronic",
              egress_arch: object = "electronic", access_rate_bps: float = 100e6,
              optical_rate_bps: float = 10e9, propagation_s: float = 5e-3, tdf: float = 1.0,
              mtu: int | None = None) -> None:
        if not 1 <= n_sources <= 400:
            raise ValueError(f"n_sources {n_sources} must be 1..400")
        common = {"cls": "optical", "rate_bps": optical_rate_bps, "tdf": tdf}
        ingress = self.addSwitch(INGRESS, role="edge", arch=edge_arch, **common)
        core = self.addSwitch(CORE, role="core", arch=core_arch, **common)
        egress = self.addSwitch(EGRESS, role="edge", arch=egress_arch, **common)
        link = {"mtu": mtu} if mtu else {}
        for i in range(1, n_sources + 1):
            self.addLink(self.addHost(source(i)), ingress, length_m=0.0, rate_bps=access_rate_bps, **link)
        self.addLink(ingress, core, length_m=0.0, **link)
        self.addLink(core, egress, length_m=length_for_delay_m(propagation_s), **link)
        for i in range(1, n_sources + 1):
            self.addLink(egress, self.addHost(sink(i)), length_m=0.0, **link)
