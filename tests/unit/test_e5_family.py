"""E5 family without root: the network it builds, the senders' profiles, the scaling,
the errors of bad definitions, and summarise on recorded measurements."""

from __future__ import annotations

import csv
import math
from types import SimpleNamespace

import pytest

from testbed.dilation import TimeDilation
from testbed.errors import DefinitionError
from testbed.families import e5_optram
from testbed.families.e5_optram import E5OpticalRam, core_spec, edge_spec, profile_name, scaled_flows
from testbed.units import Dim, Quantity


def values(**over):
    v = {p.name: p.parse(p.default, p.name) for p in E5OpticalRam.params}
    v.update(over)
    return v


def test_defaults_are_the_papers_nsfnet_point():
    v = values()
    assert (v["flows"], v["duration"].si, v["window"].si, v["cwnd_limit"], v["rate"].si, v["scale"]) == \
        ("paper", 40.0, 5.0, 20, 1e9, 1)
    assert v["topology"] == "nsfnet" and scaled_flows(v) == 1586
    assert v["edge_buffer"].si == 0.25 and v["cca"] == "reno" and v["pacing"] == "none"


def test_the_topology_is_nsfnet_at_the_scaled_rate_with_one_path_per_flow():
    v = values(arch="wcsb", buffer=Quantity(3000, Dim.SIZE), scale=100)
    topo = E5OpticalRam.topology(v, TimeDilation(20))
    assert len(topo.switches()) == 28 and len(topo.hosts()) == 14
    core, edge = topo.nodeInfo("c3"), topo.nodeInfo("e3")
    assert (core["role"], core["arch"], edge["role"], edge["arch"]) == ("core", "wcsb:3000", "edge",
                                                                       "fifo:250000000")
    assert core["rate_bps"] == pytest.approx(10e6) and core["tdf"] == 20 and core["flow_hash"] is True
    assert topo.linkInfo("h3", "e3")["mtu"] == 1500


def test_specs_parse_as_registered_architectures():
    from testbed.optical import architectures

    v = values(arch="ob", buffer=Quantity(1500, Dim.SIZE))
    assert architectures.parse(core_spec(v), role="core").params == {"buffer_bytes": 1500}
    assert architectures.parse(edge_spec(v), role="edge").name == "fifo"


def test_abilene_is_the_papers_network_at_a_fraction_of_its_size():
    v = values(topology="abilene", arch="sb", scale=20)
    topo = E5OpticalRam.topology(v, TimeDilation(20))
    assert len(topo.switches()) == 19 + 35 and len(topo.hosts()) == 35          # abilene_nodes 0.05
    assert scaled_flows(v) == round(2232 * 35 / 698 / 20)                       # the paper's flows per edge node
    assert scaled_flows(values(topology="abilene", flows=500, scale=10)) == 50   # a number is taken as given
    big = values(topology="abilene", abilene_nodes=0.1)
    assert E5OpticalRam.fabric_key(big, TimeDilation(20)) != E5OpticalRam.fabric_key(v, TimeDilation(20))
    assert "54 switches, 35 hosts" in E5OpticalRam.fabric_note(v)
    assert "28 switches, 14 hosts" in E5OpticalRam.fabric_note(values())


def test_an_abilene_too_large_for_the_fabric_is_refused_naming_the_key():
    from testbed import definition

    raw = {"experiment": {"name": "t", "family": "e5-optram"},
           "params": {"topology": "abilene", "abilene_nodes": 0.6, "scale": 20}, "run": {"reps": 1}}
    with pytest.raises(DefinitionError, match=r"params\.abilene_nodes.*0\.6.*at most 512 optical nodes.*526"):
        E5OpticalRam.check(definition.validate(raw))
    E5OpticalRam.check(definition.validate({**raw, "params": {**raw["params"], "abilene_nodes": 0.5}}))


def test_flows_are_divided_by_the_scale():
    assert scaled_flows(values()) == 1586
    assert scaled_flows(values(scale=100)) == 16
    assert scaled_flows(values(scale=10_000)) == 2


def test_paced_senders_run_paced_reno_with_tcps_own_pacer_and_everyone_the_window_limit():
    assert profile_name(values()) == "reno" and profile_name(values(cca="cubic")) == "cubic"
    assert profile_name(values(pacing="tcp")) == "paced-reno"
    assert E5OpticalRam.profile_options(values()) == {"max_window": 20, "timestamps": 0}
    assert E5OpticalRam.profile_options(values(pacing="tcp", cwnd_limit=7)) == {"max_window": 7, "timestamps": 0,
                                                                                "pacer": "tcp"}


@pytest.mark.parametrize("over", [{}, {"pacing": "tcp"}, {"cca": "sack"}, {"cca": "cubic"}])
def test_the_profile_options_are_accepted_by_the_profile(over):
    """The family's options reach the profile unchecked by the definition (for_family):
    the profile must accept them, or a run would fail only once it applies them."""
    from testbed.cc.profiles import PROFILES

    v = values(**over)
    PROFILES[profile_name(v)].parse_options(E5OpticalRam.profile_options(v), "cca")


class _Defn:
    """The parts of a Definition that E5OpticalRam.check reads."""

    def __init__(self, **over):
        self.cca, self.source = None, "test.toml"
        self._v = values(**over)

    def points(self):
        return [SimpleNamespace(values=self._v)]


def test_a_good_definition_passes_check():
    E5OpticalRam.check(_Defn(pacing="tcp"))  # type: ignore[arg-type]
    E5OpticalRam.check(_Defn(cca="cubic"))  # type: ignore[arg-type]


@pytest.mark.parametrize("over,key", [
    ({"pacing": "tcp", "cca": "cubic"}, "params.cca"),
    ({"window": Quantity(40, Dim.TIME)}, "params.window"),
    ({"bin": Quantity(0.3, Dim.TIME)}, "params.bin"),          # 35 s is not a multiple of 0.3 s
    ({"bin": Quantity(1e-4, Dim.TIME)}, "params.bin"),         # 400 000 intervals
])
def test_bad_definitions_name_the_key(over, key):
    with pytest.raises(DefinitionError) as err:
        E5OpticalRam.check(_Defn(**over))  # type: ignore[arg-type]
    assert err.value.key == key


def test_the_demo_definition_is_valid():
    from testbed import definition

    d = definition.load("e5-demo")
    assert len(d.points()) == 8
    E5OpticalRam.check(d)


def _flow(i, status="incomplete"):
    return SimpleNamespace(flow_id=i, status=status, retrans_segs=1, srtt_s=0.03)


def test_summarise_measures_the_window_over_flows_started_before_it(tmp_path):
    """summarise on recorded measurements (no kernel): per-flow goodput in the window
    over the flows that started before it; core drop rate from the counter differences
    across the window; artefact columns; exactly the declared metrics."""
    from testbed.cc.lossdetect import LossDetection
    from testbed.results import write_csv, write_json
    from testbed.traffic import FlowSpec, Schedule, Window

    D = TimeDilation(20)
    v = values(scale=100, duration=Quantity(10, Dim.TIME), window=Quantity(2, Dim.TIME))
    ctx = SimpleNamespace(dir=tmp_path, tdf=D, write_csv=lambda n, rows: write_csv(tmp_path / n, rows),
                          write_json=lambda n, d: write_json(tmp_path / n, d))
    write_json(tmp_path / "fidelity.json", {"packets": 10, "p99_ns": 1_000_000, "max_ns": 5_000_000})
    write_json(tmp_path / "machine.json", {"wall_s": 100.0, "emulation_s": 200.0})
    sched = Schedule((FlowSpec(0, "h0", "h1", None, 1.0), FlowSpec(1, "h2", "h3", None, 7.9),
                      FlowSpec(2, "h1", "h0", None, 8.5), FlowSpec(3, "h4", "h5", None, 2.0)))
    start = {"core_cut": 100, "core_buffered": 50, "core_dropped": 10, "edge_dropped": 0, "switched": 400,
             "occ_overflow": 0}
    end = {"core_cut": 1000, "core_buffered": 150, "core_dropped": 50, "edge_dropped": 2, "switched": 4000,
           "occ_overflow": 3, "core_late": 4}
    zero = LossDetection.zero()
    timeline = SimpleNamespace(done=[{"label": "core counters at the window's start", "planned_s": 8.0,
                                      "ran_s": 8.01}])
    fp = SimpleNamespace(ctx=ctx, values=v, schedule=sched, timeline=timeline, run=SimpleNamespace(t0=5.0),
                         measured={"window_start": start, "end": end, "tcp": zero})
    # 0.5 s intervals; the window starts at 8 s
    per_flow = {0: [{"t_s": 7.5, "bytes": 999}, {"t_s": 8.0, "bytes": 15_000}, {"t_s": 9.5, "bytes": 5_000}],
                1: [{"t_s": 8.0, "bytes": 60_000}],                             # started 7.9 s: measured
                2: [{"t_s": 8.5, "bytes": 5_000}]}                              # started in the window: not

    def flow_series(fid, g):
        assert g == 0.5
        if fid not in per_flow:
            raise DefinitionError("flow_id", fid, "a traced flow that connected")
        return per_flow[fid]

    result = SimpleNamespace(window=Window(warmup_s=8.0, length_s=2.0),
                             flows=[_flow(0), _flow(1), _flow(2), _flow(3, "failed")], flow_series=flow_series,
                             series=lambda g: [{"t_s": 0.0, "bytes": 7, "throughput_bps": 112.0}])
    row = e5_optram.summarise(fp, result)  # type: ignore[arg-type]
    assert set(row) == {m.name for m in E5OpticalRam.metrics}
    assert row["goodput_per_flow_Bps"] == pytest.approx((10_000 + 30_000) / 2)
    assert math.isnan(row["goodput_common_Bps"]) and row["flows_common_measured"] == 0   # no common_scale
    assert row["flows_measured"] == 2 and row["flows_started"] == 4 and row["flows_failed"] == 1
    assert row["core_packets"] == 1200 - 160 and row["core_drop_rate"] == pytest.approx(40 / 1040)
    assert row["core_drop_rate_run"] == pytest.approx(50 / 1200)
    assert row["core_buffered_fraction"] == pytest.approx(100 / 1000)
    assert (row["edge_drops"], row["occ_overflow"], row["core_late"]) == (2, 3, 4)
    assert row["window_start_late_s"] == pytest.approx(0.01)
    assert row["link_rate_bps"] == pytest.approx(10e6)
    tau = 1514 * 8 / 10e6
    assert row["lateness_p99_s"] == pytest.approx(1e-3 / 20)
    assert row["lateness_p99_over_tau"] == pytest.approx(1e-3 / 20 / tau)
    assert row["packet_hops_per_wall_s"] == pytest.approx(40.0)
    assert row["paper_s_per_wall_s"] == pytest.approx(0.1)
    flows = list(csv.DictReader(open(tmp_path / "flows_window.csv")))
    assert [(r["flow"], r["status"], r["window_bytes"]) for r in flows] == \
        [("0", "incomplete", "20000"), ("1", "incomplete", "60000"), ("2", "incomplete", "5000"),
         ("3", "failed", "")]
    assert math.isnan(float(flows[3]["goodput_Bps"] or "nan"))


@pytest.mark.parametrize("over,key", [
    ({"scale": 20, "flows_of_scale": 40}, "params.flows_of_scale"),   # a larger scale has fewer flows
    ({"scale": 20, "common_scale": 40}, "params.common_scale"),       # shared flows need nested ones
    ({"scale": 20, "flows_of_scale": 10, "common_scale": 10}, "params.common_scale"),
])
def test_bad_nesting_names_the_key(over, key):
    with pytest.raises(DefinitionError) as err:
        E5OpticalRam.check(_Defn(**over))  # type: ignore[arg-type]
    assert err.value.key == key


def _workload(tmp_path, **over):
    meta = {}
    v = values(duration=Quantity(10, Dim.TIME), window=Quantity(2, Dim.TIME), **over)
    ctx = SimpleNamespace(point=SimpleNamespace(seed=1000), write_json=lambda n, d: meta.update(d),
                          progress=lambda text: meta.setdefault("progress", text))
    emu = SimpleNamespace(hosts=lambda: [SimpleNamespace(name=f"h{i}") for i in range(14)])
    fp = SimpleNamespace(values=v, ctx=ctx, emu=emu)
    return E5OpticalRam.workload(fp), meta  # type: ignore[arg-type]


def test_nested_flows_are_shared_between_scales_with_their_ids(tmp_path):
    s10, _ = _workload(tmp_path, flows="paper", scale=10, flows_of_scale=10, common_scale=20)
    s20, meta = _workload(tmp_path, flows="paper", scale=20, flows_of_scale=10, common_scale=20)
    own20, _ = _workload(tmp_path, flows="paper", scale=20)
    assert (len(s10), len(s20), len(own20)) == (159, 79, 79)
    assert set(s20.flows) <= set(s10.flows)
    # at scale 10 the flows shared with scale 20 are the ids below 79: scale 20's flows
    assert {f for f in s10.flows if f.id < 79} == set(s20.flows)
    assert own20 != s20 and "nested_subset" not in own20.meta
    assert meta["common_flows"] == 79 and meta["flows_of_scale"] == 10 and meta["flows"] == 79
    assert "a nested subset of the 159 drawn for scale 10" in meta["progress"]


def test_summarise_measures_the_shared_flows_apart(tmp_path):
    """With common_scale, goodput_common_Bps averages the measured flows whose id is below
    the common scale's flow count (2 here: 200 flows / scale 100)."""
    from testbed.cc.lossdetect import LossDetection
    from testbed.results import write_csv, write_json
    from testbed.traffic import FlowSpec, Schedule, Window

    v = values(flows=400, scale=100, flows_of_scale=100, common_scale=200, duration=Quantity(10, Dim.TIME),
               window=Quantity(2, Dim.TIME))
    ctx = SimpleNamespace(dir=tmp_path, tdf=TimeDilation(20), write_csv=lambda n, rows: write_csv(tmp_path / n, rows),
                          write_json=lambda n, d: write_json(tmp_path / n, d))
    write_json(tmp_path / "fidelity.json", {"packets": 10, "p99_ns": 1_000_000, "max_ns": 5_000_000})
    write_json(tmp_path / "machine.json", {"wall_s": 100.0, "emulation_s": 200.0})
    sched = Schedule(tuple(FlowSpec(i, "h0", "h1", None, 1.0 + i) for i in (3, 0, 2, 1)))
    totals = {"core_cut": 10, "core_buffered": 0, "core_dropped": 0, "edge_dropped": 0, "switched": 10,
              "occ_overflow": 0}
    fp = SimpleNamespace(ctx=ctx, values=v, schedule=sched, timeline=SimpleNamespace(done=[]),
                         run=SimpleNamespace(t0=5.0),
                         measured={"window_start": totals, "end": totals, "tcp": LossDetection.zero()})
    got = {0: 10_000, 1: 20_000, 2: 60_000, 3: 100_000}    # window bytes per flow id
    result = SimpleNamespace(window=Window(warmup_s=8.0, length_s=2.0), flows=[_flow(i) for i in got],
                             flow_series=lambda fid, g: [{"t_s": 8.0, "bytes": got[fid]}], series=lambda g: [])
    row = e5_optram.summarise(fp, result)  # type: ignore[arg-type]
    assert row["flows_measured"] == 4 and row["flows_common_measured"] == 2
    assert row["goodput_common_Bps"] == pytest.approx((10_000 + 20_000) / 2 / 2)
    assert row["goodput_per_flow_Bps"] == pytest.approx(190_000 / 4 / 2)
