"""Findings: a paper's claims checked against a run's repetitions, with 95 % intervals.

A finding compares two groups of repetitions (one summary column for two
configurations), or one group against a fixed reference value, and states a verdict:

- the groups: mean and 95 % Student-t interval over repetitions (``analysis.stats``);
- a difference of means: Welch's t interval (Welch-Satterthwaite degrees of freedom);
- a ratio of means (claims that are relative): Fieller's interval for two independent
  samples, with Welch-Satterthwaite degrees of freedom evaluated at the estimated ratio;
  unbounded (so inconclusive) when the denominator's mean is not significantly above 0;
- one group against a reference value: the group's own t interval;
- paired samples (``compare(..., paired=True)``: a's and b's repetitions matched, e.g.
  by seed, so that what the pair shares cancels): the paired t interval of the
  difference and Fieller's interval for paired samples of the ratio (the ratios r at
  which the paired t test of a_i - r b_i does not reject 0), n - 1 degrees of freedom.

Every claim is a region of the effect (``low < effect < high``, either side may be
open): the verdict is **holds** when the whole 95 % interval lies inside the region,
**does not hold** when it lies entirely outside, **inconclusive** when it straddles a
boundary or a group has fewer than 2 repetitions, **not measured** when the run lacks
the points (the finding then says which points would be needed). Claims of equality
use an equivalence region of +-:data:`MARGIN` around 1 (a two one-sided test at
2.5 % per side, since the interval is the 95 % one), claims of "at least as good" or
"does not fall" a non-inferiority bound 1 - :data:`MARGIN`.

Student-t quantiles come from ``scipy.special.stdtrit`` (see analysis/stats.py: scipy.stats
is slow to import in the guest).
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from analysis.stats import mean_ci, t_quantile

HOLDS, FAILS, INCONCLUSIVE, NOT_MEASURED = "holds", "does not hold", "inconclusive", "not measured"
VERDICTS = (HOLDS, FAILS, INCONCLUSIVE, NOT_MEASURED)
#: confidence level of every interval
LEVEL = 0.95
#: relative margin of equivalence (1 +- MARGIN) and non-inferiority (1 - MARGIN) claims
MARGIN = 0.10
#: title of the findings table among an analysis' tables (the report shows it first)
TITLE = "Findings: the paper's claims against this run (95 % intervals)"
#: the rule in one paragraph (report and findings.md)
LEGEND = (f"Each row compares two groups of repetitions (a, b) or one group with a fixed value: means "
          f"with 95 % Student-t intervals; a / b with Fieller's 95 % interval (a - b: Welch's). "
          f"holds = the effect's interval lies inside the claim's region (rule); does not hold = entirely "
          f"outside it; inconclusive = it straddles a bound, or a group has fewer than 2 repetitions; "
          f"not measured = the run lacks the points (the reason says which). Equality claims use "
          f"1 +- {MARGIN * 100:g} %, 'at least as good' claims 1 - {MARGIN * 100:g} %. A claim over several "
          f"conditions holds only if every one holds; the numbers shown are the deciding condition's.")


@dataclass(frozen=True)
class Interval:
    """An estimate with its two-sided interval (lo/hi may be -inf/inf, or nan if none)."""

    estimate: float
    lo: float
    hi: float


@dataclass(frozen=True)
class Group:
    """One compared quantity: mean over ``n`` repetitions and its 95 % t interval (display units)."""

    label: str
    mean: float
    lo: float
    hi: float
    n: int

    @classmethod
    def of(cls, label: str, values: Iterable[float], scale: float = 1.0) -> "Group":
        """The group of ``values`` (nan dropped) times ``scale`` (e.g. 1e-9 for bit/s -> Gb/s)."""
        vals = _clean(values, scale)
        mean, half = mean_ci(vals, LEVEL)
        return cls(label, mean, mean - half, mean + half, len(vals))


@dataclass(frozen=True)
class Finding:
    """One claim of a paper and what this run says about it.

    ``a`` and ``b`` are the compared groups (``b`` None for a comparison with a fixed
    reference); ``effect`` names the compared quantity (``"a / b"``, ``"a - b"`` or
    ``"a"``) with its estimate and 95 % interval; ``rule`` states the claim region with
    its margin; ``where`` the conditions the numbers are from; ``side`` extra context
    (e.g. spurious retransmissions) that does not enter the verdict.
    """

    id: str
    claim: str
    verdict: str
    reason: str
    paper: str = ""
    where: str = ""
    a: Group | None = None
    b: Group | None = None
    unit: str = ""
    effect: str = ""
    estimate: float = math.nan
    lo: float = math.nan
    hi: float = math.nan
    rule: str = ""
    low: float | None = None
    high: float | None = None
    side: str = ""
    parts: tuple["Finding", ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {VERDICTS}")


def _clean(values: Iterable[float], scale: float = 1.0) -> list[float]:
    return [float(v) * scale for v in values if v is not None and not math.isnan(float(v))]


def welch_difference(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> Interval:
    """Mean(a) - mean(b) with Welch's t interval (unequal variances).

    Raises ValueError when a group has fewer than 2 values (no variance estimate)."""
    a, b = _clean(a), _clean(b)
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"Welch's interval needs >= 2 values per group, got {len(a)} and {len(b)}")
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    va = _var(a) / len(a)
    vb = _var(b) / len(b)
    d = ma - mb
    if va + vb == 0:
        return Interval(d, d, d)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    half = t_quantile(df, level) * math.sqrt(va + vb)
    return Interval(d, d - half, d + half)


def fieller_ratio(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> Interval:
    """Mean(a) / mean(b) with Fieller's interval for independent samples.

    The set of ratios r with (mean(a) - r mean(b))^2 <= t^2 (var_a/n_a + r^2 var_b/n_b),
    t the Student-t quantile at Welch-Satterthwaite degrees of freedom for the weights
    at the estimated ratio. When mean(b) is not significantly different from 0 the set is
    unbounded: returned as (-inf, inf). Raises ValueError when a group has fewer than 2
    values or mean(b) is 0."""
    a, b = _clean(a), _clean(b)
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"Fieller's interval needs >= 2 values per group, got {len(a)} and {len(b)}")
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    if mb == 0:
        raise ValueError("Fieller's interval of a ratio needs a denominator mean other than 0")
    r = ma / mb
    va, vb = _var(a) / len(a), _var(b) / len(b)
    wa, wb = va, r * r * vb
    if wa + wb == 0:
        return Interval(r, r, r)
    df = (wa + wb) ** 2 / (wa ** 2 / (len(a) - 1) + wb ** 2 / (len(b) - 1))
    t2 = t_quantile(df, level) ** 2
    quad = mb * mb - t2 * vb
    if quad <= 0:
        return Interval(r, -math.inf, math.inf)
    root = math.sqrt(t2 * (ma * ma * vb + va * quad))
    return Interval(r, (ma * mb - root) / quad, (ma * mb + root) / quad)


def _pairs(a: Sequence[float], b: Sequence[float]) -> tuple[list[float], list[float]]:
    """The pairs (a_i, b_i) of two aligned sequences with neither value nan or None.

    Raises ValueError when the sequences differ in length."""
    if len(a) != len(b):
        raise ValueError(f"paired values need sequences of one length, got {len(a)} and {len(b)}")
    kept = [(float(x), float(y)) for x, y in zip(a, b)
            if x is not None and y is not None and not math.isnan(float(x)) and not math.isnan(float(y))]
    return [x for x, _ in kept], [y for _, y in kept]


def paired_difference(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> Interval:
    """Mean(a - b) over pairs (a_i, b_i) with the paired t interval (n - 1 degrees of freedom).

    ``a`` and ``b`` are aligned (pair i: the same seed, say); pairs with a nan are
    dropped. Raises ValueError for sequences of different lengths or fewer than 2 pairs."""
    a, b = _pairs(a, b)
    if len(a) < 2:
        raise ValueError(f"a paired interval needs >= 2 pairs, got {len(a)}")
    d = [x - y for x, y in zip(a, b)]
    mean, half = mean_ci(d, level)
    return Interval(mean, mean - half, mean + half)


def paired_ratio(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> Interval:
    """Mean(a) / mean(b) over pairs (a_i, b_i) with Fieller's interval for paired samples.

    The set of ratios r for which the paired t statistic of d_i = a_i - r b_i does not
    reject mean(d) = 0: (mean(a) - r mean(b))^2 <= t^2 (s_aa - 2 r s_ab + r^2 s_bb) / n,
    s the sample (co)variances, t the Student-t quantile at n - 1 degrees of freedom.
    Unbounded, (-inf, inf), when mean(b) is not significantly different from 0. Pairs
    with a nan are dropped. Raises ValueError for sequences of different lengths, fewer
    than 2 pairs or mean(b) = 0."""
    a, b = _pairs(a, b)
    n = len(a)
    if n < 2:
        raise ValueError(f"a paired interval needs >= 2 pairs, got {n}")
    ma, mb = sum(a) / n, sum(b) / n
    if mb == 0:
        raise ValueError("Fieller's interval of a ratio needs a denominator mean other than 0")
    r = ma / mb
    saa, sbb = _var(a), _var(b)
    sab = sum((x - ma) * (y - mb) for x, y in zip(a, b)) / (n - 1)
    q = t_quantile(n - 1, level) ** 2 / n
    qa, qb, qc = mb * mb - q * sbb, ma * mb - q * sab, ma * ma - q * saa
    if qa <= 0:
        return Interval(r, -math.inf, math.inf)
    disc = max(qb * qb - qa * qc, 0.0)
    root = math.sqrt(disc)
    return Interval(r, (qb - root) / qa, (qb + root) / qa)


def _var(x: list[float]) -> float:
    m = sum(x) / len(x)
    return sum((v - m) ** 2 for v in x) / (len(x) - 1)


def region_text(effect: str, low: float | None, high: float | None) -> str:
    """``"0.9 < a / b < 1.1"``, ``"a / b > 1"``: the claim region in words."""
    if low is not None and high is not None:
        return f"{low:.4g} < {effect} < {high:.4g}"
    if low is not None:
        return f"{effect} > {low:.4g}"
    if high is not None:
        return f"{effect} < {high:.4g}"
    raise ValueError("a claim region needs a lower or an upper bound")


def judge(iv: Interval, low: float | None, high: float | None) -> str:
    """The verdict of an interval against the claim region ``low < effect < high``.

    holds: the interval inside the region; does not hold: entirely outside it;
    inconclusive: it straddles a boundary, or has no bounds (nan). Raises ValueError
    when both bounds are None."""
    if low is None and high is None:
        raise ValueError("a claim region needs a lower or an upper bound")
    if math.isnan(iv.lo) or math.isnan(iv.hi):
        return INCONCLUSIVE
    lo_b = -math.inf if low is None else low
    hi_b = math.inf if high is None else high
    if lo_b < iv.lo and iv.hi < hi_b:
        return HOLDS
    if iv.hi <= lo_b or iv.lo >= hi_b:
        return FAILS
    return INCONCLUSIVE


def _fmt(v: float) -> str:
    if math.isnan(v):
        return "–"
    if math.isinf(v):
        return "∞" if v > 0 else "-∞"
    return f"{v:.4g}"


def _iv_text(lo: float, hi: float) -> str:
    return f"[{_fmt(lo)}, {_fmt(hi)}]"


def _reason(verdict: str, iv: Interval, rule: str) -> str:
    span = f"95 % interval {_iv_text(iv.lo, iv.hi)}"
    if verdict == HOLDS:
        return f"{span} lies inside {rule}"
    if verdict == FAILS:
        return f"{span} lies entirely outside {rule}"
    if math.isinf(iv.lo) or math.isinf(iv.hi):
        return f"{span}: the denominator's mean is not significantly above 0"
    return f"{span} straddles a bound of {rule}"


def compare(id: str, claim: str, a: tuple[str, Iterable[float]], b: tuple[str, Iterable[float]],
            *, low: float | None = None, high: float | None = None, relative: bool = True,
            scale: float = 1.0, unit: str = "", paper: str = "", where: str = "", margin_note: str = "",
            side: str = "", paired: bool = False) -> Finding:
    """The finding that ``a / b`` (``relative``: Fieller) or ``a - b`` (Welch) lies in ``low < . < high``.

    ``a`` and ``b`` are (label, values) pairs; values times ``scale`` are in display
    units ``unit``. ``paired``: a's and b's values are aligned pairs (the same seed, say;
    a pair with a nan is dropped) and the intervals are the paired ones
    (:func:`paired_ratio`, :func:`paired_difference`; the groups shown are the paired
    values). Inconclusive with n < 2 in a group (pairs). A ratio whose denominator's
    mean is <= 0 is judged by the difference instead when the claim is only a
    direction (a bound of exactly 1), else inconclusive. Raises ValueError when both
    bounds are None, or ``paired`` with values of different lengths."""
    if paired:
        pa, pb = _pairs(list(a[1]), list(b[1]))
        a, b = (a[0], pa), (b[0], pb)
    (ga, va), (gb, vb) = _group(a, scale), _group(b, scale)
    ratio_iv, diff_iv = (paired_ratio, paired_difference) if paired else (fieller_ratio, welch_difference)
    effect = "a / b" if relative else "a - b"
    rule = region_text(effect, low, high) + (f" ({margin_note})" if margin_note else "")
    common = dict(id=id, claim=claim, paper=paper, where=where, a=ga, b=gb, unit=unit, effect=effect,
                  rule=rule, low=low, high=high, side=side)
    if ga.n < 2 or gb.n < 2:
        if paired:
            return Finding(verdict=INCONCLUSIVE, reason=f"fewer than 2 pairs ({ga.n}): no interval", **common)
        few = ", ".join(f"{g.label} (n = {g.n})" for g in (ga, gb) if g.n < 2)
        return Finding(verdict=INCONCLUSIVE, reason=f"fewer than 2 repetitions in {few}: no interval", **common)
    if relative and gb.mean <= 0:
        if (low, high) in ((1.0, None), (None, 1.0)):
            d_low, d_high = (0.0, None) if low is not None else (None, 0.0)
            iv = diff_iv(va, vb)
            verdict = judge(iv, d_low, d_high)
            d_rule = region_text("a - b", d_low, d_high)
            return Finding(verdict=verdict, reason=f"{gb.label} has mean {_fmt(gb.mean)}, so the difference: "
                           + _reason(verdict, iv, d_rule), estimate=iv.estimate, lo=iv.lo, hi=iv.hi,
                           **{**common, "effect": "a - b", "rule": d_rule, "low": d_low, "high": d_high})
        return Finding(verdict=INCONCLUSIVE, reason=f"{gb.label}: mean {_fmt(gb.mean)} <= 0, no ratio", **common)
    iv = ratio_iv(va, vb) if relative else diff_iv(va, vb)
    verdict = judge(iv, low, high)
    return Finding(verdict=verdict, reason=_reason(verdict, iv, region_text(effect, low, high)),
                   estimate=iv.estimate, lo=iv.lo, hi=iv.hi, **common)


def against(id: str, claim: str, a: tuple[str, Iterable[float]], *, low: float | None = None,
            high: float | None = None, scale: float = 1.0, unit: str = "", paper: str = "", where: str = "",
            margin_note: str = "", side: str = "") -> Finding:
    """The finding that the mean of one group lies in ``low < mean < high`` (fixed references).

    Inconclusive with n < 2. Raises ValueError when both bounds are None."""
    ga, _ = _group(a, scale)
    rule = region_text("a", low, high) + (f" ({margin_note})" if margin_note else "")
    common = dict(id=id, claim=claim, paper=paper, where=where, a=ga, unit=unit, effect="a", rule=rule,
                  low=low, high=high, side=side)
    if ga.n < 2:
        return Finding(verdict=INCONCLUSIVE, reason=f"fewer than 2 repetitions in {ga.label}: no interval", **common)
    iv = Interval(ga.mean, ga.lo, ga.hi)
    verdict = judge(iv, low, high)
    return Finding(verdict=verdict, reason=_reason(verdict, iv, region_text("a", low, high)),
                   estimate=iv.estimate, lo=iv.lo, hi=iv.hi, **common)


def _group(g: tuple[str, Iterable[float]], scale: float) -> tuple[Group, list[float]]:
    label, values = g
    vals = _clean(values, scale)
    return Group.of(label, vals), vals


#: the emulating kernel's TCP memory artefacts (summary columns, counts): a run with any
#: of them above 0 ran short of the one ``tcp_mem`` every emulated host shares
#: (testbed.tcpmem), which the paper's separate machines would not have
MEMORY_ARTEFACTS = ("memory_pressures", "memory_drops")


def memory_clean(g: pd.DataFrame) -> pd.DataFrame:
    """The runs of ``g`` in which the kernel never ran short of TCP memory: every
    :data:`MEMORY_ARTEFACTS` column that ``g`` has is 0 (a run made before a column was
    counted, NaN there, is kept)."""
    keep = pd.Series(True, index=g.index)
    for col in MEMORY_ARTEFACTS:
        if col in g:
            keep &= ~(pd.to_numeric(g[col], errors="coerce") > 0)
    return g[keep]


def with_side(f: Finding, text: str) -> Finding:
    """``f`` with ``text`` appended to its side column ("; " between; ``f`` unchanged when
    ``text`` is empty)."""
    return replace(f, side="; ".join(x for x in (f.side, text) if x)) if text else f


def not_measured(id: str, claim: str, needed: str, paper: str = "") -> Finding:
    """The finding for a run that lacks the points: ``needed`` says which would do."""
    return Finding(id=id, claim=claim, verdict=NOT_MEASURED, reason=f"needs {needed}", paper=paper)


def all_of(id: str, claim: str, parts: Sequence[Finding], needed: str, paper: str = "") -> Finding:
    """A claim that must hold in every part (e.g. every link length and n_e): the conjunction.

    holds if every measured part holds; does not hold if any part does not hold;
    inconclusive otherwise; not measured when no part was measured (the parts' reasons,
    or ``needed`` when there are no parts, say which points would be). The numbers shown are those of the deciding part: the first
    that does not hold, else the first inconclusive one, else the one closest to its bound."""
    measured = [p for p in parts if p.verdict != NOT_MEASURED]
    if not measured:
        reasons = list(dict.fromkeys(p.reason for p in parts))  # the parts' own, e.g. "not past saturation"
        return Finding(id=id, claim=claim, verdict=NOT_MEASURED, paper=paper,
                       reason="; ".join(reasons) if reasons else f"needs {needed}")
    fails = [p for p in measured if p.verdict == FAILS]
    unsure = [p for p in measured if p.verdict == INCONCLUSIVE]
    if fails:
        verdict, shown, which = FAILS, fails[0], "the first that does not hold"
    elif unsure:
        verdict, shown, which = INCONCLUSIVE, unsure[0], "the first inconclusive one"
    else:
        verdict, shown, which = HOLDS, min(measured, key=_slack), "the one closest to its bound"
    if len(parts) == 1:
        reason = shown.reason
    else:
        words = {HOLDS: "hold", FAILS: "do not hold", INCONCLUSIVE: "inconclusive"}
        counts = ", ".join(f"{sum(p.verdict == v for p in measured)} {w}" for v, w in words.items()
                           if any(p.verdict == v for p in measured))
        skipped = len(parts) - len(measured)
        reason = (f"{len(measured)} comparisons: {counts}" + (f", {skipped} not measured" if skipped else "")
                  + f"; shown {which}: {shown.reason}")
    return Finding(id=id, claim=claim, verdict=verdict, reason=reason, paper=paper, where=shown.where,
                   a=shown.a, b=shown.b, unit=shown.unit, effect=shown.effect, estimate=shown.estimate,
                   lo=shown.lo, hi=shown.hi, rule=shown.rule, low=shown.low, high=shown.high, side=shown.side,
                   parts=tuple(parts))


def _slack(f: Finding) -> float:
    """Distance of a holding interval from the nearest bound of its claim (smaller = closer)."""
    gaps = [abs(f.lo - b) for b in (f.low, f.high) if b is not None] + \
        [abs(f.hi - b) for b in (f.low, f.high) if b is not None]
    return min(gaps, default=math.inf)


# ---- tables ------------------------------------------------------------------------------

COLUMNS = ["id", "claim", "paper", "verdict", "where", "a", "a_mean", "a_lo95", "a_hi95", "a_n",
           "b", "b_mean", "b_lo95", "b_hi95", "b_n", "unit", "effect", "estimate", "lo95", "hi95",
           "rule", "bound_low", "bound_high", "reason", "side"]


def frame(findings: Sequence[Finding]) -> pd.DataFrame:
    """One row per finding, numeric columns (``findings.csv``; the report's table)."""
    rows = []
    for f in findings:
        row: dict[str, object] = {"id": f.id, "claim": f.claim, "paper": f.paper, "verdict": f.verdict,
                                  "where": f.where}
        for key, g in (("a", f.a), ("b", f.b)):
            row.update({key: g.label if g else "", f"{key}_mean": g.mean if g else math.nan,
                        f"{key}_lo95": g.lo if g else math.nan, f"{key}_hi95": g.hi if g else math.nan,
                        f"{key}_n": g.n if g else 0})
        row.update(unit=f.unit, effect=f.effect, estimate=f.estimate, lo95=f.lo, hi95=f.hi, rule=f.rule,
                   bound_low=math.nan if f.low is None else f.low,
                   bound_high=math.nan if f.high is None else f.high, reason=f.reason, side=f.side)
        rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


def display(table: pd.DataFrame) -> pd.DataFrame:
    """The findings frame in words: one text cell per group and for the effect."""
    def group(r: pd.Series, key: str) -> str:
        if not r[key]:
            return ""
        unit = f" {r['unit']}" if r["unit"] else ""
        return (f"{r[key]}: {_fmt(r[f'{key}_mean'])}{unit} {_iv_text(r[f'{key}_lo95'], r[f'{key}_hi95'])}, "
                f"n = {int(r[f'{key}_n'])}")

    text = ["id", "claim", "paper", "verdict", "where", "a", "b", "unit", "effect", "rule", "reason", "side"]
    table = table.assign(**{c: table[c].fillna("").astype(str) for c in text if c in table})  # e.g. read from CSV
    rows = []
    for _, r in table.iterrows():
        effect = f"{r['effect']} = {_fmt(r['estimate'])} {_iv_text(r['lo95'], r['hi95'])}" if r["effect"] else ""
        rows.append({"id": r["id"], "claim": r["claim"], "verdict": r["verdict"], "paper": r["paper"],
                     "where": r["where"], "a": group(r, "a"), "b": group(r, "b"), "effect (95 % interval)": effect,
                     "rule": r["rule"], "reason": r["reason"], "side": r["side"]})
    return pd.DataFrame(rows, columns=["id", "claim", "verdict", "paper", "where", "a", "b",
                                       "effect (95 % interval)", "rule", "reason", "side"])


def to_markdown(table: pd.DataFrame) -> str:
    """A Markdown table of :func:`display` (no dependency on ``tabulate``)."""
    d = display(table)
    cols = [c for c in d.columns if c != "side" or d[c].astype(bool).any()]

    def cell(v: object) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(r[c]) for c in cols) + " |" for _, r in d.iterrows()]
    return "\n".join(lines) + "\n"


_CSS_CLASS = {HOLDS: "holds", FAILS: "fails", INCONCLUSIVE: "inconclusive", NOT_MEASURED: "not-measured"}
#: style of the verdict cells in the report
CSS = (".verdict{font-weight:bold;white-space:nowrap}.v-holds{background:#cdeccd}.v-fails{background:#f6c6c6}"
       ".v-inconclusive{background:#fbeeb8}.v-not-measured{background:#e4e4e4;color:#555}")


def to_html(table: pd.DataFrame) -> str:
    """An HTML table of :func:`display`, the verdict cells coloured by class ``v-<verdict>``."""
    d = display(table)
    cols = [c for c in d.columns if c != "side" or d[c].astype(bool).any()]
    e = html.escape
    out = ["<table class='findings'><tr>" + "".join(f"<th>{e(c)}</th>" for c in cols) + "</tr>"]
    for _, r in d.iterrows():
        cells = []
        for c in cols:
            if c == "verdict":
                cells.append(f"<td class='verdict v-{_CSS_CLASS.get(r[c], 'x')}'>{e(str(r[c]))}</td>")
            else:
                cells.append(f"<td>{e(str(r[c]))}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def write(findings: Sequence[Finding], out: Path, preamble: str = "") -> pd.DataFrame:
    """Write ``out/findings.csv`` and ``out/findings.md``; return the findings frame.

    Raises OSError when ``out`` is not writable."""
    table = frame(findings)
    table.to_csv(out / "findings.csv", index=False)
    counts = ", ".join(f"{(table['verdict'] == v).sum()} {v}" for v in VERDICTS)
    text = (f"# {TITLE}\n\n" + (preamble.strip() + "\n\n" if preamble else "") + f"{LEGEND}\n\n{counts}.\n\n"
            + to_markdown(table))
    (out / "findings.md").write_text(text)
    return table


def is_findings(title: str, table: pd.DataFrame) -> bool:
    """Whether an analysis table is a findings table (the report shows those first)."""
    return title.startswith(TITLE) and "verdict" in table.columns
