"""Figures and tables of E1 (``e1-fattree``): the paper's Figs. 4 and 5 and its buffer table.

Reads only summary.csv (one row per repetition of a point, paper units; its metrics are
those ``testbed.families.e1_fattree`` declares, checked by the report) and config.json.
Figures: network throughput (Gb/s) against load (requests/s, log x), one curve per switch
configuration, mean with 95 % Student-t intervals over repetitions; one panel per CCA,
one figure per link length. Tables: the headline throughput table, per configuration
the maximum buffer occupancy, OEO fraction and packet loss ratio, the emulation's
artefacts (failed transfers, skipped retransmissions, memory events), and the findings
(``analysis.e1_findings``: the paper's claims with 95 % intervals, also written to
``findings.csv`` / ``findings.md`` in the report folder).
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from analysis import findings  # noqa: E402
from analysis.e1_findings import PAPER_RTO_S, evaluate  # noqa: E402
from analysis.stats import mean_ci  # noqa: E402
from testbed.units import Dim, Quantity  # noqa: E402

#: order of the CCA panels as in the paper (a..d), then the kernel bonus ones
CCA_ORDER = ("saw", "sawl", "sack", "msack", "reno", "cubic", "bbr", "paced-reno")
#: the port architectures of the paper's curves (E1 accepts every registered switch
#: architecture; the findings compare these)
PAPER_ARCHS = ("all-optical", "hybrid", "electronic")


def switch_config(row: pd.Series) -> tuple[str, int, float]:
    """(arch, n_e, initial RTO in s) of a summary row, from ``switch`` = all-optical |
    hybrid:N | electronic, optionally @RTO (else the ``initial_rto`` column, else the
    paper's 1 ms). arch is the switches' port architecture (all-optical, hybrid or
    electronic; another registered architecture's whole spec, e.g. ``delay-line:5``);
    n_e is 0 but for hybrid. Raises UnitError for an RTO that is not a time."""
    config, _, rto_text = str(row["switch"]).partition("@")
    config = config.strip()
    rto_value = rto_text.strip() or row.get("initial_rto")
    rto = Quantity.parse(rto_value, Dim.TIME).si if isinstance(rto_value, str) and rto_value else PAPER_RTO_S
    arch, _, n_text = config.partition(":")
    if arch not in PAPER_ARCHS:  # another registered architecture: its whole spec names it
        return config, 0, rto
    return arch, int(n_text) if arch == "hybrid" else 0, rto


def switch_label(row: pd.Series) -> str:
    """The paper's curve label: n_e = N for all-optical/hybrid, electronic with its
    initial RTO (from ``switch`` = all-optical | hybrid:N | electronic[@RTO]); an
    all-optical or hybrid curve whose initial RTO is not the paper's 1 ms says its RTO too."""
    return _label(*switch_config(row))


def _label(arch: str, n_e: int, rto: float) -> str:
    if arch == "electronic":
        return f"electronic, RTO {Quantity(rto, Dim.TIME)}"
    # the paper's curves are named by n_e; any other architecture by its spec, so that
    # it never joins an n_e curve
    label = f"n_e = {n_e}" if arch in PAPER_ARCHS else arch
    return label if math.isclose(rto, PAPER_RTO_S) else f"{label}, RTO {Quantity(rto, Dim.TIME)}"


def _label_order(label: str) -> tuple[int, float, float]:
    head, _, rto_text = label.partition(", RTO ")
    rto = Quantity.parse(rto_text, Dim.TIME).si if rto_text else PAPER_RTO_S
    if head.startswith("n_e"):
        return 0, float(head.split("=")[1]), rto
    return 1, rto, 0.0


def configs(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary with each row's configuration in SI: ``config`` (the curve label),
    ``arch``, ``n_e``, ``rto_s``, ``load_per_s`` and ``length_m``. Raises UnitError for
    a load, length or RTO without its unit."""
    s = summary.copy()
    parsed = [switch_config(r) for _, r in s.iterrows()]
    s["config"] = [_label(*p) for p in parsed]
    s["arch"] = [p[0] for p in parsed]
    s["n_e"] = [p[1] for p in parsed]
    s["rto_s"] = [p[2] for p in parsed]
    s["load_per_s"] = [Quantity.parse(v, Dim.FREQUENCY).si for v in s["load"]]
    s["length_m"] = [Quantity.parse(v, Dim.LENGTH).si for v in s["link_length"]]
    return s


#: aggregate()'s means: (summary column, table column, factor to the table's unit)
_MEANS = (("loss_ratio", "packet_loss_ratio", 1.0), ("oeo_fraction", "oeo_fraction", 1.0),
          ("max_buffer_bytes", "max_buffer_MB", 1e-6), ("flows_completed", "flows_completed", 1.0),
          ("fct_median_s", "fct_median_ms", 1e3), ("lateness_p99_s", "lateness_p99_us", 1e6))
_KEYS = ("cca", "link_length_m", "switch", "load_per_s", "n", "throughput_Gbit_s", "throughput_ci95_Gbit_s")
#: the columns of :func:`aggregate` (also when no run is left to aggregate)
AGGREGATE_COLUMNS = [*_KEYS, *(name for _, name, _ in _MEANS)]


def aggregate(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per (cca, link length, switch configuration, load): means and CI half-widths."""
    s = configs(summary)
    rows = []
    for (cca, length, config, load), g in s.groupby(["cca", "length_m", "config", "load_per_s"], sort=True):
        thr, thr_ci = mean_ci(list(g["throughput_bps"]))
        row = dict(zip(_KEYS, (cca, length, config, load, len(g), thr / 1e9, thr_ci / 1e9), strict=True))
        row.update({name: g[col].mean() * factor for col, name, factor in _MEANS})
        rows.append(row)
    return pd.DataFrame(rows, columns=AGGREGATE_COLUMNS)


#: per-point artefacts of the emulation (summed over repetitions): what a reviewer checks
#: before trusting a throughput; a column missing from an older summary reads as NaN
ARTEFACT_COLUMNS = (("flows_failed", "failed transfers"), ("retransmits_suppressed", "skipped retransmissions"),
                    ("spurious_retransmits", "spurious retransmissions (DSACK)"),
                    ("data_segments", "data segments"), ("memory_pressures", "TCP memory pressures"),
                    ("memory_drops", "memory drops"), ("listen_drops", "listen drops"))


def artefacts(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration and load: the emulation's artefacts summed over the
    repetitions (failed transfers, skipped retransmissions, memory events, listen drops;
    each expected 0) and the spurious share of data segments (DSACK-confirmed)."""
    s = configs(summary)
    rows = []
    for (cca, length, config, load), g in s.groupby(["cca", "length_m", "config", "load_per_s"], sort=True):
        row: dict = {"cca": cca, "link_length_m": length, "switch": config, "load_per_s": load, "n": len(g)}
        for col, name in ARTEFACT_COLUMNS:
            row[name] = pd.to_numeric(g[col], errors="coerce").sum(min_count=1) if col in g else math.nan
        data = row["data segments"]
        row["spurious share"] = row["spurious retransmissions (DSACK)"] / data if data else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def analyse(summary: pd.DataFrame, config: dict, out: Path) -> tuple[list[Path], list[tuple[str, pd.DataFrame]]]:
    """Draw the throughput-vs-load panels, write findings.csv/.md into ``out`` (the report
    folder) and return (figures, tables); the findings table is titled ``findings.TITLE``.
    Runs in which the kernel ran short of TCP memory (``findings.memory_clean``) are left
    out of the figures, the throughput and buffer tables and the verdicts, and counted
    in the artefacts table and the titles."""
    clean = findings.memory_clean(summary)
    left_out = len(summary) - len(clean)
    without = (f"; {left_out} of {len(summary)} runs short of TCP memory left out (artefacts table)"
               if left_out else "")
    agg = aggregate(clean)
    figs: list[Path] = []
    for length, by_len in agg.groupby("link_length_m"):
        ccas = [c for c in CCA_ORDER if c in set(by_len["cca"])] + sorted(set(by_len["cca"]) - set(CCA_ORDER))
        cols = min(2, len(ccas))
        nrows = math.ceil(len(ccas) / cols)
        fig, axes = plt.subplots(nrows, cols, figsize=(6 * cols, 4 * nrows), squeeze=False)
        for ax, cca in zip(axes.flat, ccas):
            panel = by_len[by_len["cca"] == cca]
            for label in sorted(set(panel["switch"]), key=_label_order):
                c = panel[panel["switch"] == label].sort_values("load_per_s")
                ax.errorbar(c["load_per_s"], c["throughput_Gbit_s"], yerr=c["throughput_ci95_Gbit_s"].fillna(0),
                            fmt="o-", capsize=3, label=label)
            ax.set_xscale("log")
            ax.set(xlabel="load (file-transfer requests/s)", ylabel="network throughput (Gb/s)",
                   title=f"TCP {cca.upper()}", ylim=(0, None))
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        for ax in list(axes.flat)[len(ccas):]:
            ax.axis("off")
        scale = ", ".join(sorted({str(v) for v in summary.get("size_scale", [])})) or "?"
        fig.suptitle(f"fat-tree, link length {length:g} m, file sizes x {scale} "
                     f"(mean, 95% Student-t CI; paper units{without})")
        fig.tight_layout()
        figs.append(out / f"throughput_vs_load_{length:g}m.png")
        fig.savefig(figs[-1], dpi=110)
        plt.close(fig)
    headline = agg[["cca", "link_length_m", "switch", "load_per_s", "n", "throughput_Gbit_s",
                    "throughput_ci95_Gbit_s", "flows_completed", "fct_median_ms"]]
    buffers = agg[["cca", "link_length_m", "switch", "load_per_s", "max_buffer_MB", "oeo_fraction",
                   "packet_loss_ratio", "lateness_p99_us"]]
    scale = ", ".join(sorted(set(map(str, summary["size_scale"])))) if "size_scale" in summary else "not recorded"
    found = findings.write(evaluate(configs(summary)), out,
                           preamble=f"E1, size_scale {scale}. Rule and margins: docs/e1.md, section Findings"
                                    + (f"; {left_out} of {len(summary)} runs short of TCP memory left out (a "
                                       "finding they would change gives its verdict with them in the side "
                                       "column)." if left_out else "."))
    return figs, [(f"Network throughput per configuration (Figs. 4/5 data, paper units{without})", headline),
                  (f"Buffer occupancy, OEO fraction and packet loss ratio (means over repetitions{without})", buffers),
                  ("Emulation artefacts (sums over repetitions; failed transfers, skipped retransmissions, "
                   "memory events and listen drops are expected 0; NaN: not recorded by that run)",
                   artefacts(summary)),
                  (f"{findings.TITLE}, size_scale {scale}", found)]
