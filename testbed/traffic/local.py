"""Hosts on the loopback interface of the current namespace (no root needed).

For tests and benchmarks that exercise the agents without building an emulated
network: each :class:`LoopbackHost` has its own 127.0.0.0/8 address, and its agent
binds its listener to that address, so several agents share one namespace.
"""

from __future__ import annotations

import subprocess
from typing import IO

from testbed.ledger import Ledger


class LoopbackHost:
    """A stand-in for ``testbed.net.Host``: a name, an address on ``lo`` and ``popen``.

    With a ``ledger`` the processes are recorded in it (as ``Host.popen`` does)."""

    def __init__(self, name: str, ip: str, ledger: Ledger | None = None) -> None:
        self.name, self.ip, self.ledger = name, ip, ledger

    def popen(self, argv: list[str], *, stdout: IO | int | None = subprocess.DEVNULL,
              stderr: IO | int | None = subprocess.STDOUT, stop_signal: int = 15) -> subprocess.Popen:
        from testbed import cmd

        argv = [str(a) for a in argv]
        seq = self.ledger.add("process", argv=argv, group=True, stop_signal=stop_signal) if self.ledger else None
        proc = subprocess.Popen(argv, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        if self.ledger is not None and seq is not None:
            self.ledger.update(seq, pid=proc.pid, start_time=cmd.process_start_time(proc.pid))
            proc.ledger_seq = seq  # type: ignore[attr-defined]
        return proc
