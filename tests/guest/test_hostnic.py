"""The hostnic qdisc (kernel/sch_hostnic.c), the fabric hosts' NIC queue, in the
full-kernel guest.

Set-up: namespaces A and B, a veth pair a (in A) -- b (in B), a NOARP with a static
address; the qdisc under test is a's root qdisc. Datagrams carry their departure time
with SO_TXTIME (CLOCK_MONOTONIC; skb->tstamp, as the fabric's egress program stamps
it). Measured by the kernel, independently of the qdisc, in CLOCK_REALTIME: SCHED on
the sender's error queue (SO_TIMESTAMPING with OPT_ID), taken in __dev_queue_xmit just
before the enqueue, and the transmit time a packet tap on a sees (an AF_PACKET socket
in A: dev_queue_xmit_nit() stamps its copy when the device transmits, after the
dequeue).

* Release: datagrams sent in a shuffled order of departure times leave in departure
  order, none before its time and none later than TOL_LATE (under QEMU icount the
  path from the watchdog to the transmission is short and deterministic);
  ``out_of_order`` counts exactly the datagrams stamped earlier than one queued before.
* Orphaning, the reason the qdisc exists: while the qdisc holds a datagram, the
  sending socket's transmit memory (SO_MEMINFO WMEM_ALLOC) is back to zero; under
  ``fq`` (the counterfactual, same datagram) it stays charged until the release. Across
  the emulated fabric that charge is what TCP Small Queues limit (docs/environment.md).
* A retransmission due while the original is still in the network is sent: a SYN held
  2 s by a netem delay one hop later times out after 1 s; behind hostnic it is
  retransmitted, behind fq the kernel skips it as "still in the host queue"
  (TCPSpuriousRtxHostQueues), which the papers' TCP would not.
* Bounds: bad options are refused by the module with its message; without options the
  module takes its default limit; a stamp more than 1 h ahead is capped and counted.
"""

from __future__ import annotations

import os
import random
import secrets
import socket
import struct
import time

import pytest

from helpers import packet_tap, require_features, require_root, veth_between_namespaces
from testbed import cmd, setns
from testbed.cc.modules import KERNEL_DIR
from testbed.ledger import Ledger
from testbed.optical import hostnic, qdiscnl

SO_TIMESTAMPING, SO_TXTIME, SCM_TXTIME, SO_MEMINFO = 37, 61, 61, 55
SO_TIMESTAMPNS = 35
SOF_TIMESTAMPING_SOFTWARE, SOF_TIMESTAMPING_OPT_ID = 1 << 4, 1 << 7
SOF_TIMESTAMPING_TX_SCHED, SOF_TIMESTAMPING_OPT_TSONLY = 1 << 8, 1 << 11
SO_EE_ORIGIN_TIMESTAMPING, SCM_TSTAMP_SCHED = 4, 1
PACKET_OUTGOING = 4
SK_MEMINFO_WMEM_ALLOC = 2
CLOCK_MONOTONIC = 1
#: a release may be this much after its stamp (watchdog hrtimer, NET_TX softirq, the tap)
TOL_LATE_NS = 200_000
#: the stamp-to-stamp clock conversion (two clock reads in user space) may be off by this
TOL_CLOCK_NS = 20_000
DST = ("10.78.0.2", 9)
#: how long the orphaning test's datagram is held (guest clock)
HOLD_NS = 60_000_000_000


@pytest.fixture(scope="module")
def env():
    require_root()
    require_features("netns", "modules", "fq")
    if not (KERNEL_DIR / "sch_hostnic.ko").exists():
        pytest.fail("kernel/sch_hostnic.ko is not built: make -C kernel")
    ledger = Ledger.create(f"test-hostnic-{os.getpid()}-{time.monotonic_ns()}")
    tok = secrets.token_hex(2)
    ns_a, ns_b, dev_a, dev_b = f"hnA{tok}", f"hnB{tok}", f"hna{tok}", f"hnb{tok}"
    try:
        veth_between_namespaces(ledger, ns_a, ns_b, dev_a, dev_b, "10.78.0.1/24")
        hostnic.load_module(ledger)
        yield {"ledger": ledger, "ns_a": ns_a, "dev_a": dev_a}
    finally:
        errors = ledger.teardown()
    assert not errors, errors


def sender(ns: str) -> socket.socket:
    with setns.entered(ns):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, SO_TXTIME, struct.pack("=iI", CLOCK_MONOTONIC, 0))
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING, SOF_TIMESTAMPING_TX_SCHED | SOF_TIMESTAMPING_SOFTWARE
                 | SOF_TIMESTAMPING_OPT_ID | SOF_TIMESTAMPING_OPT_TSONLY)
    return s


def tx_tap(ns: str, dev: str) -> socket.socket:
    """A packet tap on ``dev``: its copies of outgoing frames carry the transmit time."""
    return packet_tap(ns, dev, 8 << 20)


def transmitted(tap: socket.socket, want: int, timeout_s: float) -> dict[int, int]:
    """{slot: transmit time, CLOCK_REALTIME ns} of our outgoing datagrams (UDP to port 9,
    payload starting with the slot number), until ``want`` or the timeout."""
    out: dict[int, int] = {}
    tap.settimeout(0.2)
    deadline = time.monotonic() + timeout_s
    while len(out) < want and time.monotonic() < deadline:
        try:
            frame, anc, _f, addr = tap.recvmsg(2048, 1024)
        except TimeoutError:
            continue
        if addr[2] != PACKET_OUTGOING or frame[12:14] != b"\x08\x00" or frame[23] != 17:
            continue
        ihl = (frame[14] & 0x0F) * 4
        udp = 14 + ihl
        if struct.unpack_from("!H", frame, udp + 2)[0] != DST[1]:
            continue
        sec, nsec = next(struct.unpack_from("=qq", d) for lvl, k, d in anc
                         if lvl == socket.SOL_SOCKET and k == SO_TIMESTAMPNS)
        out[struct.unpack_from("=I", frame, udp + 8)[0]] = sec * 1_000_000_000 + nsec
    return out


def send_at(s: socket.socket, payload: bytes, txtime_ns: int) -> None:
    s.sendmsg([payload], [(socket.SOL_SOCKET, SCM_TXTIME, struct.pack("=Q", txtime_ns))], 0, DST)


def sched_stamps(s: socket.socket, want: int, timeout_s: float) -> dict[int, int]:
    """{OPT_ID: SCM_TSTAMP_SCHED, CLOCK_REALTIME ns} from the error queue, until ``want``
    or the timeout (guest clock)."""
    out: dict[int, int] = {}
    deadline = time.monotonic() + timeout_s
    while len(out) < want and time.monotonic() < deadline:
        try:
            _d, anc, _f, _a = s.recvmsg(64, 1024, socket.MSG_ERRQUEUE | socket.MSG_DONTWAIT)
        except BlockingIOError:
            time.sleep(0.001)
            continue
        ts = key = None
        for level, typ, data in anc:
            if level == socket.SOL_SOCKET and typ == SO_TIMESTAMPING:
                sec, nsec = struct.unpack_from("=qq", data)
                ts = sec * 1_000_000_000 + nsec
            elif level == socket.SOL_IP and typ == 11:            # IP_RECVERR
                _e, origin, _t, _c, _p, info, data_ = struct.unpack_from("=IBBBBII", data)
                if origin == SO_EE_ORIGIN_TIMESTAMPING and info == SCM_TSTAMP_SCHED:
                    key = data_
        if ts is not None and key is not None:
            out[key] = ts
    return out


def wmem_alloc(s: socket.socket) -> int:
    return struct.unpack("=9I", s.getsockopt(socket.SOL_SOCKET, SO_MEMINFO, 36))[SK_MEMINFO_WMEM_ALLOC]


def realtime_minus_monotonic() -> int:
    a = time.clock_gettime_ns(time.CLOCK_REALTIME)
    m = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    b = time.clock_gettime_ns(time.CLOCK_REALTIME)
    return (a + b) // 2 - m


def test_releases_at_the_stamped_time_in_stamp_order(env):
    hostnic.install(env["dev_a"], env["ns_a"], ledger=env["ledger"])
    n, gap_ns = 40, 1_000_000
    order = list(range(n))
    random.Random(5).shuffle(order)
    tap = tx_tap(env["ns_a"], env["dev_a"])
    s = sender(env["ns_a"])
    try:
        offset = realtime_minus_monotonic()
        base = time.clock_gettime_ns(time.CLOCK_MONOTONIC) + 20_000_000
        txtime = {}
        for slot in order:                          # OPT_ID counts datagrams in send order
            txtime[slot] = base + slot * gap_ns
            send_at(s, struct.pack("=I", slot) + b"x" * 200, txtime[slot])
        sched = sched_stamps(s, n, timeout_s=30)
        sent = transmitted(tap, n, timeout_s=30)
    finally:
        s.close()
        tap.close()
    assert len(sched) == n and len(sent) == n, f"{len(sched)} SCHED stamps, {len(sent)} transmissions of {n}"
    assert sorted(sent, key=sent.get) == sorted(txtime, key=txtime.get), "not released in stamp order"
    late = [sent[k] - offset - txtime[k] for k in txtime]
    assert min(late) >= -TOL_CLOCK_NS, f"released {-min(late)} ns before its stamp"
    assert max(late) <= TOL_LATE_NS, f"released {max(late)} ns after its stamp"
    assert all(sched[i] - offset < txtime[slot] for i, slot in enumerate(order)), "enqueued after its stamp"
    st = hostnic.read(env["dev_a"], env["ns_a"])
    expected_ooo = sum(1 for i, slot in enumerate(order) if i and slot < max(order[:i]))
    assert st.out_of_order == expected_ooo
    assert (st.drops, st.qlen, st.config.limit, st.horizon_capped) == (0, 0, hostnic.LIMIT_DEFAULT, 0)
    assert st.sent_packets >= n and st.orphaned >= n and st.max_qlen >= n - 1
    print(f"\nHOSTNIC release lateness: min {min(late)} ns, max {max(late)} ns; out_of_order {st.out_of_order}")


@pytest.mark.parametrize("qdisc", ["hostnic", "fq"])
def test_a_held_datagram_no_longer_charges_its_socket(env, qdisc):
    """hostnic: the socket's transmit memory is free while the qdisc holds the datagram;
    fq (the counterfactual): it stays charged until the release."""
    if qdisc == "hostnic":
        hostnic.install(env["dev_a"], env["ns_a"], ledger=env["ledger"])
    else:
        env["ledger"].add("qdisc", dev=env["dev_a"], netns=env["ns_a"], parent="root")
        cmd.run(["tc", "qdisc", "replace", "dev", env["dev_a"], "root", "fq", "nopacing", "horizon", "3600s",
                 "horizon_cap"], netns=env["ns_a"])
    qdiscnl.dump_root(env["dev_a"], env["ns_a"], qdisc)  # warm: no file I/O between send and reads
    s = sender(env["ns_a"])
    try:
        assert wmem_alloc(s) == 0
        sent = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        send_at(s, b"y" * 1000, sent + HOLD_NS)
        held = wmem_alloc(s)
        # in-process netlink, not `tc`: under icount (sleep=off) a guest idle while QEMU
        # reads a binary from the host jumps its clock to the next timer, which may be
        # this datagram's release (CI saw the datagram gone when `tc` ran)
        q = qdiscnl.dump_root(env["dev_a"], env["ns_a"], qdisc)
        elapsed = time.clock_gettime_ns(time.CLOCK_MONOTONIC) - sent
    finally:
        s.close()
    assert elapsed < HOLD_NS, f"the guest clock passed the release ({elapsed} ns) before the reads"
    assert q.qlen == 1, f"{qdisc} does not hold the datagram: {q}"
    if qdisc == "hostnic":
        assert held == 0, f"hostnic left {held} B charged to the socket while holding its datagram"
    else:
        assert held > 1000, f"fq: expected the held datagram charged to its socket, got {held} B"


def test_options_are_checked_by_the_module(env):
    dev, ns = env["dev_a"], env["ns_a"]
    hostnic.install(dev, ns, hostnic.HostNicConfig(7), ledger=env["ledger"])
    assert hostnic.read(dev, ns).config.limit == 7
    for raw, msg in ((struct.pack("=2I", 1, 0), "limit must be 1..10000000"),
                     (struct.pack("=2I", 9, 10), "version differs"),
                     (struct.pack("=I", 1), "not a struct tc_hostnic_qopt")):
        with pytest.raises(hostnic.HostNicError, match=msg):
            qdiscnl.replace_root(dev, ns, hostnic.KIND, raw, hostnic.HostNicError, hostnic.QDISC_MODULE)
    # tc passes no options for a qdisc it has no parser for: a new qdisc takes the
    # module's defaults (a replace of a hostnic qdisc without options changes nothing:
    # the kernel calls change() only with TCA_OPTIONS)
    cmd.run(["tc", "qdisc", "replace", "dev", dev, "root", "hostnic"], netns=ns)
    assert hostnic.read(dev, ns).config.limit == 7
    qdiscnl.delete_root(dev, ns, hostnic.HostNicError)
    cmd.run(["tc", "qdisc", "add", "dev", dev, "root", "hostnic"], netns=ns)
    assert hostnic.read(dev, ns).config.limit == hostnic.LIMIT_DEFAULT


def test_a_stamp_beyond_the_horizon_is_capped_and_counted(env):
    """A stamp more than 1 h ahead (a clock mix-up) is held 1 h, as the fabric's fq did
    (horizon_cap), and counted: the record shows it instead of a silently stuck queue."""
    dev, ns = env["dev_a"], env["ns_a"]
    qdiscnl.delete_root(dev, ns, hostnic.HostNicError)
    hostnic.install(dev, ns, ledger=env["ledger"])
    s = sender(ns)
    try:
        send_at(s, b"z" * 100, time.clock_gettime_ns(time.CLOCK_MONOTONIC) + 2 * 3600 * 10**9)
        send_at(s, b"z" * 100, time.clock_gettime_ns(time.CLOCK_MONOTONIC) + 1_000_000)
        time.sleep(0.5)
        st = hostnic.read(dev, ns)
    finally:
        s.close()
    assert (st.horizon_capped, st.qlen, st.out_of_order) == (1, 1, 1), st
    qdiscnl.delete_root(dev, ns, hostnic.HostNicError)      # frees the held datagram


@pytest.mark.parametrize("qdisc", ["hostnic", "fq"])
def test_a_retransmission_due_while_the_original_is_in_the_network_is_sent(env, qdisc):
    """X -- Y -- Z, Y a bridge (a switch: no IP receive, so nothing orphans there), a 2 s
    netem delay on Y's port towards Z, static neighbours (no ARP wait). X's SYN is held
    there when its 1 s initial RTO fires. Behind hostnic (X's root qdisc) the SYN no
    longer belongs to X's socket and is retransmitted; behind fq (the counterfactual)
    Linux skips the retransmission because the original is "still in the host queue"."""
    require_features("netem")
    from testbed import nsops
    from testbed.cc import lossdetect

    led, tok = env["ledger"], secrets.token_hex(2)
    ns = {n: f"hr{n}{tok}" for n in "XYZ"}
    for name in ns.values():
        led.add("netns", name=name)
        cmd.run(["ip", "netns", "add", name])
    hx, hy, hw, hz, br = (f"{p}{tok}" for p in ("hx", "hy", "hw", "hz", "hb"))
    mac = {"X": "02:79:00:00:00:01", "Z": "02:79:00:00:00:02"}
    ip = {"X": "10.79.0.1", "Z": "10.79.0.2"}
    for a, na, b, nb in ((hx, "X", hy, "Y"), (hw, "Y", hz, "Z")):
        led.add("link", name=a, netns=ns[na], peer=b, peer_netns=ns[nb])
        nsops.add_veth(a, ns[na], b, ns[nb])
    led.add("link", name=br, netns=ns["Y"])
    cmd.run(["ip", "link", "add", br, "type", "bridge"], netns=ns["Y"])
    for dev in (hy, hw):
        cmd.run(["ip", "link", "set", dev, "master", br], netns=ns["Y"])
        nsops.configure_link(dev, ns["Y"], offloads=False, up=True)
    nsops.configure_link(br, ns["Y"], up=True)
    for node, dev, peer in (("X", hx, "Z"), ("Z", hz, "X")):
        nsops.configure_link(dev, ns[node], offloads=False, address=mac[node], up=True)
        nsops.add_address(dev, ns[node], f"{ip[node]}/24")
        cmd.run(["ip", "neigh", "replace", ip[peer], "lladdr", mac[peer], "dev", dev, "nud", "permanent"],
                netns=ns[node])
    led.add("qdisc", dev=hw, netns=ns["Y"], parent="root")
    cmd.run(["tc", "qdisc", "add", "dev", hw, "root", "netem", "delay", "2s"], netns=ns["Y"])
    if qdisc == "hostnic":
        hostnic.install(hx, ns["X"], ledger=led)
    else:
        led.add("qdisc", dev=hx, netns=ns["X"], parent="root")
        cmd.run(["tc", "qdisc", "add", "dev", hx, "root", "fq"], netns=ns["X"])
    with setns.entered(ns["Z"]):
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with setns.entered(ns["X"]):
        cli = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with srv, cli:
        srv.bind((ip["Z"], 7000))
        srv.listen(1)
        before = lossdetect.read(ns["X"])
        cli.settimeout(30)
        cli.connect((ip["Z"], 7000))                  # SYN held 2 s; RTO 1 s
        after = lossdetect.read(ns["X"])
    d = lossdetect.delta(before, after)
    skipped, syn_retrans = d["TcpExtTCPSpuriousRtxHostQueues"], d["TcpExtTCPSynRetrans"]
    print(f"\nHOSTNIC {qdisc}: SYN retransmissions {syn_retrans}, skipped as still queued {skipped}")
    if qdisc == "hostnic":
        assert (syn_retrans, skipped) == (1, 0), d
    else:
        assert syn_retrans == 0 and skipped >= 1, d
