"""E5's input buffering (``ib``) in the registry, the voq qdisc's options and counters
from Python (testbed/optical/voq.py) and its fabric mechanism, without a kernel: the
spec and its errors, the byte layouts against kernel/voq.h as the system C compiler
lays it out, the options' bounds, the node's options from its context (lookahead M
against the links), the install plan (voq on every port, no re-stamping at the peer),
the counters in the fabric's rows and E5's totals, and one netlink dump per node."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from testbed.errors import DefinitionError
from testbed.families import e1_fattree, e5_optram
from testbed.optical import fabric, hostnic, hybridsched, ibsched, layout, mechanisms, obsburst, qdiscnl, voq
from testbed.optical.architectures import REGISTRY, parse
from testbed.optical.mechanisms import NodeContext

KERNEL = Path(__file__).resolve().parents[2] / "kernel"
PS_20 = layout.ps_per_byte(1e9 / 20)       # 1 Gb/s at D = 20: 160 000 ps per byte


# ---- the registry entry ----

def test_ib_is_registered_as_a_holding_core_architecture_with_b_per_input():
    a = parse("ib:1500")
    assert (a.name, a.params, a.spec, a.arch.code, a.arch.bpf) == ("ib", {"buffer_bytes": 1500}, "ib:1500", 10, "ib")
    assert a.packed() == struct.pack("<Q", 1500) and a.packed(20) == a.packed()   # B is bytes: not dilated
    assert a.arch.roles == ("core",) and a.arch.reference is None and a.arch.oracle == "testbed.optical.ramsim"
    assert a.arch.realisation.name == mechanisms.HOLDING and a.mechanism is voq.VOQ
    assert "ib:BUFFER_BYTES" in REGISTRY.syntax("core") and "ib" not in REGISTRY.names("edge")
    # E1's fat-tree takes the architectures that decide per packet: not ib
    assert "ib" not in [x.name for x in e1_fattree.switch_architectures()]
    assert "ib" in e5_optram.ARCHS


@pytest.mark.parametrize("spec,role,key,value,accepted", [
    ("ib:-1", "core", "s.arch", "ib:-1", r"BUFFER_BYTES \(B, optical RAM per input, IP datagram bytes\) an integer "
                                        r"0\.\.1000000000"),
    ("ib:1000000001", "core", "s.arch", "ib:1000000001", r"0\.\.1000000000"),
    ("ib", "core", "s.arch", "ib", r"ib:BUFFER_BYTES with BUFFER_BYTES"),
    ("ib:1500", "edge", "s.arch", "ib", r"\(role edge\)$"),
])
def test_a_bad_ib_spec_names_key_value_and_range(spec, role, key, value, accepted):
    with pytest.raises(DefinitionError) as e:
        parse(spec, role=role, key="s.arch")
    assert (e.value.key, e.value.value) == (key, value)
    assert re.search(accepted, e.value.accepted), e.value.accepted


# ---- byte layouts against kernel/voq.h (the system C compiler's layout) ----

_LAYOUT_C = r"""
#include <stddef.h>
#include <stdio.h>
#include "voq.h"
#define M(s, f) printf("%s\"%s\": [%zu, %zu]", first++ ? ", " : "", #f, offsetof(struct s, f), sizeof(((struct s *)0)->f))
int main(void)
{
	int first = 0;
	printf("{\"qopt\": {");
	M(tc_voq_qopt, version); M(tc_voq_qopt, node_id); M(tc_voq_qopt, n_ports); M(tc_voq_qopt, port);
	M(tc_voq_qopt, scheduler); M(tc_voq_qopt, voq_split); M(tc_voq_qopt, flags); M(tc_voq_qopt, limit);
	M(tc_voq_qopt, buffer_bytes); M(tc_voq_qopt, lookahead_ns); M(tc_voq_qopt, ps_per_byte); M(tc_voq_qopt, prop_ns);
	M(tc_voq_qopt, xcp_epoch_ns); M(tc_voq_qopt, xcp_interval_ns); M(tc_voq_qopt, n_e); M(tc_voq_qopt, reserved);
	first = 0;
	printf("}, \"port\": {");
	M(tc_voq_port_stats, arrivals); M(tc_voq_port_stats, cut); M(tc_voq_port_stats, buffered);
	M(tc_voq_port_stats, dropped); M(tc_voq_port_stats, late); M(tc_voq_port_stats, decided_after_stamp);
	M(tc_voq_port_stats, released); M(tc_voq_port_stats, released_bytes); M(tc_voq_port_stats, unmodelled);
	M(tc_voq_port_stats, overlimit); M(tc_voq_port_stats, in_dropped); M(tc_voq_port_stats, in_max_bytes);
	M(tc_voq_port_stats, in_bytes);
	first = 0;
	printf("}, \"node\": {");
	M(tc_voq_node_stats, arrivals); M(tc_voq_node_stats, cut); M(tc_voq_node_stats, buffered);
	M(tc_voq_node_stats, dropped); M(tc_voq_node_stats, late); M(tc_voq_node_stats, decided_after_stamp);
	M(tc_voq_node_stats, max_enqueue_late_ns); M(tc_voq_node_stats, max_decision_lag_ns);
	M(tc_voq_node_stats, max_node_bytes); M(tc_voq_node_stats, last_ns); M(tc_voq_node_stats, waiting);
	M(tc_voq_node_stats, pending); M(tc_voq_node_stats, members); M(tc_voq_node_stats, late_log2);
	first = 0;
	printf("}, \"xstats\": {");
	M(tc_voq_xstats, port); M(tc_voq_xstats, node); M(tc_voq_xstats, xcp);
	first = 0;
	printf("}, \"xcp_slot\": {");
	M(tc_voq_xcp_slot, interval); M(tc_voq_xcp_slot, bytes); M(tc_voq_xcp_slot, qmin_ns); M(tc_voq_xcp_slot, packets);
	M(tc_voq_xcp_slot, drops);
	printf("}, \"sizes\": {\"qopt\": %zu, \"xstats\": %zu, \"xcp_slot\": %zu}, ", sizeof(struct tc_voq_qopt),
	       sizeof(struct tc_voq_xstats), sizeof(struct tc_voq_xcp_slot));
	printf("\"defines\": {\"VOQ_VERSION\": %d, \"VOQ_MAX_PORTS\": %d, \"VOQ_LATE_BUCKETS\": %d, "
	       "\"VOQ_SCHED_RR\": %d, \"VOQ_SCHED_ISLIP\": %d, \"VOQ_SCHED_HYBRID\": %d, \"VOQ_SPLIT_SHARED\": %d, \"VOQ_SPLIT_STATIC\": %d, "
	       "\"VOQ_F_PEER_HOST\": %d, \"VOQ_CB_DECISION\": %d, \"VOQ_CB_IN_PORT\": %d, \"VOQ_OPTSW_HOLD\": %d, "
	       "\"VOQ_ETH_HLEN\": %d, \"VOQ_LIMIT_MAX\": %llu, \"VOQ_BUFFER_MAX\": %llu, \"VOQ_TIME_MAX\": %llu, "
	       "\"VOQ_PS_PER_BYTE_MAX\": %llu, \"VOQ_XCP_SLOTS\": %d, \"VOQ_XCP_NONE\": %llu}}\n",
	       VOQ_VERSION, VOQ_MAX_PORTS, VOQ_LATE_BUCKETS, VOQ_SCHED_RR, VOQ_SCHED_ISLIP, VOQ_SCHED_HYBRID, VOQ_SPLIT_SHARED,
	       VOQ_SPLIT_STATIC, VOQ_F_PEER_HOST, VOQ_CB_DECISION, VOQ_CB_IN_PORT, VOQ_OPTSW_HOLD, VOQ_ETH_HLEN,
	       (unsigned long long)VOQ_LIMIT_MAX, (unsigned long long)VOQ_BUFFER_MAX,
	       (unsigned long long)VOQ_TIME_MAX, (unsigned long long)VOQ_PS_PER_BYTE_MAX, VOQ_XCP_SLOTS,
	       (unsigned long long)VOQ_XCP_NONE);
	return 0;
}
"""


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory) -> dict:
    """kernel/voq.h as the system C compiler lays it out: per struct {member: [offset,
    size]}, the struct sizes and the #define constants (skipped without a compiler)."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler (cc, gcc, clang) to lay out kernel/voq.h")
    d = tmp_path_factory.mktemp("voqlayout")
    (d / "layout.c").write_text(_LAYOUT_C)
    subprocess.run([cc, "-Wall", "-Werror", "-I", str(KERNEL), str(d / "layout.c"), "-o", str(d / "layout")],
                   check=True, capture_output=True, text=True, timeout=120)
    return json.loads(subprocess.run([str(d / "layout")], check=True, capture_output=True, text=True).stdout)


def test_constants_and_bounds_are_the_headers(c_layout):
    d = c_layout["defines"]
    assert (voq.VERSION, voq.MAX_PORTS, voq.LATE_BUCKETS, voq.F_PEER_HOST) == (
        d["VOQ_VERSION"], d["VOQ_MAX_PORTS"], d["VOQ_LATE_BUCKETS"], d["VOQ_F_PEER_HOST"])
    assert [ibsched.SCHEDULERS.index(s) for s in ("rr", "islip")] == [d["VOQ_SCHED_RR"], d["VOQ_SCHED_ISLIP"]]
    assert voq.SCHEDULER_CODES == {"rr": d["VOQ_SCHED_RR"], "islip": d["VOQ_SCHED_ISLIP"],
                                   "hybrid": d["VOQ_SCHED_HYBRID"]}
    assert [ibsched.VOQ_SPLITS.index(s) for s in ("shared", "static")] == [d["VOQ_SPLIT_SHARED"],
                                                                          d["VOQ_SPLIT_STATIC"]]
    assert (voq.CB_DECISION, voq.CB_IN_PORT, voq.OPTSW_HOLD, voq.ETH_HLEN) == (
        d["VOQ_CB_DECISION"], d["VOQ_CB_IN_PORT"], d["VOQ_OPTSW_HOLD"], d["VOQ_ETH_HLEN"])
    assert voq.OPTSW_HOLD == layout.HOLD and voq.MAX_PORTS == layout.MAX_PORTS
    assert (voq.LIMIT_BOUNDS[1], voq.BUFFER_BOUNDS[1], voq.LOOKAHEAD_BOUNDS[1], voq.PROP_BOUNDS[1],
            voq.PS_PER_BYTE_BOUNDS[1]) == (d["VOQ_LIMIT_MAX"], d["VOQ_BUFFER_MAX"], d["VOQ_TIME_MAX"],
                                           d["VOQ_TIME_MAX"], d["VOQ_PS_PER_BYTE_MAX"])
    assert (voq.XCP_SLOTS, voq.XCP_NONE, voq.XCP_INTERVAL_BOUNDS[1]) == (
        d["VOQ_XCP_SLOTS"], d["VOQ_XCP_NONE"], d["VOQ_TIME_MAX"])
    assert (ibsched.XCP_SLOTS, ibsched.XCP_NONE) == (voq.XCP_SLOTS, voq.XCP_NONE)
    assert ibsched.MAX_PORTS == voq.MAX_PORTS
    # the ring's layout and "none" are the BPF accumulators' (ebpf/optswitch.h)
    assert (voq.XCP_SLOTS, voq.XCP_NONE) == (layout.XCP_SLOTS, layout.XCP_NONE)
    # the registry's B bound is the module's
    assert REGISTRY.get("ib").params[0].hi == d["VOQ_BUFFER_MAX"]


def test_options_pack_member_by_member_as_the_header_lays_them_out(c_layout):
    """Each member holds its own distinct value at its C offset and size."""
    members = c_layout["qopt"]
    assert [m for m, _ in voq.QOPT_MEMBERS] == list(members) == [f for f in voq.Qopt.__dataclass_fields__]
    assert voq.QOPT_SIZE == c_layout["sizes"]["qopt"] == 88
    values = {m: (k + 1) * 0x01010101 + (0x1_0000_0000 * (k + 1) if size == 8 else 0)
              for k, (m, (_, size)) in enumerate(members.items())}
    raw = voq.Qopt(**values).pack()
    for m, (off, size) in members.items():
        assert int.from_bytes(raw[off:off + size], "little") == values[m], m
    assert voq.Qopt.unpack(raw) == voq.Qopt(**values)
    with pytest.raises(voq.VoqError, match="voq options are 87 bytes, expected 88"):
        voq.Qopt.unpack(raw[:-1])


def test_counters_unpack_member_by_member_as_the_header_lays_them_out(c_layout):
    port_off, node_off = c_layout["xstats"]["port"][0], c_layout["xstats"]["node"][0]
    assert voq.XSTATS_SIZE == c_layout["sizes"]["xstats"]
    raw = bytearray(voq.XSTATS_SIZE)
    want_port, want_node = {}, {}
    for k, (m, (off, size)) in enumerate(c_layout["port"].items()):
        want_port[m] = 1000 + k
        struct.pack_into("<Q", raw, port_off + off, want_port[m])
    for k, (m, (off, size)) in enumerate(c_layout["node"].items()):
        if m == "late_log2":
            assert size == 8 * voq.LATE_BUCKETS
            want_node[m] = tuple(5000 + b for b in range(voq.LATE_BUCKETS))
            struct.pack_into(f"<{voq.LATE_BUCKETS}Q", raw, node_off + off, *want_node[m])
        else:
            want_node[m] = 2000 + k
            struct.pack_into("<Q", raw, node_off + off, want_node[m])
    ring_off, (_, ring_size) = c_layout["xstats"]["xcp"][0], c_layout["xstats"]["xcp"]
    slot = c_layout["xcp_slot"]
    assert [m for m, _ in voq.XCP_SLOT_MEMBERS] == list(slot) == [f for f in ibsched.XcpSlot.__dataclass_fields__]
    assert [size for _, (_, size) in slot.items()] == [4 if t == "u32" else 8 for _, t in voq.XCP_SLOT_MEMBERS]
    assert voq.XCP_RING_OFFSET == ring_off and ring_size == voq.XCP_SLOTS * c_layout["sizes"]["xcp_slot"]
    want_ring = []
    for k in range(voq.XCP_SLOTS):
        vals = {m: 3000 + 10 * k + j for j, m in enumerate(slot)}
        for m, (off, size) in slot.items():
            struct.pack_into("<I" if size == 4 else "<Q", raw, ring_off + k * c_layout["sizes"]["xcp_slot"] + off,
                             vals[m])
        want_ring.append(ibsched.XcpSlot(**vals))
    port, node = voq.unpack_xstats(bytes(raw))
    assert port == voq.PortStats(**want_port) and node == voq.NodeStats(**want_node)
    assert voq.unpack_xcp_ring(bytes(raw)) == tuple(want_ring)
    assert voq.XSTATS_SIZE == 720
    with pytest.raises(voq.VoqError, match="expected 720"):
        voq.unpack_xstats(bytes(raw[:-8]))
    with pytest.raises(voq.VoqError, match="expected 720"):
        voq.unpack_xcp_ring(bytes(raw[:-8]))


# ---- options: bounds, the node's options from its context ----

def _config(**over) -> ibsched.IbConfig:
    kw = dict(ports=(ibsched.PortParams(PS_20, 2_000_000, True), ibsched.PortParams(PS_20, 14_000_000)),
              buffer_bytes=1500, lookahead_ns=1_000_000)
    kw.update(over)
    return ibsched.IbConfig(**kw)


def test_qopt_of_each_port():
    opts = voq.VoqOptions(7, _config(scheduler="islip", voq_split="static"), limit=99)
    assert opts.qopt(0) == voq.Qopt(voq.VERSION, 7, 2, 0, 1, 1, voq.F_PEER_HOST, 99, 1500, 1_000_000, PS_20, 2_000_000, 0, 0)
    assert opts.qopt(1) == voq.Qopt(voq.VERSION, 7, 2, 1, 1, 1, 0, 99, 1500, 1_000_000, PS_20, 14_000_000, 0, 0)
    # the XCP ring's E and d_e, given to every port (all of the node's outputs are XCP's)
    x = opts.with_xcp(123_456_789, 1_000_000_000)
    assert [x.qopt(p) for p in (0, 1)] == [replace(opts.qopt(p), xcp_epoch_ns=123_456_789,
                                                   xcp_interval_ns=1_000_000_000) for p in (0, 1)]
    assert x.with_xcp(0, 0) == opts
    with pytest.raises(ValueError, match="xcp_epoch_ns=5: accepted: 0 when xcp_interval_ns is 0"):
        opts.with_xcp(5, 0)
    with pytest.raises(voq.VoqError, match=r"voq port=2 out of range: an integer 0\.\.1"):
        opts.qopt(2)


@pytest.mark.parametrize("kw,message", [
    ({"node_id": 2**32}, r"voq node_id=4294967296 out of range: an integer 0\.\.4294967295"),
    ({"limit": 0}, r"voq limit=0 out of range: an integer 1\.\.10000000 packets"),
    ({"config": _config(buffer_bytes=10**9 + 1)}, r"buffer_bytes=1000000001 .* 0\.\.1000000000 bytes"),
    ({"config": _config(lookahead_ns=3_600_000_000_001)}, r"lookahead_ns=3600000000001 .* 1\.\.3600000000000 ns"),
    ({"config": _config(ports=(ibsched.PortParams(8_000_000_001),))}, r"port 0 ps_per_byte=8000000001 .* 1\.\.8000000000"),
    ({"config": _config(ports=(ibsched.PortParams(1, 3_600_000_000_001),))}, r"port 0 prop_ns=3600000000001"),
    ({"config": _config(xcp_interval_ns=3_600_000_000_001)},
     r"voq xcp_interval_ns=3600000000001 out of range: an integer 0\.\.3600000000000 ns \(0: XCP ring off\)"),
])
def test_options_out_of_the_modules_range_name_field_value_and_range(kw, message):
    args = {"node_id": 1, "config": _config()}
    args.update(kw)
    with pytest.raises(voq.VoqError, match=message):
        voq.VoqOptions(**args)


def _ctx(prop=(2_000_000, 14_000_000, 224_000_000), lookahead=None, rate=1e9 / 20):
    """A core node at D = 20, id 5: port 0 towards a host, the others towards switches."""
    return NodeContext(20.0, (rate,) * len(prop), (True,) + (False,) * (len(prop) - 1), 5, prop, lookahead)


def test_node_options_from_the_context():
    """By hand: NSFNET-like core node at D = 20: a 0.1 ms edge link (2 ms), 0.7 and
    11.2 ms core links (14, 224 ms); 1 Gb/s / 20 = 160 000 ps per byte; M defaults to 1 ms."""
    a = parse("ib:15000")
    opts = a.options(_ctx(), key="c3.arch")
    assert opts == voq.VoqOptions(5, ibsched.IbConfig(
        (ibsched.PortParams(160_000, 2_000_000, True), ibsched.PortParams(160_000, 14_000_000),
         ibsched.PortParams(160_000, 224_000_000)), 15000, 1_000_000, "rr", "shared"), voq.DEFAULT_LIMIT)
    assert a.options(_ctx(lookahead=1_999_999)).config.lookahead_ns == 1_999_999
    assert voq.lookahead_range(_ctx()) == (1, 1_999_999)


@pytest.mark.parametrize("ctx,key,value,accepted", [
    # M not below the shortest link (2 ms): a packet decided M late would leave after its stamp
    (_ctx(lookahead=2_000_000), "c3.arch.lookahead_ns", 2_000_000,
     r"an integer 1\.\.1999999, below the smallest propagation of the node's links \(port 0: 2000000 ns\)"),
    (_ctx(lookahead=0), "c3.arch.lookahead_ns", 0, r"an integer 1\.\.1999999"),
    (_ctx(lookahead="1ms"), "c3.arch.lookahead_ns", "1ms", r"an integer 1\.\.1999999"),
    (_ctx(lookahead=True), "c3.arch.lookahead_ns", True, r"an integer"),
    # the default M (1 ms) on a node whose shortest link lasts 0.5 ms (D = 5)
    (_ctx(prop=(500_000, 3_500_000)), "c3.arch.lookahead_ns", voq.DEFAULT_LOOKAHEAD_NS, r"port 0: 500000 ns"),
    (_ctx(prop=(0, 14_000_000)), "c3.arch.lookahead_ns", voq.DEFAULT_LOOKAHEAD_NS, r"no M fits \(port 0: 0 ns\)"),
    (NodeContext(20.0, (5e7,), (False,)), "c3.arch", None, r"whose links' propagation is known"),
    # 1 kbit/s / 20 = 50 bit/s: 1.6e11 ps per byte, beyond the module's 8e9
    (_ctx(rate=50.0), "c3.arch", [(50.0, 2_000_000, True), (50.0, 14_000_000, False), (50.0, 224_000_000, False)],
     r"port 0 ps_per_byte=160000000000 out of range: an integer 1\.\.8000000000"),
])
def test_node_options_errors_name_key_value_and_range(ctx, key, value, accepted):
    with pytest.raises(DefinitionError) as e:
        parse("ib:1500").options(ctx, key="c3.arch")
    assert (e.value.key, e.value.value) == (key, value)
    assert re.search(accepted, e.value.accepted), e.value.accepted


# ---- hybrid-hold: E1's hybrid switch realised by the voq qdisc's hybrid scheduler ----

def test_hybrid_hold_is_registered_as_a_holding_switch_that_e1_accepts():
    a = parse("hybrid-hold:2")
    assert (a.name, a.params, a.arch.code, a.arch.bpf, a.arch.oracle) == (
        "hybrid-hold", {"n_e": 2}, 12, "hybrid_hold", "testbed.optical.eventsim")
    assert a.arch.realisation.name == mechanisms.HOLDING and a.mechanism is voq.VOQ
    assert "hybrid-hold" in [x.name for x in e1_fattree.switch_architectures()]
    assert e1_fattree.parse_switch("hybrid-hold:4@1 s", 4)[0].spec == "hybrid-hold:4"
    with pytest.raises(DefinitionError, match="hybrid-hold:N_E"):
        e1_fattree.parse_switch("hybrid-hold:5", 4)


def test_hybrid_hold_options_from_the_context():
    """E1 at D = 10 000, 10 m links: 50 ns x D = 0.5 ms of propagation, 10 Gb/s / D = 1 Mb/s
    = 8 000 000 ps per byte; M defaults to half the shortest propagation (0.25 ms), at most
    1 ms; a given lookahead_ns is taken."""
    ctx = NodeContext(10_000.0, (1e6,) * 4, (True, True, False, False), 9, (500_000,) * 4)
    opts = parse("hybrid-hold:2").options(ctx, key="s.arch")
    assert opts == voq.VoqOptions(9, hybridsched.HybridConfig(
        tuple(ibsched.PortParams(8_000_000, 500_000, k < 2) for k in range(4)), 2, 250_000))
    q = opts.qopt(1)
    assert (q.scheduler, q.n_e, q.buffer_bytes, q.voq_split, q.flags, q.reserved) == (2, 2, 0, 0, voq.F_PEER_HOST, 0)
    far = NodeContext(10_000.0, (1e6,) * 4, (False,) * 4, 9, (5_000_000,) * 4)
    assert parse("hybrid-hold:2").options(far, key="s.arch").config.lookahead_ns == voq.DEFAULT_LOOKAHEAD_NS
    given = NodeContext(10_000.0, (1e6,) * 4, (False,) * 4, 9, (500_000,) * 4, 100_000)
    assert parse("hybrid-hold:0").options(given, key="s.arch").config.lookahead_ns == 100_000
    with pytest.raises(DefinitionError) as e:
        parse("hybrid-hold:2").options(NodeContext(10_000.0, (1e6,) * 4, (False,) * 4, 9, (500_000,) * 4, 500_000),
                                       key="s.arch")
    assert e.value.key == "s.arch.lookahead_ns" and "below the smallest propagation" in e.value.accepted


# ---- the mechanism: voq on every port, held but not re-stamped ----

def test_plan_holds_and_restamps():
    devs = ["c-eth0", "c-eth1", "c-eth2"]
    ctx = _ctx()
    assert voq.VOQ.plan(devs, ctx) == dict.fromkeys(devs, "voq")
    assert voq.VOQ.holds(devs, ctx) == (True, True, True)
    assert voq.VOQ.restamps(devs, ctx) == (False, False, False)
    # obsburst's ports release bursts stamped with their arrival: held and re-stamped, as before
    edge = NodeContext(1.0, (1e8, 1e8, 1e9), (True, True, False))
    assert obsburst.OBSBURST.holds(devs, edge) == obsburst.OBSBURST.restamps(devs, edge) == (False, False, True)
    assert mechanisms.FQ.restamps(devs, ctx) == hostnic.HOSTNIC.restamps(devs, ctx) == (False, False, False)
    assert voq.VOQ.features == frozenset({voq.Feature.MODULES})


def _recorder(monkeypatch) -> list[tuple]:
    calls: list[tuple] = []
    monkeypatch.setattr(voq, "load_module", lambda ledger: calls.append(("load", ledger)))
    monkeypatch.setattr(voq, "install", lambda dev, netns, qopt: calls.append(("voq", netns, dev, qopt)))
    monkeypatch.setattr(voq, "remove", lambda dev, netns: calls.append(("remove", netns, dev)))
    return calls


def test_install_removes_every_port_first_then_adds_one_qdisc_per_port(monkeypatch):
    calls = _recorder(monkeypatch)
    devs = ["c-eth0", "c-eth1", "c-eth2"]
    opts = parse("ib:3000").options(_ctx())
    voq.VOQ.install("t-c", devs, opts, "LEDGER", _ctx())
    assert calls == [("load", "LEDGER"), *[("remove", "t-c", d) for d in devs],
                     *[("voq", "t-c", d, opts.qopt(p)) for p, d in enumerate(devs)]]
    calls.clear()
    voq.VOQ.reset("t-c", devs, opts, None, _ctx())            # no ledger: nothing loaded
    assert [c[0] for c in calls] == ["remove"] * 3 + ["voq"] * 3
    with pytest.raises(voq.VoqError, match="needs the VoqOptions of a node of 2 ports"):
        voq.VOQ.install("t-c", devs[:2], opts, None, _ctx())
    with pytest.raises(voq.VoqError, match="needs the VoqOptions"):
        voq.VOQ.install("t-c", devs, None, None, _ctx())


def _state(port: int, **port_counts: int) -> voq.QdiscState:
    p = dict.fromkeys(voq.PORT_STATS_MEMBERS, 0)
    p.update(port_counts)
    n = dict.fromkeys(voq.NODE_STATS_MEMBERS, 0)
    n.update(late=3, max_node_bytes=4500, max_enqueue_late_ns=17_000, max_decision_lag_ns=40_000)
    return voq.QdiscState(voq.Qopt(1, 5, 3, port, 0, 0, 0, 10, 3000, 10**6, PS_20, 10**7), voq.PortStats(**p),
                          voq.NodeStats(**n, late_log2=(0,) * voq.LATE_BUCKETS), 0, 0, 0)


def test_port_counters_are_the_qdiscs_decisions(monkeypatch):
    devs = ["c-eth0", "c-eth1"]
    states = {d: _state(i, cut=10 + i, buffered=20 + i, dropped=30 + i, late=i, released=30 + 2 * i,
                        released_bytes=45_000, in_max_bytes=1500 * (i + 1), in_dropped=7)
              for i, d in enumerate(devs)}
    monkeypatch.setattr(voq, "read_ports", lambda d, netns: {x: states[x] for x in d})
    rows = voq.VOQ.port_counters("t-c", devs, None)
    assert rows["c-eth1"] == {
        "cut_through": 11, "buffered": 21, "oeo": 21, "dropped": 31, "bytes": 45_000, "max_occ_bytes": 3000,
        "node_max_occ_bytes": 4500, "late": 1, "decided_after_stamp": 0, "released": 32, "in_dropped": 7,
        "qdisc_unmodelled": 0, "qdisc_overlimit": 0, "node_late": 3, "node_max_enqueue_late_ns": 17_000,
        "node_max_decision_lag_ns": 40_000}


# ---- the fabric: h1 - s1 - s2 - h2, h3 on s2; s2 an ib core (no kernel) ----

class _Node(SimpleNamespace):
    pass


D = 20.0
#: 200 km of fibre: 1.45 x 200e3 m / c = 0.9673 ms, x D = 19.35 ms
LONG_M = 200_000.0


def _ib_fabric(monkeypatch, s2: str = "ib:1500", lookahead: int | None = None):
    links = [("h1", 0, "s1", 0, {"length_m": 0.0}), ("s1", 1, "s2", 0, {"length_m": LONG_M}),
             ("s2", 1, "h2", 0, {"length_m": LONG_M}), ("s2", 2, "h3", 0, {"length_m": LONG_M})]
    nports: dict[str, int] = {}
    for a, _, b, _, _ in links:
        nports[a] = nports.get(a, 0) + 1
        nports[b] = nports.get(b, 0) + 1
    nodes = {}
    for n, k in nports.items():
        node = _Node(name=n, intfs=[f"{n}-eth{i}" for i in range(k)], netns=f"t-{n}")
        if n.startswith("s"):
            node.role, node.assignment, node.rate_bps, node.tdf = "core", parse(s2 if n == "s2" else "ob:1500"), 1e9, D
            node.params = {} if lookahead is None or n != "s2" else {"lookahead_ns": lookahead}
        nodes[n] = node
    emu = SimpleNamespace(token="t", ledger="LEDGER", nodes=nodes, port_links=links)
    calls = _recorder(monkeypatch)
    monkeypatch.setattr(fabric.maps, "configure_nodes", lambda pin, cfgs: calls.append(("maps", list(cfgs))))
    monkeypatch.setattr(fabric.maps, "reset_monitor", lambda pin: None)
    monkeypatch.setattr(mechanisms.cmd, "run", lambda argv, **kw: calls.append(("tc", kw["netns"], kw["input"])))
    monkeypatch.setattr(hostnic, "load_module", lambda ledger: None)
    fab = fabric.OpticalFabric(emu, ["s1", "s2"], ["h1", "h2", "h3"])
    for np in fab.nodes.values():
        fab._install(np)
    return fab, calls


def test_the_fabric_installs_voq_with_the_nodes_id_propagation_and_lookahead(monkeypatch):
    fab, calls = _ib_fabric(monkeypatch, lookahead=5_000_000)
    s2 = fab.nodes["s2"]
    prop = round(LONG_M * 1.45 / 299_792_458 * D * 1e9)
    assert [p.prop_ns for p in s2.ports] == [prop] * 3 and prop == 19_346_718
    opts = s2.options
    assert opts.node_id == s2.node_id == 4 and opts.config.lookahead_ns == 5_000_000
    assert opts.config.ports == (ibsched.PortParams(PS_20, prop, False), ibsched.PortParams(PS_20, prop, True),
                                 ibsched.PortParams(PS_20, prop, True))
    assert [c for c in calls if c[0] in ("voq", "remove", "load")] == [
        ("load", "LEDGER"), *[("remove", "t-s2", f"s2-eth{i}") for i in range(3)],
        *[("voq", "t-s2", f"s2-eth{i}", opts.qopt(i)) for i in range(3)]]
    # voq holds every port of s2, but its packets carry intended arrivals: nobody re-stamps
    assert s2.holds == (True, True, True) and s2.restamps == (False, False, False)
    assert not any(p.peer_holds for np in fab.nodes.values() for p in np.ports)
    assert fab.nodes["s1"].holds == (False, False)


def test_a_lookahead_above_a_link_is_refused_before_anything_is_installed(monkeypatch):
    with pytest.raises(DefinitionError) as e:
        _ib_fabric(monkeypatch, lookahead=19_346_718)
    assert (e.value.key, e.value.value) == ("s2.arch.lookahead_ns", 19_346_718)
    assert "1..19346717" in e.value.accepted


def test_counters_of_an_ib_node_are_its_qdiscs(monkeypatch):
    fab, _ = _ib_fabric(monkeypatch)
    bpf_port = dict.fromkeys(layout.PORT_STATE_FIELDS, 0)
    states = {np.node_id: {"max_occ_bytes": 0, "occ_overflow": 0, "bout_overflow": 0,
                           "ports": [dict(bpf_port, rx=9, held=4, cut=1) for _ in np.ports]}
              for np in fab.nodes.values()}
    monkeypatch.setattr(fabric.maps, "read_states", lambda pin, n_ports: states)
    qd = {f"s2-eth{i}": _state(i, cut=i, buffered=10 * i, dropped=100 * i, late=1) for i in range(3)}
    monkeypatch.setattr(voq, "read_ports", lambda devs, netns: {d: qd[d] for d in devs})
    rows = {(r["node"], r["port"]): r for r in fab.counters()}
    r = rows[("s2", 2)]
    assert (r["qdisc"], r["model"], r["cut_through"], r["buffered"], r["dropped"], r["late"], r["rx"]) == \
        ("voq", "ib", 2, 20, 200, 1, 9)
    # s1 (ob, fq) keeps the program's counters and has no qdisc columns
    assert (rows[("s1", 0)]["qdisc"], rows[("s1", 0)]["cut_through"]) == ("fq", 1) and "late" not in rows[("s1", 0)]
    # E5's totals over the core nodes: s1's program counters and s2's qdiscs
    fp = SimpleNamespace(emu=SimpleNamespace(optical=fab))
    totals = e5_optram._fabric_totals(fp)  # noqa: SLF001
    assert (totals["core_cut"], totals["core_buffered"], totals["core_dropped"], totals["core_late"]) == \
        (2 * 1 + 0 + 1 + 2, 0 + 10 + 20, 0 + 100 + 200, 3)


def test_reconfigure_between_ib_and_ob(monkeypatch):
    fab, calls = _ib_fabric(monkeypatch)
    calls.clear()
    fab.reconfigure({"s2": parse("ib:15000")})          # other B: every qdisc of the node anew
    opts = fab.nodes["s2"].options
    assert opts.config.buffer_bytes == 15000
    assert [c for c in calls if c[0] in ("voq", "remove")] == [
        *[("remove", "t-s2", f"s2-eth{i}") for i in range(3)], *[("voq", "t-s2", f"s2-eth{i}", opts.qopt(i))
                                                                 for i in range(3)]]
    calls.clear()
    fab.reconfigure({"s2": parse("ob:1500")})            # voq goes, fq comes
    assert [c[:3] for c in calls if c[0] in ("voq", "remove", "tc")] == [
        *[("remove", "t-s2", f"s2-eth{i}") for i in range(3)], ("tc", "t-s2", mechanisms.FQ.tc_batch(
            [f"s2-eth{i}" for i in range(3)]))]
    assert fab.nodes["s2"].mechanism is mechanisms.FQ and fab.holding_state() == {}


# ---- one netlink dump for a node's ports ----

def _qdisc_msg(ifindex: int, parent: int, kind: str, options: bytes, app: bytes, packets: int) -> bytes:
    stats2 = (qdiscnl.attr(qdiscnl.TCA_STATS_BASIC, struct.pack("=QI", 1000 * packets, packets) + b"\0" * 4)
              + qdiscnl.attr(qdiscnl.TCA_STATS_QUEUE, struct.pack("=5I", 2, 0, 0, 0, 0))
              + qdiscnl.attr(qdiscnl.TCA_STATS_APP, app))
    return (struct.pack("=BxxxiIII", 0, ifindex, 0x80010000, parent, 1)
            + qdiscnl.attr(qdiscnl.TCA_KIND, kind.encode() + b"\0") + qdiscnl.attr(qdiscnl.TCA_OPTIONS, options)
            + qdiscnl.attr(qdiscnl.TCA_STATS2, stats2))


def test_read_ports_reads_every_port_of_a_node_from_one_dump(monkeypatch):
    index = {"c-eth0": 11, "c-eth1": 12, "x-eth0": 13}
    app0, app1 = bytearray(voq.XSTATS_SIZE), bytearray(voq.XSTATS_SIZE)
    struct.pack_into("<Q", app0, 8, 5)           # port.cut
    struct.pack_into("<Q", app1, 8, 6)
    for k in range(voq.XCP_SLOTS):                       # app0's ring never used, app1's slot 1 = interval 5
        struct.pack_into("<QQQII", app0, voq.XCP_RING_OFFSET + 32 * k, voq.XCP_NONE, 0, voq.XCP_NONE, 0, 0)
        struct.pack_into("<QQQII", app1, voq.XCP_RING_OFFSET + 32 * k, *(
            (5, 3028, 777, 2, 0) if k == 1 else (voq.XCP_NONE, 0, voq.XCP_NONE, 0, 0)))
    q0, q1 = voq.Qopt(voq.VERSION, 5, 2, 0, 0, 0, 0, 10, 1500, 10**6, 8000, 10**7), voq.Qopt(voq.VERSION, 5, 2, 1, 0, 0, 0, 10, 1500,
                                                                                  10**6, 8000, 10**7, 10**9, 10**6)
    replies = [(qdiscnl.RTM_NEWQDISC, _qdisc_msg(11, qdiscnl.TC_H_ROOT, "voq", q0.pack(), bytes(app0), 3)),
               (qdiscnl.RTM_NEWQDISC, _qdisc_msg(12, 0x10001, "voq", b"", b"", 0)),       # not the root: skipped
               (qdiscnl.RTM_NEWQDISC, _qdisc_msg(12, qdiscnl.TC_H_ROOT, "voq", q1.pack(), bytes(app1), 4)),
               (qdiscnl.RTM_NEWQDISC, _qdisc_msg(13, qdiscnl.TC_H_ROOT, "fq", b"", b"", 9))]   # not asked for
    dumps: list[tuple] = []
    monkeypatch.setattr(qdiscnl, "call_in", lambda netns, body: body())
    monkeypatch.setattr(qdiscnl, "ifindex", lambda dev, netns, error: index[dev])
    monkeypatch.setattr(qdiscnl, "request", lambda *a, **kw: dumps.append(a) or replies)
    got = voq.read_ports(["c-eth0", "c-eth1"], "t-c")
    assert len(dumps) == 1 and dumps[0][:2] == (qdiscnl.RTM_GETQDISC, qdiscnl.NLM_F_DUMP)
    assert (got["c-eth0"].qopt, got["c-eth0"].port.cut, got["c-eth0"].sent_packets, got["c-eth0"].qlen) == (q0, 5, 3, 2)
    assert (got["c-eth1"].qopt, got["c-eth1"].port.cut, got["c-eth1"].sent_bytes) == (q1, 6, 4000)
    assert got["c-eth0"].xcp == (ibsched.EMPTY_XCP_SLOT,) * 4
    assert got["c-eth1"].xcp[1] == ibsched.XcpSlot(5, 3028, 777, 2, 0) and got["c-eth1"].xcp[0] == ibsched.EMPTY_XCP_SLOT
    assert voq.read("c-eth1", "t-c") == got["c-eth1"]
    with pytest.raises(voq.VoqError, match="x-eth0 in t-c has no voq root qdisc"):
        voq.read_ports(["c-eth0", "x-eth0"], "t-c")


def test_change_sends_the_options_as_a_change_not_a_create(monkeypatch):
    """voq.change: RTM_NEWQDISC with NLM_F_ACK only (the qdisc's change, not a new one),
    kind and TCA_OPTIONS = the packed options; the kernel's refusal names the device."""
    calls: list[tuple] = []

    def fake(dev, netns, msg_type, flags, payload, error, session):
        calls.append((dev, netns, msg_type, flags, qdiscnl.attrs(payload), session))
        if len(calls) > 1:
            raise error("options cannot change", 95)
        return []

    monkeypatch.setattr(qdiscnl, "device_request", fake)
    q = voq.VoqOptions(7, _config()).with_xcp(10**9, 10**6).qopt(1)
    voq.change("c-eth1", "t-c", q)
    dev, netns, mtype, flags, a, session = calls[0]
    assert (dev, netns, mtype, flags, session) == ("c-eth1", "t-c", qdiscnl.RTM_NEWQDISC, qdiscnl.NLM_F_ACK, None)
    assert a[qdiscnl.TCA_KIND] == b"voq\0" and voq.Qopt.unpack(a[qdiscnl.TCA_OPTIONS]) == q
    with pytest.raises(voq.VoqError, match="changing voq on c-eth1 in t-c: options cannot change") as exc:
        voq.change("c-eth1", "t-c", q)
    assert exc.value.errno == 95
