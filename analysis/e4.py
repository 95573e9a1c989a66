"""Figures and tables of E4 (a buffer-limited TCP flow moved from an IP path onto a
shorter optical path): the paper's Figs. 2-3, the sender's window around the move, the
duplicate ACKs the move causes, and the findings.

Inputs (paper units; times ``t_s`` relative to the move): summary.csv, one row per run
of a configuration (parameters and the metrics of ``testbed.families.e4_flowmove``;
``analysis.e4_findings`` says what a configuration is), and per run ``points/<point>/``
(``testbed.families._e4_measure``): ``throughput_series.csv`` (granularity_s, source =
capture | socket, t_s = bin start, bytes, throughput_bps), ``cwnd.csv`` (the sender's
changes-only trace: t_s, event, cwnd, ssthresh, reordering, ca_state, ...),
``dupacks.csv`` (t_s, rfc5681) and ``e4.json`` (the capture's MSS).

Figures (a figure group is a configuration without its RTT; the paper's set-up is
buffer-limited CUBIC moved at a set time with RTT after = 0.6 x before):

- ``throughput_1s_<group>.png``: Figs. 2(a) (1 Gbit/s), 3(a) (100 Mbit/s), 3(b)
  (10 Gbit/s): receiver-side throughput (capture, 1 s bins, mean over repetitions per
  bin, the bins matched by their index from the flow's start and drawn at their mean
  start) vs time, one line per RTT, dashed the limit before (alpha / RTT-before), dotted
  the paper's "new theoretical value" alpha / RTT-after.
- ``throughput_rtt_<group>.png``: Fig. 2(b): the same at one-RTT-before bins, one panel
  per RTT (x in RTTs before, -20 .. +40), the first repetition; thin: the receiving
  socket's own count.
- ``cwnd_<configuration>.png``: cwnd, ssthresh (not drawn while "infinite", 2^31 - 1)
  and the reordering degree of the sender around the move, first repetition, step plots;
  shaded: fast recovery or loss state; dashed: alpha / MSS.
- ``dupacks_<group>.png``: duplicate ACKs per one-RTT-before bin around the move (mean
  over repetitions), one panel per RTT.

A figure whose data is missing is left out; the table "Per-point files missing" says
which runs lack which file. Tables: throughput around the move, reordering and the
sender's reaction, artefacts, the paper's numbers beside ours (with the note on 10
Gbit/s at 1000 ms) and the findings (``analysis.e4_findings``, also ``findings.csv`` and
``findings.md``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from analysis import findings  # noqa: E402
from analysis.e4_findings import (FIRST_SECOND, PAPER_CCA, PAPER_LIMITER, Config, configurations,  # noqa: E402
                                  evaluate, first_second_ratio, label, moved, paper_configurations)
from analysis.report import source_folders  # noqa: E402
from testbed.families._e4_measure import MAX_TCP_WINDOW  # noqa: E402
from analysis.stats import mean_ci  # noqa: E402

LEVEL = findings.LEVEL
#: the kernel's "infinite" ssthresh (TCP_INFINITE_SSTHRESH, never set)
INFINITE_SSTHRESH = 2 ** 31 - 1
#: Linux congestion-avoidance states at and above which the sender is recovering
#: (TCP_CA_Recovery = 3, TCP_CA_Loss = 4)
CA_RECOVERY = 3
#: the RTT-granularity figures' x range, RTTs before the move
WINDOW_RTTS = (-20.0, 40.0)
#: the dupACK figure's x range, RTTs before the move
DUPACK_RTTS = (-5, 20)
#: the paper's set-up besides limiter and CCA: moved by r1 at a set time, RTT x 0.6
PAPER_TRIGGER, PAPER_RATIO = "time", 0.6
#: the paper's throughput figures at 1 s granularity per limit rate (bit/s)
PAPER_FIG_1S = {1e9: "Fig. 2(a)", 100e6: "Fig. 3(a)", 10e9: "Fig. 3(b)"}
#: the paper's figure at one-RTT granularity
PAPER_FIG_RTT = {1e9: "Fig. 2(b)"}
#: the paper's duplicate ACK count and where (limit bit/s, RTT s)
PAPER_DUPACKS, PAPER_DUPACKS_AT = 1372, (1e9, 0.010)
#: the case the paper omits (Fig. 3(b)): limit bit/s, RTT s
OMITTED = (10e9, 1.0)

#: per-point files read, and what lacks without one
POINT_FILES = {"throughput_series.csv": "the throughput figures and F4 lack this run",
               "cwnd.csv": "no cwnd figure from this run",
               "dupacks.csv": "the duplicate-ACK figure lacks this run"}


# ---- inputs ------------------------------------------------------------------------------

@dataclass
class PointFiles:
    """Reads the per-point files of a results folder (``points/<point>/``; in a combined
    report the folder of the run named in the summary's ``run`` column) and records the
    ones that are missing or unreadable. Never raises for a missing file."""

    results: Path
    missing: list[dict[str, object]] = field(default_factory=list)
    _sources: dict[str, Path] | None = None

    def folder(self, row: pd.Series) -> Path:
        """The point folder of a summary row."""
        if self._sources is None:
            self._sources = source_folders(self.results)
        base = self._sources.get(str(row.get("run", "")), self.results)
        return base / "points" / str(row["point"])

    def csv(self, row: pd.Series, name: str, usecols: Iterable[str] | None = None) -> pd.DataFrame | None:
        """One point's CSV ``name`` (only ``usecols`` that exist), or None after recording why not."""
        path = self.folder(row) / name
        why = ""
        if not path.exists():
            why = "missing"
        else:
            try:
                keep = set(usecols) if usecols is not None else None
                frame = pd.read_csv(path, usecols=(lambda c: c in keep) if keep is not None else None)
            except pd.errors.EmptyDataError:
                why = "empty"
            except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
                why = f"unreadable: {exc}"
            else:
                if not frame.empty:
                    return frame
                why = "no rows"
        self.missing.append({"point": point_key(row), "rep": row.get("rep"), "file": name, "why": why,
                             "consequence": POINT_FILES.get(name, "")})
        return None

    def json(self, row: pd.Series, name: str) -> dict[str, object]:
        """One point's JSON file ``name``; {} when missing or unreadable."""
        path = self.folder(row) / name
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def table(self) -> pd.DataFrame:
        """The files recorded missing (one row per point and file)."""
        cols = ["point", "rep", "file", "why", "consequence"]
        return pd.DataFrame(self.missing, columns=cols).drop_duplicates(["point", "file"])


def clean_series(series: pd.DataFrame) -> pd.DataFrame:
    """A throughput_series.csv with each (granularity, source, bin) once (at RTT 1 s the
    family writes its 1 s and one-RTT bins alike)."""
    return series.drop_duplicates(["granularity_s", "source", "t_s"]).sort_values("t_s")


def bins(series: pd.DataFrame, granularity_s: float, source: str = "capture") -> pd.DataFrame:
    """The bins of one granularity (s; relative tolerance 1e-6) and source."""
    g = pd.to_numeric(series["granularity_s"], errors="coerce")
    sel = np.isclose(g, granularity_s, rtol=1e-6, atol=0) & (series["source"].astype(str) == source)
    return series[sel]


def first_second_rate(series: pd.DataFrame, span_s: float = 1.0) -> float:
    """Receiver-side rate (bit/s, capture) over [0, ``span_s``) after the move, from the
    finest capture granularity (at most ``span_s``) whose bins cover that span: the bytes
    of the bins inside it plus the share of each bin it cuts, taken as spread evenly over
    that bin (exact when a bin starts at the move; the family's bins start at the flow's
    start, so the move cuts one by the move's offset). nan when no granularity covers it."""
    cap = series[series["source"].astype(str) == "capture"]
    for g in sorted(set(pd.to_numeric(cap["granularity_s"], errors="coerce").dropna())):
        if not 0 < g <= span_s * (1 + 1e-9):
            continue
        b = bins(cap, g)
        start = b["t_s"].to_numpy(dtype=float)
        tol = 1e-6 * g
        if not len(start) or start.min() > tol or start.max() + g < span_s - tol:
            continue
        share = np.clip(np.minimum(start + g, span_s) - np.maximum(start, 0.0), 0.0, None) / g
        return 8 * float((b["bytes"].to_numpy(dtype=float) * share).sum()) / span_s
    return math.nan


def point_key(row: pd.Series) -> str:
    """A summary row's point, unique in a combined report too (where every source run has
    its own p0000): ``<run>/<point>``, or the point alone in a run's own report."""
    run = row.get("run", "")
    return f"{run}/{row['point']}" if isinstance(run, str) and run else str(row["point"])


def load_series(files: PointFiles, summary: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Every run's throughput series by :func:`point_key` (runs without one left out,
    recorded)."""
    out = {}
    for _, row in summary.iterrows():
        s = files.csv(row, "throughput_series.csv")
        if s is not None and {"granularity_s", "source", "t_s", "bytes"} <= set(s.columns):
            out[point_key(row)] = clean_series(s)
    return out


def with_first_second(summary: pd.DataFrame, series: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The summary with :data:`FIRST_SECOND` per run (nan without an aligned capture series)."""
    keys = [point_key(row) for _, row in summary.iterrows()]
    rates = [first_second_rate(series[k]) if k in series else math.nan for k in keys]
    return summary.assign(**{FIRST_SECOND: rates})


# ---- helpers -------------------------------------------------------------------------------

def _num(g: pd.DataFrame, col: str) -> pd.Series:
    """A summary column as numbers (nan where absent or not a number)."""
    if col not in g:
        return pd.Series(math.nan, index=g.index, dtype=float)
    return pd.to_numeric(g[col], errors="coerce")


def _ci(values: Iterable[float]) -> tuple[float, float, float, int]:
    """Mean, 95 % interval bounds and n of the finite values."""
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    mean, half = mean_ci(vals, LEVEL)
    return mean, mean - half, mean + half, len(vals)


def _with_ci(row: dict[str, object], name: str, values: Iterable[float]) -> None:
    mean, lo, hi, _ = _ci(values)
    row.update({name: mean, f"{name} lo95": lo, f"{name} hi95": hi})


def _save(fig: plt.Figure, path: Path) -> Path:
    """Lay out, write (PNG, 100 dpi) and close ``fig``; return ``path``. Raises OSError."""
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def numbered(b: pd.DataFrame, granularity_s: float) -> pd.DataFrame:
    """One run's bins of one granularity with ``bin``, their index from the run's first
    bin: the same bin of every repetition (bins start at the flow's start, so the move
    falls at a slightly different place in each run)."""
    t = b["t_s"].to_numpy(dtype=float)
    return b.assign(bin=np.round((t - t.min()) / granularity_s).astype(int))


def _step(ax: plt.Axes, start: np.ndarray, values: np.ndarray, width: float, **style: object) -> None:
    """Bins (``start``, ``values``) of ``width`` as a step line that covers the last bin too."""
    if len(start):
        ax.step(np.append(start, start[-1] + width), np.append(values, values[-1]), where="post",
                **style)  # type: ignore[arg-type]


def series_end(series: pd.DataFrame | None) -> float:
    """The end of a run's capture series (s after the move; inf when unknown)."""
    if series is None or series.empty:
        return math.inf
    return float((series["t_s"] + pd.to_numeric(series["granularity_s"], errors="coerce")).max())


def slug(text: str) -> str:
    """A file-name part from a label: ``1Gbit-s_buffer_cubic``."""
    text = text.replace("/", "-").replace(" x ", "x")
    return re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9.x-]+", "_", text)).strip("_")


def rate_unit(bps: float) -> tuple[float, str]:
    """(factor, unit) to show a rate near ``bps``: Mb/s below 1 Gb/s, else Gb/s."""
    return (1e-6, "Mb/s") if bps < 1e9 else (1e-9, "Gb/s")


def first_run(c: Config) -> pd.Series:
    """The configuration's run of the lowest repetition (moved runs first)."""
    g = moved(c.rows)
    g = g if not g.empty else c.rows
    return g.sort_values("rep").iloc[0] if "rep" in g else g.iloc[0]


@dataclass(frozen=True)
class Group:
    """A figure group: configurations that differ only in their RTT."""

    key: tuple[object, ...]
    columns: tuple[str, ...]
    configs: tuple[Config, ...]

    @property
    def label(self) -> str:
        return label(self.columns, self.key)

    @property
    def limit_bps(self) -> float:
        return self.configs[0].limit_bps

    def paper_figure(self, table: dict[float, str]) -> str:
        """The paper's figure of this group in ``table`` (by limit rate), else ''."""
        c = self.configs[0]
        if not (c.is_paper() and c.value("trigger") in (PAPER_TRIGGER, None)
                and math.isclose(float(c.value("rtt_ratio") or PAPER_RATIO), PAPER_RATIO)):
            return ""
        return next((fig for bps, fig in table.items() if math.isclose(bps, c.limit_bps, rel_tol=1e-9)), "")


def groups(summary: pd.DataFrame) -> list[Group]:
    """The configurations grouped by everything but the RTT, in configuration order."""
    out: dict[tuple[object, ...], list[Config]] = {}
    columns: tuple[str, ...] = ()
    for c in configurations(summary):
        columns = tuple(col for col in c.columns if col != "rtt")
        out.setdefault(tuple(c.value(col) for col in columns), []).append(c)
    return [Group(k, columns, tuple(v)) for k, v in out.items()]


def _limits(ax: plt.Axes, c: Config, factor: float, colour: str) -> None:
    g = c.rows
    ax.axhline(_num(g, "limit_before_bps").mean() * factor, color=colour, ls="--", lw=0.8)
    ax.axhline(_num(g, "limit_after_bps").mean() * factor, color=colour, ls=":", lw=1.0)


# ---- Figs. 2(a), 3: 1 s ------------------------------------------------------------------

def throughput_1s_figures(summary: pd.DataFrame, series: dict[str, pd.DataFrame], out: Path) -> list[Path]:
    """One figure per group with a 1 s capture series: mean over repetitions per bin."""
    figs = []
    for grp in groups(summary):
        factor, unit = rate_unit(grp.limit_bps)
        fig, ax = plt.subplots(figsize=(7.5, 4.2))
        drawn = 0
        for i, c in enumerate(grp.configs):
            keys = [point_key(row) for _, row in c.rows.iterrows()]
            parts = [bins(series[k], 1.0) for k in keys if k in series]
            parts = [numbered(p, 1.0) for p in parts if not p.empty]
            if not parts:
                continue
            per_bin = pd.concat(parts).groupby("bin").agg(t=("t_s", "mean"), bits=("bytes", "mean"))
            colour = f"C{i}"
            _step(ax, per_bin["t"].to_numpy(dtype=float), per_bin["bits"].to_numpy() * 8 * factor, 1.0,
                  color=colour, label=f"RTT {c.value('rtt')} ({len(parts)} runs)")
            _limits(ax, c, factor, colour)
            drawn += 1
        if not drawn:
            plt.close(fig)
            continue
        ax.axvline(0, color="k", lw=0.8)
        paper = grp.paper_figure(PAPER_FIG_1S)
        ax.set(xlabel="time relative to the move [s, paper]", ylabel=f"receiver-side throughput [{unit}]",
               ylim=(0, None), title=f"{paper or 'not in the paper'}: {grp.label}, 1 s bins (capture, mean over "
                                     "runs)\ndashed: alpha / RTT-before, dotted: alpha / RTT-after (the new limit)")
        ax.title.set_fontsize(8)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
        figs.append(_save(fig, out / f"throughput_1s_{slug(grp.label)}.png"))
    return figs


# ---- Fig. 2(b): one RTT --------------------------------------------------------------------

def _panels(n: int) -> tuple[plt.Figure, list[plt.Axes]]:
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def throughput_rtt_figures(summary: pd.DataFrame, series: dict[str, pd.DataFrame], out: Path) -> list[Path]:
    """One figure per group: one panel per RTT with the first repetition's one-RTT bins."""
    figs = []
    for grp in groups(summary):
        factor, unit = rate_unit(grp.limit_bps)
        drawable = []
        for c in grp.configs:
            row = first_run(c)
            s = series.get(point_key(row))
            rtt = float(row["rtt_before_s"])
            if s is not None and not bins(s, rtt).empty:
                drawable.append((c, row, s, rtt))
        if not drawable:
            continue
        fig, axes = _panels(len(drawable))
        for ax, (c, row, s, rtt) in zip(axes, drawable):
            lo, hi = WINDOW_RTTS
            for source, style in (("capture", dict(lw=1.4, color="C0")), ("socket", dict(lw=0.6, color="C1"))):
                b = bins(s, rtt, source)
                x = b["t_s"].to_numpy(dtype=float) / rtt
                keep = (x >= lo - 1) & (x <= hi)
                if keep.any():
                    _step(ax, x[keep], b["throughput_bps"].to_numpy(dtype=float)[keep] * factor, 1.0, label=source,
                          **style)
            _limits(ax, c, factor, "k")
            ax.axvline(0, color="k", lw=0.8)
            ax.set(xlim=WINDOW_RTTS, ylim=(0, None), xlabel="time relative to the move [RTTs before]",
                   ylabel=f"throughput [{unit}]",
                   title=f"RTT {c.value('rtt')}, one-RTT bins ({row['point']}, rep {row.get('rep', '?')})")
            ax.title.set_fontsize(9)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7, loc="lower right")
        paper = grp.paper_figure(PAPER_FIG_RTT)
        fig.suptitle(f"{paper or 'not in the paper'}: {grp.label}; dashed: alpha / RTT-before, dotted: "
                     "alpha / RTT-after; thin: the receiving socket", fontsize=9)
        figs.append(_save(fig, out / f"throughput_rtt_{slug(grp.label)}.png"))
    return figs


# ---- the sender's window -------------------------------------------------------------------

def window_trace(trace: pd.DataFrame, lo_s: float, hi_s: float) -> pd.DataFrame:
    """The rows of a changes-only trace that describe [lo_s, hi_s]: the last row before
    lo_s (moved to lo_s: its values hold there) and the rows inside, sorted by time."""
    t = trace.sort_values("t_s", kind="stable")
    before = t[t["t_s"] < lo_s].tail(1).assign(t_s=lo_s)
    inside = t[(t["t_s"] >= lo_s) & (t["t_s"] <= hi_s)]
    return pd.concat([before, inside], ignore_index=True)


def cwnd_figures(summary: pd.DataFrame, files: PointFiles, series: dict[str, pd.DataFrame],
                 out: Path) -> list[Path]:
    """One figure per configuration with a trace in its first repetition; the last
    value holds to the window's end or the end of the run's series, if earlier."""
    figs = []
    cols = ("t_s", "event", "cwnd", "ssthresh", "reordering", "ca_state")
    for c in configurations(summary):
        row = first_run(c)
        trace = files.csv(row, "cwnd.csv", usecols=cols)
        if trace is None or not {"t_s", "cwnd"} <= set(trace.columns):
            continue
        rtt = float(row["rtt_before_s"])
        end = min(WINDOW_RTTS[1] * rtt, series_end(series.get(point_key(row))))
        t = window_trace(trace, WINDOW_RTTS[0] * rtt, end)
        if t.empty:
            continue
        t = pd.concat([t, t.tail(1).assign(t_s=end, event="")], ignore_index=True)  # the last value holds
        x = t["t_s"].to_numpy(dtype=float) / rtt
        fig, ax = plt.subplots(figsize=(8, 4))
        ax.step(x, t["cwnd"], where="post", lw=1.0, label="cwnd")
        if "ssthresh" in t:
            ss = pd.to_numeric(t["ssthresh"], errors="coerce")
            finite = ss.where(ss < INFINITE_SSTHRESH)
            ax.step(x, finite, where="post", lw=0.8, ls="--", color="grey",
                    label="ssthresh" if finite.notna().any() else "ssthresh (infinite: never set)")
        if "ca_state" in t:
            rec = pd.to_numeric(t["ca_state"], errors="coerce").to_numpy() >= CA_RECOVERY
            if rec.any():
                ax.fill_between(x, 0, 1, where=rec, step="post", transform=ax.get_xaxis_transform(), color="red",
                                alpha=0.12, lw=0, label="recovery / loss state")
        if "event" in t:
            re_tx = t["event"].astype(str) == "retrans"
            if re_tx.any():
                ax.plot(x[re_tx.to_numpy()], t["cwnd"][re_tx], ".", color="red", ms=4,
                        label=f"retransmission ({int(re_tx.sum())})")
        mss = files.json(row, "e4.json").get("capture", {})
        mss = mss.get("mss") if isinstance(mss, dict) else None
        if mss and "buffer_bytes" in row and pd.notna(row["buffer_bytes"]):
            ax.axhline(float(row["buffer_bytes"]) / float(mss), color="k", ls=":", lw=0.8,
                       label=f"alpha / MSS = {float(row['buffer_bytes']) / float(mss):.0f}")
        ax.axvline(0, color="k", lw=0.8)
        ax.set(xlim=WINDOW_RTTS, ylim=(0, None), xlabel="time relative to the move [RTTs before]",
               ylabel="segments", title=f"Sender's window around the move: {c.label} ({row['point']}, "
                                        f"rep {row.get('rep', '?')})")
        ax.title.set_fontsize(8)
        if "reordering" in t:
            ax2 = ax.twinx()
            ax2.step(x, pd.to_numeric(t["reordering"], errors="coerce"), where="post", color="C2", lw=0.9)
            ax2.set_ylabel("reordering degree [segments]", color="C2")
            ax2.set_ylim(0, None)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="lower left")
        figs.append(_save(fig, out / f"cwnd_{slug(c.label)}.png"))
    return figs


# ---- duplicate ACKs ------------------------------------------------------------------------

def dupacks_per_rtt(dupacks: pd.DataFrame, rtt_s: float, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Counts per one-RTT bin k in [lo, hi) (bin k covers [k, k+1) RTTs after the move):
    (RFC 5681 duplicate ACKs, duplicate ACKs without the equal-window condition)."""
    k = np.floor(dupacks["t_s"].to_numpy(dtype=float) / rtt_s)
    strict = dupacks["rfc5681"].astype(str).str.lower().isin(("true", "1")).to_numpy()
    edges = np.arange(lo, hi + 1)
    return np.histogram(k[strict], edges)[0], np.histogram(k, edges)[0]


def dupack_figures(summary: pd.DataFrame, files: PointFiles, out: Path) -> list[Path]:
    """One figure per group: one panel per RTT, mean counts per bin over repetitions."""
    figs = []
    lo, hi = DUPACK_RTTS
    for grp in groups(summary):
        drawable = []
        for c in grp.configs:
            rtt = float(_num(c.rows, "rtt_before_s").iloc[0])
            counts = [dupacks_per_rtt(d, rtt, lo, hi) for _, r in moved(c.rows).iterrows()
                      if (d := files.csv(r, "dupacks.csv")) is not None and {"t_s", "rfc5681"} <= set(d.columns)]
            if counts:
                drawable.append((c, np.mean([s for s, _ in counts], axis=0), np.mean([a for _, a in counts], axis=0),
                                 len(counts)))
        if not drawable:
            continue
        fig, axes = _panels(len(drawable))
        k = np.arange(lo, hi)
        for ax, (c, strict, any_window, n) in zip(axes, drawable):
            ax.bar(k + 0.5, strict, width=0.9, label="RFC 5681 (equal window)")
            ax.step(np.append(k, hi), np.append(any_window, any_window[-1]), where="post", color="C3", lw=0.8,
                    label="any window")
            ax.axvline(0, color="k", lw=0.8)
            ax.set(xlabel="time relative to the move [RTTs before]", ylabel="duplicate ACKs per RTT",
                   title=f"RTT {c.value('rtt')} (mean of {n} runs)")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
        fig.suptitle(f"Duplicate ACKs around the move (capture at the receiver): {grp.label}", fontsize=9)
        figs.append(_save(fig, out / f"dupacks_{slug(grp.label)}.png"))
    return figs


def phase_figures(summary: pd.DataFrame, out: Path) -> list[Path]:
    """One figure per group: per run, the duplicate ACKs and late segments the move
    caused against where in the flow's RTT cycle it fell (``move_phase``, trigger time).
    A window-limited flow sends its window in trains, so the phase decides how much of a
    train the optical path overtakes. Nothing when no run has a phase."""
    figs = []
    if "move_phase" not in summary.columns:
        return figs
    for grp in groups(summary):
        drawable = [c for c in grp.configs if _num(moved(c.rows), "move_phase").notna().any()]
        if not drawable:
            continue
        fig, axes = _panels(len(drawable))
        for ax, c in zip(axes, drawable):
            g = moved(c.rows)
            phase = _num(g, "move_phase")
            ax.plot(phase, _num(g, "dupacks"), "o", label="duplicate ACKs (RFC 5681)")
            ax.plot(phase, _num(g, "ooo_segments"), "x", color="C3", label="late segments")
            ax.set(xlim=(0, 1), xlabel="phase of the move in the flow's RTT cycle [share of one RTT-before]",
                   ylabel="count after the move", title=f"RTT {c.value('rtt')} ({len(g)} runs)")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
        fig.suptitle(f"Reordering against the move's phase: {grp.label}", fontsize=9)
        figs.append(_save(fig, out / f"phase_{slug(grp.label)}.png"))
    return figs


# ---- tables --------------------------------------------------------------------------------

def _base(c: Config) -> dict[str, object]:
    g = moved(c.rows)
    return {**dict(zip(c.columns, c.key)), "runs": len(c.rows), "moved": len(g)}


def throughput_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per configuration (moved runs): the rates against the limits, the dip and the
    time to 95 % of the new limit (s and RTTs before), the first second after the move."""
    out = []
    for c in configurations(summary):
        g = moved(c.rows)
        row = _base(c)
        row.update({"limit before [bit/s]": _num(g, "limit_before_bps").mean(),
                    "limit after [bit/s]": _num(g, "limit_after_bps").mean()})
        _with_ci(row, "rate before / limit before", _num(g, "reached_before"))
        _with_ci(row, "rate after / limit after", _num(g, "reached_after"))
        _with_ci(row, "dip_depth", _num(g, "dip_depth"))
        t95 = _num(g, "time_to_95_s")
        row["time_to_95_s"] = t95.mean()
        _with_ci(row, "time to 95 % [RTTs before]", t95 / _num(g, "rtt_before_s"))
        row["reached 95 % in"] = f"{int(t95.notna().sum())} of {len(g)}"
        _with_ci(row, "first 1 s / rate before", first_second_ratio(g))
        out.append(row)
    return pd.DataFrame(out)


#: reordering and the sender's reaction: summary columns shown as means per run
REACTION = ("dupacks_any_window", "dupacks_before", "ooo_segments", "ooo_segments_before",
            "reorder_extent_segments", "ooo_packets_kernel", "reorder_detections", "reorder_detections_before",
            "reordering_max", "fast_recoveries", "undos", "retrans_segs", "retrans_segs_before", "rto_events",
            "cwnd_before", "cwnd_min_after", "ssthresh_min_after")


def reordering_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per configuration (moved runs): duplicate ACKs after the move with their 95 %
    interval, then means per run of the reordering counts and the sender's reaction."""
    out = []
    for c in configurations(summary):
        g = moved(c.rows)
        row = _base(c)
        _with_ci(row, "dupacks", _num(g, "dupacks"))
        row.update({col: _num(g, col).mean() for col in REACTION})
        out.append(row)
    return pd.DataFrame(out)


def artefacts_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per configuration: drops (none expected; memory_*: the endpoints' kernel short of
    TCP memory, nan for runs made before it was counted), what held the sender, how late
    the move was (s and RTTs), the dilation and the emulation's speed."""
    out = []
    for c in configurations(summary):
        g = c.rows
        late = _num(g, "move_lateness_s")
        tdf = sorted(set(_num(g, "tdf").dropna()))
        out.append({**_base(c), "router_drops": _num(g, "router_drops").sum(),
                    "capture_drops": _num(g, "capture_drops").sum(),
                    "memory_drops": _num(g, "memory_drops").sum(min_count=1),
                    "memory_pressures": _num(g, "memory_pressures").sum(min_count=1),
                    "rwnd_limited_share": _num(g, "rwnd_limited_share").mean(),
                    "sndbuf_limited_share": _num(g, "sndbuf_limited_share").mean(),
                    "move_lateness_s mean": late.mean(), "move_lateness_s max": late.max(),
                    "move lateness max [RTTs before]": (late / _num(g, "rtt_before_s")).max(),
                    "tdf": ", ".join(f"{v:g}" for v in tdf), "paper_s_per_wall_s": _num(g, "paper_s_per_wall_s").mean()})
    return pd.DataFrame(out)


#: the paper's statements beside our numbers: (statement, the paper's words, how we
#: measure it, the per-run values, unit)
STATEMENTS = (
    ("stable at the limit before the move", "'a stable rate equal to 1 Gbps before the flow transition'",
     "rate before / limit before", lambda g: _num(g, "reached_before"), ""),
    ("no reduction at 1 s granularity", "'no throughput reduction is observed' (Figs. 2(a), 3)",
     "rate over [0, 1 s) after the move / rate before", first_second_ratio, ""),
    ("a reduction just after the move at one-RTT granularity", "'flows experience a reduction ... just after the "
     "transition' (Fig. 2(b))", "dip depth: 1 - lowest one-RTT bin / rate before", lambda g: _num(g, "dip_depth"), ""),
    ("a quick rise to the new limit", "'quickly recover'; 'throughput increases quickly'",
     "time to 95 % of alpha / RTT-after", lambda g: _num(g, "time_to_95_s") / _num(g, "rtt_before_s"), "RTTs"),
    ("the new theoretical value alpha / RTT-after", "1.667 Gbps (x 1.667, Fig. 2(a))",
     "rate at the end of the run / rate before", lambda g: _num(g, "rate_after_bps") / _num(g, "rate_before_bps"),
     "x"),
)


def _paper_row(statement: str, paper: str, where: str, measure: str, values: Iterable[float], unit: str,
               note: str = "") -> dict[str, object]:
    mean, lo, hi, n = _ci(values)
    return {"statement": statement, "paper": paper, "where": where, "ours": mean, "lo95": lo, "hi95": hi,
            "runs": n, "unit": unit, "measured as": measure, "note": note}


def paper_table(summary: pd.DataFrame, files: PointFiles) -> pd.DataFrame:
    """The paper's duplicate ACK count and qualitative statements beside this run's
    numbers (paper's set-up only), and the note on the case it omits when it applies."""
    out = []
    configs = paper_configurations(summary)
    bps, rtt = PAPER_DUPACKS_AT
    at = [c for c in configs if math.isclose(c.limit_bps, bps, rel_tol=1e-9) and math.isclose(c.rtt_s, rtt)]
    for c in at:
        g = moved(c.rows)
        out.append(_paper_row("duplicate ACKs caused by the move", f"{PAPER_DUPACKS} (10 ms, 1 Gb/s)", c.label,
                              "duplicate ACKs after the move (capture, RFC 5681)", _num(g, "dupacks"), "ACKs",
                              note=_dupack_note(g, files)))
    if not at:
        out.append(_paper_row("duplicate ACKs caused by the move", f"{PAPER_DUPACKS} (10 ms, 1 Gb/s)", "",
                              "duplicate ACKs after the move (capture, RFC 5681)", [], "ACKs",
                              note=f"not measured: needs limiter = {PAPER_LIMITER}, cca = {PAPER_CCA} at 1 Gbit/s, "
                                   "RTT 10 ms"))
    for statement, paper, measure, values, unit in STATEMENTS:
        for c in configs:
            out.append(_paper_row(statement, paper, c.label, measure, values(moved(c.rows)), unit))
    note = omitted_note(summary)
    if note:
        out.append(_paper_row("10 Gb/s at RTT 1000 ms", "left out of Fig. 3(b): 'the TCP throughput does not reach "
                              "the rate selected for comparison (10Gbps) before the transition'", "", "", [], "",
                              note=note))
    cols = ["statement", "paper", "where", "ours", "lo95", "hi95", "runs", "unit", "measured as", "note"]
    return pd.DataFrame(out, columns=cols)


def _dupack_note(g: pd.DataFrame, files: PointFiles) -> str:
    """The other counts beside the RFC 5681 one, and the segments the move makes overtake."""
    bits = [f"without the equal-window condition: {_num(g, 'dupacks_any_window').mean():.4g}",
            f"before the move: {_num(g, 'dupacks_before').mean():.4g}"]
    mss = [m.get("mss") for _, r in g.iterrows() if isinstance(m := files.json(r, "e4.json").get("capture"), dict)]
    mss = [float(m) for m in mss if m]
    if mss:
        overtaken = ((1 - _num(g, "rtt_after_s") / _num(g, "rtt_before_s")) * _num(g, "buffer_bytes")).mean() / \
            float(np.mean(mss))
        bits.append(f"segments sent during the RTT difference (1 - RTT after / before) x alpha / MSS = {overtaken:.4g}: "
                    "about one duplicate ACK each")
    return "; ".join(bits)


def omitted_note(summary: pd.DataFrame) -> str:
    """Why 10 Gbit/s at 1000 ms is absent, when 10 Gbit/s was measured at another RTT
    but not at 1000 ms; '' otherwise."""
    bps, rtt = OMITTED
    at_rate = [c for c in configurations(summary) if math.isclose(c.limit_bps, bps, rel_tol=1e-9)]
    if not at_rate or any(math.isclose(c.rtt_s, rtt) for c in at_rate):
        return ""
    alpha = bps * rtt / 8
    return (f"not run: alpha = 10 Gbit/s x 1 s = {alpha / 1e9:g} GB, above TCP's largest window "
            f"65535 x 2^14 = {MAX_TCP_WINDOW} B (RFC 7323, section 2.3: the window cannot be that large, so no "
            "TCP reaches 10 Gb/s at that RTT) and above what the guest holds three times over (netem, sender, "
            "receiver); the testbed skips the point and its status.json says why (docs/e4.md). The paper's flow did not "
            "reach 10 Gb/s either.")


# ---- entry ---------------------------------------------------------------------------------

def analyse(summary: pd.DataFrame, config: dict, out: Path) -> tuple[list[Path], list[tuple[str, pd.DataFrame]]]:
    """Draw the throughput (1 s and one RTT), cwnd and duplicate-ACK figures into ``out``
    (the report folder; the results folder is ``out.parent``); return them with the
    tables, the findings table last (titled ``findings.TITLE``, also ``out/findings.csv``
    and ``out/findings.md``). A missing per-point file leaves its figures without that
    run and is listed in the table "Per-point files missing"; never raises for one."""
    files = PointFiles(out.parent)
    series = load_series(files, summary)
    s = with_first_second(summary, series)
    figs = throughput_1s_figures(s, series, out)
    figs += throughput_rtt_figures(s, series, out)
    figs += cwnd_figures(s, files, series, out)
    figs += dupack_figures(s, files, out)
    figs += phase_figures(s, out)
    tables: list[tuple[str, pd.DataFrame]] = [
        ("The paper's numbers and statements beside this run's (buffer-limited CUBIC; means with 95 % intervals "
         "over the runs that moved)", paper_table(s, files)),
        ("Throughput around the move per configuration (runs that moved; rates from the capture at the receiver; "
         "95 % intervals)", throughput_table(s)),
        ("Reordering caused by the move and the sender's reaction per configuration (duplicate ACKs with 95 % "
         "interval; the rest means per run)", reordering_table(s)),
        ("Artefacts per configuration: drops, what held the sender, move lateness, dilation, emulation speed",
         artefacts_table(s)),
    ]
    missing = files.table()
    if not missing.empty:
        tables.append((f"Per-point files missing or unreadable ({len(missing)}): their figures lack these runs",
                       missing))
    found = evaluate(s)
    table = findings.write(found, out, preamble="E4: only buffer-limited CUBIC (the paper's set-up) is judged, "
                                                "one comparison per configuration. Rules: analysis/e4_findings.py.")
    tables.append((findings.TITLE, table))
    return figs, tables

