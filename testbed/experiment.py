"""An experiment as data: a family's parameters (:class:`Param`), a validated
definition (:class:`Definition`) and its points (:class:`Point`).

Reading and validating definition files is :mod:`testbed.definition`'s job; families
(:mod:`testbed.families`), the runner and the results store use these types. This
module imports nothing of the testbed's upper layers, so all of them may import it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from testbed.dilation import TimeDilation
from testbed.errors import DefinitionError
from testbed.units import Dim, Quantity, UnitError, example

if TYPE_CHECKING:
    from testbed.cc.selection import CcaSelection


@dataclass(frozen=True)
class Param:
    """One parameter of a family: its type, default, bounds and meaning.

    ``dim`` is a Dim for quantities, or one of "int", "float", "choice", "bool", "str".
    ``lo``/``hi`` bound the SI value (quantities) or the number; ``lo_open`` excludes lo.
    ``keywords``: words accepted in place of a number (e.g. "stable" for a value the
    family derives from others); parsed as the word itself.
    ``before_added``: the value that describes runs made before the parameter existed
    (the code then behaved as with it), so a summary without its column, or with empty
    cells in it, reads as this in reports (``analysis.report.fill_before_added``); None
    when no value does.
    """

    name: str
    dim: Dim | str
    default: Any
    doc: str
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    choices: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    before_added: Any = None

    def accepted(self) -> str:
        words = "".join(f" or {w!r}" for w in self.keywords)
        return self._accepted() + words

    def _accepted(self) -> str:
        if isinstance(self.dim, Dim):
            unit = f"a {self.dim.value} with a unit, e.g. {example(self.dim)!r}"
        elif self.dim == "choice":
            return "one of " + ", ".join(repr(c) for c in self.choices)
        elif self.dim == "bool":
            return "true or false"
        else:
            unit = f"an {self.dim}" if self.dim == "int" else f"a {self.dim}"
        lo = "" if self.lo is None else (f" > {self._fmt(self.lo)}" if self.lo_open else f" >= {self._fmt(self.lo)}")
        hi = "" if self.hi is None else f" <= {self._fmt(self.hi)}"
        return unit + ("," if lo or hi else "") + (lo + (" and" if lo and hi else "") + hi)

    def _fmt(self, v: float) -> str:
        return str(Quantity(v, self.dim)) if isinstance(self.dim, Dim) else f"{v:g}"

    def parse(self, value: Any, key: str, source: str = "") -> Any:
        """Validate ``value`` (from TOML or --set); returns a Quantity, int, float, str or bool.
        Raises DefinitionError naming ``key``, the value and what is accepted."""
        def bad(reason: str = "") -> DefinitionError:
            return DefinitionError(key, value, self.accepted() + (f" ({reason})" if reason else ""), source)

        if isinstance(value, str) and value in self.keywords:
            return value
        if isinstance(self.dim, Dim):
            try:
                q = Quantity.parse(value, self.dim)
            except UnitError as exc:
                raise bad(str(exc)) from None
            self._check_range(q.si, bad)
            return q
        if self.dim == "choice":
            if value not in self.choices:
                raise bad()
            return value
        if self.dim == "bool":
            if isinstance(value, str) and value.lower() in ("true", "false"):
                return value.lower() == "true"
            if not isinstance(value, bool):
                raise bad()
            return value
        if self.dim == "str":
            if not isinstance(value, str):
                raise bad()
            return value
        if isinstance(value, str):
            try:
                value = int(value) if self.dim == "int" else float(value)
            except ValueError:
                raise bad() from None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                (self.dim == "int" and not float(value).is_integer()):
            raise bad()
        number = int(value) if self.dim == "int" else float(value)
        self._check_range(number, bad)
        return number

    def _check_range(self, v: float, bad: Any) -> None:
        if self.lo is not None and (v < self.lo or (self.lo_open and v <= self.lo)):
            raise bad()
        if self.hi is not None and v > self.hi:
            raise bad()


def to_text(value: Any) -> Any:
    """A parsed value back to its definition text (quantities as '10 ms')."""
    return str(value) if isinstance(value, Quantity) else value


@dataclass(frozen=True)
class Point:
    """One run of a family: a value for every parameter, a repetition and its seed."""

    index: int
    values: dict[str, Any]
    swept: dict[str, Any]
    rep: int
    seed: int

    @property
    def id(self) -> str:
        return f"p{self.index:04d}"

    def label(self) -> str:
        parts = [f"{k}={to_text(v)}" for k, v in self.swept.items()]
        return " ".join(parts + [f"rep={self.rep}"])


@dataclass
class Definition:
    """A validated experiment definition (values parsed into typed objects)."""

    name: str
    #: the family's name (``experiment.family``; testbed.families)
    family: str
    description: str
    params: dict[str, Any]
    sweep: dict[str, list[Any]]
    reps: int
    seed: int
    tdf: TimeDilation
    source: str = ""
    overrides: list[str] = field(default_factory=list)
    #: per-host congestion-control profiles ([cca] table; testbed.cc.selection), or None
    cca: "CcaSelection | None" = None

    def points(self) -> list[Point]:
        names = list(self.sweep)
        combos = list(itertools.product(*(self.sweep[n] for n in names))) if names else [()]
        out = []
        for combo in combos:
            swept = dict(zip(names, combo))
            for rep in range(self.reps):
                out.append(Point(len(out), {**self.params, **swept}, swept, rep, self.seed * 1000 + rep))
        return out

    def resolved(self) -> dict[str, Any]:
        """The definition as plain data (what config.json holds), in paper units."""
        return {
            "experiment": {"name": self.name, "family": self.family, "description": self.description},
            "params": {k: to_text(v) for k, v in self.params.items()},
            "sweep": {k: [to_text(v) for v in vs] for k, vs in self.sweep.items()},
            "run": {"reps": self.reps, "seed": self.seed, "tdf": self.tdf.factor},
            **({"cca": self.cca.to_data()} if self.cca is not None else {}),
            "source": self.source,
            "overrides": self.overrides,
        }
