"""Raw agent records -> paper units: TCP_INFO decoding, dilation, series."""

import socket
import struct

import pytest

from testbed.dilation import TimeDilation
from testbed.traffic import tcpinfo
from testbed.traffic.records import flow_record, merge_bins, read_jsonl, series_from_bins


def test_decode_reads_fields_at_kernel_offsets():
    raw = bytearray(tcpinfo.TCP_INFO_LEN)
    raw[0] = 1  # TCP_ESTABLISHED
    struct.pack_into("=I", raw, 8, 204000)     # rto
    struct.pack_into("=I", raw, 68, 1500)      # rtt
    struct.pack_into("=I", raw, 80, 42)        # snd_cwnd
    struct.pack_into("=I", raw, 100, 7)        # total_retrans
    struct.pack_into("=Q", raw, 208, 10220)    # bytes_retrans
    d = tcpinfo.decode(bytes(raw))
    assert (d["state"], d["rto_us"], d["rtt_us"], d["snd_cwnd"], d["total_retrans"], d["bytes_retrans"]) == \
        (1, 204000, 1500, 42, 7, 10220)
    short = tcpinfo.decode(bytes(raw[:104]))  # an older kernel returns fewer bytes
    assert "total_retrans" in short and "bytes_retrans" not in short


def test_read_on_a_real_socket():
    a, b = socket.socketpair()  # AF_UNIX: the kernel refuses TCP_INFO -> {}
    assert tcpinfo.read(a) == {}
    a.close(), b.close()
    srv = socket.create_server(("127.0.0.1", 0))
    c = socket.create_connection(srv.getsockname())
    info = tcpinfo.read(c)
    assert info["state"] == 1 and info["snd_cwnd"] >= 1 and info["snd_mss"] > 0
    c.close(), srv.close()


def sender(**kw):
    rec = {"id": 3, "src": "h1", "dst": "h2", "size": 1_000_000, "sent": 1_000_000, "cca": "cubic", "tag": "",
           "sched_start": 1.0, "start": 1.2, "connected": 1.3, "end": 3.2, "status": "complete", "reason": "",
           "tcp_info": {"rtt_us": 20000, "rto_us": 220000, "snd_cwnd": 10, "snd_ssthresh": 2147483647,
                        "total_retrans": 2, "bytes_retrans": 2896}}
    rec.update(kw)
    return rec


def test_flow_record_converts_to_paper_units():
    D = TimeDilation(10)
    sink = {"id": 3, "got": 1_000_000, "first": 1.4, "last": 3.0}
    f = flow_record(sender(), sink, D)
    assert f.start_s == pytest.approx(0.12) and f.end_s == pytest.approx(0.32)
    assert f.fct_s == pytest.approx(0.2)
    assert f.goodput_bps == pytest.approx(8e6 / 0.2)        # = 8 Mbit / 2 s (emulation) x 10
    assert f.srtt_s == pytest.approx(0.002) and f.rto_s == pytest.approx(0.022)
    assert f.ssthresh_segs is None and f.cwnd_segs == 10 and f.retrans_segs == 2
    assert f.first_byte_s == pytest.approx(0.14) and f.sink_bytes == 1_000_000


def test_incomplete_and_long_lived_records():
    D = TimeDilation(1)
    f = flow_record(sender(status="incomplete", end=None, sent=5000, reason="running"), None, D)
    assert f.fct_s is None and f.goodput_bps is None and f.end_s is None and f.sink_bytes is None
    long = flow_record(sender(size=None, sent=123456), {"id": 3, "got": 123456, "first": 1, "last": 2}, D)
    assert long.size_bytes == 123456


def test_series_fills_gaps_and_converts():
    D = TimeDilation(2)
    rows = series_from_bins({"0": 1000, "2": 3000}, 0.5, D, until_emu=2.0)
    assert [r["t_s"] for r in rows] == [0.0, 0.25, 0.5, 0.75]
    assert [r["bytes"] for r in rows] == [1000, 0, 3000, 0]
    assert rows[0]["throughput_bps"] == pytest.approx(8 * 1000 / 0.5 * 2)
    assert merge_bins([{"0": 1}, {"0": 2, "1": 5}]) == {"0": 3, "1": 5}


def test_read_jsonl_skips_a_torn_last_line(tmp_path):
    p = tmp_path / "f.jsonl"
    p.write_text('{"a": 1}\n{"a": 2}\n{"a": ')
    assert read_jsonl(p) == [{"a": 1}, {"a": 2}]
    assert read_jsonl(tmp_path / "missing.jsonl") == []
