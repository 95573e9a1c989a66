"""testbed.pcaptcp on small captures written here, byte by byte, with their answers known by construction.

The scenario (:func:`reordering_exchange`): sender 10.0.0.1:40000 -> receiver
10.0.0.2:5201, full-size segments of 1000 bytes; segment k holds relative bytes
[1000 (k-1), 1000 k). Handshake, segments 1..10 in order, then 12, 13, 14 before 11
(the receiver sends three duplicate ACKs with SACK blocks, the third with a smaller
window), then a spurious copy of segment 5 (its ACK repeats ack 14000 with a D-SACK block
but nothing is outstanding, so it is no duplicate ACK), then segment 15. Every ACK
follows its data segment by 0.1 ms; data segment j (0-based, after the handshake) passes
at T0 + j ms + 0.5 ms.
"""

from __future__ import annotations

import ipaddress
import struct
from pathlib import Path

import numpy as np
import pytest

from testbed import pcaptcp
from testbed import errors

T0_NS = 1_700_000_000 * 10**9
T0 = T0_NS / 1e9
SND, RCV = ("10.0.0.1", 40000), ("10.0.0.2", 5201)
MSS = 1000
F_FIN, F_SYN, F_RST, F_PSH, F_ACK = 0x01, 0x02, 0x04, 0x08, 0x10


# ------------------------------------------------------------ a tiny independent writer


def ip4(addr: str) -> bytes:
    return ipaddress.IPv4Address(addr).packed


def tcp_frame(src: tuple[str, int], dst: tuple[str, int], seq: int, ack: int, flags: int, win: int,
              payload: int, sack: tuple[tuple[int, int], ...] = (), vlan: bool = False,
              total_len: int | None = None) -> bytes:
    """Ethernet + IPv4 + TCP (timestamps option, optional SACK) + ``payload`` zero bytes."""
    opts = b"\x01\x01\x08\x0a" + struct.pack(">II", 12345, 678)
    if sack:
        opts += b"\x01\x01\x05" + bytes([2 + 8 * len(sack)])
        opts += b"".join(struct.pack(">II", left % 2**32, right % 2**32) for left, right in sack)
    tcp = struct.pack(">HHIIBBHHH", src[1], dst[1], seq % 2**32, ack % 2**32, (20 + len(opts)) // 4 << 4,
                      flags, win, 0, 0) + opts
    assert len(tcp) % 4 == 0
    length = 20 + len(tcp) + payload if total_len is None else total_len
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, length, 1, 0x4000, 64, 6, 0, ip4(src[0]), ip4(dst[0]))
    eth = b"\x02" * 6 + b"\x04" * 6 + (b"\x81\x00\x00\x07" if vlan else b"") + b"\x08\x00"
    return eth + ip + tcp + bytes(payload)


def pcap_bytes(records: list[tuple[int, bytes]], order: str = "<", nanosecond: bool = False,
               snaplen: int = 128, linktype: int = 1) -> bytes:
    """A classic pcap of (time ns, frame) records, frames cut to ``snaplen`` as tcpdump -s does."""
    magic = 0xA1B23C4D if nanosecond else 0xA1B2C3D4
    out = [struct.pack(order + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype)]
    for t_ns, frame in records:
        sec, ns = divmod(t_ns, 10**9)
        cut = frame[:snaplen]
        out.append(struct.pack(order + "IIII", sec, ns if nanosecond else ns // 1000, len(cut), len(frame)) + cut)
    return b"".join(out)


def write(tmp_path: Path, records: list[tuple[int, bytes]], **kw: object) -> Path:
    path = tmp_path / "cap.pcap"
    path.write_bytes(pcap_bytes(records, **kw))  # type: ignore[arg-type]
    return path


# ------------------------------------------------------------ the scenario


def ms(x: float) -> int:
    """T0 + x milliseconds, in ns."""
    return T0_NS + round(x * 1_000_000)


def reordering_exchange(isn: int) -> list[tuple[int, bytes]]:
    """The capture of the module docstring's scenario; relative byte r is raw isn + 1 + r."""
    def data(t: float, k: int) -> tuple[int, bytes]:
        return ms(t), tcp_frame(SND, RCV, isn + 1 + MSS * (k - 1), 1, F_ACK | F_PSH, 1000, MSS)

    def ack(t: float, rel: int, win: int = 500, sack: tuple[tuple[int, int], ...] = ()) -> tuple[int, bytes]:
        blocks = tuple((isn + 1 + a, isn + 1 + b) for a, b in sack)
        return ms(t), tcp_frame(RCV, SND, 0, isn + 1 + rel, F_ACK, win, 0, blocks)

    recs = [
        (ms(-3), tcp_frame(SND, RCV, isn, 0, F_SYN, 64240, 0)),
        (ms(-2), tcp_frame(RCV, SND, 0, isn + 1, F_SYN | F_ACK, 65160, 0)),
        (ms(-1), tcp_frame(SND, RCV, isn + 1, 1, F_ACK, 1000, 0)),
    ]
    arrival = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13, 14, 11, 5, 15]
    acks = {12: ack(0, 10000, 500, ((11000, 12000),)), 13: ack(0, 10000, 500, ((11000, 13000),)),
            14: ack(0, 10000, 400, ((11000, 14000),)), 11: ack(0, 14000, 400)}
    for j, k in enumerate(arrival):
        t = j + 0.5
        recs.append(data(t, k))
        if j == 14:  # the copy of segment 5: D-SACK block below the ack
            a = ack(t + 0.1, 14000, 400, ((4000, 5000),))
        elif k in acks:
            a = acks[k]
            a = (ms(t + 0.1), a[1])
        else:
            a = ack(t + 0.1, 1000 * k, 500 if k <= 10 else 400)
        recs.append(a)
    return recs


ISNS = [1000, 2**32 - 3500, 2**32 - 1]  # the second wraps inside segment 4, the third right after the SYN


@pytest.fixture(params=ISNS, ids=["isn-1000", "isn-wraps", "isn-wraps-at-syn"])
def trace(request: pytest.FixtureRequest, tmp_path: Path) -> pcaptcp.FlowTrace:
    return pcaptcp.flow(pcaptcp.read(write(tmp_path, reordering_exchange(request.param))), SND)


def times_ms(t_s: np.ndarray) -> list[float]:
    return [round((t - T0) * 1000, 3) for t in t_s]


# ------------------------------------------------------------ read()


@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("nanosecond", [False, True])
def test_read_fields_any_byte_order_and_resolution(tmp_path: Path, order: str, nanosecond: bool) -> None:
    recs = [(T0_NS + 123_456_789, tcp_frame(SND, RCV, 7, 9, F_ACK | F_PSH, 501, 1448)),
            (T0_NS + 223_456_000, tcp_frame(RCV, SND, 9, 1455, F_ACK, 502, 0, ((2000, 3000),)))]
    p = pcaptcp.read(write(tmp_path, recs, order=order, nanosecond=nanosecond))
    assert len(p) == 2 and not p.truncated
    frac = 0.123456789 if nanosecond else 0.123456
    assert p.t_s[0] == pytest.approx(T0 + frac, abs=5e-7)
    assert p.t_s[1] == pytest.approx(T0 + 0.223456, abs=5e-7)
    assert list(p.src) == [int(ipaddress.IPv4Address("10.0.0.1")), int(ipaddress.IPv4Address("10.0.0.2"))]
    assert list(p.dport) == [5201, 40000] and list(p.sport) == [40000, 5201]
    assert list(p.seq) == [7, 9] and list(p.ack) == [9, 1455]
    assert list(p.flags) == [F_ACK | F_PSH, F_ACK] and list(p.win) == [501, 502]
    assert list(p.payload) == [1448, 0]  # 1448 although only 128 bytes of the frame were captured
    assert list(p.sack_blocks) == [0, 1] and list(p.sack_edges) == [0, 3000]
    assert list(p.tsval) == [12345, 12345] and list(p.tsecr) == [678, 678]   # after the SACK walk too


def test_nanosecond_file_keeps_sub_microsecond_order(tmp_path: Path) -> None:
    recs = [(T0_NS + 5, tcp_frame(SND, RCV, 1, 1, F_ACK, 1, 0)), (T0_NS + 900, tcp_frame(SND, RCV, 1, 1, F_ACK, 1, 0))]
    p = pcaptcp.read(write(tmp_path, recs, nanosecond=True))
    assert 0 < p.t_s[1] - p.t_s[0] < 2e-6


def test_non_tcp_frames_are_skipped_and_counted(tmp_path: Path) -> None:
    arp = b"\xff" * 6 + b"\x04" * 6 + b"\x08\x06" + bytes(28)
    udp = bytearray(tcp_frame(SND, RCV, 1, 1, F_ACK, 1, 10))
    udp[14 + 9] = 17
    frag = bytearray(tcp_frame(SND, RCV, 1, 1, F_ACK, 1, 10))
    frag[14 + 6:14 + 8] = struct.pack(">H", 185)  # fragment offset 185*8: no TCP header here
    tcp = tcp_frame(SND, RCV, 42, 1, F_ACK, 1, 10, vlan=True)
    recs = [(T0_NS, arp), (T0_NS + 1000, bytes(udp)), (T0_NS + 2000, tcp), (T0_NS + 3000, bytes(frag))]
    p = pcaptcp.read(write(tmp_path, recs))
    assert len(p) == 1 and list(p.seq) == [42] and list(p.payload) == [10]
    assert p.skipped == {"not_ipv4": 1, "not_tcp": 1, "fragment": 1, "short": 0, "malformed": 0}


def test_snaplen_cutting_the_tcp_header_skips_as_short(tmp_path: Path) -> None:
    recs = [(T0_NS, tcp_frame(SND, RCV, 1, 1, F_ACK, 1, 100))]
    p = pcaptcp.read(write(tmp_path, recs, snaplen=14 + 20 + 10))
    assert len(p) == 0 and p.skipped["short"] == 1


def test_big_tcp_total_length_zero_takes_the_wire_length(tmp_path: Path) -> None:
    recs = [(T0_NS, tcp_frame(SND, RCV, 1, 1, F_ACK, 1, 70000, total_len=0))]
    assert list(pcaptcp.read(write(tmp_path, recs)).payload) == [70000]


def test_highest_sack_edge_is_the_furthest_above_the_ack(tmp_path: Path) -> None:
    # D-SACK block first (below the ack, but numerically largest), then a lower and a higher block
    blocks = ((2**32 - 100, 2**32 - 50), (20000, 21000), (30000, 31000))
    recs = [(T0_NS, tcp_frame(RCV, SND, 0, 10000, F_ACK, 1, 0, blocks))]
    p = pcaptcp.read(write(tmp_path, recs))
    assert list(p.sack_blocks) == [3] and list(p.sack_edges) == [31000]


def test_cut_last_record_reads_the_complete_ones(tmp_path: Path) -> None:
    recs = [(T0_NS + i * 1000, tcp_frame(SND, RCV, i, 1, F_ACK, 1, 100)) for i in range(3)]
    whole = pcap_bytes(recs)
    # cut inside the last record's data; a next record cut inside its 16-byte header
    for name, content, complete in (("data", whole[:-5], [0, 1]), ("header", whole + bytes(10), [0, 1, 2])):
        path = tmp_path / f"cut-{name}.pcap"
        path.write_bytes(content)
        p = pcaptcp.read(path)
        assert p.truncated and list(p.seq) == complete
    path = tmp_path / "whole.pcap"
    path.write_bytes(whole)
    assert not pcaptcp.read(path).truncated


@pytest.mark.parametrize("content, reason", [
    (b"", "shorter than the 24-byte pcap header"),
    (b"GIF89a" + bytes(40), "magic number"),
    (struct.pack("<I", 0x0A0D0D0A) + bytes(40), "pcapng"),
    (pcap_bytes([], linktype=113), "link type 113"),
    (pcap_bytes([]) + struct.pack("<IIII", 0, 0, 50_000_000, 60), "damaged"),
])
def test_not_a_usable_pcap_raises_with_path_and_reason(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "bad.pcap"
    path.write_bytes(content)
    with pytest.raises(pcaptcp.PcapError, match=reason) as err:
        pcaptcp.read(path)
    assert str(path) in str(err.value) and isinstance(err.value, errors.TestbedError)


def test_missing_file_raises(tmp_path: Path) -> None:
    with pytest.raises(pcaptcp.PcapError, match="cannot read"):
        pcaptcp.read(tmp_path / "nope.pcap")


def test_empty_capture_has_no_packets(tmp_path: Path) -> None:
    p = pcaptcp.read(write(tmp_path, []))
    assert len(p) == 0 and not p.truncated


# ------------------------------------------------------------ flow() and the counts


def test_flow_relative_unwrapped_numbers(trace: pcaptcp.FlowTrace) -> None:
    arrival = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13, 14, 11, 5, 15]
    assert trace.receiver == RCV and trace.mss == MSS
    assert list(trace.seq) == [-1, 0] + [MSS * (k - 1) for k in arrival]
    assert list(trace.ack) == ([0] + [1000 * k for k in range(1, 11)]
                               + [10000, 10000, 10000, 14000, 14000, 15000])
    assert list(trace.sack_high) == ([0] + [1000 * k for k in range(1, 11)]
                                     + [12000, 13000, 14000, 14000, 14000, 15000])


def test_dupacks_rfc5681_with_and_without_window_condition(trace: pcaptcp.FlowTrace) -> None:
    # after 12 and 13 (same window); after 14 the window drops 500 -> 400; the ACK of the copy
    # of 5 repeats ack 14000 with nothing outstanding
    assert times_ms(pcaptcp.dupacks(trace)) == [10.6, 11.6]
    assert times_ms(pcaptcp.dupacks(trace, strict_window=False)) == [10.6, 11.6, 12.6]


def test_out_of_order_and_retransmission_copy(trace: pcaptcp.FlowTrace) -> None:
    assert times_ms(pcaptcp.out_of_order(trace)) == [13.5, 14.5]
    late = pcaptcp.late_segments(trace)
    assert list(late.seq) == [10000, 4000] and list(late.front) == [14000, 14000]
    assert list(late.copy) == [False, True]


def test_reorder_extent(trace: pcaptcp.FlowTrace) -> None:
    ext = pcaptcp.reorder_extent(trace)
    assert list(ext.bytes) == [3000, 9000] and list(ext.segments) == [3.0, 9.0]
    assert ext.max_bytes == 9000 and ext.max_segments == 9.0


def test_series_all_and_new_bytes(trace: pcaptcp.FlowTrace) -> None:
    s = pcaptcp.series(trace, 0.005, T0, 0.0, 0.02)
    assert list(s.start_s) == pytest.approx([0.0, 0.005, 0.010, 0.015])
    assert list(s.bytes) == [5000, 5000, 5000, 1000]
    # 12, 13, 14 each raise the front by 1000; 11 and the copy of 5 are below it
    assert list(s.new_bytes) == [5000, 5000, 3000, 1000]
    shifted = pcaptcp.series(trace, 0.010, T0 + 0.010, -0.010, 0.010)
    assert list(shifted.start_s) == pytest.approx([-0.010, 0.0]) and list(shifted.bytes) == [10000, 6000]


def test_series_rejects_empty_range(trace: pcaptcp.FlowTrace) -> None:
    with pytest.raises(ValueError):
        pcaptcp.series(trace, 0.001, T0, 1.0, 1.0)


def test_flow_without_handshake_counts_from_first_data_segment(tmp_path: Path) -> None:
    recs = reordering_exchange(2**32 - 3500)[3:]
    t = pcaptcp.flow(pcaptcp.read(write(tmp_path, recs)), SND)
    assert t.base == (2**32 - 3499) and t.seq[0] == 0 and times_ms(pcaptcp.dupacks(t)) == [10.6, 11.6]


def test_flow_errors(tmp_path: Path) -> None:
    other = ("10.0.0.3", 5201)
    recs = [(T0_NS, tcp_frame(SND, RCV, 1, 1, F_ACK, 1, 10)), (T0_NS + 1, tcp_frame(SND, other, 1, 1, F_ACK, 1, 10))]
    p = pcaptcp.read(write(tmp_path, recs))
    with pytest.raises(pcaptcp.PcapError, match="several peers"):
        pcaptcp.flow(p, SND)
    assert pcaptcp.flow(p, SND, receiver=other).receiver == other
    with pytest.raises(pcaptcp.PcapError, match="no packet from 10.0.0.9:1"):
        pcaptcp.flow(p, ("10.0.0.9", 1))


def test_dupack_needs_no_data_no_syn_fin_and_outstanding_data(tmp_path: Path) -> None:
    # segments 1 and 2 outstanding, then five ACKs repeating ack 1000 with the same window:
    # plain (dup), carrying data (no), FIN (no), plain (dup), after segment 2 was acked (no: not the greatest)
    recs = [(ms(0), tcp_frame(SND, RCV, 1, 1, F_ACK, 1000, MSS)),
            (ms(1), tcp_frame(SND, RCV, 1001, 1, F_ACK, 1000, MSS)),
            (ms(2), tcp_frame(RCV, SND, 1, 1001, F_ACK, 500, 0)),
            (ms(3), tcp_frame(RCV, SND, 1, 1001, F_ACK, 500, 0)),
            (ms(4), tcp_frame(RCV, SND, 1, 1001, F_ACK | F_PSH, 500, 10)),
            (ms(5), tcp_frame(RCV, SND, 11, 1001, F_ACK | F_FIN, 500, 0)),
            (ms(6), tcp_frame(RCV, SND, 12, 1001, F_ACK, 500, 0)),
            (ms(7), tcp_frame(RCV, SND, 12, 2001, F_ACK, 500, 0)),
            (ms(8), tcp_frame(RCV, SND, 12, 1001, F_ACK, 500, 0))]
    t = pcaptcp.flow(pcaptcp.read(write(tmp_path, recs)), SND)
    assert t.base == 1 and times_ms(pcaptcp.dupacks(t)) == [3.0, 6.0]
