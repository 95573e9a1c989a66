"""Emulated nodes and links: named network namespaces, veth pairs and qdiscs.

Topologies are described with Mininet's ``Topo`` API (``topologies/``); this module
realises them. It follows Mininet's layering (``Node`` -> ``Host``; switch classes in a
registry) but not its runtime: every command is an argument list, every object is
written to the run's ledger before it exists, names carry the run's token so nothing
that existed before is ever reused or deleted, and teardown is the ledger's.
"""

from __future__ import annotations

import ipaddress
import logging
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, ClassVar

from mininet.topo import Topo

from testbed import cmd, nsops, ovs, process
from testbed.errors import DefinitionError, LedgerError, TestbedError
from testbed.features import Feature
from testbed.ledger import Ledger
from testbed.nsops import netns_exists
from testbed.names import check_ifname, check_node_name
from testbed.optical import architectures
from testbed.optical.fabric import HOST_ASSIGNMENT, OpticalFabric, link_options
from testbed.optical.layout import MAX_PORTS

if TYPE_CHECKING:
    from testbed.traffic.control import AgentProcess

log = logging.getLogger(__name__)


class EmulationError(TestbedError):
    """The emulated network could not be built."""


@dataclass(frozen=True)
class LinkShape:
    """How one direction of a link behaves, in *emulation* units (already dilated).

    rate_bps: serialisation rate (HTB), None for unshaped. delay_s: one-way delay
    (netem). loss: drop probability 0..1 (netem). queue_packets: queue limit in packets.
    """

    rate_bps: float | None = None
    delay_s: float = 0.0
    loss: float = 0.0
    queue_packets: int = 1000

    @property
    def needs_netem(self) -> bool:
        return self.delay_s > 0 or self.loss > 0


class Node:
    """A network namespace ``<token>-<name>`` holding one emulated node."""

    def __init__(self, emu: "Emulation", name: str, **params: object) -> None:
        self.emu = emu
        self.name = check_node_name(name)
        self.params = params
        self.netns = f"{emu.token}-{name}"
        self.intfs: list[str] = []

    def start(self) -> None:
        """Configure the node; its namespace exists (Emulation.create_namespaces)."""
        nsops.configure_link("lo", self.netns)

    def run(self, argv: list[str], *, check: bool = True, timeout: float = 30.0,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside this node's namespace (``input`` on its stdin) and wait."""
        return cmd.run(argv, check=check, timeout=timeout, netns=self.netns, input=input)

    def popen(self, argv: list[str], *, stdout: IO | int | None = subprocess.DEVNULL,
              stderr: IO | int | None = subprocess.STDOUT, stop_signal: int = 15) -> subprocess.Popen:
        """Start a long-lived process in this node; recorded in the ledger."""
        return process.spawn(self.emu.ledger, argv, netns=self.netns, stop_signal=stop_signal, stdout=stdout,
                             stderr=stderr)

    def sysctl(self, key: str, value: str | int) -> None:
        """Set sysctl ``key`` (dotted) in this node's namespace; raises NsOpsError."""
        nsops.sysctl_write(self.netns, key, value)

    def sysctl_get(self, key: str) -> str:
        """Value of sysctl ``key`` in this node's namespace; raises NsOpsError."""
        return nsops.sysctl_read(self.netns, key)

    def new_intf_name(self) -> str:
        return check_ifname(f"{self.name}-eth{len(self.intfs)}")

    def shape_port(self, intf: str, shape: "LinkShape") -> None:
        """Apply ``shape`` (HTB + netem) to this node's port ``intf``."""
        apply_shape(self.emu.ledger, intf, self.netns, shape)

    def configure(self) -> None:
        """Called once all links exist."""


class Host(Node):
    """An end host: one IPv4 address (param ``ip``, CIDR) on its first interface and a
    default route out of it: on-link, or via the router at param ``gateway`` (an address
    in the host's subnet, e.g. E4's sender behind router r1)."""

    cls_name: ClassVar[str] = "host"

    def configure(self) -> None:
        nsops.add_address(self.intfs[0], self.netns, str(self.params["ip"]))
        gateway = self.params.get("gateway")
        nsops.set_default_route(self.intfs[0], self.netns, via=str(gateway) if gateway else None)

    @property
    def ip(self) -> str:
        return str(ipaddress.ip_interface(self.params["ip"]).ip)


class Router(Node):
    """A Linux router (as Mininet's LinuxRouter example): IPv4 forwarding between its
    ports, one address per port and static routes. Not a :class:`Host`: no traffic
    agent runs on it and ``Emulation.hosts()`` leaves it out.

    Each of its links gives the address of its end in link options ``ip1`` (the end of
    the link's first node) / ``ip2`` (CIDR, e.g. "10.0.12.1/24"); param ``routes`` is a
    sequence of ``(prefix, via)`` static routes ("10.0.2.0/24", "10.0.12.2"). Reverse-path
    filtering is off: a router on an asymmetric path (E4's r3 gets data from r1 directly
    and sends the ACKs back through r2) must accept packets on any port.
    Raises DefinitionError (naming ``<router>.routes``) for a malformed route; the ports'
    addresses are checked by :func:`check_router_ports` before anything exists."""

    cls_name: ClassVar[str] = "router"

    def __init__(self, emu: "Emulation", name: str, **params: object) -> None:
        super().__init__(emu, name, **params)
        self.port_addrs: dict[str, str] = {}
        self.routes = check_routes(params.get("routes", ()), key=f"{name}.routes")

    def start(self) -> None:
        super().start()
        self.sysctl("net.ipv4.ip_forward", 1)
        for scope in ("all", "default"):
            self.sysctl(f"net.ipv4.conf.{scope}.rp_filter", 0)
        self.sysctl("net.ipv6.conf.all.disable_ipv6", 1)
        self.sysctl("net.ipv6.conf.default.disable_ipv6", 1)

    def configure(self) -> None:
        for intf in self.intfs:
            nsops.add_address(intf, self.netns, self.port_addrs[intf])
            self.sysctl(f"net.ipv4.conf.{intf}.rp_filter", 0)
        for prefix, via in self.routes:
            nsops.replace_route(self.netns, prefix, via)

    def port_towards(self, via: str) -> str:
        """The port whose subnet holds next hop ``via``; raises EmulationError if none."""
        addr = ipaddress.IPv4Address(via)
        for intf, cidr in self.port_addrs.items():
            if addr in ipaddress.IPv4Interface(cidr).network:
                return intf
        raise EmulationError(f"{self.name}: no port in the subnet of next hop {via}")


def check_router_ports(topo: Topo) -> None:
    """Every router end of a link of ``topo`` has an address (link option ``ip1`` /
    ``ip2``, CIDR with a prefix below 32) and no other end has one; raises
    DefinitionError naming ``link <a>-<b>.<option>``."""
    routers = {n for n in topo.hosts() if host_class(topo, n) is Router}  # raises for unknown classes
    for a, b, info in topo.links(sort=True, withKeys=False, withInfo=True):
        for node, opt in ((a, "ip1"), (b, "ip2")):
            key, value = f"link {a}-{b}.{opt}", info.get(opt)
            if node not in routers:
                if value is not None:
                    raise DefinitionError(key, value, "no address: only a router's end takes one "
                                          "(a host has param ip)")
                continue
            try:
                iface = ipaddress.IPv4Interface(str(value))
            except ValueError:
                raise DefinitionError(key, value, f"the address of router {node}'s port: an IPv4 address "
                                      "with prefix length, e.g. 10.0.12.1/24") from None
            if iface.network.prefixlen == 32:
                raise DefinitionError(key, value, "an address with a prefix length below 32 (the link's subnet)")


def check_routes(routes: object, key: str) -> tuple[tuple[str, str], ...]:
    """``routes`` as ((prefix, via), ...) with a normalised prefix; raises
    DefinitionError naming ``key`` for anything else."""
    out = []
    try:
        items = list(routes)  # type: ignore[call-overload]
    except TypeError:
        raise DefinitionError(key, routes, "a sequence of (prefix, next hop) pairs") from None
    for item in items:
        try:
            prefix, via = item
            net = ipaddress.IPv4Network(str(prefix))
            hop = ipaddress.IPv4Address(str(via))
        except (TypeError, ValueError):
            raise DefinitionError(key, item, "a (prefix, next hop) pair such as "
                                  "('10.0.2.0/24', '10.0.12.2')") from None
        out.append((str(net), str(hop)))
    return tuple(out)


class Switch(Node):
    """Base of switch classes; a subclass decides where its ports live and declares
    its registry name (``cls`` in a topology's switch options) and kernel features."""

    #: the key of this class in SWITCH_CLASSES (``cls=`` in a Topo's switch options)
    cls_name: ClassVar[str]

    @classmethod
    def features(cls, info: dict[str, Any]) -> set[Feature]:
        """Kernel features a switch of this class with topology options ``info`` needs."""
        return set()


class BridgeSwitch(Switch):
    """A Linux bridge in its own namespace: an L2 learning switch needing no OVS."""

    cls_name = "bridge"

    def start(self) -> None:
        super().start()
        self.run(["ip", "link", "add", "br0", "type", "bridge"])
        self.run(["ip", "link", "set", "br0", "up"])

    def configure(self) -> None:
        for intf in self.intfs:
            self.run(["ip", "link", "set", intf, "master", "br0"])


class OVSSwitch(Switch):
    """An Open vSwitch bridge in the root namespace (standalone L2 unless a controller
    is given). Ports are root-namespace veth ends named ``<token><name>p<n>``.

    datapath: "system" (kernel module, the guest) or "netdev" (userspace, any host;
    then TX checksum offload is turned off on the hosts' interfaces, as OVS needs).
    """

    cls_name = "ovs"
    in_root_namespace = True

    @classmethod
    def features(cls, info: dict[str, Any]) -> set[Feature]:
        # "system" is the default; anything else (netdev, or a family's "auto" before
        # it is resolved at run time) needs at least the userspace datapath
        return {Feature.OVS_KERNEL if info.get("datapath", "system") == "system" else Feature.OVS_USERSPACE}

    def __init__(self, emu: "Emulation", name: str, **params: object) -> None:
        super().__init__(emu, name, **params)
        self._pending_shapes: dict[str, LinkShape] = {}

    @property
    def bridge(self) -> str:
        return check_ifname(f"{self.emu.token}{self.name}")

    def start(self) -> None:
        datapath = str(self.params.get("datapath", "system"))
        ovs.ensure_daemons(self.emu.ledger, kernel_datapath=datapath == "system")
        ovs.add_bridge(self.emu.ledger, self.bridge, datapath=datapath,
                       fail_mode=str(self.params.get("fail_mode", "standalone")),
                       controller=self.params.get("controller"))  # type: ignore[arg-type]

    def run(self, argv: list[str], *, check: bool = True, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        return cmd.run(argv, check=check, timeout=timeout)

    def new_intf_name(self) -> str:
        return check_ifname(f"{self.emu.token}{self.name}p{len(self.intfs) + 1}")

    def shape_port(self, intf: str, shape: "LinkShape") -> None:
        # ovs-vswitchd resets the root qdisc of a port without QoS when it joins the
        # bridge (and at later reconfigurations): shape it after add_port, below.
        self._pending_shapes[intf] = shape

    def configure(self) -> None:
        for n, intf in enumerate(self.intfs, start=1):
            # QoS linux-noop: OVS leaves the port's qdisc (our shape) alone
            ovs.add_port(self.bridge, intf, ofport=n, keep_qdisc=True)
            if intf in self._pending_shapes:
                apply_shape(self.emu.ledger, intf, None, self._pending_shapes.pop(intf))


class OpticalSwitch(Switch):
    """An optical packet switch in its own namespace: eBPF forwarding (per-packet ECMP,
    bpf_redirect) and on every port the eBPF decision of its port architecture, released
    by its architecture's mechanism (fq at the stamped departure time today; see
    docs/optical-switch.md and testbed/optical/).

    Params (paper units; ``tdf`` converts them): ``arch`` its port architecture, a spec
    of testbed/optical/architectures.py such as "hybrid:2", "all-optical",
    "electronic" (or an Assignment; the older ``model`` with ``n_e`` is read too;
    default hybrid with n_e = 1), ``role`` "core" (default) or "edge", ``rate_bps``
    port rate (default 10 Gbit/s), ``tdf`` time dilation D (default 1), ``flow_hash``
    per-flow instead of per-packet ECMP. Any number of ports (1..MAX_PORTS = 64). Link options
    ``length_m`` (default 10 m, 0 allowed) set each link's propagation delay and
    ``rate_bps`` (paper bit/s) its rate in both directions instead of the switch's
    (e.g. a source's access link). Raises DefinitionError (naming ``<name>.<param>``,
    or ``link <a>-<b>.<option>``) for a bad value.
    """

    cls_name = "optical"

    @classmethod
    def features(cls, info: dict[str, Any]) -> set[Feature]:
        """eBPF forwarding and port model on clsact with BTF maps, what the kernel
        mechanism of the switch's architecture needs (fq for every architecture decided
        at arrival; obs-edge's obsburst also modules) and what the hosts' NIC queue on
        the fabric needs (the hostnic module). Raises DefinitionError for a bad
        architecture."""
        role = info.get("role", architectures.DEFAULT_SWITCH_ROLE)
        assignment = architectures.switch_assignment(info, role=str(role), key="switch")
        return {Feature.CLSACT_BPF, Feature.BTF, *assignment.mechanism.features,
                *HOST_ASSIGNMENT.mechanism.features}

    def __init__(self, emu: "Emulation", name: str, **params: object) -> None:
        super().__init__(emu, name, **params)
        self.role = architectures.check_role(params.get("role", architectures.DEFAULT_SWITCH_ROLE),
                                             key=f"{name}.role", roles=architectures.SWITCH_ROLES)
        ports = sum(name in link for link in emu.topo.links())  # checked before anything exists
        if not 1 <= ports <= MAX_PORTS:
            raise DefinitionError(f"{name}.ports", ports, f"an optical switch of 1..{MAX_PORTS} ports (links)")
        self.assignment = architectures.switch_assignment(params, role=self.role, key=name, ports=ports)
        self.rate_bps = float(params.get("rate_bps", 10e9))  # type: ignore[arg-type]
        if not self.rate_bps > 0:
            raise DefinitionError(f"{name}.rate_bps", self.rate_bps, "a rate > 0 bit/s")
        self.tdf = float(params.get("tdf", 1.0))  # type: ignore[arg-type]
        if not 1.0 <= self.tdf <= 1e6:
            raise DefinitionError(f"{name}.tdf", self.tdf, "a factor 1 <= D <= 1e6")
        self.flow_hash = bool(params.get("flow_hash", False))

    def start(self) -> None:
        super().start()
        self.sysctl("net.ipv6.conf.all.disable_ipv6", 1)
        self.sysctl("net.ipv6.conf.default.disable_ipv6", 1)


SWITCH_CLASSES: dict[str, type[Switch]] = {c.cls_name: c for c in (OVSSwitch, BridgeSwitch, OpticalSwitch)}
#: node classes of a Topo's hosts (``addHost(name, cls="router")``; default "host")
HOST_CLASSES: dict[str, type[Node]] = {c.cls_name: c for c in (Host, Router)}


def host_class(topo: Topo, name: str) -> type[Node]:
    """The node class of host ``name`` of ``topo``; raises DefinitionError for a class
    the testbed does not have."""
    cls_name = str(dict(topo.nodeInfo(name)).get("cls", "host"))
    if cls_name not in HOST_CLASSES:
        raise DefinitionError(f"host {name}", cls_name, "a node class of testbed.net.HOST_CLASSES: "
                              + ", ".join(sorted(HOST_CLASSES)))
    return HOST_CLASSES[cls_name]


def end_hosts(topo: Topo) -> list[str]:
    """The names of ``topo``'s end hosts (its hosts that are not routers), sorted."""
    return [n for n in topo.hosts(sort=True) if issubclass(host_class(topo, n), Host)]


class Emulation:
    """Builds a Mininet ``Topo`` into namespaces and veth pairs; a context manager.

    ``with Emulation(topo, ledger, token) as emu:`` creates everything (recording it in
    ``ledger``) and on exit tears down, in reverse order, all that it created, also on
    exceptions and KeyboardInterrupt. Link options in the Topo (``addLink(a, b,
    shape=LinkShape(...))``) apply to both directions; ``shape1``/``shape2`` per end.
    Switch options: ``cls`` = a key of SWITCH_CLASSES, plus that class's params.
    """

    def __init__(self, topo: Topo, ledger: Ledger, token: str, *, offloads: bool = False) -> None:
        self.topo, self.ledger, self.token, self.offloads = topo, ledger, token, offloads
        self.nodes: dict[str, Node] = {}
        # "a-b" -> ((intf, netns) at a, (intf, netns) at b); netns None = root namespace
        self.links: dict[str, tuple[tuple[str, str | None], tuple[str, str | None]]] = {}
        # (node a, port index at a, node b, port index at b, link info), in creation order
        self.port_links: list[tuple[str, int, str, int, dict]] = []
        self.optical: OpticalFabric | None = None
        self._first_seq = len(ledger.entries)
        self._traffic_agent: AgentProcess | None = None

    def __enter__(self) -> "Emulation":
        try:
            self.build()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.teardown()

    def __getitem__(self, name: str) -> Node:
        return self.nodes[name]

    def hosts(self) -> list[Host]:
        return [n for n in self.nodes.values() if isinstance(n, Host)]

    def build(self) -> None:
        for i, name in enumerate(self.topo.hosts(sort=True), start=1):
            cls = host_class(self.topo, name)
            opts = dict(self.topo.nodeInfo(name))
            opts.pop("cls", None)
            if cls is Host:
                opts.setdefault("ip", f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}/8")
            self.nodes[name] = cls(self, name, **opts)
        for name in self.topo.switches(sort=True):
            opts = dict(self.topo.nodeInfo(name))
            cls_name = opts.pop("cls", "bridge")
            if cls_name not in SWITCH_CLASSES:
                raise EmulationError(f"switch {name}: class {cls_name!r} not in {sorted(SWITCH_CLASSES)}")
            self.nodes[name] = SWITCH_CLASSES[cls_name](self, name, **opts)
        check_router_ports(self.topo)
        optical = [n for n in self.nodes.values() if isinstance(n, OpticalSwitch)]
        for a, b, info in self.topo.links(sort=True, withKeys=False, withInfo=True):
            if any(isinstance(self.nodes[x], OpticalSwitch) for x in (a, b)):
                link_options(info, f"link {'-'.join(sorted((a, b)))}")  # checked before anything exists
        # a kernel module a mechanism needs is loaded (and ledgered) before the
        # namespaces, so that teardown removes it after them (their qdiscs hold it)
        hosts_mech = [HOST_ASSIGNMENT.mechanism] if optical else []
        for mech in dict.fromkeys([*hosts_mech, *(n.assignment.mechanism for n in optical)]):
            mech.prepare(self.ledger)
        self.create_namespaces([n.netns for n in self.nodes.values()
                                if not getattr(n, "in_root_namespace", False)])
        for node in self.nodes.values():
            node.start()
        for a, b, info in self.topo.links(sort=True, withKeys=False, withInfo=True):
            self.add_link(self.nodes[a], self.nodes[b], info)
        for node in self.nodes.values():
            node.configure()
        if any(isinstance(n, Router) for n in self.nodes.values()):
            self.static_neighbours()
        switches = [name for name, n in self.nodes.items() if isinstance(n, OpticalSwitch)]
        if switches:
            self.optical = OpticalFabric(self, switches, [h.name for h in self.hosts()])
            self.optical.setup()

    def create_namespaces(self, names: list[str]) -> None:
        """Create network namespaces ``names`` (recorded first) with one ``ip -batch``
        process: one ``ip netns add`` each cost ~1 s under software emulation.
        Raises LedgerError, touching nothing, if any of them exists already."""
        for name in names:
            if netns_exists(name):
                raise LedgerError(f"network namespace {name} already exists; not reusing it")
        for name in names:
            self.ledger.add("netns", name=name)
        if names:
            cmd.run(["ip", "-batch", "-"], input="".join(f"netns add {n}\n" for n in names), timeout=120)

    def add_link(self, a: Node, b: Node, info: dict) -> None:
        """A veth pair between ``a`` and ``b`` with each end's shape applied."""
        name_a, name_b = a.new_intf_name(), b.new_intf_name()
        ns_a = None if getattr(a, "in_root_namespace", False) else a.netns
        ns_b = None if getattr(b, "in_root_namespace", False) else b.netns
        for name, ns in ((name_a, ns_a), (name_b, ns_b)):
            if nsops.link_exists(name, ns):
                raise LedgerError(f"interface {name} already exists; not touching it")
        self.ledger.add("link", name=name_a, netns=ns_a, peer=name_b, peer_netns=ns_b)
        nsops.add_veth(name_a, ns_a, name_b, ns_b)
        a.intfs.append(name_a)
        b.intfs.append(name_b)
        for node, name, opt in ((a, name_a, "ip1"), (b, name_b, "ip2")):
            if isinstance(node, Router):  # checked by check_router_ports before anything exists
                node.port_addrs[name] = str(ipaddress.IPv4Interface(str(info[opt])))
        self.port_links.append((a.name, len(a.intfs) - 1, b.name, len(b.intfs) - 1, dict(info)))
        self.links[f"{a.name}-{b.name}"] = ((name_a, ns_a), (name_b, ns_b))
        for node, name, ns, shape in ((a, name_a, ns_a, info.get("shape1", info.get("shape"))),
                                      (b, name_b, ns_b, info.get("shape2", info.get("shape")))):
            # offloads off: one skb is one packet (shaping and pcaps are per packet);
            # OVS netdev needs TX checksum offload off on veth.
            nsops.configure_link(name, ns, mtu=info.get("mtu") or None, offloads=self.offloads)
            if shape is not None:
                node.shape_port(name, shape)

    def port_ip(self, node: Node, intf: str) -> str | None:
        """The IPv4 address of ``node``'s port ``intf`` (a router's port, a host's first
        interface), None if it has none."""
        if isinstance(node, Router):
            cidr = node.port_addrs.get(intf)
            return str(ipaddress.IPv4Interface(cidr).ip) if cidr else None
        if isinstance(node, Host) and node.intfs and intf == node.intfs[0]:
            return node.ip
        return None

    def static_neighbours(self) -> None:
        """Permanent neighbour entries at both ends of every link between two addressed
        ports (as Mininet's staticArp): a router's first packet to a next hop is not held
        for ARP, and never dropped beyond the unresolved queue (E4: the first packets of
        the moved flow onto the never-used r1 - r3 link were)."""
        for a_name, ia, b_name, ib, _ in self.port_links:
            a, b = self.nodes[a_name], self.nodes[b_name]
            (intf_a, ns_a), (intf_b, ns_b) = self.links[f"{a_name}-{b_name}"]
            ip_a, ip_b = self.port_ip(a, intf_a), self.port_ip(b, intf_b)
            if ip_a is None or ip_b is None:
                continue
            nsops.add_neighbour(intf_a, ns_a, ip_b, nsops.link_address(intf_b, ns_b))
            nsops.add_neighbour(intf_b, ns_b, ip_a, nsops.link_address(intf_a, ns_a))

    def traffic_agent(self, python: str = sys.executable) -> "AgentProcess":
        """The traffic agent serving every host of this emulation (testbed.traffic.agent),
        started with ``python`` on first use, or again when it has died; recorded in the
        ledger and stopped by :meth:`teardown`. Raises TrafficError when it cannot start."""
        from testbed.traffic.control import running

        self._traffic_agent = running(self._traffic_agent, self.ledger, python)
        return self._traffic_agent

    def teardown(self) -> None:
        agent, self._traffic_agent = self._traffic_agent, None
        errors: list[str] = []
        try:
            if agent is not None:
                agent.close()  # first: its sockets hold the namespaces
        finally:
            if self.optical is not None:
                # holding qdiscs (obsburst) off first: a namespace destroyed later,
                # asynchronously, would still hold their module when the ledger reaches it
                errors += self.optical.release()
            errors += self.ledger.teardown(since=self._first_seq, archive=False)
        if errors:
            raise EmulationError("teardown incomplete (run `testbed clean`):\n  " + "\n  ".join(errors))


def apply_shape(ledger: Ledger, dev: str, netns: str | None, shape: LinkShape) -> None:
    """HTB for rate, netem below it for delay and loss (as Mininet's TCLink does)."""
    ledger.add("qdisc", dev=dev, netns=netns, parent="root")
    tc = ["tc", "qdisc", "add", "dev", dev]
    netem = ["netem", "limit", str(shape.queue_packets)]
    if shape.delay_s > 0:
        netem += ["delay", f"{shape.delay_s * 1e6:.0f}us"]
    if shape.loss > 0:
        netem += ["loss", f"{shape.loss * 100:.6g}%"]
    if shape.rate_bps:
        rate = f"{shape.rate_bps:.0f}bit"
        # Burst: one timer tick's worth of bytes (1 ms) but at least two jumbo frames.
        burst = str(max(int(shape.rate_bps / 8 * 1e-3), 2 * 9100))
        cmd.run([*tc, "root", "handle", "1:", "htb", "default", "1"], netns=netns)
        cmd.run(["tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb",
                 "rate", rate, "ceil", rate, "burst", burst, "cburst", burst], netns=netns)
        if shape.needs_netem:
            cmd.run([*tc, "parent", "1:1", "handle", "10:", *netem], netns=netns)
        else:
            cmd.run([*tc, "parent", "1:1", "handle", "10:", "pfifo", "limit", str(shape.queue_packets)],
                    netns=netns)
    elif shape.needs_netem:
        cmd.run([*tc, "root", "handle", "10:", *netem], netns=netns)


def pcap_path(results: Path, link: str) -> Path:
    return results / "pcap" / f"{link}.pcap"
