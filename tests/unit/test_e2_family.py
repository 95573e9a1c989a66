"""E2 family without root: the paper's two path classes (their RTT and ideal throughput
against the paper's own numbers), the scaling of the optical rate and Lmax with the
number of sources, the topology it builds, and the errors of bad definitions."""

from __future__ import annotations

import pytest

from testbed.dilation import TimeDilation
from testbed.errors import DefinitionError
from testbed.families.e2_obs import CLASSES, FRAME, IP_PACKET, MSS, E2Obs
from topologies.obs import CORE, EGRESS, INGRESS, length_for_delay_m
from testbed.units import propagation_delay_s


def values(**over):
    v = {p.name: p.parse(p.default, p.name) for p in E2Obs.params}
    v.update(over)
    return v


def test_the_paper_rtts_and_ideal_throughput():
    # paper, III-A: the ideal aggregate MSS x Wm x N / RTT is ~5.592 Gbit/s for the slow
    # connections at Wm = 512 (N = 80), which makes RTT = 30 ms = 2 x 5 ms + Tmax + offset;
    # III-B: the fast RTO (10.5 ms) equals 2 x 5 ms + Tmax 0.5 ms + offset 0
    slow, fast = CLASSES["slow"], CLASSES["fast"]
    assert slow.rtt_s == pytest.approx(30e-3)
    assert fast.rtt_s == pytest.approx(10.5e-3) and fast.rtt_s == pytest.approx(fast.rto_s)
    assert MSS * 8 * 512 * slow.n_paper / slow.rtt_s == pytest.approx(5.592e9, rel=1e-3)
    assert (slow.n_paper, slow.optical_rate_bps, fast.n_paper, fast.optical_rate_bps) == (80, 10e9, 320, 40e9)


def test_lmax_is_scaled_with_the_sources_and_counted_in_frames():
    slow, fast = CLASSES["slow"], CLASSES["fast"]
    assert (MSS, IP_PACKET, FRAME) == (512, 552, 566)
    # at full scale the frame-byte Lmax closes after as many segments as the paper's
    assert slow.lmax_frame_bytes(1) == round(10e6 * FRAME / IP_PACKET)
    paper_segments = -(-fast.lmax_bytes // IP_PACKET)                 # 46 datagrams reach 25 KB
    assert -(-fast.lmax_frame_bytes(1) // FRAME) == paper_segments
    # divided by the scale; the scales keep at least 4 frames in Lmax
    assert fast.lmax_frame_bytes(10) == round(25_000 * FRAME / IP_PACKET / 10)
    assert fast.scales() == [1, 2, 4, 5, 8, 10] and slow.scales() == [1, 2, 4, 5, 8, 10, 16, 20, 40, 80]
    assert (slow.sources(10), fast.sources(10)) == (8, 32)


def test_the_topology_scales_the_optical_rate_and_puts_the_propagation_on_the_core_link():
    v = values(path_class="fast", scale=10)
    topo = E2Obs.topology(v, TimeDilation(1000))
    assert len(topo.hosts()) == 64 and sorted(topo.switches()) == sorted([INGRESS, CORE, EGRESS])
    opts = {s: topo.nodeInfo(s) for s in topo.switches()}
    assert opts[INGRESS]["role"] == "edge" and opts[CORE]["role"] == "core" and opts[EGRESS]["role"] == "edge"
    assert all(o["rate_bps"] == pytest.approx(40e9 / 10) for o in opts.values())
    assert all(o["tdf"] == 1000 for o in opts.values())
    assert opts[INGRESS]["arch"] == E2Obs.edge_spec(v) == f"obs-edge:500000,{CLASSES['fast'].lmax_frame_bytes(10)},0"
    links = {frozenset((a, b)): i for a, b, i in topo.links(withInfo=True)}
    core_link = links[frozenset((CORE, EGRESS))]
    assert propagation_delay_s(core_link["length_m"]) == pytest.approx(5e-3)
    assert links[frozenset((INGRESS, CORE))]["length_m"] == 0
    access = links[frozenset(("src1", INGRESS))]
    assert access["rate_bps"] == 100e6 and access["length_m"] == 0 and access["mtu"] == IP_PACKET
    assert "rate_bps" not in links[frozenset((EGRESS, "snk1"))]
    assert length_for_delay_m(5e-3) == pytest.approx(1.0337e6, rel=1e-3)


def test_the_core_spec_carries_pl_in_parts_per_billion_and_the_seed():
    assert E2Obs.core_spec(values(pl=1e-3), 7) == "obs-core:1000000,7"
    assert E2Obs.core_spec(values(pl=1e-5), -1) == f"obs-core:10000,{2**64 - 1}"


def test_profile_options_are_the_class_rto_one_segment_and_wm():
    from testbed.units import Dim, Quantity

    o = E2Obs.profile_options(values(path_class="fast", wm=64))
    assert o["init_rto"].si == pytest.approx(10.5e-3) and "rto_min" not in o  # the profile's one jiffy
    assert o["initial_window"] == 1 and o["max_window"] == 64
    o = E2Obs.profile_options(values(path_class="slow", rto_min=Quantity(30e-3, Dim.TIME)))
    assert o["init_rto"].si == pytest.approx(30e-3) and o["rto_min"].si == pytest.approx(30e-3)


class _Defn:
    """The parts of a Definition that E2Obs.check reads."""

    def __init__(self, **over):
        self.cca, self.source = None, "test.toml"
        self._v = values(**over)

    def points(self):
        class P:
            pass
        p = P()
        p.values = self._v
        return [p]


@pytest.mark.parametrize("over,key,text", [
    ({"path_class": "fast", "scale": 16}, "params.scale", "one of 1, 2, 4, 5, 8, 10 for path_class 'fast'"),
    ({"path_class": "slow", "scale": 3}, "params.scale", "one of 1, 2, 4, 5, 8, 10, 16, 20, 40, 80 for path_class"),
])
def test_bad_sizes_name_key_value_and_range(over, key, text):
    with pytest.raises(DefinitionError) as err:
        E2Obs.check(_Defn(**over))  # type: ignore[arg-type]
    assert err.value.key == key and text in err.value.accepted


def test_a_warmup_not_below_the_duration_is_refused():
    from testbed.units import Dim, Quantity

    with pytest.raises(DefinitionError) as err:
        E2Obs.check(_Defn(warmup=Quantity(1.0, Dim.TIME), duration=Quantity(1.0, Dim.TIME)))  # type: ignore[arg-type]
    assert err.value.key == "params.warmup"


@pytest.mark.parametrize("path_class,scale", [("slow", 1), ("fast", 1)])
def test_every_node_name_of_the_papers_full_size_is_a_valid_node_name(path_class, scale):
    from testbed.names import check_node_name

    topo = E2Obs.topology(values(path_class=path_class, scale=scale), TimeDilation(1000))
    for name in [*topo.hosts(), *topo.switches()]:
        check_node_name(name)
