"""E5's XCP parameter study (the paper's Fig. 4, III-B-1): average flow goodput and core
drop rate vs gamma, one line per alpha, with shared buffering at a small (1 kB) and a
large (100 kB) optical RAM per link, and the paper's three claims about it judged with
95 % intervals (``analysis.findings``). Input: the rows of ``e5-optram`` summaries with
an XCP pacing (``experiments/e5-xcp-params.toml``, or any run that sweeps ``xcp_alpha``
/ ``xcp_gamma``).

A sweep is the rows that share everything but ``xcp_alpha``, ``xcp_beta`` and
``xcp_gamma`` (the context of ``analysis.e5`` without them, plus arch, pacing and B); a
(alpha, gamma) pair of it is a point, its rows the repetitions. ``xcp_beta`` is left out
of the key because the paper moves it with alpha (beta = alpha^2 sqrt 2; the
definition's ``xcp_beta = "stable"``).

Rules, pre-registered 2026-11-24 before any run of the sweep (the paper's words; its
figures have no error bars, so each claim is read as a direction between the sweep's
extremes, judged like ``analysis.e5_findings``'s F-claims):

- **P1** at a small buffer, goodput increases with alpha ("when the buffer is small, the
  average flow goodput and core packet drop rate increase with increasing alpha
  values"): with ``arch = sb`` and B = :data:`SMALL_B` (1 kB, the paper's Fig. 4a),
  per XCP variant, at gamma = :data:`REFERENCE_GAMMA` (0.1, the paper's choice):
  goodput(largest alpha run) / goodput(smallest alpha run) > 1 (Fieller's interval
  entirely above 1; does not hold entirely at or below 1).
- **P2** at a small buffer, the core drop rate increases with alpha (same sentence,
  Fig. 4c): as P1 with ``core_drop_rate`` (Welch's difference when the smaller alpha's
  mean drop rate is 0).
- **P3** at a large buffer, goodput increases as gamma decreases ("when the buffer is
  larger ... As gamma decreases or alpha increases, the average goodput increases",
  Fig. 4b): B = :data:`LARGE_B` (100 kB), at alpha = :data:`REFERENCE_ALPHA` (0.4, the
  paper's choice): goodput(smallest gamma run) / goodput(largest gamma run) > 1.
- **P4** at a large buffer, no packet is dropped in the core ("As no packets were
  dropped in the core when the shared buffer size per link was 100 KBytes, this has not
  been plotted"): every run of the sweep at B = 100 kB has ``core_drop_rate`` = 0 (a
  count, no interval: holds if all are 0, does not hold otherwise).

The paper's "relatively less sensitive to the gamma parameter" at 1 kB is shown in the
figures and the table (the goodput ratio between the gamma extremes beside P1's), not
judged: "relatively" names no margin. Without the rows a claim needs it is "not
measured", the reason naming the definition to run.

A second reading of P1-P3, paired by seed (fixed 2026-11-30, before any run of the
sweep; as ``analysis.e5_findings``'s of F1-F4d, not the verdict): every point's
repetition r has the same flows, so the extremes' runs are also compared seed by seed
(Fieller's interval for paired samples); the findings' side column gives it and the
report's comparisons table lists each part in both readings.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from analysis.e5_findings import (BUFFER_COL, DROPS, GOODPUT, KBPS, PAIR_KEY, buffer_text,  # noqa: E402
                                  comparison_table, is_xcp, pacing_name, pair_values, same_buffer)
from analysis.findings import FAILS, HOLDS, INCONCLUSIVE, Finding, all_of, compare, not_measured  # noqa: E402
from analysis.stats import mean_ci  # noqa: E402

#: the swept parameters (left out of a sweep's key)
SWEPT = ("xcp_alpha", "xcp_beta", "xcp_gamma")
#: the paper's small and large optical RAM per link (Fig. 4a/c and 4b), bytes
SMALL_B = 1000.0
LARGE_B = 100_000.0
#: the paper's chosen alpha and gamma (III-B-1), where P1/P2 and P3 hold the other fixed
REFERENCE_ALPHA = 0.4
REFERENCE_GAMMA = 0.1
NEEDED = "SB rows with XCP pacing at several xcp_alpha / xcp_gamma: testbed run e5-xcp-params (docs/e5.md)"
CLAIMS = {
    "P1": ("at a small buffer (SB, 1 kB per link) goodput increases with alpha",
           "'when the buffer is small, the average flow goodput and core packet drop rate increase with "
           "increasing alpha values' (III-B-1, Fig. 4a)"),
    "P2": ("at a small buffer (SB, 1 kB per link) the core drop rate increases with alpha",
           "same sentence (III-B-1, Fig. 4c)"),
    "P3": ("at a large buffer (SB, 100 kB per link) goodput increases as gamma decreases",
           "'when the buffer is larger, goodput becomes more sensitive to the gamma parameter. As gamma decreases "
           "or alpha increases, the average goodput increases' (III-B-1, Fig. 4b)"),
    "P4": ("at a large buffer (SB, 100 kB per link) no packet is dropped in the core",
           "'no packets were dropped in the core when the shared buffer size per link was 100 KBytes' (III-B-1)"),
}
ALPHA_COLOURS = ("C0", "C1", "C2", "C3", "C4", "C5", "C6", "C7")


def _num(g: pd.DataFrame, col: str) -> pd.Series:
    return pd.to_numeric(g[col], errors="coerce") if col in g else pd.Series(math.nan, index=g.index)


def sweeps(s: pd.DataFrame, context: Iterable[str]) -> list[pd.DataFrame]:
    """The XCP sweeps of ``s`` (prepared rows): groups of XCP rows sharing ``context``
    (without :data:`SWEPT`), arch, pacing and B, with at least two (alpha, gamma)
    pairs, largest first."""
    if s.empty or "pacing" not in s or not {"xcp_alpha", "xcp_gamma"} <= set(s.columns):
        return []
    x = s[s["pacing"].map(is_xcp)].copy()
    if x.empty:
        return []
    x["_alpha"], x["_gamma"] = _num(x, "xcp_alpha"), _num(x, "xcp_gamma")
    keys = [c for c in context if c in x and c not in SWEPT] + ["arch", "pacing", BUFFER_COL]
    out = [g for _, g in x.groupby(keys, dropna=False, sort=False)
           if len(g[["_alpha", "_gamma"]].drop_duplicates()) >= 2]
    return sorted(out, key=len, reverse=True)


def _at(g: pd.DataFrame, alpha: float | None = None, gamma: float | None = None) -> pd.DataFrame:
    keep = pd.Series(True, index=g.index)
    if alpha is not None:
        keep &= (g["_alpha"] - alpha).abs() < 1e-9
    if gamma is not None:
        keep &= (g["_gamma"] - gamma).abs() < 1e-9
    return g[keep]


def _where(g: pd.DataFrame) -> str:
    r = g.iloc[0]
    return f"{r['arch']}, {pacing_name(str(r['pacing']))}, B = {buffer_text(float(r[BUFFER_COL]))}"


def table(sweep_list: list[pd.DataFrame]) -> pd.DataFrame:
    """Per sweep and (alpha, gamma): beta (as run), runs, goodput and core drop rate
    (means with 95 % intervals)."""
    out = []
    for g in sweep_list:
        for (a, gm), pt in g.groupby(["_alpha", "_gamma"], sort=True):
            good, drop = _num(pt, GOODPUT).dropna(), _num(pt, DROPS).dropna()
            gmean, ghalf = mean_ci(list(good))
            dmean, dhalf = mean_ci(list(drop))
            out.append({"sweep": _where(g), "alpha": a, "gamma": gm,
                        "beta": "/".join(sorted(set(pt["xcp_beta"].astype(str)))) if "xcp_beta" in pt else "",
                        "runs": len(pt), "goodput [kB/s]": gmean * KBPS, "goodput +-95 %": ghalf * KBPS,
                        "core drop rate": dmean, "drop +-95 %": dhalf})
    return pd.DataFrame(out)


def figures(sweep_list: list[pd.DataFrame], out: Path) -> list[Path]:
    """Per sweep: goodput vs gamma and core drop rate vs gamma (log; runs with no drop
    not drawable), a line per alpha with 95 % error bars (paper Fig. 4)."""
    made = []
    for i, g in enumerate(sweep_list):
        for column, stem, label in ((GOODPUT, "goodput", "Average flow goodput (Bytes/s)"),
                                    (DROPS, "drops", "Packet drop rate in the core nodes")):
            log_y = column == DROPS
            fig, ax = plt.subplots(figsize=(6.4, 4.4))
            drawn = 0
            for j, (a, ga) in enumerate(g.groupby("_alpha", sort=True)):
                xs, ys, err = [], [], []
                for gm, pt in ga.groupby("_gamma", sort=True):
                    mean, half = mean_ci(list(_num(pt, column).dropna()))
                    if math.isnan(mean) or (log_y and not mean > 0):
                        continue
                    xs.append(gm)
                    ys.append(mean)
                    err.append(0.0 if math.isnan(half) else (min(half, mean * 0.999) if log_y else half))
                if xs:
                    ax.errorbar(xs, ys, yerr=err, fmt="-o", capsize=3, ms=4, color=ALPHA_COLOURS[j % 8],
                                label=f"alpha = {a:g}")
                    drawn += 1
            if not drawn:
                plt.close(fig)
                continue
            if log_y:
                ax.set_yscale("log")
            else:
                ax.set_ylim(bottom=0)
            ax.set(xlabel="gamma", ylabel=label)
            ax.set_title(f"{label} vs gamma per alpha (cf. paper Fig. 4)\n{_where(g)}", fontsize=8)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
            fig.tight_layout()
            path = out / f"xcp_params_{i}_{stem}.png"
            fig.savefig(path, dpi=100)
            plt.close(fig)
            made.append(path)
    return made


def _extremes(g: pd.DataFrame, col: str) -> tuple[float, float] | None:
    vals = sorted(set(g[col].dropna()))
    return (vals[0], vals[-1]) if len(vals) >= 2 else None


def _at_buffer(sweep_list: list[pd.DataFrame], b: float) -> list[pd.DataFrame]:
    return [g for g in sweep_list if g["arch"].iloc[0] == "sb" and same_buffer(float(g[BUFFER_COL].iloc[0]), b)]


def _direction(fid: str, sweep_list: list[pd.DataFrame], b: float, column: str, vary: str, fixed: float,
               reverse: bool, paired: bool = False) -> Finding:
    """``column`` at the extreme of ``vary`` (``_alpha`` / ``_gamma``) against the other
    extreme, the other parameter at ``fixed``: ratio > 1 (``reverse``: smallest over
    largest); ``paired``: the runs paired by seed (``analysis.e5_findings.pair_values``)."""
    claim, paper = CLAIMS[fid]
    other = "_gamma" if vary == "_alpha" else "_alpha"
    parts = []
    for g in _at_buffer(sweep_list, b):
        at = g[(g[other] - fixed).abs() < 1e-9]
        ext = _extremes(at, vary)
        if ext is None:
            continue
        lo, hi = ext
        first, second = (lo, hi) if reverse else (hi, lo)
        name = vary.strip("_")
        ga, gb = at[(at[vary] - first).abs() < 1e-9], at[(at[vary] - second).abs() < 1e-9]
        scale, unit = (KBPS, "kB/s") if column == GOODPUT else (1.0, "")
        va, vb = pair_values(ga, gb, column, paired)
        parts.append(compare(fid, claim, (f"{name} = {first:g}", va), (f"{name} = {second:g}", vb), low=1.0,
                             scale=scale, unit=unit, paper=paper, where=f"{_where(g)}, {other.strip('_')} = {fixed:g}",
                             paired=paired))
    return all_of(fid, claim, parts, f"{NEEDED}; at B = {buffer_text(b)} with {other.strip('_')} = {fixed:g} and "
                  f"two {vary.strip('_')} values", paper)


def p4(sweep_list: list[pd.DataFrame]) -> Finding:
    """P4: every run at B = LARGE_B has no core drop."""
    claim, paper = CLAIMS["P4"]
    runs = pd.concat(_at_buffer(sweep_list, LARGE_B)) if _at_buffer(sweep_list, LARGE_B) else pd.DataFrame()
    if runs.empty:
        return not_measured("P4", claim, f"{NEEDED}; at B = {buffer_text(LARGE_B)}", paper)
    drops = _num(runs, DROPS)
    n_drop = int((drops > 0).sum())
    unknown = int(drops.isna().sum())
    verdict = FAILS if n_drop else (INCONCLUSIVE if unknown else HOLDS)
    reason = f"{n_drop} of {len(runs)} runs dropped in the core (largest drop rate {drops.max():.3g})"
    if unknown:
        reason += f"; {unknown} runs without a drop rate (no core packets in the window)"
    return Finding(id="P4", claim=claim, verdict=verdict, paper=paper, where=f"SB, B = {buffer_text(LARGE_B)}",
                   reason=reason, estimate=float(drops.max()))


def _directions(sweep_list: list[pd.DataFrame], paired: bool) -> list[Finding]:
    """P1-P3, as independent samples or paired by seed."""
    return [_direction("P1", sweep_list, SMALL_B, GOODPUT, "_alpha", REFERENCE_GAMMA, False, paired),
            _direction("P2", sweep_list, SMALL_B, DROPS, "_alpha", REFERENCE_GAMMA, False, paired),
            _direction("P3", sweep_list, LARGE_B, GOODPUT, "_gamma", REFERENCE_ALPHA, True, paired)]


def evaluate(sweep_list: list[pd.DataFrame]) -> list[Finding]:
    """P1-P4 (module docstring) on the sweeps of :func:`sweeps`: the verdicts
    (independent samples; :func:`second_reading` reads P1-P3 paired by seed)."""
    return _directions(sweep_list, False) + [p4(sweep_list)]


def _seeded(sweep_list: list[pd.DataFrame]) -> bool:
    return bool(sweep_list) and all(PAIR_KEY in g for g in sweep_list)


def second_reading(sweep_list: list[pd.DataFrame]) -> list[Finding]:
    """P1-P3 paired by seed (a second reading, not the verdicts); [] without sweeps or
    a seed column."""
    return _directions(sweep_list, True) if _seeded(sweep_list) else []


def comparisons(sweep_list: list[pd.DataFrame]) -> pd.DataFrame:
    """Every comparison of P1-P3 in both readings, as independent samples (their
    verdicts) and paired by seed (``analysis.e5_findings.comparison_table``); empty
    without sweeps or a seed column."""
    return comparison_table(evaluate(sweep_list), second_reading(sweep_list))
