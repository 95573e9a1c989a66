"""The E5 family's XCP helper (testbed/families/_e5_xcp.py): parameters checked with
the key named, summary columns from the agent's xcp.json."""

from __future__ import annotations

import math

import pytest

from testbed.errors import DefinitionError
from testbed.families import _e5_xcp as e5_xcp
from testbed.families.e5_optram import E5OpticalRam, edge_spec
from testbed.units import Dim, Quantity


def values(**kw: object) -> dict[str, object]:
    v = {"xcp_alpha": 0.4, "xcp_beta": 0.226, "xcp_stability_check": True, "xcp_gamma": 0.1, "xcp_interval": Quantity.parse("50 ms", Dim.TIME),
         "xcp_rate_delay": Quantity.parse("2 ms", Dim.TIME),
         "pacing": "xcp", "edge_buffer": Quantity.parse("250 ms", Dim.TIME)}
    v.update(kw)
    return v


def test_the_papers_parameters_are_accepted():
    p = e5_xcp.parameters(values())
    assert (p.alpha, p.beta, p.gamma, p.interval_s) == (0.4, 0.226, 0.1, pytest.approx(0.05))


def test_an_unstable_alpha_beta_names_the_key():
    with pytest.raises(DefinitionError, match=r"params\.xcp_alpha'?: 2\.0.*stability"):
        e5_xcp.parameters(values(xcp_alpha=2.0))


def test_gamma_outside_names_gamma():
    with pytest.raises(DefinitionError, match="params.xcp_gamma"):
        e5_xcp.parameters(values(xcp_gamma=1.5))


def test_xcp_edges_use_the_pacer_with_the_wait_bound():
    assert edge_spec(values()) == "xcp-edge:250000000"
    assert edge_spec(values(pacing="none")) == "fifo:250000000"
    assert e5_xcp.is_xcp("xcp-ack") and not e5_xcp.is_xcp("tcp")


def test_columns_of_a_point_without_xcp_are_nan_and_declared():
    cols = e5_xcp.columns(None, 20.0)
    assert set(cols) == set(e5_xcp.COLUMNS) and all(math.isnan(v) for v in cols.values())
    declared = {m.name for m in E5OpticalRam.metrics}
    assert set(e5_xcp.COLUMNS) <= declared


def test_columns_sum_the_agents_and_the_pacers_counters():
    summary = {"exact": False, "intervals": 60, "acc_late": 1, "pacer_acc_late": 2, "acc_lost": 0,
               "pacer_acc_lost": 3, "late_rates": 4, "rate_changes": 500,
               "decision_lag_ns": {"p50": 1e6, "p99": 4e7, "max": 5e7},
               "pacers": {"e0": {"late": 5, "late_rates": 6}, "e1": {"late": 0, "late_rates": 1}}}
    cols = e5_xcp.columns(summary, 20.0)
    assert cols == {"xcp_exact": 0.0, "xcp_intervals": 60.0, "xcp_acc_late": 3.0, "xcp_acc_lost": 3.0,
                    "xcp_late_rates": 11.0, "xcp_pacer_late": 5.0, "xcp_decision_lag_p99_s": pytest.approx(0.002),
                    "xcp_rate_changes": 500.0}


def test_stable_beta_follows_alpha_and_the_check_can_be_turned_off():
    p = e5_xcp.parameters(values(xcp_alpha=0.2, xcp_beta="stable", xcp_stability_check=True))
    assert p.beta == pytest.approx(0.2 ** 2 * 2 ** 0.5) and not p.outside_stability_bound
    with pytest.raises(DefinitionError, match=r"params\.xcp_alpha.*0\.6.*xcp_stability_check = false admits it"):
        e5_xcp.parameters(values(xcp_alpha=0.6, xcp_beta="stable", xcp_stability_check=True))
    wide = e5_xcp.parameters(values(xcp_alpha=0.6, xcp_beta="stable", xcp_stability_check=False))
    assert wide.outside_stability_bound and wide.beta == pytest.approx(0.36 * 2 ** 0.5)


def test_xcp_beta_takes_a_number_or_the_word_stable():
    from testbed.definition import load

    beta = next(p for p in E5OpticalRam.params if p.name == "xcp_beta")
    assert beta.parse("stable", "params.xcp_beta") == "stable" and beta.parse("0.1", "params.xcp_beta") == 0.1
    with pytest.raises(DefinitionError, match=r"params\.xcp_beta.*'stable'"):
        beta.parse("auto", "params.xcp_beta")
    d = load("e5-xcp-params")
    E5OpticalRam.check(d)                                       # alpha = 0.6 admitted: the check is off
    assert len(d.points()) == 2 * 5 * 4 * 3
