"""Set-up and environment timings: no-op `make setup`, feature probes, guest boot."""

from __future__ import annotations

import sys
import time

from testbed.benchmarks import Measurement, timed


def run() -> list[Measurement]:
    from testbed.features import probe_all

    probes = []
    for _ in range(5):
        t0 = time.monotonic()
        probe_all()
        probes.append(time.monotonic() - t0)
    return [
        Measurement("make setup (prepared machine, no-op)", timed(["make", "-s", "setup"], 3)),
        Measurement("feature probes (probe_all)", probes),
        Measurement("guest boot to exit (testbed guest -- true)",
                    timed([sys.executable, "-m", "testbed", "guest", "--", "true"], 3)),
    ]
