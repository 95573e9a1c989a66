"""(helper of ``e5-optram``, not a family) XCP edge pacing in ``e5-optram`` (pacing ``xcp`` and ``xcp-ack``; docs/xcp-edge.md):
the point's XCP parameters, its plan of the fabric, the pacers' classes, rates and
epoch, the BPF accumulators and class map, the agent's configuration, and the summary
columns of its records.

Order within a point (``E5OpticalRam.control``): :func:`start` (plan, pacers
re-installed with the point's classes and the epoch E, BPF configuration, agent
configuration), then the agent process, then :func:`wait_for_epoch`, then the traffic,
whose end stops the agent (:func:`end_with_traffic`: intervals after it decide nothing
measured, and the runner's end-of-traffic work made the few they decided late):
E lies :data:`EPOCH_LEAD_S` (emulation) after :func:`start`, long enough for the agent
to start in the guest (7-20 s measured), so the agent is running at E and every packet of
the traffic falls in an interval k >= 0 (the wait is idle time, which the guest's
virtual clock skips). Other pacings call :func:`disable`, which switches the
accumulators off (the fabric is shared between points).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

from testbed.errors import DefinitionError
from testbed.xcp import UnstableParameterError, XcpParameterError, XcpParameters, stable_beta

#: the XCP variants (analysis/e5_findings.py names them): ACKs in the data macroflow of
#: their pair, or in a macroflow of their own
VARIANTS = {"xcp": False, "xcp-ack": True}
#: emulation s between the configuration and the epoch E (the agent process starts in it:
#: 7.4 to 20.4 s of guest time in six guest runs of 2026-11-24, longer when the host is
#: loaded: reading the checkout waits on the host, and the guest's clock runs on). The
#: wait after the agent is ready is idle, which the guest's clock skips, so a long lead
#: costs little wall time
EPOCH_LEAD_S = 60.0
#: the agent's margin M_x (emulation ns): it reads interval k at E + (k+1) d_e + M_x. Above
#: the pacers' lookahead M_p (1 ms) plus their timer lag: with M_x = M_p the guest run of
#: 2026-11-24 found 5 pacer slots changed after the read (``pacer_acc_late``). With ib
#: cores the margin is this above their voq lookahead M (:func:`agent_margin_ns`)
AGENT_MARGIN_NS = 5_000_000


#: the timeline label of :func:`end_with_traffic` (a point's timeline.json)
END_LABEL = "XCP agent stopped: the traffic's end"


def end_with_traffic(timeline: Any, agent: Any, duration_s: float) -> None:
    """Stop ``agent`` (its ``request_stop()``: the stop signal, not waited for) at the
    traffic's end, ``duration_s`` paper seconds after t0, a ``timeline`` action. The
    agent takes it between intervals: the interval being decided then is finished and
    recorded; no later one is decided, so no rate change is sent that could only take
    effect after the traffic, and the lateness counters (``xcp_exact``) cover the
    intervals with traffic only. (Until 2026-11-30 the agent ran on until the point's
    end: in e5-paper's XCP runs of e432453 its late changes after the traffic counted,
    docs/e5.md.)"""
    timeline.at(duration_s, END_LABEL, lambda run: agent.request_stop())


def voq_cores(fabric: Any) -> dict[str, Any]:
    """{core node name: its VoqOptions} of the fabric's core nodes whose queues are in
    voq qdiscs (architecture ``ib``), as installed now."""
    from testbed.optical import voq

    return {name: np.options for name, np in fabric.nodes.items()
            if np.role == "core" and isinstance(np.options, voq.VoqOptions)}


def agent_margin_ns(lookaheads_ns: Any = ()) -> int:
    """M_x (emulation ns) for a fabric whose voq cores decide ``lookaheads_ns`` (their
    M) late: AGENT_MARGIN_NS above the largest (a voq ring's slot k is final once the
    qdisc has decided every instant of k, at E + (k+1) d_e + M + its timer lag; the
    BPF's and the pacers' slots need AGENT_MARGIN_NS alone)."""
    return AGENT_MARGIN_NS + max(lookaheads_ns, default=0)


def is_xcp(pacing: str) -> bool:
    """Whether ``pacing`` is an XCP variant."""
    return pacing in VARIANTS


def parameters(values: Mapping[str, Any], source: object = None) -> XcpParameters:
    """The point's XCP parameters (``xcp_alpha``, ``xcp_beta``, ``xcp_gamma``,
    ``xcp_interval``, ``xcp_stability_check``; TU 1). ``xcp_beta = "stable"`` is alpha^2
    sqrt 2. Raises DefinitionError naming ``params.xcp_<name>``, the value and the
    accepted range (alpha and beta: Katabi's stability condition, which the paper's
    0.4 / 0.226 meet, unless ``xcp_stability_check`` is false)."""
    names = {"alpha": "xcp_alpha", "beta": "xcp_beta", "gamma": "xcp_gamma", "interval_s": "xcp_interval"}
    alpha = float(values["xcp_alpha"])
    beta = stable_beta(alpha) if values["xcp_beta"] == "stable" else float(values["xcp_beta"])
    try:
        return XcpParameters(alpha=alpha, beta=beta, gamma=float(values["xcp_gamma"]),
                             interval_s=float(values["xcp_interval"].si),
                             outside_stability_bound=not values["xcp_stability_check"])
    except XcpParameterError as exc:
        key = names.get(exc.parameter, "xcp_beta")
        shown = str(values[key]) if key == "xcp_interval" else values[key]
        accepted = f"{exc.accepted} (XCP {exc.parameter})"
        if isinstance(exc, UnstableParameterError):
            accepted += "; xcp_stability_check = false admits it"
        raise DefinitionError(f"params.{key}", shown, accepted, source) from None


def disable(fabric: Any) -> None:
    """Accumulators off and reset on every node (a point without XCP)."""
    from testbed.optical import layout, maps

    maps.configure_xcp(fabric.pin_dir, {np.node_id: layout.XcpConfig() for np in fabric.nodes.values()})


def start(fabric: Any, values: Mapping[str, Any], tdf: float, *, epoch_lead_s: float = EPOCH_LEAD_S) -> Any:
    """Configure XCP for one point on ``fabric`` (the pacers' classes and initial rates,
    the epoch, the accumulators, the class map, the XCP rings of ib cores' voq qdiscs)
    and return the agent's configuration (``controllers.xcp_agent.AgentConfig``; its
    margin covers the voq cores' lookahead: :func:`agent_margin_ns`). Needs ``routing =
    pair`` (checked by the family). Raises XcpPlanError when the fabric has no shape XCP
    can act on."""
    from controllers.xcp_agent import config_from_plan
    from testbed.optical import layout, maps
    from testbed.optical.xcpplan import plan as make_plan
    from testbed.optical.xcpplan import single_routes

    params = parameters(values)
    separate = VARIANTS[values["pacing"]]
    ib = voq_cores(fabric)
    plan = make_plan(fabric.shapes(), fabric.host_ips(), single_routes(fabric.routes()), tdf, separate_acks=separate,
                     voq_nodes=ib)
    interval_ns = round(params.interval_s * tdf * 1e9)
    epoch = time.clock_gettime_ns(time.CLOCK_MONOTONIC) + round(epoch_lead_s * 1e9)
    cfg = config_from_plan(plan, epoch_ns=epoch, tdf=tdf, xcp=params, interval_s=params.interval_s,
                           rate_delay_s=float(values["xcp_rate_delay"].si),
                           margin_ns=agent_margin_ns(o.config.lookahead_ns for o in ib.values()),
                           pin_dir=str(fabric.pin_dir))
    initial = {m.name: m.initial_rate_bps for m in cfg.macroflows}
    for e in plan.edges:
        np = fabric.nodes[e.name]
        rates = [0] * plan.nclasses
        for m in plan.macroflows:
            if m.src == e.name:
                rates[m.cls] = max(1, round(initial[m.name] / tdf))
        opts = dataclasses.replace(np.options, nclasses=plan.nclasses, epoch_ns=epoch, interval_ns=interval_ns,
                                   rates_bps=tuple(rates))
        fabric.set_node_options(e.name, opts)
    for name, opts in ib.items():                        # their queues' XCP rings (docs/xcp-edge.md, "IB nodes")
        fabric.set_node_options(name, opts.with_xcp(epoch, interval_ns))
    maps.configure_xcp(fabric.pin_dir, {
        np.node_id: layout.XcpConfig(enabled=np.role == "core", epoch_ns=epoch, interval_ns=interval_ns,
                                     acks_separate=separate and np.role == "edge")
        for np in fabric.nodes.values()})
    maps.set_xcp_classes(fabric.pin_dir, dict(plan.class_map))
    return cfg


def wait_for_epoch(epoch_ns: int) -> float:
    """Sleep until CLOCK_MONOTONIC reaches ``epoch_ns``; returns how late the call
    came (emulation s; 0 when it came before E)."""
    now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    if now < epoch_ns:
        time.sleep((epoch_ns - now) / 1e9)
        return 0.0
    return (now - epoch_ns) / 1e9


#: summary columns of an XCP point (NaN for the other pacings)
COLUMNS = ("xcp_exact", "xcp_intervals", "xcp_acc_late", "xcp_acc_lost", "xcp_late_rates", "xcp_pacer_late",
           "xcp_decision_lag_p99_s", "xcp_rate_changes")


def columns(summary: Mapping[str, Any] | None, tdf: float) -> dict[str, float]:
    """The summary columns from the agent's ``xcp.json`` (None: not an XCP point, all
    NaN): exact (1/0), intervals decided, accumulator slots read late or lost (core
    and pacer rings), rate changes applied after their instant (agent and pacers),
    pacer arrivals after their instant was decided, the p99 decision lag (paper s) and
    the rate changes sent."""
    nan = float("nan")
    if summary is None:
        return {c: nan for c in COLUMNS}
    pacers = list((summary.get("pacers") or {}).values())
    lag = (summary.get("decision_lag_ns") or {}).get("p99")
    return {"xcp_exact": float(bool(summary["exact"])),
            "xcp_intervals": float(summary["intervals"]),
            "xcp_acc_late": float(summary["acc_late"] + summary["pacer_acc_late"]),
            "xcp_acc_lost": float(summary["acc_lost"] + summary["pacer_acc_lost"]),
            "xcp_late_rates": float(summary["late_rates"] + sum(p.get("late_rates", 0) for p in pacers)),
            "xcp_pacer_late": float(sum(p.get("late", 0) for p in pacers)),
            "xcp_decision_lag_p99_s": lag / 1e9 / tdf if isinstance(lag, (int, float)) else nan,
            "xcp_rate_changes": float(summary["rate_changes"])}
