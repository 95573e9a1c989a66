"""Reference model of the OBS core node (architecture ``obs-core``, ebpf/arch/obs_core.h).

Written from the words of the paper and of the E2 spec, not from the BPF code:

* Casoni, Raffaelli, "TCP Performance in Hybrid Multigranular OBS Networks", section III
  ("core node architecture"): core nodes "deal with optical data bursts and the related
  control packets"; "the control packet carries relevant forwarding informations, as the
  next hop, the burst length and the offset time"; "the offset time allows the core
  router to be buffer-less". Section II: each burst's control packet "precedes the data
  burst by a basic offset time".
* Spec E2 (``e2-obs-multigranular.md``, "Core node"): "Bufferless. Burst loss: each burst
  is lost with probability Pl ..., all of its packets together (correlated loss)".
* The E2 contract fixes the random stream: burst ``i`` is lost iff
  ``splitmix64(seed ^ (i * 0x9E3779B97F4A7C15)) % 1e9 < pl_ppb`` (:func:`burst_lost`).

The model is event driven on the frames arriving at the core, each ``(time ns, input
port, frame)``: a :class:`Control` announces a burst of ``packets`` packets on its input
port (a burst's packets arrive on the port its control packet came in on, after it, one
burst after the other: the edge's optical channel carries one burst at a time); a
:class:`Data` packet belongs to the oldest burst of its input port that still has
packets to come, and is lost with it. Bufferless: a packet that is not lost leaves at
its arrival or, if its output is still sending an earlier packet, when that one ends
(``max(a, out_free)``; the BPF program does the same and counts it as a conflict). A
data packet on a port with no burst announced (ACKs coming back, traffic before any
control packet) passes the same way and is counted ``unannounced``.

The BPF realisation keeps at most ``ring_depth`` announced bursts per input port
(layout.OBS_RING); an announcement beyond that is refused (``ring_overflow``) and its
packets then count against the bursts after it: the model does the same so that the two
can be compared on traces that overflow.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence, Union

from testbed.errors import DefinitionError
from testbed.optical import layout
from testbed.optical.layout import CUT, DROP, PortConfig

#: 2^64 / golden ratio, the increment of splitmix64 and the burst id multiplier
GOLDEN = 0x9E3779B97F4A7C15
_M64 = (1 << 64) - 1
#: pl_ppb is a probability in parts per 1e9
PPB = 1_000_000_000


def splitmix64(z: int) -> int:
    """One splitmix64 output for state ``z`` (all arithmetic mod 2^64)."""
    z = (z + GOLDEN) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def burst_lost(seed: int, burst_id: int, pl_ppb: int) -> bool:
    """Whether burst ``burst_id`` is lost at a core of ``seed`` and loss probability
    ``pl_ppb`` / 1e9 (the draw of the E2 contract). Raises DefinitionError for a seed or
    burst id outside 0..2^64-1 or pl_ppb outside 0..1e9."""
    for key, v, hi in (("seed", seed, _M64), ("burst_id", burst_id, _M64), ("pl_ppb", pl_ppb, PPB)):
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= hi:
            raise DefinitionError(key, v, f"an integer 0..{hi}")
    return splitmix64(seed ^ ((burst_id * GOLDEN) & _M64)) % PPB < pl_ppb


@dataclass(frozen=True)
class Control:
    """A burst control packet: the burst's id (per edge qdisc, from 1) and length."""

    burst_id: int
    packets: int
    bytes: int = 0


@dataclass(frozen=True)
class Data:
    """A data packet: wire length in bytes and the output port the route gives it."""

    length: int
    out_port: int


Frame = Union[Control, Data]


@dataclass(frozen=True)
class Outcome:
    """What the core did with a data packet: ``kind`` CUT (passed) or DROP (its burst was
    lost), ``dep_ns`` when its head leaves (None if dropped), ``burst_id`` of the burst it
    belonged to (None: unannounced)."""

    kind: int
    dep_ns: int | None
    burst_id: int | None


@dataclass
class _Burst:
    burst_id: int
    left: int
    lost: bool


#: the counters of the model, named as in the BPF state (layout.OBS_FIELDS)
COUNTERS = layout.OBS_FIELDS


@dataclass
class CoreReference:
    """The core node: ``ports`` (serialisation of each output), loss probability
    ``pl_ppb`` / 1e9, ``seed`` of the draw, at most ``ring_depth`` announced bursts per
    input port. ``counters`` holds :data:`COUNTERS` (``ctrl_elsewhere`` and
    ``ctrl_invalid`` stay 0: the model sees only valid control packets at a core)."""

    ports: Sequence[PortConfig]
    pl_ppb: int
    seed: int
    ring_depth: int = layout.OBS_RING
    counters: dict[str, int] = field(init=False)
    out_free: list[int] = field(init=False)
    announced: dict[int, deque[_Burst]] = field(init=False)

    def __post_init__(self) -> None:
        burst_lost(self.seed, 0, self.pl_ppb)  # checks seed and pl_ppb
        if not 1 <= self.ring_depth:
            raise DefinitionError("ring_depth", self.ring_depth, "an integer >= 1")
        self.counters = {k: 0 for k in COUNTERS}
        self.out_free = [0] * len(self.ports)
        self.announced = {}

    def control(self, in_port: int, c: Control) -> None:
        """A control packet ``c`` arrives on ``in_port``: its burst is announced."""
        lost = burst_lost(self.seed, c.burst_id, self.pl_ppb)
        self.counters["announced"] += 1
        self.counters["bursts_lost"] += lost
        if c.packets == 0:
            self.counters["empty_bursts"] += 1
            return
        queue = self.announced.setdefault(in_port, deque())
        if len(queue) >= self.ring_depth:
            self.counters["ring_overflow"] += 1
            return
        queue.append(_Burst(c.burst_id, c.packets, lost))

    def data(self, t: int, in_port: int, d: Data) -> Outcome:
        """A data packet ``d`` arrives on ``in_port`` at ``t`` ns. Raises DefinitionError
        for an output port the core does not have."""
        if not 0 <= d.out_port < len(self.ports):
            raise DefinitionError("out_port", d.out_port, f"a port 0..{len(self.ports) - 1}")
        queue = self.announced.get(in_port)
        burst = queue[0] if queue else None
        if burst is not None:
            burst.left -= 1
            if burst.left == 0:
                queue.popleft()
            if burst.lost:
                self.counters["packets_lost"] += 1
                return Outcome(DROP, None, burst.burst_id)
        dep = max(t, self.out_free[d.out_port])
        if burst is None:
            self.counters["unannounced"] += 1
        else:
            self.counters["packets_passed"] += 1
            self.counters["conflicts"] += t < self.out_free[d.out_port]
        self.out_free[d.out_port] = dep + layout.tau_ns(d.length, self.ports[d.out_port].ps_per_byte)
        return Outcome(CUT, dep, None if burst is None else burst.burst_id)

    def run(self, arrivals: Iterable[tuple[int, int, Frame]]) -> list[Outcome | None]:
        """Every arrival ``(t ns, input port, frame)`` in time order (ties in the given
        order): one entry per arrival, None for a control packet. Raises DefinitionError
        for a frame of another type."""
        out: list[Outcome | None] = []
        for t, port, frame in sorted(arrivals, key=lambda a: a[0]):
            if isinstance(frame, Control):
                self.control(port, frame)
                out.append(None)
            elif isinstance(frame, Data):
                out.append(self.data(t, port, frame))
            else:
                raise DefinitionError("frame", frame, "a Control or a Data")
        return out


def merge(per_port: Mapping[int, Sequence[tuple[int, Frame]]]) -> list[tuple[int, int, Frame]]:
    """The arrivals of every input port ``{port: [(t ns, frame), ...]}`` as one sequence
    ``(t, port, frame)`` in time order (ties: lower port first, then each port's order)."""
    rows = [(t, port, i, f) for port, seq in per_port.items() for i, (t, f) in enumerate(seq)]
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    return [(t, port, f) for t, port, _, f in rows]
