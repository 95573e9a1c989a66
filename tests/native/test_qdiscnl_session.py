"""qdiscnl.Session against the host kernel: one NETLINK_ROUTE socket made inside a
namespace serves dumps, replaces and deletes of a veth's root qdisc from the calling
thread; a deleted namespace or device is an error naming it; the cost of a root-qdisc
dump with and without a session is printed (run with -s to see it; not asserted).

A fresh veth's root qdisc is ``noqueue``; ``pfifo`` is built into the host kernel."""

from __future__ import annotations

import socket
import struct
import time
import uuid

import pytest

from helpers import require_root
from testbed import cmd, nsops
from testbed.optical import qdiscnl

DUMPS = 300
RTM_GETTCLASS = 42


class ProbeError(qdiscnl.QdiscError):
    """This test's module error class."""


@pytest.fixture
def veth_netns():
    """A namespace holding an up veth pair (qa, qb), removed afterwards."""
    require_root()
    ns = f"tbqnl{uuid.uuid4().hex[:8]}"
    cmd.run(["ip", "netns", "add", ns])
    try:
        nsops.add_veth("qa", ns, "qb", ns)
        nsops.configure_link("qa", ns)
        nsops.configure_link("qb", ns)
        yield ns
    finally:
        nsops.delete_netns(ns)


def test_one_socket_dumps_replaces_and_deletes_the_root_qdisc(veth_netns):
    ns = veth_netns
    with qdiscnl.Session(ns, error=ProbeError) as s:
        q = qdiscnl.dump_root("qa", ns, "noqueue", ProbeError, s)
        assert q == qdiscnl.dump_root("qa", ns, "noqueue", ProbeError)            # as without a session
        assert s.ifindex("qa") == nsops.call_in(ns, lambda: socket.if_nametoindex("qa"))
        qdiscnl.replace_root("qa", ns, "pfifo", struct.pack("=I", 77), ProbeError, session=s)
        assert "pfifo" in cmd.run(["tc", "qdisc", "show", "dev", "qa"], netns=ns).stdout
        assert "limit 77p" in cmd.run(["tc", "qdisc", "show", "dev", "qa"], netns=ns).stdout
        # a class dump (tcm_parent 0, as xcppace's) of a classless qdisc: just its end
        assert qdiscnl.device_request("qa", ns, RTM_GETTCLASS, qdiscnl.NLM_F_DUMP, error=ProbeError, session=s,
                                      parent=0) == []
        assert qdiscnl.dump_root("qa", ns, "pfifo", ProbeError, s).options == struct.pack("=I", 77)
        with pytest.raises(ProbeError, match="qb in .* has no pfifo root qdisc"):
            qdiscnl.dump_roots(["qa", "qb"], ns, "pfifo", ProbeError, s)
        with pytest.raises(ProbeError, match="Invalid argument"):
            qdiscnl.replace_root("qa", ns, "pfifo", b"\1", ProbeError, session=s)   # options too short
        qdiscnl.delete_root("qa", ns, ProbeError, session=s)
        assert qdiscnl.dump_root("qa", ns, "noqueue", ProbeError, s).kind == "noqueue"


def test_a_deleted_device_then_a_deleted_namespace_are_errors_naming_them(veth_netns):
    ns = veth_netns
    with qdiscnl.Session(ns, error=ProbeError) as s:
        qdiscnl.dump_root("qa", ns, "noqueue", ProbeError, s)
        nsops.delete_link("qa", ns)                      # takes qb with it
        with pytest.raises(ProbeError, match="qa in .* has no noqueue root qdisc"):
            qdiscnl.dump_root("qa", ns, "noqueue", ProbeError, s)
        with pytest.raises(ProbeError, match=f"no interface qa in {ns}"):
            qdiscnl.dump_root("qa", ns, "noqueue", ProbeError, s)
        nsops.delete_netns(ns)                           # the socket still holds the namespace itself
        with pytest.raises(ProbeError, match=f"network namespace {ns} is gone.*about lo"):
            qdiscnl.dump_root("lo", ns, "noqueue", ProbeError, s)
        cmd.run(["ip", "netns", "add", ns])              # another namespace under the same name
        with pytest.raises(ProbeError, match=f"network namespace {ns} is gone"):
            s.request(qdiscnl.RTM_GETQDISC, qdiscnl.NLM_F_DUMP, 0, error=ProbeError, dev="lo")


def _per_dump_us(fn, n: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def test_cost_of_a_root_qdisc_dump_with_and_without_a_session(veth_netns):
    ns = veth_netns
    t0 = time.perf_counter()
    s = qdiscnl.Session(ns, error=ProbeError)
    open_us = (time.perf_counter() - t0) * 1e6
    with s:
        with_us = _per_dump_us(lambda: qdiscnl.dump_root("qa", ns, "noqueue", ProbeError, s), DUMPS)
        without_us = _per_dump_us(lambda: qdiscnl.dump_root("qa", ns, "noqueue", ProbeError), DUMPS)
        root = qdiscnl.Session(None, error=ProbeError)
        with root:
            root_us = _per_dump_us(lambda: qdiscnl.dump_root("lo", None, "noqueue", ProbeError, root), DUMPS)
    print(f"\nroot-qdisc dump, {DUMPS} each: session {with_us:.1f} us, no session {without_us:.1f} us "
          f"(ratio {without_us / with_us:.1f}); session open {open_us:.0f} us; "
          f"root-namespace session {root_us:.1f} us")
    assert with_us > 0 and without_us > 0
