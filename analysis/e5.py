"""Figures and tables of E5 (very small optical RAM in the core of NSFNET: buffer
architectures and pacing): the paper's Figs. 5 and 6, the points with their intervals
and fidelity, the emulation's artefacts, and the findings.

Input: summary.csv of ``e5-optram``, one row per run (the family's parameters, B =
``buffer`` as text such as ``"1.5 kB"``, and its metrics; paper units). A point is one
(arch, pacing, B); its repetitions are its rows. Every mean has its 95 % Student-t
interval over the repetitions (``analysis.stats``).

The figures, the point tables and the findings use the run's main context: the most
common combination of the parameters other than arch, pacing and B
(:data:`CONTEXT_PARAMS`; ties: the smallest scale, the closest to the paper). Rows of
other contexts are listed in "Rows left out"; points measured at several scales are
compared in the scale table (per-flow goodput at each scale against the smallest).
Rows of an XCP parameter sweep (several xcp_alpha / xcp_gamma, e.g. ``e5-xcp-params``)
are not in the main context: they have their own figures
(``xcp_params_<i>_goodput.png`` / ``_drops.png``, the paper's Fig. 4), table and
findings P1-P4 (``analysis.e5_xcp_params``).

Figures (x: B, optical RAM per link in bytes, log scale; B = 0, bufferless, is in the
tables only; a dotted line marks 1 MSS = 1500 B and a grey band the paper's 1-6 MSS
range; error bars: 95 % intervals; a hollow marker: a point of which a run was not
exact, ``occ_overflow`` or ``core_late`` > 0 or ``xcp_exact`` = 0, or beyond the fidelity
bound, ``lateness_p99_over_tau`` > 0.05):

- ``goodput_pacing-<pacing>.png``: Fig. 5, average flow goodput (B/s) vs B, one line
  per architecture, one figure per pacing;
- ``goodput_arch-<arch>.png``: Fig. 6(a), one line per pacing, one figure per
  architecture;
- ``drops_pacing-<pacing>.png`` / ``drops_arch-<arch>.png``: core packet drop rate vs B in the same
  two views (Fig. 6(b); log y: a point with drop rate 0 is not drawn and the figure
  says how many).

Tables: the points (goodput mean and interval, median, drop rate, flows, fidelity,
speed), the emulation's artefacts per point (retransmissions, spurious ones, losses
detected by RTO vs duplicate ACKs; for XCP points the loop's lateness counters), the
runs not exact or beyond the fidelity bound, for XCP points how often the edge pacers
held their macroflows back in the window (``analysis.e5_pacers``; it reads each run's
``xcp_rates.csv``, ``xcp.json`` and ``traffic/stats-h*.json``), every comparison of F1, F2, F3 and F4d (and
of P1-P3 with sweeps) read as independent samples (the verdicts' rule) and paired by seed
(a second reading: ``analysis.e5_findings.comparison_table``), the scale check (with
nested flows also the shared flows' RTTs per seed, ``analysis.e5_scale_rtt``) and the
rows left out (when there are any), and the findings last (``analysis.e5_findings``; also
``findings.csv`` / ``findings.md``).
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Iterable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from analysis import e5_pacers, e5_scale_rtt, e5_xcp_params, findings  # noqa: E402
from analysis.e5_findings import (BUFFER_COL, DROPS, FIDELITY_BOUND, GOODPUT, MSS_B, PAPER_RANGE,  # noqa: E402
                                  arch_name, archs, buffers, comparison_table, evaluate, exactness_faults,
                                  flagged, not_exact, pacing_name, pacings, pair_values, prepare, rows,
                                  second_reading, with_second)
from analysis.stats import mean_ci  # noqa: E402

LEVEL = findings.LEVEL
#: the goodput of the flows shared between scales (nested flows; the family's metric)
COMMON = "goodput_common_Bps"
#: parameters besides arch, pacing and B that make a run's context (the figures use one)
CONTEXT_PARAMS = ("topology", "abilene_nodes", "routing", "cca", "flows", "scale", "flows_of_scale", "common_scale",
                  "rate", "duration", "window", "cwnd_limit", "edge_buffer", "bin", "xcp_alpha", "xcp_beta",
                  "xcp_gamma", "xcp_interval", "xcp_rate_delay")
#: the summary columns this analysis reads (parameters and metrics of the E5 family)
COLUMNS_READ = ("point", "rep", "seed", "arch", "pacing", "buffer", *CONTEXT_PARAMS, GOODPUT,
                "goodput_per_flow_median_Bps", COMMON, "flows_common_measured",
                "flows_started", "flows_measured", "flows_failed", DROPS, "edge_drops", "occ_overflow", "core_late",
                "window_start_late_s", "loss_events_rto", "loss_events_fast", "retrans_segs",
                "spurious_retrans_segs", "lateness_p99_over_tau", "packet_hops_per_wall_s", "paper_s_per_wall_s")
#: line colours: one per architecture, one per pacing (the same in every figure)
ARCH_COLOURS = {"sb": "C0", "wcsb": "C1", "ib": "C2", "ob": "C3"}
PACING_COLOURS = {"none": "C3", "tcp": "C2", "xcp": "C0", "xcp-ack": "C1"}
MARKERS = "osD^v<>p"


# ---- selection -------------------------------------------------------------------------

def _context_columns(s: pd.DataFrame) -> list[str]:
    return [c for c in CONTEXT_PARAMS if c in s]


def _float(v: object) -> float:
    """A summary cell as a number (nan when it is not one)."""
    try:
        return float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def _scale(v: object) -> float:
    """A scale for ordering: the number, +inf when unreadable (last)."""
    x = _float(v)
    return math.inf if math.isnan(x) else x


def main_context(s: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows of the main context (module docstring) and the other rows."""
    cols = _context_columns(s)
    if not cols or s.empty:
        return s, s.iloc[0:0]
    key = s[cols].astype(str).agg(" | ".join, axis=1)
    counts = key.value_counts()
    best = [k for k in counts.index if counts[k] == counts.max()]
    if "scale" in cols and len(best) > 1:
        scale_of = {k: _scale(s.loc[key == k, "scale"].iloc[0]) for k in best}
        best = sorted(best, key=lambda k: scale_of[k])
    keep = key == best[0]
    return s[keep], s[~keep]


def context_text(s: pd.DataFrame) -> str:
    """``"nsfnet, scale 100, 1586 flows, 1 Gbit/s, ..."``: the values shared by the rows
    (``abilene_nodes`` only when a row is on the Abilene-like network: NSFNET ignores it)."""
    if s.empty:
        return "?"
    abilene = "topology" not in s or (s["topology"].astype(str) == "abilene").any()
    bits = []
    for c in _context_columns(s):
        if c == "abilene_nodes" and not abilene:
            continue
        vals = sorted(set(s[c].astype(str)))
        v = "/".join(vals)
        bits.append(v if c in ("topology", "cca") else f"{c} {v}")
    return ", ".join(bits)


def _points(s: pd.DataFrame) -> list[tuple[str, str, float, pd.DataFrame]]:
    """(arch, pacing, B, its rows) for every point, in the paper's orders and B ascending."""
    return [(a, p, b, rows(s, a, p, b)) for a in archs(s) for p in pacings(rows(s, a))
            for b in buffers(rows(s, a, p))]


def _num(g: pd.DataFrame, col: str) -> pd.Series:
    return pd.to_numeric(g[col], errors="coerce") if col in g else pd.Series(math.nan, index=g.index)


def _ci(values: Iterable[float]) -> tuple[float, float, float, int]:
    """Mean, 95 % interval bounds and n of the non-nan values (nan bounds for n < 2)."""
    vals = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    mean, half = mean_ci(vals, LEVEL)
    return mean, mean - half, mean + half, len(vals)


def _buffer_label(g: pd.DataFrame) -> str:
    return str(g["buffer"].iloc[0]) if "buffer" in g and len(g) else ""


# ---- figures ---------------------------------------------------------------------------

def slug(text: str) -> str:
    """A file-name-safe form of ``text``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "x"


def _save(fig: plt.Figure, path: Path) -> Path:
    """Lay out, write (PNG, 100 dpi) and close ``fig``; return ``path``. Raises OSError."""
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _line(ax: plt.Axes, g: pd.DataFrame, column: str, colour: str, marker: str, label: str,
          log_y: bool) -> tuple[bool, int, int]:
    """One curve of ``g`` over its B > 0 points: means with 95 % error bars, hollow
    markers for points with a flagged run. Returns (drawn, flagged points, points
    left out because not drawable on a log y axis)."""
    xs, means, lo_err, hi_err, hollow = [], [], [], [], []
    skipped = 0
    for b in buffers(g, positive=True):
        at = rows(g, buffer=b)
        mean, lo, hi, n = _ci(_num(at, column))
        if n == 0 or (log_y and not mean > 0):
            skipped += n > 0
            continue
        below = 0.0 if math.isnan(lo) else mean - lo
        if log_y:
            below = min(below, mean * 0.999)          # a log axis cannot show <= 0
        xs.append(b)
        means.append(mean)
        lo_err.append(below)
        hi_err.append(0.0 if math.isnan(hi) else hi - mean)
        hollow.append(bool(flagged(at).any()))
    if not xs:
        return False, 0, skipped
    ax.errorbar(xs, means, yerr=[lo_err, hi_err], fmt=f"-{marker}", color=colour, capsize=3, ms=5, label=label)
    hx = [x for x, h in zip(xs, hollow) if h]
    if hx:
        hy = [m for m, h in zip(means, hollow) if h]
        ax.plot(hx, hy, marker, ls="none", ms=9, mfc="white", mec=colour, mew=1.6, zorder=4)
    return True, len(hx), skipped


def _axes_marks(ax: plt.Axes) -> None:
    """1 MSS = 1500 B on the x axis, the paper's 1-6 MSS range shaded."""
    ax.axvspan(*PAPER_RANGE, color="0.85", alpha=0.5, lw=0, zorder=0)
    ax.axvline(MSS_B, color="k", ls=":", lw=1)
    ax.annotate("1 MSS = 1500 B", xy=(MSS_B, 1), xycoords=("data", "axes fraction"), xytext=(3, -12),
                textcoords="offset points", fontsize=7)


def curve_figure(s: pd.DataFrame, fixed: str, value: str, column: str, path: Path, title: str) -> Path | None:
    """One figure: ``column`` vs B at ``fixed`` (``"pacing"`` or ``"arch"``) = ``value``,
    a line per value of the other key. None when nothing is drawable."""
    log_y = column == DROPS
    g = s[s[fixed] == value]
    keys = archs(g) if fixed == "pacing" else pacings(g)
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    any_drawn, n_flagged, n_skipped = False, 0, 0
    for i, k in enumerate(keys):
        sub = g[g["arch" if fixed == "pacing" else "pacing"] == k]
        colour = (ARCH_COLOURS if fixed == "pacing" else PACING_COLOURS).get(k, f"C{4 + i}")
        name = arch_name(k) if fixed == "pacing" else pacing_name(k)
        reps = sorted(set(sub.groupby(BUFFER_COL).size()))
        drawn, nf, ns = _line(ax, sub, column, colour, MARKERS[i % len(MARKERS)],
                              f"{name} (n = {'/'.join(map(str, reps))})", log_y)
        any_drawn |= drawn
        n_flagged += nf
        n_skipped += ns
    if not any_drawn:
        plt.close(fig)
        return None
    ax.set_xscale("log")
    if log_y:
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)
    _axes_marks(ax)
    ylabel = "Average flow goodput (Bytes/s)" if column == GOODPUT else "Core packet drop rate"
    ax.set(xlabel="Buffer size per link B (Bytes)", ylabel=ylabel)
    ax.set_title("\n".join(textwrap.fill(line, 95) for line in title.split("\n")), fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    if n_flagged:
        ax.plot([], [], "o", mfc="white", mec="k", ls="none",
                label=f"hollow: not exact / beyond the fidelity bound ({n_flagged})")
    ax.legend(fontsize=7)
    if n_skipped:
        ax.text(0.01, 0.01, f"{n_skipped} point(s) with drop rate 0 not drawn (log axis)", transform=ax.transAxes,
                fontsize=7, va="bottom")
    return _save(fig, path)


def figures(s: pd.DataFrame, out: Path) -> list[Path]:
    """Figs. 5 and 6: goodput and drop rate vs B, per pacing and per architecture."""
    ctx = context_text(s)
    made: list[Path | None] = []
    for column, stem, what in ((GOODPUT, "goodput", "average flow goodput"), (DROPS, "drops", "core drop rate")):
        for p in pacings(s):
            made.append(curve_figure(s, "pacing", p, column, out / f"{stem}_pacing-{slug(p)}.png",
                                     f"{what} vs B, {pacing_name(p)} (cf. paper Fig. 5)\n{ctx}"))
        for a in archs(s):
            made.append(curve_figure(s, "arch", a, column, out / f"{stem}_arch-{slug(a)}.png",
                                     f"{what} vs B, {arch_name(a)} (cf. paper Fig. 6)\n{ctx}"))
    return [p for p in made if p is not None]


# ---- tables ----------------------------------------------------------------------------

def fidelity_text(g: pd.DataFrame) -> str:
    """``ok``, ``not exact``, ``beyond the fidelity bound`` (both joined by ``; ``), or
    ``lateness unknown`` when no run of ``g`` has a lateness value."""
    bits = []
    if not_exact(g).any():
        bits.append("not exact")
    late = _num(g, "lateness_p99_over_tau")
    if (late > FIDELITY_BOUND).any():
        bits.append("beyond the fidelity bound")
    if not bits and late.isna().all():
        return "lateness unknown"
    return "; ".join(bits) or "ok"


def points_table(s: pd.DataFrame) -> pd.DataFrame:
    """Per point: repetitions, goodput (mean, 95 % interval, mean of the runs' medians),
    core drop rate (mean, interval), flows measured, occ_overflow and lateness p99 / tau
    (the largest over the runs), paper s per wall s and packet hops per wall s (means)."""
    out = []
    for a, p, b, g in _points(s):
        gm, glo, ghi, n = _ci(_num(g, GOODPUT))
        dm, dlo, dhi, _ = _ci(_num(g, DROPS))
        out.append({"arch": a, "pacing": p, "buffer": _buffer_label(g), "B [bytes]": b, "B [MSS]": b / MSS_B,
                    "reps": len(g), "goodput [B/s]": gm, "goodput lo95": glo, "goodput hi95": ghi,
                    "goodput runs": n, "median goodput [B/s]": _num(g, "goodput_per_flow_median_Bps").mean(),
                    "core drop rate": dm, "drop lo95": dlo, "drop hi95": dhi,
                    "flows measured": _num(g, "flows_measured").mean(),
                    "occ_overflow (max)": _num(g, "occ_overflow").max(),
                    "lateness p99 / tau (max)": _num(g, "lateness_p99_over_tau").max(),
                    "paper s per wall s": _num(g, "paper_s_per_wall_s").mean(),
                    "packet hops per wall s": _num(g, "packet_hops_per_wall_s").mean(),
                    "fidelity": fidelity_text(g)})
    return pd.DataFrame(out)


def _pooled(num: pd.Series, den: pd.Series) -> float:
    total = den.sum()
    return float(num.sum() / total) if total > 0 else math.nan


def artefacts_table(s: pd.DataFrame) -> pd.DataFrame:
    """Per point, means per run: retransmitted and spurious segments (and the pooled
    spurious fraction), losses detected by RTO and by duplicate ACKs (pooled fraction by
    RTO), edge drops, failed flows, and how late the window's counters were read (max);
    for XCP points (NaN otherwise) the loop's exact runs of all, its rate changes sent
    and those applied after their instant, packets that reached a pacer after their
    instant was decided, accumulator slots read late or lost (means per run) and the
    largest p99 decision lag (paper s; how late each late rate change was: the point's
    xcp.json, ``max_rate_late_ns``)."""
    out = []
    for a, p, b, g in _points(s):
        retrans, spurious = _num(g, "retrans_segs"), _num(g, "spurious_retrans_segs")
        rto, fast = _num(g, "loss_events_rto"), _num(g, "loss_events_fast")
        exact = _num(g, "xcp_exact")
        out.append({"arch": a, "pacing": p, "buffer": _buffer_label(g), "B [bytes]": b, "reps": len(g),
                    "retrans_segs per run": retrans.mean(), "spurious_retrans_segs per run": spurious.mean(),
                    "spurious fraction": _pooled(spurious, retrans),
                    "loss_events_rto per run": rto.mean(), "loss_events_fast per run": fast.mean(),
                    "fraction by RTO": _pooled(rto, rto + fast),
                    "edge_drops per run": _num(g, "edge_drops").mean(),
                    "flows_failed per run": _num(g, "flows_failed").mean(),
                    "window start late [s] (max)": _num(g, "window_start_late_s").max(),
                    "xcp exact runs": (f"{int((exact == 1).sum())} of {int(exact.notna().sum())}"
                                       if exact.notna().any() else ""),
                    "xcp rate changes per run": _num(g, "xcp_rate_changes").mean(),
                    "xcp late rates per run": _num(g, "xcp_late_rates").mean(),
                    "xcp pacer late per run": _num(g, "xcp_pacer_late").mean(),
                    "xcp acc late + lost per run": (_num(g, "xcp_acc_late") + _num(g, "xcp_acc_lost")).mean(),
                    "xcp decision lag p99 [s] (max)": _num(g, "xcp_decision_lag_p99_s").max()})
    return pd.DataFrame(out)


def fidelity_table(s: pd.DataFrame) -> pd.DataFrame:
    """The runs not exact (occ_overflow or core_late > 0, xcp_exact = 0) or beyond the
    fidelity bound (lateness_p99_over_tau > FIDELITY_BOUND), with why. In a combined
    report (a ``run`` column: the source folder) the folder comes first: point names
    are per folder, p0006 of one block is not p0006 of another."""
    combined = "run" in s.columns
    cols = (["run"] if combined else []) + ["point", "rep", "arch", "pacing", "buffer", "occ_overflow", "core_late",
                                            "xcp_exact", "lateness_p99_over_tau", "why"]
    bad = s[flagged(s)]
    out = []
    for _, r in bad.sort_values(["arch", "pacing", BUFFER_COL]).iterrows():
        why = [f"not exact: {fault}" for fault in exactness_faults(r)]
        if _float(r.get("lateness_p99_over_tau")) > FIDELITY_BOUND:
            why.append(f"beyond the fidelity bound: p99 lateness > {FIDELITY_BOUND:g} x a frame's duration")
        out.append({**({"run": r["run"]} if combined else {}),
                    "point": r.get("point", ""), "rep": r.get("rep", ""), "arch": r["arch"], "pacing": r["pacing"],
                    "buffer": r["buffer"], "occ_overflow": r.get("occ_overflow", math.nan),
                    "core_late": r.get("core_late", math.nan), "xcp_exact": r.get("xcp_exact", math.nan),
                    "lateness_p99_over_tau": r.get("lateness_p99_over_tau", math.nan), "why": "; ".join(why)})
    return pd.DataFrame(out, columns=cols)


def scale_table(s: pd.DataFrame) -> pd.DataFrame:
    """Per point (arch, pacing, B and the rest of the context but scale) measured at
    several scales: per-flow goodput at each scale against the smallest scale (Fieller's
    95 % interval of the ratio; within 1 +- MARGIN is the invariance the scaling relies
    on). With nested flows (``flows_of_scale``, ``common_scale``) also the goodput of the
    flows both scales share (:data:`COMMON`), paired by seed (Fieller's interval for
    paired samples): the same flows at both scales, the verdict of a nested scale check
    (docs/e5.md, "Scale"). Empty when no point has two scales."""
    if "scale" not in s:
        return pd.DataFrame()
    others = [c for c in _context_columns(s) if c != "scale"]
    out = []
    groups = s.groupby(others, dropna=False, sort=False) if others else [((), s)]
    for _, ctx in groups:
        for a, p, b, g in _points(ctx):
            sizes = sorted({_scale(v) for v in g["scale"]})
            if len(sizes) < 2:
                continue
            ref = g[g["scale"].map(_scale) == sizes[0]]
            for k in sizes[1:]:
                at = g[g["scale"].map(_scale) == k]
                f = findings.compare("scale", "per-flow goodput is invariant under scaling",
                                     (f"scale {k:g}", _num(at, GOODPUT)), (f"scale {sizes[0]:g}", _num(ref, GOODPUT)),
                                     low=1 - findings.MARGIN, high=1 + findings.MARGIN, scale=1e-3, unit="kB/s")
                row = {"arch": a, "pacing": p, "buffer": _buffer_label(g), "scale": k,
                       "goodput [kB/s]": f.a.mean if f.a else math.nan, "runs": f.a.n if f.a else 0,
                       "reference scale": sizes[0], "reference [kB/s]": f.b.mean if f.b else math.nan,
                       "reference runs": f.b.n if f.b else 0, "ratio": f.estimate, "lo95": f.lo, "hi95": f.hi,
                       f"within 1 +- {findings.MARGIN:g}": f.verdict}
                if COMMON in g and "seed" in g and _num(at, COMMON).notna().any() and _num(ref, COMMON).notna().any():
                    va, vb = pair_values(at, ref, COMMON, paired=True)
                    c = findings.compare("scale", "the shared flows' goodput is invariant under scaling",
                                         (f"scale {k:g}", va), (f"scale {sizes[0]:g}", vb), low=1 - findings.MARGIN,
                                         high=1 + findings.MARGIN, scale=1e-3, unit="kB/s", paired=True)
                    row.update({"shared flows [kB/s]": c.a.mean if c.a else math.nan,
                                "reference shared [kB/s]": c.b.mean if c.b else math.nan,
                                "pairs": c.a.n if c.a else 0, "shared ratio": c.estimate, "shared lo95": c.lo,
                                "shared hi95": c.hi, f"shared within 1 +- {findings.MARGIN:g}": c.verdict})
                out.append(row)
    return pd.DataFrame(out)


def left_out_table(left: pd.DataFrame, unreadable: pd.DataFrame) -> pd.DataFrame:
    """Rows not in the figures and findings: other contexts (counted per context) and
    rows whose buffer could not be read."""
    out = []
    cols = _context_columns(left)
    if not left.empty and cols:
        for key, g in left.groupby(cols, dropna=False, sort=False):
            key = key if isinstance(key, tuple) else (key,)
            out.append({"context": ", ".join(f"{c} {v}" for c, v in zip(cols, key)), "runs": len(g),
                        "why": "not the run's main context"})
    if not unreadable.empty:
        out.append({"context": "buffer " + ", ".join(sorted(set(unreadable["buffer"].astype(str)))),
                    "runs": len(unreadable), "why": "buffer not readable as a size"})
    return pd.DataFrame(out, columns=["context", "runs", "why"])


# ---- entry -----------------------------------------------------------------------------

def analyse(summary: pd.DataFrame, config: dict, out: Path) -> tuple[list[Path], list[tuple[str, pd.DataFrame]]]:
    """Draw the goodput and drop-rate figures into ``out`` (the report folder; the results
    folder, whose points' files the XCP pacer table reads, is ``out.parent``) and return
    them with the tables, the findings table last (titled ``findings.TITLE``, also
    ``out/findings.csv`` and ``out/findings.md``). Figures, point tables and findings F1-F4
    use the main context (:func:`main_context`) of the rows outside XCP parameter sweeps;
    the sweeps (``analysis.e5_xcp_params``: figures, table, P1-P4) have their own. Each
    finding is evaluated once per reading (the verdicts; the second reading, paired by
    seed). Raises KeyError when the summary lacks ``arch``, ``pacing`` or ``buffer``;
    OSError when ``out`` is not writable."""
    prepared = prepare(summary)
    readable = prepared[prepared[BUFFER_COL].notna()]
    sweeps = e5_xcp_params.sweeps(readable, CONTEXT_PARAMS)
    in_sweeps = pd.concat(sweeps).index if sweeps else readable.index[:0]
    s, left = main_context(readable[~readable.index.isin(in_sweeps)])
    ctx = context_text(s)
    figs = figures(s, out)
    bad = fidelity_table(s)
    tables: list[tuple[str, pd.DataFrame]] = [
        (f"Points: average flow goodput and core drop rate per (arch, pacing, B), means with 95 % intervals over "
         f"repetitions ({ctx})", points_table(s)),
        ("Emulation artefacts per point (means per run): retransmissions, spurious retransmissions, losses "
         "detected by RTO vs duplicate ACKs; XCP points: the loop's lateness counters", artefacts_table(s)),
        (f"Not exact / beyond the fidelity bound ({len(bad)} runs): occ_overflow or core_late > 0, xcp_exact = 0, "
         f"or lateness p99 > {FIDELITY_BOUND:g} x a frame's duration; hollow markers in the figures", bad),
    ]
    held, unread = e5_pacers.table(pd.concat([s, *sweeps]), out.parent)
    if not held.empty:
        tables.append((f"XCP pacers in the measured window: the share of data bytes a pacer held back (its "
                       f"macroflow sent at >= {e5_pacers.HELD:g} x its grant in a control interval), of active "
                       "macroflow-intervals held, and the median sent / granted; mean [min, max] over runs "
                       "(an observation beside the findings: analysis/e5_pacers.py)", held))
    if not unread.empty:
        tables.append((f"XCP runs whose pacer records could not be read ({len(unread)})", unread))
    # each finding is evaluated once per reading: the verdicts (pre-registered) and the
    # second reading paired by seed, which the comparisons table and the side column share
    verdicts = evaluate(s) + e5_xcp_params.evaluate(sweeps)
    second = second_reading(s) + e5_xcp_params.second_reading(sweeps)
    pairs = comparison_table(verdicts, second)
    if not pairs.empty:
        tables.append((f"Comparisons ({len(pairs)}: {', '.join(dict.fromkeys(pairs['id']))}), two readings: as "
                       "independent samples (verdict: the pre-registered rule) and paired by seed (paired_verdict: "
                       "every point's repetition r has the same flows; a second reading, not the findings' verdict; "
                       "analysis/e5_findings.py)", pairs))
    scales = scale_table(readable)
    if not scales.empty:
        tables.append(("Scale invariance: per-flow goodput at each scale against the smallest (Fieller's 95 % "
                       "interval of the ratio)", scales))
        rtts, rtt_unread = e5_scale_rtt.table(readable, out.parent)
        if not rtts.empty:
            tables.append(("Scale: the shared flows' smoothed RTT at each scale, per seed, and the goodput ratio the "
                           "RTTs alone predict for window-limited flows (an observation defined after the nested "
                           "check's results, not a verdict: analysis/e5_scale_rtt.py)", rtts))
        if not rtt_unread.empty:
            tables.append((f"Scale runs whose flows could not be read ({len(rtt_unread)})", rtt_unread))
    if sweeps:
        figs += e5_xcp_params.figures(sweeps, out)
        tables.append((f"XCP parameters (cf. paper Fig. 4; {len(in_sweeps)} runs, not in the figures and tables "
                       "above): goodput and core drop rate per (alpha, gamma), means with 95 % intervals; findings "
                       "P1-P4", e5_xcp_params.table(sweeps)))
    left_out = left_out_table(left, prepared[prepared[BUFFER_COL].isna()])
    if not left_out.empty:
        tables.append((f"Rows left out of the figures and findings ({int(left_out['runs'].sum())} runs)", left_out))
    preamble = f"E5, {ctx}. Rules (pre-registered): analysis/e5_findings.py, docs/e5.md."
    if second:
        preamble += (f" The side column gives {', '.join(f.id for f in second)} also read paired by seed (a second "
                     f"reading, not the verdict; each comparison: the report's 'Comparisons' table).")
    table = findings.write(with_second(verdicts, second), out, preamble=preamble)
    tables.append((f"{findings.TITLE}, {ctx}", table))
    return figs, tables
