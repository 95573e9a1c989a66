"""Every byte layout Python packs or parses for a BPF program, checked against the BTF
of the compiled object (testbed/btf.py reads it; no root, no kernel).

The checks go by member name, not by format string: a Python packer's output is
decoded with the object's BTF and every member must hold the value given to the
packer (all others zero); a Python parser is fed bytes encoded from the BTF with a
distinct value in every member. So a moved, resized, swapped or renamed field fails,
and so does a Python copy that drifts from the header (testbed/optical/layout.py is
the one Python copy of ebpf/optswitch.h; testbed/bpf.py holds portstat's).

Needs the objects built (``make -C ebpf``, part of ``make setup``): skipped if they are
missing, failed if a source is newer than its object (a stale object proves nothing).
Constants that only exist as ``#define`` (model codes, flags) are read from the headers
with ``clang -dM -E`` (skipped without clang).
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from testbed import bpf
from testbed.btf import Btf, BtfError
from testbed.cc import sockops
from testbed.optical import architectures, layout

EBPF = bpf.EBPF_DIR


# ---- helpers ---------------------------------------------------------------------------

def _stale_sources(obj: Path) -> list[Path]:
    """Sources newer than ``obj``: those of its make dependency file, else every
    ebpf header and its .bpf.c (conservative)."""
    dep = EBPF / ".output" / (obj.name[:-2] + ".d")
    if dep.exists():
        text = dep.read_text().replace("\\\n", " ")
        first = text.split("\n", 1)[0]
        srcs = [EBPF / p for p in first.split(":", 1)[1].split() if not p.startswith("/")]
    else:
        srcs = [EBPF / (obj.name[:-2] + ".c"), *EBPF.rglob("*.h")]
    return [s for s in srcs if s.exists() and s.stat().st_mtime > obj.stat().st_mtime]


def _object(name: str) -> Btf:
    obj = EBPF / f"{name}.bpf.o"
    if not obj.exists():
        pytest.skip(f"{obj} is not built: run `make -C {EBPF}` (part of make setup)")
    stale = _stale_sources(obj)
    if stale:
        pytest.fail(f"{obj.name} is older than {', '.join(s.name for s in stale)}: "
                    f"rebuild with `make -C {EBPF}` before checking layouts")
    return Btf.from_elf(obj)


@pytest.fixture(scope="module")
def optsw() -> Btf:
    return _object("optswitch")


@pytest.fixture(scope="module")
def portstat() -> Btf:
    return _object("portstat")


@pytest.fixture(scope="module")
def tcp_rto() -> Btf:
    return _object("tcp_rto")


def mismatches(info: Btf, struct_name: str, packed: bytes, expected: dict[str, int]) -> list[str]:
    """How ``packed`` (a Python packer's output) differs from ``struct_name`` of the BTF
    holding ``expected`` by member path, every other member zero; [] if it does not."""
    size = info.size(struct_name)
    if len(packed) != size:
        return [f"{struct_name} is {size} bytes in the object, Python packed {len(packed)}"]
    got = info.decode(struct_name, packed)
    unknown = sorted(set(expected) - set(got))
    if unknown:
        return [f"{struct_name} has no member {p}" for p in unknown]
    return [f"{struct_name}.{p}: object reads {v}, Python meant {expected.get(p, 0)}"
            for p, v in got.items() if v != expected.get(p, 0)]


def distinct_values(info: Btf, struct_name: str) -> dict[str, int]:
    """A different non-zero value in every scalar member (fitting its size)."""
    out = {}
    for i, f in enumerate(info.fields(struct_name)):
        bits = 8 * f.size - (1 if f.signed else 0)
        out[f.path] = (i * 2654435761 + 12345) % ((1 << bits) - 1) + 1
    return out


def _macros(header: Path) -> dict[str, int]:
    """Integer #defines of a header (clang -dM -E); skips the test without clang."""
    clang = shutil.which("clang")
    if clang is None:
        pytest.skip("clang not installed (make setup installs it)")
    out = subprocess.run([clang, "-dM", "-E", "-x", "c", str(header)], capture_output=True,
                         text=True, check=True).stdout
    found = {}
    for m in re.finditer(r"^#define (\w+) \(?(0x[0-9a-fA-F]+|\d+)[uUlL]*\)?$", out, re.M):
        found[m.group(1)] = int(m.group(2), 0)
    return found


# ---- the reader and the check themselves -----------------------------------------------

def test_reader_agrees_with_bpftool_on_every_object():
    """testbed/btf.py against the reference reader (libbpf through bpftool), every type."""
    bpftool = shutil.which("bpftool") or ("/usr/sbin/bpftool" if Path("/usr/sbin/bpftool").exists() else None)
    objects = sorted(EBPF.glob("*.bpf.o"))
    if bpftool is None or not objects:
        pytest.skip("bpftool or the built objects missing")
    for obj in objects:
        ours = Btf.from_elf(obj)
        ref = json.loads(subprocess.run([bpftool, "-j", "btf", "dump", "file", str(obj)],
                                        capture_output=True, text=True, check=True).stdout)["types"]
        assert len(ref) == len(ours.types) - 1, obj
        for r in ref:
            t = ours.type(r["id"])
            assert (t.kind, t.name or "(anon)") == (r["kind"], r["name"]), (obj.name, r)
            if "size" in r and r["kind"] != "DATASEC":
                assert t.size == r["size"], (obj.name, r)
            if "members" in r:
                assert [(m.name or "(anon)", m.type_id, m.bit_offset) for m in t.members] == \
                    [(m["name"], m["type_id"], m["bits_offset"]) for m in r["members"]], (obj.name, r)
            if r["kind"] == "ARRAY":
                assert (t.ref, t.nelems) == (r["type_id"], r["nr_elems"]), (obj.name, r)
            if "values" in r:
                # bpftool prints a 4-byte unsigned enum's value through a signed 32-bit
                # member, sign-extended to 64 bits (rpm_status's -1 as 2^64 - 1); compare
                # the value's own width
                width = 8 * t.size if r["kind"] == "ENUM" else 64
                assert [v for _n, v in t.values] == [v["val"] % (1 << width) if r.get("encoding") == "UNSIGNED"
                                                     else v["val"] for v in r["values"]], (obj.name, r)


TINY = """
struct tiny { unsigned int a; unsigned short b; unsigned short c; unsigned long long d[2]; };
struct tiny tiny_var;
"""


def _compile(tmp_path: Path, source: str, name: str) -> Btf:
    clang = shutil.which("clang")
    if clang is None:
        pytest.skip("clang not installed (make setup installs it)")
    src = tmp_path / f"{name}.bpf.c"
    src.write_text(source)
    obj = tmp_path / f"{name}.bpf.o"
    subprocess.run([clang, "-O2", "-g", "-target", "bpf", "-c", str(src), "-o", str(obj)],
                   check=True, capture_output=True)
    return Btf.from_elf(obj)


def test_the_check_fails_when_a_field_moves(tmp_path):
    """The same check the layout tests use, on a tiny object: it passes for the right
    Python packer and names the members when two fields swap or one grows."""
    import struct

    def pack(a: int, b: int, c: int, d0: int, d1: int) -> bytes:  # the "Python layout"
        return struct.pack("<IHHQQ", a, b, c, d0, d1)

    want = {"a": 1, "b": 2, "c": 3, "d[0]": 4, "d[1]": 5}
    good = _compile(tmp_path, TINY, "good")
    assert mismatches(good, "tiny", pack(1, 2, 3, 4, 5), want) == []
    assert good.size("tiny") == 24 and good.member("tiny", "d").offset == 8

    swapped = _compile(tmp_path, TINY.replace("unsigned short b; unsigned short c;",
                                              "unsigned short c; unsigned short b;"), "swapped")
    assert mismatches(swapped, "tiny", pack(1, 2, 3, 4, 5), want) == [
        "tiny.c: object reads 2, Python meant 3", "tiny.b: object reads 3, Python meant 2"]

    grown = _compile(tmp_path, TINY.replace("unsigned int a;", "unsigned long long a;"), "grown")
    assert mismatches(grown, "tiny", pack(1, 2, 3, 4, 5), want) == [
        "tiny is 32 bytes in the object, Python packed 24"]
    with pytest.raises(BtfError, match="no member 'e'"):
        good.member("tiny", "e")


# ---- optswitch (ebpf/optswitch.h <-> testbed/optical/layout.py) ------------------------

def test_optswitch_maps_are_the_ones_python_writes(optsw):
    maps = optsw.maps()
    assert set(maps) == set(bpf.OPTSW_MAPS)
    u32 = len(layout.u32_key(0))
    want = {  # map: (key size from Python, value struct)
        "optsw_cfg": (u32, "struct optsw_cfg_node"),
        "optsw_state": (u32, "struct optsw_node_state"),
        "optsw_ifport": (len(layout.ifport_key(0, 0)), "__u32"),
        "optsw_routes": (len(layout.route_key(0, "10.0.0.1")), "struct optsw_route"),
        "optsw_hook": (u32, "struct optsw_hook"),
        "optsw_monitor": (u32, "struct optsw_monitor"),
        "optsw_xcp_acc": (u32, "struct optsw_xcp_node"),
        "optsw_xcp_cfg": (u32, "struct optsw_xcp_cfg"),
        "optsw_xcp_class": (len(layout.xcp_class_key(0, "10.0.0.1")), "__u32"),
    }
    for name, (key_size, value_type) in want.items():
        assert (maps[name].key_size, maps[name].value_type) == (key_size, value_type), name
    assert maps["optsw_ifport"].value_size == len(layout.u32_key(0))
    assert maps["optsw_cfg"].max_entries == maps["optsw_state"].max_entries == layout.MAX_NODES
    assert maps["optsw_xcp_acc"].max_entries == maps["optsw_xcp_cfg"].max_entries == layout.MAX_NODES
    assert maps["optsw_xcp_class"].value_size == len(layout.xcp_class_value(0))
    assert maps["optsw_xcp_acc"].value_size == layout.XCP_NODE_SIZE


def test_array_lengths_match_the_python_constants(optsw):
    assert layout.MAX_PORTS == optsw.array_len("optsw_cfg_node", "port") \
        == optsw.array_len("optsw_node_state", "port")
    # port indices are bounded with & (OPTSW_MAX_PORTS - 1): a power of two
    assert layout.MAX_PORTS & (layout.MAX_PORTS - 1) == 0
    assert layout.MAX_NE == optsw.array_len("optsw_node_state", "bin_free_ns") \
        == optsw.array_len("optsw_node_state", "bout")
    assert layout.MAX_ECMP == optsw.array_len("optsw_route", "port")
    assert layout.OCC_SLOTS == optsw.array_len("optsw_node_state", "occ")
    assert layout.BOUT_RES == optsw.array_len("optsw_bout", "start_ns") \
        == optsw.array_len("optsw_bout", "end_ns")
    assert layout.LATE_BUCKETS == optsw.array_len("optsw_monitor", "bucket")
    assert layout.OBS_RING == optsw.array_len("optsw_obs_ring", "b")
    assert layout.MAX_PORTS == optsw.array_len("optsw_obs_state", "ring")
    assert layout.HOLD_BUCKETS == optsw.array_len("optsw_hold_hist", "bucket")


def test_node_cfg_writes_every_member_by_name(optsw):
    ports = [layout.PortConfig(1000 + i, prop_ns=50_000 + i, ifindex=70 + i, peer_host=i % 2 == 1,
                               peer_holds=i >= 1) for i in range(3)]
    assert layout.ARCH_CFG_BYTES == optsw.size(optsw.member("optsw_cfg_node", "arch_cfg").type_id)
    arch_cfg = bytes(range(1, 13))  # a configuration shorter than the room for it
    room = arch_cfg.ljust(layout.ARCH_CFG_BYTES, b"\0")
    want = {"arch": 7, "n_ports": 3}
    want |= {f"arch_cfg[{i}]": int.from_bytes(room[8 * i:8 * i + 8], "little")
             for i in range(layout.ARCH_CFG_BYTES // 8)}
    for i, p in enumerate(ports):
        want |= {f"port[{i}].ps_per_byte": p.ps_per_byte, f"port[{i}].prop_ns": p.prop_ns,
                 f"port[{i}].ifindex": p.ifindex,
                 f"port[{i}].flags": (layout.PORT_PEER_HOST if p.peer_host else 0)
                 | (layout.PORT_PEER_HOLDS if p.peer_holds else 0)}
    assert mismatches(optsw, "optsw_cfg_node", layout.node_cfg(7, arch_cfg, ports), want) == []


@pytest.mark.parametrize("arch", list(architectures.REGISTRY), ids=lambda a: a.name)
def test_each_architecture_packs_its_bpf_configuration_struct(optsw, arch):
    """Architecture.pack writes struct optsw_<bpf>_cfg of ebpf/arch/<bpf>.h, member by member."""
    if not arch.params:
        assert arch.cfg_size == 0
        return
    name = f"optsw_{arch.bpf}_cfg"
    try:
        optsw.find(name, "STRUCT")
    except BtfError:
        pytest.fail(f"struct {name} is not in the BTF of optswitch.bpf.o, so its layout cannot be "
                    "checked: clang emits only types that a global, a map or a function signature "
                    "uses (not a cast's). Make cfg_node.arch_cfg a union of the configurations, "
                    "or anchor each struct in the generated dispatch.")
    values = {p.name: (i + 1) * 0x01010101 % (2 ** (32 if p.ctype == "u32" else 64))
              for i, p in enumerate(arch.params)}
    assert mismatches(optsw, name, arch.pack(values), values) == []
def test_keys_route_and_hook_write_every_member_by_name(optsw):
    assert mismatches(optsw, "optsw_ifport_key", layout.ifport_key(7, 123),
                      {"node": 7, "ifindex": 123}) == []
    dst = "10.1.2.3"  # network byte order in the key
    assert mismatches(optsw, "optsw_route_key", layout.route_key(9, dst),
                      {"node": 9, "dst": int.from_bytes(socket.inet_aton(dst), "little")}) == []
    assert mismatches(optsw, "optsw_route", layout.route_value([3, 1, 4], flow_hash=True),
                      {"n": 3, "flags": layout.ROUTE_FLOW_HASH,
                       "port[0]": 3, "port[1]": 1, "port[2]": 4}) == []
    assert mismatches(optsw, "optsw_hook", layout.hook_value(2**40 + 5, 9064, 6, 0xDEADBEEF, stamp_ns=2**63 + 3),
                      {"now_ns": 2**40 + 5, "len": 9064, "port": 6, "rand": 0xDEADBEEF,
                       "stamp_ns": 2**63 + 3}) == []


def test_node_state_is_parsed_by_member_name(optsw):
    assert layout.STATE_SIZE == optsw.size("optsw_node_state")
    assert layout.STATE_PORTS_OFFSET == optsw.member("optsw_node_state", "port").offset
    # The Python field list is the struct's members, in order (parsing relies on it).
    assert tuple(m.name for m in optsw.members("optsw_port_state")) == layout.PORT_STATE_FIELDS
    values = distinct_values(optsw, "optsw_node_state")
    state = layout.parse_node_state(optsw.encode("optsw_node_state", values), layout.MAX_PORTS)
    for name in ("max_occ_bytes", "occ_overflow", "bout_overflow"):
        assert state[name] == values[name], name
    assert len(state["ports"]) == layout.MAX_PORTS
    for p, port in enumerate(state["ports"]):
        assert port == {f: values[f"port[{p}].{f}"] for f in layout.PORT_STATE_FIELDS}, p


def test_obs_state_is_parsed_by_member_name(optsw):
    """The OBS counters, the per-input-port rings (oldest first from head, n entries,
    wrapping) and the holding-delay histogram inside optsw_node_state."""
    assert layout.STATE_OBS_OFFSET == optsw.member("optsw_node_state", "obs").offset
    assert layout.STATE_HOLD_OFFSET == optsw.member("optsw_node_state", "hold").offset
    assert tuple(m.name for m in optsw.members("optsw_obs_state")) == (*layout.OBS_FIELDS, "ring")
    values = distinct_values(optsw, "optsw_node_state")
    r = layout.OBS_RING
    for p in range(layout.MAX_PORTS):  # ring p: head p mod r, n p mod (r + 1)
        values[f"obs.ring[{p}].head"] = p % r
        values[f"obs.ring[{p}].n"] = p % (r + 1)
    raw = optsw.encode("optsw_node_state", values)
    obs = layout.parse_obs_state(raw)
    assert {k: obs[k] for k in layout.OBS_FIELDS} == {k: values[f"obs.{k}"] for k in layout.OBS_FIELDS}
    for p, ring in enumerate(obs["rings"]):
        slots = [((p % r) + i) % r for i in range(p % (r + 1))]
        assert ring == [(values[f"obs.ring[{p}].b[{j}].left"], values[f"obs.ring[{p}].b[{j}].lost"])
                        for j in slots], p
    hold = layout.parse_hold_hist(raw)
    assert {k: hold[k] for k in ("count", "early", "max_ns", "sum_ns", "over")} == \
        {k: values[f"hold.{k}"] for k in ("count", "early", "max_ns", "sum_ns", "over")}
    assert hold["buckets"] == [values[f"hold.bucket[{i}]"] for i in range(layout.HOLD_BUCKETS)]


def test_xcp_layouts_write_and_read_every_member_by_name(optsw):
    """The XCP accumulator (slot, node ring), its configuration and the class key
    (ebpf/optswitch.h) against layout.py: packers by member, the node parser fed a
    distinct value in every member of every slot."""
    outer = optsw.type(optsw.member("optsw_xcp_node", "slot").type_id)  # slot[MAX_PORTS][XCP_SLOTS]
    assert (outer.nelems, optsw.type(outer.ref).nelems) == (layout.MAX_PORTS, layout.XCP_SLOTS)
    assert optsw.size("optsw_xcp_slot") == 32 and optsw.size("optsw_xcp_node") == layout.XCP_NODE_SIZE == 8192
    slot = layout.AccSlot(2**40 + 3, 2**35 + 7, 123456, 2**31 + 5, 2**33 + 9)
    assert mismatches(optsw, "optsw_xcp_slot", layout.pack_acc_slot(slot),
                      {"interval": slot.interval, "bytes": slot.bytes, "qmin_ns": slot.qmin_ns,
                       "packets": slot.packets, "drops": slot.drops}) == []
    assert mismatches(optsw, "optsw_xcp_slot", layout.pack_acc_slot(layout.EMPTY_SLOT),
                      {"interval": layout.XCP_NONE, "qmin_ns": layout.XCP_NONE}) == []
    values = distinct_values(optsw, "optsw_xcp_node")
    parsed = layout.parse_xcp_node(optsw.encode("optsw_xcp_node", values))
    assert len(parsed) == layout.MAX_PORTS
    for p, ring in parsed.items():
        assert ring == [layout.AccSlot(values[f"slot[{p}][{i}].interval"], values[f"slot[{p}][{i}].bytes"],
                                       values[f"slot[{p}][{i}].packets"], values[f"slot[{p}][{i}].drops"],
                                       values[f"slot[{p}][{i}].qmin_ns"]) for i in range(layout.XCP_SLOTS)], p
    # the packer of a whole node (a reset, or a hand-made value) puts slot i of port p there
    ring = [layout.AccSlot(4 * j + 1, j + 10, j + 20, j, j + 30) for j in range(layout.XCP_SLOTS)]
    want = {f"slot[{p}][{i}].{m}": layout.XCP_NONE for p in range(layout.MAX_PORTS)
            for i in range(layout.XCP_SLOTS) for m in ("interval", "qmin_ns")}
    for i, sl in enumerate(ring):
        want |= {f"slot[5][{i}].interval": sl.interval, f"slot[5][{i}].bytes": sl.bytes,
                 f"slot[5][{i}].packets": sl.packets, f"slot[5][{i}].drops": sl.drops,
                 f"slot[5][{i}].qmin_ns": sl.qmin_ns}
    assert mismatches(optsw, "optsw_xcp_node", layout.pack_xcp_node({5: ring}), want) == []
    cfg = layout.XcpConfig(True, 2**62 + 11, 10**9 + 3, acks_separate=True)
    assert mismatches(optsw, "optsw_xcp_cfg", cfg.pack(),
                      {"enabled": 1, "acks_separate": 1, "epoch_ns": 2**62 + 11, "interval_ns": 10**9 + 3}) == []
    assert layout.XcpConfig.unpack(cfg.pack()) == cfg
    dst = "10.4.5.6"
    assert mismatches(optsw, "optsw_xcp_class_key", layout.xcp_class_key(300, dst),
                      {"node": 300, "dst_ip": int.from_bytes(socket.inet_aton(dst), "little")}) == []
    m = _macros(EBPF / "optswitch.h")
    assert (layout.XCP_SLOTS, layout.XCP_NONE, layout.XCP_NO_CLASS) == \
        (m["OPTSW_XCP_SLOTS"], m["OPTSW_XCP_NONE"], m["OPTSW_XCP_NO_CLASS"])
    assert layout.XCP_SLOTS & (layout.XCP_SLOTS - 1) == 0  # slot = k & (OPTSW_XCP_SLOTS - 1)


def test_control_packet_offsets_are_the_modules_header():
    """optswitch reads the burst control packet of kernel/obsburst.h at its own offsets
    (a BPF program cannot include that header next to vmlinux.h): the same numbers as the
    module's header and as testbed/optical/obsburst.py, which packs it for the qdisc's tests."""
    from testbed.optical import obsburst

    m = _macros(EBPF / "optswitch.h")
    k = _macros(EBPF.parent / "kernel" / "obsburst.h")
    assert (m["OPTSW_OBSB_ETH_P"], m["OPTSW_OBSB_MAGIC"], m["OPTSW_OBSB_VERSION"]) == \
        (k["OBSB_ETH_P"], k["OBSB_CTRL_MAGIC"], k["OBSB_VERSION"]) == \
        (obsburst.ETH_P_OBSB, obsburst.CTRL_MAGIC, obsburst.VERSION)
    frame = obsburst.ControlPacket(0x0102030405060708, 3, True, 0x1112131415161718, 0x21222324, 7, 9).frame()
    hdr = frame[14:]
    assert len(hdr) == m["OPTSW_OBSB_HDR_LEN"]
    assert int.from_bytes(hdr[:4], "big") == m["OPTSW_OBSB_MAGIC"]
    assert hdr[m["OPTSW_OBSB_OFF_VERSION"]] == m["OPTSW_OBSB_VERSION"]
    off = m["OPTSW_OBSB_OFF_BURST_ID"]
    assert int.from_bytes(hdr[off:off + 8], "big") == 0x0102030405060708
    off = m["OPTSW_OBSB_OFF_BYTES"]
    assert int.from_bytes(hdr[off:off + 8], "big") == 0x1112131415161718
    off = m["OPTSW_OBSB_OFF_PACKETS"]
    assert int.from_bytes(hdr[off:off + 4], "big") == 0x21222324


def test_optical_maps_hold_no_other_copy_of_the_state_size():
    from testbed.optical import maps

    assert not hasattr(maps, "STATE_SIZE")


def test_monitor_is_parsed_by_member_name(optsw):
    assert layout.MONITOR_SIZE == optsw.size("optsw_monitor")
    values = distinct_values(optsw, "optsw_monitor")
    mon = layout.parse_monitor(optsw.encode("optsw_monitor", values))
    assert {k: mon[k] for k in ("count", "early", "max_ns", "sum_ns")} == \
        {k: values[k] for k in ("count", "early", "max_ns", "sum_ns")}
    assert mon["buckets"] == [values[f"bucket[{i}]"] for i in range(layout.LATE_BUCKETS)]


def test_optswitch_rodata_is_what_the_loader_sets(optsw):
    rodata = optsw.rodata()
    sets = bpf._optsw_rodata(layout.MAX_NODES - 1, is_switch=True, test_mode=True)
    for name, value in sets.items():
        assert name in rodata, f"Python sets {name}; .rodata has {sorted(rodata)}"
        assert value < 2 ** (8 * rodata[name]), name


def test_optswitch_header_constants_match_python():
    m = _macros(EBPF / "optswitch.h")
    assert (layout.CUT, layout.BUFFER, layout.DROP, layout.NOCFG) == \
        (m["OPTSW_CUT"], m["OPTSW_BUFFER"], m["OPTSW_DROP"], m["OPTSW_NOCFG"])
    assert layout.HOLD == m["OPTSW_HOLD"]
    assert (layout.PORT_PEER_HOST, layout.PORT_PEER_HOLDS, layout.ROUTE_FLOW_HASH) == \
        (m["OPTSW_PORT_PEER_HOST"], m["OPTSW_PORT_PEER_HOLDS"], m["OPTSW_ROUTE_FLOW_HASH"])
    assert (layout.OBS_RING, layout.HOLD_SUB, layout.HOLD_BUCKETS) == \
        (m["OPTSW_OBS_RING"], m["OPTSW_HOLD_SUB"], m["OPTSW_HOLD_BUCKETS"])
    assert (layout.MAX_NODES, layout.ARCH_CFG_BYTES) == (m["OPTSW_MAX_NODES"], m["OPTSW_ARCH_CFG_BYTES"])


def test_test_run_context_offsets_are_the_objects_sk_buff(optsw):
    """trace_run reads cb[0] and tstamp out of the __sk_buff BPF_PROG_TEST_RUN returns."""
    assert bpf.SKB_CTX_SIZE == optsw.size("__sk_buff")
    assert bpf.SKB_CB_OFFSET == optsw.member("__sk_buff", "cb").offset
    assert bpf.SKB_TSTAMP_OFFSET == optsw.member("__sk_buff", "tstamp").offset


# ---- portstat (ebpf/portstat.h <-> testbed/bpf.py) ------------------------------------

def test_portstat_key_and_value_match(portstat):
    m = portstat.maps()["port_counters"]
    assert (m.key_type, m.value_type) == ("struct portstat_key", "struct portstat_value")
    assert mismatches(portstat, "portstat_key", bpf.PORTSTAT_KEY.pack(2**32 - 1, 513, 1, 0),
                      {"node": 2**32 - 1, "port": 513, "dir": 1}) == []
    assert tuple(m.name for m in portstat.members("portstat_value")) == bpf.PORTSTAT_VALUE_FIELDS
    key_vals = distinct_values(portstat, "portstat_key") | {"dir": 1, "pad": 0}
    vals = distinct_values(portstat, "portstat_value")
    row = bpf.parse_port_counter(portstat.encode("portstat_key", key_vals),
                                 portstat.encode("portstat_value", vals))
    assert row == {"node": key_vals["node"], "port": key_vals["port"], "dir": 1, "direction": "egress",
                   **{f: vals[f] for f in bpf.PORTSTAT_VALUE_FIELDS}}


def test_portstat_rodata_and_directions(portstat):
    rodata = portstat.rodata()
    for name, value in bpf._portstat_rodata(2**32 - 1, 2**16 - 1, "egress").items():
        assert name in rodata and value < 2 ** (8 * rodata[name]), name
    m = _macros(EBPF / "portstat.h")
    assert bpf.DIRECTIONS == {"ingress": m["PORTSTAT_DIR_INGRESS"], "egress": m["PORTSTAT_DIR_EGRESS"]}


# ---- tcp_rto (ebpf/tcp_rto.h <-> ebpf/sockops_load.c through its skeleton) -------------

def test_tcp_rto_stats_map_is_what_sockops_load_reads(tcp_rto):
    """sockops_load (no Python mirror) reads the counters as __u64 with __u32 keys; their
    number and the rodata go through tcp_rto.h and the generated skeleton, so the compiler
    checks those, not this test."""
    m = tcp_rto.maps()["tcp_rto_stats"]
    assert (m.key_type, m.value_type, m.key_size, m.value_size) == ("__u32", "__u64", 4, 8)
    assert set(tcp_rto.rodata()) == {"tb_netns_cookie", "tb_init_rto_jiffies", "tb_rto_min_us",
                                     "tb_delack_max_us", "tb_sndcwnd_clamp", "tb_pacing"}


def test_tcp_rto_pacing_cap_is_the_one_the_profile_records():
    """The SO_MAX_PACING_RATE the program sets (tcp_rto.h) is the value settings() records."""
    m = _macros(EBPF / "tcp_rto.h")
    assert m["TCP_RTO_MAX_PACING_RATE"] == sockops.MAX_PACING_RATE_BYTES_PER_S == 2**32 - 2


# ---- cwndtrace (ebpf/cwndtrace.h <-> testbed/cc/trace.py, through ebpf/cwndtrace's stream) ----

@pytest.fixture(scope="module")
def cwndtrace() -> Btf:
    return _object("cwndtrace")


def test_cwnd_event_is_what_the_tracer_parses(cwndtrace):
    from testbed.cc import trace

    assert cwndtrace.size("cwnd_event") == trace.EVENT.size
    vals = {k: v for k, v in distinct_values(cwndtrace, "cwnd_event").items() if not k.startswith("pad")}
    assert set(vals) == set(trace.EVENT_MEMBERS)
    got = dict(zip(trace.EVENT_MEMBERS, trace.EVENT.unpack(cwndtrace.encode("cwnd_event", vals))))
    assert got == vals


def test_cwnd_event_types_and_the_programs_maps_and_rodata(cwndtrace):
    from testbed.cc import trace

    types = cwndtrace.enum("cwnd_event_type")
    assert {types[f"CWND_EV_{n.upper()}"]: n for n in trace.EVENTS.values()} == trace.EVENTS
    assert (types["CWND_EV_LOST"], types["CWND_EV_READY"], types["CWND_EV_END"]) == (trace.EV_LOST, trace.EV_READY,
                                                                                      trace.EV_END)
    maps = cwndtrace.maps()
    assert maps["cwndtrace_lost"].value_size == 8 and "cwndtrace_events" in maps and "cwndtrace_seen" in maps
    assert set(cwndtrace.rodata()) == {"tb_netns", "tb_port", "tb_changes"}
