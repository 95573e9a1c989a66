"""E1's findings: the hybrid-switch paper's claims (spec "What the paper reports", paper
section V) evaluated on a run's repetitions with 95 % intervals (``analysis.findings``).

Input: the summary with each row's configuration parsed (``analysis.e1.configs``:
columns ``cca``, ``arch``, ``n_e``, ``rto_s``, ``load_per_s``, ``length_m``, ``config``,
the measured ``throughput_bps`` / ``max_buffer_bytes``, and ``k``, ``size_scale`` when
present). Every comparison but F4c is made at the paper's initial RTO of 1 ms.

"High load" is the highest load at which both compared configurations were measured.
Relative claims compare ratios of mean throughputs (Fieller's interval). A claim over
several link lengths or n_e values holds only if it holds for each (see
``findings.all_of``). Rows:

- F1a-<cca>: hybrid / all-optical > 1 at high load (every hybrid n_e, every length).
- F1b-<cca>: all-optical collapses: throughput at its highest load / its highest mean
  over the lower loads < 1 (not measured when ``offered_load`` at the highest load is
  below 100 %: not past saturation).
- F1c-<cca>: hybrid holds: the same ratio for hybrid > 1 - MARGIN (non-inferiority:
  "does not fall significantly" read as "falls by less than the margin").
- F2: SAWL / SAW over hybrid > 1 at high load.
- F3a-sack, F3a-msack: over hybrid, throughput at the longest / shortest link length
  within 1 +- MARGIN (equivalence) at high load.
- F3b-sack, F3b-msack: over hybrid at 100 m, SACK (mSACK) / SAWL > 1 at high load.
- F3c: over all-optical, SAW / SACK > 1 at high load.
- F4a-saw, F4a-sawl: electronic / all-optical < 1 at high load.
- F4b: under SACK, fully-buffered hybrid (n_e = k) / electronic > 1 - MARGIN
  (non-inferiority: "equals or slightly beats").
- F4c.1: electronic, RTO 1 s / RTO 1 ms within 1 +- MARGIN (equivalence);
  F4c.2 all-optical and F4c.3 hybrid with n_e < k: RTO 1 s / RTO 1 ms < 1.
- F5-<cca>: the worst hybrid configuration's mean maximum buffer occupancy (largest
  mean over n_e, length and load) < the paper's worst case x (1 + MARGIN), at the
  run's ``size_scale`` (files are scaled, the paper's numbers are at full size).

**The port model's known difference** from the paper's hybrid switch (departures
committed at arrival; docs/optical-switch.md, "Differences from the paper", measured
against the independent simulator by ``make bench``) goes into the side column of every
comparison over hybrid switches, never into a verdict: with n_e < k the model drops more
(up to ``MODEL_PLR_EXCESS``) and its fullest buffer holds fewer packets. Where a claim
favours hybrid (F1a, F1c) the gap works against it; where both sides run over the same
kind of hybrid (F2, F3, F4c.3) its direction is not known; for F5 the side column says
whether the verdict survives the occupancy the model may miss.

**Runs short of TCP memory** (``memory_pressures`` or ``memory_drops`` > 0: the kernel's one
``tcp_mem`` shared by every emulated server ran out; ``findings.memory_clean``) are left
out of every verdict; a finding they would change shows its verdict with them in the
side column. The F4c rows say the initial RTO the kernel used in the "RTO 1 s" runs when
time dilation capped it below 1 s.

**The holding realisation** ``hybrid-hold:N`` (the paper's switch exactly:
docs/hybrid-holding.md) gives every finding over hybrid switches a second number when
the run has it: the same finding evaluated with ``hybrid-hold:N`` rows in place of
``hybrid:N`` (same seeds, loads and lengths), its verdict and estimate [95 % interval]
in the side column (``holding realisation: ...``). The verdict itself stays the port
model's, so that runs with and without holding points read alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import pandas as pd

from analysis.findings import MARGIN, NOT_MEASURED, Finding, against, all_of, compare, memory_clean, not_measured

#: the paper's initial RTO (s): the condition of its Figs. 4/5 curves but "electronic, RTO 1 s"
PAPER_RTO_S = 1e-3
#: the conventional initial RTO (s) of F4c
CONVENTIONAL_RTO_S = 1.0
PAPER_CCAS = ("saw", "sawl", "sack", "msack")
#: the paper's worst case of the mean maximum buffer occupancy over hybrid switches (MB)
PAPER_BUFFER_MB = {"saw": 0.14, "sawl": 0.15, "sack": 1.0, "msack": 5.5}
GBPS = 1e-9
EQUIV = f"equivalence, +-{MARGIN * 100:g} % margin"
NONINF = f"non-inferiority, {MARGIN * 100:g} % margin"
NAMES = {"saw": "SAW", "sawl": "SAWL", "sack": "SACK", "msack": "mSACK"}
#: the port model against the paper's switch on random traces (``make bench``, 100 000
#: packets per configuration, k = 4 and 8; tests/unit/test_oracle.py keeps them bounds):
#: largest excess of its packet loss ratio at hybrid n_e < k (absolute) ...
MODEL_PLR_EXCESS = 0.075
#: ... and how many packets fewer its fullest buffer held at n_e < k ...
MODEL_WAITING_SHORTFALL = 2
#: ... and at n_e = k (relative to the model's)
MODEL_WAITING_SHORTFALL_FULL = 0.2
#: the paper's data packet (B), the unit of the occupancy shortfall
PAPER_PACKET_BYTES = 9064
GAP_AGAINST = (f"port model at n_e < k: up to +{MODEL_PLR_EXCESS:g} loss ratio against the paper's switch "
               "(docs/optical-switch.md): works against this claim")
GAP_UNKNOWN = (f"port model at n_e < k: up to +{MODEL_PLR_EXCESS:g} loss ratio against the paper's switch "
               "(docs/optical-switch.md) on both sides: its effect on this ratio is not known")


def _name(cca: str) -> str:
    return NAMES.get(cca, cca.upper())


#: the architecture of the holding realisation of the hybrid switch, as analysis.e1 parses
#: its spec (its whole spec, e.g. "hybrid-hold:2")
HOLD_ARCH = "hybrid-hold"
#: the findings over hybrid switches (their ids start with these)
HYBRID_FINDINGS = ("F1a", "F1c", "F2", "F3a", "F3b", "F4b", "F4c.3", "F5")


def evaluate(s: pd.DataFrame) -> list[Finding]:
    """Every E1 finding on the configured summary ``s`` (see the module docstring), with
    the holding realisation's second number beside the hybrid ones when ``s`` has
    ``hybrid-hold:N`` rows. Runs in which the kernel ran short of TCP memory
    (``findings.memory_clean``) are left out; a finding whose numbers they would change
    says so in its side column, with its verdict and number with them.

    Raises KeyError when ``s`` lacks the configuration columns of ``analysis.e1.configs``."""
    clean = memory_clean(s)
    out = _with_holding(clean)
    if len(clean) == len(s):
        return out
    every = {f.id: f for f in _with_holding(s)}
    return [f if _same(f, every[f.id]) else replace(f, side=_join(f.side, _memory_note(every[f.id])))
            for f in out]


def _same(f: Finding, g: Finding) -> bool:
    """Whether ``f`` and ``g`` state the same numbers, part for part (by their text, so
    NaN equals NaN)."""
    def numbers(x: Finding) -> str:
        return repr((x.verdict, x.where, x.a, x.b, x.estimate, x.lo, x.hi))

    return (numbers(f) == numbers(g) and len(f.parts) == len(g.parts)
            and all(_same(x, y) for x, y in zip(f.parts, g.parts)))


def _memory_note(with_them: Finding) -> str:
    """What ``with_them`` (the finding over every run) says, for the side column of the
    finding over the runs without TCP memory artefacts."""
    return ("runs short of TCP memory left out (memory pressures or drops: an emulation artefact, docs/e1.md); "
            f"with them: {_verdict_number(with_them)}")


def _with_holding(s: pd.DataFrame) -> list[Finding]:
    """Every E1 finding on ``s``, with the holding realisation's note (see ``evaluate``)."""
    out = _evaluate(s)
    held = _as_hybrid(s)
    if held is None:
        return out
    second = {f.id: f for f in _evaluate(held)}
    return [replace(f, side=_join(f.side, _holding_note(second[f.id], f)))
            if f.id.startswith(HYBRID_FINDINGS) and f.id in second else f for f in out]


def _as_hybrid(s: pd.DataFrame) -> pd.DataFrame | None:
    """``s`` with its ``hybrid-hold:N`` rows as ``hybrid`` n_e = N and its ``hybrid``
    rows left out; None when it has no holding rows."""
    spec = s["arch"].astype(str)
    hold = spec.str.startswith(HOLD_ARCH + ":")
    if not hold.any():
        return None
    out = s[(s["arch"] != "hybrid") | hold].copy()
    h = hold[out.index]
    out.loc[h, "n_e"] = [int(x.partition(":")[2]) for x in out.loc[h, "arch"]]
    out.loc[h, "arch"] = "hybrid"
    return out


def _holding_note(f: Finding, port_model: Finding) -> str:
    """The holding realisation's verdict on the same finding, with its number, and where
    it is from when that differs from the port model's finding (e.g. F5's worst hybrid
    configuration among fewer configurations)."""
    if f.verdict == NOT_MEASURED:
        return ""
    where = f" at {f.where}" if f.where != port_model.where else ""
    return f"holding realisation (hybrid-hold): {_verdict_number(f)}{where}"


def _verdict_number(f: Finding) -> str:
    """``f``'s verdict with its estimate and 95 % interval, e.g. "holds (a / b = 1.3 [1.1, 1.5])"."""
    number = "" if math.isnan(f.estimate) else (
        f" ({f.effect} = {f.estimate:.3g} [{f.lo:.3g}, {f.hi:.3g}]{' ' + f.unit if f.effect == 'a' else ''})")
    return f"{f.verdict}{number}"


def _evaluate(s: pd.DataFrame) -> list[Finding]:
    """Every E1 finding on ``s``, over the rows whose arch is hybrid (the port model)."""
    base = _rows(s, rto=PAPER_RTO_S)
    present = set(s["cca"])
    ccas = list(PAPER_CCAS) + sorted(present - set(PAPER_CCAS))
    out: list[Finding] = []
    out += [_f1a(base, c) for c in ccas]
    out += [_f1b(base, c) for c in ccas]
    out += [_f1c(base, c) for c in ccas]
    out.append(_f2(base))
    out += [_f3a(base, c) for c in ("sack", "msack")]
    out += [_f3b(base, c) for c in ("sack", "msack")]
    out.append(_f3c(base))
    out += [_f4a(base, c) for c in ("saw", "sawl")]
    out.append(_f4b(base))
    out += _f4c(s)
    out += [_f5(base, c) for c in PAPER_BUFFER_MB]
    return out


# ---- selection -------------------------------------------------------------------------

def _rows(s: pd.DataFrame, cca: str | None = None, arch: str | None = None, n_e: int | None = None,
          length: float | None = None, load: float | None = None, rto: float | None = None) -> pd.DataFrame:
    m = pd.Series(True, index=s.index)
    if cca is not None:
        m &= s["cca"] == cca
    if arch is not None:
        m &= s["arch"] == arch
    if n_e is not None:
        m &= s["n_e"] == n_e
    for col, value in (("length_m", length), ("load_per_s", load), ("rto_s", rto)):
        if value is not None:
            m &= s[col].map(lambda v, x=value: math.isclose(v, x))
    return s[m]


def _lengths(s: pd.DataFrame) -> list[float]:
    return sorted(set(s["length_m"]))


def _hybrids(s: pd.DataFrame) -> list[int]:
    return sorted(set(s[s["arch"] == "hybrid"]["n_e"]))


def _m(length: float) -> str:
    return f"{length:g} m"


def _per_s(load: float) -> str:
    return f"{load:g} /s"


def _side(a: pd.DataFrame, b: pd.DataFrame) -> str:
    """Spurious retransmissions of the two groups, when the summary has them (never required)."""
    def frac(g: pd.DataFrame) -> float | None:
        if "spurious_fraction" in g and g["spurious_fraction"].notna().any():
            return float(g["spurious_fraction"].mean())
        if {"spurious_retransmits", "data_segments"} <= set(g.columns) and g["data_segments"].sum() > 0:
            return float(g["spurious_retransmits"].sum() / g["data_segments"].sum())
        return None

    fa, fb = frac(a), frac(b)
    if fa is not None and fb is not None:
        return f"spurious retransmissions / data segments: a {fa:.3g}, b {fb:.3g}"
    if "spurious_retransmits" in a and "spurious_retransmits" in b:
        return (f"spurious retransmissions per run: a {a['spurious_retransmits'].mean():.4g}, "
                f"b {b['spurious_retransmits'].mean():.4g}")
    return ""


def _partial(g: pd.DataFrame) -> bool:
    """Whether ``g`` has rows over hybrid switches with n_e < k (the model's known gap)."""
    if "k" not in g or g.empty:
        return False
    h = g[g["arch"] == "hybrid"]
    return bool((h["n_e"] < pd.to_numeric(h["k"], errors="coerce")).any())


def _join(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


def _at_high_load(id: str, claim: str, a: tuple[str, pd.DataFrame], b: tuple[str, pd.DataFrame], where: str,
                  needed: str, gap: str = "", **rule: object) -> Finding:
    """Throughput ratio a / b at the highest load both were measured at; ``gap`` (the
    model-gap note) goes into the side column when a group runs over hybrid n_e < k."""
    (la, ra), (lb, rb) = a, b
    common = set(ra["load_per_s"]) & set(rb["load_per_s"])
    if not common:
        return not_measured(id, claim, needed)
    top = max(common)
    ga, gb = _rows(ra, load=top), _rows(rb, load=top)
    note = gap if _partial(ga) or _partial(gb) else ""
    return compare(id, claim, (la, ga["throughput_bps"]), (lb, gb["throughput_bps"]), scale=GBPS, unit="Gb/s",
                   where=f"{where}, load {_per_s(top)}", side=_join(_side(ga, gb), note),
                   **rule)  # type: ignore[arg-type]


def _top_vs_peak(id: str, claim: str, rows: pd.DataFrame, where: str, needed: str, gap: str = "",
                 **rule: object) -> Finding:
    """Throughput at the highest load / at the lower load of highest mean throughput; not
    measured when the summary's ``offered_load`` says the highest load offers less than
    the servers' capacity (not past saturation)."""
    loads = sorted(set(rows["load_per_s"]))
    if len(loads) < 2:
        return not_measured(id, claim, needed)
    top = loads[-1]
    offered = _rows(rows, load=top)["offered_load"].mean() if "offered_load" in rows else math.nan
    if offered < 1:
        return not_measured(id, claim, f"a load past saturation: the highest, {_per_s(top)}, offers "
                                       f"{offered * 100:.3g} % of the servers' capacity (offered_load < 100 %)")
    means = {ld: _rows(rows, load=ld)["throughput_bps"].mean() for ld in loads[:-1]}
    peak = max(means, key=lambda ld: -math.inf if math.isnan(means[ld]) else means[ld])
    ga, gb = _rows(rows, load=top), _rows(rows, load=peak)
    note = gap if _partial(ga) else ""
    return compare(id, claim, (f"load {_per_s(top)}", ga["throughput_bps"]),
                   (f"load {_per_s(peak)} (best lower load)", gb["throughput_bps"]), scale=GBPS, unit="Gb/s",
                   where=where, side=_join(_side(ga, gb), note), **rule)  # type: ignore[arg-type]


def _per_length(s: pd.DataFrame, each: Callable[[float], list[Finding]]) -> list[Finding]:
    return [f for length in _lengths(s) for f in each(length)]


# ---- F1 ---------------------------------------------------------------------------------

_F1_PAPER = {"saw": "past saturation hybrid +100 % (10 m), +30 % (100 m) over all-optical",
             "sawl": "past saturation hybrid x3 (10 m), x1.5 (100 m) over all-optical",
             "sack": "hybrid keeps its maximum, all-optical saturates (Figs. 4c, 5c)",
             "msack": "hybrid keeps its maximum, all-optical saturates (Figs. 4d, 5d)"}


def _f1a(s: pd.DataFrame, cca: str) -> Finding:
    id, claim = f"F1a-{cca}", f"{_name(cca)}: hybrid beats all-optical at high load"
    c = _rows(s, cca=cca)
    needed = f"cca = {cca} with switch = all-optical and hybrid:N at a common load and link length"

    def each(length: float) -> list[Finding]:
        opt = _rows(c, arch="all-optical", length=length)
        return [_at_high_load(id, claim, (f"n_e = {n}", _rows(c, arch="hybrid", n_e=n, length=length)),
                              ("n_e = 0", opt), f"{_name(cca)}, {_m(length)}", needed, gap=GAP_AGAINST, low=1.0)
                for n in _hybrids(_rows(c, length=length))]

    return all_of(id, claim, _per_length(c, each), needed, paper=_F1_PAPER.get(cca, "(not in the paper)"))


def _f1b(s: pd.DataFrame, cca: str) -> Finding:
    id, claim = f"F1b-{cca}", f"{_name(cca)}: all-optical throughput collapses past saturation"
    c = _rows(s, cca=cca, arch="all-optical")
    needed = f"cca = {cca}, switch = all-optical at two or more loads"

    def each(length: float) -> list[Finding]:
        return [_top_vs_peak(id, claim, _rows(c, length=length), f"{_name(cca)}, {_m(length)}, n_e = 0", needed,
                             high=1.0)]

    return all_of(id, claim, _per_length(c, each), needed,
                  paper="bufferless throughput drops past saturation" if cca in PAPER_CCAS else "(not in the paper)")


def _f1c(s: pd.DataFrame, cca: str) -> Finding:
    id, claim = f"F1c-{cca}", f"{_name(cca)}: hybrid throughput holds past saturation"
    c = _rows(s, cca=cca, arch="hybrid")
    needed = f"cca = {cca}, switch = hybrid:N at two or more loads"

    def each(length: float) -> list[Finding]:
        return [_top_vs_peak(id, claim, _rows(c, n_e=n, length=length), f"{_name(cca)}, {_m(length)}, n_e = {n}",
                             needed, gap=GAP_AGAINST, low=1 - MARGIN, margin_note=NONINF)
                for n in _hybrids(_rows(c, length=length))]

    return all_of(id, claim, _per_length(c, each), needed,
                  paper="hybrid keeps its maximum performance" if cca in PAPER_CCAS else "(not in the paper)")


# ---- F2, F3 -----------------------------------------------------------------------------

def _f2(s: pd.DataFrame) -> Finding:
    id, claim = "F2", "SAWL beats SAW over hybrid switches at high load"
    needed = "cca = sawl and saw over the same hybrid:N, link length and load"

    def each(length: float) -> list[Finding]:
        at = _rows(s, arch="hybrid", length=length)
        return [_at_high_load(id, claim, ("SAWL", _rows(at, cca="sawl", n_e=n)), ("SAW", _rows(at, cca="saw", n_e=n)),
                              f"{_m(length)}, n_e = {n}", needed, gap=GAP_UNKNOWN, low=1.0) for n in _hybrids(at)]

    return all_of(id, claim, _per_length(s, each), needed,
                  paper="SAWL +50 % over SAW (10 m), >= +20 % (100 m), hybrid, high load")


def _f3a(s: pd.DataFrame, cca: str) -> Finding:
    id, claim = f"F3a-{cca}", f"{_name(cca)} over hybrid switches is insensitive to link length"
    c = _rows(s, cca=cca, arch="hybrid")
    needed = f"cca = {cca} over hybrid:N at link_length = 10 m and 100 m, same load"
    lengths = _lengths(c)
    if len(lengths) < 2:
        return not_measured(id, claim, needed, paper="not sensitive to link length (Figs. 4, 5)")
    short, long = lengths[0], lengths[-1]
    parts = [_at_high_load(id, claim, (_m(long), _rows(c, n_e=n, length=long)),
                           (_m(short), _rows(c, n_e=n, length=short)), f"{_name(cca)}, n_e = {n}", needed,
                           gap=GAP_UNKNOWN, low=1 - MARGIN, high=1 + MARGIN, margin_note=EQUIV)
             for n in _hybrids(c)]
    return all_of(id, claim, parts, needed, paper="not sensitive to link length (Figs. 4, 5)")


def _f3b(s: pd.DataFrame, cca: str) -> Finding:
    id, claim = f"F3b-{cca}", f"{_name(cca)} beats SAWL over hybrid switches at 100 m"
    at = _rows(s, arch="hybrid", length=100.0)
    needed = f"cca = {cca} and sawl over the same hybrid:N at link_length = 100 m, same load"
    parts = [_at_high_load(id, claim, (_name(cca), _rows(at, cca=cca, n_e=n)), ("SAWL", _rows(at, cca="sawl", n_e=n)),
                           f"100 m, n_e = {n}", needed, gap=GAP_UNKNOWN, low=1.0) for n in _hybrids(at)]
    return all_of(id, claim, parts, needed, paper="+40 % over SAWL already at n_e = 2 (100 m, high load)")


def _f3c(s: pd.DataFrame) -> Finding:
    id, claim = "F3c", "SAW beats SACK over all-optical switches"
    needed = "cca = saw and sack over all-optical, same link length and load"

    def each(length: float) -> list[Finding]:
        at = _rows(s, arch="all-optical", length=length)
        return [_at_high_load(id, claim, ("SAW", _rows(at, cca="saw")), ("SACK", _rows(at, cca="sack")), _m(length),
                              needed, low=1.0)]

    return all_of(id, claim, _per_length(s, each), needed, paper="SAW outperforms SACK and mSACK (all-optical)")


# ---- F4 ---------------------------------------------------------------------------------

def _f4a(s: pd.DataFrame, cca: str) -> Finding:
    id, claim = f"F4a-{cca}", f"{_name(cca)}: electronic store-and-forward is worse than all-optical"
    c = _rows(s, cca=cca)
    needed = f"cca = {cca} with switch = electronic and all-optical, same link length and load"

    def each(length: float) -> list[Finding]:
        return [_at_high_load(id, claim, ("electronic, RTO 1 ms", _rows(c, arch="electronic", length=length)),
                              ("n_e = 0", _rows(c, arch="all-optical", length=length)),
                              f"{_name(cca)}, {_m(length)}", needed, high=1.0)]

    return all_of(id, claim, _per_length(c, each), needed,
                  paper="all-optical much superior (store-and-forward adds tau per hop)")


def _full_hybrid(s: pd.DataFrame) -> pd.DataFrame:
    if "k" not in s:
        return s.iloc[0:0]
    return s[(s["arch"] == "hybrid") & (s["n_e"] == pd.to_numeric(s["k"], errors="coerce"))]


def _f4b(s: pd.DataFrame) -> Finding:
    id, claim = "F4b", "SACK: fully-buffered hybrid (n_e = k) equals or slightly beats electronic"
    c = _rows(s, cca="sack")
    full = _full_hybrid(c)
    needed = "cca = sack with switch = hybrid:k (n_e = k, and the k column) and electronic, same length and load"

    def each(length: float) -> list[Finding]:
        return [_at_high_load(id, claim, ("n_e = k", _rows(full, length=length)),
                              ("electronic, RTO 1 ms", _rows(c, arch="electronic", length=length)),
                              f"SACK, {_m(length)}", needed, low=1 - MARGIN, margin_note=NONINF)]

    return all_of(id, claim, _per_length(c, each), needed, paper="electronic 1-2 % below fully-buffered hybrid")


def _f4c(s: pd.DataFrame) -> list[Finding]:
    def rto_pairs(id: str, claim: str, rows: Callable[[pd.DataFrame], list[tuple[str, pd.DataFrame]]],
                  needed: str, paper: str, **rule: object) -> Finding:
        parts = []
        for cca in sorted(set(s["cca"])):
            for length in _lengths(s):
                for where, g in rows(_rows(s, cca=cca, length=length)):
                    parts.append(_at_high_load(id, claim, ("RTO 1 s", _rows(g, rto=CONVENTIONAL_RTO_S)),
                                               ("RTO 1 ms", _rows(g, rto=PAPER_RTO_S)),
                                               f"{_name(cca)}, {_m(length)}, {where}", needed, gap=GAP_UNKNOWN,
                                               **rule))
        return all_of(id, claim, parts, needed, paper=paper)

    def partial_hybrids(g: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
        if "k" not in g:
            return []
        h = g[(g["arch"] == "hybrid") & (g["n_e"] < pd.to_numeric(g["k"], errors="coerce"))]
        return [(f"n_e = {n}", h[h["n_e"] == n]) for n in sorted(set(h["n_e"]))]

    note = _effective_rto_note(s)
    return [replace(f, side=_join(f.side, note)) for f in (
        rto_pairs("F4c.1", "initial RTO 1 s hardly matters for electronic switches",
                  lambda g: [("electronic", g[g["arch"] == "electronic"])],
                  "switch = electronic and electronic@1 s, same CCA, length and load",
                  "RTO 1 s does not influence EPS throughput", low=1 - MARGIN, high=1 + MARGIN, margin_note=EQUIV),
        rto_pairs("F4c.2", "initial RTO 1 s hurts all-optical switches at high load",
                  lambda g: [("n_e = 0", g[g["arch"] == "all-optical"])],
                  "switch = all-optical@1 s beside all-optical (1 ms), same CCA, length and load",
                  "significant drop under high load (text, not in the figures)", high=1.0),
        rto_pairs("F4c.3", "initial RTO 1 s hurts hybrid switches with n_e < k at high load", partial_hybrids,
                  "switch = hybrid:N@1 s beside hybrid:N (1 ms), N < k (and the k column), same CCA, length and load",
                  "significant drop under high load except fully-buffered (text)", high=1.0),
    )]


def _effective_rto_note(s: pd.DataFrame) -> str:
    """What the kernel used in the "RTO 1 s" runs when it is less than 1 s (the summary's
    ``initial_rto_effective_s``, paper s: TCP_RTO_MAX x 1/D caps it under time
    dilation); "" when they used 1 s or did not record it."""
    if "initial_rto_effective_s" not in s:
        return ""
    eff = pd.to_numeric(_rows(s, rto=CONVENTIONAL_RTO_S)["initial_rto_effective_s"], errors="coerce").dropna()
    if eff.empty or eff.min() >= CONVENTIONAL_RTO_S * (1 - 1e-6):
        return ""
    span = f"{eff.min() * 1e3:.3g}" + (f"-{eff.max() * 1e3:.3g}" if eff.max() > eff.min() else "")
    return (f"the kernel's initial RTO in the 'RTO 1 s' runs was {span} ms of paper time, not 1 s "
            "(TCP_RTO_MAX under time dilation, docs/e1.md): the claim is tested at that RTO")


# ---- F5 ---------------------------------------------------------------------------------

def _f5(s: pd.DataFrame, cca: str) -> Finding:
    paper_mb = PAPER_BUFFER_MB[cca]
    id, claim = f"F5-{cca}", f"{_name(cca)}: maximum buffer occupancy is small (about {paper_mb:g} MB)"
    paper = f"worst case over hybrid configurations, mean over seeds: {paper_mb:g} MB (full-size files)"
    needed = f"cca = {cca} over hybrid:N with the max_buffer_bytes column"
    h = _rows(s, cca=cca, arch="hybrid")
    if h.empty or "max_buffer_bytes" not in h or h["max_buffer_bytes"].isna().all():
        return not_measured(id, claim, needed, paper=paper)
    keys = ["n_e", "length_m", "load_per_s"]
    means = h.groupby(keys)["max_buffer_bytes"].mean()
    n_e, length, load = means.idxmax()
    worst = _rows(h, n_e=n_e, length=length, load=load)
    scale = ", ".join(sorted(set(map(str, s["size_scale"])))) if "size_scale" in s else "not recorded"
    f = against(id, claim, (f"n_e = {n_e}", worst["max_buffer_bytes"]), high=paper_mb * (1 + MARGIN),
                scale=1e-6, unit="MB", paper=paper,
                where=f"{_name(cca)}, {_m(length)}, load {_per_s(load)}: the largest of {len(means)} hybrid "
                      f"configuration means; size_scale {scale}",
                margin_note=f"the paper's {paper_mb:g} MB + {MARGIN * 100:g} %; files x {scale}")
    return replace(f, side=_join(f.side, _f5_gap(f, worst)))


def _f5_gap(f: Finding, worst: pd.DataFrame) -> str:
    """Whether F5's verdict survives the occupancy the port model may miss: its fullest
    buffer held up to MODEL_WAITING_SHORTFALL packets fewer than the paper's switch's at
    n_e < k, MODEL_WAITING_SHORTFALL_FULL less at n_e = k (random traces)."""
    if f.verdict not in ("holds", "does not hold") or math.isnan(f.hi) or f.high is None:
        return ""
    full = not _partial(worst)
    extra_mb = (f.hi * MODEL_WAITING_SHORTFALL_FULL if full
                else MODEL_WAITING_SHORTFALL * PAPER_PACKET_BYTES * 1e-6)
    missed = (f"{MODEL_WAITING_SHORTFALL_FULL:.0%} (n_e = k)" if full
              else f"{MODEL_WAITING_SHORTFALL} x {PAPER_PACKET_BYTES} B (n_e < k)")
    if f.verdict == "holds":
        kept = f.hi + extra_mb < f.high
        return (f"port model's fullest buffer up to {missed} below the paper's switch's (random traces): "
                f"upper end {f.hi + extra_mb:.3g} MB with it, {'verdict unchanged' if kept else 'would be inconclusive'}")
    return (f"port model's fullest buffer up to {missed} below the paper's switch's (random traces): "
            "it can only raise the occupancy, verdict unchanged")
