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


def test_start_gives_ib_cores_the_xcp_ring_and_the_agent_a_margin_above_their_lookahead(monkeypatch):
    """``start`` on a fabric c0 (ib: voq options) - c1 (ob) with edges e0, e1 on c0 and e2
    on c1: c0's voq qdiscs are reinstalled with the ring at the point's E and d_e (its
    other options unchanged), the agent reads c0's queue from them (queue voq, its
    namespace, each output's device) and c1's from the BPF, and M_x = 5 ms + c0's M."""
    import dataclasses
    from types import SimpleNamespace

    from testbed.optical import ibsched, maps, voq
    from testbed.optical.xcpplan import NodeShape

    rate, D, ns = 5e6, 20.0, lambda s: round(s * 20.0 * 1e9)     # noqa: E731
    shapes = [NodeShape("c0", 0, "core", "ns-c0", ("c0-0", "c0-1", "c0-2"), ("c1", "e0", "e1"), (rate,) * 3,
                        (ns(0.002), ns(0.0001), ns(0.0001))),
              NodeShape("c1", 1, "core", "ns-c1", ("c1-0", "c1-1"), ("c0", "e2"), (rate,) * 2, (ns(0.002), ns(0.0001))),
              *(NodeShape(f"e{j}", 2 + j, "edge", f"ns-e{j}", (f"e{j}-0", f"e{j}-1"), (c, f"h{j}"), (rate,) * 2,
                          (ns(0.0001), 0)) for j, c in enumerate(("c0", "c0", "c1"))),
              *(NodeShape(f"h{j}", 5 + j, "host", f"ns-h{j}", (f"h{j}-0",), (f"e{j}",), (rate,), (0,))
                for j in range(3))]
    routes = {(0, "10.0.0.1"): [1], (0, "10.0.0.2"): [2], (0, "10.0.0.3"): [0],
              (1, "10.0.0.1"): [0], (1, "10.0.0.2"): [0], (1, "10.0.0.3"): [1]}
    for j in range(3):
        for k in range(3):
            routes[(2 + j, f"10.0.0.{k + 1}")] = [1 if k == j else 0]

    @dataclasses.dataclass(frozen=True)
    class PacerOpts:
        nclasses: int = 0
        epoch_ns: int = 0
        interval_ns: int = 0
        rates_bps: tuple = ()

    m = 1_500_000
    c0 = voq.VoqOptions(0, ibsched.IbConfig.uniform(3, 160_000, 1500, m, prop_ns=2_000_000))
    nodes = {s.name: SimpleNamespace(role=s.role, node_id=s.node_id,
                                     options=c0 if s.name == "c0" else PacerOpts() if s.role == "edge" else None)
             for s in shapes}
    installed: dict[str, object] = {}
    fabric = SimpleNamespace(nodes=nodes, pin_dir="/pin", shapes=lambda: shapes,
                             host_ips=lambda: {f"h{j}": f"10.0.0.{j + 1}" for j in range(3)}, routes=lambda: routes,
                             set_node_options=lambda name, opts: installed.__setitem__(name, opts))
    monkeypatch.setattr(maps, "configure_xcp", lambda pin, cfgs: None)
    monkeypatch.setattr(maps, "set_xcp_classes", lambda pin, classes: None)
    cfg = e5_xcp.start(fabric, values(), D)
    d_e = round(0.05 * D * 1e9)
    assert installed["c0"] == c0.with_xcp(cfg.epoch_ns, d_e) and "c1" not in installed
    assert installed["c0"].qopt(1).xcp_interval_ns == d_e and installed["e0"].epoch_ns == cfg.epoch_ns
    cores = {c.name: c for c in cfg.cores}
    assert (cores["c0"].queue, cores["c0"].netns, [o.dev for o in cores["c0"].outputs]) == (
        "voq", "ns-c0", ["c0-0", "c0-1", "c0-2"])
    assert cores["c1"].queue == "bpf"
    assert cfg.margin_ns == e5_xcp.AGENT_MARGIN_NS + m == e5_xcp.agent_margin_ns([m, 1000])
    assert e5_xcp.agent_margin_ns() == e5_xcp.AGENT_MARGIN_NS


def test_the_agent_is_told_to_stop_at_the_traffics_end_on_the_points_timeline():
    """end_with_traffic adds a timeline action at the traffic's end (paper s after t0):
    not run before it (D = 20: 200 emulation s for 10 s), run once at it, recorded in
    the timeline's record under its label, calling the agent's request_stop."""
    from testbed.dilation import TimeDilation
    from testbed.timeline import Timeline

    class Agent:
        calls = 0

        def request_stop(self) -> bool:
            self.calls += 1
            return True

    timeline, agent = Timeline(TimeDilation(20.0)), Agent()
    e5_xcp.end_with_traffic(timeline, agent, 10.0)
    assert timeline.wait_s(0.0, 1e6) == pytest.approx(200.0)
    timeline.step(run=None, elapsed_s=199.99)
    assert agent.calls == 0
    timeline.step(run=None, elapsed_s=200.01)
    timeline.step(run=None, elapsed_s=230.0)
    assert agent.calls == 1
    assert [d["label"] for d in timeline.done] == [e5_xcp.END_LABEL]
    assert timeline.done[0]["planned_s"] == 10.0
