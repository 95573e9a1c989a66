"""The kernel's IB algorithm in Python (testbed.optical.ibsched, docs/ib-holding.md)
against the independent reference node (testbed.optical.ramsim, IB) packet for packet,
and its lookahead rule: lateness below M changes nothing, lateness that lets a later
instant be decided first is counted. The outputs' XCP rings (docs/xcp-edge.md, "IB
nodes") against the backlogs derived from ramsim's outcomes alone
(tests/voq_xcp_reference.py) and by hand."""

from __future__ import annotations

import random

import pytest

from optical_ram_cases import ACK, DATA, PS, ram_trace
from testbed.optical import ramsim
from testbed.optical.ibsched import (EMPTY_XCP_SLOT, ETH_HLEN, XCP_NONE, Arrival, IbConfig, PortParams, XcpSlot,
                                     late_bucket, run)
from voq_xcp_reference import backlogs, ring_slots

T = DATA * PS // 1000           # a 1514 B frame at 1 Gb/s: 12112 ns
M = 50_000                      # lookahead used unless a test says otherwise (ns)


def arrivals(trace, lateness=None) -> list[Arrival]:
    """The trace (frames; sorted by arrival, ties by input) as Arrivals, each reaching the
    qdisc ``lateness[k]`` ns after its intended arrival (on time if None)."""
    return [Arrival(p.arrival_ns, p.length, p.in_port, p.out_port,
                    None if lateness is None else p.arrival_ns + lateness[k]) for k, p in enumerate(trace)]


def reference(trace, n: int, b: int, **kw) -> list[ramsim.Outcome]:
    """ramsim's IB node on the trace: IP bytes buffered, frames timed."""
    pk = [ramsim.Packet(p.arrival_ns, p.length - ETH_HLEN, p.in_port, p.out_port, wire_bytes=p.length)
          for p in trace]
    return ramsim.simulate(pk, "IB", n, b, PS, **kw)


def outcomes(decisions) -> list[tuple[str, int | None]]:
    return [(d.kind, d.departure_ns) for d in decisions]


def slotted_trace(seed: int, n_ports: int, slots: int, p: float) -> list:
    """Every input sends a 1514 B frame at slot k (instant k * T) with probability p, to
    another port at random: many simultaneous arrivals, and releases at the instants of
    arrivals (the tie rules)."""
    rng = random.Random(seed)
    out = []
    for k in range(slots):
        for i in range(n_ports):
            if rng.random() < p:
                o = rng.randrange(n_ports - 1)
                out.append(ramsim.Packet(k * T, DATA, i, o + (o >= i)))
    return out


# --- by hand -----------------------------------------------------------------------------

def test_paper_example_five_packets_one_output():
    """III-B-2: five packets at once from five inputs for one idle output, a 1-packet
    buffer per input: one cut through, the other four buffered at their inputs and sent
    one after another as the output frees (rr from input 0: inputs 2, 3, 4, 5)."""
    trace = [ramsim.Packet(0, DATA, i, 0) for i in range(1, 6)]
    dec, c = run(arrivals(trace), IbConfig.uniform(6, PS, 1500, M))
    assert outcomes(dec) == [("cut", 0), ("buffered", T), ("buffered", 2 * T), ("buffered", 3 * T),
                             ("buffered", 4 * T)]
    assert (c.cut[0], c.buffered[0], c.dropped[0], sum(c.late)) == (1, 4, 0, 0)
    assert c.in_max_bytes == [0, 0, 1500, 1500, 1500, 1500] and c.max_node_bytes == 4 * 1500


A = ACK * PS // 1000            # a 54 B frame (bare ACK, 40 IP bytes): 432 ns


def test_no_room_at_the_input_drops_and_a_port_released_at_t_is_free_at_t():
    """N = 4, B = 1500. A (input 0 -> 2) cuts through at 0. X (input 1 -> 2, an ACK)
    finds output 2 busy: waits (40 B). Y (input 1 -> 2) at 432 ns, when its line is free: 40 + 1500 >
    1500: dropped. Output 2 frees at T: rr serves X (input 1) at T, holding input 1's
    port until T + 432, exactly when Z (input 1 -> 1) arrives: free, Z cuts through."""
    trace = [ramsim.Packet(0, DATA, 0, 2), ramsim.Packet(0, ACK, 1, 2), ramsim.Packet(A, DATA, 1, 2),
             ramsim.Packet(A + T, DATA, 1, 1)]
    want = [("cut", 0), ("buffered", T), ("dropped", None), ("cut", T + A)]
    dec, c = run(arrivals(trace), IbConfig.uniform(4, PS, 1500, M))
    assert outcomes(dec) == want == outcomes_of_reference(trace, 4, 1500)
    assert c.in_dropped == [0, 1, 0, 0] and c.dropped == [0, 0, 1, 0] and c.in_max_bytes == [0, 40, 0, 0]


def test_a_busy_input_port_holds_back_a_packet_for_a_free_output():
    """N = 4. A (input 0 -> 2) cuts through at 0; X (input 1 -> 2) waits, leaves at T and
    holds input 1's fabric port until 2T. W (input 1 -> 0, an ACK) arrives at T + 500:
    output 0 is free but input 1's port is not: W waits until 2T. V (input 3 -> 0, an
    ACK) at T + 1000 cuts through (output 0 free again at T + 1000 + 432 < 2T)."""
    trace = [ramsim.Packet(0, DATA, 0, 2), ramsim.Packet(0, DATA, 1, 2), ramsim.Packet(T + 500, ACK, 1, 0),
             ramsim.Packet(T + 1000, ACK, 3, 0)]
    want = [("cut", 0), ("buffered", T), ("buffered", 2 * T), ("cut", T + 1000)]
    dec, _ = run(arrivals(trace), IbConfig.uniform(4, PS, 1500, M))
    assert outcomes(dec) == want == outcomes_of_reference(trace, 4, 1500)


def outcomes_of_reference(trace, n: int, b: int, **kw) -> list[tuple[str, int | None]]:
    return [(o.kind, o.departure_ns) for o in reference(trace, n, b, **kw)]


# --- against ramsim -------------------------------------------------------------------------

@pytest.mark.parametrize("scheduler", ["rr", "islip"])
@pytest.mark.parametrize("voq_split", ["shared", "static"])
@pytest.mark.parametrize("b", [0, 40, 1500, 4500, 15000, 1_000_000])
def test_equals_ramsim_on_random_traces(scheduler, voq_split, b):
    """Saturated 4-port traces (3 data frames to 1 ACK): every packet's kind and
    departure, the counters per output and the per-input occupancy maxima are ramsim's."""
    for seed in (1, 2):
        trace = ram_trace(seed, 2500, 4, 0.9)
        ref = reference(trace, 4, b, scheduler=scheduler, voq_split=voq_split)
        dec, c = run(arrivals(trace), IbConfig.uniform(4, PS, b, M, scheduler=scheduler, voq_split=voq_split))
        assert outcomes(dec) == [(o.kind, o.departure_ns) for o in ref]
        for o in range(4):
            mine = [r.kind for p, r in zip(trace, ref) if p.out_port == o]
            assert (c.cut[o], c.buffered[o], c.dropped[o]) == tuple(mine.count(k) for k in ("cut", "buffered",
                                                                                            "dropped"))
        pk = [ramsim.Packet(p.arrival_ns, p.length - ETH_HLEN, p.in_port, p.out_port) for p in trace]
        peak, node_peak = ramsim.occupancy_maxima(pk, ref, "IB", 4)
        assert c.in_max_bytes == peak and c.max_node_bytes == node_peak
        assert sum(c.late) == 0 and c.max_enqueue_late_ns == 0


@pytest.mark.parametrize("scheduler", ["rr", "islip"])
@pytest.mark.parametrize("n_ports, p", [(3, 0.5), (5, 0.7), (8, 0.9)])
def test_equals_ramsim_when_events_coincide(scheduler, n_ports, p):
    """Slotted traces of equal frames: arrivals of many inputs at one instant and ports
    released at the instants of arrivals (ramsim's tie rules), B of 2 packets."""
    trace = slotted_trace(n_ports * 10 + int(p * 10), n_ports, 400, p)
    ref = outcomes_of_reference(trace, n_ports, 3000, scheduler=scheduler)
    dec, _ = run(arrivals(trace), IbConfig.uniform(n_ports, PS, 3000, M, scheduler=scheduler))
    assert outcomes(dec) == ref
    assert sum(k == "buffered" for k, _ in ref) > 100


def test_the_comparison_tells_the_schedulers_apart():
    """The equality above is not trivial: rr and iSLIP differ on these traces."""
    trace = slotted_trace(57, 5, 400, 0.7)
    dec, _ = run(arrivals(trace), IbConfig.uniform(5, PS, 3000, M, scheduler="rr"))
    assert outcomes(dec) != outcomes_of_reference(trace, 5, 3000, scheduler="islip")


# --- the lookahead rule ---------------------------------------------------------------------

@pytest.mark.parametrize("scheduler", ["rr", "islip"])
def test_lateness_below_m_timer_lag_and_extra_advances_change_nothing(scheduler):
    """Packets reach the qdisc up to M - 1 ns late, in any order across inputs; the timer
    fires late; dequeues run advance() at random instants: decisions are ramsim's and
    nothing is counted late."""
    rng = random.Random(3)
    trace = ram_trace(4, 2500, 4, 0.95)
    late = [rng.randrange(M) for _ in trace]
    polls = [rng.randrange(trace[-1].arrival_ns + 2 * M) for _ in range(3000)]
    cfg = IbConfig.uniform(4, PS, 4500, M, scheduler=scheduler)
    dec, c = run(arrivals(trace, late), cfg, timer_lag_ns=7_000, polls=polls)
    assert outcomes(dec) == outcomes_of_reference(trace, 4, 4500, scheduler=scheduler)
    assert sum(c.late) == 0 and not any(d.late for d in dec)
    assert c.max_enqueue_late_ns == max(late) < M
    assert sum(c.late_log2) == len(trace)


def test_a_packet_later_than_m_whose_instant_was_decided_is_counted_late():
    """P (input 0 -> output 2, a = 10 us) reaches the node 5 us late with M = 1 us; Q
    (input 1 -> output 2, a = 11 us) is on time. The paper's node: P cuts through at 10
    us, Q waits for output 2 and leaves at 10 us + T. Here instant 11 us is decided at 12
    us (real), when P is not there: Q cuts through at 11 us; P comes at 15 us, is late,
    decided at 11 us: output 2 is busy, P waits and leaves at 11 us + T."""
    m = 1_000
    trace = [ramsim.Packet(10_000, DATA, 0, 2), ramsim.Packet(11_000, DATA, 1, 2)]
    assert outcomes_of_reference(trace, 3, 1500) == [("cut", 10_000), ("buffered", 10_000 + T)]
    dec, c = run(arrivals(trace, [5_000, 0]), IbConfig.uniform(3, PS, 1500, m))
    assert outcomes(dec) == [("buffered", 11_000 + T), ("cut", 11_000)]
    assert [d.late for d in dec] == [True, False]
    assert c.late == [0, 0, 1] and c.max_enqueue_late_ns == 5_000


def test_a_packet_of_an_instant_already_decided_is_late_even_at_that_instant():
    """P (input 0) and Q (input 1) both arrive at 10 us for output 2. The paper's node
    (input order): P cuts through, Q waits. Q is on time, P 3 M late: instant 10 us is
    decided without P (Q cuts through); P comes when 10 us is the last decided instant:
    late, decided at 10 us after Q: waits."""
    trace = [ramsim.Packet(10_000, DATA, 0, 2), ramsim.Packet(10_000, DATA, 1, 2)]
    assert outcomes_of_reference(trace, 3, 1500) == [("cut", 10_000), ("buffered", 10_000 + T)]
    dec, c = run(arrivals(trace, [3 * M, 0]), IbConfig.uniform(3, PS, 1500, M))
    assert outcomes(dec) == [("buffered", 10_000 + T), ("cut", 10_000)]
    assert c.late == [0, 0, 1]


def test_a_late_packet_whose_instant_nothing_decided_after_is_not_counted():
    """Late by 10 M, but nothing after its instant had been decided when it came: it
    changes nothing, and is not counted (the counter counts late decisions, not
    lateness)."""
    trace = [ramsim.Packet(10_000, DATA, 0, 2), ramsim.Packet(10_000 + 20 * M, DATA, 1, 2)]
    dec, c = run(arrivals(trace, [10 * M, 0]), IbConfig.uniform(3, PS, 1500, M))
    assert outcomes(dec) == outcomes_of_reference(trace, 3, 1500) == [("cut", 10_000), ("cut", 10_000 + 20 * M)]
    assert sum(c.late) == 0 and c.max_enqueue_late_ns == 10 * M


def test_random_lateness_spikes_are_detected():
    """A few packets reach the qdisc M..20 M late. On every trace: a packet counted late
    was late by >= M; no late count means ramsim's decisions; and the spikes do change
    decisions somewhere (so the counter is needed)."""
    rng = random.Random(9)
    changed = counted = 0
    for seed in range(12):
        trace = ram_trace(100 + seed, 1500, 4, 0.9)
        late = [rng.randrange(M, 20 * M) if rng.random() < 0.01 else rng.randrange(M // 2) for _ in trace]
        dec, c = run(arrivals(trace, late), IbConfig.uniform(4, PS, 3000, M))
        ref = outcomes_of_reference(trace, 4, 3000)
        assert all(late[k] >= M for k, d in enumerate(dec) if d.late)
        assert sum(c.late) == sum(d.late for d in dec)
        if sum(c.late) == 0:
            assert outcomes(dec) == ref
        counted += sum(c.late) > 0
        changed += outcomes(dec) != ref
    assert counted >= 6 and changed >= 3


# --- stamps and releases ----------------------------------------------------------------------

def test_stamps_are_intended_arrivals_at_the_next_node_released_on_time_when_prop_covers_m():
    """prop >= M + timer lag: every forwarded packet is released at its stamp = departure
    + prop (+ tau towards a host); nothing decided after its stamp."""
    trace = ram_trace(6, 1500, 4, 0.9)
    lag = 3_000
    ports = (PortParams(PS, M + lag), PortParams(PS, 2 * M), PortParams(PS, M + lag, peer_host=True),
             PortParams(PS, 5 * M))
    dec, c = run(arrivals(trace), IbConfig(ports, 4500, M), timer_lag_ns=lag)
    fwd = [(p, d) for p, d in zip(trace, dec) if d.kind != "dropped"]
    assert len(fwd) > 1000
    for p, d in fwd:
        port = ports[p.out_port]
        assert d.stamp_ns == d.departure_ns + port.prop_ns + (p.length * PS // 1000 if port.peer_host else 0)
        assert d.release_ns == d.stamp_ns and d.decided_ns <= d.stamp_ns
    assert sum(c.decided_after_stamp) == 0


def test_links_shorter_than_m_release_late_and_are_counted():
    """prop = 0 < M: every forwarded packet is decided at least M after its departure
    instant (by the timer, 2 us late, or by an enqueue M after it), after its stamp, and
    leaves then: counted per output."""
    trace = ram_trace(7, 1500, 4, 0.9)
    dec, c = run(arrivals(trace), IbConfig.uniform(4, PS, 4500, M), timer_lag_ns=2_000)
    fwd = [d for d in dec if d.kind != "dropped"]
    assert all(d.release_ns == d.decided_ns >= d.departure_ns + M for d in fwd)
    assert any(d.decided_ns == d.departure_ns + M + 2_000 for d in fwd)
    assert sum(c.decided_after_stamp) == len(fwd) == sum(c.cut) + sum(c.buffered)
    assert c.max_decision_lag_ns == 2_000


# --- small pieces -------------------------------------------------------------------------------

def test_late_histogram_buckets():
    assert [late_bucket(v) for v in (0, 1, 2, 3, 4, 1023, 1024, 2**60)] == [0, 0, 1, 1, 2, 9, 10, 47]


# --- the XCP ring ------------------------------------------------------------------------------

def test_xcp_ring_by_hand_the_papers_five_packets_and_one_more():
    """Five packets for output 0 at 0 from inputs 1..5 (B one packet): each finds what
    the ones before it left for output 0: 0 (cut through), T (the first being sent),
    2T, 3T, 4T (T more per packet waiting in a VOQ): interval 0's minimum is 0. Input 0
    -> 0 at 2.5 T (interval 1 of d_e = 2 T) finds the packet served at 2 T half sent
    and those of inputs 4, 5 waiting: 2.5 T. With E = T the five are before the epoch
    and the sixth falls in interval 0. Output 1 has no arrival: its ring stays empty."""
    trace = [ramsim.Packet(0, DATA, i, 0) for i in range(1, 6)] + [ramsim.Packet(5 * T // 2, DATA, 0, 0)]
    cfg = IbConfig.uniform(6, PS, 1500, M, xcp_epoch_ns=0, xcp_interval_ns=2 * T)
    dec, c = run(arrivals(trace), cfg)
    assert outcomes(dec)[5] == ("buffered", 5 * T)
    assert c.xcp == {(0, 0): XcpSlot(0, 5 * DATA, 0, 5, 0), (0, 1): XcpSlot(1, DATA, 5 * T // 2, 1, 0)}
    assert c.xcp_ring(0) == (XcpSlot(0, 5 * DATA, 0, 5, 0), XcpSlot(1, DATA, 5 * T // 2, 1, 0),
                             EMPTY_XCP_SLOT, EMPTY_XCP_SLOT)
    assert c.xcp_ring(1) == (EMPTY_XCP_SLOT,) * 4 and EMPTY_XCP_SLOT == XcpSlot(XCP_NONE, 0, XCP_NONE, 0, 0)
    _, c = run(arrivals(trace), IbConfig.uniform(6, PS, 1500, M, xcp_epoch_ns=T, xcp_interval_ns=2 * T))
    assert c.xcp == {(0, 0): XcpSlot(0, DATA, 5 * T // 2, 1, 0)}
    _, c = run(arrivals(trace), IbConfig.uniform(6, PS, 1500, M))          # ring off
    assert c.xcp == {} and c.xcp_ring(0) == (EMPTY_XCP_SLOT,) * 4
    # B = 0: four dropped, each having found the first one's rest: T
    _, c = run(arrivals(trace[:5]), IbConfig.uniform(6, PS, 0, M, xcp_interval_ns=2 * T))
    assert c.xcp == {(0, 0): XcpSlot(0, 5 * DATA, 0, 5, 4)}


def test_xcp_ring_reuses_a_slot_four_intervals_on():
    """One packet per interval on output 1: the ring keeps the last four intervals, slot
    k % 4."""
    trace = [ramsim.Packet(k * 10 * T, DATA, 0, 1) for k in range(7)]
    _, c = run(arrivals(trace), IbConfig.uniform(3, PS, 1500, M, xcp_interval_ns=10 * T))
    assert sorted(c.xcp) == [(1, k) for k in range(7)]
    assert [s.interval for s in c.xcp_ring(1)] == [4, 5, 6, 3]


@pytest.mark.parametrize("scheduler", ["rr", "islip"])
@pytest.mark.parametrize("voq_split", ["shared", "static"])
@pytest.mark.parametrize("b", [0, 1500, 4500, 1_000_000])
def test_xcp_ring_equals_the_backlogs_of_ramsims_node(scheduler, voq_split, b):
    """Every (output, interval) slot of the mirror (bytes, packets, drops, smallest
    backlog) equals the one derived from ramsim's outcomes alone, on saturated traces
    and on slotted ones (simultaneous events), with an epoch inside the trace."""
    traces = [(ram_trace(11, 2000, 4, 0.9), 4), (slotted_trace(12, 5, 300, 0.7), 5)]
    for trace, n in traces:
        ref = reference(trace, n, b, scheduler=scheduler, voq_split=voq_split)
        pk = [ramsim.Packet(p.arrival_ns, p.length - ETH_HLEN, p.in_port, p.out_port, wire_bytes=p.length)
              for p in trace]
        epoch, d_e = trace[len(trace) // 10].arrival_ns + 17, 7 * T + 3
        cfg = IbConfig.uniform(n, PS, b, M, scheduler=scheduler, voq_split=voq_split, xcp_epoch_ns=epoch,
                               xcp_interval_ns=d_e)
        _, c = run(arrivals(trace), cfg)
        found = backlogs(pk, ref, PS)
        want = ring_slots(pk, ref, found, epoch, d_e)
        assert c.xcp == want
        # not trivial: arrivals find queues (a data packet waiting where one fits), and with a
        # large B some output stays backlogged through a whole interval
        assert len(want) > 40 and min(s.qmin_ns for s in want.values()) == 0
        room = b if voq_split == "shared" else b // n          # one VOQ's share of B
        assert max(found) > (T if room >= DATA else 0)
        assert b < 10**6 or max(s.qmin_ns for s in want.values()) > T


def test_xcp_ring_of_late_packets_is_the_decided_instants():
    """A packet counted late is decided at the last decided instant, and its slot is
    that instant's interval (the kernel's rule; the BPF counts by intended arrival)."""
    m = 1_000
    trace = [ramsim.Packet(0, DATA, 0, 2), ramsim.Packet(10 * T, DATA, 1, 2)]
    late = [50 * T, 0]                      # the first reaches the node after 10 T + M was decided
    dec, c = run(arrivals(trace, late), IbConfig.uniform(3, PS, 1500, m, xcp_interval_ns=5 * T))
    assert dec[0].late and c.late == [0, 0, 1]
    assert c.xcp == {(2, 2): XcpSlot(2, 2 * DATA, 0, 2, 0)}


@pytest.mark.parametrize("kwargs, match", [
    ({"xcp_interval_ns": -1}, "xcp_interval_ns=-1"),
    ({"xcp_epoch_ns": 5}, "xcp_epoch_ns=5: accepted: 0 when xcp_interval_ns is 0"),
    ({"buffer_bytes": -1}, "buffer_bytes=-1"),
    ({"lookahead_ns": 0}, "lookahead_ns=0"),
    ({"scheduler": "pim"}, "scheduler='pim'"),
    ({"voq_split": "dynamic"}, "voq_split='dynamic'"),
])
def test_bad_configuration_is_named(kwargs, match):
    base = {"ports": (PortParams(PS),) * 3, "buffer_bytes": 1500, "lookahead_ns": M}
    with pytest.raises(ValueError, match=match):
        IbConfig(**{**base, **kwargs})
    with pytest.raises(ValueError, match="ports"):
        IbConfig((), 1500, M)
    with pytest.raises(ValueError, match=r"ports\[1\]"):
        IbConfig((PortParams(PS), PortParams(0)), 1500, M)


def test_bad_packets_are_named():
    with pytest.raises(ValueError, match=r"packet 0: ports \(0, 3\)"):
        run([Arrival(0, DATA, 0, 3)], IbConfig.uniform(3, PS, 1500, M))
    with pytest.raises(ValueError, match="timer_lag_ns"):
        run([], IbConfig.uniform(3, PS, 1500, M), timer_lag_ns=-1)
    assert run([Arrival(0, ACK, 0, 1)], IbConfig.uniform(3, PS, 0, M))[0][0].kind == "cut"
