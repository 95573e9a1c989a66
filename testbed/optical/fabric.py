"""Realise an optical fabric inside an Emulation: fq qdiscs, optswitch programs, maps,
routes; read its counters and fidelity monitor at the end of a run.

Created by ``testbed.net.Emulation`` when its topology has an ``optical`` switch. Every
host linked to an optical switch and every optical switch is a node of the fabric with
a role (``host``, or the switch's ``edge`` / ``core``) and a port architecture
(``testbed/optical/architectures.py``; hosts: ``nic``), and gets:

* the optswitch ingress (forwarding on switches, fidelity monitor everywhere) and
  egress programs (its architecture's decision; on hosts: NIC serialisation at the
  link rate),
* on every port, the root qdisc of its architecture's realisation
  (``testbed/optical/mechanisms.py``; today ``fq``, which releases each packet at its
  stamped time),
* on hosts: one shared MAC address and ARP off (the fabric forwards IPv4 by
  destination address; frames then carry the receiver's own MAC).

Node ids are dense indexes of the run (sorted hosts, then sorted optical switches);
port ids are the interface order of the node. Everything is recorded in the run's
ledger (qdiscs, the pin dir); programs and clsact go with the devices.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from testbed import bpf, nsops
from testbed.errors import DefinitionError
from testbed.optical import architectures, layout, maps
from testbed.optical.architectures import Assignment
from testbed.optical.layout import PortConfig
from testbed.optical.mechanisms import Mechanism
from testbed.optical.routes import next_hops
from testbed.units import propagation_delay_s

log = logging.getLogger(__name__)

#: MAC address shared by every host interface on the optical fabric
HOST_MAC = "02:0f:0f:00:00:01"
DEFAULT_LENGTH_M = 10.0
#: the architecture of every host of the fabric
HOST_ASSIGNMENT = architectures.REGISTRY.assignment("nic", role="host")


@dataclass
class NodePorts:
    """One node of the fabric: id, role, port architecture (``assignment``), ports
    (config), peer node per port; ``mechanism`` the qdisc installed on its ports."""

    node_id: int
    name: str
    role: str
    assignment: Assignment
    ports: list[PortConfig]
    peers: list[str]
    devs: list[str]
    netns: str
    ifindex_of_port: dict[int, int] | None = None  # known once the programs are attached
    mechanism: Mechanism | None = None  # installed by OpticalFabric.setup

    @property
    def model(self) -> str:
        """Name of its architecture (the ``model`` column of the counters)."""
        return self.assignment.name

    @property
    def n_e(self) -> int:
        """Its buffer ports (architectures that have them), else 0."""
        return self.assignment.params.get("n_e", 0)


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
                role, assignment = node.role, node.assignment
                assignment.check(ports=len(ports), role=role, key=f"{name}.arch")
            else:
                role, assignment = "host", HOST_ASSIGNMENT
            self.nodes[name] = NodePorts(node_id, name, role, assignment, ports, peer_names,
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
            self._install(np)
        # One loader process loads and attaches every node (a process costs ~0.3 s under
        # software emulation; a k=4 fat-tree has 36 nodes); the first load creates and
        # pins the maps, the others share them. They are configured once every port's
        # ifindex is known: until then a switch counts a packet as unmodelled.
        attached = bpf.attach_nodes(led, self.pin_dir, [
            bpf.NodeAttachment(np.node_id, np.netns, np.devs, is_switch=np.role != "host")
            for np in self.nodes.values()])
        for np, att in zip(self.nodes.values(), attached):
            ifx = {r["dev"]: r["ifindex"] for r in att}
            np.ports = [PortConfig(p.ps_per_byte, p.prop_ns, ifx[d], p.peer_host)
                        for p, d in zip(np.ports, np.devs)]
            np.ifindex_of_port = {i: ifx[d] for i, d in enumerate(np.devs)}
        self._write_configs()
        maps.set_routes(self.pin_dir, self.routes(), flow_hash=any(
            getattr(self.emu.nodes[s], "flow_hash", False) for s in self.switches))

    def _install(self, np: NodePorts) -> None:
        """Install the mechanism of ``np``'s realisation as the root qdisc of its ports
        (recorded in the ledger by :meth:`setup`), unless it is installed already."""
        mech = np.assignment.mechanism
        if mech != np.mechanism:
            mech.install(np.netns, np.devs, np.assignment.options(), self.emu.ledger)
            np.mechanism = mech

    def _write_configs(self) -> None:
        maps.configure_nodes(self.pin_dir, [
            maps.NodeConfig(np.node_id, np.assignment, np.ports, np.ifindex_of_port)
            for np in self.nodes.values()])

    def reconfigure(self, assignments: Mapping[str, Assignment]) -> None:
        """Give each node named in ``assignments`` ({node: Assignment}) its port
        architecture (the others keep theirs) and reset the fabric as if new: every
        node's state, counters and the fidelity monitor zeroed; a node whose
        architecture is realised by another mechanism gets that mechanism's qdisc. Lets
        one emulation serve several points (building it costs minutes under software
        emulation). Everything is checked before anything changes: raises
        DefinitionError for a node not in the fabric, or an architecture that does not
        fit the node's role or port count."""
        for name, a in assignments.items():
            np = self.nodes.get(name)
            if np is None:
                raise DefinitionError("node", name, "a node of the optical fabric: " + ", ".join(self.nodes))
            a.check(ports=len(np.ports), role=np.role, key=f"{name}.arch")
        for name, a in assignments.items():
            np = self.nodes[name]
            np.assignment = a
            if name in self.switches:
                self.emu.nodes[name].assignment = a
            self._install(np)
        self._write_configs()
        maps.reset_monitor(self.pin_dir)

    def reconfigure_switches(self, assignment: Assignment) -> None:
        """:meth:`reconfigure` with every switch given ``assignment``."""
        self.reconfigure({name: assignment for name in self.switches})

    def by_role(self, assignments: Mapping[str, Assignment]) -> dict[str, Assignment]:
        """{node: assignment} giving every node whose role is a key of ``assignments``
        ({role: Assignment}) that assignment, for :meth:`reconfigure`. Raises
        DefinitionError for a role not in ROLES."""
        for role in assignments:
            architectures.check_role(role, key="role")
        return {name: assignments[np.role] for name, np in self.nodes.items() if np.role in assignments}

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
        states = maps.read_states(self.pin_dir, {np.node_id: len(np.ports) for np in self.nodes.values()})
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
        return maps.read_monitor(self.pin_dir)

    def max_frame_bytes(self) -> int:
        """Largest Ethernet frame the fabric's links carry (largest link MTU + 14 B)."""
        return max((int(info.get("mtu") or 1500) for *_, info in self.emu.port_links), default=1500) + 14

    def ref_tau_ns(self, frame_bytes: int | None = None) -> int:
        """tau of a ``frame_bytes`` frame (default: the largest the links carry) at the
        fastest port of the fabric (emulation ns)."""
        frame = frame_bytes if frame_bytes is not None else self.max_frame_bytes()
        return min(layout.tau_ns(frame, p.ps_per_byte) for np in self.nodes.values() for p in np.ports)
