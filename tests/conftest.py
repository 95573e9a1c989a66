"""Fixtures shared by all tiers (helper functions are in helpers.py)."""

import os
import uuid

import pytest

from testbed import bpf, hostclock


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
# over idle waits, so pytest's --durations are guest time: not what CI's budget counts
# (a teardown of 845 s guest time took 11 s). In such a guest each test is also timed on
# the host's clock (hostclock.host_seconds: the RTC, whole seconds), the slowest are
# listed at the end, and all are written to the file TESTBED_HOST_WALL_TSV names when set
# (tests/run-tiers.sh: per guest shard, to balance the shards).
_HOST_WALL_TSV_ENV = "TESTBED_HOST_WALL_TSV"
_host_wall_s: dict[str, float] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not hostclock.virtual():
        yield
        return
    t0 = hostclock.host_seconds()
    yield
    _host_wall_s[item.nodeid] = hostclock.host_seconds() - t0


def pytest_terminal_summary(terminalreporter):
    if not _host_wall_s:
        return
    tsv = os.environ.get(_HOST_WALL_TSV_ENV)
    if tsv:
        with open(tsv, "w") as f:
            f.write("seconds\ttest\n")
            f.writelines(f"{s:.0f}\t{nodeid}\n" for nodeid, s in _host_wall_s.items())
    tr = terminalreporter
    tr.write_sep("=", f"slowest 15 by the host's clock (setup + call + teardown, whole seconds; all "
                      f"{len(_host_wall_s)} tests: {sum(_host_wall_s.values()):.0f} s)")
    for nodeid, s in sorted(_host_wall_s.items(), key=lambda kv: -kv[1])[:15]:
        tr.write_line(f"{s:6.0f}s  {nodeid}")


# --- The BPF tier in the guest: one case per test ------------------------------------
# The guest tier runs the BPF tests again on the distro kernel the studies run on (its
# verifier and helpers); there every test function runs, but only its first parameter
# set when TESTBED_BPF_ONE_CASE=1 (tests/run-tiers.sh): each case cost ~5-6 s of host
# wall time under TCG (2026-11-25, beside another guest; not profiled further), and the
# native BPF tier runs them all.
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
