"""The XCP probe of E5's edge pacing on the wire: pack, parse, bounds, version
(docs/xcp-edge.md, "The probe header").

A probe is an Ethernet frame of EtherType :data:`ETH_P_XCPP` (0x88B6, IEEE 802 local
experimental EtherType 2; E2's burst control packet has type 1, 0x88B5) carrying one
:data:`HEADER_BYTES`-byte header, big endian, on the control channel between the XCP
agents of the edge and core nodes. ``xcpprobe.lua`` (in ``testbed/optical/``) is its
Wireshark dissector; :data:`LAYOUT` is the one description of the fields, which
``tests/unit/test_xcpprobe.py`` checks the dissector against.

Units: rates in paper bit/s (XCP's formulas are written in paper units,
testbed/xcp.py); times in emulation ns of CLOCK_MONOTONIC (the fabric's timeline, paper
times x D). Every field is an integer: the feedback a router writes is rounded down
(:meth:`ProbeHeader.lowered`), so a probe never grants more than the router allowed.

A change of any layout or meaning bumps :data:`VERSION`; :func:`parse_frame` ignores
frames of another version (the agents count them), :meth:`ProbeHeader.unpack` refuses
them.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, replace
from pathlib import Path

from testbed import xcp

ETH_P_XCPP = 0x88B6
MAGIC = 0x58435050            # "XCPP"
VERSION = 1
ETH_HLEN = 14
#: flags
F_RETURN = 0x01               # on its way back from the egress edge: forwarded, not lowered
F_ACK = 0x02                  # the probe of the pair's separate ACK macroflow
KNOWN_FLAGS = F_RETURN | F_ACK
#: "no node" / "no port" in limiter_node / limiter_port (no router lowered the feedback)
NO_NODE = 0xFFFF
NO_PORT = 0xFF
#: bounds of the rate fields, bit/s (as obsburst's optical rates: up to 10 Tbit/s)
RATE_MAX = 10_000_000_000_000
#: bounds of times, ns
TIME_MAX = 2**63 - 1

#: the header, field by field in wire order: (name, struct code, what it holds); big endian,
#: naturally aligned, no padding
LAYOUT: tuple[tuple[str, str, str], ...] = (
    ("magic", "I", "MAGIC, 'XCPP'"),
    ("version", "B", "VERSION"),
    ("flags", "B", "F_RETURN | F_ACK"),
    ("hops", "B", "links whose controller has processed it (forward path)"),
    ("reserved", "B", "0"),
    ("src_edge", "H", "ingress edge node of the macroflow (edge index)"),
    ("dst_edge", "H", "egress edge node of the macroflow (edge index)"),
    ("seq", "I", "probe number of the macroflow, from 0"),
    ("rate_bps", "Q", "granted rate R of the macroflow when sent, paper bit/s"),
    ("measured_bps", "Q", "u_i: the macroflow's rate measured by the ingress edge, paper bit/s"),
    ("feedback_bps", "q", "the smallest feedback on the path so far, paper bit/s (signed)"),
    ("send_ns", "Q", "intended emission at the ingress edge, emulation ns"),
    ("arrive_ns", "Q", "intended arrival at the agent receiving this frame, emulation ns"),
    ("limiter_node", "H", "fabric node id of the router that set feedback_bps, NO_NODE if none"),
    ("limiter_port", "B", "its output port, NO_PORT if none"),
    ("reserved2", "B", "0"),
    ("reserved3", "I", "0"),
)
_STRUCT = struct.Struct("!" + "".join(code for _, code, _ in LAYOUT))
HEADER_BYTES = _STRUCT.size                                  # 64
#: the probe's Ethernet frame (no FCS), what the control channel serialises
FRAME_BYTES = ETH_HLEN + HEADER_BYTES                         # 78


def field_offsets() -> dict[str, tuple[int, int]]:
    """{field: (offset in the header, size in bytes)} of :data:`LAYOUT`."""
    out, off = {}, 0
    for name, code, _ in LAYOUT:
        size = struct.calcsize("!" + code)
        out[name] = (off, size)
        off += size
    return out


class ProbeError(ValueError):
    """A probe field out of its range, or bytes that are not a probe of this version;
    names the field (or what is wrong), the value and what is accepted."""


def _check(name: str, value: object, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ProbeError(f"XCP probe {name}={value!r}: accepted an integer {lo}..{hi}")


@dataclass(frozen=True)
class ProbeHeader:
    """One probe (:data:`LAYOUT` says what each field holds). Raises ProbeError for a
    field out of range: edges 0..65534, seq 0..2^32-1, rates 0..RATE_MAX, feedback
    -RATE_MAX..RATE_MAX, times 0..2^63-1, hops 0..255, limiter node 0..65534 or NO_NODE,
    limiter port 0..254 or NO_PORT."""

    src_edge: int
    dst_edge: int
    seq: int
    rate_bps: int
    measured_bps: int
    feedback_bps: int
    send_ns: int
    arrive_ns: int
    ack: bool = False
    returning: bool = False
    hops: int = 0
    limiter_node: int = NO_NODE
    limiter_port: int = NO_PORT

    def __post_init__(self) -> None:
        _check("src_edge", self.src_edge, 0, NO_NODE - 1)
        _check("dst_edge", self.dst_edge, 0, NO_NODE - 1)
        _check("seq", self.seq, 0, 2**32 - 1)
        _check("rate_bps", self.rate_bps, 0, RATE_MAX)
        _check("measured_bps", self.measured_bps, 0, RATE_MAX)
        _check("feedback_bps", self.feedback_bps, -RATE_MAX, RATE_MAX)
        _check("send_ns", self.send_ns, 0, TIME_MAX)
        _check("arrive_ns", self.arrive_ns, 0, TIME_MAX)
        _check("hops", self.hops, 0, 255)
        _check("limiter_node", self.limiter_node, 0, NO_NODE)
        _check("limiter_port", self.limiter_port, 0, NO_PORT)

    @property
    def flags(self) -> int:
        return (F_RETURN if self.returning else 0) | (F_ACK if self.ack else 0)

    def pack(self) -> bytes:
        """The :data:`HEADER_BYTES`-byte header."""
        return _STRUCT.pack(MAGIC, VERSION, self.flags, self.hops, 0, self.src_edge, self.dst_edge, self.seq,
                            self.rate_bps, self.measured_bps, self.feedback_bps, self.send_ns, self.arrive_ns,
                            self.limiter_node, self.limiter_port, 0, 0)

    @classmethod
    def unpack(cls, data: bytes) -> "ProbeHeader":
        """The probe in ``data`` (the header, at least :data:`HEADER_BYTES` bytes; more are
        ignored: Ethernet padding). Raises ProbeError for a short buffer, another magic or
        version, unknown flags, non-zero reserved fields or a field out of range."""
        if len(data) < HEADER_BYTES:
            raise ProbeError(f"XCP probe of {len(data)} bytes: accepted at least {HEADER_BYTES}")
        (magic, version, flags, hops, res, src, dst, seq, rate, measured, fb, send, arrive, lnode, lport, res2,
         res3) = _STRUCT.unpack_from(data)
        if magic != MAGIC:
            raise ProbeError(f"XCP probe magic=0x{magic:08x}: accepted 0x{MAGIC:08x} ('XCPP')")
        if version != VERSION:
            raise ProbeError(f"XCP probe version={version}: this code knows version {VERSION}")
        if flags & ~KNOWN_FLAGS:
            raise ProbeError(f"XCP probe flags=0x{flags:02x}: accepted bits 0x{KNOWN_FLAGS:02x}")
        if res or res2 or res3:
            raise ProbeError(f"XCP probe reserved fields {res}, {res2}, {res3}: accepted 0")
        return cls(src, dst, seq, rate, measured, fb, send, arrive, bool(flags & F_ACK), bool(flags & F_RETURN),
                   hops, lnode, lport)

    def frame(self, src_mac: bytes = b"\x02\0\0\0\0\x02", dst_mac: bytes = b"\xff" * 6) -> bytes:
        """The Ethernet frame carrying the probe (:data:`FRAME_BYTES` bytes)."""
        if len(src_mac) != 6 or len(dst_mac) != 6:
            raise ProbeError(f"MAC addresses of {len(src_mac)} and {len(dst_mac)} bytes: accepted 6 each")
        return dst_mac + src_mac + struct.pack("!H", ETH_P_XCPP) + self.pack()

    def macroflow(self) -> tuple[int, int, bool]:
        """(ingress edge, egress edge, ACK macroflow): the macroflow's key."""
        return self.src_edge, self.dst_edge, self.ack

    def lowered(self, own_feedback_bps: float, node: int, port: int) -> "ProbeHeader":
        """The probe leaving the controller of output ``port`` of fabric node ``node``
        whose own feedback for it is ``own_feedback_bps`` (paper bit/s): hops + 1, and
        the smaller feedback (xcp.lower_feedback), rounded down and clamped to
        -RATE_MAX..RATE_MAX; the limiter becomes (node, port) when it lowered it. Raises
        ProbeError for a returning probe (routers only forward those) and for a
        non-finite feedback."""
        if self.returning:
            raise ProbeError(f"XCP probe {self.macroflow()} seq {self.seq} is returning: routers forward it unchanged")
        if not math.isfinite(own_feedback_bps):
            raise ProbeError(f"XCP feedback {own_feedback_bps!r} from node {node} port {port}: "
                             "accepted a finite number")
        own = max(-RATE_MAX, min(RATE_MAX, math.floor(own_feedback_bps)))
        probe = xcp.Probe(self.macroflow(), self.measured_bps, self.feedback_bps)
        if xcp.lower_feedback(probe, own) is probe:
            return replace(self, hops=self.hops + 1)
        return replace(self, hops=self.hops + 1, feedback_bps=own, limiter_node=node, limiter_port=port)

    def turned(self, arrive_ns: int) -> "ProbeHeader":
        """The probe the egress edge sends back towards the ingress edge, intended to reach
        the next agent at ``arrive_ns``."""
        return replace(self, returning=True, arrive_ns=arrive_ns)


def parse_frame(frame: bytes) -> ProbeHeader | None:
    """The probe in Ethernet ``frame``; None when the frame is not an XCP probe of this
    version (another EtherType, magic or version, or too short). Raises ProbeError
    for a frame that claims to be one but has bad flags, reserved bits or fields."""
    if len(frame) < FRAME_BYTES or struct.unpack_from("!H", frame, 12)[0] != ETH_P_XCPP:
        return None
    magic, version = struct.unpack_from("!IB", frame, ETH_HLEN)
    if magic != MAGIC or version != VERSION:
        return None
    return ProbeHeader.unpack(frame[ETH_HLEN:])


#: Wireshark / tshark dissector of the probe
DISSECTOR = Path(__file__).parent / "optical" / "xcpprobe.lua"
