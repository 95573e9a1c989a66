"""The testbed's own qdiscs (``kernel/sch_*.c``) from Python: rtnetlink requests for a
device's root qdisc, and the kernel module that provides a qdisc.

``tc`` has no parser for these qdiscs' options or counters, so they travel through a
plain ``AF_NETLINK`` socket opened inside the device's namespace
(:func:`testbed.nsops.call_in`): ``TCA_KIND``, the packed ``TCA_OPTIONS`` and, in a
dump, ``TCA_STATS2`` with the qdisc's own ``TCA_STATS_APP``. The kernel's
extended-ack message is the error text. Used by ``testbed.optical.obsburst``,
``testbed.optical.hostnic``, ``testbed.optical.voq`` and ``testbed.optical.xcppace``;
each raises its own subclass of :class:`QdiscError`.

Each request without a session costs a thread that enters the namespace, a fresh
socket and an ifindex lookup. A :class:`Session` is one ``NETLINK_ROUTE`` socket made
inside the namespace once (a socket keeps the namespace it was made in) with the
devices' indexes cached: its requests run in the calling thread, no thread and no
setns(2) each (the XCP agent reads every edge's pacer once per control interval).
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from testbed import cmd
from testbed.cc.modules import KERNEL_DIR, MODULE, insert, refcount
from testbed.errors import CommandError, TestbedError
from testbed.ledger import Ledger
from testbed.nsops import NsOpsError, call_in
# the netlink framing is testbed.rtnl's; these names stay importable from here, where
# the qdisc modules (voq, xcppace) and their tests take them
from testbed.rtnl import (IFI, IFLA_IFNAME, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP,  # noqa: F401
                          NLM_F_REPLACE, RECV_BYTES, RTM_GETLINK, RTM_NEWLINK, attr, attrs, exchange,
                          find_attr, index_of, open_socket)
from testbed.rtnl import request as rtnl_request
from testbed.setns import NETNS_RUN_DIR

RTM_NEWQDISC, RTM_DELQDISC, RTM_GETQDISC = 36, 37, 38
TCA_KIND, TCA_OPTIONS, TCA_STATS2 = 1, 2, 7
TCA_STATS_BASIC, TCA_STATS_QUEUE, TCA_STATS_APP = 1, 3, 4
TC_H_ROOT = 0xFFFFFFFF
#: how long a session waits for each reply datagram (s) before it gives up
SESSION_TIMEOUT_S = 5.0
_TCM = struct.Struct("=BxxxiIII")


class QdiscError(TestbedError):
    """A request about one of the testbed's qdiscs failed; ``errno`` the kernel's code
    (0 when the failure is not the kernel's)."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.errno = code


def request(msg_type: int, flags: int, ifindex: int, payload: bytes = b"",
            error: type[QdiscError] = QdiscError, parent: int = TC_H_ROOT) -> list[tuple[int, bytes]]:
    """Send one rtnetlink request about the qdisc or classes under ``parent`` (the root
    qdisc unless given; 0: every qdisc of the device, as a class dump wants) of
    ``ifindex`` (in the calling thread's namespace) with the attributes ``payload``, on
    a fresh socket; returns the (type, payload) replies. Raises ``error`` with the
    kernel's message on a kernel error, or on a malformed reply (module docstring)."""
    return rtnl_request(msg_type, flags, _TCM.pack(socket.AF_UNSPEC, ifindex, 0, parent, 0) + payload, error)


def ifindex(dev: str, netns: str | None, error: type[QdiscError] = QdiscError) -> int:
    """The index of ``dev`` in the calling thread's namespace (named ``netns`` in the
    error). Raises ``error`` when there is no such device."""
    idx = index_of(dev)
    if idx is None:
        raise error(f"no interface {dev} in {netns or 'the root namespace'}")
    return idx


def _where(netns: str | None) -> str:
    return netns or "the root namespace"


def _netns_id(path: str) -> tuple[int, int] | None:
    """(device, inode) of the named namespace mounted at ``path``; None when gone."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def _own_netns_id() -> tuple[int, int]:
    """(device, inode) of the calling thread's network namespace."""
    st = os.stat("/proc/thread-self/ns/net")
    return st.st_dev, st.st_ino


class Session:
    """One NETLINK_ROUTE socket made inside network namespace ``netns`` (None: the root
    namespace) when the session opens, and the indexes of the devices asked about so
    far: requests run on it in the calling thread (no thread, no setns(2), no socket
    each). A context manager; :meth:`close` ends it. Not for several threads at once.

    Each request first checks that ``/run/netns/<netns>`` is still the namespace the
    socket was made in (the socket keeps that namespace and its devices alive after
    ``ip netns del``) and waits at most ``timeout_s`` (s) for each reply datagram.
    After a reply that failed that way (timeout, other sequence, truncated) the next
    request first drops whatever the socket still holds.

    Raises ``error`` (with the NsOpsError's text) when the namespace cannot be entered,
    OSError when the socket cannot be made."""

    def __init__(self, netns: str | None, timeout_s: float = SESSION_TIMEOUT_S,
                 error: type[QdiscError] = QdiscError) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be above 0 s, got {timeout_s}")
        self.netns = netns
        self.timeout_s = timeout_s
        self._ns_path = None if netns is None else str(NETNS_RUN_DIR / netns)
        self._index: dict[str, int] = {}
        self._seq = 0
        self._stale = False
        self._buf = bytearray(RECV_BYTES)

        def make() -> tuple[socket.socket, tuple[int, int]]:
            return open_socket(), _own_netns_id()
        try:
            sock, self._ns_id = call_in(netns, make)
        except NsOpsError as exc:
            raise error(f"netlink session: {exc}") from None
        sec = int(timeout_s)     # SO_RCVTIMEO, not settimeout(): no poll(2) before each receive
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("@ll", sec, int((timeout_s - sec) * 1e6)))
        self._sock: socket.socket | None = sock

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._sock is None

    def close(self) -> None:
        """Close the socket (idempotent); the namespace is no longer held by it."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def ifindex(self, dev: str, error: type[QdiscError] = QdiscError) -> int:
        """The index of ``dev`` in the session's namespace (looked up once with
        RTM_GETLINK, then cached). Raises ``error`` when there is no such device."""
        idx = self._index.get(dev)
        if idx is not None:
            return idx
        try:
            replies = self._send(RTM_GETLINK, NLM_F_ACK, IFI.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
                                 + attr(IFLA_IFNAME, dev.encode() + b"\0"), error, dev)
        except error as exc:
            if exc.errno == errno.ENODEV:
                raise error(f"no interface {dev} in {_where(self.netns)}", exc.errno) from None
            raise
        found = [IFI.unpack_from(p)[2] for m, p in replies if m == RTM_NEWLINK and len(p) >= IFI.size]
        if len(found) != 1:
            raise error(f"looking up {dev} in {_where(self.netns)}: {len(found)} links in the reply, expected 1")
        self._index[dev] = found[0]
        return found[0]

    def forget(self, dev: str) -> None:
        """Drop the cached index of ``dev`` (it was deleted, or may have been)."""
        self._index.pop(dev, None)

    def request(self, msg_type: int, flags: int, ifindex: int, payload: bytes = b"",
                error: type[QdiscError] = QdiscError, parent: int = TC_H_ROOT,
                dev: str | None = None) -> list[tuple[int, bytes]]:
        """:func:`request` on the session's socket (``dev``, the device's name, only for
        messages; its cached index is dropped when the kernel answers ENODEV). Raises
        ``error`` as :func:`request` does, and when the session is closed, its namespace
        is gone, or no reply came within ``timeout_s``."""
        try:
            return self._send(msg_type, flags, _TCM.pack(socket.AF_UNSPEC, ifindex, 0, parent, 0) + payload,
                              error, dev)
        except error as exc:
            if exc.errno == errno.ENODEV and dev is not None:
                self.forget(dev)
            raise

    def _send(self, msg_type: int, flags: int, body: bytes, error: type[QdiscError],
              dev: str | None) -> list[tuple[int, bytes]]:
        about = f" (about {dev})" if dev else ""
        if self._sock is None:
            raise error(f"the netlink session of {_where(self.netns)} is closed{about}")
        if self._ns_path is not None and _netns_id(self._ns_path) != self._ns_id:
            raise error(f"network namespace {self.netns} is gone (deleted, or another made under its name, "
                        f"since its netlink session opened){about}")
        if self._stale:
            self._drain()
        self._seq = self._seq % 0xFFFFFFFF + 1
        try:
            return exchange(self._sock, self._buf, self._seq, msg_type, flags, body, error)
        except (BlockingIOError, TimeoutError):
            self._stale = True
            raise error(f"no netlink reply within {self.timeout_s} s in {_where(self.netns)}{about}") from None
        except error as exc:
            if exc.errno == 0:          # not the kernel's answer: the rest of the reply may follow
                self._stale = True
            raise

    def _drain(self) -> None:
        """Drop the datagrams waiting on the socket (replies of a request given up)."""
        assert self._sock is not None
        while True:
            try:
                self._sock.recv_into(self._buf, 0, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                break
        self._stale = False


def _bound(session: Session, netns: str | None, error: type[QdiscError]) -> Session:
    """``session``, checked to be a session of ``netns``. Raises ``error``."""
    if session.netns != netns:
        raise error(f"a netlink session of {_where(session.netns)} cannot serve {_where(netns)}")
    return session


def device_request(dev: str, netns: str | None, msg_type: int, flags: int, payload: bytes = b"",
                   error: type[QdiscError] = QdiscError, session: Session | None = None,
                   parent: int = TC_H_ROOT) -> list[tuple[int, bytes]]:
    """:func:`request` about device ``dev`` of ``netns``: on ``session`` when given (a
    session of ``netns``), else in a thread inside ``netns`` on a fresh socket. Raises
    ``error`` (no such device, the kernel's error, a malformed reply, a session's
    failures); without a session NsOpsError when the namespace cannot be entered."""
    if session is not None:
        s = _bound(session, netns, error)
        return s.request(msg_type, flags, s.ifindex(dev, error), payload, error, parent, dev)
    return call_in(netns, lambda: request(msg_type, flags, ifindex(dev, netns, error), payload, error, parent))


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


def dump_root(dev: str, netns: str | None, kind: str, error: type[QdiscError] = QdiscError,
              session: Session | None = None) -> RootQdisc:
    """The root qdisc of ``dev`` in ``netns`` (on ``session`` when given). Raises
    ``error`` when it is not a ``kind`` qdisc."""
    return dump_roots([dev], netns, kind, error, session)[dev]


def dump_roots(devs: Sequence[str], netns: str | None, kind: str,
               error: type[QdiscError] = QdiscError, session: Session | None = None) -> dict[str, RootQdisc]:
    """{device: its root qdisc} for ``devs`` in ``netns``, from one dump of the
    namespace's qdiscs (a node's ports read at once), on ``session`` when given (a
    session of ``netns``). Raises ``error`` when a device does not exist or its root
    qdisc is not a ``kind`` qdisc (and as :meth:`Session.request` does)."""
    def body() -> tuple[dict[int, str], list[tuple[int, bytes]]]:
        index = {ifindex(dev, netns, error): dev for dev in devs}
        return index, [(m, p) for m, p in request(RTM_GETQDISC, NLM_F_DUMP, 0, error=error)
                       if _TCM.unpack_from(p)[1] in index]
    if session is None:
        index, replies = call_in(netns, body)
    else:
        s = _bound(session, netns, error)
        index = {s.ifindex(dev, error): dev for dev in devs}
        replies = [(m, p) for m, p in s.request(RTM_GETQDISC, NLM_F_DUMP, 0, error=error, dev=", ".join(devs))
                   if _TCM.unpack_from(p)[1] in index]
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
            if session is not None:
                session.forget(dev)     # perhaps deleted (and made again under another index)
            raise error(f"{dev} in {netns or 'the root namespace'} has no {kind} root qdisc")
    return out


def replace_root(dev: str, netns: str | None, kind: str, options: bytes | None,
                 error: type[QdiscError] = QdiscError, module: "QdiscModule | None" = None,
                 session: Session | None = None) -> None:
    """Make a ``kind`` qdisc with ``options`` (packed TCA_OPTIONS; None: none) the root
    qdisc of ``dev`` in ``netns`` (on ``session`` when given), replacing whatever is
    there. Raises ``error`` with the kernel's message (saying so when the kernel does
    not know ``kind`` because ``module`` is not loaded)."""
    payload = attr(TCA_KIND, kind.encode() + b"\0") + (b"" if options is None else attr(TCA_OPTIONS, options))
    try:
        device_request(dev, netns, RTM_NEWQDISC, NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE, payload, error, session)
    except error as exc:
        extra = ""
        if module is not None and exc.errno == errno.ENOENT and not module.loaded():
            extra = f" ({module.name} is not loaded: load it first)"
        raise error(f"installing {kind} on {dev} in {netns or 'the root namespace'}: {exc.args[0]}{extra}",
                    exc.errno) from None


def delete_root(dev: str, netns: str | None, error: type[QdiscError] = QdiscError,
                session: Session | None = None) -> None:
    """Delete the root qdisc of ``dev`` (the device falls back to its default; on
    ``session`` when given); nothing when there is none to delete."""
    try:
        device_request(dev, netns, RTM_DELQDISC, NLM_F_ACK, error=error, session=session)
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
