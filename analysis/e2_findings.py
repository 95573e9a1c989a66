"""E2's findings: the OBS multi-granular paper's claims (spec "What the paper reports",
paper section IV and the conclusions) evaluated on a run's repetitions with 95 %
intervals (``analysis.findings``).

Input: summary.csv of the E2 family (one row per run; ``path_class`` slow | fast,
``wm`` in segments, ``pl`` the burst loss probability asked, ``throughput_bps`` the
aggregate average throughput scaled to the paper's N, ``loss_events_rto``,
``loss_events_fast``, ``segments_per_source_per_burst``). A point is one
(path class, Wm, Pl); its repetitions are the runs. Rows (rules in docs/e2.md, Findings):

- F1a: slow: most loss events are detected by RTO: per run, loss_events_rto /
  (loss_events_rto + loss_events_fast) > 1/2, at every slow point with loss events.
- F1b: slow: a burst holds many segments of each source: segments_per_source_per_burst
  > :data:`MANY_SEGMENTS` (">> 3", the duplicate-ACK threshold) at every slow point.
- F2-<Pl>: slow: Wm = 512 is best: throughput(512) / throughput(Wm) > 1 - MARGIN
  (non-inferiority) for every other Wm measured, per Pl (1e-3 always listed).
- F3a: fast: most loss events are detected by triple duplicate ACKs: loss_events_fast /
  (both) > 1/2 at every fast point with loss events.
- F3b-<Pl>: fast: Wm above 64 brings nothing: throughput(Wm) / throughput(64) within
  1 +- MARGIN (equivalence) for every Wm > 64, per Pl >= 1e-3 (1e-3 always listed).
- F3c: fast: throughput is very sensitive to Pl: at Wm 64, throughput(10 Pl) /
  throughput(Pl) < :data:`SENSITIVE_MAX` for every decade of Pl measured whose upper
  end is >= 1e-3.
- F4a: for Pl >= 1e-3 fast (Wm 64) and slow (Wm 512) are alike: fast / slow within
  1 +- :data:`ALIKE_MARGIN` (equivalence) at every such Pl measured in both.
- F4b: fast is higher when Pl is low: fast (Wm 64) / slow (Wm 512) > 1 at the lowest
  Pl below 1e-3 measured in both.

Helpers for selecting points (:func:`rows`, :func:`pl_text`, :func:`pls`) live here so
that ``analysis.e2`` and this module select the same rows; ``analysis.findings`` is not
changed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import pandas as pd

from analysis.findings import MARGIN, Finding, against, all_of, compare, not_measured

SLOW, FAST = "slow", "fast"
#: the paper's main burst loss probability (Figs. 3, 5, 8-10)
MAIN_PL = 1e-3
#: the slow connections' best Wm (paper) and the fast connections' sufficient one
SLOW_BEST_WM, FAST_WM = 512, 64
#: ">> 3" segments of one source per burst (3 = the duplicate-ACK threshold): above 10,
#: i.e. more than three times the threshold (the paper: ~154 at Wm 512, Pl 1e-3)
MANY_SEGMENTS = 10.0
#: "very sensitive to Pl": a tenfold Pl costs more than half the throughput (the paper:
#: 2.2 Gb/s at 1e-3 -> 298 Mb/s at 1e-2, x 0.135)
SENSITIVE_MAX = 0.5
#: "roughly the same" (fast vs slow at Pl >= 1e-3, despite 40 vs 10 Gb/s): +-25 %, wider
#: than the +-10 % of "brings nothing", fixed before any E2 run
ALIKE_MARGIN = 0.25
GBPS = 1e-9
EQUIV = f"equivalence, +-{MARGIN * 100:g} % margin"
NONINF = f"non-inferiority, {MARGIN * 100:g} % margin"
ALIKE = f"equivalence, +-{ALIKE_MARGIN * 100:g} % margin"


# ---- selection -------------------------------------------------------------------------

def pl_text(pl: float) -> str:
    """``1e-3`` for 0.001, ``2.5e-4``, ``0`` for 0: a burst loss probability in short."""
    if pl == 0:
        return "0"
    mant, exp = f"{pl:.3e}".split("e")
    mant = mant.rstrip("0").rstrip(".")
    return f"{mant}e{int(exp)}"


def same_pl(a: float, b: float) -> bool:
    """Whether two Pl values are the same point (relative tolerance 1e-6)."""
    return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-15)


def rows(s: pd.DataFrame, path_class: str | None = None, wm: int | None = None,
         pl: float | None = None) -> pd.DataFrame:
    """The summary rows of one path class, Wm (segments) and/or Pl (any left None).

    Raises KeyError when ``s`` lacks ``path_class``, ``wm`` or ``pl``."""
    m = pd.Series(True, index=s.index)
    if path_class is not None:
        m &= s["path_class"].astype(str) == path_class
    if wm is not None:
        m &= pd.to_numeric(s["wm"], errors="coerce") == wm
    if pl is not None:
        m &= s["pl"].map(lambda v, x=pl: same_pl(v, x))
    return s[m]


def pls(s: pd.DataFrame) -> list[float]:
    """The distinct Pl values of ``s``, ascending (values within tolerance merged)."""
    out: list[float] = []
    for v in sorted(float(x) for x in s["pl"].dropna()):
        if not out or not same_pl(out[-1], v):
            out.append(v)
    return out


def wms(s: pd.DataFrame) -> list[int]:
    """The distinct Wm values of ``s`` (segments), ascending."""
    return sorted({int(v) for v in pd.to_numeric(s["wm"], errors="coerce").dropna()})


def _where(path_class: str, wm: int | None, pl: float | None) -> str:
    parts = [path_class] + ([f"Wm {wm}"] if wm is not None else []) + ([f"Pl {pl_text(pl)}"] if pl is not None else [])
    return ", ".join(parts)


def rto_fraction(g: pd.DataFrame) -> pd.Series:
    """Per run: loss events detected by RTO / all loss events (nan for a run without any)."""
    rto = pd.to_numeric(g["loss_events_rto"], errors="coerce")
    fast = pd.to_numeric(g["loss_events_fast"], errors="coerce")
    total = rto + fast
    return (rto / total).where(total > 0)


def _side(g: pd.DataFrame) -> str:
    """Artefacts of a group beside a verdict (never in it): spurious retransmissions, lateness."""
    bits = []
    if {"spurious_retrans_segs", "retrans_segs"} <= set(g.columns) and g["retrans_segs"].sum() > 0:
        frac = g["spurious_retrans_segs"].sum() / g["retrans_segs"].sum()
        bits.append(f"spurious / retransmitted segments {frac:.3g}")
    if "lateness_max_s" in g and g["lateness_max_s"].notna().any():
        bits.append(f"lateness max {g['lateness_max_s'].max() * 1e6:.3g} us")
    return "; ".join(bits)


# ---- the findings ----------------------------------------------------------------------

def evaluate(s: pd.DataFrame) -> list[Finding]:
    """Every E2 finding on the summary ``s`` (see the module docstring); the ``where``
    column carries each class's scale (n_paper / n_sources, :func:`scale_of`).

    Raises KeyError when ``s`` lacks ``path_class``, ``wm`` or ``pl``."""
    slow, fast = f", scale {scale_of(rows(s, SLOW))}", f", scale {scale_of(rows(s, FAST))}"
    both = f", scale fast {scale_of(rows(s, FAST))}, slow {scale_of(rows(s, SLOW))}"
    out = [_detection("F1a", s, SLOW, slow), _segments(s, slow)]
    out += [_f2(s, pl, slow) for pl in _with_main(pls(rows(s, SLOW)))]
    out.append(_detection("F3a", s, FAST, fast))
    fast_pls = [p for p in pls(rows(s, FAST)) if p >= MAIN_PL or same_pl(p, MAIN_PL)]
    out += [_f3b(s, pl, fast) for pl in _with_main(fast_pls)]
    out += [_f3c(s, fast), _f4a(s, both), _f4b(s, both)]
    return out


def scale_of(g: pd.DataFrame) -> str:
    """The scale n_paper / n_sources of the runs ``g`` (``20``; ``10/20`` when mixed,
    ``?`` without them or the columns)."""
    if g.empty or not {"n_paper", "n_sources"} <= set(g.columns):
        return "?"
    ratio = pd.to_numeric(g["n_paper"], errors="coerce") / pd.to_numeric(g["n_sources"], errors="coerce")
    return "/".join(f"{v:g}" for v in sorted(set(ratio.dropna()))) or "?"


def _with_main(values: Iterable[float]) -> list[float]:
    vals = list(values)
    return vals if any(same_pl(v, MAIN_PL) for v in vals) else sorted(vals + [MAIN_PL])


def _points(s: pd.DataFrame, path_class: str) -> list[tuple[int, float]]:
    c = rows(s, path_class)
    return [(w, p) for w in wms(c) for p in pls(rows(c, wm=w))]


_DETECTION = {
    SLOW: ("slow: most losses are detected by RTO", "RTO",
           "always by RTO, cwnd falls to 1 (Figs. 5-7: Wm 512, Pl 1e-3, 1e-4, 1e-2)"),
    FAST: ("fast: most losses are detected by triple duplicate ACKs", "triple dupACK",
           "mostly triple dupACK (Figs. 8-12); 'no more than one segment' per source in a lost burst"),
}


def _detection(id: str, s: pd.DataFrame, path_class: str, suffix: str) -> Finding:
    """The fraction of loss events detected by RTO (slow) or by triple dupACK (fast) > 1/2
    at every point of the class with loss events."""
    claim, how, paper = _DETECTION[path_class]
    needed = (f"path_class = {path_class} runs with loss_events_rto and loss_events_fast and at least one loss "
              f"event")
    if not {"loss_events_rto", "loss_events_fast"} <= set(s.columns):
        return not_measured(id, claim, needed + " (columns missing)", paper=paper)
    parts = []
    for w, p in _points(s, path_class):
        g = rows(s, path_class, w, p)
        frac = rto_fraction(g)
        if path_class == FAST:
            frac = 1 - frac
        if frac.isna().all():
            parts.append(not_measured(id, claim, f"loss events at {_where(path_class, w, p)} (none in "
                                                 f"{len(g)} runs)", paper=paper))
            continue
        parts.append(against(id, claim, (f"fraction by {how}", frac), low=0.5, paper=paper,
                             where=_where(path_class, w, p) + suffix, side=_side(g)))
    return all_of(id, claim, parts, needed, paper=paper)


def _segments(s: pd.DataFrame, suffix: str) -> Finding:
    id, claim = "F1b", f"slow: a burst holds many segments of each source (>> 3: more than {MANY_SEGMENTS:g})"
    paper = "12 360 segments per burst, ~154 per source per burst (Wm 512, Pl 1e-3)"
    needed = "path_class = slow runs with segments_per_source_per_burst"
    if "segments_per_source_per_burst" not in s:
        return not_measured(id, claim, needed + " (column missing)", paper=paper)
    parts = []
    for w, p in _points(s, SLOW):
        g = rows(s, SLOW, w, p)
        if g["segments_per_source_per_burst"].isna().all():   # no burst closed in any run
            parts.append(not_measured(id, claim, f"bursts at {_where(SLOW, w, p)} (none in {len(g)} runs)",
                                      paper=paper))
            continue
        parts.append(against(id, claim, ("segments per source per burst", g["segments_per_source_per_burst"]),
                             low=MANY_SEGMENTS, paper=paper, where=_where(SLOW, w, p) + suffix,
                             margin_note="over 3 x the duplicate-ACK threshold of 3"))
    return all_of(id, claim, parts, needed, paper=paper)


def _ratio(id: str, claim: str, a: tuple[str, pd.DataFrame], b: tuple[str, pd.DataFrame], where: str,
           paper: str, **rule: object) -> Finding:
    (la, ga), (lb, gb) = a, b
    side = "; ".join(x for x in (f"a: {_side(ga)}" if _side(ga) else "", f"b: {_side(gb)}" if _side(gb) else "") if x)
    return compare(id, claim, (la, ga["throughput_bps"]), (lb, gb["throughput_bps"]), scale=GBPS, unit="Gb/s",
                   where=where, paper=paper, side=side, **rule)  # type: ignore[arg-type]


def _wm_claim(id: str, claim: str, paper: str, s: pd.DataFrame, path_class: str, pl: float, ref_wm: int,
              others: list[int], ref_first: bool, suffix: str, **rule: object) -> Finding:
    """Throughput at ``ref_wm`` against each Wm of ``others`` at one Pl (``ref_first``:
    ref / other, else other / ref); not measured without the reference or another Wm."""
    at = rows(s, path_class, pl=pl)
    ref = (f"Wm {ref_wm}", rows(at, wm=ref_wm))
    needed = (f"path_class = {path_class}, Pl {pl_text(pl)} at Wm = {ref_wm} and at least one "
              + ("other Wm" if ref_first else "Wm above it"))
    if ref[1].empty or not others:
        return not_measured(id, claim, needed, paper=paper)
    parts = []
    for w in others:
        other = (f"Wm {w}", rows(at, wm=w))
        a, b = (ref, other) if ref_first else (other, ref)
        parts.append(_ratio(id, claim, a, b, _where(path_class, None, pl) + suffix, paper, **rule))
    return all_of(id, claim, parts, needed, paper=paper)


def _f2(s: pd.DataFrame, pl: float, suffix: str) -> Finding:
    paper = ("Wm 512 best; ideal 5.592 Gb/s is the curve's start (Fig. 3)" if same_pl(pl, MAIN_PL)
             else "Wm 512 best at low Pl, Wm matters less as Pl grows (Fig. 4, analytical)")
    others = [w for w in wms(rows(s, SLOW, pl=pl)) if w != SLOW_BEST_WM]
    return _wm_claim(f"F2-{pl_text(pl)}", f"slow: Wm = {SLOW_BEST_WM} is best, Pl {pl_text(pl)}", paper, s, SLOW,
                     pl, SLOW_BEST_WM, others, True, suffix, low=1 - MARGIN, margin_note=NONINF)


def _f3b(s: pd.DataFrame, pl: float, suffix: str) -> Finding:
    paper = ("throughput does not depend on Wm, converges near 2.2 Gb/s (Fig. 3)" if same_pl(pl, MAIN_PL)
             else "Wm 64 cannot be fully exploited (Fig. 11, Pl 1e-2: 298 Mb/s)")
    above = [w for w in wms(rows(s, FAST, pl=pl)) if w > FAST_WM]
    return _wm_claim(f"F3b-{pl_text(pl)}", f"fast: Wm above {FAST_WM} brings nothing, Pl {pl_text(pl)}", paper, s,
                     FAST, pl, FAST_WM, above, False, suffix, low=1 - MARGIN, high=1 + MARGIN, margin_note=EQUIV)


def _f3c(s: pd.DataFrame, suffix: str) -> Finding:
    id, claim = "F3c", "fast: throughput is very sensitive to Pl (Wm 64)"
    paper = "2.2 Gb/s at Pl 1e-3 -> 298 Mb/s at 1e-2 (Wm 64): x 0.135; 'drops even for medium Pl, e.g. 1e-3'"
    c = rows(s, FAST, wm=FAST_WM)
    needed = f"path_class = fast, Wm = {FAST_WM} at two Pl a decade apart, the higher >= 1e-3"
    parts = []
    for p in pls(c):
        hi = 10 * p
        if not (hi >= MAIN_PL or same_pl(hi, MAIN_PL)) or rows(c, pl=hi).empty:
            continue
        parts.append(_ratio(id, claim, (f"Pl {pl_text(hi)}", rows(c, pl=hi)), (f"Pl {pl_text(p)}", rows(c, pl=p)),
                            _where(FAST, FAST_WM, None) + suffix, paper, high=SENSITIVE_MAX,
                            margin_note=f"a tenfold Pl costs more than {(1 - SENSITIVE_MAX) * 100:g} %"))
    return all_of(id, claim, parts, needed, paper=paper)


def _fast_vs_slow(s: pd.DataFrame, pl: float) -> tuple[tuple[str, pd.DataFrame], tuple[str, pd.DataFrame]]:
    return ((f"fast, Wm {FAST_WM}", rows(s, FAST, FAST_WM, pl)),
            (f"slow, Wm {SLOW_BEST_WM}", rows(s, SLOW, SLOW_BEST_WM, pl)))


def _common_pls(s: pd.DataFrame) -> list[float]:
    fast = pls(rows(s, FAST, FAST_WM))
    return [p for p in pls(rows(s, SLOW, SLOW_BEST_WM)) if any(same_pl(p, q) for q in fast)]


def _f4a(s: pd.DataFrame, suffix: str) -> Finding:
    id, claim = "F4a", "for Pl >= 1e-3 fast and slow connections are alike"
    paper = "roughly the same for Pl >= 1e-3, despite 40 vs 10 Gb/s (Fig. 13, conclusions)"
    needed = f"fast Wm {FAST_WM} and slow Wm {SLOW_BEST_WM} at a common Pl >= 1e-3"
    parts = [_ratio(id, claim, *_fast_vs_slow(s, p), f"Pl {pl_text(p)}" + suffix, paper,
                    low=1 - ALIKE_MARGIN, high=1 + ALIKE_MARGIN, margin_note=ALIKE)
             for p in _common_pls(s) if p >= MAIN_PL or same_pl(p, MAIN_PL)]
    return all_of(id, claim, parts, needed, paper=paper)


def _f4b(s: pd.DataFrame, suffix: str) -> Finding:
    id, claim = "F4b", "fast connections give higher throughput when Pl is low"
    paper = "fast higher when loss is very low (Fig. 13); 9.2 Gb/s at Pl 1e-4 with Wm 128 (Fig. 12)"
    needed = f"fast Wm {FAST_WM} and slow Wm {SLOW_BEST_WM} at a common Pl below 1e-3"
    low = [p for p in _common_pls(s) if p < MAIN_PL and not same_pl(p, MAIN_PL)]
    if not low:
        return not_measured(id, claim, needed, paper=paper)
    p = low[0]
    return _ratio(id, claim, *_fast_vs_slow(s, p), f"Pl {pl_text(p)} (the lowest measured)" + suffix, paper, low=1.0)
