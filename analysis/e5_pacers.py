"""How often XCP's edge pacers held traffic back in E5's measured window.

An XCP macroflow's pacer (docs/xcp-edge.md) spaces its packets at the rate XCP grants,
R; it changes the traffic only when the macroflow offers at least R. A macroflow that
offers less (a few window-limited Reno flows) passes at most at R, which may be far above
what it sends, so its bursts reach the core as standard TCP's would. This module reads,
per XCP run, what each data macroflow sent in each control interval of the window
against its grant, so a reader can see whether XCP pacing paced at all (docs/e5.md, "How
often XCP's pacers bind"). An observation beside the findings, not one of them.

Per run, from the point's folder:

- ``xcp_rates.csv``: one row per probe; the probe of interval k carries ``rate_bps`` = R,
  the grant in force when it was sent (at the start of interval k, paper bit/s), and
  ``measured_bps`` = u, what the pacer released for the macroflow in interval k - 1
  (paper bit/s); ``kind`` is ``data`` or ``ack`` (ACK macroflows are left out: they are
  always far below their grant);
- ``xcp.json``: the agent's epoch E (``epoch_ns``, the guest's CLOCK_MONOTONIC) and
  the control interval in emulation (``interval_ns``);
- ``traffic/stats-h*.json``: the traffic's start ``t0`` (the same clock, seconds).

Interval k - 1 spans [E + (k - 1) I, E + k I); a row counts when that span lies inside
the measured window, [t0 + (duration - window) D, t0 + duration D] (D: the run's time
dilation, ``tdf`` of xcp.json). A macroflow-interval is active when u > 0 and *held* when
u >= :data:`HELD` x R (the grant, not the senders, was then the limit, or close to it;
the pacer's own backlog is not recorded, so this is read from the rates alone). Per run: the share of
the window's data bytes sent in held macroflow-intervals, and the median u / R over the
active ones.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis.e5_findings import BUFFER_COL, seconds
from analysis.report import source_folders
from analysis.stats import mean_ci

#: a macroflow-interval is held by its pacer when it sent at least this fraction of its grant
HELD = 0.9
#: XCP parameters a point may vary (an ``e5-xcp-params`` sweep): each value is a point of its own
SWEPT = ("xcp_alpha", "xcp_gamma")
#: pacings whose runs have XCP pacers
XCP_PACINGS = ("xcp", "xcp-ack")


@dataclass(frozen=True)
class Binding:
    """One run's window, read from its point folder: ``intervals`` control intervals
    wholly in the window, ``active`` data macroflow-intervals that sent something, the
    share of the window's data bytes sent in held ones (``held_bytes``, 0..1), the share
    of active ones held (``held_intervals``) and the median sent / granted
    (``median_use``) over the active ones. NaN where nothing was active."""

    intervals: int
    active: int
    held_bytes: float
    held_intervals: float
    median_use: float


def read_run(folder: Path, duration_s: float, window_s: float) -> Binding:
    """The pacers' binding in one XCP run's window (paper seconds ``duration_s`` and
    ``window_s``, the run's parameters). Raises OSError when a file is missing or
    unreadable, ValueError (also KeyError) when a file lacks what it should have."""
    meta = json.loads((folder / "xcp.json").read_text())
    epoch_ns, interval_ns, tdf = int(meta["epoch_ns"]), int(meta["interval_ns"]), float(meta["tdf"])
    stats = sorted((folder / "traffic").glob("stats-h*.json"))
    if not stats:
        raise FileNotFoundError(f"{folder / 'traffic'}: no stats-h*.json (the traffic's start)")
    t0_ns = float(json.loads(stats[0].read_text())["t0"]) * 1e9
    lo = t0_ns + (duration_s - window_s) * tdf * 1e9
    hi = t0_ns + duration_s * tdf * 1e9
    rates = pd.read_csv(folder / "xcp_rates.csv", usecols=["interval", "kind", "rate_bps", "measured_bps"])
    starts = epoch_ns + (rates["interval"] - 1) * interval_ns     # the span u was measured over
    inside = (starts >= lo) & (starts + interval_ns <= hi)
    data = rates[inside & (rates["kind"] == "data")]
    active = data[data["measured_bps"] > 0]
    use = active["measured_bps"] / active["rate_bps"]
    held = use >= HELD
    sent = active["measured_bps"].sum()
    return Binding(intervals=int(rates.loc[inside, "interval"].nunique()), active=len(active),
                   held_bytes=float(active.loc[held, "measured_bps"].sum() / sent) if sent > 0 else math.nan,
                   held_intervals=float(held.mean()) if len(active) else math.nan,
                   median_use=float(use.median()) if len(active) else math.nan)


def _fmt(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"


def _mean_range(values: list[float], scale: float = 1.0) -> str:
    """'mean [min, max]' of the finite values x scale; '' when none is finite."""
    finite = [v * scale for v in values if not math.isnan(v)]
    if not finite:
        return ""
    return f"{_fmt(sum(finite) / len(finite))} [{_fmt(min(finite))}, {_fmt(max(finite))}]"


def table(s: pd.DataFrame, results: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per XCP point of ``s`` (prepared rows: ``arch``, ``pacing``, :data:`BUFFER_COL`,
    ``point``, ``duration``, ``window``, ``goodput_per_flow_Bps``; a ``run`` column in a
    combined report; a point is also its :data:`SWEPT` values), over its runs: mean
    [min, max] of the held share of data bytes (%), of the held share of active
    macroflow-intervals (%) and of the median sent / granted; the mean goodput beside them
    (mean and the half-width of its 95 % interval). Second, the runs that could not be
    read (run, point, why). ``results``: the results folder (a combined report's, whose
    ``sources.json`` names the runs' folders). Never raises for a run's files; both frames
    are empty without XCP rows."""
    xcp = s[s["pacing"].isin(XCP_PACINGS)] if "pacing" in s else s.iloc[:0]
    sources = source_folders(results)
    out, unread = [], []
    keys = ["arch", "pacing", BUFFER_COL] + [c for c in SWEPT if c in xcp]
    for key, g in xcp.groupby(keys, sort=True, dropna=False):
        arch, pacing, b = key[:3]
        runs: list[Binding] = []
        for _, r in g.iterrows():
            run = str(r.get("run", "")) if "run" in g else ""
            folder = sources.get(run, results) / "points" / str(r["point"])
            try:
                runs.append(read_run(folder, seconds(r["duration"], "duration"), seconds(r["window"], "window")))
            except (OSError, ValueError, KeyError) as exc:
                unread.append({"run": run, "point": r["point"], "why": f"{exc.__class__.__name__}: {exc}"})
        if not runs:
            continue
        gp, half = mean_ci(list(pd.to_numeric(g["goodput_per_flow_Bps"], errors="coerce").dropna() * 1e-3))
        out.append({"arch": arch, "pacing": pacing, "buffer": str(g["buffer"].iloc[0]), "B [bytes]": b,
                    **dict(zip(keys[3:], key[3:])),
                    "runs read": len(runs), "intervals in window": _mean_range([r.intervals for r in runs]),
                    "active data macroflow-intervals": _mean_range([r.active for r in runs]),
                    f"bytes held (sent at >= {HELD:g} x grant) [%]": _mean_range([r.held_bytes for r in runs], 100),
                    "active intervals held [%]": _mean_range([r.held_intervals for r in runs], 100),
                    "median sent / granted": _mean_range([r.median_use for r in runs]),
                    "goodput per flow [kB/s]": gp, "goodput +-95 % [kB/s]": half})
    return pd.DataFrame(out), pd.DataFrame(unread, columns=["run", "point", "why"])
