"""The traffic agent with hosts in network namespaces (testbed.net.Emulation, veth,
HTB): exact byte counts, sockets in each host's namespace, one agent process serving
consecutive points, clear errors, a killed agent, and one bulk flow against iperf3."""

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mininet.topo import Topo

from helpers import REPO, require_features, require_root, run_testbed
from testbed import cmd
from testbed.families.netem_path import IPERF_PORT, parse_iperf3, wait_listening
from testbed.ledger import Ledger
from testbed.nsops import netns_exists
from testbed.net import Emulation, LinkShape
from testbed.traffic import (BimodalLognormal, Schedule, TrafficError, TrafficRun, Window, batch, long_lived,
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


def agent_entries(ledger):
    return [e for e in ledger.entries if e.resource == "process" and "testbed.traffic.agent" in e.attrs["argv"]]


def test_every_completed_flow_delivered_exactly_its_size(ledger, tmp_path):
    sizes = BimodalLognormal(0.8, 20e3, 0.7, 2e6, 0.5)
    sched = Schedule.merge(poisson_schedule(["h1", "h2", "h3"], 150, 2.0, sizes, seed=5),
                           batch([("h1", "h3", 20_000_000), ("h2", "h3", 7_000_001), ("h3", "h1", 1)], at_s=0.5))
    with Emulation(ThreeHosts(), ledger, token()) as emu:
        with TrafficRun(emu, emu.hosts(), sched, "cubic", tmp_path, granularities_s=(0.1,)) as run:
            run.wait(timeout_s=120)
        (entry,) = agent_entries(ledger)   # one process for the three hosts, recorded
        assert entry.attrs["pid"] == run.agent.pid and not entry.gone and run.agent.alive()
    assert entry.gone and not run.agent.alive()  # stopped with the emulation
    res = run.result
    assert res.counts() == {"complete": len(sched), "incomplete": 0, "failed": 0}, \
        [f for f in res.flows if f.status != "complete"][:3]
    for spec, f in zip(sched.flows, res.flows):
        assert f.flow_id == spec.id and f.sink_bytes == f.size_bytes == spec.size_bytes
    assert sum(r["bytes"] for r in res.series(0.1)) == sum(s.size_bytes for s in sched.flows)


def established(node_or_none, port):
    """(local, peer) address pairs of established TCP connections to or from ``port``
    in a host's namespace (None: this process's namespace)."""
    argv = ["ss", "-tnH", "state", "established", f"( sport = :{port} or dport = :{port} )"]
    out = node_or_none.run(argv).stdout if node_or_none else cmd.run(argv).stdout
    return {tuple(line.split()[-2:]) for line in out.splitlines() if line.strip()}


def test_sockets_live_in_each_hosts_namespace_and_points_share_the_agent(ledger, tmp_path):
    port = 5300
    with Emulation(ThreeHosts(), ledger, token()) as emu:
        h1, h2, h3 = emu["h1"], emu["h2"], emu["h3"]
        sched = Schedule.merge(long_lived([("h1", "h2")], duration_s=1.5), batch([("h3", "h1", 50_000)], at_s=0.1))
        with TrafficRun(emu, emu.hosts(), sched, "cubic", tmp_path / "a", port=port) as run1:
            run1.poll(0.5)
            for h in (h1, h2, h3):  # every host's listener is in its own namespace
                assert f"{h.ip}:{port}" in h.run(["ss", "-tlnH", f"sport = :{port}"]).stdout
            (conn,) = {c for c in established(h2, port) if c[0] == f"{h2.ip}:{port}"}
            assert conn[1].startswith(f"{h1.ip}:")                      # the sink's end, in h2
            assert any(c[1] == f"{h2.ip}:{port}" for c in established(h1, port))  # the sender's, in h1
            assert not established(None, port)          # nothing in the agent's own namespace
            agent = run1.agent
            # the agent's thread went back home after creating the sockets
            assert os.readlink(f"/proc/{agent.pid}/ns/net") == os.readlink("/proc/self/ns/net")
            run1.wait(timeout_s=30)
        with pytest.raises(TrafficError, match=r"host h2: congestion control 'no_such_cc' cannot be set"):
            with TrafficRun(emu, emu.hosts(), sched, {"h1": "cubic", "h2": "no_such_cc", "h3": "reno"},
                            tmp_path / "refused", port=port):
                pass
        second = batch([("h2", "h3", 333_333, "second"), ("h1", "h2", 222_222, "second")], at_s=0.0)
        with TrafficRun(emu, emu.hosts(), second, "reno", tmp_path / "b", port=port) as run2:
            run2.wait(timeout_s=30)
        assert run2.agent is agent and agent.alive() and len(agent_entries(ledger)) == 1
        assert not established(h2, port) and not established(h3, port)  # the points' sockets are closed
    res1, res2 = run1.result, run2.result
    assert res1.counts() == {"complete": 2, "incomplete": 0, "failed": 0}
    assert res2.counts() == {"complete": 2, "incomplete": 0, "failed": 0}
    assert {f.tag for f in res2.flows} == {"second"} and {f.cca for f in res2.flows} == {"reno"}
    sinks = [r for h in ("h1", "h2", "h3") for r in read_jsonl(tmp_path / "b" / f"sink-{h}.jsonl")]
    assert sorted(r["got"] for r in sinks) == [222_222, 333_333]


def test_killed_agent_fails_the_point_and_the_next_run_gets_a_new_one(ledger, tmp_path):
    with Emulation(TwoHostPath(shape=LinkShape(rate_bps=50e6), switch="none"), ledger, token()) as emu:
        run = TrafficRun(emu, emu.hosts(), long_lived([("h1", "h2")]), "reno", tmp_path / "a")
        with pytest.raises(TrafficError, match=r"killed \(signal 9\)"):
            with run:
                run.poll(0.5)
                os.kill(run.agent.pid, signal.SIGKILL)   # the harshest kill: nothing more is written
                run.wait(timeout_s=30)
        assert run.result is None and not list((tmp_path / "a").glob("flows-*"))
        assert agent_entries(ledger)[0].gone   # reaped and marked gone
        with TrafficRun(emu, emu.hosts(), batch([("h1", "h2", 100_000)]), "reno", tmp_path / "b") as run2:
            run2.wait(timeout_s=30)
        assert run2.agent.pid != run.agent.pid and len(agent_entries(ledger)) == 2
    assert run2.result.counts()["complete"] == 1


def running(pid, start_time):
    """True while process ``pid`` (with that start time) runs; a zombie waiting for
    init to reap it does not."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat[stat.rindex(")") + 2:].split()
    return fields[0] != "Z" and int(fields[19]) == start_time


# A run that builds an emulation, starts a point and then waits to be killed.
KILLED_RUN = """
import json, sys, time
from pathlib import Path
from testbed.ledger import Ledger
from testbed.net import Emulation
from testbed.traffic import TrafficRun, long_lived
from topologies.path import TwoHostPath

run_id, token, out = sys.argv[1:4]
ledger = Ledger.create(run_id)
emu = Emulation(TwoHostPath(switch="none"), ledger, token)
emu.build()
run = TrafficRun(emu, emu.hosts(), long_lived([("h1", "h2")]), "cubic", Path(out))
run.start()
print(json.dumps({"ledger": str(ledger.path), "agent": run.agent.pid,
                  "netns": [n.netns for n in emu.nodes.values()]}), flush=True)
time.sleep(600)
"""


def test_agent_of_a_killed_run_is_in_the_ledger_and_testbed_clean_stops_it(tmp_path):
    require_root()
    require_features("netns")
    run_id = f"test-killed-agent-{os.getpid()}-{time.monotonic_ns()}"
    proc = subprocess.Popen([sys.executable, "-c", KILLED_RUN, run_id, token(), str(tmp_path / "traffic")],
                            cwd=REPO, stdout=subprocess.PIPE, text=True, start_new_session=True)
    agent, start = None, None
    try:
        line = proc.stdout.readline()
        assert line, f"the run exited {proc.wait()} before its point started"
        info = json.loads(line)
        agent = info["agent"]
        start = cmd.process_start_time(agent)
        recs = read_jsonl(Path(info["ledger"]))
        seqs = {r["seq"] for r in recs if r.get("type") == "add" and "testbed.traffic.agent" in r.get("argv", [])}
        assert any(r.get("type") == "update" and r["seq"] in seqs and r.get("pid") == agent
                   and r.get("start_time") == start for r in recs), recs
        # a hung agent: stopped, it cannot notice that its controller is gone
        os.kill(agent, signal.SIGSTOP)
        proc.kill()
        proc.wait(timeout=10)
        time.sleep(0.5)
        assert running(agent, start)   # left behind by the killed run
        clean = run_testbed("clean")
        assert run_id in clean.stdout, clean.stdout
        assert not running(agent, start)   # stopped by `testbed clean`
        assert not [n for n in info["netns"] if netns_exists(n)]
        assert not Path(info["ledger"]).exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if agent is not None and start is not None and running(agent, start):
            os.kill(agent, signal.SIGKILL)


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


def tcp_sockets(node, port):
    """Every TCP socket (any state but listening) to or from ``port`` in a host's
    namespace, as ``ss`` lines."""
    out = node.run(["ss", "-tanH", "state", "all", "exclude", "listening",
                    f"( sport = :{port} or dport = :{port} )"]).stdout
    return [line for line in out.splitlines() if line.strip()]


def test_a_stopped_point_leaves_no_socket_even_when_the_path_is_down(ledger, tmp_path):
    """Transfers still open when a point ends are aborted: a graceful close would leave
    the sender's orphan (FIN-WAIT-1, unsent data) retrying into the next point."""
    port = 5301
    with Emulation(ThreeHosts(), ledger, token()) as emu:
        h1, h2 = emu["h1"], emu["h2"]
        sched = long_lived([("h1", "h2")], duration_s=30.0)
        with TrafficRun(emu, emu.hosts(), sched, "cubic", tmp_path, port=port, duration_s=60.0) as run:
            run.poll(0.5)
            assert tcp_sockets(h1, port) and tcp_sockets(h2, port)
            h2.run(["ip", "link", "set", "dev", h2.intfs[0], "down"])
            run.poll(0.3)   # the sender's window fills; nothing is acknowledged any more
            run.stop()
        assert run.result.counts()["incomplete"] == 1
        assert tcp_sockets(h1, port) == [] and tcp_sockets(h2, port) == []


def test_every_host_gets_the_flow_families_tcp_settings(ledger):
    from testbed.flow_family import HOST_TCP_SETTINGS, apply_host_tcp_settings

    with Emulation(ThreeHosts(), ledger, token()) as emu:
        apply_host_tcp_settings(emu.hosts())   # the kernel accepts every value
        for h in emu.hosts():
            assert {k: int(h.sysctl_get(k)) for k in HOST_TCP_SETTINGS} == HOST_TCP_SETTINGS
        assert int(emu["h1"].sysctl_get("net.ipv4.tcp_syn_retries")) == 127
