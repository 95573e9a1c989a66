"""bpf(2) through ctypes (testbed/bpfsys.py) against this kernel: a real array map
created, pinned in a temporary directory of the bpf file system, written and read
back; and the XCP agent's reader (controllers/xcp_io.py) parsing an optsw_xcp_acc value
written by hand (the struct's bytes packed here, not with the layout it is parsed by)."""

from __future__ import annotations

import errno
import os
import struct
import uuid
from pathlib import Path

import pytest

from helpers import require_root
from testbed import bpfsys

BPFFS = Path("/sys/fs/bpf")
NODE_BYTES = 64 * 4 * 32          # struct optsw_xcp_node: slot[64 ports][4] of 32 B
NONE = 2**64 - 1


@pytest.fixture
def pin_dir():
    require_root()
    if not os.path.ismount(BPFFS):
        pytest.skip(f"no bpf file system mounted at {BPFFS}")
    d = BPFFS / f"tb-bpfsys-{uuid.uuid4().hex[:8]}"
    (d / "maps").mkdir(parents=True)
    try:
        yield d
    finally:
        for p in (d / "maps").iterdir():
            p.unlink()
        (d / "maps").rmdir()
        d.rmdir()


def _acc_map(pin_dir: Path) -> int:
    fd = bpfsys.map_create(bpfsys.BPF_MAP_TYPE_ARRAY, 4, NODE_BYTES, 8, name="optsw_xcp_acc")
    bpfsys.obj_pin(fd, pin_dir / "maps" / "optsw_xcp_acc")
    return fd


def _slot(value: bytearray, port: int, index: int, interval: int, nbytes: int, qmin: int, packets: int,
          drops: int) -> None:
    struct.pack_into("<QQQII", value, (port * 4 + index) * 32, interval, nbytes, qmin, packets, drops)


def test_a_pinned_array_map_is_written_and_read_back(pin_dir):
    fd = _acc_map(pin_dir)
    try:
        value = bytearray(os.urandom(NODE_BYTES))
        bpfsys.map_update(fd, struct.pack("<I", 2), bytes(value))
        with bpfsys.PinnedMap(pin_dir / "maps" / "optsw_xcp_acc", NODE_BYTES) as m:
            assert m.lookup(struct.pack("<I", 2)) == bytes(value)
            assert m.lookup(struct.pack("<I", 3)) == bytes(NODE_BYTES)   # an array's entries exist, zeroed
            assert m.lookup(struct.pack("<I", 8)) is None                # beyond max_entries
            value[100] ^= 0xFF
            bpfsys.map_update(fd, struct.pack("<I", 2), bytes(value))
            assert m.lookup(struct.pack("<I", 2)) == bytes(value)        # each lookup copies the value now
        with pytest.raises(bpfsys.BpfSyscallError) as err:
            bpfsys.map_update(fd, struct.pack("<I", 8), bytes(value))
        assert err.value.errno == errno.E2BIG
    finally:
        os.close(fd)


def test_nothing_pinned_is_enoent(pin_dir):
    with pytest.raises(bpfsys.BpfSyscallError) as err:
        bpfsys.obj_get(pin_dir / "maps" / "absent")
    assert err.value.errno == errno.ENOENT and "absent" in str(err.value)


def test_the_agent_reads_a_core_nodes_slots_from_the_pinned_map(pin_dir):
    from controllers.xcp_agent import (AgentConfig, CoreConfig, EdgeConfig, HopConfig, MacroflowConfig,
                                       OutputConfig, ReverseHopConfig)
    from controllers.xcp_io import XcpIo

    c0 = CoreConfig("c0", 2, (OutputConfig(1, 100e6, "o0", 0.0001), OutputConfig(5, 100e6, "i0", 0.0001)))
    i0 = EdgeConfig("i0", 0, "", "i0-eth0", 0, 100e6, "c0", 0.0001)
    mf = MacroflowConfig("i0-o0", 0, "i0", "o0", "data", (HopConfig("i0", 0), HopConfig("c0", 1)),
                         (ReverseHopConfig("o0", 0, "c0", 0.0001), ReverseHopConfig("c0", 5, "i0", 0.0001)), 20e6)
    cfg = AgentConfig(0, 20.0, (c0,), (i0,), (mf,), pin_dir=str(pin_dir))
    fd = _acc_map(pin_dir)
    try:
        value = bytearray(NODE_BYTES)
        _slot(value, 1, 0, 8, 15_000, 2_500, 10, 1)       # port 1: intervals 8 and 9
        _slot(value, 1, 1, 9, 3_000, NONE, 2, 0)
        _slot(value, 1, 2, NONE, 0, NONE, 0, 0)
        _slot(value, 5, 3, 7, 1_500, 0, 1, 0)             # port 5: interval 7
        _slot(value, 2, 0, 8, 9_999, 0, 9, 0)             # not a controlled port
        bpfsys.map_update(fd, struct.pack("<I", 2), bytes(value))
        io = XcpIo(cfg)
        try:
            got = io.read_core("c0")
        finally:
            io.close()
    finally:
        os.close(fd)
    assert sorted(got) == [1, 5]
    s = got[1]
    assert (s[0].interval, s[0].bytes, s[0].qmin_ns, s[0].packets, s[0].drops) == (8, 15_000, 2_500, 10, 1)
    assert (s[1].interval, s[1].bytes, s[1].qmin_ns, s[1].packets) == (9, 3_000, None, 2)
    assert s[2].interval is None and s[3].interval is None
    assert (got[5][3].interval, got[5][3].bytes, got[5][3].qmin_ns) == (7, 1_500, 0)
