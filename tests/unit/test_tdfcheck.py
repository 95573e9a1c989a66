"""The D-vs-2D verdict: overlapping 95 % intervals agree, separated ones do not."""

import pytest

from testbed.errors import ResultsError
from testbed.results import write_csv
from testbed.tdfcheck import compare


def folder(tmp_path, name, values):
    d = tmp_path / name
    d.mkdir()
    write_csv(d / "summary.csv", [{"rep": i, "throughput_bps": v} for i, v in enumerate(values)])
    return d


def test_overlapping_intervals_agree(tmp_path):
    c = compare(folder(tmp_path, "a", [1.0e9, 1.2e9, 1.1e9]), folder(tmp_path, "b", [1.15e9, 1.05e9, 1.3e9]),
                100, 200)
    assert c.agree and c.n_a == c.n_b == 3
    assert c.mean_a == pytest.approx(1.1e9)


def test_separated_intervals_differ(tmp_path):
    c = compare(folder(tmp_path, "a", [1.0e9, 1.01e9, 0.99e9]), folder(tmp_path, "b", [2.0e9, 2.01e9, 1.99e9]),
                100, 200)
    assert not c.agree and c.relative_difference == pytest.approx(1.0)


def test_one_repetition_cannot_agree(tmp_path):
    assert not compare(folder(tmp_path, "a", [1e9]), folder(tmp_path, "b", [1e9]), 1, 2).agree


def test_missing_metric_names_the_columns(tmp_path):
    with pytest.raises(ResultsError, match="no column 'goodput'.*throughput_bps"):
        compare(folder(tmp_path, "a", [1e9]), folder(tmp_path, "b", [1e9]), 1, 2, metric="goodput")
