"""Device features (offloads) through the ethtool ioctl, as ``ethtool -K`` sets them.

One job: turn off the features whose names start with given prefixes (TSO, GSO, GRO,
TX checksumming: :data:`testbed.nsops.OFFLOAD_PREFIXES`) on a device of the calling
thread's network namespace. The feature names come from the kernel
(``ETHTOOL_GSTRINGS`` of the ``ETH_SS_FEATURES`` set), so their bit positions are never
hard-coded here. Layouts: include/uapi/linux/ethtool.h.
"""

from __future__ import annotations

import ctypes
import fcntl
import socket
import struct

SIOCETHTOOL = 0x8946
ETHTOOL_GSTRINGS, ETHTOOL_GSSET_INFO = 0x1B, 0x37
ETHTOOL_GFEATURES, ETHTOOL_SFEATURES = 0x3A, 0x3B
ETH_SS_FEATURES = 4
ETH_GSTRING_LEN = 32
IFNAMSIZ = 16
#: struct ifreq: the name, then (in the union) the pointer to the ethtool command;
#: 40 bytes on 64-bit Linux
_IFREQ = struct.Struct(f"@{IFNAMSIZ}sP{40 - IFNAMSIZ - struct.calcsize('@P')}x")


def _ioctl(sock: socket.socket, dev: str, buf: ctypes.Array) -> None:
    """SIOCETHTOOL on ``dev`` with the command in ``buf`` (read and written in place).
    Raises OSError as the kernel refuses."""
    name = dev.encode()
    if not name or len(name) >= IFNAMSIZ:
        raise OSError(f"device name {dev!r} is not 1..{IFNAMSIZ - 1} bytes")
    fcntl.ioctl(sock.fileno(), SIOCETHTOOL, bytearray(_IFREQ.pack(name, ctypes.addressof(buf))))


def feature_names(sock: socket.socket, dev: str) -> list[str]:
    """The kernel's feature names of ``dev``, by bit position."""
    info = ctypes.create_string_buffer(struct.pack("=IIQI", ETHTOOL_GSSET_INFO, 0, 1 << ETH_SS_FEATURES, 0))
    _ioctl(sock, dev, info)
    count = struct.unpack_from("=I", info.raw, 16)[0]
    strings = ctypes.create_string_buffer(struct.pack("=III", ETHTOOL_GSTRINGS, ETH_SS_FEATURES, count)
                                          + bytes(count * ETH_GSTRING_LEN))
    _ioctl(sock, dev, strings)
    raw = strings.raw[12:12 + count * ETH_GSTRING_LEN]
    return [raw[i:i + ETH_GSTRING_LEN].split(b"\0", 1)[0].decode() for i in range(0, len(raw), ETH_GSTRING_LEN)]


def features_off(dev: str, prefixes: tuple[str, ...]) -> list[str]:
    """Turn off every feature of ``dev`` whose name starts with one of ``prefixes`` and
    that the device can change (ETHTOOL_SFEATURES); returns their names. Raises OSError
    when the device does not exist or the kernel refuses."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
        names = feature_names(sock, dev)
        blocks = (len(names) + 31) // 32
        got = ctypes.create_string_buffer(struct.pack("=II", ETHTOOL_GFEATURES, blocks) + bytes(16 * blocks))
        _ioctl(sock, dev, got)
        # per block of 32 features: available, requested, active, never_changed
        avail = [struct.unpack_from("=IIII", got.raw, 8 + 16 * b)[0] for b in range(blocks)]
        valid, chosen = [0] * blocks, []
        for bit, name in enumerate(names):
            if name.startswith(prefixes) and avail[bit // 32] >> (bit % 32) & 1:
                valid[bit // 32] |= 1 << (bit % 32)
                chosen.append(name)
        if chosen:
            # per block: valid (the bits to set), requested (their new value: 0, off)
            req = struct.pack("=II", ETHTOOL_SFEATURES, blocks) + b"".join(struct.pack("=II", v, 0) for v in valid)
            _ioctl(sock, dev, ctypes.create_string_buffer(req))
        return chosen
