"""``e5-optram``: E5, very small optical RAM in the core of an optical packet-switched
mesh, standard and paced TCP Reno (Alparslan, Arakawa, Murata, "Comparison of Packet
Switch Architectures and Pacing Algorithms for Very Small Optical RAM", III-A and III-B;
spec ``../shared/spec/e5-optical-ram-pacing.md``; docs/e5.md).

NSFNET (topologies/nsfnet.py: 14 core nodes, the paper's Fig. 3 delays, one edge node
per core node at 0.1 ms, one host behind each edge node), or the Abilene-like network
of the paper's III-C (``topology = "abilene"``: topologies/nsfnet.py's generator, the
paper's 171 core and 698 edge nodes times ``abilene_nodes``, 1 ms core links). Core nodes have the point's
optical RAM architecture (``ob``, ``ib``, ``sb``, ``wcsb``:
testbed/optical/architectures.py; ``ib`` is the voq holding qdisc, docs/ib-holding.md)
with B bytes per link, edge nodes a store-and-forward FIFO holding at most 0.25 s
(``fifo``). Every link runs at the paper's 1 Gb/s (divided by ``scale``). TCP Reno flows
enter between uniformly random pairs of hosts at Poisson instants during the run (1586
over 40 s on NSFNET, 2232 on Abilene), each limited to a congestion window of 20 segments and running until the
end; the summary measures the last ``window`` (5 s).

**Scale.** ``scale`` s divides every link's rate and the number of flows by s (the
network's load per link in flows is then the paper's; delays, B, the window limit and
the packet size are unchanged). A flow's share of a link, in paper units, is the
paper's; the packet times are s times longer, so a B of k packets drains in s times the
paper's time. Whether per-flow goodput is invariant under this scaling is an open check
(docs/e5.md, "Scale"). For that check ``flows_of_scale`` k nests the flows: each point
draws the flows of scale k and keeps a random flows / scale of them
(``testbed.traffic.nested_subset``), so that with one seed a larger scale's flows are a
subset of a smaller one's, with the same ids, and ``common_scale`` measures the goodput
of the flows every scale up to it shares (``goodput_common_Bps``), paired by seed.

**Packets.** TCP timestamps off, MTU 1500: a full segment carries 1460 B in a 1500 B IP
packet (the paper's "MSS 1500 Bytes" IP datagram) and a 1514 B frame; the optical RAM
counts IP bytes (docs/e5.md).

**Routing.** Minimum-hop paths; ``routing = "flow"``: one per flow (a hash of its
addresses and ports picks among equal ones); ``"pair"``: one per destination (the
lowest equal-cost port), the paper's single static route per pair. Neither reorders.

**Pacing.** ``pacing = "none"``: profile ``reno``; ``"tcp"``: profile ``paced-reno``
(pacing rate = cwnd / srtt, the sender spreads each window over an RTT; TCP's own
pacing, because the hosts' NIC qdisc is the fabric's NIC model); ``"xcp"`` /
``"xcp-ack"``: XCP edge pacing (testbed/families/_e5_xcp.py, docs/xcp-edge.md).

**Abilene.** ``abilene_nodes`` f keeps about f of the paper's access routers and edge
nodes (the 11-router backbone whole; the generator's seed is fixed, so every point of a
given f has the same network) and ``flows = "paper"`` then means 2232 x (edge nodes /
698): the paper's flows per edge node. ``scale`` divides that again.
"""

from __future__ import annotations

import contextlib
import math
import statistics
from collections.abc import Hashable, Iterator
from typing import TYPE_CHECKING, Any

from testbed.cc.lossdetect import MEMORY_METRICS, SUMMARY_METRICS, memory_columns
from testbed.context import EMULATION_METRICS, emulation_columns, read_point_json
from testbed.dilation import TimeDilation
from testbed.errors import DefinitionError
from testbed.experiment import Definition, Param
from testbed.families import _e5_xcp as e5_xcp
from testbed.family import Analysis
from testbed.flow_family import FlowFamily, FlowPoint, TrafficPlan
from testbed.metrics import Metric
from testbed.units import Dim

if TYPE_CHECKING:
    from mininet.topo import Topo

    from topologies.nsfnet import CoreGraph

    from testbed.traffic import Schedule, TrafficResult

#: segment payload, IP packet and Ethernet frame of a full segment (bytes; timestamps off)
MSS = 1460
IP_PACKET = 1500
FRAME = IP_PACKET + 14
#: the core architectures E5 compares (``ib``: the voq qdisc, docs/ib-holding.md)
ARCHS = ("ob", "ib", "sb", "wcsb")
#: sender behaviours: none (the ``cca`` profile), tcp (paced Reno), xcp / xcp-ack (XCP
#: edge pacing with ACKs in the pair's data macroflow / in their own: testbed/families/_e5_xcp.py)
PACINGS = ("none", "tcp", "xcp", "xcp-ack")
#: the congestion-control profiles a standard sender may run (paper: Reno)
CCAS = ("reno", "sack", "cubic")
TOPOLOGIES = ("nsfnet", "abilene")
#: the paper's flow counts (III-B: NSFNET, III-C: Abilene), ``flows = "paper"``
PAPER_FLOWS = {"nsfnet": 1586, "abilene": 2232}
#: how flows pick among equal minimum-hop paths (``pair``: one static route per destination)
ROUTINGS = ("flow", "pair")


def core_spec(values: dict[str, Any]) -> str:
    """The core nodes' architecture: ``<arch>:<B in bytes>``."""
    return f"{values['arch']}:{round(values['buffer'].si)}"


def edge_spec(values: dict[str, Any]) -> str:
    """The edge nodes' architecture: a store-and-forward FIFO holding at most
    ``edge_buffer`` (paper ns); with XCP pacing the xcppace pacer with that wait bound."""
    kind = "xcp-edge" if e5_xcp.is_xcp(values["pacing"]) else "fifo"
    return f"{kind}:{round(values['edge_buffer'].si * 1e9)}"


def profile_name(values: dict[str, Any]) -> str:
    """The senders' congestion-control profile: ``cca``, or ``paced-reno`` for paced
    senders (check() accepts pacing = tcp with cca = reno only)."""
    return "paced-reno" if values["pacing"] == "tcp" else values["cca"]


def graph(values: dict[str, Any]) -> "CoreGraph":
    """The point's core/edge network: NSFNET, or the Abilene-like one of
    ``abilene_nodes``. Raises TopologyDataError (the generator's bounds)."""
    from topologies.nsfnet import network

    return network(values["topology"], values["abilene_nodes"])


def paper_flows(values: dict[str, Any]) -> float:
    """The flows of the network as built before ``scale``: ``flows``, or for ``"paper"``
    the paper's count, on Abilene times (edge nodes built / the paper's 698)."""
    if values["flows"] != "paper":
        return float(values["flows"])
    n = PAPER_FLOWS[values["topology"]]
    if values["topology"] == "abilene":
        from topologies.nsfnet import ABILENE_EDGE_NODES

        n *= len(graph(values).edge_of) / ABILENE_EDGE_NODES
    return float(n)


def scaled_flows(values: dict[str, Any], scale: int | None = None) -> int:
    """The flows emulated at ``scale`` (the point's when None): round(:func:`paper_flows`
    / scale), at least 2."""
    return max(2, round(paper_flows(values) / (values["scale"] if scale is None else scale)))


def common_flows(values: dict[str, Any]) -> int | None:
    """With ``common_scale`` k: the flows a point at scale k has, which are the ids
    below :func:`scaled_flows` at k of a nested schedule (``flows_of_scale``); None
    without ``common_scale``."""
    return scaled_flows(values, values["common_scale"]) if values["common_scale"] else None


def scaled_rate_bps(values: dict[str, Any]) -> float:
    """Every link's rate, paper bit/s: rate / scale."""
    return values["rate"].si / values["scale"]


class E5OpticalRam(FlowFamily):
    name = "e5-optram"
    doc = ("E5: optical RAM architectures (OB, IB, SB, WCSB) x buffer per link x pacing (none, TCP, XCP at the "
           "edges), TCP Reno flows on NSFNET or an Abilene-like network")
    count_ports = False
    params = (
        Param("topology", "choice", "nsfnet", "the mesh: nsfnet (14 core nodes, paper Fig. 3) or abilene (the "
              "paper's III-C Abilene-like network, sized by abilene_nodes)", choices=TOPOLOGIES),
        Param("abilene_nodes", "float", 0.05, "topology = abilene: the fraction of the paper's 160 access routers "
              "and 698 edge nodes built (1 = the paper's 171 core / 698 edge nodes; 0.05: 19 / 35)", lo=0,
              lo_open=True, hi=1),
        Param("arch", "choice", "sb", "core nodes' optical RAM architecture: ob (B per output), ib (B per input, "
              "virtual output queues, round robin), sb (one memory of ports x B per node), wcsb (one memory of B "
              "per node)", choices=ARCHS),
        Param("buffer", Dim.SIZE, "15 kB", "B, optical RAM per link in IP datagram bytes (paper: below 1 MSS to "
              "1 MB; 1500 B = one full packet)", lo=0, hi=1e9),
        Param("pacing", "choice", "none", "senders: none (standard TCP), tcp (paced Reno: each window over an "
              "RTT; needs cca = reno), xcp (XCP edge pacing, ACKs in the pair's data macroflow) or xcp-ack (ACKs in "
              "a macroflow of their own); XCP needs routing = pair", choices=PACINGS),
        Param("xcp_alpha", "float", 0.4, "XCP efficiency controller alpha (paper: 0.4)", lo=0, lo_open=True, hi=10),
        Param("xcp_beta", "float", 0.226, "XCP efficiency controller beta (paper: 0.226); 'stable': alpha^2 "
              "sqrt 2, the beta of Katabi's stability condition (the paper's Fig. 4 sweeps alpha so)", lo=0, hi=10,
              keywords=("stable",)),
        Param("xcp_stability_check", "bool", True, "refuse alpha / beta outside Katabi's stability condition "
              "(0 < alpha < 0.5554, beta = alpha^2 sqrt 2 within 2 %); false admits them (the paper's Fig. 4 has "
              "alpha = 0.6) and the agent's config records outside_stability_bound"),
        Param("xcp_gamma", "float", 0.1, "XCP shuffled fraction gamma (paper: 0.1)", lo=0, hi=1),
        Param("xcp_interval", Dim.TIME, "50 ms", "XCP control interval d (paper: 50 ms)", lo=0, lo_open=True, hi=10),
        Param("xcp_rate_delay", Dim.TIME, "2 ms", "XCP: from a probe's return to the ingress edge's rate change "
              "(not in the paper; covers the agent's decision lag in the guest, docs/xcp-edge.md)", lo=0, hi=1),
        Param("routing", "choice", "flow", "paths among equal minimum-hop ones: flow (one per flow, by a hash of "
              "its addresses and ports) or pair (one per destination, the lowest port: the paper's static route per "
              "pair; XCP needs it)", choices=ROUTINGS),
        Param("cca", "choice", "reno", "congestion-control profile of standard senders (paper: Reno)",
              choices=CCAS),
        Param("flows", "int", "paper", "TCP flows entering at Poisson instants during the run; 'paper': 1586 on "
              "NSFNET, 2232 x edge nodes / 698 on Abilene (before scale)", lo=2, hi=100_000, keywords=("paper",)),
        Param("scale", "int", 1, "scale s: link rates and the number of flows divided by s (1 = the paper's)",
              lo=1, hi=10_000),
        Param("flows_of_scale", "int", 0, "0: the point's own flows; k (1 .. scale): the flows drawn for scale k, "
              "of which a random flows / scale are kept, so that a point's flows are a subset of those of any "
              "smaller scale with the same seed and k, with the same ids (the scale check; docs/e5.md)",
              lo=0, hi=10_000, before_added=0),
        Param("common_scale", "int", 0, "0: none; k (scale .. 10000, with flows_of_scale): also measure the "
              "goodput of the flows a point at scale k has (goodput_common_Bps), the flows shared by every "
              "scale up to k", lo=0, hi=10_000, before_added=0),
        Param("rate", Dim.RATE, "1 Gbit/s", "every link's rate at scale 1 (paper: 1 Gb/s)", lo=0, lo_open=True,
              hi=100e9),
        Param("duration", Dim.TIME, "40 s", "run length; flows enter during all of it (paper: 40 s)",
              lo=0, lo_open=True, hi=3600),
        Param("window", Dim.TIME, "5 s", "the measured last part of the run (paper: 5 s)", lo=0, lo_open=True,
              hi=3600),
        Param("cwnd_limit", "int", 20, "largest congestion window in segments (paper: 20)", lo=1, hi=65535),
        Param("edge_buffer", Dim.TIME, "250 ms", "edge nodes' electronic buffer, as the longest wait "
              "(paper: 0.25 s)", lo=0, hi=3600),
        Param("bin", Dim.TIME, "500 ms", "interval of the throughput series", lo=0, lo_open=True, hi=3600),
    )
    metrics = (
        Metric("goodput_per_flow_Bps", "B/s", "average flow goodput: mean over the flows that started before the "
               "window of their payload bytes received in it / window"),
        Metric("goodput_per_flow_median_Bps", "B/s", "median of the same"),
        Metric("goodput_common_Bps", "B/s", "with common_scale: the same average over the measured flows a point "
               "at common_scale has (shared with every scale up to it); NaN without", since="2026-11-30"),
        Metric("flows_common_measured", "count", "the flows of that average (0 without common_scale)",
               since="2026-11-30"),
        Metric("flows_started", "count", "flows emulated (flows / scale; 'paper' flows: docs/e5.md)"),
        Metric("flows_measured", "count", "flows that started before the window (the average's flows)"),
        Metric("flows_failed", "count", "flows that failed (connect or send error)"),
        Metric("core_packets", "count", "packets the core nodes decided on during the window (cut through, "
               "buffered or dropped; a packet once per core node it reaches)"),
        Metric("core_drop_rate", "1", "core drops / core packets during the window"),
        Metric("core_drop_rate_run", "1", "the same over the whole run"),
        Metric("core_buffered_fraction", "1", "buffered / forwarded core packets during the window"),
        Metric("edge_drops", "count", "packets the edge nodes dropped (whole run)"),
        Metric("occ_overflow", "count", "core packets buffered when every occupancy slot of their node held a "
               "waiting packet, merged into one: more packets waiting at once than the slots track (1024 since "
               "2026-12-02; before, 256 slots reused in turn: more than 256 buffered while one waited); the "
               "occupancy then an upper bound, so drops may exceed the paper's node's: not exact; "
               "docs/optical-switch.md)"),
        Metric("core_late", "count", "ib only: arrivals the voq qdisc saw after it had decided their instant "
               "(lateness beyond its lookahead: decisions not exact; docs/ib-holding.md); 0 otherwise"),
        Metric("xcp_exact", "1", "XCP points: 1 when every XCP lateness counter below is 0 (the loop equals the "
               "one on the intended timeline; docs/xcp-edge.md, (d)), else 0; NaN without XCP"),
        Metric("xcp_intervals", "count", "XCP control intervals the agent decided"),
        Metric("xcp_acc_late", "count", "accumulator slots (core outputs and pacer rings) that changed after the agent "
               "had read them (a packet decided later than the agent's margin)"),
        Metric("xcp_acc_lost", "count", "accumulator slots overwritten before the agent read them"),
        Metric("xcp_late_rates", "count", "rate changes that reached a pacer after their instant (agent and pacers)"),
        Metric("xcp_pacer_late", "count", "packets that reached a pacer after their instant was decided"),
        Metric("xcp_decision_lag_p99_s", "s", "p99 of how late the agent decided an interval (paper s)"),
        Metric("xcp_rate_changes", "count", "rate changes the agent sent to the pacers"),
        Metric("window_start_late_s", "s", "how late the counters were read at the window's start (paper s)"),
        Metric("link_rate_bps", "bit/s", "every link's rate as emulated (rate / scale), paper units"),
        *SUMMARY_METRICS,
        *MEMORY_METRICS,
        *EMULATION_METRICS,
        Metric("lateness_p99_over_tau", "1", "lateness_p99 / duration of a 1514 B frame at the link rate "
               "(fidelity bound: 0.05)"),
        Metric("packet_hops_per_wall_s", "1/s", "packets the switches decided on per wall-clock second"),
    )

    @classmethod
    def analysis(cls) -> Analysis:
        from analysis import e5

        return e5

    # -- the network --------------------------------------------------------------------
    @classmethod
    def topology(cls, values: dict[str, Any], tdf: TimeDilation) -> "Topo":
        from topologies.nsfnet import OpsMesh

        return OpsMesh(graph(values), core_arch=core_spec(values), edge_arch=edge_spec(values),
                       rate_bps=scaled_rate_bps(values), tdf=tdf.factor, mtu=IP_PACKET, flow_hash=True)

    @classmethod
    def check(cls, defn: Definition) -> None:
        super().check(defn)
        for p in defn.points():
            v = p.values
            if v["pacing"] == "tcp" and v["cca"] != "reno":
                raise DefinitionError("params.cca", v["cca"], "reno with pacing = tcp (paced Reno is the paced "
                                      "sender; set pacing = none for another profile)", defn.source)
            if v["topology"] == "abilene":
                from testbed.optical.layout import MAX_NODES

                g = graph(v)
                switches = g.core_nodes + len(g.edge_of)
                if switches > MAX_NODES:
                    raise DefinitionError("params.abilene_nodes", v["abilene_nodes"], f"a size with at most "
                                          f"{MAX_NODES} optical nodes (this one has {switches}: "
                                          f"{g.core_nodes} core, {len(g.edge_of)} edge)", defn.source)
            if e5_xcp.is_xcp(v["pacing"]):
                if v["routing"] != "pair":
                    raise DefinitionError("params.routing", v["routing"], f"pair with pacing = {v['pacing']} (XCP's "
                                          "probes follow one static route per pair)", defn.source)
                e5_xcp.parameters(v, defn.source)
            if v["flows_of_scale"] > v["scale"]:
                raise DefinitionError("params.flows_of_scale", v["flows_of_scale"], f"0 or 1 .. {v['scale']} (the "
                                      f"scale: the flows are a subset of those drawn at a scale up to the point's)",
                                      defn.source)
            if v["common_scale"] and not v["flows_of_scale"]:
                raise DefinitionError("params.common_scale", v["common_scale"], "0 without flows_of_scale (only "
                                      "nested flows are shared between scales)", defn.source)
            if v["common_scale"] and v["common_scale"] < v["scale"]:
                raise DefinitionError("params.common_scale", v["common_scale"], f"0 or {v['scale']} .. 10000 (the "
                                      f"scale up: a larger scale's flows are the shared ones)", defn.source)
            if v["window"].si >= v["duration"].si:
                raise DefinitionError("params.window", str(v["window"]),
                                      f"a time below the duration ({v['duration']})", defn.source)
            if v["duration"].si / v["bin"].si > 100_000:
                raise DefinitionError("params.bin", str(v["bin"]), f"at most 100000 intervals over the duration "
                                      f"({v['duration']})", defn.source)
            lead = v["duration"].si - v["window"].si
            if not math.isclose(lead / v["bin"].si, round(lead / v["bin"].si), rel_tol=0, abs_tol=1e-9):
                raise DefinitionError("params.bin", str(v["bin"]), f"an interval that divides duration - window "
                                      f"({lead:g} s): the window starts on an interval edge", defn.source)

    @classmethod
    def fabric_key(cls, values: dict[str, Any], tdf: TimeDilation) -> Hashable:
        # the architectures are map configuration (reconfigured per point): the rest is built once
        size = values["abilene_nodes"] if values["topology"] == "abilene" else None
        return (values["topology"], size, values["rate"].si, values["scale"], tdf.factor)

    @classmethod
    def fabric_note(cls, values: dict[str, Any]) -> str:
        g = graph(values)
        return (f"building {values['topology']} ({g.core_nodes + len(g.edge_of)} switches, {len(g.edge_of)} hosts) "
                f"at {scaled_rate_bps(values) / 1e6:g} Mbit/s per link; later points of this topology and scale "
                f"reuse it")

    # -- per point ----------------------------------------------------------------------
    @classmethod
    def cca_selection(cls, defn: Definition, values: dict[str, Any]) -> Any:
        """Every host's profile: :func:`profile_name` with the family's options."""
        return super().cca_selection(defn, dict(values, cca=profile_name(values)))

    @classmethod
    def profile_options(cls, values: dict[str, Any]) -> dict[str, Any]:
        """The window limit; timestamps off (as :meth:`prepare` sets on every host: the
        profile's records then count 1460 B per segment); paced senders pace by TCP
        itself (the NIC qdisc stays)."""
        opts: dict[str, Any] = {"max_window": int(values["cwnd_limit"]), "timestamps": 0}
        if values["pacing"] == "tcp":
            opts["pacer"] = "tcp"
        return opts

    @classmethod
    def features(cls, values: dict[str, Any], tdf: TimeDilation) -> Any:
        return super().features(dict(values, cca=profile_name(values)), tdf)

    @classmethod
    def prepare(cls, fp: FlowPoint) -> None:
        """The point's core and edge architectures (every node's counters zeroed);
        timestamps off on every host (1460 B of payload in a 1500 B packet)."""
        from testbed.optical import architectures

        fabric = fp.emu.optical
        core = architectures.REGISTRY.parse(core_spec(fp.values), role="core", key="params.buffer")
        edge = architectures.REGISTRY.parse(edge_spec(fp.values), role="edge", key="params.edge_buffer")
        fabric.reconfigure(fabric.by_role({"core": core, "edge": edge}))
        fabric.set_routing(flow_hash=fp.values["routing"] == "flow", single=fp.values["routing"] == "pair")
        if not e5_xcp.is_xcp(fp.values["pacing"]):
            e5_xcp.disable(fabric)
        for h in fp.emu.hosts():
            h.sysctl("net.ipv4.tcp_timestamps", 0)

    @classmethod
    def workload(cls, fp: FlowPoint) -> "Schedule":
        """flows / scale long-lived flows at Poisson instants over the whole run (with
        ``flows_of_scale`` k: a nested random subset of those drawn for scale k)."""
        from testbed.traffic import nested_subset, poisson_long_lived

        v = fp.values
        hosts = sorted(h.name for h in fp.emu.hosts())
        n = scaled_flows(v)
        seed = fp.ctx.point.seed
        if v["flows_of_scale"]:
            drawn = poisson_long_lived(hosts, scaled_flows(v, v["flows_of_scale"]), v["duration"].si, seed)
            sched = nested_subset(drawn, n, seed)
        else:
            sched = poisson_long_lived(hosts, n, v["duration"].si, seed)
        fp.ctx.write_json("schedule-meta.json", {
            **sched.meta, "flows": len(sched), "scale": v["scale"], "link_rate_bps": scaled_rate_bps(v),
            "core": core_spec(v), "edge": edge_spec(v), "pacing": v["pacing"], "mtu": IP_PACKET, "mss": MSS,
            "flows_of_scale": v["flows_of_scale"], "common_flows": common_flows(v)})
        nested = (f" (a nested subset of the {sched.meta['nested_subset']['of_flows']} drawn for scale "
                  f"{v['flows_of_scale']})" if v["flows_of_scale"] else "")
        fp.ctx.progress(f"{n} {profile_name(v)} flows{nested} over {v['duration']} (paper), core "
                        f"{core_spec(v)} B, measured over the last {v['window']}")
        return sched

    @classmethod
    def traffic(cls, fp: FlowPoint) -> TrafficPlan:
        from testbed.traffic import Window

        v = fp.values
        duration, window = v["duration"].si, v["window"].si
        return TrafficPlan(window=Window(warmup_s=duration - window, length_s=window), duration_s=duration,
                           granularities_s=(v["bin"].si,))

    @classmethod
    @contextlib.contextmanager
    def control(cls, fp: FlowPoint) -> Iterator[None]:
        """The core and edge counters at the window's start (a timeline action) and at
        the end; the hosts' TCP loss detections around the traffic; with XCP pacing
        the agent (controllers/xcp_agent_process.py) from before the traffic to its
        end (a timeline action), its records in the point's folder."""
        from testbed.cc import lossdetect

        start = fp.values["duration"].si - fp.values["window"].si

        def snapshot(run: Any) -> None:
            fp.measured["window_start"] = _fabric_totals(fp)

        fp.timeline.at(start, "core counters at the window's start", snapshot)
        agent = None
        if e5_xcp.is_xcp(fp.values["pacing"]):
            from controllers.xcp_agent_process import XcpAgentProcess

            cfg = e5_xcp.start(fp.emu.optical, fp.values, fp.ctx.tdf.factor)
            agent = XcpAgentProcess(fp.ctx.ledger, cfg, fp.ctx.dir)
            e5_xcp.end_with_traffic(fp.timeline, agent, fp.values["duration"].si)
            fp.ctx.progress(f"XCP: {len(cfg.macroflows)} macroflows, {sum(len(c.outputs) for c in cfg.cores)} "
                            f"controlled core outputs, d = {cfg.interval_s * 1e3:g} ms (paper)")
        with agent if agent is not None else contextlib.nullcontext():
            if agent is not None:
                fp.measured["xcp_epoch_late_s"] = e5_xcp.wait_for_epoch(cfg.epoch_ns)
            tcp0 = lossdetect.snapshot([h.netns for h in fp.hosts])
            yield
            tcp1 = lossdetect.snapshot([h.netns for h in fp.hosts])
        fp.measured["xcp"] = agent.summary() if agent is not None else None
        fp.measured["end"] = _fabric_totals(fp)
        fp.measured["tcp"] = lossdetect.between(tcp0, tcp1)

    @classmethod
    def summarise(cls, fp: FlowPoint, result: "TrafficResult") -> dict[str, Any]:
        return summarise(fp, result)


# -- measurements -------------------------------------------------------------------------
def _fabric_totals(fp: FlowPoint) -> dict[str, int]:
    """Sums over the core nodes' ports (cut, buffered, dropped; on ib cores the voq
    qdiscs' decisions, and ``core_late``, the packets they decided late) and the edge
    nodes' drops, the core nodes' occupancy overflows, and the switches' decisions."""
    fabric = fp.emu.optical
    roles = {name: np.role for name, np in fabric.nodes.items()}
    out = {"core_cut": 0, "core_buffered": 0, "core_dropped": 0, "core_late": 0, "edge_dropped": 0, "switched": 0}
    overflow: dict[str, int] = {}
    for r in fabric.counters():
        role = roles.get(r["node"])
        if role == "core":
            out["core_cut"] += r["cut_through"]
            out["core_buffered"] += r["buffered"]
            out["core_dropped"] += r["dropped"]
            out["core_late"] += r.get("late", 0)
            overflow[r["node"]] = r["node_occ_overflow"]
        elif role == "edge":
            out["edge_dropped"] += r["dropped"]
        if role in ("core", "edge"):
            out["switched"] += r["cut_through"] + r["buffered"] + r["dropped"]
    out["occ_overflow"] = sum(overflow.values())
    return out


def _core_packets(t: dict[str, int]) -> int:
    return t["core_cut"] + t["core_buffered"] + t["core_dropped"]


def summarise(fp: FlowPoint, result: "TrafficResult") -> dict[str, Any]:
    """The point's summary row (paper units) and its files (docs/e5.md, "Results")."""
    ctx, v, D = fp.ctx, fp.values, fp.ctx.tdf
    window = result.window
    assert window is not None and fp.run is not None and fp.run.t0 is not None
    start = window.warmup_s
    # per-flow goodput in the window: the intervals of each flow's series from the
    # window's start on (check() makes the start an interval edge)
    rows, measured, common = [], [], []
    n_common = common_flows(v)
    by_id = {f.flow_id: f for f in result.flows}
    assert fp.schedule is not None
    for spec in fp.schedule.flows:
        rec = by_id.get(spec.id)
        window_bytes = None
        if rec is not None and rec.status != "failed":
            try:
                series = result.flow_series(spec.id, v["bin"].si)
            except DefinitionError:  # never connected
                series = []
            window_bytes = sum(r["bytes"] for r in series if r["t_s"] >= start - 1e-9)
        goodput = window_bytes / window.length_s if window_bytes is not None else math.nan
        rows.append({"flow": spec.id, "src": spec.src, "dst": spec.dst, "start_s": spec.start_s,
                     "status": rec.status if rec else "missing", "window_bytes": window_bytes,
                     "goodput_Bps": goodput, "retrans_segs": rec.retrans_segs if rec else None,
                     "srtt_s": rec.srtt_s if rec else None})
        if spec.start_s < start and not math.isnan(goodput):
            measured.append(goodput)
            if n_common is not None and spec.id < n_common:
                common.append(goodput)
    ctx.write_csv("flows_window.csv", rows)
    g = v["bin"].si
    ctx.write_csv("throughput_series.csv", [{"t_s": r["t_s"] + g, "bytes": r["bytes"],
                                             "throughput_bps": r["throughput_bps"]} for r in result.series(g)])
    t_start, t_end = fp.measured.get("window_start"), fp.measured["end"]
    ran = {d["label"]: d for d in fp.timeline.done}.get("core counters at the window's start")
    late = (ran["ran_s"] - ran["planned_s"]) if ran else math.nan
    if t_start is not None:
        window_core = _core_packets(t_end) - _core_packets(t_start)
        window_drops = t_end["core_dropped"] - t_start["core_dropped"]
        window_fwd = (t_end["core_cut"] + t_end["core_buffered"]) - (t_start["core_cut"] + t_start["core_buffered"])
        window_buf = t_end["core_buffered"] - t_start["core_buffered"]
    else:
        window_core = window_drops = window_fwd = window_buf = 0
    run_core = _core_packets(t_end)
    tcp = fp.measured["tcp"]
    ctx.write_json("e5.json", {"window_start": t_start, "end": t_end, "tcp": tcp.as_dict(),
                               "xcp_epoch_late_s": fp.measured.get("xcp_epoch_late_s"),
                               "window_start_action": ran,
                               "note": "counter sums over the core / edge nodes' ports (cut, buffered, dropped), "
                                       "read by a timeline action at the window's start and after the traffic"})
    emulation = emulation_columns(ctx.dir, D)
    wall = read_point_json(ctx.dir, "machine.json").get("wall_s")
    tau_s = FRAME * 8 / scaled_rate_bps(v)
    return {
        "goodput_per_flow_Bps": statistics.fmean(measured) if measured else math.nan,
        "goodput_per_flow_median_Bps": statistics.median(measured) if measured else math.nan,
        "goodput_common_Bps": statistics.fmean(common) if common else math.nan,
        "flows_common_measured": len(common),
        "flows_started": len(fp.schedule.flows),
        "flows_measured": len(measured),
        "flows_failed": sum(1 for f in result.flows if f.status == "failed"),
        "core_packets": window_core,
        "core_drop_rate": window_drops / window_core if window_core else math.nan,
        "core_drop_rate_run": t_end["core_dropped"] / run_core if run_core else math.nan,
        "core_buffered_fraction": window_buf / window_fwd if window_fwd else math.nan,
        "edge_drops": t_end["edge_dropped"],
        "occ_overflow": t_end["occ_overflow"],
        "core_late": t_end.get("core_late", 0),
        **e5_xcp.columns(fp.measured.get("xcp"), D.factor),
        "window_start_late_s": late,
        "link_rate_bps": scaled_rate_bps(v),
        **tcp.summary_columns(),
        **memory_columns(tcp),
        **emulation,
        "lateness_p99_over_tau": emulation["lateness_p99_s"] / tau_s,
        "packet_hops_per_wall_s": t_end["switched"] / wall if wall else math.nan,
    }
