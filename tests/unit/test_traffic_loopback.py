"""The traffic agents over loopback (no root): the wire protocol, exact byte counts,
long-lived flows, measurement windows and clear start-up errors."""

import os
import random
import time

import pytest

from testbed.traffic import (Fixed, LoopbackHost, Schedule, TrafficError, TrafficRun, Window, batch, long_lived,
                             poisson_schedule)


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
    with pytest.raises(TrafficError, match="no_such_cc"):
        with TrafficRun(None, hs, batch([("h1", "h2", 10)]), "no_such_cc", tmp_path, port=port()):
            pass


def test_refused_connection_is_a_failed_record(tmp_path):
    hs = hosts(2)
    run = TrafficRun(None, hs, batch([("h1", "h2", 10)], at_s=0.5), "cubic", tmp_path, port=port())
    with run:
        # h2's agent dies before the flow starts, so h1's connect() is refused
        run.procs["h2"].kill()
        run.procs["h2"].wait()
        deadline = time.monotonic() + 20
        while not (tmp_path / "done-h1").exists():
            assert time.monotonic() < deadline, "h1 never ended its flow"
            time.sleep(0.02)
    (f,) = run.result.flows
    assert f.status == "failed" and "refused" in f.reason
