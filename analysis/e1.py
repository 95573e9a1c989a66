"""Figures and tables of E1 (``e1-fattree``): the paper's Figs. 4 and 5 and its buffer table.

Reads only summary.csv (one row per repetition of a point, paper units) and config.json.
Figures: network throughput (Gb/s) against load (requests/s, log x), one curve per switch
configuration, mean with 95 % Student-t intervals over repetitions; one panel per CCA,
one figure per link length. Tables: the headline throughput table, and per configuration
the maximum buffer occupancy, OEO fraction and packet loss ratio.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from analysis.stats import mean_ci  # noqa: E402
from testbed.units import Dim, Quantity  # noqa: E402

#: order of the CCA panels as in the paper (a..d), then the kernel bonus ones
CCA_ORDER = ("saw", "sawl", "sack", "msack", "reno", "cubic", "bbr", "paced-reno")


def switch_label(row: pd.Series) -> str:
    """The paper's curve label: n_e = N for all-optical/hybrid, electronic with its
    initial RTO (from ``switch`` = all-optical | hybrid:N | electronic[@RTO])."""
    config, _, rto_text = str(row["switch"]).partition("@")
    if config == "electronic":
        rto = Quantity.parse(rto_text or row["initial_rto"], Dim.TIME)
        return f"electronic, RTO {rto}"
    if config == "all-optical":
        return "n_e = 0"
    return f"n_e = {int(config.partition(':')[2])}"


def _label_order(label: str) -> tuple[int, float]:
    if label.startswith("n_e"):
        return 0, float(label.split("=")[1])
    return 1, Quantity.parse(label.split("RTO ")[1], Dim.TIME).si


def aggregate(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per (cca, link length, switch configuration, load): means and CI half-widths."""
    s = summary.copy()
    s["config"] = s.apply(switch_label, axis=1)
    s["load_per_s"] = [Quantity.parse(v, Dim.FREQUENCY).si for v in s["load"]]
    s["length_m"] = [Quantity.parse(v, Dim.LENGTH).si for v in s["link_length"]]
    rows = []
    for (cca, length, config, load), g in s.groupby(["cca", "length_m", "config", "load_per_s"], sort=True):
        thr, thr_ci = mean_ci(list(g["throughput_bps"]))
        row = {"cca": cca, "link_length_m": length, "switch": config, "load_per_s": load, "n": len(g),
               "throughput_Gbit_s": thr / 1e9, "throughput_ci95_Gbit_s": thr_ci / 1e9}
        for col, name in (("loss_ratio", "packet_loss_ratio"), ("oeo_fraction", "oeo_fraction"),
                          ("max_buffer_bytes", "max_buffer_MB"), ("flows_completed", "flows_completed"),
                          ("fct_median_s", "fct_median_ms"), ("lateness_p99_s", "lateness_p99_us")):
            if col in g:
                scale = {"max_buffer_MB": 1e-6, "fct_median_ms": 1e3, "lateness_p99_us": 1e6}.get(name, 1.0)
                row[name] = g[col].mean() * scale
        rows.append(row)
    return pd.DataFrame(rows)


def analyse(summary: pd.DataFrame, config: dict, out: Path) -> tuple[list[Path], list[tuple[str, pd.DataFrame]]]:
    """Draw the throughput-vs-load panels and return (figures, tables)."""
    agg = aggregate(summary)
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
        fig.suptitle(f"fat-tree, link length {length:g} m (mean, 95% Student-t CI; paper units)")
        fig.tight_layout()
        figs.append(out / f"throughput_vs_load_{length:g}m.png")
        fig.savefig(figs[-1], dpi=110)
        plt.close(fig)
    headline = agg[["cca", "link_length_m", "switch", "load_per_s", "n", "throughput_Gbit_s",
                    "throughput_ci95_Gbit_s"] + [c for c in ("flows_completed", "fct_median_ms") if c in agg]]
    buffers = agg[["cca", "link_length_m", "switch", "load_per_s"]
                  + [c for c in ("max_buffer_MB", "oeo_fraction", "packet_loss_ratio", "lateness_p99_us")
                     if c in agg]]
    return figs, [("Network throughput per configuration (Figs. 4/5 data, paper units)", headline),
                  ("Buffer occupancy, OEO fraction and packet loss ratio (means over repetitions)", buffers)]
