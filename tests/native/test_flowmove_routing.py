"""Linux routers in the emulation (testbed.net.Router) against the real kernel: E4's
topology shape (sender - r1 - r2 - r3 - receiver plus r1 - r3, no link shaping here),
packets forwarded along the static routes, one route replace moving only the data
direction, ACK-direction packets staying on the IP path; and bad router input refused
before anything exists."""

import json
import os
import secrets
import time

import pytest
from mininet.topo import Topo

from helpers import require_features, require_root
from testbed import cmd, nsops
from testbed.errors import DefinitionError
from testbed.ledger import Ledger
from testbed.net import Emulation, end_hosts
from controllers.flowmover_process import FlowMoverProcess
from topologies import flowmove as fm


class UnshapedFlowMove(Topo):
    """topologies/flowmove.py's addresses and routes, without shapes (the host kernel has
    no netem)."""

    def build(self) -> None:
        snd = self.addHost(fm.SENDER, ip=fm.SENDER_IP, gateway=fm.R1_SENDER.split("/")[0])
        rcv = self.addHost(fm.RECEIVER, ip=fm.RECEIVER_IP, gateway=fm.R3_RECEIVER.split("/")[0])
        r1 = self.addHost(fm.R1, cls="router", routes=((fm.RECEIVER_NET, fm.VIA_IP_PATH),))
        r2 = self.addHost(fm.R2, cls="router", routes=((fm.RECEIVER_NET, fm.R3_R2.split("/")[0]),
                                                       (fm.SENDER_NET, fm.R1_R2.split("/")[0])))
        r3 = self.addHost(fm.R3, cls="router", routes=((fm.SENDER_NET, fm.R2_R3.split("/")[0]),))
        self.addLink(snd, r1, ip2=fm.R1_SENDER)
        self.addLink(r1, r2, ip1=fm.R1_R2, ip2=fm.R2_R1)
        self.addLink(r2, r3, ip1=fm.R2_R3, ip2=fm.R3_R2)
        self.addLink(r1, r3, ip1=fm.R1_R3, ip2=fm.R3_R1)
        self.addLink(r3, rcv, ip1=fm.R3_RECEIVER)


@pytest.fixture
def ledger():
    require_root()
    require_features("netns")
    led = Ledger.create(f"test-router-{os.getpid()}-{time.monotonic_ns()}")
    yield led
    if led.path.exists():
        led.teardown()


def tx_packets(emu: Emulation, node: str, peer: str) -> int:
    """Packets ``node`` sent on its port towards ``peer``."""
    for name, ((ia, _), (ib, _)) in emu.links.items():
        a, b = name.split("-")
        if (a, b) in ((node, peer), (peer, node)):
            intf = ia if a == node else ib
            break
    else:
        raise AssertionError(f"no link {node}-{peer}")
    out = cmd.run(["ip", "-s", "-j", "link", "show", "dev", intf], netns=emu[node].netns).stdout
    return int(json.loads(out)[0]["stats64"]["tx"]["packets"])


def ping(emu: Emulation, count: int) -> None:
    out = emu[fm.SENDER].run(["ping", "-n", "-c", str(count), "-i", "0.01", "-W", "2",
                              fm.RECEIVER_IP.split("/")[0]], check=False)
    assert f"{count} received" in out.stdout, out.stdout


def test_routes_carry_data_on_the_ip_path_until_the_move_and_acks_always(ledger):
    topo = UnshapedFlowMove()
    assert end_hosts(topo) == [fm.RECEIVER, fm.SENDER]
    with Emulation(topo, ledger, "ot" + secrets.token_hex(2)) as emu:
        assert sorted(h.name for h in emu.hosts()) == [fm.RECEIVER, fm.SENDER]  # routers are no hosts
        r1 = emu[fm.R1]
        assert nsops.sysctl_read(r1.netns, "net.ipv4.ip_forward") == "1"
        # every next hop is known before any traffic, the never-used optical one too:
        # no packet of a moved flow waits for (or is dropped during) address resolution
        for node, peer in ((fm.R1, fm.VIA_OPTICAL_PATH), (fm.R1, fm.VIA_IP_PATH), (fm.SENDER, "10.0.1.254"),
                           (fm.R3, fm.RECEIVER_IP.split("/")[0])):
            neigh = json.loads(cmd.run(["ip", "-j", "neigh", "show", peer], netns=emu[node].netns).stdout)
            assert [n.get("state") for n in neigh] == [["PERMANENT"]], (node, peer, neigh)
        ping(emu, 5)
        before = {k: tx_packets(emu, *k) for k in ((fm.R1, fm.R2), (fm.R1, fm.R3), (fm.R3, fm.R2))}
        ping(emu, 20)
        mid = {k: tx_packets(emu, *k) for k in before}
        assert mid[(fm.R1, fm.R2)] - before[(fm.R1, fm.R2)] >= 20  # requests over r2
        assert mid[(fm.R1, fm.R3)] - before[(fm.R1, fm.R3)] == 0
        assert mid[(fm.R3, fm.R2)] - before[(fm.R3, fm.R2)] >= 20  # replies over r2
        nsops.replace_route(r1.netns, fm.RECEIVER_NET, fm.VIA_OPTICAL_PATH)
        ping(emu, 20)
        after = {k: tx_packets(emu, *k) for k in before}
        assert after[(fm.R1, fm.R2)] - mid[(fm.R1, fm.R2)] == 0
        assert after[(fm.R1, fm.R3)] - mid[(fm.R1, fm.R3)] >= 20  # requests now direct
        assert after[(fm.R3, fm.R2)] - mid[(fm.R3, fm.R2)] >= 20  # replies still over r2
        routes = cmd.run(["ip", "route", "show", fm.RECEIVER_NET], netns=r1.netns).stdout
        assert routes.count("\n") == 1 and fm.VIA_OPTICAL_PATH in routes  # replaced, not added


class BadRouterPort(Topo):
    def build(self, **opts: object) -> None:
        h = self.addHost("h1")
        r = self.addHost("r1", cls="router")
        self.addLink(h, r, **opts)


@pytest.mark.parametrize("opts, key", [({}, "link h1-r1.ip2"), ({"ip2": "10.0.0.1"}, "link h1-r1.ip2"),
                                       ({"ip2": "10.0.0.300/24"}, "link h1-r1.ip2"),
                                       ({"ip1": "10.0.0.1/24", "ip2": "10.0.0.2/24"}, "link h1-r1.ip1")])
def test_router_ports_are_checked_before_anything_exists(ledger, opts, key):
    token = "ot" + secrets.token_hex(2)
    with pytest.raises(DefinitionError) as err:
        Emulation(BadRouterPort(**opts), ledger, token).build()
    assert err.value.key == key
    assert not any(name.startswith(token) for name in cmd.run(["ip", "netns", "list"]).stdout.split())


def mover(ledger, emu: Emulation, out_dir, **kw) -> FlowMoverProcess:
    r1 = emu[fm.R1]
    from_sender = r1.port_towards(fm.SENDER_IP.split("/")[0])
    return FlowMoverProcess(ledger, r1.netns, out_dir, prefix=fm.RECEIVER_NET, via=fm.VIA_OPTICAL_PATH,
                            watch_intf=from_sender, **kw)


def r1_route(emu: Emulation) -> str:
    return cmd.run(["ip", "route", "show", fm.RECEIVER_NET], netns=emu[fm.R1].netns).stdout


def test_mover_moves_on_request_and_logs_both_clocks(ledger, tmp_path):
    with Emulation(UnshapedFlowMove(), ledger, "ot" + secrets.token_hex(2)) as emu:
        with mover(ledger, emu, tmp_path, trigger="command") as m:
            ping(emu, 3)
            assert fm.VIA_IP_PATH in r1_route(emu) and m.moves() == []
            t_req = m.request_move()
            deadline = time.monotonic() + 10
            while not m.moves() and time.monotonic() < deadline:
                time.sleep(0.02)
            (move,) = m.moves()
            assert fm.VIA_OPTICAL_PATH in r1_route(emu)
            assert move["trigger"] == "command"
            assert t_req <= move["t_request"] <= move["t_before"] <= move["t_after"]
            assert move["t_before"] - t_req < 1.0, move  # signalled, not polled
            assert abs(move["realtime_before"] - time.time()) < 60
            m.request_move()  # a second request does nothing
            time.sleep(0.2)
            assert len(m.moves()) == 1
        assert not m.alive()


def test_mover_moves_when_the_rate_crosses_its_threshold(ledger, tmp_path):
    with Emulation(UnshapedFlowMove(), ledger, "ot" + secrets.token_hex(2)) as emu:
        # pings of 1400 B every 5 ms: about 2.3 Mbit/s into r1; threshold 1 Mbit/s
        with mover(ledger, emu, tmp_path, trigger="threshold", interval_s=0.1, threshold_bps=1e6,
                   consecutive=3) as m:
            time.sleep(0.5)
            assert m.moves() == []  # idle: below the threshold
            out = emu[fm.SENDER].run(["ping", "-n", "-q", "-c", "200", "-i", "0.005", "-s", "1400",
                                      fm.RECEIVER_IP.split("/")[0]], check=False, timeout=60)
            assert " 0% packet loss" in out.stdout, out.stdout
            (move,) = m.moves()
            assert move["trigger"] == "threshold" and move["rate_bps"] >= 1e6
            samples = [e for e in m.events() if e["event"] == "sample"]
            before = [s for s in samples if s["t"] <= move["t_request"]]
            assert [s["rate_bps"] >= 1e6 for s in before[-3:]] == [True] * 3
            assert not any(s["rate_bps"] >= 1e6 for s in before[:-3][-1:])  # the run started below it
            assert fm.VIA_OPTICAL_PATH in r1_route(emu)


def test_mover_moves_at_the_instant_it_was_given(ledger, tmp_path):
    with Emulation(UnshapedFlowMove(), ledger, "ot" + secrets.token_hex(2)) as emu:
        snd = emu[fm.SENDER].netns
        with mover(ledger, emu, tmp_path, trigger="command", counters_netns=[snd]) as m:
            at = time.monotonic() + 1.0
            m.request_move_at(at)
            time.sleep(0.5)
            assert m.moves() == [] and fm.VIA_IP_PATH in r1_route(emu)  # not before its time
            deadline = time.monotonic() + 10
            while not m.moves() and time.monotonic() < deadline:
                time.sleep(0.02)
            (move,) = m.moves()
            assert move["t_request"] == at and 0 <= move["t_before"] - at < 0.05, move
            assert fm.VIA_OPTICAL_PATH in r1_route(emu)
            # the sender's kernel counters, read from r1's process right after the replace
            assert move["t_after"] <= move["t_counters"] and "TcpExtTCPSACKReorder" in move["counters"][snd]
