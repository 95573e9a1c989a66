"""E2's architectures in the registry and the fabric, without a kernel: obs-edge and
obs-core specs (errors name key, value and range), their packed configurations, the
obsburst options in emulation units, the per-port install plan (obsburst towards the
core, fq towards hosts), per-link rates, ``peer_holds``, per-point reconfiguration and
the ordering of the module load before the namespaces."""

from __future__ import annotations

import struct
from types import SimpleNamespace

import pytest
from mininet.topo import Topo

from testbed.errors import DefinitionError
from testbed.optical import fabric, hostnic, layout, mechanisms, obsburst
from testbed.optical.architectures import OBS_EDGE_MIN_LIMIT, REGISTRY, parse
from testbed.optical.burst import ClassParams
from testbed.optical.mechanisms import NodeContext

MS = 1_000_000
#: the paper's slow class (spec e2): Tmax 10 ms, Lmax 10 MB, offset 10 ms, 10 Gb/s
SLOW = "obs-edge:10000000,10000000,10000000"
#: the fast class: Tmax 0.5 ms, Lmax 25 kB, offset 0, 40 Gb/s
FAST = "obs-edge:500000,25000,0"


# ---- specs ----

def test_specs_read_back_and_pack_as_the_contract_structs():
    a = parse(SLOW, role="edge")
    assert a.params == {"tmax_ns": 10 * MS, "lmax_bytes": 10_000_000, "offset_ns": 10 * MS}
    assert parse(a.spec, role="edge") == a and a.arch.code == 4 and a.arch.bpf == "obs_edge"
    assert a.packed() == struct.pack("<QQQ", 10 * MS, 10_000_000, 10 * MS)
    c = parse("obs-core:1000000,18446744073709551615", role="core")
    assert c.params == {"pl_ppb": 1_000_000, "seed": 2**64 - 1} and c.arch.code == 5 and c.arch.bpf == "obs_core"
    # struct optsw_obs_core_cfg { __u32 pl_ppb; __u64 seed; }: 4 bytes of padding after pl_ppb
    assert c.packed() == struct.pack("<I4xQ", 1_000_000, 2**64 - 1) and len(c.packed()) == 16
    assert REGISTRY.syntax("edge").endswith("obs-edge:TMAX_NS,LMAX_BYTES,OFFSET_NS")
    assert "obs-core:PL_PPB,SEED" in REGISTRY.syntax("core") and "obs-edge" not in REGISTRY.syntax("core")


@pytest.mark.parametrize("spec,role,accepted", [
    ("obs-edge:0,1000,0", "edge", r"TMAX_NS \(assembly time Tmax, paper ns\) an integer 1\.\.3600000000000"),
    ("obs-edge:1000,1000000001,0", "edge", r"LMAX_BYTES \(assembly volume Lmax, Ethernet frame bytes"
                                           r".*\) an integer 1\.\.1000000000"),
    ("obs-edge:1000,1000,-1", "edge", r"OFFSET_NS .* an integer 0\.\.3600000000000"),
    ("obs-edge:1000,1000", "edge", r"obs-edge:TMAX_NS,LMAX_BYTES,OFFSET_NS with TMAX_NS"),
    ("obs-core:1000000001,1", "core", r"PL_PPB \(burst loss probability, parts per 1e9\) an integer 0\.\.1000000000"),
    ("obs-core:1,18446744073709551616", "core", r"SEED .* an integer 0\.\.18446744073709551615"),
    ("obs-core:1", "core", r"obs-core:PL_PPB,SEED with PL_PPB"),
    ("obs-edge:1,1,0", "core", r"\(role core\)$"),
    ("obs-core:1,1", "edge", r"\(role edge\)$"),
])
def test_a_bad_spec_names_key_value_and_range(spec, role, accepted):
    import re

    with pytest.raises(DefinitionError) as e:
        parse(spec, role=role, key="ingress.arch")
    # a name the role does not take is named alone (as for every architecture)
    want = spec if REGISTRY.get(spec.split(":")[0], role=None).roles == (role,) else spec.split(":")[0]
    assert (e.value.key, e.value.value) == ("ingress.arch", want)
    assert re.search(accepted, e.value.accepted), e.value.accepted


def test_keyword_values_name_the_parameter():
    with pytest.raises(DefinitionError, match=r"'core\.pl_ppb': -1; accepted: PL_PPB .* 0\.\.1000000000"):
        REGISTRY.assignment("obs-core", {"pl_ppb": -1, "seed": 0}, key="core")
    with pytest.raises(DefinitionError, match=r"'core\.seed': None"):
        REGISTRY.assignment("obs-core", {"pl_ppb": 0}, key="core")
    assert REGISTRY.assignment("obs-core", {"pl_ppb": "10", "seed": "7"}, role="core").spec == "obs-core:10,7"


# ---- obsburst options in emulation units ----

def _edge_ctx(tdf: float, optical_bps: float, access_bps: float = 100e6, n_hosts: int = 3) -> NodeContext:
    return NodeContext(tdf, (access_bps / tdf,) * n_hosts + (optical_bps / tdf,), (True,) * n_hosts + (False,))


def test_options_are_the_paper_values_in_emulation_units():
    # by hand: slow at D = 1000: Tmax = offset = 10 ms x 1000 = 1e10 ns; 10 Gb/s / 1000 = 1e7 bit/s
    cfg = parse(SLOW, role="edge").options(_edge_ctx(1000.0, 10e9))
    assert cfg == obsburst.ObsBurstConfig((ClassParams(10**10, 10_000_000, 10**10, 10**7),), class_by="priority",
                                          default_class=0, limit=cfg.limit, control=True)
    assert cfg.limit >= OBS_EDGE_MIN_LIMIT >= 3 * -(-10_000_000 // 578)   # three 10 MB bursts of 578 B frames
    # fast at D = 2000: 0.5 ms x 2000 = 1e9 ns, no offset, 40 Gb/s / 2000 = 2e7 bit/s
    fast = parse(FAST, role="edge").options(_edge_ctx(2000.0, 40e9))
    assert fast.classes == (ClassParams(10**9, 25_000, 0, 2 * 10**7),)
    # a huge Lmax raises the limit (4 x the 54 B frames it could hold), capped at the qdisc's 1e7
    big = parse("obs-edge:1000,1000000000,0", role="edge").options(_edge_ctx(1.0, 10e9))
    assert big.limit == obsburst.LIMIT_BOUNDS[1]
    assert cfg.pack() == obsburst.ObsBurstConfig.unpack(cfg.pack()).pack()


@pytest.mark.parametrize("spec,ctx,key,value,accepted", [
    # Tmax 1 h x D = 2 leaves the qdisc's 1 ns..1 h
    ("obs-edge:3600000000000,1000,0", _edge_ctx(2.0, 10e9), "e.arch.tmax_ns", 3_600_000_000_000,
     r"\(x D = 7200000000000\) is within the obsburst qdisc's 1\.\.3600000000000 at D = 2"),
    ("obs-edge:1000,1000,2000000000000", _edge_ctx(2.0, 10e9), "e.arch.offset_ns", 2_000_000_000_000, r"x D"),
    # 1 Mb/s / 2000 = 500 bit/s: below the qdisc's 1000 bit/s
    ("obs-edge:1000,1000,0", _edge_ctx(2000.0, 1e6), "e.arch.rate_bps", 1e6, r"bit/s \(paper\) / D = 500"),
    # no port towards a switch: no optical rate
    ("obs-edge:1000,1000,0", NodeContext(1.0, (1e8, 1e8), (True, True)), "e.arch", (1e8, 1e8),
     r"no port towards another switch"),
    ("obs-edge:1000,1000,0", NodeContext(1.0, (1e8, 1e9, 1e10), (True, False, False)), "e.arch", (1e8, 1e9, 1e10),
     r"different rates"),
])
def test_options_out_of_the_qdiscs_range_name_the_parameter(spec, ctx, key, value, accepted):
    import re

    with pytest.raises(DefinitionError) as e:
        parse(spec, role="edge").options(ctx, key="e.arch")
    assert (e.value.key, e.value.value) == (key, value)
    assert re.search(accepted, e.value.accepted), e.value.accepted


def test_other_architectures_need_no_options():
    ctx = NodeContext(1.0, (1e9,), (False,))
    assert parse("obs-core:5,6").options(ctx) is None and parse("hybrid:1").options(ctx) is None


# ---- the fabric (no kernel: map writes, tc input, netlink calls recorded) ----

class _Node(SimpleNamespace):
    pass


LINKS = [("s1", "ingress", {"rate_bps": 100e6, "length_m": 0.0}), ("s2", "ingress", {"rate_bps": 100e6, "length_m": 0}),
         ("ingress", "core", {"length_m": 0.0}), ("core", "egress", {"length_m": 1_034_000.0}),
         ("egress", "k1", {"length_m": 0.0}), ("egress", "k2", {"length_m": 0.0})]
D = 100.0
SWITCH_RATE = 10e9


def _obs_fabric(monkeypatch, links=LINKS, edge: str = SLOW):
    """s1, s2 -> ingress (obs-edge) -> core (obs-core) -> egress (electronic) -> k1, k2."""
    port_links, nports = [], {}
    for a, b, info in links:
        pa, pb = nports.get(a, 0), nports.get(b, 0)
        nports[a], nports[b] = pa + 1, pb + 1
        port_links.append((a, pa, b, pb, dict(info)))
    arch = {"ingress": ("edge", parse(edge, role="edge")), "core": ("core", parse("obs-core:0,1")),
            "egress": ("edge", parse("electronic"))}
    nodes = {}
    for n, k in nports.items():
        node = _Node(name=n, intfs=[f"{n}-eth{i}" for i in range(k)], netns=f"t-{n}")
        if n in arch:
            node.role, node.assignment = arch[n]
            node.rate_bps, node.tdf = SWITCH_RATE, D
        nodes[n] = node
    emu = SimpleNamespace(token="t", ledger="LEDGER", nodes=nodes, port_links=port_links)
    calls: list[tuple] = []
    monkeypatch.setattr(fabric.maps, "configure_nodes", lambda pin, cfgs: calls.append(("maps", list(cfgs))))
    monkeypatch.setattr(fabric.maps, "reset_monitor", lambda pin: None)
    monkeypatch.setattr(mechanisms.cmd, "run", lambda argv, **kw: calls.append(("tc", kw["netns"], kw["input"])))
    monkeypatch.setattr(obsburst, "load_module", lambda ledger: calls.append(("load", ledger)))
    monkeypatch.setattr(hostnic, "load_module", lambda ledger: calls.append(("load-hostnic", ledger)))
    monkeypatch.setattr(obsburst, "install", lambda dev, netns, config: calls.append(("obsburst", dev, config)))
    monkeypatch.setattr(obsburst, "remove", lambda dev, netns: calls.append(("remove", dev)))
    monkeypatch.setattr(obsburst, "read", lambda dev, netns: ("state", dev))
    fab = fabric.OpticalFabric(emu, ["ingress", "core", "egress"], ["s1", "s2", "k1", "k2"])
    for np in fab.nodes.values():
        fab._install(np)
    return fab, calls


def test_per_link_rates_zero_length_and_peer_holds(monkeypatch):
    fab, _ = _obs_fabric(monkeypatch)
    n = fab.nodes
    access, optical = layout.ps_per_byte(100e6 / D), layout.ps_per_byte(SWITCH_RATE / D)
    assert (access, optical) == (8_000_000, 80_000)  # by hand: 8e12 / 1e6 and 8e12 / 1e8 ps per byte
    assert [p.ps_per_byte for p in n["s1"].ports] == [access]           # the NIC at its own access rate
    assert [p.ps_per_byte for p in n["ingress"].ports] == [access, access, optical]
    assert [p.ps_per_byte for p in n["egress"].ports] == [optical] * 3 and n["k1"].ports[0].ps_per_byte == optical
    assert all(p.prop_ns == 0 for name in ("s1", "ingress", "k1") for p in n[name].ports)
    # 1034 km x 1.45 / c = 5.0 ms, x D
    assert n["core"].ports[1].prop_ns == round(1_034_000 * 1.45 / 299_792_458 * D * 1e9)
    # only the core's port from the ingress edge's assembling port carries held packets
    holds = {(name, i) for name, np in n.items() for i, p in enumerate(np.ports) if p.peer_holds}
    assert holds == {("core", 0)}
    assert n["ingress"].rates_bps == [1e6, 1e6, 1e8] and n["ingress"].holds == (False, False, True)


def test_edge_installs_obsburst_towards_the_core_and_fq_towards_hosts(monkeypatch):
    fab, calls = _obs_fabric(monkeypatch)
    edge = [c for c in calls if c[0] in ("obsburst", "load") or (c[0] == "tc" and c[1] == "t-ingress")]
    cfg = parse(SLOW, role="edge").options(fab.nodes["ingress"].context)
    assert edge == [("load", "LEDGER"), ("tc", "t-ingress", mechanisms.FQ.tc_batch(["ingress-eth0", "ingress-eth1"])),
                    ("obsburst", "ingress-eth2", cfg)]
    assert cfg.classes[0] == ClassParams(10 * MS * 100, 10_000_000, 10 * MS * 100, 10**8)
    assert ("tc", "t-core", mechanisms.FQ.tc_batch(["core-eth0", "core-eth1"])) in calls
    assert fab.holding_state() == {("ingress", "ingress-eth2"): ("state", "ingress-eth2")}
    calls.clear()
    assert fab.release() == [] and calls == [("remove", "ingress-eth2")]
    assert fab.holding_state() == {}


def test_reconfigure_per_point_reinstalls_the_assembler_and_keeps_peer_holds(monkeypatch):
    fab, calls = _obs_fabric(monkeypatch)
    calls.clear()
    fab.reconfigure({"core": parse("obs-core:1000000000,99")})
    cfg = fab.nodes["ingress"].options
    # the edge's assembler is installed anew (counters and burst ids restart); nothing else moves
    # (only the assembler: no tc process for the fq ports, which hold nothing)
    assert [c for c in calls if c[0] != "maps"] == [("remove", "ingress-eth2"), ("load", "LEDGER"),
                                                     ("obsburst", "ingress-eth2", cfg)]
    written = {c.node_id: c for c in calls[-1][1]}
    core = written[fab.nodes["core"].node_id]
    assert core.assignment.spec == "obs-core:1000000000,99" and core.ports[0].peer_holds
    # the edge gets other parameters: the qdisc with the new options
    calls.clear()
    fab.reconfigure({"ingress": parse(FAST, role="edge")})
    assert [c for c in calls if c[0] in ("obsburst", "remove")] == [
        ("remove", "ingress-eth2"), ("obsburst", "ingress-eth2", fab.nodes["ingress"].options)]
    assert fab.nodes["ingress"].options.classes[0].tmax_ns == 500_000 * 100
    # an electronic edge: the assembler goes, fq on every port, no port carries held packets
    calls.clear()
    fab.reconfigure({"ingress": parse("electronic")})
    assert ("remove", "ingress-eth2") in calls
    assert ("tc", "t-ingress", mechanisms.FQ.tc_batch(["ingress-eth0", "ingress-eth1", "ingress-eth2"])) in calls
    assert not any(p.peer_holds for np in fab.nodes.values() for p in np.ports)
    assert fab.holding_state() == {}


def test_reconfigure_checks_the_options_before_changing_anything(monkeypatch):
    fab, calls = _obs_fabric(monkeypatch)
    calls.clear()
    with pytest.raises(DefinitionError, match=r"'ingress\.arch\.tmax_ns': 3600000000000"):
        fab.reconfigure({"core": parse("obs-core:1,1"), "ingress": parse("obs-edge:3600000000000,1,0", role="edge")})
    assert calls == [] and fab.nodes["core"].assignment.spec == "obs-core:0,1"


@pytest.mark.parametrize("info,key,value,accepted", [
    ({"rate_bps": 0}, "rate_bps", 0, r"a link rate in bit/s \(paper units\), 1000\.\.8e\+12"),
    ({"rate_bps": 9e12}, "rate_bps", 9e12, r"1000\.\.8e\+12"),
    ({"rate_bps": "fast"}, "rate_bps", "fast", r"a link rate"),
    ({"rate_bps": True}, "rate_bps", True, r"a link rate"),
    ({"length_m": -1.0}, "length_m", -1.0, r"a fibre length in m, 0\.\.4e\+07 \(0: no propagation\)"),
    ({"length_m": float("inf")}, "length_m", float("inf"), r"a fibre length"),
])
def test_a_bad_link_option_names_the_link_key_value_and_range(monkeypatch, info, key, value, accepted):
    import re

    links = [*LINKS[:2], ("ingress", "core", info), *LINKS[3:]]
    with pytest.raises(DefinitionError) as e:
        _obs_fabric(monkeypatch, links=links)
    assert (e.value.key, e.value.value) == (f"link core-ingress.{key}", value)
    assert re.search(accepted, e.value.accepted), e.value.accepted
    assert fabric.link_options({"length_m": 0}, "l") == (None, 0.0)
    assert fabric.link_options({}, "l") == (None, fabric.DEFAULT_LENGTH_M)


def _topo(bad_link: dict | None = None) -> Topo:
    t = Topo()
    t.addSwitch("edge", cls="optical", role="edge", arch=SLOW, tdf=D)
    t.addSwitch("core", cls="optical", role="core", arch="obs-core:0,1", tdf=D)
    t.addLink(t.addHost("s1"), "edge", rate_bps=100e6, length_m=0.0)
    t.addLink("edge", "core", **(bad_link or {"length_m": 0.0}))
    t.addLink("core", t.addHost("k1"), length_m=0.0)
    return t


def test_emulation_checks_links_and_loads_the_module_before_any_namespace(monkeypatch):
    """A bad link option fails before anything exists; with good ones the hosts' hostnic
    module and the obsburst module are loaded (ledgered) before the namespaces, so the
    ledger removes them after them."""
    from testbed import net

    order: list[str] = []
    ledger = SimpleNamespace(entries=[], add=lambda resource, **kw: order.append(resource))

    class Stop(Exception):
        pass

    def namespaces(self, names):
        order.append("namespaces")
        raise Stop

    monkeypatch.setattr(net.Emulation, "create_namespaces", namespaces)
    monkeypatch.setattr(obsburst, "load_module", lambda led: order.append("module"))
    monkeypatch.setattr(hostnic, "load_module", lambda led: order.append("hostnic-module"))
    with pytest.raises(DefinitionError, match=r"'link core-edge\.rate_bps': -5"):
        net.Emulation(_topo({"rate_bps": -5}), ledger, "t").build()  # type: ignore[arg-type]
    assert order == []
    with pytest.raises(Stop):
        net.Emulation(_topo(), ledger, "t").build()  # type: ignore[arg-type]
    assert order == ["hostnic-module", "module", "namespaces"]
    assert net.OpticalSwitch.features({"role": "edge", "arch": SLOW}) >= {
        net.Feature.MODULES, net.Feature.FQ, net.Feature.CLSACT_BPF}


def _star(ports: int) -> Topo:
    t = Topo()
    t.addSwitch("edge", cls="optical")
    for i in range(ports):
        t.addLink(t.addHost(f"h{i}"), "edge")
    return t


def test_an_optical_switch_of_more_ports_than_the_maps_hold_is_refused_before_anything_exists():
    from testbed.net import OpticalSwitch

    with pytest.raises(DefinitionError, match=r"'edge\.ports': 65; accepted: an optical switch of 1\.\.64 ports"):
        OpticalSwitch(SimpleNamespace(topo=_star(65), token="t"), "edge", arch="electronic")  # type: ignore[arg-type]


@pytest.mark.parametrize("ports", [33, 64])
def test_an_optical_switch_of_up_to_64_ports_is_accepted(ports):
    """33 = E2's fast class at scale 10 (32 sources + the core link); 64 = OPTSW_MAX_PORTS."""
    from testbed.net import OpticalSwitch

    sw = OpticalSwitch(SimpleNamespace(topo=_star(ports), token="t"), "edge", arch="electronic")  # type: ignore[arg-type]
    assert sw.assignment.arch.name == "electronic" and layout.MAX_PORTS == 64


def test_counters_name_the_qdisc_of_each_port(monkeypatch):
    """optical_ports.csv records which qdisc released each port's packets: hostnic on
    hosts, obsburst on the edge's assembling port, fq elsewhere."""
    fab, _ = _obs_fabric(monkeypatch)
    port = {"cut": 0, "buffered": 0, "dropped": 0, "bytes": 0, "busy_ns": 0, "max_occ_bytes": 0, "rx": 0,
            "nocfg": 0, "last_dep_ns": 0, "last_rx_real_ns": 0, "last_rx_stamp_ns": 0}
    states = {np.node_id: {"max_occ_bytes": 0, "occ_overflow": 0, "bout_overflow": 0,
                           "ports": [dict(port) for _ in np.ports]} for np in fab.nodes.values()}
    monkeypatch.setattr(fabric.maps, "read_states", lambda pin, n_ports: states)
    qdisc = {(r["node"], r["intf"]): r["qdisc"] for r in fab.counters()}
    assert qdisc[("s1", "s1-eth0")] == qdisc[("k2", "k2-eth0")] == "hostnic"
    assert qdisc[("ingress", "ingress-eth2")] == "obsburst"
    assert qdisc[("ingress", "ingress-eth0")] == qdisc[("core", "core-eth1")] == qdisc[("egress", "egress-eth0")] == "fq"
