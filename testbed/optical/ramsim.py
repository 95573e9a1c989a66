"""Independent discrete-event reference simulator of ONE core node with very small optical RAM.

Written only from the paper (Alparslan, Arakawa, Murata, "Comparison of Packet Switch
Architectures and Pacing Algorithms for Very Small Optical RAM", section II-B, the
example of section III-B-2 and the simulation settings of section III-A) and the E5 spec
("Buffer architectures"), to check E5's port models against it. It imports nothing from
the rest of ``testbed.optical``.

Units: every time is an integer number of nanoseconds; lengths and buffer sizes are
bytes; a packet of ``length`` bytes lasts ``tau = length * ps_per_byte // 1000`` ns
(``ps_per_byte = 8000`` at the paper's 1 Gb/s, so tau(1500 B) = 12000 ns), or of its
``wire_bytes`` if given (the buffers count ``length`` either way). Every port of
the node has the same line rate: "The internal speedup is 1 in all switches, which means
the line rates are equal in both inside and outside the switch" (II-B).

The node has ``n_ports`` inputs and as many outputs (the paper's N, the nodal degree) and
one parameter ``buffer_bytes`` (the paper's B, "optical RAM buffer size per link").

Rules common to every architecture
----------------------------------
* Cut-through: "The simulator used cut-through packet switching and buffering for data
  wavelengths" (III-A). A packet whose output is idle when its head arrives, and for which
  nothing waits, leaves at once (``departure = arrival``) and never uses the buffer.
* A packet that cannot cut through is buffered if the buffer has room for all of it,
  otherwise dropped ("one packet will be buffered in the output buffer, and the remaining
  three packets will be dropped as there is no more buffer left", III-B-2).
* "Cut-through ... buffering": a buffered packet may leave as soon as it is its turn and
  its output is free, even before its tail has arrived (virtual cut-through). Input and
  output run at the same rate and the read starts after the write, so the read never
  overtakes the write.
* Ties: an output (or an input's fabric port) released at t is free for a packet arriving
  at t (otherwise back-to-back packets of one link could never cut through); a buffered
  packet that leaves at t has left the buffer at t; waiting packets are served before
  arrivals of the same instant ("As buffered packets can be sent to the output link as
  the link becomes idle", III-B-2).
* Simultaneous arrivals (different inputs) are handled in arrival rank: ``packets`` sorted
  by ``arrival_ns``, ties kept in input order (a stable sort).
* Each input link carries one packet at a time: a packet may not arrive on an input before
  the previous packet of that input has ended (checked; ValueError).

Architectures (section II-B, Fig. 2)
------------------------------------
OB, output buffering: "Output buffering has a large switch size of N x N^2 to prevent
  internal blocking ... It has buffer size B at each output link." Each output has a FIFO
  of at most B bytes; inputs never block one another.
SB, shared buffering: "As shared buffering has a single buffer with a size of N . B ...
  Shared buffering has the same total buffer size per node as input and output
  buffering." One FIFO per output in one memory of N*B bytes (admission: total buffered
  bytes + packet <= N*B). The 2N x 2N fabric ("Shared buffering and worst-case shared
  buffering have a switch size of 2N x 2N") gives the memory N write and N read ports, so
  only its size limits it.
WCSB, worst-case shared buffering: "As worst-case shared buffering has a single buffer
  with a size of B independent of the nodal degree, it has a buffer capacity of only a
  single link in input or output buffering." SB with a memory of B bytes.
IB, input buffering with virtual output queues: "As input buffering has a switch size of
  only N x N ... We applied virtual output queuing (VOQ) scheduling ... by dividing each
  input buffer into N sub-queues to minimize the head-of-line blocking problem [14].
  Input buffering has buffer size B at each input link." In an N x N fabric with speedup
  1 an input sends one packet at a time: a packet leaves when its output AND its input's
  fabric port are free; a packet cut through from an input also holds that input's port
  for tau. A packet arriving on a busy input port, or for a busy output, or behind a
  non-empty VOQ, joins VOQ(input, output) (FIFO) if the input buffer has room.

Choices where the paper is silent
---------------------------------
* Buffer occupancy (``occupancy``). "waiting" (default): a buffered packet holds its
  bytes from the arrival of its head until its head leaves the buffer; the packet being
  sent is no longer counted. This is the only reading that fits the paper's example (a
  1-packet output buffer holds one packet while another is being sent) and the way an ns-2
  queue counts (a packet being transmitted is on the link, not in the queue). "backlog"
  (OB, SB, WCSB only): the spec's EDT reading, an output's queued bytes at t are
  (busy_until - t) x rate, i.e. every byte not yet sent on that output, the rest of the
  packet being sent included (cut through or buffered); admission: the sum of the backlogs
  over the buffer's outputs + the packet <= the bound (compared exactly in integers:
  (busy_until - t) x 1000 + length x ps_per_byte <= bound x ps_per_byte). It is stricter
  than "waiting" by up to one packet per output; keeping both lets a port model that uses
  the EDT formula be checked exactly and its distance to the paper's reading measured.
* VOQ split (``voq_split``). The paper says "dividing each input buffer into N
  sub-queues" and "buffer size B at each input link", not how B is divided. "shared"
  (default): the N VOQs of an input share its B bytes (admission: bytes buffered at the
  input + packet <= B). "static": each VOQ has B/N bytes (admission: (VOQ bytes + packet)
  x N <= B). Default "shared" because the paper's IB example ("one packet will be sent to
  the output link and the other four packets will be buffered at the input ports",
  compared with "single packet capacity output buffers") needs a 1-packet input buffer
  to hold a whole packet for one output, which B/N per VOQ cannot for N > 1.
* Scheduler (``scheduler``). The paper names no VOQ scheduler (it cites McKeown and
  Anderson's comparison of iterative schedulers [14]). "rr" (default): each free output,
  visited in index order, serves the first input at or after its round-robin pointer
  whose VOQ for it is non-empty and whose fabric port is free, then moves the pointer
  past that input. "islip": iSLIP-like request-grant-accept over the free ports, iterated
  until no match is added: every free input requests every free output it has packets
  for; each output grants the requester at or after its grant pointer; each input accepts
  the grant at or after its accept pointer; pointers move one past the granted/accepted
  port only for matches of the first iteration. The switch is asynchronous (variable
  packet sizes, cut-through), so there are no time slots: the scheduler runs at every
  instant at which a port is released.
* When the IB scheduling decision is taken: at the instant an output or an input's
  fabric port is released (after every release of that instant, before that instant's
  arrivals). It considers only the packets already waiting then; the served VOQ's packet
  leaves at that instant. Which input an output serves thus depends on what arrived at
  other inputs before the output became free, i.e. on arrivals after the packet's own
  arrival: an arrival-time stamp cannot decide it (a "holding" realisation is needed).
  With cut-through and at most one packet per input at a time, arrivals never create a
  match that the decision at the last release missed, so no decision at arrivals is
  needed beyond the arrival's own cut-through check.

Outcome.departure_ns is the instant the packet's head leaves on its output: the arrival
for a cut-through packet.
"""

from __future__ import annotations

import heapq
import math
import operator
from collections import deque
from dataclasses import dataclass
from typing import Sequence

ARCHITECTURES = ("OB", "IB", "SB", "WCSB")
SCHEDULERS = ("rr", "islip")
VOQ_SPLITS = ("shared", "static")
OCCUPANCIES = ("waiting", "backlog")


@dataclass(frozen=True)
class Packet:
    """One packet offered to the node.

    arrival_ns: instant its head reaches the input (ns); length: bytes, what the buffers
    count; in_port / out_port: port indices in [0, n_ports); wire_bytes: the bytes whose
    transmission the packet lasts if not ``length`` (e.g. an Ethernet frame carrying a
    ``length``-byte IP packet: the paper counts packets without link headers, an emulated
    link sends frames), None for ``length``.
    """

    arrival_ns: int
    length: int
    in_port: int
    out_port: int
    wire_bytes: int | None = None

    def duration_ns(self, ps_per_byte: int) -> int:
        """How long the packet lasts on a link of ``ps_per_byte`` (tau_ns of its wire bytes)."""
        return tau_ns(self.length if self.wire_bytes is None else self.wire_bytes, ps_per_byte)


@dataclass(frozen=True)
class Outcome:
    """What happened to one packet.

    kind: "cut" (cut-through), "buffered" or "dropped". departure_ns: instant its head
    leaves on its output (ns), None if dropped.
    """

    kind: str
    departure_ns: int | None


@dataclass(frozen=True)
class Stats:
    """Summary of one run.

    drop_rate = dropped / packets; mean_delay_ns / p99_delay_ns: queueing delay
    (departure - arrival, ns) over the forwarded packets, cut-through ones (0) included,
    p99 by nearest rank; max_occupancy_bytes: the largest number of bytes held at one
    instant by one buffer of the architecture (an output's for OB, an input's for IB, the
    node's for SB and WCSB) and max_node_occupancy_bytes by the whole node, both in the
    "waiting" reading (a buffered packet is held from its arrival until its departure).
    Ratios and delays are NaN when there is nothing to average.
    """

    packets: int
    dropped: int
    buffered: int
    cut: int
    drop_rate: float
    mean_delay_ns: float
    p99_delay_ns: float
    max_occupancy_bytes: int
    max_node_occupancy_bytes: int


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


def buffer_bound(arch: str, n_ports: int, buffer_bytes: int) -> int:
    """Bytes one buffer of ``arch`` may hold: B for OB (per output), IB (per input) and
    WCSB (per node), N * B for SB (per node). Raises ValueError for an unknown ``arch``."""
    if arch not in ARCHITECTURES:
        raise ValueError(f"arch={arch!r}: accepted values are {', '.join(ARCHITECTURES)}")
    return n_ports * buffer_bytes if arch == "SB" else buffer_bytes


def _validate(packets: Sequence[Packet], arch: str, n_ports: int, buffer_bytes: int, ps_per_byte: int,
              scheduler: str, voq_split: str, occupancy: str) -> None:
    """Raise ValueError (bad value) or TypeError (not an integer) for bad arguments."""
    for name, value, accepted in (("arch", arch, ARCHITECTURES), ("scheduler", scheduler, SCHEDULERS),
                                  ("voq_split", voq_split, VOQ_SPLITS), ("occupancy", occupancy, OCCUPANCIES)):
        if value not in accepted:
            raise ValueError(f"{name}={value!r}: accepted values are {', '.join(accepted)}")
    if arch == "IB" and occupancy != "waiting":
        raise ValueError(f"occupancy={occupancy!r}: input buffering holds packets until the scheduler "
                         "serves them; accepted value for arch='IB' is 'waiting'")
    if n_ports < 1:
        raise ValueError(f"n_ports={n_ports}: accepted range is n_ports >= 1")
    if buffer_bytes < 0:
        raise ValueError(f"buffer_bytes={buffer_bytes}: accepted range is buffer_bytes >= 0")
    if ps_per_byte < 1:
        raise ValueError(f"ps_per_byte={ps_per_byte}: accepted range is ps_per_byte >= 1")
    tau: list[int] = []
    for i, p in enumerate(packets):
        if not isinstance(p, Packet):
            raise TypeError(f"packets[{i}]={p!r}: expected a Packet")
        arrival = _as_int(f"packets[{i}].arrival_ns", p.arrival_ns)
        length = _as_int(f"packets[{i}].length", p.length)
        for name in ("in_port", "out_port"):
            port = _as_int(f"packets[{i}].{name}", getattr(p, name))
            if not 0 <= port < n_ports:
                raise ValueError(f"packets[{i}].{name}={port}: accepted range is 0 <= {name} < n_ports = {n_ports}")
        if arrival < 0:
            raise ValueError(f"packets[{i}].arrival_ns={arrival}: accepted range is arrival_ns >= 0")
        if p.wire_bytes is not None and _as_int(f"packets[{i}].wire_bytes", p.wire_bytes) < 0:
            raise ValueError(f"packets[{i}].wire_bytes={p.wire_bytes}: accepted range is wire_bytes >= 0 (or None)")
        tau.append(p.duration_ns(ps_per_byte))
        if tau[i] < 1:
            raise ValueError(f"packets[{i}].length={length} (wire_bytes={p.wire_bytes}): accepted range is "
                             f"wire bytes * ps_per_byte >= 1000 (tau >= 1 ns; ps_per_byte = {ps_per_byte})")
    line_free: dict[int, tuple[int, int]] = {}     # input -> (end of its last packet, that packet)
    for i in sorted(range(len(packets)), key=lambda k: packets[k].arrival_ns):
        p = packets[i]
        free, prev = line_free.get(p.in_port, (0, -1))
        if p.arrival_ns < free:
            raise ValueError(f"packets[{i}].arrival_ns={p.arrival_ns}: input {p.in_port} still carries "
                             f"packets[{prev}] until {free} ns; accepted: arrival_ns >= {free} "
                             "(one packet at a time per input)")
        line_free[p.in_port] = (p.arrival_ns + tau[i], i)


def simulate(packets: Sequence[Packet], arch: str, n_ports: int, buffer_bytes: int, ps_per_byte: int, *,
             scheduler: str = "rr", voq_split: str = "shared", occupancy: str = "waiting") -> list[Outcome]:
    """Run the node of architecture ``arch`` over ``packets``; return their outcomes in input order.

    arch: "OB", "IB", "SB" or "WCSB" (module docstring). n_ports >= 1 (the nodal degree
    N); buffer_bytes >= 0 (the paper's B per link; 0 is bufferless); ps_per_byte >= 1
    (8000 at 1 Gb/s). scheduler ("rr" | "islip") and voq_split ("shared" | "static") are
    used by IB only; occupancy ("waiting" | "backlog") by OB, SB and WCSB ("waiting" only
    for IB). Packets need not be sorted.
    Raises ValueError for an out-of-range value (naming the argument, the value and the
    accepted range; also a packet arriving on an input still busy with the previous one)
    and TypeError for a non-integer where an integer is needed.
    """
    n_ports = _as_int("n_ports", n_ports)
    buffer_bytes = _as_int("buffer_bytes", buffer_bytes)
    ps_per_byte = _as_int("ps_per_byte", ps_per_byte)
    _validate(packets, arch, n_ports, buffer_bytes, ps_per_byte, scheduler, voq_split, occupancy)
    if arch == "IB":
        return _simulate_input_buffered(packets, n_ports, buffer_bytes, ps_per_byte, scheduler, voq_split)
    return _simulate_output_fifo(packets, arch, n_ports, buffer_bytes, ps_per_byte, occupancy)


def _simulate_output_fifo(packets: Sequence[Packet], arch: str, n_ports: int, buffer_bytes: int,
                          ps_per_byte: int, occupancy: str) -> list[Outcome]:
    """OB, SB, WCSB: one FIFO per output, inputs never block; the buffer (per output for
    OB, per node otherwise) decides admission. Every departure is known at arrival."""
    bound = buffer_bound(arch, n_ports, buffer_bytes)
    per_output = arch == "OB"
    n = len(packets)
    arr = [int(p.arrival_ns) for p in packets]
    outcomes: list[Outcome] = [Outcome("dropped", None)] * n
    busy_until = [0] * n_ports               # end of the last departure reserved on each output (ns)
    held = [0] * (n_ports if per_output else 1)  # "waiting": bytes in each buffer
    leaving: list[tuple[int, int, int]] = []     # "waiting": (departure, bytes, buffer) of buffered packets
    for i in sorted(range(n), key=arr.__getitem__):
        p = packets[i]
        t, o, length = arr[i], int(p.out_port), int(p.length)
        tau = p.duration_ns(ps_per_byte)
        while leaving and leaving[0][0] <= t:
            _, size, k = heapq.heappop(leaving)
            held[k] -= size
        if busy_until[o] <= t:           # output idle: nothing waits for it either
            outcomes[i] = Outcome("cut", t)
            busy_until[o] = t + tau
            continue
        k = o if per_output else 0
        if occupancy == "waiting":
            room = held[k] + length <= bound
        else:
            scope = (o,) if per_output else range(n_ports)
            backlog_ns = sum(max(0, busy_until[x] - t) for x in scope)
            room = backlog_ns * 1000 + length * ps_per_byte <= bound * ps_per_byte
        if not room:
            continue
        departure = busy_until[o]
        busy_until[o] = departure + tau
        outcomes[i] = Outcome("buffered", departure)
        if occupancy == "waiting":
            held[k] += length
            heapq.heappush(leaving, (departure, length, k))
    return outcomes


def _simulate_input_buffered(packets: Sequence[Packet], n_ports: int, buffer_bytes: int, ps_per_byte: int,
                             scheduler: str, voq_split: str) -> list[Outcome]:
    """IB: VOQs per input, an N x N fabric (one packet per input port and per output at a
    time), the scheduler run at every release instant (module docstring)."""
    n = len(packets)
    arr = [int(p.arrival_ns) for p in packets]
    inp = [int(p.in_port) for p in packets]
    out = [int(p.out_port) for p in packets]
    size = [int(p.length) for p in packets]
    tau = [p.duration_ns(ps_per_byte) for p in packets]
    outcomes: list[Outcome] = [Outcome("dropped", None)] * n
    in_free = [0] * n_ports          # instant each input's fabric port is free (ns)
    out_free = [0] * n_ports         # instant each output is free (ns)
    voq = [[deque() for _ in range(n_ports)] for _ in range(n_ports)]  # voq[input][output]: packet indices
    in_bytes = [0] * n_ports
    voq_bytes = [[0] * n_ports for _ in range(n_ports)]
    grant_ptr = [0] * n_ports        # per output (rr and islip)
    accept_ptr = [0] * n_ports       # per input (islip)
    releases: list[int] = []         # instants at which some port is released
    waiting = 0

    def serve(i: int, o: int, t: int) -> None:
        nonlocal waiting
        k = voq[i][o].popleft()
        waiting -= 1
        in_bytes[i] -= size[k]
        voq_bytes[i][o] -= size[k]
        outcomes[k] = Outcome("buffered", t)
        in_free[i] = out_free[o] = t + tau[k]
        heapq.heappush(releases, t + tau[k])

    def schedule_rr(t: int) -> None:
        for o in range(n_ports):
            if out_free[o] > t:
                continue
            for step in range(n_ports):
                i = (grant_ptr[o] + step) % n_ports
                if voq[i][o] and in_free[i] <= t:
                    serve(i, o, t)
                    grant_ptr[o] = (i + 1) % n_ports
                    break

    def schedule_islip(t: int) -> None:
        free_in = {i for i in range(n_ports) if in_free[i] <= t}
        free_out = {o for o in range(n_ports) if out_free[o] <= t}
        first = True
        while free_in and free_out:
            grants: dict[int, list[int]] = {}
            for o in sorted(free_out):
                for step in range(n_ports):
                    i = (grant_ptr[o] + step) % n_ports
                    if i in free_in and voq[i][o]:
                        grants.setdefault(i, []).append(o)
                        break
            matches = []
            for i, granted in grants.items():
                o = min(granted, key=lambda x: (x - accept_ptr[i]) % n_ports)
                matches.append((i, o))
            if not matches:
                return
            for i, o in matches:
                if first:
                    grant_ptr[o] = (i + 1) % n_ports
                    accept_ptr[i] = (o + 1) % n_ports
                serve(i, o, t)
                free_in.discard(i)
                free_out.discard(o)
            first = False

    schedule = schedule_rr if scheduler == "rr" else schedule_islip
    order = sorted(range(n), key=arr.__getitem__)
    nxt = 0
    while nxt < n or (releases and waiting):
        t = arr[order[nxt]] if nxt < n else releases[0]
        if releases and releases[0] < t:
            t = releases[0]
        while releases and releases[0] <= t:
            heapq.heappop(releases)
        if waiting:
            schedule(t)
        while nxt < n and arr[order[nxt]] == t:
            k = order[nxt]
            nxt += 1
            i, o = inp[k], out[k]
            if in_free[i] <= t and out_free[o] <= t and not voq[i][o]:
                outcomes[k] = Outcome("cut", t)
                in_free[i] = out_free[o] = t + tau[k]
                heapq.heappush(releases, t + tau[k])
                continue
            if voq_split == "shared":
                room = in_bytes[i] + size[k] <= buffer_bytes
            else:
                room = (voq_bytes[i][o] + size[k]) * n_ports <= buffer_bytes
            if room:
                voq[i][o].append(k)
                waiting += 1
                in_bytes[i] += size[k]
                voq_bytes[i][o] += size[k]
    return outcomes


def _percentile_nearest_rank(values: list[float], q: float) -> float:
    """The nearest-rank q-quantile (0 < q <= 1) of ``values``; NaN if empty."""
    if not values:
        return math.nan
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def occupancy_maxima(packets: Sequence[Packet], outcomes: Sequence[Outcome], arch: str,
                     n_ports: int) -> tuple[list[int], int]:
    """Largest bytes held by each buffer of ``arch`` (index: output for OB, input for IB,
    one entry for SB / WCSB) and by the whole node, computed from the outcomes alone in
    the "waiting" reading: a buffered packet is held on [arrival, departure). At equal
    instants departures count before arrivals. Raises ValueError for an unknown ``arch``
    or sequences of different lengths."""
    if arch not in ARCHITECTURES:
        raise ValueError(f"arch={arch!r}: accepted values are {', '.join(ARCHITECTURES)}")
    if len(packets) != len(outcomes):
        raise ValueError(f"outcomes has {len(outcomes)} items; accepted: as many as packets ({len(packets)})")
    events: list[tuple[int, int, int, int]] = []   # (time, 0 leave / 1 join, buffer, +-bytes)
    for p, o in zip(packets, outcomes):
        if o.kind != "buffered":
            continue
        k = p.out_port if arch == "OB" else p.in_port if arch == "IB" else 0
        events.append((p.arrival_ns, 1, k, p.length))
        events.append((o.departure_ns, 0, k, -p.length))
    events.sort()
    level = [0] * (n_ports if arch in ("OB", "IB") else 1)
    peak = [0] * len(level)
    total = peak_total = 0
    for _, _, k, delta in events:
        level[k] += delta
        total += delta
        peak[k] = max(peak[k], level[k])
        peak_total = max(peak_total, total)
    return peak, peak_total


def stats(packets: Sequence[Packet], outcomes: Sequence[Outcome], arch: str, n_ports: int) -> Stats:
    """Summarise ``outcomes`` (from :func:`simulate`) of ``packets`` (same order).

    Raises ValueError if the two sequences differ in length, an outcome kind is unknown
    or ``arch`` is unknown.
    """
    if len(packets) != len(outcomes):
        raise ValueError(f"outcomes has {len(outcomes)} items; accepted: as many as packets ({len(packets)})")
    counts = {"cut": 0, "buffered": 0, "dropped": 0}
    delay: list[float] = []
    for i, (p, o) in enumerate(zip(packets, outcomes)):
        if o.kind not in counts:
            raise ValueError(f"outcomes[{i}].kind={o.kind!r}: accepted values are cut, buffered, dropped")
        counts[o.kind] += 1
        if o.kind != "dropped":
            delay.append(o.departure_ns - p.arrival_ns)
    peak, peak_total = occupancy_maxima(packets, outcomes, arch, n_ports)
    n = len(packets)
    return Stats(
        packets=n,
        dropped=counts["dropped"],
        buffered=counts["buffered"],
        cut=counts["cut"],
        drop_rate=counts["dropped"] / n if n else math.nan,
        mean_delay_ns=sum(delay) / len(delay) if delay else math.nan,
        p99_delay_ns=_percentile_nearest_rank(delay, 0.99),
        max_occupancy_bytes=max(peak),
        max_node_occupancy_bytes=peak_total,
    )
