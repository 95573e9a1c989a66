"""testbed.process: spawn records a process before it starts; stop ends its whole group
(stop signal, then SIGKILL), reaps it and marks it gone; the ledger's teardown uses the
recorded stop signal."""

import json
import signal
import subprocess
import sys
import time

import pytest

from testbed import cmd, process
from testbed.ledger import Ledger

#: a Python child that prints "ready", then sleeps; with IGNORE it ignores SIGTERM
SLEEPER = "import signal, sys, time\n{setup}\nprint('ready', flush=True)\ntime.sleep(60)\n"


@pytest.fixture(autouse=True)
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path / "state"))
    return tmp_path


def records(led: Ledger) -> list[dict]:
    return [json.loads(x) for x in led.path.read_text().splitlines()[1:]]


def sleeper(led: Ledger | None, setup: str = "", **kw) -> process.Process:
    proc = process.spawn(led, [sys.executable, "-c", SLEEPER.format(setup=setup)], stdout=subprocess.PIPE, **kw)
    assert proc.stdout.readline() == b"ready\n"
    return proc


def test_spawn_records_before_start_and_stop_marks_gone():
    led = Ledger.create("p1")
    proc = sleeper(led)
    assert records(led) == [
        {"type": "add", "seq": 0, "resource": "process", "argv": proc.args, "netns": None, "group": True,
         "stop_signal": 15},
        {"type": "update", "seq": 0, "pid": proc.pid, "start_time": cmd.process_start_time(proc.pid)}]
    assert proc.ledger_seq == 0 and proc.start_time == cmd.process_start_time(proc.pid)
    assert process.stop(proc) is True                 # ended on SIGTERM
    assert proc.returncode == -signal.SIGTERM         # reaped by stop, its own status
    assert records(led)[-1] == {"type": "gone", "seq": 0} and led.entries[0].gone
    assert process.stop(proc) is True and len(records(led)) == 3   # again: nothing to do


def test_stop_kills_what_ignores_its_stop_signal_and_the_whole_group():
    """The stop signal and SIGKILL go to the process group: a grandchild goes too."""
    led = Ledger.create("p2")
    setup = ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\nimport subprocess\n"
             "child = subprocess.Popen(['sleep', '60'])\nprint(child.pid, flush=True)")
    proc = process.spawn(led, [sys.executable, "-c", SLEEPER.format(setup=setup)], stdout=subprocess.PIPE)
    grandchild = int(proc.stdout.readline())
    assert proc.stdout.readline() == b"ready\n"
    grandchild_start = cmd.process_start_time(grandchild)
    t0 = time.monotonic()
    assert process.stop(proc, grace_s=0.3) is False   # needed SIGKILL
    assert time.monotonic() - t0 < 3 and proc.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 5
    while process._state(grandchild, grandchild_start) == "running" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process._state(grandchild, grandchild_start) != "running"   # dead (perhaps not yet reaped)
    assert led.entries[0].gone


def test_a_command_that_cannot_start_is_marked_gone():
    led = Ledger.create("p3")
    with pytest.raises(OSError):
        process.spawn(led, ["/nonexistent/binary"])
    assert [r["type"] for r in records(led)] == ["add", "gone"]


def test_without_a_ledger_nothing_is_recorded_and_stop_works():
    proc = sleeper(None)
    assert proc.ledger is None and proc.ledger_seq is None
    assert process.stop(proc) is True and proc.returncode == -signal.SIGTERM


def test_log_file_gets_stdout_and_stderr_appended(tmp_path):
    log = tmp_path / "out.log"
    code = "import sys; print('out', flush=True); print('err', file=sys.stderr, flush=True)"
    for _ in range(2):
        process.spawn(None, [sys.executable, "-c", code], log=log).wait(timeout=10)
    assert log.read_text().split() == ["out", "err"] * 2


def test_cwd_env_and_netns_argv(tmp_path):
    led = Ledger.create("p4")
    code = "import os; print(os.getcwd(), os.environ['PROBE'])"
    proc = process.spawn(led, [sys.executable, "-c", code], cwd=tmp_path, env={"PROBE": "42"},
                         stdout=subprocess.PIPE)
    assert proc.communicate(timeout=10)[0].decode().split() == [str(tmp_path), "42"]
    # in a namespace: argv runs under `ip netns exec` (recorded so, with the namespace)
    led2 = Ledger.create("p5")
    with pytest.raises(OSError):
        process.spawn(led2, ["true"], netns="ns-x", env={"PATH": "/nonexistent"})
    assert records(led2)[0] == {"type": "add", "seq": 0, "resource": "process",
                                "argv": ["ip", "netns", "exec", "ns-x", "true"], "netns": "ns-x", "group": True,
                                "stop_signal": 15}


def test_teardown_stops_with_the_recorded_signal(tmp_path):
    """`testbed clean` (the ledger's teardown) sends the stop signal spawn recorded."""
    led = Ledger.create("p6")
    got = tmp_path / "got"
    setup = (f"signal.signal(signal.SIGINT, lambda s, f: (open({str(got)!r}, 'w').write(str(s)), sys.exit(0)))")
    proc = sleeper(led, setup, stop_signal=signal.SIGINT)
    assert Ledger.load(led.path).teardown() == []
    assert proc.wait(timeout=5) is not None and got.read_text() == str(int(signal.SIGINT))


def test_kill_process_leaves_a_recycled_pid_alone():
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        assert process.kill_process(other.pid, cmd.process_start_time(other.pid) + 1) == "absent"
        assert process.kill_process(other.pid, None) == "absent"
        time.sleep(0.1)
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()
