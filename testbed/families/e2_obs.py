"""``e2-obs``: E2, TCP SACK over optical burst switching with slow (MEMS) and fast
(SOA) paths (Casoni, Raffaelli, "TCP Performance in Hybrid Multigranular OBS
Networks"; spec ``../shared/spec/e2-obs-multigranular.md``; docs/e2.md).

N long-lived TCP flows, each from a source behind its own 100 Mb/s access link to its
own sink, cross one OBS path (topologies/obs.py): the ingress edge assembles their
packets into bursts (``obs-edge``: the ``obsburst`` qdisc, Tmax / Lmax / offset of the
path class), the bufferless core loses each burst with probability Pl (``obs-core``,
drawn from the run's seed by burst id), the egress edge forwards to the sinks. One
path class per run, as in the paper (its slow and fast connections are separate
scenarios): ``slow`` (N = 80, 10 Gb/s, Tmax 10 ms, Lmax 10 MB, offset 10 ms, RTO 30 ms)
or ``fast`` (N = 320, 40 Gb/s, Tmax 0.5 ms, Lmax 25 KB, offset 0, RTO 10.5 ms); MSS
512 B, propagation 5 ms.

**Scale.** ``scale`` s emulates N_paper / s sources (8 and 32 at s = 10), and
divides the optical rate and Lmax by s, so the optical load, the
bursts per second, the segments of one source per burst and each source's view of the
network are those of the paper (the access rate, Tmax, offset, RTO and Wm are not
scaled). Throughputs are reported per source and as the aggregate of N_paper sources
(per-source mean x N_paper); the summary records the scale.

**Frames and Lmax.** TCP timestamps are off and the IP MTU is 552 B, so a segment
carries 512 B of payload in a 552 B IP packet (ns-2's 40 B of headers) and a 566 B
Ethernet frame. The qdisc counts frame bytes into Lmax (docs/obs.md); E2 multiplies
Lmax by 566/552, so that a burst closes after as many segments as the paper's
datagram-byte count would.

**TCP.** The ``sack`` profile (kernel Reno + SACK; docs/congestion-control.md) with
the path class's RTO as the initial RTO (then the kernel's SRTT + 4 RTTVAR; parameter
``rto_min``, see :meth:`E2Obs.profile_options`), initial window one segment, an ACK per segment, and the maximum congestion window
Wm (``max_window``: the sender's snd_cwnd_clamp).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import statistics
from collections.abc import Hashable, Iterator
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from testbed.cc.lossdetect import SUMMARY_METRICS
from testbed.context import EMULATION_METRICS, emulation_columns
from testbed.dilation import TimeDilation
from testbed.errors import DefinitionError
from testbed.experiment import Definition, Param
from testbed.family import Analysis
from testbed.flow_family import FlowFamily, FlowPoint, TrafficPlan
from testbed.metrics import Metric
from testbed.units import Dim

if TYPE_CHECKING:
    from mininet.topo import Topo

    from testbed.traffic import Schedule, TrafficResult

#: segment payload, IP packet and Ethernet frame of one full segment (bytes)
MSS = 512
IP_PACKET = MSS + 40
FRAME = IP_PACKET + 14
#: IP MTU of every link: 512 B of payload with TCP timestamps off
MTU = IP_PACKET
#: the smallest scaled Lmax E2 accepts, in full frames (fewer makes every burst one
#: or two packets, and the segments per source per burst no longer the paper's)
MIN_LMAX_FRAMES = 4
#: one-way propagation of the path (paper: 5 ms, "1000 km")
PROPAGATION_S = 5e-3
CCAS = ("sack", "reno", "cubic")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PathClass:
    """One of the paper's two connection classes (section III, A and B), paper units."""

    name: str
    n_paper: int
    optical_rate_bps: float
    tmax_s: float
    lmax_bytes: int          # IP datagram bytes, as the paper (ns-2) counts them
    offset_s: float
    rto_s: float

    @property
    def rtt_s(self) -> float:
        """The RTT of the paper's ideal throughput: 2 x propagation + Tmax + offset."""
        return 2 * PROPAGATION_S + self.tmax_s + self.offset_s

    def sources(self, scale: int) -> int:
        """Sources emulated at ``scale``: N_paper / scale."""
        return self.n_paper // scale

    def lmax_frame_bytes(self, scale: int) -> int:
        """Lmax as the qdisc counts it (frame bytes), divided by ``scale``: a burst closes
        after as many segments as the paper's datagram-byte Lmax would close it."""
        return max(1, round(self.lmax_bytes * FRAME / IP_PACKET / scale))

    def scales(self) -> list[int]:
        """The accepted scales: divisors of N_paper whose Lmax / scale still holds
        MIN_LMAX_FRAMES full frames and whose sources (plus the core link) fit the ports
        of one optical node (testbed.optical.layout.MAX_PORTS)."""
        from testbed.optical.layout import MAX_PORTS

        return [s for s in range(1, self.n_paper + 1)
                if self.n_paper % s == 0 and self.lmax_bytes * FRAME / IP_PACKET / s >= MIN_LMAX_FRAMES * FRAME
                and self.n_paper // s + 1 <= MAX_PORTS]


#: the paper's slow (MEMS) and fast (SOA) connections
CLASSES = {
    "slow": PathClass("slow", 80, 10e9, 10e-3, 10_000_000, 10e-3, 30e-3),
    "fast": PathClass("fast", 320, 40e9, 0.5e-3, 25_000, 0.0, 10.5e-3),
}


class E2Obs(FlowFamily):
    name = "e2-obs"
    doc = "E2: TCP SACK over optical burst switching, slow (MEMS) and fast (SOA) paths, burst loss Pl"
    count_ports = False
    params = (
        Param("path_class", "choice", "slow", "the paper's connection class: slow (MEMS, 10 Gb/s, N = 80) "
              "or fast (SOA, 40 Gb/s, N = 320)", choices=tuple(CLASSES)),
        Param("scale", "int", 10, "scale s: N_paper / s sources are emulated (a divisor of the class's N), "
              "the optical rate and Lmax divided by s; 1 = the paper's size", lo=1, hi=320),
        Param("wm", "int", 512, "maximum congestion window Wm in segments (paper: 64, 128, 256, 512)",
              lo=1, hi=65535),
        Param("pl", "float", 1e-3, "burst loss probability Pl at the core (paper: 1e-5 .. 1e-2)", lo=0, hi=1),
        Param("duration", Dim.TIME, "1 s", "traffic duration (paper time)", lo=0, lo_open=True, hi=3600),
        Param("warmup", Dim.TIME, "0 s", "traffic before the measurement window of the summary's "
              "throughput (the series start at 0)", lo=0, hi=3600),
        Param("bin", Dim.TIME, "10 ms", "interval of the throughput series", lo=0, lo_open=True, hi=3600),
        Param("access_rate", Dim.RATE, "100 Mbit/s", "every source's access link", lo=0, lo_open=True,
              hi=400e9),
        Param("rto_min", Dim.TIME, "0 s", "minimum RTO (paper time); 0 s = the profile's one jiffy, so that "
              "RTO = SRTT + 4 RTTVAR after the first data segment (ns-2: max(RTO, SRTT + 4 RTTVAR)); the "
              "class's RTO (30 ms / 10.5 ms) is the initial RTO either way", lo=0, hi=60),
        Param("cca", "choice", "sack", "congestion-control profile of every host (paper: sack)", choices=CCAS),
        Param("trace_cwnd", "bool", True, "trace the first source's cwnd live (CO-RE BPF, ebpf/cwndtrace)"),
    )
    metrics = (
        Metric("throughput_bps", "bit/s", "aggregate average throughput in the window, as N_paper sources: "
               "per-source mean x N_paper"),
        Metric("throughput_per_source_bps", "bit/s", "mean over the sources of payload bytes received in the "
               "window x 8 / window"),
        Metric("ideal_bps", "bit/s", "the paper's ideal MSS x Wm x N_paper / RTT"),
        Metric("rtt_nominal_s", "s", "2 x propagation + Tmax + offset"),
        Metric("bin_s", "s", "interval of throughput_series.csv"),
        Metric("n_paper", "count", "the paper's N for the path class"),
        Metric("n_sources", "count", "sources emulated: N_paper / scale"),
        Metric("bursts", "count", "bursts the ingress edge closed (whole traffic, warm-up included, as every "
               "count below)"),
        Metric("bursts_closed_time", "count", "... of them closed by Tmax"),
        Metric("bursts_closed_volume", "count", "... of them closed by Lmax"),
        Metric("bursts_lost", "count", "bursts the core dropped whole"),
        Metric("segments_per_burst", "count", "data packets per burst (mean; at this scale)"),
        Metric("segments_per_source_per_burst", "count", "segments_per_burst / n_sources"),
        *SUMMARY_METRICS,
        Metric("core_packets_lost", "count", "data packets the core dropped with their bursts"),
        Metric("assembly_delay_p50_s", "s", "median per-packet assembly delay: arrival at the ingress edge to "
               "release towards the core (as testbed/optical/burst.py: the wait for Tmax or Lmax, the offset, "
               "the wait for the channel and the burst's earlier packets)"),
        Metric("assembly_delay_p99_s", "s", "99th percentile of the assembly delay"),
        Metric("assembly_delay_max_s", "s", "largest assembly delay (histogram bucket's upper edge)"),
        *EMULATION_METRICS,
    )

    @classmethod
    def analysis(cls) -> Analysis:
        from analysis import e2

        return e2

    # -- the network --------------------------------------------------------------------
    @classmethod
    def edge_spec(cls, values: dict[str, Any]) -> str:
        """The ingress edge's architecture: obs-edge with the class's Tmax, scaled Lmax
        (frame bytes) and offset (paper ns)."""
        pc = CLASSES[values["path_class"]]
        return (f"obs-edge:{round(pc.tmax_s * 1e9)},{pc.lmax_frame_bytes(values['scale'])},"
                f"{round(pc.offset_s * 1e9)}")

    @classmethod
    def core_spec(cls, values: dict[str, Any], seed: int) -> str:
        """The core's architecture: obs-core with Pl in parts per 1e9 and the point's seed."""
        return f"obs-core:{round(values['pl'] * 1e9)},{seed % 2**64}"

    @classmethod
    def topology(cls, values: dict[str, Any], tdf: TimeDilation) -> "Topo":
        from topologies.obs import ObsPath

        pc = CLASSES[values["path_class"]]
        s = values["scale"]
        return ObsPath(pc.sources(s), edge_arch=cls.edge_spec(values), core_arch=cls.core_spec(values, 0),
                       access_rate_bps=values["access_rate"].si,
                       optical_rate_bps=pc.optical_rate_bps / s, propagation_s=PROPAGATION_S,
                       tdf=tdf.factor, mtu=MTU)

    @classmethod
    def check(cls, defn: Definition) -> None:
        super().check(defn)
        for p in defn.points():
            v = p.values
            pc = CLASSES[v["path_class"]]
            if v["scale"] not in pc.scales():
                raise DefinitionError(
                    "params.scale", v["scale"],
                    f"one of {', '.join(map(str, pc.scales()))} for path_class {pc.name!r}: a divisor of its "
                    f"N = {pc.n_paper} at which Lmax / scale ({pc.lmax_bytes} B / scale) still holds "
                    f"{MIN_LMAX_FRAMES} frames and the N / scale sources fit one edge node's ports", defn.source)
            if v["warmup"].si >= v["duration"].si:
                raise DefinitionError("params.warmup", str(v["warmup"]),
                                      f"a time below the duration ({v['duration']})", defn.source)

    @classmethod
    def fabric_key(cls, values: dict[str, Any], tdf: TimeDilation) -> Hashable:
        # Pl and the seed are the core's map configuration: the rest is built once
        return (values["path_class"], values["scale"], values["access_rate"].si, tdf.factor)

    @classmethod
    def fabric_note(cls, values: dict[str, Any]) -> str:
        pc = CLASSES[values["path_class"]]
        s = values["scale"]
        return (f"building the {pc.name} OBS path: {pc.sources(s)} sources (the paper's {pc.n_paper} / "
                f"{s}); later points of this class and scale reuse it")

    # -- per point ----------------------------------------------------------------------
    @classmethod
    def profile_options(cls, v: dict[str, Any]) -> dict[str, Any]:
        """The class's RTO as the initial RTO, the minimum RTO if one is set, one segment
        initial window, Wm, timestamps off (as :meth:`prepare` sets on every host: the
        profile's records then count 512 B per segment).

        The paper "sets the RTO" to 30 ms / 10.5 ms, about the path's RTT; ns-2's timer
        is max(minrto_, SRTT + 4 RTTVAR). Linux's is SRTT + max(4 RTTVAR, RTO_min): with
        RTO_min = 30 ms every RTO would be at least SRTT + 30 ms, about twice the
        paper's. So by default RTO_min is the profile's one jiffy (RTO = SRTT + 4 RTTVAR,
        which the assembly's RTT spread keeps above the paper's value) and the paper's
        RTO times the first data segment."""
        from testbed.units import Quantity

        opts: dict[str, Any] = {"init_rto": Quantity(CLASSES[v["path_class"]].rto_s, Dim.TIME),
                                "initial_window": 1, "max_window": int(v["wm"]), "timestamps": 0}
        if v["rto_min"].si > 0:
            opts["rto_min"] = v["rto_min"]
        return opts

    @classmethod
    def prepare(cls, fp: FlowPoint) -> None:
        """The core's Pl and seed for this point; timestamps off on every host (MSS 512
        in a 552 B packet); the cwnd tracer (kept with the fabric)."""
        from testbed.optical import architectures

        fabric = fp.emu.optical
        core = architectures.REGISTRY.parse(cls.core_spec(fp.values, fp.ctx.point.seed), role="core",
                                            key="params.pl")
        fabric.reconfigure({"core": core})
        for h in fp.emu.hosts():
            h.sysctl("net.ipv4.tcp_timestamps", 0)
        fp.measured["tracer"] = cls._tracer(fp) if fp.values["trace_cwnd"] else None

    @classmethod
    def _tracer(cls, fp: FlowPoint) -> Any:
        from testbed.cc.trace import CwndTracer
        from topologies.obs import source

        netns = fp.emu[source(1)].netns
        key = (cls.fabric_key(fp.values, fp.ctx.tdf), netns)

        def make() -> CwndTracer:
            fp.ctx.progress("starting the cwnd tracer (once per fabric)")
            return CwndTracer(netns=netns)

        return fp.ctx.keep("cwnd-tracer", key, make)

    @classmethod
    def workload(cls, fp: FlowPoint) -> "Schedule":
        """One long-lived flow per source, to its own sink, for the whole duration."""
        from testbed.traffic import long_lived
        from topologies.obs import sink, source

        v = fp.values
        n = CLASSES[v["path_class"]].sources(v["scale"])
        sched = long_lived([(source(i), sink(i)) for i in range(1, n + 1)], duration_s=v["duration"].si)
        pc = CLASSES[v["path_class"]]
        fp.ctx.write_json("schedule-meta.json", {
            **sched.meta, "flows": len(sched), "path_class": asdict(pc), "scale": v["scale"], "n_sources": n,
            "optical_rate_bps": pc.optical_rate_bps / v["scale"],
            "lmax_frame_bytes": pc.lmax_frame_bytes(v["scale"]), "edge": cls.edge_spec(v),
            "core": cls.core_spec(v, fp.ctx.point.seed), "mtu": MTU, "mss": MSS})
        fp.ctx.progress(f"{n} {pc.name} flows for {v['duration']} (paper), Wm {v['wm']}, Pl {v['pl']:g}")
        return sched

    @classmethod
    def traffic(cls, fp: FlowPoint) -> TrafficPlan:
        from testbed.traffic import Window

        v = fp.values
        warmup, duration = v["warmup"].si, v["duration"].si
        return TrafficPlan(window=Window(warmup_s=warmup, length_s=duration - warmup), duration_s=duration,
                           granularities_s=(v["bin"].si,))

    @classmethod
    @contextlib.contextmanager
    def control(cls, fp: FlowPoint) -> Iterator[None]:
        """Counters of the edge, the core and the sources' TCP stacks around the traffic."""
        from testbed.cc import lossdetect
        from topologies.obs import source

        n = CLASSES[fp.values["path_class"]].sources(fp.values["scale"])
        names = {source(i) for i in range(1, n + 1)}
        sources = [h for h in fp.hosts if h.name in names]
        tracer = fp.measured.get("tracer")
        mark = len(tracer.samples) if tracer is not None else 0
        edge0 = _edge_state(fp)
        tcp0 = lossdetect.snapshot([h.netns for h in sources])
        yield
        fp.measured["edge"] = _edge_delta(edge0, _edge_state(fp))
        tcp1 = lossdetect.snapshot([h.netns for h in sources])
        fp.measured["tcp"] = lossdetect.between(tcp0, tcp1)
        fp.measured["tcp_per_source"] = lossdetect.per_namespace(tcp0, tcp1)
        fp.measured["core"], fp.measured["holding"] = _core_state(fp)
        if tracer is not None:
            fp.measured["cwnd"] = list(tracer.samples[mark:])

    @classmethod
    def summarise(cls, fp: FlowPoint, result: "TrafficResult") -> dict[str, Any]:
        return summarise(fp, result)


# -- measurements -------------------------------------------------------------------------
def _edge_state(fp: FlowPoint) -> dict[str, int]:
    """The ingress edge's obsburst counters (class 0) on its port towards the core
    (``OpticalFabric.holding_state``: the one port of the fabric that holds packets)."""
    from topologies.obs import INGRESS

    (st,) = [st for (node, _dev), st in fp.emu.optical.holding_state().items() if node == INGRESS]
    c = st.classes[0]
    return {"bursts": c.bursts, "closed_time": c.closed_time, "closed_volume": c.closed_volume,
            "packets": c.packets, "bytes": c.bytes, "ctrl_packets": st.ctrl_packets,
            "ctrl_failed": st.ctrl_failed, "drops": st.drops}


def _edge_delta(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: b[k] - a[k] for k in b}


def _core_state(fp: FlowPoint) -> tuple[dict[str, int], Any]:
    """The core's burst counters and its holding-delay histogram (the assembly delay:
    arrival at the ingress edge to arrival at the core), both zeroed by the point's
    reconfiguration (testbed.optical.obscore)."""
    from testbed.optical import obscore
    from topologies.obs import CORE

    fabric = fp.emu.optical
    node = fabric.nodes[CORE].node_id
    return obscore.read_core(fabric.pin_dir, [node])[node], obscore.read_holding(fabric.pin_dir, [node])[node]


def summarise(fp: FlowPoint, result: "TrafficResult") -> dict[str, Any]:
    """The point's summary row (paper units) and its files (docs/e2.md, "Results")."""
    from topologies.obs import sink, source

    ctx, v, D = fp.ctx, fp.values, fp.ctx.tdf
    pc = CLASSES[v["path_class"]]
    n = pc.sources(v["scale"])
    window = result.window
    assert window is not None
    per_source = [8 * result.stats.get(sink(i), {}).get("window_bytes", 0) / window.length_s
                  for i in range(1, n + 1)]
    mean_source = statistics.fmean(per_source)
    # throughput series per source (bin ending at t_s)
    g = v["bin"].si
    series = []
    for i in range(1, n + 1):
        for r in result.series(g, host=sink(i)):
            series.append({"t_s": r["t_s"] + g, "src": source(i), "bytes": r["bytes"]})
    ctx.write_csv("throughput_series.csv", series)
    # the traced source's cwnd
    t0 = fp.run.t0 if fp.run is not None else None
    cwnd = []
    if t0 is not None:
        for s in fp.measured.get("cwnd") or []:
            if s.event in ("ack", "retrans", "rto"):
                cwnd.append({"t_s": D.time_to_paper(s.t_s - t0), "src": source(1), "event": s.event,
                             "cwnd": s.cwnd, "ssthresh": s.ssthresh, "ca_state": s.ca_state})
    ctx.write_csv("cwnd.csv", cwnd)
    # assembly delay: the core's holding-delay histogram (emulation ns -> paper s)
    core, hold = fp.measured["core"], fp.measured["holding"]
    ctx.write_csv("assembly_delay.csv", [{"lo_s": D.time_to_paper(lo / 1e9), "hi_s": D.time_to_paper(hi / 1e9),
                                          "packets": count} for lo, hi, count in hold.rows])
    edge, tcp = fp.measured["edge"], fp.measured["tcp"]
    broken = {k: v2 for k, v2 in (("control packets the edge could not send", edge.get("ctrl_failed", 0)),
                                  ("announcements beyond the core's ring", core.get("ring_overflow", 0)),
                                  ("packets the edge dropped at its limit", edge.get("drops", 0))) if v2}
    if broken:
        # the core pairs packets with announced bursts in order: a missing announcement
        # shifts later packets onto the wrong bursts (docs/obs.md, "Core node")
        text = ", ".join(f"{k}: {v2}" for k, v2 in broken.items())
        log.warning("%s: burst accounting is not exact (%s)", ctx.dir.name, text)
        if hasattr(ctx, "progress"):
            ctx.progress(f"warning: burst accounting is not exact ({text})")
    ctx.write_json("obs.json", {
        "edge": edge, "core": core, "tcp": tcp.as_dict(), "tcp_per_source": fp.measured["tcp_per_source"],
        "assembly_delay_ns": {"count": hold.count, "early": hold.early, "max": hold.max_ns,
                              "mean": hold.mean_ns, "over_last_bucket": hold.over},
        "note": "edge: obsburst counters of the ingress edge's port towards the core during the traffic; core: "
                "the obs-core node's counters (testbed/optical/obscore.py); tcp: the sources' loss detections "
                "(testbed/cc/lossdetect.py); emulation ns"})
    bursts = edge["bursts"]
    seg_burst = edge["packets"] / bursts if bursts else math.nan

    def pct(q: float) -> float:
        return D.time_to_paper(hold.quantile_ns(q) / 1e9) if hold.count else math.nan

    return {
        "throughput_bps": mean_source * pc.n_paper,
        "throughput_per_source_bps": mean_source,
        "ideal_bps": MSS * 8 * v["wm"] * pc.n_paper / pc.rtt_s,
        "rtt_nominal_s": pc.rtt_s,
        "bin_s": g,
        "n_paper": pc.n_paper,
        "n_sources": n,
        "bursts": bursts,
        "bursts_closed_time": edge["closed_time"],
        "bursts_closed_volume": edge["closed_volume"],
        "bursts_lost": core["bursts_lost"],
        "segments_per_burst": seg_burst,
        "segments_per_source_per_burst": seg_burst / n if bursts else math.nan,
        **tcp.summary_columns(),
        "core_packets_lost": core["packets_lost"],
        "assembly_delay_p50_s": pct(0.5),
        "assembly_delay_p99_s": pct(0.99),
        "assembly_delay_max_s": pct(1.0),
        **emulation_columns(ctx.dir, D),
    }
