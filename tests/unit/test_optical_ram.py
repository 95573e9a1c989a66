"""E5's optical RAM port models (ob, sb, wcsb) against the paper's reference simulator
(testbed/optical/ramsim.py, written from Alparslan, Arakawa, Murata independently of the
port models), packet for packet (no root; tests/bpf/test_optswitch.py runs the BPF
program on the same traces; the traces and the reference are tests/optical_ram_cases.py).
"""

from __future__ import annotations

import pytest
from optical_ram_cases import (ARCHS, DATA, KINDS, PS, Packet, ack_flood_trace, long_queue_trace, max_waiting,
                               ram_trace, reference)

from testbed.optical import layout
from testbed.optical.architectures import REGISTRY
from testbed.optical.layout import BUFFER, CUT, DROP, PortConfig

def run_model(trace: list, arch: str, n_a: int, buffer_bytes: int):
    """(decisions, model) of the registry's reference model of ``arch:buffer_bytes``."""
    ports = [PortConfig(PS) for _ in range(n_a)]
    m = REGISTRY.assignment(arch, {"buffer_bytes": buffer_bytes}).reference(ports)
    return [m.offer(p.arrival_ns, p.length, p.out_port) for p in trace], m


@pytest.mark.parametrize("arch", sorted(ARCHS))
@pytest.mark.parametrize("buffer_bytes", [0, 1000, 1500, 3000, 7500, 15000])
@pytest.mark.parametrize("seed", [1, 2])
def test_port_model_equals_the_paper_reference_packet_for_packet(arch, buffer_bytes, seed):
    # saturated input links (load 1) fill the larger buffers too
    trace = ram_trace(seed, n=4000, load=0.9 if buffer_bytes <= 3000 else 1.0)
    got, m = run_model(trace, arch, 4, buffer_bytes)
    want = reference(trace, arch, 4, buffer_bytes)
    assert m.occ_overflow == 0, "the trace waits more packets than the occupancy slots hold: not a test of exactness"
    for i, (g, w, p) in enumerate(zip(got, want, trace)):
        assert (KINDS[g.kind], g.dep_ns) == (w.kind, w.departure_ns), f"packet {i} {p}: model {g} vs paper {w}"
    kinds = {k: sum(1 for g in got if g.kind == k) for k in KINDS}
    # Every point exercises the decision: drops always; buffering once B holds an ACK
    # (40 B), never for B = 0.
    assert kinds[DROP] > 10, kinds
    assert (kinds[BUFFER] > 30) == (buffer_bytes > 0), kinds


def test_a_one_packet_buffer_holds_one_waiting_packet_while_another_is_sent():
    """The paper's example (III-B-2): B = 1 packet; 5 packets for one output at once ->
    one is sent, one waits, three are dropped; the buffered one leaves when the first
    has been sent. With the frame's 14 B the IP packet (1500 B) is what B counts."""
    inputs = range(5)
    trace = [Packet(0, DATA, i, 5) for i in inputs]
    got, _ = run_model(trace, "ob", 6, 1500)
    tau = layout.tau_ns(DATA, PS)
    assert [(g.kind, g.dep_ns) for g in got] == [(CUT, 0), (BUFFER, tau), (DROP, None), (DROP, None),
                                                (DROP, None)]
    assert [(o.kind, o.departure_ns) for o in reference(trace, "ob", 6, 1500)] == \
        [("cut", 0), ("buffered", tau), ("dropped", None), ("dropped", None), ("dropped", None)]
    # one byte less and the waiting packet does not fit
    assert [g.kind for g in run_model(trace, "ob", 6, 1499)[0]] == [CUT, DROP, DROP, DROP, DROP]


def test_shared_buffers_pool_the_node_and_wcsb_is_one_links_worth():
    """Three packets wait for three different outputs: OB (B each) and SB (ports x B)
    admit them all, WCSB (B for the node) only the first."""
    trace = [Packet(0, DATA, 0, 3), Packet(0, DATA, 1, 4), Packet(0, DATA, 2, 5),
             Packet(10, DATA, 3, 3), Packet(10, DATA, 4, 4), Packet(10, DATA, 5, 5)]
    for arch, want in (("ob", [BUFFER] * 3), ("sb", [BUFFER] * 3), ("wcsb", [BUFFER, DROP, DROP])):
        got, _ = run_model(trace, arch, 6, 1500)
        assert [g.kind for g in got[3:]] == want, arch
        assert [o.kind for o in reference(trace, arch, 6, 1500)[3:]] == [KINDS[k] for k in want], arch


def test_occupancy_slots_free_when_their_packet_left_not_in_turn():
    """SB at 45 kB on NSFNET overflowed 256 slots used round-robin (docs/e5.md,
    "Occupancy slots at 45 kB"). A long queue at one output (267 packets wait at once,
    more than those 256) while 1 545 packets are buffered, most of them ACKs that wait one
    ACK time: the model finds a free slot for each, merges nothing, and decides as the
    paper's node, packet for packet, drops included (B = 50 kB per link binds)."""
    trace = long_queue_trace(hot_frames=80)
    got, m = run_model(trace, "sb", 8, 50_000)
    want = reference(trace, "sb", 8, 50_000)
    assert 256 < max_waiting(trace, want) < layout.OCC_SLOTS
    assert sum(g.kind == BUFFER for g in got) > layout.OCC_SLOTS
    assert m.occ_overflow == 0
    assert [(KINDS[g.kind], g.dep_ns) for g in got] == [(w.kind, w.departure_ns) for w in want]
    assert sum(w.kind == "dropped" for w in want) > 10


def test_more_packets_waiting_than_slots_merge_into_an_upper_bound():
    """1 200 ACKs wait at once at one output (7 inputs flood it), more than OCC_SLOTS:
    the overflowing packets are merged (counted), the occupancy is an upper bound, and
    with a buffer that the bound does not reach (SB, 8 x 15 kB) every decision is still
    the paper's node's."""
    trace = ack_flood_trace()
    got, m = run_model(trace, "sb", 8, 15_000)
    want = reference(trace, "sb", 8, 15_000)
    assert max_waiting(trace, want) > layout.OCC_SLOTS
    # at least the packets beyond the slots merge (more: a merged slot frees at its latest departure)
    assert m.occ_overflow >= max_waiting(trace, want) - layout.OCC_SLOTS > 0
    assert [(KINDS[g.kind], g.dep_ns) for g in got] == [(w.kind, w.departure_ns) for w in want]
