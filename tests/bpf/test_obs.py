"""E2's two architectures in ebpf/optswitch.bpf.c against their references (native, root).

obs-core (ebpf/arch/obs_core.h) against testbed/optical/burstloss.py: random sequences of
control packets (through the ingress program, as frames of EtherType 0x88B5) and data
packets (through the egress program, with the input port in cb[1] as the ingress program
leaves it) on two input ports; which packets are dropped, departures and every counter.
obs-edge (ebpf/arch/obs_edge.h): OPTSW_HOLD towards the core, store-and-forward towards
hosts. The holding-delay histogram of a port whose peer holds. BPF_PROG_TEST_RUN with time
injected through the optsw_hook map (tb_test_mode = 1), as in test_optswitch.py.
"""

from __future__ import annotations

import math
import os
import random
import struct
from dataclasses import dataclass
from pathlib import Path

import pytest

from testbed import bpf
from testbed.optical import burstloss, layout, maps, obscore
from testbed.optical.architectures import REGISTRY, from_model
from testbed.optical.burstloss import Control, CoreReference, Data
from testbed.optical.layout import BUFFER, CUT, DROP, HOLD, PortConfig
from testbed.optical.obsburst import ControlPacket
from test_optswitch import skip_reason

PS = layout.ps_per_byte(10e9)  # 800 ps/B
NODE = 3
SHOT, OK, REDIRECT = 2, 0, 7


pytestmark = [pytest.mark.root, pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")]


@dataclass(frozen=True)
class Event:
    """One program run: ``prog``, time ``now``, model length, ``port`` (egress: output;
    ingress: input), the frame, the input port in cb[1] (egress) and the stamp (ingress)."""

    prog: str
    now: int
    length: int
    port: int
    frame: bytes
    cb1: int = 0
    stamp: int = 0


def _data(prog: str, now: int, length: int, port: int, *, cb1: int = 0, stamp: int = 0,
          dst: str = "10.0.0.2") -> Event:
    return Event(prog, now, length, port, bpf.udp_frame(min(length, bpf.TEST_RUN_FRAME_MAX), dst), cb1, stamp)


def _ctrl(now: int, port: int, burst_id: int, packets: int) -> Event:
    frame = ControlPacket(burst_id, 0, False, 1000 * packets, packets, 0, now).frame()
    return Event(bpf.OPTSW_INGRESS, now, len(frame), port, frame)


def _run(pin_dir: Path, events: list[Event], *, is_switch: bool = True) -> list[dict]:
    """Run ``events`` in one loader process: per event retval, cb0, cb1, tstamp."""
    hook = pin_dir / "maps" / "optsw_hook"
    batch = bpf.Batch().load(bpf.object_path(bpf.OPTSWITCH), pin_dir,
                             rodata=bpf._optsw_rodata(NODE, is_switch=is_switch, test_mode=True))
    for e in events:
        batch.update(hook, layout.u32_key(0), layout.hook_value(e.now, e.length, e.port, 0, stamp_ns=e.stamp))
        ctx = bytearray(bpf.SKB_CTX_SIZE)
        struct.pack_into("<I", ctx, bpf.SKB_CB_OFFSET + 4, e.cb1)
        batch.test_run(f"@{e.prog}", data=e.frame, ctx=bytes(ctx))
    rows = []
    for r in batch.run():
        if r is None or r["op"] != "test-run":
            continue
        out = bytes.fromhex(r["ctx_out"])
        cb0, cb1 = struct.unpack_from("<II", out, bpf.SKB_CB_OFFSET)
        rows.append({"retval": r["retval"], "cb0": cb0, "cb1": cb1,
                     "tstamp": int.from_bytes(out[bpf.SKB_TSTAMP_OFFSET:bpf.SKB_TSTAMP_OFFSET + 8], "little")})
    assert len(rows) == len(events)
    return rows


def _configure(pin_dir: Path, spec: str, ports: list[PortConfig], routes: dict[str, list[int]] | None = None) -> None:
    bpf.optswitch_load(pin_dir)
    maps.configure_node(pin_dir, NODE, REGISTRY.parse(spec, len(ports), role=None), ports)
    if routes:
        maps.set_routes(pin_dir, {(NODE, dst): out for dst, out in routes.items()})


def _obs(pin_dir: Path) -> dict:
    return obscore.read_core(pin_dir, [NODE])[NODE]


# ---- obs-core --------------------------------------------------------------------------

def _core_trace(rng: random.Random, n_bursts: int, in_ports: tuple[int, ...], out_ports: tuple[int, ...],
                ack_port: int, tau: int) -> list[tuple[int, int, burstloss.Frame]]:
    """Per input port: bursts of 1..12 packets sent back to back at the optical rate, each
    after its control packet; the next burst's control packet may come while the previous
    burst still leaves (its close happened meanwhile), some data before the first control
    packet and some empty bursts; packets go to random outputs. ACKs come in on
    ``ack_port`` towards the input ports."""
    per_port: dict[int, list[tuple[int, burstloss.Frame]]] = {}
    for port in in_ports:
        t = rng.randrange(1000, 5000)
        seq: list[tuple[int, burstloss.Frame]] = [(t + i * tau, Data(1000, rng.choice(out_ports)))
                                                  for i in range(rng.randrange(1, 3))]
        t += 3 * tau
        pending: list[int] = []
        for bid in range(1, n_bursts + 1):
            k = 0 if rng.random() < 0.03 else rng.randrange(1, 13)
            seq.append((t, Control(bid, k)))
            pending += [k]
            # the previous burst's packets (if this control came early) and this one's
            if rng.random() < 0.5 or bid == n_bursts:
                for k_ in pending:
                    for _ in range(k_):
                        t += tau + rng.choice((0, 0, rng.randrange(0, 3 * tau)))
                        seq.append((t, Data(rng.choice((1000, 64)), rng.choice(out_ports))))
                pending = []
            t += rng.randrange(1, 4 * tau)
        per_port[port] = seq
    # ACKs coming back on another input port, never announced, to the input ports' peers
    end = max(t for seq in per_port.values() for t, _ in seq)
    per_port[ack_port] = sorted((rng.randrange(0, end), Data(64, rng.choice(in_ports))) for _ in range(60))
    return burstloss.merge(per_port)


def _core_events(trace: list[tuple[int, int, burstloss.Frame]]) -> list[Event]:
    out = []
    for t, port, f in trace:
        if isinstance(f, Control):
            out.append(_ctrl(t, port, f.burst_id, f.packets))
        else:
            out.append(_data(bpf.OPTSW_EGRESS, t, f.length, f.out_port, cb1=port))
    return out


@pytest.mark.parametrize("pl_ppb,seed", [(300_000_000, 1), (50_000_000, 0xFFFF_FFFF_FFFF_FFFF), (0, 7),
                                         (1_000_000_000, 2)])
def test_core_equals_reference_on_random_bursts(pin_dir, pl_ppb, seed):
    ports = [PortConfig(PS, prop_ns=4830) for _ in range(5)]
    tau = layout.tau_ns(1000, PS)
    trace = _core_trace(random.Random(seed % 1000 + pl_ppb), 40, (0, 1), (2, 3), 4, tau)
    _configure(pin_dir, f"obs-core:{pl_ppb},{seed}", ports)
    got = _run(pin_dir, _core_events(trace))
    ref = CoreReference(ports, pl_ppb, seed)
    want = ref.run(trace)
    kinds = {CUT: 0, DROP: 0}
    for i, (g, w, (t, port, f)) in enumerate(zip(got, want, trace)):
        if w is None:  # a control packet: consumed by the control unit
            assert g["retval"] == SHOT, f"event {i}: {f} on port {port}: {g}"
            continue
        kinds[w.kind] += 1
        assert (g["cb0"], g["retval"]) == (w.kind, SHOT if w.kind == DROP else OK), f"event {i}: {f}: {g} vs {w}"
        if w.kind == CUT:
            assert g["tstamp"] == w.dep_ns + ports[f.out_port].prop_ns, f"event {i}: {g} vs {w}"
    obs = _obs(pin_dir)
    assert {k: obs[k] for k in layout.OBS_FIELDS} == ref.counters
    assert obs["bursts_pending"] == sum(len(q) for q in ref.announced.values())
    state = maps.read_states(pin_dir, {NODE: 5})[NODE]["ports"]
    for p in range(5):
        assert state[p]["dropped"] == sum(w is not None and w.kind == DROP and f.out_port == p
                                          for w, (_t, _i, f) in zip(want, trace))
    # the trace exercises what it should
    assert ref.counters["unannounced"] > 60 and ref.counters["announced"] == 80
    if 0 < pl_ppb < 10**9:
        assert kinds[DROP] > 0 and kinds[CUT] > 0 and ref.counters["bursts_lost"] > 0
    if pl_ppb == 0:
        assert ref.counters["conflicts"] > 0


@pytest.mark.parametrize("pl_ppb", [1, 300_000_000, 999_999_999])
def test_core_draw_is_the_contracts_on_64_bit_ids_and_seeds(pin_dir, pl_ppb):
    """The loss flag of every announced burst (in the ring) and the number of bursts
    lost equal burstloss.burst_lost, for burst ids and seeds over the whole u64 range."""
    rng = random.Random(pl_ppb)
    seed = rng.getrandbits(64)
    ids = [rng.getrandbits(64) for _ in range(600)] + [1, 2, 2**64 - 1]
    _configure(pin_dir, f"obs-core:{pl_ppb},{seed}", [PortConfig(PS) for _ in range(layout.MAX_PORTS)])
    _run(pin_dir, [_ctrl(10 + i, i % layout.MAX_PORTS, bid, 1) for i, bid in enumerate(ids)])
    want = [burstloss.burst_lost(seed, bid, pl_ppb) for bid in ids]
    obs = _obs(pin_dir)
    assert (obs["announced"], obs["bursts_lost"]) == (len(ids), sum(want))
    rings = layout.parse_obs_state(maps.read_raw_states(pin_dir, [NODE])[NODE])["rings"]
    for port, ring in enumerate(rings):
        mine = [w for i, w in enumerate(want) if i % layout.MAX_PORTS == port][:layout.OBS_RING]
        assert [bool(lost) for _left, lost in ring] == mine, port


def test_core_ring_overflow_and_empty_bursts(pin_dir):
    ports = [PortConfig(PS) for _ in range(2)]
    _configure(pin_dir, "obs-core:0,5", ports)
    n = layout.OBS_RING + 3
    events = [_ctrl(100 + i, 0, i + 1, 2) for i in range(n)] + [_ctrl(200, 0, 99, 0)]
    got = _run(pin_dir, events)
    assert all(g["retval"] == SHOT for g in got)
    obs = _obs(pin_dir)
    assert (obs["announced"], obs["ring_overflow"], obs["empty_bursts"], obs["bursts_pending"]) == \
        (n + 1, 3, 1, layout.OBS_RING)
    ring = layout.parse_obs_state(maps.read_raw_states(pin_dir, [NODE])[NODE])["rings"][0]
    assert ring == [(2, 0)] * layout.OBS_RING
    # Drain them all (2 packets each): the ring empties and wraps; then unannounced.
    events = [_data(bpf.OPTSW_EGRESS, 1000 + 1000 * i, 64, 1, cb1=0) for i in range(2 * layout.OBS_RING + 1)]
    got = _run(pin_dir, events)
    assert all(g["cb0"] == CUT for g in got)
    obs = _obs(pin_dir)
    assert (obs["packets_passed"], obs["unannounced"], obs["bursts_pending"]) == (2 * layout.OBS_RING, 1, 0)
    # the ring wrapped: a new burst is at the head again
    _run(pin_dir, [_ctrl(10**6, 0, 200, 1)])
    ring = layout.parse_obs_state(maps.read_raw_states(pin_dir, [NODE])[NODE])["rings"][0]
    assert ring == [(1, 0)]


def test_invalid_control_frames_and_control_packets_elsewhere(pin_dir):
    ports = [PortConfig(PS) for _ in range(2)]
    good = ControlPacket(1, 0, False, 1000, 1, 0, 0).frame()
    bad_magic = good[:14] + b"XBSB" + good[18:]
    bad_version = good[:18] + b"\x02" + good[19:]
    short = good[:14 + 40]
    _configure(pin_dir, "obs-core:0,1", ports)
    got = _run(pin_dir, [Event(bpf.OPTSW_INGRESS, 10, 64, 0, f) for f in (bad_magic, bad_version, short)])
    assert all(g["retval"] == SHOT for g in got)
    obs = _obs(pin_dir)
    assert (obs["ctrl_invalid"], obs["announced"], obs["ctrl_elsewhere"]) == (3, 0, 0)
    # Another switch architecture has no control unit: counted and dropped.
    _configure(pin_dir, "electronic", ports)
    got = _run(pin_dir, [Event(bpf.OPTSW_INGRESS, 10, 64, 0, good)] * 2)
    assert [g["retval"] for g in got] == [SHOT, SHOT]
    obs = _obs(pin_dir)
    assert (obs["ctrl_elsewhere"], obs["announced"], obs["ctrl_invalid"]) == (2, 0, 0)
    # A host's ingress leaves it to the stack (not part of the model) and counts nothing.
    _configure(pin_dir, "nic", ports)
    got = _run(pin_dir, [Event(bpf.OPTSW_INGRESS, 10, 64, 0, good)], is_switch=False)
    assert got[0]["retval"] == OK and _obs(pin_dir)["ctrl_elsewhere"] == 0


def test_reconfigure_resets_the_core_state(pin_dir):
    ports = [PortConfig(PS) for _ in range(2)]
    _configure(pin_dir, "obs-core:1000000000,1", ports)
    _run(pin_dir, [_ctrl(1, 0, 1, 5), _data(bpf.OPTSW_EGRESS, 2, 100, 1, cb1=0)])
    assert _obs(pin_dir)["packets_lost"] == 1 and _obs(pin_dir)["bursts_pending"] == 1
    maps.configure_node(pin_dir, NODE, REGISTRY.parse("obs-core:0,1", 2), ports)
    assert _obs(pin_dir) == {k: 0 for k in (*layout.OBS_FIELDS, "bursts_pending")}


def test_ingress_passes_the_input_port_to_egress(pin_dir):
    ports = [PortConfig(PS) for _ in range(3)]
    _configure(pin_dir, "obs-core:0,1", ports, {"10.0.0.2": [2]})
    got = _run(pin_dir, [_data(bpf.OPTSW_INGRESS, 10, 1000, p) for p in (0, 1)])
    assert [(g["retval"], g["cb0"], g["cb1"]) for g in got] == [(REDIRECT, 2, 0), (REDIRECT, 2, 1)]


# ---- obs-edge --------------------------------------------------------------------------

def test_edge_holds_towards_the_core_and_stores_and_forwards_towards_hosts(pin_dir):
    """Port 0 and 1 face hosts (ACKs going back: store-and-forward FIFO as electronic),
    port 2 faces the core (held: stamped with the arrival, the output untouched)."""
    rng = random.Random(4)
    ports = [PortConfig(PS, prop_ns=100, peer_host=True), PortConfig(PS, prop_ns=0, peer_host=True),
             PortConfig(PS, prop_ns=0, peer_holds=False)]
    _configure(pin_dir, "obs-edge:1000000,100000,0", ports)
    t, trace = 1000, []
    for _ in range(300):
        t += rng.randrange(0, 2000)
        trace.append((t, rng.choice((1000, 64, 1514)), rng.choice((0, 1, 2, 2))))
    got = _run(pin_dir, [_data(bpf.OPTSW_EGRESS, t, ln, p, cb1=0) for t, ln, p in trace])
    ref = from_model("electronic", 0).reference(ports)
    held = [0, 0, 0]
    for i, (g, (t, ln, p)) in enumerate(zip(got, trace)):
        if p == 2:
            held[p] += 1
            assert (g["cb0"], g["retval"], g["tstamp"]) == (HOLD, OK, t), f"packet {i}: {g}"
        else:
            w = ref.offer(t, ln, p)
            assert (g["cb0"], g["retval"], g["tstamp"]) == (BUFFER, OK, w.stamp(ports[p])), f"packet {i}: {g} {w}"
    state = maps.read_states(pin_dir, {NODE: 3})[NODE]["ports"]
    assert state[2]["held"] == held[2] > 100
    assert (state[2]["out_free_ns"], state[2]["bytes"], state[2]["cut"], state[2]["buffered"]) == (0, 0, 0, 0)
    for p in (0, 1):
        r = ref.state[p]
        assert (state[p]["buffered"], state[p]["bytes"], state[p]["busy_ns"], state[p]["held"]) == \
            (r.buffered, r.bytes, r.busy_ns, 0)


# ---- holding delay ---------------------------------------------------------------------

def test_holding_delay_histogram_and_restamp(pin_dir):
    """A port whose peer holds: each packet's delay since its stamp goes into the histogram
    (1 us .. 20 s, log-uniform; one early), and the packet leaves re-stamped with its
    arrival here. A port whose peer does not hold records nothing and keeps the stamp."""
    rng = random.Random(11)
    ports = [PortConfig(PS, peer_holds=True), PortConfig(PS), PortConfig(PS)]
    _configure(pin_dir, "obs-core:0,1", ports, {"10.0.0.2": [2]})
    now0 = 10**11
    delays = [round(math.exp(rng.uniform(math.log(1e3), math.log(20e9)))) for _ in range(400)]
    delays += [0, 1, 15, 16, 17, 2**35 - 1, 2**35, 40 * 10**9]
    events = [_data(bpf.OPTSW_INGRESS, now0 + i, 1000, 0, stamp=now0 + i - d) for i, d in enumerate(delays)]
    events.append(_data(bpf.OPTSW_INGRESS, now0, 1000, 0, stamp=now0 + 500))   # early
    events.append(_data(bpf.OPTSW_INGRESS, now0, 1000, 1, stamp=now0 - 12345))  # peer does not hold
    got = _run(pin_dir, events)
    assert all(g["retval"] == REDIRECT for g in got)
    assert [g["tstamp"] for g in got[:-1]] == [e.now for e in events[:-1]]
    assert got[-1]["tstamp"] == 0  # not re-stamped (test mode writes only a new stamp)
    h = obscore.read_holding(pin_dir, [NODE])[NODE]
    recorded = sorted(delays + [0])
    assert (h.count, h.early, h.max_ns, h.sum_ns) == (len(recorded), 1, max(recorded), sum(recorded))
    # Rows partition the delays: each row counts exactly the delays within [lo, hi).
    assert sum(n for _, _, n in h.rows) == len(recorded)
    for lo, hi, n in h.rows:
        assert n == sum(lo <= d < hi for d in recorded), (lo, hi, n)
    # Resolution: below 2^35 ns a bucket is at most 1/16 of its lower bound wide (>= 1 ns).
    for lo, hi, _ in h.rows:
        if lo < 2**35 - 2**30:
            assert hi - lo <= max(1, lo // 16), (lo, hi)
    assert h.over == sum(d >= 31 * 2**30 for d in recorded)
    for q in (0.5, 0.99):
        exact = recorded[math.ceil(q * len(recorded)) - 1]
        assert exact <= h.quantile_ns(q) <= max(exact * 17 // 16, exact + 1) or exact >= 31 * 2**30
    assert h.quantile_ns(1.0) == max(recorded)
