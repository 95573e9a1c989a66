"""The independent event simulator of one switch (testbed.optical.eventsim) against the
paper's rules (sections II and IV), textbook queueing formulas and crafted traces."""

from __future__ import annotations

import bisect
import math
import random

import pytest

from testbed.optical.eventsim import Outcome, Packet, simulate, stats, tau_ns
from testbed.optical.traces import crafted_trace, e1_like_trace, offered_load, poisson_trace

PS = 800                 # ps per byte at 10 Gb/s
L = 9064                 # the paper's data packet, bytes
T = tau_ns(L, PS)        # 7251 ns


def kinds(outcomes: list[Outcome]) -> list[str]:
    return [o.kind for o in outcomes]


def deps(outcomes: list[Outcome]) -> list[int | None]:
    return [o.departure_ns for o in outcomes]


def test_tau_unit_convention():
    """tau = length * ps_per_byte // 1000 ns: 9064 B at 10 Gb/s (800 ps/B) is 7251 ns."""
    assert tau_ns(9064, 800) == 7251 and tau_ns(64, 800) == 51 and tau_ns(9064, 80) == 725
    out = simulate(crafted_trace([(100, 0, 1), (200, 2, 1)]), "hybrid", 1, 3, 800)
    assert out == [Outcome("cut", 100), Outcome("buffered", 7451)]
    out = simulate(crafted_trace([(100, 0, 1)]), "electronic", 0, 3, 800)
    assert out == [Outcome("buffered", 7351)]


# --- textbook formulas -------------------------------------------------------------

@pytest.mark.parametrize("rho", [0.5, 1.5])
def test_all_optical_one_output_is_erlang_b_one_server(rho):
    """M/G/1/1 loss: PLR = rho / (1 + rho), within 4 binomial standard deviations."""
    n = 40_000
    pk = poisson_trace(random.Random(7), n, 1, rho, PS, exclude_self=False)
    s = stats(pk, simulate(pk, "all-optical", 0, 1, PS), PS)
    p = rho / (1 + rho)
    assert abs(s.plr - p) < 4 * math.sqrt(p * (1 - p) / n)
    assert s.buffered == 0 and s.mean_sojourn_tau == 0.0


@pytest.mark.parametrize("rho,tol", [(0.5, 0.03), (0.8, 0.08)])
def test_electronic_one_output_is_store_plus_md1(rho, tol):
    """Sojourn to the head's departure = tau (reception) + M/D/1 wait rho tau / (2(1-rho))."""
    pk = poisson_trace(random.Random(3), 40_000, 1, rho, PS, exclude_self=False)
    s = stats(pk, simulate(pk, "electronic", 0, 1, PS), PS)
    assert s.dropped == 0 and s.cut == 0 and s.oeo_fraction == 1.0
    assert s.mean_sojourn_tau == pytest.approx(1 + rho / (2 * (1 - rho)), rel=tol)


def test_electronic_equals_fifo_recursion_per_output():
    """Store-and-forward: per output, in order of end of reception (ties: arrival rank),
    d_k = max(a_k + tau_k, d_{k-1} + tau_{k-1}); mixed lengths, several outputs."""
    pk = e1_like_trace(random.Random(5), 5000, 4, 0.95, PS, lengths=(64, 1500, 9064))
    out = simulate(pk, "electronic", 0, 4, PS)
    rank = {i: r for r, i in enumerate(sorted(range(len(pk)), key=lambda i: pk[i].arrival_ns))}
    for o in range(4):
        idx = sorted((i for i, p in enumerate(pk) if p.out_port == o),
                     key=lambda i: (pk[i].arrival_ns + tau_ns(pk[i].length, PS), rank[i]))
        free = 0
        for i in idx:
            want = max(pk[i].arrival_ns + tau_ns(pk[i].length, PS), free)
            assert out[i] == Outcome("buffered", want)
            free = want + tau_ns(pk[i].length, PS)


# --- crafted traces: all-optical ---------------------------------------------------

def test_all_optical_output_released_at_t_is_free_for_arrival_at_t():
    pk = crafted_trace([(0, 0, 1), (T, 0, 1), (2 * T - 1, 2, 1)])
    out = simulate(pk, "all-optical", 0, 3, PS)
    assert out == [Outcome("cut", 0), Outcome("cut", T), Outcome("dropped", None)]


def test_hybrid_with_no_buffer_port_is_all_optical():
    pk = e1_like_trace(random.Random(2), 3000, 4, 0.8, PS)
    assert simulate(pk, "hybrid", 0, 4, PS) == simulate(pk, "all-optical", 0, 4, PS)


# --- crafted traces: hybrid --------------------------------------------------------

def test_hybrid_per_output_fifo_no_cross_output_blocking():
    """(a) A packet buffered for output 1 leaves when output 1 is free, although a packet
    for output 0 waits longer; and a waiting packet holds no buffer output (n_e = 1)."""
    pk = crafted_trace([
        (0, 0, 0, 5 * L),     # A: cut, output 0 busy 5 tau
        (0, 2, 1, 2 * L),     # D: cut, output 1 busy 2 tau
        (1, 1, 0),            # B: buffered [1, 1+T], then waits for output 0
        (2 + T, 3, 1),        # C: output 1 busy -> buffered [2+T, 2+2T]
    ])
    out = simulate(pk, "hybrid", 1, 4, PS)
    five_t = tau_ns(5 * L, PS)
    assert out == [Outcome("cut", 0), Outcome("cut", 0),
                   Outcome("buffered", five_t), Outcome("buffered", 2 + 2 * T)]
    assert out[3].departure_ns < out[2].departure_ns


def test_hybrid_residual_loss_tie_against_the_arrival():
    """(b) n_e = n_a = 2: F arrives on input 1 exactly when D (same input) ends its
    bufferisation while E holds the other buffer input: dropped. 1 ns later: buffered.
    Also (d): FIFO order of output 0 is the order of joining (B, D, E, F)."""
    rows = [(0, 0, 0),            # A cut [0, T)
            (1, 1, 0),            # B buffered [1, 1+T], joins 1+T, output busy (C) -> leaves 2T
            (T, 0, 0),            # C: output 0 released at T -> cut [T, 2T)
            (1 + T, 1, 0),        # D: buffer input 0 ends at 1+T (busy for D), takes input 1
            (2 * T, 0, 0),        # E: B leaves at 2T (before arrivals) -> buffered, input 0
            (1 + 2 * T, 1, 0)]    # F: D ends now, E busy -> every buffer input busy
    out = simulate(crafted_trace(rows), "hybrid", 2, 2, PS)
    assert out == [Outcome("cut", 0), Outcome("buffered", 2 * T), Outcome("cut", T),
                   Outcome("buffered", 3 * T), Outcome("buffered", 4 * T), Outcome("dropped", None)]
    rows[-1] = (2 + 2 * T, 1, 0)
    out = simulate(crafted_trace(rows), "hybrid", 2, 2, PS)
    assert out[-1] == Outcome("buffered", 5 * T)
    assert deps(out)[1] < deps(out)[3] < deps(out)[4] < deps(out)[5]


def test_hybrid_output_released_at_t_goes_to_arrival_at_t_if_nobody_waits():
    """(c) cut-through on an output released at the arrival instant."""
    out = simulate(crafted_trace([(0, 0, 1), (T, 0, 1)]), "hybrid", 1, 2, PS)
    assert out == [Outcome("cut", 0), Outcome("cut", T)]


def test_hybrid_waiting_head_goes_before_arrival_at_release_instant():
    """A buffered head "constantly checks": at the release instant it takes the output,
    and the packet arriving at that instant is buffered."""
    two_t = tau_ns(2 * L, PS)
    pk = crafted_trace([(0, 0, 0, 2 * L), (1, 1, 0), (two_t, 0, 0)])
    out = simulate(pk, "hybrid", 2, 2, PS)
    assert out == [Outcome("cut", 0), Outcome("buffered", two_t), Outcome("buffered", two_t + T)]


def test_hybrid_fifo_is_order_of_end_of_bufferisation():
    """(d) With unequal lengths a later, shorter packet joins first and leaves first."""
    pk = crafted_trace([(0, 0, 0, 4 * L), (1, 1, 0, 2 * L), (2, 2, 0, L)])
    out = simulate(pk, "hybrid", 2, 3, PS)
    four_t = tau_ns(4 * L, PS)
    assert out == [Outcome("cut", 0), Outcome("buffered", four_t + T), Outcome("buffered", four_t)]


def test_hybrid_simultaneous_joins_follow_arrival_rank():
    pk = crafted_trace([(0, 0, 0, 3 * L), (5, 2, 0), (5, 1, 0)])
    out = simulate(pk, "hybrid", 2, 3, PS)
    three_t = tau_ns(3 * L, PS)
    assert deps(out)[1:] == [three_t, three_t + T]


def test_hybrid_head_waits_for_a_free_buffer_output():
    """(e) n_e = 1: C is first for output 1, output 1 is free, but the only buffer output
    emits B until 1 + 2T: C leaves at 1 + 2T."""
    half, quarter = L // 2, L // 4
    pk = crafted_trace([
        (0, 0, 0),                 # A cut [0, T)
        (1, 1, 0),                 # B buffered [1, 1+T], emits [1+T, 1+2T) on output 0
        (2 + T, 2, 1, quarter),    # E cut, output 1 busy until 2+T+tau(L/4)
        (3 + T, 3, 1, half),       # C buffered, joins 3+T+tau(L/2) < 1+2T, output 1 then free
    ])
    out = simulate(pk, "hybrid", 1, 4, PS)
    join_c = 3 + T + tau_ns(half, PS)
    assert 2 + T + tau_ns(quarter, PS) < join_c < 1 + 2 * T
    assert out == [Outcome("cut", 0), Outcome("buffered", 1 + T),
                   Outcome("cut", 2 + T), Outcome("buffered", 1 + 2 * T)]


def test_hybrid_arrival_cuts_through_on_output_whose_head_waits_for_buffer_output():
    """The waiting head does not occupy its output: an arrival may take it (section II:
    the arrival only checks whether its Azimuth output is available)."""
    half, quarter = L // 2, L // 4
    pk = crafted_trace([(0, 0, 0), (1, 1, 0), (2 + T, 2, 1, quarter), (3 + T, 3, 1, half),
                        (3 + T + tau_ns(half, PS) + 5, 2, 1)])
    out = simulate(pk, "hybrid", 1, 4, PS)
    assert out[4] == Outcome("cut", pk[4].arrival_ns)
    assert out[3] == Outcome("buffered", pk[4].arrival_ns + T)


# --- invariants on random traces ---------------------------------------------------

def check_rules(pk: list[Packet], out: list[Outcome], n_e: int) -> None:
    """Necessary conditions of the hybrid rules, checked from the outcomes alone."""
    n = len(pk)
    tau = [tau_ns(p.length, PS) for p in pk]
    a = [p.arrival_ns for p in pk]
    rank = {i: r for r, i in enumerate(sorted(range(n), key=a.__getitem__))}
    fwd = [i for i in range(n) if out[i].kind != "dropped"]
    buf = [i for i in range(n) if out[i].kind == "buffered"]
    d = {i: out[i].departure_ns for i in fwd}
    join = {i: a[i] + tau[i] for i in buf}
    for i in range(n):
        assert (out[i].departure_ns is None) == (out[i].kind == "dropped")
        if out[i].kind == "cut":
            assert d[i] == a[i]
        if out[i].kind == "buffered":
            assert d[i] >= join[i]
    # an output emits one packet at a time
    by_out: dict[int, list[int]] = {}
    for i in sorted(fwd, key=lambda i: d[i]):
        by_out.setdefault(pk[i].out_port, []).append(i)
    for seq in by_out.values():
        for x, y in zip(seq, seq[1:]):
            assert d[y] >= d[x] + tau[x]
    starts = {o: [d[i] for i in seq] for o, seq in by_out.items()}

    def out_holder(o: int, t: int) -> int | None:
        """The packet emitting on output o at instant t (starting at or before t)."""
        k = bisect.bisect_right(starts.get(o, []), t) - 1
        if k < 0:
            return None
        j = by_out[o][k]
        return j if t < d[j] + tau[j] else None

    # at most n_e buffer outputs emit, at most n_e buffer inputs are busy (closed intervals)
    def max_overlap(intervals: list[tuple[int, int]], closed: bool) -> int:
        ev = sorted([(s, 0 if closed else 1, +1) for s, e in intervals]
                    + [(e, 1 if closed else 0, -1) for s, e in intervals])
        c = m = 0
        for _, _, step in ev:
            c += step
            m = max(m, c)
        return m
    assert max_overlap([(d[i], d[i] + tau[i]) for i in buf], closed=False) <= n_e
    assert max_overlap([(a[i], join[i]) for i in buf], closed=True) <= n_e
    emit = sorted((d[i], d[i] + tau[i]) for i in buf)
    emit_starts = [s for s, _ in emit]
    max_tau = max(tau)

    def bouts_busy(t: int) -> int:
        """Buffer outputs emitting at instant t (including emissions starting at t)."""
        k, c = bisect.bisect_right(emit_starts, t), 0
        while k > 0 and emit_starts[k - 1] > t - max_tau:
            k -= 1
            c += t < emit[k][1]
        return c

    # contention: buffered or dropped only if the output was held at arrival
    for i in range(n):
        if out[i].kind != "cut":
            j = out_holder(pk[i].out_port, a[i])
            assert j is not None and j != i
    # dropped only if every buffer input was busy (ties at the instant count as busy)
    buf_by_a = sorted(buf, key=a.__getitem__)
    buf_a = [a[j] for j in buf_by_a]
    for i in range(n):
        if out[i].kind == "dropped":
            near = buf_by_a[bisect.bisect_left(buf_a, a[i] - max_tau):bisect.bisect_right(buf_a, a[i])]
            busy = sum(1 for j in near if a[i] <= join[j] and (a[j] < a[i] or rank[j] < rank[i]))
            assert busy == n_e
    # per-output FIFO in order of joining, and no needless waiting
    ends_set = {d[i] + tau[i] for i in fwd}
    ends = sorted(ends_set)
    for o in range(max(p.out_port for p in pk) + 1):
        q = sorted((i for i in buf if pk[i].out_port == o), key=lambda i: (join[i], rank[i]))
        for x, y in zip(q, q[1:]):
            assert d[x] < d[y]
        for k, i in enumerate(q):
            prev = q[k - 1] if k else None
            lo, hi = bisect.bisect_left(ends, join[i]), bisect.bisect_left(ends, d[i])
            assert d[i] == join[i] or d[i] in ends_set  # leaves when it joins or at a release
            for r in [join[i]] + ends[lo:hi]:
                if r >= d[i]:
                    continue
                h = out_holder(o, r)
                held = h is not None and (d[h] < r or out[h].kind == "buffered" or r == join[i])
                assert held or (prev is not None and d[prev] >= r) or bouts_busy(r) >= n_e, (i, r)


@pytest.mark.parametrize("n_e", [1, 2, 4])
@pytest.mark.parametrize("gen", ["e1", "poisson"])
def test_hybrid_rules_hold_on_random_traces(n_e, gen):
    rng = random.Random(100 + n_e)
    lengths = (64, 1500, 9064)
    if gen == "e1":
        pk = e1_like_trace(rng, 4000, 4, 0.95, PS, lengths=lengths)
    else:
        pk = poisson_trace(rng, 4000, 4, 1.1, PS, lengths=lengths)
    out = simulate(pk, "hybrid", n_e, 4, PS)
    s = stats(pk, out, PS)
    assert s.cut > 0 and s.buffered > 0
    check_rules(pk, out, n_e)


def test_outcomes_follow_input_order():
    pk = poisson_trace(random.Random(11), 3000, 4, 0.9, PS)
    pk = [p for k, p in enumerate(pk) if k == 0 or p.arrival_ns != pk[k - 1].arrival_ns]  # no ties
    perm = list(range(len(pk)))
    random.Random(1).shuffle(perm)
    out = simulate(pk, "hybrid", 2, 4, PS)
    shuffled = simulate([pk[k] for k in perm], "hybrid", 2, 4, PS)
    assert shuffled == [out[k] for k in perm]


# --- the fully-buffered switch -----------------------------------------------------

@pytest.mark.parametrize("load", [0.9, 1.2])
def test_fully_buffered_residual_loss_comes_only_from_ties(load):
    """n_e = n_a: PLR > 0 with back-to-back packets, every drop arrives exactly when a
    bufferisation ends, and the sojourn stays a few tau. With 1 ns between packets of a
    link the loss vanishes (at most n_a links bufferise at any instant)."""
    n_a = 4
    pk = e1_like_trace(random.Random(1), 20_000, n_a, load, PS)
    out = simulate(pk, "hybrid", n_a, n_a, PS)
    s = stats(pk, out, PS)
    assert 0 < s.plr < 0.2
    assert 1 < s.mean_sojourn_tau < 5 and s.p99_sojourn_tau < 30
    ends = {p.arrival_ns + T for p, o in zip(pk, out) if o.kind == "buffered"}
    assert all(p.arrival_ns in ends for p, o in zip(pk, out) if o.kind == "dropped")
    spaced = e1_like_trace(random.Random(1), 20_000, n_a, load, PS, gap_ns=1)
    assert stats(spaced, simulate(spaced, "hybrid", n_a, n_a, PS), PS).dropped == 0


def test_more_buffer_ports_lose_less():
    pk = e1_like_trace(random.Random(4), 20_000, 4, 0.9, PS)
    plr = [stats(pk, simulate(pk, "hybrid", n_e, 4, PS), PS).plr for n_e in range(5)]
    assert plr == sorted(plr, reverse=True) and plr[0] > 0.3 and plr[4] < 0.1


# --- stats -------------------------------------------------------------------------

def test_stats_counts_and_sojourn():
    pk = crafted_trace([(0, 0, 0), (10, 1, 0), (20, 2, 0)])
    out = [Outcome("cut", 0), Outcome("buffered", 10 + 3 * T), Outcome("dropped", None)]
    s = stats(pk, out, PS)
    assert (s.packets, s.cut, s.buffered, s.dropped) == (3, 1, 1, 1)
    assert s.plr == pytest.approx(1 / 3) and s.oeo_fraction == 0.5
    assert s.mean_sojourn_tau == pytest.approx(1.5) and s.p99_sojourn_tau == pytest.approx(3.0)
    empty = stats([], [], PS)
    assert empty.packets == 0 and math.isnan(empty.plr) and math.isnan(empty.p99_sojourn_tau)


# --- traces ------------------------------------------------------------------------

@pytest.mark.parametrize("source", ["queue", "gap"])
def test_e1_like_trace_serialises_each_input(source):
    pk = e1_like_trace(random.Random(9), 20_000, 4, 0.7, PS, lengths=(64, 9064), source=source)
    assert pk == e1_like_trace(random.Random(9), 20_000, 4, 0.7, PS, lengths=(64, 9064), source=source)
    assert all(p.in_port != p.out_port for p in pk)
    assert [p.arrival_ns for p in pk] == sorted(p.arrival_ns for p in pk)
    last: dict[int, Packet] = {}
    for p in pk:
        if p.in_port in last:
            q = last[p.in_port]
            assert p.arrival_ns >= q.arrival_ns + tau_ns(q.length, PS)
        last[p.in_port] = p
    assert offered_load(pk, 4, PS) == pytest.approx(0.7, rel=0.03)
    counts = [sum(p.out_port == o for p in pk) for o in range(4)]
    assert min(counts) > 0.23 * len(pk)


def test_e1_like_trace_saturates_links_above_load_one():
    pk = e1_like_trace(random.Random(9), 8000, 4, 1.2, PS)
    assert offered_load(pk, 4, PS) == pytest.approx(1.0, abs=0.01)
    pk = e1_like_trace(random.Random(9), 8000, 4, 1.2, PS, exclude_self=False)
    assert any(p.in_port == p.out_port for p in pk)


def test_poisson_trace_rate_and_determinism():
    pk = poisson_trace(random.Random(1), 20_000, 4, 0.6, PS)
    assert pk == poisson_trace(random.Random(1), 20_000, 4, 0.6, PS)
    assert offered_load(pk, 4, PS) == pytest.approx(0.6, rel=0.03)


# --- validation --------------------------------------------------------------------

GOOD = crafted_trace([(0, 0, 1)])


@pytest.mark.parametrize("args,match", [
    ((GOOD, "optical", 0, 2, PS), "model='optical'.*all-optical, hybrid, electronic"),
    ((GOOD, "all-optical", 1, 2, PS), "n_e=1.*n_e = 0"),
    ((GOOD, "hybrid", 3, 2, PS), r"n_e=3.*0 <= n_e <= n_a = 2"),
    ((GOOD, "hybrid", -1, 2, PS), "n_e=-1"),
    ((GOOD, "electronic", -1, 2, PS), "n_e=-1.*n_e >= 0"),
    ((GOOD, "hybrid", 0, 0, PS), "n_a=0.*n_a >= 1"),
    ((GOOD, "hybrid", 1, 2, 0), "ps_per_byte=0.*ps_per_byte >= 1"),
    ((crafted_trace([(0, 0, 2)]), "hybrid", 1, 2, PS), r"packets\[0\].out_port=2.*out_port < n_a = 2"),
    ((crafted_trace([(0, 0, 0), (5, -1, 0)]), "hybrid", 1, 2, PS), r"packets\[1\].in_port=-1"),
    ((crafted_trace([(-3, 0, 1)]), "hybrid", 1, 2, PS), r"arrival_ns=-3.*arrival_ns >= 0"),
    ((crafted_trace([(0, 0, 1, 1)]), "hybrid", 1, 2, PS), r"length=1.*length \* ps_per_byte >= 1000"),
])
def test_simulate_rejects_bad_values(args, match):
    with pytest.raises(ValueError, match=match):
        simulate(*args)


def test_simulate_rejects_non_integers():
    with pytest.raises(TypeError, match=r"packets\[0\].arrival_ns=1.5"):
        simulate([Packet(1.5, L, 0, 1)], "hybrid", 1, 2, PS)
    with pytest.raises(TypeError, match="n_e=True"):
        simulate(GOOD, "hybrid", True, 2, PS)
    with pytest.raises(TypeError, match=r"packets\[0\]"):
        simulate([(0, L, 0, 1)], "hybrid", 1, 2, PS)


def test_stats_and_traces_reject_bad_values():
    with pytest.raises(ValueError, match="outcomes has 0 items"):
        stats(GOOD, [], PS)
    with pytest.raises(ValueError, match="kind='lost'"):
        stats(GOOD, [Outcome("lost", None)], PS)
    with pytest.raises(ValueError, match="load=0"):
        e1_like_trace(random.Random(1), 10, 4, 0, PS)
    with pytest.raises(ValueError, match="n_a=1.*exclude_self"):
        poisson_trace(random.Random(1), 10, 1, 0.5, PS)
    with pytest.raises(ValueError, match="source='burst'"):
        e1_like_trace(random.Random(1), 10, 4, 0.5, PS, source="burst")
    with pytest.raises(ValueError, match="lengths contains 1"):
        e1_like_trace(random.Random(1), 10, 4, 0.5, PS, lengths=(1,))
    with pytest.raises(ValueError, match=r"rows\[0\]"):
        crafted_trace([(0, 1)])


def test_max_waiting_counts_buffered_packets_from_arrival_to_departure():
    """Occupancy as E1's max_buffer_bytes counts it: a buffered packet waits from its
    arrival until its head leaves; cut-through and dropped packets never wait; a
    departure at an instant frees its place before an arrival at that instant."""
    pk = [Packet(0, L, 0, 1), Packet(10, 1000, 1, 1), Packet(20, L, 2, 1), Packet(30, L, 3, 1),
          Packet(100, 500, 0, 2)]
    out = [Outcome("cut", 0), Outcome("buffered", 100), Outcome("buffered", 200), Outcome("dropped", None),
           Outcome("buffered", 300)]
    s = stats(pk, out, PS)
    # [10, 100) and [20, 200) overlap: 2 packets, 1000 + L bytes; the third arrives at 100,
    # when the first leaves: still 2 packets, but L + 500 bytes
    assert (s.max_waiting, s.max_waiting_bytes) == (2, 1000 + L)
    assert stats(pk[:1], out[:1], PS).max_waiting == 0
    # every packet of the electronic switch is stored first (the head leaves tau after
    # arrival): four equal packets arriving at once for one output all wait together
    same = crafted_trace([(0, i, 0) for i in range(4)])
    s = stats(same, simulate(same, "electronic", 0, 4, PS), PS)
    assert s.max_waiting == 4 and s.max_waiting_bytes == 4 * L
