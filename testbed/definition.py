"""Experiment definitions: declarative TOML files validated into typed objects.

A definition names an experiment *kind* (the code that runs one point, see
``testbed.kinds``), fixed parameters, swept parameters, repetitions, seed and time
dilation factor. Every quantity is written with its unit in the paper's units.
Unknown keys, missing units and out-of-range values raise DefinitionError naming the
key, the value and what is accepted, before anything is created.

    [experiment]
    name = "demo"
    kind = "netem-path"
    description = "..."
    [params]
    delay = "10 ms"
    [sweep]
    rate = ["20 Mbit/s", "50 Mbit/s"]
    [run]
    reps = 3
    seed = 1
    tdf = 1
    [cca]                   # optional: congestion-control profile of every host
    profile = "sack"
    [cca.hosts.h2]          # optional: per-host override
    profile = "saw"
"""

from __future__ import annotations

import itertools
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.dilation import TimeDilation
from testbed.errors import DefinitionError
from testbed.names import check_experiment_name
from testbed.units import Dim, Quantity, UnitError, example

EXPERIMENTS_DIR = Path(__file__).resolve().parent.parent / "experiments"
SECTIONS = {"experiment", "params", "sweep", "run", "cca"}


@dataclass(frozen=True)
class Param:
    """One parameter of an experiment kind: its type, default, bounds and meaning.

    ``dim`` is a Dim for quantities, or one of "int", "float", "choice", "bool", "str".
    ``lo``/``hi`` bound the SI value (quantities) or the number; ``lo_open`` excludes lo.
    """

    name: str
    dim: Dim | str
    default: Any
    doc: str
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    choices: tuple[str, ...] = ()

    def accepted(self) -> str:
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
        """Validate ``value`` (from TOML or --set); returns a Quantity, int, float, str or bool."""
        def bad(reason: str = "") -> DefinitionError:
            return DefinitionError(key, value, self.accepted() + (f" ({reason})" if reason else ""), source)

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


RUN_PARAMS = {
    "reps": Param("reps", "int", 1, "repetitions of every sweep point, distinct seeds", lo=1, hi=10000),
    "seed": Param("seed", "int", 1, "base random seed; repetition r uses seed*1000 + r", lo=0, hi=2**31 - 1),
    "tdf": Param("tdf", "float", 1.0, "time dilation factor D (rates / D, times x D)", lo=1.0, hi=1e6),
}


@dataclass(frozen=True)
class Point:
    """One run of the kind: a value for every parameter, a repetition and its seed."""

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
    kind: str
    description: str
    params: dict[str, Any]
    sweep: dict[str, list[Any]]
    reps: int
    seed: int
    tdf: TimeDilation
    source: str = ""
    overrides: list[str] = field(default_factory=list)
    #: per-host congestion-control profiles ([cca] table; testbed.cc.selection), or None
    cca: Any = None

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
            "experiment": {"name": self.name, "kind": self.kind, "description": self.description},
            "params": {k: to_text(v) for k, v in self.params.items()},
            "sweep": {k: [to_text(v) for v in vs] for k, vs in self.sweep.items()},
            "run": {"reps": self.reps, "seed": self.seed, "tdf": self.tdf.factor},
            **({"cca": self.cca.to_data()} if self.cca is not None else {}),
            "source": self.source,
            "overrides": self.overrides,
        }


def find_definition(name_or_path: str) -> Path:
    """``demo`` -> experiments/demo.toml; a path is used as given. Raises DefinitionError."""
    p = Path(name_or_path)
    candidates = [p] if p.suffix == ".toml" else [EXPERIMENTS_DIR / f"{name_or_path}.toml", p]
    for c in candidates:
        if c.is_file():
            return c
    known = sorted(x.stem for x in EXPERIMENTS_DIR.glob("*.toml"))
    raise DefinitionError("EXPERIMENT", name_or_path, "a file, or one of: " + ", ".join(known))


def parse_set(items: list[str]) -> dict[str, Any]:
    """``--set key=value`` items -> {key: value}; a comma in the value makes a sweep."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise DefinitionError("--set", item, "KEY=VALUE, e.g. --set rate='50 Mbit/s'")
        values = [v.strip() for v in value.split(",")]
        out[key] = values if len(values) > 1 else values[0]
    return out


def load(name_or_path: str, *, overrides: dict[str, Any] | None = None,
         tdf: float | None = None, reps: int | None = None, seed: int | None = None) -> Definition:
    """Read and validate a definition; command-line values override the file's."""
    path = find_definition(name_or_path)
    src = str(path)
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise DefinitionError("(file)", src, f"valid TOML ({exc})") from None
    return validate(raw, source=src, overrides=overrides or {}, tdf=tdf, reps=reps, seed=seed)


def validate(raw: dict[str, Any], *, source: str = "", overrides: dict[str, Any] | None = None,
             tdf: float | None = None, reps: int | None = None, seed: int | None = None) -> Definition:
    """Validate parsed TOML ``raw`` into a Definition (see module docstring)."""
    from testbed.kinds import KINDS  # the registry imports this module

    overrides = dict(overrides or {})
    for section in raw:
        if section not in SECTIONS:
            raise DefinitionError(section, raw[section], "sections " + ", ".join(sorted(SECTIONS)), source)
    exp = _table(raw, "experiment", source)
    for key in exp:
        if key not in ("name", "kind", "description"):
            raise DefinitionError(f"experiment.{key}", exp[key], "keys name, kind, description", source)
    name = check_experiment_name(exp.get("name", ""), "experiment.name")
    kind_name = exp.get("kind")
    if kind_name not in KINDS:
        raise DefinitionError("experiment.kind", kind_name, "one of " + ", ".join(sorted(KINDS)), source)
    kind = KINDS[kind_name]
    spec = {p.name: p for p in kind.params}

    params_raw, sweep_raw = _table(raw, "params", source), _table(raw, "sweep", source)
    run_raw = _table(raw, "run", source)
    for key, value in overrides.items():
        short = key.split(".", 1)[1] if key.startswith(("params.", "sweep.")) else key
        if short in RUN_PARAMS:
            run_raw[short] = value
        elif short in spec:
            (sweep_raw if isinstance(value, list) else params_raw)[short] = value
            if not isinstance(value, list):
                sweep_raw.pop(short, None)
            else:
                params_raw.pop(short, None)
        else:
            raise DefinitionError(f"--set {key}", value, "a parameter of kind "
                                  f"{kind_name}: " + ", ".join(sorted(spec) + sorted(RUN_PARAMS)), source)

    params: dict[str, Any] = {}
    for key, value in params_raw.items():
        if key not in spec:
            raise DefinitionError(f"params.{key}", value, f"parameters of kind {kind_name}: "
                                  + ", ".join(sorted(spec)), source)
        params[key] = spec[key].parse(value, f"params.{key}", source)
    sweep: dict[str, list[Any]] = {}
    for key, values in sweep_raw.items():
        if key not in spec:
            raise DefinitionError(f"sweep.{key}", values, f"parameters of kind {kind_name}: "
                                  + ", ".join(sorted(spec)), source)
        if key in params:
            raise DefinitionError(f"sweep.{key}", values, "a parameter set in either [params] or [sweep], not both", source)
        if not isinstance(values, list) or not values:
            raise DefinitionError(f"sweep.{key}", values, "a non-empty list of values", source)
        sweep[key] = [spec[key].parse(v, f"sweep.{key}[{i}]", source) for i, v in enumerate(values)]
    for p in kind.params:
        if p.name not in params and p.name not in sweep:
            params[p.name] = p.parse(p.default, f"params.{p.name} (default)", source)

    for key in run_raw:
        if key not in RUN_PARAMS:
            raise DefinitionError(f"run.{key}", run_raw[key], "keys " + ", ".join(RUN_PARAMS), source)
    cli = {"tdf": tdf, "reps": reps, "seed": seed}
    run_vals = {k: RUN_PARAMS[k].parse(cli[k] if cli[k] is not None else run_raw.get(k, RUN_PARAMS[k].default),
                                       "--" + k if cli[k] is not None else f"run.{k}", source)
                for k in RUN_PARAMS}
    from testbed.cc.selection import parse as parse_cca

    defn = Definition(name=name, kind=kind_name, description=str(exp.get("description", "")),
                      params=params, sweep=sweep, reps=run_vals["reps"], seed=run_vals["seed"],
                      tdf=TimeDilation(run_vals["tdf"]), source=source,
                      overrides=[f"{k}={v}" for k, v in overrides.items()],
                      cca=parse_cca(raw.get("cca"), source))
    kind.check(defn)
    return defn


def _table(raw: dict[str, Any], name: str, source: str) -> dict[str, Any]:
    t = raw.get(name, {})
    if not isinstance(t, dict):
        raise DefinitionError(name, t, "a [table]", source)
    return dict(t)
