"""``testbed.btf.kinds_named``: the header-only scan of a BTF blob (the bpf-struct-ops
feature probe's reader), against the full reader ``Btf.from_bytes`` and hand-built blobs."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from testbed import features
from testbed.btf import Btf, BtfError, elf_section, kinds_named

ROOT = Path(__file__).resolve().parents[2]
OBJECTS = sorted((ROOT / "ebpf").glob("*.bpf.o"))
VMLINUX = Path("/sys/kernel/btf/vmlinux")


def _blob(types: list[bytes], strings: bytes) -> bytes:
    """A BTF blob: header (24 bytes), then the type section, then the strings."""
    tsec = b"".join(types)
    return struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(tsec), len(tsec), len(strings)) + tsec + strings


def _info(kind: int, vlen: int = 0) -> int:
    return (kind << 24) | vlen


# strings: 0 "", 1 "int", 5 "xfoo" (so 6 is "foo", a suffix), 10 "a", 12 "b", 14 "foo"
STRINGS = b"\0int\0xfoo\0a\0b\0foo\0"
INT = struct.pack("<III", 1, _info(1), 4) + struct.pack("<I", 32)
STRUCT_FOO = struct.pack("<III", 6, _info(4, 2), 8) + struct.pack("<III", 10, 1, 0) + struct.pack("<III", 12, 1, 32)
FWD_FOO = struct.pack("<III", 14, _info(7), 0)
ENUM_XFOO = struct.pack("<III", 5, _info(6, 1), 4) + struct.pack("<Ii", 10, 3)


def test_finds_every_type_of_a_name_in_id_order():
    raw = _blob([INT, STRUCT_FOO, ENUM_XFOO, FWD_FOO], STRINGS)
    assert kinds_named(raw, "foo") == ["STRUCT", "FWD"]  # at offset 6 (a suffix of "xfoo") and 14
    assert kinds_named(raw, "xfoo") == ["ENUM"]
    assert kinds_named(raw, "int") == ["INT"]
    assert kinds_named(raw, "a") == []  # a member's name, not a type's
    assert kinds_named(raw, "absent") == []
    full = Btf.from_bytes(raw)
    assert [t.kind for t in full.types[1:] if t.name == "foo"] == ["STRUCT", "FWD"]


def test_a_broken_blob_is_an_error_not_an_answer():
    good = _blob([INT, STRUCT_FOO], STRINGS)
    with pytest.raises(BtfError, match="magic"):
        kinds_named(b"\x00\x00" + good[2:], "foo")
    # the struct says 2 members, the section holds one: it ends off a type boundary
    cut = _blob([INT, STRUCT_FOO[:-12]], STRINGS)
    with pytest.raises(BtfError, match="type boundary|truncated"):
        kinds_named(cut, "foo")
    unknown = _blob([struct.pack("<III", 6, _info(31), 0)], STRINGS)
    with pytest.raises(BtfError, match="unknown BTF kind 31"):
        kinds_named(unknown, "foo")


@pytest.mark.parametrize("obj", OBJECTS, ids=lambda p: p.name)
def test_agrees_with_the_full_reader_on_every_name_of_our_objects(obj):
    raw = elf_section(obj.read_bytes(), ".BTF")
    full = Btf.from_bytes(raw)
    names = {t.name for t in full.types[1:] if t is not None and t.name}
    assert names, f"{obj.name} has no named types"
    for name in names:
        assert kinds_named(raw, name) == [t.kind for t in full.types[1:] if t.name == name], name


@pytest.mark.skipif(not VMLINUX.is_file(), reason="this kernel exposes no /sys/kernel/btf/vmlinux")
def test_agrees_with_the_full_reader_on_the_kernels_btf():
    raw = VMLINUX.read_bytes()
    full = Btf.from_bytes(raw)
    for name in ("sock", "tcp_congestion_ops", "sk_buff", features.STRUCT_OPS_TYPE, "u32", "pt_regs"):
        assert kinds_named(raw, name) == [t.kind for t in full.types[1:] if t.name == name], name


def test_struct_ops_probe_reads_the_blob_it_is_given(tmp_path, monkeypatch):
    with_type = _blob([STRUCT_FOO], STRINGS)
    without = _blob([INT], STRINGS)
    f = tmp_path / "vmlinux"
    monkeypatch.setattr(features, "VMLINUX_BTF", f)
    monkeypatch.setattr(features, "STRUCT_OPS_TYPE", "foo")
    probe = features.probe_bpf_struct_ops()
    assert not probe.ok and "missing" in probe.detail
    f.write_bytes(without)
    probe = features.probe_bpf_struct_ops()
    assert not probe.ok and "no STRUCT 'foo'" in probe.detail
    f.write_bytes(with_type)
    assert features.probe_bpf_struct_ops().ok
    f.write_bytes(b"\x00" * 32)
    probe = features.probe_bpf_struct_ops()
    assert not probe.ok and "magic" in probe.detail
