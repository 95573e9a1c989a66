"""E5's findings: the optical-RAM paper's claims (spec "What the paper reports"; paper
III-B-2, III-C-2 and the conclusions) judged on a run's repetitions with 95 % intervals
(``analysis.findings``).

Input: summary.csv of ``e5-optram`` (one row per run; the parameters ``arch``,
``pacing``, ``buffer`` = B, the optical RAM per link as text such as ``"1.5 kB"``, and
the metrics ``goodput_per_flow_Bps`` (average flow goodput, B/s, paper units) and
``core_drop_rate``). A point is one (arch, pacing, B); its repetitions are its rows.
1 MSS = :data:`MSS_B` = 1500 B (the paper's "MSS 1500 Bytes", an IP datagram; the
family's ``ob:1500`` holds one full packet). Selection helpers (:func:`prepare`,
:func:`rows`, :func:`buffers`) live here so that ``analysis.e5`` and this module
select the same rows.

Rules, pre-registered before any E5 run (the tolerances come from the paper's words,
not from data; a claim over several conditions is the conjunction ``findings.all_of``:
holds if every part holds, does not hold if one part does not, inconclusive otherwise,
not measured without any part). "Not measured" is this project's verdict for a run
that lacks the points (the reason says which: ``ib not run``, ``xcp not run``); it is
never "holds".

- **F1** shared buffering beats the others at equal total buffer (III-B-2: "shared
  buffering yields a much higher goodput than the others even though its per node
  buffer capacity is the same as that for input and output buffering"; "shared
  buffering has the highest goodput for all simulated architectures"). For every
  pacing run and every B in the paper's 1-6 MSS range (1500 B <= B <= 9000 B: the
  paper says IB, OB and WCSB are "almost the same" below 1 MSS and above about 6 MSS,
  so SB's advantage is claimed in between), goodput(SB) / goodput(OB) > 1 and, when
  ``ib`` was run, goodput(SB) / goodput(IB) > 1: Fieller's 95 % interval of the ratio
  of mean goodputs (Welch-Satterthwaite degrees of freedom) entirely above 1. A part
  does not hold when its interval lies entirely at or below 1 (the reverse is
  significant); inconclusive when it straddles 1 or a group has fewer than 2
  repetitions. WCSB is not a part: its node holds B, not (ports) x B, so it is not
  "equal total buffer". Without ``ib`` rows F1 compares SB with OB only.
- **F2** with paced traffic input buffering beats output buffering (III-B-2: "when the
  link buffer is between 1-6 MSS, input buffering yields higher goodput"; conclusion:
  "When the traffic was paced, input buffering yielded higher TCP goodput than output
  buffering"). For every paced sender (``pacing`` other than ``none``) and every B in
  1500 .. 9000 B: goodput(IB) / goodput(OB) > 1, Fieller's interval as F1. Until
  summary.csv has ``arch = ib`` rows F2 is "not measured", reason ``ib not run``.
- **F3** WCSB is close to OB (III-B-2: "very close to output buffering", "almost the
  same goodput as output buffering with a much smaller buffer capacity per node";
  conclusion, for NSFNET). For every pacing and every B > 0 run:
  goodput(WCSB) / goodput(OB) within 1 +- :data:`CLOSE` = 10 % (equivalence: Fieller's
  95 % interval inside (0.9, 1.1), a two one-sided test at 2.5 % per side). The
  tolerance: "almost the same" and "very close" are the paper's strongest words of
  equality, for which this project uses its equivalence margin
  ``analysis.findings.MARGIN`` (E2 used a wider 25 % only for the weaker "roughly the
  same"). Does not hold when the interval lies entirely outside (0.9, 1.1).
- **F4a** standard TCP needs over 10x more buffering than paced schemes (III-B-2,
  Fig. 5d: "More than 10-fold buffering is necessary to achieve utilization that is
  as high as that of paced architectures"). Per architecture and paced sender p run
  with standard TCP (``pacing = none``), on the B > 0 grid: the level
  L = :data:`REACH` x the highest mean goodput of p over the sweep (REACH = 90 % =
  1 - MARGIN: "as high as", read with the project's equality margin); B_reach(x) =
  the smallest B of the grid at which curve x reaches L. Claim: B_reach(none) /
  B_reach(p) > :data:`BUFFER_FACTOR` = 10. Standard TCP is held to p's level, not to
  its own maximum, because the paper's sentence compares it with "utilization as high
  as that of paced architectures" (a standard curve that flattens lower would reach
  its own maximum early and fake a small ratio). A crossing on a grid is only
  bracketed: B_reach lies in (the grid point before the first B whose upper 95 %
  bound reaches L, the first B whose lower 95 % bound reaches L] (0 before the
  smallest B; +inf when no lower bound reaches L; inconclusive when a point of either
  curve has fewer than 2 repetitions). So the ratio lies in (lo_none / hi_p,
  hi_none / lo_p): holds if that lower end >= 10, does not hold if the upper end
  <= 10, inconclusive otherwise; the reason says whether the grid's resolution alone
  (the means' crossings, bracketed by grid steps) already cannot decide. The level's
  own uncertainty (p's highest mean) is not propagated. The estimate shown is the
  ratio of the means' first crossings.
- **F4b** XCP pacing reaches its best goodput with about 2-3 MSS per link of shared
  buffer (III-C-2, Abilene, Fig. 10a: "XCP pacing methods reach their maximum goodput
  when around 2-3 MSS per link of shared buffer is used"; the spec applies it to the
  study). With ``arch = sb``, per XCP variant (``pacing`` starting with ``xcp``):
  B_reach(xcp) at REACH x its own highest mean goodput, bracketed as in F4a, <=
  :data:`XCP_BEST` = 3 MSS = 4500 B: holds if the bracket's upper end <= 4500 B,
  does not hold if its lower end >= 4500 B (B_reach > 3 MSS for sure). Without XCP
  rows: "not measured", reason ``xcp not run``.
- **F4c** standard and paced TCP need 30-60 MSS to reach XCP's goodput (III-C-2,
  Abilene: "paced TCP and standard TCP require around 30-60 MSS per link of shared
  buffer to reach the goodput of XCP pacing methods"). With ``arch = sb``, per XCP
  variant v and p in (none, tcp): B_reach(p) at REACH x v's highest mean goodput >=
  :data:`OTHERS_NEED` = 30 MSS = 45 kB: holds if the bracket's lower end >= 45 kB,
  does not hold if its upper end < 45 kB. Only the lower end of "30-60" is judged: a
  need beyond 60 MSS (or beyond the sweep) only widens the gap the paper points at.
  ``xcp not run`` until XCP rows exist.
- **F4d** XCP pacing gives the lowest core drop rate (III-B-2, Fig. 6b: "when the
  buffer is small, XCP pacing methods yield higher goodput and lower packet drop rates
  in the core nodes than paced and standard TCP"). With ``arch = sb``, per XCP variant
  and p in (none, tcp), at every B with 0 < B <= :data:`SMALL` = 6 MSS (the paper's
  "small": where the architectures' curves differ, III-B-2): core_drop_rate(xcp) /
  core_drop_rate(p) < 1, Fieller's interval (Welch's difference when p's mean drop
  rate is 0). ``xcp not run`` until XCP rows exist.

**A second reading, paired by seed (not the verdicts).** Repetition r of every point
of a run uses seed 1000 + r, and the seed fixes the flows (their hosts and start
instants; only the point's architecture, B and sender differ), so the runs of two points
with one seed share their traffic, and most of the spread between repetitions is the
seed's (blocks SB and OB: the seed's order of goodput, 1000 > 1001 > 1002, holds at
nearly every point). The rules above compare the points as independent samples, as
pre-registered. :func:`comparisons` lists every comparison of F1, F2, F3 and F4d in that
reading and, beside it, paired by seed (``analysis.findings.compare(paired=True)``:
Fieller's interval for paired samples, n - 1 degrees of freedom, over the seeds both
points have), judged by the same regions. Added 2026-11-30, after blocks SB and OB had
run and before any IB or WCSB run: exploratory for F1 and F4d (their data were seen),
fixed in advance for F2 and F3 (their IB and WCSB halves were not); the verdicts stay
the pre-registered ones.

Every run counts in the verdicts, also those not exact (``occ_overflow`` > 0: the BPF's
admission was an upper bound on the bytes waiting, more drops than the paper's node;
``core_late`` > 0: ib decisions after late arrivals; ``xcp_exact`` = 0: the XCP loop's
rates or counters were late, docs/xcp-edge.md) or beyond the fidelity bound
(``lateness_p99_over_tau`` > :data:`FIDELITY_BOUND`); the side column says how many of
the runs used are such, so a verdict resting on them is visible. Rows whose buffer text
cannot be read are left out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import pandas as pd

from analysis.findings import (FAILS, HOLDS, INCONCLUSIVE, MARGIN, NOT_MEASURED, Finding, Group, all_of,
                               compare, with_side)
from testbed.units import Dim, Quantity, UnitError, format_si

#: 1 MSS in the paper: a 1500 B IP datagram (the family's IP_PACKET)
MSS_B = 1500.0
#: F1 and F2: the paper's 1-6 MSS range of B (bytes, both ends included)
PAPER_RANGE = (1 * MSS_B, 6 * MSS_B)
#: F4d: "small" buffers, B <= 6 MSS (bytes)
SMALL = 6 * MSS_B
#: F3: "very close" / "almost the same": |WCSB / OB - 1| < 10 %
CLOSE = MARGIN
#: F4: a curve "reaches" a level at 90 % of it ("as high as", the project's equality margin)
REACH = 1 - MARGIN
#: F4a: "more than 10-fold buffering"
BUFFER_FACTOR = 10.0
#: F4b: XCP's best at "around 2-3 MSS": B_reach <= 3 MSS (bytes)
XCP_BEST = 3 * MSS_B
#: F4c: standard and paced TCP need "around 30-60 MSS": B_reach >= 30 MSS (bytes)
OTHERS_NEED = 30 * MSS_B
#: the fidelity bound: p99 release lateness below 5 % of a full frame's duration (issue 16)
FIDELITY_BOUND = 0.05
#: the architectures in the paper's legend order (SB, WCSB, IB, OB)
ARCH_ORDER = ("sb", "wcsb", "ib", "ob")
#: the senders in the paper's order (standard, paced TCP, XCP pacing: combined ACK, ACK macroflow)
PACING_ORDER = ("none", "tcp", "xcp", "xcp-ack")
#: the standard sender
STANDARD = "none"
GOODPUT, DROPS = "goodput_per_flow_Bps", "core_drop_rate"
#: the numeric buffer column :func:`prepare` adds (bytes)
BUFFER_COL = "buffer_B"
ARCH_NAMES = {"sb": "SB", "wcsb": "WCSB", "ib": "IB", "ob": "OB"}
PACING_NAMES = {"none": "standard TCP", "tcp": "paced TCP", "xcp": "XCP pacing (combined ACK)",
                "xcp-ack": "XCP pacing (ACK macroflow)"}
KBPS = 1e-3
EQUIV = f"equivalence, +-{CLOSE * 100:g} % margin"
#: the column that matches a run of one point with a run of another (the same seed: the same flows)
PAIR_KEY = "seed"


# ---- selection -------------------------------------------------------------------------

def buffer_bytes(value: object) -> float:
    """B in bytes from a summary cell: a quantity text (``"1.5 kB"``) or a number of
    bytes; nan when unreadable."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    try:
        return Quantity.parse(str(value), Dim.SIZE).si
    except UnitError:
        return math.nan


def seconds(value: object, key: str) -> float:
    """A time parameter's cell (``"10 s"``) in seconds. Raises ValueError naming ``key``
    when it is not a time."""
    try:
        return Quantity.parse(str(value), Dim.TIME).si
    except UnitError as exc:
        raise ValueError(f"{key} = {value!r} is not a time: {exc}") from exc


def prepare(summary: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``summary`` with :data:`BUFFER_COL` (B in bytes, nan if unreadable) and
    ``arch`` / ``pacing`` as text. Raises KeyError without ``buffer``, ``arch`` or ``pacing``."""
    s = summary.copy()
    s[BUFFER_COL] = [buffer_bytes(v) for v in s["buffer"]]
    s["arch"] = s["arch"].astype(str)
    s["pacing"] = s["pacing"].astype(str)
    return s


def _prepared(s: pd.DataFrame) -> pd.DataFrame:
    return s if BUFFER_COL in s else prepare(s)


def same_buffer(a: float, b: float) -> bool:
    """Whether two B values (bytes) are the same point (relative tolerance 1e-9)."""
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)


def rows(s: pd.DataFrame, arch: str | None = None, pacing: str | None = None,
         buffer: float | None = None) -> pd.DataFrame:
    """The rows of one architecture, pacing and/or B in bytes (any left None) of a
    :func:`prepare`\\ d summary. Raises KeyError on an unprepared one."""
    m = pd.Series(True, index=s.index)
    if arch is not None:
        m &= s["arch"] == arch
    if pacing is not None:
        m &= s["pacing"] == pacing
    if buffer is not None:
        m &= s[BUFFER_COL].map(lambda v, x=buffer: same_buffer(v, x))
    return s[m]


def buffers(s: pd.DataFrame, positive: bool = False) -> list[float]:
    """The distinct B values (bytes) of a prepared summary, ascending (nan left out;
    ``positive``: B > 0 only, the log-scale sweep)."""
    out: list[float] = []
    for v in sorted(float(x) for x in s[BUFFER_COL].dropna()):
        if positive and v <= 0:
            continue
        if not out or not same_buffer(out[-1], v):
            out.append(v)
    return out


def _ordered(values: Iterable[str], order: tuple[str, ...]) -> list[str]:
    present = set(values)
    return [v for v in order if v in present] + sorted(present - set(order))


def archs(s: pd.DataFrame) -> list[str]:
    """The architectures of ``s`` in the paper's legend order (then any other, sorted)."""
    return _ordered(s["arch"].astype(str), ARCH_ORDER)


def pacings(s: pd.DataFrame) -> list[str]:
    """The senders of ``s``: standard, paced TCP, the XCP variants, then any other."""
    return _ordered(s["pacing"].astype(str), PACING_ORDER)


def is_xcp(pacing: str) -> bool:
    """Whether a pacing is an XCP variant (``xcp``, ``xcp-ack``, ...)."""
    return pacing.startswith("xcp")


def arch_name(arch: str) -> str:
    return ARCH_NAMES.get(arch, arch.upper())


def pacing_name(pacing: str) -> str:
    return PACING_NAMES.get(pacing, pacing)


def buffer_text(b: float) -> str:
    """``"4.5 kB (3 MSS)"``."""
    return f"{format_si(b, Dim.SIZE)} ({b / MSS_B:.3g} MSS)"


def _cell(r: object, column: str) -> float:
    """A summary cell as a number (nan when missing or not a number)."""
    try:
        return float(r.get(column))  # type: ignore[attr-defined, arg-type]
    except (TypeError, ValueError):
        return math.nan


#: the XCP loop's lateness counters a fault names (summary column, what it counts)
_XCP_COUNTERS = (("xcp_late_rates", "rate changes after their instant"),
                 ("xcp_pacer_late", "pacer arrivals after their instant"),
                 ("xcp_acc_late", "accumulator slots read late"), ("xcp_acc_lost", "accumulator slots lost"))


def exactness_faults(r: object) -> list[str]:
    """Why one run (a summary row) is not exact, [] when it is or nothing says otherwise:
    occupancy slots merged (``occ_overflow`` > 0: ob/sb/wcsb admission against an upper
    bound of the occupancy; with ``core_drop_rate`` = 0 the text says that no decision of
    the window can differ from the exact node's: a bound that never refused admits what the
    exact occupancy admits),
    ib decisions taken after late arrivals (``core_late`` > 0: lateness beyond the voq
    qdisc's lookahead), or an XCP loop that was not the one on the intended timeline
    (``xcp_exact`` = 0: an XCP lateness counter above 0, docs/xcp-edge.md (d); NaN
    without XCP)."""
    out = []
    if _cell(r, "occ_overflow") > 0:
        out.append("occupancy slots merged (more packets in a node's buffer than its slots track: its "
                   "occupancy an upper bound, its drops possibly more than the paper's node's)"
                   + ("; no core drop in the window, so the window's admissions are the exact node's for the "
                      "arrivals it saw" if _cell(r, "core_drop_rate") == 0 else ""))
    if _cell(r, "core_late") > 0:
        out.append("ib arrivals after their instant was decided (lateness beyond the lookahead)")
    if _cell(r, "xcp_exact") == 0:
        counted = ", ".join(f"{what} {_cell(r, c):.0f}" for c, what in _XCP_COUNTERS if _cell(r, c) > 0)
        out.append("the XCP loop was late (" + (counted or "a counter not in the summary, e.g. late probes: "
                                                 "the point's xcp.json") + ")")
    return out


def not_exact(g: pd.DataFrame) -> pd.Series:
    """Per run: :func:`exactness_faults` is not empty."""
    return pd.Series([bool(exactness_faults(r)) for _, r in g.iterrows()], index=g.index, dtype=bool)


def flagged(g: pd.DataFrame) -> pd.Series:
    """Per run: not exact (:func:`not_exact`) or beyond the fidelity bound
    (lateness_p99_over_tau > :data:`FIDELITY_BOUND`); False where unknown."""
    late = (pd.to_numeric(g["lateness_p99_over_tau"], errors="coerce") if "lateness_p99_over_tau" in g
            else pd.Series(math.nan, index=g.index))
    return not_exact(g) | (late > FIDELITY_BOUND)


def _side(*groups: pd.DataFrame) -> str:
    """Runs used that are not exact or beyond the fidelity bound (they count in the verdict)."""
    used = pd.concat(groups) if groups else pd.DataFrame()
    if used.empty:
        return ""
    k = int(flagged(used).sum())
    return (f"{k} of {len(used)} runs used not exact (occ_overflow or core_late > 0, or xcp_exact = 0) or beyond "
            f"the fidelity bound" if k else "")


def _values(g: pd.DataFrame, column: str) -> pd.Series:
    return pd.to_numeric(g[column], errors="coerce") if column in g else pd.Series(dtype=float)


def pair_values(ga: pd.DataFrame, gb: pd.DataFrame, column: str, paired: bool) -> tuple[list[float], list[float]]:
    """``column`` of two groups of runs: as they are, or (``paired``) aligned by
    :data:`PAIR_KEY`, the runs with a seed in both groups (a seed with several runs in a
    group: their mean). Raises KeyError, paired, when a group lacks the seed column."""
    if not paired:
        return list(_values(ga, column)), list(_values(gb, column))
    ma = pd.Series(_values(ga, column).to_numpy(), index=ga[PAIR_KEY].to_numpy()).groupby(level=0).mean()
    mb = pd.Series(_values(gb, column).to_numpy(), index=gb[PAIR_KEY].to_numpy()).groupby(level=0).mean()
    common = sorted(set(ma.index) & set(mb.index), key=str)
    return [float(ma[k]) for k in common], [float(mb[k]) for k in common]


# ---- crossings on the B grid -----------------------------------------------------------

@dataclass(frozen=True)
class Reach:
    """Where a goodput curve first reaches ``level`` (B/s) on its B > 0 grid (bytes).

    ``first``: the first B whose mean reaches the level (inf if none); ``grid_lo``: the
    grid point before it (0 before the smallest; the largest B when none), so that the
    means alone put B_reach in (grid_lo, first]; ``lo`` / ``hi``: the bracket with the
    points' 95 % intervals, B_reach in (lo, hi] (lo: the grid point before the first B
    whose upper bound reaches the level; hi: the first B whose lower bound does, inf if
    none); ``n``: the fewest repetitions at a point; ``grid``: the B values."""

    level: float
    first: float
    grid_lo: float
    lo: float
    hi: float
    n: int
    grid: tuple[float, ...]


def curve(g: pd.DataFrame, column: str = GOODPUT) -> list[tuple[float, Group]]:
    """(B, group of ``column`` over its repetitions) for every B > 0 of ``g``, ascending."""
    return [(b, Group.of(format_si(b, Dim.SIZE), _values(rows(g, buffer=b), column))) for b in buffers(g, True)]


def best_mean(g: pd.DataFrame, column: str = GOODPUT) -> float:
    """The highest mean of ``column`` over the B > 0 points of ``g`` (nan without any)."""
    means = [grp.mean for _, grp in curve(g, column) if grp.n and not math.isnan(grp.mean)]
    return max(means) if means else math.nan


def reach(g: pd.DataFrame, level: float, column: str = GOODPUT) -> Reach:
    """The :class:`Reach` of ``g``'s curve at ``level``. A point with fewer than 2
    repetitions has the interval (-inf, inf): it may have reached, never surely."""
    pts = [(b, grp) for b, grp in curve(g, column) if grp.n]
    grid = tuple(b for b, _ in pts)

    def before(i: int) -> float:
        return grid[i - 1] if i > 0 else 0.0

    def first(test: Callable[[Group], bool]) -> int | None:
        return next((i for i, (_, grp) in enumerate(pts) if test(grp)), None)

    i_mean = first(lambda grp: grp.mean >= level)
    i_up = first(lambda grp: (grp.hi if grp.n >= 2 else math.inf) >= level)
    i_down = first(lambda grp: (grp.lo if grp.n >= 2 else -math.inf) >= level)
    top = grid[-1] if grid else math.nan
    return Reach(level=level, first=grid[i_mean] if i_mean is not None else math.inf,
                 grid_lo=before(i_mean) if i_mean is not None else top,
                 lo=before(i_up) if i_up is not None else top,
                 hi=grid[i_down] if i_down is not None else math.inf,
                 n=min((grp.n for _, grp in pts), default=0), grid=grid)


def _div(a: float, b: float) -> float:
    if b == 0:
        return math.inf if a > 0 else math.nan
    if math.isinf(b):
        return 0.0 if not math.isinf(a) else math.nan
    return a / b


def _b(v: float) -> str:
    if math.isinf(v):
        return "beyond the sweep" if v > 0 else "-inf"
    return f"{v:.6g} B"


def _grid_text(grid: tuple[float, ...]) -> str:
    if not grid:
        return "no B > 0"
    steps = [b / a for a, b in zip(grid, grid[1:]) if a > 0]
    step = f", steps x {min(steps):.3g} .. x {max(steps):.3g}" if steps else ""
    return f"grid {len(grid)} B values {format_si(grid[0], Dim.SIZE)} .. {format_si(grid[-1], Dim.SIZE)}{step}"


def _reach_group(label: str, r: Reach) -> Group:
    return Group(label, r.first, r.lo, r.hi, r.n)


# ---- the findings ----------------------------------------------------------------------

CLAIMS = {
    "F1": ("shared buffering beats the others at equal total buffer (SB > OB, IB; 1-6 MSS)",
           "'shared buffering yields a much higher goodput than the others even though its per node buffer "
           "capacity is the same as that for input and output buffering' (III-B-2, Fig. 5)"),
    "F2": ("with paced traffic input buffering beats output buffering (IB > OB; 1-6 MSS)",
           "'when the link buffer is between 1-6 MSS, input buffering yields higher goodput' (Fig. 5a); "
           "'When the traffic was paced, input buffering yielded higher TCP goodput' (IV)"),
    "F3": (f"WCSB is close to OB (goodput within +-{CLOSE * 100:g} %, every B)",
           "'very close to output buffering', 'almost the same goodput as output buffering with a much smaller "
           "buffer capacity per node' (III-B-2, Fig. 5; NSFNET)"),
    "F4a": (f"standard TCP needs over {BUFFER_FACTOR:g}x more buffering than paced schemes",
            "'More than 10-fold buffering is necessary to achieve utilization that is as high as that of paced "
            "architectures' (III-B-2, Fig. 5d)"),
    "F4b": (f"XCP pacing reaches its best goodput with about 2-3 MSS per link of shared buffer "
            f"(B_reach <= {XCP_BEST:g} B)",
            "'XCP pacing methods reach their maximum goodput when around 2-3 MSS per link of shared buffer is "
            "used' (III-C-2, Abilene, Fig. 10a)"),
    "F4c": (f"standard and paced TCP need 30-60 MSS per link of shared buffer to reach XCP's goodput "
            f"(B_reach >= {OTHERS_NEED:g} B)",
            "'paced TCP and standard TCP require around 30-60 MSS per link of shared buffer to reach the goodput "
            "of XCP pacing methods' (III-C-2, Abilene, Fig. 10a)"),
    "F4d": ("XCP pacing gives the lowest core drop rate (SB, B <= 6 MSS)",
            "'when the buffer is small, XCP pacing methods yield higher goodput and lower packet drop rates in the "
            "core nodes than paced and standard TCP' (III-B-2, Fig. 6b)"),
}
IB_NOT_RUN = "ib not run: needs arch = ib rows"
XCP_NOT_RUN = "xcp not run: needs pacing = xcp (or xcp-ack) rows"


def evaluate(summary: pd.DataFrame) -> list[Finding]:
    """F1, F2, F3, F4a-F4d on ``summary`` (raw or :func:`prepare`\\ d; module docstring).

    Raises KeyError without ``arch``, ``pacing`` or ``buffer``."""
    s = _prepared(summary)
    s = s[s[BUFFER_COL].notna()]
    return [f1(s), f2(s), f3(s), f4a(s), f4b(s), f4c(s), f4d(s)]


def _missing(fid: str, reason: str) -> Finding:
    claim, paper = CLAIMS[fid]
    return Finding(id=fid, claim=claim, verdict=NOT_MEASURED, reason=reason, paper=paper)


def _in_range(b: float, lo: float, hi: float) -> bool:
    return (b > lo or same_buffer(b, lo)) and (b < hi or same_buffer(b, hi))


def _goodput(fid: str, s: pd.DataFrame, a: str, b: str, pacing: str, b_value: float, paired: bool,
             **rule: object) -> Finding:
    """goodput(architecture a) vs goodput(architecture b) of one sender at one B (bytes)."""
    claim, paper = CLAIMS[fid]
    ga, gb = rows(s, a, pacing, buffer=b_value), rows(s, b, pacing, buffer=b_value)
    va, vb = pair_values(ga, gb, GOODPUT, paired)
    return compare(fid, claim, (arch_name(a), va), (arch_name(b), vb), scale=KBPS, unit="kB/s", paper=paper,
                   where=f"{pacing_name(pacing)}, B = {buffer_text(b_value)}", side=_side(ga, gb), paired=paired,
                   **rule)  # type: ignore[arg-type]


def _arch_pairs(fid: str, s: pd.DataFrame, pairs: list[tuple[str, str]], senders: list[str],
                in_range: tuple[float, float] | None, needed: str, paired: bool, **rule: object) -> Finding:
    """all_of over every sender, every B (in ``in_range`` if given, else B > 0) and every
    (a, b) architecture pair of ``pairs`` measured at that B."""
    claim, paper = CLAIMS[fid]
    parts = []
    for p in senders:
        for b in buffers(rows(s, pacing=p), positive=True):
            if in_range is not None and not _in_range(b, *in_range):
                continue
            for a1, a2 in pairs:
                if rows(s, a1, p, b).empty or rows(s, a2, p, b).empty:
                    continue
                parts.append(_goodput(fid, s, a1, a2, p, b, paired, **rule))
    return all_of(fid, claim, parts, needed, paper=paper)


def f1(s: pd.DataFrame, paired: bool = False) -> Finding:
    """F1: SB / OB (and SB / IB) > 1 at every pacing and B in 1-6 MSS."""
    others = [a for a in ("ob", "ib") if a in archs(s)]
    needed = "arch = sb and ob (ib when built) at a common pacing and B in 1500 .. 9000 B"
    return _arch_pairs("F1", s, [("sb", a) for a in others], pacings(s), PAPER_RANGE, needed, paired, low=1.0)


def f2(s: pd.DataFrame, paired: bool = False) -> Finding:
    """F2: IB / OB > 1 for paced senders at every B in 1-6 MSS; not measured without ib."""
    if "ib" not in archs(s):
        return _missing("F2", IB_NOT_RUN)
    paced = [p for p in pacings(s) if p != STANDARD]
    needed = "arch = ib and ob with a paced sender (pacing != none) at a common B in 1500 .. 9000 B"
    return _arch_pairs("F2", s, [("ib", "ob")], paced, PAPER_RANGE, needed, paired, low=1.0)


def f3(s: pd.DataFrame, paired: bool = False) -> Finding:
    """F3: WCSB / OB within 1 +- CLOSE at every pacing and B > 0."""
    needed = "arch = wcsb and ob at a common pacing and B > 0"
    return _arch_pairs("F3", s, [("wcsb", "ob")], pacings(s), None, needed, paired, low=1 - CLOSE,
                       high=1 + CLOSE, margin_note=EQUIV)


def _bracket_verdict(lo: float, hi: float, low: float | None, high: float | None) -> str:
    """The verdict of a quantity known to lie in (lo, hi] against ``>= low`` or ``<= high``."""
    if low is not None:
        return HOLDS if lo >= low else FAILS if hi < low else INCONCLUSIVE
    assert high is not None
    return HOLDS if hi <= high else FAILS if lo >= high else INCONCLUSIVE


def _ratio_finding(fid: str, where: str, a: tuple[str, Reach], b: tuple[str, Reach], side: str) -> Finding:
    """B_reach(a) / B_reach(b) > BUFFER_FACTOR from two brackets (F4a)."""
    claim, paper = CLAIMS[fid]
    (la, ra), (lb, rb) = a, b
    est = _div(ra.first, rb.first) if not math.isinf(rb.first) else math.nan
    lo, hi = _div(ra.lo, rb.hi), _div(ra.hi, rb.lo)
    glo, ghi = _div(ra.grid_lo, rb.first), _div(ra.first, rb.grid_lo)
    lo = 0.0 if math.isnan(lo) else lo
    hi = math.inf if math.isnan(hi) else hi
    rule = (f"B_a / B_b > {BUFFER_FACTOR:g} (B_x: the smallest B at which x reaches {REACH * 100:g} % of "
            f"{lb}'s highest mean goodput; bracketed by grid steps and 95 % intervals)")
    common = dict(id=fid, claim=claim, paper=paper, where=where, a=_reach_group(la, ra), b=_reach_group(lb, rb),
                  unit="B", effect="B_a / B_b", estimate=est, lo=lo, hi=hi, rule=rule, low=BUFFER_FACTOR, side=side)
    if min(ra.n, rb.n) < 2:
        return Finding(verdict=INCONCLUSIVE, reason=f"fewer than 2 repetitions at some B of {la if ra.n < 2 else lb}:"
                       f" no interval", **common)  # type: ignore[arg-type]
    span = f"B_a in ({_b(ra.lo)}, {_b(ra.hi)}], B_b in ({_b(rb.lo)}, {_b(rb.hi)}]: the ratio in ({lo:.3g}, {hi:.3g})"
    verdict = HOLDS if lo >= BUFFER_FACTOR else FAILS if hi <= BUFFER_FACTOR else INCONCLUSIVE
    if verdict == HOLDS:
        reason = f"{span}, all above {BUFFER_FACTOR:g}"
    elif verdict == FAILS:
        reason = f"{span}, all at or below {BUFFER_FACTOR:g}"
    elif glo < BUFFER_FACTOR < ghi or (math.isnan(glo) or math.isnan(ghi)):
        reason = (f"the grid cannot resolve it: the means' crossings alone put the ratio in ({glo:.3g}, {ghi:.3g}] "
                  f"({_grid_text(ra.grid)}); with the 95 % intervals {span}")
    else:
        reason = (f"the 95 % intervals near the crossings leave it open: {span}; the means' crossings alone: "
                  f"({glo:.3g}, {ghi:.3g}]")
    return Finding(verdict=verdict, reason=reason, **common)  # type: ignore[arg-type]


def _reach_finding(fid: str, where: str, label: str, r: Reach, side: str, *, low: float | None = None,
                   high: float | None = None, level_of: str) -> Finding:
    """B_reach in (lo, hi] against ``>= low`` (F4c) or ``<= high`` (F4b)."""
    claim, paper = CLAIMS[fid]
    bound = f"B_reach >= {low:g} B" if low is not None else f"B_reach <= {high:g} B"
    rule = f"{bound} (B_reach: the smallest B at which the curve reaches {REACH * 100:g} % of {level_of})"
    common = dict(id=fid, claim=claim, paper=paper, where=where, a=_reach_group(label, r), unit="B",
                  effect="B_reach", estimate=r.first, lo=r.lo, hi=r.hi, rule=rule, low=low, high=high, side=side)
    if r.n < 2:
        return Finding(verdict=INCONCLUSIVE, reason=f"fewer than 2 repetitions at some B of {label}: no interval",
                       **common)  # type: ignore[arg-type]
    verdict = _bracket_verdict(r.lo, r.hi, low, high)
    span = (f"level {r.level * KBPS:.4g} kB/s reached in ({_b(r.lo)}, {_b(r.hi)}] (means: ({_b(r.grid_lo)}, "
            f"{_b(r.first)}]; {_grid_text(r.grid)})")
    words = {HOLDS: "satisfies", FAILS: "contradicts", INCONCLUSIVE: "straddles"}[verdict]
    return Finding(verdict=verdict, reason=f"{span}: {words} {bound}", **common)  # type: ignore[arg-type]


def f4a(s: pd.DataFrame) -> Finding:
    """F4a: per architecture and paced sender, B_reach(none) / B_reach(paced) > 10."""
    fid = "F4a"
    claim, paper = CLAIMS[fid]
    needed = "pacing = none and a paced sender on one architecture over a B > 0 sweep"
    parts = []
    for a in archs(s):
        std = rows(s, a, STANDARD)
        if not buffers(std, True):
            continue
        for p in pacings(s):
            paced = rows(s, a, p)
            if p == STANDARD or not buffers(paced, True):
                continue
            level = REACH * best_mean(paced)
            if math.isnan(level):
                continue
            parts.append(_ratio_finding(fid, f"{arch_name(a)}, standard TCP vs {pacing_name(p)}",
                                        (pacing_name(STANDARD), reach(std, level)),
                                        (pacing_name(p), reach(paced, level)), _side(std, paced)))
    return all_of(fid, claim, parts, needed, paper=paper)


def _xcps(s: pd.DataFrame) -> list[str]:
    return [p for p in pacings(rows(s, "sb")) if is_xcp(p)]


def _per_xcp(fid: str, s: pd.DataFrame, needed: str, parts_of: Callable[[str], list[Finding]]) -> Finding:
    """The conjunction of ``parts_of(variant)`` over the XCP variants run on SB; not
    measured, reason :data:`XCP_NOT_RUN`, when the run has no XCP sender at all."""
    claim, paper = CLAIMS[fid]
    if not any(is_xcp(p) for p in pacings(s)):
        return _missing(fid, XCP_NOT_RUN)
    return all_of(fid, claim, [f for x in _xcps(s) for f in parts_of(x)], needed, paper=paper)


def f4b(s: pd.DataFrame) -> Finding:
    """F4b: SB, every XCP variant: B_reach at 90 % of its own best <= 3 MSS."""
    def parts(x: str) -> list[Finding]:
        g = rows(s, "sb", x)
        level = REACH * best_mean(g)
        if math.isnan(level):
            return []
        return [_reach_finding("F4b", f"SB, {pacing_name(x)}", pacing_name(x), reach(g, level), _side(g),
                               high=XCP_BEST, level_of="its own highest mean goodput")]

    return _per_xcp("F4b", s, "arch = sb with an XCP sender over a B > 0 sweep", parts)


def f4c(s: pd.DataFrame) -> Finding:
    """F4c: SB, every XCP variant v and p in (none, tcp): B_reach(p) at 90 % of v's best >= 30 MSS."""
    def parts(x: str) -> list[Finding]:
        level = REACH * best_mean(rows(s, "sb", x))
        if math.isnan(level):
            return []
        out = []
        for p in (STANDARD, "tcp"):
            g = rows(s, "sb", p)
            if buffers(g, True):
                out.append(_reach_finding("F4c", f"SB, {pacing_name(p)} to {pacing_name(x)}'s level", pacing_name(p),
                                          reach(g, level), _side(g, rows(s, "sb", x)), low=OTHERS_NEED,
                                          level_of=f"{pacing_name(x)}'s highest mean goodput"))
        return out

    return _per_xcp("F4c", s, "arch = sb with an XCP sender and standard or paced TCP over a B > 0 sweep", parts)


def f4d(s: pd.DataFrame, paired: bool = False) -> Finding:
    """F4d: SB, every XCP variant vs none and tcp: drop rate ratio < 1 at 0 < B <= 6 MSS."""
    claim, paper = CLAIMS["F4d"]

    def parts(x: str) -> list[Finding]:
        out = []
        for p in (STANDARD, "tcp"):
            for b in buffers(rows(s, "sb", x), True):
                gx, gp = rows(s, "sb", x, b), rows(s, "sb", p, b)
                if (b > SMALL and not same_buffer(b, SMALL)) or gp.empty:
                    continue
                vx, vp = pair_values(gx, gp, DROPS, paired)
                out.append(compare("F4d", claim, (pacing_name(x), vx), (pacing_name(p), vp), high=1.0, paper=paper,
                                   where=f"SB, B = {buffer_text(b)}", side=_side(gx, gp), paired=paired))
        return out

    return _per_xcp("F4d", s, f"arch = sb with an XCP sender and pacing none or tcp at a common 0 < B <= {SMALL:g} B",
                    parts)


# ---- the comparisons in both readings --------------------------------------------------

#: the columns of :func:`comparisons`
COMPARISON_COLUMNS = ["id", "where", "a", "b", "unit", "a_mean", "b_mean", "effect", "rule", "n_a", "n_b",
                      "estimate", "lo95", "hi95", "verdict", "pairs", "paired_estimate", "paired_lo95",
                      "paired_hi95", "paired_verdict"]


def comparison_rows(unpaired: Finding, paired: Finding) -> list[dict[str, object]]:
    """One row (:data:`COMPARISON_COLUMNS`) per part of a conjunction read both ways:
    ``unpaired`` and ``paired`` are one finding evaluated as independent samples and
    paired by seed (the same parts in the same order)."""
    out: list[dict[str, object]] = []
    for u, p in zip(unpaired.parts, paired.parts):
        out.append({"id": u.id, "where": u.where, "a": u.a.label if u.a else "", "b": u.b.label if u.b else "",
                    "unit": u.unit, "a_mean": u.a.mean if u.a else math.nan, "b_mean": u.b.mean if u.b else math.nan,
                    "effect": u.effect, "rule": u.rule, "n_a": u.a.n if u.a else 0, "n_b": u.b.n if u.b else 0,
                    "estimate": u.estimate, "lo95": u.lo, "hi95": u.hi, "verdict": u.verdict,
                    "pairs": p.a.n if p.a else 0, "paired_estimate": p.estimate, "paired_lo95": p.lo,
                    "paired_hi95": p.hi,
                    "paired_verdict": p.verdict if p.effect == u.effect else f"{p.verdict} ({p.effect})"})
    return out


def paired_reading(paired: Finding) -> str:
    """A conjunction read paired by seed, in words for a findings' side column
    ("paired by seed (second reading): holds, 10 of 10 comparisons hold"); "" when it
    has no comparisons."""
    if not paired.parts:
        return ""
    held = sum(p.verdict == HOLDS for p in paired.parts)
    return f"paired by seed (second reading): {paired.verdict}, {held} of {len(paired.parts)} comparisons hold"


def comparison_table(verdicts: Iterable[Finding], second: Iterable[Finding]) -> pd.DataFrame:
    """Every comparison of the findings in ``second`` (their second reading, paired by
    seed) beside the same comparison in ``verdicts`` (the pre-registered reading, which
    holds every id of ``second``), one row each (:func:`comparison_rows`). Raises
    KeyError when a finding of ``second`` has no verdict."""
    by_id = {f.id: f for f in verdicts}
    out: list[dict[str, object]] = []
    for p in second:
        out += comparison_rows(by_id[p.id], p)
    return pd.DataFrame(out, columns=COMPARISON_COLUMNS)


def with_second(verdicts: Iterable[Finding], second: Iterable[Finding]) -> list[Finding]:
    """``verdicts`` with each one's second reading (the finding of ``second`` with its
    id, :func:`paired_reading`) appended to its side column; the verdicts unchanged."""
    side = {f.id: paired_reading(f) for f in second}
    return [with_side(f, side.get(f.id, "")) for f in verdicts]


def second_reading(summary: pd.DataFrame) -> list[Finding]:
    """F1, F2, F3 and F4d paired by :data:`PAIR_KEY` (module docstring; not the
    verdicts); [] without a seed column. Raises KeyError without ``arch``, ``pacing`` or
    ``buffer``."""
    s = _prepared(summary)
    s = s[s[BUFFER_COL].notna()]
    if PAIR_KEY not in s:
        return []
    return [f1(s, paired=True), f2(s, paired=True), f3(s, paired=True), f4d(s, paired=True)]


def comparisons(summary: pd.DataFrame) -> pd.DataFrame:
    """Every comparison of F1, F2, F3 and F4d in both readings (:func:`comparison_table`
    of :func:`evaluate` and :func:`second_reading`): the groups' means (display units),
    the pre-registered reading (``estimate``, ``lo95``, ``hi95``, ``verdict``:
    independent samples) and the reading paired by :data:`PAIR_KEY` (``pairs``: the
    seeds both points have; ``paired_*``). Empty without a seed column or without
    comparisons. Raises KeyError without ``arch``, ``pacing`` or ``buffer``."""
    return comparison_table(evaluate(summary), second_reading(summary))
