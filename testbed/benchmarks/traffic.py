"""Traffic agent benchmarks: sustained flow starts per second of 10 KB transfers with
the agent (both ends of every flow) on one core, and CPU seconds per Gb/s of one bulk
flow.

Natively as root the two hosts are two namespaces joined by a veth pair
(``TwoHostPath(switch="none")``, unshaped, offloads off as in every emulation), served
by the emulation's one agent for all runs; without root, on the loopback of the
current namespace (a ``LoopbackNet``: one agent for all runs too). Run:
``make bench AREAS=traffic`` (or ``python -m testbed.benchmarks traffic``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from testbed.benchmarks import Measurement

RATES = (1000, 2000, 3000, 4000, 5000, 6000, 8000)
STEP_S = 3.0
# Start lag (actual - scheduled start) limits for "sustained": a backlog would grow the
# median without bound; the tail is dominated by other processes sharing the core.
LAG_MEDIAN_LIMIT_S = 0.005
LAG_P90_LIMIT_S = 0.050


@contextlib.contextmanager
def two_hosts() -> Iterator[tuple[Any, list[Any], str]]:
    """(emu or None, [sender, receiver], where) for the benchmark's path."""
    from testbed.traffic.local import LoopbackHost, LoopbackNet

    if os.geteuid() != 0:
        hosts = [LoopbackHost("a", "127.0.77.1"), LoopbackHost("b", "127.0.77.2")]
        with LoopbackNet(hosts) as net:
            yield net, hosts, "loopback"
        return
    from testbed.ledger import Ledger
    from testbed.net import Emulation
    from topologies.path import TwoHostPath

    led = Ledger.create(f"bench-traffic-{os.getpid()}-{time.monotonic_ns()}")
    try:
        with Emulation(TwoHostPath(switch="none"), led, "ot" + secrets.token_hex(2)) as emu:
            yield emu, emu.hosts(), "veth"
    finally:
        if led.path.exists():
            led.teardown()


def _run(emu: Any, hosts: list[Any], schedule: Any, duration_s: float | None, cpu: int | None) -> Any:
    from testbed.traffic import TrafficRun

    out = Path(tempfile.mkdtemp(prefix="bench-traffic-"))
    run = TrafficRun(emu, hosts, schedule, "cubic", out, duration_s=duration_s, start_delay_s=1.0)
    with run:
        assert run.agent is not None
        os.sched_setaffinity(run.agent.pid, {cpu} if cpu is not None else os.sched_getaffinity(0))
        run.wait(timeout_s=(duration_s or 30) + 60)
    return run.result


def flow_rate(emu: Any, hosts: list[Any]) -> tuple[float, float]:
    """(highest offered rate sustained, agent CPU microseconds per flow at that rate).

    Sustained: every flow completed and the start lag (actual - scheduled start) had a
    median below LAG_MEDIAN_LIMIT_S and a 90th percentile below LAG_P90_LIMIT_S, with
    the agent pinned to CPU 0.
    CPU per flow subtracts the agent's CPU for a point without flows (set-up, stop)."""
    from testbed.traffic import Fixed, batch, poisson_schedule

    base = _run(emu, hosts, batch([]), 0.5, 0)
    idle_cpu = base.agent_cpu_s()
    best, best_us = 0.0, float("nan")
    names = [h.name for h in hosts]
    for rate in RATES:
        sched = poisson_schedule(names, rate, STEP_S, Fixed(10_000), seed=rate)
        res = _run(emu, hosts, sched, None, 0)
        lags = sorted(f.start_s - f.sched_start_s for f in res.flows if f.start_s is not None)
        ok = bool(lags) and res.counts()["complete"] == len(sched) and \
            lags[len(lags) // 2] < LAG_MEDIAN_LIMIT_S and lags[int(0.9 * (len(lags) - 1))] < LAG_P90_LIMIT_S
        if not ok:
            break
        best = float(rate)
        best_us = (res.agent_cpu_s() - idle_cpu) / len(sched) * 1e6
    return best, best_us


def bulk_cpu(emu: Any, hosts: list[Any], duration_s: float = 4.0) -> tuple[float, float]:
    """(throughput Gb/s, agent CPU seconds per second per Gb/s) of one bulk flow."""
    from testbed.traffic import Window, batch, long_lived

    base = _run(emu, hosts, batch([]), 0.5, None)
    idle_cpu = base.agent_cpu_s()
    from testbed.traffic import TrafficRun

    out = Path(tempfile.mkdtemp(prefix="bench-traffic-"))
    run = TrafficRun(emu, hosts, long_lived([(hosts[0].name, hosts[1].name)], duration_s=duration_s), "cubic", out,
                     window=Window(0.0, duration_s), duration_s=duration_s + 0.5)
    with run:
        run.wait()
    res = run.result
    gbps = res.throughput_bps / 1e9
    cpu = res.agent_cpu_s() - idle_cpu
    return gbps, cpu / duration_s / gbps


def run() -> list[Measurement]:
    rates, per_flow, gbps, cpu_per = [], [], [], []
    with two_hosts() as (emu, hosts, where):
        for _ in range(2):
            r, us = flow_rate(emu, hosts)
            rates.append(r)
            per_flow.append(us)
        for _ in range(3):
            g, c = bulk_cpu(emu, hosts)
            gbps.append(g)
            cpu_per.append(c)
    return [
        Measurement(f"traffic: 10 KB flow starts/s sustained, 1 core ({where})", rates, "flows/s"),
        Measurement(f"traffic: agent CPU per 10 KB flow, both ends ({where})", per_flow, "us"),
        Measurement(f"traffic: 10 KB flows per CPU-second, both ends ({where})",
                    [1e6 / us for us in per_flow if us > 0], "flows/s"),
        Measurement(f"traffic: one bulk flow ({where})", gbps, "Gb/s"),
        Measurement(f"traffic: agent CPU per Gb/s of bulk ({where})", cpu_per, "core/Gbps"),
    ]
