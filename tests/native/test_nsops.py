"""In-process namespace operations (testbed.nsops) against the real kernel: veth pairs
across namespaces and to the root namespace, offloads, per-namespace sysctls, deletion."""

import json
import os
import subprocess
import time
import uuid

import pytest

from helpers import require_root
from testbed import cmd, nsops


@pytest.fixture
def two_netns():
    require_root()
    tag = uuid.uuid4().hex[:6]
    names = [f"tbnsops{tag}a", f"tbnsops{tag}b"]
    for n in names:
        cmd.run(["ip", "netns", "add", n])
    try:
        yield names
    finally:
        for n in names:
            nsops.delete_netns(n)


def test_veth_between_namespaces_is_configured(two_netns):
    a, b = two_netns
    nsops.add_veth("va", a, "vb", b)
    nsops.configure_link("va", a, mtu=9050, offloads=False, address="02:00:00:00:00:01", arp=False)
    nsops.configure_link("vb", b, mtu=9050)
    nsops.configure_link("vb", b, up=False)
    assert ",UP" not in cmd.run(["ip", "link", "show", "vb"], netns=b).stdout
    assert nsops.link_exists("va", a) and not nsops.link_exists("va", b)
    assert nsops.link_mtu("va", a) == 9050
    link = cmd.run(["ip", "-d", "link", "show", "va"], netns=a).stdout
    assert "NOARP" in link and ",UP" in link and "02:00:00:00:00:01" in link
    k = cmd.run(["ethtool", "-k", "va"], netns=a).stdout
    for feature in ("tcp-segmentation-offload", "generic-segmentation-offload",
                    "generic-receive-offload", "tx-checksumming"):
        assert f"{feature}: off" in k, feature
    assert "tcp-segmentation-offload: on" in cmd.run(["ethtool", "-k", "vb"], netns=b).stdout
    with pytest.raises(nsops.NsOpsError, match="already exists"):
        nsops.add_veth("va", a, "vc", b)
    with pytest.raises(nsops.NsOpsError, match=f"network namespace {b}-gone: No such file"):
        nsops.add_veth("vd", a, "ve", f"{b}-gone")
    assert not nsops.link_exists("vd", a)


def test_peer_in_the_root_namespace(two_netns):
    a, _ = two_netns
    root_end = f"tbr{uuid.uuid4().hex[:8]}"
    nsops.add_veth("vx", a, root_end, None)
    try:
        assert nsops.link_exists(root_end, None) and not nsops.link_exists(root_end, a)
    finally:
        nsops.delete_link(root_end, None)
    assert not nsops.link_exists("vx", a)  # the pair went together


def test_sysctls_are_per_namespace(two_netns):
    a, b = two_netns
    nsops.sysctl_write(a, "net.ipv4.tcp_sack", 0)
    assert nsops.sysctl_read(a, "net.ipv4.tcp_sack") == "0"
    assert nsops.sysctl_read(b, "net.ipv4.tcp_sack") == "1"
    with pytest.raises(nsops.NsOpsError, match="net.ipv4.no_such_key"):
        nsops.sysctl_write(a, "net.ipv4.no_such_key", 1)
    with pytest.raises(nsops.NsOpsError, match="dotted"):
        nsops.sysctl_read(a, "net/../../etc")


def test_pids_and_delete(two_netns):
    a, _ = two_netns
    proc = subprocess.Popen(["ip", "netns", "exec", a, "sleep", "30"])
    try:
        deadline = time.monotonic() + 10  # `ip netns exec` execs sleep in place: same pid
        while proc.pid not in nsops.netns_pids(a) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.pid in nsops.netns_pids(a), "sleep not seen in the namespace"
        assert os.getpid() not in nsops.netns_pids(a)
    finally:
        proc.kill()
        proc.wait()
    nsops.delete_netns(a)
    assert not (nsops.NETNS_RUN_DIR / a).exists()
    with pytest.raises(nsops.NsOpsError, match=a):
        nsops.call_in(a, lambda: None)


def test_flush_neighbours_removes_learnt_entries_and_keeps_permanent_ones(two_netns):
    a, b = two_netns
    nsops.add_veth("va", a, "vb", b)
    for name, ns, ip in (("va", a, "10.77.0.1/24"), ("vb", b, "10.77.0.2/24")):
        nsops.configure_link(name, ns)
        nsops.add_address(name, ns, ip)
    cmd.run(["ping", "-c", "1", "-W", "2", "10.77.0.2"], netns=a)     # a learns b by ARP
    cmd.run(["ip", "neigh", "add", "10.77.0.9", "lladdr", "02:00:00:00:00:09", "dev", "va", "nud", "permanent"],
            netns=a)
    before = cmd.run(["ip", "neigh", "show"], netns=a).stdout
    assert "10.77.0.2 " in before and "10.77.0.9 " in before
    assert nsops.flush_neighbours(a) == 1
    after = cmd.run(["ip", "neigh", "show"], netns=a).stdout
    assert "10.77.0.2 " not in after and "10.77.0.9 " in after
    assert nsops.flush_neighbours(a) == 0


def test_addresses_routes_and_neighbours_are_what_ip_shows(two_netns):
    """testbed.nsops talks rtnetlink itself (testbed.rtnl): what it sets is read back with
    iproute2, the independent reader; a replaced route replaces, and refusals name the
    operation, the device and the kernel's reason."""
    a, b = two_netns
    nsops.add_veth("va", a, "vb", b)
    nsops.configure_link("va", a, address="02:00:00:00:00:0a")
    nsops.add_address("va", a, "10.78.0.1/24")
    nsops.set_default_route("va", a)
    nsops.replace_route(a, "10.79.0.0/16", "10.78.0.2")
    nsops.replace_route(a, "10.79.0.0/16", "10.78.0.3")
    nsops.add_neighbour("va", a, "10.78.0.3", "02:00:00:00:00:0b")
    assert nsops.link_address("va", a) == "02:00:00:00:00:0a"
    assert "inet 10.78.0.1/24 " in cmd.run(["ip", "-o", "addr", "show", "va"], netns=a).stdout
    routes = cmd.run(["ip", "route", "show"], netns=a).stdout.splitlines()
    assert [r for r in routes if r.startswith("default")] == ["default dev va proto static linkdown "], routes
    assert [r for r in routes if r.startswith("10.79.0.0/16")] == \
        ["10.79.0.0/16 via 10.78.0.3 dev va proto static linkdown "], routes
    neigh = cmd.run(["ip", "neigh", "show"], netns=a).stdout
    assert "10.78.0.3 dev va lladdr 02:00:00:00:00:0b PERMANENT" in neigh, neigh
    with pytest.raises(nsops.NsOpsError, match=r"add address 10.78.0.1/24 to va in .*: File exists"):
        nsops.add_address("va", a, "10.78.0.1/24")
    with pytest.raises(nsops.NsOpsError, match="no interface nope in"):
        nsops.add_neighbour("nope", a, "10.78.0.4", "02:00:00:00:00:0c")
    with pytest.raises(nsops.NsOpsError, match="six hexadecimal bytes"):
        nsops.add_neighbour("va", a, "10.78.0.4", "02:00")
    nsops.delete_link("va", a)
    assert not nsops.link_exists("va", a) and not nsops.link_exists("vb", b)
    nsops.delete_link("va", a)  # gone: nothing to do


def test_setns_entered_moves_only_the_block_and_sockets_stay(two_netns):
    """testbed.setns.entered: the thread is inside the namespace for the block and back
    after it; a socket made inside stays in that namespace; a missing one is an
    OSError and leaves the thread where it was."""
    import socket

    from testbed import setns

    a, _ = two_netns
    home = os.readlink("/proc/thread-self/ns/net")
    target = f"net:[{nsops.netns_inode(a)}]"
    with setns.entered(a):
        assert os.readlink("/proc/thread-self/ns/net") == target != home
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    assert os.readlink("/proc/thread-self/ns/net") == home
    nsops.configure_link("lo", a)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    assert f":{port}" in cmd.run(["ss", "-uanH"], netns=a).stdout
    assert f":{port}" not in cmd.run(["ss", "-uanH"]).stdout
    s.close()
    with pytest.raises(OSError):
        with setns.entered(a + "-missing"):
            pass
    assert os.readlink("/proc/thread-self/ns/net") == home


def test_link_counters_are_what_ip_shows(two_netns):
    """link_counters (IFLA_STATS64) against `ip -s -j link` after a known number of pings
    on a quiet pair (IPv6 off, so no neighbour discovery adds packets); a missing device
    is an NsOpsError naming it."""
    a, b = two_netns
    for n in (a, b):
        nsops.sysctl_write(n, "net.ipv6.conf.all.disable_ipv6", 1)
        nsops.sysctl_write(n, "net.ipv6.conf.default.disable_ipv6", 1)
    nsops.add_veth("va", a, "vb", b)
    nsops.configure_link("va", a, address="02:00:00:00:00:01")
    nsops.configure_link("vb", b, address="02:00:00:00:00:02")
    nsops.add_address("va", a, "10.9.0.1/24")
    nsops.add_address("vb", b, "10.9.0.2/24")
    nsops.add_neighbour("va", a, "10.9.0.2", "02:00:00:00:00:02")   # no ARP either
    nsops.add_neighbour("vb", b, "10.9.0.1", "02:00:00:00:00:01")
    before = nsops.link_counters("va", a)
    cmd.run(["ping", "-n", "-q", "-c", "5", "-i", "0.01", "-s", "972", "10.9.0.2"], netns=a)
    got = nsops.link_counters("va", a)
    shown = json.loads(cmd.run(["ip", "-s", "-j", "link", "show", "va"], netns=a).stdout)[0]["stats64"]
    assert (got["rx_packets"], got["rx_bytes"], got["tx_packets"], got["tx_bytes"]) == \
        (shown["rx"]["packets"], shown["rx"]["bytes"], shown["tx"]["packets"], shown["tx"]["bytes"])
    # 5 echo requests out, 5 replies in, 1014 B each (Ethernet 14 + IP 20 + ICMP 8 + 972)
    assert got["tx_packets"] - before["tx_packets"] == 5 and got["tx_bytes"] - before["tx_bytes"] == 5 * 1014
    assert got["rx_packets"] - before["rx_packets"] == 5 and got["rx_bytes"] - before["rx_bytes"] == 5 * 1014
    assert set(got) == set(nsops.LINK_COUNTERS)
    with pytest.raises(nsops.NsOpsError, match="no interface vz"):
        nsops.link_counters("vz", a)
