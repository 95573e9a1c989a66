"""E2 family without root: the paper's two path classes (their RTT and ideal throughput
against the paper's own numbers), the scaling of the optical rate and Lmax with the
number of sources, the topology it builds, and the errors of bad definitions."""

from __future__ import annotations

import csv

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
    from testbed.optical.layout import MAX_PORTS

    # Lmax keeps 4 frames at scales up to 10 (fast); N / scale + 1 ports fit a node
    assert fast.scales() == [s for s in (1, 2, 4, 5, 8, 10) if 320 // s + 1 <= MAX_PORTS]
    assert slow.scales() == [s for s in (1, 2, 4, 5, 8, 10, 16, 20, 40, 80) if 80 // s + 1 <= MAX_PORTS]
    assert 10 in fast.scales() and 10 in slow.scales()
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
    ({"path_class": "fast", "scale": 16}, "params.scale", "one of 8, 10 for path_class 'fast'"),
    ({"path_class": "fast", "scale": 5}, "params.scale", "one of 8, 10 for path_class 'fast'"),       # 65 ports
    ({"path_class": "slow", "scale": 3}, "params.scale", "one of 2, 4, 5, 8, 10, 16, 20, 40, 80 for path_class"),
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


def test_summarise_writes_the_point_files_and_exactly_the_declared_metrics(tmp_path):
    """summarise on recorded measurements (no kernel): paper units, the traced source's
    cwnd, the assembly-delay histogram, the per-source throughput in the window."""
    from types import SimpleNamespace

    from testbed.cc.lossdetect import LossDetection
    from testbed.families import e2_obs
    from testbed.optical.obscore import HoldingDelay
    from testbed.results import write_csv, write_json
    from testbed.traffic import Window

    D = TimeDilation(1000)
    v = values(path_class="slow", scale=40, wm=64, pl=0.1)         # 2 sources
    ctx = SimpleNamespace(dir=tmp_path, tdf=D,
                          write_csv=lambda n, rows: write_csv(tmp_path / n, rows),
                          write_json=lambda n, d: write_json(tmp_path / n, d))
    write_json(tmp_path / "fidelity.json", {"packets": 10, "p99_ns": 2000, "max_ns": 5000})
    write_json(tmp_path / "machine.json", {"wall_s": 50.0, "emulation_s": 500.0})
    sample = SimpleNamespace(t_s=100.0 + 0.05 * 1000, event="rto", cwnd=1, ssthresh=32, ca_state="loss")
    tcp = LossDetection(rto=3, fast=1, rto_in_recovery=0, spurious_rto=0, spurious_fast=0, loss_probes=0,
                        retrans_segs=40, fast_retrans_segs=5, slow_start_retrans_segs=30,
                        spurious_retrans_segs=2, syn_timeouts=0)
    hold = HoldingDelay(rows=((19_000_000_000, 20_000_000_000, 90), (20_000_000_000, 21_000_000_000, 10)),
                        count=100, early=0, max_ns=20_500_000_000, sum_ns=1_950_000_000_000, over=0)
    fp = SimpleNamespace(ctx=ctx, values=v, run=SimpleNamespace(t0=100.0), measured={
        "edge": {"bursts": 50, "closed_time": 48, "closed_volume": 2, "packets": 1000, "bytes": 566_000,
                 "ctrl_packets": 50, "drops": 0},
        "core": {"announced": 50, "bursts_lost": 5, "packets_lost": 100}, "holding": hold, "tcp": tcp,
        "tcp_per_source": {}, "cwnd": [sample]})
    window = Window(warmup_s=0.2, length_s=0.4)
    stats = {"snk1": {"window_bytes": 10_000}, "snk2": {"window_bytes": 30_000}}
    result = SimpleNamespace(window=window, stats=stats,
                             series=lambda g, host: [{"t_s": 0.0, "bytes": 7}, {"t_s": 0.01, "bytes": 9}])
    row = e2_obs.summarise(fp, result)  # type: ignore[arg-type]
    assert set(row) == {m.name for m in E2Obs.metrics}
    assert row["throughput_per_source_bps"] == pytest.approx(8 * 20_000 / 0.4)
    assert row["throughput_bps"] == pytest.approx(8 * 20_000 / 0.4 * 80)
    assert row["segments_per_burst"] == 20 and row["segments_per_source_per_burst"] == 10
    assert (row["bursts_lost"], row["loss_events_rto"], row["loss_events_fast"]) == (5, 3, 1)
    assert row["assembly_delay_p50_s"] == pytest.approx(20e-3, rel=0.06)       # 20 s emulation / D
    assert row["lateness_p99_s"] == pytest.approx(2e-9) and row["paper_s_per_wall_s"] == pytest.approx(0.01)
    cwnd = list(csv.DictReader(open(tmp_path / "cwnd.csv")))
    assert cwnd == [{"t_s": "0.05", "src": "src1", "event": "rto", "cwnd": "1", "ssthresh": "32",
                     "ca_state": "loss"}]
    series = list(csv.DictReader(open(tmp_path / "throughput_series.csv")))
    assert [(r["t_s"], r["src"], r["bytes"]) for r in series[:2]] == [("0.01", "src1", "7"), ("0.02", "src1", "9")]
    hist = list(csv.DictReader(open(tmp_path / "assembly_delay.csv")))
    assert float(hist[0]["lo_s"]) == pytest.approx(0.019) and hist[1]["packets"] == "10"


def test_broken_burst_accounting_is_warned_about(tmp_path, caplog):
    """A control packet the edge could not send shifts the core's pairing of packets and
    bursts: the point says so (docs/obs.md, "Core node")."""
    from types import SimpleNamespace

    from testbed.cc.lossdetect import LossDetection
    from testbed.families import e2_obs
    from testbed.optical.obscore import HoldingDelay
    from testbed.results import write_csv, write_json
    from testbed.traffic import Window

    said = []
    ctx = SimpleNamespace(dir=tmp_path, tdf=TimeDilation(1000), progress=said.append,
                          write_csv=lambda n, rows: write_csv(tmp_path / n, rows),
                          write_json=lambda n, d: write_json(tmp_path / n, d))
    zero = LossDetection.zero()
    fp = SimpleNamespace(ctx=ctx, values=values(scale=40), run=None, measured={
        "edge": {"bursts": 2, "closed_time": 2, "closed_volume": 0, "packets": 4, "bytes": 2264,
                 "ctrl_packets": 1, "ctrl_failed": 1, "drops": 0},
        "core": {"announced": 1, "bursts_lost": 0, "packets_lost": 0, "ring_overflow": 0},
        "holding": HoldingDelay((), 0, 0, 0, 0, 0), "tcp": zero, "tcp_per_source": {}})
    result = SimpleNamespace(window=Window(0.0, 1.0), stats={}, series=lambda g, host: [])
    e2_obs.summarise(fp, result)  # type: ignore[arg-type]
    assert "control packets the edge could not send: 1" in caplog.text
    assert any("burst accounting is not exact" in m for m in said)
