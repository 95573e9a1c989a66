"""The shared flows' round-trip times at two scales of E5's nested scale check.

An observation beside the scale table (docs/e5.md, "Which scale"), defined on 2026-12-02
after the nested check's results, to look for the cause of its gap: not a pre-registered
reading and not a verdict.

Scaling by s divides link rates and flows by s and keeps delays, so each link's load and
the propagation RTT in seconds stay, but a packet lasts s times longer: a queue of q
packets delays the packets behind it by q x 1500 B / (C / s), so at equal queues in
packets the queueing delay in seconds grows with s. A flow held by its window (Reno,
cwnd capped at ``cwnd_limit`` segments) gets about cwnd x MSS / RTT, so a longer RTT at
the larger scale lowers its goodput by the ratio of the RTTs, lost packets or not.

Per run pair (one seed, the larger scale against the smaller; the flows are nested, so
the larger scale's flows are the smaller's with the same ids), from each point's
``flows_window.csv``: the flows measured at both scales (started before the window,
goodput known), their goodput in the window and their smoothed RTT ``srtt_s``
(tcp_info's srtt when the flow's record was taken at the traffic's end: an estimate over
its last few RTTs, inside the window; one sample per flow, not a window average).
Per pair:

- the mean srtt at each scale (ms);
- the goodput ratio, larger / smaller scale (the shared flows' mean goodputs);
- the ratio the RTTs alone predict: sum over flows of goodput_small x srtt_small /
  srtt_large, over the sum of goodput_small (each flow's goodput scaled by its own RTT
  ratio, as a window-limited flow's would be);
- the median effective window, goodput x srtt / MSS (segments; the MSS the run used,
  ``schedule-meta.json``), at each scale: near ``cwnd_limit`` where the flows are
  window-limited, as the prediction assumes;
- the shared flows' mean propagation RTT (twice the core path's delay and the two edge
  links'; host links have none), as a range: the least and the largest over each pair's
  minimum-hop paths (the emulation's ``pair`` routing takes one of them, the lowest
  port, which this module does not rebuild). srtt minus it is the delay the packets
  spent beyond propagation (serialization, queues, the receiver's ACK delay).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis.e5_findings import seconds
from analysis.report import source_folders
from topologies.nsfnet import CoreGraph, edge_of_host, network

#: the summary column whose presence marks a nested scale check's runs
COMMON = "goodput_common_Bps"


@dataclass(frozen=True)
class RunPair:
    """One seed's shared flows at two scales: ``flows`` measured at both; mean srtt (s)
    and goodput (B/s) at the larger scale (``_large``) and the smaller (``_small``); the
    ratio the RTTs predict (``predicted``, see the module's doc); median effective
    windows (segments); the shared flows' mean propagation RTT (s), least and largest
    over their minimum-hop paths (NaN without a network)."""

    flows: int
    srtt_large: float
    srtt_small: float
    goodput_large: float
    goodput_small: float
    predicted: float
    window_large: float
    window_small: float
    propagation: tuple[float, float]

    @property
    def observed(self) -> float:
        """Goodput ratio, larger / smaller scale."""
        return self.goodput_large / self.goodput_small if self.goodput_small else math.nan


def _measured(folder: Path, window_start_s: float) -> pd.DataFrame:
    """A point's flows started before the window with a known goodput and srtt, indexed
    by flow id. Raises OSError when flows_window.csv is unreadable, KeyError when it lacks
    a column."""
    f = pd.read_csv(folder / "flows_window.csv", usecols=["flow", "src", "dst", "start_s", "goodput_Bps", "srtt_s"])
    f = f[(f["start_s"] < window_start_s) & f["goodput_Bps"].notna() & (f["srtt_s"] > 0)]
    return f.set_index("flow")[["src", "dst", "goodput_Bps", "srtt_s"]]


def _mss(folder: Path) -> int:
    """The MSS (bytes) a point's flows used (``schedule-meta.json``). Raises OSError,
    ValueError (not JSON) or KeyError."""
    return int(json.loads((folder / "schedule-meta.json").read_text())["mss"])


def propagation_rtt(net: CoreGraph, src: str, dst: str) -> tuple[float, float]:
    """The least and largest propagation RTT (s) between hosts ``src`` and ``dst`` over
    the minimum-hop core paths: twice the core delay and two edge links (host links
    have no propagation: topologies.nsfnet.OpsMesh). Raises ValueError for a host
    name not of the network's form or an edge node it does not have."""
    i, j = edge_of_host(src), edge_of_host(dst)
    if max(i, j) >= len(net.edge_of):
        raise ValueError(f"{src} -> {dst}: the network has {len(net.edge_of)} edge nodes")
    lo, hi = net.min_hop_delays(net.edge_of[i], net.edge_of[j])
    return 2 * (lo + 2 * net.edge_delay_s), 2 * (hi + 2 * net.edge_delay_s)


def read_pair(large: Path, small: Path, window_start_s: float, net: CoreGraph | None = None) -> RunPair:
    """The shared flows of two point folders of one seed (``large``: the larger scale's,
    whose flows ``small`` also has); ``window_start_s`` in paper seconds; ``net`` the
    network, for the propagation RTTs. Raises OSError or KeyError as :func:`_measured`
    and :func:`_mss`, ValueError when no flow is measured in both, a host is not of
    ``net`` or a schedule-meta.json is not JSON."""
    m = _measured(large, window_start_s).join(_measured(small, window_start_s).drop(columns=["src", "dst"]),
                                              lsuffix="_l", rsuffix="_s", how="inner")
    if m.empty:
        raise ValueError(f"no flow measured in both {large} and {small}")
    props = [propagation_rtt(net, a, b) for a, b in zip(m["src"], m["dst"])] if net is not None else []
    propagation = (sum(p[0] for p in props) / len(props), sum(p[1] for p in props) / len(props)) \
        if props else (math.nan, math.nan)
    predicted = float((m["goodput_Bps_s"] * m["srtt_s_s"] / m["srtt_s_l"]).sum() / m["goodput_Bps_s"].sum())
    return RunPair(flows=len(m), srtt_large=float(m["srtt_s_l"].mean()), srtt_small=float(m["srtt_s_s"].mean()),
                   goodput_large=float(m["goodput_Bps_l"].mean()), goodput_small=float(m["goodput_Bps_s"].mean()),
                   predicted=predicted,
                   window_large=float((m["goodput_Bps_l"] * m["srtt_s_l"] / _mss(large)).median()),
                   window_small=float((m["goodput_Bps_s"] * m["srtt_s_s"] / _mss(small)).median()),
                   propagation=propagation)


def _window_start(row: pd.Series) -> float:
    """The measured window's start, paper seconds. Raises ValueError (not a time)."""
    return seconds(row["duration"], "duration") - seconds(row["window"], "window")


def _network(row: pd.Series) -> CoreGraph | None:
    """The run's network from its ``topology`` and ``abilene_nodes``; None when the row
    lacks them. Raises ValueError (TopologyDataError too) for a name or size the
    generator refuses."""
    if "topology" not in row or pd.isna(row["topology"]):
        return None
    return network(str(row["topology"]), float(row.get("abilene_nodes", math.nan)))


def table(s: pd.DataFrame, results: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per (arch, pacing, buffer) of ``s`` (prepared rows of one context but scale, with
    ``point``, ``seed``, ``scale``, ``duration``, ``window`` and :data:`COMMON`; a ``run``
    column in a combined report) measured at two or more scales: one row per seed and
    scale against the smallest (the columns of :class:`RunPair`, ms and kB/s), then the
    runs that could not be read (run, point, why). ``results``: the results folder (a
    combined report's names its sources). Never raises for a run's files; both frames are
    empty without nested runs at two scales."""
    cols = ["arch", "pacing", "buffer", "scale", "seed"]
    empty = pd.DataFrame(), pd.DataFrame(columns=["run", "point", "why"])
    if s.empty or COMMON not in s or not set(cols) <= set(s.columns):
        return empty
    s = s[pd.to_numeric(s[COMMON], errors="coerce").notna()]
    sources = source_folders(results)

    def folder(r: pd.Series) -> Path:
        return sources.get(str(r.get("run", "")), results) / "points" / str(r["point"])

    out, unread = [], []
    for (arch, pacing, buffer), g in s.groupby(["arch", "pacing", "buffer"], sort=False, dropna=False):
        scales = sorted({float(v) for v in pd.to_numeric(g["scale"], errors="coerce").dropna()})
        if len(scales) < 2:
            continue
        by = {(float(r["scale"]), r["seed"]): r for _, r in g.iterrows()}
        for k in scales[1:]:
            for seed in sorted({sd for (sc, sd) in by if sc == k}):
                small = by.get((scales[0], seed))
                if small is None:
                    continue
                large = by[(k, seed)]
                try:
                    p = read_pair(folder(large), folder(small), _window_start(large), _network(large))
                except (OSError, ValueError, KeyError) as exc:
                    unread.append({"run": str(large.get("run", "")), "point": large["point"],
                                   "why": f"{exc.__class__.__name__}: {exc}"})
                    continue
                out.append({"arch": arch, "pacing": pacing, "buffer": buffer, "scale": k,
                            "reference scale": scales[0], "seed": seed, "shared flows": p.flows,
                            "srtt [ms]": p.srtt_large * 1e3, "reference srtt [ms]": p.srtt_small * 1e3,
                            "propagation RTT lo [ms]": p.propagation[0] * 1e3,
                            "propagation RTT hi [ms]": p.propagation[1] * 1e3,
                            "goodput [kB/s]": p.goodput_large * 1e-3, "reference [kB/s]": p.goodput_small * 1e-3,
                            "ratio": p.observed, "ratio the RTTs predict": p.predicted,
                            "median window [segments]": p.window_large,
                            "reference median window [segments]": p.window_small})
    return pd.DataFrame(out), pd.DataFrame(unread, columns=["run", "point", "why"])
