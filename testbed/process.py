"""Long-lived processes of a run: one way to start them, one way to stop them.

:func:`spawn` starts a process in a session (and process group) of its own, recorded in
the run's ledger first: ``add`` (argv, the network namespace it runs in, its stop
signal), then the process starts, then ``update`` with its PID and start time (clock
ticks since boot: with the boot id they identify it, so a recycled PID is never taken
for it). :func:`stop` ends it: its stop signal to the whole group, SIGKILL after a grace
period, bounded waits on :class:`testbed.hostclock.Deadline` (a guest's clock can jump),
and the entry marked gone. ``testbed clean`` stops the processes of a SIGKILLed run
through the ``process`` teardown registered here (same identity check).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Literal

from testbed import cmd, hostclock
from testbed.ledger import Entry, Ledger, register

#: the ledger resource of a spawned process
PROCESS = "process"
#: seconds a process gets to end on its stop signal before SIGKILL
STOP_GRACE_S = 3.0
#: seconds to wait for a process to vanish after SIGKILL
KILL_WAIT_S = 5.0
#: how often a wait looks at the process again (s)
POLL_S = 0.05

Outcome = Literal["absent", "stopped", "killed"]


class Process(subprocess.Popen):
    """A process started by :func:`spawn`: a ``subprocess.Popen`` that also knows its
    ledger entry (``ledger``, ``ledger_seq``; None without a ledger), its start time
    and its stop signal."""

    ledger: Ledger | None
    ledger_seq: int | None
    start_time: int | None
    stop_signal: int

    def stop(self, grace_s: float = STOP_GRACE_S) -> bool:
        """:func:`stop` this process."""
        return stop(self, grace_s)

    def mark_gone(self) -> None:
        """Mark its ledger entry gone (once it has exited; nothing without a ledger, when
        marked already, or once the ledger was archived)."""
        led, seq = self.ledger, self.ledger_seq
        if led is not None and seq is not None and not led.archived and not led.entries[seq].gone:
            led.mark_gone(seq)


def spawn(ledger: Ledger | None, argv: Sequence[str | os.PathLike], *, netns: str | None = None,
          cwd: Path | None = None, env: Mapping[str, str] | None = None, log: Path | None = None,
          stdin: IO | int | None = subprocess.DEVNULL, stdout: IO | int | None = subprocess.DEVNULL,
          stderr: IO | int | None = subprocess.STDOUT, stop_signal: int = signal.SIGTERM,
          resource: str = PROCESS) -> Process:
    """Start ``argv`` in a session of its own (in network namespace ``netns`` through
    ``ip netns exec`` when given), recorded in ``ledger`` (None: not recorded) as a
    ``resource`` entry before it starts. ``log``: a file its stdout and stderr are
    appended to (instead of ``stdout``/``stderr``); ``cwd`` and ``env`` as for Popen
    (None: this process's). The group gets ``stop_signal`` from :func:`stop` and from
    the ledger's teardown.

    Raises OSError when ``argv`` cannot start (its entry is then marked gone) or the log
    cannot be opened, and LedgerError when the ledger cannot be written."""
    full = (["ip", "netns", "exec", netns] if netns else []) + [str(a) for a in argv]
    log_file = open(log, "ab") if log is not None else None
    seq = None
    try:
        if ledger is not None:
            seq = ledger.add(resource, argv=full, netns=netns, group=True, stop_signal=int(stop_signal))
        proc = Process(full, start_new_session=True, stdin=stdin, cwd=cwd,
                       env=dict(env) if env is not None else None,
                       stdout=log_file if log_file is not None else stdout,
                       stderr=subprocess.STDOUT if log_file is not None else stderr)
    except OSError:
        if ledger is not None and seq is not None:      # recorded, but it never started
            ledger.mark_gone(seq)
        raise
    finally:
        if log_file is not None:
            log_file.close()
    proc.ledger, proc.ledger_seq, proc.stop_signal = ledger, seq, int(stop_signal)
    proc.start_time = cmd.process_start_time(proc.pid)
    if ledger is not None and seq is not None:
        ledger.update(seq, pid=proc.pid, start_time=proc.start_time)
    return proc


def stop(proc: Process, grace_s: float = STOP_GRACE_S) -> bool:
    """End ``proc`` and its group: its stop signal, SIGKILL when it has not exited
    within ``grace_s`` seconds, a bounded wait until it is gone (reaped), then its ledger
    entry is marked gone (unless the ledger was archived). Returns True when it had
    ended already or ended on its stop signal, False when it needed SIGKILL."""
    outcome: Outcome = "absent"
    if proc.poll() is None:
        outcome = kill_process(proc.pid, proc.start_time, group=True, first_signal=proc.stop_signal,
                               grace_s=grace_s, reap=proc.poll)
        try:
            hostclock.wait(proc, KILL_WAIT_S)       # reap it (an exited group leader)
        except subprocess.TimeoutExpired:
            pass
    proc.mark_gone()
    return outcome != "killed"


def kill_process(pid: int, start_time: int | None, *, group: bool = False, first_signal: int = signal.SIGTERM,
                 grace_s: float = STOP_GRACE_S, reap: Callable[[], Any] | None = None) -> Outcome:
    """Stop ``pid`` (its process group with ``group``) if it is still the process that
    started at ``start_time``: ``first_signal``, then wait up to ``grace_s`` seconds
    until it has exited and been reaped (its PID no longer shows that start time); if
    not, SIGKILL (to the group: members may outlive the leader) and wait up to
    :data:`KILL_WAIT_S` until it has exited. ``reap`` collects it when it is our child
    (default: ``waitpid`` without blocking; a parent that reaps late, init for the
    processes of a killed run, leaves a zombie for a while). Returns "absent" (not that
    process: gone already or a recycled PID; nothing is sent), "stopped" (exited on
    ``first_signal``) or "killed"."""
    if not pid or start_time is None or cmd.process_start_time(pid) != start_time:
        return "absent"
    sender = os.killpg if group else os.kill
    collect = reap or (lambda: _waitpid(pid))

    def wait_until(done: tuple[str, ...], timeout_s: float) -> str:
        deadline = hostclock.Deadline(timeout_s)
        while True:
            collect()
            state = _state(pid, start_time)
            if state in done or deadline.expired():
                return state
            time.sleep(min(POLL_S, deadline.step()))

    try:
        sender(pid, first_signal)
    except ProcessLookupError:
        return "stopped"
    state = wait_until(("gone",), grace_s)
    if state == "gone":
        return "stopped"
    try:
        sender(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if state == "zombie":                         # it had exited on first_signal
        return "stopped"
    wait_until(("gone", "zombie"), KILL_WAIT_S)
    return "killed"


def _state(pid: int, start_time: int) -> str:
    """"running", "zombie" (exited, not yet reaped) or "gone" (reaped, or the PID is
    another process now) for the process ``pid`` that started at ``start_time``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "gone"
    fields = stat[stat.rindex(")") + 2:].split()   # the name (field 2) may hold ')'
    if int(fields[19]) != start_time:
        return "gone"
    return "zombie" if fields[0] == "Z" else "running"


def _waitpid(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def remove_process(entry: Entry, ledger: Ledger, *, group: bool | None = None) -> None:
    """The ``process`` teardown: :func:`kill_process` with the entry's identity, group
    flag (``group`` overrides it) and stop signal."""
    a = entry.attrs
    kill_process(a.get("pid", 0), a.get("start_time"), group=a.get("group", False) if group is None else group,
                 first_signal=a.get("stop_signal", signal.SIGTERM))


register(PROCESS, remove_process)
