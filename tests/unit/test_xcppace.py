"""E5's XCP edge pacer (kernel/sch_xcppace.c) in the unit tier, without a kernel: its
Python mirror testbed.optical.xcppacer against release instants derived by hand (two
classes sharing a link, a rate change mid-queue, a late rate change, the wait bound, a
late arrival under the lookahead rule) and against testbed.xcpsim's pacer and first link
on random traces (fixed rates and timed rate changes); the byte layouts of
testbed.optical.xcppace against kernel/xcppace.h as the C compiler lays it out; options,
bounds and the mechanism. The C itself against the mirror: test_xcppace_kernel.py.
"""

from __future__ import annotations

import json
import random
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from testbed import xcpsim
from testbed.optical import layout, xcppace
from testbed.optical.mechanisms import NodeContext
from testbed.optical.xcppacer import (Arrival, PacerConfig, PacerError, RateChange, RateRequest, gap_ns, ns_at,
                                      run)

KERNEL = Path(__file__).resolve().parents[2] / "kernel"
T = 10**9                       # intended arrival of the first packets (emulation ns)
PS_100M = 80_000                # 100 Mb/s: 80 ns per byte
L = 1000                        # frame bytes
TAU = L * PS_100M // 1000       # 80 us on the link
M = 50_000                      # lookahead


def cfg(rates, *, max_wait=10**12, m=M, prop=100_000, epoch=0, interval=10**9, ps=PS_100M) -> PacerConfig:
    return PacerConfig(len(rates), ps, prop, max_wait, m, epoch, interval, tuple(rates))


def released(dec):
    return [d.departure_ns if d.kind == "released" else d.kind for d in dec]


# ---- hand-computed scenarios ----

def test_two_classes_share_the_link_earliest_eligibility_first_ties_to_the_lower_class():
    """Class 0 at 50 Mb/s (gap 160 us), class 1 at 25 Mb/s (gap 320 us), all five packets
    arriving at T, received whole at R = T + 80 us. Buckets: class 0 eligible at R, R+160,
    R+320; class 1 at R, R+320. Link (80 us a packet): R c0; R+80 c1 (eligible since R);
    R+160 c0; R+320 tie -> c0, R+400 c1."""
    arr = [Arrival(T, L, 0), Arrival(T, L, 0), Arrival(T, L, 0), Arrival(T, L, 1), Arrival(T, L, 1)]
    dec, p = run(arr, cfg([50_000_000, 25_000_000]))
    r, us = T + TAU, 1000
    assert [d.eligible_ns for d in dec] == [r, r + 160 * us, r + 320 * us, r, r + 320 * us]
    assert released(dec) == [r, r + 160 * us, r + 320 * us, r + 80 * us, r + 400 * us]
    assert [d.stamp_ns for d in dec] == [d.departure_ns + 100_000 for d in dec]
    assert all(d.release_ns == d.stamp_ns and not d.late for d in dec)        # decided M after, before the stamp
    (k, iv), = p.intervals().items()
    assert k == 1 and (iv.bytes, iv.packets, iv.qmin_ns) == (5 * L, 5, 0)
    assert iv.class_bytes == (3 * L, 2 * L) and iv.class_packets == (3, 2) and iv.offered_packets == 5
    c = p.counters
    assert (c.arrivals, c.released, c.drops, c.late, c.decided_after_stamp) == (5, 5, 0, 0, 0)


def test_a_rate_change_applies_to_the_queued_packets_at_its_instant():
    """Class 0 at 10 Mb/s (gap 800 us), four packets ready at R. At R+500 us the rate
    becomes 40 Mb/s (gap 200 us): the second packet, due at R+800 under the old rate, is
    eligible at max(R + 200, the change's instant R+500) = R+500; then R+700, R+900. The
    change reaches the qdisc early (in the past of its instant), as the agent sends it."""
    arr = [Arrival(T, L, 0) for _ in range(4)]
    req = RateRequest((RateChange(0, 40_000_000, T + TAU + 500_000),), T)
    dec, p = run(arr, cfg([10_000_000]), [req])
    r = T + TAU
    assert released(dec) == [r, r + 500_000, r + 700_000, r + 900_000]
    assert p.counters.rate_changes == 1 and p.counters.late_rates == 0 and p.rates == [40_000_000]


def test_a_rate_change_after_its_instant_was_decided_applies_at_the_last_decided_instant():
    """As above, the change dated R - 10 us reaching the qdisc at R + 600 us + M: R (the
    first packet's ready, bucket release and departure) is decided, so it applies at R:
    the second packet is eligible at R + 200 us, decided at once (now is past it), as the
    third (R + 400 us): both leave after their stamps (+ 100 us), the fourth (R + 600 us,
    stamp R + 700 us) does not. One late rate change, (R + 600 + M) - (R - 10 + M) =
    610 us late. A change dated after
    the last decided instant applies at its own instant, however late it comes (nothing
    was decided in between): not counted."""
    arr = [Arrival(T, L, 0) for _ in range(4)]
    r = T + TAU
    req = RateRequest((RateChange(0, 40_000_000, r - 10_000),), r + 600_000 + M)
    dec, p = run(arr, cfg([10_000_000]), [req])
    assert released(dec) == [r, r + 200_000, r + 400_000, r + 600_000]
    assert dec[1].decided_ns == r + 600_000 + M and dec[1].release_ns == r + 600_000 + M   # left late
    assert (p.counters.late_rates, p.counters.max_rate_late_ns, p.counters.decided_after_stamp) == (1, 610_000, 2)
    req = RateRequest((RateChange(0, 40_000_000, r + 100_000),), r + 600_000 + M)
    dec, p = run(arr, cfg([10_000_000]), [req])
    assert released(dec) == [r, r + 200_000, r + 400_000, r + 600_000] and p.counters.late_rates == 0


def test_the_wait_bound_is_on_the_estimate_at_admission():
    """10 Mb/s (gap 800 us), max_wait 1.6 ms. Four packets ready at R: the first waits 0,
    the second 800 us, the third 1.6 ms (admitted: a wait of exactly max_wait is), the
    fourth 2.4 ms (dropped). A fifth ready at R + 900 us: the next release is R + 1.6 ms
    (700 us away) plus one packet in the bucket (800 us): 1.5 ms, admitted, eligible at
    R + 2.4 ms. A sixth ready at R + 1 ms: 600 us + two packets 1.6 ms = 2.2 ms: dropped."""
    arr = [Arrival(T, L, 0) for _ in range(4)] + [Arrival(T + 900_000, L, 0), Arrival(T + 1_000_000, L, 0)]
    dec, p = run(arr, cfg([10_000_000], max_wait=1_600_000))
    r = T + TAU
    assert released(dec) == [r, r + 800_000, r + 1_600_000, "dropped", r + 2_400_000, "dropped"]
    assert (p.counters.arrivals, p.counters.drops, p.counters.class_drops) == (6, 2, [2])


def test_a_packet_later_than_the_lookahead_is_decided_at_the_last_instant_and_counted():
    """P (class 0, a = T) reaches the qdisc 3 M late; Q (class 1, a = T + 10 us) on time.
    On time P would leave at R = T + 80 us and Q at R + 80 us. Q's instant R + 10 us is
    decided (Q leaves then) before P comes: P is late, decided at that instant and leaves
    when Q's frame ends, R + 90 us."""
    arr = [Arrival(T, L, 0, T + 3 * M), Arrival(T + 10_000, L, 1)]
    dec, p = run(arr, cfg([50_000_000, 50_000_000]))
    r = T + TAU
    assert released(dec) == [r + 90_000, r + 10_000] and [d.late for d in dec] == [True, False]
    assert p.counters.late == 1 and p.counters.max_enqueue_late_ns == 3 * M
    dec, p = run([Arrival(T, L, 0), Arrival(T + 10_000, L, 1)], cfg([50_000_000, 50_000_000]))
    assert released(dec) == [r, r + TAU] and p.counters.late == 0


def test_an_unused_class_or_a_class_out_of_range_is_unmodelled():
    dec, p = run([Arrival(T, L, 1), Arrival(T, L, 2), Arrival(T, L, 0)], cfg([10_000_000, 0]))
    assert [d.kind for d in dec] == ["unmodelled", "unmodelled", "released"]
    assert p.counters.unmodelled == 2 and p.counters.arrivals == 1
    # a rate change may bring an unused class into use (never back to 0)
    dec, p = run([Arrival(T, L, 1)], cfg([10_000_000, 0]), [RateRequest((RateChange(1, 10_000_000, T),), 0)])
    assert dec[0].kind == "released"
    with pytest.raises(PacerError, match="rate_bps"):
        run([], cfg([10_000_000, 0]), [RateRequest((RateChange(1, 0, T),), 0)])


def test_intervals_count_departures_and_the_smallest_backlog_and_bucket_releases():
    """Interval 1 ms from epoch T: a packet eligible just before the boundary departs
    after it (link busy): offered in k, departed in k + 1; the backlog it found (40 us)
    counts in k, its interval of eligibility (XCP's queue sample at the link's input)."""
    arr = [Arrival(T + 800_000, L, 0), Arrival(T + 840_000, L, 1)]
    dec, p = run(arr, cfg([100_000_000, 100_000_000], epoch=T, interval=1_000_000))
    assert released(dec) == [T + 880_000, T + 960_000]
    arr = [Arrival(T + 860_000, L, 0), Arrival(T + 900_000, L, 1)]
    dec, p = run(arr, cfg([100_000_000, 100_000_000], epoch=T, interval=1_000_000))
    assert released(dec) == [T + 940_000, T + 1_020_000]
    iv = p.intervals()
    assert (iv[0].packets, iv[0].offered_packets, iv[0].qmin_ns, iv[0].class_packets) == (1, 2, 0, (1, 0))
    assert (iv[1].packets, iv[1].offered_packets, iv[1].qmin_ns, iv[1].class_bytes) == (1, 0, None, (0, L))
    # the backlog is the interval of eligibility's: class 1 alone in k = 0 found 40 us
    _, p = run(arr, cfg([100_000_000, 100_000_000], epoch=T + 970_000, interval=1_000_000))
    assert [(k, v.qmin_ns, v.offered_packets) for k, v in p.intervals().items()] == [(0, 40_000, 1)]
    # before the epoch: counted, in no interval
    _, p = run([Arrival(T - 10**6, L, 0)], cfg([100_000_000], epoch=T, interval=1_000_000))
    assert p.intervals() == {} and p.counters.before_epoch == 1


def test_rounding_of_the_bucket():
    assert ns_at(1500, 8_000_000) == 1_500_000 and ns_at(1, 16_000_000_000) == 1   # 0.5 ns rounds up
    assert ns_at(1, 17_000_000_000) == 0 and gap_ns(1, 17_000_000_000) == 1
    assert ns_at(0, 5) == 0


# ---- against testbed.xcpsim's pacer and first link ----

class _FirstLink(xcpsim.XcpLoopSim):
    """xcpsim with its probes off (rates change only when the test says), recording each
    packet's departure on its flow's first link and applying timed rate changes through
    the same path as a returned probe's (_schedule_pacer at the change's instant)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.deps: dict[str, list[int]] = {name: [] for name in self.flows}

    def _probe_send(self, fl, now):
        return None

    def _arrive(self, fl, hop, now):
        if hop == 0:
            self.deps[fl.spec.name].append(max(now, fl.hops[0].busy_until))
        super()._arrive(fl, hop, now)

    def change_at(self, name: str, t_ns: int, rate: int) -> None:
        self._push(t_ns, xcpsim._PROBE, "apply", (self.flows[name], ("set", rate), t_ns))

    def _apply(self, fl, trip, back, now):
        fl.rate = trip[1]
        self._schedule_pacer(fl, now)


def _xcpsim_case(seed: int, changes: bool):
    """n flows from edge i0 over one 100 Mb/s link, each offered at a constant rate from a
    random start (flow 0 at 1.5 x its rate: the wait bound drops), paced at a random rate (and, with ``changes``, new rates at random
    instants); 1500 B frames, 20 ms wait bound. Returns (sim, its offers, rate changes)."""
    rng = random.Random(seed)
    n, cap, size = rng.randrange(2, 6), 100_000_000, 1500
    links = xcpsim.duplex("i0", "c0", cap, 0.0001)
    flows = []
    for k in range(n):
        links += xcpsim.duplex("c0", f"e{k}", 10 * cap, 0.001)
        rate = rng.randrange(5_000_000, 60_000_000)
        demand = rate * (1.5 if k == 0 else rng.uniform(0.6, 1.6))      # flow 0 overloads its bucket
        flows.append(xcpsim.SimFlow(f"f{k}", ("i0", "c0", f"e{k}"), rate, demand, start_s=rng.randrange(10**7) / 1e9))
    sim = _FirstLink(links, flows, xcpsim.SimConfig(packet_bytes=size, edge_wait_s=0.02, min_rate_bps=1.0,
                                                    max_rate_bps=float(cap)))
    chg = []
    if changes:
        for _ in range(4 * n):
            k, t, r = rng.randrange(n), rng.randrange(10**7, 2 * 10**8), rng.randrange(2_000_000, 80_000_000)
            sim.change_at(f"f{k}", t, r)
            chg.append(RateChange(k, r, t))
    return sim, flows, chg


@pytest.mark.parametrize("changes", [False, True])
@pytest.mark.parametrize("seed", range(5))
def test_departures_equal_xcpsims_pacer_and_first_link(seed, changes):
    """Same leaky buckets, same link: every packet's departure onto the link (its head),
    which packets the wait bound drops, and per interval the link's input (bucket
    releases) and smallest backlog as xcpsim's link controller counts them. xcpsim's
    packets come whole at their offer instant, so the pacer's arrivals are dated tau
    earlier (it receives them whole at ready = a + tau). Where the two differ by
    construction (ties between classes eligible at the same ns: xcpsim's event order vs
    the lower class; the wait estimate ahead x round(gap) vs round(bytes / R)) the trace
    has no such case (checked)."""
    sim, flows, chg = _xcpsim_case(seed, changes)
    res = sim.run(4)                                         # 4 intervals of 50 ms
    size, ps = 1500, layout.ps_per_byte(100e6)
    tau = size * ps // 1000
    arrivals, who = [], []
    for k, f in enumerate(flows):
        spacing = round(8 * size * 1e9 / f.demand_bps)
        start = round(f.start_s * 1e9)
        t = start
        while t <= 4 * 50_000_000:
            arrivals.append(Arrival(t - tau, size, k))
            who.append(k)
            t += spacing
    config = PacerConfig(len(flows), ps, 100_000, 20_000_000, M, 0, 50_000_000,
                         tuple(int(f.start_rate_bps) for f in flows))
    dec, p = run(arrivals, config, [RateRequest((c,), 0) for c in chg])
    eligible = sorted(d.eligible_ns for d in dec if d.kind == "released")
    assert len(eligible) == len(set(eligible)), "two classes eligible at one ns: tie rules differ"
    for k, f in enumerate(flows):
        mine = [d for d, w in zip(dec, who) if w == k and d.departure_ns is not None and d.departure_ns < 4 * 50_000_000]
        assert [d.departure_ns for d in mine] == sim.deps[f.name][:len(mine)], f.name
        drops = sum(1 for d, w in zip(dec, who) if w == k and d.kind == "dropped"
                    and arrivals[dec.index(d)].arrival_ns + tau < 4 * 50_000_000)
        assert drops == res.edge_drops[f.name], f.name
    ivs = p.intervals()
    assert min(d.departure_ns - d.eligible_ns for d in dec if d.kind == "released") >= 0
    link = res.links[("i0", "c0")]
    for k in range(4):
        assert ivs[k].offered_bytes == link[k].input_bytes == sum(res.sent[f.name][k] for f in flows)
        assert ivs[k].qmin_ns * 100e6 / 8e9 == pytest.approx(link[k].persistent_queue_bytes, abs=1e-6)
    assert sum(len(v) for v in sim.deps.values()) > 200 and p.counters.drops > 0


# ---- byte layouts against kernel/xcppace.h ----

_LAYOUT_C = r"""
#include <stddef.h>
#include <stdio.h>
#include "xcppace.h"
#define M(s, f) printf("%s\"%s\": [%zu, %zu]", first++ ? ", " : "", #f, offsetof(struct s, f), sizeof(((struct s *)0)->f))
int main(void)
{
	int first = 0;
	printf("{\"qopt\": {");
	%QOPT%
	first = 0;
	printf("}, \"xstats\": {");
	%XSTATS%
	first = 0;
	printf("}, \"class\": {");
	%CLASS%
	first = 0;
	printf("}, \"slot\": {");
	%SLOT%
	first = 0;
	printf("}, \"rate\": {");
	M(tc_xcppace_rate, cls); M(tc_xcppace_rate, pad); M(tc_xcppace_rate, rate_bps); M(tc_xcppace_rate, effective_ns);
	printf("}, \"sizes\": {\"qopt\": %zu, \"xstats\": %zu, \"class\": %zu, \"rate\": %zu, \"cslot\": %zu}, ",
	       sizeof(struct tc_xcppace_qopt), sizeof(struct tc_xcppace_xstats), sizeof(struct tc_xcppace_class_xstats),
	       sizeof(struct tc_xcppace_rate), sizeof(struct tc_xcppace_class_slot));
	printf("\"defines\": [%d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %llu, %llu, %llu, %llu]}\n",
	       XCPPACE_VERSION, XCPPACE_MAX_CLASSES, XCPPACE_SLOTS, XCPPACE_LATE_BUCKETS, XCPPACE_MAX_PENDING,
	       XCPPACE_CB_DECISION, XCPPACE_CB_CLASS, XCPPACE_OPTSW_HOLD, TCA_XCPPACE_PARMS, TCA_XCPPACE_RATES,
	       (unsigned long long)XCPPACE_LIMIT_MAX, (unsigned long long)XCPPACE_TIME_MAX,
	       (unsigned long long)XCPPACE_PS_PER_BYTE_MAX, (unsigned long long)XCPPACE_RATE_MAX);
	return 0;
}
"""


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory) -> dict:
    """kernel/xcppace.h as the system C compiler lays it out: per struct {member: [offset,
    size]} for the members the Python side names, the sizes and the constants (skipped
    without a compiler)."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler (cc, gcc, clang) to lay out kernel/xcppace.h")

    def ms(struct_name, names):
        return " ".join(f"M({struct_name}, {n});" for n in names)
    src = (_LAYOUT_C.replace("%QOPT%", ms("tc_xcppace_qopt", [m for m, _ in xcppace.QOPT_MEMBERS]))
           .replace("%XSTATS%", ms("tc_xcppace_xstats", [*xcppace.XSTATS_MEMBERS, "late_log2", "slot"]))
           .replace("%CLASS%", ms("tc_xcppace_class_xstats", [*xcppace.CLASS_XSTATS_MEMBERS, "slot"]))
           .replace("%SLOT%", ms("tc_xcppace_slot", xcppace.SLOT_MEMBERS)))
    d = tmp_path_factory.mktemp("xcppacelayout")
    (d / "layout.c").write_text(src)
    subprocess.run([cc, "-Wall", "-Werror", "-I", str(KERNEL), str(d / "layout.c"), "-o", str(d / "layout")],
                   check=True, capture_output=True, text=True, timeout=120)
    return json.loads(subprocess.run([str(d / "layout")], check=True, capture_output=True, text=True).stdout)


def test_constants_and_bounds_are_the_headers(c_layout):
    from testbed.optical import xcppacer as x
    assert c_layout["defines"] == [xcppace.VERSION, x.MAX_CLASSES, x.SLOTS, x.LATE_BUCKETS, x.MAX_PENDING,
                                   xcppace.CB_DECISION, xcppace.CB_CLASS, xcppace.OPTSW_HOLD,
                                   xcppace.TCA_XCPPACE_PARMS, xcppace.TCA_XCPPACE_RATES, x.LIMIT_BOUNDS[1],
                                   x.TIME_BOUNDS[1], x.PS_PER_BYTE_BOUNDS[1], x.RATE_BOUNDS[1]]
    assert xcppace.OPTSW_HOLD == layout.HOLD


def test_layouts_member_by_member(c_layout):
    """Options pack, counters unpack, each member at its C offset: every member holds a
    distinct value and comes back as itself."""
    s = c_layout["sizes"]
    assert (xcppace.QOPT_SIZE, xcppace.XSTATS_SIZE, xcppace.CLASS_XSTATS_SIZE, xcppace.RATE_SIZE) == (
        s["qopt"], s["xstats"], s["class"], s["rate"]) == (576, 736, 168, 24)
    assert s["cslot"] == 24
    for name, members in (("xstats", [*xcppace.XSTATS_MEMBERS]), ("class", [*xcppace.CLASS_XSTATS_MEMBERS])):
        assert [c_layout[name][m][0] for m in members] == [8 * k for k in range(len(members))], name
    assert [c_layout["slot"][m][0] for m in xcppace.SLOT_MEMBERS] == [0, 8, 16, 24, 32, 40]
    opts = xcppace.XcpPaceOptions(3, 1234, 5, 6, 7, 8, 9, (11, 0, 13), limit=99)
    raw = opts.qopt()
    q = c_layout["qopt"]
    got = {m: int.from_bytes(raw[off:off + size], "little") for m, (off, size) in q.items() if m != "rate_bps"}
    assert got == dict(version=1, nclasses=3, limit=99, flags=0, ps_per_byte=1234, prop_ns=5, max_wait_ns=6,
                       lookahead_ns=7, epoch_ns=8, interval_ns=9)
    off = q["rate_bps"][0]
    assert struct.unpack_from("<64Q", raw, off) == (11, 0, 13) + (0,) * 61
    assert xcppace.XcpPaceOptions.unpack(opts.pack()) == opts
    r = c_layout["rate"]
    raw = xcppace.pack_rates([RateChange(5, 6, 7)])
    assert [int.from_bytes(raw[o:o + n], "little") for o, n in r.values()] == [5, 0, 6, 7]
    # counters: the ring and the classes' slots
    vals = list(range(1, xcppace.XSTATS_SIZE // 8 + 1))
    xo = c_layout["xstats"]["slot"][0] // 8
    vals[xo + 6] = 2**64 - 1                             # slot 1 never used
    scal, hist, slots = xcppace.unpack_xstats(struct.pack(f"<{len(vals)}Q", *vals))
    assert scal["arrivals"] == 1 and scal["ready"] == 20 and hist[0] == 21
    assert slots[0] == xcppace.PortSlot(xo + 1, xo + 2, xo + 3, xo + 4, xo + 5, xo + 6) and slots[1].interval is None
    cv = list(range(1, xcppace.CLASS_XSTATS_SIZE // 8 + 1))
    cv[8] = 2**64 - 1
    cs = xcppace.unpack_class_xstats(struct.pack(f"<{len(cv)}Q", *cv))
    assert (cs.arrivals, cs.rate_bps, cs.next_eligible_ns, cs.slots[0]) == (1, 5, None, (10, 11, 12))
    with pytest.raises(xcppace.XcpPaceError, match="expected 736"):
        xcppace.unpack_xstats(b"\0" * 8)


def test_intervals_of_takes_a_class_slot_only_for_its_own_interval():
    port = [xcppace.PortSlot(8, 3000, 2, 5, 3000, 2), xcppace.PortSlot(None, 0, 0, None, 0, 0),
            xcppace.PortSlot(6, 1000, 1, None, 0, 0), xcppace.PortSlot(7, 0, 0, None, 1000, 1)]

    def cls(slots):
        return xcppace.ClassStats(0, 0, 0, 0, 1, 0, 0, 0, None, tuple(slots))
    a = cls([(8, 2000, 1), (None, 0, 0), (2, 700, 1), (None, 0, 0)])          # slot 2 stale (interval 2)
    b = cls([(4, 900, 9), (None, 0, 0), (6, 1000, 1), (None, 0, 0)])          # slot 0 stale (interval 4)
    iv = xcppace.intervals_of(port, [a, b])
    assert list(iv) == [6, 7, 8]
    assert (iv[8].class_bytes, iv[8].class_packets, iv[8].qmin_ns) == ((2000, 0), (1, 0), 5)
    assert (iv[6].class_bytes, iv[7].offered_bytes, iv[7].qmin_ns) == ((0, 1000), 1000, None)


@pytest.mark.parametrize("kw, message", [
    (dict(nclasses=0, rates_bps=()), "nclasses=0"),
    (dict(nclasses=65, rates_bps=(1,) * 65), "nclasses=65"),
    (dict(rates_bps=(1, 2)), "one per class"),
    (dict(rates_bps=(8_000_000_000_001,)), r"rates_bps\[0\]"),
    (dict(lookahead_ns=0), "lookahead_ns=0"),
    (dict(interval_ns=0), "interval_ns=0"),
    (dict(ps_per_byte=0), "ps_per_byte=0"),
    (dict(max_wait_ns=3_600_000_000_001), "max_wait_ns"),
])
def test_options_out_of_the_modules_range_name_the_field(kw, message):
    base = dict(nclasses=1, ps_per_byte=PS_100M, prop_ns=0, max_wait_ns=0, lookahead_ns=1, epoch_ns=0,
                interval_ns=1, rates_bps=(1,))
    base.update(kw)
    with pytest.raises(PacerError, match=message):
        xcppace.XcpPaceOptions(**base)


def test_a_rate_request_beyond_the_pending_bound_is_refused_whole():
    from testbed.optical.xcppacer import MAX_PENDING, Pacer
    p = Pacer(cfg([10_000_000, 10_000_000]))
    p.set_rates([RateChange(0, 1000, T + k) for k in range(MAX_PENDING - 1)], 0)
    with pytest.raises(PacerError, match="at most 1024"):
        p.set_rates([RateChange(1, 1000, T), RateChange(1, 1000, T)], 0)
    with pytest.raises(PacerError, match="cls"):
        p.set_rates([RateChange(2, 1000, T)], 0)
    assert len(p.rate_q) == MAX_PENDING - 1


# ---- the mechanism and the netlink requests (no kernel: the requests are recorded) ----

def test_plan_holds_restamps_and_install(monkeypatch):
    ctx = NodeContext(20.0, (5e6, 5e6, 5e6), (True, False, True), prop_ns=(2_000_000,) * 3)
    m = xcppace.XCPPACE_MECHANISM
    devs = ["h0", "up", "h1"]
    assert m.plan(devs, ctx) == {"h0": "fq", "up": "xcppace", "h1": "fq"}
    assert m.holds(devs, ctx) == (False, True, False) and m.restamps(devs, ctx) == (False, False, False)
    done = []
    monkeypatch.setattr(xcppace.qdiscnl, "replace_root", lambda dev, ns, kind, opts, *a: done.append((dev, kind, opts)))
    monkeypatch.setattr(type(xcppace.FQ), "install", lambda self, ns, ds, o, led: done.append(("fq", tuple(ds))))
    opts = xcppace.XcpPaceOptions(2, PS_100M, 2_000_000, 250_000_000, 1_000_000, 0, 10**9, (1_000_000, 0))
    m.install("n1", devs, {"up": opts}, None, ctx)
    assert done == [("fq", ("h0", "h1")), ("up", "xcppace", opts.pack())]
    with pytest.raises(xcppace.XcpPaceError, match="XcpPaceOptions"):
        m.install("n1", devs, {"other": opts}, None, ctx)


def test_set_rates_sends_one_change_request_with_the_rates_nested_in_the_options(monkeypatch):
    sent = []
    monkeypatch.setattr(xcppace, "call_in", lambda ns, fn: fn())
    monkeypatch.setattr(xcppace.qdiscnl, "ifindex", lambda dev, ns, err: 7)
    monkeypatch.setattr(xcppace.qdiscnl, "request", lambda *a: sent.append(a))
    xcppace.set_rates("up", "n1", [RateChange(1, 2_000_000, 5), RateChange(0, 3, 6)])
    (mtype, flags, idx, payload, _err), = sent
    assert (mtype, flags, idx) == (xcppace.qdiscnl.RTM_NEWQDISC, xcppace.qdiscnl.NLM_F_ACK, 7)
    a = xcppace.qdiscnl.attrs(payload)
    assert a[xcppace.qdiscnl.TCA_KIND] == b"xcppace\0"
    nest = xcppace.qdiscnl.attrs(a[xcppace.qdiscnl.TCA_OPTIONS])
    assert list(nest) == [xcppace.TCA_XCPPACE_RATES]
    assert struct.unpack("=IIQQIIQQ", nest[xcppace.TCA_XCPPACE_RATES]) == (1, 0, 2_000_000, 5, 0, 0, 3, 6)
    with pytest.raises(xcppace.XcpPaceError, match="at least one"):
        xcppace.set_rates("up", "n1", [])
