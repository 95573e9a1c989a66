"""The base of flow experiments: hosts exchanging TCP transfers over a fabric.

:meth:`FlowFamily.run_point` owns the steps every flow family shares, in this order;
a family fills in the hooks (marked *) and keeps its own state in a :class:`FlowPoint`:

1. *values*: the point's values as the run uses them (:meth:`~FlowFamily.point_values`);
2. fabric: the *topology* built into an ``Emulation`` and kept across points whose
   *fabric key* is equal (``ctx.keep("fabric", ...)``);
3. *workload*: the schedule of transfers, and the hosts taking part (*participants*);
4. *prepare*: what the family sets per point on the kept fabric (E1 reconfigures the
   switch model; E3 flushes neighbours, turns TCP timestamps off);
5. host TCP settings (:data:`HOST_TCP_SETTINGS`): no TCP metrics (cached ssthresh, RTT)
   carried from an earlier point, and no connection given up by a retry limit;
6. congestion control: every host's profile (testbed.cc.selection.for_family: the
   ``cca`` parameter with the family's *profile options*, ``[cca.hosts.<host>]``
   overrides), applied and kept across points while the selection is equal;
7. traffic: inside the family's *control* context (e.g. an SDN controller), the
   instruments and one ``TrafficRun`` per the family's *traffic plan*, driven with
   the point's :class:`~testbed.timeline.Timeline` (actions at paper times, polled hooks);
8. *summarise*: the summary row (exactly the family's declared metrics).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from testbed import hostclock
from testbed.context import PointContext
from testbed.dilation import TimeDilation
from testbed.experiment import Definition
from testbed.family import Family
from testbed.features import Feature
from testbed.timeline import Timeline

if TYPE_CHECKING:
    from testbed.cc.selection import CcaSelection
    from testbed.traffic import Schedule, TrafficResult, TrafficRun, Window

#: seconds (emulation) between turns of the traffic loop while a point has timeline
#: entries or a time limit
POLL_S = 0.05

#: Per-namespace TCP settings of every host of every flow family, set before each point.
#: A transfer of the studied papers never gives up, and a connection the kernel gives up
#: is a failed transfer the paper does not have (measured in E1 before these: 13-21 of
#: ~840 transfers per SAW all-optical run at 10 000 /s "timed out" after the default 6
#: SYN retries; 1-8 per SACK all-optical run reset after the sink's orphan, holding its
#: unacknowledged byte count, was dropped by ``tcp_orphan_retries`` 0 as soon as its RTO
#: reached TCP_RTO_MAX). Each retry still backs off exponentially up to TCP_RTO_MAX, so
#: a give-up needs ~127 x 120 s of emulation: never within a point.
HOST_TCP_SETTINGS: dict[str, int] = {
    # no cached ssthresh or RTT carried from an earlier point's flows
    "net.ipv4.tcp_no_metrics_save": 1,
    # SYN retransmissions before connect() fails (127: the kernel's maximum, MAX_TCP_SYNCNT)
    "net.ipv4.tcp_syn_retries": 127,
    # SYN-ACK retransmissions of a half-open connection
    "net.ipv4.tcp_synack_retries": 127,
    # retransmissions of a closed socket's unacknowledged data and FIN before the kernel
    # drops it (0, the default, gives up once the RTO reaches TCP_RTO_MAX)
    "net.ipv4.tcp_orphan_retries": 127,
}


@dataclass(frozen=True)
class TrafficPlan:
    """How a point's traffic runs (paper units).

    ``duration_s``: the traffic agent ends the point this long after t0 (flows still
    open are incomplete); ``limit_s`` (without a duration): the point ends when every
    transfer ended, at the latest this long after t0 (then open ones are incomplete);
    with neither it ends when every transfer ended. ``window``: measurement window;
    ``granularities_s``: series intervals; ``notify_tags``: flows reported as they end
    (``TrafficRun.ended_flows``)."""

    window: "Window | None" = None
    duration_s: float | None = None
    limit_s: float | None = None
    granularities_s: tuple[float, ...] = ()
    notify_tags: tuple[str, ...] = ()


@dataclass
class FlowPoint:
    """One point of a flow family while it runs: what the shared steps made, for the
    family's hooks."""

    ctx: PointContext
    #: the point's values as the run uses them (FlowFamily.point_values)
    values: dict[str, Any]
    timeline: Timeline
    #: the emulated network (kept across points) and whether this point built it
    emu: Any = None
    built: bool = False
    schedule: "Schedule | None" = None
    #: the hosts taking part in the traffic
    hosts: list[Any] = field(default_factory=list)
    #: each host's effective congestion-control settings (testbed.cc.selection.applied)
    cca: dict[str, Any] = field(default_factory=dict)
    #: each participating host's kernel congestion-control algorithm
    algorithms: dict[str, str] = field(default_factory=dict)
    run: "TrafficRun | None" = None
    #: what the family's hooks measured for summarise (e.g. E3's reconfigurations)
    measured: dict[str, Any] = field(default_factory=dict)


class FlowFamily(Family):
    """Base of flow families; see the module docstring. Families set ``params`` (with a
    ``cca`` choice of profile names), ``metrics``, and implement the hooks."""

    count_ports: ClassVar[bool] = False
    #: the point file that records each host's congestion-control settings (None: none)
    profiles_file: ClassVar[str | None] = "profiles.json"

    # -- hooks ---------------------------------------------------------------------------
    @classmethod
    def point_values(cls, ctx: PointContext) -> dict[str, Any]:
        """The point's values as the run uses them (default: as defined)."""
        return ctx.point.values

    @classmethod
    def fabric_key(cls, values: dict[str, Any], tdf: TimeDilation) -> Hashable:
        """Points whose keys are equal share one built fabric."""
        raise NotImplementedError

    @classmethod
    def fabric_note(cls, values: dict[str, Any]) -> str:
        """Progress line printed when a point builds its fabric."""
        return f"building the {cls.name} fabric"

    @classmethod
    def workload(cls, fp: FlowPoint) -> "Schedule":
        """The point's transfers (paper units); write what describes them."""
        raise NotImplementedError

    @classmethod
    def participants(cls, fp: FlowPoint) -> list[Any]:
        """The hosts taking part in the traffic (default: every host of the fabric)."""
        return fp.emu.hosts()

    @classmethod
    def prepare(cls, fp: FlowPoint) -> None:
        """Per-point settings on the (maybe kept) fabric. Default: none."""

    @classmethod
    def profile_options(cls, values: dict[str, Any]) -> dict[str, Any]:
        """Options (paper units) of the ``cca`` profile every host runs. Default: none."""
        return {}

    @classmethod
    def profile_rate_bps(cls, values: dict[str, Any]) -> float | None:
        """The hosts' link rate in paper units for the profiles (SAWL's tau). Default: None."""
        return None

    @classmethod
    def traffic(cls, fp: FlowPoint) -> TrafficPlan:
        """How the point's traffic runs (window, duration or limit, series, notifications)."""
        raise NotImplementedError

    @classmethod
    @contextlib.contextmanager
    def control(cls, fp: FlowPoint) -> Iterator[None]:
        """Context around the traffic (e.g. a controller, timeline entries). Default: none."""
        yield

    @classmethod
    def summarise(cls, fp: FlowPoint, result: "TrafficResult") -> dict[str, Any]:
        """The summary row (paper units): exactly the family's declared metrics; may
        write per-transfer files."""
        raise NotImplementedError

    # -- shared steps --------------------------------------------------------------------
    @classmethod
    def cca_selection(cls, defn: Definition, values: dict[str, Any]) -> "CcaSelection":
        """Every host's profile: ``values["cca"]`` with the family's options, overridden
        per host by ``[cca.hosts.<host>]``."""
        from testbed.cc.selection import for_family

        return for_family(values["cca"], cls.profile_options(values), defn.cca, defn.source)

    @classmethod
    def features(cls, values: dict[str, Any], tdf: TimeDilation) -> set[Feature]:
        """The topology's features, and module loading when the ``cca`` profile runs one
        of kernel/'s modules (the [cca.hosts] overrides are the runner's)."""
        from testbed.cc.modules import OUR_MODULES
        from testbed.cc.profiles import PROFILES

        need = super().features(values, tdf)
        if PROFILES[values["cca"]].algorithm in OUR_MODULES:
            need.add(Feature.MODULES)
        return need

    @classmethod
    def check(cls, defn: Definition) -> None:
        """A [cca] table may only override hosts the topology has."""
        from testbed.errors import DefinitionError

        if defn.cca is None:
            return
        for p in defn.points()[:1]:
            cls.cca_selection(defn, p.values)  # raises for a [cca] default profile
        from testbed.net import end_hosts  # Mininet: runs only, never the report

        for topo in cls.topologies(defn):
            hosts = set(end_hosts(topo)) if topo is not None else set()
            for host in defn.cca.hosts:
                if host not in hosts:
                    raise DefinitionError(f"cca.hosts.{host}", host, "a host of this topology: "
                                          + ", ".join(sorted(hosts)[:20]), defn.source)

    @classmethod
    def run_point(cls, ctx: PointContext) -> dict[str, Any]:
        from testbed.traffic import TrafficError, TrafficRun

        fp = FlowPoint(ctx, cls.point_values(ctx), Timeline(ctx.tdf))
        fp.emu, fp.built = cls._fabric(fp)
        fp.schedule = cls.workload(fp)
        fp.hosts = cls.participants(fp)
        cls.prepare(fp)
        apply_host_tcp_settings(fp.hosts)
        cls._congestion_control(fp)
        plan = cls.traffic(fp)
        with cls.control(fp):
            with ctx.instruments(fp.emu, count_ports=cls.count_ports), \
                    TrafficRun(fp.emu, fp.hosts, fp.schedule, fp.algorithms, ctx.dir / "traffic", ctx.tdf,
                               window=plan.window, duration_s=plan.duration_s,
                               granularities_s=plan.granularities_s, notify_tags=plan.notify_tags) as run:
                fp.run = run
                drive(run, fp.timeline, plan, ctx.tdf)
        if fp.timeline.done:
            ctx.write_json("timeline.json", fp.timeline.done)
        result = run.result
        if result is None:
            raise TrafficError(f"{ctx.point.id}: the traffic agent wrote no results; see {ctx.dir / 'traffic'}")
        result.write()
        return cls.summarise(fp, result)

    @classmethod
    def _fabric(cls, fp: FlowPoint) -> tuple[Any, bool]:
        """The point's emulation, built or kept; and whether this point built it."""
        from testbed.net import Emulation

        ctx, built = fp.ctx, []

        def build() -> Emulation:
            built.append(True)
            ctx.progress(cls.fabric_note(fp.values))
            return Emulation(cls.topology(fp.values, ctx.tdf), ctx.ledger, ctx.token)

        emu = ctx.keep("fabric", cls.fabric_key(fp.values, ctx.tdf), build)
        return emu, bool(built)

    @classmethod
    def _congestion_control(cls, fp: FlowPoint) -> None:
        """Apply the point's selection (kept while equal: profiles hold no per-point
        state; a new fabric first drops the profiles kept on the old one)."""
        from testbed.cc.selection import applied

        ctx = fp.ctx
        selection = cls.cca_selection(ctx.defn, fp.values)
        rate = cls.profile_rate_bps(fp.values)
        key = (json.dumps(selection.to_data(), sort_keys=True), rate, ctx.tdf.factor)  # times are dilated
        fp.cca = ctx.keep("cca", key, lambda: applied(fp.emu, selection, ctx.tdf, rate))
        if cls.profiles_file:
            ctx.write_json(cls.profiles_file, fp.cca)
        for h in fp.hosts:
            profile = selection.profile_for(h.name)
            assert profile is not None  # for_family gives every host a profile
            fp.algorithms[h.name] = profile.algorithm


def apply_host_tcp_settings(hosts: list[Any]) -> None:
    """:data:`HOST_TCP_SETTINGS` in every host's namespace. Raises what ``host.sysctl``
    raises (a key the kernel lacks, a value out of its range)."""
    for h in hosts:
        for key, value in HOST_TCP_SETTINGS.items():
            h.sysctl(key, value)


def drive(run: "TrafficRun", timeline: Timeline, plan: TrafficPlan, tdf: TimeDilation) -> None:
    """Run ``timeline`` while ``run``'s traffic runs, until the agent ended the point;
    with a ``plan.limit_s`` stop there (the point is then ended, open transfers
    incomplete). Without timeline entries or limit this is ``run.wait()``. Raises
    TrafficError as ``run.wait`` does (agent error, no end in time)."""
    if timeline.empty and plan.limit_s is None:
        run.wait()
        return
    from testbed.traffic import TrafficError

    assert run.t0 is not None
    t0 = run.t0
    limit = time.monotonic() + tdf.time_to_emulation(plan.limit_s) if plan.limit_s is not None else None
    stop_emu = tdf.time_to_emulation(plan.duration_s) if plan.duration_s else None
    # as run.wait(): a bound on the agent's own end, on both clocks (testbed.hostclock)
    bound_s = stop_emu + 30.0 if stop_emu is not None else 3600.0
    bound = hostclock.Deadline(bound_s) if limit is None else None
    while True:
        run.poll(timeline.wait_s(time.monotonic() - t0, POLL_S))
        timeline.step(run, time.monotonic() - t0)
        if run.finished is not None or (limit is not None and time.monotonic() > limit):
            return
        if bound is not None and bound.expired():
            raise TrafficError(f"traffic did not finish within {bound_s:g} s (flows still running; "
                               f"see {run.out_dir})")
