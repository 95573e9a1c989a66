"""``e1-fattree``: E1 of the hybrid-switch paper (Minakhmetov, Ware, Iannone).

A k-ary fat-tree of optical switches of one port architecture (all-optical, hybrid
with n_e buffer ports, electronic store-and-forward; testbed/optical/architectures.py,
docs/optical-switch.md) carries Poisson file transfers between random server pairs;
every server runs one congestion-control profile (SAW, SAWL, SACK, mSACK, or a kernel
one). Per point: the network throughput in the measurement window (paper units),
per-flow records, and the switches' counters (cut-through, buffered = OEO, dropped,
max buffer occupancy).

Paper -> emulation: every time x D and every rate / D (the time dilation factor);
sizes, lengths and counts unchanged, except ``size_scale``, which multiplies every
file size (a small-machine knob, recorded in the results; the paper's loads then carry
proportionally fewer bytes). Frames are 9064 B on the wire (MTU 9050 with TCP
timestamps: 8998 B payload); TSO/GSO/GRO are off, so one skb is one packet.
"""

from __future__ import annotations

import contextlib
import math
import statistics
from collections.abc import Hashable, Iterator
from typing import TYPE_CHECKING, Any

from testbed.cc import lossdetect
from testbed.dilation import TimeDilation
from testbed.errors import DefinitionError
from testbed.experiment import Definition, Param
from testbed.family import Analysis
from testbed.flow_family import FlowFamily, FlowPoint, TrafficPlan
from testbed.metrics import Metric
from testbed.optical import architectures
from testbed.optical.architectures import Assignment
from testbed.units import Dim, Quantity, UnitError

if TYPE_CHECKING:
    from mininet.topo import Topo

    from testbed.context import PointContext
    from testbed.traffic import Schedule, TrafficResult

#: IP MTU giving 9064 B Ethernet frames (9050 + 14 B header); the paper's 9000 B payload
#: becomes 8998 B because Linux puts 12 B of TCP timestamps in every segment
MTU = 9050
#: the role of every switch of the fat-tree (its architecture must serve it)
SWITCH_ROLE = architectures.DEFAULT_SWITCH_ROLE
CCAS = ("saw", "sawl", "sack", "msack", "reno", "cubic")


class E1FatTree(FlowFamily):
    name = "e1-fattree"
    doc = "E1: fat-tree of hybrid / all-optical / electronic switches, Poisson file transfers, TCP profiles"
    params = (
        Param("k", "int", 4, "fat-tree arity (servers = k^3/4, switches = 5k^2/4)", lo=2, hi=16),
        Param("switch", "str", "hybrid:2",
              "switch configuration of every switch: a port architecture (all-optical | hybrid:N_E | "
              "electronic | hybrid-hold:N_E, the hybrid switch realised by holding), optionally @INITIAL_RTO "
              "(e.g. 'electronic@1 s' overrides initial_rto)"),
        Param("link_length", Dim.LENGTH, "10 m", "length of every link (propagation at n = 1.45)",
              lo=0, hi=100e3),
        Param("link_rate", Dim.RATE, "10 Gbit/s", "rate of every link and server NIC", lo=0, lo_open=True,
              hi=400e9),
        Param("cca", "choice", "sack", "congestion-control profile of every server", choices=CCAS),
        Param("initial_rto", Dim.TIME, "1 ms", "initial RTO of the profile (paper: 1 ms, or 1 s)",
              lo=0, lo_open=True, hi=60.0),
        Param("sawl_p", "int", 4, "SAWL: RTO extension in packet durations (p x tau)", lo=0, hi=1000),
        Param("initial_window", "int", 1, "initial congestion window in segments (route initcwnd; the "
              "paper states none, classic slow start begins at one); saw/sawl always 1", lo=1, hi=1000),
        Param("load", Dim.FREQUENCY, "1000 /s", "file-transfer requests per second, whole network",
              lo=0, lo_open=True, hi=1e9),
        Param("size_p_small", Dim.RATIO, "80 %", "probability of the small mode of the file size", lo=0, hi=1),
        Param("size_small", Dim.SIZE, "10 MB", "median file size of the small mode", lo=1, hi=1e12),
        Param("size_large", Dim.SIZE, "1 GB", "median file size of the large mode", lo=1, hi=1e12),
        Param("size_sigma", "float", 0.5, "log-standard-deviation of both modes of the file size",
              lo=0, hi=5),
        Param("size_scale", Dim.RATIO, "100 %", "factor on every file size (small machines; recorded)",
              lo=0, lo_open=True, hi=1),
        Param("warmup", Dim.TIME, "1 ms", "traffic before the measurement window", lo=0, hi=3600),
        Param("window", Dim.TIME, "5 ms", "measurement window", lo=0, lo_open=True, hi=3600),
        Param("drain", Dim.TIME, "0 s", "time after the window before agents stop (flows then incomplete)",
              lo=0, hi=3600),
    )
    metrics = (
        Metric("throughput_bps", "bit/s", "network throughput: payload bytes received in the window x 8 / window"),
        Metric("offered_load", "1", "offered load: requests/s x mean file size x 8 / (servers x link rate)"),
        Metric("flows", "count", "file transfers started"),
        Metric("flows_completed", "count", "transfers completed"),
        Metric("flows_incomplete", "count", "transfers still open when the agent stopped"),
        Metric("flows_failed", "count", "transfers that failed (connect or send error)"),
        Metric("fct_median_s", "s", "median completion time of the completed transfers"),
        Metric("data_segments", "count", "data segments sent, retransmissions included (tcpi_data_segs_out)"),
        Metric("retransmits", "count", "retransmitted segments (tcpi_total_retrans)"),
        Metric("spurious_retransmits", "count", "retransmissions a DSACK confirmed spurious (lower bound)"),
        Metric("spurious_fraction", "1", "spurious_retransmits / data_segments"),
        Metric("retransmits_beyond_drops", "count", "retransmits minus switch drops: spurious at least"),
        Metric("loss_events_rto", "count", "losses the senders detected by an RTO expiry (kernel counters of "
               "every server, testbed/cc/lossdetect.py)"),
        Metric("loss_events_fast", "count", "losses the senders detected by duplicate ACKs / SACK (fast "
               "recovery entries)"),
        Metric("spurious_recoveries_undone", "count", "RTO and fast recoveries the kernel undid as spurious "
               "(timestamps, DSACK)"),
        Metric("reorderings", "count", "reorderings the senders detected (per-packet ECMP: a late segment, "
               "not a lost one)"),
        Metric("retransmits_suppressed", "count", "retransmissions the kernel skipped because the original "
               "was still in the emulated network (TCPSpuriousRtxHostQueues; the paper's TCP sends them)"),
        Metric("packets_switched", "count", "packets the switches handled (cut through, buffered, dropped)"),
        Metric("packets_dropped", "count", "packets the switches dropped"),
        Metric("loss_ratio", "1", "packets_dropped / packets_switched"),
        Metric("oeo_fraction", "1", "buffered (OEO-converted) share of the forwarded packets"),
        Metric("max_buffer_bytes", "B", "largest buffer occupancy of any switch"),
        Metric("lateness_p99_s", "s", "99th percentile of the emulation's release lateness (paper time)"),
        Metric("decisions_late", "count", "packets a holding switch (hybrid-hold) decided late: they reached it "
               "after their instant was decided (lateness beyond its lookahead M: those decisions may differ from "
               "the paper's switch; docs/hybrid-holding.md); empty for switches that decide at arrival",
               since="2026-11-29"),
        Metric("decided_after_stamp", "count", "packets a holding switch decided after their stamp (the lookahead "
               "M plus the timer's lag beyond the link's propagation): they left that much late, which the next "
               "node's lateness counts; empty for switches that decide at arrival", since="2026-11-29"),
        Metric("initial_rto_effective_s", "s", "initial RTO the kernel used (paper time; below the "
               "requested one when x D exceeds TCP_RTO_MAX)"),
        *lossdetect.MEMORY_METRICS,
        Metric("tcp_mem_bytes", "B", "the kernel's global TCP memory pressure threshold during the point "
               "(net.ipv4.tcp_mem[1] x page size; raised to half the machine's memory for the run)",
               since="2026-11-28"),
    )

    @classmethod
    def analysis(cls) -> Analysis:
        from analysis import e1

        return e1

    @classmethod
    def topology(cls, values: dict[str, Any], tdf: TimeDilation) -> "Topo":
        """The k-ary fat-tree of optical switches, every switch of the point's architecture."""
        from topologies.fattree import FatTree

        arch, _ = parse_switch(values["switch"], values["k"])
        return FatTree(k=values["k"], switch="optical",
                       switch_opts={"arch": arch.spec, "rate_bps": values["link_rate"].si, "tdf": tdf.factor},
                       link_opts={"length_m": values["link_length"].si, "mtu": MTU})

    @classmethod
    def check(cls, defn: Definition) -> None:
        if defn.cca is not None:
            raise DefinitionError("cca", "[cca] table", "no [cca] table: E1 runs one profile on every "
                                  "server, chosen (and swept) with params.cca", defn.source)
        for p in defn.points():
            v = p.values
            if v["k"] % 2:
                raise DefinitionError("params.k", v["k"], "an even integer from 2 to 16", defn.source)
            try:
                parse_switch(v["switch"], v["k"])
            except DefinitionError as exc:
                raise DefinitionError(exc.key, exc.value, exc.accepted, defn.source) from None
            if v["cca"] in ("saw", "sawl") and v["initial_window"] != 1:
                raise DefinitionError("params.initial_window", v["initial_window"],
                                      f"1 with cca = {v['cca']!r} (one segment in flight, always); "
                                      "1..1000 for sack, msack, reno, cubic", defn.source)

    @classmethod
    def profile_options(cls, v: dict[str, Any]) -> dict[str, Any]:
        """Profile options of a point: initial RTO (paper time), SAWL's p, and for the
        window-based profiles the initial window; reno/cubic also get an ACK per
        segment (quickack), which the paper's profiles have by default."""
        opts: dict[str, Any] = {}
        if v["cca"] in ("saw", "sawl", "sack", "msack", "reno", "cubic"):
            opts["init_rto"] = v["initial_rto"]
        if v["cca"] == "sawl":
            opts["p"] = int(v["sawl_p"])
        if v["cca"] in ("sack", "msack", "reno", "cubic"):
            opts["initial_window"] = int(v.get("initial_window", 1))
        if v["cca"] in ("reno", "cubic"):
            opts["quickack"] = 1
        return opts

    @classmethod
    def profile_rate_bps(cls, values: dict[str, Any]) -> float:
        return values["link_rate"].si

    @classmethod
    def point_values(cls, ctx: "PointContext") -> dict[str, Any]:
        """The point's values; ``switch = "...@RTO"`` overrides initial_rto."""
        v = ctx.point.values
        _, rto = parse_switch(v["switch"], v["k"])
        return {**v, "initial_rto": rto} if rto is not None else v

    @classmethod
    def fabric_key(cls, values: dict[str, Any], tdf: TimeDilation) -> Hashable:
        # Only the switches' architecture differs between points of one fabric: it is map
        # configuration, so the namespaces, links and programs are built once.
        return (values["k"], values["link_length"].si, values["link_rate"].si, tdf.factor)

    @classmethod
    def fabric_note(cls, values: dict[str, Any]) -> str:
        from topologies.fattree import FatTreeSize

        size = FatTreeSize(values["k"])
        return (f"building the k={values['k']} fat-tree ({size.servers} servers, {size.switches} "
                "switches); later points with the same k, links and D reuse it")

    @classmethod
    def prepare(cls, fp: FlowPoint) -> None:
        """The switches' port model; the kernel's global TCP memory limit raised for the
        run (testbed.tcpmem: ``tcp_mem`` is one limit for the whole kernel, sized at
        boot for one machine, here shared by every server; at the 3 GB guest's 183 MB
        pressure threshold a loaded point would see the kernel shrink buffers and drop
        segments, which the paper's servers do not)."""
        from testbed import tcpmem

        arch, _ = parse_switch(fp.values["switch"], fp.values["k"])
        fp.emu.optical.reconfigure_switches(arch)
        need = tcpmem.half_of_memory()
        fp.measured["tcp_mem"] = fp.ctx.keep("tcp-mem", need, lambda: tcpmem.at_least(fp.ctx.ledger, need))

    @classmethod
    def workload(cls, fp: FlowPoint) -> "Schedule":
        """Poisson file transfers between random server pairs (bimodal lognormal sizes)."""
        from testbed.traffic import BimodalLognormal, poisson_schedule

        v, D = fp.values, fp.ctx.tdf
        sizes = BimodalLognormal(v["size_p_small"].si, v["size_small"].si, v["size_sigma"],
                                 v["size_large"].si, v["size_sigma"])
        duration = v["warmup"].si + v["window"].si
        sched = poisson_schedule([h.name for h in fp.emu.hosts()], v["load"].si, duration, sizes,
                                 seed=fp.ctx.point.seed, size_scale=v["size_scale"].si)
        fp.ctx.write_json("schedule-meta.json", {**sched.meta, "flows": len(sched)})
        arch, _ = parse_switch(v["switch"], v["k"])
        fp.ctx.progress(f"{len(sched)} transfers over {D.time_to_emulation(duration + v['drain'].si):.3g} s "
                        f"(emulation), {v['cca']} over {arch.name} switches")
        return sched

    @classmethod
    def traffic(cls, fp: FlowPoint) -> TrafficPlan:
        from testbed.traffic import Window

        v = fp.values
        warmup, window, drain = v["warmup"].si, v["window"].si, v["drain"].si
        return TrafficPlan(window=Window(warmup_s=warmup, length_s=window), duration_s=warmup + window + drain,
                           granularities_s=(window / 20,))

    @classmethod
    @contextlib.contextmanager
    def control(cls, fp: FlowPoint) -> Iterator[None]:
        """The servers' TCP loss-detection counters around the traffic."""
        from testbed.cc import lossdetect

        before = lossdetect.snapshot([h.netns for h in fp.hosts])
        yield
        fp.measured["tcp"] = lossdetect.between(before, lossdetect.snapshot([h.netns for h in fp.hosts]))

    @classmethod
    def summarise(cls, fp: FlowPoint, result: "TrafficResult") -> dict[str, Any]:
        from testbed import tcpmem

        row = summarise(result, fp.ctx.optical_counters or [], fp.ctx, fp.values)
        tcp = fp.measured.get("tcp")
        row.update(loss_columns(tcp))
        row.update(lossdetect.memory_columns(tcp))
        mem = fp.measured.get("tcp_mem")
        row["tcp_mem_bytes"] = mem[1] * tcpmem.page_size() if mem else math.nan
        if tcp is not None and (tcp.memory_pressures or tcp.memory_drops or tcp.listen_drops):
            fp.ctx.progress(f"warning: the emulating kernel ran short: {tcp.memory_pressures} TCP memory "
                            f"pressure event(s), {tcp.memory_drops} segment(s) dropped by receivers for want of "
                            f"memory, {tcp.listen_drops} connection request(s) dropped by listeners "
                            "(emulation artefacts; summary.csv has them, the report leaves the point's "
                            "memory-short runs out; tcp_mem is half the machine's memory: in the guest, run "
                            "again with a larger TESTBED_GUEST_MEMORY, e.g. 6G, docs/e1.md)")
        # the initial RTO the kernel used (paper time): below the requested one when x D
        # exceeds TCP_RTO_MAX (profiles.json holds the note, the log a warning)
        rtos = {h["init_rto"]["effective_paper_s"] for h in fp.cca.values() if "init_rto" in h}
        row["initial_rto_effective_s"] = min(rtos) if rtos else math.nan
        return row


#: architectures realised by holding that are E1's own switch (their reference is the
#: paper's switch, testbed/optical/eventsim.py): the hybrid switch without the port
#: model's commitment at arrival (docs/hybrid-holding.md)
HELD_SWITCHES = ("hybrid-hold",)


def switch_architectures() -> list[architectures.Architecture]:
    """The port architectures an E1 switch may have: those of the registry for a switch
    of role core that decide per packet (they have a per-packet reference model), and
    :data:`HELD_SWITCHES`. An architecture that needs other nodes to work with it
    (obs-core, which drops the bursts an obs-edge announces) has no place in a fat-tree
    of identical switches."""
    return [a for a in architectures.REGISTRY
            if SWITCH_ROLE in a.roles and (a.reference is not None or a.name in HELD_SWITCHES)]


def parse_switch(spec: str, k: int) -> tuple[Assignment, Quantity | None]:
    """``"hybrid:2@1 s"`` -> (hybrid with n_e = 2, 1 s): the port architecture of every
    switch (testbed/optical/architectures.py, for a switch of ``k`` ports) and the
    initial-RTO override, or None.

    The paper's curves are n_e = 0 (all-optical), hybrid n_e in {2, 5, 8} (k = 8), and
    electronic with initial RTO 1 ms or 1 s: one ``switch`` sweep covers them all.
    Raises DefinitionError (key params.switch, the whole value) naming the accepted
    syntax and ranges."""
    archs = switch_architectures()

    def bad(why: str) -> DefinitionError:
        syntax = " | ".join(a.syntax for a in archs)
        return DefinitionError("params.switch", spec, f"{syntax}, optionally followed by @INITIAL_RTO{why}")

    config, _, rto_text = spec.partition("@")
    rto = None
    if rto_text:
        try:
            rto = Quantity.parse(rto_text, Dim.TIME)
        except UnitError as exc:
            raise bad(f" ({exc})") from None
        if not 0 < rto.si <= 60:
            raise bad(" (the initial RTO must be > 0 and <= 60 s)")
    if config.partition(":")[0].strip() not in [a.name for a in archs]:
        ranges = [p.accepted(k) for a in archs for p in a.params]
        raise bad("".join(f"; {r}" for r in ranges))
    try:
        return architectures.parse(config, ports=k, role=SWITCH_ROLE, key="params.switch"), rto
    except DefinitionError as exc:
        raise bad(f" ({exc.accepted})") from None


def summarise(res: Any, counters: list[dict], ctx: "PointContext", v: dict[str, Any]) -> dict[str, Any]:
    """The point's summary row (paper units) from the traffic result and switch counters."""
    D = ctx.tdf
    flows = res.flows
    done = [f for f in flows if f.status == "complete"]
    switch_rows = [r for r in counters if r["model"] != "nic"]
    cut = sum(r["cut_through"] for r in switch_rows)
    buffered = sum(r["buffered"] for r in switch_rows)
    dropped = sum(r["dropped"] for r in switch_rows)
    handled = cut + buffered + dropped
    node_occ: dict[str, int] = {}
    for r in switch_rows:
        node_occ[r["node"]] = max(node_occ.get(r["node"], 0), int(r["node_max_occ_bytes"]))
    fidelity = ctx.dir / "fidelity.json"
    lateness_p99 = None
    if fidelity.exists():
        import json

        mon = json.loads(fidelity.read_text())
        lateness_p99 = D.time_to_paper(mon["p99_ns"] / 1e9) if mon.get("packets") else None
    from topologies.fattree import FatTreeSize

    size = FatTreeSize(v["k"])
    mean_size = res_mean_size(v)
    offered = v["load"].si * mean_size * 8 / (size.servers * v["link_rate"].si)
    return {
        "throughput_bps": res.throughput_bps if res.throughput_bps is not None else math.nan,
        "offered_load": offered,
        "flows": len(flows), "flows_completed": len(done),
        "flows_incomplete": sum(f.status == "incomplete" for f in flows),
        "flows_failed": sum(f.status == "failed" for f in flows),
        "fct_median_s": statistics.median(f.fct_s for f in done) if done else math.nan,
        **retransmission_columns(flows),
        # every non-spurious retransmission replaces a copy some switch dropped, so at
        # least this many were spurious (a bound that needs no DSACK to arrive)
        "retransmits_beyond_drops": max(0, sum(f.retrans_segs or 0 for f in flows) - dropped),
        "packets_switched": handled, "packets_dropped": dropped,
        "loss_ratio": dropped / handled if handled else math.nan,
        "oeo_fraction": buffered / (cut + buffered) if cut + buffered else math.nan,
        "max_buffer_bytes": max(node_occ.values(), default=0),
        "lateness_p99_s": lateness_p99 if lateness_p99 is not None else math.nan,
        # holding switches count the packets they decided late (the edt ones decide at arrival)
        "decisions_late": _held_sum(switch_rows, "late"),
        "decided_after_stamp": _held_sum(switch_rows, "decided_after_stamp"),
    }


def _held_sum(rows: list[dict], col: str) -> float:
    """The sum of a holding switch's counter ``col`` over the rows that have it (NaN when
    none has: the switches decide at arrival)."""
    held = [int(r[col]) for r in rows if col in r]
    return sum(held) if held else math.nan


def loss_columns(tcp: Any) -> dict[str, Any]:
    """How the senders detected their losses (a ``lossdetect.LossDetection`` summed
    over every server; None: not measured, NaN columns)."""
    if tcp is None:
        return {k: math.nan for k in ("loss_events_rto", "loss_events_fast", "spurious_recoveries_undone",
                                      "reorderings", "retransmits_suppressed")}
    return {"loss_events_rto": tcp.rto, "loss_events_fast": tcp.fast,
            "spurious_recoveries_undone": tcp.spurious_rto + tcp.spurious_fast, "reorderings": tcp.reordering,
            "retransmits_suppressed": tcp.rtx_suppressed}


def retransmission_columns(flows: list[Any]) -> dict[str, Any]:
    """Per-point retransmission counts, summed over the senders' final TCP_INFO:

    data_segments: data segments sent, retransmissions included (tcpi_data_segs_out);
    retransmits: retransmitted segments (tcpi_total_retrans); spurious_retransmits:
    retransmissions whose original was delivered, as confirmed by a DSACK from the
    receiver (tcpi_dsack_dups; a lower bound: a DSACK carried by a lost ACK is not
    counted); spurious_fraction = spurious_retransmits / data_segments (NaN without data).
    """
    data = sum(f.data_segs_out or 0 for f in flows)
    spurious = sum(f.dsack_dups or 0 for f in flows)
    return {"data_segments": data, "retransmits": sum(f.retrans_segs or 0 for f in flows),
            "spurious_retransmits": spurious,
            "spurious_fraction": spurious / data if data else math.nan}


def res_mean_size(v: dict[str, Any]) -> float:
    """Mean file size in bytes after size_scale (lognormal mixture, exact)."""
    p, s = v["size_p_small"].si, v["size_sigma"]
    m = p * v["size_small"].si + (1 - p) * v["size_large"].si
    return m * math.exp(s * s / 2) * v["size_scale"].si
