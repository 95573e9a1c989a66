"""Realise an optical fabric inside an Emulation: fq qdiscs, optswitch programs, maps,
routes; read its counters and fidelity monitor at the end of a run.

Created by ``testbed.net.Emulation`` when its topology has an ``optical`` switch. Every
host linked to an optical switch and every optical switch is a node of the fabric with
a role (``host``, or the switch's ``edge`` / ``core``) and a port architecture
(``testbed/optical/architectures.py``; hosts: ``nic``), and gets:

* the optswitch ingress (forwarding on switches, fidelity monitor everywhere) and
  egress programs (its architecture's decision; on hosts: NIC serialisation at the
  link rate), configured with the architecture's parameters, durations x the node's D
  (``Assignment.packed(tdf)``; hosts take the D of the switch they are attached to),
* on every port, the root qdisc its architecture's realisation puts there
  (``testbed/optical/mechanisms.py``: ``fq``, which releases each packet at its
  stamped time; on hosts the ``hostnic`` qdisc, which does the same and orphans the
  packet when the NIC takes it, so that its socket does not treat it as queued (TCP
  Small Queues, skipped retransmissions) while it crosses the fabric; on an ``obs-edge`` node the ``obsburst`` burst
  assembler on the ports towards other switches and ``fq`` on those towards hosts),
  with the options the
  architecture derives from its parameters and the node (``Assignment.options``),
* per port: its rate (the link's ``rate_bps`` if it has one, else the switch's; for
  a host, the switch it is attached to), its propagation (link ``length_m``, 0
  allowed), ``peer_host`` and ``peer_holds`` (the peer node holds the packets it sends
  on this link and releases them with their arrival at the peer as ``skb->tstamp``:
  obs-edge's obsburst, not ib's voq, which stamps intended arrivals here),
* on an ``ib`` node the voq qdisc on every port, with the node's id, its ports'
  propagation and the switch option ``lookahead_ns`` (M, emulation ns; default
  ``testbed.optical.voq.DEFAULT_LOOKAHEAD_NS``), and its decisions' counters in the
  node's rows of :meth:`OpticalFabric.counters`,
* on hosts: one shared MAC address and ARP off (the fabric forwards IPv4 by
  destination address; frames then carry the receiver's own MAC).

Node ids are dense indexes of the run (sorted hosts, then sorted optical switches);
port ids are the interface order of the node. Everything is recorded in the run's
ledger (qdiscs, the pin dir); programs and clsact go with the devices.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from testbed import bpf, nsops
from testbed.errors import DefinitionError, TestbedError
from testbed.optical import architectures, layout, maps
from testbed.optical.architectures import Assignment
from testbed.optical.layout import PortConfig
from testbed.optical.mechanisms import HOLDING, Mechanism, NodeContext
from testbed.optical.routes import next_hops
from testbed.optical.xcpplan import NodeShape, single_routes
from testbed.units import propagation_delay_s

log = logging.getLogger(__name__)

#: MAC address shared by every host interface on the optical fabric
HOST_MAC = "02:0f:0f:00:00:01"
DEFAULT_LENGTH_M = 10.0
#: accepted link rates (link option ``rate_bps``), paper bit/s
LINK_RATE_BOUNDS = (1e3, 8e12)
#: accepted link lengths (link option ``length_m``), m
LINK_LENGTH_BOUNDS = (0.0, 4e7)
#: the architecture of every host of the fabric
HOST_ASSIGNMENT = architectures.REGISTRY.assignment("nic", role="host")


def link_options(info: Mapping[str, Any], key: str) -> tuple[float | None, float]:
    """(rate_bps or None, length_m) of a link's options ``info`` (paper units; length
    default :data:`DEFAULT_LENGTH_M`, 0 = no propagation). Raises DefinitionError
    naming ``key.rate_bps`` / ``key.length_m`` for a value out of range."""
    rate = info.get("rate_bps")
    if rate is not None:
        lo, hi = LINK_RATE_BOUNDS
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not lo <= rate <= hi:
            raise DefinitionError(f"{key}.rate_bps", rate, f"a link rate in bit/s (paper units), {lo:g}..{hi:g}")
        rate = float(rate)
    length = info.get("length_m", DEFAULT_LENGTH_M)
    lo, hi = LINK_LENGTH_BOUNDS
    if isinstance(length, bool) or not isinstance(length, (int, float)) or not math.isfinite(length) \
            or not lo <= length <= hi:
        raise DefinitionError(f"{key}.length_m", length, f"a fibre length in m, {lo:g}..{hi:g} (0: no propagation)")
    return rate, float(length)


@dataclass
class NodePorts:
    """One node of the fabric: id, role, port architecture (``assignment``), ports
    (config), peer node per port and the peer's port number on that link, each port's
    rate (emulation bit/s), the node's D and ``lookahead_ns`` (the switch option: M of a
    mechanism that decides late, emulation ns; None: its default); ``mechanism`` the
    mechanism installed on its ports with ``options``."""

    node_id: int
    name: str
    role: str
    assignment: Assignment
    ports: list[PortConfig]
    peers: list[str]
    devs: list[str]
    netns: str
    peer_ports: list[int] = dataclasses.field(default_factory=list)
    rates_bps: list[float] = dataclasses.field(default_factory=list)
    tdf: float = 1.0
    lookahead_ns: int | None = None
    ifindex_of_port: dict[int, int] | None = None  # known once the programs are attached
    #: its optswitch attachments (bpf.attach_nodes rows), empty until attached, and
    #: the reads_waiting its programs were loaded with
    attached: list[dict] = dataclasses.field(default_factory=list)
    loaded_reads_waiting: bool = False
    mechanism: Mechanism | None = None  # installed by OpticalFabric.setup
    options: object = None  # the options it was installed with

    @property
    def context(self) -> NodeContext:
        """What its mechanism needs to know of it (node id, D, port rates and
        propagation, host ports, lookahead)."""
        return NodeContext(self.tdf, tuple(self.rates_bps), tuple(p.peer_host for p in self.ports), self.node_id,
                           tuple(p.prop_ns for p in self.ports), self.lookahead_ns)

    @property
    def holds(self) -> tuple[bool, ...]:
        """Per port: whether its architecture's mechanism holds the packets it sends."""
        if self.assignment.arch.realisation.name != HOLDING:
            return tuple(False for _ in self.ports)
        return self.assignment.mechanism.holds(self.devs, self.context)

    @property
    def restamps(self) -> tuple[bool, ...]:
        """Per port: whether the packets it sends carry their arrival at this node as
        stamp (the peer then takes them as arriving when they come: ``peer_holds``)."""
        if self.assignment.arch.realisation.name != HOLDING:
            return tuple(False for _ in self.ports)
        return self.assignment.mechanism.restamps(self.devs, self.context)

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
        self._reloads = 0  # program reloads so far (bpf.reload_nodes' generation)
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
        peer_port: dict[tuple[str, int], int] = {}
        for a, pa, b, pb, _info in emu.port_links:
            peer_port[(a, pa)], peer_port[(b, pb)] = pb, pa
        for node_id, name in enumerate([*hosts, *switches]):
            node = emu.nodes[name]
            ports, peer_names, rates, node_tdf = [], [], [], 1.0
            for idx in range(len(node.intfs)):
                peer, info = peers[name][idx]
                sw = emu.nodes[name] if name in switches else emu.nodes[peer]
                link_rate, length = link_options(info, f"link {'-'.join(sorted((name, peer)))}")
                rate = link_rate if link_rate is not None else sw.rate_bps  # type: ignore[attr-defined]
                tdf = node_tdf = sw.tdf  # type: ignore[attr-defined]
                ports.append(PortConfig(
                    ps_per_byte=layout.ps_per_byte(rate / tdf),
                    prop_ns=round(propagation_delay_s(length) * tdf * 1e9),
                    peer_host=peer in hosts))
                peer_names.append(peer)
                rates.append(rate / tdf)
            lookahead = None
            if name in switches:
                role, assignment = node.role, node.assignment
                assignment.check(ports=len(ports), role=role, key=f"{name}.arch")
                lookahead = getattr(node, "params", {}).get("lookahead_ns")
            else:
                role, assignment = "host", HOST_ASSIGNMENT
            self.nodes[name] = NodePorts(node_id, name, role, assignment, ports, peer_names,
                                         list(node.intfs), node.netns,
                                         [peer_port[(name, i)] for i in range(len(ports))], rates, node_tdf,
                                         lookahead)
        for np in self.nodes.values():  # checked before anything is installed
            np.assignment.options(np.context, key=f"{np.name}.arch")
            np.assignment.packed(np.tdf, key=f"{np.name}.arch")  # durations dilated by D in range
        self._set_peer_holds()

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
        attached = bpf.attach_nodes(led, self.pin_dir, [self._attachment(np) for np in self.nodes.values()])
        for np, att in zip(self.nodes.values(), attached):
            np.attached, np.loaded_reads_waiting = att, np.assignment.arch.reads_waiting
            ifx = {r["dev"]: r["ifindex"] for r in att}
            np.ports = [dataclasses.replace(p, ifindex=ifx[d]) for p, d in zip(np.ports, np.devs)]
            np.ifindex_of_port = {i: ifx[d] for i, d in enumerate(np.devs)}
        self._write_configs()
        self.set_routing(flow_hash=any(getattr(self.emu.nodes[s], "flow_hash", False) for s in self.switches))

    def set_routing(self, *, flow_hash: bool = False, single: bool = False) -> None:
        """Write the routes (:meth:`routes`): every equal-cost port, chosen per packet at
        random or, with ``flow_hash``, per flow by a hash of its addresses and ports;
        ``single``: one port per (switch, destination), the lowest (a static route per
        pair, which XCP's probes need: :func:`testbed.optical.xcpplan.single_routes`)."""
        routes = self.routes()
        if single:
            routes = single_routes(routes)
        maps.set_routes(self.pin_dir, routes, flow_hash=flow_hash and not single)

    def _install(self, np: NodePorts, *, fresh: bool = False) -> None:
        """Install the mechanism of ``np``'s realisation on its ports (the root qdiscs
        are recorded in the ledger by :meth:`setup`), unless it is installed already
        with the same options. ``fresh``: a holding mechanism is installed anew
        (removed first: its counters and burst ids start again) even when unchanged."""
        mech = np.assignment.mechanism
        options = np.assignment.options(np.context, key=f"{np.name}.arch")
        if fresh and mech == np.mechanism and any(np.holds):
            mech.reset(np.netns, np.devs, options, self.emu.ledger, np.context)
            np.options = options
        elif mech != np.mechanism or options != np.options:
            if np.mechanism is not None and np.mechanism != mech:
                np.mechanism.remove(np.netns, np.devs, np.context)
            mech.install(np.netns, np.devs, options, self.emu.ledger, np.context)
            np.mechanism, np.options = mech, options

    def _set_peer_holds(self) -> None:
        """``peer_holds`` of every port: its peer node sends on this link packets stamped
        with their arrival at the peer (a holding mechanism that ``restamps``)."""
        restamps = {n: np.restamps for n, np in self.nodes.items()}
        for np in self.nodes.values():
            np.ports = [dataclasses.replace(p, peer_holds=restamps[peer][pp])
                        for p, peer, pp in zip(np.ports, np.peers, np.peer_ports)]

    def holding_state(self) -> dict[tuple[str, str], Any]:
        """{(node, device): the kernel's state of the qdisc holding that port's packets}
        for every port where a node's mechanism holds packets (obs-edge: an
        ``obsburst.QdiscState`` with options and counters since the last
        :meth:`setup` / :meth:`reconfigure`, which installs these qdiscs anew)."""
        out: dict[tuple[str, str], Any] = {}
        for np in self.nodes.values():
            if np.mechanism is not None and any(np.holds):
                for dev, state in np.mechanism.read(np.netns, np.devs, np.context).items():
                    out[(np.name, dev)] = state
        return out

    def release(self) -> list[str]:
        """Take the holding qdiscs off every node (before the ledger's teardown: then no
        namespace still being destroyed holds a reference to their module, which the
        ledger can remove). Returns error texts (empty when all went)."""
        errors = []
        for np in self.nodes.values():
            if np.mechanism is not None and any(np.holds):
                try:
                    np.mechanism.remove(np.netns, np.devs, np.context)
                    np.mechanism = None
                except (TestbedError, OSError) as exc:  # teardown goes on; the ledger removes the rest
                    errors.append(f"{np.name}: removing {np.assignment.mechanism.name}: {exc}")
        return errors

    @staticmethod
    def _attachment(np: NodePorts) -> bpf.NodeAttachment:
        return bpf.NodeAttachment(np.node_id, np.netns, np.devs, is_switch=np.role != "host",
                                  reads_waiting=np.assignment.arch.reads_waiting)

    def _reload_programs(self) -> None:
        """Load anew the programs of every attached node whose architecture's
        ``reads_waiting`` differs from its programs' (the egress of an ob/sb/wcsb node
        scans what waits before deciding; the others' do not): one loader process,
        programs swapped on their devices (bpf.reload_nodes)."""
        stale = [np for np in self.nodes.values()
                 if np.attached and np.loaded_reads_waiting != np.assignment.arch.reads_waiting]
        if not stale:
            return
        self._reloads += 1
        fresh = bpf.reload_nodes(self.emu.ledger, self.pin_dir,
                                 [(self._attachment(np), np.attached) for np in stale], self._reloads)
        for np, att in zip(stale, fresh):
            np.attached, np.loaded_reads_waiting = att, np.assignment.arch.reads_waiting

    def _write_configs(self) -> None:
        maps.configure_nodes(self.pin_dir, [
            maps.NodeConfig(np.node_id, np.assignment, np.ports, np.ifindex_of_port, np.tdf)
            for np in self.nodes.values()])

    def reconfigure(self, assignments: Mapping[str, Assignment]) -> None:
        """Give each node named in ``assignments`` ({node: Assignment}) its port
        architecture (the others keep theirs) and reset the fabric as if new: every
        node's state, counters and the fidelity monitor zeroed; a node whose
        architecture is realised by another mechanism (or the same with other options)
        gets that mechanism's qdiscs, and holding qdiscs are installed anew (their
        counters and burst ids start again; :meth:`holding_state` reads them). Lets
        one emulation serve several points (building it costs minutes under software
        emulation). A node whose architecture reads what waits in it (ob, sb, wcsb)
        and whose programs were loaded for one that does not, or the reverse, gets its
        programs loaded anew (seconds per node under software emulation). Everything
        is checked before anything changes: raises
        DefinitionError for a node not in the fabric, or an architecture that does not
        fit the node's role or port count, or whose mechanism's options or dilated
        durations do not fit it."""
        for name, a in assignments.items():
            np = self.nodes.get(name)
            if np is None:
                raise DefinitionError("node", name, "a node of the optical fabric: " + ", ".join(self.nodes))
            a.check(ports=len(np.ports), role=np.role, key=f"{name}.arch")
            a.options(np.context, key=f"{name}.arch")
            a.packed(np.tdf, key=f"{name}.arch")
        for name, a in assignments.items():
            np = self.nodes[name]
            np.assignment = a
            if name in self.switches:
                self.emu.nodes[name].assignment = a
        for np in self.nodes.values():
            self._install(np, fresh=True)
        self._reload_programs()
        self._set_peer_holds()
        self._write_configs()
        maps.reset_monitor(self.pin_dir)

    def set_node_options(self, name: str, options: object) -> None:
        """Install node ``name``'s holding mechanism anew with ``options`` instead of its
        architecture's (options that depend on the point, not the node: the XCP pacers'
        classes, rates and epoch). Its counters start again; the next
        :meth:`reconfigure` installs the architecture's options. Raises DefinitionError
        for a node not in the fabric or whose architecture holds no packets."""
        np = self.nodes.get(name)
        if np is None:
            raise DefinitionError("node", name, "a node of the optical fabric: " + ", ".join(self.nodes))
        if np.mechanism is None or not any(np.holds):
            raise DefinitionError(f"{name}.arch", np.assignment.spec, "an architecture whose mechanism holds packets")
        np.mechanism.reset(np.netns, np.devs, options, self.emu.ledger, np.context)
        np.options = options

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
        for h, ip in self.host_ips().items():
            for node, ports in next_hops(adj, h, transit=set(self.switches)).items():
                if node in self.switches:
                    out[(self.nodes[node].node_id, ip)] = ports
        return out

    def shapes(self) -> list[NodeShape]:
        """Every node's shape (name, id, role, namespace, per port device, peer,
        emulation rate and propagation): what :func:`testbed.optical.xcpplan.plan` reads."""
        return [NodeShape(np.name, np.node_id, np.role, np.netns, tuple(np.devs), tuple(np.peers),
                          tuple(np.rates_bps), tuple(p.prop_ns for p in np.ports)) for np in self.nodes.values()]

    def host_ips(self) -> dict[str, str]:
        """{host name: IPv4} of the fabric's hosts."""
        return {h: self.emu.nodes[h].ip for h in self.hosts}  # type: ignore[attr-defined]

    def counters(self) -> list[dict]:
        """One row per (node, port): the qdisc releasing the port's packets, decisions,
        bytes, busy time, occupancy, receive. On a node whose holding mechanism takes
        the decisions (``ib``'s voq qdiscs: ``Mechanism.port_counters``), the decision
        columns are its and it adds its own (``testbed.optical.voq.port_row``)."""
        states = maps.read_states(self.pin_dir, {np.node_id: len(np.ports) for np in self.nodes.values()})
        rows = []
        for np in self.nodes.values():
            st = states.get(np.node_id)
            if st is None:
                continue
            qdiscs = (np.mechanism or np.assignment.mechanism).plan(np.devs, np.context)
            decided = np.mechanism.port_counters(np.netns, np.devs, np.context) \
                if np.mechanism is not None and any(np.holds) else {}
            for p, (pc, ps) in enumerate(zip(np.ports, st["ports"])):
                rows.append({"node": np.name, "model": np.model, "n_e": np.n_e, "port": p,
                             "intf": np.devs[p], "peer": np.peers[p], "qdisc": qdiscs[np.devs[p]],
                             "cut_through": ps["cut"], "buffered": ps["buffered"],
                             "oeo": ps["buffered"], "dropped": ps["dropped"], "bytes": ps["bytes"],
                             "busy_ns": ps["busy_ns"], "max_occ_bytes": ps["max_occ_bytes"],
                             "node_max_occ_bytes": st["max_occ_bytes"],
                             "node_occ_overflow": st["occ_overflow"],
                             "node_bout_overflow": st["bout_overflow"], "rx": ps["rx"],
                             "unmodelled": ps["nocfg"], "last_dep_ns": ps["last_dep_ns"],
                             "last_rx_real_ns": ps["last_rx_real_ns"],
                             "last_rx_stamp_ns": ps["last_rx_stamp_ns"],
                             **decided.get(np.devs[p], {})})
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
