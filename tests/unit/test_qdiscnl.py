"""qdiscnl.Session: one netlink socket per namespace, its requests on the calling thread.

The kernel side is a scripted fake socket answering with datagrams packed here by hand
(struct layouts of include/uapi/linux/netlink.h, rtnetlink.h, pkt_sched.h), so each
test's answer is known by construction; one test uses a real NETLINK_ROUTE socket for
the receive timeout (a NOOP request without an ack gets no reply at all)."""

from __future__ import annotations

import errno
import socket
import struct
from types import SimpleNamespace

import pytest

from testbed.optical import qdiscnl, xcppace
from testbed.optical.xcppacer import SLOTS

# -- netlink messages packed by hand ------------------------------------------------------
NLMSG_NOOP, NLMSG_ERROR, NLMSG_DONE = 1, 2, 3
RTM_NEWLINK, RTM_GETLINK = 16, 18
RTM_NEWQDISC, RTM_GETQDISC, RTM_NEWTCLASS, RTM_GETTCLASS = 36, 38, 40, 42
NLM_F_MULTI, NLM_F_ACK, NLM_F_DUMP, NLM_F_ACK_TLVS = 0x2, 0x4, 0x300, 0x200
ROOT = 0xFFFFFFFF


def rta(kind: int, payload: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(payload), kind) + payload
    return raw + b"\0" * (-len(raw) % 4)


def nlmsg(mtype: int, seq: int, payload: bytes, flags: int = 0) -> bytes:
    raw = struct.pack("=IHHII", 16 + len(payload), mtype, flags, seq, 0) + payload
    return raw + b"\0" * (-len(raw) % 4)


def ack(seq: int, code: int = 0, text: str = "") -> bytes:
    """NLMSG_ERROR (code 0: the ack) with the request's header echoed (capped ack)."""
    tlv = rta(1, text.encode() + b"\0") if text else b""
    return nlmsg(NLMSG_ERROR, seq, struct.pack("=i", code) + struct.pack("=IHHII", 16, 0, 0, seq, 0) + tlv,
                 NLM_F_ACK_TLVS if text else 0)


def qdisc(seq: int, ifindex: int, kind: str, parent: int = ROOT, nbytes: int = 0, packets: int = 0, qlen: int = 0,
          options: bytes = b"", app: bytes = b"", mtype: int = RTM_NEWQDISC, handle: int = 0) -> bytes:
    stats = (rta(1, struct.pack("=QI", nbytes, packets) + b"\0" * 4) + rta(3, struct.pack("=5I", qlen, 0, 0, 0, 0))
             + (rta(4, app) if app else b""))
    body = (struct.pack("=BxxxiIII", 0, ifindex, handle, parent, 0) + rta(1, kind.encode() + b"\0")
            + (rta(2, options) if options else b"") + rta(7, stats))
    return nlmsg(mtype, seq, body, NLM_F_MULTI)


def link(seq: int, ifindex: int) -> bytes:
    return nlmsg(RTM_NEWLINK, seq, struct.pack("=BxHiII", 0, 1, ifindex, 0, 0))


class FakeSocket:
    """The kernel side: ``answer(mtype, flags, seq, body)`` gives the reply datagrams of
    each request; an empty queue is an expired SO_RCVTIMEO (EAGAIN)."""

    def __init__(self, answer) -> None:
        self.answer = answer
        self.sent: list[tuple[int, int, int, bytes]] = []
        self.queue: list[tuple[bytes, int]] = []
        self.options: dict[tuple[int, int], object] = {}
        self.closed = False

    def setsockopt(self, level: int, name: int, value: object) -> None:
        self.options[(level, name)] = value

    def bind(self, addr: tuple[int, int]) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def send(self, data: bytes) -> int:
        length, mtype, flags, seq, _pid = struct.unpack_from("=IHHII", data)
        assert length == len(data)
        self.sent.append((mtype, flags, seq, data[16:]))
        self.queue += [d if isinstance(d, tuple) else (d, 0) for d in self.answer(mtype, flags, seq, data[16:])]
        return len(data)

    def recvmsg_into(self, buffers):
        if not self.queue:
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        data, flags = self.queue.pop(0)
        buffers[0][:len(data)] = data
        return len(data), [], flags, (0, 0)

    def recv_into(self, buf, n: int = 0, flags: int = 0) -> int:
        assert flags & socket.MSG_DONTWAIT
        if not self.queue:
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        return len(self.queue.pop(0)[0])


#: the scripted namespace: devices {name: index}; "up" and "down" have pfifo roots
LINKS = {"up": 3, "down": 4, "lo": 1}


def kernel(mtype: int, flags: int, seq: int, body: bytes) -> list[bytes]:
    if mtype == RTM_GETLINK:
        name = body[16 + 4:].split(b"\0")[0].decode()
        if name not in LINKS:
            return [ack(seq, -errno.ENODEV)]
        return [link(seq, LINKS[name]) + ack(seq)]
    if mtype == RTM_GETQDISC:
        # two datagrams, as a dump larger than one skb comes
        return [qdisc(seq, 1, "noqueue") + qdisc(seq, 3, "pfifo", nbytes=1500, packets=1, qlen=2),
                qdisc(seq, 4, "pfifo", parent=0x10001) + qdisc(seq, 4, "pfifo", nbytes=9000, packets=6)
                + nlmsg(NLMSG_DONE, seq, struct.pack("=i", 0), NLM_F_MULTI)]
    if mtype == RTM_NEWQDISC:
        return [ack(seq)]
    raise AssertionError(f"unexpected request type {mtype}")


class PortError(qdiscnl.QdiscError):
    """A module's own error class (as voq, obsburst, xcppace have)."""


@pytest.fixture
def fake(monkeypatch):
    """Sessions opened on FakeSocket(kernel); the list of sockets opened."""
    opened: list[FakeSocket] = []

    def open_socket() -> FakeSocket:
        opened.append(FakeSocket(kernel))
        return opened[-1]
    monkeypatch.setattr(qdiscnl, "open_socket", open_socket)
    return opened


def test_dumps_run_on_one_socket_and_each_device_is_looked_up_once(fake):
    with qdiscnl.Session(None, timeout_s=1.5) as s:
        for _ in range(3):
            got = qdiscnl.dump_roots(["up", "down"], None, "pfifo", PortError, session=s)
            assert got == {"up": qdiscnl.RootQdisc("pfifo", b"", b"", 1, 1500, 2),
                           "down": qdiscnl.RootQdisc("pfifo", b"", b"", 6, 9000, 0)}
        assert qdiscnl.dump_root("up", None, "pfifo", PortError, s).bytes == 1500
    (sock,) = fake
    assert sock.closed and s.closed
    assert [m for m, *_ in sock.sent] == [RTM_GETLINK, RTM_GETLINK] + [RTM_GETQDISC] * 4
    assert [seq for _m, _f, seq, _b in sock.sent] == [1, 2, 3, 4, 5, 6]
    assert all(f & NLM_F_DUMP == NLM_F_DUMP for m, f, _s, _b in sock.sent if m == RTM_GETQDISC)
    assert sock.options[(socket.SOL_SOCKET, socket.SO_RCVTIMEO)] == struct.pack("@ll", 1, 500_000)


def test_a_missing_device_or_root_qdisc_is_the_modules_error(fake):
    with qdiscnl.Session(None) as s:
        with pytest.raises(PortError, match="no interface eth9 in the root namespace") as e:
            qdiscnl.dump_root("eth9", None, "pfifo", PortError, s)
        assert e.value.errno == errno.ENODEV
        for _ in range(2):
            with pytest.raises(PortError, match="lo in the root namespace has no pfifo root qdisc"):
                qdiscnl.dump_root("lo", None, "pfifo", PortError, s)
        assert qdiscnl.dump_root("up", None, "pfifo", PortError, s).qlen == 2
        assert qdiscnl.dump_root("up", None, "pfifo", PortError, s).qlen == 2
    # lo is looked up again after a failed dump (it may have been deleted and made again); up once
    asked = [b[20:].split(b"\0")[0].decode() if m == RTM_GETLINK else "dump" for m, _f, _s, b in fake[0].sent]
    assert asked == ["eth9", "lo", "dump", "lo", "dump", "up", "dump", "dump"]


def test_the_kernels_error_carries_its_message_and_leaves_the_session_usable(fake, monkeypatch):
    answers = iter([[ack(2, -errno.EINVAL, "limit out of range")], [ack(3)]])
    with qdiscnl.Session(None) as s:
        s.ifindex("up")
        fake[0].answer = lambda m, f, seq, b: next(answers)
        with pytest.raises(PortError, match="installing pfifo on up in the root namespace: "
                                            "Invalid argument: limit out of range") as e:
            qdiscnl.replace_root("up", None, "pfifo", b"\0" * 4, PortError, session=s)
        assert e.value.errno == errno.EINVAL
        qdiscnl.replace_root("up", None, "pfifo", None, PortError, session=s)
    mtype, flags, _seq, body = fake[0].sent[-1]
    assert mtype == RTM_NEWQDISC and flags & NLM_F_ACK
    assert struct.unpack_from("=BxxxiIII", body) == (0, 3, 0, ROOT, 0)


def test_a_reply_of_another_sequence_raises_and_the_next_request_starts_clean(fake):
    with qdiscnl.Session(None) as s:
        s.ifindex("up")
        # the reply carries another sequence; the stale rest of it is still queued after the raise
        fake[0].answer = lambda m, f, seq, b: [qdisc(seq + 7, 3, "pfifo"), nlmsg(NLMSG_DONE, seq + 7, b"\0" * 4)]
        with pytest.raises(PortError, match="sequence 9 to request 2"):
            qdiscnl.dump_root("up", None, "pfifo", PortError, s)
        assert len(fake[0].queue) == 1
        fake[0].answer = kernel
        assert qdiscnl.dump_root("up", None, "pfifo", PortError, s).packets == 1
        assert fake[0].queue == []


@pytest.mark.parametrize("datagram, flags, what", [
    (lambda seq: qdisc(seq, 3, "pfifo")[:40], 0, "message of 96 bytes at byte 0 of a 40-byte datagram"),
    (lambda seq: qdisc(seq, 3, "pfifo") + b"\0" * 8, 0, "8 bytes after the last whole message"),
    (lambda seq: qdisc(seq, 3, "pfifo"), socket.MSG_TRUNC, "longer than the 65536-byte buffer"),
])
def test_a_truncated_reply_raises(fake, datagram, flags, what):
    with qdiscnl.Session(None) as s:
        s.ifindex("up")
        fake[0].answer = lambda m, f, seq, b: [(datagram(seq), flags)]
        with pytest.raises(PortError, match=f"truncated.*{what}"):
            qdiscnl.dump_root("up", None, "pfifo", PortError, s)


def test_no_reply_raises_instead_of_waiting(fake):
    with qdiscnl.Session(None, timeout_s=0.25) as s:
        s.ifindex("up")
        fake[0].answer = lambda m, f, seq, b: []
        with pytest.raises(PortError, match="no netlink reply within 0.25 s in the root namespace .about up"):
            qdiscnl.dump_root("up", None, "pfifo", PortError, s)


def test_the_real_socket_times_out():
    """A real NETLINK_ROUTE socket: NLMSG_NOOP without NLM_F_ACK gets no reply, so the
    session's receive timeout (SO_RCVTIMEO) is what ends the wait."""
    import time
    with qdiscnl.Session(None, timeout_s=0.2) as s:
        t0 = time.monotonic()
        with pytest.raises(qdiscnl.QdiscError, match="no netlink reply within 0.2 s"):
            s._send(NLMSG_NOOP, 0, b"", qdiscnl.QdiscError, None)
        assert 0.15 < time.monotonic() - t0 < 5
        assert s.ifindex("lo") == 1         # the loopback device is index 1 in every namespace


def test_a_vanished_namespace_is_the_modules_error_naming_it_and_the_device(fake, monkeypatch):
    ns_ids = iter([(7, 100), None, (7, 101)])     # at the lookup: there; then deleted; then another of that name
    monkeypatch.setattr(qdiscnl, "call_in", lambda netns, fn: fn())
    monkeypatch.setattr(qdiscnl, "_own_netns_id", lambda: (7, 100))
    monkeypatch.setattr(qdiscnl, "_netns_id", lambda netns: next(ns_ids))
    with qdiscnl.Session("tbx1") as s:
        assert s.ifindex("up") == 3
        for _ in range(2):
            with pytest.raises(PortError, match="network namespace tbx1 is gone .* .about up"):
                qdiscnl.dump_root("up", "tbx1", "pfifo", PortError, s)
        with pytest.raises(PortError, match="session of tbx1 cannot serve tbx2"):
            qdiscnl.dump_root("up", "tbx2", "pfifo", PortError, s)
    with pytest.raises(PortError, match="session of tbx1 is closed .about up"):
        qdiscnl.dump_root("up", "tbx1", "pfifo", PortError, s)


def test_a_session_of_a_namespace_that_does_not_exist_is_refused():
    with pytest.raises(PortError, match="netlink session: network namespace tbqnl-none-such"):
        qdiscnl.Session("tbqnl-none-such", error=PortError)


# -- xcppace on a session ----------------------------------------------------------------------------
def xcppace_kernel(opts: xcppace.XcpPaceOptions, port_slot: tuple[int, ...], class_slots: list[tuple[int, int, int]]):
    """A namespace with an xcppace root on "up" (ifindex 3): its ring holds interval
    port_slot[0] in slot port_slot[0] % SLOTS; class c's slot of that interval is
    class_slots[c] = (interval, bytes, packets)."""
    k = port_slot[0]
    xstats = [0] * (xcppace.XSTATS_SIZE // 8)
    n = len(xcppace.XSTATS_MEMBERS) + 48                       # scalars, late_log2[XCPPACE_LATE_BUCKETS = 48]
    for j in range(SLOTS):
        xstats[n + 6 * j] = 2**64 - 1                          # unused slots: interval U64_MAX
    xstats[n + 6 * (k % SLOTS):n + 6 * (k % SLOTS) + 6] = port_slot
    xstats[xcppace.XSTATS_MEMBERS.index("late_rates")] = 5

    def cls_app(c: int) -> bytes:
        v = [0] * (xcppace.CLASS_XSTATS_SIZE // 8)
        m = len(xcppace.CLASS_XSTATS_MEMBERS)
        for j in range(SLOTS):
            v[m + 3 * j] = 2**64 - 1
        v[m + 3 * (k % SLOTS):m + 3 * (k % SLOTS) + 3] = class_slots[c]
        return struct.pack(f"={len(v)}Q", *v)

    def answer(mtype: int, flags: int, seq: int, body: bytes) -> list[bytes]:
        if mtype == RTM_GETLINK:
            return [link(seq, 3) + ack(seq)]
        if mtype == RTM_GETQDISC:
            return [qdisc(seq, 3, "xcppace", options=opts.pack(), app=struct.pack(f"={len(xstats)}Q", *xstats))
                    + nlmsg(NLMSG_DONE, seq, b"\0" * 4, NLM_F_MULTI)]
        if mtype == RTM_GETTCLASS:
            return [b"".join(qdisc(seq, 3, "xcppace", parent=0x10000, app=cls_app(c), mtype=RTM_NEWTCLASS,
                                   handle=0x10000 + c + 1) for c in range(opts.nclasses))
                    + nlmsg(NLMSG_DONE, seq, b"\0" * 4, NLM_F_MULTI)]
        if mtype == RTM_NEWQDISC:
            return [ack(seq)]
        raise AssertionError(f"unexpected request type {mtype}")
    return answer


def test_xcppace_read_and_set_rates_on_a_session(fake):
    opts = xcppace.XcpPaceOptions(2, 80_000, 2_000_000, 250_000_000, 1_000_000, 0, 10**9, (1_000_000, 2_000_000))
    # interval 9: 3000 bytes in 2 packets left, 1000 of them class 0's; class 1's slot still holds interval 5
    answer = xcppace_kernel(opts, (9, 3000, 2, 40_000, 4000, 3), [(9, 1000, 1), (5, 777, 7)])
    with qdiscnl.Session(None) as s:
        fake[0].answer = answer
        for _ in range(2):
            st = xcppace.read("up", None, session=s)
            assert st.options == opts and st.late_rates == 5
            assert list(st.intervals) == [9]
            iv = st.intervals[9]
            assert (iv.bytes, iv.packets, iv.qmin_ns, iv.class_bytes, iv.class_packets) == (3000, 2, 40_000,
                                                                                            (1000, 0), (1, 0))
        xcppace.set_rates("up", None, [xcppace.RateChange(1, 5_000_000, 123)], session=s)
    sent = fake[0].sent
    assert [m for m, *_ in sent] == [RTM_GETLINK] + [RTM_GETQDISC, RTM_GETTCLASS] * 2 + [RTM_NEWQDISC]
    # the class dump asks about every qdisc of the device (tcm_parent 0), not the root handle
    assert struct.unpack_from("=BxxxiIII", sent[2][3]) == (0, 3, 0, 0, 0)
    mtype, flags, _seq, body = sent[-1]
    assert flags & NLM_F_ACK and struct.unpack_from("=BxxxiIII", body) == (0, 3, 0, ROOT, 0)
    # TCA_KIND "xcppace", then TCA_OPTIONS nesting TCA_XCPPACE_RATES: (class, pad, bit/s, instant)
    assert body[20:32] == rta(1, b"xcppace\0")
    assert body[32 + 8:] == struct.pack("=IIQQ", 1, 0, 5_000_000, 123)


def test_xcppace_on_a_vanished_namespace_names_it_and_the_device(fake, monkeypatch):
    monkeypatch.setattr(qdiscnl, "call_in", lambda netns, fn: fn())
    monkeypatch.setattr(qdiscnl, "_own_netns_id", lambda: (7, 100))
    monkeypatch.setattr(qdiscnl, "_netns_id", lambda netns: None)
    with qdiscnl.Session("tbx1") as s:
        with pytest.raises(xcppace.XcpPaceError, match="network namespace tbx1 is gone.*about up"):
            xcppace.read("up", "tbx1", session=s)
        with pytest.raises(xcppace.XcpPaceError, match="rate changes for xcppace on up in tbx1: network namespace "
                                                       "tbx1 is gone"):
            xcppace.set_rates("up", "tbx1", [xcppace.RateChange(0, 1, 2)], session=s)


def test_find_attr_gives_the_first_payload_of_a_type_with_its_flags_masked_within_the_span():
    run = rta(1, b"ab") + rta(0x8000 | 7, rta(4, b"app")) + rta(7, b"second")
    assert qdiscnl.find_attr(run, 7) == rta(4, b"app")              # NLA_F_NESTED masked off; the first of two
    assert qdiscnl.find_attr(run, 1) == b"ab" and qdiscnl.find_attr(run, 2) is None
    assert qdiscnl.find_attr(b"xx" + run, 1, start=2) == b"ab"
    assert qdiscnl.find_attr(run, 7, end=8) is None                   # the span ends before it
    assert qdiscnl.find_attr(struct.pack("=HH", 2, 1), 1) is None     # a length below the header ends the run


def test_classes_of_skips_other_kinds_and_names_a_missing_class():
    opts = xcppace.XcpPaceOptions(2, 80_000, 2_000_000, 250_000_000, 1_000_000, 0, 10**9, (1, 2))
    answer = xcppace_kernel(opts, (9, 3000, 2, 40_000, 4000, 3), [(9, 1000, 1), (5, 777, 7)])
    datagram = answer(RTM_GETTCLASS, NLM_F_DUMP, 1, b"")[0]
    msgs, off = [], 0
    while off < len(datagram):
        length, mtype = struct.unpack_from("=IH", datagram, off)
        if mtype == RTM_NEWTCLASS:
            msgs.append(datagram[off + 16:off + length])
        off += (length + 3) & ~3
    foreign = qdisc(1, 3, "htb", parent=0x10000, app=b"\0" * 8, mtype=RTM_NEWTCLASS, handle=0x10001)[16:]
    got = xcppace.classes_of([foreign] + msgs, 2)
    assert [c.slots[9 % SLOTS] for c in got] == [(9, 1000, 1), (5, 777, 7)]
    with pytest.raises(xcppace.XcpPaceError, match=r"the class dump of up lacks classes \[1\] of 2"):
        xcppace.classes_of([foreign, msgs[0]], 2, "up")


# -- XcpIo: one session per edge namespace ----------------------------------------------------------
def test_xcp_io_keeps_one_session_per_existing_edge_namespace(monkeypatch):
    from controllers import xcp_io
    from testbed import nsops

    made: list[SimpleNamespace] = []

    class FakeSession:
        def __init__(self, netns, error=qdiscnl.QdiscError):
            self.netns, self.error, self.closed = netns, error, False
            made.append(self)

        def close(self):
            self.closed = True

    calls = []
    monkeypatch.setattr(qdiscnl, "Session", FakeSession)
    monkeypatch.setattr(nsops, "netns_exists", lambda name: name in ("ns-a", "ns-b"))
    monkeypatch.setattr(xcppace, "read", lambda dev, netns, **kw: calls.append(("read", dev, netns, kw))
                        or SimpleNamespace(intervals={}, late=1))
    monkeypatch.setattr(xcppace, "set_rates", lambda dev, netns, ch, **kw: calls.append(("set", dev, netns, kw)))
    edges = [SimpleNamespace(name=n, pacer_dev=f"{n}-up", netns=ns)
             for n, ns in (("e0", "ns-a"), ("e1", "ns-a"), ("e2", "ns-b"), ("e3", "ns-gone"), ("e4", ""))]
    io = xcp_io.XcpIo(SimpleNamespace(cores=[], edges=edges, pin_dir=None))
    assert [s.netns for s in made] == ["ns-a", "ns-b", None]       # e0 and e1 share one; ns-gone has none
    assert all(s.error is xcppace.XcpPaceError for s in made)
    for e in ("e0", "e1", "e2", "e3", "e4"):
        io.read_pacer(e)
    io.set_rates("e1", [SimpleNamespace(cls=0, rate_bps=1, effective_ns=2)])
    io.pacer_counters("e2")
    a, b, root = made
    assert calls == [("read", "e0-up", "ns-a", {"session": a}), ("read", "e1-up", "ns-a", {"session": a}),
                     ("read", "e2-up", "ns-b", {"session": b}), ("read", "e3-up", "ns-gone", {}),
                     ("read", "e4-up", None, {"session": root}), ("set", "e1-up", "ns-a", {"session": a}),
                     ("read", "e2-up", "ns-b", {"session": b})]
    assert not any(s.closed for s in made)
    io.close()
    assert all(s.closed for s in made) and io.sessions == {}
