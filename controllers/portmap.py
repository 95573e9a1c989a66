"""The E3 fabric as the controller sees it, and the flow tables it wants (pure Python).

``PortMap`` is the port map of a realised leaf-spine (topologies/leafspine.py): which
OpenFlow port of which switch leads where. It is built from ``Emulation.port_links``
by the testbed and handed to the controller as JSON. ``desired_flows`` and
``desired_ports`` turn an OSS state (the circuits a scheduler wants) into every switch's
flow table and the ToRs' special-port states; the os-ken glue only applies differences.

Forwarding is IPv4 by destination (ARP goes to the controller, which relays it to the
target host's port). Leaf-spine paths (``paths``):

- ``single``: one path per ToR pair over the regular uplinks, spine ``(x + y) mod
  spines`` (the paper's Mininet fabric evidently gave each ToR pair one 1 Gb/s path;
  see docs/e3.md); the special link's leaf-spine position then only carries capacity
  the routing does not use, as a spanning tree would leave it;
- ``spread``: destination hosts spread over every up uplink, the special one included
  (all installed capacity in use; diverting the special link then removes capacity).

A circuit (i <-> j) on the OSS carries either all traffic between ToRs i and j (UT) or
only the listed (source IP, destination IP) pairs, both directions (DT, on demand).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

ETH_IP = 0x0800
ETH_ARP = 0x0806
PRIO_ARP, PRIO_HOST, PRIO_PAIR, PRIO_TOR, PRIO_ROUTE, PRIO_OSS = 1000, 500, 300, 200, 100, 100
PATHS = ("single", "spread")


@dataclass(frozen=True)
class Circuit:
    """OSS circuit between ToRs ``a`` and ``b`` (names); ``pairs`` None = all traffic
    between them, else the (src_ip, dst_ip) pairs it carries (each in both directions)."""

    a: str
    b: str
    pairs: frozenset[tuple[str, str]] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b,
                "pairs": None if self.pairs is None else sorted([list(p) for p in self.pairs])}


OssState = frozenset  # frozenset[Circuit]


@dataclass(frozen=True)
class Flow:
    """One flow entry: priority, match (sorted (field, value) items; an IPv4 value with
    a mask is "a.b.c.d/len"), output port (an int, or "controller")."""

    priority: int
    match: tuple[tuple[str, Any], ...]
    out: int | str


@dataclass
class PortMap:
    """Port map of the leaf-spine; all ports are OpenFlow port numbers."""

    tors: list[str]
    spines: list[str]
    oss: str
    cluster: dict[str, int]                       # tor -> cluster index
    hosts: dict[str, dict[str, Any]]              # host -> {"ip", "tor", "port"}
    uplinks: dict[str, dict[str, list[int]]]      # tor -> spine -> [tor port, spine port]
    special: dict[str, dict[str, Any]]            # tor -> {"spine", "ls": [tor p, spine p], "oss": [tor p, oss p]}
    bridges: dict[str, str] = field(default_factory=dict)  # switch -> OVS bridge name
    paths: str = "single"

    # -- construction ---------------------------------------------------------------
    @classmethod
    def from_emulation(cls, emu: Any, paths: str = "single") -> "PortMap":
        """From a realised ``LeafSpine`` (testbed.net.Emulation): OVS ports are numbered
        from 1 in interface order (testbed.net.OVSSwitch)."""
        info = {n: dict(emu.topo.nodeInfo(n)) for n in emu.topo.switches()}
        roles = {n: i.get("role") for n, i in info.items()}
        fab = cls(tors=sorted((n for n, r in roles.items() if r == "tor"), key=lambda n: info[n]["index"]),
                  spines=sorted((n for n, r in roles.items() if r == "spine"), key=lambda n: info[n]["index"]),
                  oss=next(n for n, r in roles.items() if r == "oss"),
                  cluster={n: int(i["cluster"]) for n, i in info.items() if roles[n] == "tor"},
                  hosts={}, uplinks={}, special={}, paths=paths)
        for a, ia, b, ib, linfo in emu.port_links:
            purpose = linfo.get("purpose")
            ends = {a: ia + 1, b: ib + 1}
            if purpose == "host":
                host, tor = (a, b) if a not in roles else (b, a)
                fab.hosts[host] = {"ip": emu[host].ip, "tor": tor, "port": ends[tor]}
                continue
            tor = a if roles.get(a) == "tor" else b
            other = b if tor == a else a
            if purpose == "uplink":
                fab.uplinks.setdefault(tor, {})[other] = [ends[tor], ends[other]]
            elif purpose == "special-ls":
                fab.special.setdefault(tor, {}).update(spine=other, ls=[ends[tor], ends[other]])
            elif purpose == "special-oss":
                fab.special.setdefault(tor, {})["oss"] = [ends[tor], ends[other]]
        fab.bridges = {n: getattr(emu[n], "bridge", n) for n in info}
        fab.check()
        return fab

    def check(self) -> None:
        if self.paths not in PATHS:
            raise ValueError(f"paths {self.paths!r} not in {PATHS}")
        for t in self.tors:
            if set(self.uplinks.get(t, {})) != set(self.spines):
                raise ValueError(f"ToR {t} lacks an uplink to some spine: {self.uplinks.get(t)}")
            sp = self.special.get(t, {})
            if not {"spine", "ls", "oss"} <= set(sp):
                raise ValueError(f"ToR {t} lacks its special link (both positions): {sp}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "PortMap":
        fab = cls(**d)
        fab.check()
        return fab

    # -- queries --------------------------------------------------------------------
    def tor_index(self, tor: str) -> int:
        return self.tors.index(tor)

    def host_by_ip(self) -> dict[str, str]:
        return {h["ip"]: name for name, h in self.hosts.items()}

    def tor_of_ip(self, ip: str) -> str | None:
        name = self.host_by_ip().get(ip)
        return self.hosts[name]["tor"] if name else None

    def cluster_pairs(self, src_cluster: int = 0, dst_cluster: int = 1) -> list[tuple[str, str]]:
        """The paper's ToR pairs: k-th ToR of the source cluster with the k-th of the
        destination cluster (the workload's sender -> receiver ToRs)."""
        a = [t for t in self.tors if self.cluster[t] == src_cluster]
        b = [t for t in self.tors if self.cluster[t] == dst_cluster]
        return list(zip(a, b))

    def switches(self) -> list[str]:
        return [*self.spines, *self.tors, self.oss]


def diverted(state: frozenset) -> set[str]:
    """ToRs whose special link is on the OSS in ``state``."""
    return {t for c in state for t in (c.a, c.b)}


def desired_ports(fab: PortMap, state: frozenset) -> dict[tuple[str, int], bool]:
    """(ToR, port) -> administratively up, for both positions of every special link."""
    div = diverted(state)
    out: dict[tuple[str, int], bool] = {}
    for t in fab.tors:
        sp = fab.special[t]
        out[(t, sp["ls"][0])] = t not in div
        out[(t, sp["oss"][0])] = t in div
    return out


def _match(**kw: Any) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(kw.items()))


def _ip_flow(prio: int, out: int, **kw: Any) -> Flow:
    return Flow(prio, _match(eth_type=ETH_IP, **kw), out)


def desired_flows(fab: PortMap, state: frozenset) -> dict[str, frozenset[Flow]]:
    """Every switch's flow table for OSS ``state`` (a frozenset of Circuit)."""
    div = diverted(state)
    tables: dict[str, set[Flow]] = {s: set() for s in fab.switches()}
    for t in fab.tors:
        tables[t].add(Flow(PRIO_ARP, _match(eth_type=ETH_ARP), "controller"))
    for s in fab.spines:
        tables[s].add(Flow(PRIO_ARP, _match(eth_type=ETH_ARP), "controller"))
    # hosts on their own ToR
    for name, h in fab.hosts.items():
        tables[h["tor"]].add(_ip_flow(PRIO_HOST, h["port"], ipv4_dst=h["ip"]))
    # leaf-spine routes
    for name, h in sorted(fab.hosts.items()):
        y, hidx = h["tor"], _host_index(name)
        for x in fab.tors:
            if x == y:
                continue
            cands = _uplink_candidates(fab, x, y, div)
            if not cands:
                continue
            pick = cands[(fab.tor_index(x) + fab.tor_index(y)) % len(cands)] if fab.paths == "single" \
                else cands[hidx % len(cands)]
            tables[x].add(_ip_flow(PRIO_ROUTE, pick[0], ipv4_dst=h["ip"]))
        for s in fab.spines:
            downs = _spine_down_ports(fab, s, y, div)
            if downs:
                tables[s].add(_ip_flow(PRIO_ROUTE, downs[hidx % len(downs)] if fab.paths == "spread" else downs[0],
                                       ipv4_dst=h["ip"]))
    # OSS circuits
    for c in state:
        pa, pb = fab.special[c.a]["oss"], fab.special[c.b]["oss"]
        tables[fab.oss].add(Flow(PRIO_OSS, _match(in_port=pa[1]), pb[1]))
        tables[fab.oss].add(Flow(PRIO_OSS, _match(in_port=pb[1]), pa[1]))
        if c.pairs is None:
            for x, y in ((c.a, c.b), (c.b, c.a)):
                for name, h in fab.hosts.items():
                    if h["tor"] == y:
                        tables[x].add(_ip_flow(PRIO_TOR, fab.special[x]["oss"][0], ipv4_dst=h["ip"]))
        else:
            for src, dst in c.pairs:
                for s_ip, d_ip in ((src, dst), (dst, src)):
                    x = fab.tor_of_ip(s_ip)
                    if x in (c.a, c.b):
                        tables[x].add(_ip_flow(PRIO_PAIR, fab.special[x]["oss"][0], ipv4_src=s_ip, ipv4_dst=d_ip))
    return {s: frozenset(f) for s, f in tables.items()}


def _host_index(name: str) -> int:
    return int(name.rpartition("x")[2]) if "x" in name else 0


def _uplink_candidates(fab: PortMap, x: str, y: str, div: set[str]) -> list[tuple[int, str]]:
    """(ToR x port, spine) through which x reaches ToR y in the leaf-spine."""
    out = []
    for s in fab.spines:
        if not _spine_down_ports(fab, s, y, div):
            continue
        out.append((fab.uplinks[x][s][0], s))
        sp = fab.special[x]
        if fab.paths == "spread" and sp["spine"] == s and x not in div:
            out.append((sp["ls"][0], s))
    return out


def _spine_down_ports(fab: PortMap, s: str, y: str, div: set[str]) -> list[int]:
    ports = [fab.uplinks[y][s][1]]
    sp = fab.special[y]
    if fab.paths == "spread" and sp["spine"] == s and y not in div:
        ports.append(sp["ls"][1])
    return ports
