"""Loss detection counted from the kernel's counters (testbed.cc.lossdetect), in the guest.

Two hosts over one shaped link (D = 20), profile ``sack`` with E2's MSS (``mss = 512``,
so every full data segment is a 564 B IP datagram) on both hosts and a long RTO (min
and initial RTO 500 ms paper = 10 s emulated), so that a fast retransmit can never be
overtaken by the timer and the harness has time to lift a drop rule before it fires.

The drops are made by a tc filter on the receiver's ingress (clsact) that matches only
full data segments of the test connection (IPv4 total length 564, TCP destination port).
Not on the sender's egress: TCP always builds GSO packets (several segments in one skb,
cut by the device's software GSO *after* the qdisc layer), so a filter there sees
super-packets; the receiver's veth gets one segment per skb (offloads off).

* one segment: ``gact ok random determ drop 6`` drops the 6th matching packet (and
  every 6th after: the test sends 9 and the retransmission is the 10th), so segments
  7-9 make three duplicate ACKs -> one loss detected by fast retransmit;
* a whole window: ``gact drop`` while the sender sends 8 segments with all earlier data
  acknowledged, lifted before the RTO -> no ACK at all, one loss detected by RTO.

The oracle is what was done on the wire (the filter's own drop counter from ``tc -s``)
and the socket's own TCP_INFO, never lossdetect's classification itself. The raw
/proc texts before and after each case are written to results/lossdetect-guest.json
(the unit tests' recorded fixtures come from such a run).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import time

import pytest

from helpers import REPO, require_features, require_root
from testbed import hostclock, process
from testbed.cc import lossdetect, modules
from testbed.cc.selection import CcaSelection, Choice, applied
from testbed.dilation import TimeDilation
from testbed.families.netem_path import wait_listening
from testbed.ledger import Ledger
from testbed.net import Emulation, LinkShape
from topologies.path import TwoHostPath

D = TimeDilation(20)
MSS = 512
FULL_SEGMENT_IP_BYTES = MSS + 40 + 12          # IPv4 + TCP headers + timestamp option
PROFILE = Choice("sack", {"mss": MSS, "init_rto": "500 ms", "rto_min": "500 ms"})
RESULTS = REPO / "results" / "lossdetect-guest.json"
MEASURED: dict[str, dict] = {}

# Sender: connect, send WARMUP full segments and wait until all are ACKed, print "ready",
# wait for "go" on stdin, send SEND more full segments, print "sent" once TCP put them on
# the wire (TCP_INFO data_segs_out), then wait (<= 120 s) until all are ACKed and print
# the socket's TCP_INFO as JSON.
SENDER = r"""
import json, socket, sys, time
from testbed.traffic import tcpinfo
host, port, mss, warmup, send = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
s = socket.create_connection((host, port))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
def settle(limit):
    end = time.monotonic() + limit
    while time.monotonic() < end:
        i = tcpinfo.read(s)
        if i["unacked"] == 0:
            return i
        time.sleep(0.005)
    raise SystemExit("data not acknowledged in time: " + json.dumps(tcpinfo.read(s)))
s.sendall(b"w" * (mss * warmup))
before = settle(60)
print("ready", flush=True)
sys.stdin.readline()
s.sendall(b"x" * (mss * send))
end = time.monotonic() + 30
while tcpinfo.read(s)["data_segs_out"] < before["data_segs_out"] + send and time.monotonic() < end:
    time.sleep(0.001)
print("sent", flush=True)
after = settle(120)
print(json.dumps({"before": before, "after": after}), flush=True)
s.close()
"""
SINK = ("import socket,sys\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
        "s.bind(('0.0.0.0',int(sys.argv[1])));s.listen(1);c,_=s.accept();n=0\n"
        "while True:\n b=c.recv(65536)\n if not b: break\n n+=len(b)\nprint(n,flush=True)")


def setup_module() -> None:
    require_root()
    require_features("netns", "htb", "netem", "modules")
    if not (modules.KERNEL_DIR / "tcp_sack.ko").exists():
        pytest.fail("kernel/tcp_sack.ko is not built: make -C kernel")


def teardown_module() -> None:
    if MEASURED:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(MEASURED, indent=1))


@pytest.fixture
def ledger():
    led = Ledger.create(f"test-lossdetect-{os.getpid()}-{time.monotonic_ns()}")
    yield led
    assert not led.teardown(), "teardown left objects"


def drop_filter(host, port: int, action: list[str]) -> list[str]:
    """``tc filter add`` arguments for full data segments to ``port`` arriving at
    ``host`` (its ingress), with ``action``."""
    return ["dev", host.intfs[0], "ingress", "protocol", "ip", "pref", "1", "u32",
            "match", "u16", str(FULL_SEGMENT_IP_BYTES), "0xffff", "at", "2",
            "match", "ip", "protocol", "6", "0xff", "match", "ip", "dport", str(port), "0xffff",
            *action]


def dropped(host) -> int:
    """Packets the ingress filter's action dropped (``tc -s filter show``)."""
    out = host.run(["tc", "-s", "filter", "show", "dev", host.intfs[0], "ingress"]).stdout
    found = re.findall(r"Sent \d+ bytes \d+ pkt \(dropped (\d+)", out)
    assert found, out
    return sum(int(x) for x in found)


def proc_texts(netns: str) -> dict[str, str]:
    from testbed import nsops

    return nsops.call_in(netns, lambda: {p.name: p.read_text() for p in (lossdetect.NETSTAT, lossdetect.SNMP)})


def run_case(ledger: Ledger, name: str, action: list[str], warmup: int, send: int, drops: int) -> dict:
    """One connection h1 -> h2 through the drop rule, lifted once it dropped ``drops``
    packets (or after 20 s); returns the measured record."""
    port = 7300
    shape = LinkShape(rate_bps=D.rate_to_emulation(100e6), delay_s=D.time_to_emulation(0.5e-3))
    with Emulation(TwoHostPath(shape=shape, switch="none"), ledger, "ld" + secrets.token_hex(2)) as emu:
        h1, h2 = emu["h1"], emu["h2"]
        with applied(emu, CcaSelection(PROFILE), D, 100e6) as eff:
            h2.run(["tc", "qdisc", "add", "dev", h2.intfs[0], "clsact"])
            sink = h2.popen([sys.executable, "-c", SINK, str(port)], stdout=subprocess.PIPE)
            wait_listening(h2, port, timeout_s=30)
            text_before = proc_texts(h1.netns)
            before = lossdetect.read(h1.netns)
            sender = process.spawn(ledger, [sys.executable, "-c", SENDER, h2.ip, str(port), str(MSS),
                                            str(warmup), str(send)], netns=h1.netns, cwd=REPO,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None)
            assert sender.stdout.readline().strip() == b"ready"
            h2.run(["tc", "filter", "add", *drop_filter(h2, port, action)])
            sender.stdin.write(b"go\n")
            sender.stdin.flush()
            assert sender.stdout.readline().strip() == b"sent"
            deadline = hostclock.Deadline(20)
            while (n_dropped := dropped(h2)) < drops and not deadline.expired():
                time.sleep(0.1)
            h2.run(["tc", "filter", "del", "dev", h2.intfs[0], "ingress", "pref", "1"])
            out, _ = hostclock.communicate(sender, timeout_s=240)
            assert sender.returncode == 0, out
            info = json.loads(out.decode().strip().splitlines()[-1])
            after = lossdetect.read(h1.netns)
            text_after = proc_texts(h1.netns)
            got = int(hostclock.communicate(sink, timeout_s=60)[0].split()[0])
    det = lossdetect.classify(lossdetect.delta(before, after))
    rec = {"dropped_by_filter": n_dropped, "bytes_received": got, "tcp_info_after": info["after"],
           "tcp_info_before": info["before"], "detection": det.as_dict(),
           "delta": {k: v for k, v in lossdetect.delta(before, after).items() if v},
           "effective": {k: eff["h1"].get(k) for k in ("mss", "init_rto", "rto_min")},
           "proc_before": text_before, "proc_after": text_after}
    MEASURED[name] = rec
    print(name, json.dumps({k: v for k, v in rec.items() if not k.startswith("proc_")}, indent=1, default=str))
    assert got == MSS * (warmup + send)
    # E2's MSS: every data segment carries 512 B (TCP_INFO of the sender's socket)
    assert info["after"]["snd_mss"] == MSS
    assert info["after"]["bytes_sent"] == MSS * info["after"]["data_segs_out"]
    return rec


def test_one_dropped_segment_is_a_fast_retransmit_event(ledger):
    rec = run_case(ledger, "one_segment", ["action", "gact", "ok", "random", "determ", "drop", "6"],
                   warmup=20, send=9, drops=1)
    det = rec["detection"]
    assert rec["dropped_by_filter"] == 1, rec
    a, b = rec["tcp_info_after"], rec["tcp_info_before"]
    assert a["total_retrans"] - b["total_retrans"] == 1          # the socket's own count
    assert det["fast"] == 1 and det["rto"] == 0, det
    assert det["retrans_segs"] == 1 and det["fast_retrans_segs"] == 1, det
    assert det["spurious_rto"] == det["spurious_fast"] == det["loss_probes"] == 0, det


def test_a_dropped_window_is_an_rto_event(ledger):
    rec = run_case(ledger, "whole_window", ["action", "gact", "drop"], warmup=20, send=8, drops=8)
    det = rec["detection"]
    assert rec["dropped_by_filter"] == 8, rec
    a, b = rec["tcp_info_after"], rec["tcp_info_before"]
    assert a["total_retrans"] - b["total_retrans"] == 8
    assert det["rto"] == 1 and det["fast"] == 0, det
    # the timer retransmits the first segment, slow start the 7 others
    assert det["retrans_segs"] == 8 and det["slow_start_retrans_segs"] == 7, det
    assert det["spurious_rto"] == 0 and det["syn_timeouts"] == 0, det
