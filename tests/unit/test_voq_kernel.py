"""kernel/sch_voq.c itself, unchanged, compiled in user space by the system C compiler
against stand-ins for the kernel API (tests/kshim/kshim.h, tests/kshim/voq_harness.c) and
driven in real time as the kernel would drive it (enqueue then the qdisc's dequeue, the
node's timer, the members' watchdogs, kicked qdiscs run until none is left), against the
Python mirror testbed.optical.ibsched and the paper's node testbed.optical.ramsim (the
``hybrid`` scheduler, E1's switch: the mirror testbed.optical.hybridsched and the paper's
switch testbed.optical.eventsim): per
packet (dropped, stamp, release time), every counter, qlen/backlog, lock discipline,
refusals with their extack messages, reset and delete. The options are packed by
testbed.optical.voq (the fabric's packer). Deliberate mutations of the C must fail the
comparison (the test can fail).

The outputs' XCP rings (docs/xcp-edge.md, "IB nodes"): the C's ring is read after every
event of a run, so every interval's slot is seen before its slot is reused, and compared
with the mirror's slots of every interval (and the ring at the end with the mirror's);
on an exact run also with the slots derived from ramsim's outcomes alone
(tests/voq_xcp_reference.py). A change of E and d_e on a live qdisc restarts the ring
and refuses any other option.

No root, no kernel: skipped when no C compiler is found; built with UBSan when the
compiler and its runtime allow (reported by its own test).
"""

from __future__ import annotations

import ctypes
import random
from dataclasses import replace as dataclasses_replace
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from optical_ram_cases import DATA, PS, ram_trace
from testbed.optical import eventsim, hybridsched, ibsched, ramsim, traces, voq
from voq_xcp_reference import backlogs, ring_slots

REPO = Path(__file__).resolve().parents[2]
KSHIM = REPO / "tests" / "kshim"
KERNEL = REPO / "kernel"
U64 = ctypes.c_uint64
HOLD = voq.OPTSW_HOLD
_SAN = ["-fsanitize=undefined", "-fno-sanitize-recover=all"]


@dataclass(frozen=True)
class Build:
    """A built harness: its shared library and whether UBSan is in it."""

    lib: Path
    ubsan: bool


def _compiler() -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (cc, gcc) to build kernel/sch_voq.c against tests/kshim")
    return cc


def build(out: Path, source_dir: Path = KERNEL) -> Build:
    """Compile tests/kshim/voq_harness.c with ``source_dir``/sch_voq.c (kernel/voq.h from
    kernel/) into ``out``: with UBSan if that builds and loads, else without."""
    cc = _compiler()
    base = [cc, "-O1", "-g", "-Wall", "-Wno-unused-function", "-shared", "-fPIC", "-I", str(source_dir),
            "-I", str(KSHIM), "-I", str(KERNEL), str(KSHIM / "voq_harness.c"), "-o", str(out)]
    for flags, ubsan in ((_SAN, True), ([], False)):
        p = subprocess.run([*base[:1], *flags, *base[1:]], capture_output=True, text=True, timeout=300)
        if p.returncode == 0:
            try:
                ctypes.CDLL(str(out))
                return Build(out, ubsan)
            except OSError:
                continue
        if not ubsan:
            raise AssertionError(f"kernel/sch_voq.c does not build against tests/kshim:\n{p.stderr}")
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Build:
    return build(tmp_path_factory.mktemp("kshim") / "libvoq.so")


class Kernel:
    """One node of N voq qdiscs in namespace 0 of the harness ``lib``, driven in real
    time like the kernel does."""

    def __init__(self, lib: Path, cfg: ibsched.IbConfig | hybridsched.HybridConfig, node_id: int = 7,
                 limit: int = 10**6):
        self.lib = ctypes.CDLL(str(lib))
        self.lib.h_enqueue.argtypes = [ctypes.c_int, ctypes.c_int, U64, ctypes.c_uint32, ctypes.c_uint32,
                                       ctypes.c_uint32, U64]
        self.lib.h_dequeue.argtypes = [ctypes.c_int, U64, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(U64)]
        self.lib.h_fire.argtypes = [ctypes.c_int, U64]
        self.lib.h_kicked.restype = U64
        self.lib.h_init()
        self.nodes_before = self.lib.h_nodes()
        self.cfg, self.n = cfg, cfg.n_ports
        opts = voq.VoqOptions(node_id, cfg, limit)
        for p in range(self.n):
            err, msg = self.add(0, p, opts.qopt(p).pack())
            assert err == 0, msg
        self.released: dict[int, tuple[int, int]] = {}    # id -> (real time, stamp)
        self.dropped: set[int] = set()
        #: every XCP slot seen in a ring after an event: {(output, interval): slot}
        self.xcp_seen: dict[tuple[int, int], ibsched.XcpSlot] = {}

    def add(self, ns: int, port: int, raw: bytes) -> tuple[int, str]:
        msg = ctypes.create_string_buffer(256)
        err = self.lib.h_add(ns, port, raw, len(raw), msg, 256)
        return err, msg.value.decode()

    def change(self, port: int, raw: bytes) -> tuple[int, str]:
        """The qdisc's change with options ``raw``: (0 or -errno, extack message)."""
        msg = ctypes.create_string_buffer(256)
        err = self.lib.h_change(port, raw, len(raw), msg, 256)
        return err, msg.value.decode()

    def run_qdisc(self, port: int, now: int) -> None:
        pid, stamp = ctypes.c_int(), U64()
        while self.lib.h_dequeue(port, now, ctypes.byref(pid), ctypes.byref(stamp)):
            assert stamp.value, "released without a monotonic stamp"
            self.released[pid.value] = (now, stamp.value)

    def settle(self, now: int) -> None:
        """Run kicked qdiscs (NET_TX softirq) until none is kicked."""
        while k := self.lib.h_kicked():
            for p in range(self.n):
                if k >> p & 1:
                    self.run_qdisc(p, now)

    def collect_freed(self) -> None:
        buf = (ctypes.c_int * 65536)()
        while (k := self.lib.h_freed(buf, 65536)):
            self.dropped.update(buf[:k])

    def drive(self, arrivals: list[ibsched.Arrival]) -> None:
        """Enqueue each arrival at its real time, fire the node timer and the watchdogs
        when due, in time order, until nothing is left to do."""
        order = sorted(range(len(arrivals)), key=lambda k: arrivals[k].reached_ns)
        k = steps = 0
        while True:
            steps += 1
            assert steps < 50 * len(arrivals) + 1000, "the qdiscs do not progress"
            at = U64()
            cands = []
            if k < len(order):
                cands.append((arrivals[order[k]].reached_ns, 0, -1))
            if self.lib.h_timer(0, ctypes.byref(at)):
                cands.append((at.value, 1, -1))
            for p in range(self.n):
                if self.lib.h_watchdog(p, ctypes.byref(at)):
                    cands.append((at.value, 2, p))
            if not cands:
                break
            t, kind, p = min(cands)
            if kind == 0:
                a = arrivals[order[k]]
                self.lib.h_enqueue(a.out_port, order[k], a.arrival_ns, a.frame_bytes, HOLD, a.in_port, t)
                k += 1
                self.run_qdisc(a.out_port, t)          # qdisc_run after enqueue
            elif kind == 1:
                self.lib.h_fire(0, t)
            else:
                self.lib.h_watchdog_clear(p)
                self.run_qdisc(p, t)
            self.settle(t)
            self.collect_freed()
            self.watch_rings()

    def watch_rings(self) -> None:
        """Record every used slot of every output's XCP ring as it stands now."""
        for o in range(self.n):
            for slot in self.ring(o):
                if slot.interval != ibsched.XCP_NONE:
                    self.xcp_seen[(o, slot.interval)] = slot

    def stats(self, port: int) -> tuple[voq.PortStats, voq.NodeStats]:
        buf = ctypes.create_string_buffer(4096)
        size = self.lib.h_stats(port, buf)
        assert size == voq.XSTATS_SIZE
        return voq.unpack_xstats(buf.raw[:size])

    def ring(self, port: int) -> tuple[ibsched.XcpSlot, ...]:
        """Output ``port``'s XCP ring from its dump."""
        buf = ctypes.create_string_buffer(4096)
        size = self.lib.h_stats(port, buf)
        return voq.unpack_xcp_ring(buf.raw[:size])


def compare(lib: Path, arrivals, cfg: ibsched.IbConfig | hybridsched.HybridConfig
            ) -> tuple[list[ibsched.Decision], ibsched.Counters]:
    """Run ``arrivals`` through the C and through its mirror (ibsched, or hybridsched for a
    HybridConfig): every packet (dropped, or its
    release time and stamp), every counter, qlen and backlog 0 at the end, no lock
    discipline error, and the node gone with its last member. AssertionError if not."""
    kern = Kernel(lib, cfg)
    kern.drive(arrivals)
    dec, c = hybridsched.run(arrivals, cfg) if isinstance(cfg, hybridsched.HybridConfig) else ibsched.run(arrivals, cfg)
    for k, d in enumerate(dec):
        if d.kind == "dropped":
            assert k in kern.dropped and k not in kern.released, k
        else:
            assert kern.released[k] == (d.release_ns, d.stamp_ns), (k, kern.released.get(k), d)
    assert len(kern.released) + len(kern.dropped) == len(arrivals)
    for o in range(cfg.n_ports):
        p, nd = kern.stats(o)
        assert (p.cut, p.buffered, p.dropped, p.late, p.decided_after_stamp) == \
            (c.cut[o], c.buffered[o], c.dropped[o], c.late[o], c.decided_after_stamp[o]), o
        assert p.arrivals == c.cut[o] + c.buffered[o] + c.dropped[o]
        assert (p.in_dropped, p.in_max_bytes, p.in_bytes) == (c.in_dropped[o], c.in_max_bytes[o], 0)
        assert p.released == c.cut[o] + c.buffered[o] and p.unmodelled == p.overlimit == 0
        assert (nd.max_node_bytes, nd.max_enqueue_late_ns, nd.max_decision_lag_ns) == \
            (c.max_node_bytes, c.max_enqueue_late_ns, c.max_decision_lag_ns)
        assert (nd.waiting, nd.pending, nd.members) == (0, 0, cfg.n_ports)
        assert list(nd.late_log2) == c.late_log2
        assert kern.lib.h_qlen(o) == 0 and kern.lib.h_backlog(o) == 0
        assert kern.ring(o) == c.xcp_ring(o), o
    assert kern.xcp_seen == c.xcp
    assert kern.lib.h_lock_errors() == 0
    for o in range(cfg.n_ports):
        kern.lib.h_del(o)
    assert kern.lib.h_nodes() == kern.nodes_before and kern.lib.h_lock_errors() == 0
    return dec, c


def as_arrivals(trace, lateness=None) -> list[ibsched.Arrival]:
    """A tests/optical_ram_cases trace 1 s on (intended arrivals), reaching the qdisc
    ``lateness[k]`` ns after its intended arrival (None: on time)."""
    return [ibsched.Arrival(p.arrival_ns + 10**9, p.length, p.in_port, p.out_port,
                            None if lateness is None else p.arrival_ns + 10**9 + lateness[k])
            for k, p in enumerate(trace)]


def _paper_packets(trace) -> list[ramsim.Packet]:
    return [ramsim.Packet(p.arrival_ns + 10**9, p.length - 14, p.in_port, p.out_port, wire_bytes=p.length)
            for p in trace]


def _paper(trace, b: int, sched: str, split: str) -> list[ramsim.Outcome]:
    return ramsim.simulate(_paper_packets(trace), "IB", 4, b, PS, scheduler=sched, voq_split=split)


M = 50_000
#: the XCP ring of the comparisons: E 0.3 ms after the traces' start (earlier arrivals in
#: no interval), d_e = 0.4 ms (a 2000-packet trace spans ~17 intervals, each ~8 M: the
#: ring is read after every event, long before a slot is reused)
XCP = {"xcp_epoch_ns": 10**9 + 300_001, "xcp_interval_ns": 400_000}
#: ports of mixed propagation (2 M, none, M towards a host, 10 M): stamps and releases
#: on either side of the decisions
PORTS = (ibsched.PortParams(PS, 2 * M), ibsched.PortParams(PS, 0), ibsched.PortParams(PS, M, True),
         ibsched.PortParams(PS, 10 * M))


def test_harness_is_built_with_ubsan(harness):
    if not harness.ubsan:
        pytest.skip("the C compiler's UBSan runtime is not available: the harness runs without it")
    assert harness.lib.exists()


@pytest.mark.parametrize("sched", ["rr", "islip"])
@pytest.mark.parametrize("split", ["shared", "static"])
@pytest.mark.parametrize("b", [0, 1500, 4500, 15000, 1_000_000])
def test_c_equals_mirror_and_ramsim(harness, sched, split, b):
    trace = ram_trace(21, 2000, 4, 0.9)
    cfg = ibsched.IbConfig(PORTS, b, M, sched, split, **XCP)
    dec, c = compare(harness.lib, as_arrivals(trace), cfg)
    paper = _paper(trace, b, sched, split)
    assert [(d.kind, d.departure_ns) for d in dec] == [(o.kind, o.departure_ns) for o in paper]
    if b:                                                       # the trace exercises the buffers
        assert sum(c.buffered) > 50 and (b > 4500 or sum(c.dropped) > 10)
    # the rings (equal to the C's in compare) are what ramsim's node gives
    pk = _paper_packets(trace)
    assert c.xcp == ring_slots(pk, paper, backlogs(pk, paper, PS), XCP["xcp_epoch_ns"], XCP["xcp_interval_ns"])
    assert len(c.xcp) > 40


@pytest.mark.parametrize("seed", range(6))
def test_c_equals_mirror_with_lateness_and_spikes(harness, seed):
    """Packets late by up to M (exact) and, 2 %, by up to 30 M (late decisions, counted)."""
    rng = random.Random(seed)
    m = 20_000
    trace = ram_trace(40 + seed, 1500, 5, 0.95)
    late = [rng.randrange(m, 30 * m) if rng.random() < 0.02 else rng.randrange(m) for _ in trace]
    cfg = ibsched.IbConfig.uniform(5, PS, 3000, m, prop_ns=m // 2, scheduler=("rr", "islip")[seed % 2],
                                   xcp_epoch_ns=10**9, xcp_interval_ns=150_000 + seed)
    _, c = compare(harness.lib, as_arrivals(trace, late), cfg)
    assert sum(c.late) > 0 and len(c.xcp) > 40


def test_refusals_and_node_sharing(harness):
    cfg = ibsched.IbConfig.uniform(3, PS, 1500, 1000)
    kern = Kernel(harness.lib, cfg, node_id=9)

    def raw(**over) -> bytes:
        q = dict(version=voq.VERSION, node_id=9, n_ports=3, port=1, scheduler=0, voq_split=0, flags=0, limit=100,
                 buffer_bytes=1500, lookahead_ns=1000, ps_per_byte=PS, prop_ns=0)
        q.update(over)
        return voq.Qopt(**q).pack()

    assert kern.add(0, 1, raw()) == (-16, "this node's port already has a voq qdisc")          # EBUSY
    assert kern.add(0, 1, raw(buffer_bytes=3000))[0] == -22
    assert "node-wide" in kern.add(0, 1, raw(scheduler=1))[1]
    assert kern.add(1, 1, raw()) == (0, "")         # another namespace: another node
    assert kern.add(0, 2, raw(port=3)) == (-22, "port must be below n_ports")
    assert kern.add(0, 2, raw()[:-8])[1] == "options are not a struct tc_voq_qopt of this version"
    assert "version" in kern.add(0, 2, raw(version=1))[1]
    assert kern.add(0, 2, raw(version=1)[:64])[1] == "options are not a struct tc_voq_qopt of this version"
    assert kern.add(0, 2, raw(xcp_interval_ns=3_600_000_000_001)) == (
        -22, "xcp_interval_ns must be 0 (off) or 1..3600e9 (1 h)")
    assert kern.add(0, 2, raw(xcp_epoch_ns=5)) == (-22, "xcp_epoch_ns must be 0 when xcp_interval_ns is 0 (XCP "
                                                   "ring off)")
    assert "lookahead" in kern.add(0, 2, raw(lookahead_ns=0))[1]
    assert kern.add(0, 2, raw(flags=2)) == (-22, "unknown flags")
    # packets that are not held packets of the switch are dropped and counted
    assert kern.lib.h_enqueue(0, 1, 10**9, DATA, 0, 1, 10**9) == 1          # decision CUT
    assert kern.lib.h_enqueue(0, 2, 10**9, DATA, HOLD, 3, 10**9) == 1       # input 3 of 3 ports
    assert kern.stats(0)[0].unmodelled == 2
    for o in range(3):
        kern.lib.h_del(o)
    assert kern.lib.h_nodes() == kern.nodes_before + 1 and kern.lib.h_lock_errors() == 0  # the other namespace's


def test_reset_and_delete_purge_a_members_packets(harness):
    """Packets for output 2 waiting (pending, VOQ, ready) are purged with its qdisc: the
    node's buffer counts drop accordingly; the other outputs carry on."""
    m = 10_000
    cfg = ibsched.IbConfig.uniform(3, PS, 10**6, m, prop_ns=5 * m)
    kern = Kernel(harness.lib, cfg)
    t0 = 10**9
    for k, (i, o) in enumerate([(0, 2), (1, 2), (2, 2), (0, 1)]):
        kern.lib.h_enqueue(o, k, t0 + (k // 3) * 20_000, DATA, HOLD, i, t0)
    kern.lib.h_fire(0, t0 + m)           # decides t0: one to 2 cut, two waiting in VOQs
    kern.settle(t0 + m)
    p, nd = kern.stats(2)
    assert (p.cut, p.buffered, nd.waiting, nd.pending) == (1, 2, 2, 1)
    assert kern.lib.h_qlen(2) == 3
    kern.lib.h_reset(2)
    p, nd = kern.stats(2)
    assert (nd.waiting, nd.pending, kern.lib.h_qlen(2), kern.lib.h_backlog(2)) == (0, 1, 0, 0)
    assert kern.stats(1)[0].in_bytes == 0 and kern.stats(2)[0].in_bytes == 0
    kern.drive([])
    kern.lib.h_del(2)
    assert kern.lib.h_nodes() == kern.nodes_before + 1
    kern.lib.h_del(0)
    kern.lib.h_del(1)
    assert kern.lib.h_nodes() == kern.nodes_before and kern.lib.h_lock_errors() == 0


def test_hand_cases_paper_example_and_a_late_packet_at_the_decided_instant(harness):
    """The paper's five packets (III-B-2, ib with B = one packet: one cut through, four
    buffered one after another, none dropped); and P, Q at the same instant for one
    output, P (input 0) 3 M late: decided after Q, P waits."""
    t0, m, tau = 10**9, 50_000, DATA * PS // 1000
    arr = [ibsched.Arrival(t0, DATA, i, 0) for i in range(1, 6)]
    dec, c = compare(harness.lib, arr, ibsched.IbConfig.uniform(6, PS, 1500, m, prop_ns=m))
    assert [(d.kind, d.departure_ns) for d in dec] == [("cut", t0)] + [("buffered", t0 + k * tau) for k in range(1, 5)]
    assert (c.cut[0], c.buffered[0], c.dropped[0]) == (1, 4, 0)
    arr = [ibsched.Arrival(t0, DATA, 0, 2, t0 + 3 * m), ibsched.Arrival(t0, DATA, 1, 2)]
    dec, c = compare(harness.lib, arr, ibsched.IbConfig.uniform(3, PS, 1500, m, prop_ns=m))
    assert [(d.kind, d.departure_ns) for d in dec] == [("buffered", t0 + tau), ("cut", t0)] and c.late == [0, 0, 1]


@pytest.mark.parametrize("sched", ["rr", "islip"])
def test_c_equals_mirror_when_events_coincide(harness, sched):
    """Slotted arrivals (many at one instant, ports released at arrival instants)."""
    rng = random.Random(5)
    t0, tau = 10**9, DATA * PS // 1000
    arr = []
    for k in range(300):
        for i in range(5):
            if rng.random() < 0.7:
                o = rng.randrange(4)
                arr.append(ibsched.Arrival(t0 + k * tau, DATA, i, o + (o >= i)))
    cfg = ibsched.IbConfig.uniform(5, PS, 3000, 30_000, prop_ns=40_000, scheduler=sched, xcp_epoch_ns=t0,
                                   xcp_interval_ns=5 * tau)
    _, c = compare(harness.lib, arr, cfg)
    assert sum(c.buffered) > 100 and len(c.xcp) > 200


#: deliberate mutations of kernel/sch_voq.c (a line as written, its mutant): each must
#: make the comparison fail
MUTATIONS = {
    "cut-through ignores a busy input port": (
        "if (n->in_free[i] <= t && n->out_free[o] <= t && !v->head) {",
        "if (n->out_free[o] <= t && !v->head) {"),
    "admission one byte short": (
        "room = n->in_bytes[i] + ip <= n->buffer_bytes;", "room = n->in_bytes[i] + ip < n->buffer_bytes;"),
    "round-robin pointer not moved past the served input": (
        "\t\t\t\tvoq_serve(n, i, o, t, now, touched);\n\t\t\t\tn->grant_ptr[o] = (i + 1) % N;",
        "\t\t\t\tvoq_serve(n, i, o, t, now, touched);\n\t\t\t\tn->grant_ptr[o] = i;"),
    "no lookahead: instants decided as soon as real time reaches them": (
        "horizon = now - n->lookahead_ns;", "horizon = now;"),
    "stamp without the propagation": (
        "u64 stamp = t + m->opt.prop_ns + ((m->opt.flags & VOQ_F_PEER_HOST) ? tau : 0);",
        "u64 stamp = t + ((m->opt.flags & VOQ_F_PEER_HOST) ? tau : 0);"),
    "XCP backlog without the packets waiting in VOQ(*, o)": (
        "u64 backlog = (n->out_free[o] > t ? n->out_free[o] - t : 0) + n->out_wait_ns[o];",
        "u64 backlog = (n->out_free[o] > t ? n->out_free[o] - t : 0);"),
    "XCP minimum: the interval's first arrival's backlog, not the smallest": (
        "if (backlog < s->qmin_ns)\n\t\ts->qmin_ns = backlog;",
        "if (s->qmin_ns == VOQ_XCP_NONE)\n\t\ts->qmin_ns = backlog;"),
    "XCP backlog sampled after a cut-through's own departure": (
        "\t\tvoq_xcp_account(m, t, qdisc_pkt_len(skb), backlog, false);\n\t\tvoq_depart(n, skb, i, o, t, now, touched);",
        "\t\tvoq_depart(n, skb, i, o, t, now, touched);\n\t\tvoq_xcp_account(m, t, qdisc_pkt_len(skb), "
        "n->out_free[o] - t + n->out_wait_ns[o], false);"),
}


#: deliberate mutations of the hybrid scheduler: each must make the comparison with the
#: paper's switch fail
HYBRID_MUTATIONS = {
    "a buffer input released at t is free for an arrival at t (no residual loss)": (
        "\t\tif (n->bin_free[k] < t)\n", "\t\tif (n->bin_free[k] <= t)\n"),
    "joins before the arrivals of their instant": (
        "\tfor (k = 0; k < n->n_ports; k++)\n\t\twhile (n->pend[k].head && voq_time(n->pend[k].head) == t)\n"
        "\t\t\tvoq_hybrid_arrive(n, voq_pop(&n->pend[k]), t, now, touched);\n\tif (voq_hybrid_join(n, t))\n"
        "\t\tvoq_hybrid_dispatch(n, t, now, touched);",
        "\tif (voq_hybrid_join(n, t))\n\t\tvoq_hybrid_dispatch(n, t, now, touched);\n"
        "\tfor (k = 0; k < n->n_ports; k++)\n\t\twhile (n->pend[k].head && voq_time(n->pend[k].head) == t)\n"
        "\t\t\tvoq_hybrid_arrive(n, voq_pop(&n->pend[k]), t, now, touched);"),
    "no dispatch before the arrivals (waiting heads lose released outputs to arrivals)": (
        "\tvoq_hybrid_dispatch(n, t, now, touched);\n\tfor (k = 0;", "\tfor (k = 0;"),
    "heads served in output order, not join order": (
        "(best == U32_MAX || voq_before(voq_cb(skb)->order, voq_cb(voq_hq(n, best)->head)->order)))",
        "best == U32_MAX)"),
    "a buffered packet leaves without a buffer output": (
        "\t\tif (k == n->n_e)\n\t\t\treturn;\t\t/* every buffer output is emitting */",
        "\t\tif (k == n->n_e)\n\t\t\tk = 0;"),
}


def _mutant(tmp_path: Path, old: str, new: str, name: str) -> Build:
    """kernel/sch_voq.c with ``old`` (there once) replaced by ``new``, built."""
    src = (KERNEL / "sch_voq.c").read_text()
    assert src.count(old) == 1, f"mutation {name!r}: its line is not in kernel/sch_voq.c once"
    (tmp_path / "sch_voq.c").write_text(src.replace(old, new))
    return build(tmp_path / "libmutant.so", tmp_path)


@pytest.mark.parametrize("name", sorted(HYBRID_MUTATIONS))
def test_a_mutated_hybrid_scheduler_fails_the_comparison(tmp_path, name):
    mutant = _mutant(tmp_path, *HYBRID_MUTATIONS[name], name)
    rng = random.Random(5)
    pk, arr = _e1_arrivals(7, 2000, 4, 1.2, [rng.randrange(E1_M) for _ in range(2000)])
    cfg = hybridsched.HybridConfig(_e1_ports(4), 2, E1_M)
    kern = Kernel(mutant.lib, cfg)
    kern.drive(arr)
    mirror, _ = hybridsched.run(arr, cfg)       # (the paper's switch: test_hybrid_c_equals_mirror_...)
    assert [d.kind for d in mirror] == [o.kind for o in eventsim.simulate(pk, "hybrid", 2, 4, E1_PS)]
    got = {k: stamp for k, (_, stamp) in kern.released.items()}
    want = {k: d.stamp_ns for k, d in enumerate(mirror) if d.kind != "dropped"}
    assert (got, kern.dropped) != (want, {k for k, d in enumerate(mirror) if d.kind == "dropped"})


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_a_mutated_qdisc_fails_the_comparison(tmp_path, name):
    mutant = _mutant(tmp_path, *MUTATIONS[name], name)
    rng = random.Random(3)
    trace = ram_trace(21, 1500, 4, 0.9)
    late = [rng.randrange(M) for _ in trace]          # below M: exact for the real qdisc
    with pytest.raises(AssertionError):
        compare(mutant.lib, as_arrivals(trace, late), ibsched.IbConfig(PORTS, 4500, M, "rr", **XCP))


def test_xcp_ring_change_restarts_it_and_refuses_other_options(harness):
    """E and d_e change on a live qdisc (its ring restarts: every slot never used; the
    other members' rings and every counter stay); any other option differing is refused
    with the module's message; the same options again are accepted."""
    m = 10_000
    cfg = ibsched.IbConfig.uniform(3, PS, 10**6, m, prop_ns=5 * m, xcp_epoch_ns=10**9, xcp_interval_ns=10**6)
    kern = Kernel(harness.lib, cfg)
    t0 = 10**9
    kern.drive([ibsched.Arrival(t0, DATA, 0, 2), ibsched.Arrival(t0, DATA, 1, 2), ibsched.Arrival(t0, DATA, 0, 1)])
    tau = DATA * PS // 1000
    assert kern.ring(2)[0] == ibsched.XcpSlot(0, 2 * DATA, 0, 2, 0) and kern.ring(1)[0].packets == 1
    q = voq.VoqOptions(7, cfg).qopt(2)
    assert kern.change(2, q.pack()) == (0, "")                          # the same: nothing changes
    assert kern.ring(2)[0].packets == 2
    q2 = voq.VoqOptions(7, cfg).with_xcp(t0 + 5, 10**7).qopt(2)
    assert kern.change(2, q2.pack()) == (0, "")
    assert kern.ring(2) == (ibsched.EMPTY_XCP_SLOT,) * 4 and kern.ring(1)[0].packets == 1
    assert kern.stats(2)[0].buffered == 1
    err, msg = kern.change(2, dataclasses_replace(q2, buffer_bytes=3000).pack())
    assert (err, msg) == (-95, "options cannot change but xcp_epoch_ns and xcp_interval_ns: delete the qdisc and "
                                "add it again")                          # EOPNOTSUPP
    assert kern.change(2, dataclasses_replace(q2, xcp_interval_ns=0).pack())[0] == -22   # epoch with the ring off
    # the ring counts again from the new epoch: an arrival for 2 finds the packet of
    # input 1 being sent from t0 + tau (the one of input 0 left at t0)
    kern.drive([ibsched.Arrival(t0 + tau + 100, DATA, 2, 2)])
    assert kern.ring(2)[0] == ibsched.XcpSlot(0, DATA, tau - 100, 1, 0)
    assert kern.change(2, dataclasses_replace(q2, xcp_epoch_ns=0, xcp_interval_ns=0).pack()) == (0, "")   # off
    kern.drive([ibsched.Arrival(t0 + 5 * tau, DATA, 2, 2)])
    assert kern.ring(2) == (ibsched.EMPTY_XCP_SLOT,) * 4
    for o in range(3):
        kern.lib.h_del(o)
    assert kern.lib.h_lock_errors() == 0


# ---- the hybrid scheduler: E1's switch (docs/hybrid-holding.md) ----

#: E1's 10 Gb/s (tau of a 9064 B frame = 7251 ns) and a lookahead of ~7 tau
E1_PS = 800
E1_M = 50_000


def _e1_arrivals(seed: int, n: int, n_a: int, load: float, late=None) -> tuple[list[eventsim.Packet],
                                                                             list[ibsched.Arrival]]:
    """An E1-like trace (data frames and ACK-sized ones) 1 s on, and its arrivals reaching
    the qdisc ``late[k]`` ns after their instant (None: on time)."""
    pk = [eventsim.Packet(p.arrival_ns + 10**9, p.length, p.in_port, p.out_port) for p in
          traces.e1_like_trace(random.Random(seed), n, n_a, load, E1_PS, lengths=(9064, 9064, 1514, 66))]
    return pk, [ibsched.Arrival(p.arrival_ns, p.length, p.in_port, p.out_port,
                                None if late is None else p.arrival_ns + late[k]) for k, p in enumerate(pk)]


def _e1_ports(n_a: int) -> tuple[ibsched.PortParams, ...]:
    """Ports of mixed propagation around M (2 M, none, M towards a host, 10 M, ...)."""
    kinds = ((2 * E1_M, False), (0, False), (E1_M, True), (10 * E1_M, False))
    return tuple(ibsched.PortParams(E1_PS, *kinds[k % 4]) for k in range(n_a))


@pytest.mark.parametrize("n_a,n_e", [(4, 0), (4, 1), (4, 2), (4, 4), (8, 2), (8, 8)])
@pytest.mark.parametrize("load", [0.6, 1.2])
def test_hybrid_c_equals_mirror_and_the_papers_switch(harness, n_a, n_e, load):
    """Every packet's fate and departure is eventsim's (the paper's switch), its stamp and
    release the mirror's; the fullest buffer is eventsim's (frame bytes)."""
    pk, arr = _e1_arrivals(n_a * 10 + n_e, 2500, n_a, load)
    cfg = hybridsched.HybridConfig(_e1_ports(n_a), n_e, E1_M)
    dec, c = compare(harness.lib, arr, cfg)
    paper = eventsim.simulate(pk, "hybrid", n_e, n_a, E1_PS)
    assert [(d.kind, d.departure_ns) for d in dec] == [(o.kind, o.departure_ns) for o in paper]
    assert c.max_node_bytes == eventsim.stats(pk, paper, E1_PS).max_waiting_bytes
    # drops at every n_e (at n_e = n_a the residual loss of section IV), buffering when n_e > 0
    assert sum(c.dropped) > (0 if n_e == n_a else 20) and (n_e == 0 or sum(c.buffered) > 100)


@pytest.mark.parametrize("seed", range(4))
def test_hybrid_c_equals_mirror_with_lateness_and_spikes(harness, seed):
    """Lateness below M: still eventsim's switch. 2 % late by up to 30 M: late decisions,
    counted, the C still the mirror."""
    rng = random.Random(seed)
    on_time = [rng.randrange(E1_M) for _ in range(2000)]
    pk, arr = _e1_arrivals(100 + seed, 2000, 4, 0.9, on_time)
    cfg = hybridsched.HybridConfig(_e1_ports(4), 1 + seed % 4, E1_M)
    dec, c = compare(harness.lib, arr, cfg)
    assert sum(c.late) == 0
    assert [(d.kind, d.departure_ns) for d in dec] == [
        (o.kind, o.departure_ns) for o in eventsim.simulate(pk, "hybrid", cfg.n_e, 4, E1_PS)]
    spikes = [rng.randrange(E1_M, 30 * E1_M) if rng.random() < 0.02 else x for x in on_time]
    _, arr = _e1_arrivals(100 + seed, 2000, 4, 0.9, spikes)
    _, c = compare(harness.lib, arr, cfg)
    assert sum(c.late) > 0


def test_hybrid_refusals(harness):
    cfg = hybridsched.HybridConfig.uniform(3, E1_PS, 2, 1000)
    kern = Kernel(harness.lib, cfg, node_id=11)

    def raw(**over) -> bytes:
        q = dict(version=voq.VERSION, node_id=12, n_ports=3, port=1, scheduler=voq.SCHEDULER_CODES["hybrid"],
                 voq_split=0, flags=0, limit=100, buffer_bytes=0, lookahead_ns=1000, ps_per_byte=E1_PS, prop_ns=0,
                 n_e=2)
        q.update(over)
        return voq.Qopt(**q).pack()

    assert kern.add(0, 1, raw(node_id=11, n_e=1))[1].startswith("this node's other ports have other n_ports")
    assert kern.add(0, 1, raw(n_e=4)) == (-22, "n_e must be 0..n_ports (hybrid)")
    for over in ({"buffer_bytes": 1500}, {"voq_split": 1}, {"xcp_interval_ns": 10**6}):
        assert kern.add(0, 1, raw(**over)) == (-22, "hybrid takes buffer_bytes 0 (unlimited), voq_split 0 and no "
                                                    "XCP ring"), over
    assert kern.add(0, 1, raw(scheduler=0, buffer_bytes=1500)) == (
        -22, "n_e must be 0 unless the scheduler is 2 (hybrid)")
    assert kern.add(0, 1, raw(reserved=1)) == (-22, "reserved must be 0")
    assert kern.add(0, 1, raw(scheduler=3)) == (-22, "scheduler must be 0 (rr), 1 (islip) or 2 (hybrid)")
    for o in range(3):
        kern.lib.h_del(o)
    assert kern.lib.h_nodes() == kern.nodes_before and kern.lib.h_lock_errors() == 0
    with pytest.raises(voq.VoqError, match="no XCP ring"):
        voq.VoqOptions(11, cfg).with_xcp(10**9, 10**6)


def test_hybrid_reset_purges_converting_and_queued_packets(harness):
    """Output 2's converting (OE) and queued packets go with its qdisc: the node's
    waiting packets and bytes drop accordingly; the other outputs carry on."""
    m, tau = 10_000, 9064 * E1_PS // 1000
    cfg = hybridsched.HybridConfig.uniform(3, E1_PS, 2, m, prop_ns=5 * m)
    kern = Kernel(harness.lib, cfg)
    t0 = 10**9
    # t0: input 0 cuts through to 2, input 1 converts for 2, input 2 cuts through to 1; t0 + 10: input 0
    # converts for 1
    for k, (i, o, a) in enumerate([(0, 2, t0), (1, 2, t0), (2, 1, t0), (0, 1, t0 + 10)]):
        kern.lib.h_enqueue(o, k, a, 9064, HOLD, i, t0)
    kern.lib.h_fire(0, t0 + 10 + m)      # decides t0 and t0 + 10: 2 cut, 2 converting (for 2 and for 1)
    kern.settle(t0 + 10 + m)
    p2, nd = kern.stats(2)
    assert (p2.cut, p2.buffered, nd.waiting, kern.stats(1)[0].buffered) == (1, 1, 2, 1)
    assert kern.stats(1)[0].in_bytes == 9064 and nd.max_node_bytes == 2 * 9064
    kern.lib.h_reset(2)
    _, nd = kern.stats(2)
    assert (nd.waiting, kern.stats(1)[0].in_bytes, kern.lib.h_qlen(2), kern.lib.h_backlog(2)) == (1, 0, 0, 0)
    kern.lib.h_fire(0, t0 + tau + 10 + m)
    kern.settle(t0 + tau + 10 + m)
    assert kern.stats(0)[0].in_bytes == 0 and kern.stats(2)[0].in_bytes == 0
    kern.drive([])
    for o in range(3):
        kern.lib.h_del(o)
    assert kern.lib.h_nodes() == kern.nodes_before and kern.lib.h_lock_errors() == 0
