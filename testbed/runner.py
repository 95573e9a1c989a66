"""Runs an experiment definition: placement (native or guest), sweep, results, teardown."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from testbed import families, hostclock, manifest
from testbed.context import KeptResources, PointContext
from testbed.errors import FeatureError, TestbedError
from testbed.experiment import Definition, Point
from testbed.features import Feature
from testbed.ledger import Ledger
from testbed.results import RunStore, new_run_dir

log = logging.getLogger(__name__)


class Terminated(BaseException):
    """Raised in the main thread on SIGTERM so that teardown runs as for Ctrl-C."""


@contextlib.contextmanager
def terminate_as_exception() -> Iterator[None]:
    def handler(signum: int, frame: object) -> None:
        raise Terminated(f"signal {signum}")
    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@dataclass
class RunOptions:
    """Command-line options of ``testbed run`` that are not part of the definition."""

    out: Path | None = None
    run_id: str | None = None
    placement: str = "auto"            # auto | native | vm
    pcap: list[str] = field(default_factory=list)
    report: bool = True
    argv: list[str] = field(default_factory=list)


def run_features(defn: Definition) -> set[Feature]:
    """Kernel features the points of ``defn`` need: the family's, and module loading
    when a [cca] table's profile runs one of kernel/'s modules."""
    from testbed.cc.modules import OUR_MODULES
    from testbed.cc.profiles import PROFILES

    family = families.load(defn.family)
    need: set[Feature] = set()
    for p in defn.points():
        need |= family.features(p.values, family.point_tdf(p.values, defn.tdf))
    if defn.cca is not None:
        choices = [c for c in (defn.cca.default, *defn.cca.hosts.values()) if c is not None]
        if any(PROFILES[c.profile].algorithm in OUR_MODULES for c in choices):
            need.add(Feature.MODULES)
    return need


def check_options(defn: Definition, opts: RunOptions) -> None:
    """Validate the run options that depend on the definition (``--pcap`` names a link
    of every point's topology) before anything is created; raises DefinitionError."""
    families.load(defn.family).check_links(defn, opts.pcap, "--pcap")


def choose_placement(needs: set[Feature], placement: str) -> tuple[str, list[str]]:
    """("native" | "vm", missing features). Raises FeatureError if impossible."""
    if placement == "vm":
        return "vm", []
    from testbed.features import probe_all

    probes = probe_all(needs)  # only what the run needs: each probe costs seconds in the guest
    missing = sorted(n for n in needs if not (n in probes and probes[n].ok))
    if not missing:
        return "native", []
    if placement == "native":
        why = "; ".join(f"{n}: {probes[n].detail if n in probes else 'unknown feature'}" for n in missing)
        raise FeatureError(f"--native: this kernel lacks {', '.join(missing)} ({why})")
    return "vm", missing


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def run(defn: Definition, opts: RunOptions) -> int:
    """Run ``defn``; returns the exit code (0 ok, 1 failed points, 130/143 interrupted).
    Raises DefinitionError (nothing created) for options the definition refuses."""
    check_options(defn, opts)
    run_id = opts.run_id or new_run_id()
    out = (opts.out or new_run_dir(defn.name, run_id)).resolve()
    needs = run_features(defn)
    placement, missing = choose_placement(needs, opts.placement)
    if placement == "vm":
        from testbed import vm

        print(f"testbed: running in the full-kernel guest"
              f"{' (host lacks ' + ', '.join(missing) + ')' if missing else ''}", file=sys.stderr)
        out.mkdir(parents=True, exist_ok=True)
        # the guest runs it natively: --vm would clash with --native there
        inner = [*(a for a in opts.argv if a != "--vm"), "--native", "--no-report", "--out", str(out),
                 "--run-id", run_id]
        code = vm.run_in_guest(inner, rw_dirs=[out], ledger_id=f"guest-{run_id}")
    else:
        code = run_native(defn, opts, run_id, out, sorted(needs))
    if opts.report and (out / "config.json").exists():
        from analysis.report import generate

        index = generate(out)
        print(f"results: {out}\nreport:  {index}")
    return code


def run_native(defn: Definition, opts: RunOptions, run_id: str, out: Path, needs: list[Feature]) -> int:
    """Run all points here; skips complete ones (resume); tears down on any exit."""
    family = families.load(defn.family)
    store = RunStore.open(out, defn, family.metrics)
    points = defn.points()
    tdfs = {p.id: family.point_tdf(p.values, defn.tdf) for p in points}
    per_point = {pid: d.factor for pid, d in tdfs.items()} if any(d != defn.tdf for d in tdfs.values()) else {}
    man = manifest.build(
        argv=opts.argv, tdf=defn.tdf.factor, seeds=sorted({p.seed for p in points}), features=needs,
        extra={"run_id": run_id, "points": len(points),
               "congestion_control": manifest.congestion_control(defn),
               **({"point_tdf": per_point} if per_point else {})})
    store.write_manifest(man)
    store.session = {"run_id": run_id, "git": man.get("git", {}).get("sha")}
    _log_to(out / "logs" / "run.log")
    token = "ot" + secrets.token_hex(2)
    ledger = Ledger.create(f"{run_id}-{os.getpid()}", results_dir=str(out), argv=opts.argv)
    todo = [p for p in points if store.state(p) not in ("complete", "skipped")]
    skipped = len(points) - len(todo)
    if skipped:
        print(f"resuming {out}: {skipped} of {len(points)} points already complete", file=sys.stderr)
    progress = Progress(total=len(points), done=skipped)
    failed = 0
    code = 0
    kept = KeptResources()
    try:
        with terminate_as_exception():
            for point in todo:
                reason = family.infeasible(point.values, tdfs[point.id])
                if reason is not None:
                    store.skip(point, reason)
                    progress.skip(point, reason)
                    continue
                progress.start(point)
                d = store.begin(point)
                ctx = PointContext(defn, point, d, ledger, token, opts.pcap, out / "pcap",
                                   progress_fn=progress.note, kept=kept, point_tdf=tdfs[point.id])
                t0, host0 = time.monotonic(), hostclock.host_seconds()
                try:
                    try:
                        summary = family.run_point(ctx)
                    except BaseException:
                        kept.drop()  # the next point starts from scratch
                        raise
                    # checks the row against the family's metrics (SummaryError) first
                    store.finish(point, summary, wall_s=hostclock.host_seconds() - host0,
                                 emulation_s=time.monotonic() - t0, tdf=ctx.tdf.factor)
                except TestbedError as exc:
                    failed += 1
                    store.finish(point, None, error=str(exc), wall_s=hostclock.host_seconds() - host0,
                                 emulation_s=time.monotonic() - t0, tdf=ctx.tdf.factor)
                    log.error("%s failed: %s", point.id, exc)
                    (d / "error.txt").write_text(traceback.format_exc())
                    progress.end(point, ok=False)
                    continue
                progress.end(point, ok=True)
    except (KeyboardInterrupt, Terminated) as exc:
        print(f"\ninterrupted ({exc.__class__.__name__}); the point in progress is marked "
              f"incomplete and will rerun on resume: testbed run {defn.source} --out {out}",
              file=sys.stderr)
        code = 130 if isinstance(exc, KeyboardInterrupt) else 143
    finally:
        try:
            kept.drop()
        finally:
            errors = ledger.teardown()
        if errors:
            print("teardown incomplete; run `testbed clean`:\n  " + "\n  ".join(errors), file=sys.stderr)
            code = code or 1
    if failed:
        print(f"{failed} point(s) failed; see points/*/error.txt in {out}", file=sys.stderr)
        code = code or 1
    return code


class Progress:
    """Prints points done / total, elapsed time and an estimate of the time left, in
    wall (host) seconds also in an instruction-counted guest (:mod:`testbed.hostclock`)."""

    def __init__(self, total: int, done: int = 0) -> None:
        self.total, self.done, self.t0, self.ran = total, done, hostclock.host_seconds(), 0
        self.current: Point | None = None

    def _prefix(self) -> str:
        return f"[{self.done}/{self.total}]"

    def start(self, point: Point) -> None:
        self.current, self.point_t0 = point, hostclock.host_seconds()
        print(f"{self._prefix()} {point.id} {point.label()} ...", file=sys.stderr, flush=True)

    def skip(self, point: Point, reason: str) -> None:
        self.done += 1
        print(f"{self._prefix()} {point.id} {point.label()} skipped: {reason}", file=sys.stderr, flush=True)

    def note(self, message: str) -> None:
        print(f"    {message}", file=sys.stderr, flush=True)

    def end(self, point: Point, ok: bool) -> None:
        self.done += 1
        self.ran += 1
        now = hostclock.host_seconds()
        elapsed = now - self.t0
        left = (self.total - self.done) * elapsed / self.ran
        print(f"{self._prefix()} {point.id} {'done' if ok else 'FAILED'} in "
              f"{now - self.point_t0:.1f} s | elapsed {_hms(elapsed)} | "
              f"left ~{_hms(left)}", file=sys.stderr, flush=True)


def _hms(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def _log_to(path: Path) -> None:
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.DEBUG)
