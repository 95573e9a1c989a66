"""Figures and tables of E3 (``e3-leafspine``): the SDN-OSS paper's Figs. 3-9, Tables 1-4.

Inputs: summary.csv (one row per run = point repetition; per-run average throughput and
completion time of elephants and mice, paper units) and every point's transfers.csv
(one row per transfer, paper units).

- Boxplots (Figs. 4-9): throughput and completion time per scheduler, elephant vs
  mouse, one panel per workload (transfers). Each box holds every completed transfer
  of all repetitions (min/max whiskers, quartiles, median); beside it, the mean (dot)
  with a whisker from the 95th to the 99th percentile, as in the paper.
- UT SSE sweep (Fig. 3): mean throughput of the transfers against the SSE.
- Tables 1-4: min / average / max over repetitions of the per-run average, for
  {no direct link, UT, DT, on demand} x {workloads}, in the paper's layout (Mb/s, s),
  followed by the paper's own numbers for comparison.
- Findings (``analysis.e3_findings``): the paper's claims per workload with 95 %
  intervals over repetitions, also written to ``findings.csv`` / ``findings.md``;
  ``e3_findings.json`` keeps the gains over no direct link with the verdicts.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from analysis import e3_findings, findings  # noqa: E402
from analysis.report import source_folders  # noqa: E402

SCHEDULER_ORDER = ("none", "ut", "dt", "on-demand")
LABELS = {"none": "No direct link", "ut": "UT", "dt": "DT", "on-demand": "On Demand"}
TAGS = ("elephant", "mouse")
METRICS = {"throughput": ("throughput_bps", 1e-6, "throughput [Mb/s]"),
           "completion time": ("fct_s", 1.0, "completion time [s]")}

#: The paper's Tables 1-4 (min, average, max for 24, 48, 72 transfers): (table, scheduler) -> values
PAPER = {
    ("elephant", "throughput"): {
        "none": (607.8, 616.3, 629.5, 309.1, 324.4, 338.3, 205.4, 215.7, 226.1),
        "ut": (289.7, 550.0, 614.6, 262.1, 287.1, 322.5, 158.2, 187.4, 209.6),
        "dt": (359.5, 652.4, 738.7, 268.8, 344.8, 398.5, 194.6, 234.4, 266.1),
        "on-demand": (936.4, 952.7, 958.4, 487.8, 510.4, 544.4, 321.9, 335.2, 396.0)},
    ("elephant", "completion time"): {
        "none": (40.9, 41.8, 42.4, 77.0, 79.9, 83.4, 115.1, 120.5, 125.5),
        "ut": (41.9, 48.8, 94.9, 81.1, 90.8, 98.4, 123.7, 140.4, 165.5),
        "dt": (35.1, 44.2, 88.4, 65.8, 82.2, 117.4, 97.5, 115.2, 148.7),
        "on-demand": (26.9, 27.0, 27.5, 49.1, 50.9, 52.8, 70.6, 77.8, 80.0)},
    ("mouse", "throughput"): {
        "none": (79.6, 171.9, 259.3, 46.9, 86.8, 141.7, 34.1, 56.5, 83.6),
        "ut": (84.3, 150.4, 246.8, 51.5, 86.3, 123.1, 40.1, 56.5, 71.5),
        "dt": (90.1, 177.9, 249.8, 63.0, 99.0, 167.6, 49.6, 69.4, 98.2),
        "on-demand": (100.4, 218.2, 282.8, 66.6, 109.7, 144.7, 40.1, 58.7, 136.2)},
    ("mouse", "completion time"): {
        "none": (11.8, 18.5, 26.7, 25.5, 34.1, 51.1, 39.0, 51.3, 69.0),
        "ut": (11.8, 19.7, 28.0, 28.5, 34.3, 46.1, 40.5, 51.0, 63.0),
        "dt": (10.8, 15.5, 23.7, 21.3, 28.6, 36.6, 35.5, 39.1, 46.9),
        "on-demand": (9.6, 12.5, 20.9, 19.9, 24.6, 31.7, 26.1, 41.6, 52.4)},
}
TABLE_TITLES = {("elephant", "throughput"): "Table 1. Average throughput [Mb/s] of elephant VMs",
                ("elephant", "completion time"): "Table 2. Average completion time [s] of elephant VMs",
                ("mouse", "throughput"): "Table 3. Average throughput [Mb/s] of mice VMs",
                ("mouse", "completion time"): "Table 4. Average completion time [s] of mice VMs"}


def load_transfers(results: Path, summary: pd.DataFrame) -> pd.DataFrame:
    """All transfers.csv of the run's complete points, joined with their point's parameters
    (a combined report, ``report.combine``, reads each run's in its source folder)."""
    parts = []
    sources = source_folders(results)
    for _, row in summary.iterrows():
        base = sources.get(str(row.get("run", "")), results)
        path = base / "points" / str(row["point"]) / "transfers.csv"
        if path.exists() and path.stat().st_size:
            t = pd.read_csv(path)
            for col in ("scheduler", "transfers", "sse", "rep"):
                t[col] = row[col]
            parts.append(t)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _schedulers(df: pd.DataFrame) -> list[str]:
    present = set(df["scheduler"])
    return [s for s in SCHEDULER_ORDER if s in present] + sorted(present - set(SCHEDULER_ORDER))


def _main_sse(summary: pd.DataFrame) -> pd.DataFrame:
    """Rows of the headline comparison: for UT and DT only their most common SSE (the
    swept rest is the SSE figure's)."""
    keep = []
    for sched, g in summary.groupby("scheduler"):
        if sched in ("ut", "dt") and g["sse"].nunique() > 1:
            g = g[g["sse"] == g["sse"].mode().iloc[0]]
        keep.append(g)
    return pd.concat(keep) if keep else summary


def boxplots(transfers: pd.DataFrame, out: Path) -> list[Path]:
    figs = []
    workloads = sorted(set(transfers["transfers"]))
    done = transfers[transfers["status"] == "complete"]
    for name, (col, factor, ylabel) in METRICS.items():
        fig, axes = plt.subplots(1, len(workloads), figsize=(5.5 * len(workloads), 4.5), squeeze=False)
        for ax, n in zip(axes.flat, workloads):
            d = done[done["transfers"] == n]
            scheds = _schedulers(d)
            ticks, labels = [], []
            for gi, tag in enumerate(TAGS):
                for si, sched in enumerate(scheds):
                    vals = d[(d["tag"] == tag) & (d["scheduler"] == sched)][col].dropna().to_numpy() * factor
                    x = gi * (len(scheds) + 1.5) + si
                    if len(vals):
                        ax.boxplot([vals], positions=[x], widths=0.5, whis=(0, 100), manage_ticks=False,
                                   patch_artist=True, boxprops={"facecolor": f"C{si}", "alpha": 0.45})
                        p95, p99 = np.percentile(vals, [95, 99])
                        ax.plot([x + 0.38, x + 0.38], [p95, p99], color="k", lw=1.2)
                        ax.plot([x + 0.38], [vals.mean()], "o", color=f"C{si}", mec="k", ms=5)
                    ticks.append(x)
                    labels.append(f"{LABELS.get(sched, sched)}\n{tag}")
            ax.set_xticks(ticks, labels, rotation=60, fontsize=7)
            ax.set(ylabel=ylabel, title=f"{n} VM transfers")
            if name == "completion time":
                ax.set_yscale("log")
            ax.grid(True, axis="y", alpha=0.3)
        fig.suptitle(f"{name} per transfer, paper units\n(all repetitions; dot = mean, bar = 95th..99th percentile)",
                     fontsize=9)
        fig.tight_layout()
        path = out / f"boxplot_{name.replace(' ', '_')}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        figs.append(path)
    return figs


def sse_sweep(summary: pd.DataFrame, transfers: pd.DataFrame, out: Path) -> Path | None:
    ut = transfers[(transfers["scheduler"] == "ut") & (transfers["status"] == "complete")]
    if ut.empty or ut["sse"].nunique() < 2:
        return None
    ut = ut.assign(sse_s=[_seconds(s) for s in ut["sse"]])
    fig, ax = plt.subplots(figsize=(6, 4))
    for n, g in ut.groupby("transfers"):
        per_run = g.groupby(["sse_s", "rep"])["throughput_bps"].mean().reset_index()
        agg = per_run.groupby("sse_s")["throughput_bps"].agg(["mean", "min", "max"]) / 1e6
        ax.errorbar(agg.index, agg["mean"], yerr=[agg["mean"] - agg["min"], agg["max"] - agg["mean"]],
                    fmt="o-", capsize=3, label=f"{n} transfers")
    ax.set(xlabel="space switch epoch SSE [s]", ylabel="average throughput per transfer [Mb/s]",
           title="UT: average throughput vs SSE (min..max over runs)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = out / "ut_sse_sweep.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _seconds(text: str) -> float:
    from testbed.units import Dim, Quantity

    return Quantity.parse(str(text), Dim.TIME).si


def paper_table(summary: pd.DataFrame, tag: str, metric: str) -> pd.DataFrame:
    """min / average / max over runs of the per-run average, rows = schedulers,
    columns = (transfers, Min|Ave.|Max), as the paper's Tables 1-4."""
    col = f"{tag}_{'throughput_mean_bps' if metric == 'throughput' else 'fct_mean_s'}"
    factor = 1e-6 if metric == "throughput" else 1.0
    s = _main_sse(summary)
    rows = []
    for sched in _schedulers(s):
        row: dict[str, object] = {"scheduler": LABELS.get(sched, sched)}
        for n in sorted(set(s["transfers"])):
            vals = s[(s["scheduler"] == sched) & (s["transfers"] == n)][col].dropna() * factor
            for stat, fn in (("Min", "min"), ("Ave.", "mean"), ("Max", "max")):
                row[f"{n} VMs {stat}"] = getattr(vals, fn)() if len(vals) else np.nan
            row[f"{n} VMs runs"] = len(vals)
        rows.append(row)
    return pd.DataFrame(rows)


def paper_reference(tag: str, metric: str) -> pd.DataFrame:
    rows = []
    for sched, vals in PAPER[(tag, metric)].items():
        row: dict[str, object] = {"scheduler": LABELS[sched]}
        for i, n in enumerate((24, 48, 72)):
            for j, stat in enumerate(("Min", "Ave.", "Max")):
                row[f"{n} VMs {stat}"] = vals[3 * i + j]
        rows.append(row)
    return pd.DataFrame(rows)


def analyse(summary: pd.DataFrame, config: dict, out: Path) -> tuple[list[Path], list[tuple[str, pd.DataFrame]]]:
    """Draw the boxplots and the SSE sweep; return them with Tables 1-4 (ours, then the
    paper's), the per-run table and the findings table (titled ``findings.TITLE``), which
    is also written to ``out/findings.csv`` and ``out/findings.md``."""
    results = out.parent
    transfers = load_transfers(results, summary)
    figs: list[Path] = []
    if not transfers.empty:
        figs += boxplots(transfers, out)
        sweep = sse_sweep(summary, transfers, out)
        if sweep:
            figs.append(sweep)
    scale = ", ".join(sorted(set(map(str, summary["scale"])))) if "scale" in summary else "?"
    tables: list[tuple[str, pd.DataFrame]] = []
    for key, title in TABLE_TITLES.items():
        tables.append((f"{title} - this run (scale {scale}; paper units)", paper_table(summary, *key)))
    for key, title in TABLE_TITLES.items():
        tables.append((f"{title} - the paper", paper_reference(*key)))
    extra = ["reconfigurations", "elephant_retrans_segs", "mouse_retrans_segs", "oss_bytes",
             "elephants_complete", "mice_complete", "makespan_s"]
    per_run = summary[["point", "scheduler", "transfers", "sse", "rep", *extra]]
    tables.append(("Per run: reconfigurations during the traffic, retransmitted segments, bytes through the OSS",
                   per_run))
    found = e3_findings.evaluate(_main_sse(summary), PAPER, scale)
    table = findings.write(found, out, preamble=f"E3, scale {scale}. Rule and margins: docs/e3.md, section Findings.")
    tables.append((f"{findings.TITLE}, scale {scale}", table))
    (out / "e3_findings.json").write_text(json.dumps(gains(summary, found), indent=1))
    return figs, tables


def gains(summary: pd.DataFrame, found: list[findings.Finding]) -> dict[str, object]:
    """Per workload: each scheduler's relative gain over no direct link in the mean
    elephant and mouse throughput (point estimates), the findings' verdicts (95 %
    intervals), and two booleans kept for older readers: ``ut_worse_for_elephants``
    (F1) and ``on_demand_elephant_gain_ge_30pct`` (F3a), True when the finding holds,
    False when it does not, None when inconclusive or not measured."""
    s = _main_sse(summary)
    verdicts = {f.id: f.verdict for f in found}

    def flag(fid: str) -> bool | None:
        return {findings.HOLDS: True, findings.FAILS: False}.get(verdicts.get(fid, ""))

    out: dict[str, object] = {}
    for n, g in s.groupby("transfers"):
        m = g.groupby("scheduler")[["elephant_throughput_mean_bps", "mouse_throughput_mean_bps"]].mean()
        if "none" not in m.index:
            continue
        base_e, base_m = m.loc["none"]
        res: dict[str, object] = {}
        for sched in ("ut", "dt", "on-demand"):
            if sched in m.index:
                res[f"{sched}_elephant_gain"] = m.loc[sched, "elephant_throughput_mean_bps"] / base_e - 1
                res[f"{sched}_mouse_gain"] = m.loc[sched, "mouse_throughput_mean_bps"] / base_m - 1
        res["ut_worse_for_elephants"] = flag(f"F1-{n}")
        res["on_demand_elephant_gain_ge_30pct"] = flag(f"F3a-{n}")
        res["verdicts"] = {fid.rsplit("-", 1)[0]: v for fid, v in verdicts.items() if fid.endswith(f"-{n}")}
        out[str(n)] = res
    return out
