"""E2's fabric in the full-kernel guest: a small OBS chain built by testbed.net.Emulation
with optical switches (obs-edge, obs-core, electronic egress edge).

    s1, s2 --(100 Mb/s, 0 m)--> edge [obs-edge] --(0 m)--> core [obs-core]
        --(10 m)--> egr [electronic] --(optical rate, 0 m)--> k1, k2

Time dilation D = 100: the sources' frames (578 B: a 512 B MSS segment's size) last
4.6 ms on their access links, 0.46 ms at the optical rate (1 Gb/s paper); Tmax 1 ms
and offset 0.5 ms (paper) are 100 ms and 50 ms; Lmax = 4000 frame bytes holds 7 such
frames. Checked:

* with obs-core's pl_ppb = 0: UDP datagrams and a TCP transfer from the sources cross;
  the edge's obsburst qdisc (on its port towards the core only) counts bursts; a
  capture of the edge-core link (testbed.capture, tcpdump) shows a control packet
  before every burst, announcing exactly the data frames that follow it; the packets
  going back towards the sources (reverse UDP, TCP's ACKs) never enter the assembler
  (its packet count is the forward frames of the capture) and leave through the edge's
  FIFO ports towards the hosts;
* after ``reconfigure`` to pl_ppb = 1e9 (every burst lost) the assembler's counters
  start again, no forward datagram arrives, the reverse ones still do;
* teardown leaves nothing (the ledger), the module loaded by the emulation goes with
  it, also when the ledger alone tears down (a killed run's `testbed clean`).
"""

from __future__ import annotations

import os
import secrets
import socket
import struct
import threading
import time
from contextlib import contextmanager

import pytest
from mininet.topo import Topo

from helpers import require_features, require_root
from testbed import hostclock, nsops, setns
from testbed.capture import Capture
from testbed.cc.modules import KERNEL_DIR
from testbed.ledger import Ledger
from testbed.net import Emulation
from testbed.optical import obsburst
from testbed.optical.architectures import parse

D = 100.0
ACCESS_BPS, OPTICAL_BPS = 100e6, 1e9
TMAX_NS, LMAX_BYTES, OFFSET_NS = 1_000_000, 4000, 500_000       # paper units
EDGE = f"obs-edge:{TMAX_NS},{LMAX_BYTES},{OFFSET_NS}"
PAYLOAD = 578 - 14 - 20 - 8                                       # 578 B frames
PORT, REVERSE_PORT = 40_111, 40_112
N_FORWARD, N_REVERSE, TCP_BYTES = 12, 5, 30_000
#: a burst is gone from the edge within Tmax + offset + its serialisation (emulation s)
SETTLE_S = (TMAX_NS + OFFSET_NS) * D / 1e9 + 2.0


class ObsChain(Topo):
    def build(self, n_sources: int = 2, core: str = "obs-core:0,1") -> None:
        common = {"cls": "optical", "rate_bps": OPTICAL_BPS, "tdf": D}
        edge = self.addSwitch("edge", role="edge", arch=EDGE, **common)
        corenode = self.addSwitch("core", role="core", arch=core, **common)
        egr = self.addSwitch("egr", role="edge", arch="electronic", **common)
        for i in range(1, n_sources + 1):
            self.addLink(self.addHost(f"s{i}"), edge, rate_bps=ACCESS_BPS, length_m=0.0)
        self.addLink(edge, corenode, length_m=0.0)
        self.addLink(corenode, egr, length_m=10.0)
        for i in range(1, n_sources + 1):
            self.addLink(egr, self.addHost(f"k{i}"), length_m=0.0)


@contextmanager
def _emulation(topo, ledger: Ledger):
    token = "ob" + secrets.token_hex(2)
    with Emulation(topo, ledger, token) as emu:
        yield emu


@pytest.fixture(scope="class")
def chain():
    require_root()
    require_features("netns", "fq", "clsact-bpf", "btf", "modules")
    if not (KERNEL_DIR / "sch_obsburst.ko").exists():
        pytest.fail("kernel/sch_obsburst.ko is not built: make -C kernel")
    was_loaded = obsburst.loaded()
    ledger = Ledger.create(f"pytest-obsfabric-{os.getpid()}-{secrets.token_hex(3)}")
    try:
        with _emulation(ObsChain(), ledger) as emu:
            yield emu
        # the emulation is gone: its namespaces, and the module it loaded
        assert not any(nsops.netns_exists(n.netns) for n in emu.nodes.values())
        if not was_loaded:
            assert not obsburst.loaded(), "the emulation's teardown left sch_obsburst loaded"
    finally:
        assert not ledger.teardown(), "teardown left objects"


def _udp(netns: str, port: int | None = None) -> socket.socket:
    with setns.entered(netns):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        if port is not None:
            s.bind(("0.0.0.0", port))
    return s


def _receive(s: socket.socket, want: int, timeout_s: float) -> int:
    got, deadline = 0, hostclock.Deadline(timeout_s)
    s.settimeout(0.2)
    while got < want and not deadline.expired():
        try:
            s.recv(65536)
            got += 1
        except TimeoutError:
            pass
    return got


def _send(emu, src: str, dst: str, port: int, n: int) -> None:
    s = _udp(emu[src].netns)
    try:
        for i in range(n):
            s.sendto(struct.pack("!I", i) + bytes(PAYLOAD - 4), (emu[dst].ip, port))
    finally:
        s.close()


def _tcp_transfer(emu, src: str, dst: str, nbytes: int, timeout_s: float) -> int:
    """Bytes the sink received of an ``nbytes`` TCP transfer from ``src`` to ``dst``."""
    with setns.entered(emu[dst].netns):
        lsn = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        lsn.bind(("0.0.0.0", 5001))
        lsn.listen(1)
    received = [0]

    def serve() -> None:
        conn, _ = lsn.accept()
        with conn:
            while chunk := conn.recv(65536):
                received[0] += len(chunk)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    with setns.entered(emu[src].netns):
        c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        c.settimeout(timeout_s)
        c.connect((emu[dst].ip, 5001))
        c.sendall(bytes(nbytes))
        c.shutdown(socket.SHUT_WR)
        t.join(timeout_s)
    finally:
        c.close()
        lsn.close()
    return received[0]


def _pcap_frames(path) -> list[tuple[bytes, int]]:
    """(captured bytes, frame length on the wire) of every frame of a pcap."""
    data = path.read_bytes()
    magic = struct.unpack_from("=I", data)[0]
    assert magic in (0xA1B2C3D4, 0xA1B23C4D), hex(magic)
    off, out = 24, []
    while off + 16 <= len(data):
        _s, _f, incl, orig = struct.unpack_from("=IIII", data, off)
        out.append((data[off + 16:off + 16 + incl], orig))
        off += 16 + incl
    return out


def _ipv4_src(frame: bytes) -> str | None:
    if len(frame) < 34 or frame[12:14] != b"\x08\x00":
        return None
    return socket.inet_ntoa(frame[26:30])


def _state(emu) -> obsburst.QdiscState:
    states = emu.optical.holding_state()
    assert list(states) == [("edge", emu.optical.nodes["edge"].devs[emu.optical.nodes["edge"].peers.index("core")])]
    return next(iter(states.values()))


def _row(emu, node: str, peer: str) -> dict:
    port = emu.optical.nodes[node].peers.index(peer)
    return next(r for r in emu.optical.counters() if r["node"] == node and r["port"] == port)


class TestChain:
    """One emulation for both (``chain``, class scope): built once, reconfigured between them."""

    def test_bursts_cross_with_control_packets_and_acks_are_not_assembled(self, chain, tmp_path):
        emu = chain
        fab = emu.optical
        edge = fab.nodes["edge"]
        # the plan: obsburst towards the core only; the core's port from the edge carries held packets
        assert edge.holds == tuple(p == "core" for p in edge.peers)
        assert [p.peer_holds for p in fab.nodes["core"].ports] == [peer == "edge" for peer in fab.nodes["core"].peers]
        cfg = _state(emu).config
        assert cfg.classes[0].tmax_ns == TMAX_NS * D and cfg.classes[0].rate_bps == OPTICAL_BPS / D

        cap = Capture(emu, "edge-core", tmp_path / "edge-core.pcap")
        sinks = {k: _udp(emu[k].netns, PORT) for k in ("k1", "k2")}
        back = _udp(emu["s1"].netns, REVERSE_PORT)
        try:
            _send(emu, "s1", "k1", PORT, N_FORWARD)
            _send(emu, "s2", "k2", PORT, N_FORWARD)
            _send(emu, "k1", "s1", REVERSE_PORT, N_REVERSE)
            got = {k: _receive(s, N_FORWARD, timeout_s=60) for k, s in sinks.items()}
            assert got == {"k1": N_FORWARD, "k2": N_FORWARD}
            assert _receive(back, N_REVERSE, timeout_s=30) == N_REVERSE
            assert _tcp_transfer(emu, "s1", "k1", TCP_BYTES, timeout_s=120) == TCP_BYTES
            time.sleep(SETTLE_S)
        finally:
            for s in (*sinks.values(), back):
                s.close()
            cap.stop()
        st = _state(emu)
        frames = _pcap_frames(tmp_path / "edge-core.pcap")
        sources = {emu[s].ip for s in ("s1", "s2")}
        # what left the edge towards the core, in order: control packets and the sources' frames
        out = [f for f, _n in frames if obsburst.parse_control(f) is not None or _ipv4_src(f) in sources]
        wire = {id(f): n for f, n in frames}
        ctrls = [c for f in out if (c := obsburst.parse_control(f)) is not None]
        forward = len(out) - len(ctrls)
        c0 = st.classes[0]
        print(f"\nOBS_FABRIC bursts={c0.bursts} time={c0.closed_time} volume={c0.closed_volume} packets={c0.packets} "
              f"ctrl={st.ctrl_packets} forward_frames={forward} monitor={fab.monitor()}")
        assert c0.bursts == st.ctrl_packets == len(ctrls) >= 4 and st.ctrl_failed == 0 and st.drops == 0
        assert c0.closed_volume >= 2 and c0.closed_time >= 1
        # the assembler saw exactly the forward frames: nothing of the reverse direction
        assert c0.packets == forward >= 2 * N_FORWARD + TCP_BYTES // 1448
        assert sorted(c.burst_id for c in ctrls) == list(range(1, len(ctrls) + 1))
        # every control packet precedes its burst: bursts leave one after the other (one class,
        # one channel), so burst k is the next ``packets`` data frames after burst k-1's; its
        # control packet left at the close, the burst an offset later (other control packets
        # may come in between)
        data = [k for k, f in enumerate(out) if obsburst.parse_control(f) is None]
        start = 0
        for k, f in enumerate(out):
            if (c := obsburst.parse_control(f)) is None:
                continue
            mine = data[start:start + c.packets]
            start += c.packets
            assert len(mine) == c.packets, f"burst {c.burst_id}: announced {c.packets}, {len(mine)} frames left"
            assert k < mine[0], f"burst {c.burst_id}: its control packet after its first frame"
            assert c.bytes == sum(wire[id(out[m])] for m in mine), c
        assert start == forward
        if __import__("shutil").which("tshark"):
            assert obsburst.tshark_controls(tmp_path / "edge-core.pcap") == ctrls
        # the way back leaves the edge through its FIFO (store-and-forward) ports to the hosts
        assert _row(emu, "edge", "s1")["buffered"] >= N_REVERSE and _row(emu, "edge", "s2")["buffered"] == 0


    def test_every_burst_lost_after_reconfigure_and_the_way_back_still_works(self, chain):
        emu = chain
        fab = emu.optical
        fab.reconfigure({"core": parse("obs-core:1000000000,7")})
        assert _state(emu).classes[0].bursts == 0          # installed anew: the counters start again
        sink, back = _udp(emu["k1"].netns, PORT), _udp(emu["s1"].netns, REVERSE_PORT)
        try:
            _send(emu, "s1", "k1", PORT, N_FORWARD)
            _send(emu, "k1", "s1", REVERSE_PORT, N_REVERSE)
            assert _receive(back, N_REVERSE, timeout_s=30) == N_REVERSE
            time.sleep(SETTLE_S)
            assert _receive(sink, 1, timeout_s=1.0) == 0, "a datagram of a lost burst arrived"
        finally:
            sink.close()
            back.close()
        st = _state(emu)
        assert st.classes[0].packets == N_FORWARD and st.classes[0].bursts >= 2
        lost = _row(emu, "core", "egr")["dropped"]
        assert lost == N_FORWARD, lost
        try:
            from testbed.optical import obscore
        except ImportError:
            return
        core = obscore.read_core(fab.pin_dir, [fab.nodes["core"].node_id])[fab.nodes["core"].node_id]
        assert core["announced"] == core["bursts_lost"] == st.classes[0].bursts and core["packets_lost"] == N_FORWARD


def test_a_ledger_teardown_alone_removes_everything(tmp_path):
    """As `testbed clean` after a killed run: no Emulation.teardown (which takes the
    obsburst qdiscs off first), only the ledger; the module it loaded must still go."""
    require_root()
    require_features("netns", "fq", "clsact-bpf", "btf", "modules")
    if obsburst.loaded():
        pytest.skip("sch_obsburst is loaded by someone else: cannot tell whether the ledger removes it")
    ledger = Ledger.create(f"pytest-obsfabric-kill-{os.getpid()}-{secrets.token_hex(3)}")
    emu = Emulation(ObsChain(n_sources=1), ledger, "ok" + secrets.token_hex(2))
    try:
        emu.build()
        assert obsburst.loaded()
        modules = [e.seq for e in ledger.live() if e.resource == "module"]
        namespaces = [e.seq for e in ledger.live() if e.resource == "netns"]
        assert modules and max(modules) < min(namespaces), "the module must be recorded before the namespaces"
    finally:
        errors = ledger.teardown()
    assert not errors, errors
    assert not any(nsops.netns_exists(n.netns) for n in emu.nodes.values())
    deadline = hostclock.Deadline(10)
    while obsburst.loaded() and not deadline.expired():
        time.sleep(0.2)
    assert not obsburst.loaded(), "sch_obsburst is still loaded after the ledger's teardown"
