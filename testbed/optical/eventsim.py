"""Independent discrete-event reference simulator of ONE optical packet switch.

Written only from the paper (Minakhmetov, Ware, Iannone, "TCP Congestion Control in
Datacenter Optical Packet Network on Hybrid Switches", sections II and IV) and the E1
spec ("Switch models"), to check the eBPF port model against it. It imports nothing from
the rest of ``testbed.optical``.

Units: every time is an integer number of nanoseconds; lengths are bytes; a packet of
``length`` bytes lasts ``tau = length * ps_per_byte // 1000`` ns (``ps_per_byte = 800``
at 10 Gb/s, so tau(9064 B) = 7251 ns; the paper's "7.2 us needed to transmit the
packet, i.e. packet duration tau").

The switch (section II): "Hybrid switch has n_a inputs and n_a outputs ... or Azimuths
... n_e inputs and n_e outputs of a buffer". "The case of the bufferless all-optical
switch corresponds to n_e = 0" (section IV).

Rules implemented
-----------------
hybrid (0 <= n_e <= n_a), section II: "a packet enters the switch and checks if required
Azimuth output is available. If yes, the packet occupies it [cut-through, for tau].
Otherwise the packet checks if any of buffer inputs are available. If yes, it occupies
one and start bufferization [for tau: the packet is received whole, OE]. If none of the
buffer inputs are available, the packet is dropped. If the packet is buffered, it
constantly checks if it is first in buffer queue and the required Azimuth output is
available; when two of these conditions are met, the packet is emitted from the buffer
output and packet occupies the required Azimuth output [both for tau, EO]."
Section IV: "The re-emission queuing strategy of the buffer is First-In-First-Out (FIFO)
for a given azimuth" and "the size of the buffer ... is not limited".

all-optical: the hybrid rules with n_e = 0 (free output -> cut-through, else dropped).

electronic, section IV: "the store-and-forward switch buffers all incoming packets, then
re-emits them FIFO. In the electronic switch packets are never lost, and all the packets
undergo at first OE and then EO conversions"; case iii) "receives a whole packet, until
sending it further". Each packet is received for tau (no limit on simultaneous
receptions: every input has its own receiver), then joins the FIFO of its output and
leaves when it is first and the output is free. There are no buffer ports, ``n_e`` is
not used. Every packet counts as "buffered" (one OEO conversion).

Choices where the paper is silent or needs reading
--------------------------------------------------
* Buffer output ports. The paper names n_e buffer outputs as "the channels through which
  packet is routed/emitted ... from a buffer"; so a buffered packet needs a free buffer
  output to leave, and holds it while emitting (tau). A buffer output is busy ONLY while
  it emits: waiting in the buffer holds no port. When a buffered packet is first in its
  FIFO and its output is free but all n_e buffer outputs are emitting, it waits.
* "Available" output means "not occupied" at that instant. A buffered packet does not
  occupy its output while it waits for a buffer output, so a new arrival can cut through
  on that output in the meantime (the arrival's rule only checks the output).
* FIFO order per output = order of JOINING the queue, i.e. of the END of bufferisation
  ("first in buffer queue": a packet is in the buffer once it is buffered). With unequal
  lengths a later, shorter packet may therefore precede an earlier, longer one.
  Simultaneous joins are ordered by arrival rank (see below).
* No cross-output blocking: each output has its own FIFO; a packet for output 1 leaves
  as soon as output 1 and a buffer output are free whatever waits for output 0.
* When several FIFO heads can leave at one instant and fewer buffer outputs are free,
  the head that joined its queue first goes first (paper silent; it only matters when
  buffer outputs are scarce).
* When several buffer inputs / outputs are free the lowest index is taken (the index of
  a port changes no statistic: all ports are identical).
* Simultaneous arrivals are handled in arrival rank: the order of ``packets`` sorted by
  ``arrival_ns``, ties kept in input order (a stable sort).
* ``in_port`` is validated but no rule uses it: the paper's switch has no input-side
  contention (each input link carries one packet at a time by construction of the
  traffic, which the simulator does not check).

Order of the events of one instant t (the residual-loss rule)
-------------------------------------------------------------
Section IV: "it is possible that at the instant when the input of the switch is
released, the input of the electronic buffer is still occupied ... when a packet
finishes its bufferization, while liberating its switch input, another packet enters,
which observes that there are no buffer inputs available, because previous packet is
not yet completely buffered, thus being blocked." The packet on an input link ends at
t = its arrival + tau, exactly when its bufferisation ends; the next packet on the same
link may arrive at that t, and must see the buffer input still busy. Yet an azimuth
output released at t must be free for an arrival at t, or back-to-back packets of one
link could never cut through (the all-optical switch is cut-through). Hence:

1. RELEASE: emissions ending at t free their azimuth output and buffer output
   (electronic: their output).
2. DISPATCH: waiting FIFO heads (joined before t) take the released resources. A
   buffered packet "constantly checks", so it sees a release at the very instant and
   goes before a packet that only checks when it enters; this also keeps the FIFO
   meaningful (a waiting packet is not overtaken by an arrival on a port released for
   it).
3. ARRIVAL: arrivals at t, in arrival rank: cut-through / bufferisation / drop.
4. JOIN: bufferisations (electronic: receptions) ending at t free their buffer input and
   the packet joins its output FIFO. After the arrivals: "previous packet is not yet
   completely buffered" at the instant the next one enters, so the arrival sees the
   buffer input busy (ties go against the arrival) and the just-buffered packet is not
   yet in the queue.
5. DISPATCH: heads that just joined leave at once if their output and a buffer output
   are free (departure = end of bufferisation, store-and-forward delay exactly tau).

Every emission lasts tau >= 1 ns, so no event of an instant creates another event at the
same instant beyond the two DISPATCH steps.

Outcome.departure_ns is the instant the head of the packet leaves on the azimuth output:
the arrival for a cut-through packet, the start of the emission from the buffer for a
buffered one.
"""

from __future__ import annotations

import heapq
import math
import operator
from collections import deque
from dataclasses import dataclass
from typing import Sequence

MODELS = ("all-optical", "hybrid", "electronic")

# Phases of one instant, in processing order (see the module docstring).
_RELEASE, _DISPATCH_OLD, _ARRIVAL, _JOIN, _DISPATCH_NEW = range(5)


@dataclass(frozen=True)
class Packet:
    """One packet offered to the switch.

    arrival_ns: instant its head reaches the switch input (ns); length: bytes;
    in_port / out_port: azimuth indices in [0, n_a).
    """

    arrival_ns: int
    length: int
    in_port: int
    out_port: int


@dataclass(frozen=True)
class Outcome:
    """What happened to one packet.

    kind: "cut" (cut-through), "buffered" (OE + EO; every packet of the electronic
    switch) or "dropped". departure_ns: instant its head leaves on the azimuth output
    (ns), None if dropped.
    """

    kind: str
    departure_ns: int | None


@dataclass(frozen=True)
class Stats:
    """Summary of one run.

    plr = dropped / packets; oeo_fraction = buffered / (cut + buffered);
    mean_sojourn_tau / p99_sojourn_tau: (departure - arrival) / tau(length) over the
    forwarded packets (p99 by nearest rank). Ratios are NaN when their denominator is 0.
    max_waiting / max_waiting_bytes: the most buffered packets (and their bytes) waiting
    at one instant, a buffered packet waiting from its arrival until its departure
    (the head leaves), as the port model's occupancy counts them (E1's
    ``max_buffer_bytes``); a departure at an instant comes before an arrival at it.
    """

    packets: int
    dropped: int
    buffered: int
    cut: int
    plr: float
    oeo_fraction: float
    mean_sojourn_tau: float
    p99_sojourn_tau: float
    max_waiting: int = 0
    max_waiting_bytes: int = 0


def _as_int(name: str, value: object) -> int:
    """``value`` as an int (numpy integers accepted); raises TypeError naming ``name``."""
    if isinstance(value, bool):
        raise TypeError(f"{name}={value!r}: expected an integer, got bool")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name}={value!r}: expected an integer, got {type(value).__name__}") from None


def tau_ns(length: int, ps_per_byte: int) -> int:
    """Duration of a packet of ``length`` bytes in ns: length * ps_per_byte // 1000."""
    return length * ps_per_byte // 1000


def _validate(packets: Sequence[Packet], model: str, n_e: int, n_a: int, ps_per_byte: int) -> None:
    """Raise ValueError (bad value) or TypeError (not an integer) for bad arguments."""
    if model not in MODELS:
        raise ValueError(f"model={model!r}: accepted values are {', '.join(MODELS)}")
    if n_a < 1:
        raise ValueError(f"n_a={n_a}: accepted range is n_a >= 1")
    if model == "all-optical" and n_e != 0:
        raise ValueError(f"n_e={n_e}: the all-optical switch has no buffer; accepted range is n_e = 0")
    if model == "hybrid" and not 0 <= n_e <= n_a:
        raise ValueError(f"n_e={n_e}: accepted range for the hybrid switch is 0 <= n_e <= n_a = {n_a}")
    if model == "electronic" and n_e < 0:
        raise ValueError(f"n_e={n_e}: accepted range is n_e >= 0 (not used by the electronic switch)")
    if ps_per_byte < 1:
        raise ValueError(f"ps_per_byte={ps_per_byte}: accepted range is ps_per_byte >= 1")
    for i, p in enumerate(packets):
        if not isinstance(p, Packet):
            raise TypeError(f"packets[{i}]={p!r}: expected a Packet")
        arrival = _as_int(f"packets[{i}].arrival_ns", p.arrival_ns)
        length = _as_int(f"packets[{i}].length", p.length)
        for name in ("in_port", "out_port"):
            port = _as_int(f"packets[{i}].{name}", getattr(p, name))
            if not 0 <= port < n_a:
                raise ValueError(f"packets[{i}].{name}={port}: accepted range is 0 <= {name} < n_a = {n_a}")
        if arrival < 0:
            raise ValueError(f"packets[{i}].arrival_ns={arrival}: accepted range is arrival_ns >= 0")
        if tau_ns(length, ps_per_byte) < 1:
            raise ValueError(
                f"packets[{i}].length={length}: accepted range is length * ps_per_byte >= 1000 "
                f"(tau >= 1 ns; ps_per_byte = {ps_per_byte})")


def simulate(packets: Sequence[Packet], model: str, n_e: int, n_a: int, ps_per_byte: int,
             *, claim_on_buffering: bool = False) -> list[Outcome]:
    """Run the switch of ``model`` over ``packets``; return their outcomes in input order.

    ``claim_on_buffering`` (default False, the paper) is a diagnostic reading that is NOT
    the paper's switch: an output for which a buffered packet is pending (converting or
    queued) is unavailable to arrivals, as in a switch that must fix each departure when
    the packet arrives (the kernel port model, docs/optical-switch.md). Comparing both
    readings separates that cost from anything else (testbed/optical/oracle.py).

    model: "all-optical" (n_e must be 0), "hybrid" (0 <= n_e <= n_a; n_e = 0 is the
    all-optical switch) or "electronic" (n_e >= 0, not used). n_a >= 1 azimuths;
    ps_per_byte >= 1 (800 at 10 Gb/s). Packets need not be sorted.
    Raises ValueError for an out-of-range value (naming the argument, the value and the
    accepted range) and TypeError for a non-integer where an integer is needed.
    """
    n_e = _as_int("n_e", n_e)
    n_a = _as_int("n_a", n_a)
    ps_per_byte = _as_int("ps_per_byte", ps_per_byte)
    _validate(packets, model, n_e, n_a, ps_per_byte)
    electronic = model == "electronic"
    n_buf = 0 if electronic else n_e

    n = len(packets)
    arr = [int(p.arrival_ns) for p in packets]
    out = [int(p.out_port) for p in packets]
    tau = [tau_ns(int(p.length), ps_per_byte) for p in packets]
    kind: list[str] = ["dropped"] * n
    departure: list[int | None] = [None] * n

    out_busy = [False] * n_a
    pending = [0] * n_a            # buffered packets not yet departed, per output
    bin_busy = [False] * n_buf     # buffer inputs (bufferisation, OE)
    bout_busy = [False] * n_buf    # buffer outputs (emission, EO)
    fifo: list[deque[tuple[int, int]]] = [deque() for _ in range(n_a)]  # (join order, packet)
    queued = 0
    joins = 0

    # Heap entries: (time, phase, order, packet or port, buffer port or -1).
    # RELEASE entries: (t, _RELEASE, 0, out_port, buffer_out_port or -1)
    # ARRIVAL / JOIN entries: (t, phase, arrival rank, packet index, buffer_in_port or -1)
    order = sorted(range(n), key=arr.__getitem__)
    events: list[tuple[int, int, int, int, int]] = [
        (arr[i], _ARRIVAL, rank, i, -1) for rank, i in enumerate(order)]
    heapq.heapify(events)
    last_dispatch: tuple[int, int] | None = None

    def schedule_dispatch(t: int, phase: int) -> None:
        nonlocal last_dispatch
        if queued and last_dispatch != (t, phase):
            last_dispatch = (t, phase)
            heapq.heappush(events, (t, phase, 0, -1, -1))

    def lowest_free(busy: list[bool]) -> int:
        for k, b in enumerate(busy):
            if not b:
                return k
        return -1

    def dispatch(t: int) -> None:
        """Let FIFO heads whose output (and, hybrid, a buffer output) is free leave at t."""
        nonlocal queued
        while queued:
            best = -1
            best_join = 0
            for o in range(n_a):
                q = fifo[o]
                if q and not out_busy[o] and (best < 0 or q[0][0] < best_join):
                    best, best_join = o, q[0][0]
            if best < 0:
                return
            k = -1
            if not electronic:
                k = lowest_free(bout_busy)
                if k < 0:
                    return  # every buffer output is emitting
                bout_busy[k] = True
            _, i = fifo[best].popleft()
            queued -= 1
            if not electronic:
                pending[best] -= 1
            out_busy[best] = True
            departure[i] = t
            heapq.heappush(events, (t + tau[i], _RELEASE, 0, best, k))

    while events:
        t, phase, rank, a, b = heapq.heappop(events)
        if phase == _RELEASE:
            out_busy[a] = False
            if b >= 0:
                bout_busy[b] = False
            schedule_dispatch(t, _DISPATCH_OLD)
        elif phase in (_DISPATCH_OLD, _DISPATCH_NEW):
            dispatch(t)
        elif phase == _ARRIVAL:
            i, o = a, out[a]
            kind[i] = "buffered"
            if electronic:
                heapq.heappush(events, (t + tau[i], _JOIN, rank, i, -1))
            elif not out_busy[o] and not (claim_on_buffering and pending[o]):
                kind[i] = "cut"
                out_busy[o] = True
                departure[i] = t
                heapq.heappush(events, (t + tau[i], _RELEASE, 0, o, -1))
            else:
                k = lowest_free(bin_busy)
                if k < 0:
                    kind[i] = "dropped"
                else:
                    bin_busy[k] = True
                    pending[o] += 1
                    heapq.heappush(events, (t + tau[i], _JOIN, rank, i, k))
        else:  # _JOIN: end of bufferisation (electronic: of reception)
            if b >= 0:
                bin_busy[b] = False
            fifo[out[a]].append((joins, a))
            joins += 1
            queued += 1
            schedule_dispatch(t, _DISPATCH_NEW)

    return [Outcome(k, d) for k, d in zip(kind, departure)]


def _percentile_nearest_rank(values: list[float], q: float) -> float:
    """The nearest-rank q-quantile (0 < q <= 1) of ``values``; NaN if empty."""
    if not values:
        return math.nan
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def stats(packets: Sequence[Packet], outcomes: Sequence[Outcome], ps_per_byte: int) -> Stats:
    """Summarise ``outcomes`` (from :func:`simulate`) of ``packets`` (same order).

    Raises ValueError if the two sequences differ in length or an outcome kind is
    unknown.
    """
    if len(packets) != len(outcomes):
        raise ValueError(f"outcomes has {len(outcomes)} items; accepted: as many as packets ({len(packets)})")
    counts = {"cut": 0, "buffered": 0, "dropped": 0}
    sojourn: list[float] = []
    for i, (p, o) in enumerate(zip(packets, outcomes)):
        if o.kind not in counts:
            raise ValueError(f"outcomes[{i}].kind={o.kind!r}: accepted values are cut, buffered, dropped")
        counts[o.kind] += 1
        if o.kind != "dropped":
            sojourn.append((o.departure_ns - p.arrival_ns) / tau_ns(p.length, ps_per_byte))
    n = len(packets)
    fwd = counts["cut"] + counts["buffered"]
    most, most_bytes = _max_waiting(packets, outcomes)
    return Stats(
        packets=n,
        dropped=counts["dropped"],
        buffered=counts["buffered"],
        cut=counts["cut"],
        plr=counts["dropped"] / n if n else math.nan,
        oeo_fraction=counts["buffered"] / fwd if fwd else math.nan,
        mean_sojourn_tau=sum(sojourn) / len(sojourn) if sojourn else math.nan,
        p99_sojourn_tau=_percentile_nearest_rank(sojourn, 0.99),
        max_waiting=most,
        max_waiting_bytes=most_bytes,
    )


def _max_waiting(packets: Sequence[Packet], outcomes: Sequence[Outcome]) -> tuple[int, int]:
    """The most buffered packets waiting at one instant, and the most bytes (each maximum
    on its own): a buffered packet waits on [arrival, departure)."""
    events: list[tuple[int, int, int]] = []  # (instant, +1 arrival / -1 departure, bytes)
    for p, o in zip(packets, outcomes):
        if o.kind == "buffered" and o.departure_ns is not None and o.departure_ns > p.arrival_ns:
            events.append((p.arrival_ns, 1, p.length))
            events.append((o.departure_ns, -1, p.length))
    events.sort()  # at one instant departures (-1) before arrivals (+1)
    n = b = most = most_bytes = 0
    for _t, d, length in events:
        n += d
        b += d * length
        most, most_bytes = max(most, n), max(most_bytes, b)
    return most, most_bytes
