"""E1 family without root: its ``switch`` parameter read through the port-architecture
registry (syntax, @RTO suffix, errors), the topology's switch options and the per-point
reconfiguration of the kept fabric."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from testbed.dilation import TimeDilation
from testbed.errors import DefinitionError
from testbed.families.e1_fattree import E1FatTree, parse_switch
from testbed.optical.architectures import parse

REPO = Path(__file__).resolve().parents[2]
SYNTAX = ("electronic | fifo:MAX_WAIT_NS | all-optical | hybrid:N_E | hybrid-hold:N_E | ob:BUFFER_BYTES | "
          "sb:BUFFER_BYTES | wcsb:BUFFER_BYTES, optionally followed by @INITIAL_RTO")


def values(**over):
    v = {p.name: p.parse(p.default, p.name) for p in E1FatTree.params}
    v.update(over)
    return v


@pytest.mark.parametrize("spec,k,arch,rto", [
    ("all-optical", 4, "all-optical", None),
    ("hybrid:2", 4, "hybrid:2", None),
    ("hybrid:4", 4, "hybrid:4", None),
    ("hybrid:8", 8, "hybrid:8", None),
    (" hybrid: 02 ", 4, "hybrid:2", None),
    ("electronic", 4, "electronic", None),
    ("electronic@1 s", 4, "electronic", 1.0),
    ("hybrid:2@1ms", 4, "hybrid:2", 1e-3),
    ("hybrid-hold:2", 4, "hybrid-hold:2", None),      # the same switch realised by holding
    ("hybrid-hold:0@1 s", 4, "hybrid-hold:0", 1.0),
])
def test_the_papers_switch_configurations_parse_to_an_architecture_and_rto(spec, k, arch, rto):
    a, r = parse_switch(spec, k)
    assert a == parse(arch, k) and a.spec == arch
    assert (r.si if r is not None else None) == rto


@pytest.mark.parametrize("spec,k,why", [
    # the whole value is named, the accepted syntax, and the range that failed
    ("hybrid:5", 4, r" \(N_E \(buffer input and output ports\) an integer 1\.\.4 \(at most the node's 4 ports\)\)$"),
    ("hybrid:0", 8, r" \(N_E .* an integer 1\.\.8 .*\)$"),
    ("hybrid:x", 4, r" \(N_E .* an integer 1\.\.4 .*\)$"),
    ("hybrid", 4, r" \(hybrid:N_E with N_E .* an integer 1\.\.4 .*\)$"),
    ("all-optical:2", 4, r" \(all-optical with no parameters\)$"),
    ("optical", 4, r"; N_E \(buffer input and output ports\) an integer 1\.\.4 \(at most the node's 4 ports\); "
                   r"N_E \(buffer input and output ports\) an integer 0\.\.4 \(at most the node's 4 ports\); BUFFER_BYTES \(B, optical RAM per output, IP datagram bytes\) an integer 0\.\.1000000000; "),
    ("ob:-1", 4, r" \(BUFFER_BYTES \(B, optical RAM per output, IP datagram bytes\) an integer 0\.\.1000000000\)$"),
    ("nic", 4, r"; N_E .* an integer 1\.\.4 .*$"),  # a host's architecture, not a switch's
    ("obs-core:0,1", 4, r"; N_E .* an integer 1\.\.4 .*$"),  # E2's core: needs an assembling edge
    ("electronic@0 s", 4, r" \(the initial RTO must be > 0 and <= 60 s\)$"),
    ("electronic@1 m", 4, r" \(unit 'm' is not a time unit .*\)$"),
])
def test_a_bad_switch_names_key_whole_value_syntax_and_range(spec, k, why):
    with pytest.raises(DefinitionError) as err:
        parse_switch(spec, k)
    assert err.value.key == "params.switch" and err.value.value == spec
    assert err.value.accepted.startswith(SYNTAX)
    assert re.search(why, err.value.accepted), err.value.accepted


def test_a_bad_switch_in_a_definition_exits_2_and_creates_nothing(tmp_path):
    out, state = tmp_path / "out", tmp_path / "state"
    env = dict(os.environ, TESTBED_STATE_DIR=str(state))
    p = subprocess.run([sys.executable, "-m", "testbed", "run", "e1-demo", "--set", "switch=hybrid:5", "--out",
                        str(out)], capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert p.returncode == 2, p.stderr
    assert f"invalid value for 'params.switch': 'hybrid:5'; accepted: {SYNTAX} (N_E" in p.stderr
    assert not out.exists() and not state.exists()


def test_every_switch_of_the_topology_gets_the_points_architecture_spec():
    topo = E1FatTree.topology(values(switch="hybrid:2@1 s"), TimeDilation(10.0))
    infos = [topo.nodeInfo(s) for s in topo.switches()]
    assert len(infos) == 20
    for info in infos:
        assert info["cls"] == "optical" and info["arch"] == "hybrid:2"
        assert info["rate_bps"] == 10e9 and info["tdf"] == 10.0
        assert "model" not in info and "n_e" not in info


def test_prepare_gives_every_switch_the_points_architecture():
    calls = []
    optical = SimpleNamespace(reconfigure_switches=calls.append)
    kept = []
    ctx = SimpleNamespace(ledger=None, keep=lambda slot, key, factory: kept.append((slot, key)) or (1, 2, 3))
    fp = SimpleNamespace(values=values(switch="electronic@1 s", k=4), emu=SimpleNamespace(optical=optical),
                         ctx=ctx, measured={})
    E1FatTree.prepare(fp)  # type: ignore[arg-type]
    assert calls == [parse("electronic")]
    # the kernel's global TCP memory raised to half the machine's for the run, kept across points
    from testbed import tcpmem

    assert kept == [("tcp-mem", tcpmem.half_of_memory())] and fp.measured["tcp_mem"] == (1, 2, 3)


def test_a_switch_rto_overrides_the_initial_rto_of_the_point():
    ctx = SimpleNamespace(point=SimpleNamespace(values=values(switch="electronic@1 s")))
    assert E1FatTree.point_values(ctx)["initial_rto"].si == 1.0  # type: ignore[arg-type]
    ctx.point.values = values(switch="hybrid:2")
    assert E1FatTree.point_values(ctx)["initial_rto"].si == 1e-3  # type: ignore[arg-type]


def _switch_row(node: str, occ: int, **held) -> dict:
    return {"node": node, "model": "hybrid-hold" if held else "hybrid", "cut_through": 10, "buffered": 5,
            "dropped": 1, "node_max_occ_bytes": occ, **held}


def test_summary_counts_a_holding_switchs_late_decisions_and_none_for_edt_switches(tmp_path):
    """decisions_late and decided_after_stamp sum the voq counters of every switch port;
    NaN when the switches decide at arrival (no such counter), never a misleading 0."""
    from testbed.families.e1_fattree import summarise

    res = SimpleNamespace(flows=[], throughput_bps=1e9)
    ctx = SimpleNamespace(tdf=TimeDilation(10_000.0), dir=tmp_path)
    v = values()
    nic = {"node": "h0", "model": "nic", "cut_through": 7, "buffered": 0, "dropped": 0, "node_max_occ_bytes": 0}
    held = [nic, _switch_row("e0", 9064, late=2, decided_after_stamp=0),
            _switch_row("e0", 9064, late=1, decided_after_stamp=3), _switch_row("e1", 18128, late=0,
                                                                              decided_after_stamp=0)]
    row = summarise(res, held, ctx, v)  # type: ignore[arg-type]
    assert (row["decisions_late"], row["decided_after_stamp"], row["max_buffer_bytes"]) == (3, 3, 18128)
    assert (row["packets_switched"], row["packets_dropped"]) == (48, 3)
    edt = summarise(res, [nic, _switch_row("e0", 9064)], ctx, v)  # type: ignore[arg-type]
    assert edt["decisions_late"] != edt["decisions_late"] and edt["decided_after_stamp"] != edt["decided_after_stamp"]
