"""``e4-flowmove``: E4, moving a running TCP CUBIC flow from the IP path onto an optical
circuit (Moura, Fioreze, de Boer, Pras, "Optical Switching Impact on TCP Throughput
Limited by TCP Buffers"; spec ``../shared/spec/e4-flow-move.md``; docs/e4.md).

One long-lived flow, Sender -> Receiver, crosses r1 - r2 - r3 (topologies/flowmove.py).
While it runs, router r1 replaces its route to the receiver by the direct r1 - r3 link
(controllers/flowmover.py): at a requested time (``trigger = "time"``, the paper's
set-up) or once the flow's rate, read from r1's own port counters, has exceeded a
threshold (``"threshold"``, the "self-management" of the paper's refs. [5, 6]). Only the
data direction moves; the ACKs stay on the IP path. The RTT falls from ``rtt`` to
``rtt_ratio`` x ``rtt`` (paper: 10 / 6, 100 / 60, 1000 / 600 ms).

**The limit.** With ``limiter = "buffer"`` (the paper) the receiver's window is clamped
to the buffer alpha = limit_rate x rtt (TCP_WINDOW_CLAMP: an exact bound on the bytes in
flight; the paper's Table 2, e.g. 1.25 MB at 1 Gbit/s and 10 ms) and every link runs at
the over-provisioned ``link_rate`` (Table 2: 622.08 Mbit/s, 2.488 Gbit/s, 39.813
Gbit/s), so the flow is held at alpha / RTT: limit_rate before the move, limit_rate / 0.6
after it. The sender's buffer autotunes up to 4 alpha so that it never binds (Linux's
send buffer also counts each packet's overhead: SO_SNDBUF = alpha would hold about half
of alpha). With ``limiter = "link"`` (the paper's future work) r1's two ports towards
the receiver (IP and optical path) run at limit_rate with a FIFO of ``queue`` packets and
the window is large (4 x limit_rate x rtt), so that link, the same before and after the
move, not the buffer, limits the flow; its limit is limit_rate x MSS / frame (1448 /
1514 of payload on the wire).

**Time dilation.** Each point runs at D = tdf x limit_rate / ``emulated_rate`` (at least
1): the emulation always moves the flow at about ``emulated_rate`` (the packet rate the
guest sustains), so a 10 Gbit/s point is no slower to emulate than a 100 Mbit/s one
relative to its RTTs. The definition's ``tdf`` multiplies it (``testbed check-tdf``
doubles it). D is recorded per point (summary column ``tdf``, status.json).

**Measurements** (docs/e4.md, "Results"): a capture of the receiver's link (tcpdump,
headers only) gives the receiver-side throughput around the move at 1 s and one
RTT-before, the duplicate ACKs (RFC 5681) and the out-of-order arrivals before and
after the move; the traffic agent's receive counts give the same series from the
receiving socket; kernel counters of sender and receiver (testbed.cc.lossdetect),
snapshot at the move, give reordering detections, recoveries, undos and
retransmissions before and after it; a live trace of the sender's socket (testbed.cc.trace) gives
cwnd, ssthresh and the reordering degree; tcp_info gives the share of time the
receiver's window (or the send buffer) held the sender; the routers' qdiscs give the
drops (none expected: the links are over-provisioned).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import Hashable, Iterator
from typing import TYPE_CHECKING, Any

from testbed.dilation import TimeDilation
from testbed.errors import DefinitionError
from testbed.experiment import Definition, Param
from testbed.families._e4_measure import DIP_RTTS, MAX_TCP_WINDOW, STEADY_RTTS
from testbed.family import Analysis
from testbed.flow_family import FlowFamily, FlowPoint, TrafficPlan
from testbed.metrics import Metric
from testbed.units import Dim

if TYPE_CHECKING:
    from mininet.topo import Topo

    from testbed.traffic import Schedule, TrafficResult

log = logging.getLogger(__name__)

#: the paper's Table 2: limiting rate -> over-provisioned link speed (bit/s)
TABLE2_LINK_RATE = {100e6: 622.08e6, 1e9: 2.488e9, 10e9: 39.813e9}
#: link speed / limiting rate for a limiting rate not in Table 2 (its 1 Gbit/s row)
DEFAULT_OVERPROVISION = 2.488
#: the largest buffer E4 emulates: every byte in flight is held by netem, the sender and
#: the receiver at once (guest memory; docs/e4.md)
MAX_BUFFER_BYTES = 160_000_000
#: full-size IP packet (MTU 1500), TCP payload with timestamps (1500 - 20 - 32), and the
#: Ethernet frame the links' rate counts
IP_PACKET, MSS = 1500, 1448
FRAME = IP_PACKET + 14
CCAS = ("cubic", "reno", "bbr")


def link_rate_for(limit_bps: float, given_bps: float) -> float:
    """The links' rate: ``given_bps`` if > 0, else the paper's Table 2 for ``limit_bps``
    (or DEFAULT_OVERPROVISION x it)."""
    if given_bps > 0:
        return given_bps
    for limit, rate in TABLE2_LINK_RATE.items():
        if math.isclose(limit, limit_bps, rel_tol=1e-9):
            return rate
    return DEFAULT_OVERPROVISION * limit_bps


class E4FlowMove(FlowFamily):
    name = "e4-flowmove"
    doc = "E4: a buffer-limited CUBIC flow moved from an IP path onto a shorter optical path"
    params = (
        Param("limit_rate", Dim.RATE, "1 Gbit/s", "the rate the buffers limit the flow to before the move "
              "(paper: 100 Mbit/s, 1 Gbit/s, 10 Gbit/s); the buffer is limit_rate x rtt", lo=0, lo_open=True,
              hi=100e9),
        Param("rtt", Dim.TIME, "10 ms", "RTT before the move (paper: 10, 100, 1000 ms)", lo=0, lo_open=True,
              hi=10.0),
        Param("rtt_ratio", "float", 0.6, "RTT after the move / RTT before (paper: 0.6)", lo=0.05, hi=0.95),
        Param("link_rate", Dim.RATE, "0 bit/s", "every link's rate; 0 = the paper's Table 2 for limit_rate "
              "(622.08 Mbit/s, 2.488 Gbit/s, 39.813 Gbit/s; else 2.488 x limit_rate)", lo=0, hi=400e9),
        Param("limiter", "choice", "buffer", "what limits the flow: the buffers (the paper) or the sender's "
              "r1's ports towards the receiver at limit_rate (the paper's future work)", choices=("buffer", "link")),
        Param("queue", "int", 0, "limiter = link: FIFO of r1's bottleneck ports in packets; 0 = one RTT-before "
              "at limit_rate", lo=0, hi=1_000_000),
        Param("trigger", "choice", "time", "what moves the flow: r1 at a set time (the paper) or r1's "
              "rate threshold (self-management)", choices=("time", "threshold")),
        Param("before", Dim.TIME, "0 s", "traffic before the move (trigger time: the move is requested "
              "then; threshold: the latest the threshold may be crossed); 0 = max(2 s, 25 RTT)",
              lo=0, hi=3600),
        Param("after", Dim.TIME, "0 s", "traffic after the move; 0 = max(2 s, 20 RTT)", lo=0, hi=3600),
        Param("phase", "choice", "random", "trigger time: where in the flow's RTT cycle the move falls: random "
              "(before + a uniform share of one RTT-before, drawn from the point's seed) or zero (at before). A "
              "window-limited flow sends its window in trains at the links' rate, so how much it reorders depends "
              "on it", choices=("random", "zero")),
        Param("threshold", Dim.RATIO, "90 %", "trigger threshold: move once r1 saw the flow at this share "
              "of limit_rate for 3 intervals of one RTT in a row", lo=0, lo_open=True, hi=10),
        Param("emulated_rate", Dim.RATE, "20 Mbit/s", "limit_rate as the emulation runs it: D = tdf x "
              "limit_rate / emulated_rate (at least 1)", lo=1e5, hi=10e9),
        Param("cca", "choice", "cubic", "congestion control of the sender (paper: cubic)", choices=CCAS),
        Param("trace_cwnd", "bool", True, "trace the sender's cwnd, ssthresh and reordering live (CO-RE BPF, ebpf/cwndtrace)"),
        Param("capture", "bool", True, "capture the receiver's link (tcpdump, headers) for the series, "
              "duplicate ACKs and reordering"),
    )
    metrics = (
        Metric("tdf", "1", "time dilation D of the point (tdf x limit_rate / emulated_rate)"),
        Metric("buffer_bytes", "B", "the buffer alpha = limit_rate x rtt (the receiver's window clamp)"),
        Metric("link_rate_bps", "bit/s", "every link's rate (limiter = link: r1's ports towards the receiver run "
               "at limit_rate)"),
        Metric("rtt_before_s", "s", "nominal RTT before the move"),
        Metric("rtt_after_s", "s", "nominal RTT after the move"),
        Metric("limit_before_bps", "bit/s", "the limit before the move: alpha x 8 / RTT before "
               "(limiter = link: limit_rate x 1448 / 1514, the payload share of a full frame)"),
        Metric("limit_after_bps", "bit/s", "the paper's new theoretical rate alpha x 8 / RTT after "
               "(limiter = link: as before the move)"),
        Metric("moved", "count", "1 if r1 moved the flow, else 0 (threshold never crossed)"),
        Metric("move_requested_s", "s", "when the move was asked for, after the flow's start: the set time "
               "(trigger time) or the end of the interval that crossed the threshold"),
        Metric("move_s", "s", "when r1 replaced its route (its log, kernel clock), after the flow's start"),
        Metric("move_lateness_s", "s", "move_s - move_requested_s"),
        Metric("move_phase", "1", "trigger time: the random share of one RTT-before added to before (0 with "
               "phase = zero; NaN: threshold trigger)"),
        Metric("rate_before_bps", "bit/s", "receiver-side goodput (capture) over the 10 RTTs before the move"),
        Metric("rate_after_bps", "bit/s", "receiver-side goodput (capture) over the last 10 RTT-before of the run"),
        Metric("reached_before", "1", "rate_before / limit_before (the flow was at its limit when moved)"),
        Metric("reached_after", "1", "rate_after / limit_after"),
        Metric("dip_depth", "1", "1 - the lowest goodput of a one-RTT-before bin within 10 RTTs after the "
               "move / rate_before (0: no dip)"),
        Metric("time_to_95_s", "s", "from the move to the end of the first of 3 consecutive one-RTT-after "
               "bins at >= 95 % of limit_after (NaN: never)"),
        Metric("dupacks", "count", "duplicate ACKs after the move (capture, RFC 5681 incl. the equal-window "
               "condition)"),
        Metric("dupacks_any_window", "count", "duplicate ACKs after the move without the equal-window condition"),
        Metric("dupacks_before", "count", "duplicate ACKs before the move (capture, RFC 5681)"),
        Metric("ooo_segments", "count", "data segments arriving at the receiver below the highest sequence "
               "already arrived, after the move (capture)"),
        Metric("ooo_segments_before", "count", "the same before the move"),
        Metric("reorder_extent_segments", "count", "largest distance (full segments) an out-of-order "
               "segment arrived behind the highest one (capture)"),
        Metric("ooo_packets_kernel", "count", "out-of-order packets the receiver's socket got (tcpi_rcv_ooopack, "
               "whole flow)"),
        Metric("reorder_detections", "count", "reordering the sender detected after the move (TCPSACKReorder "
               "+ TCPRenoReorder + TCPTSReorder)"),
        Metric("reorder_detections_before", "count", "the same before the move"),
        Metric("reordering_max", "count", "largest reordering degree of the sender after the move "
               "(tp->reordering, segments; live trace)"),
        Metric("fast_recoveries", "count", "fast recoveries the sender entered after the move"),
        Metric("undos", "count", "recoveries undone as spurious after the move (Full/Partial/DSACK/Loss undo)"),
        Metric("retrans_segs", "count", "segments the sender retransmitted after the move"),
        Metric("retrans_segs_before", "count", "segments the sender retransmitted before the move"),
        Metric("spurious_retrans_segs", "count", "retransmitted segments after the move that the receiver reported "
               "as duplicates (DSACK, TCPDSACKRecvSegs): retransmissions of segments that were only late"),
        Metric("rto_events", "count", "RTO expiries after the move"),
        Metric("retrans_suppressed", "count", "retransmissions the sender's kernel skipped because the original "
               "was still queued below TCP (TCPSpuriousRtxHostQueues, whole flow; 0 expected: the routers' IP "
               "layer orphans every packet, docs/e4.md)"),
        Metric("cwnd_before", "count", "the sender's cwnd (segments) just before the move (live trace)"),
        Metric("cwnd_min_after", "count", "smallest cwnd within 10 RTTs after the move (live trace)"),
        Metric("ssthresh_min_after", "count", "smallest ssthresh within 10 RTTs after the move (live trace; "
               "the kernel's 'infinite' 2^31-1 while never set)"),
        Metric("rwnd_limited_share", "1", "share of the sender's busy time held by the receiver's window "
               "(tcp_info; ~1 when the buffer is the limit)"),
        Metric("sndbuf_limited_share", "1", "share of the sender's busy time held by its send buffer"),
        Metric("tcp_mem_bytes", "B", "the kernel's global TCP memory pressure threshold during the point "
               "(net.ipv4.tcp_mem[1] x page size; raised to 8 alpha, what sender and receiver may hold)",
               since="2026-11-25"),
        Metric("memory_pressures", "count", "times the kernel entered TCP memory pressure during the point "
               "(TcpExtTCPMemoryPressures, sender and receiver; an emulation artefact: should be 0)",
               since="2026-11-25"),
        Metric("memory_drops", "count", "segments the endpoints dropped for want of socket memory "
               "(TcpExtTCPOFODrop + TcpExtTCPRcvQDrop, sender and receiver: the sender receives no data; an "
               "emulation artefact: should be 0)",
               since="2026-11-25"),
        Metric("router_drops", "count", "packets the routers' and hosts' qdiscs dropped (0: no loss at any "
               "link)"),
        Metric("capture_drops", "count", "packets tcpdump reported dropped by the kernel (capture counts are "
               "then lower bounds)"),
        Metric("paper_s_per_wall_s", "1", "emulated paper seconds per wall-clock second of the traffic"),
    )

    @classmethod
    def analysis(cls) -> Analysis:
        from analysis import e4

        return e4

    # -- derived values ---------------------------------------------------------------------
    @staticmethod
    def rtts(v: dict[str, Any]) -> tuple[float, float]:
        """(RTT before, RTT after) in paper seconds."""
        return v["rtt"].si, v["rtt"].si * v["rtt_ratio"]

    @staticmethod
    def buffer_bytes(v: dict[str, Any]) -> int:
        """alpha = limit_rate x rtt (bytes); limiter = link: 4 x that (never the limit)."""
        alpha = round(v["limit_rate"].si * v["rtt"].si / 8)
        return alpha if v["limiter"] == "buffer" else 4 * alpha

    @staticmethod
    def payload_share() -> float:
        """TCP payload per byte of a full frame on a link (1448 / 1514)."""
        return MSS / FRAME

    @staticmethod
    def link_rate(v: dict[str, Any]) -> float:
        """Every link's rate, paper bit/s (limiter = link: all but r1's ports towards the receiver)."""
        return link_rate_for(v["limit_rate"].si, v["link_rate"].si)

    @staticmethod
    def phases(v: dict[str, Any]) -> tuple[float, float]:
        """(before, after) in paper seconds, the automatic rules applied."""
        rtt = v["rtt"].si
        before = v["before"].si or max(2.0, 25 * rtt)
        after = v["after"].si or max(2.0, 20 * rtt)
        return before, after

    @classmethod
    def duration(cls, v: dict[str, Any]) -> float:
        """The flow's duration (paper s): before + one RTT-before (room for the move's
        phase) + after."""
        before, after = cls.phases(v)
        return before + v["rtt"].si + after

    @staticmethod
    def move_phase(v: dict[str, Any], seed: int) -> float:
        """The share of one RTT-before added to ``before`` for the trigger time: uniform in
        [0, 1) from the point's ``seed`` (phase = random), 0 (zero), NaN (threshold)."""
        if v["trigger"] != "time":
            return math.nan
        if v["phase"] == "zero":
            return 0.0
        import numpy as np

        return float(np.random.default_rng([seed, 4]).random())

    @classmethod
    def point_tdf(cls, values: dict[str, Any], tdf: TimeDilation) -> TimeDilation:
        d = tdf.factor * max(1.0, values["limit_rate"].si / values["emulated_rate"].si)
        if d > 1e6:
            raise DefinitionError("params.emulated_rate", str(values["emulated_rate"]),
                                  f"a rate that keeps D = tdf x limit_rate / emulated_rate <= 1e6 (it is {d:.3g})")
        return TimeDilation(d)

    @classmethod
    def queue_packets(cls, v: dict[str, Any]) -> int:
        """Every link's netem/FIFO limit: it holds every packet in flight on the link
        (netem counts the ones it delays), so twice the window in packets plus a margin."""
        return 2 * (cls.buffer_bytes(v) // MSS + 1) + 1000

    # -- the network --------------------------------------------------------------------------
    @classmethod
    def topology(cls, values: dict[str, Any], tdf: TimeDilation) -> "Topo":
        from topologies.flowmove import FlowMovePath

        v = values
        rtt_b, rtt_a = cls.rtts(v)
        link = link_rate_for(v["limit_rate"].si, v["link_rate"].si)
        bottleneck = None
        if v["limiter"] == "link":
            q = v["queue"] or max(1, round(v["limit_rate"].si * rtt_b / 8 / IP_PACKET))
            bottleneck = (tdf.rate_to_emulation(v["limit_rate"].si), q)
        return FlowMovePath(link_rate_bps=tdf.rate_to_emulation(link), rtt_before_s=tdf.time_to_emulation(rtt_b),
                            rtt_after_s=tdf.time_to_emulation(rtt_a), queue_packets=cls.queue_packets(v),
                            bottleneck=bottleneck)

    @classmethod
    def infeasible(cls, values: dict[str, Any], tdf: TimeDilation) -> str | None:
        """A window above TCP's largest (RFC 7323: 65535 x 2^14 B), such as the 1.25 GB of
        10 Gbit/s x 1000 ms, the case the paper leaves out because the flow "does not reach
        the rate selected for comparison before the transition": no TCP can reach that
        rate over that RTT. A window above MAX_BUFFER_BYTES, which the guest cannot hold
        three times over (netem, sender, receiver)."""
        v = values
        alpha = cls.buffer_bytes(v)
        if alpha > MAX_TCP_WINDOW:
            rate = 8 * MAX_TCP_WINDOW / v["rtt"].si
            return (f"{v['limit_rate']} x {v['rtt']} needs a {alpha / 1e6:.4g} MB window, above the largest TCP "
                    f"can carry ({MAX_TCP_WINDOW} B, RFC 7323): no TCP flow reaches {v['limit_rate']} over this "
                    f"RTT (at most {rate / 1e9:.3g} Gbit/s); the paper omits the case for the same reason")
        if alpha > MAX_BUFFER_BYTES:
            return (f"{v['limit_rate']} x {v['rtt']} needs a {alpha / 1e6:.4g} MB window; the guest holds at most "
                    f"{MAX_BUFFER_BYTES / 1e6:g} MB in flight three times over (netem, sender, receiver; docs/e4.md)")
        return None

    @classmethod
    def check(cls, defn: Definition) -> None:
        super().check(defn)
        for p in defn.points():
            v = p.values
            cls.point_tdf(v, defn.tdf)  # raises for a D beyond 1e6
            alpha = cls.buffer_bytes(v)
            if alpha < 4 * MSS:
                raise DefinitionError("params.limit_rate", str(v["limit_rate"]),
                                      f"a limit_rate x rtt of at least 4 segments ({4 * MSS} B); it is {alpha} B",
                                      defn.source)
            rtt_b, rtt_a = cls.rtts(v)
            if rtt_a - rtt_b / 2 <= 0:
                raise DefinitionError("params.rtt_ratio", v["rtt_ratio"],
                                      "a ratio above 0.5: the ACKs keep half of the RTT before on the IP path",
                                      defn.source)
            link = link_rate_for(v["limit_rate"].si, v["link_rate"].si)
            if v["limiter"] == "buffer" and link <= v["limit_rate"].si / v["rtt_ratio"]:
                raise DefinitionError("params.link_rate", str(v["link_rate"]),
                                      f"a rate above limit_rate / rtt_ratio ({v['limit_rate'].si / v['rtt_ratio']:.4g} "
                                      "bit/s), so the buffer, not a link, limits the flow after the move",
                                      defn.source)
            before, after = cls.phases(v)
            if before < (STEADY_RTTS + 5) * rtt_b or after < (STEADY_RTTS + DIP_RTTS) * rtt_b:
                raise DefinitionError("params.before" if before < (STEADY_RTTS + 5) * rtt_b else "params.after",
                                      f"{before:g} s / {after:g} s",
                                      f"before >= {STEADY_RTTS + 5} RTT and after >= {STEADY_RTTS + DIP_RTTS} RTT "
                                      "(the steady and dip windows)", defn.source)

    @classmethod
    def fabric_key(cls, values: dict[str, Any], tdf: TimeDilation) -> Hashable:
        v = values
        return (v["limit_rate"].si, v["rtt"].si, v["rtt_ratio"], v["link_rate"].si, v["limiter"], v["queue"],
                tdf.factor)

    @classmethod
    def fabric_note(cls, values: dict[str, Any]) -> str:
        return (f"building the E4 network: IP path RTT {values['rtt']}, optical path RTT "
                f"{values['rtt'].si * values['rtt_ratio'] * 1e3:g} ms")

    # -- per point ------------------------------------------------------------------------------
    @classmethod
    def prepare(cls, fp: FlowPoint) -> None:
        """r1 back on the IP path (a kept network was left moved); buffers: the receiver
        starts with 4 alpha and does not autotune (``tcp_moderate_rcvbuf`` 0: autotuning
        raises ``window_clamp`` with the buffer in Linux 6.1's tcp_rcv_space_adjust(), so
        TCP_WINDOW_CLAMP = alpha would not hold: measured, the flow ran at the links'
        2.4 Gbit/s instead of 1), the sender autotunes up to 4 alpha (per namespace);
        the kernel's global TCP memory limit (``tcp_mem``, shared by every namespace)
        raised to what both sockets may hold, 8 alpha (testbed.tcpmem: at the boot
        default, a 125 MB window reordered by the move made the receiver drop
        out-of-order segments for want of memory); the live tracer."""
        from testbed import nsops, tcpmem
        from topologies.flowmove import R1, RECEIVER, RECEIVER_NET, SENDER, VIA_IP_PATH

        v = fp.values
        nsops.replace_route(fp.emu[R1].netns, RECEIVER_NET, VIA_IP_PATH)
        big = max(4 * cls.buffer_bytes(v), 6 << 20)
        fp.emu[RECEIVER].sysctl("net.ipv4.tcp_moderate_rcvbuf", 0)
        fp.emu[RECEIVER].sysctl("net.ipv4.tcp_rmem", f"4096 {big} {big}")
        fp.emu[SENDER].sysctl("net.ipv4.tcp_wmem", f"4096 16384 {big}")
        fp.measured["tcp_mem"] = fp.ctx.keep("tcp-mem", 2 * big, lambda: tcpmem.at_least(fp.ctx.ledger, 2 * big))
        fp.measured["tracer"] = cls._tracer(fp) if v["trace_cwnd"] else None

    @classmethod
    def _tracer(cls, fp: FlowPoint) -> Any:
        from testbed.cc.trace import CwndTracer
        from topologies.flowmove import SENDER

        netns = fp.emu[SENDER].netns

        def make() -> CwndTracer:
            fp.ctx.progress("starting the cwnd tracer (once per network)")
            return CwndTracer(netns=netns, changes_only=True)

        return fp.ctx.keep("cwnd-tracer", (cls.fabric_key(fp.values, fp.ctx.tdf), netns), make)

    @classmethod
    def workload(cls, fp: FlowPoint) -> "Schedule":
        """One long-lived flow, sender -> receiver, for before + after, its window clamped
        to alpha by the receiver."""
        from testbed.traffic import long_lived
        from topologies.flowmove import RECEIVER, SENDER

        v = fp.values
        before, after = cls.phases(v)
        sched = long_lived([(SENDER, RECEIVER)], duration_s=cls.duration(v),
                           window_clamp_bytes=cls.buffer_bytes(v), trace=True)
        rtt_b, rtt_a = cls.rtts(v)
        fp.ctx.write_json("schedule-meta.json", {
            **sched.meta, "buffer_bytes": cls.buffer_bytes(v), "before_s": before, "after_s": after,
            "rtt_before_s": rtt_b, "rtt_after_s": rtt_a, "tdf": fp.ctx.tdf.factor,
            "link_rate_bps": link_rate_for(v["limit_rate"].si, v["link_rate"].si),
            "queue_packets": cls.queue_packets(v)})
        fp.ctx.progress(f"one {v['cca']} flow limited by {v['limiter']} at {v['limit_rate']} (RTT {v['rtt']}), "
                        f"{before:g} s before and {after:g} s after the move; D = {fp.ctx.tdf.factor:g}")
        return sched

    @classmethod
    def traffic(cls, fp: FlowPoint) -> TrafficPlan:
        from testbed.traffic import Window

        total = cls.duration(fp.values)
        return TrafficPlan(window=Window(warmup_s=0.0, length_s=total), duration_s=total,
                           granularities_s=(1.0, fp.values["rtt"].si))

    @classmethod
    @contextlib.contextmanager
    def control(cls, fp: FlowPoint) -> Iterator[None]:
        """The capture, the flow mover and the timeline's move, counters around them."""
        from controllers.flowmover_process import FlowMoverProcess
        from testbed.capture import Capture
        from testbed.cc import lossdetect
        from topologies.flowmove import (R1, RECEIVER, RECEIVER_LINK, RECEIVER_NET, SENDER, SENDER_IP,
                                         VIA_OPTICAL_PATH)

        ctx, v, D = fp.ctx, fp.values, fp.ctx.tdf
        rtt_b, _ = cls.rtts(v)
        before, _ = cls.phases(v)
        r1 = fp.emu[R1]
        netns = [fp.emu[SENDER].netns, fp.emu[RECEIVER].netns]
        tracer = fp.measured.get("tracer")
        mark = len(tracer.samples) if tracer is not None else 0
        lost0 = tracer.lost if tracer is not None else 0
        fp.measured["clock_pair"] = (time.monotonic(), time.clock_gettime(time.CLOCK_REALTIME))
        qdisc0 = qdisc_drops(fp.emu)
        trigger = v["trigger"]
        mover = FlowMoverProcess(
            ctx.ledger, r1.netns, ctx.dir, prefix=RECEIVER_NET, via=VIA_OPTICAL_PATH,
            watch_intf=r1.port_towards(SENDER_IP.split("/")[0]), trigger="command" if trigger == "time" else "threshold",
            interval_s=D.time_to_emulation(rtt_b) if trigger == "threshold" else None,
            threshold_bps=D.rate_to_emulation(v["threshold"].si * v["limit_rate"].si) if trigger == "threshold" else None,
            consecutive=3, counters_netns=netns)
        cap = None
        snaps: dict[str, Any] = {}
        with contextlib.ExitStack() as stack:
            stack.enter_context(mover)
            if v["capture"]:
                cap = Capture(fp.emu, RECEIVER_LINK, ctx.dir / "receiver.pcap", snaplen=128, packet_buffered=False)
                stack.callback(cap.stop)
            snaps["start"] = lossdetect.snapshot(netns)

            move_at = before + cls.move_phase(v, ctx.point.seed) * rtt_b if trigger == "time" else math.nan
            fp.measured["move_at_s"] = move_at

            def arm(run: Any) -> None:
                mover.request_move_at(run.t0 + D.time_to_emulation(move_at))

            if trigger == "time":
                fp.timeline.at(0.0, "arm r1's move at the set time", arm)
            yield
            snaps["end"] = lossdetect.snapshot(netns)
        moves = mover.moves()
        # the mover read the counters right after its route replace; nothing moved: all "before"
        snaps["move"] = moves[0]["counters"] if moves else snaps["end"]
        fp.measured.update(
            moves=moves, samples=[e for e in mover.events() if e.get("event") == "sample"],
            snaps=snaps, tcp_netns={"sender": netns[0], "receiver": netns[1]},
            router_drops=qdisc_drops(fp.emu) - qdisc0,
            capture=str(cap.path) if cap is not None else None,
            capture_drops=cap.dropped if cap is not None else 0)
        if tracer is not None:
            fp.measured["cwnd"] = list(tracer.samples[mark:])
            fp.measured["trace_lost"] = tracer.lost - lost0

    @classmethod
    def summarise(cls, fp: FlowPoint, result: "TrafficResult") -> dict[str, Any]:
        from testbed.families._e4_measure import summarise

        return summarise(cls, fp, result)


def qdisc_drops(emu: Any) -> int:
    """Packets the root qdiscs of every node's ports dropped so far (``tc -s -j qdisc``;
    a root HTB counts the drops of the netem or FIFO below it)."""
    total = 0
    for node in emu.nodes.values():
        out = node.run(["tc", "-s", "-j", "qdisc", "show"], check=False).stdout
        try:
            total += sum(int(q.get("drops", 0)) for q in json.loads(out or "[]") if q.get("root"))
        except (ValueError, TypeError):
            log.warning("%s: unreadable tc statistics", node.name)
    return total
