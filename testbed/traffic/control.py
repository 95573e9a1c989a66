"""The controller's side of the traffic agent process (:mod:`testbed.traffic.agent`).

:class:`AgentProcess` starts ``python -m testbed.traffic.agent`` in the caller's
network namespace (the agent enters the hosts' namespaces itself), recorded in the
run's ledger like every process (:func:`testbed.process.spawn`: add, start, update
with PID and start time; ``testbed clean`` stops it after a SIGKILLed run). Control messages go
to its stdin and answers come from its stdout, one JSON object per line (the
protocol is in the agent's module docstring); its stderr goes to an unlinked
temporary file whose tail explains a dead agent. Waits are bounded by
:class:`testbed.hostclock.Deadline` and block in ``poll(2)`` on the agent's stdout:
no file is polled.

One agent serves an emulation for its whole life (``Emulation.traffic_agent``); a
``TrafficRun`` on loopback hosts starts its own for the run.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
from typing import IO, Any

from testbed import hostclock, process
from testbed.errors import TestbedError
from testbed.ledger import Ledger

#: seconds the agent gets to end a point and exit once its stdin is closed
CLOSE_GRACE_S = 30.0


class TrafficError(TestbedError):
    """A traffic agent failed to start, refused a point, died, or did not finish in time."""


class AgentProcess:
    """One running agent process, its pipes and its ledger entry; see the module doc.

    ``busy`` is set by the ``TrafficRun`` that is using it (one point at a time)."""

    def __init__(self, proc: process.Process, ledger: Ledger | None, log: IO[bytes]) -> None:
        self.proc, self.ledger, self.log = proc, ledger, log
        self.busy = False
        self._seq = 0
        self._buf = b""
        self._eof = False
        self._fd = proc.stdout.fileno()  # type: ignore[union-attr]
        self._in = proc.stdin.fileno()  # type: ignore[union-attr]
        os.set_blocking(self._fd, False)
        os.set_blocking(self._in, False)
        self._poll = select.poll()
        self._poll.register(self._fd, select.POLLIN)
        self._out_poll = select.poll()
        self._out_poll.register(self._in, select.POLLOUT)

    @classmethod
    def start(cls, ledger: Ledger | None, python: str = sys.executable) -> "AgentProcess":
        """Start an agent (recorded in ``ledger`` unless None). Raises TrafficError when
        the interpreter cannot be started."""
        argv = [python, "-m", "testbed.traffic.agent"]
        log = tempfile.TemporaryFile(prefix="traffic-agent-")
        pipes: dict[str, Any] = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": log}
        try:
            proc = process.spawn(ledger, argv, **pipes)
        except OSError as exc:
            log.close()
            raise TrafficError(f"cannot start the traffic agent ({python}): {exc}") from exc
        return cls(proc, ledger, log)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return not self._eof and self.proc.poll() is None

    def next_seq(self) -> int:
        """A new point number (never reused by this agent)."""
        self._seq += 1
        return self._seq

    # -- messages -------------------------------------------------------------------------
    def send(self, msg: dict[str, Any], timeout_s: float = 60.0) -> None:
        """One control message. Raises TrafficError when the agent is gone or has not
        read it within ``timeout_s`` seconds (a large point takes several pipe loads)."""
        data = memoryview(json.dumps(msg, separators=(",", ":")).encode() + b"\n")
        deadline: hostclock.Deadline | None = None
        while data:
            try:
                data = data[os.write(self._in, data):]
            except BlockingIOError:
                pass
            except OSError:  # EPIPE: the agent has exited
                raise self.gone() from None
            if not data:
                return
            deadline = deadline or hostclock.Deadline(timeout_s)
            if deadline.expired():
                raise TrafficError(f"traffic agent (pid {self.pid}) did not read its control messages within "
                                   f"{timeout_s:g} s")
            self._out_poll.poll(max(1, round(deadline.step() * 1000)))

    def receive(self, deadline: hostclock.Deadline | None) -> dict[str, Any] | None:
        """The agent's next message, waiting until ``deadline`` (None: only one that has
        arrived already). Returns None when none came in time; raises TrafficError when
        the agent has exited or wrote something that is not a message."""
        while True:
            line, sep, rest = self._buf.partition(b"\n")
            if sep:
                self._buf = rest
                try:
                    msg = json.loads(line)
                except ValueError:
                    raise TrafficError(f"traffic agent (pid {self.pid}) wrote {line[:200]!r}, not a message; "
                                       f"{self.stderr_tail()}") from None
                if isinstance(msg, dict):
                    return msg
                continue
            if self._eof:
                raise self.gone()
            if deadline is None:
                wait_ms = 0
            elif deadline.expired():
                return None
            else:
                wait_ms = max(1, round(deadline.step() * 1000))
            if not self._poll.poll(wait_ms):
                if deadline is None:
                    return None
                continue
            try:
                data = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                continue
            if not data:
                self._eof = True
                self._reap()
                continue
            self._buf += data

    # -- diagnostics ------------------------------------------------------------------------
    def stderr_size(self) -> int:
        """Bytes the agent has written to stderr so far."""
        return os.fstat(self.log.fileno()).st_size

    def stderr_since(self, offset: int) -> bytes:
        """What the agent wrote to stderr after ``offset`` bytes."""
        return os.pread(self.log.fileno(), max(0, self.stderr_size() - offset), offset)

    def stderr_tail(self, n: int = 1500) -> str:
        size = self.stderr_size()
        text = os.pread(self.log.fileno(), min(n, size), max(0, size - n)).decode(errors="replace").strip()
        return f"agent stderr: {text}" if text else "agent stderr: (empty)"

    def gone(self) -> TrafficError:
        """The error for an agent that has exited (or is exiting)."""
        self._reap()
        rc = self.proc.returncode
        how = f"exited {rc}" if rc is not None and rc >= 0 else f"was killed (signal {-rc})" if rc else "is gone"
        return TrafficError(f"traffic agent (pid {self.pid}) {how}; {self.stderr_tail()}")

    # -- end ----------------------------------------------------------------------------------
    def _reap(self, timeout_s: float = 5.0) -> None:
        """Wait (bounded) for an agent whose stdout closed; kill it if it lingers; mark
        it gone in the ledger."""
        if self.proc.poll() is None:
            try:
                hostclock.wait(self.proc, timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                hostclock.wait(self.proc, 5.0)
        self._mark_gone()

    def _mark_gone(self) -> None:
        self.proc.mark_gone()

    def kill(self) -> None:
        """SIGKILL (a hung agent) and reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self._eof = True
        self._reap()

    def close(self, grace_s: float = CLOSE_GRACE_S) -> None:
        """End the agent: close its stdin (it ends a running point, writing its files,
        and exits), wait up to ``grace_s`` seconds, then SIGKILL. Marks it gone in the
        ledger."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()  # type: ignore[union-attr]
            except OSError:
                pass
            try:
                hostclock.wait(self.proc, grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                hostclock.wait(self.proc, 5.0)
        self._eof = True
        self._mark_gone()
        for f in (self.proc.stdin, self.proc.stdout, self.log):
            try:
                f.close()  # type: ignore[union-attr]
            except OSError:
                pass


def running(agent: AgentProcess | None, ledger: Ledger | None, python: str = sys.executable) -> AgentProcess:
    """``agent`` if it is still running, else a new one (recorded in ``ledger``; a dead
    ``agent`` is reaped and marked gone first): an owner's lazily started agent. Raises
    TrafficError when it cannot start."""
    if agent is not None and agent.alive():
        return agent
    if agent is not None:
        agent.close()
    return AgentProcess.start(ledger, python)
