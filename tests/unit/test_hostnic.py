"""The Python side of the hostnic qdisc (testbed/optical/hostnic.py) against
kernel/hostnic.h and the module's source: struct layouts read from the header,
constants, option bounds, and where the fabric uses it."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from testbed.features import Feature
from testbed.optical import architectures, fabric, hostnic, mechanisms
from testbed.optical.hostnic import HostNicConfig, HostNicError

KERNEL = Path(__file__).resolve().parents[2] / "kernel"
HEADER = KERNEL / "hostnic.h"
SOURCE = KERNEL / "sch_hostnic.c"
_FORMAT = {"__u32": "I", "__u64": "Q"}


def header_define(name: str) -> int:
    m = re.search(rf"#define\s+{name}\s+(\d+)U?L?L?\b", HEADER.read_text())
    assert m, name
    return int(m.group(1))


def header_struct(name: str) -> str:
    """The struct's members as a struct-module format (host order, no padding)."""
    m = re.search(rf"struct {name} {{(.*?)}};", HEADER.read_text(), re.S)
    assert m, name
    members = re.findall(r"^\s*(__u\d+)\s+\w+;", m.group(1), re.M)
    assert members, name
    return "=" + "".join(_FORMAT[t] for t in members)


def fmt(s: struct.Struct) -> str:
    """``s``'s format with repeat counts written out ("=2I" -> "=II")."""
    return re.sub(r"(\d+)(\w)", lambda m: m.group(2) * int(m.group(1)), s.format)


def test_layouts_and_constants_match_the_header():
    assert fmt(hostnic._QOPT) == header_struct("tc_hostnic_qopt")
    assert fmt(hostnic._XSTATS) == header_struct("tc_hostnic_xstats")
    assert hostnic.VERSION == header_define("HOSTNIC_VERSION")
    assert hostnic.LIMIT_DEFAULT == header_define("HOSTNIC_LIMIT_DEFAULT")
    assert hostnic.LIMIT_BOUNDS == (1, header_define("HOSTNIC_LIMIT_MAX"))
    assert header_define("HOSTNIC_HORIZON_NS") == 3600 * 10**9   # the fabric's fq: horizon 3600s horizon_cap
    assert hostnic.HostNicState.__dataclass_fields__.keys() >= {"orphaned", "out_of_order", "drops", "max_qlen",
                                                                "horizon_capped"}
    # the module's BUILD_BUG_ONs state the same sizes
    src = SOURCE.read_text()
    assert f"sizeof(struct tc_hostnic_qopt) != {hostnic._QOPT.size})" in src
    assert f"sizeof(struct tc_hostnic_xstats) != {hostnic._XSTATS.size})" in src
    assert f'.id\t\t= "{hostnic.KIND}"' in src


def test_the_module_orphans_at_enqueue():
    """The point of the qdisc: the packet stops belonging to its socket when the NIC
    takes it (not when the receiver gets it), fully: a partial orphan keeps the socket,
    and Linux then skips retransmissions of packets still in the emulated network."""
    enqueue = re.search(r"static int hostnic_enqueue\(.*?\n}\n", SOURCE.read_text(), re.S).group(0)
    assert "skb_orphan(skb);" in enqueue and "skb_orphan_partial" not in enqueue


def test_options_round_trip_and_bounds():
    raw = HostNicConfig(5000).pack()
    assert struct.unpack("=2I", raw) == (hostnic.VERSION, 5000)
    assert HostNicConfig.unpack(raw) == HostNicConfig(5000)
    assert HostNicConfig().limit == 1_000_000
    for bad in (0, 10_000_001, 2.5):
        with pytest.raises(HostNicError, match=r"hostnic limit=.* out of range: an integer 1\.\.10000000"):
            HostNicConfig(bad)  # type: ignore[arg-type]
    with pytest.raises(HostNicError, match="version 2, expected 1"):
        HostNicConfig.unpack(struct.pack("=2I", 2, 10))
    with pytest.raises(HostNicError, match="4 bytes, expected 8"):
        HostNicConfig.unpack(b"\0" * 4)


def test_fabric_hosts_use_it_and_need_modules():
    assert fabric.HOST_ASSIGNMENT.mechanism is hostnic.HOSTNIC
    assert architectures.NIC.realisation.name == mechanisms.EDT
    assert Feature.MODULES in hostnic.HOSTNIC.features
    assert hostnic.HOSTNIC.holds(["h1-eth0"], None) == (False,)
    assert hostnic.QDISC_MODULE.name == "sch_hostnic" and hostnic.QDISC_MODULE.error is HostNicError
    # installed like fq, by tc with no options (the module's defaults)
    assert hostnic.HOSTNIC.tc_batch(["h1-eth0"]) == "qdisc replace dev h1-eth0 root hostnic\n"


def test_an_optical_switch_needs_what_its_hosts_need():
    from testbed.net import OpticalSwitch

    assert Feature.MODULES in OpticalSwitch.features({"arch": "electronic"})
