"""The family contract: registry, declared metrics, derived features, --pcap checked
before anything exists, congestion control as one selection, the run timeline."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import definition, families
from testbed.cc import profiles
from testbed.dilation import TimeDilation
from testbed.errors import DefinitionError
from testbed.families.e3_leafspine import E3LeafSpine
from testbed.family import Family
from testbed.features import Feature
from testbed.flow_family import TrafficPlan, drive
from testbed.metrics import SummaryError
from testbed.results import RunStore
from testbed.runner import run_features
from testbed.timeline import Timeline

REPO = Path(__file__).resolve().parents[2]


# ---- registry ----------------------------------------------------------------------------
def test_every_discovered_family_loads_and_is_named_after_its_module():
    found = families.names()
    assert {"e1-fattree", "e2-obs", "e3-leafspine", "netem-path"} <= set(found)
    for name in found:
        family = families.load(name)
        assert issubclass(family, Family) and family.name == name
        assert family.__module__ == families.module_name(name)
        assert family.params and family.metrics and family.doc
        metric_names = [m.name for m in family.metrics]
        assert len(set(metric_names)) == len(metric_names), name
        assert not set(metric_names) & ({p.name for p in family.params} | {"point", "rep", "seed"}), name
        assert all(m.unit and m.doc for m in family.metrics), name
        analysis = family.analysis()
        assert callable(analysis.analyse), name


def test_listing_families_imports_none_and_loading_one_imports_only_it():
    code = ("import sys, json; from testbed import families; before = families.names(); "
            "after_names = sorted(m for m in sys.modules if m.startswith('testbed.families.')); "
            "families.load('e1-fattree'); "
            "after_load = sorted(m for m in sys.modules if m.startswith('testbed.families.')); "
            "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'pandas', 'matplotlib', 'mininet'}); "
            "print(json.dumps([after_names, after_load, heavy]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    after_names, after_load, heavy = json.loads(out.stdout)
    assert after_names == [] and after_load == ["testbed.families.e1_fattree"]
    assert heavy == []  # a family's analysis and topology are imported where they are used


def test_an_unknown_family_is_a_definition_error_listing_the_names():
    with pytest.raises(DefinitionError) as exc:
        definition.validate({"experiment": {"name": "t", "family": "e9-nothing"}})
    assert exc.value.key == "experiment.family" and "e1-fattree, e2-obs, e3-leafspine, e4-flowmove, e5-optram, netem-path" in exc.value.accepted


def test_the_old_kind_key_says_what_it_is_now():
    with pytest.raises(DefinitionError) as exc:
        definition.validate({"experiment": {"name": "t", "kind": "netem-path"}})
    assert exc.value.key == "experiment.kind" and "experiment.family" in exc.value.accepted


# ---- features, derived from what the family builds -----------------------------------------
@pytest.mark.parametrize("name,expected", [
    # the sets the hand-typed declarations gave before features were derived
    ("demo", {"clsact-bpf", "htb", "netem", "netns", "ovs-kernel"}),
    ("e1-demo", {"btf", "clsact-bpf", "fq", "modules", "netns"}),
    ("e1-paper", {"btf", "clsact-bpf", "fq", "modules", "netns"}),
    ("e3-demo", {"htb", "netns", "ovs-userspace"}),
    ("e3-paper", {"htb", "netns", "ovs-userspace"}),
])
def test_shipped_definitions_need_the_features_they_needed_before(name, expected):
    needs = run_features(definition.load(name))
    assert needs == expected and all(isinstance(f, Feature) for f in needs)


def test_features_follow_the_topology():
    defn = definition.load("demo", overrides={"switch": "bridge", "delay": "0 ms"})
    assert run_features(defn) == {Feature.NETNS, Feature.HTB, Feature.CLSACT_BPF}
    defn = definition.load("demo", overrides={"datapath": "netdev"})
    assert Feature.OVS_USERSPACE in run_features(defn) and Feature.OVS_KERNEL not in run_features(defn)
    e3 = definition.load("e3-demo", overrides={"datapath": "system"})
    assert Feature.OVS_KERNEL in run_features(e3)
    # an optical fabric needs modules even for a stock CCA: its hosts' NIC queue (hostnic)
    e1 = definition.load("e1-demo", overrides={"cca": "cubic"})
    assert Feature.MODULES in run_features(e1)


def test_e3_probes_only_the_kernel_datapath_and_once(monkeypatch):
    from testbed import features
    from testbed.families import e3_leafspine

    calls = []

    def probe_all(names=None):
        calls.append(None if names is None else sorted(names))
        return {Feature.OVS_KERNEL: features.Probe(Feature.OVS_KERNEL, True, "test")}

    monkeypatch.setattr(features, "probe_all", probe_all)
    e3_leafspine._ovs_kernel_ok.cache_clear()
    try:
        assert [e3_leafspine.resolve_datapath("auto") for _ in range(3)] == ["system"] * 3
        assert e3_leafspine.resolve_datapath("netdev") == "netdev"
    finally:
        e3_leafspine._ovs_kernel_ok.cache_clear()
    assert calls == [["ovs-kernel"]]


# ---- --pcap is checked with the definition ----------------------------------------------------
def test_pcap_of_a_link_the_topology_lacks_exits_2_and_creates_nothing(tmp_path):
    """Before: the run created its results folder and ledger, failed the point and exited 1."""
    out = tmp_path / "out"
    state = tmp_path / "state"
    env = dict(os.environ, TESTBED_STATE_DIR=str(state))
    p = subprocess.run([sys.executable, "-m", "testbed", "run", "demo", "--pcap", "h1-s1;id", "--out", str(out)],
                       capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert p.returncode == 2, p.stderr
    assert "invalid value for '--pcap': 'h1-s1;id'" in p.stderr and "h1-s1, s1-h2" in p.stderr
    assert not out.exists() and not state.exists()


def test_pcap_links_are_those_of_every_point():
    defn = definition.load("demo", overrides={"switch": ["none", "ovs"]})
    family = families.load(defn.family)
    family.check_links(defn, [])
    with pytest.raises(DefinitionError) as exc:
        family.check_links(defn, ["h1-s1"])  # the point without a switch has only h1-h2
    assert exc.value.key == "--pcap" and "h1-h2" in exc.value.accepted
    family.check_links(definition.load("demo"), ["h1-s1", "s1-h2"])


# ---- summary metrics ------------------------------------------------------------------------
def _store(tmp_path):
    defn = definition.load("demo")
    family = families.load(defn.family)
    store = RunStore.open(tmp_path / "run", defn, family.metrics)
    point = defn.points()[0]
    store.begin(point)
    return store, point, {m.name: 1.0 for m in family.metrics}


def test_a_summary_without_a_declared_metric_is_refused_naming_it(tmp_path):
    store, point, row = _store(tmp_path)
    del row["rtt_max_s"]
    with pytest.raises(SummaryError, match=r"netem-path p0000: .*lacks the declared metric\(s\) rtt_max_s"):
        store.finish(point, row)
    assert not (store.point_dir(point) / "summary.json").exists()


def test_an_undeclared_summary_column_is_refused_naming_it(tmp_path):
    store, point, row = _store(tmp_path)
    with pytest.raises(SummaryError, match="undeclared column.*goodput_bps"):
        store.finish(point, {**row, "goodput_bps": 3.0})
    store.finish(point, row)
    assert json.loads((store.point_dir(point) / "summary.json").read_text())["rtt_max_s"] == 1.0


def test_summary_csv_lacking_a_metric_added_later_is_read_empty_and_others_are_refused():
    from testbed.metrics import Metric, check_columns

    metrics = [Metric("a", "1", "old"), Metric("b", "count", "added later", since="2026-11-25")]
    assert check_columns(metrics, ["a", "b"], "s.csv") == []
    assert check_columns(metrics, ["a"], "s.csv") == ["b"]
    with pytest.raises(SummaryError, match="s.csv: no column.s. a, which the family declares"):
        check_columns(metrics, ["b"], "s.csv")


def test_every_kept_summary_is_read_by_its_familys_report():
    """A metric added to a family that has runs kept under results/ needs ``since``:
    every kept summary.csv passes its family's check_columns (the report's check) with
    this version's metrics. Can fail: a new metric without ``since``."""
    from testbed.metrics import check_columns
    from testbed.results import config_family

    root = Path(__file__).resolve().parents[2] / "results"
    read = 0
    for cfg in sorted(root.glob("**/config.json")):
        summary = cfg.parent / "summary.csv"
        if not summary.exists() or not summary.read_text().strip():
            continue
        family = families.load(config_family(json.loads(cfg.read_text())), "experiment.family", str(cfg))
        check_columns(family.metrics, summary.read_text().split("\n", 1)[0].split(","), str(summary))
        read += 1
    assert read >= 10   # the E1, E4 and E5 runs kept in git


# ---- congestion control: one selection ------------------------------------------------------
def test_flow_families_select_profiles_with_their_parameter_and_host_overrides():
    e3 = definition.load("e3-demo")
    v = e3.points()[0].values
    sel = E3LeafSpine.cca_selection(e3, v)
    assert sel.choice_for("h0x0").profile == "cubic" and sel.choice_for("h0x0").options == {}
    raw = {"experiment": {"name": "t", "family": "e3-leafspine"}, "params": {"cca": "cubic"},
           "cca": {"hosts": {"h0x0": {"profile": "reno"}}}}
    defn = definition.validate(raw)
    sel = E3LeafSpine.cca_selection(defn, defn.points()[0].values)
    assert sel.choice_for("h0x0").profile == "reno" and sel.choice_for("h1x0").profile == "cubic"
    with pytest.raises(DefinitionError) as exc:
        definition.validate({**raw, "cca": {"hosts": {"h99x0": {"profile": "reno"}}}})
    assert exc.value.key == "cca.hosts.h99x0"
    with pytest.raises(DefinitionError) as exc:
        definition.validate({**raw, "cca": {"profile": "reno"}})
    assert exc.value.key == "cca.profile" and "params.cca" in exc.value.accepted


@pytest.mark.parametrize("name", ["cubic", "reno"])
def test_kernel_profiles_without_options_set_only_the_algorithm(name):
    """E3 ran cubic/reno by socket option alone; as a profile it also becomes the hosts'
    namespace default, and nothing else: no sysctl, no route attribute, no initial RTO."""
    s = profiles.make(name).settings(TimeDilation(1000), link_rate_bps=1e9)
    assert s["algorithm"] == name and s["sysctls"] == {} and s["route"] == {} and s["module_params"] == {}
    assert "init_rto" not in s and "rto_min" not in s and "undilated_timers" not in s


# ---- the run timeline --------------------------------------------------------------------------
class FakeRun:
    """A TrafficRun stand-in: the agent ends the point after ``ends_after`` polls."""

    def __init__(self, ends_after: int = 10**9) -> None:
        import time

        self.t0 = time.monotonic()
        self.polls, self.ends_after, self.finished, self.waited = 0, ends_after, None, False
        self.out_dir = Path("/nowhere")

    def poll(self, timeout_s: float) -> bool:
        self.polls += 1
        if self.polls >= self.ends_after:
            self.finished = {"ev": "done"}
        return self.finished is not None

    def wait(self) -> None:
        self.waited = True


def test_timeline_runs_actions_in_time_order_once_and_polls_hooks():
    tl = Timeline(TimeDilation(10))
    seen = []
    tl.at(0.2, "b", lambda run: seen.append("b"))
    tl.at(0.1, "a", lambda run: seen.append("a"))
    tl.poll(lambda run: seen.append("hook"))
    assert tl.wait_s(0.0, 5.0) == pytest.approx(1.0)   # 0.1 s paper x D = 1 s emulation
    tl.step(None, 0.5)
    assert seen == ["hook"]
    tl.step(None, 2.5)
    tl.step(None, 3.0)
    assert seen == ["hook", "a", "b", "hook", "hook"]
    assert [(d["label"], d["planned_s"]) for d in tl.done] == [("a", 0.1), ("b", 0.2)]
    assert math.isclose(tl.done[0]["ran_s"], 0.25)
    with pytest.raises(ValueError, match="time -1"):
        tl.at(-1, "bad", lambda run: None)


def test_drive_waits_for_the_agent_when_nothing_happens_during_the_run():
    run = FakeRun()
    drive(run, Timeline(TimeDilation(1)), TrafficPlan(duration_s=1.0), TimeDilation(1))
    assert run.waited and run.polls == 0


def test_drive_polls_hooks_until_the_agent_ended_the_point():
    run, tl, hooked = FakeRun(ends_after=3), Timeline(TimeDilation(1)), []
    tl.poll(hooked.append)
    drive(run, tl, TrafficPlan(), TimeDilation(1))
    assert run.polls == 3 and hooked == [run] * 3 and not run.waited


def test_drive_stops_at_the_limit():
    run = FakeRun()
    drive(run, Timeline(TimeDilation(100)), TrafficPlan(limit_s=0.001), TimeDilation(100))  # 0.1 s emulation
    assert run.finished is None and 1 <= run.polls and not run.waited


# ---- testbed report loads the family and its analysis, not the emulation ----------------------
def _results(root: Path, family_name: str, key: str) -> Path:
    """A small results folder of ``family_name``: config.json (family under ``key``) and a
    summary.csv with every parameter at its default and every metric."""
    import pandas as pd

    family = families.load(family_name)
    run = root / family_name
    (run / "points" / "p0000").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"experiment": {"name": "t", key: family_name},
                                                 "sweep": {}, "run": {"tdf": 10}}))
    params = {p.name: str(p.default) for p in family.params}
    rows = [{"point": f"p000{rep}", "rep": rep, "seed": 1000 + rep, **params,
             **{m.name: 1.0 + rep for m in family.metrics}} for rep in range(2)]
    pd.DataFrame(rows).to_csv(run / "summary.csv", index=False)
    return run


@pytest.mark.parametrize("family_name,key", [("e1-fattree", "family"), ("e3-leafspine", "kind"),
                                             ("netem-path", "family")])
def test_report_imports_neither_mininet_nor_os_ken(tmp_path, family_name, key):
    run = _results(tmp_path, family_name, key)
    code = ("import json, sys; from testbed.cli import main; rc = main(['report', sys.argv[1]]); "
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'mininet', 'os_ken'}))); "
            "sys.exit(rc)")
    p = subprocess.run([sys.executable, "-c", code, str(run)], capture_output=True, text=True, cwd=REPO,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.strip().splitlines()[-1]) == []
    assert (run / "report" / "index.html").exists()


def test_check_tdf_refuses_a_metric_the_family_does_not_declare(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("check-tdf asks for root first")
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "testbed", "check-tdf", "e1-demo", "--set", "cca=sack",
                        "--set", "switch=hybrid:2", "--set", "load=20000 /s", "--metric", "goodput",
                        "--out", str(out)], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert p.returncode == 2 and "invalid value for '--metric': 'goodput'" in p.stderr
    assert "throughput_bps" in p.stderr and not out.exists()


# ---- a new family is a new module ----------------------------------------------------------
DUMMY = '''
"""A family a test adds: two hosts over one switch; no run, just the contract."""
from testbed.experiment import Param
from testbed.family import Family
from testbed.metrics import Metric
from testbed.units import Dim


class DummyPath(Family):
    name = "{name}"
    doc = "test family"
    params = (Param("rate", Dim.RATE, "1 Gbit/s", "link rate", lo=0, lo_open=True),)
    metrics = (Metric("goodput_bps", "bit/s", "what arrived"),)

    @classmethod
    def analysis(cls):
        import sys

        return sys.modules[__name__]  # this module implements analyse()

    @classmethod
    def topology(cls, values, tdf):
        from testbed.net import LinkShape
        from topologies.path import TwoHostPath

        return TwoHostPath(shape=LinkShape(rate_bps=values["rate"].si / tdf.factor), switch="bridge")


def analyse(summary, config, out):
    return [], [("goodput", summary[["goodput_bps"]])]
'''


@pytest.fixture
def dummy_family(tmp_path, monkeypatch):
    """testbed/families extended by a folder holding one more family module."""
    folder = tmp_path / "families"
    folder.mkdir()
    (folder / "dummy_path.py").write_text(DUMMY.replace("{name}", "dummy-path"))
    (folder / "misnamed.py").write_text(DUMMY.replace("{name}", "something-else"))
    monkeypatch.setattr(families, "__path__", [*families.__path__, str(folder)])
    yield folder
    for mod in ("testbed.families.dummy_path", "testbed.families.misnamed"):
        sys.modules.pop(mod, None)


def test_a_new_family_module_is_all_the_registry_needs(dummy_family, tmp_path):
    assert {"dummy-path", "misnamed"} <= set(families.names())
    defn = definition.validate({"experiment": {"name": "d", "family": "dummy-path"},
                                "sweep": {"rate": ["1 Gbit/s", "2 Gbit/s"]}})
    assert run_features(defn) == {Feature.NETNS, Feature.HTB, Feature.CLSACT_BPF}
    families.load("dummy-path").check_links(defn, ["h1-s1"])
    with pytest.raises(families.FamilyError, match="name is 'something-else'"):
        families.load("misnamed")
    # its results report through its own analysis
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"experiment": {"name": "d", "family": "dummy-path"},
                                                 "run": {"tdf": 1}}))
    (run / "summary.csv").write_text("point,rep,rate,goodput_bps\np0000,0,1 Gbit/s,9e8\n")
    from analysis.report import generate

    assert "goodput" in generate(run).read_text()


INFEASIBLE = DUMMY.replace('''def analyse(summary, config, out):''', '''    @classmethod
    def infeasible(cls, values, tdf):
        return "too fast for this test" if values["rate"].si > 1.5e9 else None

    @classmethod
    def run_point(cls, ctx):
        ctx.write_json("ran.json", {"tdf": ctx.tdf.factor})
        return {"goodput_bps": values_rate(ctx)}


def values_rate(ctx):
    return ctx.point.values["rate"].si


def analyse(summary, config, out):''')


def test_an_infeasible_point_is_skipped_with_its_reason_and_the_others_run(tmp_path, monkeypatch, capsys):
    from testbed import runner

    folder = tmp_path / "families"
    folder.mkdir()
    (folder / "dummy_skip.py").write_text(INFEASIBLE.replace("{name}", "dummy-skip"))
    monkeypatch.setattr(families, "__path__", [*families.__path__, str(folder)])
    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path / "state"))
    try:
        defn = definition.validate({"experiment": {"name": "d", "family": "dummy-skip"},
                                    "sweep": {"rate": ["1 Gbit/s", "2 Gbit/s"]}})
        out = tmp_path / "out"
        code = runner.run_native(defn, runner.RunOptions(out=out, report=False), "rid", out, [])
        assert code == 0
        status = {p.name: json.loads((p / "status.json").read_text()) for p in sorted((out / "points").iterdir())}
        assert [s["state"] for s in status.values()] == ["complete", "skipped"]
        assert status["p0001"]["error"] == "too fast for this test"
        assert not (out / "points" / "p0001" / "ran.json").exists()
        assert "p0001 rate=2 Gbit/s rep=0 skipped: too fast for this test" in capsys.readouterr().err
        assert (out / "summary.csv").read_text().count("\n") == 2  # header + the point that ran
        # a resumed run does not try it again, nor the complete one
        assert runner.run_native(defn, runner.RunOptions(out=out, report=False), "rid2", out, []) == 0
        assert "skipped: too fast" not in capsys.readouterr().err
    finally:
        sys.modules.pop("testbed.families.dummy_skip", None)
