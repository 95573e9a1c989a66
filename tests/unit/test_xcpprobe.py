"""The XCP probe header (testbed/xcpprobe.py): its wire layout against hand-assembled
bytes, bounds, version and flag checks, the routers' lowering rule, and its Wireshark
dissector (testbed/optical/xcpprobe.lua): field offsets and types read from the Lua
text against the Python layout, and a tshark decode of real frames."""

from __future__ import annotations

import re
import shutil

import pytest

from testbed import cmd, xcpprobe
from testbed.optical.obsburst import write_pcap
from testbed.xcpprobe import ProbeError, ProbeHeader

#: the layout as designed (docs/xcp-edge.md): field -> (offset, size), written by hand
DESIGN = {"magic": (0, 4), "version": (4, 1), "flags": (5, 1), "hops": (6, 1), "reserved": (7, 1),
          "src_edge": (8, 2), "dst_edge": (10, 2), "seq": (12, 4), "rate_bps": (16, 8), "measured_bps": (24, 8),
          "feedback_bps": (32, 8), "send_ns": (40, 8), "arrive_ns": (48, 8), "limiter_node": (56, 2),
          "limiter_port": (58, 1), "reserved2": (59, 1), "reserved3": (60, 4)}

SAMPLE = ProbeHeader(src_edge=3, dst_edge=11, seq=7, rate_bps=123_456_789, measured_bps=98_765_432,
                     feedback_bps=-5_000_000_000, send_ns=10**12, arrive_ns=10**12 + 5, ack=True, returning=True,
                     hops=4, limiter_node=17, limiter_port=2)


def be(value: int, size: int, signed: bool = False) -> bytes:
    return value.to_bytes(size, "big", signed=signed)


def test_layout_is_the_designed_one():
    assert xcpprobe.field_offsets() == DESIGN
    assert xcpprobe.HEADER_BYTES == 64 and xcpprobe.FRAME_BYTES == 78
    assert xcpprobe.ETH_P_XCPP == 0x88B6 and xcpprobe.MAGIC == int.from_bytes(b"XCPP", "big")


def test_pack_equals_hand_assembled_bytes_and_round_trips():
    want = (b"XCPP" + bytes([1, 0x03, 4, 0]) + be(3, 2) + be(11, 2) + be(7, 4) + be(123_456_789, 8)
            + be(98_765_432, 8) + be(-5_000_000_000, 8, signed=True) + be(10**12, 8) + be(10**12 + 5, 8)
            + be(17, 2) + bytes([2, 0]) + bytes(4))
    assert len(want) == 64
    assert SAMPLE.pack() == want
    assert ProbeHeader.unpack(want) == SAMPLE
    assert ProbeHeader.unpack(want + bytes(10)) == SAMPLE          # Ethernet padding ignored
    frame = SAMPLE.frame(src_mac=b"\x02" * 6)
    assert frame[:14] == b"\xff" * 6 + b"\x02" * 6 + b"\x88\xb6" and frame[14:] == want
    assert xcpprobe.parse_frame(frame) == SAMPLE
    plain = ProbeHeader(0, 1, 0, 0, 0, 0, 0, 0)
    assert plain.pack()[5] == 0 and (plain.limiter_node, plain.limiter_port) == (0xFFFF, 0xFF)


@pytest.mark.parametrize("field, value", [
    ("src_edge", -1), ("src_edge", 0xFFFF), ("dst_edge", 70_000), ("seq", 2**32), ("rate_bps", -1),
    ("rate_bps", 10**13 + 1), ("measured_bps", 1.5), ("feedback_bps", -(10**13) - 1), ("feedback_bps", 10**13 + 1),
    ("send_ns", -1), ("arrive_ns", 2**63), ("hops", 256), ("limiter_node", 0x10000), ("limiter_port", 256),
    ("seq", True),
])
def test_fields_out_of_range_are_refused_by_name(field, value):
    kwargs = dict(src_edge=0, dst_edge=1, seq=0, rate_bps=0, measured_bps=0, feedback_bps=0, send_ns=0, arrive_ns=0)
    kwargs[field] = value
    with pytest.raises(ProbeError, match=f"{field}={value!r}: accepted an integer"):
        ProbeHeader(**kwargs)


@pytest.mark.parametrize("mutate, msg", [
    (lambda b: b[:63], "63 bytes"),
    (lambda b: b"XCPQ" + b[4:], "magic=0x58435051"),
    (lambda b: b[:4] + b"\x02" + b[5:], "version=2"),
    (lambda b: b[:5] + b"\x04" + b[6:], "flags=0x04"),
    (lambda b: b[:7] + b"\x01" + b[8:], "reserved"),
    (lambda b: b[:60] + b"\x00\x00\x00\x01", "reserved"),
])
def test_unpack_refuses_what_is_not_a_probe_of_this_version(mutate, msg):
    with pytest.raises(ProbeError, match=msg):
        ProbeHeader.unpack(mutate(SAMPLE.pack()))


def test_parse_frame_ignores_other_frames():
    frame = SAMPLE.frame()
    assert xcpprobe.parse_frame(frame[:12] + b"\x88\xb5" + frame[14:]) is None       # E2's control packet type
    assert xcpprobe.parse_frame(frame[:-1]) is None
    assert xcpprobe.parse_frame(frame[:14] + b"XCPQ" + frame[18:]) is None
    assert xcpprobe.parse_frame(frame[:18] + b"\x02" + frame[19:]) is None             # version 2: not ours
    with pytest.raises(ProbeError, match="flags"):
        xcpprobe.parse_frame(frame[:19] + b"\x80" + frame[20:])


def test_lowering_takes_the_smaller_feedback_rounded_down_and_names_the_limiter():
    p = ProbeHeader(2, 5, 9, rate_bps=4 * 10**8, measured_bps=3 * 10**8, feedback_bps=6 * 10**8, send_ns=1,
                    arrive_ns=2)
    a = p.lowered(1.5e8 + 0.7, node=20, port=3)
    assert (a.feedback_bps, a.limiter_node, a.limiter_port, a.hops) == (150_000_000, 20, 3, 1)
    b = a.lowered(2e8, node=21, port=1)                       # larger: unchanged but counted
    assert (b.feedback_bps, b.limiter_node, b.limiter_port, b.hops) == (150_000_000, 20, 3, 2)
    c = b.lowered(-2.5, node=22, port=0)                      # rounded down, never up
    assert (c.feedback_bps, c.limiter_node) == (-3, 22)
    assert c.lowered(-1e20, node=23, port=0).feedback_bps == -xcpprobe.RATE_MAX
    assert (c.rate_bps, c.measured_bps, c.seq) == (p.rate_bps, p.measured_bps, p.seq)
    with pytest.raises(ProbeError, match="finite"):
        c.lowered(float("nan"), node=1, port=0)
    back = c.turned(arrive_ns=99)
    assert back.returning and back.arrive_ns == 99 and back.feedback_bps == -3
    with pytest.raises(ProbeError, match="returning"):
        back.lowered(0, node=1, port=0)


def test_frame_refuses_bad_mac_lengths():
    with pytest.raises(ProbeError, match="MAC"):
        SAMPLE.frame(src_mac=b"\x02" * 5)


# --- the dissector ------------------------------------------------------------------------
LUA = xcpprobe.DISSECTOR.read_text()
#: struct code -> the ProtoField type that shows it
PROTOFIELD = {"B": "uint8", "H": "uint16", "I": "uint32", "Q": "uint64", "q": "int64"}


def test_dissector_offsets_and_types_match_the_python_layout():
    """Every `t:add(f.<name>, buf(<offset>, <size>))` of the Lua names a LAYOUT field at
    the same offset and size, every field is dissected once, with the ProtoField type of
    its struct code; magic, size, EtherType and the flag bits are the Python values."""
    added = {m[0]: (int(m[1]), int(m[2])) for m in re.findall(r"\bt:add\(f\.(\w+), buf\((\d+), (\d+)\)\)", LUA)}
    assert added == xcpprobe.field_offsets()
    types = dict(re.findall(r"\bf\.(\w+) = ProtoField\.(\w+)\(\"xcpp\.\1\"", LUA))
    for name, code, _ in xcpprobe.LAYOUT:
        assert types[name] == PROTOFIELD[code], name
    bits = dict(re.findall(r"\bf\.(\w+) = ProtoField\.bool\(\"xcpp\.\1\", \"[^\"]*\", 8, nil, (0x[0-9a-fA-F]+)\)", LUA))
    assert {k: int(v, 16) for k, v in bits.items()} == {"returning": xcpprobe.F_RETURN, "ack": xcpprobe.F_ACK}
    assert int(re.search(r"local MAGIC = (0x[0-9A-F]+)", LUA).group(1), 16) == xcpprobe.MAGIC
    assert int(re.search(r"local SIZE = (\d+)", LUA).group(1)) == xcpprobe.HEADER_BYTES
    assert int(re.search(r"DissectorTable.get\(\"ethertype\"\):add\((0x[0-9A-F]+), xcpp\)", LUA).group(1),
               16) == xcpprobe.ETH_P_XCPP


def test_tshark_decodes_probes_with_the_dissector(tmp_path):
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed (apt tshark)")
    probes = [SAMPLE, ProbeHeader(0, 13, 2**32 - 1, xcpprobe.RATE_MAX, 0, xcpprobe.RATE_MAX, 2**63 - 1, 0)]
    other = bytes(12) + b"\x88\xb5" + bytes(48)                  # an E2 control frame in between: not ours
    pcap = tmp_path / "xcpp.pcap"
    write_pcap(pcap, [(1_000, probes[0].frame()), (2_000, other), (3_000, probes[1].frame())])
    names = [name for name, _, _ in xcpprobe.LAYOUT] + ["returning", "ack"]
    argv = ["tshark", "-n", "-X", f"lua_script:{xcpprobe.DISSECTOR}", "-r", str(pcap), "-Y", "xcpp", "-T", "fields",
            "-E", "separator=,", *(x for name in names for x in ("-e", f"xcpp.{name}"))]
    rows = [dict(zip(names, line.split(","))) for line in cmd.run(argv, timeout=300).stdout.splitlines()]
    assert len(rows) == 2
    for row, p in zip(rows, probes):
        assert int(row["magic"], 16) == xcpprobe.MAGIC and int(row["version"]) == xcpprobe.VERSION
        for name in ("src_edge", "dst_edge", "seq", "rate_bps", "measured_bps", "feedback_bps", "send_ns", "arrive_ns",
                     "hops", "limiter_node", "limiter_port"):
            assert int(row[name]) == getattr(p, name), name
        assert int(row["flags"], 16) == p.flags
        assert (row["returning"] in ("1", "True"), row["ack"] in ("1", "True")) == (p.returning, p.ack)
    assert int(rows[0]["feedback_bps"]) == -5_000_000_000                     # signed on the wire
    info = cmd.run([*argv[:argv.index("-e")], "-e", "_ws.col.Info"], timeout=300).stdout.splitlines()
    assert info == ["returning ACK probe 3->11 #7: R 123456789, u 98765432, feedback -5000000000 bit/s, 4 hops",
                    f"data probe 0->13 #{2**32 - 1}: R {xcpprobe.RATE_MAX}, u 0, feedback {xcpprobe.RATE_MAX} bit/s, "
                    "0 hops"]
