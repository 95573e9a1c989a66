"""E4's findings: the flow-move paper's claims (spec "What the paper reports", paper
section 3 and the conclusions) judged on a run's repetitions with 95 % intervals
(``analysis.findings``).

Input: summary.csv of ``e4-flowmove`` (one row per run of a configuration; the
metrics of ``testbed.families.e4_flowmove``), plus one column that
``analysis.e4`` adds from each point's ``throughput_series.csv``: :data:`FIRST_SECOND`,
the receiver-side rate (capture) over [0, 1 s) after the move. A configuration is
(limit_rate, rtt, rtt_ratio, limiter, trigger, cca), and any other parameter that
varies in the run (:data:`EXTRA_PARAMS`); its repetitions are its rows.

Only the paper's set-up is judged: ``limiter = buffer`` and ``cca = cubic``. Every
finding is the conjunction (``all_of``) of one sub-finding per such configuration;
runs in which the flow was not moved (``moved = 0``: the threshold was never crossed)
and runs in which the kernel ran short of TCP memory (``memory_pressures`` or
``memory_drops`` > 0: an emulation artefact, testbed.tcpmem; ``findings.memory_clean``) are left out and named in
the side column. Rules, fixed before any E4 run:

- F0: before the move the flow runs at its buffer limit (paper: "a stable rate equal to
  1 Gbps before the flow transition"): reached_before = rate_before / limit_before within
  1 +- MARGIN (equivalence). A precondition of the others: a flow not at its limit is
  not the paper's case.
- F1: a dip right after the move at the one-RTT-before granularity (paper Fig. 2(b):
  "flows experience a reduction on the throughput just after the transition"):
  dip_depth > :data:`DIP_MIN` (5 %: the lowest one-RTT bin within the family's
  DIP_RTTS = 10 RTTs after the move is more than 5 % below rate_before).
- F2: a quick rise to the new limit ("quickly recover", "quickly reacts"): the family's
  time_to_95_s (to the end of the first of three consecutive one-RTT-after bins at >= 95 % of
  limit_after: one bin alone can be high while both paths deliver), in RTTs before the move,
  < :data:`FEW_RTTS` (10 RTTs: "a few"). A run that never reached it has no time_to_95
  (NaN); it is counted as :data:`CENSOR_RTTS` RTTs, a lower bound on its true time (the
  family refuses runs shorter than STEADY_RTTS + DIP_RTTS = 20 RTTs after the move), so
  such runs pull the verdict towards "does not hold" and never towards "holds" by being
  left out.
- F3: no lasting reduction despite many duplicate ACKs (paper: 1372 at 10 ms, 1 Gb/s):
  both reached_after = rate_after / limit_after > 1 - MARGIN (non-inferiority against the
  paper's "new theoretical value" alpha / RTT-after), and dupacks (after the move, RFC
  5681 with the equal-window condition) > :data:`MANY_DUPACKS`. The bound for "many":
  more than ten times the fast-retransmit threshold of 3 duplicate ACKs (RFC 5681), so a
  TCP without reordering tolerance would have retransmitted and halved its window more
  than once. Not 100: the move makes about (1 - rtt_ratio) x alpha / MSS segments overtake
  (those sent during the 0.4 RTT by which the optical path is shorter), 35 at 100 Mb/s,
  10 ms, so a bound of 100 would fail there by construction.
- F4: no reduction at the coarse 1 s granularity (paper Fig. 2(a): "no throughput
  reduction is observed"): the receiver-side rate over [0, 1 s) after the move /
  rate_before > 1 - MARGIN (non-inferiority), per run from its capture series (the
  finest bins covering that second, the two it cuts pro rata: ``analysis.e4``).

Each finding is "not measured" (saying which points are needed) when the run has no
such configuration or lacks the column; a sub-finding whose values are all missing
(e.g. ``capture = false``) is "not measured" and says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from analysis.findings import MARGIN, Finding, against, all_of, memory_clean, not_measured
from testbed.units import Dim, Quantity

#: the parameters that make a configuration (the paper's and the family's bonus axes)
CONFIG_PARAMS = ("limit_rate", "rtt", "rtt_ratio", "limiter", "trigger", "cca")
#: other parameters: part of a configuration only when they vary within the run
EXTRA_PARAMS = ("link_rate", "queue", "threshold", "emulated_rate", "before", "after", "trace_cwnd", "capture")
#: the paper's set-up: the buffers limit the flow, CUBIC sends
PAPER_LIMITER, PAPER_CCA = "buffer", "cubic"
#: column added by analysis.e4: receiver-side rate over [0, 1 s) after the move (bit/s)
FIRST_SECOND = "rate_first_second_bps"
#: F1: a dip is a one-RTT bin more than 5 % below the rate before the move
DIP_MIN = 0.05
#: F2: "a few RTTs": fewer than 10 RTTs before the move
FEW_RTTS = 10.0
#: F2: a run that never reached 95 % of limit_after counts as this many RTTs (the
#: shortest run the family accepts after the move: STEADY_RTTS + DIP_RTTS)
CENSOR_RTTS = 20.0
#: F3: RFC 5681's fast-retransmit threshold and "many" = ten times it
DUPTHRESH = 3
MANY_DUPACKS = 10 * DUPTHRESH
NEEDED = f"limiter = {PAPER_LIMITER}, cca = {PAPER_CCA} runs (the paper's set-up)"
EQUIV = f"equivalence, +-{MARGIN * 100:g} % margin"
NONINF = f"non-inferiority, {MARGIN * 100:g} % margin"


# ---- selection -------------------------------------------------------------------------

@dataclass(frozen=True)
class Config:
    """One configuration of a run: its parameter values (as in summary.csv), their SI
    values for sorting, a label in words and its rows (repetitions)."""

    key: tuple[object, ...]
    columns: tuple[str, ...]
    label: str
    rows: pd.DataFrame

    def value(self, column: str) -> object:
        """The configuration's value of ``column`` (None when it is not a key column)."""
        return self.key[self.columns.index(column)] if column in self.columns else None

    @property
    def limit_bps(self) -> float:
        """limit_rate in bit/s (nan when unreadable)."""
        return _si(self.value("limit_rate"), Dim.RATE)

    @property
    def rtt_s(self) -> float:
        """RTT before the move in s (nan when unreadable)."""
        return _si(self.value("rtt"), Dim.TIME)

    def is_paper(self) -> bool:
        """Whether it is the paper's set-up (buffer-limited CUBIC)."""
        return self.value("limiter") == PAPER_LIMITER and self.value("cca") == PAPER_CCA


def _si(text: object, dim: Dim) -> float:
    """The SI value of a quantity text of summary.csv (``"1 Gbit/s"``); nan if unreadable."""
    try:
        return Quantity.parse(str(text), dim).si
    except ValueError:
        return math.nan


def config_columns(s: pd.DataFrame) -> list[str]:
    """The columns that make a configuration in ``s``: :data:`CONFIG_PARAMS` present and
    the :data:`EXTRA_PARAMS` whose values vary."""
    extra = [c for c in EXTRA_PARAMS if c in s and s[c].astype(str).nunique() > 1]
    return [c for c in CONFIG_PARAMS if c in s] + extra


def label(columns: list[str] | tuple[str, ...], key: tuple[object, ...], skip: tuple[str, ...] = ()) -> str:
    """``"1 Gbit/s, RTT 10 ms x 0.6, buffer, cubic, trigger time"`` (``skip``: columns
    left out, e.g. the ones a figure's title already names)."""
    v = dict(zip(columns, key))
    parts = []
    if "limit_rate" in v and "limit_rate" not in skip:
        parts.append(str(v["limit_rate"]))
    if "rtt" in v and "rtt" not in skip:
        parts.append(f"RTT {v['rtt']}" + (f" x {v['rtt_ratio']:g}" if isinstance(v.get("rtt_ratio"), float) else ""))
    elif "rtt_ratio" in v and "rtt_ratio" not in skip:
        parts.append(f"RTT x {v['rtt_ratio']}")
    for c in ("limiter", "cca"):
        if c in v and c not in skip:
            parts.append(str(v[c]))
    if "trigger" in v and "trigger" not in skip:
        parts.append(f"trigger {v['trigger']}")
    parts += [f"{c} {v[c]}" for c in columns if c not in CONFIG_PARAMS and c not in skip]
    return ", ".join(parts)


def configurations(s: pd.DataFrame) -> list[Config]:
    """Every configuration of ``s``, ordered by limit rate, RTT, then the other values."""
    cols = config_columns(s)
    if not cols or s.empty:
        return []
    out = []
    for key, g in s.groupby(cols, dropna=False, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        out.append(Config(key, tuple(cols), label(cols, key), g))

    def order(c: Config) -> tuple[float, float, str]:
        return (c.limit_bps, c.rtt_s, c.label)

    return sorted(out, key=order)


def paper_configurations(s: pd.DataFrame) -> list[Config]:
    """The configurations of the paper's set-up (:meth:`Config.is_paper`)."""
    return [c for c in configurations(s) if c.is_paper()]


def moved(g: pd.DataFrame) -> pd.DataFrame:
    """The runs of ``g`` in which the flow was moved (all of them without a ``moved`` column)."""
    if "moved" not in g:
        return g
    return g[pd.to_numeric(g["moved"], errors="coerce") == 1]


def rtts_to_95(g: pd.DataFrame) -> pd.Series:
    """Per run: time_to_95_s / rtt_before_s; a run with a capture (rate_after_bps known)
    that never reached 95 % counts as :data:`CENSOR_RTTS`; nan without a capture."""
    t = pd.to_numeric(g["time_to_95_s"], errors="coerce") / pd.to_numeric(g["rtt_before_s"], errors="coerce")
    captured = pd.to_numeric(g["rate_after_bps"], errors="coerce").notna()
    return t.where(t.notna() | ~captured, CENSOR_RTTS)


def first_second_ratio(g: pd.DataFrame) -> pd.Series:
    """Per run: the rate over [0, 1 s) after the move / rate_before (nan if either is missing)."""
    if FIRST_SECOND not in g:
        return pd.Series(math.nan, index=g.index)
    return pd.to_numeric(g[FIRST_SECOND], errors="coerce") / pd.to_numeric(g["rate_before_bps"], errors="coerce")


def _side(all_runs: pd.DataFrame, used: pd.DataFrame) -> str:
    """What a verdict does not use but a reader wants beside it: runs not moved, the
    sender's reaction, drops that would mean the buffer was not the only limit."""
    bits = []
    was_moved = moved(all_runs)
    if len(was_moved) < len(all_runs):
        bits.append(f"{len(all_runs) - len(was_moved)} of {len(all_runs)} runs not moved (left out)")
    if len(used) < len(was_moved):
        bits.append(f"{len(was_moved) - len(used)} of {len(all_runs)} runs short of TCP memory (pressure or "
                    "drops; left out: an emulation artefact)")

    def total(col: str) -> float:
        return float(pd.to_numeric(used[col], errors="coerce").sum()) if col in used else math.nan

    if len(used):
        bits.append(f"per run: fast recoveries {total('fast_recoveries') / len(used):.3g}, undos "
                    f"{total('undos') / len(used):.3g}, retransmitted segments {total('retrans_segs') / len(used):.3g}")
        for col, what in (("router_drops", "packets dropped by qdiscs"), ("capture_drops", "capture drops"),
                          ("memory_drops", "segments the receiver dropped for want of TCP memory (an emulation "
                           "artefact)")):
            if total(col) > 0:
                bits.append(f"{what}: {total(col):.0f} in all")
    return "; ".join(bits)


# ---- the findings ----------------------------------------------------------------------

#: the claims: id -> (claim, the paper's words)
CLAIMS = {
    "F0": ("before the move the flow runs at its buffer limit alpha / RTT-before",
           "'a stable rate equal to 1 Gbps before the flow transition' (Fig. 2(a))"),
    "F1": (f"a dip right after the move at one-RTT granularity (lowest bin > {DIP_MIN * 100:g} % below the "
           "rate before)", "'flows experience a reduction on the throughput just after the transition' (Fig. 2(b))"),
    "F2": (f"then a quick rise to 95 % of the new limit alpha / RTT-after within a few ({FEW_RTTS:g}) RTTs",
           "'they quickly recover from that'; 'CUBIC quickly reacts to the new network conditions'"),
    "F3": (f"no lasting reduction (rate at the end >= {(1 - MARGIN) * 100:g} % of alpha / RTT-after) despite "
           f"many duplicate ACKs (> {MANY_DUPACKS})",
           "1372 duplicate ACKs at 10 ms, 1 Gb/s; 'does not suffer from the massive reordering'; new value "
           "1.667 x (Fig. 2)"),
    "F4": (f"no reduction at 1 s granularity: the first second after the move >= {(1 - MARGIN) * 100:g} % of "
           "the rate before", "'after the transition (t = 0 s) ... no throughput reduction is observed' (Fig. 2(a), "
           "Fig. 3)"),
}


def evaluate(s: pd.DataFrame) -> list[Finding]:
    """F0-F4 on the summary ``s`` (module docstring), in that order."""
    configs = paper_configurations(s) if not s.empty else []
    return [_per_config(fid, configs, rule) for fid, rule in _RULES.items()]


def _f0(fid: str, c: Config, g: pd.DataFrame, side: str) -> list[Finding]:
    return [_against(fid, c, g, "reached_before", "rate before / limit before", side,
                     low=1 - MARGIN, high=1 + MARGIN, margin_note=EQUIV)]


def _f1(fid: str, c: Config, g: pd.DataFrame, side: str) -> list[Finding]:
    return [_against(fid, c, g, "dip_depth", "dip depth (1 - lowest one-RTT bin / rate before)", side,
                     low=DIP_MIN, margin_note=f"a dip of more than {DIP_MIN * 100:g} %")]


def _f2(fid: str, c: Config, g: pd.DataFrame, side: str) -> list[Finding]:
    return [_against(fid, c, g.assign(_rtts=rtts_to_95(g)), "_rtts", "time to 95 % of limit after", side,
                     high=FEW_RTTS, unit="RTT before",
                     margin_note=f"'a few RTTs'; never reached = {CENSOR_RTTS:g} RTTs, a lower bound")]


def _f3(fid: str, c: Config, g: pd.DataFrame, side: str) -> list[Finding]:
    return [_against(fid, c, g, "reached_after", "rate at the end / (alpha / RTT-after)", side,
                     low=1 - MARGIN, margin_note=NONINF),
            _against(fid, c, g, "dupacks", "duplicate ACKs after the move", side, low=MANY_DUPACKS,
                     unit="ACKs", margin_note=f"'many': over 10 x the fast-retransmit threshold of {DUPTHRESH}")]


def _f4(fid: str, c: Config, g: pd.DataFrame, side: str) -> list[Finding]:
    return [_against(fid, c, g.assign(_first=first_second_ratio(g)), "_first",
                     "rate over [0, 1 s) after the move / rate before", side, low=1 - MARGIN, margin_note=NONINF)]


_RULES: dict[str, Callable[[str, Config, pd.DataFrame, str], list[Finding]]] = {
    "F0": _f0, "F1": _f1, "F2": _f2, "F3": _f3, "F4": _f4}


def _per_config(fid: str, configs: list[Config],
                rule: Callable[[str, Config, pd.DataFrame, str], list[Finding]]) -> Finding:
    """The claim ``fid`` as the conjunction of ``rule`` over every configuration."""
    claim, paper = CLAIMS[fid]
    parts: list[Finding] = []
    for c in configs:
        g = memory_clean(moved(c.rows))
        if g.empty:
            parts.append(not_measured(fid, claim, f"a run in which the flow moved, without memory artefacts, at "
                                                  f"{c.label} (none of {len(c.rows)})", paper=paper))
            continue
        parts += rule(fid, c, g, _side(c.rows, g))
    needed = NEEDED + (" with per-point throughput series (capture)" if fid == "F4" else "")
    return all_of(fid, claim, parts, needed, paper=paper)


def _against(fid: str, c: Config, g: pd.DataFrame, column: str, what: str, side: str, *,
             low: float | None = None, high: float | None = None, unit: str = "", margin_note: str = "") -> Finding:
    """One configuration's sub-finding: the mean of ``column`` over its runs in
    ``low < . < high``; not measured when the column is absent or all nan."""
    claim, paper = CLAIMS[fid]
    values = pd.to_numeric(g[column], errors="coerce") if column in g else pd.Series(dtype=float)
    if values.isna().all():
        source = "throughput_series.csv with capture bins covering [0, 1 s) after the move" if column == "_first" else column
        return not_measured(fid, claim, f"{source} at {c.label} (missing in its {len(g)} runs; capture off?)",
                            paper=paper)
    where = label(c.columns, c.key, skip=("limiter", "cca"))
    return against(fid, claim, (what, values), low=low, high=high, unit=unit, paper=paper, where=where,
                   margin_note=margin_note, side=side)
