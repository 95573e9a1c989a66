"""``e3-leafspine``: E3 of the SDN-OSS paper (leaf-spine + SDN-reconfigured optical
space switch, schedulers none / UT / DT / on demand; docs/e3.md).

One point = one repetition of one scheduler and workload: the leaf-spine of Open
vSwitch bridges (topologies/leafspine.py; kernel datapath where the kernel has it,
else userspace; built once for the points that share it) under a new os-ken
controller (controllers/), ``transfers`` simultaneous
VM migrations from the ToRs of cluster A to those of cluster B (7 mice of 250 MB per
elephant of 3 GB, spread equally over the sender ToRs; testbed.traffic.migration_batch),
per-transfer throughput and completion time split elephant / mouse, the controller's
reconfigurations and the OSS port counters.

Units: ``scale`` multiplies every size *and* every rate (the time axis is unchanged:
a transfer takes as long as in the paper), ``--tdf D`` divides rates and multiplies
times. Results are in paper units: throughput x D / scale, times / D, sizes / scale.
Queue limits scale with the rate (``queue`` packets at full scale, x scale in the
emulation, at least MIN_QUEUE) so that queueing delays stay the paper's.
"""

from __future__ import annotations

import contextlib
import functools
import math
import statistics
from collections.abc import Hashable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from testbed.dilation import TimeDilation
from testbed.errors import DefinitionError
from testbed.experiment import Definition, Param
from testbed.family import Analysis
from testbed.flow_family import FlowFamily, FlowPoint, TrafficPlan
from testbed.metrics import Metric
from testbed.units import Dim

if TYPE_CHECKING:
    from mininet.topo import Topo

    from testbed.context import PointContext
    from testbed.net import LinkShape
    from testbed.traffic import Schedule, TrafficResult
    from topologies.leafspine import LeafSpineSize

SCHEDULERS = ("none", "ut", "dt", "on-demand")
#: IP MTU; with TCP timestamps off the TCP payload is the paper's 1460 B
MTU = 1500
MIN_QUEUE = 10


def _class_metrics() -> tuple[Metric, ...]:
    out = []
    for tag, plural in (("elephant", "elephants"), ("mouse", "mice")):
        out += [Metric(plural, "count", f"{tag} transfers of the point"),
                Metric(f"{plural}_complete", "count", f"{tag} transfers completed"),
                Metric(f"{tag}_throughput_mean_bps", "bit/s", f"mean throughput of the completed {tag} transfers"),
                Metric(f"{tag}_fct_mean_s", "s", f"mean completion time of the completed {tag} transfers"),
                Metric(f"{tag}_retrans_segs", "count", f"segments retransmitted by the {tag} transfers")]
    return tuple(out)


class E3LeafSpine(FlowFamily):
    name = "e3-leafspine"
    doc = "E3: leaf-spine + SDN-reconfigured optical space switch; VM migrations under none/UT/DT/on-demand"
    #: E3's points keep the files they had before congestion control became a profile
    profiles_file = None
    params = (
        Param("scheduler", "choice", "none", "who gets the OSS: none (no direct link), ut, dt, on-demand",
              choices=SCHEDULERS),
        Param("sse", Dim.TIME, "10 s", "space switch epoch (UT/DT); each ToR pair holds the link sse / pairs",
              lo=0, lo_open=True, hi=3600),
        Param("transfers", "int", 24, "simultaneous VM migrations (paper: 24, 48, 72)", lo=1, hi=10_000),
        Param("mice_per_elephant", "int", 7, "mice per elephant", lo=0, hi=1000),
        Param("elephant_size", Dim.SIZE, "3 GB", "elephant VM size", lo=1, hi=1e12),
        Param("mouse_size", Dim.SIZE, "250 MB", "mouse VM size", lo=1, hi=1e12),
        Param("link_rate", Dim.RATE, "1 Gbit/s", "rate of every link", lo=0, lo_open=True, hi=100e9),
        Param("scale", Dim.RATIO, "100 %", "factor on every size and rate (small machines; times unchanged)",
              lo=0, lo_open=True, hi=1),
        Param("queue", "int", 1000, "queue limit of every link end in packets at full scale (x scale)",
              lo=1, hi=100_000),
        Param("spines", "int", 2, "spine switches", lo=2, hi=8),
        Param("tors", "int", 6, "ToR (leaf) switches", lo=2, hi=32),
        Param("hosts_per_tor", "int", 24, "hosts per ToR", lo=1, hi=200),
        Param("cluster_size", "int", 3, "ToRs per cluster (cluster 0 sends to cluster 1)", lo=1, hi=32),
        Param("paths", "choice", "single", "leaf-spine routing: single path per ToR pair (paper) or spread",
              choices=("single", "spread")),
        Param("cca", "choice", "cubic", "congestion-control profile of every host (the kernel's own, "
              "with its defaults)", choices=("cubic", "reno")),
        Param("datapath", "choice", "auto", "OVS datapath: auto (kernel if available), system, netdev",
              choices=("auto", "system", "netdev")),
        Param("timeout", Dim.TIME, "1800 s", "longest run; transfers still open are then incomplete",
              lo=1, hi=86400),
    )
    metrics = (
        *_class_metrics(),
        Metric("reconfigurations", "count", "OSS reconfigurations that started during the traffic"),
        Metric("reconfig_ms_max", "ms", "longest OSS reconfiguration (controller request to flows installed)"),
        Metric("oss_bytes", "B", "bytes through the optical space switch (paper units)"),
        Metric("makespan_s", "s", "time from t0 to the end of the last transfer"),
        Metric("switch_disconnects", "count", "OpenFlow switch disconnections during the point"),
    )

    @classmethod
    def analysis(cls) -> Analysis:
        from analysis import e3

        return e3

    @classmethod
    def check(cls, defn: Definition) -> None:
        super().check(defn)
        for p in defn.points():
            v = p.values
            try:
                size = _size(v)
                if v["scheduler"] in ("dt", "on-demand"):
                    plan_hosts(size, v["transfers"], v["mice_per_elephant"])
            except DefinitionError as exc:
                raise DefinitionError(exc.key, exc.value, exc.accepted, defn.source) from None

    @classmethod
    def topology(cls, values: dict[str, Any], tdf: TimeDilation) -> "Topo":
        """The leaf-spine of OVS bridges in secure fail mode (the controller decides)."""
        from topologies.leafspine import LeafSpine

        size = _size(values)
        _, shape = _links(values, tdf)
        return LeafSpine(spines=size.spines, tors=size.tors, hosts_per_tor=size.hosts_per_tor,
                         cluster_size=size.cluster_size, switch="ovs",
                         switch_opts={"datapath": values["datapath"], "fail_mode": "secure"},
                         link_opts={"shape": shape, "mtu": MTU})

    @classmethod
    def point_values(cls, ctx: "PointContext") -> dict[str, Any]:
        """The point's values with ``datapath = auto`` resolved (system or netdev)."""
        v = ctx.point.values
        return {**v, "datapath": resolve_datapath(v["datapath"])}

    @classmethod
    def fabric_key(cls, values: dict[str, Any], tdf: TimeDilation) -> Hashable:
        # Points differ in scheduler and workload only: namespaces, links and bridges are
        # built once per fabric (measured at the paper's size: a point took 43 s instead
        # of 63 s); each point gets its own controller, which deletes every flow and sets
        # every special port on connect.
        rate_emu, shape = _links(values, tdf)
        return (_size(values), values["datapath"], rate_emu, shape.queue_packets)

    @classmethod
    def fabric_note(cls, values: dict[str, Any]) -> str:
        size = _size(values)
        return (f"building the leaf-spine ({size.tors} ToRs x {size.hosts_per_tor} hosts); later points "
                "with the same fabric reuse it under a new controller")

    @classmethod
    def workload(cls, fp: FlowPoint) -> "Schedule":
        v, D = fp.values, fp.ctx.tdf
        size = _size(v)
        rate_emu, shape = _links(v, D)
        sched = workload(size, v)
        fp.ctx.write_json("workload.json", {**sched.meta, "flows": len(sched), "datapath": v["datapath"],
                                            "rate_emulation_bps": rate_emu, "queue_packets": shape.queue_packets})
        fp.ctx.progress(f"leaf-spine {size.tors} ToRs x {size.hosts_per_tor} hosts, {len(sched)} transfers, "
                        f"{v['scheduler']}, {v['datapath']} datapath, links {rate_emu / 1e6:.3g} Mbit/s "
                        "(emulation)")
        return sched

    @classmethod
    def participants(cls, fp: FlowPoint) -> list[Any]:
        assert fp.schedule is not None
        return [fp.emu[h] for h in sorted(fp.schedule.hosts())]

    @classmethod
    def prepare(cls, fp: FlowPoint) -> None:
        from testbed import nsops

        fp.ctx.write_json("fabric.json", {"built_for_this_point": fp.built, "datapath": fp.values["datapath"]})
        for h in fp.hosts:
            # As in a new fabric: no neighbour entry (ARP goes through the controller
            # again); the base resets the TCP metrics.
            nsops.flush_neighbours(h.netns)
            h.sysctl("net.ipv4.tcp_timestamps", 0)   # 1460 B payload in a 1500 B MTU (paper)

    @classmethod
    def profile_rate_bps(cls, values: dict[str, Any]) -> float:
        return values["link_rate"].si * values["scale"].si

    @classmethod
    def traffic(cls, fp: FlowPoint) -> TrafficPlan:
        # until every transfer ended or the timeout (then the open ones are recorded as
        # incomplete when the agent stops the point)
        on_demand = fp.values["scheduler"] == "on-demand"
        return TrafficPlan(limit_s=fp.values["timeout"].si, granularities_s=(1.0,),
                           notify_tags=("elephant",) if on_demand else ())

    @classmethod
    @contextlib.contextmanager
    def control(cls, fp: FlowPoint) -> Iterator[None]:
        """The os-ken controller of the point's scheduler around the traffic; under
        on demand the broker reserves every elephant's path first and releases each
        when it ended (a polled timeline hook)."""
        from controllers.broker import OnDemandBroker
        from controllers.portmap import PortMap
        from controllers.e3_process import E3ControllerProcess

        v, D, ctx = fp.values, fp.ctx.tdf, fp.ctx
        assert fp.schedule is not None
        ip_of = {h.name: h.ip for h in fp.hosts}
        portmap = PortMap.from_emulation(fp.emu, paths=v["paths"])
        elephants = [(ip_of[f.src], ip_of[f.dst]) for f in fp.schedule.flows if f.tag == "elephant"]
        sse_emu = D.time_to_emulation(v["sse"].si)
        # os-ken starts in seconds natively but can take a minute or more in a TCG guest
        with E3ControllerProcess(ctx.ledger, portmap, ctx.dir, scheduler=v["scheduler"], sse_s=sse_emu,
                                 elephants=elephants, ready_timeout_s=300.0) as ctl:
            oss_before = port_bytes(fp.emu, "oss")
            broker = None
            if v["scheduler"] == "on-demand":
                broker = OnDemandBroker(ctl, fp.schedule, ip_of, ctx.dir / "broker.jsonl")
            try:
                if broker:
                    broker.reserve_all()
                    fp.timeline.poll(lambda run: broker.poll(run.ended_flows()))
                yield
            finally:
                if broker:
                    broker.close()
            if broker:
                # the controller applies a release asynchronously: wait (bounded) until the
                # last one is applied, so that reconfigurations.jsonl records every one
                ctl.wait_for(lambda s: s["circuits"] == [], "the released circuits to be removed")
            fp.measured["oss_bytes"] = port_bytes(fp.emu, "oss") - oss_before
            fp.measured["reconfigs"] = ctl.reconfigurations()
            fp.measured["lost"] = [e for e in ctl.switch_events() if e["event"] == "disconnected"]

    @classmethod
    def summarise(cls, fp: FlowPoint, result: "TrafficResult") -> dict[str, Any]:
        lost = fp.measured["lost"]
        if lost:
            fp.ctx.progress(f"warning: {len(lost)} switch disconnect(s) during the point "
                            f"({', '.join(sorted({e['switch'] for e in lost}))}); see switch-events.jsonl")
        scale = fp.values["scale"].si
        rows = transfer_rows(result.flows, scale)
        fp.ctx.write_csv("transfers.csv", rows)
        assert fp.run is not None
        return {**summarise(rows, fp.measured["reconfigs"], fp.measured["oss_bytes"] / scale, fp.run.t0,
                            fp.ctx.tdf), "switch_disconnects": len(lost)}


def _size(v: dict[str, Any]) -> "LeafSpineSize":
    """The checked leaf-spine size of values ``v`` (raises DefinitionError)."""
    from topologies.leafspine import LeafSpineSize

    return LeafSpineSize(v["spines"], v["tors"], v["hosts_per_tor"], v["cluster_size"]).check()


def _links(v: dict[str, Any], tdf: TimeDilation) -> tuple[float, "LinkShape"]:
    """Every link's emulation rate (bit/s: paper rate x scale / D) and shape (queue
    limits scale with the rate, at least MIN_QUEUE packets)."""
    from testbed.net import LinkShape

    scale = v["scale"].si
    rate_emu = tdf.rate_to_emulation(v["link_rate"].si * scale)
    return rate_emu, LinkShape(rate_bps=rate_emu, queue_packets=max(MIN_QUEUE, round(v["queue"] * scale)))


def resolve_datapath(choice: str) -> str:
    """``auto``: the kernel datapath where the kernel has it (the guest), else userspace."""
    if choice != "auto":
        return choice
    return "system" if _ovs_kernel_ok() else "netdev"


@functools.cache
def _ovs_kernel_ok() -> bool:
    """Whether this kernel has OVS's kernel datapath: probed once per run (process),
    and only that feature."""
    from testbed.features import Feature, probe_all

    return probe_all([Feature.OVS_KERNEL])[Feature.OVS_KERNEL].ok


def plan_hosts(size: LeafSpineSize, transfers: int, mice_per_elephant: int) -> dict[str, int]:
    """How many hosts of every sender ToR carry elephants ("elephant_hosts") and mice
    ("mouse_hosts"). Elephant and mouse transfers never share a (source, destination)
    host pair, so the controller can tell them apart by addresses (DT, on demand)."""
    per_tor = math.ceil(transfers / size.cluster_size)
    group = mice_per_elephant + 1
    elephants = math.ceil(per_tor / group) if mice_per_elephant else per_tor
    mice = per_tor - elephants
    H = size.hosts_per_tor
    if per_tor <= H:
        return {"elephant_hosts": elephants, "mouse_hosts": mice}
    if mice and elephants and H < 2:
        raise DefinitionError("params.hosts_per_tor", H, f"at least 2 when {transfers} transfers mix elephants "
                              "and mice on one ToR (they must not share a host pair)")
    e_hosts = min(H - (1 if mice else 0), max(1, round(H * elephants / per_tor)))
    return {"elephant_hosts": e_hosts, "mouse_hosts": H - e_hosts}


def workload(size: LeafSpineSize, v: dict[str, Any]) -> Any:
    """The point's VM migrations (paper sizes x scale): testbed.traffic.migration_batch
    over the ToRs of cluster 0 -> cluster 1 (transfer i from the (i mod 3)-th sender ToR
    to the (i mod 3)-th receiver ToR), then placed on hosts: on each ToR the elephants
    first, one host each while hosts last (else round-robin over the ToR's elephant or
    mouse hosts, plan_hosts), the receiver being the same host index on the peer ToR."""
    from testbed.traffic import Schedule, migration_batch
    from topologies.leafspine import host_name

    a, b = size.cluster_tors(0), size.cluster_tors(1)
    base = migration_batch(a, b, v["transfers"], mice_per_elephant=v["mice_per_elephant"],
                           mouse_bytes=int(v["mouse_size"].si), elephant_bytes=int(v["elephant_size"].si),
                           size_scale=v["scale"].si)
    plan = plan_hosts(size, v["transfers"], v["mice_per_elephant"])
    flows = []
    counters: dict[tuple[str, str], int] = {}
    for f in sorted(base.flows, key=lambda f: (f.tag != "elephant", f.id)):
        tor_a, tor_b = int(f.src[1:]), int(f.dst[1:])
        k = counters.get((f.src, f.tag), 0)
        counters[(f.src, f.tag)] = k + 1
        if f.tag == "elephant":
            i = k % plan["elephant_hosts"]
        else:
            i = plan["elephant_hosts"] + k % max(1, plan["mouse_hosts"])
            i = i % size.hosts_per_tor
        flows.append(replace(f, src=host_name(tor_a, i), dst=host_name(tor_b, i)))
    flows.sort(key=lambda f: f.id)
    return Schedule(tuple(flows), {**base.meta, "placement": plan, "sender_tors": a, "receiver_tors": b})


def port_bytes(emu: Any, switch: str) -> int:
    """Bytes received by all ports of an OVS switch (root-namespace veth counters)."""
    total = 0
    for intf in emu[switch].intfs:
        try:
            total += int(open(f"/sys/class/net/{intf}/statistics/rx_bytes").read())
        except OSError:
            pass
    return total


def transfer_rows(flows: list[Any], scale: float) -> list[dict[str, Any]]:
    """Per-transfer records in paper units (sizes and throughput / scale)."""
    rows = []
    for f in flows:
        done = f.status == "complete"
        rows.append({"id": f.flow_id, "tag": f.tag, "src": f.src, "dst": f.dst,
                     "size_bytes": round(f.size_bytes / scale), "status": f.status,
                     "fct_s": f.fct_s if done else math.nan,
                     "throughput_bps": f.goodput_bps / scale if done and f.goodput_bps else math.nan,
                     "retrans_segs": f.retrans_segs if f.retrans_segs is not None else math.nan,
                     "start_s": f.start_s, "end_s": f.end_s})
    return rows


def summarise(rows: list[dict[str, Any]], reconfigs: list[dict[str, Any]], oss_bytes: float,
              t0: float | None, D: Any) -> dict[str, Any]:
    """The point's summary: per-run averages per class (the paper's tables are min /
    average / max of these over repetitions), counts, reconfigurations, OSS bytes."""
    out: dict[str, Any] = {}
    for tag, plural in (("elephant", "elephants"), ("mouse", "mice")):
        done = [r for r in rows if r["tag"] == tag and r["status"] == "complete"]
        out[plural] = sum(r["tag"] == tag for r in rows)
        out[f"{plural}_complete"] = len(done)
        out[f"{tag}_throughput_mean_bps"] = statistics.fmean(r["throughput_bps"] for r in done) if done else math.nan
        out[f"{tag}_fct_mean_s"] = statistics.fmean(r["fct_s"] for r in done) if done else math.nan
        out[f"{tag}_retrans_segs"] = sum(int(r["retrans_segs"]) for r in rows
                                         if r["tag"] == tag and not math.isnan(r["retrans_segs"]))
    during = [r for r in reconfigs if t0 is None or r["t_start"] >= t0]
    out["reconfigurations"] = len(during)
    out["reconfig_ms_max"] = max((1e3 * (r["t_done"] - r["t_start"]) for r in reconfigs), default=math.nan)
    out["oss_bytes"] = oss_bytes
    out["makespan_s"] = max((r["end_s"] for r in rows if r["end_s"] is not None), default=math.nan)
    return out
