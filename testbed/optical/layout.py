"""Byte layout of the optswitch BPF maps (mirrors ebpf/optswitch.h; keep both in step).

Every function packs or unpacks one map key or value with :mod:`struct` (native
little-endian x86 layout, no implicit padding in the C structs).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

MAX_NODES = 512
#: ports of one node (OPTSW_MAX_PORTS, a power of two: the BPF code masks port indices with it)
MAX_PORTS = 64
MAX_NE = 32
MAX_ECMP = 16
#: buffered packets waiting at once in a node that the occupancy tracks exactly (OPTSW_OCC_SLOTS)
OCC_SLOTS = 1024
BOUT_RES = 16
LATE_BUCKETS = 512
#: announced bursts queued per input port of an obs-core node (OPTSW_OBS_RING)
OBS_RING = 16
#: holding-delay histogram: buckets per power of two and buckets (OPTSW_HOLD_SUB / _BUCKETS)
HOLD_SUB = 16
HOLD_BUCKETS = 512
#: bytes of cfg_node.arch_cfg, one architecture's configuration (OPTSW_ARCH_CFG_BYTES)
ARCH_CFG_BYTES = 64
#: decision codes (skb->cb[0] after the egress program)
CUT, BUFFER, DROP, NOCFG, HOLD = 0, 1, 2, 3, 4
PORT_PEER_HOST = 1
#: port flag: the peer releases through a holding mechanism (obsburst); see ebpf/optswitch.h
PORT_PEER_HOLDS = 2
ROUTE_FLOW_HASH = 1

_PORT_CFG = struct.Struct("<QQII")                      # 24 bytes
_NODE_CFG_HEAD = struct.Struct("<II")                   # arch, n_ports; then arch_cfg
_PORT_STATE = struct.Struct("<13Q")                     # 104 bytes
_STATE_HEAD = struct.Struct("<IIQQ4QII")  # lock, occ_used, max_occ, overflow, occ_w (4 x u64 scratch), sel_bi, sel_bo
_STATE_MID = struct.Struct("<QQQIIIIII")                # bout_overflow, sel_dep, sel_t, 6 x u32 (occ_free, scratch)
_OCC_SLOT_SIZE = 16
_BOUT_SIZE = 16 * BOUT_RES + 8                          # start_ns[], end_ns[], n, pad
#: counters of struct optsw_obs_state, in order (then its per-input-port rings)
OBS_FIELDS = ("announced", "bursts_lost", "packets_lost", "packets_passed", "unannounced", "ring_overflow",
              "conflicts", "ctrl_elsewhere", "ctrl_invalid", "empty_bursts")
_OBS_RING_SIZE = 8 + 8 * OBS_RING                       # head, n, {left, lost}[]
_OBS_SIZE = 8 * len(OBS_FIELDS) + _OBS_RING_SIZE * MAX_PORTS
_HOLD_HEAD = struct.Struct("<5Q")                       # count, early, max_ns, sum_ns, over
#: byte offset of port[0] in an optsw_node_state value
STATE_PORTS_OFFSET = _STATE_HEAD.size + 8 * MAX_NE + _STATE_MID.size
#: byte offsets of obs (struct optsw_obs_state) and hold (struct optsw_hold_hist)
STATE_OBS_OFFSET = STATE_PORTS_OFFSET + _PORT_STATE.size * MAX_PORTS + _OCC_SLOT_SIZE * OCC_SLOTS + _BOUT_SIZE * MAX_NE
STATE_HOLD_OFFSET = STATE_OBS_OFFSET + _OBS_SIZE
#: bytes of one optsw_node_state value (struct optsw_node_state in ebpf/optswitch.h)
STATE_SIZE = STATE_HOLD_OFFSET + _HOLD_HEAD.size + 8 * HOLD_BUCKETS
_MONITOR_HEAD = struct.Struct("<4Q")
#: bytes of one optsw_monitor value (struct optsw_monitor in ebpf/optswitch.h)
MONITOR_SIZE = _MONITOR_HEAD.size + 8 * LATE_BUCKETS

PORT_STATE_FIELDS = ("out_free_ns", "cut", "buffered", "dropped", "bytes", "busy_ns",
                     "max_occ_bytes", "last_dep_ns", "last_rx_real_ns", "last_rx_stamp_ns",
                     "rx", "nocfg", "held")


@dataclass(frozen=True)
class PortConfig:
    """One port: serialisation in ps per byte, propagation in ns, device ifindex, flags
    (``peer_host``: the peer is an end host; ``peer_holds``: the peer releases its packets
    through a holding mechanism, so their stamps are their arrival at the peer)."""

    ps_per_byte: int
    prop_ns: int = 0
    ifindex: int = 0
    peer_host: bool = False
    peer_holds: bool = False

    @property
    def flags(self) -> int:
        """cfg_port.flags (OPTSW_PORT_*)."""
        return (PORT_PEER_HOST if self.peer_host else 0) | (PORT_PEER_HOLDS if self.peer_holds else 0)


def ps_per_byte(rate_bps: float) -> int:
    """Picoseconds per byte at ``rate_bps`` (emulation units), rounded to an integer.

    Raises ValueError unless 0 < rate and the result is >= 1 ps/B (rate <= 8 Tbit/s).
    """
    if not rate_bps > 0:
        raise ValueError(f"rate {rate_bps!r} bit/s must be > 0")
    v = round(8e12 / rate_bps)
    if v < 1:
        raise ValueError(f"rate {rate_bps:g} bit/s is above 8 Tbit/s")
    return v


def tau_ns(length: int, ps_per_byte_: int) -> int:
    """Packet duration in ns exactly as the BPF program computes it (floor)."""
    return length * ps_per_byte_ // 1000


def u32_key(i: int) -> bytes:
    return struct.pack("<I", i)


def node_cfg(arch: int, arch_cfg: bytes, ports: list[PortConfig]) -> bytes:
    """Value of optsw_cfg for one node: architecture code ``arch`` (the registry's,
    testbed/optical/architectures.py), its packed configuration ``arch_cfg`` and ports.
    Raises ValueError for a code, configuration or port count out of range."""
    if not 0 <= arch < 2**32:
        raise ValueError(f"architecture code {arch} is not a u32")
    if len(arch_cfg) > ARCH_CFG_BYTES:
        raise ValueError(f"architecture configuration of {len(arch_cfg)} B; at most {ARCH_CFG_BYTES} B")
    if not 1 <= len(ports) <= MAX_PORTS:
        raise ValueError(f"{len(ports)} ports; a node has 1..{MAX_PORTS}")
    out = _NODE_CFG_HEAD.pack(arch, len(ports)) + arch_cfg + bytes(ARCH_CFG_BYTES - len(arch_cfg))
    for p in ports:
        out += _PORT_CFG.pack(p.ps_per_byte, p.prop_ns, p.ifindex, p.flags)
    out += bytes(_PORT_CFG.size * (MAX_PORTS - len(ports)))
    return out


def ifport_key(node: int, ifindex: int) -> bytes:
    return struct.pack("<II", node, ifindex)


def route_key(node: int, dst: str) -> bytes:
    return struct.pack("<I", node) + socket.inet_aton(dst)


def route_value(ports: list[int], flow_hash: bool = False) -> bytes:
    if not 1 <= len(ports) <= MAX_ECMP:
        raise ValueError(f"{len(ports)} equal-cost ports; a route has 1..{MAX_ECMP}")
    padded = list(ports) + [0] * (MAX_ECMP - len(ports))
    return struct.pack(f"<II{MAX_ECMP}H", len(ports), ROUTE_FLOW_HASH if flow_hash else 0, *padded)


def hook_value(now_ns: int, length: int, port: int, rand: int, stamp_ns: int = 0) -> bytes:
    """Value of optsw_hook (test mode): time, model length, port, ECMP random number and,
    for the ingress program, the packet's monotonic stamp (0: none). (The egress program
    reads the input port from cb[1] of the context, as the ingress program leaves it.)"""
    return struct.pack("<QIIIIQ", now_ns, length, port, rand, 0, stamp_ns)


def parse_node_state(value: bytes, n_ports: int) -> dict:
    """Decode an optsw_state value: node maxima, overflow counters (``occ_overflow``:
    buffered packets merged into an occupancy slot, every slot holding a waiting packet;
    ``bout_overflow``: buffer-output reservations merged) and the first ``n_ports`` port
    records."""
    _lock, _used, max_occ, overflow, *_scratch = _STATE_HEAD.unpack_from(value, 0)
    bout_overflow, *_scratch = _STATE_MID.unpack_from(value, _STATE_HEAD.size + 8 * MAX_NE)
    off = STATE_PORTS_OFFSET
    ports = []
    for p in range(min(n_ports, MAX_PORTS)):
        vals = _PORT_STATE.unpack_from(value, off + p * _PORT_STATE.size)
        ports.append(dict(zip(PORT_STATE_FIELDS, vals)))
    return {"max_occ_bytes": max_occ, "occ_overflow": overflow, "bout_overflow": bout_overflow, "ports": ports}


def parse_obs_state(value: bytes) -> dict:
    """Decode the obs part of an optsw_state value (struct optsw_obs_state): the counters
    of :data:`OBS_FIELDS` and ``rings``, per input port the announced bursts still in its
    ring, oldest first, as (packets left, lost)."""
    off = STATE_OBS_OFFSET
    out: dict = dict(zip(OBS_FIELDS, struct.unpack_from(f"<{len(OBS_FIELDS)}Q", value, off)))
    rings = []
    off += 8 * len(OBS_FIELDS)
    for p in range(MAX_PORTS):
        head, n = struct.unpack_from("<II", value, off + p * _OBS_RING_SIZE)
        slots = struct.unpack_from(f"<{2 * OBS_RING}I", value, off + p * _OBS_RING_SIZE + 8)
        rings.append([(slots[2 * ((head + i) % OBS_RING)], slots[2 * ((head + i) % OBS_RING) + 1])
                      for i in range(min(n, OBS_RING))])
    out["rings"] = rings
    return out


def parse_hold_hist(value: bytes) -> dict:
    """Decode the holding-delay histogram of an optsw_state value (struct optsw_hold_hist):
    count, early, max_ns, sum_ns, over and the bucket counts (see :func:`hold_bucket`)."""
    count, early, max_ns, sum_ns, over = _HOLD_HEAD.unpack_from(value, STATE_HOLD_OFFSET)
    buckets = list(struct.unpack_from(f"<{HOLD_BUCKETS}Q", value, STATE_HOLD_OFFSET + _HOLD_HEAD.size))
    return {"count": count, "early": early, "max_ns": max_ns, "sum_ns": sum_ns, "over": over, "buckets": buckets}


def hold_bucket(v: int) -> int:
    """Holding-delay bucket of ``v`` ns (mirror of hold_bucket in the BPF code): exact
    below :data:`HOLD_SUB` ns, then :data:`HOLD_SUB` buckets per power of two, the last
    bucket (from 2^35 ns = 34.4 s) taking every longer delay."""
    if v < HOLD_SUB:
        return v
    e = v.bit_length() - 1
    return min((e - 3) * HOLD_SUB + ((v >> (e - 4)) & (HOLD_SUB - 1)), HOLD_BUCKETS - 1)


def hold_bucket_bounds(idx: int) -> tuple[int, int]:
    """[lo, hi) in ns of holding-delay bucket ``idx``; the last bucket's hi is 2^64.
    Raises ValueError for an index outside 0..HOLD_BUCKETS-1."""
    if not 0 <= idx < HOLD_BUCKETS:
        raise ValueError(f"bucket {idx} outside 0..{HOLD_BUCKETS - 1}")
    if idx < HOLD_SUB:
        return idx, idx + 1
    e, sub = idx // HOLD_SUB + 3, idx % HOLD_SUB
    lo = (HOLD_SUB + sub) << (e - 4)
    hi = 2**64 if idx == HOLD_BUCKETS - 1 else (HOLD_SUB + sub + 1) << (e - 4)
    return lo, hi


def parse_monitor(value: bytes) -> dict:
    """Decode the optsw_monitor value: count, early, max_ns, sum_ns, bucket counts."""
    count, early, max_ns, sum_ns = _MONITOR_HEAD.unpack_from(value, 0)
    buckets = list(struct.unpack_from(f"<{LATE_BUCKETS}Q", value, _MONITOR_HEAD.size))
    return {"count": count, "early": early, "max_ns": max_ns, "sum_ns": sum_ns, "buckets": buckets}


def late_bucket(v: int) -> int:
    """Histogram bucket of a lateness ``v`` ns (mirror of late_bucket in the BPF code)."""
    if v < 8:
        return v
    e = v.bit_length() - 1
    return min((e - 2) * 8 + ((v >> (e - 3)) & 7), LATE_BUCKETS - 1)


def bucket_upper_ns(idx: int) -> int:
    """Largest lateness (ns) that falls into bucket ``idx``."""
    if idx < 8:
        return idx
    e, sub = idx // 8 + 2, idx % 8
    return ((8 + sub + 1) << (e - 3)) - 1


def lateness_summary(mon: dict) -> dict:
    """p50 / p99 (bucket upper bounds, ns), max and mean lateness of a monitor record."""
    n = mon["count"]
    out = {"packets": n, "early": mon["early"], "max_ns": mon["max_ns"],
           "mean_ns": mon["sum_ns"] / n if n else 0.0, "p50_ns": 0, "p99_ns": 0}
    if not n:
        return out
    for q, key in ((0.5, "p50_ns"), (0.99, "p99_ns")):
        target, acc = q * n, 0
        for i, c in enumerate(mon["buckets"]):
            acc += c
            if acc >= target:
                out[key] = min(bucket_upper_ns(i), mon["max_ns"])
                break
    return out


# ---- XCP (ebpf/optswitch.h: struct optsw_xcp_slot, optsw_xcp_node, optsw_xcp_cfg,
# optsw_xcp_class_key; docs/xcp-edge.md, "(b) S and Q at a core node") ----

#: intervals kept per output (OPTSW_XCP_SLOTS): interval k lives in slot k % XCP_SLOTS
XCP_SLOTS = 4
#: "none" in a slot's interval (never used) and qmin_ns (no backlog sample): OPTSW_XCP_NONE
XCP_NONE = 2**64 - 1
#: pacer class "none" (OPTSW_XCP_NO_CLASS), never a class id
XCP_NO_CLASS = 2**32 - 1
_XCP_SLOT = struct.Struct("<QQQII")                     # interval, bytes, qmin_ns, packets, drops: 32 B
#: bytes of one optsw_xcp_acc value (struct optsw_xcp_node: slot[MAX_PORTS][XCP_SLOTS])
XCP_NODE_SIZE = _XCP_SLOT.size * XCP_SLOTS * MAX_PORTS
_XCP_CFG = struct.Struct("<IIQQ")                       # enabled, acks_separate, epoch_ns, interval_ns
_XCP_CLASS_KEY = struct.Struct("<I4s")                  # node, dst_ip (network byte order)
_U32 = struct.Struct("<I")


@dataclass(frozen=True)
class AccSlot:
    """One slot of a node's XCP accumulator for one output: ``interval`` k (None: never
    used), the frame ``bytes`` and ``packets`` decided for the output whose intended
    arrival at the node lies in interval k (dropped ones included), ``drops`` of them
    dropped, and ``qmin_ns``, the smallest backlog (out_free - a)^+ in emulation ns an
    arrival found (None: none, i.e. no arrival or only held packets)."""

    interval: int | None
    bytes: int = 0
    packets: int = 0
    drops: int = 0
    qmin_ns: int | None = None


#: a slot that was never used
EMPTY_SLOT = AccSlot(None)


def pack_acc_slot(slot: AccSlot) -> bytes:
    """The 32 bytes of struct optsw_xcp_slot for ``slot`` (None as XCP_NONE). Raises
    struct.error for a value that does not fit its member."""
    return _XCP_SLOT.pack(XCP_NONE if slot.interval is None else slot.interval, slot.bytes,
                          XCP_NONE if slot.qmin_ns is None else slot.qmin_ns, slot.packets, slot.drops)


def unpack_acc_slot(raw: bytes, offset: int = 0) -> AccSlot:
    """The slot at ``offset`` of ``raw``. A slot without packets was never used (the
    program resets a slot and counts its first packet in one step under the node lock):
    AccSlot(None) whatever its interval, so an all-zero value (a map as the kernel creates
    it) reads as never used too. Raises struct.error if ``raw`` is too short."""
    interval, nbytes, qmin, packets, drops = _XCP_SLOT.unpack_from(raw, offset)
    if packets == 0:
        return EMPTY_SLOT
    return AccSlot(interval, nbytes, packets, drops, None if qmin == XCP_NONE else qmin)


def pack_xcp_node(slots: Mapping[int, Sequence[AccSlot]] | None = None) -> bytes:
    """An optsw_xcp_acc value: ``slots`` {port: its XCP_SLOTS slots, index = slot
    number}, every other slot never used (interval and qmin_ns XCP_NONE): what a reset
    writes. Raises ValueError for a port outside 0..MAX_PORTS-1 or a list that is not
    XCP_SLOTS long."""
    given = dict(slots or {})
    out = bytearray()
    empty = pack_acc_slot(EMPTY_SLOT)
    for port in range(MAX_PORTS):
        ring = given.pop(port, None)
        if ring is None:
            out += empty * XCP_SLOTS
            continue
        if len(ring) != XCP_SLOTS:
            raise ValueError(f"port {port}: {len(ring)} slots; a port has {XCP_SLOTS}")
        out += b"".join(pack_acc_slot(s) for s in ring)
    if given:
        raise ValueError(f"ports {sorted(given)} outside 0..{MAX_PORTS - 1}")
    return bytes(out)


def parse_xcp_node(value: bytes, n_ports: int = MAX_PORTS) -> dict[int, list[AccSlot]]:
    """Decode an optsw_xcp_acc value: {port: its XCP_SLOTS slots, index = slot number
    (interval k is in slot k % XCP_SLOTS)} for ports 0..n_ports-1. Raises ValueError
    for a value of the wrong size or n_ports outside 1..MAX_PORTS."""
    if len(value) != XCP_NODE_SIZE:
        raise ValueError(f"optsw_xcp_acc value of {len(value)} B; struct optsw_xcp_node has {XCP_NODE_SIZE} B")
    if not 1 <= n_ports <= MAX_PORTS:
        raise ValueError(f"{n_ports} ports; a node has 1..{MAX_PORTS}")
    return {p: [unpack_acc_slot(value, (p * XCP_SLOTS + i) * _XCP_SLOT.size) for i in range(XCP_SLOTS)]
            for p in range(n_ports)}


def acc_interval(ring: Sequence[AccSlot], k: int) -> AccSlot:
    """What a port's ring (:func:`parse_xcp_node`) holds of interval ``k``: its slot if
    that slot holds k, else AccSlot(k) with nothing counted (no arrival in k, or the
    slot was reused for a later interval: the caller tells them apart by reading in time)."""
    s = ring[k % XCP_SLOTS]
    return s if s.interval == k else AccSlot(k)


@dataclass(frozen=True)
class XcpConfig:
    """One node's optsw_xcp_cfg: ``enabled`` (accumulate), ``epoch_ns`` E and
    ``interval_ns`` d_e (emulation ns of CLOCK_MONOTONIC; interval k = [E + k d_e,
    E + (k+1) d_e)), ``acks_separate`` (xcp-edge: pure ACKs take class + 1). Raises
    ValueError for an enabled configuration with d_e <= 0 or a value outside a u64."""

    enabled: bool = False
    epoch_ns: int = 0
    interval_ns: int = 0
    acks_separate: bool = False

    def __post_init__(self) -> None:
        for name in ("epoch_ns", "interval_ns"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**64:
                raise ValueError(f"{name} {v!r} is not a u64 (emulation ns)")
        if self.enabled and self.interval_ns <= 0:
            raise ValueError("an enabled XCP configuration needs interval_ns > 0")

    def pack(self) -> bytes:
        """The 24 bytes of struct optsw_xcp_cfg."""
        return _XCP_CFG.pack(int(self.enabled), int(self.acks_separate), self.epoch_ns, self.interval_ns)

    @classmethod
    def unpack(cls, raw: bytes) -> "XcpConfig":
        """The configuration in ``raw`` (struct optsw_xcp_cfg). Raises struct.error if too short."""
        enabled, acks, epoch, interval = _XCP_CFG.unpack_from(raw, 0)
        return cls(bool(enabled), epoch, interval, bool(acks))

    def interval_of(self, a_ns: int) -> int | None:
        """The interval k of an intended arrival ``a_ns`` as the program computes it
        (floor((a - E) / d_e)); None before the epoch or when disabled."""
        if not self.enabled or a_ns < self.epoch_ns:
            return None
        return (a_ns - self.epoch_ns) // self.interval_ns


def xcp_class_key(node: int, dst: str) -> bytes:
    """Key of optsw_xcp_class (struct optsw_xcp_class_key): xcp-edge node id and a
    destination IPv4 address (network byte order in the key). Raises OSError for a bad
    address, struct.error for a node id that is not a u32."""
    return _XCP_CLASS_KEY.pack(node, socket.inet_aton(dst))


def xcp_class_value(cls: int) -> bytes:
    """Value of optsw_xcp_class: the data class id (u32; the pacer's classes). Raises
    ValueError for a negative id or XCP_NO_CLASS and beyond (its ACK class cls + 1 must
    be an id too)."""
    if isinstance(cls, bool) or not isinstance(cls, int) or not 0 <= cls < XCP_NO_CLASS - 1:
        raise ValueError(f"class {cls!r} is not a class id (0..{XCP_NO_CLASS - 2})")
    return _U32.pack(cls)
