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
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, ContextManager, TypeVar

from testbed import hostclock, manifest
from testbed.definition import Definition, Point
from testbed.dilation import TimeDilation
from testbed.errors import FeatureError, TestbedError
from testbed.ledger import Ledger
from testbed.results import RunStore, atomic_write, new_run_dir, write_csv, write_json

log = logging.getLogger(__name__)
T = TypeVar("T")


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


class KeptResources:
    """Context-managed objects kept from one point to the next (e.g. an emulated network
    that only needs reconfiguring): at most one per kind. Objects kept later may depend
    on earlier ones (profiles applied inside a network), so replacing or dropping one
    first closes every object kept after it, newest first. The runner drops them all
    when a point fails and at the end of the run."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[Hashable, contextlib.ExitStack, Any]] = {}

    def get(self, kind: str, key: Hashable, factory: Callable[[], ContextManager[T]]) -> T:
        held = self._held.get(kind)
        if held is not None and held[0] == key:
            return held[2]
        self.drop(kind)
        stack = contextlib.ExitStack()
        value = stack.enter_context(factory())
        self._held[kind] = (key, stack, value)
        return value

    def drop(self, kind: str | None = None) -> None:
        """Close the object of ``kind`` and those kept after it (all when None), newest
        first; every one is closed even if an earlier close raises (the first error is
        re-raised)."""
        kinds = list(self._held)
        if kind is not None:
            kinds = kinds[kinds.index(kind):] if kind in kinds else []
        with contextlib.ExitStack() as closing:
            for k in kinds:  # ExitStack closes in reverse: newest first
                closing.push(self._held.pop(k)[1])


@dataclass
class PointContext:
    """What a kind's ``run_point`` gets: the point, its folder, the ledger, helpers."""

    defn: Definition
    point: Point
    dir: Path
    ledger: Ledger
    token: str
    pcap_links: list[str]
    pcap_dir: Path
    progress_fn: Any = None
    kept: KeptResources = field(default_factory=KeptResources)
    #: the optical fabric's per-port counters, read once when instruments() ends
    optical_counters: list[dict] | None = None

    def keep(self, kind: str, key: Hashable, factory: Callable[[], ContextManager[T]]) -> T:
        """The object ``factory()`` entered for ``key``, reused by later points that ask
        for the same ``kind`` and ``key`` (a different key closes the old one first).
        The runner closes it when a point fails and at the end of the run."""
        return self.kept.get(kind, key, factory)

    @property
    def tdf(self) -> TimeDilation:
        return self.defn.tdf

    def log_file(self, name: str) -> IO[bytes]:
        return open(self.dir / name, "wb")

    def write_text(self, name: str, text: str) -> None:
        atomic_write(self.dir / name, text)

    def write_csv(self, name: str, rows: list[dict[str, Any]]) -> None:
        write_csv(self.dir / name, rows)

    def write_json(self, name: str, data: Any) -> None:
        write_json(self.dir / name, data)

    def progress(self, message: str) -> None:
        if self.progress_fn:
            self.progress_fn(message)

    @contextlib.contextmanager
    def instruments(self, emu: Any, *, count_ports: bool = True) -> Iterator[None]:
        """While the block runs: capture the links named with --pcap, and count packets
        and bytes on every host port with the ``portstat`` BPF program (ports.csv).
        The block's cost goes to machine.json: wall (host) seconds, emulation seconds,
        and the share of emulation time the kernel's CPUs were busy (a loaded CPU
        releases packets late)."""
        from testbed import bpf
        from testbed.capture import Capture

        caps = []
        cpu0, guest0, host0 = cpu_times(), time.monotonic(), hostclock.host_seconds()
        pin_dir = bpf.PIN_ROOT / f"{self.token}-{self.point.id}"
        ports: dict[tuple[int, int], tuple[str, str]] = {}
        try:
            if count_ports:
                for node_id, host in enumerate(emu.hosts(), start=1):
                    for port_id, intf in enumerate(host.intfs, start=1):
                        ports[(node_id, port_id)] = (host.name, intf)
                        for direction in ("ingress", "egress"):
                            bpf.attach_portstat(self.ledger, netns=host.netns, dev=intf,
                                                direction=direction, node_id=node_id,
                                                port_id=port_id, pin_dir=pin_dir)
            for link in self.pcap_links:
                caps.append(Capture(emu, link, self.pcap_dir / f"{self.point.id}-{link}.pcap"))
            yield
        finally:
            for c in reversed(caps):
                c.stop()
        self._record_machine(cpu0, guest0, host0)
        self._record_optical(emu)
        if ports:
            rows = [{"node": ports[(c["node"], c["port"])][0], "intf": ports[(c["node"], c["port"])][1],
                     "direction": c["direction"], "packets": c["packets"], "bytes": c["bytes"]}
                    for c in bpf.read_port_counters(pin_dir) if (c["node"], c["port"]) in ports]
            self.write_csv("ports.csv", sorted(rows, key=lambda r: (r["node"], r["intf"], r["direction"])))


    def _record_machine(self, cpu0: tuple[float, float], guest0: float, host0: float) -> None:
        busy0, total0 = cpu0
        busy1, total1 = cpu_times()
        write_json(self.dir / "machine.json", {
            "wall_s": hostclock.host_seconds() - host0,
            "wall_resolution_s": 1.0 if hostclock.virtual() else 1e-6,
            "emulation_s": time.monotonic() - guest0,
            "cpu_busy_fraction": (busy1 - busy0) / (total1 - total0) if total1 > total0 else None,
            "note": "the instrumented block of the point (traffic and counters); emulation_s is "
                    "this kernel's clock (x 1/D = paper time), manifest.json names it; "
                    "cpu_busy_fraction from /proc/stat"})

    def _record_optical(self, emu: Any) -> None:
        """Optical fabric of ``emu`` (if any): per-port switch counters into
        optical_ports.csv, the fidelity monitor into fidelity.json, and a warning when
        the p99 lateness is not small (> 10 %) against tau of the largest frame."""
        fabric = getattr(emu, "optical", None)
        if fabric is None:
            return
        self.optical_counters = fabric.counters()
        self.write_csv("optical_ports.csv", self.optical_counters)
        mon = fabric.monitor()
        tau = fabric.ref_tau_ns()
        mon.update({"ref_tau_ns": tau, "ref_frame_bytes": fabric.max_frame_bytes(), "tdf": self.tdf.factor,
                    "p99_over_tau": mon["p99_ns"] / tau if tau else None})
        write_json(self.dir / "fidelity.json", mon)
        if tau and mon["p99_ns"] > 0.1 * tau:
            log.warning("%s: p99 emulation lateness %.3g us is %.0f%% of tau (%.3g us); raise --tdf",
                        self.point.id, mon["p99_ns"] / 1e3, 100 * mon["p99_ns"] / tau, tau / 1e3)
            self.progress(f"warning: p99 lateness {mon['p99_ns'] / 1e3:.3g} us is not small against "
                          f"tau {tau / 1e3:.3g} us; raise --tdf")


def cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat (idle and iowait
    are not busy)."""
    fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal (guest time is in user)
    return total - fields[3] - fields[4], total


def run_features(defn: Definition) -> set[str]:
    from testbed.kinds import KINDS

    from testbed.cc.modules import OUR_MODULES
    from testbed.cc.profiles import PROFILES

    kind = KINDS[defn.kind]
    need: set[str] = set()
    for p in defn.points():
        need |= kind.features(p.values)
    # a [cca] table whose profiles run one of our kernel modules needs module loading
    if defn.cca is not None:
        choices = [c for c in (defn.cca.default, *defn.cca.hosts.values()) if c is not None]
        if any(PROFILES[c.profile].algorithm in OUR_MODULES for c in choices):
            need.add("modules")
    return need


def choose_placement(needs: set[str], placement: str) -> tuple[str, list[str]]:
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
    """Run ``defn``; returns the exit code (0 ok, 1 failed points, 130/143 interrupted)."""
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


def run_native(defn: Definition, opts: RunOptions, run_id: str, out: Path, needs: list[str]) -> int:
    """Run all points here; skips complete ones (resume); tears down on any exit."""
    from testbed.kinds import KINDS

    kind = KINDS[defn.kind]
    store = RunStore.open(out, defn)
    points = defn.points()
    write_json(out / "manifest.json", manifest.build(
        argv=opts.argv, tdf=defn.tdf.factor, seeds=sorted({p.seed for p in points}), features=needs,
        extra={"run_id": run_id, "points": len(points),
               "congestion_control": manifest.congestion_control(defn)}))
    _log_to(out / "logs" / "run.log")
    token = "ot" + secrets.token_hex(2)
    ledger = Ledger.create(f"{run_id}-{os.getpid()}", results_dir=str(out), argv=opts.argv)
    todo = [p for p in points if store.state(p) != "complete"]
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
                progress.start(point)
                d = store.begin(point)
                ctx = PointContext(defn, point, d, ledger, token, opts.pcap, out / "pcap",
                                   progress_fn=progress.note, kept=kept)
                t0, host0 = time.monotonic(), hostclock.host_seconds()
                try:
                    try:
                        summary = kind.run_point(ctx)
                    except BaseException:
                        kept.drop()  # the next point starts from scratch
                        raise
                except TestbedError as exc:
                    failed += 1
                    store.finish(point, None, error=str(exc), wall_s=hostclock.host_seconds() - host0,
                                 emulation_s=time.monotonic() - t0)
                    log.error("%s failed: %s", point.id, exc)
                    (d / "error.txt").write_text(traceback.format_exc())
                    progress.end(point, ok=False)
                    continue
                store.finish(point, summary, wall_s=hostclock.host_seconds() - host0,
                             emulation_s=time.monotonic() - t0)
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
