"""`make bench`: timings reported in closing notes (not asserted by tests).

Measures: no-op `make setup` on a prepared machine, `probe_all()`, and the full-kernel
guest's boot-to-exit time (`testbed guest -- true`), as medians of a few runs.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def timed(argv: list[str], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.monotonic()
        subprocess.run(argv, cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out.append(time.monotonic() - t0)
    return out


def main() -> int:
    from testbed.features import probe_all

    rows = []
    rows.append(("make setup (prepared machine, no-op)", timed(["make", "-s", "setup"], 3)))
    probes = []
    for _ in range(5):
        t0 = time.monotonic()
        probe_all()
        probes.append(time.monotonic() - t0)
    rows.append(("feature probes (probe_all)", probes))
    rows.append(("guest boot to exit (testbed guest -- true)",
                 timed([sys.executable, "-m", "testbed", "guest", "--", "true"], 3)))
    for name, values in rows:
        print(f"{name:<45} median {statistics.median(values):7.2f} s  "
              f"(n={len(values)}, min {min(values):.2f}, max {max(values):.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
