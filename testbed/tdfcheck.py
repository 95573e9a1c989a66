"""Time-dilation check: the same point at D and at 2D must give the same paper-unit results.

``testbed check-tdf EXPERIMENT --set ...`` runs the definition (reduced to one sweep
point) twice, at its D and at 2D, each into its own results folder, and compares the
paper-unit metric (default: throughput) of the two: they agree when their 95 % Student-t
intervals over the repetitions overlap. A disagreement means the emulation is not
time-scale invariant at D (kernel timer granularity, CPU saturation): raise D.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from analysis.stats import mean_ci
from testbed.errors import ResultsError


@dataclass(frozen=True)
class Comparison:
    """One metric at D and 2D: means, CI half-widths (paper units) and the verdict."""

    metric: str
    tdf_a: float
    tdf_b: float
    n_a: int
    n_b: int
    mean_a: float
    ci_a: float
    mean_b: float
    ci_b: float

    @property
    def relative_difference(self) -> float:
        return abs(self.mean_b - self.mean_a) / abs(self.mean_a) if self.mean_a else math.inf

    @property
    def agree(self) -> bool:
        """The two 95 % intervals overlap (needs >= 2 repetitions on each side)."""
        if math.isnan(self.ci_a) or math.isnan(self.ci_b):
            return False
        return abs(self.mean_a - self.mean_b) <= self.ci_a + self.ci_b

    def to_data(self) -> dict:
        return {**asdict(self), "relative_difference": self.relative_difference, "agree": self.agree}

    def line(self) -> str:
        verdict = "AGREE" if self.agree else "DIFFER"
        return (f"{self.metric}: D={self.tdf_a:g} {self.mean_a:.4g} ± {self.ci_a:.3g} (n={self.n_a})  "
                f"D={self.tdf_b:g} {self.mean_b:.4g} ± {self.ci_b:.3g} (n={self.n_b})  "
                f"diff {100 * self.relative_difference:.1f}%  -> {verdict}")


def _values(results: Path, metric: str) -> list[float]:
    path = results / "summary.csv"
    if not path.exists() or not path.stat().st_size:
        raise ResultsError(f"{results}: no summary.csv (did the run complete any point?)")
    summary = pd.read_csv(path)
    if metric not in summary:
        raise ResultsError(f"{path}: no column {metric!r} (columns: {', '.join(summary.columns)})")
    return [float(x) for x in summary[metric] if not math.isnan(float(x))]


def compare(results_a: Path, results_b: Path, tdf_a: float, tdf_b: float,
            metric: str = "throughput_bps") -> Comparison:
    """Compare ``metric`` of two results folders of the same single point."""
    a, b = _values(results_a, metric), _values(results_b, metric)
    ma, ca = mean_ci(a)
    mb, cb = mean_ci(b)
    return Comparison(metric, tdf_a, tdf_b, len(a), len(b), ma, ca, mb, cb)
