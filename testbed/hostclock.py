"""Timeouts that also hold on the host's clock (for the instruction-counted guest).

Under ``TESTBED_GUEST_CLOCK=icount`` the guest's clocks count executed instructions
(docs/guest-clock.md): while the guest computes they run slower than the host's, and
with ``sleep=off`` an idle guest jumps to its next timer at once, so a process waiting
for the host (a file over 9p, a binary being loaded) can see seconds of guest time
pass in a millisecond. A timeout that wraps I/O or a process start-up must therefore
not expire on the guest's clock alone. A :class:`Deadline` expires only once its time
has passed on *both* clocks: the guest's ``CLOCK_MONOTONIC`` and the host's, which the
guest reads from the emulated RTC (QEMU drives it by host time, 1 s resolution). Under
the real-time clock the two are the same and nothing changes.

Durations that belong to the experiment (a point's traffic, a dilated RTO) are guest
time and stay on ``time.monotonic()``; only margins around them use this module.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: the guest's emulated RTC (mc146818, driven by the host's clock under QEMU's default
#: ``-rtc clock=host``); whole seconds since the epoch
RTC = Path("/sys/class/rtc/rtc0/since_epoch")
#: longest single wait on the guest's clock between two looks at the host's (guest s)
STEP_S = 0.5


def guest_clock() -> str:
    """``realtime`` or ``icount:...``: what drives this kernel's clock (``realtime``
    outside the guest)."""
    if os.environ.get("TESTBED_IN_GUEST") != "1":
        return "realtime"
    return os.environ.get("TESTBED_GUEST_CLOCK", "realtime")


def virtual() -> bool:
    """True inside a guest whose clock counts instructions."""
    return guest_clock().startswith("icount")


def host_seconds() -> float:
    """Seconds on a clock that runs at the host's speed: the RTC in an instruction-
    counted guest (whole seconds), ``time.monotonic()`` everywhere else."""
    if virtual():
        try:
            return float(RTC.read_text())
        except (OSError, ValueError):
            pass
    return time.monotonic()


class Deadline:
    """Expires when ``timeout_s`` has passed on the guest's clock and on the host's; with
    ``guest_only`` on the guest's clock alone (a wait that belongs to the experiment,
    e.g. the traffic loop's polling interval: its timeline runs on the guest's clock)."""

    def __init__(self, timeout_s: float, *, guest_only: bool = False) -> None:
        self.timeout_s = float(timeout_s)
        self.virtual = virtual() and not guest_only
        self._guest0 = time.monotonic()
        self._host0 = host_seconds() if self.virtual else self._guest0
        # the RTC counts whole seconds: wait one more so that no wait is cut short
        self._host_need = self.timeout_s + (1.0 if self.virtual else 0.0)

    def guest_remaining(self) -> float:
        """Guest seconds until the guest's part of the deadline (<= 0 once passed)."""
        return self.timeout_s - (time.monotonic() - self._guest0)

    def expired(self) -> bool:
        if self.guest_remaining() > 0:
            return False
        if not self.virtual:
            return True
        return host_seconds() - self._host0 >= self._host_need

    def step(self, at_most: float = STEP_S) -> float:
        """How long the next guest-clock wait may be (> 0)."""
        left = self.guest_remaining()
        return max(0.01, min(at_most, left) if left > 0 else at_most)


def wait(proc: subprocess.Popen, timeout_s: float) -> int:
    """``proc.wait()`` bounded by a :class:`Deadline`; raises subprocess.TimeoutExpired."""
    deadline = Deadline(timeout_s)
    while True:
        try:
            return proc.wait(timeout=deadline.step())
        except subprocess.TimeoutExpired:
            if deadline.expired():
                raise


def communicate(proc: subprocess.Popen, input: Any = None, timeout_s: float = 30.0) -> tuple[Any, Any]:
    """``proc.communicate()`` bounded by a :class:`Deadline`; raises
    subprocess.TimeoutExpired (the process is left running: the caller kills it).

    ``input`` is written by a thread of its own, which then closes stdin: a
    ``Popen.communicate`` that timed out cannot resume writing input (CPython registers
    stdin for writing only when ``input`` is passed, and refuses ``input`` on a retry),
    so stepping it with input larger than a pipe left the child waiting for the rest
    of its stdin until the deadline (a 640 kB loader batch in a loaded guest)."""
    deadline = Deadline(timeout_s)
    if input is not None and proc.stdin is not None:
        stdin, proc.stdin = proc.stdin, None  # communicate() leaves it to the feeder

        def feed() -> None:
            try:
                stdin.write(input)
            except (BrokenPipeError, ValueError):  # the child exited or stdin was closed
                pass
            finally:
                try:
                    stdin.close()
                except BrokenPipeError:
                    pass

        threading.Thread(target=feed, name="stdin-feeder", daemon=True).start()
    while True:
        try:
            return proc.communicate(None, timeout=deadline.step())
        except subprocess.TimeoutExpired:
            if deadline.expired():
                raise subprocess.TimeoutExpired(proc.args, timeout_s) from None


def run(argv: Sequence[str], *, timeout: float, input: str | None = None, **kwargs: Any
        ) -> subprocess.CompletedProcess:
    """``subprocess.run(argv, capture_output=True, text=True, ...)`` whose timeout is a
    :class:`Deadline`. Raises OSError when ``argv`` cannot start and
    subprocess.TimeoutExpired (after killing it) when it outlives ``timeout`` seconds."""
    if not virtual():
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, input=input,
                              check=False, **kwargs)
    kwargs.setdefault("stdin", subprocess.PIPE if input is not None else None)
    with subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          **kwargs) as proc:
        try:
            out, err = communicate(proc, input, timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

