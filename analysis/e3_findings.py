"""E3's findings: the SDN-OSS paper's claims (spec "What the paper reports") evaluated
on a run's repetitions with 95 % intervals (``analysis.findings``), per workload
(``transfers``: the paper's 24, 48 and 72 and any other the run has).

Input: summary rows of the headline comparison (UT and DT at their main SSE:
``analysis.e3._main_sse``), one per run, with the per-run averages
``elephant_throughput_mean_bps``, ``elephant_fct_mean_s``, ``mouse_throughput_mean_bps``.
Each claim compares a scheduler with no direct link (``none``) by the ratio of the
means over runs (Fieller's interval):

- F1-<n>: UT / none elephant throughput < 1 (UT makes elephants worse).
- F2-<n>: DT / none elephant throughput > 1 (DT helps; only the direction is tested,
  "a little, with a wide spread" is shown by the numbers).
- F3a-<n>: on demand / none elephant throughput > 1 + ON_DEMAND_MIN_GAIN ("roughly half";
  the paper: +54 %, +57 %, +55 %).
- F3b-<n>: on demand / none elephant completion time < 1.
- F3c-<n>: on demand / none mouse throughput within 1 +- MARGIN (equivalence: "mice are
  about unchanged").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from analysis.findings import MARGIN, Finding, compare, not_measured

PAPER_TRANSFERS = (24, 48, 72)
#: "roughly half" read as at least +30 % (the threshold analysis/e3 used before intervals)
ON_DEMAND_MIN_GAIN = 0.30

#: (id, claim, scheduler, summary column, table key of the paper, low, high, margin note)
CLAIMS: tuple[tuple[str, str, str, str, tuple[str, str], float | None, float | None, str], ...] = (
    ("F1", "UT makes elephants worse than no direct link (throughput)", "ut", "elephant_throughput_mean_bps",
     ("elephant", "throughput"), None, 1.0, ""),
    ("F2", "DT helps elephants a little (throughput; direction only)", "dt", "elephant_throughput_mean_bps",
     ("elephant", "throughput"), 1.0, None, ""),
    ("F3a", "On demand raises elephant throughput by roughly half", "on-demand", "elephant_throughput_mean_bps",
     ("elephant", "throughput"), 1 + ON_DEMAND_MIN_GAIN, None, f"at least +{ON_DEMAND_MIN_GAIN * 100:g} %"),
    ("F3b", "On demand shortens elephant completion time", "on-demand", "elephant_fct_mean_s",
     ("elephant", "completion time"), None, 1.0, ""),
    ("F3c", "On demand leaves mice about unchanged (throughput)", "on-demand", "mouse_throughput_mean_bps",
     ("mouse", "throughput"), 1 - MARGIN, 1 + MARGIN, f"equivalence, +-{MARGIN * 100:g} % margin"),
)
LABELS = {"none": "no direct link", "ut": "UT", "dt": "DT", "on-demand": "on demand"}


def evaluate(s: pd.DataFrame, paper: Mapping[tuple[str, str], Mapping[str, Sequence[float]]] | None = None,
             scale: str = "") -> list[Finding]:
    """Every E3 finding on the headline rows ``s``; ``paper`` = the paper's Tables 1-4
    (``analysis.e3.PAPER``) for the reference column, ``scale`` the run's scale for the
    ``where`` column. Raises KeyError when ``s`` lacks ``scheduler`` or ``transfers``."""
    counts = sorted(set(PAPER_TRANSFERS) | {int(n) for n in s["transfers"]})
    out = []
    for cid, claim, sched, col, key, low, high, note in CLAIMS:
        for n in counts:
            out.append(_claim(s, f"{cid}-{n}", f"{claim}, {n} transfers", sched, col, key, low, high, note, n,
                              paper, scale))
    return out


def _claim(s: pd.DataFrame, id: str, claim: str, sched: str, col: str, key: tuple[str, str],
           low: float | None, high: float | None, note: str, n: int,
           paper: Mapping[tuple[str, str], Mapping[str, Sequence[float]]] | None, scale: str) -> Finding:
    ref = _paper_ratio(paper, key, sched, n)
    rows = s[s["transfers"] == n]
    a, b = rows[rows["scheduler"] == sched], rows[rows["scheduler"] == "none"]
    if a.empty or b.empty or col not in rows:
        return not_measured(id, claim, f"scheduler = {sched} and none at transfers = {n} (column {col})", ref)
    metric, unit, factor = (("completion time", "s", 1.0) if col.endswith("fct_mean_s")
                            else ("throughput", "Mb/s", 1e-6))
    where = f"{n} transfers" + (f", SSE {a['sse'].iloc[0]}" if sched in ("ut", "dt") and "sse" in a else "") + (
        f", scale {scale}" if scale else "")
    return compare(id, claim, (LABELS[sched], a[col]), (LABELS["none"], b[col]), low=low, high=high, scale=factor,
                   unit=unit, paper=ref, where=f"{key[0]} {metric}, {where}", margin_note=note)


def _paper_ratio(paper: Mapping[tuple[str, str], Mapping[str, Sequence[float]]] | None, key: tuple[str, str],
                 sched: str, n: int) -> str:
    """"0.892 (550 / 616.3 Mb/s)": the paper's ratio of averages, from its Tables 1-4."""
    if not paper or key not in paper or n not in PAPER_TRANSFERS:
        return ""
    i = 3 * PAPER_TRANSFERS.index(n) + 1  # the "Ave." column of the workload
    a, b = paper[key][sched][i], paper[key]["none"][i]
    unit = "s" if key[1] == "completion time" else "Mb/s"
    return f"{a / b:.3g} ({a:g} / {b:g} {unit})"
