"""Reading the agents' raw files and converting them to paper units.

Raw files (written by :mod:`testbed.traffic.agent`) hold emulation-unit times
(seconds since the run's t0 on CLOCK_MONOTONIC). Here they become :class:`FlowRecord`
and series in *paper units* with the run's time dilation D:

- times (start, end, completion time, srtt, RTO, interval starts): t_paper = t_emu / D;
- rates (goodput, throughput): r_paper = r_emu x D;
- sizes, byte counts, cwnd/ssthresh (segments) and retransmission counts: unchanged.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from testbed.dilation import TimeDilation

STATUSES = ("complete", "incomplete", "failed")


@dataclass
class FlowRecord:
    """One transfer's outcome, in paper units (see the module docstring).

    size_bytes: the flow's size (for a long-lived flow: the payload bytes it sent).
    sink_bytes: payload bytes the receiver counted. start_s: just before ``connect``
    (the handshake is included); connected_s: handshake done at the sender;
    first_byte_s / last_byte_s: first / last payload byte read by the receiver;
    end_s: the sender got the receiver's confirmation of all bytes (None unless
    complete). fct_s = end_s - start_s; goodput_bps = 8 x size / fct.
    retrans_segs: TCP_INFO total_retrans of the sender's socket (segments);
    data_segs_out: TCP_INFO data_segs_out (data segments sent, retransmissions included);
    dsack_dups: TCP_INFO dsack_dups (retransmitted segments the receiver reported as
    duplicates with a DSACK: spurious retransmissions, a lower bound when ACKs are lost);
    cwnd_segs, ssthresh_segs, srtt_s, rto_s: the sender's final TCP_INFO.
    status: complete | incomplete | failed; reason says why when not complete.
    """

    flow_id: int
    src: str
    dst: str
    size_bytes: int
    sink_bytes: int | None
    cca: str
    tag: str
    sched_start_s: float
    start_s: float | None
    connected_s: float | None
    first_byte_s: float | None
    last_byte_s: float | None
    end_s: float | None
    fct_s: float | None
    goodput_bps: float | None
    retrans_segs: int | None
    bytes_retrans: int | None
    data_segs_out: int | None
    dsack_dups: int | None
    cwnd_segs: int | None
    ssthresh_segs: int | None
    srtt_s: float | None
    rto_s: float | None
    status: str
    reason: str

    def row(self) -> dict[str, Any]:
        return asdict(self)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Records of a JSON-lines file, or of its gzip-compressed copy ``<path>.gz`` (a
    completed point's raw records are compressed: testbed.results.compact_point); a
    torn last line (a killed writer) is skipped."""
    out: list[dict[str, Any]] = []
    gz = path.with_name(path.name + ".gz")
    if path.exists():
        text = path.read_text()
    elif gz.exists():
        text = gzip.decompress(gz.read_bytes()).decode()
    else:
        return out
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _t(v: float | None, D: TimeDilation) -> float | None:
    return None if v is None else D.time_to_paper(v)


def flow_record(snd: dict[str, Any], sink: dict[str, Any] | None, D: TimeDilation) -> FlowRecord:
    """Merge a sender record and (if any) the receiver's record of the same flow."""
    info = snd.get("tcp_info") or {}
    start, end = snd.get("start"), snd.get("end")
    status = snd["status"]
    size = snd["size"] if snd.get("size") else snd.get("sent", 0)
    fct = end - start if status == "complete" and end is not None and start is not None else None
    ssthresh = info.get("snd_ssthresh")
    return FlowRecord(
        flow_id=snd["id"], src=snd["src"], dst=snd["dst"], size_bytes=int(size),
        sink_bytes=sink["got"] if sink else None, cca=snd.get("cca", ""), tag=snd.get("tag", ""),
        sched_start_s=D.time_to_paper(snd["sched_start"]), start_s=_t(start, D),
        connected_s=_t(snd.get("connected"), D), first_byte_s=_t(sink.get("first") if sink else None, D),
        last_byte_s=_t(sink.get("last") if sink else None, D),
        end_s=_t(end if status == "complete" else None, D), fct_s=_t(fct, D),
        goodput_bps=D.rate_to_paper(8 * size / fct) if fct else None,
        retrans_segs=info.get("total_retrans"), bytes_retrans=info.get("bytes_retrans"),
        data_segs_out=info.get("data_segs_out"), dsack_dups=info.get("dsack_dups"),
        cwnd_segs=info.get("snd_cwnd"),
        ssthresh_segs=None if ssthresh is None or ssthresh >= 0x7FFFFFFF else ssthresh,
        srtt_s=_t(info["rtt_us"] * 1e-6, D) if "rtt_us" in info else None,
        rto_s=_t(info["rto_us"] * 1e-6, D) if "rto_us" in info else None,
        status=status, reason=snd.get("reason", ""))


def load_flows(out_dir: Path, hosts: Iterable[str], D: TimeDilation) -> list[FlowRecord]:
    """All flow records of a run folder, sorted by flow id."""
    sinks: dict[int, dict[str, Any]] = {}
    senders: list[dict[str, Any]] = []
    for h in hosts:
        for r in read_jsonl(out_dir / f"sink-{h}.jsonl"):
            if r.get("id") is not None:
                sinks[r["id"]] = r
        senders.extend(read_jsonl(out_dir / f"flows-{h}.jsonl"))
    return sorted((flow_record(s, sinks.get(s["id"]), D) for s in senders), key=lambda f: f.flow_id)


def series_from_bins(bins: dict[str, int], g_emu: float, D: TimeDilation, *,
                     until_emu: float | None = None) -> list[dict[str, float]]:
    """Per-interval throughput from byte counts per interval index (interval i covers
    [i g, (i+1) g) emulation seconds after t0). Empty intervals are filled with 0 up to
    the last non-empty one (or ``until_emu``). Returns rows t_s (interval start),
    bytes, throughput_bps, in paper units."""
    counts = {int(k): v for k, v in bins.items() if int(k) >= 0}
    last = max(counts, default=-1)
    if until_emu is not None:
        last = max(last, math.ceil(until_emu / g_emu) - 1)
    return [{"t_s": D.time_to_paper(i * g_emu), "bytes": counts.get(i, 0),
             "throughput_bps": D.rate_to_paper(8 * counts.get(i, 0) / g_emu)} for i in range(last + 1)]


def merge_bins(parts: Iterable[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in parts:
        for k, v in p.items():
            out[k] = out.get(k, 0) + v
    return out
