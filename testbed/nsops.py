"""In-process operations inside network namespaces: links, addresses, sysctls.

Building a k = 4 fat-tree took ~1700 ``ip``/``tc``/``sysctl`` processes; under software
emulation (TCG) each costs ~0.3 s, so set-up and teardown took minutes. Here a short
thread enters the namespace with setns(2) (which moves only the calling thread) and
talks rtnetlink (:mod:`testbed.rtnl`), the ethtool ioctl (:mod:`testbed.ethtool`) and
/proc/sys from there: sockets and /proc/sys/net files opened by that thread belong to
the namespace. (pyroute2 did the netlink part until 2026-11-29: its import cost 13-40 s
of wall time per process in the TCG guest and each request ~1 s there, a fresh
``IPRoute`` with its own event loop each.)

``netns=None`` means the root namespace (no setns). Every function raises NsOpsError
naming the namespace and the operation when the kernel refuses.
"""

from __future__ import annotations

import ctypes
import errno
import ipaddress
import os
import signal
import socket
import struct
import threading
from pathlib import Path
from typing import Callable, TypeVar

from testbed import cmd, ethtool, rtnl, setns
from testbed.errors import TestbedError
from testbed.ledger import Entry, Ledger, register
from testbed.process import kill_process
from testbed.setns import NETNS_RUN_DIR

T = TypeVar("T")

MNT_DETACH = 2
#: features `ethtool -K DEV tso off gso off gro off tx off` turns off (name prefixes)
OFFLOAD_PREFIXES = ("tx-checksum-", "tx-tcp", "tx-generic-segmentation", "rx-gro")


class NsOpsError(TestbedError):
    """A namespace operation failed (message names namespace, device and operation)."""


def call_in(netns: str | None, fn: Callable[[], T]) -> T:
    """Run ``fn()`` in a thread inside network namespace ``netns``; return its result.

    Raises NsOpsError when the namespace cannot be entered; ``fn``'s own exceptions
    propagate unchanged."""
    if netns is None:
        return fn()
    box: dict[str, object] = {}

    def body() -> None:
        try:
            fd = setns.open_named(netns)
        except OSError as exc:
            box["error"] = NsOpsError(f"network namespace {netns}: {exc.strerror}")
            return
        try:
            setns.switch(fd)  # for good: this thread ends with fn
        except OSError as exc:
            box["error"] = NsOpsError(f"setns into {netns}: {exc.strerror}")
            return
        finally:
            os.close(fd)
        try:
            box["result"] = fn()
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    t = threading.Thread(target=body, name=f"netns-{netns}")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box.get("result")  # type: ignore[return-value]


class _KernelRefused(NsOpsError):
    """The kernel's netlink error (``errno``), before it is named with its operation."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.errno = code


# rtnetlink message types and attributes (include/uapi/linux/rtnetlink.h, if_link.h,
# if_addr.h, neighbour.h, veth.h)
RTM_NEWADDR, RTM_NEWROUTE = 20, 24
RTM_NEWNEIGH, RTM_DELNEIGH, RTM_GETNEIGH = 28, 29, 30
IFLA_ADDRESS, IFLA_MTU, IFLA_LINKINFO, IFLA_STATS64, IFLA_NET_NS_FD = 1, 4, 18, 23, 28
IFLA_INFO_KIND, IFLA_INFO_DATA, VETH_INFO_PEER = 1, 2, 1
IFA_ADDRESS, IFA_LOCAL = 1, 2
RTA_DST, RTA_OIF, RTA_GATEWAY = 1, 4, 5
NDA_DST, NDA_LLADDR = 1, 2
IFF_UP, IFF_NOARP = 0x1, 0x80
RT_TABLE_MAIN, RTPROT_STATIC, RT_SCOPE_UNIVERSE, RTN_UNICAST = 254, 4, 0, 1
#: neighbour states (include/uapi/linux/neighbour.h): never expires nor is probed; no ARP
NUD_PERMANENT, NUD_NOARP = 0x80, 0x40
_IFA = struct.Struct("=BBBBi")       # ifaddrmsg: family, prefixlen, flags, scope, index
_RTM = struct.Struct("=BBBBBBBBI")   # rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags
_NDM = struct.Struct("=BxxxiHBB")    # ndmsg: family, ifindex, state, flags, type


def _netlink(netns: str | None, what: str, fn: Callable[[], T]) -> T:
    """``fn()`` in a thread of ``netns`` (its netlink sockets are that namespace's); the
    kernel's refusal becomes NsOpsError naming ``what`` and the namespace."""
    def body() -> T:
        try:
            return fn()
        except _KernelRefused as exc:
            raise NsOpsError(f"{what} in {netns or 'the root namespace'}: {exc}") from None
    return call_in(netns, body)


def _request(msg_type: int, flags: int, body: bytes) -> list[tuple[int, bytes]]:
    """One rtnetlink request on a fresh socket of the calling thread's namespace (with
    an ack unless it is a dump); the (type, payload) replies. Raises _KernelRefused."""
    ack = 0 if flags & rtnl.NLM_F_DUMP == rtnl.NLM_F_DUMP else rtnl.NLM_F_ACK
    return rtnl.request(msg_type, flags | ack, body, _KernelRefused)


def _existing_index(name: str, netns: str | None) -> int:
    idx = rtnl.index_of(name)
    if idx is None:
        raise NsOpsError(f"no interface {name} in {netns or 'the root namespace'}")
    return idx


def _set_link(idx: int, flags: int = 0, change: int = 0, attributes: bytes = b"") -> None:
    _request(rtnl.RTM_NEWLINK, 0, rtnl.IFI.pack(socket.AF_UNSPEC, 0, idx, flags, change) + attributes)


def _mac_bytes(mac: str) -> bytes:
    try:
        raw = bytes(int(x, 16) for x in mac.split(":"))
    except ValueError:
        raw = b""
    if len(raw) != 6:
        raise NsOpsError(f"MAC address {mac!r} is not six hexadecimal bytes like 02:00:00:00:00:01")
    return raw


def _inet(address: str) -> tuple[int, bytes]:
    """(address family, packed bytes) of an IPv4 or IPv6 address."""
    ip = ipaddress.ip_address(address)
    return (socket.AF_INET if ip.version == 4 else socket.AF_INET6), ip.packed


def link_exists(name: str, netns: str | None = None) -> bool:
    """True when device ``name`` exists in ``netns`` (False when the namespace is gone)."""
    if netns is not None and not (NETNS_RUN_DIR / netns).exists():
        return False
    return call_in(netns, lambda: rtnl.index_of(name) is not None)


def add_veth(name_a: str, netns_a: str | None, name_b: str, netns_b: str | None) -> None:
    """Create veth pair ``name_a`` (in ``netns_a``) -- ``name_b`` (in ``netns_b``).

    Raises NsOpsError when either name exists (nothing is then touched)."""
    if link_exists(name_b, netns_b):
        raise NsOpsError(f"interface {name_b} already exists in {netns_b or 'the root namespace'}; "
                         "not touching it")
    # the peer's namespace as a descriptor opened here: the caller's own namespace when
    # netns_b is None (the thread making the pair is in netns_a)
    if netns_b is None:
        peer_fd = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC) if netns_a is not None else None
    else:
        try:
            peer_fd = setns.open_named(netns_b)
        except OSError as exc:
            raise NsOpsError(f"network namespace {netns_b}: {exc.strerror}") from None

    def make() -> None:
        if rtnl.index_of(name_a) is not None:
            raise NsOpsError(f"interface {name_a} already exists in {netns_a or 'the root namespace'}; "
                             "not touching it")
        peer = rtnl.IFI.pack(socket.AF_UNSPEC, 0, 0, 0, 0) + rtnl.attr(rtnl.IFLA_IFNAME, name_b.encode() + b"\0")
        if peer_fd is not None:
            peer += rtnl.attr(IFLA_NET_NS_FD, struct.pack("=I", peer_fd))
        info = (rtnl.attr(IFLA_INFO_KIND, b"veth\0")
                + rtnl.attr(IFLA_INFO_DATA | rtnl.NLA_F_NESTED, rtnl.attr(VETH_INFO_PEER, peer)))
        _request(rtnl.RTM_NEWLINK, rtnl.NLM_F_CREATE | rtnl.NLM_F_EXCL,
                 rtnl.IFI.pack(socket.AF_UNSPEC, 0, 0, 0, 0) + rtnl.attr(rtnl.IFLA_IFNAME, name_a.encode() + b"\0")
                 + rtnl.attr(IFLA_LINKINFO | rtnl.NLA_F_NESTED, info))
    try:
        _netlink(netns_a, f"create veth {name_a}--{name_b}", make)
    finally:
        if peer_fd is not None:
            os.close(peer_fd)


def configure_link(name: str, netns: str | None, *, mtu: int | None = None, offloads: bool = True,
                   address: str | None = None, arp: bool | None = None, up: bool | None = True) -> None:
    """Set MTU (bytes), MAC ``address``, ARP, offloads (False = TSO, GSO, GRO and TX
    checksumming off, as ``ethtool -K``), then set ``name`` up (True), down (False) or
    leave its state (None)."""
    mac = _mac_bytes(address) if address is not None else None

    def body() -> None:
        idx = _existing_index(name, netns)
        attributes = b""
        if mtu is not None:
            attributes += rtnl.attr(IFLA_MTU, struct.pack("=I", int(mtu)))
        if mac is not None:
            attributes += rtnl.attr(IFLA_ADDRESS, mac)
        if attributes or arp is not None:   # ARP: IFF_NOARP changed (set when arp is False)
            _set_link(idx, IFF_NOARP if arp is False else 0, 0 if arp is None else IFF_NOARP, attributes)
        if not offloads:
            try:
                ethtool.features_off(name, OFFLOAD_PREFIXES)
            except OSError as exc:
                raise NsOpsError(f"turn offloads off on {name} in {netns or 'the root namespace'}: "
                                 f"{exc.strerror or exc}") from None
        if up is not None:
            _set_link(idx, IFF_UP if up else 0, IFF_UP)
    _netlink(netns, f"configure {name}", body)


def add_address(name: str, netns: str | None, cidr: str) -> None:
    """Add IPv4/IPv6 address ``cidr`` ("10.0.0.1/8") to ``name``."""
    addr, _, plen = cidr.partition("/")
    family, raw = _inet(addr)

    def body() -> None:
        idx = _existing_index(name, netns)
        prefix = int(plen) if plen else 8 * len(raw)
        _request(RTM_NEWADDR, rtnl.NLM_F_CREATE | rtnl.NLM_F_EXCL,
                 _IFA.pack(family, prefix, 0, RT_SCOPE_UNIVERSE, idx)
                 + rtnl.attr(IFA_LOCAL, raw) + rtnl.attr(IFA_ADDRESS, raw))
    _netlink(netns, f"add address {cidr} to {name}", body)


def _replace_route(dst: str, oif: str | None, via: str | None, netns: str | None) -> None:
    """RTM_NEWROUTE with NLM_F_REPLACE (atomic for packets being forwarded) in the main
    table, protocol static, scope universe: ``dst`` (a prefix) out of device ``oif``
    and/or through gateway ``via``."""
    net = ipaddress.ip_network(dst, strict=False)
    family = socket.AF_INET if net.version == 4 else socket.AF_INET6
    body = b""
    if net.prefixlen:
        body += rtnl.attr(RTA_DST, net.network_address.packed)
    if oif is not None:
        body += rtnl.attr(RTA_OIF, struct.pack("=I", _existing_index(oif, netns)))
    if via is not None:
        body += rtnl.attr(RTA_GATEWAY, _inet(via)[1])
    _request(RTM_NEWROUTE, rtnl.NLM_F_CREATE | rtnl.NLM_F_REPLACE,
             _RTM.pack(family, net.prefixlen, 0, 0, RT_TABLE_MAIN, RTPROT_STATIC, RT_SCOPE_UNIVERSE,
                       RTN_UNICAST, 0) + body)


def set_default_route(name: str, netns: str | None, via: str | None = None) -> None:
    """Default route out of ``name`` (replacing any): on-link, or through gateway ``via``."""
    _netlink(netns, f"default route out of {name}{' via ' + via if via else ''}",
             lambda: _replace_route("0.0.0.0/0", name, via, netns))


def replace_route(netns: str | None, prefix: str, via: str) -> None:
    """Route ``prefix`` ("10.0.2.0/24") through next hop ``via``, replacing any route to
    it (one RTM_NEWROUTE with NLM_F_REPLACE: atomic for packets being forwarded)."""
    _netlink(netns, f"route {prefix} via {via}", lambda: _replace_route(prefix, None, via, netns))


def _link_attrs(name: str, netns: str | None, what: str) -> dict[int, bytes]:
    """The netlink attributes of interface ``name``; NsOpsError naming ``what`` when
    there is no such interface."""
    def body() -> dict[int, bytes]:
        idx = _existing_index(name, netns)
        for mtype, msg in _request(rtnl.RTM_GETLINK, 0, rtnl.IFI.pack(socket.AF_UNSPEC, 0, idx, 0, 0)):
            if mtype == rtnl.RTM_NEWLINK and len(msg) >= rtnl.IFI.size and rtnl.IFI.unpack_from(msg)[2] == idx:
                return rtnl.attrs(msg[rtnl.IFI.size:])
        raise NsOpsError(f"no link message for {name} in {netns or 'the root namespace'}")
    return _netlink(netns, f"read the {what} of {name}", body)


def link_address(name: str, netns: str | None) -> str:
    """The MAC address of ``name``."""
    return ":".join(f"{b:02x}" for b in _link_attrs(name, netns, "address").get(IFLA_ADDRESS, b""))


#: the first fields of struct rtnl_link_stats64 (include/uapi/linux/if_link.h), all u64
LINK_COUNTERS = ("rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "rx_errors", "tx_errors", "rx_dropped",
                 "tx_dropped")


def link_counters(name: str, netns: str | None) -> dict[str, int]:
    """The kernel's packet and byte counters of ``name`` (:data:`LINK_COUNTERS`, from its
    IFLA_STATS64), as ``ip -s link`` shows them. Raises NsOpsError when there is no such
    interface or the kernel sent no 64-bit counters."""
    raw = _link_attrs(name, netns, "counters").get(IFLA_STATS64, b"")
    if len(raw) < 8 * len(LINK_COUNTERS):
        raise NsOpsError(f"no 64-bit counters in the link message of {name} in {netns or 'the root namespace'}")
    return dict(zip(LINK_COUNTERS, struct.unpack_from(f"={len(LINK_COUNTERS)}Q", raw)))


def add_neighbour(name: str, netns: str | None, ip: str, mac: str) -> None:
    """A permanent neighbour entry: ``ip`` is at ``mac`` on ``name`` (replacing any)."""
    family, raw = _inet(ip)
    lladdr = _mac_bytes(mac)

    def body() -> None:
        _request(RTM_NEWNEIGH, rtnl.NLM_F_CREATE | rtnl.NLM_F_REPLACE,
                 _NDM.pack(family, _existing_index(name, netns), NUD_PERMANENT, 0, 0)
                 + rtnl.attr(NDA_DST, raw) + rtnl.attr(NDA_LLADDR, lladdr))
    _netlink(netns, f"neighbour {ip} at {mac} on {name}", body)


def link_mtu(name: str, netns: str | None) -> int:
    """MTU of ``name`` in bytes."""
    raw = _link_attrs(name, netns, "MTU").get(IFLA_MTU, b"")
    if len(raw) != 4:
        raise NsOpsError(f"no MTU in the link message of {name} in {netns or 'the root namespace'}")
    return struct.unpack("=I", raw)[0]


def flush_neighbours(netns: str | None) -> int:
    """Delete every IPv4 neighbour (ARP) entry of ``netns`` except permanent ones, as
    ``ip neigh flush all`` does; returns how many were deleted."""
    def body() -> int:
        n = 0
        for mtype, msg in _request(RTM_GETNEIGH, rtnl.NLM_F_DUMP, _NDM.pack(socket.AF_INET, 0, 0, 0, 0)):
            if mtype != RTM_NEWNEIGH or len(msg) < _NDM.size:
                continue
            family, ifindex, state, _flags, _type = _NDM.unpack_from(msg)
            dst = rtnl.attrs(msg[_NDM.size:]).get(NDA_DST)
            if family != socket.AF_INET or state & (NUD_PERMANENT | NUD_NOARP) or dst is None:
                continue
            try:
                _request(RTM_DELNEIGH, 0, _NDM.pack(socket.AF_INET, ifindex, 0, 0, 0) + rtnl.attr(NDA_DST, dst))
            except _KernelRefused as exc:
                if exc.errno != errno.ENOENT:  # gone meanwhile: nothing to flush
                    raise
                continue
            n += 1
        return n
    return _netlink(netns, "flush the neighbour table", body)


def delete_link(name: str, netns: str | None) -> None:
    """Delete ``name`` if it exists (a veth takes its peer with it)."""
    def body() -> None:
        idx = rtnl.index_of(name)
        if idx is not None:
            try:
                _request(rtnl.RTM_DELLINK, 0, rtnl.IFI.pack(socket.AF_UNSPEC, 0, idx, 0, 0))
            except _KernelRefused as exc:
                if exc.errno != errno.ENODEV:  # its peer's deletion took it meanwhile
                    raise
    _netlink(netns, f"delete {name}", body)


def _sysctl_path(key: str) -> Path:
    parts = key.replace("/", ".").split(".")
    if not key or any(not p or p in (".", "..") for p in parts):
        raise NsOpsError(f"sysctl key {key!r} is not a dotted name like net.ipv4.tcp_sack")
    return Path("/proc/sys", *parts)


def sysctl_read(netns: str | None, key: str) -> str:
    """Value of sysctl ``key`` (dotted) inside ``netns``, whitespace-stripped."""
    path = _sysctl_path(key)

    def body() -> str:
        try:
            return path.read_text().strip()
        except OSError as exc:
            raise NsOpsError(f"sysctl {key} in {netns or 'the root namespace'}: {exc.strerror}") from None
    return call_in(netns, body)


def sysctl_write(netns: str | None, key: str, value: str | int) -> None:
    """Set sysctl ``key`` to ``value`` inside ``netns``."""
    path = _sysctl_path(key)

    def body() -> None:
        try:
            path.write_text(f"{value}\n")
        except OSError as exc:
            raise NsOpsError(f"sysctl {key}={value} in {netns or 'the root namespace'}: "
                             f"{exc.strerror}") from None
    call_in(netns, body)


def netns_inode(netns: str) -> int | None:
    """Inode of namespace ``netns`` (None when it does not exist)."""
    try:
        return os.stat(NETNS_RUN_DIR / netns).st_ino
    except OSError:
        return None


def netns_pids(netns: str) -> list[int]:
    """PIDs of processes whose network namespace is ``netns`` (as ``ip netns pids``)."""
    ino = netns_inode(netns)
    if ino is None:
        return []
    dev = os.stat(NETNS_RUN_DIR / netns).st_dev
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            st = os.stat(f"/proc/{entry.name}/ns/net")
        except OSError:
            continue
        if st.st_ino == ino and st.st_dev == dev:
            pids.append(int(entry.name))
    return pids


def delete_netns(netns: str) -> None:
    """Unmount and remove ``/run/netns/NAME`` (as ``ip netns del``); the namespace goes
    when its last process and device reference go."""
    path = NETNS_RUN_DIR / netns
    if setns.libc.umount2(str(path).encode(), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOENT):
            raise NsOpsError(f"umount {path}: {os.strerror(err)}")
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise NsOpsError(f"remove {path}: {exc.strerror}") from None


# -- ledger teardowns: namespaces, links, qdiscs (registered at import) -------------------
def netns_exists(name: str) -> bool:
    """True when network namespace ``name`` exists (``/run/netns/NAME``)."""
    return (NETNS_RUN_DIR / name).exists()


def _remove_netns(entry: Entry, ledger: Ledger) -> None:
    name = entry.attrs["name"]
    if not netns_exists(name):
        return
    # Processes keep a namespace alive after `ip netns del`; every process inside a
    # namespace of ours is ours.
    for _ in range(3):
        pids = netns_pids(name)
        if not pids:
            break
        for pid in pids:
            kill_process(pid, cmd.process_start_time(pid), first_signal=signal.SIGKILL, grace_s=1.0)
    delete_netns(name)


def _remove_link(entry: Entry, ledger: Ledger) -> None:
    name, netns = entry.attrs["name"], entry.attrs.get("netns")
    if link_exists(name, netns):
        delete_link(name, netns)


def _remove_qdisc(entry: Entry, ledger: Ledger) -> None:
    dev, netns = entry.attrs["dev"], entry.attrs.get("netns")
    if link_exists(dev, netns):
        parent = entry.attrs.get("parent", "root")
        where = ["root"] if parent == "root" else ["parent", parent] if parent != "clsact" else []
        qdisc = ["clsact"] if parent == "clsact" else []
        cmd.run(["tc", "qdisc", "del", "dev", dev, *where, *qdisc], check=False, netns=netns)


register("netns", _remove_netns, container=lambda e: e.attrs["name"])
register("link", _remove_link, within=lambda e: [e.attrs.get("netns"), e.attrs.get("peer_netns")])
register("qdisc", _remove_qdisc, within=lambda e: [e.attrs.get("netns")])
