"""The hybrid scheduler's mirror (testbed.optical.hybridsched, the algorithm of
kernel/sch_voq.c's ``hybrid`` mode) against the paper's switch (testbed.optical.eventsim,
written from the paper alone): packet for packet on E1-like traces at every n_e of E1's
k = 4 and k = 8 switches and at every load of the oracle, on crafted cases of the rules
the port model cannot follow, with lateness below and above the lookahead M. The C
itself is held against this mirror in tests/unit/test_voq_kernel.py."""

from __future__ import annotations

import random

import pytest

from testbed.optical import eventsim, hybridsched, ibsched, oracle, traces

PS = 800                       # 10 Gb/s
TAU = 9064 * PS // 1000        # 7251 ns
M = 30_000


def _arrivals(packets, late=None) -> list[ibsched.Arrival]:
    return [ibsched.Arrival(p.arrival_ns, p.length, p.in_port, p.out_port,
                            None if late is None else p.arrival_ns + late[k]) for k, p in enumerate(packets)]


def _outcomes(packets, n_e: int, n_a: int, late=None, **kw):
    dec, c = hybridsched.run(_arrivals(packets, late), hybridsched.HybridConfig.uniform(n_a, PS, n_e, M, **kw))
    return [(d.kind, d.departure_ns) for d in dec], c, dec


def _paper(packets, n_e: int, n_a: int):
    return [(o.kind, o.departure_ns) for o in eventsim.simulate(packets, "hybrid", n_e, n_a, PS)]


@pytest.mark.parametrize("cfg", [c for n_a in (4, 8) for c in oracle.configs(n_a) if c.model == "hybrid"],
                         ids=lambda c: c.label)
def test_mirror_is_the_papers_switch_on_e1_like_traces(cfg):
    pk = traces.e1_like_trace(random.Random(11), 3000, cfg.n_a, cfg.load, PS, lengths=(9064, 9064, 1514, 66))
    got, c, _ = _outcomes(pk, cfg.n_e, cfg.n_a)
    assert got == _paper(pk, cfg.n_e, cfg.n_a)
    st = eventsim.stats(pk, eventsim.simulate(pk, "hybrid", cfg.n_e, cfg.n_a, PS), PS)
    assert c.max_node_bytes == st.max_waiting_bytes
    assert (sum(c.cut), sum(c.buffered), sum(c.dropped)) == (st.cut, st.buffered, st.dropped)


@pytest.mark.parametrize("n_a", [1, 2, 3, 5])
@pytest.mark.parametrize("n_e", [0, 1, "n_a"])
def test_mirror_is_the_papers_switch_on_textbook_traffic(n_a, n_e):
    """Aggregate Poisson arrivals (several per input at one instant possible) at odd port
    counts: ties and simultaneous joins of unequal lengths."""
    n_e = n_a if n_e == "n_a" else n_e
    pk = traces.poisson_trace(random.Random(n_a), 2000, n_a, 1.1, PS, lengths=(9064, 66), exclude_self=False)
    pk = [eventsim.Packet(p.arrival_ns // 1000 * 1000, p.length, p.in_port, p.out_port) for p in pk]  # ties
    pk.sort(key=lambda p: (p.arrival_ns, p.in_port))
    assert _outcomes(pk, n_e, n_a)[0] == _paper(pk, n_e, n_a)


def test_residual_loss_a_buffer_input_released_at_t_is_busy_for_an_arrival_at_t():
    """Section IV's residual loss: n_e = 1; B (input 1) converts until tau; C, back to back
    on input 1, arrives at tau for a busy output and finds the buffer input still busy
    (B "is not yet completely buffered"): dropped."""
    pk = [eventsim.Packet(0, 9064, 0, 0), eventsim.Packet(0, 9064, 1, 0),        # A cut, B converts
          eventsim.Packet(TAU - 100, 9064, 2, 1),                                # G cut: output 1 busy
          eventsim.Packet(TAU, 9064, 1, 1)]                                      # C: dropped
    got, c, _ = _outcomes(pk, 1, 3)
    assert got == _paper(pk, 1, 3)
    assert got == [("cut", 0), ("buffered", TAU), ("cut", TAU - 100), ("dropped", None)]
    assert c.in_dropped == [0, 1, 0] and c.dropped == [0, 1, 0]


def test_an_arrival_at_a_release_goes_before_the_packet_joining_at_that_instant():
    """Output 0 is released at tau, when B ends its bufferisation: E arriving at tau cuts
    through (arrivals before joins), B waits for E (the packet joining at tau is not yet
    in the queue when E checks the output)."""
    pk = [eventsim.Packet(0, 9064, 0, 0), eventsim.Packet(0, 9064, 1, 0),       # A cut, B converts
          eventsim.Packet(TAU, 9064, 2, 0)]                                     # E
    got, _, _ = _outcomes(pk, 2, 3)
    assert got == _paper(pk, 2, 3)
    assert got == [("cut", 0), ("buffered", 2 * TAU), ("cut", TAU)]


def test_an_arrival_cuts_through_while_a_buffered_packet_waits_for_a_buffer_output():
    """The port model's commitment gap: n_e = 1, two buffered packets for outputs 0 and 1;
    the second waits for the buffer output while output 1 is idle, and an arrival for 1
    cuts through in the meantime (the port model would have reserved output 1)."""
    pk = [eventsim.Packet(0, 9064, 0, 0), eventsim.Packet(0, 9064, 1, 1),      # both cut
          eventsim.Packet(10, 9064, 2, 0),                                      # converts, joins 0 at 10 + tau
          eventsim.Packet(TAU + 20, 9064, 3, 1)]                                # output 1 free: cut
    got, _, _ = _outcomes(pk, 1, 4)
    assert got == _paper(pk, 1, 4)
    assert got[2] == ("buffered", 10 + TAU) and got[3] == ("cut", TAU + 20)


def test_fifo_order_is_the_order_of_joining_not_of_arrival():
    """A long packet buffered first joins after a short one buffered later: the short one
    leaves first (eventsim: FIFO by end of bufferisation)."""
    pk = [eventsim.Packet(0, 9064, 0, 0), eventsim.Packet(1, 9064, 1, 0), eventsim.Packet(2, 66, 2, 0)]
    got, _, _ = _outcomes(pk, 2, 3)
    assert got == _paper(pk, 2, 3)
    assert got[2][1] < got[1][1]


def test_lateness_below_m_changes_nothing_and_above_m_is_counted():
    rng = random.Random(4)
    pk = traces.e1_like_trace(random.Random(5), 2000, 4, 0.9, PS)
    on_time = [rng.randrange(M) for _ in pk]
    got, c, _ = _outcomes(pk, 2, 4, on_time)
    assert got == _paper(pk, 2, 4) and sum(c.late) == 0 and c.max_enqueue_late_ns < M
    spikes = [rng.randrange(M, 20 * M) if rng.random() < 0.03 else x for x in on_time]
    _, c, dec = _outcomes(pk, 2, 4, spikes)
    assert sum(c.late) > 0 and sum(d.late for d in dec) == sum(c.late)


def test_stamps_and_releases():
    """A forwarded packet is stamped departure + propagation (+ tau towards a host) and
    released at max(stamp, decision time)."""
    pk = [eventsim.Packet(1000, 9064, 0, 1), eventsim.Packet(1000, 9064, 1, 1)]
    _, _, dec = _outcomes(pk, 1, 2, prop_ns=2 * M, peer_host=True)
    assert [d.stamp_ns for d in dec] == [1000 + 2 * M + TAU, 1000 + TAU + 2 * M + TAU]
    assert all(d.release_ns == max(d.stamp_ns, d.decided_ns) and d.decided_ns >= d.departure_ns + M for d in dec)


@pytest.mark.parametrize("kw,match", [
    ({"n_e": 5}, r"n_e=5: accepted range is 0 <= n_e <= n_a = 4"),
    ({"n_e": -1}, r"n_e=-1"),
    ({"lookahead_ns": 0}, r"lookahead_ns=0: accepted range is lookahead_ns >= 1"),
])
def test_config_refuses_out_of_range_values(kw, match):
    args = {"n_e": 1, "lookahead_ns": M} | kw
    with pytest.raises(ValueError, match=match):
        hybridsched.HybridConfig.uniform(4, PS, args["n_e"], args["lookahead_ns"])
