"""A family's summary metrics: the columns one point adds to ``summary.csv``.

Every family declares its metrics (name, unit, one-line meaning). The results store
checks each summary row when it is written (:func:`check_row`: every declared metric
present, nothing undeclared) and the report checks ``summary.csv`` when it is read
(:func:`check_columns`: every declared metric present), so a renamed or forgotten
column is an error naming it, never a silently missing curve.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from testbed.errors import ResultsError


class SummaryError(ResultsError):
    """A summary row or summary.csv does not match the family's declared metrics."""


@dataclass(frozen=True)
class Metric:
    """One summary column: ``name`` (e.g. ``throughput_bps``), ``unit`` in paper units
    (``bit/s``, ``s``, ``B``, ``1`` for ratios and fractions, ``count``) and ``doc``,
    one line saying what it measures."""

    name: str
    unit: str
    doc: str
    #: the date (YYYY-MM-DD) the column was added to a family that had runs already;
    #: a summary.csv written before it may lack the column and is read with it empty
    since: str | None = None


def check_row(metrics: Iterable[Metric], row: Mapping[str, Any], where: str) -> None:
    """Raise SummaryError unless ``row`` has exactly the metrics declared: the message
    names the missing or undeclared column(s) and ``where`` (e.g. the family and point)."""
    names = [m.name for m in metrics]
    missing = [n for n in names if n not in row]
    extra = sorted(set(row) - set(names))
    if missing:
        raise SummaryError(f"{where}: the summary lacks the declared metric(s) {', '.join(missing)}")
    if extra:
        raise SummaryError(f"{where}: the summary has undeclared column(s) {', '.join(extra)}; "
                           "declare them in the family's metrics")


def check_columns(metrics: Iterable[Metric], columns: Collection[str], where: str) -> list[str]:
    """Raise SummaryError naming every declared metric missing from ``columns`` (the
    header of ``where``, a summary.csv), except metrics added later (``since``): their
    names are returned, for the reader to add as empty columns."""
    metrics = list(metrics)
    missing = [m.name for m in metrics if m.name not in columns and m.since is None]
    if missing:
        raise SummaryError(f"{where}: no column(s) {', '.join(missing)}, which the family declares; "
                           "written by another version of the family?")
    return [m.name for m in metrics if m.name not in columns]
