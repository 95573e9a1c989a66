"""E4's summary and point files from what a point measured (testbed.families.e4_flowmove).

Clocks: the traffic agent, the flow mover and the live trace use CLOCK_MONOTONIC (the
emulation's clock); tcpdump stamps packets with CLOCK_REALTIME. The mover reads both
clocks around its route replace, so capture times map onto the others through that
pair (or through the pair read when the point's control started, if nothing moved).
Every time written here is in paper seconds relative to the move (``t_s``), or to the
flow's start where a column says so.

Files (docs/e4.md, "Results"): ``move.json`` (the move as logged, both clocks, the
request), ``throughput_series.csv`` (granularity_s, source = capture | socket, t_s of the
bin's start, bytes, throughput_bps), ``cwnd.csv`` (the sender's live trace), ``dupacks.csv``
and ``late_segments.csv`` (capture times of each duplicate ACK and each late segment,
with how far behind), ``counters.json`` (kernel counters of sender and receiver, before
and after the move), ``mover_samples.csv`` (r1's view of the flow's rate, threshold
trigger), ``e4.json`` (everything else the summary is computed from).
"""

from __future__ import annotations

import json
import logging
import math
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from testbed.flow_family import FlowPoint
    from testbed.traffic import TrafficResult

log = logging.getLogger(__name__)


#: the largest window TCP can carry: 65535 x 2^14 bytes (RFC 7323, section 2.3); here so
#: that the family and its analysis share it (the family imports the analysis)
MAX_TCP_WINDOW = 65535 << 14
#: windows, in RTTs before the move: the steady rates before the move and at the end of
#: the run, and the dip right after the move (in one-RTT bins)
STEADY_RTTS, DIP_RTTS = 10, 10


def _count(times: np.ndarray, lo: float, hi: float = math.inf) -> int:
    return int(np.count_nonzero((times >= lo) & (times < hi)))


def time_to_reach(rates_bps: np.ndarray, level_bps: float, bin_s: float, run: int = 3) -> float:
    """End of the first bin of the first ``run`` consecutive bins at >= ``level_bps``
    (seconds from the first bin's start; NaN if none): right after the move both paths
    deliver at once for a moment, so a single bin above the level is no recovery."""
    above = np.asarray(rates_bps) >= level_bps
    for k in range(len(above) - run + 1):
        if above[k:k + run].all():
            return float((k + 1) * bin_s)
    return math.nan


def sender_port(packets: Any, ip: str) -> int:
    """The port of ``ip`` that sent the most payload in a capture (E4's one flow)."""
    import ipaddress

    src = int(ipaddress.IPv4Address(ip))
    mine = (packets.src == src) & (packets.payload > 0)
    if not mine.any():
        from testbed.pcaptcp import PcapError

        raise PcapError(f"the capture holds no data from {ip}")
    ports = packets.sport[mine].astype(np.int64)
    weight = np.bincount(ports, weights=packets.payload[mine].astype(np.float64))
    return int(np.argmax(weight))


def summarise(family: Any, fp: "FlowPoint", result: "TrafficResult") -> dict[str, Any]:
    """The point's summary row (``family``'s metrics) and files (module docstring)."""
    from testbed import pcaptcp, tcpmem
    from testbed.cc import lossdetect
    from topologies.flowmove import RECEIVER, SENDER, SENDER_IP

    ctx, v, D, m = fp.ctx, fp.values, fp.ctx.tdf, fp.measured
    rtt_b, rtt_a = family.rtts(v)
    before, _ = family.phases(v)
    alpha = family.buffer_bytes(v)
    assert fp.run is not None and fp.run.t0 is not None
    t0 = fp.run.t0  # emulation (monotonic) s; the flow starts at t0 (start_s = 0)
    moves = m.get("moves") or []
    move = moves[0] if moves else None
    mono, real = m["clock_pair"]
    offset = (move["realtime_before"] - move["t_before"]) if move else (real - mono)  # realtime - monotonic
    t_move = move["t_before"] if move else t0 + D.time_to_emulation(before)  # monotonic
    t_end = t0 + D.time_to_emulation(family.duration(v))
    if move is None:
        requested = math.nan
    elif move["trigger"] == "command":
        requested = m["move_at_s"]
    else:
        requested = D.time_to_paper(move["t_request"] - t0)
    move_s = D.time_to_paper(t_move - t0) if move else math.nan

    def rel(t_mono: float) -> float:
        """Monotonic (emulation) s -> paper s relative to the move."""
        return D.time_to_paper(t_mono - t_move)

    ctx.write_json("move.json", {
        "moved": move is not None, "record": move, "requested_s": requested, "move_s": move_s,
        "trigger": v["trigger"], "t0_monotonic": t0, "realtime_minus_monotonic": offset,
        "note": "record: controllers/flowmover.py's log line (emulation s); requested_s and move_s: paper s after "
                "the flow's start"})

    # -- the capture ---------------------------------------------------------------------
    link_goodput = v["limit_rate"].si * family.payload_share()
    limit_before = 8 * alpha / rtt_b if v["limiter"] == "buffer" else link_goodput
    limit_after = 8 * alpha / rtt_a if v["limiter"] == "buffer" else link_goodput
    cap: dict[str, Any] = {}
    series_rows: list[dict[str, Any]] = []
    if m.get("capture"):
        packets = pcaptcp.read(m["capture"])
        trace = pcaptcp.flow(packets, sender=(SENDER_IP.split("/")[0], sender_port(packets, SENDER_IP.split("/")[0])))
        move_real = t_move + offset
        data_t = (trace.data.t_s - move_real)  # emulation s relative to the move
        pay = trace.data.payload.astype(np.int64)
        steady = D.time_to_emulation(STEADY_RTTS * rtt_b)
        end_rel = t_end - t_move

        def rate(lo: float, hi: float) -> float:
            sel = (data_t >= lo) & (data_t < hi)
            return 8 * float(pay[sel].sum()) / D.time_to_paper(hi - lo) if hi > lo else math.nan

        cap["rate_before"] = rate(-steady, 0.0)
        if v["limiter"] == "buffer" and cap["rate_before"] > 1.1 * limit_before:
            text = (f"the flow ran at {cap['rate_before'] / 1e9:.3g} Gbit/s before the move, above its buffer's "
                    f"limit {limit_before / 1e9:.3g} Gbit/s: the window clamp did not hold")
            log.warning("%s: %s", ctx.dir.name, text)
            ctx.progress(f"warning: {text}")
        cap["rate_after"] = rate(end_rel - steady - D.time_to_emulation(rtt_b), end_rel - D.time_to_emulation(rtt_b))
        for g in sorted({1.0, rtt_b}):
            # bins with an edge at the move, from the flow's start to the end of the last
            # whole bin
            g_emu = D.time_to_emulation(g)
            first = -g_emu * math.ceil((t_move - t0) / g_emu - 1e-9)
            last = g_emu * math.floor(end_rel / g_emu + 1e-9)
            if last <= 0:
                continue
            s = pcaptcp.series(trace, g_emu, move_real, first, last)
            for start, nbytes in zip(s.start_s, s.bytes):
                series_rows.append({"granularity_s": g, "source": "capture", "t_s": D.time_to_paper(float(start)),
                                    "bytes": int(nbytes), "throughput_bps": 8 * int(nbytes) / g})
        fine = pcaptcp.series(trace, D.time_to_emulation(rtt_b), move_real, 0.0,
                              D.time_to_emulation(DIP_RTTS * rtt_b))
        fine_rate = 8 * fine.bytes[:DIP_RTTS] / rtt_b
        cap["dip_depth"] = max(0.0, 1 - float(fine_rate.min()) / cap["rate_before"]) if cap["rate_before"] > 0 \
            else math.nan
        # in bins of RTT-after: a window-limited flow delivers its window once per RTT, in
        # trains at the links' rate, so bins of another length alias (RTT-before bins of a
        # 6 ms train period alternate between one and two trains)
        reach = pcaptcp.series(trace, D.time_to_emulation(rtt_a), move_real, 0.0, end_rel)
        cap["time_to_95"] = time_to_reach(8 * reach.bytes / rtt_a, 0.95 * limit_after, rtt_a)
        dup = pcaptcp.dupacks(trace, strict_window=True) - move_real
        dup_any = pcaptcp.dupacks(trace, strict_window=False) - move_real
        late = pcaptcp.late_segments(trace)
        extent = pcaptcp.reorder_extent(trace)
        late_t = late.t_s - move_real
        cap.update(dupacks=_count(dup, 0.0), dupacks_any=_count(dup_any, 0.0), dupacks_before=_count(dup, -math.inf, 0.0),
                   ooo=_count(late_t, 0.0), ooo_before=_count(late_t, -math.inf, 0.0),
                   extent=float(extent.segments[late_t >= 0].max()) if (late_t >= 0).any() else 0.0,
                   packets=len(packets), truncated=packets.truncated, skipped=packets.skipped, mss=trace.mss)
        ctx.write_csv("dupacks.csv", [{"t_s": D.time_to_paper(float(t)), "rfc5681": True} for t in dup] +
                      [{"t_s": D.time_to_paper(float(t)), "rfc5681": False} for t in np.setdiff1d(dup_any, dup)])
        ctx.write_csv("late_segments.csv", [
            {"t_s": D.time_to_paper(float(t)), "seq": int(sq), "end": int(e), "front": int(f), "copy": bool(c),
             "behind_segments": float(b)}
            for t, sq, e, f, c, b in zip(late_t, late.seq, late.end, late.front, late.copy, extent.segments)])
    # the receiving socket's own counts (the traffic agent's bins), aligned on the flow's start
    for g in sorted({1.0, rtt_b}):
        try:
            rows = result.flow_series(0, g)
        except Exception:  # noqa: BLE001 - a flow that never connected has no series
            rows = []
        shift = move_s if move else before
        for r in rows:
            series_rows.append({"granularity_s": g, "source": "socket", "t_s": r["t_s"] - shift,
                                "bytes": r["bytes"], "throughput_bps": r["throughput_bps"]})
    ctx.write_csv("throughput_series.csv", series_rows)

    # -- kernel counters ----------------------------------------------------------------------
    snaps, names = m["snaps"], m["tcp_netns"]
    counters = {}
    for phase, (a, b) in {"before": ("start", "move"), "after": ("move", "end")}.items():
        counters[phase] = {role: lossdetect.delta(snaps[a][ns], snaps[b][ns]) for role, ns in names.items()}
    # the emulating kernel's memory artefacts (lossdetect's one definition), both ends, both phases
    memory = sum((lossdetect.classify(counters[ph][role]) for ph in counters for role in counters[ph]),
                 lossdetect.LossDetection.zero())
    memory_pressures, memory_drops = memory.memory_pressures, memory.memory_drops
    if memory_pressures or memory_drops:
        text = (f"the kernel ran short of TCP memory: {memory_pressures} pressure event(s), {memory_drops} "
                "segment(s) dropped by the receiver (an emulation artefact; testbed.tcpmem, docs/e4.md)")
        log.warning("%s: %s", ctx.dir.name, text)
        ctx.progress(f"warning: {text}")
    snd_before = lossdetect.classify(counters["before"]["sender"])
    snd_after = lossdetect.classify(counters["after"]["sender"])
    ctx.write_json("counters.json", {**counters, "note": "kernel counter differences (nstat names) of the sender's "
                                     "and receiver's namespaces: before = start of traffic to the move (snapshot "
                                     "just after the route replace was requested), after = move to end"})

    # -- live trace ------------------------------------------------------------------------------
    trace_rows = []
    for sm in m.get("cwnd") or []:
        if sm.event in ("ack", "retrans", "rto"):
            trace_rows.append({"t_s": rel(sm.t_s), "event": sm.event, "cwnd": sm.cwnd, "ssthresh": sm.ssthresh,
                               "reordering": sm.reordering, "ca_state": sm.ca_state, "srtt_s": D.time_to_paper(sm.srtt_s),
                               "in_flight": sm.in_flight})
    ctx.write_csv("cwnd.csv", trace_rows)
    pre = [r for r in trace_rows if r["t_s"] < 0]
    post = [r for r in trace_rows if 0 <= r["t_s"] < DIP_RTTS * rtt_b]
    later = [r for r in trace_rows if r["t_s"] >= 0]
    # a changes-only trace: the last sample before a window still holds inside it
    carried = pre[-1:] if pre else []

    # -- tcp_info and the rest ---------------------------------------------------------------------
    from testbed.traffic.records import read_jsonl

    snd_info = next((r.get("tcp_info") or {} for r in read_jsonl(result.out_dir / f"flows-{SENDER}.jsonl")), {})
    rcv_info = next((r.get("tcp_info") or {} for r in result.sink_records if r.get("dst") == RECEIVER), {})
    busy = snd_info.get("busy_time_us") or 0
    mover_samples = [{"t_s": rel(s["t"]), "rate_bps": D.rate_to_paper(s["rate_bps"])} for s in m.get("samples", [])]
    ctx.write_csv("mover_samples.csv", mover_samples)
    machine_path = ctx.dir / "machine.json"
    machine = json.loads(machine_path.read_text()) if machine_path.exists() else {}
    wall, emu_s = machine.get("wall_s"), machine.get("emulation_s")
    ctx.write_json("e4.json", {"capture": {k: v2 for k, v2 in cap.items()}, "sender_tcp_info": snd_info,
                               "receiver_tcp_info": rcv_info, "trace_lost": m.get("trace_lost", 0),
                               "capture_drops": m.get("capture_drops", 0)})
    nan = math.nan
    return {
        "tdf": D.factor,
        "buffer_bytes": alpha,
        "link_rate_bps": family.link_rate(v),
        "rtt_before_s": rtt_b,
        "rtt_after_s": rtt_a,
        "limit_before_bps": limit_before,
        "limit_after_bps": limit_after,
        "moved": int(move is not None),
        "move_requested_s": requested,
        "move_s": move_s,
        "move_lateness_s": move_s - requested if move else nan,
        "move_phase": family.move_phase(v, ctx.point.seed),
        "rate_before_bps": cap.get("rate_before", nan),
        "rate_after_bps": cap.get("rate_after", nan),
        "reached_before": cap.get("rate_before", nan) / limit_before,
        "reached_after": cap.get("rate_after", nan) / limit_after,
        "dip_depth": cap.get("dip_depth", nan),
        "time_to_95_s": cap.get("time_to_95", nan),
        "dupacks": cap.get("dupacks", nan),
        "dupacks_any_window": cap.get("dupacks_any", nan),
        "dupacks_before": cap.get("dupacks_before", nan),
        "ooo_segments": cap.get("ooo", nan),
        "ooo_segments_before": cap.get("ooo_before", nan),
        "reorder_extent_segments": cap.get("extent", nan),
        "ooo_packets_kernel": rcv_info.get("rcv_ooopack", nan),
        "reorder_detections": snd_after.reordering,
        "reorder_detections_before": snd_before.reordering,
        "reordering_max": max((r["reordering"] for r in carried + later), default=nan),
        "fast_recoveries": snd_after.fast,
        "undos": snd_after.spurious_fast + snd_after.spurious_rto,
        "retrans_segs": snd_after.retrans_segs,
        "retrans_segs_before": snd_before.retrans_segs,
        "spurious_retrans_segs": snd_after.spurious_retrans_segs,
        "rto_events": snd_after.rto,
        "retrans_suppressed": snd_before.rtx_suppressed + snd_after.rtx_suppressed,
        "cwnd_before": pre[-1]["cwnd"] if pre else nan,
        "cwnd_min_after": min((r["cwnd"] for r in carried + post), default=nan),
        "ssthresh_min_after": min((r["ssthresh"] for r in carried + post), default=nan),
        "rwnd_limited_share": (snd_info.get("rwnd_limited_us", 0) / busy) if busy else nan,
        "sndbuf_limited_share": (snd_info.get("sndbuf_limited_us", 0) / busy) if busy else nan,
        "tcp_mem_bytes": m["tcp_mem"][1] * tcpmem.page_size() if m.get("tcp_mem") else nan,
        "memory_pressures": memory_pressures,
        "memory_drops": memory_drops,
        "router_drops": m.get("router_drops", 0),
        "capture_drops": m.get("capture_drops", 0),
        "paper_s_per_wall_s": (D.time_to_paper(emu_s) / wall) if wall and emu_s else nan,
    }
