"""Fixtures shared by all tiers (helper functions are in helpers.py)."""

import os
import uuid

import pytest

from testbed import bpf


@pytest.fixture
def pin_dir():
    """A fresh BPF pin dir of this test, removed afterwards (and the pin root if empty)."""
    path = bpf.PIN_ROOT / f"pytest-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        yield path
    finally:
        bpf.remove_pin_dir(path)
        try:
            bpf.PIN_ROOT.rmdir()  # only if no other run uses it
        except OSError:
            pass


# --- Host wall time per test, from inside the icount guest --------------------------
# Under QEMU icount (sleep=off) the guest's clocks run on executed instructions and jump
# over idle waits, so pytest's --durations are guest time: not what CI's budget counts.
# A file written on a folder the host shares (9p) gets its mtime from the host's clock;
# with TESTBED_HOST_CLOCK_DIR set (tests/run-tiers.sh sets it for the guest tier), each
# test's host wall time is taken that way, the slowest are listed at the end and all
# are written to host-wall.tsv in that folder.
_HOST_CLOCK_ENV = "TESTBED_HOST_CLOCK_DIR"
_host_wall_s: dict[str, float] = {}


def _host_clock_ns(folder: str) -> int:
    """The host's CLOCK_REALTIME (ns), as the mtime of a file written in ``folder``
    (a folder the host shares). Raises OSError when ``folder`` is not writable."""
    path = os.path.join(folder, f".host-clock-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600)
    try:
        os.write(fd, b"t")
        return os.fstat(fd).st_mtime_ns
    finally:
        os.close(fd)
        os.unlink(path)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    folder = os.environ.get(_HOST_CLOCK_ENV)
    if not folder:
        yield
        return
    t0 = _host_clock_ns(folder)
    yield
    _host_wall_s[item.nodeid] = (_host_clock_ns(folder) - t0) / 1e9


def pytest_terminal_summary(terminalreporter):
    if not _host_wall_s:
        return
    with open(os.path.join(os.environ[_HOST_CLOCK_ENV], "host-wall.tsv"), "w") as f:
        f.write("seconds\ttest\n")
        f.writelines(f"{s:.1f}\t{nodeid}\n" for nodeid, s in _host_wall_s.items())
    tr = terminalreporter
    tr.write_sep("=", f"slowest 15 by host wall clock (setup + call + teardown; all {len(_host_wall_s)} "
                      f"tests: {sum(_host_wall_s.values()):.0f} s)")
    for nodeid, s in sorted(_host_wall_s.items(), key=lambda kv: -kv[1])[:15]:
        tr.write_line(f"{s:8.1f}s  {nodeid}")


# --- The BPF tier in the guest: one case per test ------------------------------------
# The guest tier runs the BPF tests again on the distro kernel the studies run on (its
# verifier and helpers); there every test function runs, but only its first parameter
# set when TESTBED_BPF_ONE_CASE=1 (tests/run-tiers.sh): each case costs ~6 s of host
# wall time under TCG, mostly loading programs, and the native BPF tier runs them all.
_BPF_ONE_CASE_ENV = "TESTBED_BPF_ONE_CASE"


def pytest_collection_modifyitems(config, items):
    if os.environ.get(_BPF_ONE_CASE_ENV) != "1":
        return
    seen: set[str] = set()
    keep, drop = [], []
    for item in items:
        function = item.nodeid.split("[", 1)[0]
        if item.nodeid.startswith("tests/bpf/") and function in seen:
            drop.append(item)
        else:
            seen.add(function)
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
