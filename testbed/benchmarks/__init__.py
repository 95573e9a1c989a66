"""`make bench`: timings reported in closing notes (not asserted by tests).

Each area has its own module here with ``run()`` returning or yielding Measurements; ``main`` runs
them all (or the ones named on the command line) and prints one line per measurement.
"""

from __future__ import annotations

import importlib
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: benchmark modules in run order (``testbed.benchmarks.<name>``)
AREAS = ("setup", "switch", "traffic", "cc", "xcp", "guest")


@dataclass
class Measurement:
    """One benchmark result: ``values`` are repeated samples in ``unit``."""

    name: str
    values: list[float]
    unit: str = "s"

    def line(self) -> str:
        v = self.values
        return (f"{self.name:<55} median {statistics.median(v):10.4g} {self.unit:<6} "
                f"(n={len(v)}, min {min(v):.4g}, max {max(v):.4g})")


def timed(argv: list[str], runs: int) -> list[float]:
    """Wall seconds of ``runs`` runs of ``argv`` in the repository (output discarded)."""
    out = []
    for _ in range(runs):
        t0 = time.monotonic()
        subprocess.run(argv, cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out.append(time.monotonic() - t0)
    return out


def main(argv: list[str] | None = None) -> int:
    names = (argv if argv is not None else sys.argv[1:]) or list(AREAS)
    unknown = [n for n in names if n not in AREAS]
    if unknown:
        print(f"error: unknown benchmark area(s) {unknown}; accepted: {', '.join(AREAS)}", file=sys.stderr)
        return 2
    for name in names:
        try:
            mod = importlib.import_module(f"testbed.benchmarks.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"testbed.benchmarks.{name}":
                raise
            continue  # area not built yet
        print(f"== {name} ==", flush=True)
        for m in mod.run():
            print(m.line(), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
