"""SAW's and SAWL's retransmissions against the paper's rule, from a packet capture.

The oracle is the paper's text (Minakhmetov, Ware, Iannone, section III,
``../shared/papers/hybrid-switch-ops-datacenter-tcp.txt``), not the module's code: one
segment in flight; the RTO starts at T_1 (1 ms); "if the corresponding acknowledgement
packet is not received within this time" the segment is retransmitted and
T_i = alpha * T_{i-1} (eq. 1, alpha = 1.1, up to 60 s); "when the acknowledgement is
received, the RTO is updated to a weighted average of its current value and the
measured RTT gamma": T_i = beta * gamma + (1 - beta) * T_{i-1} (eq. 2, beta = 0.5).
SAWL arms T_i + p * tau instead of T_i (eq. 3), the average itself unchanged.

Two readings the paper leaves open, fixed here and named in every result:

* "the measured RTT" of a retransmitted segment: which copy was acknowledged? By
  default (``samples="echoed"``) the copy whose TCP timestamp the acknowledgement
  echoes (RFC 7323: the receiver echoes the copy that advanced its window), so gamma is
  that copy's RTT, unambiguous; ``"karn"``: a segment the paper's sender retransmitted
  gives no sample (Karn's rule); ``"first"``: gamma from the first copy's sending;
* an acknowledgement arriving exactly at the deadline is in time.

:func:`replay` walks one flow's sends and acknowledgements (times as seen at one capture
point) through those rules with the flow's own measured RTTs and says, per segment, how
many times the paper's sender would have retransmitted it before its acknowledgement
came, next to how many times the kernel did, and how far each kernel retransmission
was from the paper's deadline. A retransmission the kernel made where the rule makes
none (or the reverse) is a disagreement; its *margin* (the paper's deadline nearest to
the acknowledgement minus the acknowledgement time) says how close the call was. The capture point sees a segment when it
leaves the host's queue and an acknowledgement when it arrives, so the RTTs it measures
lack the time a segment waited in its host's queue: calls within that time of the
deadline may go either way, nothing else should.

``python -m testbed.cc.sawaudit CAPTURE --sender 10.0.0.1 --t1 '1 ms' --tdf 10000``
prints the summary of every SAW flow the capture holds from that address.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: the paper's constants (section III)
ALPHA, BETA, T_MAX_S = 1.1, 0.5, 60.0
#: readings of "the measured RTT" of a retransmitted segment (module docstring)
SAMPLES = ("echoed", "karn", "first")


@dataclass(frozen=True)
class SawRule:
    """The paper's timer, paper units (s): ``t1_s`` initial RTO, ``alpha`` (eq. 1),
    ``beta`` (eq. 2), ``t_max_s`` cap of T, ``extra_s`` SAWL's p x tau (0: SAW),
    ``samples``: which RTT of a retransmitted segment enters eq. 2 (:data:`SAMPLES`;
    module docstring)."""

    t1_s: float
    alpha: float = ALPHA
    beta: float = BETA
    t_max_s: float = T_MAX_S
    extra_s: float = 0.0
    samples: str = "echoed"

    def __post_init__(self) -> None:
        if not self.t1_s > 0 or not self.alpha > 1 or not 0 < self.beta < 1 or self.extra_s < 0:
            raise ValueError(f"SawRule: t1_s > 0, alpha > 1, 0 < beta < 1, extra_s >= 0 expected: {self}")
        if self.samples not in SAMPLES:
            raise ValueError(f"SawRule: samples {self.samples!r}: accepted {', '.join(SAMPLES)}")


@dataclass
class Segment:
    """One data segment of a flow as the audit sees it (paper seconds)."""

    seq: int
    first_send_s: float
    #: every time the capture saw it sent (the first included)
    sends_s: list[float]
    #: when an acknowledgement covering it arrived (None: none in the capture)
    ack_s: float | None
    #: the TCP timestamp (TSval) of each sending, and the one that acknowledgement echoes
    #: (None: no timestamps)
    tsvals: list[int | None] = field(default_factory=list)
    ack_tsecr: int | None = None
    #: the paper's T when it was first sent
    t_s: float = math.nan
    #: retransmissions the paper's sender makes before ack_s (None: no ACK, undecided)
    rule_retransmissions: int | None = None
    #: observed minus the paper's deadline, per kernel retransmission the rule also makes
    interval_errors_s: list[float] = field(default_factory=list)
    #: the paper's deadline nearest to the acknowledgement minus the acknowledgement time
    #: (of the last deadline the paper's sender passed, < 0, and the first it did not,
    #: >= 0, the closer): how close the paper's call on the count was
    margin_s: float | None = None

    @property
    def kernel_retransmissions(self) -> int:
        return len(self.sends_s) - 1

    @property
    def agrees(self) -> bool | None:
        if self.rule_retransmissions is None:
            return None
        return self.rule_retransmissions == self.kernel_retransmissions


def segments_of(sends: Sequence[tuple], acks: Sequence[tuple]) -> list[Segment]:
    """Group a flow's data packets ``(t, seq, end[, tsval])`` (sequence space of the flow,
    in capture order) by segment and attach the first acknowledgement ``(t, ack[, tsecr])``
    with ack >= end that arrived after the segment's first send. Raises ValueError when a
    segment is sent again with another length (SAW sends whole segments)."""
    by_seq: dict[int, Segment] = {}
    ends: dict[int, int] = {}
    for t, seq, end, *ts in sends:
        s = by_seq.get(seq)
        if s is None:
            s = by_seq[seq] = Segment(seq, t, [t], None)
            ends[seq] = end
        else:
            if ends[seq] != end:
                raise ValueError(f"segment {seq} sent with ends {ends[seq]} and {end}: not one segment in flight")
            s.sends_s.append(t)
        s.tsvals.append(ts[0] if ts else None)
    order = sorted(by_seq.values(), key=lambda s: s.first_send_s)
    acks = sorted(acks)
    i = 0
    for s in order:  # segments are acknowledged in order (one in flight)
        while i < len(acks) and (acks[i][1] < ends[s.seq] or acks[i][0] < s.first_send_s):
            i += 1
        if i < len(acks):
            s.ack_s = acks[i][0]
            s.ack_tsecr = acks[i][2] if len(acks[i]) > 2 else None
    return order


def replay(segments: list[Segment], rule: SawRule) -> list[Segment]:
    """Fill in each segment's paper T, the paper's retransmissions and the kernel's
    distance from the paper's deadlines (in place; returns ``segments``). The paper's
    sender is kept in step with the kernel: each deadline after a retransmission counts
    from the time the kernel's retransmission was seen (the paper's own deadline when the
    kernel made none)."""
    t = min(rule.t1_s, rule.t_max_s)
    for s in segments:
        s.t_s = t
        tk, last = t, s.first_send_s
        if s.ack_s is None:  # no acknowledgement seen: only the intervals can be checked
            s.rule_retransmissions = None
            for k in range(1, len(s.sends_s)):
                s.interval_errors_s.append(s.sends_s[k] - (last + tk + rule.extra_s))
                last, tk = s.sends_s[k], min(rule.alpha * tk, rule.t_max_s)
            t = tk
            continue
        n = 0
        passed = None
        while last + tk + rule.extra_s < s.ack_s:
            deadline = passed = last + tk + rule.extra_s
            n += 1
            if n < len(s.sends_s):
                s.interval_errors_s.append(s.sends_s[n] - deadline)
                last = s.sends_s[n]
            else:
                last = deadline
            tk = min(rule.alpha * tk, rule.t_max_s)
        s.rule_retransmissions = n
        nxt = last + tk + rule.extra_s - s.ack_s
        s.margin_s = nxt if passed is None or nxt <= s.ack_s - passed else passed - s.ack_s
        t = tk
        gamma = rtt_sample(s, n, rule.samples)
        if gamma is not None:
            t = min(rule.beta * gamma + (1 - rule.beta) * t, rule.t_max_s)
    return segments


def rtt_sample(s: Segment, rule_retransmissions: int, samples: str) -> float | None:
    """gamma of eq. (2) for an acknowledged segment (None: no sample) under the reading
    ``samples`` (:data:`SAMPLES`)."""
    assert s.ack_s is not None
    if rule_retransmissions == 0 and s.kernel_retransmissions == 0:
        return s.ack_s - s.first_send_s
    if samples == "first":
        return s.ack_s - s.first_send_s
    if samples == "echoed" and s.ack_tsecr is not None:
        copies = [t for t, v in zip(s.sends_s, s.tsvals) if v == s.ack_tsecr and t <= s.ack_s]
        if copies:
            return s.ack_s - copies[-1]
        return None
    return s.ack_s - s.first_send_s if rule_retransmissions == 0 else None


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    v = sorted(values)
    return v[min(len(v) - 1, max(0, math.ceil(q * len(v)) - 1))]


def summary(flows: dict[str, list[Segment]], rule: SawRule) -> dict[str, Any]:
    """Counts over replayed flows (paper seconds): segments, the kernel's and the paper's
    retransmissions, agreements, disagreements each way with their margins, and the
    kernel's retransmissions' distance from the paper's deadlines (p50, p99, max of the
    absolute error)."""
    segs = [s for f in flows.values() for s in f]
    decided = [s for s in segs if s.agrees is not None]
    kernel_only = [s for s in decided if s.kernel_retransmissions > s.rule_retransmissions]
    rule_only = [s for s in decided if s.kernel_retransmissions < s.rule_retransmissions]
    errors = [abs(e) for s in segs for e in s.interval_errors_s]
    return {
        "rule": {**asdict(rule), "source": "paper section III, eqs. (1)-(3)"},
        "flows": len(flows), "segments": len(segs), "undecided_segments": len(segs) - len(decided),
        "kernel_retransmissions": sum(s.kernel_retransmissions for s in segs),
        "rule_retransmissions": sum(s.rule_retransmissions for s in decided),
        "segments_agreeing": sum(1 for s in decided if s.agrees),
        "segments_kernel_more": len(kernel_only), "segments_rule_more": len(rule_only),
        "disagreement_margins_s": sorted((s.margin_s for s in kernel_only + rule_only if s.margin_s is not None),
                                         key=abs)[:20],
        "disagreement_margin_abs_max_s": max((abs(s.margin_s) for s in kernel_only + rule_only
                                              if s.margin_s is not None), default=math.nan),
        "interval_error_p50_s": _quantile(errors, 0.5), "interval_error_p99_s": _quantile(errors, 0.99),
        "interval_error_max_s": max(errors, default=math.nan),
    }


def flows_from_capture(path: Path, sender_ip: str, tdf: float,
                       listen_port: int | None = None) -> dict[str, tuple[list, list]]:
    """``{"ip:port": (sends, acks)}`` for every connection the capture holds from
    ``sender_ip`` with data, times in paper seconds (capture time / ``tdf``), sequence
    numbers relative to each flow's start. Connections from ``listen_port`` are the
    host's sinks replying (the traffic agent's byte count), not transfers: skipped.
    Raises testbed.pcaptcp.PcapError."""
    import numpy as np

    import ipaddress

    from testbed import pcaptcp

    packets = pcaptcp.read(path)

    ip = int(ipaddress.IPv4Address(sender_ip))
    rows = np.flatnonzero((packets.src == ip) & (packets.payload > 0))
    out: dict[str, tuple[list, list]] = {}
    for port, peer_ip, peer_port in sorted(set(zip(packets.sport[rows].tolist(), packets.dst[rows].tolist(),
                                                   packets.dport[rows].tolist()))):
        if port == listen_port:
            continue
        tr = pcaptcp.flow(packets, (sender_ip, port), (str(ipaddress.IPv4Address(peer_ip)), peer_port))
        data = np.flatnonzero(tr.data.payload > 0)
        sends = [(float(tr.data.t_s[i]) / tdf, int(tr.seq[i]), int(tr.end[i]), int(tr.data.tsval[i]) or None)
                 for i in data]
        has_ack = np.flatnonzero(tr.acks.flags & pcaptcp.ACK)
        acks = [(float(tr.acks.t_s[i]) / tdf, int(tr.ack[i]), int(tr.acks.tsecr[i]) or None) for i in has_ack]
        out[f"{sender_ip}:{port}"] = (sends, acks)
    return out


def audit_capture(path: Path, sender_ip: str, rule: SawRule, tdf: float,
                  listen_port: int | None = None) -> dict[str, Any]:
    """:func:`summary` of every flow of ``sender_ip`` in the capture ``path``."""
    flows = {k: replay(segments_of(s, a), rule)
             for k, (s, a) in flows_from_capture(path, sender_ip, tdf, listen_port).items()}
    return {"capture": str(path), "sender": sender_ip, "tdf": tdf, **summary(flows, rule)}


def main(argv: list[str] | None = None) -> int:
    """Command line; exit 2 on bad input (message names the option and the range)."""
    from testbed.units import Dim, Quantity, UnitError

    p = argparse.ArgumentParser(prog="python -m testbed.cc.sawaudit", description=__doc__.split("\n\n")[0])
    p.add_argument("capture", type=Path, help="classic pcap taken at the sender's link")
    p.add_argument("--sender", required=True, help="the sending server's IPv4 address")
    p.add_argument("--t1", default="1 ms", help="the paper's initial RTO T_1 (paper time; default 1 ms)")
    p.add_argument("--extra", default="0 s", help="SAWL's p x tau (paper time; default 0: SAW)")
    p.add_argument("--tdf", type=float, default=1.0, help="time dilation D of the run (> 0; default 1)")
    p.add_argument("--listen-port", type=int, default=5300,
                   help="the traffic agent's listening port: the host's replies from it are skipped (default 5300)")
    p.add_argument("--samples", choices=SAMPLES, default="echoed",
                   help="which RTT of a retransmitted segment enters eq. (2): the copy the ACK's timestamp "
                        "echoes (default), none (karn), or from the first copy (first)")
    a = p.parse_args(argv)
    try:
        t1, extra = Quantity.parse(a.t1, Dim.TIME).si, Quantity.parse(a.extra, Dim.TIME).si
        if not a.tdf > 0:
            raise ValueError(f"--tdf {a.tdf}: accepted > 0")
        rule = SawRule(t1, extra_s=extra, samples=a.samples)
    except (UnitError, ValueError) as exc:
        print(f"sawaudit: {exc}", file=sys.stderr)
        return 2
    from testbed.pcaptcp import PcapError

    try:
        out = audit_capture(a.capture, a.sender, rule, a.tdf, a.listen_port)
    except (PcapError, ValueError) as exc:  # no such file or flow, not a pcap, a bad address
        print(f"sawaudit: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
