"""The xcppace qdisc (kernel/sch_xcppace.c, E5's XCP edge pacer; docs/xcp-edge.md) in the
full-kernel guest: the real module's netlink interface through testbed.optical.xcppace.

Set-up: namespaces A and B, a veth pair a (in A) -- b (in B), the xcppace qdisc as a's
root qdisc (4 classes, one unused), lookahead 2 ms.

Checked: the options come back as given from a qdisc dump (TCA_OPTIONS nest) and every
class from a class dump (RTM_GETTCLASS with tcm_parent 0: one message per class, its
counters as TCA_STATS_APP); timed rate changes wait for their instant (``pending_rates``)
and apply once real time has passed it plus the lookahead (the hrtimer), none late; a
change dated before the last decided instant applies at once and is counted
``late_rates`` with its lateness; refusals answer with the module's extack message and
apply nothing (class out of range, rate 0, more than MAX_PENDING waiting, options changed
in place); packets without the optical switch's OPTSW_HOLD decision (plain UDP from A:
no egress program here) are dropped and counted ``unmodelled``; the module cannot be
unloaded while the qdisc exists.

Not here (left for when the ``xcp-edge`` architecture exists, whose egress program
writes cb[0] = OPTSW_HOLD, cb[2] = the class and the monotonic stamp): the data path
against testbed.optical.xcppacer packet for packet, as tests/guest/test_voq.py does for
voq. Until then the data path is held to the mirror in the unit tier
(tests/unit/test_xcppace_kernel.py: the same C against kernel-API stand-ins).

    testbed guest -- .venv/bin/python -m pytest -q -s tests/guest/test_xcppace.py
"""

from __future__ import annotations

import dataclasses
import errno
import os
import secrets
import socket
import struct
import time

import pytest

from helpers import require_features, require_root, veth_between_namespaces
from testbed import setns
from testbed.cc.modules import KERNEL_DIR
from testbed.ledger import Ledger
from testbed.optical import layout, qdiscnl, xcppace
from testbed.optical.xcppace import RateChange, XcpPaceError, XcpPaceOptions

M_NS = 2_000_000
RATES = (5_000_000, 2_500_000, 0, 1_000_000)


@pytest.fixture(scope="module")
def env():
    require_root()
    require_features("netns", "modules")
    if not (KERNEL_DIR / "sch_xcppace.ko").exists():
        pytest.fail("kernel/sch_xcppace.ko is not built: make -C kernel")
    ledger = Ledger.create(f"test-xcppace-{os.getpid()}-{time.monotonic_ns()}")
    tok = secrets.token_hex(2)
    ns_a, ns_b, dev_a, dev_b = f"xpA{tok}", f"xpB{tok}", f"xpa{tok}", f"xpb{tok}"
    was_loaded = xcppace.QDISC_MODULE.loaded()
    try:
        veth_between_namespaces(ledger, ns_a, ns_b, dev_a, dev_b, "10.78.0.1/24")
        loaded_here = xcppace.load_module(ledger)
        assert loaded_here != was_loaded
        opts = XcpPaceOptions(len(RATES), layout.ps_per_byte(5e6), 2_000_000, 250_000_000, M_NS,
                              time.clock_gettime_ns(time.CLOCK_MONOTONIC), 1_000_000_000, RATES, limit=10_000)
        xcppace.install(dev_a, ns_a, opts, ledger)
        yield {"ledger": ledger, "ns": ns_a, "dev": dev_a, "opts": opts, "loaded_here": loaded_here}
    finally:
        errors = ledger.teardown()
    assert not errors, errors


def _now() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def test_options_and_classes_read_back(env):
    st = xcppace.read(env["dev"], env["ns"])
    assert st.options == env["opts"]
    assert [c.rate_bps for c in st.classes] == list(RATES)
    assert all(c.arrivals == c.queued_packets == 0 and c.next_eligible_ns is None for c in st.classes)
    assert st.intervals == {} and st.qlen == 0 and st.late == st.late_rates == 0


def test_timed_rate_changes_apply_at_their_instant_plus_the_lookahead(env):
    dev, ns = env["dev"], env["ns"]
    before = xcppace.read(dev, ns)
    at = _now() + 300_000_000
    xcppace.set_rates(dev, ns, [RateChange(0, 7_000_000, at), RateChange(3, 3_000_000, at + 100_000_000)])
    st = xcppace.read(dev, ns)
    assert st.pending_rates == 2 and st.classes[0].rate_bps == RATES[0]
    while _now() < at + M_NS + 50_000_000:
        time.sleep(0.05)
    st = xcppace.read(dev, ns)
    assert (st.classes[0].rate_bps, st.classes[3].rate_bps, st.pending_rates) == (7_000_000, RATES[3], 1)
    assert st.last_ns == at and st.late_rates == 0
    while _now() < at + 100_000_000 + M_NS + 50_000_000:
        time.sleep(0.05)
    st = xcppace.read(dev, ns)
    assert (st.classes[3].rate_bps, st.pending_rates, st.rate_changes - before.rate_changes) == (3_000_000, 0, 2)
    assert st.max_decision_lag_ns < 50_000_000, "the timer fired far later than its instant + M"
    # dated before the last decided instant: applied at once, counted with its lateness
    t_sent = _now()
    xcppace.set_rates(dev, ns, [RateChange(1, 4_000_000, st.last_ns - 1_000)])
    st2 = xcppace.read(dev, ns)
    assert st2.classes[1].rate_bps == 4_000_000 and st2.late_rates == st.late_rates + 1
    assert st2.max_rate_late_ns >= t_sent - (st.last_ns - 1_000 + M_NS)
    # an unused class may be brought into use
    xcppace.set_rates(dev, ns, [RateChange(2, 1_000_000, _now())])
    time.sleep(0.1)
    assert xcppace.read(dev, ns).classes[2].rate_bps == 1_000_000


@pytest.mark.parametrize("changes, code, text", [
    ([RateChange(4, 1_000_000, 1)], errno.EINVAL, "class is not below nclasses"),
    ([RateChange(0, 0, 1)], errno.EINVAL, "rate_bps must be 1..8e12"),
])
def test_bad_rate_changes_are_refused_whole(env, changes, code, text):
    before = xcppace.read(env["dev"], env["ns"])
    with pytest.raises(XcpPaceError, match=text) as e:
        xcppace.set_rates(env["dev"], env["ns"], [RateChange(1, 9_000_000, _now() + 10**9), *changes])
    assert e.value.errno == code
    after = xcppace.read(env["dev"], env["ns"])
    assert after.pending_rates == before.pending_rates and after.rate_changes == before.rate_changes


def test_pending_bound(env):
    dev, ns = env["dev"], env["ns"]
    far = _now() + 3600 * 10**9
    free = xcppace.MAX_PENDING - xcppace.read(dev, ns).pending_rates
    xcppace.set_rates(dev, ns, [RateChange(0, 1_000_000, far + k) for k in range(free)])
    with pytest.raises(XcpPaceError, match="too many rate changes pending") as e:
        xcppace.set_rates(dev, ns, [RateChange(0, 1_000_000, far)])
    assert e.value.errno == errno.ENOSPC
    assert xcppace.read(dev, ns).pending_rates == xcppace.MAX_PENDING


def test_options_cannot_change_in_place_and_bad_options_are_refused(env):
    dev, ns, opts = env["dev"], env["ns"], env["opts"]
    other = dataclasses.replace(opts, prop_ns=opts.prop_ns + 1)
    with pytest.raises(XcpPaceError, match="options cannot change") as e:
        xcppace.install(dev, ns, other)
    assert e.value.errno == errno.EOPNOTSUPP
    raw = bytearray(opts.qopt())
    struct.pack_into("=I", raw, 4, 65)                      # nclasses
    with pytest.raises(XcpPaceError, match="nclasses must be 1..64"):
        xcppace.install_raw("lo", ns, qdiscnl.attr(xcppace.TCA_XCPPACE_PARMS, bytes(raw)))
    assert xcppace.read(dev, ns).options == opts


def test_packets_without_the_switchs_decision_are_unmodelled(env):
    dev, ns = env["dev"], env["ns"]
    before = xcppace.read(dev, ns)
    with setns.entered(ns):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with s:
        for k in range(20):
            s.sendto(b"x" * 100, ("10.78.0.2", 40_999))
    st = xcppace.read(dev, ns)
    assert st.unmodelled - before.unmodelled == 20 and st.qlen == 0 and st.arrivals == before.arrivals


def test_module_unload_is_refused_while_used(env):
    if not env["loaded_here"]:
        pytest.skip("sch_xcppace was loaded before this test module: not ours to unload")
    with pytest.raises(XcpPaceError, match="in use"):
        xcppace.unload_module(env["ledger"])
