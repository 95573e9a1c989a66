"""``netem-path``: two hosts over one shaped link (placeholder main demo until E1).

Measures, per point, the ping RTT distribution and the iperf3 bulk TCP throughput over a
link shaped with HTB (rate) and netem (one-way delay, loss), optionally through an Open
vSwitch or Linux bridge switch. Results are in paper units: RTT / D, throughput x D.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from typing import TYPE_CHECKING, Any

from testbed import hostclock
from testbed.dilation import TimeDilation
from testbed.errors import DefinitionError, TestbedError
from testbed.experiment import Definition, Param
from testbed.family import Analysis, Family
from testbed.metrics import Metric
from testbed.units import Dim

if TYPE_CHECKING:
    from mininet.topo import Topo

    from testbed.context import PointContext

IPERF_PORT = 5201


class MeasurementError(TestbedError):
    """A measurement tool failed or produced no data."""


class NetemPath(Family):
    name = "netem-path"
    doc = "two hosts over one HTB+netem shaped link: ping RTT and iperf3 throughput"
    params = (
        Param("delay", Dim.TIME, "10 ms", "one-way delay added in each direction (netem)", lo=0, hi=10.0),
        Param("rate", Dim.RATE, "50 Mbit/s", "link rate (HTB)", lo=0, lo_open=True, hi=100e9),
        Param("loss", Dim.RATIO, "0 %", "random loss in each direction (netem)", lo=0, hi=1.0),
        Param("queue", "int", 1000, "queue limit in packets", lo=1, hi=1_000_000),
        Param("switch", "choice", "ovs", "switch between the hosts", choices=("none", "bridge", "ovs")),
        Param("datapath", "choice", "system", "OVS datapath: kernel (system) or userspace (netdev)",
              choices=("system", "netdev")),
        Param("duration", Dim.TIME, "10 s", "iperf3 transfer time", lo=1.0, hi=3600.0),
        Param("omit", Dim.TIME, "2 s", "iperf3 start-up time left out of the throughput (slow start)",
              lo=0.0, hi=600.0),
        Param("pings", "int", 20, "RTT samples per point", lo=1, hi=100_000),
    )
    metrics = (
        Metric("rtt_min_s", "s", "smallest ping RTT"),
        Metric("rtt_median_s", "s", "median ping RTT"),
        Metric("rtt_mean_s", "s", "mean ping RTT"),
        Metric("rtt_max_s", "s", "largest ping RTT"),
        Metric("ping_loss", "1", "share of pings without a reply"),
        Metric("throughput_bps", "bit/s", "iperf3 bulk TCP throughput (received, after the omitted start)"),
        Metric("retransmits", "count", "retransmitted segments of the iperf3 sender"),
        Metric("bytes", "B", "bytes iperf3 received"),
    )

    @classmethod
    def analysis(cls) -> Analysis:
        from analysis import netem_path

        return netem_path

    @classmethod
    def topology(cls, values: dict[str, Any], tdf: TimeDilation) -> "Topo":
        """h1 -- h2, or h1 -- s1 -- h2, the h1 link shaped (emulation units)."""
        from testbed.net import LinkShape
        from topologies.path import TwoHostPath

        shape = LinkShape(rate_bps=tdf.rate_to_emulation(values["rate"].si),
                          delay_s=tdf.time_to_emulation(values["delay"].si), loss=values["loss"].si,
                          queue_packets=values["queue"])
        return TwoHostPath(shape=shape, switch=values["switch"], datapath=values["datapath"])

    @classmethod
    def check(cls, defn: Definition) -> None:
        for p in defn.points()[:1]:
            if p.values["omit"].si >= p.values["duration"].si:
                raise DefinitionError("params.omit", str(p.values["omit"]),
                                      f"a time shorter than duration ({p.values['duration']})", defn.source)

    @classmethod
    def run_point(cls, ctx: "PointContext") -> dict[str, Any]:
        from testbed.cc.selection import applied
        from testbed.net import Emulation

        v, D = ctx.point.values, ctx.tdf
        with Emulation(cls.topology(v, D), ctx.ledger, ctx.token) as emu, \
                applied(emu, ctx.defn.cca, D, v["rate"].si) as cca:
            ctx.write_json("cca.json", cca)
            h1, h2 = emu["h1"], emu["h2"]
            with ctx.instruments(emu):
                rtts_emu = ping(h1, h2.ip, v["pings"])
                server = h2.popen(["iperf3", "-s", "-1", "-B", h2.ip, "-p", str(IPERF_PORT)],
                                  stdout=ctx.log_file("iperf3-server.log"))
                wait_listening(h2, IPERF_PORT, timeout_s=10.0)
                duration = D.time_to_emulation(v["duration"].si)
                omit = D.time_to_emulation(v["omit"].si)
                ctx.progress(f"iperf3 {duration:.3g} s (emulation)")
                out = h1.run(["iperf3", "-c", h2.ip, "-p", str(IPERF_PORT), "-J", "-t", f"{duration:g}",
                              "-O", f"{omit:g}", "-i", f"{max(duration / 20, 0.1):g}"],
                             timeout=duration + omit + 60, check=False)
                hostclock.wait(server, 10)
            ctx.write_text("iperf3-client.json", out.stdout)
        result = parse_iperf3(out.stdout)
        series = [{"t_s": D.time_to_paper(t), "throughput_bps": D.rate_to_paper(bps)}
                  for t, bps in result["intervals"]]
        ctx.write_csv("series.csv", series)
        rtts = [D.time_to_paper(r) for r in rtts_emu]
        ctx.write_csv("rtt.csv", [{"seq": i, "rtt_s": r} for i, r in enumerate(rtts)])
        return {
            "rtt_min_s": min(rtts), "rtt_median_s": statistics.median(rtts),
            "rtt_mean_s": statistics.fmean(rtts), "rtt_max_s": max(rtts),
            "ping_loss": 1 - len(rtts) / v["pings"],
            "throughput_bps": D.rate_to_paper(result["throughput_bps"]),
            "retransmits": result["retransmits"], "bytes": result["bytes"],
        }


_PING_RE = re.compile(r"time=([\d.]+) ms")


def ping(node: Any, dst: str, count: int, interval_s: float = 0.05) -> list[float]:
    """RTT samples in seconds of ``count`` pings from ``node`` to ``dst`` (lost ones missing)."""
    out = node.run(["ping", "-n", "-c", str(count), "-i", f"{interval_s:g}", "-W", "5", dst],
                   check=False, timeout=count * interval_s + 30)
    rtts = [float(m) / 1e3 for m in _PING_RE.findall(out.stdout)]
    if not rtts:
        raise MeasurementError(f"no ping reply from {dst}: {out.stdout[-300:]} {out.stderr[-300:]}")
    return rtts


def wait_listening(node: Any, port: int, timeout_s: float) -> None:
    """Wait until a TCP listener on ``port`` exists in ``node`` (bounded, polled)."""
    deadline = hostclock.Deadline(timeout_s)
    while not deadline.expired():
        if node.run(["ss", "-Hltn", f"sport = :{port}"], check=False).stdout.strip():
            return
        time.sleep(0.05)
    raise MeasurementError(f"nothing listens on port {port} in {node.name} after {timeout_s:g} s")


def parse_iperf3(text: str) -> dict[str, Any]:
    """Bulk throughput (bit/s, received), retransmits and intervals from ``iperf3 -J``."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MeasurementError(f"iperf3 printed no JSON: {text[-300:]}") from exc
    if "error" in data:
        raise MeasurementError(f"iperf3: {data['error']}")
    end = data["end"]
    intervals = [(iv["sum"]["end"], iv["sum"]["bits_per_second"]) for iv in data["intervals"]
                 if not iv["sum"].get("omitted")]
    return {"throughput_bps": end["sum_received"]["bits_per_second"],
            "bytes": end["sum_received"]["bytes"],
            "retransmits": end["sum_sent"].get("retransmits", 0), "intervals": intervals}


