"""The XCP agent's CPU per control interval on E5's NSFNET (``make bench AREAS=xcp``).

Why: in the guest the agent must finish an interval's step (read, decide, advance the
probes, hand over the rate changes) before the earliest rate change it produces is due:
E + (k+1) d_e + (shortest probe round trip) + Delta after the interval's end. On NSFNET
at scale 20 that is about 76 ms of emulation after the boundary, and e5-paper's XCP runs
spent 56-90 ms of guest CPU per step (their ``xcp.json``), so a few percent of their rate
changes were late (docs/e5.md, "The XCP loop was not exact"). This measures, on
this machine's CPU, the agent's own step (``controllers.xcp_agent.XcpAgent.step``) with
a synthetic data plane (every macroflow active, every output loaded; no system call),
and the parsing of the pacers' class dumps (``testbed.optical.xcppace.classes_of``), the
largest part of its reading in Python. The system calls (14 bpf(2) lookups, two netlink
dumps per edge, the rate requests) are not measured here. The guest's figures are
several times these (its clock counts instructions at 1 ns each).

Nothing here touches the kernel; it runs anywhere.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from controllers.xcp_agent import AgentConfig, RateChange, XcpAgent, config_from_plan
from testbed.benchmarks import Measurement
from testbed.optical import qdiscnl, xcppace
from testbed.optical.routes import next_hops
from testbed.optical.xcpplan import NodeShape, plan, single_routes
from topologies import nsfnet

#: E5's paper defaults (docs/e5.md): 1 Gbit/s links, edge links 0.1 ms, scale 20 = D
RATE_BPS, EDGE_PROP_S, TDF = 1e9, 0.1e-3, 20.0
#: intervals stepped per sample (after the first, which activates the macroflows)
STEPS = 40
SAMPLES = 5


def nsfnet_shapes(tdf: float = TDF) -> tuple[list[NodeShape], dict[str, str], dict[tuple[int, str], list[int]]]:
    """E5's NSFNET fabric as the plan sees it: core ``c<i>`` (its core links in the data
    file's order, then its edge), edge ``e<i>`` (uplink, host), host ``h<i>``; emulation
    rates and propagation at ``tdf``; routes over minimum-hop paths."""
    links = nsfnet.load_links()
    peers: dict[str, list[tuple[str, float]]] = {}
    for link in links:
        a, b = nsfnet.core(link.a), nsfnet.core(link.b)
        peers.setdefault(a, []).append((b, link.delay_s))
        peers.setdefault(b, []).append((a, link.delay_s))
    for i in range(14):
        c, e, h = nsfnet.core(i), nsfnet.edge(i), nsfnet.host(i)
        peers[c].append((e, EDGE_PROP_S))
        peers[e] = [(c, EDGE_PROP_S), (h, EDGE_PROP_S)]
        peers[h] = [(e, EDGE_PROP_S)]
    nodes, ids = [], {}
    for n, (name, ps) in enumerate(sorted(peers.items())):
        ids[name] = n
        role = {"c": "core", "e": "edge", "h": "host"}[name[0]]
        nodes.append(NodeShape(name, n, role, f"ns-{name}", tuple(f"{name}-eth{k}" for k in range(len(ps))),
                               tuple(p for p, _ in ps), tuple(RATE_BPS / tdf for _ in ps),
                               tuple(round(d * tdf * 1e9) for _, d in ps)))
    hosts = {nsfnet.host(i): f"10.0.{i}.1" for i in range(14)}
    adj = {n: list(enumerate(p for p, _ in ps)) for n, ps in peers.items()}
    switches = {n for n in peers if n[0] != "h"}
    routes = {}
    for h, ip in hosts.items():
        for node, ports in next_hops(adj, h, transit=switches).items():
            if node in switches:
                routes[(ids[node], ip)] = ports
    return nodes, hosts, routes


def nsfnet_config(*, separate_acks: bool, tdf: float = TDF, epoch_ns: int = 10**12) -> AgentConfig:
    """The agent's configuration for E5's NSFNET (``pacing = xcp-ack`` when
    ``separate_acks``): 182 or 364 macroflows, 2 ms rate delay, 5 ms margin."""
    nodes, hosts, routes = nsfnet_shapes(tdf)
    p = plan(nodes, hosts, single_routes(routes), tdf, separate_acks=separate_acks)
    return config_from_plan(p, epoch_ns=epoch_ns, tdf=tdf, rate_delay_s=0.002, margin_ns=5_000_000)


@dataclass
class _Slot:
    interval: int | None
    bytes: int
    packets: int
    drops: int
    qmin_ns: int | None


@dataclass
class _Iv:
    bytes: int
    packets: int
    qmin_ns: int | None
    class_bytes: Sequence[int]
    class_packets: Sequence[int]


class LoadedPlane:
    """A data plane whose clock stands at each deadline (the agent is never late), every
    controlled output carries ``load`` of its capacity with a small persistent queue and
    every class of every pacer releases bytes in every interval."""

    def __init__(self, cfg: AgentConfig, load: float = 0.9) -> None:
        self.cfg, self.t = cfg, cfg.epoch_ns
        self.d_e = cfg.interval_ns
        per_iv = lambda c: round(load * c * cfg.interval_s / 8)  # noqa: E731 (paper bytes per interval)
        self.core_bytes = {c.name: {o.port: per_iv(o.capacity_bps) for o in c.outputs} for c in cfg.cores}
        ncls = max(m.cls for m in cfg.macroflows) + 1
        self.edge_cls = {e.name: ncls for e in cfg.edges}
        self.edge_bytes = {e.name: per_iv(e.capacity_bps) for e in cfg.edges}
        self.rate_changes = 0

    def now_ns(self) -> int:
        return self.t

    def sleep_until(self, t_ns: int) -> None:
        self.t = max(self.t, t_ns)

    def _k(self) -> int:
        return (self.t - self.cfg.epoch_ns) // self.d_e - 1

    def read_core(self, node: str) -> Mapping[int, Sequence[_Slot]]:
        k = self._k()
        out = {}
        for port, b in self.core_bytes[node].items():
            slots: list[_Slot] = [_Slot(None, 0, 0, 0, None)] * 4
            for j in range(max(0, k - 3), k + 1):
                slots[j & 3] = _Slot(j, b, b // 1500, 0, 20_000)
            out[port] = slots
        return out

    def read_pacer(self, edge: str) -> Mapping[int, _Iv]:
        k, n, b = self._k(), self.edge_cls[edge], self.edge_bytes[edge]
        return {j: _Iv(b, b // 1500, 10_000, (b // n,) * n, (b // n // 1500,) * n) for j in range(max(0, k - 3), k + 1)}

    def set_rates(self, edge: str, changes: list[RateChange]) -> None:
        self.rate_changes += len(changes)


def step_cpu(cfg: AgentConfig, steps: int = STEPS) -> list[float]:
    """Thread CPU (ms) of each of ``steps`` agent steps after the first two."""
    dp = LoadedPlane(cfg)
    agent = XcpAgent(cfg, dp)
    agent.start()
    out = []
    for i in range(steps + 2):
        dp.sleep_until(agent.deadline())
        c0 = time.thread_time_ns()
        agent.step()
        if i >= 2:
            out.append((time.thread_time_ns() - c0) / 1e6)
    return out


def class_dump(nclasses: int, k: int = 100) -> list[bytes]:
    """The RTM_NEWTCLASS messages (netlink header removed) of an xcppace class dump as
    the kernel sends them (tcmsg, TCA_KIND, TCA_STATS2 with basic, queue and the class
    counters), every class's ring holding intervals k-3..k."""
    members = len(xcppace.CLASS_XSTATS_MEMBERS)
    out = []
    for c in range(nclasses):
        ring = [x for j in range(xcppace.SLOTS) for x in (k - xcppace.SLOTS + 1 + j, 1500, 1)]
        app = struct.pack(f"={members + len(ring)}Q", *([0] * members), *ring)
        stats = (qdiscnl.attr(qdiscnl.TCA_STATS_BASIC, bytes(16)) + qdiscnl.attr(qdiscnl.TCA_STATS_QUEUE, bytes(20))
                 + qdiscnl.attr(qdiscnl.TCA_STATS_APP, app))
        out.append(struct.pack("=BxxxiIII", 0, 3, 0x10000 + c + 1, 0x10000, 0)
                   + qdiscnl.attr(qdiscnl.TCA_KIND, xcppace.KIND.encode() + b"\0")
                   + qdiscnl.attr(qdiscnl.TCA_STATS2, stats))
    return out


def parse_cpu(cfg: AgentConfig, reps: int = 20) -> float:
    """Thread CPU (ms) to parse one interval's class dumps of every edge's pacer
    (``xcppace.classes_of``, what ``xcppace.read`` spends on classes)."""
    nclasses = 2 * (len(cfg.edges) - 1)
    msgs = class_dump(nclasses)
    c0 = time.thread_time_ns()
    for _ in range(reps):
        for _e in cfg.edges:
            xcppace.classes_of(msgs, nclasses)
    return (time.thread_time_ns() - c0) / reps / 1e6


def run() -> Iterator[Measurement]:
    for separate, name in ((False, "xcp"), (True, "xcp-ack")):
        cfg = nsfnet_config(separate_acks=separate)
        samples = [sum(step_cpu(cfg)) / STEPS for _ in range(SAMPLES)]
        yield Measurement(f"xcp agent step, NSFNET, {name} ({len(cfg.macroflows)} macroflows)", samples, "ms")
    cfg = nsfnet_config(separate_acks=False)
    yield Measurement(f"xcp pacer class dumps parsed, NSFNET ({len(cfg.edges)} edges)",
                      [parse_cpu(cfg) for _ in range(SAMPLES)], "ms")
