"""Acceptance of the congestion-control profiles, in the full-kernel guest.

Two hosts over one emulated link (HTB rate, netem delay and random loss in both
directions), time dilation D = 20 applied to every paper time (the paper's 1 ms
initial RTO becomes 20 ms = 5 jiffies at HZ=250). One cwnd tracer (the same one
``testbed trace cwnd`` uses) watches every socket for the whole module; each test
checks its profile's invariants on what the tracer saw, never on our own code:

* SAW (20 s transfer): packets in flight never exceed 1; the receiver never fires a
  delayed-ACK timer (one ACK per segment); every RTO fires only after the whole armed
  RTO T since the segment was sent, so each retransmission (spurious ones, confirmed
  by DSACKs, included) is one the paper's rule makes: no ACK within T.
* SAWL on the same path: the measured RTO (time from the segment's transmission,
  i.e. the ACK that released it, to the RTO expiry) exceeds SAW's by p x tau, +-10 %.
* mSACK (h1) and SACK (h2) in one topology, one transfer after the other: mSACK's cwnd
  after each RTO is half its value before (+-1; at least three RTOs from a window of
  6 segments or more), it is not reduced by triple dupACKs,
  and it grows by one segment per acknowledged segment (never linearly); SACK's
  cwnd falls to 1 on RTO and about halves on triple dupACKs; SACK's initial RTO on
  a SYN that is never answered is 1 ms x D.
* First data segment (SAW, SACK, mSACK; a path where the 1500 B data segment's RTT is
  several times the SYN's): the RTO armed for the first data segment (tracer at
  tcp_rearm_rto) is the profile's initial RTO T_1 x D (within one jiffy), not the
  kernel's estimate from the handshake, and the estimator's first sample is the
  data segment's RTT (the SYN-ACK is not a sample).
* Swapping: set-default changes new connections only; unloading a module in use
  is refused with a clear message; afterwards no module reference is left.
* Module parameters out of range are refused at load (rto_max_ms above TCP_RTO_MAX too).
* E2's settings (``sack`` with ``max_window`` and ``mss``): with max_window = 8 a bulk
  flow's cwnd (the socket's own TCP_INFO, polled every millisecond) reaches 8 and never
  exceeds it, where the same path without the option takes cwnd above 8; with
  max_window = 512 and mss = 512 (E2's largest Wm) on a path whose BDP exceeds 512
  segments cwnd reaches 512, so neither end's buffers limit the window below Wm. At
  D = 1000 the RTO of the paper (30 ms slow, 10.5 ms fast, as initial and minimum RTO)
  is 30 s / 10.5 s of kernel time: the RTO after the handshake (the one the first data
  segment is armed with) is exactly that, and after data it is SRTT + the minimum.

The measured numbers are written to results/cc-invariants.json (the resolution
report's table).
"""

from __future__ import annotations

import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import REPO, require_features, require_root, run_testbed
from testbed import hostclock
from testbed.cc import modules, sockops
from testbed.cc.selection import CcaSelection, Choice, applied
from testbed.cc.trace import CwndTracer, Sample, netns_inode, per_socket, write_csv
from testbed.dilation import TimeDilation
from testbed.families.netem_path import wait_listening
from testbed.ledger import Ledger
from testbed.net import Emulation, LinkShape
from topologies.path import TwoHostPath

D = TimeDilation(20)
HZ_JIFFY_S = 0.004
RESULTS = REPO / "results" / "cc-invariants.json"
MEASURED: dict[str, dict] = {}

# SAW path (paper units): 12 Mbit/s, 0.5 ms one way, 3 % loss each way; MTU 1500 B
# gives tau = 1 ms (paper) = 20 ms (emulation), p x tau = 80 ms.
SAW_RATE_BPS, SAW_DELAY_S, SAW_LOSS = 12e6, 0.5e-3, 0.03
# SACK / mSACK path: 160 Mbit/s, 0.25 ms one way (RTT 10 ms emulated), 3 % loss.
MS_RATE_BPS, MS_DELAY_S, MS_LOSS = 160e6, 0.25e-3, 0.03
MS_TRANSFERS_S = (20, 10, 10, 10)   # mSACK transfers until the trace holds 3 RTOs


def setup_module() -> None:
    require_root()
    require_features("netns", "htb", "netem", "modules")
    for name in ("saw", "sawl", "sack", "msack"):
        if not (modules.KERNEL_DIR / f"tcp_{name}.ko").exists():
            pytest.fail(f"kernel/tcp_{name}.ko is not built: make -C kernel")


@pytest.fixture(scope="module")
def tracer():
    # one tracer for every test; its "arm" events (timer armings) are used by the
    # first-data test only, core() drops them elsewhere
    t = CwndTracer(arm=True)
    t.start()
    yield t
    t.stop()
    write_csv(t.samples, REPO / "results" / "cc-trace.csv")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(MEASURED, indent=1, default=str))


@pytest.fixture
def ledger():
    led = Ledger.create(f"test-cc-{os.getpid()}-{time.monotonic_ns()}")
    yield led
    assert not led.teardown(), "teardown left objects"


def path(ledger: Ledger, rate_bps: float, delay_s: float, loss: float, queue: int = 1000) -> Emulation:
    shape = LinkShape(rate_bps=D.rate_to_emulation(rate_bps), delay_s=D.time_to_emulation(delay_s),
                      loss=loss, queue_packets=queue)
    return Emulation(TwoHostPath(shape=shape, switch="none"), ledger, "ot" + secrets.token_hex(2))


def transfer(client, server, port: int, seconds: float):
    """Start an iperf3 transfer client -> server of ``seconds``; returns the client process."""
    server.popen(["iperf3", "-s", "-1", "-B", server.ip, "-p", str(port)])
    wait_listening(server, port, timeout_s=30)
    return client.popen(["iperf3", "-c", server.ip, "-p", str(port), "-t", f"{seconds:g}", "-l", "16K"])


def core(samples: list[Sample]) -> list[Sample]:
    """The ack / retrans / rto samples (without the tracer's timer-arming events)."""
    return [s for s in samples if s.event != "arm"]


def samples_of(tracer: CwndTracer, netns: str, dport: int, since: float, *,
               arm: bool = False) -> list[Sample]:
    """The sender socket(s) of ``netns`` towards ``dport`` (data direction), in time order
    (timer armings only with ``arm``)."""
    ino = netns_inode(netns)
    out = [s for s in list(tracer.samples) if s.netns == ino and s.dport == dport and s.t_s >= since]
    return sorted(out if arm else core(out), key=lambda s: s.t_s)


def data_socket(samples: list[Sample]) -> list[Sample]:
    """The socket with the most samples (iperf3's data connection, not its control one)."""
    groups = dict(per_socket(samples))
    assert groups, "the tracer saw no socket"
    return max(groups.values(), key=len)


def now_s() -> float:
    return time.monotonic_ns() / 1e9


def nstat(host, *counters: str) -> dict[str, int]:
    out = host.run(["nstat", "-asz", *counters]).stdout
    vals = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in counters:
            vals[parts[0]] = int(parts[1])
    return vals


def rto_elapsed_vs_armed(samples: list[Sample]) -> list[tuple[float, float]]:
    """(seconds from the arming of the retransmission timer to its expiry, the armed RTO
    in seconds) for each RTO of one socket. The timer starts at the last "arm" event with
    a segment outstanding (a new segment sent) or at the previous RTO (the backoff re-arms
    it); the "rto" sample shows icsk_rto as armed."""
    out, start = [], None
    for s in samples:
        if s.event == "arm" and s.packets_out >= 1:
            start = s
        elif s.event == "rto":
            if start is not None:
                out.append((s.t_s - start.t_s, s.rto_s))
            start = s
    return out


def measured_rtos(socket_samples: list[Sample]) -> list[float]:
    """Seconds from the ACK that released a segment to that segment's RTO expiry."""
    out = []
    for prev, s in zip(socket_samples, socket_samples[1:]):
        if s.event == "rto" and prev.event == "ack" and s.snd_una != prev.snd_una:
            out.append(s.t_s - prev.t_s)
    return out


# ---------------------------------------------------------------------------------------
def test_module_parameters_out_of_range_are_refused():
    for name, bad in (("sawl", "p=65"), ("saw", "beta_pct=0"), ("msack", "rto_decrease_pct=101"),
                      ("saw", "rto_max_ms=120001")):
        if modules.refcount(f"tcp_{name}") is not None:
            subprocess.run(["rmmod", f"tcp_{name}"], check=False)
        p = subprocess.run(["insmod", str(modules.KERNEL_DIR / f"tcp_{name}.ko"), bad],
                           capture_output=True, text=True)
        assert p.returncode != 0 and "Invalid parameters" in p.stderr, (name, bad, p.stderr)
        assert modules.refcount(f"tcp_{name}") is None
    # the CLI refuses before the kernel, naming key, value and range
    r = run_testbed("cc", "load", "sawl", "--param", "p=65", check=False)
    assert r.returncode == 1 and "p=65" in r.stderr and "0..64" in r.stderr, r.stderr
    # a running module refuses a bad runtime write too
    modules.load("sawl")
    with pytest.raises(OSError):
        Path("/sys/module/tcp_sawl/parameters/p").write_text("65")
    assert Path("/sys/module/tcp_sawl/parameters/p").read_text().strip() == "4"
    modules.unload("sawl")
    MEASURED["parameters"] = {"insmod p=65 / beta_pct=0 / rto_decrease_pct=101 / rto_max_ms=120001":
                              "refused (EINVAL)"}


def test_saw_and_sawl(tracer, ledger):
    results = {}
    with path(ledger, SAW_RATE_BPS, SAW_DELAY_S, SAW_LOSS) as emu:
        h1, h2 = emu["h1"], emu["h2"]
        for name, seconds, port in (("saw", 20, 5201), ("sawl", 12, 5202)):
            sel = CcaSelection(Choice(name))
            with applied(emu, sel, D, SAW_RATE_BPS) as eff:
                before = nstat(h2, "TcpExtDelayedACKs", "TcpInSegs", "TcpOutSegs")
                sender_before = nstat(h1, "TcpExtTCPDSACKRecv", "TcpRetransSegs")
                t0 = now_s()
                client = transfer(h1, h2, port, seconds)
                hostclock.wait(client, seconds + 120)
                time.sleep(0.5)
                after = nstat(h2, "TcpExtDelayedACKs", "TcpInSegs", "TcpOutSegs")
                sender_after = nstat(h1, "TcpExtTCPDSACKRecv", "TcpRetransSegs")
            # the handshake is not the CCA's: a retransmitted SYN counts 2 "in flight"
            # (packets_out + retrans_out) and has the initial cwnd 10 in SYN_SENT
            all_h1 = [s for s in samples_of(tracer, h1.netns, port, t0) if s.tcp_state == "established"]
            sock = data_socket(all_h1)
            rtos = measured_rtos(sock)
            key = (sock[0].src, sock[0].sport, sock[0].dst, sock[0].dport)
            timers = [x for x in samples_of(tracer, h1.netns, port, t0, arm=True)
                      if (x.src, x.sport, x.dst, x.dport) == key and x.tcp_state == "established"]
            fired = rto_elapsed_vs_armed(timers)
            results[name] = {
                "samples": len(sock), "segments_acked": sum(1 for s in sock if s.event == "ack"),
                "max_in_flight": max(s.in_flight for s in all_h1),
                "max_cwnd": max(s.cwnd for s in all_h1),
                "rto_events": sum(1 for s in sock if s.event == "rto"),
                "measured_rto_s": rtos,
                "median_measured_rto_s": statistics.median(rtos) if rtos else None,
                "median_armed_rto_s": statistics.median(s.rto_s for s in sock if s.event == "rto")
                if any(s.event == "rto" for s in sock) else None,
                "median_srtt_s": statistics.median(s.srtt_s for s in sock if s.srtt_s > 0),
                "receiver_delayed_acks": after["TcpExtDelayedACKs"] - before["TcpExtDelayedACKs"],
                "receiver_in_segs": after["TcpInSegs"] - before["TcpInSegs"],
                "receiver_out_segs": after["TcpOutSegs"] - before["TcpOutSegs"],
                # spurious retransmissions (DSACK-confirmed) among all of the sender's
                "sender_retransmissions": sender_after["TcpRetransSegs"] - sender_before["TcpRetransSegs"],
                "sender_dsacks": sender_after["TcpExtTCPDSACKRecv"] - sender_before["TcpExtTCPDSACKRecv"],
                # each RTO: (time since its timer was armed, the armed RTO)
                "rto_elapsed_vs_armed_s": fired,
                "effective": eff["h1"],
            }
    MEASURED.update({k: {kk: vv for kk, vv in v.items() if kk not in ("measured_rto_s", "rto_elapsed_vs_armed_s")}
                     for k, v in results.items()})
    for k, v in results.items():
        MEASURED[k]["rto_elapsed_vs_armed_s"] = v["rto_elapsed_vs_armed_s"][:30]
    saw, sawl = results["saw"], results["sawl"]
    print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "effective"} for k, v in results.items()},
                     indent=1, default=str))
    # SAW: one data segment in flight, in every sample of the 20 s transfer
    assert saw["segments_acked"] > 100, saw
    assert saw["max_in_flight"] <= 1 and saw["max_cwnd"] == 1, saw
    assert sawl["max_in_flight"] <= 1, sawl
    # no delayed ACK timer fired at the receiver: each segment was ACKed at once
    assert saw["receiver_delayed_acks"] == 0, saw
    assert saw["receiver_out_segs"] >= 0.95 * saw["receiver_in_segs"], saw
    # SAW retransmits by the paper's rule only: every RTO fired after the armed RTO T, to
    # within the timer's resolution, so each retransmission, spurious ones (DSACK-confirmed:
    # the ACK was lost or late) included, is one whose RTT exceeded T, as in the paper.
    # Resolution: a timer of n jiffies fires after n - 1 to n jiffies of wall time, and
    # under software emulation a late tick makes jiffies jump (seen: 24 ms armed, fired
    # after 19.89 ms, once in 38), so two jiffies of slack; firing at T / 2 would still fail.
    jiffy = HZ_JIFFY_S
    for k in ("saw", "sawl"):
        fired = results[k]["rto_elapsed_vs_armed_s"]
        assert len(fired) >= 5, (k, fired)
        assert all(elapsed >= armed - 2 * jiffy for elapsed, armed in fired), (k, fired)
        assert statistics.median(e - a for e, a in fired) <= 2 * jiffy, (k, fired)
    assert saw["sender_dsacks"] <= saw["sender_retransmissions"], saw
    # SAWL: measured RTO - SAW's measured RTO = p x tau (+-10 %)
    p_tau = sawl["effective"]["extra_rto"]["p_tau_emulation_s"]
    assert p_tau == pytest.approx(0.080, rel=1e-6)
    assert len(saw["measured_rto_s"]) >= 5 and len(sawl["measured_rto_s"]) >= 5, (saw, sawl)
    diff = sawl["median_measured_rto_s"] - saw["median_measured_rto_s"]
    MEASURED["sawl"]["measured_minus_saw_s"] = diff
    MEASURED["sawl"]["p_tau_s"] = p_tau
    assert diff == pytest.approx(p_tau, rel=0.10), (diff, p_tau)


def test_msack_and_sack_side_by_side(tracer, ledger):
    sel = CcaSelection(Choice("msack"), {"h2": Choice("sack")})
    with path(ledger, MS_RATE_BPS, MS_DELAY_S, MS_LOSS, queue=60) as emu:
        h1, h2 = emu["h1"], emu["h2"]
        with applied(emu, sel, D, MS_RATE_BPS) as eff:
            assert h1.run(["sysctl", "-n", "net.ipv4.tcp_congestion_control"]).stdout.strip() == "msack"
            assert h2.run(["sysctl", "-n", "net.ipv4.tcp_congestion_control"]).stdout.strip() == "sack"
            # a SYN that is never answered: its first RTO is the profile's 1 ms x D
            h2.run(["ip", "neigh", "replace", "10.0.0.99", "lladdr", "02:00:00:00:00:99", "dev", h2.intfs[0]])
            syn = h2.run([sys.executable, "-c",
                          "import socket,time\ns=socket.socket();s.setblocking(False)\n"
                          "t=time.monotonic_ns();s.connect_ex(('10.0.0.99',9));print(t);time.sleep(0.3)"])
            t_connect = int(syn.stdout.split()[0]) / 1e9
            t0 = now_s()
            # one after the other: mSACK's exponential growth would starve SACK's ACKs
            # mSACK sends h1 -> h2. At 3 % loss RTOs come at random (one 20 s transfer saw
            # 2 to 4), so further 10 s transfers follow until the trace holds 3 of them
            # from a window of at least 6 segments (telling(): iperf3's control socket
            # times out too, at cwnd 1 or 2, where halving and resetting agree).
            # (Killing a transfer early leaves an orphan mSACK socket draining a large
            # window, which starves the SACK transfer below.)
            for seconds in MS_TRANSFERS_S:
                hostclock.wait(transfer(h1, h2, 5211, seconds), 240)
                if len(telling(all_rto_halvings(tracer.samples, 5211, t0))) >= 3:
                    break
            hostclock.wait(transfer(h2, h1, 5212, 12), 200)   # SACK sends h2 -> h1
    syn_rtos = sorted(s.t_s for s in list(tracer.samples) if s.dst == "10.0.0.99" and s.event == "rto")
    assert syn_rtos, "no RTO of the unanswered SYN was traced"
    first_syn_rto = syn_rtos[0] - t_connect
    # the SYN backs off by doubling, so the 1st -> 2nd expiry is 2 x the initial RTO,
    # measured on kernel timer events alone (the process start-up is not in it)
    assert len(syn_rtos) >= 2, syn_rtos
    syn_init_rto = (syn_rtos[1] - syn_rtos[0]) / 2
    init_rto = eff["h2"]["init_rto"]["effective_s"]
    est = [s for s in core(list(tracer.samples)) if s.t_s >= t0 and s.tcp_state == "established"]
    ms = data_socket([s for s in est if s.dport == 5211])
    sk = data_socket([s for s in est if s.dport == 5212])

    # -- mSACK: RTO halves cwnd; dupACKs keep it; growth one segment per segment ---------
    halvings = all_rto_halvings(tracer.samples, 5211, t0)
    dup = triple_dupacks(ms)
    growth, acked = map(sum, zip(*(exponential_growth(sock) for _, sock in per_socket(
        [x for x in est if x.dport == 5211]))))
    # -- SACK: RTO -> 1; three dupACKs -> about half ---------------------------------------
    sack_rto = [(a.cwnd, b.cwnd) for a, b in zip(sk, sk[1:]) if a.event == "rto" and b.event == "retrans"]
    recoveries = fast_recoveries(sk)
    MEASURED["msack"] = {"samples": len(ms), "rto_events": len(halvings),
                         "rto_events_from_cwnd_6_up": len(telling(halvings)),
                         "rto_cwnd_before_after": halvings[:20],
                         "triple_dupack_events": len(dup), "dupack_cwnd_before_after": dup[:20],
                         "cwnd_growth_vs_acked_segments": [growth, acked],
                         "tracer_lost_samples": tracer.lost, "effective": eff["h1"]}
    MEASURED["sack"] = {"samples": len(sk), "rto_events": len(sack_rto), "rto_cwnd_before_after": sack_rto[:20],
                        "fast_recoveries": len(recoveries), "recovery_cwnd_before_ssthresh_after": recoveries[:20],
                        "syn_first_rto_s": first_syn_rto, "syn_init_rto_from_backoff_s": syn_init_rto, "syn_rto_times_s": [t - t_connect for t in syn_rtos[:4]],
                        "configured_init_rto_s": init_rto, "effective": eff["h2"]}
    print(json.dumps({k: {kk: vv for kk, vv in MEASURED[k].items() if kk != "effective"}
                      for k in ("msack", "sack")}, indent=1, default=str))
    assert len(telling(halvings)) >= 3, halvings
    for before, after in halvings:
        assert abs(after - max(before // 2, 1)) <= 1, (before, after)
    assert dup, "no triple-dupACK event seen for mSACK"
    for before, after in dup:
        assert after >= before, (before, after)
    # cwnd-limited ACKs in the open state come mostly from slow starts (a grown mSACK
    # window is rarely full): 20 segments separate growth ~ acked from ~ acked / cwnd
    assert acked >= 20 and growth >= 0.8 * acked, (growth, acked)
    assert sack_rto, "no RTO seen for SACK"
    for before, after in sack_rto:
        assert after == 1, (before, after)
    assert len(recoveries) >= 3, recoveries
    ratios = [ss / max(before, 1) for before, ss in recoveries if before >= 6]
    assert ratios and 0.35 <= statistics.median(ratios) <= 0.65, recoveries
    # the SYN's first RTO is the configured 1 ms x D (jiffy timer: up to 1 jiffy late)
    assert init_rto == pytest.approx(0.020)
    assert init_rto * 0.95 <= syn_init_rto <= init_rto + HZ_JIFFY_S, (syn_init_rto, syn_rtos)
    assert first_syn_rto >= init_rto * 0.95, first_syn_rto


# First-data path (paper units): 24 Mbit/s, 0.02 ms one way, no loss. The SYN's RTT
# (about 1-3 ms emulated, neighbours resolved beforehand) is far below T_1 x D = 20 ms,
# so the kernel's estimate from the handshake (about 3 x the SYN's RTT, 2 jiffies) is
# not T_1. The data stays in ESTABLISHED until all of it is ACKed (the server answers
# one byte after the last one), so tcp_probe sees every ACK.
FD_RATE_BPS, FD_DELAY_S = 24e6, 0.02e-3
FD_BYTES = 30 * 1448
FD_SERVER = ("import socket,sys\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
             "s.bind(('0.0.0.0',int(sys.argv[1])));s.listen(8);N=int(sys.argv[2])\n"
             "while True:\n c,_=s.accept();n=0\n while n<N:\n  b=c.recv(65536)\n  if not b: break\n"
             "  n+=len(b)\n if n>=N: c.sendall(b'k');c.close();print(n,flush=True);break\n c.close()")
# three connects (the SYN's RTT: the least of them, user-space timing under TCG is noisy);
# the third carries the data
FD_CLIENT = ("import socket,sys,time\nrtts=[]\nfor i in range(3):\n c=socket.socket();t=time.monotonic()\n"
             " c.connect((sys.argv[1],int(sys.argv[2])));rtts.append(time.monotonic()-t)\n"
             " if i<2: c.close()\n"
             "c.sendall(b'x'*int(sys.argv[3]));c.recv(1);c.close()\nprint(min(rtts),flush=True)")


@pytest.mark.parametrize("name", ["saw", "sack", "msack"])
def test_first_data_segment_rto_is_the_initial_rto(name, tracer, ledger):
    """The first data segment is timed with T_1 x D, not with ~3 x the SYN's RTT; the
    handshake is no RTT sample (srtt = 0 when the first data segment is armed)."""
    port = 7100
    with path(ledger, FD_RATE_BPS, FD_DELAY_S, 0.0) as emu:
        h1, h2 = emu["h1"], emu["h2"]
        with applied(emu, CcaSelection(Choice(name)), D, FD_RATE_BPS) as eff:
            init_rto = eff["h1"]["init_rto"]["effective_s"]
            h1.run(["ping", "-c", "1", "-W", "10", h2.ip], timeout=30)   # ARP out of the SYN's RTT
            server = h2.popen([sys.executable, "-c", FD_SERVER, str(port), str(FD_BYTES)],
                              stdout=subprocess.PIPE)
            wait_listening(h2, port, timeout_s=30)
            t0 = now_s()
            client = h1.run([sys.executable, "-c", FD_CLIENT, h2.ip, str(port), str(FD_BYTES)], timeout=120)
            got = int(hostclock.communicate(server, timeout_s=60)[0].split()[0])
        syn_rtt_s = float(client.stdout.split()[0])   # connect(): SYN -> SYN-ACK, emulation s
        # the tracer's thread drains the perf buffer: wait until it has the data's ACKs
        deadline = hostclock.Deadline(60)
        while not deadline.expired() and sum(
                1 for s in samples_of(tracer, h1.netns, port, t0) if s.event == "ack") < 3:
            time.sleep(0.1)
        sock = data_socket([s for s in samples_of(tracer, h1.netns, port, t0, arm=True)
                            if s.tcp_state == "established"])
    assert got == FD_BYTES
    arms = [s for s in sock if s.event == "arm" and s.packets_out >= 1]
    assert arms, "no timer arming of a data segment was traced"
    first = arms[0]
    acks = [s for s in sock if s.event == "ack" and s.t_s > first.t_s]
    # tcp_probe samples before processing: the first data ACK is the last sample that
    # still shows the old snd_una (window updates of the receiver come before it)
    i = next((k for k in range(len(acks) - 1) if acks[k + 1].snd_una != first.snd_una), None)
    assert i is not None, sock[:10]
    rtos_before_ack = [s for s in sock if s.event == "rto" and s.t_s < acks[i].t_s]
    first_rtt = acks[i].t_s - first.t_s
    srtt_after = acks[i + 1].srtt_s   # srtt after the first data ACK
    jiffy = 1 / tracer.hz
    MEASURED.setdefault("first_data_rto", {})[name] = {
        "initial_rto_configured_s": init_rto, "first_data_armed_rto_s": first.rto_s,
        "srtt_when_armed_s": first.srtt_s, "syn_rtt_connect_s": syn_rtt_s,
        "first_data_rtt_s": first_rtt, "srtt_after_first_data_ack_s": srtt_after,
        "rto_before_first_ack": len(rtos_before_ack), "retransmissions": sock[-1].total_retrans}
    print(name, json.dumps(MEASURED["first_data_rto"][name], indent=1))
    assert init_rto == pytest.approx(0.020)
    assert syn_rtt_s < init_rto / 2, (syn_rtt_s, init_rto)   # the SYN's RTT is much smaller
    # the first data segment's timer is T_1 x D (jiffy rounding: within one jiffy)
    assert abs(first.rto_s - init_rto) <= jiffy + 1e-9, (first.rto_s, init_rto)
    # the handshake left no RTT sample: the estimator starts from the data segment
    assert first.srtt_s == 0, first.srtt_s
    assert not rtos_before_ack, "the first data segment timed out"
    assert srtt_after == pytest.approx(first_rtt, rel=0.2, abs=2e-3), (srtt_after, first_rtt)


def rto_halvings(samples: list[Sample]) -> list[tuple[int, int]]:
    """(cwnd before, cwnd after) around each RTO: the RTO sample and the retransmission."""
    return [(a.cwnd, b.cwnd) for a, b in zip(samples, samples[1:]) if a.event == "rto" and b.event == "retrans"]


def all_rto_halvings(samples: list[Sample], dport: int, since: float) -> list[tuple[int, int]]:
    """rto_halvings over every established socket towards ``dport`` since ``since``."""
    est = [x for x in core(list(samples)) if x.t_s >= since and x.tcp_state == "established"
           and x.dport == dport]
    return [h for _, sock in per_socket(est) for h in rto_halvings(sock)]


def telling(halvings: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The (before, after) pairs whose cwnd before was at least 6 segments: there halving
    (3 or more) and resetting to one segment differ by more than the check's tolerance
    of one segment."""
    return [(b, a) for b, a in halvings if b >= 6]


def triple_dupacks(samples: list[Sample]) -> list[tuple[int, int]]:
    """(cwnd before, cwnd after) around each run of >= 3 ACKs that did not advance snd_una."""
    acks = [s for s in samples if s.event == "ack"]
    out = []
    i = 0
    while i + 3 < len(acks):
        base = acks[i]
        if base.packets_out > 0 and all(a.snd_una == base.snd_una for a in acks[i + 1:i + 4]) \
                and acks[i + 3].ca_state != "loss" and base.ca_state != "loss":
            # acks[i+1..i+3] are the states before the 1st..3rd dupACK; the sample after the
            # third dupACK is acks[i+4] (if the socket did not time out in between)
            if i + 4 < len(acks) and acks[i + 4].ca_state != "loss":
                out.append((acks[i + 1].cwnd, acks[i + 4].cwnd))
            j = i + 4
            while j < len(acks) and acks[j].snd_una == base.snd_una:
                j += 1
            i = j
        else:
            i += 1
    return out


def exponential_growth(samples: list[Sample]) -> tuple[int, int]:
    """(sum of cwnd increase, sum of newly ACKed segments) over consecutive ACK samples in
    the open state while cwnd-limited (in flight >= cwnd - 1 before the ACK)."""
    growth = acked = 0
    for a, b in zip(samples, samples[1:]):
        if a.event != "ack" or b.event != "ack" or a.ca_state != "open" or b.ca_state != "open":
            continue
        if a.in_flight < a.cwnd - 1 or a.mss == 0:
            continue
        n = ((b.snd_una - a.snd_una) & 0xFFFFFFFF) // a.mss
        if 0 < n < 1000:
            acked += n
            growth += max(b.cwnd - a.cwnd, 0)
    return growth, acked


def fast_recoveries(samples: list[Sample]) -> list[tuple[int, int]]:
    """(cwnd before, ssthresh set) for each entry into fast recovery (not after an RTO)."""
    out = []
    last_open = None
    for s in samples:
        if s.event == "ack" and s.ca_state in ("open", "disorder"):
            last_open = s
        elif s.ca_state == "recovery" and last_open is not None:
            out.append((last_open.cwnd, s.ssthresh))
            last_open = None
        elif s.ca_state == "loss":
            last_open = None
    return out


def test_swapping_at_run_time(ledger):
    port = 7000
    with path(ledger, MS_RATE_BPS, MS_DELAY_S, 0.0) as emu:
        h1, h2 = emu["h1"], emu["h2"]
        server = h2.popen([sys.executable, "-c",
                           "import socket,time\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
                           f"s.bind(('0.0.0.0',{port}));s.listen(8)\nc=[s.accept() for _ in range(2)]\ntime.sleep(120)"])
        wait_listening(h2, port, timeout_s=30)
        client_code = (f"import socket,time\nc=socket.create_connection(('{h2.ip}',{port}))\n"
                       "print('up',flush=True)\ntime.sleep(120)")
        before = modules.set_default("cubic", h1.netns)
        a = h1.popen([sys.executable, "-c", client_code], stdout=subprocess.PIPE)
        assert a.stdout.readline().strip() == b"up"
        modules.set_default("saw", h1.netns)
        b = h1.popen([sys.executable, "-c", client_code], stdout=subprocess.PIPE)
        assert b.stdout.readline().strip() == b"up"
        ss = h1.run(["ss", "-tinH", "dst", f"{h2.ip}:{port}"]).stdout
        algs = sorted(w for w in ss.split() if w in ("cubic", "saw"))
        assert algs == ["cubic", "saw"], ss
        assert modules.refcount("tcp_saw") >= 2  # the socket and the namespace default
        # refused, module still loaded (no time bound: under icount a process start-up
        # over 9p moves the guest clock by tens of seconds; CI saw 30 s)
        r = run_testbed("cc", "unload", "saw", check=False, timeout=60)
        assert r.returncode == 1 and "in use" in r.stderr, r.stderr
        assert modules.refcount("tcp_saw") is not None
        for p in (a, b, server):
            p.kill()
            p.wait()
        modules.set_default(before, h1.netns)
        deadline = hostclock.Deadline(20)
        while modules.refcount("tcp_saw") and not deadline.expired():
            time.sleep(0.2)
        MEASURED["swap"] = {"connections": algs, "unload_in_use": r.stderr.strip()}
    r = run_testbed("cc", "unload", "saw", check=False, timeout=60)
    assert r.returncode == 0, r.stderr


def test_no_module_reference_left():
    """After the runs above (profiles undone, namespaces gone) nothing holds our modules."""
    left = {}
    for name in ("saw", "sawl", "sack", "msack"):
        count = modules.refcount(f"tcp_{name}")
        if count == 0:
            modules.unload(name)
        left[name] = modules.refcount(f"tcp_{name}")
    MEASURED["after_run_refcounts"] = left
    assert all(v is None for v in left.values()), left


# ---- E2: maximum window, MSS, RTO at D = 1000 ----------------------------------------------
# Sender: connect, send NBYTES from a thread while the main thread polls the socket's
# TCP_INFO every millisecond; prints the largest cwnd / packets unacked seen, the
# ssthresh values seen and the final TCP_INFO, as JSON.
BULK = r"""
import json, socket, sys, threading, time
from testbed.traffic import tcpinfo
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
after_connect = tcpinfo.read(s)
t = threading.Thread(target=s.sendall, args=(b"x" * int(sys.argv[3]),))
t.start()
cwnds, unacked, ssth, polls = [], 0, set(), 0
while True:
    i = tcpinfo.read(s)
    polls += 1
    cwnds.append(i["snd_cwnd"])
    unacked = max(unacked, i["unacked"])
    ssth.add(i["snd_ssthresh"])
    if not t.is_alive() and i["unacked"] == 0:
        break
    time.sleep(0.001)
print(json.dumps({"max_cwnd": max(cwnds), "max_unacked": unacked, "ssthresh_seen": sorted(ssth)[:20],
                  "polls": polls, "cwnd_first": cwnds[:5], "after_connect": after_connect,
                  "final": tcpinfo.read(s)}), flush=True)
s.close()
"""
SINK = ("import socket,sys\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
        "s.bind(('0.0.0.0',int(sys.argv[1])));s.listen(1);c,_=s.accept();n=0\n"
        "while True:\n b=c.recv(65536)\n if not b: break\n n+=len(b)\nprint(n,flush=True)")


def bulk(emu, port: int, nbytes: int) -> dict:
    """One bulk transfer h1 -> h2 of ``nbytes``; the sender's JSON report."""
    h1, h2 = emu["h1"], emu["h2"]
    sink = h2.popen([sys.executable, "-c", SINK, str(port)], stdout=subprocess.PIPE)
    wait_listening(h2, port, timeout_s=30)
    out = h1.run([sys.executable, "-c", BULK, h2.ip, str(port), str(nbytes)], timeout=600).stdout
    got = int(hostclock.communicate(sink, timeout_s=60)[0].split()[0])
    assert got == nbytes
    return json.loads(out.strip().splitlines()[-1])


def test_max_window_clamps_cwnd(ledger):
    """max_window = 8: cwnd reaches 8 and never exceeds it; without it cwnd exceeds 8."""
    # paper 100 Mbit/s, 1 ms one way: RTT 40 ms emulated, BDP ~48 segments of 512 B
    shape = LinkShape(rate_bps=D.rate_to_emulation(100e6), delay_s=D.time_to_emulation(1e-3), queue_packets=1000)
    runs = {}
    with Emulation(TwoHostPath(shape=shape, switch="none"), ledger, "mw" + secrets.token_hex(2)) as emu:
        # min RTO 100 ms (2 s emulated): with the profile's one jiffy, RTO = SRTT + 4 ms fired
        # spuriously once under the guest's scheduling jitter (ssthresh 2 in the trace)
        rto = {"mss": 512, "init_rto": "100 ms", "rto_min": "100 ms"}
        for name, opts, port in (("max_window_8", {"max_window": 8, **rto}, 7401),
                                 ("no_max_window", rto, 7402)):
            with applied(emu, CcaSelection(Choice("sack", opts)), D, 100e6) as eff:
                rec = bulk(emu, port, 200 * 512)
                if "max_window" in eff["h1"]:
                    rec["sockops_stats_h1"] = sockops.stats(Path(eff["h1"]["max_window"]["pin_dir"]))
                    rec["sockops_stats_h2"] = sockops.stats(Path(eff["h2"]["max_window"]["pin_dir"]))
                    rec["rmem_h2"] = emu["h2"].sysctl_get("net.ipv4.tcp_rmem")
                rec["effective"] = {k: eff["h1"].get(k) for k in ("max_window", "mss")}
            runs[name] = rec
    MEASURED["max_window"] = runs
    print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk not in ("after_connect", "final")}
                      for k, v in runs.items()}, indent=1, default=str))
    clamped, free = runs["max_window_8"], runs["no_max_window"]
    assert clamped["max_cwnd"] == 8, clamped            # reached, never above
    assert clamped["max_unacked"] <= 8, clamped
    assert clamped["final"]["snd_mss"] == 512 and free["final"]["snd_mss"] == 512
    assert clamped["ssthresh_seen"] == [8], clamped     # the kernel sets ssthresh = clamp too
    assert clamped["final"]["total_retrans"] == 0 and free["final"]["total_retrans"] == 0
    assert clamped["sockops_stats_h1"]["sndcwnd_clamp"] >= 1, clamped
    assert clamped["sockops_stats_h1"]["setsockopt_errors"] == 0, clamped
    assert clamped["sockops_stats_h2"]["sndcwnd_clamp"] >= 1, clamped    # the passive side
    assert clamped["rmem_h2"].split() == clamped["effective"]["max_window"]["sysctls"]["net.ipv4.tcp_rmem"].split()
    assert free["max_cwnd"] > 8, free                   # the path lets cwnd grow without it


def test_max_window_512_is_reached(ledger):
    """E2's largest Wm with its MSS: on a path whose BDP exceeds 512 segments, cwnd reaches
    512 (cwnd only grows while the flow is cwnd-limited, so neither the receive window nor
    the send buffer held it below Wm) and stays there."""
    # emulation units: 20 Mbit/s, 100 ms one way -> BDP 500 kB ~ 880 full segments of 564 B
    shape = LinkShape(rate_bps=20e6, delay_s=0.100, queue_packets=2000)
    with Emulation(TwoHostPath(shape=shape, switch="none"), ledger, "mw" + secrets.token_hex(2)) as emu:
        # a min RTO well above the guest's scheduling jitter: with one jiffy (the profile's
        # default) an RTO of SRTT + 4 ms fired spuriously early in slow start once
        opts = {"max_window": 512, "mss": 512, "init_rto": "100 ms", "rto_min": "100 ms"}
        with applied(emu, CcaSelection(Choice("sack", opts)), D, 20e6) as eff:
            rec = bulk(emu, 7403, 4096 * 512)
    rec["effective"] = eff["h1"]["max_window"]
    MEASURED["max_window_512"] = {k: v for k, v in rec.items() if k != "after_connect"}
    print(json.dumps({k: v for k, v in rec.items() if k not in ("after_connect",)}, indent=1, default=str))
    assert rec["max_cwnd"] == 512, rec
    assert rec["final"]["snd_mss"] == 512
    assert rec["final"]["total_retrans"] == 0, rec      # no loss: the queue held every window


@pytest.mark.parametrize("path_class,rto", [("slow", "30 ms"), ("fast", "10.5 ms")])
def test_e2_rto_at_d_1000(path_class, rto, ledger):
    """init_rto = rto_min = the paper's RTO at D = 1000: the RTO after the handshake (armed
    for the first data segment) is RTO x D exactly (whole jiffies), and once data was
    ACKed it is SRTT + RTO x D (Linux bounds the variance term by the minimum)."""
    d = TimeDilation(1000)
    shape = LinkShape(delay_s=0.002)
    with Emulation(TwoHostPath(shape=shape, switch="none"), ledger, "rt" + secrets.token_hex(2)) as emu:
        sel = CcaSelection(Choice("sack", {"init_rto": rto, "rto_min": rto, "mss": 512, "max_window": 64}))
        with applied(emu, sel, d, 100e6) as eff:
            route = emu["h1"].run(["ip", "route", "show"]).stdout
            rec = bulk(emu, 7404, 64 * 512)
    want_s = eff["h1"]["init_rto"]["effective_s"]
    rec.update({"route": route, "init_rto": eff["h1"]["init_rto"], "rto_min": eff["h1"]["rto_min"]})
    MEASURED.setdefault("e2_rto_d1000", {})[path_class] = {k: v for k, v in rec.items()}
    print(path_class, json.dumps(rec, indent=1, default=str))
    assert want_s == pytest.approx({"slow": 30.0, "fast": 10.5}[path_class])
    assert eff["h1"]["rto_min"]["effective_s"] == pytest.approx(want_s)
    assert f"rto_min lock {want_s:g}s" in route, route
    # after the handshake: exactly the initial RTO (tcp_info reports jiffies in us)
    assert rec["after_connect"]["rto_us"] == round(want_s * 1e6), rec["after_connect"]
    # after data: SRTT + max(RTTVAR terms, min RTO) = SRTT + min RTO, rounded up to a jiffy
    f = rec["final"]
    assert want_s * 1e6 + f["rtt_us"] <= f["rto_us"] <= want_s * 1e6 + f["rtt_us"] + 4 * f["rttvar_us"] + 8000, f
