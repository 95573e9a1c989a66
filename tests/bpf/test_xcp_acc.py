"""XCP in ebpf/optswitch.bpf.c (native, root): the per-interval accumulator of a core
node's outputs (docs/xcp-edge.md, "(b) S and Q at a core node") and the xcp-edge
architecture's class marking (ebpf/arch/xcp_edge.h, "(a) The edge pacer").

Hand traces whose answers are known by construction (the derivation is written next to
each packet): BPF_PROG_TEST_RUN with the time injected through optsw_hook, the maps
read back through testbed.optical.maps. Ports serialise at 1000 ps/B, so a frame of L
bytes lasts L ns.
"""

from __future__ import annotations

import socket
import struct

import pytest

from testbed import bpf
from testbed.optical import layout, maps
from testbed.optical.architectures import REGISTRY, Assignment
from testbed.optical.layout import BUFFER, CUT, DROP, HOLD, NOCFG, AccSlot, PortConfig, XcpConfig

from test_optswitch import skip_reason

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")

PS = 1000            # ps per byte: tau(L) = L ns
E = 1_000_000        # epoch (emulation ns)
D_E = 100_000        # control interval d_e (emulation ns)
NODE = 3
EMPTY = layout.EMPTY_SLOT


def _ports(n: int, *, peer_host: tuple[int, ...] = (), prop_ns: int = 0) -> list[PortConfig]:
    return [PortConfig(PS, prop_ns=prop_ns, peer_host=p in peer_host) for p in range(n)]


def _egress(pin_dir, trace: list[tuple[int, int, int]], *, reads_waiting: bool = False) -> list[dict]:
    """(arrival ns, frame bytes, output port) through the egress program of NODE
    (``reads_waiting``: its architecture's, True for ob)."""
    return bpf.trace_run(pin_dir, NODE, [(bpf.OPTSW_EGRESS, t, ln, p, 0, "10.0.0.2") for t, ln, p in trace],
                         reads_waiting=reads_waiting)


def _acc(pin_dir, n_ports: int) -> dict[int, list[AccSlot]]:
    return maps.read_xcp_acc(pin_dir, {NODE: n_ports})[NODE]


def _only(acc: dict[int, list[AccSlot]], want: dict[tuple[int, int], AccSlot]) -> None:
    """Every slot of ``acc`` is the one of ``want`` ((port, slot) -> AccSlot), or empty."""
    got = {(p, i): s for p, ring in acc.items() for i, s in enumerate(ring) if s != EMPTY}
    assert got == want


# ---- the accumulator -------------------------------------------------------------------

#: ob, B = 2000 IP bytes, frames of 1000 B (986 IP bytes): (arrival, frame bytes, port),
#: decision. Backlog = (out_free - a)^+ as the arrival finds it.
OB_TRACE = [
    ((E - 1, 1000, 1), CUT),              # before the epoch: not counted; port 1 busy until E + 999
    ((E + 10_000, 1000, 1), CUT),         # interval 0, free: backlog 0; busy until E + 11 000
    ((E + 10_200, 1000, 1), BUFFER),      # backlog 800; nothing waits: 986 <= 2000, leaves E + 11 000
    ((E + 10_400, 1000, 1), BUFFER),      # backlog 1600; 986 waits: 1972 <= 2000, leaves E + 12 000
    ((E + 10_500, 1000, 1), DROP),        # backlog 2500; 1972 + 986 > 2000: dropped (frame counted)
    ((E + 99_500, 1000, 1), CUT),         # free: backlog 0; busy until E + 100 500, past interval 0
    ((E + 100_000, 1000, 1), BUFFER),     # interval 1 (its first ns): backlog 500
    ((E + 100_100, 1000, 2), CUT),        # port 2, free: backlog 0
    ((E + 100_900, 600, 1), BUFFER),      # busy until E + 101 500: backlog 600 (the one before left)
]
#: what the accumulator holds after OB_TRACE: {(port, slot): AccSlot}
OB_ACC = {
    (1, 0): AccSlot(0, bytes=5000, packets=5, drops=1, qmin_ns=0),
    (1, 1): AccSlot(1, bytes=1600, packets=2, drops=0, qmin_ns=500),   # min(500, 600), not the last
    (2, 1): AccSlot(1, bytes=1000, packets=1, drops=0, qmin_ns=0),
}


def _ob(pin_dir, xcp: XcpConfig | None) -> list[dict]:
    bpf.optswitch_load(pin_dir)
    maps.configure_node(pin_dir, NODE, REGISTRY.assignment("ob", {"buffer_bytes": 2000}), _ports(3))
    if xcp is not None:
        maps.configure_xcp(pin_dir, {NODE: xcp})
    return _egress(pin_dir, [p for p, _ in OB_TRACE], reads_waiting=True)


@pytest.mark.root
def test_an_ob_node_accumulates_bytes_packets_drops_and_the_smallest_backlog_per_interval(pin_dir):
    got = _ob(pin_dir, XcpConfig(True, E, D_E))
    assert [g["cb0"] for g in got] == [d for _, d in OB_TRACE]
    _only(_acc(pin_dir, 3), OB_ACC)


@pytest.mark.root
def test_the_accumulator_changes_no_decision_stamp_or_counter(pin_dir):
    """The same trace with XCP on and off: verdicts, decisions, stamps and every counter
    of the node's state equal."""
    on = _ob(pin_dir, XcpConfig(True, E, D_E))
    state_on = maps.read_raw_states(pin_dir, [NODE])[NODE]
    bpf.remove_pin_dir(pin_dir)
    off = _ob(pin_dir, XcpConfig(False, E, D_E))
    assert on == off
    assert maps.read_raw_states(pin_dir, [NODE])[NODE] == state_on


@pytest.mark.root
@pytest.mark.parametrize("xcp", [XcpConfig(False, E, D_E), None], ids=["disabled", "never-configured"])
def test_a_node_whose_xcp_is_off_writes_nothing(pin_dir, xcp):
    _ob(pin_dir, xcp)
    _only(_acc(pin_dir, 3), {})
    raw = bpf.map_dump(pin_dir, "optsw_xcp_acc", [layout.u32_key(NODE)])[0][1]
    assert raw == (layout.pack_xcp_node() if xcp is not None else bytes(layout.XCP_NODE_SIZE))


@pytest.mark.root
def test_nothing_is_counted_before_the_epoch(pin_dir):
    """The same trace with the epoch moved past every packet but the last two (at
    E + 100 100 and E + 100 900): only they count, both in interval 0 of the new epoch."""
    _ob(pin_dir, XcpConfig(True, E + 100_100, D_E))
    _only(_acc(pin_dir, 3), {(1, 0): AccSlot(0, bytes=600, packets=1, drops=0, qmin_ns=600),
                             (2, 0): AccSlot(0, bytes=1000, packets=1, drops=0, qmin_ns=0)})


@pytest.mark.root
def test_interval_k_plus_4_takes_over_slot_k(pin_dir):
    """After OB_TRACE, packets in interval 5 (slot 1) on port 1: its slot restarts with
    them; port 2's slot 1 (interval 1) and port 1's slot 0 (interval 0) stay."""
    _ob(pin_dir, XcpConfig(True, E, D_E))
    k5 = E + 5 * D_E
    got = _egress(pin_dir, [(k5 + 7, 800, 1),       # free: backlog 0; busy until k5 + 807
                            (k5 + 100, 800, 1)],    # backlog 707
                  reads_waiting=True)
    assert [g["cb0"] for g in got] == [CUT, BUFFER]
    _only(_acc(pin_dir, 3), {**OB_ACC, (1, 1): AccSlot(5, bytes=1600, packets=2, drops=0, qmin_ns=0)})
    assert layout.acc_interval(_acc(pin_dir, 3)[1], 1) == AccSlot(1)  # interval 1 of port 1 is gone
    assert layout.acc_interval(_acc(pin_dir, 3)[1], 5).bytes == 1600


@pytest.mark.root
def test_an_electronic_node_samples_the_backlog_its_arrivals_find(pin_dir):
    """Store-and-forward: dep = max(a + tau, out_free); the backlog sampled is still
    (out_free - a)^+, not the wait after reception. d_e = 2000 ns here. The first packet
    of the accumulator's life finds an all-zero map (cfg written directly, no reset): its
    slot must start afresh, not keep the zero as qmin."""
    d_e = 2000
    bpf.optswitch_load(pin_dir)
    maps.configure_node(pin_dir, NODE, REGISTRY.assignment("electronic"), _ports(1))
    bpf.map_update(pin_dir, "optsw_xcp_cfg", [(layout.u32_key(NODE), XcpConfig(True, E, d_e).pack())])
    got = _egress(pin_dir, [
        (E - 500, 1000, 0),     # before the epoch; dep E + 500, busy until E + 1 500
        (E, 1000, 0),           # interval 0: backlog 1500 (its wait after reception: 500); busy E + 2 500
        (E + 1000, 1000, 0),    # backlog 1500; dep E + 2 500, busy until E + 3 500
        (E + 2000, 1000, 0),    # interval 1: backlog 1500; dep E + 3 500, busy until E + 4 500
        (E + 2100, 500, 0),     # backlog 2400; dep E + 4 500, busy until E + 5 000
        (E + 3900, 100, 0),     # backlog 1100: the smallest, though the last
    ])
    assert [g["cb0"] for g in got] == [BUFFER] * 6
    assert [g["tstamp"] for g in got] == [E + 500, E + 1500, E + 2500, E + 3500, E + 4500, E + 5000]
    _only(_acc(pin_dir, 1), {(0, 0): AccSlot(0, bytes=2000, packets=2, drops=0, qmin_ns=1500),
                             (0, 1): AccSlot(1, bytes=1600, packets=3, drops=0, qmin_ns=1100)})


@pytest.mark.root
def test_held_packets_count_bytes_and_packets_only(pin_dir):
    """ib holds every packet (its backlog is the voq qdisc's): bytes and packets per
    interval, no backlog sample (qmin_ns stays none although out_free is 0)."""
    bpf.optswitch_load(pin_dir)
    maps.configure_node(pin_dir, NODE, REGISTRY.parse("ib:1500", 2), _ports(2))
    maps.configure_xcp(pin_dir, {NODE: XcpConfig(True, E, D_E)})
    got = _egress(pin_dir, [(E + 10, 1000, 0), (E + 20, 1500, 0), (E + D_E + 5, 700, 1)])
    assert [g["cb0"] for g in got] == [HOLD] * 3
    _only(_acc(pin_dir, 2), {(0, 0): AccSlot(0, bytes=2500, packets=2, drops=0, qmin_ns=None),
                             (1, 1): AccSlot(1, bytes=700, packets=1, drops=0, qmin_ns=None)})
    assert _egress(pin_dir, [(E + 4 * D_E, 64, 0)])[0]["cb0"] == HOLD  # interval 4 takes slot 0
    _only(_acc(pin_dir, 2), {(0, 0): AccSlot(4, bytes=64, packets=1, drops=0, qmin_ns=None),
                             (1, 1): AccSlot(1, bytes=700, packets=1, drops=0, qmin_ns=None)})


# ---- xcp-edge ---------------------------------------------------------------------------

XCP_EDGE = REGISTRY.get("xcp-edge", role="edge")
CORE, HOST = 0, 1  # the edge's ports: 0 towards the core, 1 and 2 towards hosts
CLASSES = {(NODE, "10.0.5.1"): 4, (NODE, "10.0.6.1"): 6}
FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10


def _tcp_frame(dst: str, flags: int, payload: int = 0, *, tcp_opts: int = 0, ip_opts: int = 0,
               frag_off: int = 0, pad_to: int = 60) -> bytes:
    """Ethernet + IPv4 (+ ip_opts bytes of options) + TCP (+ tcp_opts bytes) + payload
    bytes, zero-padded to ``pad_to`` bytes as Ethernet pads short frames (the IP total
    length does not count the padding)."""
    ihl, doff = 5 + ip_opts // 4, 5 + tcp_opts // 4
    tcp = struct.pack("!HHIIBBHHH", 40000, 5001, 1, 1, doff << 4, flags, 65535, 0, 0) + b"\x01" * tcp_opts
    total = 4 * ihl + len(tcp) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, total, 0, frag_off, 64, 6, 0,
                     socket.inet_aton("10.0.1.1"), socket.inet_aton(dst)) + b"\x01" * ip_opts
    frame = bytes.fromhex("020000000002" "020000000001" "0800") + ip + tcp + b"x" * payload
    return frame.ljust(pad_to, b"\0")


def _edge(pin_dir, *, acks_separate: bool, max_wait_ns: int = 10**6, tdf: float = 1.0, prop_ns: int = 0,
          enabled: bool = True) -> None:
    bpf.optswitch_load(pin_dir)
    # built by hand: choosing xcp-edge fails until its mechanism (the xcppace qdisc) exists
    maps.configure_node(pin_dir, NODE, Assignment(XCP_EDGE, (("max_wait_ns", max_wait_ns),)),
                        _ports(3, peer_host=(1, 2), prop_ns=prop_ns), tdf=tdf)
    maps.configure_xcp(pin_dir, {NODE: XcpConfig(enabled, E, D_E, acks_separate=acks_separate)})
    maps.set_xcp_classes(pin_dir, CLASSES)


def _run_frames(pin_dir, packets: list[tuple[int, int, bytes]]) -> list[tuple[int, int, int, int]]:
    """(now ns, output port, frame) through the egress program of NODE (model length =
    the frame's): per packet (verdict, cb[0], cb[2], tstamp)."""
    hook = pin_dir / "maps" / "optsw_hook"
    batch = bpf.Batch().load(bpf.object_path(bpf.OPTSWITCH), pin_dir,
                             rodata=bpf._optsw_rodata(NODE, is_switch=True, test_mode=True))
    for now, port, frame in packets:
        batch.update(hook, layout.u32_key(0), layout.hook_value(now, len(frame), port, 0))
        batch.test_run(f"@{bpf.OPTSW_EGRESS}", data=frame, ctx=bytes(bpf.SKB_CTX_SIZE))
    out = []
    for r in batch.run():
        if r is not None and r["op"] == "test-run":
            ctx = bytes.fromhex(r["ctx_out"])
            cb0, _cb1, cb2 = struct.unpack_from("<III", ctx, bpf.SKB_CB_OFFSET)
            out.append((r["retval"], cb0, cb2, int.from_bytes(ctx[bpf.SKB_TSTAMP_OFFSET:bpf.SKB_TSTAMP_OFFSET + 8],
                                                               "little")))
    assert len(out) == len(packets)
    return out


#: (frame, its class with separate ACK macroflows, with combined ones); None: no class
EDGE_CASES = [
    ("data", _tcp_frame("10.0.5.1", ACK | PSH, 1000), 4, 4),
    ("pure ACK", _tcp_frame("10.0.5.1", ACK), 5, 4),
    ("pure ACK, unpadded", _tcp_frame("10.0.5.1", ACK, pad_to=0), 5, 4),
    ("pure ACK with timestamps", _tcp_frame("10.0.5.1", ACK, tcp_opts=12), 5, 4),
    ("pure ACK with IP options", _tcp_frame("10.0.5.1", ACK, ip_opts=4), 5, 4),
    ("pure ACK, ECE CWR PSH URG", _tcp_frame("10.0.5.1", ACK | PSH | 0x20 | 0x40 | 0x80), 5, 4),
    ("pure ACK to another edge", _tcp_frame("10.0.6.1", ACK), 7, 6),
    ("SYN-ACK", _tcp_frame("10.0.5.1", SYN | ACK), 4, 4),
    ("FIN-ACK", _tcp_frame("10.0.5.1", FIN | ACK), 4, 4),
    ("RST-ACK", _tcp_frame("10.0.5.1", RST | ACK), 4, 4),
    ("ACK with 1 byte", _tcp_frame("10.0.5.1", ACK, 1), 4, 4),
    ("no ACK flag", _tcp_frame("10.0.5.1", PSH), 4, 4),
    ("a later fragment", _tcp_frame("10.0.5.1", ACK, frag_off=1), 4, 4),
    ("UDP", bpf.udp_frame(100, "10.0.6.1"), 6, 6),
    ("no class", _tcp_frame("10.0.9.9", ACK | PSH, 100), None, None),
    ("no class, pure ACK", _tcp_frame("10.0.9.9", ACK), None, None),
]


@pytest.mark.root
@pytest.mark.parametrize("acks_separate", [True, False], ids=["separate", "combined"])
def test_xcp_edge_holds_packets_towards_the_core_marked_with_their_class(pin_dir, acks_separate):
    """Towards the core: OPTSW_HOLD, stamped with the arrival here, cb[2] = the class of
    the destination (+ 1 for a pure ACK with separate ACK macroflows only; a SYN-ACK, a
    FIN, an RST or an ACK with payload is data); no class: dropped as unmodelled (cb[0]
    NOCFG, the port's nocfg counted), cb[2] untouched. With the edge's accumulator on,
    the held packets count bytes and packets only, the unmodelled ones nothing."""
    _edge(pin_dir, acks_separate=acks_separate)
    now = [E + 10 + i for i in range(len(EDGE_CASES))]
    got = _run_frames(pin_dir, [(t, CORE, frame) for t, (_, frame, _, _) in zip(now, EDGE_CASES)])
    want = []
    for t, (_name, _frame, sep, comb) in zip(now, EDGE_CASES):
        cls = sep if acks_separate else comb
        want.append((2, NOCFG, 0, 0) if cls is None else (0, HOLD, cls, t))
    assert {n: g for (n, *_), g in zip(EDGE_CASES, got)} == {n: w for (n, *_), w in zip(EDGE_CASES, want)}
    ports = maps.read_states(pin_dir, {NODE: 3})[NODE]["ports"]
    held = [frame for _, frame, sep, _ in EDGE_CASES if sep is not None]
    assert (ports[CORE]["held"], ports[CORE]["nocfg"]) == (len(held), 2)
    _only(_acc(pin_dir, 3), {(CORE, 0): AccSlot(0, bytes=sum(map(len, held)), packets=len(held), drops=0,
                                                qmin_ns=None)})


@pytest.mark.root
def test_xcp_edge_stores_and_forwards_towards_hosts_as_fifo(pin_dir):
    """Towards a host (whether its destination has a class or not): fifo's decisions and
    stamps, with max_wait given in paper ns and configured x D (D = 2), its reference
    model as oracle; cb[2] untouched. Five 1000 B frames at once on port 1 wait 0, tau,
    2 tau, 3 tau, 4 tau after their reception: max_wait = tau paper = 2 tau admits three."""
    tdf, prop, tau = 2, 4830, 1000
    _edge(pin_dir, acks_separate=True, max_wait_ns=tau, tdf=tdf, prop_ns=prop)
    frames = [bpf.udp_frame(1000, "10.0.5.1"), _tcp_frame("10.0.9.9", ACK, 1000 - 54)] * 2 + \
        [_tcp_frame("10.0.5.1", ACK, pad_to=1000)]
    assert {len(f) for f in frames} == {1000}
    got = _run_frames(pin_dir, [(E, HOST, f) for f in frames])
    ref = REGISTRY.assignment("fifo", {"max_wait_ns": tau}).reference(
        _ports(3, peer_host=(1, 2), prop_ns=prop), tdf=tdf)
    want = [ref.offer(E, 1000, HOST) for _ in frames]
    assert [w.kind for w in want] == [BUFFER] * 3 + [DROP] * 2
    assert got == [(0, BUFFER, 0, w.stamp(PortConfig(PS, prop, peer_host=True))) if w.kind == BUFFER
                   else (2, DROP, 0, 0) for w in want]
    # the stamp by hand: received whole at E + tau, k-th leaves at E + (k + 1) tau, tail at the host
    assert [g[3] for g in got[:3]] == [E + (k + 1) * tau + tau + prop for k in range(3)]


@pytest.mark.root
def test_the_class_map_is_per_node(pin_dir):
    """The class of (node 3, dst) is not another node's: node 3 with only node 4's entry
    drops the packet as unmodelled."""
    _edge(pin_dir, acks_separate=False)
    maps.set_xcp_classes(pin_dir, {(4, "10.0.7.1"): 8})
    got = _run_frames(pin_dir, [(E, CORE, bpf.udp_frame(100, "10.0.7.1")), (E, CORE, bpf.udp_frame(100, "10.0.5.1"))])
    assert got == [(2, NOCFG, 0, 0), (0, HOLD, 4, E)]
