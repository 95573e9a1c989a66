"""Figures and tables of E2 (TCP SACK over OBS with slow and fast paths): the paper's
Figs. 3-13, its loss-detection and burst numbers, and the findings.

Inputs (contract: .scratch/e2/contract.md; paper units, times from traffic start):
summary.csv, one row per run (path_class, n_sources, n_paper, scale, wm, pl, rep, point
and the metrics), and per run ``points/<point>/``: ``throughput_series.csv`` (t_s, src,
bytes: payload bytes of src's sink in the bin ending at t_s), ``cwnd.csv`` (t_s, src,
event, cwnd, ssthresh, ca_state of one traced source) and ``assembly_delay.csv``
(lo_s, hi_s, packets: histogram of the per-packet assembly delay). A point is one
(path class, Wm, Pl); its repetitions are the runs.

Figures (error bars and bands: 95 % Student-t intervals over repetitions):

- ``fig3_*.png``: aggregate average throughput vs time, one panel per path class, one
  curve per Wm (the paper's average throughput: bytes since the start up to t over t,
  averaged over the flows, times n_paper), at Pl 1e-3 when the run has it, else one
  figure per Pl; dashed: each Wm's ideal MSS*Wm*N/RTT.
- ``fig4_throughput_vs_wm.png``: throughput vs Wm, one curve per Pl, against the ideal.
- ``cwnd_<class>_wm<Wm>_pl<Pl>.png``: cwnd of the traced source of the first repetition,
  titled with the paper's figure number (5-12) for its cases, every other point labelled
  "not in the paper".
- ``fig13_fast_vs_slow.png``: fast (Wm 64) and slow (Wm 512) throughput vs Pl (log x).
- ``assembly_delay.png``: distribution (CDF) of the per-packet assembly delay per class.

Tables: losses detected by RTO vs triple dupACK; segments per burst and per source per
burst beside the paper's; assembly delay per class; bursts per run and the 95 %
interval of the measured burst loss (is Pl what was asked?); artefacts per run;
the paper's numbers beside ours; per-point files that are missing; the findings
(``analysis.e2_findings``, also written to ``findings.csv`` / ``findings.md``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy import special  # noqa: E402

from analysis import findings  # noqa: E402
from analysis.e2_findings import (FAST, FAST_WM, MAIN_PL, SLOW, SLOW_BEST_WM, evaluate, pl_text, pls,  # noqa: E402
                                  rows, rto_fraction, same_pl, scale_of, wms)
from analysis.report import source_folders  # noqa: E402
from analysis.stats import mean_ci  # noqa: E402

CLASS_ORDER = (SLOW, FAST)
LEVEL = findings.LEVEL
#: per-point files of the contract and what lacks when one is missing
POINT_FILES = {"throughput_series.csv": "Fig. 3 lacks this run",
               "cwnd.csv": "no cwnd figure from this run",
               "assembly_delay.csv": "the assembly delay distribution lacks this run"}
#: the paper's cwnd figures: (path class, Wm, Pl) -> figure number
PAPER_CWND_FIGS = {(SLOW, 512, 1e-3): 5, (SLOW, 512, 1e-4): 6, (SLOW, 512, 1e-2): 7,
                   (FAST, 512, 1e-3): 8, (FAST, 128, 1e-3): 9, (FAST, 64, 1e-3): 10,
                   (FAST, 64, 1e-2): 11, (FAST, 128, 1e-4): 12}
#: the paper's own numbers: (quantity, path class, Wm, Pl, summary column, paper value,
#: display factor, unit, note); Wm None = every Wm measured at that Pl
PAPER_NUMBERS: tuple[tuple[str, str, int | None, float, str, float, float, str, str], ...] = (
    ("ideal aggregate throughput", SLOW, 512, 1e-3, "ideal_bps", 5.592, 1e-9, "Gb/s",
     "MSS x Wm x N / RTT, the start of the Wm 512 curve (Fig. 3)"),
    ("aggregate average throughput", FAST, None, 1e-3, "throughput_bps", 2.2, 1e-9, "Gb/s",
     "converges close to 2.2 Gb/s for every Wm (Fig. 3)"),
    ("aggregate average throughput", FAST, 64, 1e-2, "throughput_bps", 0.298, 1e-9, "Gb/s", "Fig. 11 text"),
    ("aggregate average throughput", FAST, 128, 1e-4, "throughput_bps", 9.2, 1e-9, "Gb/s", "Fig. 12 text"),
    ("segments per burst", SLOW, 512, 1e-3, "segments_per_burst_paper_n", 12360, 1.0, "segments",
     "ours x scale (n_paper sources)"),
    ("segments per source per burst", SLOW, 512, 1e-3, "segments_per_source_per_burst", 154, 1.0, "segments",
     "'roughly 154' = 12 360 / 80"),
    ("segments per burst", FAST, 512, 1e-3, "segments_per_burst_paper_n", 44, 1.0, "segments",
     "ours x scale (n_paper sources)"),
    ("segments per source per burst", FAST, 512, 1e-3, "segments_per_source_per_burst", 1.0, 1.0, "segments",
     "'no more than one'"),
)


#: the summary columns this analysis reads (params and metrics of the E2 family)
COLUMNS_READ = ("path_class", "n_sources", "n_paper", "wm", "pl", "rep", "point", "throughput_bps",
                "throughput_per_source_bps", "ideal_bps",
                "bursts", "bursts_closed_time", "bursts_closed_volume", "bursts_lost", "segments_per_burst",
                "segments_per_source_per_burst", "loss_events_rto", "loss_events_fast", "retrans_segs",
                "spurious_retrans_segs", "core_packets_lost", "assembly_delay_p50_s", "assembly_delay_p99_s",
                "assembly_delay_max_s", "lateness_p99_s", "lateness_max_s", "paper_s_per_wall_s")


# ---- inputs ------------------------------------------------------------------------------

def _scale(row: pd.Series) -> float:
    """n_paper / n_sources of a run (the ``scale`` column when the counts are absent)."""
    try:
        return float(row["n_paper"]) / float(row["n_sources"])
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return float(row.get("scale", 1.0))


def load_point_files(results: Path, summary: pd.DataFrame) -> tuple[dict[str, pd.DataFrame], pd.DataFrame]:
    """Every run's per-point files, concatenated per file name with the run's point,
    path_class, wm, pl, rep, scale and ``run_key`` (its folder, unique per run); and a
    table of the files that are missing or unreadable (point, file, why, consequence).
    A combined report (``report.combine``) reads each run's files in its source folder.
    Never raises for a missing file."""
    parts: dict[str, list[pd.DataFrame]] = {name: [] for name in POINT_FILES}
    missing = []
    sources = source_folders(results)
    for _, row in summary.iterrows():
        base = sources.get(str(row.get("run", "")), results)
        folder = base / "points" / str(row["point"])
        for name, consequence in POINT_FILES.items():
            path = folder / name
            why = ""
            if not path.exists():
                why = "missing"
            else:
                try:
                    frame = pd.read_csv(path)
                except pd.errors.EmptyDataError:
                    why = "empty"
                except (pd.errors.ParserError, UnicodeDecodeError) as exc:
                    why = f"unreadable: {exc}"
                else:
                    if frame.empty:
                        why = "no rows"
                    else:
                        parts[name].append(frame.assign(point=row["point"], path_class=row["path_class"],
                                                        wm=int(row["wm"]), pl=float(row["pl"]), rep=row["rep"],
                                                        scale=_scale(row), run_key=str(folder)))
            if why:
                missing.append({"point": row["point"], "path_class": row["path_class"], "wm": row["wm"],
                                "pl": row["pl"], "rep": row["rep"], "file": str(path.relative_to(results) if path.is_relative_to(results) else path),
                                "why": why, "consequence": consequence})
    files = {n: pd.concat(p, ignore_index=True) if p else pd.DataFrame() for n, p in parts.items()}
    cols = ["point", "path_class", "wm", "pl", "rep", "file", "why", "consequence"]
    return files, pd.DataFrame(missing, columns=cols)


def _classes(s: pd.DataFrame) -> list[str]:
    present = set(s["path_class"].astype(str))
    return [c for c in CLASS_ORDER if c in present] + sorted(present - set(CLASS_ORDER))


def _ci(values: Iterable[float]) -> tuple[float, float, float, int]:
    """Mean, 95 % interval bounds and n of the non-nan values."""
    vals = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    mean, half = mean_ci(vals, LEVEL)
    return mean, mean - half, mean + half, len(vals)


def _save(fig: plt.Figure, path: Path) -> Path:
    """Lay out, write (PNG, 100 dpi) and close ``fig``; return ``path``. Raises OSError."""
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def scale_text(summary: pd.DataFrame) -> str:
    """The run's scale (n_paper / n_sources) per class: ``slow 20, fast 80``."""
    return ", ".join(f"{cls} {scale_of(rows(summary, cls))}" for cls in _classes(summary)) or "?"


def _points(s: pd.DataFrame) -> list[tuple[str, int, float, pd.DataFrame]]:
    """(path class, Wm, Pl, its runs) for every point of the summary, classes in paper order."""
    return [(c, w, p, rows(s, c, w, p)) for c in _classes(s) for w in wms(rows(s, c))
            for p in pls(rows(s, c, w))]


# ---- Fig. 3 -----------------------------------------------------------------------------

def average_throughput(series: pd.DataFrame, scale: float) -> pd.Series:
    """One run's aggregate average throughput (bit/s, paper N) at each bin end t_s:
    payload bytes of all its sources since the start up to t, times 8, over t, times
    ``scale`` (= the mean over the run's flows times n_paper). Bins at t <= 0 are dropped."""
    per_bin = series.groupby("t_s")["bytes"].sum().sort_index()
    cum = per_bin.cumsum()
    t = cum.index.to_numpy(dtype=float)
    keep = t > 0
    return pd.Series(cum.to_numpy(dtype=float)[keep] * 8 / t[keep] * scale, index=np.round(t[keep], 9))


def fig3(series: pd.DataFrame, summary: pd.DataFrame, out: Path) -> list[Path]:
    """Fig. 3: one figure at Pl 1e-3 when the run has it, else one per Pl."""
    if series.empty:
        return []
    all_pls = pls(summary)
    chosen = [MAIN_PL] if any(same_pl(p, MAIN_PL) for p in all_pls) else all_pls
    classes = _classes(summary)
    figs = []
    for pl in chosen:
        fig, axes = plt.subplots(1, len(classes), figsize=(6 * len(classes), 4.2), squeeze=False)
        for ax, cls in zip(axes.flat, classes):
            drawn, top = False, 0.0
            for i, wm in enumerate(wms(rows(summary, cls, pl=pl))):
                runs = rows(series, cls, wm, pl)
                curves = [average_throughput(g, float(g["scale"].iloc[0])) for _, g in runs.groupby("run_key")]
                if not curves:
                    continue
                table = pd.concat(curves, axis=1)
                stats = [_ci(table.loc[t]) for t in table.index]
                mean = np.array([x[0] for x in stats]) * 1e-9
                (line,) = ax.plot(table.index, mean, color=f"C{i}", label=f"Wm = {wm} ({len(curves)} runs)")
                lo, hi = np.array([x[1] for x in stats]) * 1e-9, np.array([x[2] for x in stats]) * 1e-9
                if np.isfinite(lo).any():
                    ax.fill_between(table.index, lo, hi, color=f"C{i}", alpha=0.2, lw=0)
                ideal = rows(summary, cls, wm, pl)["ideal_bps"].mean() * 1e-9
                ax.axhline(ideal, color=f"C{i}", ls="--", lw=0.8)
                line.set_label(f"{line.get_label()}, ideal {ideal:.3g} Gb/s")
                top = max(top, np.nanmax(np.where(np.isfinite(hi), hi, mean)))
                drawn = True
            if not drawn:
                ax.text(0.5, 0.5, f"not measured: no {cls} throughput series at Pl {pl_text(pl)}",
                        ha="center", va="center", transform=ax.transAxes, fontsize=8)
            ax.set(xlabel="time since traffic start [s, paper]", ylabel="aggregate average throughput [Gb/s]",
                   title=f"{cls} connections, Pl = {pl_text(pl)}")
            ax.set_ylim(0, top * 1.3 if top > 0 else None)   # an ideal far above the curves is in the legend
            ax.grid(True, alpha=0.3)
            if drawn:
                ax.legend(fontsize=8)
        fig.suptitle("Fig. 3: aggregate average throughput vs time (mean, 95 % band over runs; "
                     "dashed: ideal MSS x Wm x N / RTT, when within the axis)", fontsize=9)
        figs.append(_save(fig, out / f"fig3_pl{pl_text(pl)}.png"))
    return figs


# ---- Figs. 4 and 13 ---------------------------------------------------------------------

def _errorbar(ax: plt.Axes, x: list[float], groups: list[pd.DataFrame], col: str, factor: float,
              **style: object) -> None:
    stats = [_ci(g[col]) for g in groups]
    mean = np.array([m for m, *_ in stats]) * factor
    half = np.nan_to_num(np.array([(hi - lo) / 2 for _, lo, hi, _ in stats]) * factor)
    ax.errorbar(x, mean, yerr=half, capsize=3, **style)  # type: ignore[arg-type]


def fig4(summary: pd.DataFrame, out: Path) -> Path:
    """Fig. 4: throughput vs Wm, one panel per path class, one curve per Pl, and the ideal."""
    classes = _classes(summary)
    fig, axes = plt.subplots(1, len(classes), figsize=(6 * len(classes), 4.2), squeeze=False)
    for ax, cls in zip(axes.flat, classes):
        c = rows(summary, cls)
        for i, pl in enumerate(pls(c)):
            at = rows(c, pl=pl)
            ws = wms(at)
            _errorbar(ax, ws, [rows(at, wm=w) for w in ws], "throughput_bps", 1e-9, fmt="o-", color=f"C{i}",
                      label=f"Pl = {pl_text(pl)}")
        ws = wms(c)
        ax.plot(ws, [rows(c, wm=w)["ideal_bps"].mean() * 1e-9 for w in ws], "k--", label="ideal MSS x Wm x N / RTT")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ws, [str(w) for w in ws])
        ax.set(xlabel="maximum congestion window Wm [segments]", ylabel="aggregate average throughput [Gb/s]",
               title=f"{cls} connections", ylim=(0, None))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Fig. 4: throughput vs Wm per Pl (mean, 95 % interval over runs)", fontsize=9)
    return _save(fig, out / "fig4_throughput_vs_wm.png")


def fig13(summary: pd.DataFrame, out: Path) -> Path | None:
    """Fig. 13: fast (Wm 64) and slow (Wm 512) throughput vs Pl (log x; Pl = 0 left out)."""
    curves = [(FAST, FAST_WM), (SLOW, SLOW_BEST_WM)]
    if all(rows(summary, c, w).empty for c, w in curves):
        return None
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for i, (cls, wm) in enumerate(curves):
        c = rows(summary, cls, wm)
        ps = [p for p in pls(c) if p > 0]
        if ps:
            _errorbar(ax, ps, [rows(c, pl=p) for p in ps], "throughput_bps", 1e-9, fmt="o-", color=f"C{i}",
                      label=f"{cls}, Wm = {wm}")
    ax.set_xscale("log")
    ax.set(xlabel="burst loss probability Pl", ylabel="aggregate average throughput [Gb/s]", ylim=(0, None),
           title="Fig. 13: fast vs slow connections (mean, 95 % interval over runs)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, out / "fig13_fast_vs_slow.png")


# ---- Figs. 5-12 -------------------------------------------------------------------------

def paper_cwnd_figure(cls: str, wm: int, pl: float) -> int | None:
    """The paper's figure number of a cwnd trace (5-12), None for a case it does not show."""
    return next((n for (c, w, p), n in PAPER_CWND_FIGS.items() if c == cls and w == wm and same_pl(p, pl)), None)


def cwnd_figures(cwnd: pd.DataFrame, summary: pd.DataFrame, out: Path) -> tuple[list[Path], pd.DataFrame]:
    """One cwnd-vs-time figure per point with a trace (its lowest repetition), and the
    table of the paper's cases and other points: which run drew each, or why none."""
    figs, index = [], []
    for cls, wm, pl, runs in _points(summary):
        fig_no = paper_cwnd_figure(cls, wm, pl)
        trace = rows(cwnd, cls, wm, pl) if not cwnd.empty else cwnd
        label = f"Fig. {fig_no}" if fig_no else "not in the paper"
        if trace.empty:
            index.append({"paper figure": label, "path_class": cls, "wm": wm, "pl": pl, "run": "",
                          "figure": "", "note": f"no cwnd.csv in its {len(runs)} runs"})
            continue
        first = trace.sort_values(["rep", "run_key"]).iloc[0]       # the lowest repetition's run
        rep = first["rep"]
        t = trace[trace["run_key"] == first["run_key"]].sort_values("t_s")
        point = t["point"].iloc[0]
        fig, ax = plt.subplots(figsize=(7, 3.8))
        ax.step(t["t_s"], t["cwnd"], where="post", lw=0.9, label=f"cwnd (src {t['src'].iloc[0]})")
        ss = t[pd.to_numeric(t["ssthresh"], errors="coerce") < 4 * wm]
        if not ss.empty:
            ax.step(ss["t_s"], ss["ssthresh"], where="post", lw=0.6, ls=":", color="grey", label="ssthresh")
        for event, mark, colour in (("rto", "x", "red"), ("retrans", ".", "orange")):
            e = t[t["event"] == event]
            if not e.empty:
                ax.plot(e["t_s"], e["cwnd"], mark, color=colour, ms=6,
                        label=f"{event} ({len(e)})" if event == "rto" else f"retransmission ({len(e)})")
        ax.axhline(wm, color="k", lw=0.6, ls="--", label=f"Wm = {wm}")
        ax.set(xlabel="time since traffic start [s, paper]", ylabel="cwnd [segments]", ylim=(0, max(wm, float(t["cwnd"].max())) * 1.1),
               title=f"{label}: cwnd of one source, {cls}, Wm = {wm}, Pl = {pl_text(pl)} ({point}, rep {rep})")
        ax.title.set_fontsize(9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
        path = _save(fig, out / f"cwnd_{cls}_wm{wm}_pl{pl_text(pl)}.png")
        figs.append(path)
        index.append({"paper figure": label, "path_class": cls, "wm": wm, "pl": pl, "run": f"{point} (rep {rep})",
                      "figure": path.name, "note": ""})
    for (cls, wm, pl), n in PAPER_CWND_FIGS.items():
        if rows(summary, cls, wm, pl).empty:
            index.append({"paper figure": f"Fig. {n}", "path_class": cls, "wm": wm, "pl": pl, "run": "",
                          "figure": "", "note": "not measured: the run has no such point"})
    return figs, pd.DataFrame(index, columns=["paper figure", "path_class", "wm", "pl", "run", "figure", "note"])


# ---- assembly delay ---------------------------------------------------------------------

def histogram_quantile(lo: np.ndarray, hi: np.ndarray, counts: np.ndarray, q: float) -> float:
    """The q-quantile of a histogram (bins [lo, hi) with counts), linear within the bin;
    nan for an empty histogram. Raises ValueError for q outside [0, 1]."""
    if not 0 <= q <= 1:
        raise ValueError(f"quantile {q!r} is not in [0, 1]")
    order = np.argsort(lo)
    lo, hi, counts = lo[order], hi[order], counts[order].astype(float)
    total = counts.sum()
    if total <= 0:
        return math.nan
    cum = np.cumsum(counts)
    i = int(np.searchsorted(cum, q * total, side="left"))
    i = min(i, len(counts) - 1)
    before = cum[i] - counts[i]
    frac = (q * total - before) / counts[i] if counts[i] > 0 else 0.0
    return float(lo[i] + (hi[i] - lo[i]) * min(max(frac, 0.0), 1.0))


def assembly_table(hist: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """Per path class: packets and quantiles of the assembly delay from every run's
    histogram (ms), beside the summary's per-run p50 / p99 / max (means over runs)."""
    out = []
    for cls in _classes(summary):
        row: dict[str, object] = {"path_class": cls, "runs": len(rows(summary, cls))}
        h = rows(hist, cls) if not hist.empty else hist
        if h.empty:
            row.update(runs_with_histogram=0, packets=0)
        else:
            b = h.groupby(["lo_s", "hi_s"], as_index=False)["packets"].sum()
            lo, hi, n = b["lo_s"].to_numpy(float), b["hi_s"].to_numpy(float), b["packets"].to_numpy(float)
            row.update(runs_with_histogram=h["run_key"].nunique(), packets=int(n.sum()),
                       mean_ms=float(((lo + hi) / 2 * n).sum() / n.sum() * 1e3) if n.sum() else math.nan)
            for q in (0.5, 0.9, 0.99):
                row[f"p{q * 100:g}_ms"] = histogram_quantile(lo, hi, n, q) * 1e3
            row["max_ms (bin upper edge)"] = float(hi[n > 0].max() * 1e3) if (n > 0).any() else math.nan
        g = rows(summary, cls)
        for col in ("assembly_delay_p50_s", "assembly_delay_p99_s", "assembly_delay_max_s"):
            if col in g:
                row[f"summary {col[15:-2]}_ms"] = g[col].mean() * 1e3
        out.append(row)
    return pd.DataFrame(out)


def assembly_figure(hist: pd.DataFrame, summary: pd.DataFrame, out: Path) -> Path | None:
    """CDF of the per-packet assembly delay per class (all runs' histograms summed)."""
    if hist.empty:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, cls in enumerate(_classes(summary)):
        h = rows(hist, cls)
        if h.empty:
            continue
        b = h.groupby(["lo_s", "hi_s"], as_index=False)["packets"].sum().sort_values("lo_s")
        cdf = b["packets"].cumsum() / b["packets"].sum()
        ax.step(b["hi_s"] * 1e3, cdf, where="post", color=f"C{i}", label=f"{cls} ({int(b['packets'].sum())} packets)")
    ax.set(xlabel="assembly delay (edge arrival -> burst release) [ms, paper]", ylabel="fraction of packets",
           ylim=(0, 1.02), title="Per-packet assembly delay, all runs of each class")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, out / "assembly_delay.png")


# ---- tables -----------------------------------------------------------------------------

def loss_detection_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per point: loss events detected by RTO and by triple dupACK (means per run) and the
    fraction by RTO: mean of the per-run fractions with its 95 % interval, and pooled."""
    out = []
    for cls, wm, pl, g in _points(summary):
        mean, lo, hi, n = _ci(rto_fraction(g))
        rto, fast = g["loss_events_rto"].sum(), g["loss_events_fast"].sum()
        out.append({"path_class": cls, "wm": wm, "pl": pl, "runs": len(g),
                    "loss_events_rto per run": g["loss_events_rto"].mean(),
                    "loss_events_fast per run": g["loss_events_fast"].mean(),
                    "fraction by RTO": mean, "lo95": lo, "hi95": hi, "runs with losses": n,
                    "pooled fraction by RTO": rto / (rto + fast) if rto + fast else math.nan})
    return pd.DataFrame(out)


def _paper_anchor(cls: str, wm: int, pl: float) -> str:
    if cls == SLOW and wm == 512 and same_pl(pl, 1e-3):
        return "12 360 per burst, ~154 per source"
    if cls == FAST and wm == 512 and same_pl(pl, 1e-3):
        return "44 per burst, about one per source"
    return ""


def segments_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per point: mean segments per burst (as measured, and times the scale: the paper's
    N sources) and per source per burst, with 95 % intervals and the paper's anchors."""
    out = []
    for cls, wm, pl, g in _points(summary):
        row: dict[str, object] = {"path_class": cls, "wm": wm, "pl": pl, "runs": len(g)}
        for col, name in (("segments_per_burst", "per burst"),
                          ("segments_per_source_per_burst", "per source per burst")):
            mean, lo, hi, _ = _ci(g[col])
            row.update({f"segments {name}": mean, f"{name} lo95": lo, f"{name} hi95": hi})
        row["segments per burst x scale"] = float((g["segments_per_burst"] * g.apply(_scale, axis=1)).mean())
        closed = g["bursts_closed_time"].sum() + g["bursts_closed_volume"].sum()
        row["bursts closed by Lmax"] = g["bursts_closed_volume"].sum() / closed if closed else math.nan
        row["paper"] = _paper_anchor(cls, wm, pl)
        out.append(row)
    return pd.DataFrame(out)


def clopper_pearson(k: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """Exact (Clopper-Pearson) interval of a binomial probability from k of n.

    Raises ValueError when not 0 <= k <= n or n = 0."""
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"binomial interval needs 0 <= k <= n and n > 0, got k = {k}, n = {n}")
    a = (1 - level) / 2
    lo = 0.0 if k == 0 else float(special.betaincinv(k, n - k + 1, a))
    hi = 1.0 if k == n else float(special.betaincinv(k + 1, n - k, 1 - a))
    return lo, hi


def poisson_range(mean: float, level: float = LEVEL) -> tuple[int, int]:
    """The central ``level`` range of a Poisson count of mean ``mean``: the smallest k_lo
    with P(X <= k_lo) >= (1 - level) / 2 and k_hi with P(X <= k_hi) >= (1 + level) / 2."""
    a = (1 - level) / 2

    def quantile(p: float) -> int:
        lo, hi = 0, max(10, int(mean + 20 * math.sqrt(mean) + 20))
        while lo < hi:
            mid = (lo + hi) // 2
            if special.pdtr(mid, mean) >= p:
                hi = mid
            else:
                lo = mid + 1
        return lo

    return (quantile(a), quantile(1 - a)) if mean > 0 else (0, 0)


def bursts_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per point: bursts per run, bursts lost, the measured burst loss with its exact
    binomial 95 % interval (over all runs' bursts) and whether the asked Pl lies inside,
    and the 95 % Poisson range of one run's loss count at the asked Pl (how precisely a
    run of that many bursts measures Pl)."""
    out = []
    for cls, wm, pl, g in _points(summary):
        n, k = int(g["bursts"].sum()), int(g["bursts_lost"].sum())
        lo, hi = clopper_pearson(k, n) if n > 0 else (math.nan, math.nan)
        per_run = g["bursts"].mean()
        expected = per_run * pl
        r_lo, r_hi = poisson_range(expected)
        out.append({"path_class": cls, "wm": wm, "pl": pl, "runs": len(g), "bursts per run": per_run,
                    "bursts": n, "bursts lost": k, "lost per run": g["bursts_lost"].mean(), "measured Pl": k / n if n else math.nan,
                    "lo95": lo, "hi95": hi, "asked Pl inside": ("yes" if lo <= pl <= hi else "no") if n else "–",
                    "expected lost per run": expected, "95 % range of lost per run": f"{r_lo}..{r_hi}",
                    "core packets lost": g["core_packets_lost"].sum() if "core_packets_lost" in g else math.nan})
    return pd.DataFrame(out)


def artefacts_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per run: lateness of the emulation (p99, max, us), retransmitted and spurious
    segments, and paper seconds per wall second."""
    s = summary.sort_values(["path_class", "n_sources", "wm", "pl", "rep"])
    out = pd.DataFrame({"point": s["point"], "path_class": s["path_class"], "n_sources": s["n_sources"],
                        "wm": s["wm"], "pl": s["pl"], "rep": s["rep"], "lateness p99 [us]": s["lateness_p99_s"] * 1e6,
                        "lateness max [us]": s["lateness_max_s"] * 1e6, "retrans_segs": s["retrans_segs"],
                        "spurious_retrans_segs": s["spurious_retrans_segs"],
                        "spurious fraction": (s["spurious_retrans_segs"] / s["retrans_segs"])
                        .where(s["retrans_segs"] > 0),
                        "paper_s_per_wall_s": s["paper_s_per_wall_s"]})
    return out.reset_index(drop=True)


def paper_numbers_table(summary: pd.DataFrame) -> pd.DataFrame:
    """The paper's own numbers beside this run's (mean, 95 % interval, n, ours / paper)."""
    s = summary.assign(segments_per_burst_paper_n=summary["segments_per_burst"] * summary.apply(_scale, axis=1))
    out = []
    for quantity, cls, wm, pl, col, paper, factor, unit, note in PAPER_NUMBERS:
        ws = [wm] if wm is not None else wms(rows(s, cls, pl=pl)) or [None]
        for w in ws:
            g = rows(s, cls, w, pl) if w is not None else s.iloc[0:0]
            mean, lo, hi, n = _ci(g[col] * factor) if not g.empty else (math.nan, math.nan, math.nan, 0)
            out.append({"quantity": quantity, "path_class": cls, "wm": w if w is not None else "any",
                        "pl": pl, "paper": paper, "ours": mean, "lo95": lo, "hi95": hi, "runs": n, "unit": unit,
                        "ours / paper": mean / paper if n else math.nan,
                        "note": note if n else f"{note}; not measured"})
    return pd.DataFrame(out)


# ---- entry ------------------------------------------------------------------------------

def main_scale(summary: pd.DataFrame) -> pd.DataFrame:
    """The rows of each path class at its main scale: the most common n_sources of the
    class (ties: the largest, the closest to the paper's N). Figures, tables and findings
    use these; a run that also has other scales shows them in the scale table only."""
    keep = []
    for cls in _classes(summary):
        g = rows(summary, cls)
        if "n_sources" in g and g["n_sources"].nunique() > 1:
            counts = g["n_sources"].value_counts()
            main = max(counts[counts == counts.max()].index)
            g = g[g["n_sources"] == main]
        keep.append(g)
    return pd.concat(keep) if keep else summary


def scale_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per point measured at several scales: the throughput per source at each scale
    against the largest N (Fieller's 95 % interval of the ratio; within 1 +- MARGIN is
    the scale invariance the emulation relies on). Empty when no point has two scales."""
    out = []
    for cls, wm, pl, g in _points(summary):
        sizes = sorted(set(pd.to_numeric(g["n_sources"], errors="coerce").dropna()))
        if len(sizes) < 2:
            continue
        ref = g[g["n_sources"] == sizes[-1]]
        for n in sizes[:-1]:
            at = g[g["n_sources"] == n]
            f = findings.compare("scale", "per-source throughput is invariant under scaling",
                                 (f"{n:g} sources", at["throughput_per_source_bps"]),
                                 (f"{sizes[-1]:g} sources", ref["throughput_per_source_bps"]),
                                 low=1 - findings.MARGIN, high=1 + findings.MARGIN, scale=1e-6, unit="Mb/s")
            out.append({"path_class": cls, "wm": wm, "pl": pl, "n_sources": n, "per source [Mb/s]": f.a.mean,
                        "runs": f.a.n, "reference n_sources": sizes[-1], "reference [Mb/s]": f.b.mean,
                        "reference runs": f.b.n, "ratio": f.estimate, "lo95": f.lo, "hi95": f.hi,
                        f"within 1 +- {findings.MARGIN:g}": f.verdict})
    return pd.DataFrame(out)


def analyse(summary: pd.DataFrame, config: dict, out: Path) -> tuple[list[Path], list[tuple[str, pd.DataFrame]]]:
    """Draw Figs. 3, 4, 5-12, 13 and the assembly delay CDF into ``out`` (the report
    folder; the results folder is ``out.parent``); return them with the tables, the
    findings table last (titled ``findings.TITLE``, also ``out/findings.csv`` and
    ``out/findings.md``). Everything but the per-run artefacts and the scale table is at
    each class's main scale (:func:`main_scale`). A missing per-point file leaves its
    figure without that run and is listed in the table "Per-point files missing"; never
    raises for one."""
    s = main_scale(summary)
    files, missing = load_point_files(out.parent, s)
    figs: list[Path] = []
    figs += fig3(files["throughput_series.csv"], s, out)
    figs.append(fig4(s, out))
    cwnd_figs, cwnd_index = cwnd_figures(files["cwnd.csv"], s, out)    # the paper's order: 3, 4, 5-12, 13
    figs += cwnd_figs
    f13 = fig13(s, out)
    if f13:
        figs.append(f13)
    delay = assembly_figure(files["assembly_delay.csv"], s, out)
    if delay:
        figs.append(delay)
    scale = scale_text(s)
    tables: list[tuple[str, pd.DataFrame]] = [
        ("The paper's numbers beside this run's (paper units; throughput scaled to the paper's N)",
         paper_numbers_table(s)),
        ("Loss events detected by RTO vs triple duplicate ACK (per run; fraction by RTO: mean of per-run "
         "fractions with 95 % interval)", loss_detection_table(s)),
        (f"Segments per burst and per source per burst (95 % intervals over runs; x scale = the paper's N, "
         f"scale {scale})", segments_table(s)),
        ("Assembly delay per class (per-packet, edge arrival -> burst release; from assembly_delay.csv)",
         assembly_table(files["assembly_delay.csv"], s)),
        ("Bursts per run and the burst loss measured (exact binomial 95 % interval over all runs' bursts; "
         "95 % Poisson range of one run's loss count at the asked Pl)", bursts_table(s)),
        ("Artefacts per run (every scale): lateness, spurious retransmissions, paper seconds per wall second",
         artefacts_table(summary)),
        ("Figs. 5-12: the cwnd trace drawn for each point (the paper's cases and the others)", cwnd_index),
    ]
    scales = scale_table(summary)
    if not scales.empty:
        tables.append(("Scale invariance: throughput per source at each scale against the largest N "
                       "(Fieller's 95 % interval of the ratio)", scales))
    if not missing.empty:
        tables.append((f"Per-point files missing or unreadable ({len(missing)}): their figures lack these runs",
                       missing))
    found = evaluate(s)
    table = findings.write(found, out, preamble=f"E2, scale {scale} (n_paper / n_sources per path class). Rule "
                                                f"and margins: docs/e2.md, section Findings.")
    tables.append((f"{findings.TITLE}, scale {scale}", table))
    return figs, tables
