"""The traffic agent over loopback (no root): the wire protocol, exact byte counts,
long-lived flows, measurement windows, clear start-up errors, and one agent serving
several points (runs) one after the other."""

import json
import os
import random
import signal

import pytest

from testbed.traffic import (Fixed, LoopbackHost, LoopbackNet, Schedule, TrafficError, TrafficRun, Window, batch,
                             long_lived, poisson_schedule)
from testbed.traffic.records import read_jsonl


def hosts(n=3):
    base = random.randint(2, 250)
    return [LoopbackHost(f"h{i}", f"127.{base}.{os.getpid() % 250}.{i}") for i in range(1, n + 1)]


def port():
    return random.randint(20000, 40000)


def test_every_completed_flow_delivers_exactly_its_size(tmp_path):
    hs = hosts()
    sched = Schedule.merge(poisson_schedule([h.name for h in hs], 300, 1.0, Fixed(25_000), seed=1),
                           batch([("h1", "h2", 3_000_000), ("h3", "h1", 1), ("h2", "h3", 65_537)], at_s=0.2))
    with TrafficRun(None, hs, sched, "reno", tmp_path, port=port(), granularities_s=(0.1,)) as run:
        run.wait(timeout_s=60)
    res = run.result
    assert res.counts() == {"complete": len(sched), "incomplete": 0, "failed": 0}
    by_id = {f.flow_id: f for f in res.flows}
    for spec in sched.flows:
        f = by_id[spec.id]
        assert f.sink_bytes == spec.size_bytes == f.size_bytes
        assert f.cca == "reno" and (f.src, f.dst) == (spec.src, spec.dst)
        assert f.start_s <= f.connected_s <= f.first_byte_s <= f.last_byte_s <= f.end_s
        assert f.start_s >= spec.start_s - 1e-9 and f.goodput_bps > 0 and f.srtt_s > 0
    total = sum(s.size_bytes for s in sched.flows)
    assert sum(r["bytes"] for r in res.series(0.1)) == total
    res.write()
    assert (tmp_path / "flows.csv").read_text().count("\n") == len(sched) + 1


def test_long_lived_flow_with_duration_clamp_and_window(tmp_path):
    hs = hosts(2)
    sched = long_lived([("h1", "h2")], start_s=0.0, duration_s=1.0, sndbuf_bytes=1 << 16,
                       window_clamp_bytes=1 << 15)
    with TrafficRun(None, hs, sched, "cubic", tmp_path, port=port(), window=Window(0.25, 0.5),
                    granularities_s=(0.05, 0.25), duration_s=1.6) as run:
        run.wait()
    res = run.result
    (f,) = res.flows
    assert f.status == "complete" and f.size_bytes == f.sink_bytes > 0
    assert f.fct_s == pytest.approx(1.0, abs=0.2)
    # the window counts only bytes received within [0.25, 0.75) s
    fine = res.flow_series(0, 0.05)
    in_window = sum(r["bytes"] for r in fine if 0.25 - 1e-9 <= r["t_s"] < 0.75 - 1e-9)
    assert res.window_bytes == in_window
    assert res.throughput_bps == pytest.approx(8 * in_window / 0.5)
    assert 0 < res.window_bytes < f.size_bytes
    coarse = res.series(0.25)
    assert sum(r["bytes"] for r in coarse) == f.size_bytes


def test_run_stop_marks_running_flows_incomplete(tmp_path):
    hs = hosts(2)
    sched = Schedule.merge(long_lived([("h1", "h2")]), batch([("h2", "h1", 1000)], at_s=30.0))
    with TrafficRun(None, hs, sched, "cubic", tmp_path, port=port(), duration_s=0.5) as run:
        run.wait()
    st = {f.tag or "late": f for f in run.result.flows}
    # stopped by its own agent ("running ...") or reset by the receiver's agent stopping first
    assert st["long"].status == "incomplete" and ("running" in st["long"].reason or "run stopped" in st["long"].reason)
    assert st["long"].sink_bytes > 0
    assert st["late"].status == "incomplete" and "not started" in st["late"].reason


def test_unknown_congestion_control_fails_clearly(tmp_path):
    hs = hosts(2)
    with pytest.raises(TrafficError, match=r"host h1: congestion control 'no_such_cc' cannot be set"):
        with TrafficRun(None, hs, batch([("h1", "h2", 10)]), "no_such_cc", tmp_path, port=port()):
            pass


class WrongPort(TrafficRun):
    """Flows go to a port nobody listens on."""

    def agent_config(self, name):
        cfg = super().agent_config(name)
        for f in cfg["flows"]:
            f["dst_port"] = self.port + 1
        return cfg


def test_refused_connection_is_a_failed_record(tmp_path):
    hs = hosts(2)
    with WrongPort(None, hs, batch([("h1", "h2", 10)], at_s=0.1), "cubic", tmp_path, port=port()) as run:
        run.wait(timeout_s=20)
    (f,) = run.result.flows
    assert f.status == "failed" and "refused" in f.reason


def test_one_agent_serves_consecutive_points(tmp_path):
    """The same process runs three points; each point's files hold its own flows only;
    a refused point (bad congestion control) leaves it serving the next one."""
    hs = hosts(3)
    p = port()
    with LoopbackNet(hs) as net:
        first = Schedule.merge(batch([("h1", "h2", 30_000, "first")] * 5, at_s=0.0),
                               batch([("h2", "h3", 70_000, "first")], at_s=0.1))
        with TrafficRun(net, hs, first, "reno", tmp_path / "a", port=p) as run1:
            run1.wait(timeout_s=30)
        pid = run1.agent.pid
        assert run1.agent.alive()  # kept for the next point
        with pytest.raises(TrafficError, match=r"host h\d: congestion control 'no_such_cc'"):
            with TrafficRun(net, hs, first, "no_such_cc", tmp_path / "refused", port=p):
                pass
        second = batch([("h3", "h1", 12_345, "second"), ("h1", "h3", 54_321, "second")], at_s=0.05)
        with TrafficRun(net, hs, second, "cubic", tmp_path / "b", port=p, granularities_s=(0.1,)) as run2:
            run2.wait(timeout_s=30)
        assert run2.agent.pid == pid and run2.agent.alive()
    assert not run2.agent.alive()  # LoopbackNet ended it
    res1, res2 = run1.result, run2.result
    assert res1.counts() == {"complete": 6, "incomplete": 0, "failed": 0}
    assert res2.counts() == {"complete": 2, "incomplete": 0, "failed": 0}
    assert {f.tag for f in res2.flows} == {"second"} and {f.cca for f in res2.flows} == {"cubic"}
    assert sorted(f.sink_bytes for f in res2.flows) == [12_345, 54_321]
    sinks = [r for h in ("h1", "h2", "h3") for r in read_jsonl(tmp_path / "b" / f"sink-{h}.jsonl")]
    assert sorted(r["got"] for r in sinks) == [12_345, 54_321]  # no connection of the first point
    assert sum(s["flows"] for s in res2.stats.values()) == 2
    assert sum(r["bytes"] for r in res2.series(0.1)) == 12_345 + 54_321
    assert all(s["cpu_user_s"] + s["cpu_sys_s"] == res2.agent_cpu_s() for s in res2.stats.values())


def test_notified_flows_and_stop_before_the_end(tmp_path):
    """Flows with a notify tag are reported as they end (E3's broker); a run stopped
    while a flow still runs records it as incomplete, and all files are written at
    the stop."""
    hs = hosts(2)
    sched = Schedule.merge(batch([("h1", "h2", 20_000, "elephant")], at_s=0.0), long_lived([("h2", "h1")]))
    with TrafficRun(None, hs, sched, "cubic", tmp_path, port=port(), notify_tags=("elephant",)) as run:
        elephant = next(f.id for f in sched.flows if f.tag == "elephant")
        for _ in range(400):
            if run.poll(0.05) or run.ended_flows():
                break
        assert run.ended_flows() == {elephant}
        assert not run.done()  # the long-lived flow still runs
        assert not (tmp_path / "flows-h1.jsonl").exists()  # nothing written during the point
    st = {f.tag: f for f in run.result.flows}
    assert st["elephant"].status == "complete"
    assert st["long"].status == "incomplete" and st["long"].sink_bytes > 0


def test_killed_agent_fails_the_point_and_is_replaced(tmp_path):
    hs = hosts(2)
    with LoopbackNet(hs) as net:
        run = TrafficRun(net, hs, long_lived([("h1", "h2")]), "cubic", tmp_path / "a", port=port())
        with pytest.raises(TrafficError, match=r"killed \(signal 9\)"):
            with run:
                os.kill(run.agent.pid, signal.SIGKILL)
                run.wait(timeout_s=20)
        assert run.result is None and not list((tmp_path / "a").glob("flows-*"))  # nothing of the point
        with TrafficRun(net, hs, batch([("h1", "h2", 1000)]), "cubic", tmp_path / "b", port=port()) as run2:
            run2.wait(timeout_s=20)
        assert run2.agent.pid != run.agent.pid
    assert run2.result.counts()["complete"] == 1


def test_agent_ends_the_point_and_exits_when_its_controller_goes(tmp_path):
    """stdin closing (the controller died) ends a running point, whose files are then
    written, and the agent."""
    hs = hosts(2)
    with LoopbackNet(hs) as net:
        run = TrafficRun(net, hs, long_lived([("h1", "h2")]), "cubic", tmp_path, port=port())
        with run:
            run.poll(0.3)
            run.agent.proc.stdin.close()
            run.wait(timeout_s=20)
            assert run.finished["reason"] == "eof" and run.finished["written"]
            assert run.agent.proc.wait(timeout=20) == 0
    (f,) = run.result.flows
    assert f.status == "incomplete" and f.sink_bytes > 0


def test_agent_protocol_errors_name_the_host_and_leave_it_serving(tmp_path):
    """Bad messages and configs, and a port in use, come back as errors (naming the
    host where there is one); the agent then still serves a valid point."""
    import json
    import socket

    from testbed.hostclock import Deadline
    from testbed.traffic.control import AgentProcess

    hs = hosts(2)
    agent = AgentProcess.start(None)

    def ask(msg):
        if isinstance(msg, dict):
            agent.send(msg)
        else:
            agent.proc.stdin.write(msg)
            agent.proc.stdin.flush()
        reply = agent.receive(Deadline(20))
        assert reply is not None, (msg, agent.stderr_tail())
        return reply

    try:
        assert ask(b"not json\n")["ev"] == "error"
        assert "start for no point" in ask({"op": "start", "seq": 7, "t0": 0.0})["reason"]
        run = TrafficRun(None, hs, batch([("h1", "h2", 1000)]), "reno", tmp_path, port=port())
        cfgs = [run.agent_config(h.name) for h in hs]
        bad = json.loads(json.dumps(cfgs))
        del bad[1]["cca"]
        r = ask({"op": "point", "seq": 1, "out_dir": str(tmp_path), "hosts": bad})
        assert (r["ev"], r["host"]) == ("error", "h2") and "cca" in r["reason"]
        busy = socket.socket()
        busy.bind((hs[0].ip, run.port))  # not listening, no SO_REUSEADDR: bind() must fail
        r = ask({"op": "point", "seq": 2, "out_dir": str(tmp_path), "hosts": cfgs})
        assert (r["ev"], r["host"]) == ("error", "h1") and "cannot listen" in r["reason"], r
        busy.close()
        assert ask({"op": "point", "seq": 3, "out_dir": str(tmp_path), "hosts": cfgs})["ev"] == "ready"
        agent.send({"op": "start", "seq": 3, "t0": 0.0})
        r = agent.receive(Deadline(20))
        assert (r["ev"], r["seq"], r["reason"], r["written"], r["flows_ended"]) == ("done", 3, "done", True, 1)
        assert agent.alive()
    finally:
        agent.close()
    assert not agent.alive() and agent.proc.returncode == 0
    (rec,) = read_jsonl(tmp_path / "flows-h1.jsonl")
    assert rec["status"] == "complete" and rec["confirmed"] == 1000


def test_agent_out_of_descriptors_fails_the_point_naming_the_limit(tmp_path, monkeypatch):
    """20 transfers open at once need 40 descriptors (both ends in one agent): held to
    32, the agent must fail the point, not record transfers as failed and go on."""
    from testbed.traffic.agent import NOFILE_ENV

    monkeypatch.setenv(NOFILE_ENV, "32")
    hs = hosts(2)
    sched = long_lived([("h1", "h2")] * 20, duration_s=3.0, stagger_s=0.01)
    with pytest.raises(TrafficError, match=r"ran short .*descriptor limit 32"):
        with TrafficRun(None, hs, sched, "reno", tmp_path, port=port(), duration_s=5.0) as run:
            run.wait(timeout_s=30)
    stats = json.loads((tmp_path / "stats-h1.json").read_text())   # written for the diagnosis
    assert stats["fd_limit"] == 32 and "Too many open files" in stats["error"]
    records = read_jsonl(tmp_path / "flows-h1.jsonl")
    assert len(records) == 20 and not [r for r in records if r["status"] == "failed"]
    assert run.finished["reason"] == "agent-error"


def test_agent_raises_its_descriptor_limit_and_reports_its_peak(tmp_path):
    import resource

    from testbed.traffic.agent import WANT_NOFILE

    hs = hosts(2)
    sched = long_lived([("h1", "h2")] * 6, duration_s=0.5)
    with TrafficRun(None, hs, sched, "reno", tmp_path, port=port(), duration_s=1.5) as run:
        run.wait(timeout_s=30)
    assert run.result.counts()["failed"] == 0
    stats = json.loads((tmp_path / "stats-h1.json").read_text())
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]   # the agent may raise this too (CAP_SYS_RESOURCE)
    floor = WANT_NOFILE if hard == resource.RLIM_INFINITY else min(WANT_NOFILE, hard)
    assert stats["fd_limit"] >= floor and (stats["fd_limit"] > 1024 or hard <= 1024)
    assert stats["max_open_connections"] == 12 and stats["error"] is None
