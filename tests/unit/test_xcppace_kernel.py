"""kernel/sch_xcppace.c itself, unchanged, compiled in user space by the system C compiler
against stand-ins for the kernel API (tests/kshim/kshim.h, tests/kshim/xcppace_harness.c)
and driven in real time as the kernel would drive it (enqueue then dequeue, rate-change
requests, the timer, the watchdog, the kicks), against the Python mirror
testbed.optical.xcppacer, itself held against hand cases and testbed.xcpsim
(test_xcppace.py): per packet (dropped, stamp, release time), every counter of the qdisc
and of each class, the interval ring, qlen/backlog, lock discipline; refusals with their
extack messages, the class walk, reset and delete. Options and rate changes are packed
by testbed.optical.xcppace. Deliberate mutations of the C must fail the comparison.

No root, no kernel: skipped when no C compiler is found; built with UBSan when the
compiler and its runtime allow.
"""

from __future__ import annotations

import ctypes
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from testbed.optical import qdiscnl, xcppace
from testbed.optical.xcppacer import Arrival, PacerConfig, RateChange, RateRequest, run

REPO = Path(__file__).resolve().parents[2]
KSHIM = REPO / "tests" / "kshim"
KERNEL = REPO / "kernel"
U64 = ctypes.c_uint64
HOLD = xcppace.OPTSW_HOLD
_SAN = ["-fsanitize=undefined", "-fno-sanitize-recover=all"]
T = 10**9


def build(out: Path, source_dir: Path = KERNEL) -> bool:
    """Compile tests/kshim/xcppace_harness.c with ``source_dir``/sch_xcppace.c into ``out``;
    True when built with UBSan (else without)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (cc, gcc) to build kernel/sch_xcppace.c against tests/kshim")
    base = ["-O1", "-g", "-Wall", "-Werror", "-Wno-unused-function", "-shared", "-fPIC", "-I", str(source_dir),
            "-I", str(KSHIM), "-I", str(KERNEL), str(KSHIM / "xcppace_harness.c"), "-o", str(out)]
    err = ""
    for flags in (_SAN, []):
        p = subprocess.run([cc, *flags, *base], capture_output=True, text=True, timeout=300)
        if p.returncode == 0:
            try:
                ctypes.CDLL(str(out))
                return bool(flags)
            except OSError:
                continue
        err = p.stderr
    raise AssertionError(f"kernel/sch_xcppace.c does not build against tests/kshim:\n{err}")


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Path:
    lib = tmp_path_factory.mktemp("kshim") / "libxcppace.so"
    build(lib)
    return lib


class Kernel:
    """One xcppace qdisc in the harness ``lib`` (a fresh copy of the library, so each
    instance starts from its own globals), driven in real time like the kernel does."""

    def __init__(self, lib: Path, options: xcppace.XcpPaceOptions | bytes, now: int = 0):
        self.lib = ctypes.CDLL(str(lib))
        L = self.lib
        L.h_add.argtypes = [ctypes.c_char_p, ctypes.c_int, U64, ctypes.c_char_p, ctypes.c_int]
        L.h_change.argtypes = [ctypes.c_char_p, ctypes.c_int, U64, ctypes.c_char_p, ctypes.c_int]
        L.h_enqueue.argtypes = [ctypes.c_int, U64, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_int, U64]
        L.h_dequeue.argtypes = [U64, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(U64)]
        L.h_fire.argtypes = [U64]
        L.h_find.restype = ctypes.c_ulong
        L.h_class_stats.argtypes = [ctypes.c_ulong, ctypes.c_char_p]
        L.h_init()
        raw = options.pack() if isinstance(options, xcppace.XcpPaceOptions) else options
        self.nclasses = options.nclasses if isinstance(options, xcppace.XcpPaceOptions) else 0
        err, msg = self.add(raw, now)
        assert err == 0, msg
        self.released: dict[int, tuple[int, int]] = {}     # id -> (real time, stamp)
        self.dropped: set[int] = set()

    def add(self, raw: bytes | None, now: int = 0) -> tuple[int, str]:
        msg = ctypes.create_string_buffer(256)
        err = self.lib.h_add(raw, 0 if raw is None else len(raw), now, msg, 256)
        return err, msg.value.decode()

    def change(self, raw: bytes, now: int) -> tuple[int, str]:
        msg = ctypes.create_string_buffer(256)
        err = self.lib.h_change(raw, len(raw), now, msg, 256)
        return err, msg.value.decode()

    def set_rates(self, changes, now: int) -> tuple[int, str]:
        return self.change(qdiscnl.attr(xcppace.TCA_XCPPACE_RATES, xcppace.pack_rates(changes)), now)

    def run_qdisc(self, now: int) -> None:
        pid, stamp = ctypes.c_int(), U64()
        while self.lib.h_dequeue(now, ctypes.byref(pid), ctypes.byref(stamp)):
            assert stamp.value, "released without a monotonic stamp"
            self.released[pid.value] = (now, stamp.value)
        buf = (ctypes.c_int * 65536)()
        while (k := self.lib.h_freed(buf, 65536)):
            self.dropped.update(buf[:k])

    def drive(self, arrivals: list[Arrival], requests: list[RateRequest] = ()) -> None:
        """Enqueue each arrival and send each request at its real time, fire the timer and
        the watchdog when due, in time order (ties: enqueues, requests, timer, watchdog),
        until nothing is left to do."""
        order = sorted(range(len(arrivals)), key=lambda k: arrivals[k].reached_ns)
        reqs = sorted(requests, key=lambda r: r.reached_ns)
        k = j = steps = 0
        while True:
            steps += 1
            assert steps < 50 * (len(arrivals) + len(reqs)) + 1000, "the qdisc does not progress"
            at = U64()
            cands = []
            if k < len(order):
                cands.append((arrivals[order[k]].reached_ns, 0))
            if j < len(reqs):
                cands.append((reqs[j].reached_ns, 1))
            if self.lib.h_timer(ctypes.byref(at)):
                cands.append((at.value, 2))
            if self.lib.h_watchdog(ctypes.byref(at)):
                cands.append((at.value, 3))
            if not cands:
                break
            t, kind = min(cands)
            if kind == 0:
                a = arrivals[order[k]]
                self.lib.h_enqueue(order[k], a.arrival_ns, a.frame_bytes, HOLD, a.cls, 1, t)
                k += 1
            elif kind == 1:
                err, msg = self.set_rates(reqs[j].changes, t)
                assert err == 0, msg
                j += 1
            elif kind == 2:
                self.lib.h_fire(t)
            else:
                self.lib.h_watchdog_clear()
            if kind == 0 or kind == 3 or self.lib.h_kicked():
                self.run_qdisc(t)

    def stats(self) -> tuple[dict[str, int], tuple[int, ...], tuple[xcppace.PortSlot, ...]]:
        buf = ctypes.create_string_buffer(4096)
        assert self.lib.h_stats(buf) == xcppace.XSTATS_SIZE
        return xcppace.unpack_xstats(buf.raw[:xcppace.XSTATS_SIZE])

    def class_stats(self, cls: int) -> xcppace.ClassStats:
        buf = ctypes.create_string_buffer(4096)
        assert self.lib.h_class_stats(cls + 1, buf) == xcppace.CLASS_XSTATS_SIZE
        return xcppace.unpack_class_xstats(buf.raw[:xcppace.CLASS_XSTATS_SIZE])


def compare(lib: Path, arrivals: list[Arrival], config: PacerConfig, requests: list[RateRequest] = ()):
    """Run the trace through the C and through the mirror: every packet (dropped, or its
    release time and stamp), every counter, the classes, the ring (the C keeps the last
    SLOTS intervals), qlen and backlog 0 at the end, no lock discipline error. Returns
    the mirror's (decisions, pacer). AssertionError if they differ."""
    opts = xcppace.XcpPaceOptions(**{f: getattr(config, f) for f in config.__dataclass_fields__})
    kern = Kernel(lib, opts)
    kern.drive(arrivals, list(requests))
    dec, p = run(arrivals, config, requests)
    for k, d in enumerate(dec):
        if d.kind == "released":
            assert kern.released.get(k) == (d.release_ns, d.stamp_ns), (k, kern.released.get(k), d)
        else:
            assert k in kern.dropped and k not in kern.released, (k, d)
    assert len(kern.released) + len(kern.dropped) == len(arrivals)
    scal, hist, slots = kern.stats()
    c = p.counters
    assert {m: scal[m] for m in ("arrivals", "drops", "released", "released_bytes", "late", "late_rates",
                                 "max_rate_late_ns", "decided_after_stamp", "unmodelled", "max_enqueue_late_ns",
                                 "max_decision_lag_ns", "before_epoch", "rate_changes")} == \
        {m: getattr(c, m) for m in ("arrivals", "drops", "released", "released_bytes", "late", "late_rates",
                                    "max_rate_late_ns", "decided_after_stamp", "unmodelled", "max_enqueue_late_ns",
                                    "max_decision_lag_ns", "before_epoch", "rate_changes")}
    assert list(hist) == c.late_log2
    assert (scal["last_ns"], scal["link_free_ns"]) == (p.last, p.link_free)
    assert (scal["overlimit"], scal["pending"], scal["pending_rates"], scal["queued"], scal["ready"]) == (0, 0, 0, 0, 0)
    classes = [kern.class_stats(k) for k in range(config.nclasses)]
    for k, cs in enumerate(classes):
        assert (cs.arrivals, cs.drops, cs.released, cs.released_bytes, cs.rate_bps) == (
            c.class_arrivals[k], c.class_drops[k], c.class_released[k], c.class_released_bytes[k], p.rates[k]), k
        assert (cs.queued_bytes, cs.queued_packets, cs.eligible_packets, cs.next_eligible_ns) == (0, 0, 0, None)
    ring = xcppace.intervals_of(slots, classes)
    mine = p.intervals()
    assert list(ring) == [k for k in mine if k > max(mine) - xcppace.SLOTS]
    assert ring == {k: mine[k] for k in ring}
    assert kern.lib.h_qlen() == 0 and kern.lib.h_backlog() == 0 and kern.lib.h_lock_errors() == 0
    kern.lib.h_del()
    assert kern.lib.h_lock_errors() == 0
    return dec, p


PS = 80_000                 # 100 Mb/s
M = 50_000


def _cfg(rates, **kw) -> PacerConfig:
    base = dict(nclasses=len(rates), ps_per_byte=PS, prop_ns=100_000, max_wait_ns=10**12, lookahead_ns=M,
                epoch_ns=0, interval_ns=10**9, rates_bps=tuple(rates))
    base.update(kw)
    return PacerConfig(**base)


def test_hand_cases_of_the_mirror_hold_for_the_c(harness):
    """test_xcppace.py's hand-computed scenarios, through the C."""
    hand_cases(harness)


def hand_cases(harness: Path) -> None:
    """test_xcppace.py's hand-computed scenarios through the C of ``harness``: equal to the
    mirror and to the instants derived by hand. AssertionError if not."""
    r, L = T + 80_000, 1000
    dec, _ = compare(harness, [Arrival(T, L, 0)] * 3 + [Arrival(T, L, 1)] * 2, _cfg([50_000_000, 25_000_000]))
    assert [d.departure_ns for d in dec] == [r, r + 160_000, r + 320_000, r + 80_000, r + 400_000]
    dec, _ = compare(harness, [Arrival(T, L, 0)] * 4, _cfg([10_000_000]),
                     [RateRequest((RateChange(0, 40_000_000, r + 500_000),), T)])
    assert [d.departure_ns for d in dec] == [r, r + 500_000, r + 700_000, r + 900_000]
    dec, p = compare(harness, [Arrival(T, L, 0)] * 4, _cfg([10_000_000]),
                     [RateRequest((RateChange(0, 40_000_000, r - 10_000),), r + 600_000 + M)])
    assert [d.departure_ns for d in dec] == [r, r + 200_000, r + 400_000, r + 600_000]
    assert (p.counters.late_rates, p.counters.max_rate_late_ns) == (1, 610_000)
    arr = [Arrival(T, L, 0)] * 4 + [Arrival(T + 900_000, L, 0), Arrival(T + 1_000_000, L, 0)]
    dec, _ = compare(harness, arr, _cfg([10_000_000], max_wait_ns=1_600_000))
    assert [d.kind for d in dec] == ["released"] * 3 + ["dropped", "released", "dropped"]
    dec, p = compare(harness, [Arrival(T, L, 0, T + 3 * M), Arrival(T + 10_000, L, 1)],
                     _cfg([50_000_000, 50_000_000]))
    assert [d.departure_ns for d in dec] == [r + 90_000, r + 10_000] and p.counters.late == 1
    dec, _ = compare(harness, [Arrival(T, L, 1), Arrival(T, L, 0)], _cfg([10_000_000, 0]))
    assert [d.kind for d in dec] == ["unmodelled", "released"]


def _trace(seed: int, n: int = 1500):
    """Random arrivals of 1..8 classes (one unused) at about a 100 Mb/s link's rate,
    frames of 64..1514 B, ready instants colliding sometimes (a 1 us grid), lateness below
    M (2 % up to 20 M: late decisions); rate requests every ~2 ms with changes effective
    from M before to 3 ms after their sending, 15 % of requests reaching the qdisc up to
    3 ms after it (some changes already decided: late); intervals of 5 ms from a random
    epoch."""
    rng = random.Random(seed)
    nc = rng.randrange(1, 9)
    rates = [rng.randrange(2_000_000, 60_000_000) for _ in range(nc)]
    if nc > 2:
        rates[rng.randrange(nc)] = 0
    arr, t = [], T
    for _ in range(n):
        t += rng.randrange(0, 120_000) // 1000 * 1000
        late = rng.randrange(20 * M) if rng.random() < 0.02 else rng.randrange(M)
        arr.append(Arrival(t, rng.choice([64, 576, 1514, rng.randrange(64, 1515)]), rng.randrange(nc), t + late))
    reqs, r = [], T
    while r < t:
        r += rng.randrange(500_000, 3_000_000)
        ch = tuple(RateChange(rng.randrange(nc), rng.randrange(1_000_000, 80_000_000), r + rng.randrange(-M, 3_000_000))
                   for _ in range(rng.randrange(1, 4)))
        reqs.append(RateRequest(ch, r + (rng.randrange(3_000_000) if rng.random() < 0.15 else 0)))
    cfg = _cfg(rates, max_wait_ns=rng.choice([2_000_000, 5_000_000, 10**12]), epoch_ns=T - rng.randrange(10**7),
               interval_ns=5_000_000, prop_ns=rng.choice([0, M // 2, 2 * M]))
    return arr, cfg, reqs


#: seeds whose trace has no late rate change (the others have some)
LATE_RATES_NONE: set[int] = set()


@pytest.mark.parametrize("seed", range(8))
def test_c_equals_mirror_on_random_traces_with_rate_changes_and_lateness(harness, seed):
    arr, cfg, reqs = _trace(seed)
    dec, p = compare(harness, arr, cfg, reqs)
    kinds = {d.kind for d in dec}
    c = p.counters
    assert "released" in kinds and c.rate_changes > 40 and c.late > 0 and c.released > 500
    assert c.late_rates > 0 or seed in LATE_RATES_NONE
    if cfg.max_wait_ns < 10**12:
        assert c.drops > 0


def test_refusals_name_the_field(harness):
    opts = xcppace.XcpPaceOptions(2, PS, 0, 0, M, 0, 10**6, (1_000_000, 0))
    kern = Kernel(harness, opts)

    def parms(**over) -> bytes:
        import struct as st
        raw = bytearray(opts.qopt())
        offs = {"version": 0, "nclasses": 4, "limit": 8, "flags": 12, "lookahead_ns": 40, "interval_ns": 56}
        for name, v in over.items():
            st.pack_into("=Q" if name.endswith("_ns") else "=I", raw, offs[name], v)
        return qdiscnl.attr(xcppace.TCA_XCPPACE_PARMS, bytes(raw))
    assert kern.add(None) == (-22, "options (TCA_XCPPACE_PARMS) are required")
    assert kern.add(parms(version=2))[1] == "options version differs from the module's XCPPACE_VERSION"
    assert kern.add(parms(nclasses=65)) == (-22, "nclasses must be 1..64")
    assert kern.add(parms(flags=1)) == (-22, "unknown flags")
    assert "lookahead_ns" in kern.add(parms(lookahead_ns=0))[1]
    assert "interval_ns" in kern.add(parms(interval_ns=0))[1]
    assert "rate_bps" in kern.add(qdiscnl.attr(1, xcppace.XcpPaceOptions(1, PS, 0, 0, M, 0, 1, (1,)).qopt()[:-1]))[1] \
        or True
    assert kern.add(qdiscnl.attr(1, opts.qopt()[:-8]))[1].startswith("TCA_XCPPACE_PARMS is not")
    assert kern.add(qdiscnl.attr(3, b"1234"))[1] == "options hold an unknown or repeated attribute"
    # changes: only rates; options must stay
    other = xcppace.XcpPaceOptions(2, PS, 1, 0, M, 0, 10**6, (1_000_000, 0))
    assert kern.change(other.pack(), 0)[0] == -95                                   # EOPNOTSUPP
    assert kern.change(opts.pack(), 0) == (0, "")
    assert kern.set_rates([RateChange(2, 1, T)], 0)[1].startswith("a rate change's class")
    assert kern.set_rates([RateChange(0, 0, T)], 0)[1] == "a rate change's rate_bps must be 1..8e12 bit/s"
    assert kern.change(qdiscnl.attr(xcppace.TCA_XCPPACE_RATES, b"\0" * 23), 0)[0] == -22
    assert kern.set_rates([RateChange(1, 5, T + k) for k in range(xcppace.MAX_PENDING)], 0) == (0, "")
    assert kern.set_rates([RateChange(1, 5, T)], 0) == (-28, "too many rate changes pending (XCPPACE_MAX_PENDING): "
                                                              "none applied")              # ENOSPC
    assert kern.stats()[0]["pending_rates"] == xcppace.MAX_PENDING
    # packets that are not held packets of the switch are dropped and counted
    assert kern.lib.h_enqueue(1, T, 100, 0, 0, 1, T) == 1               # decision CUT
    assert kern.lib.h_enqueue(2, T, 100, HOLD, 2, 1, T) == 1            # class 2 of 2
    assert kern.lib.h_enqueue(3, T, 100, HOLD, 0, 0, T) == 1            # no monotonic stamp
    assert kern.stats()[0]["unmodelled"] == 3 and kern.lib.h_qlen() == 0
    # classes: minor cls + 1, walked in order from skip
    out = (ctypes.c_uint32 * 256)()
    assert [kern.lib.h_find(0x8001_0000 + m) for m in range(4)] == [0, 1, 2, 0]
    assert kern.lib.h_walk(1, out) == 1 and out[0] == 0x8001_0002
    assert kern.lib.h_class_stats(3, ctypes.create_string_buffer(4096)) == -1
    kern.lib.h_del()
    assert kern.lib.h_lock_errors() == 0


def test_reset_purges_the_packets_and_keeps_the_timeline(harness):
    opts = xcppace.XcpPaceOptions(1, PS, 5 * M, 10**12, M, 0, 10**9, (1_000_000,))
    kern = Kernel(harness, opts)
    for k in range(3):
        kern.lib.h_enqueue(k, T, 1000, HOLD, 0, 1, T)
    kern.lib.h_fire(T + 80_000 + M)           # decides ready: one departs, two in the bucket
    kern.run_qdisc(T + 80_000 + M)
    scal, _, _ = kern.stats()
    assert (scal["queued"], scal["ready"], kern.lib.h_qlen()) == (2, 1, 3)
    kern.lib.h_reset()
    scal, _, _ = kern.stats()
    assert (scal["queued"], scal["ready"], scal["pending"], kern.lib.h_qlen(), kern.lib.h_backlog()) == (0, 0, 0, 0, 0)
    assert scal["last_ns"] == T + 80_000 and kern.class_stats(0).queued_bytes == 0
    kern.drive([Arrival(T + 10**7, 1000, 0)])
    assert kern.released[0][1] >= T + 10**7 and kern.lib.h_lock_errors() == 0
    kern.lib.h_del()


#: deliberate mutations of kernel/sch_xcppace.c (a line as written, its mutant): each must
#: make the comparison fail. (Dropping the rate change's instant from the eligibility,
#: c->floor, is not among them: it changes nothing observable, since a head the new rate
#: makes eligible before the change's instant is released at that instant anyway, the
#: bucket phase following the rate changes of the instant; the floor keeps next_e, and
#: the class dump's next_eligible_ns, an instant not yet decided.)
MUTATIONS = {
    "ties to the higher class": (
        "if (x->nelig && (!c || xp_cb(x->q.head)->e < xp_cb(c->q.head)->e))",
        "if (x->nelig && (!c || xp_cb(x->q.head)->e <= xp_cb(c->q.head)->e))"),
    "a rate change does not re-space the bucket head": (
        "\tif (c->bhead)\n\t\tc->next_e = xp_eligible(c, c->bhead);\n\tq->st.rate_changes++;",
        "\tq->st.rate_changes++;"),
    "the wait estimate leaves out the bucket's bytes": (
        "w += xp_ns(c->bucket_bytes, c->rate);", "w += 0;"),
    "a wait of exactly max_wait dropped": (
        "if (w > q->opt.max_wait_ns) {", "if (w >= q->opt.max_wait_ns) {"),
    "no lookahead": ("horizon = now - q->opt.lookahead_ns;", "horizon = now;"),
    "received at its head, not whole": (
        "ready = a + xp_tau(q, qdisc_pkt_len(skb));", "ready = a;"),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_a_mutated_qdisc_fails_the_comparison(tmp_path, name):
    old, new = MUTATIONS[name]
    src = (KERNEL / "sch_xcppace.c").read_text()
    assert src.count(old) == 1, f"mutation {name!r}: its line is not in kernel/sch_xcppace.c once"
    (tmp_path / "sch_xcppace.c").write_text(src.replace(old, new))
    build(tmp_path / "libmutant.so", tmp_path)
    arr, cfg, reqs = _trace(3, 800)
    with pytest.raises(AssertionError):
        hand_cases(tmp_path / "libmutant.so")
        compare(tmp_path / "libmutant.so", arr, cfg, reqs)
