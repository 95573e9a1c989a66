"""E3 controller logic without OpenFlow: schedulers with a fake clock, the flow tables
wanted for an OSS state, the REST API served in-process on 127.0.0.1, and the os-ken
app's reconfigurations against fake datapaths that model their flow tables."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest

from controllers.core import ControllerCore
from controllers.portmap import Circuit, PortMap, desired_flows, desired_ports
from controllers.rest import RestApp
from controllers.schedulers import DTScheduler, OnDemandScheduler, SchedulerError, UTScheduler


class FakeClock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def small_portmap(paths: str = "single") -> PortMap:
    """2 spines, 4 ToRs in clusters of 2, 2 hosts per ToR; port numbers as OVS would
    give them (hosts 1-2, uplinks 3-4, special leaf-spine 5, special OSS 6)."""
    tors = ["t0", "t1", "t2", "t3"]
    hosts, uplinks, special = {}, {}, {}
    spine_port = {"s0": 0, "s1": 0}
    oss_port = 0
    for ti, t in enumerate(tors):
        for i in range(2):
            hosts[f"h{ti}x{i}"] = {"ip": f"10.0.{ti}.{i + 1}", "tor": t, "port": i + 1}
        uplinks[t] = {}
        for si, s in enumerate(("s0", "s1")):
            spine_port[s] += 1
            uplinks[t][s] = [3 + si, spine_port[s]]
        s = f"s{ti % 2}"
        spine_port[s] += 1
        oss_port += 1
        special[t] = {"spine": s, "ls": [5, spine_port[s]], "oss": [6, oss_port]}
    return PortMap(tors=tors, spines=["s0", "s1"], oss="oss", cluster={"t0": 0, "t1": 0, "t2": 1, "t3": 1},
                  hosts=hosts, uplinks=uplinks, special=special, paths=paths)


PAIRS = [("t0", "t2"), ("t1", "t3")]


# -- UT / DT -------------------------------------------------------------------------
def test_ut_rotates_tor_pairs_every_epoch_share():
    clock = FakeClock(50.0)
    ut = UTScheduler(clock, PAIRS + [("t0", "t3")], sse_s=9.0)
    assert ut.share_s == pytest.approx(3.0)
    holders = []
    for k in range(7):
        now = 50.0 + 3.0 * k + 1.5          # middle of each share
        (c,) = ut.circuits(now)
        assert c.pairs is None               # UT: all traffic of the pair
        holders.append((c.a, c.b))
        assert ut.next_change(now) == pytest.approx(50.0 + 3.0 * (k + 1))
    assert holders == [("t0", "t2"), ("t1", "t3"), ("t0", "t3")] * 2 + [("t0", "t2")]
    # just before and at a share boundary
    assert next(iter(ut.circuits(52.999))).a == "t0"
    assert (next(iter(ut.circuits(53.0))).a, next(iter(ut.circuits(53.0))).b) == ("t1", "t3")


def test_ut_rejects_bad_configuration():
    with pytest.raises(SchedulerError, match="sse"):
        UTScheduler(FakeClock(), PAIRS, sse_s=0)
    with pytest.raises(SchedulerError, match="pair"):
        UTScheduler(FakeClock(), [], sse_s=10)


def test_dt_never_places_a_mouse_on_the_oss():
    fab = small_portmap()
    elephant = ("10.0.0.1", "10.0.2.1")
    mice = [("10.0.0.2", "10.0.2.2"), ("10.0.1.2", "10.0.3.2")]
    dt = DTScheduler(FakeClock(0.0), PAIRS, sse_s=4.0, elephants={("t0", "t2"): [elephant]})
    seen_elephant = False
    for k in range(8):
        state = dt.circuits(0.5 + k)
        for c in state:
            assert c.pairs is not None and not set(mice) & c.pairs
            seen_elephant |= elephant in c.pairs
        tables = desired_flows(fab, state)
        oss_ports = {fab.special[t]["oss"][0] for t in fab.tors}
        for t in fab.tors:
            for f in tables[t]:
                m = dict(f.match)
                if f.out in oss_ports:
                    # only the elephant's addresses, in either direction, are steered to the OSS
                    assert (m.get("ipv4_src"), m.get("ipv4_dst")) in {elephant, elephant[::-1]}, f
    assert seen_elephant


# -- on demand ---------------------------------------------------------------------------
def on_demand(clock: FakeClock) -> OnDemandScheduler:
    fab = small_portmap()
    return OnDemandScheduler(clock, {h["ip"]: h["tor"] for h in fab.hosts.values()}, fab.cluster)


def test_on_demand_queues_overlapping_requests_and_releases_on_completion():
    clock = FakeClock(10.0)
    od = on_demand(clock)
    r1 = od.request("10.0.0.1", "10.0.2.1")            # t0 <-> t2
    r2 = od.request("10.0.0.2", "10.0.2.2")            # same circuit: joins it
    r3 = od.request("10.0.0.1", "10.0.3.1")            # t0 busy with t2: queues
    r4 = od.request("10.0.1.1", "10.0.3.1")            # t1 <-> t3: free ports, granted
    assert [r.state for r in (r1, r2, r3, r4)] == ["granted", "granted", "queued", "granted"]
    state = od.circuits(clock())
    assert {(c.a, c.b) for c in state} == {("t0", "t2"), ("t1", "t3")}
    assert next(c for c in state if c.a == "t0").pairs == {("10.0.0.1", "10.0.2.1"), ("10.0.0.2", "10.0.2.2")}
    clock.t = 20.0
    od.release(r1.id)
    assert r3.state == "queued"                        # t0 <-> t2 still held by r2
    od.release(r4.id)
    assert r3.state == "queued"                        # t3 free now, t0 still busy
    clock.t = 30.0
    od.release(r2.id)
    assert r3.state == "granted" and r3.granted == 30.0
    assert {(c.a, c.b) for c in od.circuits(clock())} == {("t0", "t3")}
    od.release(r3.id)
    assert od.circuits(clock()) == frozenset()
    with pytest.raises(SchedulerError) as exc:
        od.release(r3.id)
    assert exc.value.status == 409


def test_on_demand_rejects_bad_requests():
    od = on_demand(FakeClock())
    with pytest.raises(SchedulerError, match="not a host address"):
        od.request("10.9.9.9", "10.0.2.1")
    with pytest.raises(SchedulerError, match="same cluster"):
        od.request("10.0.0.1", "10.0.1.1")
    with pytest.raises(SchedulerError) as exc:
        od.release(42)
    assert exc.value.status == 404


# -- flow tables -------------------------------------------------------------------------
def test_circuit_moves_the_special_link_and_keeps_every_pair_connected():
    fab = small_portmap()
    state = frozenset({Circuit("t0", "t2", None)})
    ports = desired_ports(fab, state)
    assert ports[("t0", 6)] and not ports[("t0", 5)]          # t0's special link is on the OSS
    assert ports[("t1", 5)] and not ports[("t1", 6)]          # t1's is in the leaf-spine
    tables = desired_flows(fab, state)
    oss = {dict(f.match)["in_port"]: f.out for f in tables["oss"]}
    assert oss == {fab.special["t0"]["oss"][1]: fab.special["t2"]["oss"][1],
                   fab.special["t2"]["oss"][1]: fab.special["t0"]["oss"][1]}
    for paths in ("single", "spread"):
        fab = small_portmap(paths)
        for st in (frozenset(), state):
            tables = desired_flows(fab, st)
            for name, h in fab.hosts.items():   # every ToR has a route to every host
                for t in fab.tors:
                    outs = [f for f in tables[t] if dict(f.match).get("ipv4_dst") == h["ip"]]
                    assert outs, (paths, t, name)
                    assert all(ports_ok(fab, t, f.out, st) for f in outs)


def ports_ok(fab: PortMap, tor: str, port: object, state: frozenset) -> bool:
    """A flow never outputs to a special port that is down in ``state``."""
    return desired_ports(fab, state).get((tor, port), True) if isinstance(port, int) else True


def test_no_circuit_means_no_oss_flow():
    tables = desired_flows(small_portmap(), frozenset())
    assert tables["oss"] == frozenset()


# -- REST ---------------------------------------------------------------------------------
class Quiet(WSGIRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def api():
    """The REST app over an on-demand core, served on 127.0.0.1 (ephemeral port)."""
    fab = small_portmap()
    clock = FakeClock()
    sched = OnDemandScheduler(clock, {h["ip"]: h["tor"] for h in fab.hosts.values()}, fab.cluster)
    core = ControllerCore(fab, sched, clock)
    core.ready_switches = set(fab.switches())
    server = make_server("127.0.0.1", 0, RestApp(core), handler_class=Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", core
    server.shutdown()
    server.server_close()


def call(base: str, method: str, path: str, body: bytes | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(base + path, data=body, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_rest_reserve_and_release(api):
    base, core = api
    code, r = call(base, "POST", "/reservations", json.dumps({"src": "10.0.0.1", "dst": "10.0.2.1"}).encode())
    assert code == 201 and r["state"] == "granted" and r["tors"] == ["t0", "t2"] and not r["installed"]
    core.applied_state = core.wanted()              # what the app does after the barriers
    assert call(base, "GET", f"/reservations/{r['id']}") == (200, {**r, "installed": True})
    code, s = call(base, "GET", "/status")
    assert code == 200 and s["ready"] and s["circuits"][0]["a"] == "t0"
    code, r2 = call(base, "DELETE", f"/reservations/{r['id']}")
    assert code == 200 and r2["state"] == "released"


@pytest.mark.parametrize("method,path,body,status,needle", [
    ("POST", "/reservations", b"{not json", 400, "not JSON"),
    ("POST", "/reservations", b"[1, 2]", 400, "JSON object"),
    ("POST", "/reservations", b'{"src": "10.0.0.1"}', 400, "body must be"),
    ("POST", "/reservations", b'{"src": "10.0.0.1", "dst": "10.0.1.1"}', 400, "same cluster"),
    ("POST", "/reservations", b'{"src": "1.2.3.4", "dst": "10.0.2.1"}', 400, "not a host address"),
    ("GET", "/reservations/77", None, 404, "no reservation 77"),
    ("DELETE", "/reservations/abc", None, 400, "not a positive integer"),
    ("PUT", "/reservations", b"{}", 405, "not allowed"),
    ("GET", "/nothing", None, 404, "no resource"),
])
def test_rest_invalid_requests_get_4xx_with_a_message(api, method, path, body, status, needle):
    base, _ = api
    code, r = call(base, method, path, body)
    assert code == status and needle in r["error"], r


def test_rest_reservation_refused_under_a_time_scheduler():
    fab = small_portmap()
    core = ControllerCore(fab, UTScheduler(FakeClock(), PAIRS, 10.0), FakeClock())
    core.ready_switches = set(fab.switches())
    status, body = [], []
    app = RestApp(core)
    env = {"REQUEST_METHOD": "POST", "PATH_INFO": "/reservations", "CONTENT_LENGTH": "40",
           "wsgi.input": __import__("io").BytesIO(b'{"src": "10.0.0.1", "dst": "10.0.2.1"} ')}
    body = b"".join(app(env, lambda s, h: status.append(s)))
    assert status[0].startswith("409") and b"takes no reservations" in body


def test_reconfiguration_log_lines(tmp_path):
    fab = small_portmap()
    clock = FakeClock(5.0)
    core = ControllerCore(fab, UTScheduler(clock, PAIRS, 2.0), clock, log_path=tmp_path / "r.jsonl")
    core.applied(core.wanted(), reason="epoch", t_start=5.0, t_done=5.01, flow_mods=6, port_mods=4)
    clock.t = 6.0
    core.applied(core.wanted(), reason="epoch", t_start=6.0, t_done=6.02, flow_mods=12, port_mods=8)
    core.close()
    lines = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert [x["added"] for x in lines] == [["t0-t2"], ["t1-t3"]]
    assert lines[1]["removed"] == ["t0-t2"] and lines[1]["t_start"] == 6.0


def test_a_lost_switch_makes_the_controller_not_ready_until_it_is_back(tmp_path):
    fab = small_portmap()
    clock = FakeClock(1.0)
    core = ControllerCore(fab, on_demand(clock), clock, events_path=tmp_path / "e.jsonl")
    for name in fab.switches():
        core.switch_connected(name)
        core.switch_ready(name, flows=3)
    assert core.ready and core.status()["disconnects"] == 0
    clock.t = 2.5
    core.switch_lost("oss")
    s = core.status()
    assert not core.ready and "oss" not in s["connected"] and s["disconnects"] == 1
    with pytest.raises(SchedulerError) as refused:           # no grants while a switch is missing
        core.request("10.0.0.1", "10.0.2.1")
    assert refused.value.status == 503
    clock.t = 3.0
    core.switch_connected("oss")
    assert not core.ready                                    # connected, flows not yet acknowledged
    core.switch_ready("oss", flows=2)
    assert core.ready
    core.close()
    events = [json.loads(x) for x in (tmp_path / "e.jsonl").read_text().splitlines()]
    assert [(e["switch"], e["event"], e["t"]) for e in events[-3:]] == [
        ("oss", "disconnected", 2.5), ("oss", "connected", 3.0), ("oss", "ready", 3.0)]


def test_controller_listeners_never_on_a_wildcard_address():
    from controllers.process import check_mgmt_host
    from testbed.errors import DefinitionError

    assert check_mgmt_host("127.0.0.1") == "127.0.0.1"
    for bad in ("0.0.0.0", "", "localhost", "::"):
        with pytest.raises(DefinitionError, match="controller.host"):
            check_mgmt_host(bad)


# -- the os-ken app against fake datapaths ---------------------------------------------
class FakeSwitch:
    """A datapath that applies what the app sends to a model of its flow table and
    special ports. ``lose_at(n)``: its connection closes right after the n-th message
    from then on (that message is applied), as a switch that goes away mid-way."""

    def __init__(self, app, name: str, dpid: int) -> None:
        from os_ken.ofproto import ofproto_v1_3, ofproto_v1_3_parser

        self.app, self.name, self.id = app, name, dpid
        self.ofproto, self.ofproto_parser = ofproto_v1_3, ofproto_v1_3_parser
        self.table: dict[tuple, int] = {}
        self.port_up: dict[int, bool] = {}
        self.xid = 0
        self.countdown: int | None = None

    def lose_at(self, n: int) -> None:
        self.countdown = n

    def set_xid(self, msg) -> None:
        self.xid += 1
        msg.set_xid(self.xid)

    def send_msg(self, msg) -> None:
        from types import SimpleNamespace

        ofp, parser = self.ofproto, self.ofproto_parser
        assert self.app.dps.get(self.name) is self, f"message to {self.name} after it was lost"
        if isinstance(msg, parser.OFPFlowMod):
            key = (msg.priority, json.dumps(msg.match.to_jsondict(), sort_keys=True))
            if msg.command == ofp.OFPFC_DELETE and msg.table_id == ofp.OFPTT_ALL:
                self.table.clear()
            elif msg.command == ofp.OFPFC_DELETE_STRICT:
                self.table.pop(key, None)
            else:
                self.table[key] = msg.instructions[0].actions[0].port
        elif isinstance(msg, parser.OFPPortMod):
            self.port_up[msg.port_no] = msg.config == 0
        elif isinstance(msg, parser.OFPBarrierRequest):
            self.app.on_barrier(SimpleNamespace(msg=SimpleNamespace(datapath=self, xid=msg.xid)))
        if self.countdown is not None:
            self.countdown -= 1
            if self.countdown == 0:
                self.countdown = None
                self.app.on_dead(SimpleNamespace(datapath=self))


class AnyPort(dict):
    def get(self, port_no, default=None):
        from types import SimpleNamespace

        return SimpleNamespace(port_no=port_no, hw_addr="02:00:00:00:00:01")


def app_with_switches(core: ControllerCore):
    """The E3 app on ``core`` with every switch of its fabric connected and initialised."""
    from controllers.e3_app import E3Controller
    from os_ken.lib import hub

    app = E3Controller.__new__(E3Controller)   # no os-ken manager, no threads
    app.wake = hub.Event()
    app.attach(core)
    switches = {}
    for i, name in enumerate(core.portmap.switches()):
        switches[name] = connect(app, name, i + 1)
    assert core.ready
    return app, switches


def connect(app, name: str, dpid: int) -> FakeSwitch:
    sw = FakeSwitch(app, name, dpid)
    app.dps[name], app.ports[name] = sw, AnyPort()
    app.core.switch_connected(name)
    app.initialise(name)
    return sw


def fresh_tables(core: ControllerCore, state: frozenset) -> dict[str, tuple[dict, dict]]:
    """What each switch holds after connecting to an app whose applied state is ``state``."""
    ref = ControllerCore(core.portmap, core.scheduler, core.clock)
    ref.applied_state = state
    _, switches = app_with_switches(ref)
    return {n: (sw.table, sw.port_up) for n, sw in switches.items()}


@pytest.mark.parametrize("then", ["released", "kept"])
def test_a_reconfiguration_abandoned_half_way_is_undone_or_completed(then):
    """The OSS goes away after its first circuit flow (phase 2): the ToRs have already
    lost their leaf-spine special-link flows and ports (phase 1). When the OSS is back,
    every switch must hold exactly the tables of the then wanted state, including when
    that is the applied state again (the reservation released meanwhile)."""
    clock = FakeClock(1.0)
    core = ControllerCore(small_portmap(), on_demand(clock), clock)
    app, switches = app_with_switches(core)
    empty = frozenset()
    assert {n: (s.table, s.port_up) for n, s in switches.items()} == fresh_tables(core, empty)

    rid = core.request("10.0.0.1", "10.0.2.1")["id"]   # t0 -> t2
    wanted = core.wanted()
    assert wanted != empty
    switches["oss"].lose_at(1)
    app.step()
    assert not app.converged and core.applied_state == empty and not core.ready
    partial = {n: (s.table, s.port_up) for n, s in switches.items() if n != "oss"}
    assert partial != {n: t for n, t in fresh_tables(core, empty).items() if n != "oss"}

    if then == "released":
        core.release(rid)
    target = core.wanted()
    assert target == (empty if then == "released" else wanted)
    switches["oss"] = connect(app, "oss", 99)
    assert core.ready
    app.step()
    assert app.converged and core.applied_state == target
    assert {n: (s.table, s.port_up) for n, s in switches.items()} == fresh_tables(core, target)
