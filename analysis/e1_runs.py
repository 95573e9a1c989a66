"""E1's per-run table: one Markdown row per repetition of every point of one or more
results folders, with what a reviewer checks before trusting a number (docs/e1.md keeps
it for the findings subset).

Columns: the folder's name, CCA, switch, link length, load, repetition, throughput
(Gb/s), failed transfers, retransmissions, of them spurious by DSACK, data segments,
switch drops, RTO expiries, decisions a holding switch took late and after their stamp (``hybrid-hold``;
"-" for the others), memory pressures / memory drops / listen drops, skipped
retransmissions, and the host seconds the point's traffic took (``machine.json``; "-"
when not recorded). Reads each folder's summary.csv and its points' machine.json only.

Usage: ``python -m analysis.e1_runs DIR [DIR ...]`` (exit 2 naming a folder without a
summary.csv).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

#: (summary column, header) of the count columns, in order
COUNTS = (("flows_failed", "failed"), ("retransmits", "retransmissions"), ("spurious_retransmits", "DSACK"),
          ("data_segments", "data segments"), ("packets_dropped", "drops"), ("loss_events_rto", "RTOs"),
          ("decisions_late", "late decisions"), ("decided_after_stamp", "after stamp"))
MEMORY = ("memory_pressures", "memory_drops", "listen_drops")
USAGE = "usage: python -m analysis.e1_runs DIR [DIR ...]  (E1 results folders)"
HEADER = ("run", "cca", "switch", "link", "load", "rep", "Gb/s", *(h for _c, h in COUNTS),
          "memory / drops / listen", "skipped", "host s")


def _count(row: pd.Series, col: str) -> str:
    v = row.get(col)
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{int(v)}"


def _host_s(folder: Path, point: str) -> str:
    try:
        return f"{json.loads((folder / 'points' / point / 'machine.json').read_text())['wall_s']:.0f}"
    except (OSError, KeyError, ValueError, TypeError):
        return "-"


def rows(folder: Path) -> list[list[str]]:
    """The table rows of one results folder, in point order.

    Raises FileNotFoundError when ``folder`` has no summary.csv."""
    s = pd.read_csv(folder / "summary.csv")
    out = []
    for _, r in s.sort_values("point").iterrows():
        out.append([folder.name, str(r["cca"]), str(r["switch"]), str(r["link_length"]), str(r["load"]),
                    f"{int(r['rep'])}", f"{r['throughput_bps'] / 1e9:.1f}",
                    *(_count(r, c) for c, _h in COUNTS), "/".join(_count(r, c) for c in MEMORY),
                    _count(r, "retransmits_suppressed"), _host_s(folder, str(r["point"]))])
    return out


def table(folders: Sequence[Path]) -> str:
    """The Markdown table over ``folders`` (raises FileNotFoundError as :func:`rows`)."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for f in folders:
        lines += ["| " + " | ".join(r) + " |" for r in rows(f)]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or any(a.startswith("-") for a in args):
        print(USAGE, file=sys.stderr)
        return 2
    folders = [Path(a) for a in args]
    missing = [str(f) for f in folders if not (f / "summary.csv").is_file()]
    if missing:
        print(f"e1_runs: no summary.csv in {', '.join(missing)} (a results folder of an E1 run expected)",
              file=sys.stderr)
        return 2
    print(table(folders))
    return 0


if __name__ == "__main__":
    sys.exit(main())
