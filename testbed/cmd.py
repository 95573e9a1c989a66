"""Running external commands as argument lists (never through a shell)."""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

from testbed import hostclock
from testbed.errors import CommandError

log = logging.getLogger(__name__)


def run(argv: list[str], *, check: bool = True, timeout: float = 30.0,
        input: str | None = None, netns: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` (in network namespace ``netns`` if given) and capture its output.

    Raises CommandError when ``check`` and the exit code is non-zero, and
    CommandError (exit -1) when the command cannot start or exceeds ``timeout`` seconds
    (on the guest's clock and the host's: :mod:`testbed.hostclock`).
    """
    full = (["ip", "netns", "exec", netns] if netns else []) + [str(a) for a in argv]
    log.debug("run: %s", full)
    try:
        proc = hostclock.run(full, timeout=timeout, input=input)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CommandError(full, -1, str(exc)) from exc
    if check and proc.returncode != 0:
        raise CommandError(full, proc.returncode, proc.stderr or proc.stdout)
    return proc


def ok(argv: list[str], *, timeout: float = 10.0, netns: str | None = None) -> bool:
    """True when ``argv`` exits 0 (errors and time-outs are False)."""
    try:
        return run(argv, check=False, timeout=timeout, netns=netns).returncode == 0
    except CommandError:
        return False


def process_start_time(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (field 22 of /proc/PID/stat).

    Together with the boot id it identifies a process uniquely, so a recycled PID is
    never mistaken for ours. None when the process does not exist.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and ')', so split after the last ')'.
    return int(stat[stat.rindex(")") + 2:].split()[19])


def boot_id() -> str:
    """This kernel's boot id (differs between host and guest, and across reboots)."""
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


#: the state directory when TESTBED_STATE_DIR is not set
DEFAULT_STATE_DIR = "/var/lib/optical-tcp-testbed"


def state_dir() -> Path:
    """Where ledgers and probe caches live (persistent across reboots: OVS bridges are):
    TESTBED_STATE_DIR, else :data:`DEFAULT_STATE_DIR`."""
    return Path(os.environ.get("TESTBED_STATE_DIR", DEFAULT_STATE_DIR))
