"""In-process operations inside network namespaces: links, addresses, sysctls.

Building a k = 4 fat-tree took ~1700 ``ip``/``tc``/``sysctl`` processes; under software
emulation (TCG) each costs ~0.3 s, so set-up and teardown took minutes. Here a short
thread enters the namespace with setns(2) (which moves only the calling thread) and
talks netlink (pyroute2), the ethtool ioctl and /proc/sys from there: sockets and
/proc/sys/net files opened by that thread belong to the namespace.

``netns=None`` means the root namespace (no setns). Every function raises NsOpsError
naming the namespace and the operation when the kernel refuses.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import threading
from pathlib import Path
from typing import Callable, TypeVar

from testbed import cmd, setns
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


def _iproute():  # type: ignore[no-untyped-def]
    from pyroute2 import IPRoute

    return IPRoute()


def _netlink(netns: str | None, what: str, fn: Callable[..., T]) -> T:
    """``fn(ipr)`` with a netlink socket of ``netns``; NetlinkError -> NsOpsError."""
    from pyroute2.netlink.exceptions import NetlinkError

    def body() -> T:
        with _iproute() as ipr:
            try:
                return fn(ipr)
            except NetlinkError as exc:
                raise NsOpsError(f"{what} in {netns or 'the root namespace'}: "
                                 f"{os.strerror(exc.code) if exc.code else exc}") from None
    return call_in(netns, body)


def _index(ipr, name: str) -> int | None:  # type: ignore[no-untyped-def]
    found = ipr.link_lookup(ifname=name)
    return found[0] if found else None


def link_exists(name: str, netns: str | None = None) -> bool:
    """True when device ``name`` exists in ``netns`` (False when the namespace is gone)."""
    if netns is not None and not (NETNS_RUN_DIR / netns).exists():
        return False
    return _netlink(netns, f"look up {name}", lambda ipr: _index(ipr, name) is not None)


def add_veth(name_a: str, netns_a: str | None, name_b: str, netns_b: str | None) -> None:
    """Create veth pair ``name_a`` (in ``netns_a``) -- ``name_b`` (in ``netns_b``).

    Raises NsOpsError when either name exists (nothing is then touched)."""
    def make(ipr, peer_ns: object) -> None:  # type: ignore[no-untyped-def]
        if _index(ipr, name_a) is not None:
            raise NsOpsError(f"interface {name_a} already exists in {netns_a or 'the root namespace'}; "
                             "not touching it")
        peer: dict[str, object] = {"ifname": name_b}
        if peer_ns is not None:
            peer["net_ns_fd"] = peer_ns
        ipr.link("add", ifname=name_a, kind="veth", peer=peer)
    if link_exists(name_b, netns_b):
        raise NsOpsError(f"interface {name_b} already exists in {netns_b or 'the root namespace'}; "
                         "not touching it")
    own = None
    if netns_b is None and netns_a is not None:
        # the peer goes to the caller's namespace, not to the thread's (netns_a)
        own = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        peer_ns: object = own
    else:
        peer_ns = netns_b
    try:
        _netlink(netns_a, f"create veth {name_a}--{name_b}", lambda ipr: make(ipr, peer_ns))
    finally:
        if own is not None:
            os.close(own)


def configure_link(name: str, netns: str | None, *, mtu: int | None = None, offloads: bool = True,
                   address: str | None = None, arp: bool | None = None, up: bool | None = True) -> None:
    """Set MTU (bytes), MAC ``address``, ARP, offloads (False = TSO, GSO, GRO and TX
    checksumming off, as ``ethtool -K``), then set ``name`` up (True), down (False) or
    leave its state (None)."""
    def body(ipr) -> None:  # type: ignore[no-untyped-def]
        idx = _index(ipr, name)
        if idx is None:
            raise NsOpsError(f"no interface {name} in {netns or 'the root namespace'}")
        attrs: dict[str, object] = {}
        if mtu is not None:
            attrs["mtu"] = int(mtu)
        if address is not None:
            attrs["address"] = address
        if arp is not None:
            attrs["flags"], attrs["mask"] = (0 if arp else IFF_NOARP), IFF_NOARP
        if attrs:
            ipr.link("set", index=idx, **attrs)
        if not offloads:
            _offloads_off(name)
        if up is not None:
            ipr.link("set", index=idx, state="up" if up else "down")
    _netlink(netns, f"configure {name}", body)


IFF_NOARP = 0x80


def _offloads_off(name: str) -> None:
    from pyroute2.ethtool import Ethtool

    eth = Ethtool()
    try:
        feats = eth.get_features(name)
        for fname, feat in feats.features.items():
            if fname.startswith(OFFLOAD_PREFIXES) and feat.available:
                feat.enable = False
        eth.set_features(name, feats)
    finally:
        eth.close()


def add_address(name: str, netns: str | None, cidr: str) -> None:
    """Add IPv4/IPv6 address ``cidr`` ("10.0.0.1/8") to ``name``."""
    addr, _, plen = cidr.partition("/")

    def body(ipr) -> None:  # type: ignore[no-untyped-def]
        ipr.addr("add", index=_index(ipr, name), address=addr, prefixlen=int(plen or 32))
    _netlink(netns, f"add address {cidr} to {name}", body)


def set_default_route(name: str, netns: str | None, via: str | None = None) -> None:
    """Default route out of ``name`` (replacing any): on-link, or through gateway ``via``."""
    gw = {"gateway": via} if via else {}
    _netlink(netns, f"default route out of {name}{' via ' + via if via else ''}",
             lambda ipr: ipr.route("replace", dst="0.0.0.0/0", oif=_index(ipr, name), **gw))


def replace_route(netns: str | None, prefix: str, via: str) -> None:
    """Route ``prefix`` ("10.0.2.0/24") through next hop ``via``, replacing any route to
    it (one RTM_NEWROUTE with NLM_F_REPLACE: atomic for packets being forwarded)."""
    _netlink(netns, f"route {prefix} via {via}", lambda ipr: ipr.route("replace", dst=prefix, gateway=via))


def _link_attr(name: str, netns: str | None, attr: str, what: str) -> object:
    """Netlink attribute ``attr`` (e.g. IFLA_MTU) of interface ``name``; NsOpsError
    naming ``what`` when there is no such interface."""
    def body(ipr) -> object:  # type: ignore[no-untyped-def]
        idx = _index(ipr, name)
        if idx is None:
            raise NsOpsError(f"no interface {name} in {netns or 'the root namespace'}")
        return ipr.link("get", index=idx)[0].get(attr)
    return _netlink(netns, f"read the {what} of {name}", body)


def link_address(name: str, netns: str | None) -> str:
    """The MAC address of ``name``."""
    return str(_link_attr(name, netns, "IFLA_ADDRESS", "address"))


#: neighbour state of an entry that never expires nor is probed (include/uapi/linux/neighbour.h)
NUD_PERMANENT = 0x80


def add_neighbour(name: str, netns: str | None, ip: str, mac: str) -> None:
    """A permanent neighbour entry: ``ip`` is at ``mac`` on ``name`` (replacing any)."""
    def body(ipr) -> None:  # type: ignore[no-untyped-def]
        ipr.neigh("replace", dst=ip, lladdr=mac, ifindex=_index(ipr, name), state=NUD_PERMANENT)
    _netlink(netns, f"neighbour {ip} at {mac} on {name}", body)


def link_mtu(name: str, netns: str | None) -> int:
    """MTU of ``name`` in bytes."""
    return int(_link_attr(name, netns, "IFLA_MTU", "MTU"))  # type: ignore[call-overload]


def flush_neighbours(netns: str | None) -> int:
    """Delete every IPv4 neighbour (ARP) entry of ``netns`` except permanent ones, as
    ``ip neigh flush all`` does; returns how many were deleted."""
    from socket import AF_INET

    NUD_PERMANENT, NUD_NOARP = 0x80, 0x40

    def body(ipr) -> int:  # type: ignore[no-untyped-def]
        n = 0
        for e in ipr.get_neighbours(family=AF_INET):
            if e["state"] & (NUD_PERMANENT | NUD_NOARP):
                continue
            ipr.neigh("del", dst=e.get_attr("NDA_DST"), ifindex=e["ifindex"])
            n += 1
        return n
    return _netlink(netns, "flush the neighbour table", body)


def delete_link(name: str, netns: str | None) -> None:
    """Delete ``name`` if it exists (a veth takes its peer with it)."""
    def body(ipr) -> None:  # type: ignore[no-untyped-def]
        idx = _index(ipr, name)
        if idx is not None:
            ipr.link("del", index=idx)
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
