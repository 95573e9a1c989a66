"""A control loop in a process of its own: started ledgered, health-checked, logged, stopped.

A run's control loops (the os-ken controller of E3 today; E4's flow mover and E5's XCP
loop next) run as processes beside the emulation, for the length of a ``with`` block:

    with ControlProcess(ledger, argv, out_dir, log_name="mover.log",
                        health="http://127.0.0.1:8080/status") as ctl:
        ctl.wait_for(lambda status: status["ready"], "the mover to be ready")

- start: ``out_dir`` is created, :meth:`prepare` runs (a subclass picks ports and
  writes its config there), the process is spawned by :func:`testbed.process.spawn`:
  recorded in the run's ledger *before* it starts, so ``testbed clean`` stops it after
  a SIGKILLed run; stdout and stderr are appended to ``out_dir/log_name``; then
  :meth:`wait_for` the health check to pass once, and :meth:`ready` (a subclass's
  further set-up, e.g. pointing switches at it);
- health: a callable (its value, or OSError / ControlError while not healthy yet) or
  an HTTP URL (GET must answer 200 with JSON: the decoded body). :meth:`wait_for`
  polls it until a predicate holds, bounded by a :class:`testbed.hostclock.Deadline`
  of ``ready_timeout_s`` (a guest's clock can jump), and fails at once when the process
  exits, quoting the log's tail;
- stop (also on exceptions in the block): its stop signal to its process group,
  SIGKILL after ``grace_s`` seconds, marked gone in the ledger; :meth:`request_stop`
  sends the stop signal alone, without waiting (a loop told to end at an instant, e.g.
  from a point's timeline, that writes its records while the run goes on).
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from testbed import hostclock, process
from testbed.errors import DefinitionError, TestbedError
from testbed.ledger import Ledger

#: seconds between two health checks while waiting
POLL_S = 0.05


class ControlError(TestbedError):
    """A control process did not start or become ready in time, exited, or its API
    refused a request."""


Health = Callable[[], Any] | str


def free_port(host: str) -> int:
    """A TCP port free on ``host`` right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def check_mgmt_host(host: str) -> str:
    """``host`` if it is a specific IPv4 address (loopback or management), else
    DefinitionError: listeners never bind a wildcard address."""
    try:
        addr = ipaddress.IPv4Address(host)
    except ValueError:
        raise DefinitionError("controller.host", host, "an IPv4 address such as 127.0.0.1") from None
    if addr.is_unspecified:
        raise DefinitionError("controller.host", host, "a specific address (not 0.0.0.0): loopback or management")
    return host


def http_json(method: str, url: str, body: Any = None, timeout: float = 10.0) -> tuple[int, Any]:
    """(HTTP status, decoded JSON body or None) of one request; ``body`` is sent as
    JSON. Raises OSError when nothing answers, ValueError when the body is not JSON."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


class ControlProcess:
    """See the module docstring. ``argv`` may be left empty for :meth:`prepare` to set
    (with ``env``, ``cwd`` and ``health``); ``env`` None inherits this process's;
    ``netns``: the network namespace it runs in (None: this process's)."""

    #: what the process is, in messages
    what = "the control process"
    #: what the first health check waits for, in messages
    healthy = "its health check to pass"

    def __init__(self, ledger: Ledger, argv: Sequence[str], out_dir: Path, *, log_name: str = "control.log",
                 health: Health | None = None, env: Mapping[str, str] | None = None, cwd: Path | None = None,
                 ready_timeout_s: float = 60.0, stop_signal: int = signal.SIGTERM,
                 grace_s: float = process.STOP_GRACE_S, netns: str | None = None) -> None:
        self.ledger, self.argv, self.out_dir = ledger, list(argv), Path(out_dir)
        self.netns = netns
        self.log_path = self.out_dir / log_name
        self.health, self.env, self.cwd = health, env, cwd
        self.ready_timeout_s, self.stop_signal, self.grace_s = ready_timeout_s, stop_signal, grace_s
        self.proc: process.Process | None = None

    # -- life cycle ----------------------------------------------------------------------
    def __enter__(self) -> "ControlProcess":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def prepare(self) -> None:
        """Hook: runs in :meth:`start` before the process starts (``out_dir`` exists)."""

    def ready(self) -> None:
        """Hook: runs in :meth:`start` once the health check has passed."""

    def start(self) -> None:
        """Start, wait until healthy, then :meth:`ready`. Raises ControlError (not
        started, exited, not healthy within ``ready_timeout_s``) and OSError; the
        caller stops it (``with`` does)."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.prepare()
        if not self.argv:
            raise ControlError(f"{self.what}: no command to start")
        try:
            self.proc = process.spawn(self.ledger, self.argv, log=self.log_path, env=self.env, cwd=self.cwd,
                                      stop_signal=self.stop_signal, netns=self.netns)
        except OSError as exc:
            raise ControlError(f"cannot start {self.what} ({self.argv[0]}): {exc}") from exc
        if self.health is not None:
            self.wait_for(lambda _: True, self.healthy)
        self.ready()

    def stop(self) -> None:
        """Stop it (see the module docstring); nothing when it is not running."""
        if self.proc is not None:
            process.stop(self.proc, self.grace_s)
        self.proc = None

    def request_stop(self) -> bool:
        """Send the stop signal to its process group now, without waiting (:meth:`stop`
        still waits for it, and SIGKILLs it after ``grace_s``). Returns False when it
        was not running."""
        if not self.alive():
            return False
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, self.proc.stop_signal)
        except ProcessLookupError:                # exited between the check and the signal
            return False
        return True

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # -- health ----------------------------------------------------------------------------
    def check(self) -> Any:
        """One health check: its value. Raises ControlError or OSError while unhealthy."""
        if self.health is None:
            raise ControlError(f"{self.what} has no health check")
        if callable(self.health):
            return self.health()
        try:
            code, body = http_json("GET", self.health)
        except ValueError as exc:
            raise ControlError(f"GET {self.health} answered something that is not JSON: {exc}") from None
        if code != 200:
            raise ControlError(f"GET {self.health} answered {code}: {body}")
        return body

    def wait_for(self, predicate: Callable[[Any], Any], what: str) -> Any:
        """Poll :meth:`check` until ``predicate(value)`` holds; returns that value.
        ControlError when the process exits or after ``ready_timeout_s`` (on both the
        guest's and the host's clock), naming ``what`` and the last answer."""
        deadline = hostclock.Deadline(self.ready_timeout_s)
        last: Any = None
        while True:
            if not self.alive():
                code = self.proc.returncode if self.proc is not None else "?"
                raise ControlError(f"{self.what} exited ({code}) waiting for {what}: {self.log_tail()}")
            try:
                last = self.check()
                if predicate(last):
                    return last
            except (OSError, ControlError) as exc:
                last = str(exc)
            if deadline.expired():
                raise ControlError(f"timed out after {self.ready_timeout_s:g} s waiting for {what}; "
                                   f"last answer: {last}; log: {self.log_tail()}")
            time.sleep(POLL_S)

    def log_tail(self, n: int = 800) -> str:
        """The last ``n`` characters of its log."""
        try:
            return self.log_path.read_text(errors="replace")[-n:].strip()
        except OSError:
            return "(no log)"
