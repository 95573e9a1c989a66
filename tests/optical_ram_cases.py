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

__all__ = ["ACK", "ARCHS", "DATA", "KINDS", "PS", "Packet", "ram_trace", "reference"]

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
