"""The HTML report of a results folder: figures, tables, manifest; from the data alone."""

from __future__ import annotations

import html
import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis import findings as findings_mod
from testbed import families
from testbed.family import Family
from testbed.metrics import check_columns
from testbed.results import RunStore, atomic_write, config_family

log = logging.getLogger(__name__)


class CombineError(ValueError):
    """Runs that cannot be combined into one report (message names the folder and why)."""


#: file in a combined report folder that lists its source runs (and marks it as combined)
SOURCES = "sources.json"


def source_folders(results: Path) -> dict[str, Path]:
    """A combined report's source runs by folder name (:func:`combine` writes
    sources.json; the summary's ``run`` column names them); {} for a run's own folder
    or an unreadable list."""
    try:
        return {Path(src["folder"]).name: Path(src["folder"]) for src in json.loads((results / SOURCES).read_text())}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


@dataclass(frozen=True)
class Exclusion:
    """Rows a combined report leaves out: those of source folder ``folder`` (its name)
    whose summary column ``key`` reads as one of ``values`` (e.g. points run again from a
    later commit into another folder)."""

    folder: str
    key: str
    values: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> Exclusion:
        """``FOLDER:KEY=VALUE[,VALUE...]``; CombineError naming the text and the form."""
        folder, sep, rest = text.partition(":")
        key, eq, values = rest.partition("=")
        vals = tuple(v.strip() for v in values.split(",") if v.strip())
        if not (sep and eq and folder.strip() and key.strip() and vals):
            raise CombineError(f"--exclude {text!r}: expected FOLDER:KEY=VALUE[,VALUE...] "
                               "(FOLDER: a results folder's name, e.g. block-sb:buffer=45 kB)")
        return cls(folder.strip(), key.strip(), vals)

    def __str__(self) -> str:
        return f"{self.folder}: {self.key} in {{{', '.join(self.values)}}}"


def _apply_exclusions(frames: dict[str, pd.DataFrame], exclude: list[Exclusion]) -> dict[str, int]:
    """Drop the excluded rows from ``frames`` (by folder name) in place; rows dropped per
    exclusion (its text). Raises CombineError for a folder not combined, a key not in its
    summary, or a value no row has (naming the values it has)."""
    dropped: dict[str, int] = {}
    for ex in exclude:
        if ex.folder not in frames:
            raise CombineError(f"--exclude {ex}: no combined folder is named {ex.folder!r} "
                               f"(the folders: {', '.join(sorted(frames))})")
        f = frames[ex.folder]
        if ex.key not in f.columns:
            raise CombineError(f"--exclude {ex}: {ex.folder}'s summary has no column {ex.key!r}")
        have = f[ex.key].astype(str)
        missing = [v for v in ex.values if v not in set(have)]
        if missing:
            raise CombineError(f"--exclude {ex}: no row of {ex.folder} has {ex.key} = "
                               f"{', '.join(missing)} (it has: {', '.join(sorted(set(have)))})")
        hit = have.isin(ex.values)
        frames[ex.folder] = f[~hit]
        dropped[str(ex)] = int(hit.sum())
    return dropped


def fill_before_added(summary: pd.DataFrame, family: type[Family]) -> dict[str, tuple[object, int]]:
    """Fill, in place, the empty cells of ``summary``'s parameter columns whose parameter
    says what runs made before it existed used (``Param.before_added``): rows written
    before the parameter was added (a folder resumed across its addition, or a summary
    combined with newer ones) would otherwise differ from the others in a parameter they
    did not differ in and be left out of the analysis' context (E5's flows_of_scale, added
    on 2026-11-30). Returns {parameter: (value read, cells filled)} for those filled."""
    filled: dict[str, tuple[object, int]] = {}
    for p in family.params:
        if p.before_added is None or p.name not in summary.columns:
            continue
        empty = summary[p.name].isna()
        if empty.any():
            summary[p.name] = summary[p.name].astype(object).where(~empty, p.before_added).infer_objects()
            filled[p.name] = (p.before_added, int(empty.sum()))
    return filled


def _fill_absent_params(frames: dict[str, pd.DataFrame], family: type[Family]) -> dict[str, dict[str, object]]:
    """Give each summary in ``frames`` (in place) the parameter columns another summary
    has and it lacks, and read those and its own empty cells as :func:`fill_before_added`
    does; parameters without ``before_added`` are not given. Returns the values filled per
    folder name."""
    present = set().union(*(f.columns for f in frames.values())) if frames else set()
    filled: dict[str, dict[str, object]] = {}
    for name, f in frames.items():
        absent = [p.name for p in family.params if p.before_added is not None and p.name in present - set(f.columns)]
        f = f.assign(**{c: math.nan for c in absent})
        cols = {k: v for k, (v, _) in fill_before_added(f, family).items()}
        frames[name] = f
        if cols:
            filled[name] = cols
    return filled


def combine(runs: list[Path], out: Path, exclude: list[Exclusion] | None = None) -> Path:
    """One report over several results folders of the same family, in ``out``: their
    summaries concatenated (a ``run`` column names the source folder), less the rows
    ``exclude`` names, with the parameter columns a summary from before a parameter
    existed lacks (:func:`_fill_absent_params`), a config naming the family, the runs, the
    exclusions and the filled columns, ``sources.json`` (each run's experiment, D, git
    sha, rows excluded, columns filled), then
    :func:`generate`. For findings whose points were run as separate definitions (e.g.
    the E1 findings subset, one folder per block).

    Raises CombineError if a folder is not a results folder, the families differ, ``out``
    exists and is not a combined report (a run's own folder is never overwritten), or an
    exclusion names no combined folder, column or present value.
    """
    if not runs:
        raise CombineError("no results folder given")
    configs, sources = [], []
    frames: dict[str, pd.DataFrame] = {}
    for run in runs:
        cfg_path = run / "config.json"
        if not cfg_path.exists():
            raise CombineError(f"{run} is not a results folder (no config.json)")
        cfg = json.loads(cfg_path.read_text())
        configs.append(cfg)
        shas = [m.get("git", {}).get("sha") for m in RunStore(run).manifests()]
        sources.append({"folder": str(run), "experiment": cfg["experiment"]["name"], "tdf": cfg["run"]["tdf"],
                        "git": ", ".join(dict.fromkeys(s for s in shas if s)) or None,
                        "family": config_family(cfg)})
        if (run / "summary.csv").exists():
            try:
                frames[run.name] = pd.read_csv(run / "summary.csv").assign(run=run.name)
            except pd.errors.EmptyDataError:
                pass
    names = {config_family(c) for c in configs}
    if len(names) > 1:
        raise CombineError("the runs are of different families: " + ", ".join(
            f"{s['folder']} ({s['family']})" for s in sources) + "; combine runs of one family")
    if (out / "config.json").exists() and not (out / SOURCES).exists():
        raise CombineError(f"{out} is a run's results folder, not a combined report: choose another --out")
    dropped = _apply_exclusions(frames, list(exclude or []))
    filled = _fill_absent_params(frames, families.load(next(iter(names)), "experiment.family"))
    for src in sources:
        src["excluded"] = {k: n for k, n in dropped.items() if k.startswith(Path(src["folder"]).name + ": ")}
        src["filled"] = filled.get(Path(src["folder"]).name, {})
    out.mkdir(parents=True, exist_ok=True)
    tdfs = sorted({c["run"]["tdf"] for c in configs})
    left_out = "; rows left out: " + "; ".join(f"{k} ({n})" for k, n in dropped.items()) if dropped else ""
    left_out += "".join(f"; {name}'s rows without {k} (run before it existed): read as {v!r}"
                        for name, cols in filled.items() for k, v in cols.items())
    config = {"experiment": {"name": "combined: " + " + ".join(sorted({c["experiment"]["name"] for c in configs})),
                             "family": names.pop(),
                             "description": f"{len(runs)} runs combined: " + ", ".join(str(r) for r in runs)
                             + left_out},
              "run": {"tdf": tdfs[0] if len(tdfs) == 1 else ", ".join(map(str, tdfs))}}
    atomic_write(out / "config.json", json.dumps(config, indent=2) + "\n")
    atomic_write(out / SOURCES, json.dumps(sources, indent=2) + "\n")
    summary = pd.concat(list(frames.values()), ignore_index=True) if frames else pd.DataFrame()
    atomic_write(out / "summary.csv", summary.to_csv(index=False))
    return generate(out)


#: the columns of :func:`environments`
ENVIRONMENT_COLUMNS = ["run", "run_id", "created", "points", "place", "accel", "clock", "kernel", "machine", "git"]


def _kernel(where: dict) -> str:
    return " ".join(str(where[k]) for k in ("kernel", "kernel_version") if where.get(k)) or "?"


def _machine(where: dict) -> str:
    """The machine's CPU model and count (``where.host``, manifests since 2026-12-01);
    "?" for older manifests. In a guest under TCG ``where.cpus`` is the guest's vCPUs."""
    host = where.get("host")
    if not isinstance(host, dict):
        return "?"
    return f"{host.get('cpu_model') or '?'} x {host.get('cpus', '?')}"


def environments(results: Path) -> pd.DataFrame:
    """Where a results folder's complete points ran: one row per invocation (a resumed
    run has several, one manifest each: ``RunStore.manifests``) with the number of
    complete points whose status.json names its run_id, its place, guest accelerator and
    clock, kernel (release and build), machine (:func:`_machine`) and git sha. Points
    whose run_id has no manifest get a row with "?" (never attributed to another). For a
    combined report (:func:`combine`), the rows of each source folder (``run``: its name);
    empty when nothing is readable."""
    folders = source_folders(results) or {"": results}
    rows: list[dict[str, object]] = []
    for name, folder in folders.items():
        counts: dict[str, int] = {}
        for st in sorted((folder / "points").glob("p[0-9]*/status.json")):
            try:
                s = json.loads(st.read_text())
            except (OSError, ValueError):
                continue
            if s.get("state") == "complete":
                rid = str(s.get("run_id") or "?")
                counts[rid] = counts.get(rid, 0) + 1
        try:
            manifests = RunStore(folder).manifests()
        except (OSError, ValueError):
            manifests = []
        for m in manifests:
            w = m.get("where", {}) or {}
            rows.append({"run": name, "run_id": m.get("run_id", "?"), "created": m.get("created", "?"),
                         "points": counts.pop(str(m.get("run_id")), 0), "place": w.get("place", "?"),
                         "accel": w.get("guest_accel") or "-", "clock": w.get("clock") or "-",
                         "kernel": _kernel(w), "machine": _machine(w),
                         "git": str(m.get("git", {}).get("sha", "?"))[:12]})
        rows += [{"run": name, "run_id": rid, "created": "?", "points": n, "place": "?", "accel": "?",
                  "clock": "?", "kernel": "?", "machine": "?", "git": "?"} for rid, n in counts.items()]
    return pd.DataFrame(rows, columns=ENVIRONMENT_COLUMNS)


def environments_note(env: pd.DataFrame) -> str:
    """What a reader of wall times and of differences between points must know: the
    complete points ran on more than one kernel build or machine, or on ones not recorded
    ("?"); "" when they all ran on one recorded kernel and machine."""
    used = env[env["points"] > 0]
    total = int(used["points"].sum())
    out = []
    kernels = used.loc[used["kernel"] != "?", "kernel"].nunique()
    machines = used.loc[used["machine"] != "?", "machine"].nunique()
    several = [f"{n} {what}s" for n, what in ((kernels, "kernel build"), (machines, "machine")) if n > 1]
    if several:
        out.append(f"The points ran on {' and '.join(several)}: differences between points may include theirs, "
                   f"and wall times and speeds are per machine.")
    for column, what in (("kernel", "kernel"), ("machine", "machine")):
        unknown = int(used.loc[used[column] == "?", "points"].sum())
        if unknown:
            out.append(f"The {what} of {unknown} of {total} points is not recorded"
                       + (" (manifests before 2026-12-01)." if what == "machine" else "."))
    return " ".join(out)


def _shas(results: Path, env: pd.DataFrame | None = None) -> str:
    """The commits that ran the run's points (several when it was resumed; for a combined
    report, its sources'), short: the ``git`` column of :func:`environments` (``env``
    when already read)."""
    env = environments(results) if env is None else env
    shas = [g for g in env["git"] if g != "?"]
    return ", ".join(dict.fromkeys(shas)) or "?"


def generate(results: Path) -> Path:
    """(Re)write ``results/report/`` and return the path of its index.html. Raises
    SummaryError when summary.csv lacks a metric the family declares, DefinitionError
    for a family this version does not have."""
    config = json.loads((results / "config.json").read_text())
    family = families.load(config_family(config), "experiment.family", str(results / "config.json"))
    manifest_path = results / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    out = results / "report"
    out.mkdir(exist_ok=True)
    summary_path = results / "summary.csv"
    try:
        summary = pd.read_csv(summary_path) if summary_path.exists() else pd.DataFrame()
    except pd.errors.EmptyDataError:  # every point failed: the report lists the errors only
        summary = pd.DataFrame()
    figures: list[Path] = []
    tables: list[tuple[str, pd.DataFrame]] = []
    before_added: list[str] = []
    if not summary.empty:
        for name in check_columns(family.metrics, summary.columns, str(summary_path)):
            log.info("%s: no column %s (added to the family later): read as empty", summary_path, name)
            summary[name] = math.nan
        for name, (value, n) in fill_before_added(summary, family).items():
            log.info("%s: %d rows without %s (run before it existed): read as %r", summary_path, n, name, value)
            before_added.append(f"{n} rows without {name} (run before it existed): read as {value!r}")
        figures, tables = family.analysis().analyse(summary, config, out)
    for i, (title, table) in enumerate(tables):
        table.to_csv(out / f"table{i + 1}.csv", index=False)
    statuses = []
    for st in sorted((results / "points").glob("p[0-9]*/status.json")):
        s = json.loads(st.read_text())
        statuses.append((st.parent.name, s.get("label", ""), s["state"], s.get("error") or ""))
    pcaps = sorted((results / "pcap").glob("*.pcap")) if (results / "pcap").is_dir() else []
    env = environments(results)
    e = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(config['experiment']['name'])}</title>",
             "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:3px 8px;font-size:90%}img{max-width:100%}"
             f"{findings_mod.CSS}</style></head><body>",
             f"<h1>{e(config['experiment']['name'])}</h1><p>{e(config['experiment'].get('description', ''))}</p>",
             f"<p>family <code>{e(family.name)}</code> · time dilation factor D = "
             f"{config['run']['tdf']} (all values in paper units) · ran on "
             f"{e(str(manifest.get('where', {}).get('place', '?')))} kernel "
             f"{e(str(manifest.get('where', {}).get('kernel', '?')))} · git "
             f"{e(_shas(results, env))}</p>",
             "<p><a href='../config.json'>config.json</a> · <a href='../manifest.json'>manifest.json</a> · "
             "<a href='../summary.csv'>summary.csv</a> · <a href='../logs/run.log'>run log</a></p>"]
    if before_added:
        parts.append(f"<p><strong>{e('; '.join(before_added))}</strong></p>")
    if not env.empty:
        env.to_csv(out / "environments.csv", index=False)
        note = environments_note(env)
        parts.append("<h2>Where the points ran</h2><p><a href='environments.csv'>CSV</a>"
                     + (f" · <strong>{e(note)}</strong>" if note else "") + "</p>")
        parts.append(env.drop(columns=[] if env["run"].any() else ["run"]).to_html(index=False))
    # the findings first (verdict per claim of the paper), then the figures, then the other tables
    for i, (title, table) in enumerate(tables):
        if findings_mod.is_findings(title, table):
            counts = ", ".join(f"{(table['verdict'] == v).sum()} {v}" for v in findings_mod.VERDICTS)
            parts.append(f"<h2>{e(title)}</h2><p>{e(counts)} · <a href='table{i + 1}.csv'>CSV</a>"
                         + (" · <a href='findings.md'>Markdown</a>" if (out / "findings.md").exists() else "")
                         + f"</p><p style='font-size:90%'>{e(findings_mod.LEGEND)}</p>")
            parts.append(findings_mod.to_html(table))
    for fig in figures:
        parts.append(f"<p><img src='{e(fig.name)}'></p>")
    for i, (title, table) in enumerate(tables):
        if findings_mod.is_findings(title, table):
            continue
        parts.append(f"<h2>{e(title)}</h2><p><a href='table{i + 1}.csv'>CSV</a></p>")
        parts.append(table.to_html(index=False, float_format=lambda v: f"{v:.4g}", na_rep="–"))
    parts.append("<h2>Points</h2><table><tr><th>point</th><th>parameters</th><th>state</th><th>error</th></tr>")
    parts += [f"<tr><td><a href='../points/{e(p)}/'>{e(p)}</a></td><td>{e(lbl)}</td><td>{e(s)}</td>"
              f"<td>{e(err)}</td></tr>" for p, lbl, s, err in statuses]
    parts.append("</table>")
    if pcaps:
        parts.append("<h2>Captures</h2><ul>" + "".join(
            f"<li><a href='../pcap/{e(p.name)}'>{e(p.name)}</a></li>" for p in pcaps) + "</ul>")
    parts.append("</body></html>\n")
    index = out / "index.html"
    atomic_write(index, "\n".join(parts))
    return index
