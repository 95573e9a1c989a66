"""Hosts on the loopback interface of the current namespace (no root needed).

For tests and benchmarks that exercise the agent without building an emulated
network: each :class:`LoopbackHost` has its own 127.0.0.0/8 address, and the agent
binds the host's listener to that address, so all hosts share one namespace (no
setns). A ``TrafficRun`` with ``emu=None`` starts an agent of its own;
:class:`LoopbackNet` keeps one agent for several runs, as an ``Emulation`` does.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Sequence
from typing import IO

from testbed import process
from testbed.ledger import Ledger
from testbed.traffic.control import AgentProcess, running


class LoopbackHost:
    """A stand-in for ``testbed.net.Host``: a name, an address on ``lo`` and ``popen``.

    With a ``ledger`` the processes are recorded in it (as ``Host.popen`` does)."""

    netns = None

    def __init__(self, name: str, ip: str, ledger: Ledger | None = None) -> None:
        self.name, self.ip, self.ledger = name, ip, ledger

    def popen(self, argv: list[str], *, stdout: IO | int | None = subprocess.DEVNULL,
              stderr: IO | int | None = subprocess.STDOUT, stop_signal: int = signal.SIGTERM
              ) -> process.Process:
        """Start ``argv`` in a session of its own (:func:`testbed.process.spawn`)."""
        return process.spawn(self.ledger, argv, stdout=stdout, stderr=stderr, stop_signal=stop_signal)


class LoopbackNet:
    """Loopback hosts served by one long-lived traffic agent, the way an ``Emulation``'s
    hosts are: pass it as ``TrafficRun(emu=...)``; a context manager (the agent ends
    on exit). ``ledger`` (optional) records the agent."""

    def __init__(self, hosts: Sequence[LoopbackHost], ledger: Ledger | None = None) -> None:
        self._hosts, self.ledger = list(hosts), ledger
        self._agent: AgentProcess | None = None

    def hosts(self) -> list[LoopbackHost]:
        return list(self._hosts)

    def traffic_agent(self, python: str = sys.executable) -> AgentProcess:
        """The agent of these hosts, started on first use or again after it died; raises
        TrafficError when it cannot start."""
        self._agent = running(self._agent, self.ledger, python)
        return self._agent

    def close(self) -> None:
        """End the agent (if any)."""
        agent, self._agent = self._agent, None
        if agent is not None:
            agent.close()

    def __enter__(self) -> "LoopbackNet":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
