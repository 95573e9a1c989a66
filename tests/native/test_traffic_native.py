"""Traffic agents in network namespaces (testbed.net.Emulation, veth, HTB): exact byte
counts, records that survive killed agents, and one bulk flow against iperf3."""

import json
import os
import secrets
import time

import pytest
from mininet.topo import Topo

from helpers import require_features, require_root
from testbed.kinds.netem_path import IPERF_PORT, parse_iperf3, wait_listening
from testbed.ledger import Ledger
from testbed.net import Emulation, LinkShape
from testbed.traffic import (BimodalLognormal, Fixed, Schedule, TrafficRun, Window, batch, long_lived,
                             poisson_schedule)
from testbed.traffic.records import read_jsonl
from topologies.path import TwoHostPath


class ThreeHosts(Topo):
    """h1, h2, h3 on one Linux bridge."""

    def build(self) -> None:
        s1 = self.addSwitch("s1", cls="bridge")
        for h in ("h1", "h2", "h3"):
            self.addLink(self.addHost(h), s1)


@pytest.fixture
def ledger():
    require_root()
    require_features("netns", "htb")
    led = Ledger.create(f"test-traffic-{os.getpid()}-{time.monotonic_ns()}")
    yield led
    if led.path.exists():  # an Emulation's teardown already removed a finished ledger
        led.teardown()


def token() -> str:
    return "ot" + secrets.token_hex(2)


def test_every_completed_flow_delivered_exactly_its_size(ledger, tmp_path):
    sizes = BimodalLognormal(0.8, 20e3, 0.7, 2e6, 0.5)
    sched = Schedule.merge(poisson_schedule(["h1", "h2", "h3"], 150, 2.0, sizes, seed=5),
                           batch([("h1", "h3", 20_000_000), ("h2", "h3", 7_000_001), ("h3", "h1", 1)], at_s=0.5))
    with Emulation(ThreeHosts(), ledger, token()) as emu:
        with TrafficRun(emu, emu.hosts(), sched, "cubic", tmp_path, granularities_s=(0.1,)) as run:
            run.wait(timeout_s=120)
        procs = [e for e in ledger.entries if e.kind == "process"]
        assert len(procs) == 3 and all(e.gone for e in procs)  # recorded, then stopped
    res = run.result
    assert res.counts() == {"complete": len(sched), "incomplete": 0, "failed": 0}, \
        [f for f in res.flows if f.status != "complete"][:3]
    for spec, f in zip(sched.flows, res.flows):
        assert f.flow_id == spec.id and f.sink_bytes == f.size_bytes == spec.size_bytes
    assert sum(r["bytes"] for r in res.series(0.1)) == sum(s.size_bytes for s in sched.flows)


def test_killed_agents_keep_all_completed_records(ledger, tmp_path):
    sched = poisson_schedule(["h1", "h2"], 100, 120.0, Fixed(50_000), seed=9)
    with Emulation(TwoHostPath(shape=LinkShape(rate_bps=50e6), switch="none"), ledger, token()) as emu:
        run = TrafficRun(emu, emu.hosts(), sched, "reno", tmp_path, duration_s=120.0)
        with run:
            deadline = time.monotonic() + 60

            def completed():
                return [r for h in ("h1", "h2") for r in read_jsonl(tmp_path / f"flows-{h}.jsonl")
                        if r["status"] == "complete"]
            while len(completed()) < 150:  # about 1.5 s of arrivals
                assert time.monotonic() < deadline, "flows did not complete"
                time.sleep(0.05)
            before = {r["id"] for r in completed()}
            for p in run.procs.values():   # the harshest kill: no chance to write anything more
                p.kill()
            kill_t = time.monotonic() - run.t0
            for p in run.procs.values():
                p.wait(timeout=10)
    for h in ("h1", "h2"):
        for name in (f"flows-{h}.jsonl", f"sink-{h}.jsonl"):
            lines = (tmp_path / name).read_text().splitlines()
            assert all(json.loads(line) for line in lines)  # no torn record
        assert not (tmp_path / f"stats-{h}.json").exists()  # really killed, not stopped
    res = run.result
    done = {f.flow_id: f for f in res.flows if f.status == "complete"}
    assert before <= set(done) and len(done) < len(sched)
    for f in done.values():
        assert f.sink_bytes == f.size_bytes == 50_000
    # every flow the receivers confirmed well before the kill is in the senders' files
    confirmed = {r["id"] for h in ("h1", "h2") for r in read_jsonl(tmp_path / f"sink-{h}.jsonl")
                 if r["status"] == "complete" and r["last"] < kill_t - 0.5}
    assert confirmed and confirmed <= set(done)


def test_bulk_throughput_matches_iperf3(ledger, tmp_path):
    rate, duration, omit = 50e6, 6.0, 1.5
    with Emulation(TwoHostPath(shape=LinkShape(rate_bps=rate), switch="none"), ledger, token()) as emu:
        h1, h2 = emu["h1"], emu["h2"]
        server = h2.popen(["iperf3", "-s", "-1", "-B", h2.ip, "-p", str(IPERF_PORT)])
        wait_listening(h2, IPERF_PORT, timeout_s=10)
        out = h1.run(["iperf3", "-c", h2.ip, "-p", str(IPERF_PORT), "-J", "-t", f"{duration - omit:g}",
                      "-O", f"{omit:g}", "-C", "cubic"], timeout=60)
        server.wait(timeout=10)
        iperf_bps = parse_iperf3(out.stdout)["throughput_bps"]
        sched = long_lived([("h1", "h2")], duration_s=duration)
        with TrafficRun(emu, emu.hosts(), sched, "cubic", tmp_path, window=Window(omit, duration - omit),
                        granularities_s=(0.5,), duration_s=duration + 1.0) as run:
            run.wait()
    ours = run.result.throughput_bps
    assert 0.5 * rate < iperf_bps < 1.1 * rate  # the shaping is effective
    print(f"bulk: agent {ours / 1e6:.3f} Mbit/s, iperf3 {iperf_bps / 1e6:.3f} Mbit/s")
    assert ours == pytest.approx(iperf_bps, rel=0.05), (ours, iperf_bps)
