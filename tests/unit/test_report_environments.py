"""Where a results folder's points ran (analysis.report.environments): a resumed run's
points can come from several invocations, kernels and machines (E5's blocks span two
Debian kernel builds), and the report says which point ran where."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from analysis.report import combine, environments, environments_note
from testbed.results import RunStore
from tests.unit.test_report_combine import _run

HOST = {"cpu_model": "Xeon", "cpus": 2, "kernel": "6.1.0-40-cloud-amd64", "kernel_version": "#1 SMP"}


def _manifest(run_id: str, created: str, kernel: str, host: dict | None) -> dict:
    where = {"place": "guest", "guest_accel": "tcg", "clock": "icount:shift=0,sleep=off", "kernel": kernel,
             "kernel_version": f"#1 SMP Debian {kernel}"}
    if host is not None:
        where["host"] = host
    return {"run_id": run_id, "created": created, "git": {"sha": "a" * 40}, "where": where}


def _points(run: Path, run_ids: list[str | None], state: str = "complete") -> None:
    for i, rid in enumerate(run_ids):
        d = run / "points" / f"p{i:04d}"
        d.mkdir(parents=True)
        (d / "status.json").write_text(json.dumps({"state": state, **({"run_id": rid} if rid else {})}))


def _resumed(run: Path) -> None:
    """Three invocations: two kept in logs/ (their files' times reversed, as after a
    clone), the current one in manifest.json; points of each, one without a run_id and
    one incomplete."""
    (run / "logs").mkdir(parents=True, exist_ok=True)
    first = _manifest("20261125-0400-aaaa", "2026-11-25T04:00:00+0000", "6.1.0-56-amd64", None)
    second = _manifest("20261130-0400-bbbb", "2026-11-30T04:00:00+0000", "6.1.0-57-amd64", None)
    for m, mtime in ((first, 2e9), (second, 1e9)):
        path = run / "logs" / f"manifest-{m['run_id']}.json"
        path.write_text(json.dumps(m))
        os.utime(path, (mtime, mtime))
    (run / "manifest.json").write_text(json.dumps(
        _manifest("20261201-2100-cccc", "2026-12-01T21:00:00+0000", "6.1.0-57-amd64", HOST)))
    _points(run, ["20261125-0400-aaaa"] * 2 + ["20261130-0400-bbbb"] + ["20261201-2100-cccc"] * 3 + [None])
    d = run / "points" / "p0007"
    d.mkdir()
    (d / "status.json").write_text(json.dumps({"state": "running", "run_id": "20261201-2100-cccc"}))


def test_each_invocation_counts_the_complete_points_it_ran(tmp_path):
    run = tmp_path / "run"
    _resumed(run)
    assert [m["run_id"] for m in RunStore(run).manifests()] == [
        "20261125-0400-aaaa", "20261130-0400-bbbb", "20261201-2100-cccc"]   # by created, not file times
    env = environments(run)
    assert list(env["run_id"]) == ["20261125-0400-aaaa", "20261130-0400-bbbb", "20261201-2100-cccc", "?"]
    assert list(env["points"]) == [2, 1, 3, 1]          # the running point is not counted
    assert list(env["kernel"])[:2] == ["6.1.0-56-amd64 #1 SMP Debian 6.1.0-56-amd64",
                                       "6.1.0-57-amd64 #1 SMP Debian 6.1.0-57-amd64"]
    assert list(env["machine"]) == ["?", "?", "Xeon x 2", "?"]   # older manifests did not record it
    note = environments_note(env)
    assert note.startswith("The points ran on 2 kernel builds:")
    assert "The kernel of 1 of 7 points is not recorded." in note
    assert "The machine of 4 of 7 points is not recorded" in note


def test_one_kernel_and_one_machine_need_no_note(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps(_manifest("r1", "2026-12-01T21:00:00+0000", "k", HOST)))
    _points(run, ["r1", "r1"])
    env = environments(run)
    assert list(env["points"]) == [2] and environments_note(env) == ""


def test_a_combined_report_lists_each_source_folders_invocations(tmp_path):
    a = _run(tmp_path, "A", "e1-fattree", "saw", ("hybrid:2",), 10e9)
    b = _run(tmp_path, "B", "e1-fattree", "sawl", ("hybrid:2",), 15e9)
    _resumed(a)
    (b / "manifest.json").write_text(json.dumps(_manifest("r1", "2026-12-01T21:00:00+0000", "k", HOST)))
    _points(b, ["r1"])
    index = combine([a, b], tmp_path / "combined")
    env = pd.read_csv(tmp_path / "combined" / "report" / "environments.csv")
    assert list(env["run"]) == ["A"] * 4 + ["B"] and list(env["points"]) == [2, 1, 3, 1, 1]
    html = index.read_text()
    assert "Where the points ran" in html and "The points ran on 3 kernel builds:" in html
    assert "· git aaaaaaaaaaaa</p>" in html   # the header names the sources' commits (it said "?")
