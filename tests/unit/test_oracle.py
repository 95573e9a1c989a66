"""The port model (Python reference, equal to the BPF packet for packet in the BPF tier)
against the independent simulator of the paper's switch (testbed/optical/eventsim.py),
on E1-like traces of every E1 switch configuration at k = 4 and k = 8 (no root).

Two comparisons per configuration (testbed/optical/oracle.py):
* with the simulator's reading in which a buffered packet claims its output from its
  arrival (what a port model that stamps departures at arrival must do): tight bounds,
  so anything else that differs is a bug;
* with the paper's switch itself: the issue's bounds (PLR 0.05 absolute, mean sojourn
  15 %). Where committing departures at arrival costs more than that, the case is a
  strict expected failure naming the cause (the port model, ``hybrid``, keeps it).

The holding realisation of the same switch (``hybrid-hold``, the voq qdisc's hybrid
scheduler: ``oracle.holding_outcomes``) closes the gap: in every configuration, the
expected failures included, its statistics are the simulator's, exactly.
"""

from __future__ import annotations

import functools
import random

import pytest

from analysis import e1_findings
from testbed.optical import eventsim, oracle, traces
from testbed.optical.architectures import from_model
from testbed.optical.layout import PortConfig

N_PACKETS, SEED = 15000, 1
#: packets of the holding realisation's comparison: it must be the simulator exactly, which
#: a third of the traces shows as well (and the unit tier's time is CI's)
N_HOLDING = 5000

#: configurations where departures committed at arrival cost more than the issue's
#: bounds on these traces (measured; docs/optical-switch.md has the full table)
COMMITMENT_GAP = {
    (4, 1, 0.6), (4, 1, 0.9), (4, 1, 1.2), (4, 2, 0.6), (4, 2, 0.9), (4, 2, 1.2),
    (8, 2, 0.9), (8, 2, 1.2), (8, 4, 0.9), (8, 4, 1.2),
}


def _params() -> list:
    out = []
    for c in oracle.configs(4) + oracle.configs(8):
        marks = []
        if (c.n_a, c.n_e, c.load) in COMMITMENT_GAP and c.model == "hybrid":
            marks.append(pytest.mark.xfail(strict=True, reason="departures committed at arrival: an arrival "
                                           "cannot cut through ahead of a packet still converting"))
        out.append(pytest.param(c, marks=marks, id=c.label.replace(" ", "-")))
    return out


@functools.cache
def _row(cfg: oracle.Config) -> oracle.Row:
    """One comparison per configuration, shared by both tests (deterministic)."""
    return oracle.compare(cfg, N_PACKETS, SEED)


@pytest.mark.parametrize("cfg", [pytest.param(c, id=c.label.replace(" ", "-"))
                                 for c in oracle.configs(4) + oracle.configs(8)])
def test_model_is_the_simulator_with_outputs_claimed_at_buffering(cfg):
    r = _row(cfg)
    if cfg.model in ("all-optical", "electronic"):
        # nothing is ever committed ahead: the two must agree exactly
        assert (r.model.dropped, r.model.buffered, r.model.mean_sojourn_tau, r.model.p99_sojourn_tau) == \
            (r.sim.dropped, r.sim.buffered, r.sim.mean_sojourn_tau, r.sim.p99_sojourn_tau)
    assert r.within_claimed_bounds, oracle.table([r])


@pytest.mark.parametrize("cfg", _params())
def test_model_within_the_issue_bounds_of_the_paper_switch(cfg):
    r = _row(cfg)
    assert r.within_bounds, oracle.table([r])


def test_saturated_fully_buffered_switch_keeps_a_bounded_queue_and_residual_loss():
    """The bug this replaces: with buffer outputs held from their last use until the next
    departure, the n_e = n_a switch's queue grew without bound at high load (mean
    sojourn in the thousands of tau) and it never dropped."""
    r = oracle.compare(oracle.Config(4, "hybrid", 4, 1.2), N_PACKETS, SEED)
    assert r.model.mean_sojourn_tau < 5 and r.model.p99_sojourn_tau < 20
    assert r.model.plr > 0.02 and r.sim.plr > 0.02


@pytest.mark.parametrize("n_e", [1, 2, 4])
def test_occupancy_of_the_comparison_is_the_port_models_own(n_e):
    """The comparison's "most packets waiting" counts what the port model (and so the
    BPF program and E1's max_buffer_bytes) counts as its buffer occupancy."""
    cfg = oracle.Config(4, "hybrid", n_e, 0.9)
    packets = traces.e1_like_trace(random.Random(7), 4000, 4, cfg.load, oracle.PS_PER_BYTE)
    sw = from_model("hybrid", n_e).reference([PortConfig(oracle.PS_PER_BYTE) for _ in range(4)])
    for p in sorted(packets, key=lambda p: p.arrival_ns):
        sw.offer(p.arrival_ns, p.length, p.out_port)
    s = eventsim.stats(packets, oracle.model_outcomes(packets, cfg), oracle.PS_PER_BYTE)
    assert sw.occ_overflow == 0
    assert s.max_waiting_bytes == sw.max_occ_bytes > 0


@pytest.mark.parametrize("cfg", [pytest.param(c, id=c.label.replace(" ", "-"))
                                 for c in oracle.configs(4) + oracle.configs(8) if c.model == "hybrid"])
def test_the_model_gap_the_e1_findings_state_bounds_the_comparison(cfg):
    """analysis/e1_findings.py writes the model's known gap beside every hybrid finding
    (more loss, a fuller buffer missed); its numbers must bound what the comparison shows."""
    r = _row(cfg)
    if cfg.n_e < cfg.n_a:
        assert r.plr_diff <= e1_findings.MODEL_PLR_EXCESS, oracle.table([r])
        assert r.waiting_shortfall <= e1_findings.MODEL_WAITING_SHORTFALL, oracle.table([r])
    else:
        assert r.waiting_shortfall <= e1_findings.MODEL_WAITING_SHORTFALL_FULL * r.model.max_waiting, \
            oracle.table([r])


@pytest.mark.parametrize("cfg", [pytest.param(c, id=c.label.replace(" ", "-"))
                                 for c in oracle.configs(4) + oracle.configs(8) if c.model != "electronic"])
def test_the_holding_realisation_is_the_papers_switch(cfg):
    """hybrid-hold's algorithm on the same traces: every statistic of the comparison (and
    so the issue's bounds, where the port model's commitment gap fails them) equal to the
    simulator's."""
    r = oracle.compare(cfg, N_HOLDING, SEED, runner=oracle.holding_outcomes)
    assert r.model == r.sim and r.within_bounds and r.waiting_shortfall == 0, oracle.table([r])


def test_the_holding_runner_refuses_the_electronic_switch():
    with pytest.raises(ValueError, match="accepted: all-optical, hybrid"):
        oracle.holding_outcomes([], oracle.Config(4, "electronic", 0, 0.6))
