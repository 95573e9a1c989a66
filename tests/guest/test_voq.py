"""E5's input buffering (``ib:B``, the voq qdisc kernel/sch_voq.c; docs/ib-holding.md) on
a real node of the optical fabric in the full-kernel guest, against the paper's node
(testbed/optical/ramsim.py) packet for packet.

Set-up: testbed.net.Emulation of a star, hosts h0..h5 on one optical switch s1 of
architecture ib (topologies.optical.OpticalStar), every link at 10 Gb/s (paper) and
1000 m long, D = 40000: a 1514 B frame lasts 48.4 ms and the shortest frame used (102 B)
3.3 ms (emulation), each link's propagation is 193.5 ms, and the lookahead M (switch
option ``lookahead_ns``) 50 ms: far above the guest's lateness, below every link.

The intended arrival of every packet at s1 is known to the nanosecond without touching
the hosts: each host sends its datagrams back to back (its first one a full frame, the
others queued behind it before its NIC frees, which the kernel's SCHED timestamps
confirm), so its NIC model (ebpf/arch/nic.h) sends them one tau after another from the
first departure d0, which follows from the host's ``last_dep_ns`` and the frames sent;
the arrival at s1 is departure + propagation. ramsim (the reference, B per input shared
by the input's VOQs, round robin: the ib architecture's settings) is run on those
arrivals, as is the qdisc's mirror testbed.optical.ibsched, which must agree with it.

Checked against the reference, exactly: which datagrams each receiver got (the others
dropped); the qdisc's counters per port (cut, buffered, dropped per output; most IP
bytes waiting per input) and in the fabric's counter rows; no late decision, none
after its stamp; each receiver's last packet's stamp (its host's ``last_rx_stamp_ns``)
= departure + propagation + tau of the last packet the reference sends it. Within a
tolerance (the kernel's receive timestamps, CLOCK_REALTIME, converted): every
datagram's receive time - (departure + propagation + tau) in [-TOL_CLOCK_NS,
TOL_LATE_NS], and each receiver gets its datagrams in the reference's departure order.
The paper's example (III-B-2): five simultaneous full-size packets for one output, B of
one packet: one cut through, four buffered and sent one tau apart, none dropped (and
with B = 0 four dropped). Bad options are refused with the module's message, and the
node's qdiscs share one node (other node-wide options refused, a port taken twice
refused).

XCP's queue samples (docs/xcp-edge.md, "IB nodes"): with the live qdiscs given an epoch
E and interval d_e (a change, not a reinstall), each output's ring after a run equals the
mirror's on the same arrivals and the slots derived from ramsim's outcomes
(tests/voq_xcp_reference.py): five hosts sending full frames back to back to h0 make h0's
output congested, and its ring shows qmin > 0 in exactly the intervals the mirror
predicts (an uncongested output's stays 0). A change of any other option is refused.

E1's hybrid switch realised by holding (``hybrid-hold:N_E``, the same qdisc's hybrid
scheduler; docs/hybrid-holding.md): the same runs with s1 reconfigured, against the
paper's switch (testbed/optical/eventsim.py, n_a = 6 azimuths) and the mirror
testbed.optical.hybridsched: every datagram's fate and receive time, the counters, the
fullest buffer (frame bytes); the paper's five packets with n_e = 2: one cut through,
two buffered, two dropped.

The measured receive lateness is printed (``VOQ_MEASURED``, shown with ``pytest -s``).

    testbed guest -- .venv/bin/python -m pytest -q -s tests/guest/test_voq.py
"""

from __future__ import annotations

import errno
import json
import os
import random
import secrets
import select
import socket
import struct
import time
from dataclasses import dataclass, replace

import pytest

from helpers import require_features, require_root
from voq_xcp_reference import backlogs, ring_slots
from test_hostnic import (SO_TIMESTAMPING, SO_TIMESTAMPNS, SOF_TIMESTAMPING_OPT_ID, SOF_TIMESTAMPING_OPT_TSONLY,
                          SOF_TIMESTAMPING_SOFTWARE, SOF_TIMESTAMPING_TX_SCHED, realtime_minus_monotonic, sched_stamps)
from testbed import hostclock, setns
from testbed.cc.modules import KERNEL_DIR
from testbed.ledger import Ledger
from testbed.net import Emulation
from testbed.optical import eventsim, hybridsched, ibsched, layout, maps, ramsim, voq
from testbed.optical.architectures import parse
from topologies.optical import OpticalStar

RATE = 10e9
TDF = 40000.0
LENGTH_M = 1000.0
#: M, emulation ns: 50 ms, below the links' 193.5 ms
M_NS = 50_000_000
HOSTS = [f"h{i}" for i in range(6)]
UDP_PORT = 40_919
MAGIC = b"VOQ1"
HEADERS = 14 + 20 + 8
#: UDP payloads: frames of 102..1514 B
PAYLOAD = (60, 1472)
SO_RCVBUFFORCE = 33
#: a datagram reached its host's qdisc layer this long before its NIC freed at least (the
#: egress program, which stamps its departure, runs microseconds after the SCHED stamp)
SCHED_MARGIN_NS = 1_000_000
#: receive time - (departure + propagation + tau): the clock conversion (two clock reads
#: in user space) may make it this early, the release path (voq watchdog, NET_TX, veth,
#: the receiver's ingress) this late; a tenth of the shortest frame's 3.3 ms
TOL_CLOCK_NS, TOL_LATE_NS = 20_000, 330_000
MEASURED: dict[str, dict] = {}


@pytest.fixture(scope="module")
def star():
    require_root()
    require_features("netns", "clsact-bpf", "btf", "modules")
    if not (KERNEL_DIR / "sch_voq.ko").exists():
        pytest.fail("kernel/sch_voq.ko is not built: make -C kernel")
    ledger = Ledger.create(f"pytest-voq-{os.getpid()}-{secrets.token_hex(3)}")
    topo = OpticalStar(n_senders=len(HOSTS) - 1, length_m=LENGTH_M, arch="ib:1500", rate_bps=RATE, tdf=TDF,
                       lookahead_ns=M_NS)
    try:
        with Emulation(topo, ledger, "vq" + secrets.token_hex(2)) as emu:
            yield emu
    finally:
        print(f"\nVOQ_MEASURED {json.dumps(MEASURED)}")
        assert not ledger.teardown(), "teardown left objects"


# -- sending and receiving ------------------------------------------------------------------
def _sender(netns: str) -> socket.socket:
    with setns.entered(netns):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING, SOF_TIMESTAMPING_TX_SCHED | SOF_TIMESTAMPING_SOFTWARE
                 | SOF_TIMESTAMPING_OPT_ID | SOF_TIMESTAMPING_OPT_TSONLY)
    return s


def _receiver(netns: str) -> socket.socket:
    with setns.entered(netns):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("0.0.0.0", UDP_PORT))
    s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    return s


def _receive(socks: dict[str, socket.socket], want: int, timeout_s: float) -> dict[tuple[int, int], tuple[str, int]]:
    """{(source host index, seq): (receiver, receive time CLOCK_REALTIME ns)} until
    ``want`` datagrams or the timeout."""
    got: dict[tuple[int, int], tuple[str, int]] = {}
    by_fd = {s.fileno(): (h, s) for h, s in socks.items()}
    deadline = hostclock.Deadline(timeout_s)
    while len(got) < want and not deadline.expired():
        ready, _, _ = select.select(list(by_fd), [], [], deadline.step(0.2))
        for fd in ready:
            h, s = by_fd[fd]
            data, anc, _f, _a = s.recvmsg(2048, 1024)
            if data[:4] != MAGIC:
                continue
            sec, nsec = next(struct.unpack_from("=qq", d) for lvl, k, d in anc
                             if lvl == socket.SOL_SOCKET and k == SO_TIMESTAMPNS)
            src, seq = struct.unpack_from("!BI", data, 4)
            got[(src, seq)] = (h, sec * 1_000_000_000 + nsec)
    return got


# -- the reference on the exact intended arrivals -------------------------------------------
@dataclass(frozen=True)
class Sent:
    """One datagram: source and destination host indexes, its seq at the source, frame bytes."""

    src: int
    dst: int
    seq: int
    frame: int


def intended_arrivals(sent: list[Sent], last_dep: dict[int, int], ps: int, prop: dict[int, int]) -> dict[
        tuple[int, int], int]:
    """{(src, seq): intended arrival at s1, emulation ns} of datagrams sent back to back by
    each source: its NIC sent them tau apart from d0 = its last departure less the taus
    before its last datagram; arrival = departure + propagation of its link."""
    out: dict[tuple[int, int], int] = {}
    for src in sorted({x.src for x in sent}):
        mine = sorted((x for x in sent if x.src == src), key=lambda x: x.seq)
        taus = [layout.tau_ns(x.frame, ps) for x in mine]
        dep = last_dep[src] - sum(taus[:-1])
        for x, tau in zip(mine, taus):
            out[(src, x.seq)] = dep + prop[src]
            dep += tau
    return out


def reference(sent: list[Sent], arrival: dict[tuple[int, int], int], port_of: dict[int, int], n_ports: int,
              config: ibsched.IbConfig | hybridsched.HybridConfig, ps: int) -> tuple[list, list]:
    """The paper's node over ``sent`` (same order): ramsim's IB node (rr, shared: ib's
    settings) for an IbConfig, eventsim's hybrid switch for a HybridConfig (its packets
    listed by arrival, then input: the node's order of one instant)."""
    if isinstance(config, hybridsched.HybridConfig):
        pk = [eventsim.Packet(arrival[(x.src, x.seq)], x.frame, port_of[x.src], port_of[x.dst]) for x in sent]
        order = sorted(range(len(pk)), key=lambda k: (pk[k].arrival_ns, pk[k].in_port))
        out = eventsim.simulate([pk[k] for k in order], "hybrid", config.n_e, n_ports, ps)
        ref: list = [None] * len(pk)
        for j, k in enumerate(order):
            ref[k] = out[j]
        return pk, ref
    pk = [ramsim.Packet(arrival[(x.src, x.seq)], x.frame - 14, port_of[x.src], port_of[x.dst], wire_bytes=x.frame)
          for x in sent]
    return pk, ramsim.simulate(pk, "IB", n_ports, config.buffer_bytes, ps, scheduler="rr", voq_split="shared")


def _host_states(fab) -> dict[str, dict]:
    ids = {h: fab.nodes[h].node_id for h in HOSTS}
    states = maps.read_states(fab.pin_dir, {i: 1 for i in ids.values()})
    return {h: states[i]["ports"][0] for h, i in ids.items()}


def _plan(seed: int, k: int) -> list[Sent]:
    """k datagrams per host to uniformly random other hosts, the first a full frame."""
    rng = random.Random(seed)
    out = []
    for seq in range(k):
        for src in range(len(HOSTS)):
            dst = rng.choice([d for d in range(len(HOSTS)) if d != src])
            payload = PAYLOAD[1] if seq == 0 else rng.randint(*PAYLOAD)
            out.append(Sent(src, dst, seq, payload + HEADERS))
    return out


def run(emu, spec: str, sent: list[Sent], name: str, xcp_interval_ns: int = 0) -> dict:
    """Send ``sent`` (in that order, each host's back to back) through s1 configured as
    ``spec`` and check everything against the reference (module docstring); with
    ``xcp_interval_ns`` the qdiscs' XCP rings too (E = the clock after the change, before
    every arrival). Returns the summary (also in MEASURED[name]; ``xcp``: per port the
    (interval, qmin_ns, packets) of its ring's used slots)."""
    fab = emu.optical
    fab.reconfigure({"s1": parse(spec)})          # state, counters, qdiscs anew
    s1 = fab.nodes["s1"]
    assert s1.options.config.lookahead_ns == M_NS and not any(p.peer_holds for p in s1.ports)
    opts = s1.options
    if xcp_interval_ns:
        opts = s1.options.with_xcp(time.clock_gettime_ns(time.CLOCK_MONOTONIC), xcp_interval_ns)
        for p, dev in enumerate(s1.devs):       # the live qdiscs take E and d_e (a change: their rings restart)
            voq.change(dev, s1.netns, opts.qopt(p))
    port_of = {HOSTS.index(peer): p for p, peer in enumerate(s1.peers)}
    ps = s1.ports[0].ps_per_byte
    assert all(p.ps_per_byte == ps for np in fab.nodes.values() for p in np.ports)
    prop = {HOSTS.index(h): fab.nodes[h].ports[0].prop_ns for h in HOSTS}
    rx = {h: _receiver(emu[h].netns) for h in HOSTS}
    tx = {i: _sender(emu[h].netns) for i, h in enumerate(HOSTS)}
    try:
        offset = realtime_minus_monotonic()
        for x in sent:
            payload = MAGIC + struct.pack("!BI", x.src, x.seq)
            tx[x.src].sendto(payload + bytes(x.frame - HEADERS - len(payload)), (emu[HOSTS[x.dst]].ip, UDP_PORT))
        sched = {i: sched_stamps(s, sum(1 for x in sent if x.src == i), 30) for i, s in tx.items()}
        # the run lasts at most every frame one after another, and a link's propagation twice
        span_ns = sum(layout.tau_ns(x.frame, ps) for x in sent) + 2 * max(prop.values())
        hosts = _host_states(fab)
        last_dep = {HOSTS.index(h): st["last_dep_ns"] for h, st in hosts.items()}
        arrival = intended_arrivals(sent, last_dep, ps, prop)
        pk, ref = reference(sent, arrival, port_of, len(HOSTS), s1.options.config, ps)
        forwarded = sum(o.kind != "dropped" for o in ref)
        got = _receive(rx, forwarded, timeout_s=30 + 2 * span_ns / 1e9)
        deadline = hostclock.Deadline(30)
        while sum(q.port.arrivals for q in voq.read_ports(s1.devs, s1.netns).values()) < len(sent):
            assert not deadline.expired(), "the voq qdiscs did not decide every packet"
            time.sleep(0.1)
        states = voq.read_ports(s1.devs, s1.netns)
        rows = {r["port"]: r for r in fab.counters() if r["node"] == "s1"}
        hosts = _host_states(fab)
    finally:
        for s in (*rx.values(), *tx.values()):
            s.close()

    # the hosts sent what we planned, back to back (so the arrivals above are exact)
    for i, h in enumerate(HOSTS):
        mine = sorted((x for x in sent if x.src == i), key=lambda x: x.seq)
        taus = [layout.tau_ns(x.frame, ps) for x in mine]
        assert (hosts[h]["cut"], hosts[h]["busy_ns"]) == (len(mine), sum(taus)), f"{h}: {hosts[h]}"
        assert len(sched[i]) == len(mine), f"{h}: {len(sched[i])} SCHED stamps of {len(mine)}"
        d0 = last_dep[i] - sum(taus[:-1])
        for j in range(1, len(mine)):
            assert sched[i][j] - offset + SCHED_MARGIN_NS <= d0 + sum(taus[:j]), \
                f"{h}'s datagram {j} reached its NIC after the previous one had left: the run is not back to back"
    # the mirror of the qdisc's algorithm is the reference on these arrivals
    hybrid = isinstance(opts.config, hybridsched.HybridConfig)
    arrivals = [ibsched.Arrival(p.arrival_ns, p.length if hybrid else p.wire_bytes, p.in_port, p.out_port) for p in pk]
    mirror, mc = hybridsched.run(arrivals, opts.config) if hybrid else ibsched.run(arrivals, opts.config)
    assert [(d.kind, d.departure_ns) for d in mirror] == [(o.kind, o.departure_ns) for o in ref]
    if xcp_interval_ns:                           # the mirror's rings are the paper node's
        assert mc.xcp == ring_slots(pk, ref, backlogs(pk, ref, ps), opts.config.xcp_epoch_ns, xcp_interval_ns)

    # per packet: dropped or received, and when
    want = {(x.src, x.seq): (HOSTS[x.dst], o.departure_ns + prop[x.dst] + layout.tau_ns(x.frame, ps))
            for x, o in zip(sent, ref) if o.kind != "dropped"}
    assert set(got) == set(want), (f"received {len(got)} of {len(want)}; missing {sorted(set(want) - set(got))[:5]}, "
                                   f"extra {sorted(set(got) - set(want))[:5]}")
    late = []
    for key, (h, stamp) in want.items():
        assert got[key][0] == h
        late.append(got[key][1] - offset - stamp)
    for h in HOSTS:
        order = sorted((k for k in want if want[k][0] == h), key=lambda k: want[k][1])
        assert sorted(order, key=lambda k: got[k][1]) == order, f"{h} got its datagrams out of departure order"
        if order:
            assert hosts[h]["last_rx_stamp_ns"] == want[order[-1]][1], f"{h}: last stamp {hosts[h]}"

    # counters: per output and per input, in the qdiscs and in the fabric's rows
    if hybrid:    # frame bytes waiting from arrival to departure: the paper's switch's fullest buffer
        in_max, node_max = mc.in_max_bytes, eventsim.stats(pk, ref, ps).max_waiting_bytes
        assert mc.max_node_bytes == node_max
    else:
        in_max, node_max = ramsim.occupancy_maxima(pk, ref, "IB", len(HOSTS))
    for p, dev in enumerate(s1.devs):
        q = states[dev]
        kinds = [o.kind for x, o in zip(pk, ref) if x.out_port == p]
        counts = (kinds.count("cut"), kinds.count("buffered"), kinds.count("dropped"))
        assert (q.port.cut, q.port.buffered, q.port.dropped) == counts, f"port {p}: {q.port}"
        assert (rows[p]["cut_through"], rows[p]["buffered"], rows[p]["dropped"], rows[p]["qdisc"]) == (*counts, "voq")
        assert q.port.in_max_bytes == in_max[p] and q.port.in_bytes == 0, f"input {p}: {q.port}"
        assert (q.port.late, q.port.decided_after_stamp, q.port.unmodelled, q.port.overlimit) == (0, 0, 0, 0), q.port
        assert q.qlen == 0 and q.qopt == opts.qopt(p)
        assert q.xcp == mc.xcp_ring(p), f"port {p}: XCP ring {q.xcp}, the mirror's {mc.xcp_ring(p)}"
    node = states[s1.devs[0]].node
    assert (node.late, node.waiting, node.pending, node.members, node.max_node_bytes) == (0, 0, 0, len(HOSTS),
                                                                                          node_max)
    assert node.max_enqueue_late_ns < M_NS
    summary = {"packets": len(sent), "forwarded": len(want), "cut": sum(o.kind == "cut" for o in ref),
               "buffered": sum(o.kind == "buffered" for o in ref), "dropped": sum(o.kind == "dropped" for o in ref),
               "receive_minus_stamp_ns": {"min": min(late, default=0), "max": max(late, default=0),
                                          "p50": sorted(late)[len(late) // 2] if late else 0},
               "max_enqueue_late_ns": node.max_enqueue_late_ns, "max_decision_lag_ns": node.max_decision_lag_ns,
               "xcp": {p: [(x.interval, x.qmin_ns, x.packets) for x in states[dev].xcp if x.packets]
                       for p, dev in enumerate(s1.devs)},
               "guest_clock": hostclock.guest_clock()}
    MEASURED[name] = summary
    assert min(late) >= -TOL_CLOCK_NS and max(late) <= TOL_LATE_NS, f"{name}: receive times off the stamps: {summary}"
    return summary


# -- tests ---------------------------------------------------------------------------------
@pytest.mark.parametrize("spec,expect", [("ib:1500", (1, 4, 0)), ("ib:0", (1, 0, 4)), ("hybrid-hold:2", (1, 2, 2))])
def test_the_papers_five_packets(star, spec, expect):
    """Five full-size packets for h0 at once (one per sender, III-B-2): with one packet of
    input buffer, one cuts through and the four others wait at their inputs and leave
    one tau apart; without buffer four are dropped. The hybrid switch with two buffer
    ports: one cuts through, two take the buffer inputs, two find none."""
    sent = [Sent(i, 0, 0, PAYLOAD[1] + HEADERS) for i in range(1, 6)]
    s = run(star, spec, sent, f"paper-{spec}")
    assert (s["cut"], s["buffered"], s["dropped"]) == expect


@pytest.mark.parametrize("spec,seed", [("ib:1500", 1), ("ib:4500", 2), ("ib:15000", 3), ("ib:0", 4)])
def test_random_traces_equal_the_paper_node(star, spec, seed):
    """Every host sends 20 datagrams back to back to random hosts (inputs saturated; by
    the reference: 23 / 11 / 12 / 73 cut through, 73 / 108 / 108 / 0 buffered, 24 / 1 /
    0 / 47 dropped of 120)."""
    s = run(star, spec, _plan(seed, 20), f"random-{spec}-{seed}")
    assert s["cut"] >= 5 and (spec == "ib:0" or s["buffered"] >= 50)
    assert spec not in ("ib:0", "ib:1500") or s["dropped"] >= 20


@pytest.mark.parametrize("spec,seed", [("hybrid-hold:1", 5), ("hybrid-hold:2", 6), ("hybrid-hold:6", 7),
                                       ("hybrid-hold:0", 8)])
def test_random_traces_equal_the_papers_hybrid_switch(star, spec, seed):
    """E1's hybrid switch by holding: every host sends 20 datagrams back to back to random
    hosts; fates, receive times and counters are the paper's switch's (eventsim)."""
    s = run(star, spec, _plan(seed, 20), f"random-{spec}-{seed}")
    assert s["cut"] >= 5 and s["dropped"] >= (1 if spec == "hybrid-hold:6" else 10)
    assert spec == "hybrid-hold:0" or s["buffered"] >= 10


def test_bad_options_are_refused_and_the_node_is_shared(star):
    fab = star.optical
    fab.reconfigure({"s1": parse("ib:1500")})
    s1 = fab.nodes["s1"]
    q = s1.options.qopt(1)
    dev = s1.devs[1]
    raw = bytearray(q.pack())
    struct.pack_into("=I", raw, 0, 1)                       # another version (1: before the XCP ring)
    with pytest.raises(voq.VoqError, match="version") as exc:
        voq.install_raw(dev, s1.netns, bytes(raw))
    assert exc.value.errno == errno.EINVAL
    with pytest.raises(voq.VoqError, match="struct tc_voq_qopt"):
        voq.install_raw(dev, s1.netns, q.pack()[:-8])
    with pytest.raises(voq.VoqError, match="options cannot change") as exc:
        voq.install_raw(dev, s1.netns, replace(q, buffer_bytes=3000).pack())
    assert exc.value.errno == errno.EOPNOTSUPP
    voq.install_raw(dev, s1.netns, q.pack())                # the same options again: accepted
    voq.remove(dev, s1.netns)
    with pytest.raises(voq.VoqError, match="node-wide options must be the same"):
        voq.install_raw(dev, s1.netns, replace(q, buffer_bytes=3000).pack())
    with pytest.raises(voq.VoqError, match="already has a voq qdisc") as exc:
        voq.install_raw(dev, s1.netns, replace(q, port=2).pack())
    assert exc.value.errno == errno.EBUSY
    voq.install_raw(dev, s1.netns, q.pack())
    assert voq.read(dev, s1.netns).node.members == len(HOSTS)
    # a live qdisc takes another XCP epoch and interval, and nothing else
    x = replace(q, xcp_epoch_ns=10**9, xcp_interval_ns=10**8)
    voq.change(dev, s1.netns, x)
    assert voq.read(dev, s1.netns).qopt == x
    with pytest.raises(voq.VoqError, match="options cannot change but xcp_epoch_ns and xcp_interval_ns") as exc:
        voq.change(dev, s1.netns, replace(x, buffer_bytes=3000))
    assert exc.value.errno == errno.EOPNOTSUPP
    with pytest.raises(voq.VoqError, match="xcp_epoch_ns must be 0 when xcp_interval_ns is 0"):
        voq.change(dev, s1.netns, replace(x, xcp_interval_ns=0))


def test_xcp_ring_of_a_congested_output_equals_the_mirrors(star):
    """XCP's persistent-queue samples of an ib node: hosts h1..h5 send 8 full frames each
    back to back to h0 (h0's output has 40 x 48.4 ms of work from arrivals spread over
    0.4 s: congested), h0 sends 8 to h1 (its output never queues). With E and d_e =
    100 ms (emulation) given to the live qdiscs, every output's ring equals the mirror's
    (which equals the paper node's: checked in run) and so shows qmin > 0 exactly in the
    intervals the mirror predicts; here h0's output has such intervals and h1's none."""
    d_e = 100_000_000
    sent = [Sent(src, 0, seq, PAYLOAD[1] + HEADERS) for seq in range(8) for src in range(1, 6)]
    sent += [Sent(0, 1, seq, PAYLOAD[1] + HEADERS) for seq in range(8)]
    s = run(star, "ib:15000", sent, "xcp-ring", xcp_interval_ns=d_e)
    assert s["dropped"] == 0 and s["buffered"] >= 30
    s1 = star.optical.nodes["s1"]
    h0, h1 = s1.peers.index("h0"), s1.peers.index("h1")
    congested = [(k, q) for k, q, _n in s["xcp"][h0] if q > 0]
    assert len(congested) >= 2, s["xcp"]
    assert s["xcp"][h1] and all(q == 0 for _k, q, _n in s["xcp"][h1]), s["xcp"]
