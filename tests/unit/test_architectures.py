"""The port-architecture registry: specs, bounds, packed configurations, realisations,
the one source of the architecture codes, and per-node assignments in the fabric."""

from __future__ import annotations

import re
import struct
from pathlib import Path
from types import SimpleNamespace

import pytest
from mininet.topo import Topo

from testbed.errors import DefinitionError
from testbed.optical import architectures, archgen, fabric, hostnic, layout, mechanisms, model
from testbed.optical.architectures import REGISTRY, ArchParam, Architecture, Assignment, Registry, parse
from testbed.optical.layout import PortConfig

EBPF = Path(__file__).resolve().parents[2] / "ebpf"
PS = layout.ps_per_byte(10e9)


# ---- specs and bounds ----

def test_parse_reads_the_specs_and_writes_them_back():
    a = parse("hybrid:2", ports=4)
    assert (a.name, a.params, a.spec) == ("hybrid", {"n_e": 2}, "hybrid:2")
    assert parse(" hybrid : 3 ").params == {"n_e": 3}
    for spec in ("all-optical", "electronic", "hybrid:1"):
        assert parse(parse(spec).spec) == parse(spec)
    assert parse("nic", role="host").name == "nic"


@pytest.mark.parametrize("spec,ports,key,accepted", [
    ("hybrid:5", 4, "params.switch", r"N_E \(buffer input and output ports\) an integer 1\.\.4 \(at most the node's 4 ports\)"),
    ("hybrid:33", None, "params.switch", r"an integer 1\.\.32"),
    ("hybrid:0", 4, "params.switch", r"an integer 1\.\.4"),
    ("hybrid:x", 4, "params.switch", r"an integer 1\.\.4"),
    ("hybrid", 4, "params.switch", r"hybrid:N_E with N_E"),
    ("hybrid:1,2", 4, "params.switch", r"hybrid:N_E with N_E"),
    ("all-optical:2", 4, "params.switch", r"all-optical with no parameters"),
    ("optical", 4, "params.switch",
     r"^electronic \| fifo:MAX_WAIT_NS \| all-optical \| hybrid:N_E( \| .*)? \(role core\)$"),
    ("nic", 4, "params.switch",
     r"^electronic \| fifo:MAX_WAIT_NS \| all-optical \| hybrid:N_E( \| .*)? \(role core\)$"),
    ("fifo:-1", 4, "s1.arch", r"^MAX_WAIT_NS \(longest wait in the buffer, paper ns; x D at most fq's 3600 s horizon\) "
                              r"an integer 0\.\.3600000000000$"),
    ("fifo:3600000000001", 4, "s1.arch", r"^MAX_WAIT_NS \(.*\) an integer 0\.\.3600000000000$"),
    ("fifo:0.25", 4, "s1.arch", r"^MAX_WAIT_NS \(.*\) an integer 0\.\.3600000000000$"),
    ("fifo", 4, "s1.arch", r"^fifo:MAX_WAIT_NS with MAX_WAIT_NS \(.*\) an integer 0\.\.3600000000000$"),
    ("fifo:1,2", 4, "s1.arch", r"^fifo:MAX_WAIT_NS with MAX_WAIT_NS"),
])
def test_a_bad_spec_names_key_value_and_accepted_range(spec, ports, key, accepted):
    with pytest.raises(DefinitionError) as e:
        parse(spec, ports, key=key)
    assert e.value.key == key and e.value.value == spec
    assert re.search(accepted, e.value.accepted), e.value.accepted
    assert f"invalid value for '{key}': {spec!r}" in str(e.value)


def test_fifo_spec_is_a_paper_duration_kept_as_given():
    a = parse("fifo:250000000", 4, role="edge")
    assert (a.name, a.params, a.spec, a.arch.code, a.arch.bpf) == ("fifo", {"max_wait_ns": 250_000_000},
                                                                 "fifo:250000000", 9, "fifo")
    assert parse("fifo:0").params == {"max_wait_ns": 0} and a.arch.roles == architectures.SWITCH_ROLES
    assert a.arch.realisation is mechanisms.EDT_FQ
    with pytest.raises(DefinitionError, match=r"'s1\.max_wait_ns': -5; accepted: MAX_WAIT_NS .* 0\.\.3600000000000"):
        REGISTRY.assignment("fifo", {"max_wait_ns": -5}, key="s1")


def test_xcp_edge_is_an_edge_holding_architecture_waiting_for_its_pacer():
    """xcp-edge:MAX_WAIT_NS (code 11, role edge): the wait bound is a paper duration as
    fifo's (packed x D); choosing it names the missing xcppace qdisc until the mechanism
    exists; it has no per-packet model (the pacer's rates come from XCP)."""
    arch = REGISTRY.get("xcp-edge", role="edge")
    assert (arch.code, arch.bpf, arch.roles, arch.syntax) == (11, "xcp_edge", ("edge",), "xcp-edge:MAX_WAIT_NS")
    assert arch.realisation.name == mechanisms.HOLDING and arch.reference is None
    assert "xcp-edge:MAX_WAIT_NS" in REGISTRY.syntax("edge") and "xcp-edge" not in REGISTRY.syntax("core")
    if arch.realisation.mechanism is None:
        with pytest.raises(DefinitionError, match=r"'e1\.arch': 'xcp-edge:250000000'.*xcppace qdisc"):
            parse("xcp-edge:250000000", role="edge", key="e1.arch")
    with pytest.raises(DefinitionError, match=r"MAX_WAIT_NS \(.*\) an integer 0\.\.3600000000000"):
        parse("xcp-edge:-1", role="edge")
    a = Assignment(arch, (("max_wait_ns", 250_000_000),))
    assert a.packed(20) == struct.pack("<Q", 5_000_000_000) and a.spec == "xcp-edge:250000000"


def test_keyword_assignment_names_the_parameter_key():
    assert REGISTRY.assignment("hybrid", {"n_e": "2"}).params == {"n_e": 2}
    with pytest.raises(DefinitionError, match=r"'s1\.n_e': 40; accepted: N_E .* an integer 1\.\.32"):
        REGISTRY.assignment("hybrid", {"n_e": 40}, key="s1")
    with pytest.raises(DefinitionError, match=r"'s1\.n_e': None"):
        REGISTRY.assignment("hybrid", {}, key="s1")
    with pytest.raises(DefinitionError, match=r"'s1\.b': 1; accepted: no such parameter of 'electronic'"):
        REGISTRY.assignment("electronic", {"b": 1}, key="s1")
    with pytest.raises(DefinitionError, match=r"role 'host'; 'hybrid' serves edge, core"):
        parse("hybrid:1").check(role="host")
    with pytest.raises(DefinitionError, match=r"at most the node's 2 ports"):
        parse("hybrid:3").check(ports=2)


def test_the_older_model_and_n_e_pair_is_read_as_before():
    assert architectures.from_model("hybrid", 2) == parse("hybrid:2")
    assert architectures.from_model("all-optical", 3) == parse("all-optical")  # forced 0, as before
    assert architectures.from_model("electronic", 0) == parse("electronic")
    with pytest.raises(DefinitionError, match=r"'switch\.model': 'optical'"):
        architectures.from_model("optical", 0)
    with pytest.raises(DefinitionError, match=r"'switch\.n_e': 33"):
        architectures.from_model("electronic", 33)


def test_switch_options_give_one_assignment():
    sw = architectures.switch_assignment
    assert sw({}, role="core", key="s1") == parse("hybrid:1")
    assert sw({"model": "electronic"}, role="core", key="s1") == parse("electronic")
    assert sw({"arch": "hybrid:2"}, role="edge", key="s1", ports=4) == parse("hybrid:2")
    assert sw({"arch": parse("all-optical")}, role="core", key="s1") == parse("all-optical")
    with pytest.raises(DefinitionError, match=r"'s1\.arch'.*either arch or the older model/n_e"):
        sw({"arch": "hybrid:2", "n_e": 2}, role="core", key="s1")
    with pytest.raises(DefinitionError, match=r"'s1\.arch': 'hybrid:5'.*at most the node's 4 ports"):
        sw({"arch": "hybrid:5"}, role="core", key="s1", ports=4)
    with pytest.raises(DefinitionError, match=r"'s1\.role': 'spine'; accepted: edge \| core"):
        architectures.check_role("spine", key="s1.role", roles=architectures.SWITCH_ROLES)


# ---- packed configuration and reference models ----

def test_packed_configuration_is_the_c_struct_of_the_parameters():
    assert parse("hybrid:5").packed() == struct.pack("<I", 5)
    assert parse("electronic").packed() == b""
    mixed = Architecture("mixed", 90, "mixed", "test", model.NicModel,
                         params=(ArchParam("a", "a", 0, 9), ArchParam("b", "b", 0, 9, ctype="u64"),
                                 ArchParam("c", "c", 0, 9)))
    assert mixed.cfg_format == "<IxxxxQIxxxx" and mixed.cfg_size == 24
    assert mixed.pack({"a": 1, "b": 2, "c": 3}) == struct.pack("<IxxxxQIxxxx", 1, 2, 3)
    with pytest.raises(ValueError, match="exceeds 64 B"):
        Architecture("big", 91, "big", "test", model.NicModel,
                     params=tuple(ArchParam(f"p{i}", "p", 0, 1, ctype="u64") for i in range(9)))
    cfg = layout.node_cfg(3, parse("hybrid:2").packed(), [PortConfig(PS)])
    assert struct.unpack_from("<III", cfg) == (3, 1, 2) and len(cfg) == 8 + 64 + 24 * layout.MAX_PORTS


def test_each_architecture_has_its_reference_model():
    """A per-packet PortModel, or (an architecture whose behaviour is not a per-packet
    decision) an oracle module that exists; asking such one for a per-packet model
    names its oracle."""
    import importlib

    ports = [PortConfig(PS) for _ in range(4)]
    per_packet = [a for a in REGISTRY if a.reference is not None]
    kinds = {a.name: type(REGISTRY.assignment(a.name, {p.name: p.lo for p in a.params}, role=None).reference(ports))
             for a in per_packet}
    assert {n: kinds[n] for n in ("nic", "electronic", "all-optical", "hybrid")} == {
        "nic": model.NicModel, "electronic": model.ElectronicModel,
        "all-optical": model.AllOpticalModel, "hybrid": model.HybridModel}
    assert all(issubclass(k, model.PortModel) for k in kinds.values())
    assert parse("hybrid:3").reference(ports).n_e == 3  # type: ignore[attr-defined]
    oracles = {a.name: a.oracle for a in REGISTRY if a.reference is None}
    assert oracles == {"obs-edge": "testbed.optical.burst", "obs-core": "testbed.optical.burstloss",
                       "ib": "testbed.optical.ramsim", "xcp-edge": "testbed.xcpsim",
                       "hybrid-hold": "testbed.optical.eventsim"}
    for name, module in oracles.items():
        if name == "obs-edge":  # burstloss.py is the bpf helper's, maybe not there yet
            assert hasattr(importlib.import_module(module), "assemble")
        if name == "ib":  # the paper's node, input buffering among its architectures
            assert "IB" in importlib.import_module(module).ARCHITECTURES
        if name == "hybrid-hold":  # the paper's switch itself, written from the paper
            assert "hybrid" in importlib.import_module(module).MODELS
        if name == "xcp-edge":  # the closed loop with its leaky-bucket pacers
            assert hasattr(importlib.import_module(module), "dumbbell")
        arch = REGISTRY.get(name, role=None)
        # built by hand: a holding architecture whose mechanism is still missing refuses assignment()
        assignment = Assignment(arch, tuple((p.name, p.lo) for p in arch.params))
        with pytest.raises(TypeError, match=f"'{name}' has no per-packet reference model; its reference is {module}"):
            assignment.reference(ports)
    with pytest.raises(ValueError, match="must name its oracle"):
        Architecture("x", 99, "x", "", None)


# ---- durations: paper ns in specs, emulation ns (x D) in the BPF configuration ----

def test_a_duration_is_packed_dilated_by_the_nodes_d():
    """fifo:250000000 (the paper's 0.25 s) on a node at D = 20 holds 5e9 ns; the spec,
    the params and the packing at D = 1 keep the paper value."""
    a = parse("fifo:250000000")
    assert a.packed(20) == struct.pack("<Q", 5_000_000_000)
    assert a.emulation_values(20) == {"max_wait_ns": 5_000_000_000}
    assert a.packed() == a.packed(1.0) == struct.pack("<Q", 250_000_000)
    assert a.params == {"max_wait_ns": 250_000_000} and a.spec == "fifo:250000000"
    # rounded to integer ns, exactly (7 x 2.5 = 17.5 -> 18, half to even; 3 x 1.5 = 4.5 -> 4)
    assert parse("fifo:7").packed(2.5) == struct.pack("<Q", 18)
    assert parse("fifo:3").packed(1.5) == struct.pack("<Q", 4)
    # the emulation range's end itself is accepted
    assert parse("fifo:1800000000000").packed(2) == struct.pack("<Q", architectures.FQ_HORIZON_NS)
    # the reference model gets the emulation value too
    ports = [PortConfig(PS) for _ in range(2)]
    assert a.reference(ports, tdf=20).max_wait_ns == 5_000_000_000  # type: ignore[attr-defined]
    assert a.reference(ports).max_wait_ns == 250_000_000  # type: ignore[attr-defined]


def test_a_dilated_duration_out_of_range_names_key_value_and_emulation_range():
    a = parse("fifo:250000000")
    with pytest.raises(DefinitionError) as e:
        a.packed(20_000, key="s1.arch")  # 5e12 ns, beyond fq's 3600 s horizon
    assert (e.value.key, e.value.value) == ("s1.arch.max_wait_ns", 250_000_000)
    assert "emulation value (x D = 5000000000000 ns) is within 0..3600000000000 ns at D = 20000" in e.value.accepted
    with pytest.raises(DefinitionError, match=r"'s1\.arch\.max_wait_ns': 1800000000001"):
        parse("fifo:1800000000001").packed(2, key="s1.arch")
    with pytest.raises(DefinitionError, match=r"'arch\.max_wait_ns'"):
        a.reference([PortConfig(PS)], tdf=20_000)
    with pytest.raises(ValueError, match="time dilation 0.5 < 1"):
        a.packed(0.5)
    # the C type bounds a duration without an explicit emulation range
    d32 = Architecture("d32", 92, "d32", "test", model.NicModel,
                       params=(ArchParam("t_ns", "a duration", 0, 2**32 - 1, duration=True),))
    assert Assignment(d32, (("t_ns", 2**31),)).packed(1.99) == struct.pack("<I", round(2**31 * 1.99))
    with pytest.raises(DefinitionError, match=r"within 0\.\.4294967295 ns at D = 2"):
        Assignment(d32, (("t_ns", 2**31),)).packed(2)
    with pytest.raises(ValueError, match="emulation_hi is for a duration only"):
        ArchParam("n", "n", 0, 9, emulation_hi=5)
    with pytest.raises(ValueError, match="does not fit a u32"):
        ArchParam("t", "t", 0, 9, duration=True, emulation_hi=2**32)


def test_only_durations_are_dilated_every_other_packing_is_unchanged():
    """No parameter of the other architectures is a duration for BPF: their packing does
    not depend on D (obs-edge's Tmax and offset are dilated for its qdisc by
    mechanism_options; its BPF configuration is not read by the program)."""
    assert [(a.name, p.name) for a in REGISTRY for p in a.params if p.duration] == [("fifo", "max_wait_ns"),
                                                                                 ("xcp-edge", "max_wait_ns")]
    for spec, role in (("hybrid:5", "core"), ("ob:1500", "core"), ("obs-core:10,7", "core"),
                       ("obs-edge:1000000,100000,5000", "edge")):
        a = parse(spec, role=role)
        assert a.packed(1000) == a.packed() == a.arch.pack(a.params), spec
    program = (EBPF / "arch" / "obs_edge.h").read_text().split("OPTSW_DECIDE(obs_edge)", 1)[1]
    assert "arch_cfg" not in program, "obs-edge's program reads its configuration: is it a duration now?"


def test_fq_horizon_is_the_one_fq_is_installed_with():
    i = mechanisms.FQ_OPTS.index("horizon")
    assert mechanisms.FQ_OPTS[i + 1] == f"{architectures.FQ_HORIZON_NS // 10**9}s"
    assert "horizon_cap" in mechanisms.FQ_OPTS


# ---- one source of the architecture codes ----

def test_the_registry_refuses_a_shared_name_code_or_bpf_id():
    a = architectures.HYBRID
    for clash in (Architecture("x", a.code, "x", "", model.NicModel), Architecture(a.name, 99, "x", "", model.NicModel),
                  Architecture("x", 99, a.bpf, "", model.NicModel)):
        with pytest.raises(ValueError, match="share a name, code or bpf id"):
            Registry([a, clash])


def test_every_architecture_has_its_bpf_header_and_no_other_list_exists():
    headers = {p.stem for p in (EBPF / "arch").glob("*.h")}
    assert headers == {a.bpf for a in REGISTRY}, "one ebpf/arch/<bpf>.h per registry entry, and no other"
    for a in REGISTRY:
        text = (EBPF / "arch" / f"{a.bpf}.h").read_text()
        assert f"OPTSW_DECIDE({a.bpf})" in text, a.bpf
        if a.params:  # its configuration struct has the parameters, in order
            members = re.search(rf"struct optsw_{a.bpf}_cfg \{{(.*?)\}};", text, re.S).group(1)
            named = [m for m in re.findall(r"__(u32|u64) (\w+);", members) if not m[1].startswith("pad")]
            assert named == [(p.ctype, p.name) for p in a.params]  # explicit padding members aside
    program = (EBPF / "optswitch.bpf.c").read_text() + (EBPF / "optswitch.h").read_text()
    assert "OPTSW_MODEL_" not in program and '#include "optsw_archs.h"' in program


def test_the_architectures_that_read_what_waits_are_those_whose_decision_does():
    """reads_waiting (the rodata their nodes' programs load with) is set exactly for the
    headers whose decision calls optical_ram_decide."""
    reads = {a.name for a in REGISTRY if "optical_ram_decide(" in (EBPF / "arch" / f"{a.bpf}.h").read_text()}
    assert reads == {a.name for a in REGISTRY if a.reads_waiting} == {"ob", "sb", "wcsb"}


def test_generated_dispatch_lists_every_code_once_and_the_build_used_it():
    text = archgen.render()
    decide = r"if \(arch == (\d+)\) /\* (\S+) \*/\s+return optsw_\w+_decide\("
    assert re.findall(decide, text) == [(str(a.code), a.name) for a in REGISTRY]
    assert [f"arch/{a.bpf}.h" for a in REGISTRY] == re.findall(r'#include "(arch/\w+\.h)"', text)
    # the optional hooks: obs-core's control unit, xcp-edge's preparation before the lock
    assert re.findall(r"if \(arch == (\d+)\) /\* (\S+) \*/\s+return optsw_\w+_control\(", text) == \
        [(str(a.code), a.name) for a in REGISTRY if a.name == "obs-core"]
    assert re.findall(r"if \(arch == (\d+)\) /\* (\S+) \*/\s+optsw_\w+_prepare\(", text) == \
        [(str(a.code), a.name) for a in REGISTRY if a.name == "xcp-edge"]
    built = EBPF / archgen.GENERATED
    if not built.exists():
        pytest.skip("ebpf not built")
    assert built.read_text() == text, "ebpf/.output/optsw_archs.h is stale: run make -C ebpf"


# ---- realisations ----

def test_fq_mechanism_installs_the_same_qdisc_as_before():
    assert mechanisms.FQ.tc_batch(["s1-eth0", "s1-eth1"]) == "".join(
        f"qdisc replace dev {d} root fq limit 1000000 flow_limit 1000000 horizon 3600s horizon_cap nopacing\n"
        for d in ("s1-eth0", "s1-eth1"))
    assert all(REGISTRY.get(n, role=None).realisation is mechanisms.EDT_FQ
               for n in ("electronic", "all-optical", "hybrid", "obs-core"))
    # the hosts' NIC: stamped and released at arrival too, by the hostnic qdisc (fq
    # would let TCP Small Queues count a packet against its sender across the fabric)
    nic = REGISTRY.get("nic", role=None).realisation
    assert nic.name == mechanisms.EDT and nic.mechanism is hostnic.HOSTNIC
    assert REGISTRY.get("obs-edge", role=None).realisation.name == mechanisms.HOLDING


def _holding_registry(mechanism: mechanisms.Mechanism | None = None) -> Registry:
    voq = Architecture("voq", 50, "voq", "input buffering with virtual output queues", model.NicModel,
                       realisation=mechanisms.holding("a VOQ qdisc module (kernel/sch_voq)", mechanism))
    return Registry([*REGISTRY, voq])


def test_choosing_a_holding_architecture_without_its_mechanism_names_what_is_missing():
    reg = _holding_registry()
    with pytest.raises(DefinitionError) as e:
        reg.parse("voq", key="params.switch")
    assert e.value.key == "params.switch" and e.value.value == "voq"
    assert "'voq' is realised by holding" in e.value.accepted
    assert "a VOQ qdisc module (kernel/sch_voq), which does not exist yet" in e.value.accepted
    with pytest.raises(DefinitionError, match="sch_voq"):
        reg.assignment("voq")
    with pytest.raises(DefinitionError, match=r"'s2\.arch': 'voq'.*sch_voq"):  # built by hand: checked too
        Assignment(reg.get("voq")).check(key="s2.arch")
    with pytest.raises(ValueError, match="must say what is missing"):
        mechanisms.Realisation(mechanisms.HOLDING, None)


# ---- per-node assignments in the fabric (no kernel: map writes and tc recorded) ----

class _Node(SimpleNamespace):
    pass


def _fabric(monkeypatch, roles: dict[str, str] | None = None, *, tdf: float = 1.0,
            arch: dict[str, Assignment] | None = None):
    """h1 - s1 - s2 - h2 and h3 on s2; switches hybrid:1 (or ``arch[name]``) of role core
    unless ``roles`` says otherwise, at time dilation ``tdf``."""
    links = [("h1", 0, "s1", 0), ("s1", 1, "s2", 0), ("s2", 1, "h2", 0), ("s2", 2, "h3", 0)]
    nports: dict[str, int] = {}
    for a, _, b, _ in links:
        nports[a] = nports.get(a, 0) + 1
        nports[b] = nports.get(b, 0) + 1
    nodes = {}
    for n, k in nports.items():
        node = _Node(name=n, intfs=[f"{n}-eth{i}" for i in range(k)], netns=f"t-{n}")
        if n.startswith("s"):
            node.role, node.assignment, node.rate_bps, node.tdf = (
                (roles or {}).get(n, "core"), (arch or {}).get(n, parse("hybrid:1")), 10e9, tdf)
        nodes[n] = node
    emu = SimpleNamespace(token="t", ledger=None, nodes=nodes,
                          port_links=[(a, pa, b, pb, {}) for a, pa, b, pb in links])
    written, tc = [], []
    monkeypatch.setattr(fabric.maps, "configure_nodes", lambda pin, cfgs: written.append(list(cfgs)))
    monkeypatch.setattr(fabric.maps, "reset_monitor", lambda pin: None)
    monkeypatch.setattr(mechanisms.cmd, "run", lambda argv, **kw: tc.append((kw["netns"], kw["input"])))
    fab = fabric.OpticalFabric(emu, ["s1", "s2"], ["h1", "h2", "h3"])
    for np in fab.nodes.values():
        fab._install(np)
    tc.clear()
    return fab, written, tc


def test_reconfigure_gives_each_node_its_own_architecture(monkeypatch):
    fab, written, tc = _fabric(monkeypatch, roles={"s1": "edge"})
    assert [(n, np.role, np.model) for n, np in fab.nodes.items()] == [
        ("h1", "host", "nic"), ("h2", "host", "nic"), ("h3", "host", "nic"), ("s1", "edge", "hybrid"),
        ("s2", "core", "hybrid")]
    fab.reconfigure(fab.by_role({"edge": parse("electronic"), "core": parse("hybrid:3", 3)}))
    cfg = {c.node_id: c.assignment.spec for c in written[-1]}
    assert cfg == {0: "nic", 1: "nic", 2: "nic", 3: "electronic", 4: "hybrid:3"}
    assert fab.emu.nodes["s2"].assignment == parse("hybrid:3") and fab.nodes["s2"].n_e == 3
    assert tc == []  # the same mechanism (fq) stays installed
    fab.reconfigure_switches(parse("hybrid:2"))
    assert [c.assignment.spec for c in written[-1]] == ["nic"] * 3 + ["hybrid:2"] * 2


def test_reconfigure_reloads_the_programs_of_a_node_whose_architecture_starts_or_stops_reading_what_waits(
        monkeypatch):
    """ob/sb/wcsb's egress scans the occupancy before deciding (rodata tb_reads_waiting):
    a node switching to or from one of them gets its programs loaded anew, once, with
    the flag; the others and a node not attached yet are left alone."""
    fab, written, _ = _fabric(monkeypatch)
    reloads = []

    def reload(ledger, pin, nodes, generation):
        reloads.append(([(n.node_id, n.reads_waiting, [r["prog_id"] for r in old]) for n, old in nodes], generation))
        return [[dict(r, prog_id=r["prog_id"] + 100) for r in old] for _, old in nodes]

    monkeypatch.setattr(fabric.bpf, "reload_nodes", reload)
    for np in fab.nodes.values():
        if np.name != "s1":  # s1: not attached yet (nothing to reload; its setup loads it)
            np.attached = [{"dev": np.devs[0], "dir": "egress", "prog_id": np.node_id}]
    fab.reconfigure({"s1": parse("sb:1500"), "s2": parse("ob:1500", 3)})
    assert reloads == [([(4, True, [4])], 1)]
    assert fab.nodes["s2"].attached[0]["prog_id"] == 104 and fab.nodes["s2"].loaded_reads_waiting
    fab.reconfigure({"s2": parse("wcsb:3000", 3)})       # still reads what waits: nothing to do
    assert len(reloads) == 1
    fab.reconfigure({"s2": parse("hybrid:1", 3)})
    assert reloads[1] == ([(4, False, [104])], 2) and not fab.nodes["s2"].loaded_reads_waiting
    assert [c.assignment.spec for c in written[-1]][3:] == ["sb:1500", "hybrid:1"]


@pytest.mark.parametrize("assignments,match", [
    ({"s1": "hybrid:3"}, r"'s1\.arch': 'hybrid:3'.*at most the node's 2 ports"),
    ({"h1": "hybrid:1"}, r"'h1\.arch'.*role 'host'"),
    ({"s9": "hybrid:1"}, r"'node': 's9'; accepted: a node of the optical fabric"),
])
def test_reconfigure_checks_every_node_before_changing_any(monkeypatch, assignments, match):
    fab, written, _ = _fabric(monkeypatch)
    with pytest.raises(DefinitionError, match=match):
        fab.reconfigure({"s2": parse("electronic"), **{n: parse(s, role=None) for n, s in assignments.items()}})
    assert written == [] and fab.nodes["s2"].model == "hybrid"


def test_the_fabric_configures_each_node_with_its_d(monkeypatch):
    """The switches' D reaches the BPF configuration: fifo:250000000 at D = 20 is written
    as 5e9 ns (map writer stubbed: the NodeConfig it is given packs so)."""
    fab, written, _ = _fabric(monkeypatch, tdf=20.0)
    fab.reconfigure({"s1": parse("fifo:250000000", role="edge")})
    cfg = {c.node_id: c for c in written[-1]}
    assert {i: c.tdf for i, c in cfg.items()} == {i: 20.0 for i in range(5)}  # hosts take their switch's D
    assert cfg[3].assignment.packed(cfg[3].tdf) == struct.pack("<Q", 5_000_000_000)


def test_a_dilated_duration_out_of_range_is_refused_before_anything_changes(monkeypatch):
    fab, written, _ = _fabric(monkeypatch, tdf=20_000.0)
    with pytest.raises(DefinitionError, match=r"'s2\.arch\.max_wait_ns': 250000000; accepted: .* at D = 20000"):
        fab.reconfigure({"s1": parse("fifo:1000"), "s2": parse("fifo:250000000")})
    assert written == [] and fab.nodes["s1"].model == "hybrid"
    with pytest.raises(DefinitionError, match=r"'s1\.arch\.max_wait_ns'"):  # a fabric being built: refused too
        _fabric(monkeypatch, tdf=20_000.0, arch={"s1": parse("fifo:250000000")})


def test_a_node_gets_the_mechanism_of_its_architectures_realisation(monkeypatch):
    """Adding a mechanism is an addition: a holding architecture that has one is installed
    on its nodes only, by the same fabric code."""
    fab, written, tc = _fabric(monkeypatch)
    pfifo = mechanisms.TcQdisc("pfifo-test", "a stand-in holding qdisc", frozenset(), ("pfifo", "limit", "10"))
    voq = REGISTRY.get("nic")  # any reference model will do: nothing is offered
    voq = Architecture("voq", 50, "voq", "test", voq.reference, roles=("core",),
                       realisation=mechanisms.holding("", pfifo))
    fab.reconfigure({"s2": Assignment(voq)})
    assert tc == [("t-s2", "".join(f"qdisc replace dev s2-eth{i} root pfifo limit 10\n" for i in range(3)))]
    fab.reconfigure({"s2": parse("hybrid:1")})
    assert tc[-1] == ("t-s2", mechanisms.FQ.tc_batch(["s2-eth0", "s2-eth1", "s2-eth2"]))


def test_optical_switch_checks_its_architecture_against_its_ports_before_anything_exists():
    from testbed.net import OpticalSwitch

    topo = Topo()
    topo.addSwitch("s1", cls="optical")
    for h in ("h1", "h2", "h3"):
        topo.addLink(topo.addHost(h), "s1")
    emu = SimpleNamespace(topo=topo, token="t")
    assert OpticalSwitch(emu, "s1", arch="hybrid:3", role="edge").assignment == parse("hybrid:3")  # type: ignore[arg-type]
    assert OpticalSwitch(emu, "s1", model="hybrid", n_e=2).assignment == parse("hybrid:2")  # type: ignore[arg-type]
    with pytest.raises(DefinitionError, match=r"'s1\.arch': 'hybrid:4'.*at most the node's 3 ports"):
        OpticalSwitch(emu, "s1", arch="hybrid:4")  # type: ignore[arg-type]
    with pytest.raises(DefinitionError, match=r"'s1\.role': 'host'; accepted: edge \| core"):
        OpticalSwitch(emu, "s1", role="host")  # type: ignore[arg-type]
