"""controllers.process.ControlProcess with a tiny HTTP server as the controlled process:
it starts ledgered, its health check passes, it stops; failures name the cause; and
`testbed clean` stops it after its owner was SIGKILLed (not while the owner runs)."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from controllers.process import ControlError, ControlProcess, free_port
from testbed import cmd
from testbed.clean import clean
from testbed.ledger import Ledger, ledger_dir

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path / "state"))
    return tmp_path


def http_server(root, ready: bool = True) -> tuple[list[str], str]:
    """(argv, health URL): python's http.server on a free loopback port serving
    ``root/status`` ({"ready": ready})."""
    root.mkdir(exist_ok=True)
    (root / "status").write_text(json.dumps({"ready": ready}))
    port = free_port("127.0.0.1")
    argv = [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "--directory", str(root), str(port)]
    return argv, f"http://127.0.0.1:{port}/status"


def test_starts_ledgered_passes_its_health_check_logs_and_stops(tmp_path):
    led = Ledger.create("c1")
    argv, url = http_server(tmp_path / "www", ready=False)
    out = tmp_path / "out"
    with ControlProcess(led, argv, out, log_name="server.log", health=url) as ctl:
        pid = ctl.proc.pid
        [entry] = led.live()
        assert entry.resource == "process" and entry.attrs["argv"] == argv and entry.attrs["pid"] == pid
        assert ctl.check() == {"ready": False}
        (tmp_path / "www" / "status").write_text(json.dumps({"ready": True}))
        assert ctl.wait_for(lambda s: s["ready"], "readiness") == {"ready": True}
    assert ctl.proc is None and cmd.process_start_time(pid) is None     # stopped and reaped
    assert [e.gone for e in led.entries] == [True]
    assert "GET /status" in (out / "server.log").read_text()           # its stderr, in its log


def test_a_callable_health_check_and_a_timeout(tmp_path):
    led = Ledger.create("c2")
    argv, _ = http_server(tmp_path / "www")
    answers = iter([OSError("not yet"), "warming", "up"])

    def health():
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a

    with ControlProcess(led, argv, tmp_path / "out", health=health, ready_timeout_s=0.5) as ctl:
        assert ctl.wait_for(lambda a: a == "up", "it to be up") == "up"
        ctl.health = lambda: "never"
        t0 = time.monotonic()
        with pytest.raises(ControlError, match=r"timed out after 0.5 s waiting for Godot; last answer: never"):
            ctl.wait_for(lambda a: a == "ready", "Godot")
        assert 0.5 <= time.monotonic() - t0 < 3


def test_a_process_that_exits_is_reported_with_its_log(tmp_path):
    led = Ledger.create("c3")
    argv = [sys.executable, "-c", "import sys; print('bad config: no port'); sys.exit(3)"]
    ctl = ControlProcess(led, argv, tmp_path / "out", health="http://127.0.0.1:9/status", ready_timeout_s=30)
    with pytest.raises(ControlError, match=r"the control process exited \(3\) waiting for its health check to "
                                           r"pass: bad config: no port"):
        with ctl:
            pass
    assert ctl.proc is None and all(e.gone for e in led.entries)


def test_a_failing_ready_hook_stops_the_process(tmp_path):
    class Broken(ControlProcess):
        def ready(self) -> None:
            self.seen = self.proc.pid
            raise ControlError("switches never connected")

    led = Ledger.create("c4")
    argv, url = http_server(tmp_path / "www")
    ctl = Broken(led, argv, tmp_path / "out", health=url)
    with pytest.raises(ControlError, match="switches never connected"):
        with ctl:
            pass
    assert cmd.process_start_time(ctl.seen) is None and all(e.gone for e in led.entries)


#: a loop that writes its records on SIGTERM, for a while, then exits 0
RECORDING_LOOP = """
import signal, sys, time
from pathlib import Path
out = Path(sys.argv[1])
def finish(*_):
    out.joinpath("began").write_text("records")
    time.sleep(1.0)
    out.joinpath("records").write_text("done")
    sys.exit(0)
signal.signal(signal.SIGTERM, finish)
out.joinpath("status").write_text("up")
while True:
    time.sleep(0.05)
"""


def test_request_stop_signals_without_waiting_and_stop_then_waits_for_the_records(tmp_path):
    """request_stop returns at once (the loop is still writing its records a second
    long), stop() then waits for its own end, reaps it and marks it gone; a second
    request, once it has ended, is refused (False)."""
    led = Ledger.create("c5")
    out = tmp_path / "out"
    argv = [sys.executable, "-c", RECORDING_LOOP, str(out)]

    def health():
        return (out / "status").read_text()

    with ControlProcess(led, argv, out, health=health) as ctl:
        pid = ctl.proc.pid
        t0 = time.monotonic()
        assert ctl.request_stop() is True
        assert time.monotonic() - t0 < 0.5 and not (out / "records").exists()
        deadline = time.monotonic() + 10
        while not (out / "began").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert (out / "began").exists(), "the loop did not get its stop signal"
        assert ctl.alive()                           # still writing: request_stop did not wait
    assert (out / "records").read_text() == "done"   # stop() waited for its own end (no SIGKILL)
    assert ctl.proc is None and cmd.process_start_time(pid) is None
    assert [e.gone for e in led.entries] == [True]
    assert ctl.request_stop() is False

OWNER = """
import sys, time
from pathlib import Path
from controllers.process import ControlProcess
from testbed.ledger import Ledger
argv, url = sys.argv[1:-1], sys.argv[-1]
ctl = ControlProcess(Ledger.create("owned"), argv, Path(sys.argv[0]).parent, health=url).__enter__()
print(ctl.proc.pid, flush=True)
time.sleep(120)
"""


def test_testbed_clean_stops_it_after_its_owner_was_killed(tmp_path):
    """The owner (a run) starts the control process and is SIGKILLed: the process
    survives it (a session of its own); `testbed clean` leaves it while the owner runs
    and stops it once the owner is dead, archiving the ledger."""
    argv, url = http_server(tmp_path / "www")
    script = tmp_path / "owner.py"
    script.write_text(OWNER)
    owner = subprocess.Popen([sys.executable, str(script), *argv, url], stdout=subprocess.PIPE, cwd=REPO,
                             env={**os.environ, "PYTHONPATH": REPO})
    server = None
    try:
        server = int(owner.stdout.readline())
        start = cmd.process_start_time(server)
        cleaned, skipped, errors = clean()
        assert (cleaned, errors) == ([], []) and skipped[0].startswith("owned: still running")
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=10)
        assert cmd.process_start_time(server) == start                  # survived its owner
        cleaned, skipped, errors = clean()
        assert (cleaned, skipped, errors) == (["owned: removed 1 object(s)"], [], [])
        deadline = time.monotonic() + 5
        while cmd.process_start_time(server) == start and time.monotonic() < deadline:
            time.sleep(0.05)          # (reaped by init: not our child)
        assert cmd.process_start_time(server) != start
        assert not (ledger_dir() / "owned.jsonl").exists()
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        if server and cmd.process_start_time(server):
            os.kill(server, signal.SIGKILL)
