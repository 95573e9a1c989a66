"""Realise an optical fabric inside an Emulation: fq qdiscs, optswitch programs, maps,
routes; read its counters and fidelity monitor at the end of a run.

Created by ``testbed.net.Emulation`` when its topology has an ``optical`` switch. Every
host linked to an optical switch and every optical switch gets:

* the optswitch ingress (forwarding on switches, fidelity monitor everywhere) and
  egress programs (port model; on hosts: NIC serialisation at the link rate),
* an ``fq`` qdisc as root on every such port, which releases each packet at its
  stamped time (no pacing of its own, no per-flow limit and a horizon that caps
  rather than drops, so no stamped packet is lost in fq),
* on hosts: one shared MAC address and ARP off (the fabric forwards IPv4 by
  destination address; frames then carry the receiver's own MAC).

Node ids are dense indexes of the run (sorted hosts, then sorted optical switches);
port ids are the interface order of the node. Everything is recorded in the run's
ledger (qdiscs, the pin dir); programs and clsact go with the devices.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from testbed import bpf, cmd, nsops
from testbed.errors import DefinitionError
from testbed.optical import fabric, layout
from testbed.optical.layout import PortConfig
from testbed.optical.routes import next_hops
from testbed.units import propagation_delay_s

log = logging.getLogger(__name__)

#: MAC address shared by every host interface on the optical fabric
HOST_MAC = "02:0f:0f:00:00:01"
#: fq options: releases at skb->tstamp, never drops or reorders stamped packets itself
FQ_OPTS = ["limit", "1000000", "flow_limit", "1000000", "horizon", "3600s", "horizon_cap", "nopacing"]
DEFAULT_LENGTH_M = 10.0
#: port models of an optical switch (the host NIC's, "nic", is not one)
SWITCH_MODELS = ("electronic", "all-optical", "hybrid")


@dataclass
class NodePorts:
    """One node of the fabric: id, model, ports (config), peer node per port."""

    node_id: int
    name: str
    model: str
    n_e: int
    ports: list[PortConfig]
    peers: list[str]
    devs: list[str]
    netns: str
    ifindex_of_port: dict[int, int] | None = None  # known once the programs are attached


class EmulationView(Protocol):
    """What the fabric uses of the emulation that holds it (``testbed.net.Emulation``;
    a protocol, so that this module does not import ``testbed.net``, which creates it)."""

    token: str
    ledger: Any
    nodes: dict[str, Any]
    port_links: list[tuple[str, int, str, int, dict]]


class OpticalFabric:
    """The optical part of an Emulation (see the module docstring): ``switches`` are the
    names of its optical switch nodes, ``hosts`` the names of its end hosts (those linked
    to an optical switch join the fabric)."""

    def __init__(self, emu: EmulationView, switches: Sequence[str], hosts: Sequence[str]) -> None:
        self.emu = emu
        self.pin_dir = bpf.PIN_ROOT / f"{emu.token}-optical"
        switches = sorted(switches)
        self.switches = switches
        # neighbours per node: port index -> (peer node, link info)
        peers: dict[str, dict[int, tuple[str, dict]]] = {}
        for a, pa, b, pb, info in emu.port_links:
            peers.setdefault(a, {})[pa] = (b, info)
            peers.setdefault(b, {})[pb] = (a, info)
        hosts = sorted(n for n in hosts if any(p in switches for p, _ in peers.get(n, {}).values()))
        self.hosts = hosts
        self.nodes: dict[str, NodePorts] = {}
        for node_id, name in enumerate([*hosts, *switches]):
            node = emu.nodes[name]
            ports, peer_names = [], []
            for idx in range(len(node.intfs)):
                peer, info = peers[name][idx]
                sw = emu.nodes[name] if name in switches else emu.nodes[peer]
                rate, tdf = sw.rate_bps, sw.tdf  # type: ignore[attr-defined]
                length = float(info.get("length_m", DEFAULT_LENGTH_M))
                ports.append(PortConfig(
                    ps_per_byte=layout.ps_per_byte(rate / tdf),
                    prop_ns=round(propagation_delay_s(length) * tdf * 1e9),
                    peer_host=peer in hosts))
                peer_names.append(peer)
            if name in switches:
                model, n_e = node.model, node.n_e  # type: ignore[attr-defined]
            else:
                model, n_e = "nic", 0
            self.nodes[name] = NodePorts(node_id, name, model, n_e, ports, peer_names,
                                         list(node.intfs), node.netns)

    def setup(self) -> None:
        """Qdiscs, host addressing, programs, configuration and routes."""
        led = self.emu.ledger
        for name in self.hosts:
            host = self.emu.nodes[name]
            host.sysctl("net.ipv6.conf.all.disable_ipv6", 1)
            for dev in host.intfs:
                nsops.configure_link(dev, host.netns, up=False)
                nsops.configure_link(dev, host.netns, address=HOST_MAC, arp=False)
            nsops.set_default_route(host.intfs[0], host.netns)
        for np in self.nodes.values():
            for dev in np.devs:
                led.add("qdisc", dev=dev, netns=np.netns, parent="root")
            # one tc process per node (each costs ~0.3 s under software emulation)
            script = "".join(f"qdisc replace dev {dev} root fq {' '.join(FQ_OPTS)}\n" for dev in np.devs)
            cmd.run(["tc", "-batch", "-"], input=script, netns=np.netns)
        bpf.optswitch_load(self.pin_dir, ledger=led)
        for np in self.nodes.values():
            att = bpf.attach_node(led, netns=np.netns, node_id=np.node_id, devs=np.devs,
                                  pin_dir=self.pin_dir, is_switch=np.model != "nic")
            ifx = {r["dev"]: r["ifindex"] for r in att}
            ports = [PortConfig(p.ps_per_byte, p.prop_ns, ifx[d], p.peer_host)
                     for p, d in zip(np.ports, np.devs)]
            np.ports = ports
            np.ifindex_of_port = {i: ifx[d] for i, d in enumerate(np.devs)}
        self._write_configs()
        fabric.set_routes(self.pin_dir, self.routes(), flow_hash=any(
            getattr(self.emu.nodes[s], "flow_hash", False) for s in self.switches))

    def _write_configs(self) -> None:
        fabric.configure_nodes(self.pin_dir, [
            fabric.NodeConfig(np.node_id, np.model, np.n_e, np.ports, np.ifindex_of_port)
            for np in self.nodes.values()])

    def reconfigure(self, model: str, n_e: int) -> None:
        """Give every switch port model ``model`` with ``n_e`` buffer ports and reset
        the fabric as if new: switch state, counters and the fidelity monitor zeroed.
        Lets one emulation serve several points (building it costs minutes under
        software emulation). Raises DefinitionError for an unknown model or n_e."""
        if model not in SWITCH_MODELS:
            raise DefinitionError("switch.model", model, " | ".join(SWITCH_MODELS))
        if not 0 <= n_e <= layout.MAX_NE:
            raise DefinitionError("switch.n_e", n_e, f"an integer 0..{layout.MAX_NE}")
        n_e = 0 if model == "all-optical" else n_e
        for name in self.switches:
            node = self.emu.nodes[name]
            node.model, node.n_e = model, n_e  # type: ignore[attr-defined]
            self.nodes[name].model, self.nodes[name].n_e = model, n_e
        self._write_configs()
        fabric.reset_monitor(self.pin_dir)

    def routes(self) -> dict[tuple[int, str], list[int]]:
        """{(switch id, host IPv4): equal-cost output ports} over minimum-hop paths."""
        adj = {n: list(enumerate(np.peers)) for n, np in self.nodes.items()}
        out: dict[tuple[int, str], list[int]] = {}
        for h in self.hosts:
            ip = self.emu.nodes[h].ip  # type: ignore[attr-defined]
            for node, ports in next_hops(adj, h, transit=set(self.switches)).items():
                if node in self.switches:
                    out[(self.nodes[node].node_id, ip)] = ports
        return out

    def counters(self) -> list[dict]:
        """One row per (node, port): decisions, bytes, busy time, occupancy, receive."""
        states = fabric.read_states(self.pin_dir, {np.node_id: len(np.ports) for np in self.nodes.values()})
        rows = []
        for np in self.nodes.values():
            st = states.get(np.node_id)
            if st is None:
                continue
            for p, (pc, ps) in enumerate(zip(np.ports, st["ports"])):
                rows.append({"node": np.name, "model": np.model, "n_e": np.n_e, "port": p,
                             "intf": np.devs[p], "peer": np.peers[p],
                             "cut_through": ps["cut"], "buffered": ps["buffered"],
                             "oeo": ps["buffered"], "dropped": ps["dropped"], "bytes": ps["bytes"],
                             "busy_ns": ps["busy_ns"], "max_occ_bytes": ps["max_occ_bytes"],
                             "node_max_occ_bytes": st["max_occ_bytes"],
                             "node_occ_overflow": st["occ_overflow"],
                             "node_bout_overflow": st["bout_overflow"], "rx": ps["rx"],
                             "unmodelled": ps["nocfg"], "last_dep_ns": ps["last_dep_ns"],
                             "last_rx_real_ns": ps["last_rx_real_ns"],
                             "last_rx_stamp_ns": ps["last_rx_stamp_ns"]})
        return rows

    def monitor(self) -> dict:
        """Fidelity monitor summary: lateness of packets against their stamps (ns)."""
        return fabric.read_monitor(self.pin_dir)

    def max_frame_bytes(self) -> int:
        """Largest Ethernet frame the fabric's links carry (largest link MTU + 14 B)."""
        return max((int(info.get("mtu") or 1500) for *_, info in self.emu.port_links), default=1500) + 14

    def ref_tau_ns(self, frame_bytes: int | None = None) -> int:
        """tau of a ``frame_bytes`` frame (default: the largest the links carry) at the
        fastest port of the fabric (emulation ns)."""
        frame = frame_bytes if frame_bytes is not None else self.max_frame_bytes()
        return min(layout.tau_ns(frame, p.ps_per_byte) for np in self.nodes.values() for p in np.ports)
