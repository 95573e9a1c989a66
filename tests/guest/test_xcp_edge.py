"""XCP edge pacing end to end in the full-kernel guest (docs/xcp-edge.md, "The guest
test"): the real loop (xcppace pacers, BPF accumulators, the agent process) on a
dumbbell fabric, against the independent reference ``testbed/xcpsim.py``.

Set-up: ``topologies.nsfnet.OpsMesh`` on a hand-made ``CoreGraph``: core nodes c0 - c1
(5 ms), edge nodes e0, e1, e2 on c0 and e3, e4, e5 on c1 (0.1 ms), one host behind each
(h<j> behind e<j>, no propagation); every link 100 Mb/s paper, D = 20 (5 Mb/s
emulation); cores ``ob`` with B = 375 kB per output (250 IP packets: no drop, the
reference's largest queue is about 100 packets at the start's overshoot; the occupancy
stays below the 1024 packets waiting at once the BPF tracks exactly), edges ``xcp-edge``
(0.25 s wait bound), one route per pair. XCP is set up exactly as ``e5-optram`` does per
point (``testbed.families._e5_xcp.start``: the plan, the pacers' classes with R_0 = C / 5
(five other edges), the epoch E, the accumulators and class map, the agent's margin M_x; the agent as ``XcpAgentProcess``)
with the family's default XCP parameters (the paper's alpha 0.4, beta 0.226, gamma 0.1,
d = 50 ms: d_e = 1 s; Delta = ``xcp_rate_delay``).

Traffic: h0 -> h3, h1 -> h4, h2 -> h5, greedy UDP (1472 B payloads, 1514 B frames) from
this process through sockets opened in each host's namespace, each at its link rate C
(a token bucket a few frames ahead of the host's NIC model, which sends them back to
back), so every macroflow is backlogged at its ingress edge (the edge drops the excess
at its wait bound). The receivers have sockets bound (no ICMP back). The senders start
about 300 ms (emulation) before E, timed so that the last release before E reaches c0 before E: the
pacers then release at R_0 from a phase phi in interval 0 that the test computes from
the first send instants, and every macroflow activates in interval 0, probing from
interval 1 (the family's rule: probes from the interval after its first released
bytes). The reference runs the same dumbbell (``xcpsim.dumbbell(3, C)``) with flows
starting at phi (paper time) and probes at phase 0: its first probes are at d too.

Checked, on the agent's records (``xcp.json``, ``xcp_rates.csv``, ``xcp_links.csv``):

* exact: the agent's and the pacers' lateness counters all 0; no core drop, no occupancy
  overflow; only the three macroflows active, all from interval 1;
* from interval SETTLE = 10 on: every granted rate within 10 % of C/3, their total
  within [0.95, 1.01] C, the bottleneck c0 -> c1's persistent queue at most 3 packets;
* per interval 1..K the run's granted rate of each macroflow equals the reference's
  within one packet per interval (8 x 1514 B / d = 242 kb/s); the pacers' bytes of
  interval 0 equal the reference's (the phase phi is right).

Run twice: cores ``ob`` (the BPF accumulators give Q) and ``ib`` with the same B per
input (``voq`` qdiscs; Q from their XCP rings, docs/xcp-edge.md, "IB nodes"). In this
dumbbell each input of c0 carries one macroflow, all to the bottleneck c0 -> c1, so the
ib node's output is work-conserving and the backlog each arrival finds is the ob node's:
the same reference holds. For ib also: every interval with traffic at the bottleneck
has a queue sample (from the voq ring: the BPF has none for held packets), no voq
decision was late, and the agent's margin M_x is 5 ms above the voq lookahead.

The measured numbers are printed per core architecture (``XCP_EDGE_MEASURED``, shown
with ``pytest -s``).
Measured 2026-11-24 (6.1 guest, icount, 4 min 40 s wall, 15 min guest time): exact; every
macroflow within 10 % of C/3 from interval 2 (the reference: 2), total 0.986 .. 1.001 C
from interval 10, bottleneck persistent queue <= 572 B from interval 8; |run - xcpsim| at
most 417 b/s in any interval (0.2 % of a packet per interval); the bottleneck's bytes per
interval equal the reference's in all 25 intervals.

    testbed guest -- .venv/bin/python -m pytest -q -s tests/guest/test_xcp_edge.py
"""

from __future__ import annotations

import csv
import json
import os
import secrets
import socket
import threading
import time
from pathlib import Path

import pytest

from helpers import require_features, require_root
from controllers.xcp_agent import AgentConfig
from testbed import setns, xcp, xcpsim
from testbed.cc.modules import KERNEL_DIR
from testbed.families import _e5_xcp as e5_xcp
from testbed.ledger import Ledger
from testbed.net import Emulation
from testbed.optical import layout
from testbed.optical.architectures import parse
from testbed.units import Dim, Quantity
from topologies.nsfnet import CoreGraph, CoreLink, OpsMesh

#: a study-like run of minutes of guest time: `make test-all`, not CI's `make test`
pytestmark = pytest.mark.long

#: every link, paper bit/s; the dilation; XCP's interval d (paper s)
RATE = 100e6
TDF = 20.0
D_PAPER = 0.05
CORE_DELAY_S = 0.005
#: B per core output (IP bytes): 250 packets of 1500 B
CORE_B = 375_000
EDGE_WAIT_NS = 250_000_000
PAYLOAD = 1472
FRAME = PAYLOAD + 8 + 20 + 14
#: the initial rate of every macroflow: TU C / (other edges) (config_from_plan)
R0 = RATE / 5
#: one packet per interval (paper bit/s): the tolerance against the reference
PACKET_BPS = 8 * FRAME / D_PAPER
#: the last interval compared; convergence is asserted from SETTLE on
K = 24
SETTLE = 10
#: the senders start about this many pacer gaps (at R0) before E
PRESTART_GAPS = 25
UDP_PORT = 40_921
#: the senders' token bucket: burst (frames) and top-up period (emulation s; 8 frames)
SEND_BURST = 16
SEND_STEP_S = 0.02
PAIRS = (("h0", "h3"), ("h1", "h4"), ("h2", "h5"))
FLOWS = ("e0-e3", "e1-e4", "e2-e5")
MEASURED: dict = {}


def _now() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def _sleep_until(t_ns: int) -> None:
    while (left := t_ns - _now()) > 0:
        time.sleep(min(left / 1e9, 0.5))


def dumbbell() -> CoreGraph:
    """c0 - c1 (5 ms), e0..e2 on c0, e3..e5 on c1."""
    return CoreGraph(2, (CoreLink(0, 1, CORE_DELAY_S, "test: the bottleneck"),), (0, 0, 0, 1, 1, 1))


@pytest.fixture(scope="module")
def emu():
    require_root()
    require_features("netns", "fq", "clsact-bpf", "btf", "modules")
    for ko in ("sch_xcppace.ko", "sch_hostnic.ko", "sch_voq.ko"):
        if not (KERNEL_DIR / ko).exists():
            pytest.fail(f"kernel/{ko} is not built: make -C kernel")
    ledger = Ledger.create(f"pytest-xcpedge-{os.getpid()}-{secrets.token_hex(3)}")
    topo = OpsMesh(dumbbell(), core_arch=f"ob:{CORE_B}", edge_arch=f"xcp-edge:{EDGE_WAIT_NS}", rate_bps=RATE,
                   tdf=TDF, mtu=1500)
    try:
        with Emulation(topo, ledger, "xe" + secrets.token_hex(2)) as e:
            yield e
    finally:
        print(f"\nXCP_EDGE_MEASURED {json.dumps(MEASURED)}")
        assert not ledger.teardown(), "teardown left objects"


class Sender(threading.Thread):
    """Greedy UDP from ``src`` to ``dst`` at the host link's rate: the first datagram at
    ``start_ns`` (its send bracketed by two clock reads), then a token bucket at one
    frame per ``period_ns`` with a burst of SEND_BURST frames, topped up every SEND_STEP_S.
    The host's NIC model (hostnic) orphans a packet at enqueue, so a socket is never
    held back: an unpaced sender would fill the NIC queue without bound (the guest ran
    out of memory so). The NIC queue holds at most about SEND_BURST frames and sends
    them back to back at the link rate."""

    def __init__(self, emu, src: str, dst: str, start_ns: int, period_ns: int) -> None:
        super().__init__(daemon=True)
        with setns.entered(emu[src].netns):
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.dst = (emu[dst].ip, UDP_PORT)
        self.start_ns, self.period_ns = start_ns, period_ns
        self.stop = threading.Event()
        self.first: tuple[int, int] | None = None
        self.sent = 0
        self.error: str | None = None

    def run(self) -> None:
        data = bytes(PAYLOAD)
        try:
            _sleep_until(self.start_ns)
            t0 = _now()
            self.sock.sendto(data, self.dst)
            self.first = (t0, _now())
            self.sent = 1
            while not self.stop.is_set():
                allowed = 1 + (_now() - t0) // self.period_ns + SEND_BURST
                while self.sent < allowed:
                    self.sock.sendto(data, self.dst)
                    self.sent += 1
                self.stop.wait(SEND_STEP_S)
        except OSError as exc:
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.sock.close()


def _read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def family_values() -> dict:
    """e5-optram's defaults of the XCP parameters, pacing = xcp."""
    from testbed.families.e5_optram import E5OpticalRam

    values = {p.name: (Quantity.parse(p.default, p.dim) if isinstance(p.dim, Dim) else p.default)
              for p in E5OpticalRam.params if p.name.startswith("xcp_")}
    return {**values, "pacing": "xcp"}


def reference(phases_ns: dict[str, int], intervals: int, agent: AgentConfig) -> xcpsim.SimResult:
    """xcpsim's dumbbell of 3 macroflows (f<k> = FLOWS[k]) from R0, each starting at its
    phase (emulation ns after E, in paper time), probes at phase 0, the agent's XCP
    parameters, R_min (one packet_bytes packet per interval) and rate delay Delta,
    1514 B frames."""
    flows = [xcpsim.SimFlow(f"f{k}", xcpsim.dumbbell_path(k), R0, start_s=max(1, phases_ns[f]) / TDF / 1e9,
                            probe_phase_s=0.0) for k, f in enumerate(FLOWS)]
    cfg = xcpsim.SimConfig(params=agent.params(), packet_bytes=FRAME, min_rate_bps=agent.min_rate(agent.macroflows[0]),
                           rate_delay_s=agent.rate_delay_s)
    return xcpsim.XcpLoopSim(xcpsim.dumbbell(3, RATE, core_delay_s=CORE_DELAY_S), flows, cfg).run(intervals)


@pytest.mark.parametrize("core", ["ob", "ib"])
def test_xcp_edge_pacing_converges_and_equals_the_reference(emu, tmp_path, core):
    from controllers.xcp_agent_process import XcpAgentProcess
    from testbed.optical import voq

    fabric = emu.optical
    fabric.reconfigure(fabric.by_role({"core": parse(f"{core}:{CORE_B}")}))
    fabric.set_routing(single=True)
    measured = MEASURED.setdefault(core, {})
    configured = _now()
    cfg = e5_xcp.start(fabric, family_values(), TDF)
    E, d_e, M_x = cfg.epoch_ns, cfg.interval_ns, cfg.margin_ns
    assert d_e == round(D_PAPER * TDF * 1e9) and cfg.params() == xcp.XcpParameters(interval_s=D_PAPER)
    if core == "ib":                              # the voq qdiscs' rings on, the agent reading them
        assert {c.name: c.queue for c in cfg.cores} == {"c0": "voq", "c1": "voq"}
        assert M_x == e5_xcp.AGENT_MARGIN_NS + voq.DEFAULT_LOOKAHEAD_NS
        for n in ("c0", "c1"):
            qopt = voq.read(fabric.nodes[n].devs[0], fabric.nodes[n].netns).qopt
            assert (qopt.xcp_epoch_ns, qopt.xcp_interval_ns) == (E, d_e)
    else:
        assert {c.queue for c in cfg.cores} == {"bpf"} and M_x == e5_xcp.AGENT_MARGIN_NS

    # the plan: the three macroflows over c0 -> c1, from R0
    mfs = {m.name: m for m in cfg.macroflows}
    c0 = cfg.core("c0")
    assert c0 is not None
    bott = next(o.port for o in c0.outputs if o.peer == "c1")
    for name in FLOWS:
        m = mfs[name]
        assert [(h.node, h.port) for h in m.path][1] == ("c0", bott), m.path
        assert m.initial_rate_bps == pytest.approx(R0) and not m.start_active
    uplinks = {name: (mfs[name].src, mfs[name].path[0].port) for name in FLOWS}

    # the pacers' gap at R0 and the hosts' frame time (emulation ns)
    gap = max(1, round(8e9 * FRAME / round(R0 / TDF)))
    ps = layout.ps_per_byte(RATE / TDF)
    tau_host = layout.tau_ns(FRAME, ps)
    prop_up = fabric.nodes["e0"].ports[uplinks[FLOWS[0]][1]].prop_ns
    # the first release at an edge (first send + tau_host) lies half a gap after a
    # multiple of the gap from E: the release before E reaches c0 (prop_up later) before E
    start_ns = E - PRESTART_GAPS * gap + gap // 2 - tau_host

    receivers = []
    for _src, dst in PAIRS:
        with setns.entered(emu[dst].netns):
            r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        r.bind(("0.0.0.0", UDP_PORT))
        receivers.append(r)
    senders = [Sender(emu, src, dst, start_ns, tau_host) for src, dst in PAIRS]
    out = tmp_path / "xcp"
    out.mkdir()
    try:
        with XcpAgentProcess(emu.ledger, cfg, out) as agent:
            ready = _now()
            measured["agent_ready_after_config_s"] = (ready - configured) / 1e9
            assert ready < start_ns - 100_000_000, (
                f"the agent was ready {(ready - start_ns) / 1e9:.3f} s (emulation) after the senders' start: "
                f"the family's epoch lead ({e5_xcp.EPOCH_LEAD_S} s) is too short")
            for s in senders:
                s.start()
            # the agent decides interval K at E + (K+1) d_e + M_x; stop it before K+1
            _sleep_until(E + (K + 1) * d_e + M_x + d_e // 3)
        stopped = _now()
    finally:
        for s in senders:
            s.stop.set()
        for s in senders:
            if s.is_alive():
                s.join(timeout=30)
        for r in receivers:
            r.close()
    summary = agent.summary()
    rates = _read_csv(out / "xcp_rates.csv")
    links = _read_csv(out / "xcp_links.csv")
    counters = fabric.counters()
    held = fabric.holding_state()
    pacers = {node: st for (node, _dev), st in held.items() if fabric.nodes[node].role == "edge"}
    voqs = {(node, dev): st for (node, dev), st in held.items() if fabric.nodes[node].role == "core"}
    monitor = fabric.monitor()

    for s in senders:
        assert s.error is None and s.first is not None, f"sender {s.dst}: {s.error}"
    # phase of each macroflow's releases after E (the hosts' NIC departs the first
    # datagram within its sendto; the edge has it whole tau_host later)
    phases = {}
    for name, s in zip(FLOWS, senders):
        assert s.first is not None
        first_release = (s.first[0] + s.first[1]) // 2 + tau_host
        phases[name] = (first_release - E) % gap
    ref = reference(phases, K + 1, cfg)

    # -- records ---------------------------------------------------------------------------------
    granted: dict[str, dict[int, float]] = {f: {} for f in FLOWS}
    others = set()
    for r in rates:
        if r["macroflow"] in granted:
            granted[r["macroflow"]][int(r["interval"])] = float(r["rate_bps"])
        else:
            others.add(r["macroflow"])
    link_rows = {(r["node"], int(r["port"]), int(r["interval"])): r for r in links}
    decided = summary["intervals"]

    # -- numbers (printed) -----------------------------------------------------------------------
    diffs = {f: [abs(granted[f][k] - ref.rates[f"f{i}"][k]) for k in range(1, K + 1)] for i, f in enumerate(FLOWS)}
    worst_per_interval = [max(diffs[f][k - 1] for f in FLOWS) for k in range(1, K + 1)]
    total = {k: sum(granted[f][k] for f in FLOWS) for k in range(1, K + 1)}
    bq = [float(link_rows[("c0", bott, k)]["queue_bytes"]) for k in range(K + 1)]
    bB = [int(link_rows[("c0", bott, k)]["bytes"]) for k in range(K + 1)]
    ref_B = [li.input_bytes for li in ref.links[("c0", "c1")]]
    target = RATE / 3
    conv = {f: next((k for k in range(1, K + 1) if all(abs(granted[f][j] - target) <= 0.1 * target
                                                          for j in range(k, K + 1))), None) for f in FLOWS}
    ref_conv = xcpsim.converged_interval(ref, {f"f{i}": target for i in range(3)}, 0.1)
    measured.update({
        "intervals_decided": decided, "exact": summary["exact"],
        "counters": {k: summary[k] for k in ("acc_late", "acc_lost", "pacer_acc_late", "pacer_acc_lost",
                                             "late_rates", "probes_sent", "probes_returned", "rate_changes")},
        "pacers": summary["pacers"], "activated": summary["activated"],
        "decision_lag_ns": summary["decision_lag_ns"], "cpu_ns_per_interval": summary["cpu_ns_per_interval"],
        "phases_ns": phases, "first_send_spread_ns": [s.first[1] - s.first[0] for s in senders if s.first],
        "sent": [s.sent for s in senders], "ready_before_start_s": (start_ns - ready) / 1e9,
        "stopped_after_E_s": (stopped - E) / 1e9,
        "granted_mbps": {f: [round(granted[f][k] / 1e6, 3) for k in range(1, K + 1)] for f in FLOWS},
        "ref_mbps": {f: [round(ref.rates[f"f{i}"][k] / 1e6, 3) for k in range(1, K + 1)]
                     for i, f in enumerate(FLOWS)},
        "max_abs_diff_bps_per_interval": [round(x) for x in worst_per_interval],
        "max_abs_diff_bps": round(max(worst_per_interval)), "packet_bps": PACKET_BPS,
        "total_over_C": [round(total[k] / RATE, 4) for k in range(1, K + 1)],
        "converged_10pct": conv, "ref_converged_10pct": ref_conv,
        "bottleneck_queue_bytes": [round(q) for q in bq], "bottleneck_bytes": bB, "ref_bottleneck_bytes": ref_B,
        "ref_persistent_queue_bytes": [round(li.persistent_queue_bytes) for li in ref.links[("c0", "c1")]],
        "pacer_bytes_interval0": {f: int(link_rows[(*uplinks[f], 0)]["bytes"]) for f in FLOWS},
        "ref_sent_interval0": {f: ref.sent[f"f{i}"][0] for i, f in enumerate(FLOWS)},
        "monitor": monitor, "steps": summary["steps"], "late_slots": summary.get("late_slots"),
        "pacer_state": {n: {"max_decision_lag_ns": st.max_decision_lag_ns,
                            "max_enqueue_late_ns": st.max_enqueue_late_ns, "late": st.late, "drops": st.drops,
                            "overlimit": st.overlimit} for n, st in pacers.items()},
        "bottleneck_qmin_ns": [link_rows[("c0", bott, k)]["qmin_ns"] for k in range(K + 1)],
        "voq": {f"{n}:{dev}": {"late": st.port.late, "dropped": st.port.dropped,
                               "max_enqueue_late_ns": st.node.max_enqueue_late_ns,
                               "max_decision_lag_ns": st.node.max_decision_lag_ns} for (n, dev), st in voqs.items()},
    })

    # -- the set-up's preconditions -------------------------------------------------------------
    assert decided >= K + 1, f"the agent decided {decided} intervals, expected at least {K + 1}"
    core_rows = [r for r in counters if r["node"] in ("c0", "c1")]
    assert sum(r["dropped"] for r in core_rows) == 0, "a core node dropped: B is too small for this test"
    assert all(r.get("node_occ_overflow", 0) == 0 for r in core_rows)
    if core == "ib":
        # the queue samples came from the voq rings (the BPF has none for held packets),
        # every voq decision in time
        assert voqs and all(st.port.late == 0 and st.port.unmodelled == 0 for st in voqs.values()), voqs
        for k in range(1, K + 1):
            row = link_rows[("c0", bott, k)]
            assert int(row["packets"]) == 0 or row["qmin_ns"] != "", (k, row)
    assert not others, f"macroflows other than the three probed: {sorted(others)}"
    assert summary["activated"] == {f: 1 for f in FLOWS}, summary["activated"]
    for f in FLOWS:
        assert sorted(granted[f]) == list(range(1, max(granted[f]) + 1)) and max(granted[f]) >= K, granted[f]
        # the phase: the pacer released in interval 0 what the reference's pacer did
        assert abs(int(link_rows[(*uplinks[f], 0)]["bytes"]) - ref.sent[f"f{FLOWS.index(f)}"][0]) <= FRAME, \
            (f, measured["pacer_bytes_interval0"], measured["ref_sent_interval0"])
        assert gap // 8 <= phases[f] <= gap - prop_up - gap // 8, (
            f"{f}: first release {phases[f]} ns after a multiple of the gap: too close to E for the pre-E release "
            f"to stay out of interval 0 at c0 (sender scheduling)")

    # -- XCP converged ---------------------------------------------------------------------------
    for f in FLOWS:
        for k in range(SETTLE, K + 1):
            assert abs(granted[f][k] - target) <= 0.1 * target, (f, k, granted[f][k])
    for k in range(SETTLE, K + 1):
        assert 0.95 * RATE <= total[k] <= 1.01 * RATE, (k, total[k] / RATE)
        assert bq[k] <= 3 * FRAME, (k, bq[k])

    # -- exact (docs/xcp-edge.md, "(d)"): the comparison below holds only then ---------------------
    for k in ("acc_late", "acc_lost", "pacer_acc_late", "pacer_acc_lost", "late_rates"):
        assert summary[k] == 0, f"{k} = {summary[k]}: the loop was not exact"
    for edge, c in summary["pacers"].items():
        assert "error" not in c and c.get("late", 0) == 0 and c.get("late_rates", 0) == 0, (edge, c)
    assert summary["exact"] is True and "error" not in summary
    for node, st in pacers.items():
        assert st.late == 0 and st.late_rates == 0 and st.unmodelled == 0, (node, st)

    # -- the reference, interval by interval -----------------------------------------------------
    for i, f in enumerate(FLOWS):
        for k in range(1, K + 1):
            assert diffs[f][k - 1] <= PACKET_BPS, (
                f"{f} interval {k}: run {granted[f][k]:.0f} b/s, xcpsim {ref.rates[f'f{i}'][k]:.0f} b/s, "
                f"|diff| {diffs[f][k - 1]:.0f} > one packet per interval {PACKET_BPS:.0f}")
