"""The kernel's global TCP memory limit, ``net.ipv4.tcp_mem``, raised for a run and put back.

``tcp_mem`` (three numbers, in pages: below the first the kernel does not regulate TCP's
memory, above the second it is "under pressure" and shrinks socket buffers, above the
third it refuses to allocate) is **one value for the whole kernel**, not one per
network namespace (Linux 6.1: ``sysctl_tcp_mem`` in ``ipv4_table``, writable only from
the initial namespace). The kernel sizes it at boot from the memory it has
(``tcp_init_mem()``: pressure at 1/16 of the free buffer pages; the 3 GB guest boots
with 137 / 183 / 275 MB). Every emulated host of a network shares it, so one flow whose sender keeps a
window of unacknowledged data while its receiver keeps the same window out of order can
exceed what one real host's kernel would allow: measured in E4 at 1 Gbit/s x 1 s (125
MB window), the receiver then dropped 66 057 out-of-order segments for want of memory
(TcpExtTCPOFODrop), reneged on its SACKs and the sender timed out (docs/e4.md). The
paper's simulator has no such limit.

:func:`at_least` raises the limit for as long as a run needs it and puts the previous
value back; the change is written in the run's ledger first (resource ``sysctl``), so
``testbed clean`` puts it back after a killed run, and only while the value is still
the one the run set (a value changed since by someone else is left alone).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Iterator
from pathlib import Path

from testbed import nsops
from testbed.errors import TestbedError
from testbed.ledger import Entry, Ledger, register

log = logging.getLogger(__name__)

KEY = "net.ipv4.tcp_mem"
#: the ledger resource of a global sysctl a run changed
RESOURCE = "sysctl"


class TcpMemError(TestbedError):
    """``net.ipv4.tcp_mem`` is unreadable, malformed or cannot be written."""


def page_size() -> int:
    """Bytes per page: the unit of ``tcp_mem``."""
    return os.sysconf("SC_PAGE_SIZE")


def read() -> tuple[int, int, int]:
    """The current ``tcp_mem`` (min, pressure, max pages). Raises TcpMemError."""
    try:
        text = nsops.sysctl_read(None, KEY)
    except nsops.NsOpsError as exc:
        raise TcpMemError(str(exc)) from None
    parts = text.split()
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise TcpMemError(f"{KEY} reads {text!r}, not three page counts")
    lo, pressure, hi = (int(p) for p in parts)
    return lo, pressure, hi


def half_of_memory(meminfo: str = "/proc/meminfo") -> int:
    """Half the machine's memory (bytes, ``MemTotal``): what a run whose many emulated
    hosts share one kernel lets TCP use before pressure. Raises TcpMemError when
    ``meminfo`` has no MemTotal line."""
    try:
        for line in Path(meminfo).read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024 // 2
    except (OSError, ValueError, IndexError) as exc:
        raise TcpMemError(f"{meminfo}: {exc}") from None
    raise TcpMemError(f"{meminfo} has no MemTotal line")


def _write(value: tuple[int, int, int]) -> None:
    try:
        nsops.sysctl_write(None, KEY, " ".join(str(v) for v in value))
    except nsops.NsOpsError as exc:
        raise TcpMemError(str(exc)) from None


def raised(old: tuple[int, int, int], need_bytes: int) -> tuple[int, int, int]:
    """``old`` with every threshold at least ``need_bytes`` (in pages, rounded up): no
    pressure and no refusal below that much TCP memory. Never lowers a threshold.
    Raises ValueError for a negative ``need_bytes``."""
    if need_bytes < 0:
        raise ValueError(f"need_bytes {need_bytes} < 0")
    pages = math.ceil(need_bytes / page_size())
    lo, pressure, hi = old
    return max(lo, pages), max(pressure, pages), max(hi, pages)


@contextlib.contextmanager
def at_least(ledger: Ledger | None, need_bytes: int) -> Iterator[tuple[int, int, int]]:
    """While the block runs, ``tcp_mem`` is at least :func:`raised` (``need_bytes``);
    yields the value in force. The change is recorded in ``ledger`` before it is made
    (None: not recorded; tests) and undone on exit if the value is still ours. Raises
    TcpMemError when the value cannot be read or written."""
    old = read()
    new = raised(old, need_bytes)
    if new == old:
        yield old
        return
    seq = ledger.add(RESOURCE, key=KEY, old=list(old), new=list(new)) if ledger is not None else None
    try:
        _write(new)
    except TcpMemError:
        if seq is not None and ledger is not None:
            ledger.mark_gone(seq)   # nothing changed: nothing to put back
        raise
    log.info("%s raised from %s to %s pages for this run", KEY, old, new)
    try:
        yield new
    finally:
        if seq is not None and ledger is not None:
            ledger.remove(seq)
        else:
            _restore(old, new)


def _restore(old: tuple[int, int, int], new: tuple[int, int, int]) -> None:
    """Put ``old`` back if the value is still ``new`` (what we set); else leave it."""
    now = read()
    if now == tuple(new):
        _write(tuple(old))  # type: ignore[arg-type]
    else:
        log.warning("%s is %s, not the %s this testbed set: left as it is (not putting back %s)",
                    KEY, now, new, old)


def _restore_entry(entry: Entry, ledger: Ledger) -> None:
    """Teardown of a ``sysctl`` entry (only ``tcp_mem`` is ever recorded)."""
    if entry.attrs.get("key") != KEY:
        raise TcpMemError(f"ledger sysctl entry for {entry.attrs.get('key')!r}: only {KEY} is handled here")
    _restore(tuple(entry.attrs["old"]), tuple(entry.attrs["new"]))  # type: ignore[arg-type]


register(RESOURCE, _restore_entry)
