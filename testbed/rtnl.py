"""rtnetlink framing shared by the testbed's netlink users: attributes, a bound
``NETLINK_ROUTE`` socket in the calling thread's namespace, and one request/reply
exchange that turns the kernel's error (with its extended-ack text) into an exception.

Users: :mod:`testbed.nsops` (links, addresses, routes, neighbours) and
:mod:`testbed.optical.qdiscnl` (the testbed's own qdiscs). Each passes the exception
class it raises: called as ``error(message)`` or ``error(message, errno)``.
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Callable

NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_ACK, NLM_F_DUMP = 0x1, 0x4, 0x300
NLM_F_REPLACE, NLM_F_EXCL, NLM_F_CREATE, NLM_F_ACK_TLVS = 0x100, 0x200, 0x400, 0x200
NLA_F_NESTED = 0x8000
NLMSGERR_ATTR_MSG = 1
SOL_NETLINK, NETLINK_CAP_ACK, NETLINK_EXT_ACK = 270, 10, 11
#: the receive buffer (bytes): a dump datagram is at most 32 KiB (the kernel's cap on
#: one dump skb); a longer one is refused as truncated, never cut silently
RECV_BYTES = 1 << 16
_NLH = struct.Struct("=IHHII")
# links (include/uapi/linux/rtnetlink.h, if_link.h): both users look devices up
RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK = 16, 17, 18
IFLA_IFNAME = 3
#: struct ifinfomsg: family, type, index, flags, change
IFI = struct.Struct("=BxHiII")

#: how a caller's exception is made: ``error(message)`` or ``error(message, errno)``
ErrorFactory = Callable[..., Exception]


def attr(kind: int, payload: bytes) -> bytes:
    """One netlink attribute, padded to 4 bytes."""
    raw = struct.pack("=HH", 4 + len(payload), kind) + payload
    return raw + b"\0" * (-len(raw) % 4)


_ATTR = struct.Struct("=HH")


def attrs(data: bytes) -> dict[int, bytes]:
    """{attribute type (flags masked off): payload} of a run of netlink attributes."""
    out, off = {}, 0
    while off + 4 <= len(data):
        length, kind = struct.unpack_from("=HH", data, off)
        if length < 4:
            break
        out[kind & 0x3FFF] = data[off + 4:off + length]
        off += (length + 3) & ~3
    return out


def find_attr(data: bytes, kind: int, start: int = 0, end: int | None = None) -> bytes | None:
    """The payload of the first attribute of type ``kind`` (flags masked off) in the run
    of attributes ``data[start:end]``, None without one: :func:`attrs` for one attribute
    without building the others (the hot path of the per-interval class dumps)."""
    off, stop = start, len(data) if end is None else end
    while off + 4 <= stop:
        length, k = _ATTR.unpack_from(data, off)
        if length < 4:
            return None
        if k & 0x3FFF == kind:
            return data[off + 4:off + length]
        off += (length + 3) & ~3
    return None


def open_socket() -> socket.socket:
    """A bound NETLINK_ROUTE socket in the calling thread's namespace, the kernel's
    error text (extended ack) on, the request not echoed in errors."""
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, socket.NETLINK_ROUTE)
    try:
        s.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)
        s.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)
        s.bind((0, 0))
    except OSError:
        s.close()
        raise
    return s


def exchange(s: socket.socket, buf: bytearray, seq: int, msg_type: int, flags: int, body: bytes,
              error: ErrorFactory) -> list[tuple[int, bytes]]:
    """Send one request (``body`` after the netlink header, sequence ``seq``) on ``s``
    and read its replies into ``buf`` up to the end of a dump, the ack, or (neither
    asked for) the first datagram. Raises ``error``: the kernel's error (its message
    and errno), a reply of another sequence, a datagram longer than ``buf`` or a
    message cut short. A receive timeout of ``s`` surfaces as BlockingIOError or
    TimeoutError."""
    s.send(_NLH.pack(_NLH.size + len(body), msg_type, NLM_F_REQUEST | flags, seq, 0) + body)
    view = memoryview(buf)
    replies: list[tuple[int, bytes]] = []
    while True:
        n, _anc, rflags, _addr = s.recvmsg_into([buf])
        if rflags & socket.MSG_TRUNC:
            raise error(f"netlink reply truncated: a datagram longer than the {len(buf)}-byte buffer")
        off = 0
        while off + _NLH.size <= n:
            length, mtype, mflags, mseq, _pid = _NLH.unpack_from(buf, off)
            if length < _NLH.size or off + length > n:
                raise error(f"netlink reply truncated: a message of {length} bytes at byte {off} "
                            f"of a {n}-byte datagram")
            if mseq != seq:
                raise error(f"netlink reply of sequence {mseq} to request {seq}")
            msg = bytes(view[off + _NLH.size:off + length])
            off += (length + 3) & ~3
            if mtype == NLMSG_DONE:
                return replies
            if mtype == NLMSG_ERROR:
                if len(msg) < 4:
                    raise error(f"netlink error message truncated to {len(msg)} bytes")
                code = -struct.unpack_from("=i", msg)[0]
                if code == 0:
                    return replies
                text = ""
                if mflags & NLM_F_ACK_TLVS:
                    text = attrs(msg[4 + _NLH.size:]).get(NLMSGERR_ATTR_MSG, b"").rstrip(b"\0").decode(
                        errors="replace")
                raise error(f"{os.strerror(code)}" + (f": {text}" if text else ""), code)
            replies.append((mtype, msg))
        if off < n:
            raise error(f"netlink reply truncated: {n - off} bytes after the last whole message")
        if not flags & NLM_F_DUMP and not flags & NLM_F_ACK:
            return replies


def request(msg_type: int, flags: int, body: bytes, error: ErrorFactory) -> list[tuple[int, bytes]]:
    """:func:`exchange` of one request on a fresh socket of the calling thread's
    namespace (sequence 1); the (type, payload) replies. Raises ``error``."""
    with open_socket() as s:
        return exchange(s, bytearray(RECV_BYTES), 1, msg_type, flags, body, error)


def index_of(dev: str) -> int | None:
    """The index of device ``dev`` in the calling thread's namespace, None without one."""
    try:
        return socket.if_nametoindex(dev)
    except OSError:
        return None
