"""The burst-assembly reference model (testbed/optical/burst.py) on hand-made cases, and
the Python side of the obsburst qdisc (options packing and bounds, control packets)
against kernel/obsburst.h."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from testbed.optical import mechanisms, obsburst
from testbed.optical.burst import TIME, VOLUME, Arrival, ClassParams, assemble, serialisation_ns

HEADER = Path(__file__).resolve().parents[2] / "kernel" / "obsburst.h"
#: 8 Gbit/s: one byte per ns, so serialisation times are byte counts
BYTE_NS = 8 * 10**9


def one(tmax: int = 1000, lmax: int = 10**6, offset: int = 0, rate: int = BYTE_NS) -> ClassParams:
    return ClassParams(tmax, lmax, offset, rate)


def times(arrs, classes):
    return [r.t_ns for r in assemble(arrs, classes).releases]


def test_time_close_offset_and_back_to_back():
    arrs = [Arrival(0, 100, 0), Arrival(300, 200, 0), Arrival(999, 50, 0)]
    a = assemble(arrs, [one(offset=500)])
    assert [r.t_ns for r in a.releases] == [1500, 1600, 1800]
    (b,) = a.bursts
    assert (b.id, b.open_ns, b.close_ns, b.reason, b.bytes, b.offset_ns) == (1, 0, 1000, TIME, 350, 500)
    assert {r.burst for r in a.releases} == {1}


def test_arrival_at_exactly_tmax_opens_the_next_burst():
    arrs = [Arrival(0, 100, 0), Arrival(1000, 100, 0)]
    a = assemble(arrs, [one()])
    assert [r.burst for r in a.releases] == [1, 2]
    assert [b.close_ns for b in a.bursts] == [1000, 2000]
    assert times(arrs, [one()]) == [1000, 2000]
    # one ns earlier it is still in the first burst
    arrs = [Arrival(0, 100, 0), Arrival(999, 100, 0)]
    assert [r.burst for r in assemble(arrs, [one()]).releases] == [1, 1]


def test_volume_close_when_lmax_reached_exactly():
    arrs = [Arrival(0, 100, 0), Arrival(10, 100, 0), Arrival(20, 100, 0), Arrival(30, 100, 0)]
    a = assemble(arrs, [one(lmax=300, offset=5)])
    assert [r.burst for r in a.releases] == [1, 1, 1, 2]
    assert [r.reason for r in a.releases] == [VOLUME] * 3 + [TIME]
    assert a.bursts[0].close_ns == 20 and a.bursts[0].bytes == 300
    assert [r.t_ns for r in a.releases[:3]] == [25, 125, 225]
    # the time-closed second burst: opened at 30, closed at 1030
    assert a.releases[3].t_ns == 1035


def test_volume_close_overshoot_keeps_the_packet_that_reaches_lmax():
    arrs = [Arrival(0, 100, 0), Arrival(10, 250, 0), Arrival(11, 10, 0)]
    a = assemble(arrs, [one(lmax=300)])
    assert [r.burst for r in a.releases] == [1, 1, 2]
    assert a.bursts[0].bytes == 350 and a.bursts[0].close_ns == 10


def test_packet_larger_than_lmax_is_a_burst_of_its_own():
    arrs = [Arrival(0, 50, 0), Arrival(5, 1500, 0), Arrival(6, 1500, 0)]
    a = assemble(arrs, [one(lmax=1000)])
    # 50 + 1500 >= 1000 closes burst 1 at t=5; the next 1500 B packet opens and closes
    # burst 2 at t=6 by itself, which waits for the channel (burst 1 takes 1550 ns)
    assert [r.burst for r in a.releases] == [1, 1, 2]
    assert [(b.reason, b.close_ns, b.packets) for b in a.bursts] == [(VOLUME, 5, [0, 1]), (VOLUME, 6, [2])]
    assert [r.t_ns for r in a.releases] == [5, 55, 1555]


def test_lone_oversize_packet():
    a = assemble([Arrival(7, 2000, 0)], [one(lmax=1000, offset=3)])
    (b,) = a.bursts
    assert (b.close_ns, b.reason, b.start_ns) == (7, VOLUME, 10)


def test_ties_same_instant_in_given_order():
    arrs = [Arrival(0, 100, 0), Arrival(0, 100, 0), Arrival(0, 100, 0)]
    a = assemble(arrs, [one(lmax=200)])
    assert [r.burst for r in a.releases] == [1, 1, 2]
    assert [r.t_ns for r in a.releases] == [0, 100, 1000]


def test_time_and_volume_at_the_same_instant():
    # burst 1 opens at 0 (Tmax 1000); at 1000 an arrival that would fill it: the Tmax
    # close comes first, the arrival opens burst 2 and fills it by itself
    arrs = [Arrival(0, 100, 0), Arrival(1000, 300, 0)]
    a = assemble(arrs, [one(lmax=300)])
    assert [(b.reason, b.close_ns) for b in a.bursts] == [(TIME, 1000), (VOLUME, 1000)]
    # channel: burst 1 occupies 1000..1100, burst 2 starts at 1100
    assert [r.t_ns for r in a.releases] == [1000, 1100]


def test_channel_busy_delays_the_next_burst_and_the_offset_it_announces():
    # rate 1 byte/ns, burst 1 holds 1000 bytes from t=100: channel busy 100..1100
    arrs = [Arrival(0, 500, 0), Arrival(100, 500, 0), Arrival(150, 1000, 0)]
    a = assemble(arrs, [one(lmax=1000)])
    b1, b2 = a.bursts
    assert (b1.close_ns, b1.start_ns) == (100, 100)
    assert (b2.close_ns, b2.start_ns, b2.offset_ns) == (150, 1100, 950)


def test_classes_are_independent_and_ids_count_openings():
    c0, c1 = one(tmax=1000), one(tmax=200, offset=50)
    arrs = [Arrival(0, 100, 0), Arrival(10, 100, 1), Arrival(20, 100, 1), Arrival(300, 100, 1),
            Arrival(400, 100, 0)]
    a = assemble(arrs, [c0, c1])
    assert [r.burst for r in a.releases] == [1, 2, 2, 3, 1]
    assert [r.t_ns for r in a.releases] == [1000, 260, 360, 550, 1100]
    assert [b.cls for b in a.bursts] == [0, 1, 1]


def test_serialisation_rounds_down_cumulatively():
    # 10 Gbit/s: 1500 B take 1200 ns; 3 B take 2.4 ns -> 2, then 6 B -> 4 (not 2 + 2)
    assert serialisation_ns(1500, 10**10) == 1200
    arrs = [Arrival(0, 3, 0), Arrival(0, 3, 0), Arrival(0, 3, 0)]
    assert times(arrs, [ClassParams(10, 10**6, 0, 10**10)]) == [10, 12, 14]


def test_assembly_delays():
    arrs = [Arrival(0, 100, 0), Arrival(400, 100, 0)]
    a = assemble(arrs, [one(offset=10)])
    assert a.assembly_delays_ns(arrs) == [1010, 710]


@pytest.mark.parametrize("arrs, msg", [
    ([Arrival(5, 100, 0), Arrival(4, 100, 0)], "before the previous"),
    ([Arrival(0, 100, 2)], "class 2"),
    ([Arrival(0, 0, 0)], "length"),
])
def test_bad_arrivals(arrs, msg):
    with pytest.raises(ValueError, match=msg):
        assemble(arrs, [one(), one()])


def test_bad_class_params():
    with pytest.raises(ValueError, match="tmax_ns"):
        ClassParams(0, 1, 0, 1000)
    with pytest.raises(ValueError, match="offset_ns"):
        ClassParams(1, 1, -1, 1000)


# -- the qdisc's Python side ---------------------------------------------------------------
def header_define(name: str) -> int:
    m = re.search(rf"#define\s+{name}\s+(0x[0-9A-Fa-f]+|\d+)", HEADER.read_text())
    assert m, name
    return int(m.group(1), 0)


def test_constants_match_the_header():
    assert obsburst.VERSION == header_define("OBSB_VERSION")
    assert obsburst.MAX_CLASSES == header_define("OBSB_MAX_CLASSES")
    assert obsburst.ETH_P_OBSB == header_define("OBSB_ETH_P")
    assert obsburst.CTRL_MAGIC == header_define("OBSB_CTRL_MAGIC")
    assert obsburst.BOUNDS["tmax_ns"][1] == header_define("OBSB_TMAX_MAX_NS")
    assert obsburst.BOUNDS["lmax_bytes"][1] == header_define("OBSB_LMAX_MAX")
    assert obsburst.BOUNDS["rate_bps"] == (header_define("OBSB_RATE_MIN"), header_define("OBSB_RATE_MAX"))
    assert obsburst.LIMIT_BOUNDS[1] == header_define("OBSB_LIMIT_MAX")
    # the module's BUILD_BUG_ONs: qopt 24 + 32 per class, control header 48
    assert obsburst.QOPT_SIZE == 24 + 32 * obsburst.MAX_CLASSES
    assert obsburst._CTRL.size == 48


def test_options_pack_round_trip_and_layout():
    cfg = obsburst.ObsBurstConfig((ClassParams(500_000, 25_000, 0, 40 * 10**9),
                                   ClassParams(10**7, 10**7, 10**7, 10**10)), class_by="mark", limit=5000)
    raw = cfg.pack()
    assert len(raw) == obsburst.QOPT_SIZE
    assert struct.unpack_from("=6I", raw) == (1, 2, 1, 0, 5000, 1)
    assert struct.unpack_from("=4Q", raw, 24) == (500_000, 25_000, 0, 40 * 10**9)
    assert struct.unpack_from("=4Q", raw, 24 + 64) == (0, 0, 0, 0)
    assert obsburst.ObsBurstConfig.unpack(raw) == cfg


@pytest.mark.parametrize("kwargs, msg", [
    ({"classes": ()}, "classes: 0 given"),
    ({"classes": (ClassParams(1, 1, 0, 999),)}, r"rate_bps=999 out of range"),
    ({"classes": (ClassParams(1, 10**9 + 1, 0, 10**6),)}, r"lmax_bytes=1000000001 out of range"),
    ({"classes": (ClassParams(3_600_000_000_001, 1, 0, 10**6),)}, "tmax_ns"),
    ({"classes": (one(),), "default_class": 1}, "default_class=1"),
    ({"classes": (one(),), "class_by": "dscp"}, "class_by"),
    ({"classes": (one(),), "limit": 0}, "limit=0"),
])
def test_options_bounds(kwargs, msg):
    with pytest.raises(obsburst.ObsBurstError, match=msg):
        obsburst.ObsBurstConfig(**kwargs)


def test_control_packet_parse():
    frame = b"\xff" * 6 + b"\x02" * 6 + struct.pack("!H", 0x88B5) + struct.pack(
        "!IBBHQQIIQQ", 0x4F425342, 1, 1, 1, 7, 25_600, 50, 0, 10_000, 123_456)
    c = obsburst.parse_control(frame)
    assert c == obsburst.ControlPacket(7, 1, True, 25_600, 50, 10_000, 123_456)
    assert obsburst.parse_control(frame[:12] + b"\x08\x00" + frame[14:]) is None


def test_mechanism_assembles_towards_switches_and_fq_towards_hosts(monkeypatch):
    """The obsburst mechanism puts the qdisc (with the architecture's options) on the
    ports whose peer is not a host and fq on the ports towards hosts, loads the module
    first, and takes only the obsburst qdiscs off again."""
    m = obsburst.OBSBURST
    assert isinstance(m, mechanisms.Mechanism) and {mechanisms.Feature.MODULES, mechanisms.Feature.FQ} <= m.features
    assert obsburst.OBS_ASSEMBLY.mechanism is m and obsburst.OBS_ASSEMBLY.name == mechanisms.HOLDING
    done = []
    monkeypatch.setattr(obsburst, "load_module", lambda ledger: done.append(("load", ledger)))
    monkeypatch.setattr(obsburst, "install", lambda dev, netns, config: done.append((dev, netns, config)))
    monkeypatch.setattr(obsburst, "remove", lambda dev, netns: done.append(("remove", dev, netns)))
    monkeypatch.setattr(mechanisms.cmd, "run", lambda argv, **kw: done.append(("tc", kw["netns"], kw["input"])))
    devs = ["e-eth0", "e-eth1", "e-eth2"]
    ctx = mechanisms.NodeContext(100.0, (1e6, 1e6, 1e8), (True, True, False))
    config = obsburst.ObsBurstConfig((ClassParams(1_000_000, 25_000, 0, 10**8),))
    with pytest.raises(obsburst.ObsBurstError, match="ObsBurstConfig"):
        m.install("ns", devs, None, ledger="L", context=ctx)
    with pytest.raises(obsburst.ObsBurstError, match="NodeContext of 3 ports"):
        m.install("ns", devs, config, ledger="L", context=None)
    assert done == []
    assert m.plan(devs, ctx) == {"e-eth0": "fq", "e-eth1": "fq", "e-eth2": "obsburst"}
    assert m.holds(devs, ctx) == (False, False, True)
    m.install("ns", devs, config, ledger="L", context=ctx)
    assert done == [("load", "L"), ("tc", "ns", mechanisms.FQ.tc_batch(["e-eth0", "e-eth1"])),
                    ("e-eth2", "ns", config)]
    done.clear()
    m.remove("ns", devs, ctx)
    assert done == [("remove", "e-eth2", "ns")]
    # a core-side node of two switches: obsburst on both, no tc process at all
    done.clear()
    m.install("ns", devs[:2], config, ledger=None, context=mechanisms.NodeContext(1.0, (1e8, 1e8), (False, False)))
    assert done == [("e-eth0", "ns", config), ("e-eth1", "ns", config)]
    # fq (a TcQdisc) plans itself everywhere and holds nothing
    assert mechanisms.FQ.plan(devs, ctx) == dict.fromkeys(devs, "fq") and not any(mechanisms.FQ.holds(devs, ctx))


def test_tshark_decodes_control_packets_with_the_dissector(tmp_path):
    import shutil

    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed (apt tshark)")
    ctrls = [obsburst.ControlPacket(1, 0, False, 3_000, 4, 10_000_000, 123_456_789_000),
             obsburst.ControlPacket(2**40 + 3, 1, True, 25_600, 50, 0, 2**62)]
    ip = bytes(12) + b"\x08\x00" + bytes(46)          # an unrelated frame in between
    pcap = tmp_path / "obsb.pcap"
    obsburst.write_pcap(pcap, [(1_000, ctrls[0].frame()), (2_000, ip), (3_000, ctrls[1].frame())])
    assert obsburst.tshark_controls(pcap) == ctrls
    assert all(obsburst.parse_control(c.frame()) == c for c in ctrls)
