"""`testbed report RUN... --out DIR`: one report over several results folders of a family
(the E1 findings subset is four folders, one per block)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from analysis.report import SOURCES, CombineError, Exclusion, _fill_absent_params, combine, generate
from testbed.families.e1_fattree import E1FatTree


def _run(root: Path, name: str, family: str, cca: str, switches: tuple[str, ...], thr: float,
         key: str = "family") -> Path:
    """A results folder; ``key`` "kind" writes config.json as runs did before families."""
    run = root / name
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"experiment": {"name": "e1-paper", key: family},
                                                 "run": {"tdf": 10000}}))
    metrics = {m.name: float("nan") for m in E1FatTree.metrics}
    rows = [{"cca": cca, "switch": sw, "initial_rto": "1 ms", "load": "20000 /s", "link_length": "10 m",
             "k": 4, "size_scale": "1 %", "rep": rep, **metrics, "throughput_bps": thr * (1 + 0.01 * rep),
             "loss_ratio": 0.01, "oeo_fraction": 0.2, "max_buffer_bytes": 1e5}
            for sw in switches for rep in range(3)]
    pd.DataFrame(rows).to_csv(run / "summary.csv", index=False)
    return run


def test_combined_report_judges_a_finding_whose_groups_are_in_different_runs(tmp_path):
    a = _run(tmp_path, "A", "e1-fattree", "saw", ("hybrid:2",), 10e9, key="kind")  # an older run
    b = _run(tmp_path, "B", "e1-fattree", "sawl", ("hybrid:2",), 15e9)
    index = combine([a, b], tmp_path / "combined")
    assert index.exists()
    found = pd.read_csv(tmp_path / "combined" / "report" / "findings.csv")
    f2 = found[found["id"] == "F2"].iloc[0]
    assert f2["verdict"] == "holds", f2.to_dict()  # SAWL (run B) beats SAW (run A)
    summary = pd.read_csv(tmp_path / "combined" / "summary.csv")
    assert sorted(set(summary["run"])) == ["A", "B"] and len(summary) == 6
    sources = json.loads((tmp_path / "combined" / SOURCES).read_text())
    assert [s["folder"] for s in sources] == [str(a), str(b)]
    assert {s["family"] for s in sources} == {"e1-fattree"}
    assert json.loads((tmp_path / "combined" / "config.json").read_text())["experiment"]["family"] == "e1-fattree"
    # a second combine over the same folder replaces it
    combine([a, b], tmp_path / "combined")


def test_combine_refuses_mixed_families_and_never_overwrites_a_run(tmp_path):
    a = _run(tmp_path, "A", "e1-fattree", "saw", ("hybrid:2",), 10e9)
    c = _run(tmp_path, "C", "e3-leafspine", "saw", ("hybrid:2",), 10e9)
    with pytest.raises(CombineError, match="different families"):
        combine([a, c], tmp_path / "x")
    b = _run(tmp_path, "B", "e1-fattree", "sawl", ("hybrid:2",), 15e9)
    with pytest.raises(CombineError, match="not a combined report"):
        combine([a, b], a)
    with pytest.raises(CombineError, match="not a results folder"):
        combine([a, tmp_path / "nothing"], tmp_path / "y")


def test_cli_needs_out_with_several_folders(tmp_path):
    a = _run(tmp_path, "A", "e1-fattree", "saw", ("hybrid:2",), 10e9)
    b = _run(tmp_path, "B", "e1-fattree", "sawl", ("hybrid:2",), 15e9)
    p = subprocess.run([sys.executable, "-m", "testbed", "report", str(a), str(b)],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "--out" in p.stderr
    assert not (tmp_path / "combined").exists()


def test_exclude_leaves_out_a_folders_rows_and_says_so(tmp_path):
    """Points run again into another folder (E5's SB 45 kB after the occupancy fix): the
    combined report leaves the named rows of the named folder out and records it."""
    a = _run(tmp_path, "A", "e1-fattree", "saw", ("hybrid:2", "electronic"), 10e9)
    b = _run(tmp_path, "B", "e1-fattree", "sawl", ("hybrid:2",), 15e9)
    combine([a, b], tmp_path / "c", [Exclusion.parse("A:switch=electronic")])
    summary = pd.read_csv(tmp_path / "c" / "summary.csv")
    assert len(summary) == 6 and set(summary["switch"]) == {"hybrid:2"}
    sources = json.loads((tmp_path / "c" / SOURCES).read_text())
    assert [s["excluded"] for s in sources] == [{"A: switch in {electronic}": 3}, {}]
    assert "rows left out: A: switch in {electronic} (3)" in \
        json.loads((tmp_path / "c" / "config.json").read_text())["experiment"]["description"]


@pytest.mark.parametrize("text,match", [
    ("A:switch", "expected FOLDER:KEY=VALUE"),
    ("Z:switch=electronic", "no combined folder is named 'Z'"),
    ("A:colour=red", "has no column 'colour'"),
    ("A:switch=optical", r"no row of A has switch = optical \(it has: electronic, hybrid:2\)"),
])
def test_exclude_refuses_what_matches_nothing(tmp_path, text, match):
    a = _run(tmp_path, "A", "e1-fattree", "saw", ("hybrid:2", "electronic"), 10e9)
    b = _run(tmp_path, "B", "e1-fattree", "sawl", ("hybrid:2",), 15e9)
    with pytest.raises(CombineError, match=match):
        combine([a, b], tmp_path / "c", [Exclusion.parse(text)])
    assert not (tmp_path / "c").exists()


def test_cli_exclude_bad_value_exits_2_and_creates_nothing(tmp_path):
    a = _run(tmp_path, "A", "e1-fattree", "saw", ("hybrid:2",), 10e9)
    b = _run(tmp_path, "B", "e1-fattree", "sawl", ("hybrid:2",), 15e9)
    p = subprocess.run([sys.executable, "-m", "testbed", "report", str(a), str(b), "--out", str(tmp_path / "c"),
                        "--exclude", "A:switch=optical"], capture_output=True, text=True)
    assert p.returncode == 2 and "switch = optical" in p.stderr
    assert not (tmp_path / "c").exists()


def _e5_rows(extra: dict[str, object], buffer: str) -> list[dict[str, object]]:
    """Three E5 summary rows at SB / ``buffer`` without flows_of_scale and common_scale,
    plus ``extra``."""
    from testbed.families.e5_optram import E5OpticalRam
    base = {p.name: p.default for p in E5OpticalRam.params if p.name not in ("flows_of_scale", "common_scale")}
    metrics = {m.name: float("nan") for m in E5OpticalRam.metrics}
    return [{**base, **metrics, **extra, "arch": "sb", "pacing": "none", "buffer": buffer, "rep": r, "seed": 1000 + r,
             "goodput_per_flow_Bps": 5e5 + r, "core_drop_rate": 0.01} for r in range(3)]


def _e5_run(root: Path, name: str, rows: list[dict[str, object]]) -> Path:
    run = root / name
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"experiment": {"name": "e5-paper", "family": "e5-optram"},
                                                 "run": {"tdf": 20}}))
    pd.DataFrame(rows).to_csv(run / "summary.csv", index=False)
    return run


def test_a_parameter_added_later_is_read_as_its_value_from_before(tmp_path):
    """E5's block SB ran before ``flows_of_scale`` / ``common_scale`` existed (0 = the
    behaviour then), block-sb-big after: without filling, block-sb-big's rows formed
    another context and were left out of the findings. A parameter with no
    ``before_added`` is not filled (its rows stay apart, listed as left out)."""
    from testbed.families.e5_optram import E5OpticalRam

    old = _e5_run(tmp_path, "old", _e5_rows({}, "1.5 kB"))
    new = _e5_run(tmp_path, "new", _e5_rows({"flows_of_scale": 0, "common_scale": 0}, "45 kB"))
    combine([old, new], tmp_path / "c")
    summary = pd.read_csv(tmp_path / "c" / "summary.csv")
    assert summary["flows_of_scale"].tolist() == [0] * 6 and summary["common_scale"].tolist() == [0] * 6
    sources = json.loads((tmp_path / "c" / SOURCES).read_text())
    assert [s["filled"] for s in sources] == [{"flows_of_scale": 0, "common_scale": 0}, {}]
    assert "old's rows without flows_of_scale (run before it existed): read as 0" in \
        json.loads((tmp_path / "c" / "config.json").read_text())["experiment"]["description"]
    points = pd.read_csv(tmp_path / "c" / "report" / "table1.csv")
    assert sorted(set(points["buffer"].astype(str))) == ["1.5 kB", "45 kB"], points.to_dict()
    assert not list((tmp_path / "c" / "report").glob("*left*"))
    # cca has no before_added: a summary without it is not given one
    frames = {"a": pd.DataFrame({"rep": [0]}), "b": pd.DataFrame({"rep": [0], "cca": ["reno"], "common_scale": [0]})}
    assert _fill_absent_params(frames, E5OpticalRam) == {"a": {"common_scale": 0}}
    assert list(frames["a"].columns) == ["rep", "common_scale"]


def test_one_folder_resumed_across_a_parameter_added_is_read_whole(tmp_path):
    """A folder resumed after a parameter was added has empty cells in its column for the
    older rows (summary.csv is rewritten from every point's summary): the report reads
    them as ``before_added`` and says so, rather than leaving those rows out."""
    run = _e5_run(tmp_path, "resumed", _e5_rows({}, "1.5 kB") + _e5_rows({"flows_of_scale": 0, "common_scale": 0},
                                                                         "45 kB"))
    assert pd.read_csv(run / "summary.csv")["flows_of_scale"].isna().sum() == 3
    index = generate(run)
    points = pd.read_csv(run / "report" / "table1.csv")
    assert sorted(set(points["buffer"].astype(str))) == ["1.5 kB", "45 kB"], points.to_dict()
    assert "3 rows without flows_of_scale (run before it existed): read as 0" in index.read_text()
    assert not list((run / "report").glob("*left*"))
