"""Traces and the paper's reference for E5's optical RAM port models (ob, sb, wcsb),
shared by tests/unit/test_optical_ram.py (the Python models) and
tests/bpf/test_optswitch.py (the BPF program). Imported as ``optical_ram_cases``
(pytest's pythonpath is tests/).

The port models count IP datagram bytes (frame length less 14 B) in the buffer and time
packets by their frame: the reference (testbed/optical/ramsim.py, written from the paper
independently of the port models) gets the IP length as ``length`` and the frame as
``wire_bytes``.
"""

from __future__ import annotations

import random

from testbed.optical import layout, ramsim, traces
from testbed.optical.eventsim import Packet
from testbed.optical.layout import BUFFER, CUT, DROP
from testbed.optical.model import ETH_HLEN

__all__ = ["ACK", "ARCHS", "DATA", "KINDS", "PS", "Packet", "ack_flood_trace", "long_queue_trace", "max_waiting",
           "ram_trace", "reference"]

PS = layout.ps_per_byte(1e9)    # the paper's 1 Gb/s: 8000 ps/B
DATA, ACK = 1514, 54            # frames of a 1500 B IP packet and of a bare TCP ACK
KINDS = {CUT: "cut", BUFFER: "buffered", DROP: "dropped"}
#: the registry name of each reference architecture
ARCHS = {"ob": "OB", "sb": "SB", "wcsb": "WCSB"}


def ram_trace(seed: int, n: int = 3000, n_a: int = 4, load: float = 0.9) -> list:
    """Packets on ``n_a`` input links (one at a time per link), 3 data frames to 1 ACK,
    outputs uniform over the other ports (testbed.optical.traces.e1_like_trace)."""
    return traces.e1_like_trace(random.Random(seed), n, n_a, load, PS, lengths=(DATA, DATA, DATA, ACK))


def reference(trace: list, arch: str, n_a: int, buffer_bytes: int) -> list[ramsim.Outcome]:
    """The paper's node (ramsim) over ``trace`` (frames in, IP bytes buffered)."""
    packets = [ramsim.Packet(p.arrival_ns, p.length - ETH_HLEN, p.in_port, p.out_port, wire_bytes=p.length)
               for p in trace]
    return ramsim.simulate(packets, ARCHS[arch], n_a, buffer_bytes, PS)


def long_queue_trace(hot_inputs: int = 5, hot_frames: int = 70, churn_pairs: int = 1200) -> list:
    """An 8-port node: inputs 1..``hot_inputs`` each send ``hot_frames`` data frames back
    to back to output 0 from 0 ns (a queue of a few hundred builds there and drains for
    milliseconds); meanwhile inputs 6 and 7 send ``churn_pairs`` pairs of ACKs to output
    1, both of a pair at once, pairs two ACK times apart (one cuts through, the other
    waits one ACK time). More packets are buffered while the queue's first ones wait
    than the BPF's occupancy slots (OCC_SLOTS), but fewer wait at once."""
    assert hot_inputs <= 5
    tau_d, tau_a = layout.tau_ns(DATA, PS), layout.tau_ns(ACK, PS)
    pkts = [Packet(k * tau_d, DATA, i, 0) for i in range(1, hot_inputs + 1) for k in range(hot_frames)]
    pkts += [Packet(j * 2 * tau_a, ACK, i, 1) for j in range(churn_pairs) for i in (6, 7)]
    return sorted(pkts, key=lambda p: (p.arrival_ns, p.in_port))


def ack_flood_trace(inputs: int = 7, frames: int = 200) -> list:
    """An 8-port node: inputs 1..``inputs`` each send ``frames`` ACK frames back to back to
    output 0 from 0 ns: with 7 inputs more than a thousand ACKs wait at once."""
    tau_a = layout.tau_ns(ACK, PS)
    pkts = [Packet(k * tau_a, ACK, i, 0) for i in range(1, inputs + 1) for k in range(frames)]
    return sorted(pkts, key=lambda p: (p.arrival_ns, p.in_port))


def max_waiting(trace: list, outcomes: list[ramsim.Outcome]) -> int:
    """The most buffered packets waiting at once (arrived, head not left: arrival <= t <
    departure) in the reference's outcomes."""
    events = []
    for p, o in zip(trace, outcomes):
        if o.kind == "buffered":
            events += [(p.arrival_ns, 1), (o.departure_ns, -1)]
    most = now = 0
    for _, d in sorted(events, key=lambda e: (e[0], e[1])):  # a departure at t frees before an arrival at t
        now += d
        most = max(most, now)
    return most
