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

import math
import statistics
import time
from dataclasses import replace
from typing import Any

from testbed.definition import Definition, Param
from testbed.errors import DefinitionError
from testbed.kinds import ExperimentKind
from testbed.runner import PointContext
from testbed.units import Dim
from topologies.leafspine import LeafSpineSize, host_name

SCHEDULERS = ("none", "ut", "dt", "on-demand")
#: IP MTU; with TCP timestamps off the TCP payload is the paper's 1460 B
MTU = 1500
MIN_QUEUE = 10


class E3LeafSpine(ExperimentKind):
    name = "e3-leafspine"
    analysis = "e3"
    doc = "E3: leaf-spine + SDN-reconfigured optical space switch; VM migrations under none/UT/DT/on-demand"
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
        Param("cca", "choice", "cubic", "TCP congestion control of every host (kernel name)",
              choices=("cubic", "reno")),
        Param("datapath", "choice", "auto", "OVS datapath: auto (kernel if available), system, netdev",
              choices=("auto", "system", "netdev")),
        Param("timeout", Dim.TIME, "1800 s", "longest run; transfers still open are then incomplete",
              lo=1, hi=86400),
    )

    @classmethod
    def features(cls, values: dict[str, Any]) -> set[str]:
        need = {"netns", "htb"}
        need.add("ovs-kernel" if values["datapath"] == "system" else "ovs-userspace")
        return need

    @classmethod
    def check(cls, defn: Definition) -> None:
        for p in defn.points():
            v = p.values
            try:
                size = LeafSpineSize(v["spines"], v["tors"], v["hosts_per_tor"], v["cluster_size"]).check()
                if v["scheduler"] in ("dt", "on-demand"):
                    plan_hosts(size, v["transfers"], v["mice_per_elephant"])
            except DefinitionError as exc:
                raise DefinitionError(exc.key, exc.value, exc.accepted, defn.source) from None

    @classmethod
    def run_point(cls, ctx: PointContext) -> dict[str, Any]:
        from controllers.broker import OnDemandBroker
        from controllers.fabric import Fabric
        from controllers.e3_process import E3ControllerProcess
        from testbed import nsops
        from testbed.net import Emulation, LinkShape
        from testbed.traffic import TrafficError, TrafficRun
        from topologies.leafspine import LeafSpine

        v, D = ctx.point.values, ctx.tdf
        scale = v["scale"].si
        size = LeafSpineSize(v["spines"], v["tors"], v["hosts_per_tor"], v["cluster_size"]).check()
        datapath = resolve_datapath(v["datapath"])
        rate_emu = D.rate_to_emulation(v["link_rate"].si * scale)
        shape = LinkShape(rate_bps=rate_emu, queue_packets=max(MIN_QUEUE, round(v["queue"] * scale)))
        topo = LeafSpine(spines=size.spines, tors=size.tors, hosts_per_tor=size.hosts_per_tor,
                         cluster_size=size.cluster_size, switch="ovs",
                         switch_opts={"datapath": datapath, "fail_mode": "secure"},
                         link_opts={"shape": shape, "mtu": MTU})
        sched = workload(size, v)
        ctx.write_json("workload.json", {**sched.meta, "flows": len(sched), "datapath": datapath,
                                         "rate_emulation_bps": rate_emu, "queue_packets": shape.queue_packets})
        ctx.progress(f"leaf-spine {size.tors} ToRs x {size.hosts_per_tor} hosts, {len(sched)} transfers, "
                     f"{v['scheduler']}, {datapath} datapath, links {rate_emu / 1e6:.3g} Mbit/s (emulation)")
        used = sorted(sched.hosts())
        sse_emu = D.time_to_emulation(v["sse"].si)
        timeout = v["timeout"].si
        built = []

        def build() -> Emulation:
            built.append(True)
            ctx.progress(f"building the leaf-spine ({size.tors} ToRs x {size.hosts_per_tor} hosts); later points "
                         "with the same fabric reuse it under a new controller")
            return Emulation(topo, ctx.ledger, ctx.token)

        # Points differ in scheduler and workload only: namespaces, links and bridges are
        # built once per fabric (measured at the paper's size: a point took 43 s instead
        # of 63 s); each point gets its own controller, which deletes every flow and sets
        # every special port on connect.
        emu = ctx.keep("e3-fabric", (size, datapath, rate_emu, shape.queue_packets), build)
        ctx.write_json("fabric.json", {"built_for_this_point": bool(built), "datapath": datapath})
        hosts = [emu[h] for h in used]
        for h in hosts:
            # As in a new fabric: no neighbour entry (ARP goes through the controller
            # again) and no TCP metrics (ssthresh, RTT) carried from an earlier point.
            nsops.flush_neighbours(h.netns)
            h.sysctl("net.ipv4.tcp_no_metrics_save", 1)
            h.sysctl("net.ipv4.tcp_timestamps", 0)   # 1460 B payload in a 1500 B MTU (paper)
        ip_of = {h.name: h.ip for h in hosts}
        fabric = Fabric.from_emulation(emu, paths=v["paths"])
        elephants = [(ip_of[f.src], ip_of[f.dst]) for f in sched.flows if f.tag == "elephant"]
        # os-ken starts in seconds natively but can take a minute or more in a TCG guest
        with E3ControllerProcess(ctx.ledger, fabric, ctx.dir, scheduler=v["scheduler"], sse_s=sse_emu,
                                 elephants=elephants, ready_timeout_s=300.0) as ctl:
            oss_before = port_bytes(emu, "oss")
            broker = None
            if v["scheduler"] == "on-demand":
                broker = OnDemandBroker(ctl, sched, ip_of, ctx.dir / "broker.jsonl")
            try:
                if broker:
                    broker.reserve_all()
                with ctx.instruments(emu, count_ports=False), \
                        TrafficRun(emu, hosts, sched, v["cca"], ctx.dir / "traffic", D, granularities_s=(1.0,),
                                   notify_tags=("elephant",) if broker else ()) as run:
                    # until every transfer ended or the timeout (then the open ones
                    # are recorded as incomplete when the agent stops the point)
                    deadline = time.monotonic() + D.time_to_emulation(timeout)
                    while True:
                        done = run.poll(0.05)
                        if broker:
                            broker.poll(run.ended_flows())
                        if done or time.monotonic() > deadline:
                            break
            finally:
                if broker:
                    broker.close()
            oss_bytes = port_bytes(emu, "oss") - oss_before
            reconfigs = ctl.reconfigurations()
            lost = [e for e in ctl.switch_events() if e["event"] == "disconnected"]
        if lost:
            ctx.progress(f"warning: {len(lost)} switch disconnect(s) during the point "
                         f"({', '.join(sorted({e['switch'] for e in lost}))}); see switch-events.jsonl")
        res = run.result
        if res is None:
            raise TrafficError(f"{ctx.point.id}: the traffic agent wrote no results; see {ctx.dir / 'traffic'}")
        res.write()
        rows = transfer_rows(res.flows, scale)
        ctx.write_csv("transfers.csv", rows)
        return {**summarise(rows, reconfigs, oss_bytes / scale, run.t0, D), "switch_disconnects": len(lost)}


def resolve_datapath(choice: str) -> str:
    """``auto``: the kernel datapath where the kernel has it (the guest), else userspace."""
    if choice != "auto":
        return choice
    from testbed.features import probe_all

    return "system" if probe_all()["ovs-kernel"].ok else "netdev"


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
