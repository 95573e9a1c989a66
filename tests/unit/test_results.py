import json

import pytest

from testbed import definition
from testbed.errors import ResultsError
from testbed.results import RunStore, atomic_write

DEF = {"experiment": {"name": "t", "family": "netem-path"}, "sweep": {"rate": ["1 Mbit/s", "2 Mbit/s"]},
       "run": {"reps": 2}}


def test_atomic_write_leaves_no_temp_files(tmp_path):
    atomic_write(tmp_path / "a.txt", "one")
    atomic_write(tmp_path / "a.txt", "two")
    assert (tmp_path / "a.txt").read_text() == "two"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_resume_skips_complete_and_reruns_interrupted(tmp_path):
    d = definition.validate(DEF)
    pts = d.points()
    store = RunStore.open(tmp_path / "run", d)
    store.begin(pts[0])
    store.finish(pts[0], {"throughput_bps": 1.0})
    store.begin(pts[1])  # killed here: status stays "running"
    (store.point_dir(pts[1]) / "partial.csv").write_text("x")

    again = RunStore.open(tmp_path / "run", definition.validate(DEF))
    assert [again.state(p) for p in pts] == ["complete", "running", None, None]
    again.begin(pts[1])  # the interrupted attempt is set aside, not mixed in or lost
    assert not (again.point_dir(pts[1]) / "partial.csv").exists()
    assert (tmp_path / "run/points/.incomplete/p0001-0/partial.csv").exists()
    again.finish(pts[1], {"throughput_bps": 2.0})
    rows = again.summaries()
    assert [r["point"] for r in rows] == ["p0000", "p0001"]
    assert (tmp_path / "run/summary.csv").read_text().count("\n") == 3


def test_failed_point_is_recorded_and_not_in_summary(tmp_path):
    d = definition.validate(DEF)
    store = RunStore.open(tmp_path / "run", d)
    p = d.points()[0]
    store.begin(p)
    store.finish(p, None, error="iperf3: boom")
    st = json.loads((store.point_dir(p) / "status.json").read_text())
    assert st["state"] == "failed" and st["error"] == "iperf3: boom"
    assert store.summaries() == []


def test_resume_with_other_configuration_is_refused(tmp_path):
    RunStore.open(tmp_path / "run", definition.validate(DEF))
    other = dict(DEF, run={"reps": 3})
    with pytest.raises(ResultsError, match="another configuration"):
        RunStore.open(tmp_path / "run", definition.validate(other))


def test_a_resumed_run_keeps_every_manifest_and_each_point_names_its_commit(tmp_path):
    from analysis.report import _shas

    d = definition.validate(DEF)
    pts = d.points()
    store = RunStore.open(tmp_path / "run", d)
    store.write_manifest({"run_id": "first", "git": {"sha": "a" * 40}})
    store.session = {"run_id": "first", "git": "a" * 40}
    store.begin(pts[0])
    store.finish(pts[0], {"throughput_bps": 1.0})

    again = RunStore.open(tmp_path / "run", definition.validate(DEF))   # the next session
    again.write_manifest({"run_id": "second", "git": {"sha": "b" * 40}})
    again.session = {"run_id": "second", "git": "b" * 40}
    again.begin(pts[1])
    again.finish(pts[1], {"throughput_bps": 2.0})
    again.write_manifest({"run_id": "second", "git": {"sha": "b" * 40}})   # same invocation again: no copy

    assert json.loads((tmp_path / "run/manifest.json").read_text())["run_id"] == "second"
    assert [m["run_id"] for m in again.manifests()] == ["first", "second"]
    status = [json.loads((again.point_dir(p) / "status.json").read_text()) for p in pts[:2]]
    assert [(s["run_id"], s["git"][0]) for s in status] == [("first", "a"), ("second", "b")]
    assert _shas(tmp_path / "run") == "aaaaaaaaaaaa, bbbbbbbbbbbb"


def test_a_complete_points_raw_records_are_compressed_and_still_read(tmp_path):
    from testbed.traffic.records import read_jsonl

    defn = definition.validate(DEF)
    store = RunStore.open(tmp_path / "run", defn)
    p, q = defn.points()[:2]
    for point in (p, q):
        d = store.begin(point)
        (d / "traffic").mkdir()
        (d / "traffic" / "flows-h1.jsonl").write_text('{"id": 1}\n{"id": 2}\n')
        (d / "traffic" / "agent.json").write_text('{"op": "point"}')
        (d / "traffic" / "flows.csv").write_text("id\n1\n2\n")
    store.finish(p, {"x": 1})
    store.finish(q, None, error="boom")
    done, failed = store.point_dir(p) / "traffic", store.point_dir(q) / "traffic"
    assert sorted(f.name for f in done.iterdir()) == ["agent.json.gz", "flows-h1.jsonl.gz", "flows.csv"]
    assert read_jsonl(done / "flows-h1.jsonl") == [{"id": 1}, {"id": 2}]
    assert sorted(f.name for f in failed.iterdir()) == ["agent.json", "flows-h1.jsonl", "flows.csv"]
