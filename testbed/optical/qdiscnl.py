"""The testbed's own qdiscs (``kernel/sch_*.c``) from Python: rtnetlink requests for a
device's root qdisc, and the kernel module that provides a qdisc.

``tc`` has no parser for these qdiscs' options or counters, so they travel through a
plain ``AF_NETLINK`` socket opened inside the device's namespace
(:func:`testbed.nsops.call_in`): ``TCA_KIND``, the packed ``TCA_OPTIONS`` and, in a
dump, ``TCA_STATS2`` with the qdisc's own ``TCA_STATS_APP``. The kernel's
extended-ack message is the error text. Used by ``testbed.optical.obsburst``,
``testbed.optical.hostnic`` and ``testbed.optical.voq``; each raises its own subclass of
:class:`QdiscError`.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from testbed import cmd
from testbed.cc.modules import KERNEL_DIR, MODULE, insert, refcount
from testbed.errors import CommandError, TestbedError
from testbed.ledger import Ledger
from testbed.nsops import call_in

RTM_NEWQDISC, RTM_DELQDISC, RTM_GETQDISC = 36, 37, 38
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_ACK, NLM_F_DUMP = 0x1, 0x4, 0x300
NLM_F_REPLACE, NLM_F_CREATE, NLM_F_ACK_TLVS = 0x100, 0x400, 0x200
TCA_KIND, TCA_OPTIONS, TCA_STATS2 = 1, 2, 7
TCA_STATS_BASIC, TCA_STATS_QUEUE, TCA_STATS_APP = 1, 3, 4
NLMSGERR_ATTR_MSG = 1
SOL_NETLINK, NETLINK_CAP_ACK, NETLINK_EXT_ACK = 270, 10, 11
TC_H_ROOT = 0xFFFFFFFF
_NLH = struct.Struct("=IHHII")
_TCM = struct.Struct("=BxxxiIII")


class QdiscError(TestbedError):
    """A request about one of the testbed's qdiscs failed; ``errno`` the kernel's code
    (0 when the failure is not the kernel's)."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.errno = code


def attr(kind: int, payload: bytes) -> bytes:
    """One netlink attribute, padded to 4 bytes."""
    raw = struct.pack("=HH", 4 + len(payload), kind) + payload
    return raw + b"\0" * (-len(raw) % 4)


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


def request(msg_type: int, flags: int, ifindex: int, payload: bytes = b"",
            error: type[QdiscError] = QdiscError) -> list[tuple[int, bytes]]:
    """Send one rtnetlink qdisc request about the root qdisc of ``ifindex`` (in the
    calling thread's namespace) with the attributes ``payload``; returns the (type,
    payload) replies. Raises ``error`` with the kernel's message on a kernel error."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, socket.NETLINK_ROUTE) as s:
        s.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)
        s.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)
        s.bind((0, 0))
        body = _TCM.pack(socket.AF_UNSPEC, ifindex, 0, TC_H_ROOT, 0) + payload
        s.send(_NLH.pack(_NLH.size + len(body), msg_type, NLM_F_REQUEST | flags, 1, 0) + body)
        replies: list[tuple[int, bytes]] = []
        while True:
            data = s.recv(1 << 20)
            off = 0
            while off + _NLH.size <= len(data):
                length, mtype, mflags, _seq, _pid = _NLH.unpack_from(data, off)
                msg = data[off + _NLH.size:off + length]
                off += (length + 3) & ~3
                if mtype == NLMSG_DONE:
                    return replies
                if mtype == NLMSG_ERROR:
                    code = -struct.unpack_from("=i", msg)[0]
                    if code == 0:
                        return replies
                    text = ""
                    if mflags & NLM_F_ACK_TLVS:
                        text = attrs(msg[4 + _NLH.size:]).get(NLMSGERR_ATTR_MSG, b"").rstrip(b"\0").decode(
                            errors="replace")
                    raise error(f"{os.strerror(code)}" + (f": {text}" if text else ""), code)
                replies.append((mtype, msg))
            if not flags & NLM_F_DUMP and not flags & NLM_F_ACK:
                return replies


def ifindex(dev: str, netns: str | None, error: type[QdiscError] = QdiscError) -> int:
    """The index of ``dev`` in the calling thread's namespace (named ``netns`` in the
    error). Raises ``error`` when there is no such device."""
    try:
        return socket.if_nametoindex(dev)
    except OSError:
        raise error(f"no interface {dev} in {netns or 'the root namespace'}") from None


@dataclass(frozen=True)
class RootQdisc:
    """A root qdisc as the kernel dumps it: its ``options`` (TCA_OPTIONS, empty when
    absent), its own counters ``app`` (TCA_STATS_APP), packets and bytes it released
    and packets it holds now."""

    kind: str
    options: bytes
    app: bytes
    packets: int
    bytes: int
    qlen: int


def dump_root(dev: str, netns: str | None, kind: str, error: type[QdiscError] = QdiscError) -> RootQdisc:
    """The root qdisc of ``dev`` in ``netns``. Raises ``error`` when it is not a
    ``kind`` qdisc."""
    return dump_roots([dev], netns, kind, error)[dev]


def dump_roots(devs: Sequence[str], netns: str | None, kind: str,
               error: type[QdiscError] = QdiscError) -> dict[str, RootQdisc]:
    """{device: its root qdisc} for ``devs`` in ``netns``, from one dump of the
    namespace's qdiscs (a node's ports read at once). Raises ``error`` when a device
    does not exist or its root qdisc is not a ``kind`` qdisc."""
    def body() -> tuple[dict[int, str], list[tuple[int, bytes]]]:
        index = {ifindex(dev, netns, error): dev for dev in devs}
        return index, [(m, p) for m, p in request(RTM_GETQDISC, NLM_F_DUMP, 0, error=error)
                       if _TCM.unpack_from(p)[1] in index]
    index, replies = call_in(netns, body)
    out: dict[str, RootQdisc] = {}
    for _mtype, msg in replies:
        _fam, idx, _handle, parent, _info = _TCM.unpack_from(msg)
        a = attrs(msg[_TCM.size:])
        if a.get(TCA_KIND, b"").rstrip(b"\0").decode() != kind or parent != TC_H_ROOT:
            continue
        s2 = attrs(a.get(TCA_STATS2, b""))
        nbytes, npk = struct.unpack_from("=QI", s2[TCA_STATS_BASIC]) if TCA_STATS_BASIC in s2 else (0, 0)
        qlen = struct.unpack_from("=I", s2[TCA_STATS_QUEUE])[0] if TCA_STATS_QUEUE in s2 else 0
        out[index[idx]] = RootQdisc(kind, a.get(TCA_OPTIONS, b""), s2.get(TCA_STATS_APP, b""), npk, nbytes, qlen)
    for dev in devs:
        if dev not in out:
            raise error(f"{dev} in {netns or 'the root namespace'} has no {kind} root qdisc")
    return out


def replace_root(dev: str, netns: str | None, kind: str, options: bytes | None,
                 error: type[QdiscError] = QdiscError, module: "QdiscModule | None" = None) -> None:
    """Make a ``kind`` qdisc with ``options`` (packed TCA_OPTIONS; None: none) the root
    qdisc of ``dev`` in ``netns``, replacing whatever is there. Raises ``error`` with
    the kernel's message (saying so when the kernel does not know ``kind`` because
    ``module`` is not loaded)."""
    payload = attr(TCA_KIND, kind.encode() + b"\0") + (b"" if options is None else attr(TCA_OPTIONS, options))

    def body() -> None:
        request(RTM_NEWQDISC, NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE, ifindex(dev, netns, error), payload, error)
    try:
        call_in(netns, body)
    except error as exc:
        extra = ""
        if module is not None and exc.errno == errno.ENOENT and not module.loaded():
            extra = f" ({module.name} is not loaded: load it first)"
        raise error(f"installing {kind} on {dev} in {netns or 'the root namespace'}: {exc.args[0]}{extra}",
                    exc.errno) from None


def delete_root(dev: str, netns: str | None, error: type[QdiscError] = QdiscError) -> None:
    """Delete the root qdisc of ``dev`` (the device falls back to its default); nothing
    when there is none to delete."""
    def body() -> None:
        request(RTM_DELQDISC, NLM_F_ACK, ifindex(dev, netns, error), error=error)
    try:
        call_in(netns, body)
    except error as exc:
        if exc.errno not in (errno.ENOENT, errno.EINVAL):
            raise error(f"removing the qdisc of {dev}: {exc.args[0]}", exc.errno) from None


@dataclass(frozen=True)
class QdiscModule:
    """The kernel module ``kernel/<name>.ko`` that provides one of the testbed's qdiscs
    (``kind``); errors are ``error``."""

    name: str
    kind: str
    error: type[QdiscError] = QdiscError

    def ko_path(self) -> Path:
        """The built module. Raises ``error`` when it is not built."""
        path = KERNEL_DIR / f"{self.name}.ko"
        if not path.exists():
            raise self.error(f"{path} is not built: run `make -C {KERNEL_DIR}` "
                             "(needs linux-headers-amd64 of the guest kernel)")
        return path

    def loaded(self) -> bool:
        return Path(f"/sys/module/{self.name}").exists()

    def load(self, ledger: Ledger) -> bool:
        """insmod the module unless loaded; True when this call loaded it (then recorded
        in ``ledger`` before loading, so teardown removes it). Raises ``error``."""
        if self.loaded():
            return False
        ko = self.ko_path()
        seq = ledger.add(MODULE, name=self.name)
        try:
            insert(["insmod", str(ko)], self.name, "testbed guest -- ...", self.error)
        except self.error:
            ledger.mark_gone(seq)
            raise
        return True

    def unload(self, ledger: Ledger) -> None:
        """rmmod the module this ``ledger`` loaded; refuses (raises ``error``, no rmmod)
        one it did not load or one still in use (a qdisc holds a reference)."""
        mine = [e for e in ledger.live() if e.resource == MODULE and e.attrs.get("name") == self.name]
        if not mine:
            raise self.error(f"{self.name} was not loaded by ledger {ledger.run_id}: not unloading it")
        count = refcount(self.name)
        if count is None:
            ledger.mark_gone(mine[-1].seq)
            return
        if count > 0:
            raise self.error(f"{self.name} is in use (reference count {count}: {self.kind} qdiscs exist); "
                             "remove them first")
        try:
            cmd.run(["rmmod", self.name], timeout=10)
        except CommandError as exc:
            raise self.error(f"rmmod {self.name} failed: {exc.stderr.strip()}") from None
        ledger.mark_gone(mine[-1].seq)
