"""Random and crafted packet traces for one switch, for :mod:`testbed.optical.eventsim`.

Times are integer ns, lengths bytes, tau(length) = length * ps_per_byte // 1000 ns.
"Load" is in units of the capacity of one output: the mean number of packet durations
offered to an output per unit time (packets/s * E[tau]). Every generator is
deterministic for a given ``rng`` state and returns packets sorted by arrival
(ties by input port).
"""

from __future__ import annotations

import heapq
import random
from typing import Iterable, Sequence

from testbed.optical.eventsim import Packet, tau_ns

SOURCES = ("queue", "gap")


def _check(n_packets: int, n_a: int, load: float, ps_per_byte: int, lengths: Sequence[int],
           exclude_self: bool) -> None:
    """Raise ValueError naming the first bad argument, its value and the accepted range."""
    if n_packets < 0:
        raise ValueError(f"n_packets={n_packets}: accepted range is n_packets >= 0")
    if n_a < 1:
        raise ValueError(f"n_a={n_a}: accepted range is n_a >= 1")
    if exclude_self and n_a < 2:
        raise ValueError(f"n_a={n_a}: with exclude_self=True the accepted range is n_a >= 2")
    if not load > 0:
        raise ValueError(f"load={load}: accepted range is load > 0")
    if ps_per_byte < 1:
        raise ValueError(f"ps_per_byte={ps_per_byte}: accepted range is ps_per_byte >= 1")
    if not lengths:
        raise ValueError("lengths=(): accepted: at least one length")
    for length in lengths:
        if tau_ns(length, ps_per_byte) < 1:
            raise ValueError(f"lengths contains {length}: accepted range is length * ps_per_byte >= 1000 (tau >= 1 ns)")


def _pick(rng: random.Random, lengths: Sequence[int]) -> int:
    """A length drawn uniformly from ``lengths`` (no draw if there is only one)."""
    return lengths[0] if len(lengths) == 1 else rng.choice(lengths)


def _pick_out(rng: random.Random, n_a: int, in_port: int | None, exclude_self: bool) -> int:
    """An output uniform over [0, n_a), or over the ports other than ``in_port``."""
    if not exclude_self or in_port is None:
        return rng.randrange(n_a)
    o = rng.randrange(n_a - 1)
    return o + 1 if o >= in_port else o


def e1_like_trace(rng: random.Random, n_packets: int, n_a: int, load: float, ps_per_byte: int,
                  lengths: Sequence[int] = (9064,), exclude_self: bool = True, source: str = "queue",
                  gap_ns: int = 0) -> list[Packet]:
    """``n_packets`` packets on ``n_a`` input links, each carrying one packet at a time.

    On each input, a packet starts no earlier than the previous one ended plus ``gap_ns``
    (start >= prev start + tau(prev) + gap_ns). Lengths are uniform over ``lengths``;
    outputs uniform over the n_a ports, or over the n_a - 1 others if ``exclude_self``
    (a switch does not send a packet back where it came from). By symmetry the load per
    output equals the load per input.

    source = "queue" (shifted Poisson): intended starts form a Poisson process of rate
    load / E[tau] per input and wait in a FIFO at the sender until the link is free
    (start = max(poisson instant, prev end + gap_ns)). For load < 1 the offered load
    per output is ``load``; for load >= 1 the sender backlog grows and the links become
    saturated (back-to-back packets): an output then gets at most 1, on average.
    source = "gap" (thinned Poisson): after each packet the link stays idle for an
    exponential time of mean E[tau] * (1/load - 1) (a Poisson process restarted at each
    packet end: points falling during a transmission are discarded), so the carried
    load is ``load`` for load < 1; for load >= 1 packets are back-to-back.
    The first instant of each input is random (Poisson / uniform phase).

    The trace is the first ``n_packets`` starts over all inputs, sorted by (arrival,
    in_port). Raises ValueError for an out-of-range argument.
    """
    _check(n_packets, n_a, load, ps_per_byte, lengths, exclude_self)
    if source not in SOURCES:
        raise ValueError(f"source={source!r}: accepted values are {', '.join(SOURCES)}")
    if gap_ns < 0:
        raise ValueError(f"gap_ns={gap_ns}: accepted range is gap_ns >= 0")
    mean_tau = sum(tau_ns(length, ps_per_byte) for length in lengths) / len(lengths)
    rate = load / mean_tau                                   # intended starts per ns per input
    idle_mean = mean_tau * (1.0 / load - 1.0) if load < 1 else 0.0

    poisson = [0.0] * n_a     # "queue": intended (Poisson) instant, float ns
    free_at = [0] * n_a       # instant the input may start its next packet
    heap: list[tuple[int, int, int, int]] = []   # (start, in_port, length, out_port)

    def next_packet(i: int, first: bool) -> tuple[int, int, int, int]:
        if source == "queue":
            poisson[i] += rng.expovariate(rate)
            start = max(round(poisson[i]), free_at[i])
        elif first:
            start = round(rng.uniform(0.0, mean_tau + idle_mean))
        else:
            start = free_at[i] + (round(rng.expovariate(1.0 / idle_mean)) if idle_mean > 0 else 0)
        length = _pick(rng, lengths)
        free_at[i] = start + tau_ns(length, ps_per_byte) + gap_ns
        return (start, i, length, _pick_out(rng, n_a, i, exclude_self))

    for i in range(n_a):
        heapq.heappush(heap, next_packet(i, True))
    packets: list[Packet] = []
    while len(packets) < n_packets:
        start, i, length, o = heapq.heappop(heap)
        packets.append(Packet(start, length, i, o))
        heapq.heappush(heap, next_packet(i, False))
    return packets


def poisson_trace(rng: random.Random, n_packets: int, n_a: int, load: float, ps_per_byte: int,
                  lengths: Sequence[int] = (9064,), exclude_self: bool = True) -> list[Packet]:
    """``n_packets`` aggregate Poisson arrivals to uniform outputs (textbook traffic).

    The aggregate rate is n_a * load / E[tau], so each output is offered ``load``.
    There is NO per-input serialisation: input ports are only labels (uniform, or
    uniform over the ports other than the output if ``exclude_self``), and one input
    may carry overlapping packets. Lengths uniform over ``lengths``.
    Raises ValueError for an out-of-range argument.
    """
    _check(n_packets, n_a, load, ps_per_byte, lengths, exclude_self)
    mean_tau = sum(tau_ns(length, ps_per_byte) for length in lengths) / len(lengths)
    rate = n_a * load / mean_tau
    clock = 0.0
    packets: list[Packet] = []
    for _ in range(n_packets):
        clock += rng.expovariate(rate)
        o = rng.randrange(n_a)
        i = _pick_out(rng, n_a, o, exclude_self)   # same rule: uniform over the others
        packets.append(Packet(round(clock), _pick(rng, lengths), i, o))
    packets.sort(key=lambda p: (p.arrival_ns, p.in_port))
    return packets


def crafted_trace(rows: Iterable[Sequence[int]], length: int = 9064) -> list[Packet]:
    """Packets from rows (arrival_ns, in_port, out_port) or (arrival_ns, in_port, out_port, length).

    Kept in the given order (outcomes of :func:`~testbed.optical.eventsim.simulate`
    come back in that order). Raises ValueError for a row of another size.
    """
    packets = []
    for k, row in enumerate(rows):
        if len(row) not in (3, 4):
            raise ValueError(f"rows[{k}]={tuple(row)!r}: accepted: (arrival_ns, in_port, out_port[, length])")
        a, i, o = row[0], row[1], row[2]
        packets.append(Packet(a, row[3] if len(row) == 4 else length, i, o))
    return packets


def offered_load(packets: Sequence[Packet], n_a: int, ps_per_byte: int) -> float:
    """Measured offered load per output: sum of tau / (n_a * span), span = first arrival
    to the last packet's end (ns). Raises ValueError if ``packets`` is empty."""
    if not packets:
        raise ValueError("packets=[]: accepted: at least one packet")
    busy = sum(tau_ns(p.length, ps_per_byte) for p in packets)
    first = min(p.arrival_ns for p in packets)
    end = max(p.arrival_ns + tau_ns(p.length, ps_per_byte) for p in packets)
    return busy / (n_a * (end - first))
