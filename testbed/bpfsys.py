"""The few bpf(2) commands a long-running process needs to read pinned maps itself,
through ctypes: no loader process per read (``testbed.bpf`` starts ``tbload``, ~0.3 s
in the guest), no library.

    with PinnedMap(pin_dir / "maps" / "optsw_xcp_acc", value_size=8192) as acc:
        raw = acc.lookup(struct.pack("<I", node_id))     # bytes, or None: no entry

Commands: BPF_MAP_CREATE, BPF_MAP_LOOKUP_ELEM, BPF_MAP_UPDATE_ELEM, BPF_OBJ_PIN,
BPF_OBJ_GET (``union bpf_attr`` as include/uapi/linux/bpf.h lays it out; the unused
tail of the attribute is zero, which the kernel checks). System call numbers for x86-64
(321) and aarch64 (280). Keys and values are raw bytes in host byte order, as the
layouts in ``testbed.optical.layout`` pack them. A lookup copies the value (no lock
with the BPF programs: a map without ``bpf_spin_lock``).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from pathlib import Path

#: bpf(2) system call numbers by machine
SYSCALL_NR = {"x86_64": 321, "aarch64": 280}
BPF_MAP_CREATE, BPF_MAP_LOOKUP_ELEM, BPF_MAP_UPDATE_ELEM = 0, 1, 2
BPF_OBJ_PIN, BPF_OBJ_GET = 6, 7
BPF_MAP_TYPE_HASH, BPF_MAP_TYPE_ARRAY = 1, 2
BPF_ANY, BPF_NOEXIST, BPF_EXIST = 0, 1, 2
#: file_flags of BPF_OBJ_GET
BPF_F_RDONLY, BPF_F_WRONLY = 1 << 3, 1 << 4
#: bytes of the bpf_attr passed (zero beyond the members a command uses)
ATTR_SIZE = 128
BPF_OBJ_NAME_LEN = 16

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_syscall.argtypes = (ctypes.c_long, ctypes.c_int, ctypes.c_void_p, ctypes.c_uint)


class BpfSyscallError(OSError):
    """A bpf(2) command failed: names the command and what it acted on, with errno."""


def _nr() -> int:
    machine = platform.machine()
    if machine not in SYSCALL_NR:
        raise BpfSyscallError(errno.ENOSYS, f"bpf(2): no system call number known for machine {machine!r} "
                                            f"(known: {', '.join(SYSCALL_NR)})")
    return SYSCALL_NR[machine]


def bpf(cmd: int, attr: ctypes.Array, what: str) -> int:
    """bpf(``cmd``, ``attr``); its non-negative result. Raises BpfSyscallError (errno,
    ``what`` in the message) when it fails."""
    res = _syscall(_nr(), cmd, ctypes.addressof(attr), ctypes.sizeof(attr))
    if res < 0:
        err = ctypes.get_errno()
        raise BpfSyscallError(err, f"bpf({what}): {os.strerror(err)}")
    return int(res)


def _attr(fmt: str, *values: object) -> ctypes.Array:
    buf = ctypes.create_string_buffer(ATTR_SIZE)
    struct.pack_into(fmt, buf, 0, *values)
    return buf


def map_create(map_type: int, key_size: int, value_size: int, max_entries: int, *, flags: int = 0,
               name: str = "") -> int:
    """A new map's file descriptor (the caller closes it). ``name`` at most 15 ASCII
    characters. Raises ValueError for a longer name, BpfSyscallError when the kernel
    refuses (EPERM without CAP_BPF, EINVAL for sizes it does not accept)."""
    raw = name.encode()
    if len(raw) >= BPF_OBJ_NAME_LEN:
        raise ValueError(f"map name {name!r}: accepted at most {BPF_OBJ_NAME_LEN - 1} bytes")
    # map_type, key_size, value_size, max_entries, map_flags, inner_map_fd, numa_node, map_name[16]
    attr = _attr("=IIIIIII16s", map_type, key_size, value_size, max_entries, flags, 0, 0, raw)
    return bpf(BPF_MAP_CREATE, attr, f"MAP_CREATE type {map_type} key {key_size} value {value_size} "
                                     f"entries {max_entries}")


def obj_pin(fd: int, path: Path | str) -> None:
    """Pin the object of ``fd`` at ``path`` (on a bpf file system). Raises
    BpfSyscallError (EEXIST: something is pinned there; EPERM; ...)."""
    p = ctypes.create_string_buffer(os.fsencode(str(path)))
    bpf(BPF_OBJ_PIN, _attr("=QII", ctypes.addressof(p), fd, 0), f"OBJ_PIN {path}")


def obj_get(path: Path | str, *, read_only: bool = False) -> int:
    """A file descriptor of the object pinned at ``path`` (the caller closes it).
    Raises BpfSyscallError (ENOENT: nothing pinned there)."""
    p = ctypes.create_string_buffer(os.fsencode(str(path)))
    return bpf(BPF_OBJ_GET, _attr("=QII", ctypes.addressof(p), 0, BPF_F_RDONLY if read_only else 0),
               f"OBJ_GET {path}")


def map_lookup(fd: int, key: bytes, value: ctypes.Array) -> bool:
    """Copy the value of ``key`` into ``value`` (a buffer of the map's value size);
    False when the map has no such key. Raises BpfSyscallError otherwise."""
    k = ctypes.create_string_buffer(key, len(key))
    # map_fd, pad, key, value, flags
    attr = _attr("=IIQQQ", fd, 0, ctypes.addressof(k), ctypes.addressof(value), 0)
    try:
        bpf(BPF_MAP_LOOKUP_ELEM, attr, f"MAP_LOOKUP_ELEM fd {fd}")
    except BpfSyscallError as exc:
        if exc.errno == errno.ENOENT:
            return False
        raise
    return True


def map_update(fd: int, key: bytes, value: bytes, flags: int = BPF_ANY) -> None:
    """Set ``key`` to ``value``. Raises BpfSyscallError (E2BIG: beyond an array's
    entries; EEXIST / ENOENT with BPF_NOEXIST / BPF_EXIST)."""
    k = ctypes.create_string_buffer(key, len(key))
    v = ctypes.create_string_buffer(value, len(value))
    attr = _attr("=IIQQQ", fd, 0, ctypes.addressof(k), ctypes.addressof(v), flags)
    bpf(BPF_MAP_UPDATE_ELEM, attr, f"MAP_UPDATE_ELEM fd {fd}")


class PinnedMap:
    """A pinned map opened once (BPF_OBJ_GET) and read by key with one reused value
    buffer of ``value_size`` bytes. Raises BpfSyscallError when nothing is pinned at
    ``path`` and ValueError for value_size < 1."""

    def __init__(self, path: Path | str, value_size: int, *, read_only: bool = True) -> None:
        if value_size < 1:
            raise ValueError(f"value_size={value_size!r}: accepted >= 1 (bytes)")
        self.path = Path(path)
        self.fd: int | None = obj_get(path, read_only=read_only)
        self._value = ctypes.create_string_buffer(value_size)

    def lookup(self, key: bytes) -> bytes | None:
        """The value of ``key`` (a copy), None when there is none. Raises
        BpfSyscallError, or ValueError after close()."""
        if self.fd is None:
            raise ValueError(f"map {self.path} is closed")
        return self._value.raw if map_lookup(self.fd, key, self._value) else None

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> "PinnedMap":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
