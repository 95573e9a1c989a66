"""The cwnd tracer (ebpf/cwndtrace, CO-RE) on the guest's kernel, against the kernel's
own view of the same sockets.

h1 -- h2 over one veth pair (no shaping). Two tracers run at once on h1's namespace and
one TCP port: one with every event and timer armings (``arm``), one in "changes only"
mode. h1 sends 4 MB to h2, then connects to an address nobody answers (a static
neighbour entry, so the SYN leaves and is never answered). Checked on what the tracers
saw, with the oracle taken outside the tracer:

* the stream starts (READY) and ends cleanly (END), nothing lost;
* every event carries h1's namespace (its inode, read in h1 from /proc/self/ns/net);
  ACK events of the data socket carry its addresses and ports, the MSS the socket
  reports (TCP_INFO's snd_mss), the established state, cwnd >= the initial window of
  10, srtt > 0; snd_una advances by at most the bytes sent (28-byte header included),
  at least half of them;
* the data socket's last ACK event has a cwnd of the size order TCP_INFO showed once
  everything was acknowledged (a few ACKs may come between);
* timer armings of the data socket carry the RTO the kernel armed (>= 200 ms, its
  minimum, in jiffies over HZ);
* the unanswered SYN's first RTO fires ~1 s after the connect (the kernel's initial
  RTO), in state syn_sent, and the next ~2 s later (doubling);
* "changes only" keeps exactly the full tracer's ACK events whose (cwnd, ssthresh,
  state, reordering) differ from the socket's previous one.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time

import pytest

from helpers import require_features, require_root
from testbed.cc.trace import CwndTracer
from testbed.families.netem_path import wait_listening
from testbed.ledger import Ledger
from testbed.net import Emulation
from topologies.path import TwoHostPath

PORT = 7411
SIZE = 4 << 20
UNANSWERED = "10.0.0.99"
SINK = ("import socket,sys\nl=socket.socket();l.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
        "l.bind(('',int(sys.argv[1])));l.listen()\nc,_=l.accept();n=0\n"
        "while True:\n b=c.recv(65536)\n if not b: break\n n+=len(b)\nprint(n,flush=True)")
# h1: send SIZE bytes after a 28-byte header, wait until all are acknowledged, print the
# socket's snd_mss and snd_cwnd (TCP_INFO) and the connect time; then the unanswered SYN
SENDER = r"""
import socket, sys, time
from testbed.traffic import tcpinfo
host, port, size, lost = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
s = socket.create_connection((host, port))
s.sendall(b"h" * 28 + b"x" * size)
end = time.monotonic() + 120
while time.monotonic() < end:
    info = tcpinfo.read(s)
    if info["unacked"] == 0:
        break
    time.sleep(0.01)
print(info["snd_mss"], info["snd_cwnd"], s.getsockname()[1], flush=True)
s.close()
u = socket.socket(); u.setblocking(False)
print(time.monotonic_ns(), flush=True)
u.connect_ex((lost, port))
time.sleep(3.5)
"""


def setup_module() -> None:
    require_root()
    require_features("netns", "btf", "tracepoints", "kprobes")


@pytest.fixture
def ledger():
    led = Ledger.create(f"test-cwndtrace-{os.getpid()}-{time.monotonic_ns()}")
    yield led
    assert not led.teardown(), "teardown left objects"


def test_the_tracer_sees_what_the_kernel_reports(ledger):
    with Emulation(TwoHostPath(switch="none"), ledger, "ct" + secrets.token_hex(2)) as emu:
        h1, h2 = emu["h1"], emu["h2"]
        h1.run(["ip", "neigh", "replace", UNANSWERED, "lladdr", "02:00:00:00:00:99", "dev", h1.intfs[0]])
        sink = h2.popen([sys.executable, "-c", SINK, str(PORT)], stdout=subprocess.PIPE)
        wait_listening(h2, PORT, timeout_s=30)
        full = CwndTracer(netns=h1.netns, port=PORT, arm=True)
        changes = CwndTracer(netns=h1.netns, port=PORT, changes_only=True)
        with full, changes:
            out = h1.run([sys.executable, "-c", SENDER, h2.ip, str(PORT), str(SIZE), UNANSWERED],
                         timeout=180).stdout.split()
        snd_mss, cwnd_end, sport, t_connect = int(out[0]), int(out[1]), int(out[2]), int(out[3]) / 1e9
        sink_out = sink.communicate(timeout=60)[0].split()
        ino = netns_inode_of(h1)
    assert int(sink_out[0]) == SIZE + 28
    for t in (full, changes):
        assert t.complete and t.lost == 0, (t.complete, t.lost)
    assert {s.netns for s in full.samples + changes.samples} == {ino}
    data = [s for s in full.samples if s.sport == sport and s.dport == PORT]
    acks = [s for s in data if s.event == "ack"]
    assert acks, "no ACK event of the data socket"
    assert {(s.src, s.dst, s.mss, s.tcp_state) for s in acks} == {(h1.ip, h2.ip, snd_mss, "established")}
    assert min(s.cwnd for s in acks) >= 10 and all(s.srtt_s > 0 for s in acks[1:])
    acked = (acks[-1].snd_una - acks[0].snd_una) % 2**32     # sequence numbers wrap
    assert SIZE // 2 <= acked <= SIZE + 28, acked
    assert cwnd_end // 4 <= acks[-1].cwnd <= cwnd_end * 4, (acks[-1].cwnd, cwnd_end)
    arms = [s for s in data if s.event == "arm"]
    assert arms and min(s.rto_s for s in arms) >= 0.2, [s.rto_s for s in arms][:5]
    syn = sorted((s for s in full.samples if s.dst == UNANSWERED and s.event == "rto"), key=lambda s: s.t_s)
    assert len(syn) >= 2 and {s.tcp_state for s in syn} == {"syn_sent"}
    assert 0.9 <= syn[0].t_s - t_connect <= 1.5, syn[0].t_s - t_connect
    assert 1.8 <= syn[1].t_s - syn[0].t_s <= 2.5, syn[1].t_s - syn[0].t_s
    assert syn[0].rto_s == pytest.approx(1.0, abs=0.01)
    # "changes only" in the kernel = the full tracer's ACK events of the socket, each kept
    # when it differs from the one before (both tracers see the same events)
    def key(x):
        return x.cwnd, x.ssthresh, x.ca_state, x.reordering
    kept = [key(s) for s in changes.samples if s.sport == sport and s.event == "ack"]
    expected = [key(s) for i, s in enumerate(acks) if i == 0 or key(s) != key(acks[i - 1])]
    assert kept == expected


def netns_inode_of(host) -> int:
    """The inode of ``host``'s namespace, from the kernel's side (its /proc/self/ns/net)."""
    return int(host.run(["stat", "-L", "-c", "%i", "/proc/self/ns/net"]).stdout)
