"""TCP segments from a classic pcap file, and the counts E4 takes from them.

:func:`read` turns a capture (``tcpdump -s 128 -w FILE``: classic pcap, either byte order,
microsecond or nanosecond timestamps, Ethernet) into one row per IPv4/TCP packet, as numpy
arrays, without a per-packet Python object: a Python loop only walks the record headers
(the records have different lengths), every field is then gathered with numpy. The TCP
payload length comes from the IP total length, never from the captured length (the
snaplen cuts the payload).

:func:`flow` picks one connection by its sender and puts the sequence and
acknowledgment numbers on one unwrapped, relative int64 axis. The counts
(:func:`dupacks`, :func:`out_of_order`, :func:`late_segments`, :func:`reorder_extent`,
:func:`series`) are functions of that trace; each docstring gives its definition.

Everything is seen from one capture point: "arrival" means "passed the capture point",
in capture order.
"""

from __future__ import annotations

import ipaddress
import mmap
import struct
from array import array
from dataclasses import dataclass, fields
from pathlib import Path
from typing import NamedTuple

import numpy as np

from testbed.errors import TestbedError

# TCP flag bits (RFC 9293 section 3.1)
FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10

_MAGIC_US, _MAGIC_NS = 0xA1B2C3D4, 0xA1B23C4D
_MAGIC_PCAPNG = 0x0A0D0D0A
_LINKTYPE_ETHERNET = 1
_ETHERTYPE_IPV4, _ETHERTYPES_VLAN = 0x0800, (0x8100, 0x88A8)
_IPPROTO_TCP = 6
_TCPOPT_EOL, _TCPOPT_NOP, _TCPOPT_SACK, _TCPOPT_TIMESTAMP = 0, 1, 5, 8
_GLOBAL_HEADER, _RECORD_HEADER = 24, 16
#: a record longer than this is not a record: the file is damaged (tcpdump's own limit is 256 KiB)
_MAX_RECORD = 1 << 20


class PcapError(TestbedError):
    """A file is not a classic pcap, is damaged, or holds no flow of the sender asked for."""


@dataclass(frozen=True)
class Packets:
    """IPv4/TCP packets of a capture, one row per packet, in capture order.

    Arrays (all the same length): ``t_s`` capture time in seconds as written by the
    capturing kernel (CLOCK_REALTIME; float64, so about 0.24 us resolution at today's
    epoch); ``src``/``dst`` IPv4 addresses (uint32, host order); ``sport``/``dport``
    (uint16); ``seq``/``ack`` raw 32-bit numbers (uint32); ``flags`` TCP flag byte (uint8);
    ``win`` advertised window, raw and unscaled (uint16); ``payload`` TCP payload bytes
    (int32, from the IP total length); ``sack_edges`` the highest right edge of the
    packet's SACK blocks (uint32, 0 when none; "highest" in sequence-number order
    around the packet's own ack number, i.e. the furthest above it within +-2^31, so a
    D-SACK block below the ack loses to any other block); ``sack_blocks`` number of SACK
    blocks (uint8); ``tsval``/``tsecr`` the TCP timestamps option's values (RFC 7323;
    uint32, both 0 when the packet has none).

    ``skipped`` counts the frames that are not such packets, by reason (``not_ipv4``,
    ``not_tcp``, ``fragment``, ``short`` = captured too little for the IP and TCP headers,
    ``malformed`` = header lengths inconsistent). ``truncated`` is True when the last
    record was cut (a capture killed while writing); all complete records were read.
    """

    t_s: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    sport: np.ndarray
    dport: np.ndarray
    seq: np.ndarray
    ack: np.ndarray
    flags: np.ndarray
    win: np.ndarray
    payload: np.ndarray
    sack_edges: np.ndarray
    sack_blocks: np.ndarray
    tsval: np.ndarray
    tsecr: np.ndarray
    skipped: dict[str, int]
    truncated: bool = False

    def __len__(self) -> int:
        return len(self.t_s)

    def select(self, rows: np.ndarray) -> Packets:
        """The packets at ``rows`` (boolean mask or indices); counts and flags kept."""
        arrays = {f.name: getattr(self, f.name)[rows] for f in fields(self) if f.name not in ("skipped", "truncated")}
        return Packets(**arrays, skipped=dict(self.skipped), truncated=self.truncated)


def read(path: Path | str) -> Packets:
    """Read every IPv4/TCP packet of the classic pcap file ``path``.

    Raises PcapError (naming the path and the reason) when the file is missing, shorter
    than the pcap header, not a classic pcap (pcapng included), not Ethernet, or has a
    record whose length field is impossible. A cut last record is not an error
    (``truncated=True``).
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            if size < _GLOBAL_HEADER:
                raise PcapError(f"{path}: not a pcap file: {size} bytes, shorter than the 24-byte pcap header")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                return _read_buffer(path, mm, size)
    except OSError as exc:
        raise PcapError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _read_buffer(path: Path, buf: mmap.mmap, size: int) -> Packets:
    """:func:`read` on the mapped file ``buf`` of ``size`` bytes."""
    order, nanosecond = _byte_order(path, buf)
    linktype = struct.unpack_from(order + "I", buf, 20)[0]
    if linktype != _LINKTYPE_ETHERNET:
        raise PcapError(f"{path}: link type {linktype} is not Ethernet (1); capture with tcpdump -i IF, not -i any")
    offsets, truncated = _record_offsets(path, buf, size, order)
    view = _Bytes(buf, size, order)
    try:
        return _decode(view, offsets, nanosecond, truncated)
    finally:
        del view  # the mapping can only close once no array views it


def _byte_order(path: Path, buf: mmap.mmap) -> tuple[str, bool]:
    """(struct byte order of the headers, timestamps in nanoseconds) from the magic number."""
    magic = struct.unpack_from("<I", buf, 0)[0]
    for order in ("<", ">"):
        value = struct.unpack_from(order + "I", buf, 0)[0]
        if value in (_MAGIC_US, _MAGIC_NS):
            return order, value == _MAGIC_NS
    if magic == _MAGIC_PCAPNG:
        raise PcapError(f"{path}: pcapng, not classic pcap; convert with editcap -F pcap")
    raise PcapError(f"{path}: not a pcap file: magic number 0x{magic:08x}")


def _record_offsets(path: Path, buf: mmap.mmap, size: int, order: str) -> tuple[np.ndarray, bool]:
    """File offsets of the complete records, and whether a cut record follows them.

    Raises PcapError when a record claims more than 1 MiB (the file is damaged there).
    """
    caplen_at = struct.Struct(order + "I").unpack_from
    offsets = array("q")  # 8 bytes per record, not a Python int each
    append = offsets.append
    off, last = _GLOBAL_HEADER, size - _RECORD_HEADER
    while off <= last:
        caplen = caplen_at(buf, off + 8)[0]
        if caplen > _MAX_RECORD:
            raise PcapError(f"{path}: damaged: the record at byte {off} claims {caplen} captured bytes")
        nxt = off + _RECORD_HEADER + caplen
        if nxt > size:
            break
        append(off)
        off = nxt
    return np.frombuffer(offsets, dtype=np.int64).copy(), off != size


class _Bytes:
    """A file's bytes, read at arrays of byte offsets: ``u8``, and the 16- and 32-bit values
    starting there in network order (``be16``, ``be32``) or in the pcap headers' order
    (``rec32``). Each returns a native-order copy; the wide ones read through unaligned
    views with a 1-byte stride, so one fancy index reads one field of every packet."""

    def __init__(self, buf: mmap.mmap, size: int, order: str) -> None:
        self._u8 = np.frombuffer(buf, dtype=np.uint8)
        self._be16 = np.ndarray(shape=(size - 1,), dtype=">u2", buffer=buf, strides=(1,))
        self._be32 = np.ndarray(shape=(size - 3,), dtype=">u4", buffer=buf, strides=(1,))
        self._rec32 = np.ndarray(shape=(size - 3,), dtype=order + "u4", buffer=buf, strides=(1,))

    def u8(self, at: np.ndarray) -> np.ndarray:
        """The bytes at offsets ``at`` (uint8)."""
        return self._u8[at]

    def be16(self, at: np.ndarray) -> np.ndarray:
        """The big-endian 16-bit values starting at offsets ``at`` (uint16)."""
        return self._be16[at].astype(np.uint16)

    def be32(self, at: np.ndarray) -> np.ndarray:
        """The big-endian 32-bit values starting at offsets ``at`` (uint32)."""
        return self._be32[at].astype(np.uint32)

    def rec32(self, at: np.ndarray) -> np.ndarray:
        """The 32-bit values in the pcap headers' byte order starting at offsets ``at`` (uint32)."""
        return self._rec32[at].astype(np.uint32)


def _decode(b: _Bytes, offsets: np.ndarray, nanosecond: bool, truncated: bool) -> Packets:
    """The IPv4/TCP rows of the records at ``offsets`` of the file ``b``."""
    ts_sec = b.rec32(offsets).astype(np.float64)
    ts_frac = b.rec32(offsets + 4).astype(np.float64)
    caplen = b.rec32(offsets + 8).astype(np.int64)
    wirelen = b.rec32(offsets + 12).astype(np.int64)
    frame = offsets + _RECORD_HEADER
    skipped = {"not_ipv4": 0, "not_tcp": 0, "fragment": 0, "short": 0, "malformed": 0}

    # Ethernet, with at most one VLAN tag
    ok = caplen >= 14
    skipped["short"] += int(np.count_nonzero(~ok))
    ethertype = np.zeros(len(frame), np.uint16)
    ethertype[ok] = b.be16(frame[ok] + 12)
    l3 = frame + 14
    vlan = ok & np.isin(ethertype, _ETHERTYPES_VLAN) & (caplen >= 18)
    ethertype[vlan] = b.be16(frame[vlan] + 16)
    l3[vlan] += 4
    keep = ok & (ethertype == _ETHERTYPE_IPV4)
    skipped["not_ipv4"] += int(np.count_nonzero(ok & ~keep))
    end = frame + caplen  # first byte past the captured frame

    def drop(bad: np.ndarray, reason: str) -> None:
        nonlocal keep
        skipped[reason] += int(np.count_nonzero(keep & bad))
        keep = keep & ~bad

    drop(l3 + 20 > end, "short")
    rows = np.flatnonzero(keep)
    l3, end, wirelen, frame = l3[rows], end[rows], wirelen[rows], frame[rows]
    ts_sec, ts_frac = ts_sec[rows], ts_frac[rows]
    keep = np.ones(len(rows), bool)
    vihl = b.u8(l3)
    drop((vihl >> 4) != 4, "not_ipv4")
    ihl = (vihl & 0x0F).astype(np.int64) * 4
    drop(ihl < 20, "malformed")
    drop(b.u8(l3 + 9) != _IPPROTO_TCP, "not_tcp")
    drop((b.be16(l3 + 6) & 0x1FFF) != 0, "fragment")
    l4 = l3 + ihl
    drop(l4 + 20 > end, "short")

    rows = np.flatnonzero(keep)
    l3, l4, ihl, end, wirelen, frame = l3[rows], l4[rows], ihl[rows], end[rows], wirelen[rows], frame[rows]
    ts_sec, ts_frac = ts_sec[rows], ts_frac[rows]
    keep = np.ones(len(rows), bool)
    doff = (b.u8(l4 + 12) >> 4).astype(np.int64) * 4
    total = b.be16(l3 + 2).astype(np.int64)
    # IPv4 BIG TCP (GSO packets over 64 KiB) writes total length 0: the wire length tells it then
    total = np.where(total == 0, wirelen - (l3 - frame), total)
    payload = total - ihl - doff
    drop((doff < 20) | (payload < 0), "malformed")

    rows = np.flatnonzero(keep)
    l3, l4, doff, end, payload = l3[rows], l4[rows], doff[rows], end[rows], payload[rows]
    ack = b.be32(l4 + 8)
    sack_edges, sack_blocks, tsval, tsecr = _options(b, l4 + 20, np.minimum(l4 + doff, end), ack)
    return Packets(
        t_s=ts_sec[rows] + ts_frac[rows] * (1e-9 if nanosecond else 1e-6),
        src=b.be32(l3 + 12),
        dst=b.be32(l3 + 16),
        sport=b.be16(l4),
        dport=b.be16(l4 + 2),
        seq=b.be32(l4 + 4),
        ack=ack,
        flags=b.u8(l4 + 13),
        win=b.be16(l4 + 14),
        payload=payload.astype(np.int32),
        sack_edges=sack_edges,
        sack_blocks=sack_blocks,
        tsval=tsval,
        tsecr=tsecr,
        skipped=skipped,
        truncated=truncated,
    )


def _options(b: _Bytes, start: np.ndarray, stop: np.ndarray,
             ack: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(highest SACK right edge, number of SACK blocks, TSval, TSecr) per packet whose
    options lie in [start, stop) (timestamps 0 without the option).

    The options of all packets are walked together, one option per step; a packet leaves
    the walk at End of Option List, at its end, or at an option that does not fit.
    """
    n = len(start)
    best = np.zeros(n, np.uint32)
    best_dist = np.full(n, -(1 << 40), np.int64)  # distance of ``best`` above the packet's ack (signed)
    blocks = np.zeros(n, np.uint8)
    tsval, tsecr = np.zeros(n, np.uint32), np.zeros(n, np.uint32)
    live = np.flatnonzero(start < stop)
    pos = start[live]
    while len(live):
        kind = b.u8(pos)
        nop = kind == _TCPOPT_NOP
        has_len = ~nop & (kind != _TCPOPT_EOL) & (pos + 1 < stop[live])
        length = np.zeros(len(live), np.int64)
        length[has_len] = b.u8(pos[has_len] + 1)
        fits = has_len & (length >= 2) & (pos + length <= stop[live])
        sack = np.flatnonzero(fits & (kind == _TCPOPT_SACK))
        if len(sack):
            nblk = (length[sack] - 2) // 8
            who = live[sack]
            blocks[who] += nblk.astype(np.uint8)
            for blk in range(int(nblk.max())):
                has = nblk > blk
                rows = who[has]
                edge = b.be32(pos[sack][has] + 2 + 8 * blk + 4)
                dist = _signed32(edge.astype(np.int64) - ack[rows])
                better = dist > best_dist[rows]
                best[rows[better]], best_dist[rows[better]] = edge[better], dist[better]
        ts = np.flatnonzero(fits & (kind == _TCPOPT_TIMESTAMP) & (length == 10))
        if len(ts):
            tsval[live[ts]], tsecr[live[ts]] = b.be32(pos[ts] + 2), b.be32(pos[ts] + 6)
        step = np.where(nop, 1, length)
        go = nop | fits
        live, pos = live[go], pos[go] + step[go]
        more = pos < stop[live]
        live, pos = live[more], pos[more]
    return best, blocks, tsval, tsecr


# ---------------------------------------------------------------- one flow


@dataclass(frozen=True)
class FlowTrace:
    """One connection seen from a capture point, split by direction.

    ``data``: packets from the sender to the receiver; ``acks``: packets from the receiver
    to the sender; ``data_row``/``ack_row``: their row numbers in the capture (capture
    order across both directions). Sequence space is relative to ``base`` (raw uint32: the
    sender's ISN + 1 when its SYN is in the capture, else the sequence number of its first
    data segment) and unwrapped to int64: ``seq`` per data packet, ``ack`` per ACK-direction
    packet (a packet without the ACK flag carries the previous one's value), ``sack_high``
    per ACK-direction packet = max(ack, highest SACK right edge) -- the top of what the
    receiver reports holding. ``mss``: the largest payload of the data direction (bytes).
    """

    sender: tuple[str, int]
    receiver: tuple[str, int]
    base: int
    data: Packets
    acks: Packets
    data_row: np.ndarray
    ack_row: np.ndarray
    seq: np.ndarray
    ack: np.ndarray
    sack_high: np.ndarray
    mss: int

    @property
    def end(self) -> np.ndarray:
        """Relative sequence number after each data packet's payload (int64)."""
        return self.seq + self.data.payload


def flow(packets: Packets, sender: tuple[str, int], receiver: tuple[str, int] | None = None) -> FlowTrace:
    """The connection from ``sender`` (IPv4 address, port) to its peer, as a :class:`FlowTrace`.

    ``receiver`` (address, port) chooses the peer when the sender talks to several.
    Raises PcapError when the capture holds no packet from the sender (to the receiver), or
    when the sender talks to several peers and no receiver is given.
    """
    s_ip, s_port = int(ipaddress.IPv4Address(sender[0])), sender[1]
    from_sender = (packets.src == s_ip) & (packets.sport == s_port)
    if receiver is not None:
        r_ip, r_port = int(ipaddress.IPv4Address(receiver[0])), receiver[1]
        from_sender &= (packets.dst == r_ip) & (packets.dport == r_port)
    rows = np.flatnonzero(from_sender)
    if not len(rows):
        to = f" to {receiver[0]}:{receiver[1]}" if receiver else ""
        raise PcapError(f"no packet from {sender[0]}:{s_port}{to}")
    peers = set(zip(packets.dst[rows].tolist(), packets.dport[rows].tolist()))
    if len(peers) > 1:
        names = ", ".join(f"{ipaddress.IPv4Address(a)}:{p}" for a, p in sorted(peers))
        raise PcapError(f"{sender[0]}:{s_port} talks to several peers ({names}); name the receiver")
    r_ip, r_port = peers.pop()
    ack_rows = np.flatnonzero((packets.src == r_ip) & (packets.sport == r_port)
                              & (packets.dst == s_ip) & (packets.dport == s_port))
    data, acks = packets.select(rows), packets.select(ack_rows)

    syn = np.flatnonzero(data.flags & SYN)
    with_payload = np.flatnonzero(data.payload > 0)
    if len(syn):
        base = (int(data.seq[syn[0]]) + 1) % (1 << 32)
    else:
        base = int(data.seq[with_payload[0] if len(with_payload) else 0])
    seq = _unwrap(data.seq, base)
    has_ack = (acks.flags & ACK) != 0
    filled = np.maximum.accumulate(np.where(has_ack, np.arange(len(acks)), -1)) if len(acks) else np.zeros(0, int)
    raw_ack = np.where(filled >= 0, acks.ack[np.maximum(filled, 0)], np.uint32(base)).astype(np.uint32)
    ack = _unwrap(raw_ack, base)
    above = _signed32(acks.sack_edges.astype(np.int64) - raw_ack)
    sack_high = np.where(acks.sack_blocks > 0, ack + np.maximum(above, 0), ack)
    return FlowTrace(
        sender=(str(ipaddress.IPv4Address(s_ip)), s_port),
        receiver=(str(ipaddress.IPv4Address(r_ip)), int(r_port)),
        base=base, data=data, acks=acks, data_row=rows, ack_row=ack_rows,
        seq=seq, ack=ack, sack_high=sack_high,
        mss=int(data.payload.max()) if len(data) else 0,
    )


def _signed32(diff: np.ndarray) -> np.ndarray:
    """Differences of 32-bit sequence numbers as int64 in [-2^31, 2^31) (serial-number arithmetic)."""
    return ((diff + (1 << 31)) % (1 << 32)) - (1 << 31)


def _unwrap(values: np.ndarray, base: int) -> np.ndarray:
    """32-bit sequence numbers as int64 relative to ``base``, unwrapped along the array.

    Consecutive values are taken to differ by less than 2^31 (as TCP requires); the first
    value is placed within +-2^31 of ``base``.
    """
    if not len(values):
        return np.zeros(0, np.int64)
    rel = values.astype(np.int64) - base
    return _signed32(rel[0]) + np.concatenate(([0], np.cumsum(_signed32(np.diff(rel)))))


# ---------------------------------------------------------------- counts


#: "nothing yet" for running maxima of sequence numbers
_NONE = np.iinfo(np.int64).min


def _before(values: np.ndarray) -> np.ndarray:
    """Per position, the maximum of the values strictly before it (:data:`_NONE` at position 0)."""
    out = np.full(len(values), _NONE, np.int64)
    if len(values) > 1:
        out[1:] = np.maximum.accumulate(values[:-1])
    return out


def _front(trace: FlowTrace) -> np.ndarray:
    """Per data packet, the highest seq + payload of the data segments (payload > 0) captured before it."""
    return _before(np.where(trace.data.payload > 0, trace.end, _NONE))


def dupacks(trace: FlowTrace, strict_window: bool = True) -> np.ndarray:
    """Capture times (s) of the duplicate ACKs of the ACK direction, RFC 5681 section 2.

    An ACK-direction packet with the ACK flag (and not RST) is a duplicate when
    (a) the sender has outstanding data: the highest sequence number the data direction
        has shown so far in the capture (seq + payload + SYN + FIN over the data packets
        captured before it) is above its ack;
    (b) it carries no data;
    (c) SYN and FIN are both off;
    (d) its ack equals the greatest ack of the earlier ACK-direction packets;
    (e) its advertised window equals the previous ACK-direction packet's (raw value; the
        scale is fixed per connection) -- only with ``strict_window``. A Linux receiver
        changes its window while it holds out-of-order data, so E4 reports both.
    The first ACK of the capture is never a duplicate (nothing before it).
    """
    acks = trace.acks
    if not len(acks):
        return np.zeros(0, np.float64)
    flags = trace.data.flags
    seg_top = trace.end + ((flags & SYN) != 0) + ((flags & FIN) != 0)
    shown = _before(np.append(seg_top, _NONE))  # shown[k]: highest over the first k data packets
    data_before = np.searchsorted(trace.data_row, trace.ack_row)  # data packets captured before each ACK
    outstanding = shown[data_before] > trace.ack
    is_ack = ((acks.flags & ACK) != 0) & ((acks.flags & RST) == 0)
    greatest = _before(np.where(is_ack, trace.ack, _NONE))
    dup = (is_ack & outstanding & (acks.payload == 0) & ((acks.flags & (SYN | FIN)) == 0)
           & (trace.ack == greatest))
    if strict_window:
        prev_win = np.full(len(acks), -1, np.int64)
        prev_win[1:] = acks.win[:-1]
        dup &= acks.win == prev_win
    return acks.t_s[dup]


class LateSegments(NamedTuple):
    """The data segments that passed the capture point behind the front (see :func:`late_segments`).

    Per segment: ``t_s`` capture time (s); ``seq`` and ``end`` relative sequence numbers
    (int64); ``front`` the highest ``end`` captured before it (int64); ``copy`` True when
    the same (seq, payload) was already captured: a retransmission seen twice.
    """

    t_s: np.ndarray
    seq: np.ndarray
    end: np.ndarray
    front: np.ndarray
    copy: np.ndarray


def late_segments(trace: FlowTrace) -> LateSegments:
    """Data segments (payload > 0) captured with seq below the highest seq + payload captured before them.

    Such a segment is late or retransmitted. What one capture point can tell:
    * ``copy`` True: the exact (seq, payload) passed before, so this one is a
      retransmission (or a network duplicate) -- certain.
    * ``copy`` False: either an original that was overtaken (reordering, as after E4's
      move) or a retransmission of a segment lost upstream of the capture point, or one
      repacketized with other boundaries; the capture alone cannot tell these apart.
      (Only the sender's view -- its retransmission counters or a capture at the
      sender -- or a per-segment stamp such as the IP ID or the TCP timestamp, if the
      sender sets them so, could.)
    A segment that straddles the front (seq < front < end) is counted too.
    """
    data = trace.data
    seg = np.flatnonzero(data.payload > 0)
    seq, end, front = trace.seq[seg], trace.end[seg], _front(trace)[seg]
    late = seq < front
    copy = np.zeros(len(seg), bool)
    if len(seg):
        order = np.lexsort((np.arange(len(seg)), data.payload[seg], seq))
        same = (np.diff(seq[order]) == 0) & (np.diff(data.payload[seg][order]) == 0)
        copy[order[1:][same]] = True
    return LateSegments(t_s=data.t_s[seg][late], seq=seq[late], end=end[late], front=front[late], copy=copy[late])


def out_of_order(trace: FlowTrace) -> np.ndarray:
    """Capture times (s) of the late or retransmitted data segments (:func:`late_segments`)."""
    return late_segments(trace).t_s


class ReorderExtent(NamedTuple):
    """How far behind each late segment arrived (see :func:`reorder_extent`)."""

    t_s: np.ndarray
    bytes: np.ndarray
    segments: np.ndarray
    max_bytes: int
    max_segments: float


def reorder_extent(trace: FlowTrace) -> ReorderExtent:
    """For each late segment (:func:`late_segments`), the sequence space captured ahead of it.

    ``bytes`` = front - end: how many bytes above the segment's end had already passed
    (0 for a segment straddling the front); ``segments`` = bytes / MSS (float), MSS being
    the largest payload of the flow, so segment 11 arriving after full-size segments 12, 13
    and 14 is 3 segments behind (the byte analogue of RFC 4737's reordering extent).
    ``max_bytes``/``max_segments``: their maxima (0 when nothing was late).
    """
    late = late_segments(trace)
    behind = np.maximum(late.front - late.end, 0)
    segments = behind / trace.mss if trace.mss else np.zeros(len(behind))
    return ReorderExtent(
        t_s=late.t_s, bytes=behind, segments=segments,
        max_bytes=int(behind.max()) if len(behind) else 0,
        max_segments=float(segments.max()) if len(segments) else 0.0,
    )


class Series(NamedTuple):
    """Data-direction bytes per time bin (see :func:`series`)."""

    start_s: np.ndarray
    bytes: np.ndarray
    new_bytes: np.ndarray


def series(trace: FlowTrace, bin_s: float, t_ref: float, start_s: float, end_s: float) -> Series:
    """Payload bytes of the data direction captured per bin of ``bin_s`` seconds.

    Bins cover [t_ref + start_s, t_ref + end_s) (the last one may end after end_s);
    ``start_s`` holds each bin's start relative to ``t_ref`` (s). ``bytes``: all payload
    bytes captured in the bin (retransmissions and copies included); ``new_bytes``: the
    bytes above the highest seq + payload captured before each segment (goodput at the
    capture point: bytes filling a hole below that front count when the front passed, not
    when the hole was filled). Raises ValueError when bin_s <= 0 or end_s <= start_s.
    """
    if not bin_s > 0 or not end_s > start_s:
        raise ValueError(f"series needs bin_s > 0 and end_s > start_s (got bin_s={bin_s}, {start_s}..{end_s})")
    n = int(np.ceil((end_s - start_s) / bin_s - 1e-9))
    data = trace.data
    fresh = np.clip(trace.end - np.maximum(_front(trace), trace.seq), 0, data.payload)
    k = np.floor((data.t_s - t_ref - start_s) / bin_s)
    inside = (k >= 0) & (k < n)
    k = k[inside].astype(np.int64)
    return Series(
        start_s=start_s + np.arange(n) * bin_s,
        bytes=np.bincount(k, weights=data.payload[inside], minlength=n).astype(np.int64),
        new_bytes=np.bincount(k, weights=fresh[inside], minlength=n).astype(np.int64),
    )
