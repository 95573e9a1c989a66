"""The full-kernel guest under each clock (docs/guest-clock.md): fidelity and speed.

For the E1 demo point of issue 12 (SACK over hybrid n_e = 2 switches at 100 000 /s, two
repetitions) and the netem demo (50 Mbit/s, two repetitions), each under the real-time
clock (two vCPUs) and the default instruction-counted clock, with the host idle and
with two CPU hogs beside it:

- p99 release lateness / tau (E1, from each point's fidelity.json), and the netem
  path's ping RTT above the configured 2 x delay, / (2 x delay);
- paper seconds per wall second of the instrumented block (traffic) and wall seconds
  per point (status.json: host seconds also in an instruction-counted guest);
- wall seconds of the whole run (boot, build, points, teardown).

Every run goes to the guest (``--vm``), so on a machine whose kernel has everything the
numbers still describe the guest. About 20 minutes: ``make bench AREAS=guest``.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from testbed.benchmarks import REPO, Measurement
from testbed.units import Dim, Quantity

E1_POINT = ["e1-demo", "--set", "cca=sack", "--set", "switch=hybrid:2", "--set", "load=100000 /s",
            "--reps", "2"]
NETEM_POINT = ["demo", "--set", "rate=50 Mbit/s", "--reps", "2"]
#: clock name -> environment of the run
CLOCKS = {"realtime, 2 vCPUs": {"TESTBED_GUEST_CLOCK": "realtime", "TESTBED_GUEST_CPUS": "2"},
          "icount (default)": {"TESTBED_GUEST_CLOCK": "icount"}}
HOGS = 2


@contextlib.contextmanager
def cpu_hogs(n: int) -> Iterator[None]:
    """``n`` busy loops on the host while the block runs (none for n = 0)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def run_guest(args: list[str], env: dict[str, str], out: Path) -> float:
    """Wall seconds of ``testbed run ARGS --vm --no-report --out OUT``; raises
    CalledProcessError when the run fails."""
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "testbed", "run", *args, "--vm", "--no-report", "--out", str(out)],
                   cwd=REPO, env={**os.environ, **env}, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.monotonic() - t0


def point_dirs(out: Path) -> list[Path]:
    return sorted((out / "points").glob("p[0-9]*"))


def per_point(out: Path, name: str, key: str) -> list[float]:
    vals = []
    for d in point_dirs(out):
        p = d / name
        if p.exists():
            v = json.loads(p.read_text()).get(key)
            if v is not None:
                vals.append(float(v))
    return vals


def paper_per_wall(out: Path, tdf: float) -> list[float]:
    """Paper seconds per wall second of each point's instrumented block."""
    vals = []
    for d in point_dirs(out):
        p = d / "machine.json"
        if p.exists():
            m = json.loads(p.read_text())
            if m.get("wall_s"):
                vals.append(m["emulation_s"] / tdf / m["wall_s"])
    return vals


def column(out: Path, name: str, scale: float = 1.0) -> list[float]:
    """Column ``name`` of summary.csv (x ``scale``), one value per point."""
    with open(out / "summary.csv") as f:
        return [float(r[name]) * scale for r in csv.DictReader(f)]


def rtt_excess(out: Path) -> list[float]:
    """(median ping RTT - 2 x one-way delay) / (2 x delay) per point (netem demo)."""
    with open(out / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    vals = []
    for r in rows:
        delay = Quantity.parse(r["delay"], Dim.TIME).si  # one-way, paper seconds
        vals.append((float(r["rtt_median_s"]) - 2 * delay) / (2 * delay))
    return vals


def run() -> Iterator[Measurement]:
    """The measurements, each as soon as its run ended (the whole area takes ~20 min)."""
    for clock, env in CLOCKS.items():
        for hogs in (0, HOGS):
            load = "idle host" if hogs == 0 else f"{hogs} CPU hogs"
            tag = f"[{clock}, {load}]"
            with tempfile.TemporaryDirectory(prefix="bench-guest-") as tmp, cpu_hogs(hogs):
                e1 = Path(tmp) / "e1"
                wall = run_guest(E1_POINT, env, e1)
                tdf = json.loads((e1 / "config.json").read_text())["run"]["tdf"]
                yield from [Measurement(f"E1 point {tag}: run", [wall]),
                        Measurement(f"E1 point {tag}: wall per point", per_point(e1, "status.json", "wall_s")),
                        Measurement(f"E1 point {tag}: p99 lateness / tau",
                                    per_point(e1, "fidelity.json", "p99_over_tau"), "ratio"),
                        Measurement(f"E1 point {tag}: paper s per wall s", paper_per_wall(e1, tdf), "ratio"),
                        Measurement(f"E1 point {tag}: guest CPU busy", per_point(e1, "machine.json",
                                                                                  "cpu_busy_fraction"), "ratio"),
                        Measurement(f"E1 point {tag}: throughput", column(e1, "throughput_bps", 1e-9), "Gb/s")]
                netem = Path(tmp) / "netem"
                wall = run_guest(NETEM_POINT, env, netem)
                yield from [Measurement(f"netem demo {tag}: run", [wall]),
                        Measurement(f"netem demo {tag}: wall per point",
                                    per_point(netem, "status.json", "wall_s")),
                        Measurement(f"netem demo {tag}: RTT excess / (2 x delay)", rtt_excess(netem), "ratio"),
                        Measurement(f"netem demo {tag}: throughput", column(netem, "throughput_bps", 1e-6),
                                    "Mb/s")]
