"""E4 family without root: the paper's Table 2 (buffers and link speeds) against the
paper's own numbers, the RTTs the topology gives before and after the move, the time
dilation per point, and the definitions it refuses (the 10 Gbit/s x 1000 ms case the
paper omits included)."""

from __future__ import annotations

import math

import pytest

from testbed import definition
from testbed.dilation import TimeDilation
from testbed.errors import DefinitionError
from testbed.families.e4_flowmove import MAX_TCP_WINDOW, E4FlowMove, link_rate_for
from testbed.family import link_names, topology_features
from testbed.features import Feature
from testbed.units import Dim, Quantity
from topologies import flowmove as fm


def values(**over):
    v = {p.name: p.parse(p.default, p.name) for p in E4FlowMove.params}
    for k, x in over.items():
        param = next(p for p in E4FlowMove.params if p.name == k)
        v[k] = param.parse(x, k)
    return v


def load(tmp_path, sets: dict[str, str], run: str = "") -> definition.Definition:
    body = "[experiment]\nname = \"e4-test\"\nfamily = \"e4-flowmove\"\n[params]\n" + \
        "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in sets.items()) + run
    path = tmp_path / "e4-test.toml"
    path.write_text(body)
    return definition.load(str(path))


@pytest.mark.parametrize("limit, buffer_mb, link", [("100 Mbit/s", 0.125, 622.08e6), ("1 Gbit/s", 1.25, 2.488e9),
                                                    ("10 Gbit/s", 12.5, 39.813e9)])
def test_table2_buffers_and_link_speeds_at_10_ms(limit, buffer_mb, link):
    # the paper's Table 2 (RTT 10 ms): buffer = rate x RTT, links over-provisioned
    v = values(limit_rate=limit, rtt="10 ms")
    assert E4FlowMove.buffer_bytes(v) == pytest.approx(buffer_mb * 1e6)
    assert E4FlowMove.link_rate(v) == pytest.approx(link)
    rtt_b, rtt_a = E4FlowMove.rtts(v)
    # the paper's new theoretical rate: buffer / RTT-after = 1.667 x the limit
    assert 8 * E4FlowMove.buffer_bytes(v) / rtt_a == pytest.approx(Quantity.parse(limit, Dim.RATE).si / 0.6)
    assert (rtt_b, rtt_a) == pytest.approx((10e-3, 6e-3))


def test_other_limits_get_the_1_gbit_overprovisioning():
    assert link_rate_for(2e9, 0) == pytest.approx(2 * 2.488e9)
    assert link_rate_for(1e9, 5e9) == 5e9


@pytest.mark.parametrize("rtt", ["10 ms", "100 ms", "1000 ms"])
def test_the_topology_gives_the_paper_rtts_before_and_after(rtt):
    v = values(rtt=rtt)
    D = TimeDilation(50)
    topo = E4FlowMove.topology(v, D)
    delay = {}
    for a, b, info in topo.links(sort=True, withKeys=False, withInfo=True):
        s1, s2 = info.get("shape1", info.get("shape")), info.get("shape2", info.get("shape"))
        delay[(a, b)], delay[(b, a)] = s1.delay_s, s2.delay_s
    r = Quantity.parse(rtt, Dim.TIME).si
    ip_one_way = delay[(fm.R1, fm.R2)] + delay[(fm.R2, fm.R3)] + delay[(fm.SENDER, fm.R1)] + delay[(fm.R3, fm.RECEIVER)]
    ack_one_way = delay[(fm.RECEIVER, fm.R3)] + delay[(fm.R3, fm.R2)] + delay[(fm.R2, fm.R1)] + delay[(fm.R1, fm.SENDER)]
    optical_one_way = delay[(fm.SENDER, fm.R1)] + delay[(fm.R1, fm.R3)] + delay[(fm.R3, fm.RECEIVER)]
    assert ip_one_way + ack_one_way == pytest.approx(D.time_to_emulation(r))
    assert optical_one_way + ack_one_way == pytest.approx(D.time_to_emulation(0.6 * r))
    assert delay[(fm.R3, fm.R1)] == 0  # nothing travels r3 -> r1
    window_packets = E4FlowMove.buffer_bytes(v) / 1448
    for _, _, info in topo.links(sort=True, withKeys=False, withInfo=True):
        shape = info.get("shape1", info.get("shape"))
        assert shape.rate_bps == pytest.approx(2.488e9 / 50)
        assert shape.queue_packets >= 2 * window_packets  # netem holds the whole window
    assert fm.RECEIVER_LINK in link_names(topo) and fm.OPTICAL_LINK in link_names(topo)
    assert {Feature.NETNS, Feature.HTB, Feature.NETEM} <= topology_features(topo)


def test_the_link_limited_variant_puts_a_fifo_at_limit_rate_on_both_of_r1s_ports_towards_the_receiver():
    v = values(limiter="link", queue=100)
    topo = E4FlowMove.topology(v, TimeDilation(50))
    links = {(a, b): i for a, b, i in topo.links(sort=True, withKeys=False, withInfo=True)}
    for peer in (fm.R2, fm.R3):  # the IP and the optical path: the same bottleneck before and after the move
        out = links[(fm.R1, peer)]["shape1"]
        assert out.rate_bps == pytest.approx(1e9 / 50) and out.queue_packets == 100
        assert out.delay_s == 0 and not out.needs_netem  # a plain FIFO at a router
    assert links[(fm.SENDER, fm.R1)]["shape"].rate_bps == pytest.approx(2.488e9 / 50)
    assert E4FlowMove.buffer_bytes(v) == 4 * 1_250_000  # the window never binds
    # the buffer-limited network keeps r1's ports at the over-provisioned rate, without delay
    r1_out = {(a, b): i for a, b, i in E4FlowMove.topology(values(), TimeDilation(50)).links(
        sort=True, withKeys=False, withInfo=True)}[(fm.R1, fm.R3)]["shape1"]
    assert r1_out.rate_bps == pytest.approx(2.488e9 / 50) and r1_out.delay_s == 0


def test_time_dilation_per_point_follows_the_limit_rate(tmp_path):
    defn = load(tmp_path, {"emulated_rate": "20 Mbit/s"}, run="[sweep]\nlimit_rate = [\"100 Mbit/s\", "
                "\"1 Gbit/s\", \"10 Gbit/s\"]\n[run]\ntdf = 2\n")
    tdfs = [E4FlowMove.point_tdf(p.values, defn.tdf).factor for p in defn.points()]
    assert tdfs == pytest.approx([2 * 5, 2 * 50, 2 * 500])
    slow = values(limit_rate="10 Mbit/s")  # never below 1 (x tdf)
    assert E4FlowMove.point_tdf(slow, TimeDilation(1)).factor == 1


def test_the_case_the_paper_omits_is_skipped_with_the_reason(tmp_path):
    # 10 Gbit/s x 1000 ms: a 1.25 GB window, above TCP's largest (RFC 7323): the runner
    # skips the point with this reason and runs the rest of the sweep
    defn = load(tmp_path, {"rtt": "1000 ms"}, run="[sweep]\nlimit_rate = [\"1 Gbit/s\", \"10 Gbit/s\"]\n")
    reasons = [E4FlowMove.infeasible(p.values, defn.tdf) for p in defn.points()]
    assert reasons[0] is None  # 125 MB: runs
    assert "RFC 7323" in reasons[1] and "8.59 Gbit/s" in reasons[1]
    assert 1.25e9 > MAX_TCP_WINDOW
    big = values(limit_rate="2 Gbit/s", rtt="1000 ms")  # 250 MB: TCP could, the guest cannot
    assert "guest" in E4FlowMove.infeasible(big, TimeDilation(1))


@pytest.mark.parametrize("sets, key", [
    ({"rtt_ratio": 0.5}, "params.rtt_ratio"),
    ({"link_rate": "1.5 Gbit/s"}, "params.link_rate"),       # below limit / 0.6 after the move
    ({"before": "50 ms"}, "params.before"),                   # fewer than 15 RTTs before the move
    ({"after": "100 ms"}, "params.after"),
    ({"limit_rate": "1 Mbit/s"}, "params.limit_rate"),        # a window below 4 segments
    ({"emulated_rate": "10 kbit/s"}, "params.emulated_rate"),
])
def test_bad_definitions_name_their_key(tmp_path, sets, key):
    with pytest.raises(DefinitionError) as err:
        load(tmp_path, sets)
    assert err.value.key == key


def test_automatic_phases_scale_with_the_rtt():
    assert E4FlowMove.phases(values(rtt="10 ms")) == pytest.approx((2.0, 2.0))
    assert E4FlowMove.phases(values(rtt="1000 ms")) == pytest.approx((25.0, 20.0))
    assert E4FlowMove.phases(values(before="3 s", after="4 s")) == pytest.approx((3.0, 4.0))


def test_time_to_reach_needs_three_bins_in_a_row():
    from testbed.families._e4_measure import time_to_reach

    # the first bin after the move is high (both paths deliver), then a dip, then recovery
    rates = [2.0, 0.5, 0.9, 1.7, 1.7, 1.8, 1.7]
    assert time_to_reach(rates, 1.6, 0.01) == pytest.approx(0.04)
    assert math.isnan(time_to_reach([2.0, 0.5, 1.7, 1.7], 1.6, 0.01))
    assert time_to_reach([1.7] * 3, 1.6, 0.01) == pytest.approx(0.01)


def test_the_move_phase_is_drawn_per_repetition_and_the_flow_leaves_room_for_it():
    v = values()
    phases = [E4FlowMove.move_phase(v, seed) for seed in range(1000, 1010)]
    assert all(0 <= p < 1 for p in phases) and len(set(phases)) == 10
    assert E4FlowMove.move_phase(v, 1003) == phases[3]  # the seed decides
    assert E4FlowMove.move_phase(values(phase="zero"), 1003) == 0
    assert math.isnan(E4FlowMove.move_phase(values(trigger="threshold"), 1003))
    assert E4FlowMove.duration(v) == pytest.approx(2.0 + 0.01 + 2.0)  # before + one RTT + after


def test_a_dilation_beyond_the_bound_is_refused_at_validation(tmp_path):
    with pytest.raises(DefinitionError) as err:
        load(tmp_path, {"limit_rate": "100 Gbit/s", "rtt": "1 ms", "emulated_rate": "100 kbit/s"},
             run="[run]\ntdf = 2\n")  # D = 2 x 1e6
    assert err.value.key == "params.emulated_rate"
