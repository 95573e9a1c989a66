"""Experiment definitions: declarative TOML files validated into typed objects.

A definition names an experiment *family* (the code that runs one point, see
``testbed.families``), fixed parameters, swept parameters, repetitions, seed and time
dilation factor. Every quantity is written with its unit in the paper's units.
Unknown keys, missing units and out-of-range values raise DefinitionError naming the
key, the value and what is accepted, before anything is created.

    [experiment]
    name = "demo"
    family = "netem-path"
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

The validated data types (Param, Definition, Point) are in :mod:`testbed.experiment`.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from testbed import families
from testbed.cc.selection import parse as parse_cca
from testbed.dilation import TimeDilation
from testbed.errors import DefinitionError
from testbed.experiment import Definition, Param
from testbed.names import check_experiment_name

EXPERIMENTS_DIR = Path(__file__).resolve().parent.parent / "experiments"
SECTIONS = {"experiment", "params", "sweep", "run", "cca"}


RUN_PARAMS = {
    "reps": Param("reps", "int", 1, "repetitions of every sweep point, distinct seeds", lo=1, hi=10000),
    "seed": Param("seed", "int", 1, "base random seed; repetition r uses seed*1000 + r", lo=0, hi=2**31 - 1),
    "tdf": Param("tdf", "float", 1.0, "time dilation factor D (rates / D, times x D)", lo=1.0, hi=1e6),
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
    """Validate parsed TOML ``raw`` into a Definition (see module docstring); raises
    DefinitionError naming the key, the value and what is accepted."""
    overrides = dict(overrides or {})
    for section in raw:
        if section not in SECTIONS:
            raise DefinitionError(section, raw[section], "sections " + ", ".join(sorted(SECTIONS)), source)
    exp = _table(raw, "experiment", source)
    if "kind" in exp:
        raise DefinitionError("experiment.kind", exp["kind"], "no experiment.kind: the key is now "
                              f"experiment.family (family = {exp['kind']!r})", source)
    for key in exp:
        if key not in ("name", "family", "description"):
            raise DefinitionError(f"experiment.{key}", exp[key], "keys name, family, description", source)
    name = check_experiment_name(exp.get("name", ""), "experiment.name")
    family_name = exp.get("family")
    family = families.load(family_name, "experiment.family", source)
    spec = {p.name: p for p in family.params}

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
            raise DefinitionError(f"--set {key}", value, "a parameter of family "
                                  f"{family_name}: " + ", ".join(sorted(spec) + sorted(RUN_PARAMS)), source)

    params: dict[str, Any] = {}
    for key, value in params_raw.items():
        if key not in spec:
            raise DefinitionError(f"params.{key}", value, f"parameters of family {family_name}: "
                                  + ", ".join(sorted(spec)), source)
        params[key] = spec[key].parse(value, f"params.{key}", source)
    sweep: dict[str, list[Any]] = {}
    for key, values in sweep_raw.items():
        if key not in spec:
            raise DefinitionError(f"sweep.{key}", values, f"parameters of family {family_name}: "
                                  + ", ".join(sorted(spec)), source)
        if key in params:
            raise DefinitionError(f"sweep.{key}", values, "a parameter set in either [params] or [sweep], not both", source)
        if not isinstance(values, list) or not values:
            raise DefinitionError(f"sweep.{key}", values, "a non-empty list of values", source)
        sweep[key] = [spec[key].parse(v, f"sweep.{key}[{i}]", source) for i, v in enumerate(values)]
    for p in family.params:
        if p.name not in params and p.name not in sweep:
            params[p.name] = p.parse(p.default, f"params.{p.name} (default)", source)

    for key in run_raw:
        if key not in RUN_PARAMS:
            raise DefinitionError(f"run.{key}", run_raw[key], "keys " + ", ".join(RUN_PARAMS), source)
    cli = {"tdf": tdf, "reps": reps, "seed": seed}
    run_vals = {k: RUN_PARAMS[k].parse(cli[k] if cli[k] is not None else run_raw.get(k, RUN_PARAMS[k].default),
                                       "--" + k if cli[k] is not None else f"run.{k}", source)
                for k in RUN_PARAMS}
    defn = Definition(name=name, family=family.name, description=str(exp.get("description", "")),
                      params=params, sweep=sweep, reps=run_vals["reps"], seed=run_vals["seed"],
                      tdf=TimeDilation(run_vals["tdf"]), source=source,
                      overrides=[f"{k}={v}" for k, v in overrides.items()],
                      cca=parse_cca(raw.get("cca"), source))
    family.check(defn)
    return defn


def _table(raw: dict[str, Any], name: str, source: str) -> dict[str, Any]:
    t = raw.get(name, {})
    if not isinstance(t, dict):
        raise DefinitionError(name, t, "a [table]", source)
    return dict(t)
