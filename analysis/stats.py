"""Statistics shared by the analyses."""

from __future__ import annotations

import math

from scipy import stats


def mean_ci(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """Mean and the half-width of its Student-t confidence interval (nan for n < 2)."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = sum(values) / n
    if n < 2:
        return mean, math.nan
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, float(stats.t.ppf((1 + level) / 2, n - 1)) * sd / math.sqrt(n)
