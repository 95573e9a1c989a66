"""The Python reference of the optical port model and the route helpers (no root)."""

from __future__ import annotations

import random

import pytest

from testbed.errors import DefinitionError
from testbed.optical import layout
from testbed.optical.architectures import REGISTRY, from_model
from testbed.optical.layout import BUFFER, CUT, DROP, PortConfig
from testbed.optical.model import FifoModel, PortModel, erlang_b1
from testbed.optical.routes import next_hops, uniformity_p_value

PS = layout.ps_per_byte(10e9)
TAU = layout.tau_ns(9064, PS)


def _sw(model: str, n_e: int = 0, n: int = 2) -> PortModel:
    return from_model(model, n_e).reference([PortConfig(PS) for _ in range(n)])


def test_tau_of_jumbo_frame_at_10g():
    assert PS == 800 and TAU == 7251


def test_all_optical_cuts_through_or_drops():
    sw = _sw("all-optical")
    assert [sw.offer(t, 9064, 0).kind for t in (0, 100, TAU, TAU + 1)] == [CUT, DROP, CUT, DROP]
    assert sw.offer(0, 9064, 1).kind == CUT  # another output is independent


def test_hybrid_buffers_then_drops_when_no_buffer_input():
    sw = _sw("hybrid", 1)
    d = [sw.offer(t, 9064, 0) for t in (0, 10, 20)]
    assert [x.kind for x in d] == [CUT, BUFFER, DROP]
    assert d[1].dep_ns == 10 + TAU  # OE done, output free at TAU
    assert sw.state[0].max_occ_bytes == 9064


def test_electronic_store_and_forward_fifo_never_drops():
    sw = _sw("electronic")
    d = [sw.offer(t, 9064, 0) for t in (0, 10, 20)]
    assert [x.kind for x in d] == [BUFFER] * 3
    assert [x.dep_ns for x in d] == [TAU, 2 * TAU, 3 * TAU]


def test_peer_host_stamp_includes_tail():
    p = PortConfig(PS, prop_ns=50, peer_host=True)
    d = from_model("all-optical", 0).reference([p]).offer(1000, 9064, 0)
    assert d.stamp(p) == 1000 + 50 + TAU


def test_invalid_parameters_are_rejected():
    with pytest.raises(DefinitionError, match="model"):
        _sw("optical")
    with pytest.raises(DefinitionError, match="n_e"):
        _sw("hybrid", 33)
    with pytest.raises(ValueError):
        layout.ps_per_byte(0)


def test_erlang_and_chi_square():
    assert erlang_b1(1.0) == 0.5
    assert uniformity_p_value([25, 25, 25, 25]) == pytest.approx(1.0)
    # chi-square 12.0 with 3 degrees of freedom
    assert uniformity_p_value([40, 20, 20, 20]) == pytest.approx(0.00738, abs=1e-5)
    with pytest.raises(ValueError):
        uniformity_p_value([0, 0])


def test_next_hops_equal_cost_and_hosts_do_not_relay():
    # h1 - s1 = {m1, m2} = s2 - h2, plus h3 on s1
    adj = {"h1": [(0, "s1")], "h2": [(0, "s2")], "h3": [(0, "s1")],
           "s1": [(0, "h1"), (1, "m1"), (2, "m2"), (3, "h3")],
           "m1": [(0, "s1"), (1, "s2")], "m2": [(0, "s1"), (1, "s2")], "s2": [(0, "m1"), (1, "m2"), (2, "h2")]}
    hops = next_hops(adj, "h2", transit={"s1", "s2", "m1", "m2"})
    assert hops["s1"] == [1, 2] and hops["m1"] == [1] and hops["s2"] == [2] and hops["h1"] == [0]
    assert next_hops(adj, "h1", transit={"s1", "s2", "m1", "m2"})["s1"] == [0]


def test_latency_buckets_round_trip():
    for v in (0, 7, 8, 100, 12345, 10**9):
        b = layout.late_bucket(v)
        assert layout.bucket_upper_ns(b) >= v
        assert b == 0 or layout.bucket_upper_ns(b - 1) < v


def test_hybrid_buffer_input_released_at_an_arrival_is_still_busy():
    """The paper's residual loss (section IV): ties go against the arrival for buffer
    inputs, not for outputs. Same verdicts in the independent simulator read as the
    kernel must (outputs claimed at buffering); the paper's own switch lets the third
    packet cut through while the second still converts, and then buffers the fourth."""
    from testbed.optical import eventsim

    trace = [(0, 9064, 0, 0), (100, 9064, 0, 1), (TAU, 9064, 0, 0), (100 + TAU, 9064, 0, 1)]
    sw = _sw("hybrid", 2)
    kinds = [sw.offer(t, ln, o).kind for t, ln, o, _ in trace]
    assert kinds == [CUT, BUFFER, BUFFER, DROP]
    pkts = [eventsim.Packet(t, ln, i, o) for t, ln, o, i in trace]
    sim = eventsim.simulate(pkts, "hybrid", 2, 2, PS, claim_on_buffering=True)
    assert [o.kind for o in sim] == ["cut", "buffered", "buffered", "dropped"]
    assert [o.kind for o in eventsim.simulate(pkts, "hybrid", 2, 2, PS)] == ["cut", "buffered", "cut", "buffered"]
    sw = _sw("all-optical")  # an output released at t is free for an arrival at t
    assert [sw.offer(t, 9064, 0).kind for t in (0, TAU)] == [CUT, CUT]


def test_hybrid_buffer_output_is_reserved_only_while_it_emits():
    sw = _sw("hybrid", 1, n=3)
    tau_s = layout.tau_ns(64, PS)
    d = [sw.offer(t, ln, o) for t, ln, o in ((0, 9064, 0), (100, 64, 0), (200, 64, 1), (210, 64, 1))]
    assert [x.kind for x in d] == [CUT, BUFFER, CUT, BUFFER]
    assert d[1].dep_ns == TAU and d[3].dep_ns == 210 + tau_s  # output 1's packet does not wait for output 0's
    assert sw.bout[0] == [(210 + tau_s, 210 + 2 * tau_s), (TAU, TAU + tau_s)]  # sorted calendar


# ---- fifo: store-and-forward with a delay bound (E5's edge nodes) ----

def _fifo(max_wait_ns: int, n: int = 2, tdf: float = 1.0) -> PortModel:
    return REGISTRY.assignment("fifo", {"max_wait_ns": max_wait_ns}).reference([PortConfig(PS) for _ in range(n)],
                                                                               tdf=tdf)


def test_fifo_admits_a_wait_of_exactly_max_wait_and_drops_longer_ones():
    """Five packets at once for one output, max_wait = 2 tau, by hand: each is received
    at tau; they would leave at tau, 2 tau, 3 tau, 4 tau, 5 tau, i.e. wait 0, tau,
    2 tau (the tie: admitted), 3 tau, 4 tau (dropped). One ns less and the third goes."""
    sw = _fifo(2 * TAU)
    got = [sw.offer(0, 9064, 0) for _ in range(5)]
    assert [(d.kind, d.dep_ns) for d in got] == [(BUFFER, TAU), (BUFFER, 2 * TAU), (BUFFER, 3 * TAU),
                                                 (DROP, None), (DROP, None)]
    assert (sw.state[0].buffered, sw.state[0].dropped, sw.state[0].out_free_ns) == (3, 2, 4 * TAU)
    sw = _fifo(2 * TAU - 1)
    assert [sw.offer(0, 9064, 0).kind for _ in range(5)] == [BUFFER, BUFFER, DROP, DROP, DROP]


def test_fifo_drop_leaves_the_output_as_it_was():
    """A dropped packet does not reserve the output: the next arrival's departure is
    computed from the last admitted packet's, and outputs are independent."""
    sw = _fifo(0)
    assert sw.offer(0, 9064, 0).dep_ns == TAU        # waits 0: admitted, output busy until 2 tau
    assert sw.offer(10, 9064, 0).kind == DROP        # would leave at 2 tau, received at 10 + tau
    assert sw.state[0].out_free_ns == 2 * TAU
    assert sw.offer(TAU, 9064, 0).dep_ns == 2 * TAU  # received exactly when the output frees: no wait
    assert sw.offer(10, 9064, 1).dep_ns == 10 + TAU  # another output


def test_fifo_with_a_long_bound_is_electronic_and_works_in_the_units_it_is_given():
    rng = random.Random(4)
    trace = sorted((rng.randrange(0, 40 * TAU), rng.choice((9064, 64)), rng.randrange(2)) for _ in range(200))
    fifo, elec = _fifo(10**12), _sw("electronic")
    assert [fifo.offer(*p) for p in trace] == [elec.offer(*p) for p in trace]
    # a node at D = 20: the model is given the emulation value, paper ns x D
    assert _fifo(250_000_000, tdf=20).max_wait_ns == 5_000_000_000  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="max_wait_ns -1 < 0"):
        FifoModel([PortConfig(PS)], -1)
