"""``paced-reno`` with ``pacer = "tcp"``: TCP paces itself, the host's qdisc stays (root).

Two namespaces, the sender's and the receiver's, each with a TUN device; a delay line in
this process (a thread) carries every IP packet from one TUN to the other 10 ms later,
in both directions, so the path has an RTT of ~20 ms without netem (this host kernel has
neither netem nor fq). A bulk TCP flow (1.5 MB) runs from the sender to the receiver
once with profile ``reno`` and once with ``paced-reno`` (``pacer = "tcp"``), both with
``max_window = 20`` (E5's window limit), so the window is 20 segments per ~20 ms. A
packet tap on the sender's TUN timestamps each data segment when the device transmits it.

What the kernel shows, independent of the profile code:

* TCP's internal pacing is on for the paced flow only: its socket's SO_MAX_PACING_RATE
  is the finite cap the sock_ops program sets (sk_setsockopt sets sk_pacing_status =
  NEEDED with it), the plain flow's is ~0 (unlimited: no pacing); the program's
  ``pacing`` counter counts the sender's connection, with no setsockopt error.
  (tcpi_pacing_rate cannot tell them apart: the kernel computes a pacing rate for every
  socket.)
* The paced flow's data segments leave spread over the RTT: the median gap between
  consecutive data segments at the tap is at least half of srtt / cwnd (the kernel's
  pacing interval at ratio 100 %, from the sender's own TCP_INFO), and no two leave
  within 100 us of each other (one segment per skb), while the plain flow sends its
  window in bursts: median gap below a tenth of srtt / cwnd, bursts of >= 10 segments
  within 100 us.
* The sender's qdisc is the one it had before the profile (apply() changes no qdisc).

What it does not prove: the RTT comes from a userspace delay line, not a link model;
the hostnic qdisc of the optical fabric is not involved (a guest-only module).
"""

from __future__ import annotations

import fcntl
import heapq
import os
import secrets
import select
import socket
import statistics
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from helpers import packet_tap, require_features, require_root
from testbed import cmd, nsops, setns
from testbed.bpf import PIN_ROOT
from testbed.cc import profiles, sockops
from testbed.dilation import TimeDilation
from testbed.ledger import Ledger
from testbed.net import Node
from testbed.traffic import tcpinfo

ONE_WAY_DELAY_S = 0.010
WINDOW = 20
TRANSFER_BYTES = 1_500_000
PORT = 5201
SENDER_IP, RECEIVER_IP = "10.77.0.1", "10.77.0.2"
#: data segments the kernel never paces (tcp_update_skb_after_send) plus slow start
SKIP_SEGMENTS = 40
BURST_WINDOW_S = 100e-6
TUNSETIFF, IFF_TUN, IFF_NO_PI = 0x400454CA, 0x0001, 0x1000
SO_MAX_PACING_RATE, PACKET_OUTGOING = 47, 4
UNLIMITED = 2**64 - 1


def tun_open(netns: str, name: str) -> int:
    """A TUN device ``name`` (IP packets, no packet info) made inside ``netns``; its fd."""
    with setns.entered(netns):
        fd = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC)
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    os.set_blocking(fd, False)
    return fd


class DelayLine(threading.Thread):
    """Carries every packet read from one TUN fd to the other ``delay_s`` later (both
    directions), in arrival order; stop() ends it."""

    def __init__(self, fd_a: int, fd_b: int, delay_s: float) -> None:
        super().__init__(daemon=True)
        self.peer = {fd_a: fd_b, fd_b: fd_a}
        self.delay_s = delay_s
        self._done = threading.Event()
        self.max_late_s = 0.0

    def run(self) -> None:
        due: list[tuple[float, int, int, bytes]] = []
        n = 0
        while not self._done.is_set():
            timeout = max(0.0, due[0][0] - time.monotonic()) if due else 0.05
            readable, _, _ = select.select(list(self.peer), [], [], min(timeout, 0.05))
            now = time.monotonic()
            for fd in readable:
                while True:
                    try:
                        pkt = os.read(fd, 65535)
                    except BlockingIOError:
                        break
                    heapq.heappush(due, (now + self.delay_s, n, self.peer[fd], pkt))
                    n += 1
            now = time.monotonic()
            while due and due[0][0] <= now:
                t, _, out, pkt = heapq.heappop(due)
                self.max_late_s = max(self.max_late_s, now - t)
                try:
                    os.write(out, pkt)
                except OSError:
                    pass  # device going away at the end

    def stop(self) -> None:
        self._done.set()
        self.join(5)


@dataclass
class Flow:
    """What one bulk transfer showed."""

    profile: str
    settings: dict[str, Any]
    info: dict[str, int]
    max_pacing_rate: int
    departures_s: list[float]
    stats: dict[str, int] = field(default_factory=dict)
    qdisc_before: str = ""
    qdisc_after: str = ""
    delay_line_max_late_s: float = 0.0

    @property
    def interval_s(self) -> float:
        """The kernel's pacing interval at ratio 100 %: srtt / cwnd (sender's TCP_INFO)."""
        return self.info["rtt_us"] / 1e6 / self.info["snd_cwnd"]

    @property
    def gaps_s(self) -> list[float]:
        d = self.departures_s[SKIP_SEGMENTS:]
        return [b - a for a, b in zip(d, d[1:])]

    def largest_burst(self, window_s: float) -> int:
        """Most data segments leaving within ``window_s`` of each other (after SKIP_SEGMENTS)."""
        d, best, lo = self.departures_s[SKIP_SEGMENTS:], 0, 0
        for hi, t in enumerate(d):
            while t - d[lo] > window_s:
                lo += 1
            best = max(best, hi - lo + 1)
        return best


def data_departures(tap: socket.socket) -> list[float]:
    """Kernel transmit times (s) of the sender's TCP segments carrying data, in order."""
    out = []
    tap.setblocking(False)
    while True:
        try:
            frame, anc, _flags, addr = tap.recvmsg(128, 1024)
        except BlockingIOError:
            return out
        if addr[2] != PACKET_OUTGOING or len(frame) < 40 or frame[0] >> 4 != 4 or frame[9] != 6:
            continue
        ihl, total = (frame[0] & 0x0F) * 4, struct.unpack_from("!H", frame, 2)[0]
        doff = (frame[ihl + 12] >> 4) * 4
        if total - ihl - doff <= 0 or socket.inet_ntoa(frame[12:16]) != SENDER_IP:
            continue
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == 35:  # SO_TIMESTAMPNS
                sec, nsec = struct.unpack("=qq", data[:16])
                out.append(sec + nsec / 1e9)


def root_qdisc(netns: str, dev: str) -> str:
    return cmd.run(["tc", "qdisc", "show", "dev", dev, "root"], netns=netns).stdout.strip()


def bulk_flow(profile_name: str, options: dict[str, Any]) -> Flow:
    """One transfer of TRANSFER_BYTES over a fresh pair of namespaces with the delay line;
    the sender carries ``profile_name`` with ``options``. Everything is torn down."""
    ledger = Ledger.create(f"test-pacing-{os.getpid()}-{time.monotonic_ns()}")
    emu = SimpleNamespace(ledger=ledger, token="tp" + secrets.token_hex(2))
    sender, receiver = Node(emu, "snd"), Node(emu, "rcv")
    fds: list[int] = []
    line = tap = profile = None
    try:
        for node, ip, peer in ((sender, SENDER_IP, RECEIVER_IP), (receiver, RECEIVER_IP, SENDER_IP)):
            ledger.add("netns", name=node.netns)
            cmd.run(["ip", "netns", "add", node.netns])
            nsops.sysctl_write(node.netns, "net.ipv6.conf.all.disable_ipv6", 1)
            nsops.sysctl_write(node.netns, "net.ipv6.conf.default.disable_ipv6", 1)
            dev = f"tun{node.name}"
            fds.append(tun_open(node.netns, dev))
            node.intfs.append(dev)
            cmd.run(["ip", "addr", "add", ip, "peer", peer, "dev", dev], netns=node.netns)
            cmd.run(["ip", "link", "set", dev, "up"], netns=node.netns)
        line = DelayLine(fds[0], fds[1], ONE_WAY_DELAY_S)
        line.start()
        before = root_qdisc(sender.netns, sender.intfs[0])
        profile = profiles.make(profile_name, options)
        settings = profile.apply(sender, TimeDilation(1))
        after = root_qdisc(sender.netns, sender.intfs[0])
        tap = packet_tap(sender.netns, sender.intfs[0])
        with setns.entered(receiver.netns):
            listener = socket.create_server((RECEIVER_IP, PORT))
        received = []
        reader = threading.Thread(target=lambda: received.append(drain(listener)), daemon=True)
        reader.start()
        with setns.entered(sender.netns):
            s = socket.create_connection((RECEIVER_IP, PORT), timeout=30)
        with s:
            s.sendall(b"\0" * TRANSFER_BYTES)
            deadline = time.monotonic() + 30
            while tcpinfo.read(s).get("unacked", 1) and time.monotonic() < deadline:
                time.sleep(0.005)
            info = tcpinfo.read(s)
            max_rate = struct.unpack("=Q", s.getsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, 8))[0]
        reader.join(30)
        listener.close()
        assert received == [TRANSFER_BYTES], f"receiver got {received} of {TRANSFER_BYTES} B"
        stats = sockops.stats(Path(settings["pacing"]["pin_dir"] if "pin_dir" in settings.get("pacing", {})
                                   else settings["max_window"]["pin_dir"]))
        return Flow(profile_name, settings, info, max_rate, data_departures(tap), stats, before, after,
                    line.max_late_s)
    finally:
        errors = []
        for step in (tap.close if tap is not None else None, line.stop if line is not None else None,
                     *(lambda fd=fd: os.close(fd) for fd in fds),
                     profile.undo if profile is not None and profile._applied_to is not None else None):
            try:
                if step is not None:
                    step()
            except Exception as exc:  # undo the rest all the same
                errors.append(repr(exc))
        errors += ledger.teardown()
        if (PIN_ROOT / f"{emu.token}-cc").exists():   # recorded by sockops.attach: the run removes it
            errors.append(f"{PIN_ROOT / (emu.token + '-cc')} outlived the run's teardown")
        assert not errors, errors


def drain(listener: socket.socket) -> int:
    """Bytes read from the first connection accepted on ``listener`` until EOF."""
    conn, _ = listener.accept()
    total = 0
    with conn:
        while chunk := conn.recv(1 << 16):
            total += len(chunk)
    return total


@pytest.fixture(scope="module")
def flows() -> dict[str, Flow]:
    require_root()
    require_features("netns")
    try:
        sockops.cgroup2_root()
    except sockops.SockopsError as exc:
        pytest.skip(str(exc))
    if not sockops.LOADER.exists():
        pytest.skip(f"{sockops.LOADER} is not built (make -C ebpf)")
    return {"reno": bulk_flow("reno", {"max_window": WINDOW}),
            "paced": bulk_flow("paced-reno", {"max_window": WINDOW, "pacer": "tcp"})}


def test_only_the_paced_flow_has_tcps_internal_pacing_on(flows):
    paced, reno = flows["paced"], flows["reno"]
    assert paced.max_pacing_rate == sockops.MAX_PACING_RATE_BYTES_PER_S == 0xFFFFFFFE
    assert reno.max_pacing_rate == UNLIMITED
    assert paced.stats["pacing"] == 1 and paced.stats["setsockopt_errors"] == 0, paced.stats
    assert reno.stats["pacing"] == 0 and reno.stats["sndcwnd_clamp"] == 1, reno.stats
    assert paced.settings["pacer"] == "tcp" and paced.settings["pacing"]["pin_dir"]
    # the kernel's own rate, far below the cap: ratio 100 % x cwnd x mss / srtt (+-25 %)
    expected = paced.info["snd_cwnd"] * paced.info["snd_mss"] / (paced.info["rtt_us"] / 1e6)
    assert 0.75 * expected <= paced.info["pacing_rate"] <= 1.25 * expected, (paced.info, expected)


def test_paced_flow_spreads_its_window_and_plain_reno_bursts(flows):
    paced, reno = flows["paced"], flows["reno"]
    for f in (paced, reno):
        assert f.info["snd_cwnd"] == WINDOW, f.info            # the window limit held
        assert f.info["total_retrans"] == 0, f.info
        assert 0.018 <= f.info["rtt_us"] / 1e6 <= 0.060, f.info   # the delay line's ~20 ms RTT
        assert len(f.departures_s) >= TRANSFER_BYTES // f.info["snd_mss"], len(f.departures_s)
    assert statistics.median(paced.gaps_s) >= 0.5 * paced.interval_s, (
        statistics.median(paced.gaps_s), paced.interval_s)
    assert paced.largest_burst(BURST_WINDOW_S) == 1, paced.largest_burst(BURST_WINDOW_S)
    assert statistics.median(reno.gaps_s) <= 0.1 * reno.interval_s, (statistics.median(reno.gaps_s), reno.interval_s)
    assert reno.largest_burst(BURST_WINDOW_S) >= WINDOW // 2, reno.largest_burst(BURST_WINDOW_S)


def test_tcp_pacer_leaves_the_hosts_qdisc_alone(flows):
    paced = flows["paced"]
    assert paced.qdisc_before and paced.qdisc_after == paced.qdisc_before
    assert "fq" not in paced.settings.get("qdiscs", {}).values()
    assert paced.settings["sysctls"]["net.ipv4.tcp_min_tso_segs"] == "1"
