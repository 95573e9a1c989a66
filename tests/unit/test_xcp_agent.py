"""The XCP agent (controllers/xcp_agent.py) against the closed-loop reference
testbed/xcpsim.py, and on hand-built counters whose answers are known by construction.

The oracle runs: the agent drives a small packet-level data plane written here
(:class:`PacketPlane`: leaky-bucket pacers with timed rate changes and per-interval
rings, FIFO outputs with the BPF accumulator's slots), on a virtual clock in emulation
ns (D = 20 and D = 1); xcpsim runs the same dumbbell in paper time with its own
pacers, links and controllers. Neither shares code with the agent beyond
testbed/xcp.py's formulas."""

from __future__ import annotations

import heapq
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from controllers.xcp_agent import (SLOT_NONE, AgentConfig, CoreConfig, EdgeConfig, HopConfig,
                                   MacroflowConfig, OutputConfig, RateChange, ReverseHopConfig, XcpAgent,
                                   XcpConfigError, config_from_dict, config_loads)
from testbed import xcp, xcpsim

NS = 1_000_000_000
D_PAPER = 0.05
PKT = 1500
R_MIN = 8 * PKT / D_PAPER          # one packet per interval, paper bit/s


# -- configurations ---------------------------------------------------------------------------------
def dumbbell_config(n: int, capacity: float, start_rate: float, *, tdf: float, epoch_ns: int = 10 * NS,
                    start_active: bool = True, core_delay: float = 0.005, edge_delay: float = 0.0001,
                    margin_ns: int = 1_000_000) -> AgentConfig:
    """xcpsim.dumbbell(n, capacity) as the agent's config: c0 port 0 -> c1, port k+1 ->
    i<k>; c1 port 0 -> c0, port k+1 -> o<k>; i<k> / o<k> uplink port 0."""
    c0 = CoreConfig("c0", 100, (OutputConfig(0, capacity, "c1", core_delay),
                                *(OutputConfig(k + 1, capacity, f"i{k}", edge_delay) for k in range(n))))
    c1 = CoreConfig("c1", 101, (OutputConfig(0, capacity, "c0", core_delay),
                                *(OutputConfig(k + 1, capacity, f"o{k}", edge_delay) for k in range(n))))
    edges = tuple(EdgeConfig(f"i{k}", k, f"ns-i{k}", f"i{k}-eth0", 0, capacity, "c0", edge_delay) for k in range(n))
    mfs = tuple(MacroflowConfig(f"f{k}", 0, f"i{k}", f"o{k}", "data",
                                (HopConfig(f"i{k}", 0), HopConfig("c0", 0), HopConfig("c1", k + 1)),
                                (ReverseHopConfig(f"o{k}", 0, "c1", edge_delay), ReverseHopConfig("c1", 0, "c0", core_delay),
                                 ReverseHopConfig("c0", k + 1, f"i{k}", edge_delay)),
                                start_rate, start_active=start_active) for k in range(n))
    return AgentConfig(epoch_ns, tdf, (c0, c1), edges, mfs, margin_ns=margin_ns, rate_delay_s=0.0005)


# -- a packet-level data plane on a virtual clock -----------------------------------------------------
@dataclass(frozen=True)
class AccSlot:
    """A slot as the kernel holds it (struct optsw_xcp_slot): SLOT_NONE for none."""

    interval: int
    bytes: int
    qmin_ns: int
    packets: int
    drops: int


@dataclass
class PacerIv:
    bytes: int
    packets: int
    qmin_ns: int | None
    class_bytes: tuple[int, ...]
    class_packets: tuple[int, ...]


class PacketPlane:
    """Backlogged macroflows (from ``start_ns`` each) paced by leaky buckets with no burst
    allowance at their ingress edge (rate changes at their instants, re-spaced from the
    last release), serialised on the uplink, then FIFO outputs (cut through: the next
    node sees a packet's head at departure + propagation). Counts what the kernel
    counts: per pacer a 4-interval ring (bytes / packets by departure, per class too,
    smallest link backlog of a departing head), per core output 4 slots (bytes of
    arrivals by intended arrival, smallest backlog found). Emulation ns, rates emulation
    bit/s (the config's paper values / D)."""

    def __init__(self, cfg: AgentConfig, start_ns: dict[str, int] | None = None) -> None:
        self.cfg, D = cfg, cfg.tdf
        self.E, self.d_e = cfg.epoch_ns, cfg.interval_ns
        self.now = 0
        self.done = -1                       # every event at or before it has been processed
        self.late_rates = 0
        self.heap: list[tuple] = []
        self.seq = 0
        self.outs = {}                       # (node, port) -> [rate bit/s, prop ns, free ns, slots, peer]
        for c in cfg.cores:
            for o in c.outputs:
                self.outs[(c.name, o.port)] = [o.capacity_bps / D, round(o.prop_s * D * NS), 0,
                                               [[SLOT_NONE, 0, SLOT_NONE, 0, 0] for _ in range(4)], o.peer]
        self.edges = {e.name: {"rate": e.capacity_bps / D, "prop": round(e.prop_s * D * NS), "free": 0, "ring": {},
                               "ncls": 1 + max(m.cls for m in cfg.macroflows if m.src == e.name)}
                      for e in cfg.edges}
        self.flows = {}
        for m in cfg.macroflows:
            f = {"cfg": m, "rate": m.initial_rate_bps / D, "last": None, "version": 0,
                 "start": (start_ns or {}).get(m.name, self.E), "hops": [(h.node, h.port) for h in m.path[1:]]}
            self.flows[m.name] = f
            self._push(f["start"], 1, "release", (f, 0))

    def _push(self, t: int, prio: int, kind: str, args: tuple) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, prio, self.seq, kind, args))

    def _gap(self, f: dict) -> int:
        return max(1, round(8 * PKT * NS / f["rate"]))

    def _k(self, t: int) -> int:
        return (t - self.E) // self.d_e

    def run_to(self, t: int) -> None:
        while self.heap and self.heap[0][0] <= t:
            te, _p, _s, kind, args = heapq.heappop(self.heap)
            getattr(self, "_" + kind)(te, *args)
        self.done = max(self.done, t)

    def _rate(self, t: int, f: dict, rate: float) -> None:
        f["rate"] = rate
        if f["last"] is not None:
            f["version"] += 1
            self._push(max(t, f["last"] + self._gap(f)), 1, "release", (f, f["version"]))

    def _release(self, t: int, f: dict, version: int) -> None:
        if version != f["version"]:
            return
        m = f["cfg"]
        e = self.edges[m.src]
        dep = max(t, e["free"])
        backlog = max(0, e["free"] - t)
        e["free"] = dep + round(8 * PKT * NS / e["rate"])
        k = self._k(dep)
        ring = e["ring"]
        if k not in ring:
            ring[k] = [0, 0, None, [0] * e["ncls"], [0] * e["ncls"]]
            for old in [j for j in ring if j <= k - 4]:
                del ring[old]
        iv = ring[k]
        iv[0] += PKT
        iv[1] += 1
        iv[2] = backlog if iv[2] is None else min(iv[2], backlog)
        iv[3][m.cls] += PKT
        iv[4][m.cls] += 1
        f["last"] = dep
        self._push(dep + e["prop"], 1, "arrive", (f, 0))
        self._push(dep + self._gap(f), 1, "release", (f, version))

    def _arrive(self, t: int, f: dict, hop: int) -> None:
        if hop == len(f["hops"]):
            return
        out = self.outs[f["hops"][hop]]
        rate, prop, free, slots, _peer = out
        k = self._k(t)
        s = slots[k % 4]
        if s[0] != k:
            s[:] = [k, 0, SLOT_NONE, 0, 0]
        backlog = max(0, free - t)
        s[1] += PKT
        s[2] = min(s[2], backlog)
        s[3] += 1
        dep = max(t, free)
        out[2] = dep + round(8 * PKT * NS / rate)
        self._push(dep + prop, 1, "arrive", (f, hop + 1))

    # -- DataPlane ----------------------------------------------------------------------------------
    def now_ns(self) -> int:
        return self.now

    def sleep_until(self, t_ns: int) -> None:
        self.run_to(t_ns)
        self.now = max(self.now, t_ns)

    def read_core(self, node: str) -> dict[int, list[AccSlot]]:
        return {p: [AccSlot(s[0], s[1], s[2], s[3], s[4]) for s in o[3]] for (n, p), o in self.outs.items()
                if n == node}

    def read_pacer(self, edge: str) -> dict[int, PacerIv]:
        return {k: PacerIv(v[0], v[1], v[2], tuple(v[3]), tuple(v[4])) for k, v in self.edges[edge]["ring"].items()}

    def set_rates(self, edge: str, changes: list[RateChange]) -> None:
        for c in changes:
            f = next(f for f in self.flows.values() if f["cfg"].src == edge and f["cfg"].cls == c.cls)
            if c.effective_ns <= self.done:
                self.late_rates += 1
                self._rate(self.done, f, c.rate_bps)
            else:
                self._push(c.effective_ns, 0, "rate", (f, c.rate_bps))


def run_agent(cfg: AgentConfig, intervals: int, start_ns: dict[str, int] | None = None) -> tuple[XcpAgent, PacketPlane]:
    plane = PacketPlane(cfg, start_ns)
    agent = XcpAgent(cfg, plane)
    agent.start()
    for _ in range(intervals):
        plane.sleep_until(agent.deadline())
        agent.step()
    return agent, plane


def sim_rates(n: int, capacity: float, start_rate: float, intervals: int, start_s: float = 0.0) -> xcpsim.SimResult:
    flows = [xcpsim.SimFlow(f"f{k}", xcpsim.dumbbell_path(k), start_rate, start_s=start_s, probe_phase_s=0.0)
             for k in range(n)]
    sim = xcpsim.XcpLoopSim(xcpsim.dumbbell(n, capacity), flows, xcpsim.SimConfig(rate_delay_s=0.0005))
    return sim.run(intervals)


# -- the oracle -------------------------------------------------------------------------------------
@pytest.mark.parametrize("tdf", [20.0, 1.0])
@pytest.mark.parametrize("n,start", [(3, "half"), (2, "over"), (8, "min")])
def test_granted_rates_equal_the_reference_loop_within_a_packet_per_interval(tdf, n, start):
    C = 100e6
    r0 = {"half": C / (2 * n), "over": 2 * C / n, "min": R_MIN}[start]
    K = 30
    agent, plane = run_agent(dumbbell_config(n, C, min(r0, C), tdf=tdf), K)
    ref = sim_rates(n, C, r0, K)
    worst = 0.0
    for k in range(n):
        got = dict(agent.granted()[f"f{k}"])
        assert sorted(got) == list(range(K + 1))      # one probe per interval from interval 0
        for i in range(K + 1):
            worst = max(worst, abs(got[i] - ref.rates[f"f{k}"][i]))
    assert worst <= R_MIN, f"worst difference {worst:.0f} bit/s"
    s = agent.summary({e: {"late": 0, "late_rates": plane.late_rates} for e in ("i0",)})
    for key in ("acc_late", "acc_lost", "pacer_acc_late", "pacer_acc_lost", "late_rates"):
        assert s[key] == 0, key
    assert plane.late_rates == 0 and s["exact"]


@pytest.mark.parametrize("n", [2, 3, 4])
def test_equal_starts_converge_to_a_fair_share_within_ten_percent_by_interval_ten(n):
    C = 100e6
    agent, _plane = run_agent(dumbbell_config(n, C, R_MIN, tdf=20.0), 25)
    for k in range(n):
        for i, r in agent.granted()[f"f{k}"]:
            if i >= 10:
                assert abs(r - C / n) <= 0.1 * C / n, (k, i, r)


def test_the_bottleneck_decisions_equal_the_reference_loop():
    """Per interval the agent's B and N at c0 -> c1 are xcpsim's (B within one packet)."""
    C, n, K = 100e6, 3, 20
    agent, _plane = run_agent(dumbbell_config(n, C, C / 5, tdf=20.0), K)
    ref = sim_rates(n, C, C / 5, K)
    rows = [r for r in agent.links_table() if (r["node"], r["port"]) == ("c0", 0)]
    assert [r["interval"] for r in rows] == list(range(K))
    for r, li in zip(rows, ref.links[("c0", "c1")]):
        assert abs(r["bytes"] - li.input_bytes) <= PKT
        assert r["probes"] == li.probes == n


def test_a_macroflow_starts_probing_after_its_first_released_bytes():
    """Sources starting at 0.3 d: the agent sees their bytes in interval 0 and probes
    from interval 1 (the first probe carries R), as xcpsim with probes at phase 0."""
    C, n, K = 100e6, 2, 20
    cfg = dumbbell_config(n, C, C / 4, tdf=20.0, start_active=False)
    start = cfg.epoch_ns + round(0.3 * cfg.interval_ns)
    agent, plane = run_agent(cfg, K, {f"f{k}": start for k in range(n)})
    ref = sim_rates(n, C, C / 4, K, start_s=0.3 * D_PAPER)
    assert agent.activated == {"f0": 1, "f1": 1}
    for k in range(n):
        got = dict(agent.granted()[f"f{k}"])
        assert min(got) == 1
        for i in range(1, K + 1):
            assert abs(got[i] - ref.rates[f"f{k}"][i]) <= R_MIN, (k, i)


# -- hand-built counters ------------------------------------------------------------------------------
class Scripted:
    """Counters set by the test; a virtual clock with an optional lag of the agent."""

    def __init__(self, cfg: AgentConfig) -> None:
        self.t = 0
        self.lag = 0
        self.slots = {c.name: {o.port: [AccSlot(SLOT_NONE, 0, SLOT_NONE, 0, 0)] * 4 for o in c.outputs}
                      for c in cfg.cores}
        self.pacer: dict[str, dict[int, PacerIv]] = {e.name: {} for e in cfg.edges}
        self.changes: list[tuple[int, str, list[RateChange]]] = []

    def now_ns(self) -> int:
        return self.t + self.lag

    def sleep_until(self, t_ns: int) -> None:
        self.t = max(self.t, t_ns)

    def read_core(self, node: str) -> dict[int, list[AccSlot]]:
        return {p: list(s) for p, s in self.slots[node].items()}

    def read_pacer(self, edge: str) -> dict[int, PacerIv]:
        return dict(self.pacer[edge])

    def set_rates(self, edge: str, changes: list[RateChange]) -> None:
        self.changes.append((self.now_ns(), edge, list(changes)))

    def put(self, node: str, port: int, k: int, nbytes: int, qmin_ns: int = SLOT_NONE, drops: int = 0) -> None:
        self.slots[node][port][k % 4] = AccSlot(k, nbytes, qmin_ns, nbytes // PKT, drops)


def via(core: tuple[str, int], dst: str, prop_s: float, c0_out: int, c0_back: int, cls: int = 0
        ) -> tuple[CoreConfig, MacroflowConfig]:
    """Core ``core`` (name, id) behind c0's port ``c0_out`` over a link of ``prop_s``, and
    the macroflow i0 -> c0 -> core -> ``dst`` (class ``cls``, back into i0 through c0's
    port ``c0_back``), 100 Mb/s, edge links 0.1 ms."""
    name, node_id = core
    c = CoreConfig(name, node_id, (OutputConfig(0, 100e6, dst, 0.0001), OutputConfig(1, 100e6, "c0", prop_s)))
    mf = MacroflowConfig(f"i0-{dst}", cls, "i0", dst, "data", (HopConfig("i0", 0), HopConfig("c0", c0_out),
                                                                HopConfig(name, 0)),
                         (ReverseHopConfig(dst, 0, name, 0.0001), ReverseHopConfig(name, 1, "c0", prop_s),
                          ReverseHopConfig("c0", c0_back, "i0", 0.0001)), 20e6, start_active=True)
    return c, mf


EDGE_I0 = EdgeConfig("i0", 0, "ns-i0", "i0-eth0", 0, 100e6, "c0", 0.0001)


def chain_config(tdf: float = 10.0) -> AgentConfig:
    """i0 -> c0 -> c1 -> o0, 100 Mb/s everywhere; props 0.1 ms, 2 ms, 0.1 ms."""
    c0 = CoreConfig("c0", 1, (OutputConfig(0, 100e6, "c1", 0.002), OutputConfig(1, 100e6, "i0", 0.0001)))
    c1, mf = via(("c1", 2), "o0", 0.002, 0, 1)
    return AgentConfig(5 * NS, tdf, (c0, c1), (EDGE_I0,), (mf,), margin_ns=1_000_000, rate_delay_s=0.0005)


def scripted_chain() -> tuple[AgentConfig, Scripted, XcpAgent]:
    """The chain's config, a Scripted plane and a started agent on it."""
    cfg = chain_config()
    dp = Scripted(cfg)
    agent = XcpAgent(cfg, dp)
    agent.start()
    return cfg, dp, agent


def test_a_probe_takes_the_smallest_feedback_on_its_path_and_names_the_limiter():
    cfg = chain_config()
    D, d_e, E = cfg.tdf, cfg.interval_ns, cfg.epoch_ns
    dp = Scripted(cfg)
    agent = XcpAgent(cfg, dp)
    agent.start()
    # interval 0: the uplink released 250 000 B (40 Mb/s, all of the class); c0:0 saw
    # 500 000 B (80 Mb/s) and a smallest backlog of 1 ms paper; c1:0 687 500 B (110 Mb/s)
    dp.pacer["i0"][0] = PacerIv(250_000, 250_000 // PKT, None, (250_000,), (250_000 // PKT,))
    dp.put("c0", 0, 0, 500_000, qmin_ns=round(0.001 * D * NS))
    dp.put("c1", 0, 0, 687_500)
    dp.sleep_until(agent.deadline())
    assert agent.step() == 0
    links = {(r["node"], r["port"]): r for r in agent.links_table() if r["interval"] == 0}
    # by hand (alpha 0.4, beta 0.226, gamma 0.1, d 50 ms, N = 1: the interval-0 probe):
    # uplink: S = 60M, Phi = 24M, h = 0 -> feedback 24M
    # c0:0: Q = 1 ms x 100 Mb/s = 12 500 B, Phi = 8M - 0.226 x 8 x 12 500 / 0.05 = 7.548M,
    #       h = 8M - 7.548M = 0.452M -> feedback = 8M - 40M x 0.452M / 80M = 7.774M
    # c1:0: S = -10M, Phi = -4M, h = 11M - 4M = 7M -> feedback = 7M - 40M x 11M / 110M = 3M
    assert links[("c0", 0)]["queue_bytes"] == pytest.approx(12_500)
    assert links[("c0", 0)]["phi_bps"] == pytest.approx(7.548e6)
    assert (links[("i0", 0)]["probes"], links[("c0", 0)]["probes"], links[("c1", 0)]["probes"]) == (1, 1, 1)
    dp.sleep_until(agent.deadline())
    agent.step()                                # interval 1: the probe of seq 1 returned
    row = next(r for r in agent.rates_table() if r["interval"] == 1)
    assert row["measured_bps"] == 40_000_000 and row["rate_bps"] == 20e6
    assert row["feedback_bps"] == pytest.approx(3e6, abs=1)
    assert (row["limiter_node"], row["limiter_port"]) == ("c1", 0)
    assert row["rate_after_bps"] == pytest.approx(23e6, abs=1)
    # the instant: sent at E + d_e, six control hops of 78 B at 100 Mb/s plus the props
    tau = round(8 * 78 * D * NS / 100e6)
    props = [0.0001, 0.002, 0.0001, 0.0001, 0.002, 0.0001]
    t_ret = E + d_e + sum(tau + round(p * D * NS) for p in props)
    assert row["return_ns"] == t_ret
    assert row["effective_ns"] == t_ret + round(0.0005 * D * NS)
    sent = [c for _t, edge, cs in dp.changes for c in cs if edge == "i0"]
    assert RateChange(0, round(row["rate_after_bps"] / D), t_ret + round(0.0005 * D * NS)) in sent
    # the interval-0 probe: every output answered with feedback 0 (no decision yet)
    row0 = next(r for r in agent.rates_table() if r["interval"] == 0)
    assert row0["feedback_bps"] == 0 and row0["limiter_node"] == "i0" and row0["rate_after_bps"] == 20e6


def test_probes_meeting_at_a_node_queue_on_its_control_link():
    """Two probes sent at E reach c0 together: the second waits one frame time on the
    control link c0 -> c1 (store and forward, FIFO) and returns one tau later."""
    cfg = dumbbell_config(2, 100e6, 20e6, tdf=20.0)
    dp = Scripted(cfg)
    agent = XcpAgent(cfg, dp)
    agent.start()
    D, E = cfg.tdf, cfg.epoch_ns
    tau = round(8 * 78 * D * NS / 100e6)
    props = sum(round(p * D * NS) for p in (0.0001, 0.005, 0.0001, 0.0001, 0.005, 0.0001))
    back = {r["macroflow"]: r["return_ns"] for r in agent.rates_table()}
    assert back == {"f0": E + 6 * tau + props, "f1": E + 7 * tau + props}


def test_a_slot_that_changes_after_it_was_read_is_late():
    cfg, dp, agent = scripted_chain()
    dp.put("c0", 0, 0, 15_000)
    dp.sleep_until(agent.deadline())
    agent.step()                                # interval 0 read: 15 000 B
    dp.put("c0", 0, 0, 16_500)                  # a packet of interval 0 counted after the read
    dp.sleep_until(agent.deadline())
    agent.step()
    assert agent.counters["acc_late"] == 1 and agent.counters["acc_lost"] == 0
    dp.put("c1", 0, 1, 1_500)                   # interval 1 was read empty; a late packet fills it
    dp.sleep_until(agent.deadline())
    agent.step()
    assert agent.counters["acc_late"] == 2
    dp.sleep_until(agent.deadline())
    agent.step()                                # nothing new: counted once each
    assert agent.counters["acc_late"] == 2 and not agent.summary()["exact"]
    late = agent.summary()["late_slots"]
    assert [(x["kind"], x["where"], x["interval"], x["seen_at_interval"]) for x in late] == [
        ("core", "c0:0", 0, 1), ("core", "c1:0", 1, 2)]
    assert late[0]["before"][0] == 15_000 and late[0]["after"][0] == 16_500


def test_a_slot_overwritten_before_it_was_read_is_lost():
    cfg, dp, agent = scripted_chain()
    dp.put("c0", 0, 0, 15_000)
    dp.put("c0", 0, 4, 3_000)                   # interval 4 reused slot 0 before interval 0 was read
    dp.sleep_until(agent.deadline())
    agent.step()
    assert agent.counters["acc_lost"] == 1
    row = next(r for r in agent.links_table() if (r["node"], r["port"], r["interval"]) == ("c0", 0, 0))
    assert row["bytes"] == 0


@dataclass(frozen=True)
class LayoutSlot:
    """A slot as testbed.optical.layout parses it: None for none."""

    interval: int | None
    bytes: int = 0
    packets: int = 0
    drops: int = 0
    qmin_ns: int | None = None


def test_slots_with_none_for_never_used_and_no_backlog_read_as_empty_and_q_zero():
    cfg, dp, agent = scripted_chain()
    dp.slots["c0"][0] = [LayoutSlot(0, 3_000, 2, 0, None), LayoutSlot(None), LayoutSlot(None), LayoutSlot(None)]
    dp.slots["c1"][0] = [LayoutSlot(None)] * 4
    dp.sleep_until(agent.deadline())
    agent.step()
    rows = {(r["node"], r["port"]): r for r in agent.links_table()}
    assert (rows[("c0", 0)]["bytes"], rows[("c0", 0)]["queue_bytes"], rows[("c0", 0)]["qmin_ns"]) == (3_000, 0.0, "")
    assert rows[("c1", 0)]["bytes"] == 0
    dp.slots["c0"][0][0] = LayoutSlot(0, 4_500, 3, 0, None)
    dp.sleep_until(agent.deadline())
    agent.step()
    assert agent.counters["acc_late"] == 1


def test_a_late_agent_counts_its_late_rate_changes_and_lag():
    cfg = chain_config()
    dp = Scripted(cfg)
    agent = XcpAgent(cfg, dp)
    agent.start()                               # the interval-0 probe's change is sent before E
    dp.lag = cfg.interval_ns // 2               # the agent runs half an interval late from now on
    dp.sleep_until(agent.deadline())
    agent.step()                                # interval 1's probe returns ~8.5 ms x D after E + d_e
    s = agent.summary()
    assert s["late_rates"] == 1 and s["max_rate_late_ns"] > 0
    assert s["decision_lag_ns"]["max"] == cfg.interval_ns // 2
    assert [st["late_rates"] for st in s["steps"]] == [1]
    assert not s["exact"]


def two_paths_config(tdf: float = 10.0) -> AgentConfig:
    """i0 -> c0 -> c1 -> o0 over a 1 ms link (class 0, a probe back after ~2.4 ms paper)
    and i0 -> c0 -> c2 -> o1 over a 30 ms link (class 1, ~60 ms); 100 Mb/s everywhere."""
    c0 = CoreConfig("c0", 1, (OutputConfig(0, 100e6, "c1", 0.001), OutputConfig(1, 100e6, "c2", 0.03),
                              OutputConfig(2, 100e6, "i0", 0.0001)))
    c1, fast = via(("c1", 2), "o0", 0.001, 0, 2)
    c2, slow = via(("c2", 3), "o1", 0.03, 1, 2, cls=1)
    return AgentConfig(5 * NS, tdf, (c0, c1, c2), (EDGE_I0,), (fast, slow), margin_ns=1_000_000,
                       rate_delay_s=0.0005)


def test_a_step_hands_over_the_changes_due_first_before_advancing_the_rest_of_the_interval():
    cfg = two_paths_config()
    dp = Scripted(cfg)
    agent = XcpAgent(cfg, dp)
    handed: list[tuple[int, list[RateChange]]] = []        # (the agent's horizon, the changes) per request
    dp.set_rates = lambda edge, changes: handed.append((agent.horizon, list(changes)))  # type: ignore[method-assign]
    agent.start()
    handed.clear()
    dp.sleep_until(agent.deadline())
    agent.step()                       # interval 0 decided; the probes sent at E + d_e go out and come back
    boundary, d_e, delta = cfg.epoch_ns + cfg.interval_ns, cfg.interval_ns, agent.delta_e
    assert [h for h, _ in handed] == [boundary + d_e // 8, boundary + d_e]
    (h1, early), (h2, late) = handed
    assert [c.cls for c in early] == [0] and [c.cls for c in late] == [1]
    assert early[0].effective_ns - delta < h1 <= late[0].effective_ns - delta < h2
    assert agent.steps[-1]["rate_changes"] == 2 and agent.steps[-1]["late_rates"] == 0


# -- configuration --------------------------------------------------------------------------------------
def test_the_config_survives_a_json_round_trip():
    cfg = dumbbell_config(3, 100e6, 20e6, tdf=20.0)
    again = config_loads(json.dumps(cfg.to_dict()))
    assert again == cfg
    assert again.interval_ns == 1_000_000_000
    # a voq core (queue, namespace, devices) too; a config written before they existed reads as bpf
    ib = replace(cfg, cores=(replace(cfg.cores[0], queue="voq", netns="ns-c0",
                                     outputs=tuple(replace(o, dev=f"c0-eth{o.port}") for o in cfg.cores[0].outputs)),
                             cfg.cores[1]))
    assert config_loads(ib.dumps()) == ib
    old = cfg.to_dict()
    for c in old["cores"]:
        del c["queue"], c["netns"]
        for o in c["outputs"]:
            del o["dev"]
    assert config_from_dict(old) == cfg


@pytest.mark.parametrize("edit,key", [
    (lambda d: d.update(tdf=0), "tdf"),
    (lambda d: d.update(margin_ns=2_000_000_000), "margin_ns"),
    (lambda d: d.update(rate_delay_s=0.05), "rate_delay_s"),
    (lambda d: d["xcp"].update(alpha=0.9), "xcp.alpha"),
    (lambda d: d["cores"][0]["outputs"][0].update(capacity_bps=-1), "cores[0].outputs[0].capacity_bps"),
    (lambda d: d["macroflows"][1].update(kind="bulk"), "macroflows[1].kind"),
    (lambda d: d["macroflows"][0]["path"][1].update(port=5), "macroflows[0].path[1].port"),
    (lambda d: d["macroflows"][0]["path"].pop(), "macroflows[0].path"),
    (lambda d: d["macroflows"][0]["reverse"][1].update(prop_s=0.004), "macroflows[0].reverse[1]"),
    (lambda d: d["macroflows"][0].update(initial_rate_bps=1e3), "macroflows[0].initial_rate_bps"),
    (lambda d: d["macroflows"][0].update(src="nowhere"), "macroflows[0].src"),
    (lambda d: d["edges"][0].update(speed=1), "edges[0].speed"),
    (lambda d: d.pop("epoch_ns"), "epoch_ns"),
    (lambda d: d["cores"][1].update(queue="ring"), "cores[1].queue"),
    (lambda d: d["cores"][1].update(queue="voq"), "cores[1].outputs[0].dev"),
])
def test_a_bad_config_names_its_key(edit, key):
    d = dumbbell_config(2, 100e6, 20e6, tdf=20.0).to_dict()
    edit(d)
    with pytest.raises(XcpConfigError) as err:
        config_from_dict(d)
    assert err.value.key == key, str(err.value)


def test_the_decision_uses_testbed_xcp_with_n_at_least_one():
    """An output nobody probes decides with N = 1 (xcp.decide's rule)."""
    cfg, dp, agent = scripted_chain()
    dp.put("c0", 1, 0, 300_000)                 # c0 -> i0 carries data no probe crosses
    dp.sleep_until(agent.deadline())
    agent.step()
    row = next(r for r in agent.links_table() if (r["node"], r["port"], r["interval"]) == ("c0", 1, 0))
    want = xcp.decide(100e6, 300_000, 0.0, 0, cfg.params())
    assert row["probes"] == 0 and row["phi_bps"] == want.phi_bps and math.isclose(row["input_bps"], 48e6)


# -- the process ----------------------------------------------------------------------------------------
FAKE_IO = r'''
import sys
from dataclasses import dataclass
from pathlib import Path
from controllers.xcp_agent import config_loads
from controllers.xcp_agent_process import run
from controllers.xcp_io import SignalClock


@dataclass
class Slot:
    interval: int | None = None
    bytes: int = 0
    packets: int = 0
    drops: int = 0
    qmin_ns: int | None = None


@dataclass
class Iv:
    bytes: int
    packets: int
    qmin_ns: int | None
    class_bytes: tuple
    class_packets: tuple


class Io(SignalClock):
    """The real clock and stop signals; counters: one packet per interval per class."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg, self.pacers = cfg, {e.name: None for e in cfg.edges}
        self.reads = 0

    def read_core(self, node):
        return {o.port: [Slot()] * 4 for c in self.cfg.cores if c.name == node for o in c.outputs}

    def read_pacer(self, edge):
        # every interval so far, not a ring of 4: an agent process delayed by a loaded host
        # (the full suite beside guests) must not lose slots here, or it sees the
        # macroflow go idle and come back (activated 3 times instead of once)
        k = (self.now_ns() - self.cfg.epoch_ns) // self.cfg.interval_ns - 1
        self.reads += 1
        Path(sys.argv[2], "fake-reads").write_text(str(self.reads))    # the test waits on this, not on time
        return {j: Iv(1500, 1, 0, (1500,), (1,)) for j in range(0, k + 1)}

    def set_rates(self, edge, changes):
        pass

    def pacer_counters(self, edge):
        return {"late": 0, "late_rates": 0}

    def close(self):
        pass


cfg = config_loads(Path(sys.argv[1]).read_text())
sys.exit(run(cfg, Path(sys.argv[2]), Io(cfg)))
'''


def test_the_process_loop_writes_its_records_when_stopped_with_sigterm(tmp_path):
    import csv
    import signal
    import subprocess
    import sys
    import time

    from controllers.xcp_agent import LINK_COLUMNS, RATE_COLUMNS

    cfg = replace(chain_config(tdf=1.0), epoch_ns=time.clock_gettime_ns(time.CLOCK_MONOTONIC) + 100_000_000)
    cfg = replace(cfg, macroflows=tuple(replace(m, start_active=False) for m in cfg.macroflows))
    (tmp_path / "cfg.json").write_text(cfg.dumps())
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", FAKE_IO, str(tmp_path / "cfg.json"), str(out)],
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while not (out / "xcp-status.json").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert json.loads((out / "xcp-status.json").read_text())["ready"]
        reads = out / "fake-reads"
        while time.monotonic() < deadline and not (reads.exists() and int(reads.read_text() or 0) >= 6):
            time.sleep(0.02)                   # six pacer reads (intervals decided), however loaded the host
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    summary = json.loads((out / "xcp.json").read_text())
    assert summary["intervals"] >= 4 and summary["activated"] == {"i0-o0": 1}
    assert summary["pacers"] == {"i0": {"late": 0, "late_rates": 0}} and "error" not in summary
    with open(out / "xcp_rates.csv") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == RATE_COLUMNS and rows[0]["interval"] == "1" and rows[0]["measured_bps"] == "20000000"
    assert rows[1]["measured_bps"] == "240000"      # one packet in interval 1
    with open(out / "xcp_links.csv") as f:
        links = list(csv.DictReader(f))
    assert tuple(links[0]) == LINK_COLUMNS and len(links) == 5 * summary["intervals"]


def test_the_process_refuses_a_bad_config_with_status_1(tmp_path, capsys):
    """... and main() leaves the scheduling of the process calling it alone: only the
    agent's own process runs under SCHED_IDLE (a pytest worker left SCHED_IDLE here ran
    every later test only when nothing else wanted the CPU)."""
    import os

    from controllers.xcp_agent_process import main

    policy = os.sched_getscheduler(0)
    d = chain_config().to_dict()
    d["tdf"] = -1
    (tmp_path / "cfg.json").write_text(json.dumps(d))
    assert main(["x", str(tmp_path / "cfg.json"), str(tmp_path / "out")]) == 1
    assert "tdf=-1" in capsys.readouterr().err
    assert main(["x"]) == 2
    assert os.sched_getscheduler(0) == policy


def test_the_agents_own_process_runs_under_sched_idle():
    """Run as a program (``python -m controllers.xcp_agent_process``) the agent yields to
    the data path: its policy is SCHED_IDLE (read at exit; a usage error exits at once)."""
    import os
    import subprocess
    import sys

    show = ("import atexit, os, runpy, sys; atexit.register(lambda: print('policy', os.sched_getscheduler(0))); "
            "sys.argv = ['xcp_agent_process']; runpy.run_module('controllers.xcp_agent_process', run_name='__main__')")
    r = subprocess.run([sys.executable, "-c", show], capture_output=True, text=True, timeout=120,
                       cwd=Path(__file__).resolve().parents[2])
    assert r.returncode == 2 and "usage" in r.stderr, r.stderr
    assert f"policy {os.SCHED_IDLE}" in r.stdout, (r.stdout, r.stderr)


def test_a_plan_becomes_a_config_with_the_designs_initial_rate():
    """xcpplan of c0 - c1 with edges e0, e1, e2 (e0, e1 on c0; e2 on c1), one host each:
    every macroflow's path and reverse as the plan says, R_0 = TU C / (other edges)."""
    from controllers.xcp_agent import config_from_plan
    from testbed.optical.xcpplan import NodeShape, plan

    rate, D = 5e6, 20.0                           # emulation bit/s: 100 Mb/s paper
    ns = lambda s: round(s * D * NS)              # noqa: E731
    nodes = [NodeShape("c0", 0, "core", "ns-c0", ("c0-0", "c0-1", "c0-2"), ("c1", "e0", "e1"), (rate,) * 3,
                       (ns(0.002), ns(0.0001), ns(0.0001))),
             NodeShape("c1", 1, "core", "ns-c1", ("c1-0", "c1-1"), ("c0", "e2"), (rate,) * 2, (ns(0.002), ns(0.0001))),
             *(NodeShape(f"e{j}", 2 + j, "edge", f"ns-e{j}", (f"e{j}-0", f"e{j}-1"), (c, f"h{j}"), (rate,) * 2,
                         (ns(0.0001), 0)) for j, c in enumerate(("c0", "c0", "c1"))),
             *(NodeShape(f"h{j}", 5 + j, "host", f"ns-h{j}", (f"h{j}-0",), (f"e{j}",), (rate,), (0,))
               for j in range(3))]
    hosts = {f"h{j}": f"10.0.0.{j + 1}" for j in range(3)}
    routes = {(0, "10.0.0.1"): [1], (0, "10.0.0.2"): [2], (0, "10.0.0.3"): [0],
              (1, "10.0.0.1"): [0], (1, "10.0.0.2"): [0], (1, "10.0.0.3"): [1]}
    for j in range(3):
        for k in range(3):
            routes[(2 + j, f"10.0.0.{k + 1}")] = [1 if k == j else 0]
    cfg = config_from_plan(plan(nodes, hosts, routes, D), epoch_ns=NS, tdf=D)
    assert [c.name for c in cfg.cores] == ["c0", "c1"] and len(cfg.macroflows) == 6
    mf = {m.name: m for m in cfg.macroflows}
    assert [(h.node, h.port) for h in mf["e0-e2"].path] == [("e0", 0), ("c0", 0), ("c1", 1)]
    assert [(r.node, r.port, r.peer) for r in mf["e0-e2"].reverse] == [("e2", 0, "c1"), ("c1", 0, "c0"), ("c0", 1, "e0")]
    assert all(m.initial_rate_bps == pytest.approx(100e6 / 2) for m in cfg.macroflows)
    assert config_loads(cfg.dumps()) == cfg


def test_the_real_data_plane_reads_the_map_and_converts_for_the_pacer(monkeypatch):
    """XcpIo with the map and the pacer module replaced: the pin path, one lookup per
    node parsed into its controlled ports' slots (bytes packed here by hand), rate
    changes handed over as xcppace.RateChange in the edge's namespace, the counters."""
    import struct
    from types import SimpleNamespace

    from controllers import xcp_io
    from testbed.optical import xcppace

    value = bytearray(64 * 4 * 32)
    struct.pack_into("<QQQII", value, (1 * 4 + 2) * 32, 6, 4_500, 700, 3, 1)     # c0 port 1, interval 6
    opened = []

    class FakeMap:
        def __init__(self, path, value_size):
            opened.append((str(path), value_size))

        def lookup(self, key):
            return bytes(value) if key == struct.pack("<I", 1) else bytes(len(value))

        def close(self):
            opened.append("closed")

    monkeypatch.setattr(xcp_io.bpfsys, "PinnedMap", FakeMap)
    sent, reads = [], []
    state = SimpleNamespace(intervals={6: PacerIv(3_000, 2, None, (3_000,), (2,))}, late=0, late_rates=2,
                            max_rate_late_ns=5, decided_after_stamp=0, unmodelled=1, max_enqueue_late_ns=0)
    monkeypatch.setattr(xcppace, "set_rates", lambda dev, netns, changes: sent.append((dev, netns, changes)))
    monkeypatch.setattr(xcppace, "read", lambda dev, netns: reads.append((dev, netns)) or state)
    io = xcp_io.XcpIo(replace(chain_config(), pin_dir="/sys/fs/bpf/x"))
    assert opened == [("/sys/fs/bpf/x/maps/optsw_xcp_acc", 8192)]
    c0 = io.read_core("c0")
    assert sorted(c0) == [0, 1] and all(s.interval is None for s in c0[0])
    s = c0[1][2]
    assert (s.interval, s.bytes, s.qmin_ns, s.packets, s.drops) == (6, 4_500, 700, 3, 1)
    assert io.read_pacer("i0") == state.intervals
    io.set_rates("i0", [RateChange(0, 1_000_000, 123)])
    assert sent == [("i0-eth0", "ns-i0", [xcppace.RateChange(0, 1_000_000, 123)])]
    assert io.pacer_counters("i0") == {"late": 0, "late_rates": 2, "max_rate_late_ns": 5, "decided_after_stamp": 0,
                                       "unmodelled": 1, "max_enqueue_late_ns": 0}
    assert reads == [("i0-eth0", "ns-i0")] * 2
    io.close()
    assert opened[-1] == "closed"


def test_the_control_process_writes_the_config_and_runs_the_module_from_the_checkout(tmp_path):
    import sys

    from controllers.xcp_agent_process import XcpAgentProcess

    cfg = chain_config()
    p = XcpAgentProcess(None, cfg, tmp_path)  # type: ignore[arg-type]
    (tmp_path / "xcp.json").write_text("{}")            # a previous point's summary is removed
    p.prepare()
    assert config_loads((tmp_path / "xcp-agent.json").read_text()) == cfg
    assert p.argv == [sys.executable, "-m", "controllers.xcp_agent_process", str((tmp_path / "xcp-agent.json").resolve()),
                      str(tmp_path.resolve())]
    assert (p.cwd / "controllers" / "xcp_agent_process.py").exists() and not (tmp_path / "xcp.json").exists()
    assert p.grace_s >= 10


def test_a_pacer_slot_reused_by_the_next_interval_is_not_late():
    """Interval k is read after k + 1 began: a class's ring slot of k - 3 may already hold
    k + 1 (the guest run of 2026-11-24 counted 8 such slots as late); a change to k - 1
    after its read is still late."""
    cfg, dp, agent = scripted_chain()
    for k in range(4):
        dp.pacer["i0"][k] = PacerIv(15_000, 10, None, (15_000,), (10,))
        dp.sleep_until(agent.deadline())
        assert agent.step() == k
    # k + 1 = 4 has begun while 3 is read next: slot 0 reused, interval 0 gone from the ring
    del dp.pacer["i0"][0]
    dp.pacer["i0"][1] = PacerIv(15_000, 10, None, (0,), (0,))   # the class's slot of 1 reused by 5
    dp.pacer["i0"][4] = PacerIv(15_000, 10, None, (15_000,), (10,))
    dp.sleep_until(agent.deadline())
    assert agent.step() == 4
    assert agent.counters["pacer_acc_late"] == 0
    dp.pacer["i0"][3] = PacerIv(16_500, 11, None, (16_500,), (11,))  # interval 3 changed after its read
    dp.sleep_until(agent.deadline())
    agent.step()
    assert agent.counters["pacer_acc_late"] == 1
    assert agent.summary()["late_slots"][0]["interval"] == 3


# -- input-buffered cores: the queue from the voq qdiscs' rings -----------------------------------------
def test_a_voq_cores_merged_slot_gives_q_and_a_late_decision_of_its_qdisc_is_late():
    """c0 is a voq core: its slots as controllers.xcp_io merges them (the BPF's bytes and
    packets, the ring's qmin_ns, drops and decided). Q comes from qmin_ns; a change of
    the ring's count of decisions after the read (the qdisc decided an arrival of
    interval 0 later than M_x - M) is late, like a change of the BPF's bytes."""
    from controllers.xcp_io import VoqAccSlot

    cfg, dp, agent = scripted_chain()
    D = cfg.tdf
    none = VoqAccSlot(None, 0, 0, 0, None, 0)
    dp.slots["c0"][0] = [VoqAccSlot(0, 15_000, 10, 1, round(0.001 * D * NS), 9), none, none, none]
    dp.sleep_until(agent.deadline())
    agent.step()
    row = next(r for r in agent.links_table() if (r["node"], r["port"], r["interval"]) == ("c0", 0, 0))
    assert (row["bytes"], row["packets"], row["drops"], row["queue_bytes"]) == (15_000, 10, 1, pytest.approx(12_500))
    assert agent.counters["acc_late"] == 0
    dp.slots["c0"][0][0] = VoqAccSlot(0, 15_000, 10, 1, round(0.001 * D * NS), 10)     # same Q, one more decision
    dp.sleep_until(agent.deadline())
    agent.step()
    assert agent.counters["acc_late"] == 1
    assert agent.summary()["late_slots"][0]["after"][4] == 10


def test_merge_voq_ring_takes_qmin_drops_and_decisions_from_the_qdisc_of_the_same_interval():
    from controllers.xcp_io import VoqAccSlot, merge_voq_ring
    from testbed.optical.ibsched import EMPTY_XCP_SLOT, XcpSlot
    from testbed.optical.layout import EMPTY_SLOT
    from testbed.optical.layout import AccSlot as BpfSlot

    bpf = [BpfSlot(4, 3_000, 2, 0, None), BpfSlot(5, 1_500, 1, 0, None), EMPTY_SLOT, BpfSlot(3, 9_000, 6, 0, None)]
    ring = [XcpSlot(4, 3_000, 700, 2, 1), XcpSlot(1, 1_500, 0, 1, 0), XcpSlot(6, 1_514, 2**64 - 1, 1, 1),
            EMPTY_XCP_SLOT]
    assert merge_voq_ring(bpf, ring) == [
        VoqAccSlot(4, 3_000, 2, 1, 700, 2),            # same interval: the qdisc's qmin, drops, count
        VoqAccSlot(5, 1_500, 1, 0, None, 0),           # the qdisc's slot still holds interval 1: nothing yet
        VoqAccSlot(6, 0, 0, 1, None, 1),               # only the qdisc has interval 6 (a late decision)
        VoqAccSlot(3, 9_000, 6, 0, None, 0)]           # the ring never used
    with pytest.raises(ValueError, match="BPF ring of 4 slots, voq ring of 3"):
        merge_voq_ring(bpf, ring[:3])


def test_the_real_data_plane_reads_a_voq_cores_ring_in_one_dump_per_node(monkeypatch):
    """XcpIo on the chain with c0 a voq core: the BPF value as before, c0's outputs'
    voq qdiscs in one read_ports of its namespace (on its netlink session), merged."""
    import struct
    from types import SimpleNamespace

    from controllers import xcp_io
    from testbed.optical import qdiscnl, voq
    from testbed.optical.ibsched import EMPTY_XCP_SLOT, XcpSlot

    value = bytearray(64 * 4 * 32)
    struct.pack_into("<QQQII", value, (0 * 4 + 2) * 32, 6, 4_500, 2**64 - 1, 3, 0)     # c0 port 0, interval 6

    class FakeMap:
        def __init__(self, path, value_size):
            pass

        def lookup(self, key):
            return bytes(value)

        def close(self):
            pass

    class FakeSession:
        def __init__(self, netns, error):
            self.netns, self.error = netns, error

        def close(self):
            pass

    reads = []
    ring = (EMPTY_XCP_SLOT, EMPTY_XCP_SLOT, XcpSlot(6, 4_500, 812, 3, 1), EMPTY_XCP_SLOT)

    def read_ports(devs, netns, session=None):
        reads.append((tuple(devs), netns, session.netns, session.error))
        return {d: SimpleNamespace(xcp=ring if d == "c0-eth0" else (EMPTY_XCP_SLOT,) * 4) for d in devs}

    monkeypatch.setattr(xcp_io.bpfsys, "PinnedMap", FakeMap)
    monkeypatch.setattr(qdiscnl, "Session", FakeSession)
    monkeypatch.setattr("testbed.nsops.netns_exists", lambda ns: True)
    monkeypatch.setattr(voq, "read_ports", read_ports)
    cfg = chain_config()
    c0 = replace(cfg.cores[0], queue="voq", netns="ns-c0",
                 outputs=tuple(replace(o, dev=f"c0-eth{o.port}") for o in cfg.cores[0].outputs))
    io = xcp_io.XcpIo(replace(cfg, cores=(c0, cfg.cores[1]), pin_dir="/pin"))
    assert set(io.sessions) == {"ns-i0", "ns-c0"} and io.sessions["ns-c0"].error is voq.VoqError
    got = io.read_core("c0")
    assert reads == [(("c0-eth0", "c0-eth1"), "ns-c0", "ns-c0", voq.VoqError)]
    s = got[0][2]
    assert (s.interval, s.bytes, s.packets, s.drops, s.qmin_ns, s.decided) == (6, 4_500, 3, 1, 812, 3)
    assert got[1][2].qmin_ns is None and got[1][2].interval is None
    io.read_core("c1")
    assert len(reads) == 1                              # a BPF core: no netlink
    io.close()
