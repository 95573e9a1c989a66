"""Retransmissions against when a transfer started, and the path's RTT then: a check of
whether timeouts come from an initial RTO shorter than the queueing delay.

On switches that never drop (electronic), every retransmission is spurious. When the
offered load exceeds the servers' capacity, queues grow through the window; a
connection opening once the round trip exceeds the initial RTO times out on its SYN and
first data segment before any RTT sample exists. This table shows it from a point's
own records: transfers in start-time groups (equal counts, by their start), per group
the share of transfers that retransmitted, retransmissions per data segment, and the
median of the transfers' smallest RTT (``min_rtt_us`` of the sender's ``tcp_info`` at
the end: the least queueing the transfer saw), in paper units (``meta.json``'s D).

Usage: ``python -m analysis.flowtime POINT_DIR [GROUPS]`` (a point folder of a flow
family with ``traffic/flows-*.jsonl[.gz]``; GROUPS default 8; exit 2 on bad input).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from testbed.traffic.records import read_jsonl

USAGE = "usage: python -m analysis.flowtime POINT_DIR [GROUPS]  (GROUPS: an integer >= 1, default 8)"
#: tcp_info's min_rtt_us when the connection never had an RTT sample
NO_SAMPLE_US = 0xFFFFFFFF


@dataclass(frozen=True)
class Group:
    """Transfers started in [first_start_s, last_start_s] (paper s)."""

    first_start_s: float
    last_start_s: float
    transfers: int
    retransmitting: int
    retransmissions: int
    data_segments: int
    #: median smallest RTT (paper s) over the transfers with an RTT sample; None if none
    median_min_rtt_s: float | None


def groups(point: Path, n: int = 8) -> list[Group]:
    """The start-time groups of ``point``'s transfers (see the module docstring).

    Raises FileNotFoundError without ``traffic/meta.json``, ValueError when ``n`` < 1
    or no transfer has a start and ``tcp_info``."""
    if n < 1:
        raise ValueError(f"groups={n}: accepted range is >= 1")
    traffic = point / "traffic"
    tdf = float(json.loads((traffic / "meta.json").read_text())["tdf"])
    flows = []
    for name in sorted({f.name.removesuffix(".gz") for f in traffic.glob("flows-*.jsonl*")}):
        for r in read_jsonl(traffic / name):
            info = r.get("tcp_info") or {}
            if r.get("start") is not None and info:
                flows.append((float(r["start"]), int(info.get("total_retrans", 0)), int(info.get("data_segs_out", 0)),
                              int(info.get("min_rtt_us", NO_SAMPLE_US))))
    if not flows:
        raise ValueError(f"{traffic}: no transfer with a start time and tcp_info")
    flows.sort()
    out = []
    for i in range(min(n, len(flows))):
        g = flows[i * len(flows) // n:(i + 1) * len(flows) // n]
        if not g:
            continue
        rtts = [rtt / 1e6 / tdf for *_x, rtt in g if 0 < rtt < NO_SAMPLE_US]
        out.append(Group(g[0][0] / tdf, g[-1][0] / tdf, len(g), sum(1 for x in g if x[1] > 0), sum(x[1] for x in g),
                         sum(x[2] for x in g), statistics.median(rtts) if rtts else None))
    return out


def table(gs: Sequence[Group]) -> str:
    """A Markdown table of ``gs`` (times in ms of paper time)."""
    lines = ["| started (ms) | transfers | retransmitted | retransmissions / data segments | median smallest RTT (ms) |",
             "|---|---|---|---|---|"]
    for g in gs:
        rtt = "-" if g.median_min_rtt_s is None else f"{g.median_min_rtt_s * 1e3:.2f}"
        share = g.retransmissions / g.data_segments if g.data_segments else float("nan")
        lines.append(f"| {g.first_start_s * 1e3:.1f}-{g.last_start_s * 1e3:.1f} | {g.transfers} "
                     f"| {g.retransmitting / g.transfers:.0%} | {share:.3f} | {rtt} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not 1 <= len(args) <= 2:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        n = int(args[1]) if len(args) == 2 else 8
        print(table(groups(Path(args[0]), n)))
    except (OSError, ValueError, KeyError) as exc:
        print(f"flowtime: {args[0]}: {exc}\n{USAGE}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
