"""Figures and tables of the ``netem-path`` family (the placeholder demo)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from analysis.stats import mean_ci  # noqa: E402
from testbed.units import Dim, Quantity  # noqa: E402


def analyse(summary: pd.DataFrame, config: dict, out: Path) -> tuple[list[Path], list[tuple[str, pd.DataFrame]]]:
    """Draw throughput and RTT against the configured values; return (figures, tables)."""
    swept = list(config["sweep"]) or ["rate"]
    rows = []
    for key, g in summary.groupby(swept, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        thr, thr_ci = mean_ci(list(g["throughput_bps"]))
        rtt, rtt_ci = mean_ci(list(g["rtt_median_s"]))
        rate = Quantity.parse(g["rate"].iloc[0], Dim.RATE).si
        delay = Quantity.parse(g["delay"].iloc[0], Dim.TIME).si
        rows.append({**dict(zip(swept, key)), "n": len(g),
                     "throughput_Mbit_s": thr / 1e6, "throughput_ci95_Mbit_s": thr_ci / 1e6,
                     "throughput_over_rate": thr / rate,
                     "rtt_median_ms": rtt * 1e3, "rtt_ci95_ms": rtt_ci * 1e3,
                     "configured_rtt_ms": 2 * delay * 1e3,
                     "retransmits_mean": g["retransmits"].mean()})
    table = pd.DataFrame(rows)
    figs = []
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    x = [Quantity.parse(r, Dim.RATE).si / 1e6 for r in summary.groupby(swept, sort=False)["rate"].first()]
    ax[0].errorbar(x, table["throughput_Mbit_s"], yerr=table["throughput_ci95_Mbit_s"].fillna(0),
                   fmt="o-", capsize=4, label="iperf3 goodput (mean, 95% CI)")
    ax[0].plot(x, x, "k--", lw=1, label="configured rate")
    ax[0].set(xlabel="configured rate (Mbit/s)", ylabel="throughput (Mbit/s)", title="TCP throughput")
    ax[0].legend()
    ax[1].errorbar(x, table["rtt_median_ms"], yerr=table["rtt_ci95_ms"].fillna(0), fmt="o-", capsize=4,
                   label="ping median RTT (mean, 95% CI)")
    ax[1].plot(x, table["configured_rtt_ms"], "k--", lw=1, label="2 x configured delay")
    ax[1].set(xlabel="configured rate (Mbit/s)", ylabel="RTT (ms)", title="round-trip time", ylim=(0, None))
    ax[1].legend()
    fig.tight_layout()
    figs.append(out / "throughput_rtt.png")
    fig.savefig(figs[-1], dpi=110)
    plt.close(fig)
    return figs, [("Throughput and RTT per configuration (paper units)", table)]
