"""Discrete-event reference of the optswitch port model: the oracle of the BPF tests.

One :class:`SwitchModel` is one node (switch or host NIC). Packets are offered in the
order they reach the node (non-decreasing arrival times in the paper's model; the
kernel processes them in the order it sees them) with :meth:`SwitchModel.offer`, which
returns the decision and the departure time exactly as ``ebpf/optswitch.bpf.c``
computes them (integer nanoseconds, tau = len * ps_per_byte // 1000).

Models (Minakhmetov, Ware, Iannone, sections II and IV):

* ``all-optical`` (n_e = 0): a packet whose output is free at its arrival a leaves at
  once (cut-through) and holds the output for tau; otherwise it is dropped.
* ``hybrid``: output free -> cut-through. Otherwise, if a buffer input is free at a,
  the packet occupies it for tau (OE), then waits in the output's FIFO and leaves when
  it is first, the output is free and a buffer output is free (EO), holding both for
  tau; no buffer input free -> dropped. Buffer volume is unlimited. A buffer input
  whose conversion ends exactly at a is still busy (ties go against the arrival: the
  paper's residual loss of the fully-buffered switch); an output released at a is
  free. A buffer output is reserved only for the tau of each emission: every buffer
  output keeps a calendar of at most BOUT_RES future emissions, and a packet takes the
  earliest gap of length tau on any of them (lowest index on a tie), so packets
  buffered for different outputs never block each other.
* ``electronic``: every packet is received whole (tau), then FIFO per output; never
  dropped; every packet is one OEO conversion.
* ``nic``: a host NIC serialising at the link rate (FIFO).

Departures are committed when a packet arrives (the kernel must stamp the packet
then): a buffered packet reserves the output from its departure for tau, and a later
arrival finds the output busy until the end of the reservation. docs/optical-switch.md
explains where this differs from the paper's event-driven simulator
(``testbed/optical/eventsim.py`` is an independent one, written from the paper).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from testbed.optical.layout import BOUT_RES, BUFFER, CUT, DROP, MAX_NE, MAX_PORTS, OCC_SLOTS, PortConfig, tau_ns

MODEL_NAMES = ("nic", "electronic", "all-optical", "hybrid")


@dataclass
class PortCounters:
    """Per-port counters, as in optsw_port_state."""

    out_free_ns: int = 0
    cut: int = 0
    buffered: int = 0
    dropped: int = 0
    bytes: int = 0
    busy_ns: int = 0
    max_occ_bytes: int = 0
    last_dep_ns: int = 0


@dataclass(frozen=True)
class Decision:
    """What the port model did with one packet: ``kind`` (CUT / BUFFER / DROP), the
    departure time of its head ``dep_ns`` (None when dropped) and ``tau_ns``."""

    kind: int
    dep_ns: int | None
    tau_ns: int

    def stamp(self, port: PortConfig) -> int | None:
        """The skb->tstamp the BPF program writes: arrival time at the next node."""
        if self.dep_ns is None:
            return None
        return self.dep_ns + port.prop_ns + (self.tau_ns if port.peer_host else 0)


@dataclass
class SwitchModel:
    """One node of the model; see the module docstring.

    ``model`` in MODEL_NAMES; ``n_e`` buffer input/output ports (hybrid only);
    ``ports`` the per-port configuration (rate, propagation).
    Raises ValueError for a model name, n_e or port count out of range.
    """

    model: str
    n_e: int
    ports: list[PortConfig]
    state: list[PortCounters] = field(init=False)

    def __post_init__(self) -> None:
        if self.model not in MODEL_NAMES:
            raise ValueError(f"model {self.model!r} not in {MODEL_NAMES}")
        if not 0 <= self.n_e <= MAX_NE:
            raise ValueError(f"n_e {self.n_e} not in 0..{MAX_NE}")
        if not 1 <= len(self.ports) <= MAX_PORTS:
            raise ValueError(f"{len(self.ports)} ports; a node has 1..{MAX_PORTS}")
        self.state = [PortCounters() for _ in self.ports]
        self.bin_free = [0] * self.n_e
        # per buffer output: reserved emissions [start, end), sorted and disjoint
        self.bout: list[list[tuple[int, int]]] = [[] for _ in range(self.n_e)]
        self.max_occ_bytes = 0
        self.occ_overflow = 0
        self.bout_overflow = 0
        # Occupancy slots (dep_ns, bytes, port), used round-robin like the BPF code.
        self._occ = [[0, 0, 0] for _ in range(OCC_SLOTS)]
        self._occ_next = 0

    def offer(self, arrival_ns: int, length: int, port: int) -> Decision:
        """The packet of ``length`` bytes reaching output ``port`` at ``arrival_ns``."""
        a = arrival_ns
        pc, ps = self.ports[port], self.state[port]
        tau = tau_ns(length, pc.ps_per_byte)
        dep: int | None = None
        if self.model == "nic":
            dep, kind = max(a, ps.out_free_ns), CUT
        elif self.model == "electronic":
            dep, kind = max(a + tau, ps.out_free_ns), BUFFER
        elif ps.out_free_ns <= a:
            dep, kind = a, CUT
        else:
            kind = DROP
            if self.model == "hybrid" and self.n_e > 0:
                free_in = [i for i in range(self.n_e) if self.bin_free[i] < a or self.bin_free[i] == 0]
                if free_in:
                    t0 = max(a + tau, ps.out_free_ns)
                    gaps = [_gap(cal, t0, tau) for cal in self.bout]
                    bo = min(range(self.n_e), key=lambda i: gaps[i])  # first minimum
                    dep = gaps[bo]
                    self.bin_free[free_in[0]] = a + tau
                    self._reserve(bo, a, dep, dep + tau)
                    kind = BUFFER
        if kind == DROP:
            ps.dropped += 1
            return Decision(DROP, None, tau)
        assert dep is not None
        ps.out_free_ns = dep + tau
        ps.last_dep_ns = dep
        ps.bytes += length
        ps.busy_ns += tau
        if kind == CUT:
            ps.cut += 1
        else:
            ps.buffered += 1
            self._occupy(port, a, dep, length)
        return Decision(kind, dep, tau)

    def _reserve(self, bo: int, a: int, start: int, end: int) -> None:
        """Reserve [start, end) on buffer output ``bo`` (inside a gap found by _gap):
        emissions that ended by the arrival ``a`` are forgotten; a full calendar gives
        up its smallest gap other than the new one's (counted in bout_overflow)."""
        # (reservations are sorted and disjoint, so those that ended form a prefix)
        cal = _drop_ended_prefix(self.bout[bo], a)
        pos = sum(1 for r in cal if r[0] < start)
        if len(cal) >= BOUT_RES:
            gaps = [(cal[j + 1][0] - cal[j][1], j) for j in range(len(cal) - 1) if j + 1 != pos]
            _, best = min(gaps)  # smallest gap, lowest index on a tie
            cal = cal[:best] + [(cal[best][0], cal[best + 1][1])] + cal[best + 2:]
            if pos > best + 1:
                pos -= 1
            self.bout_overflow += 1
        cal.insert(pos, (start, end))
        self.bout[bo] = cal

    def _occupy(self, port: int, a: int, dep: int, length: int) -> None:
        total = length + sum(s[1] for s in self._occ if s[0] > a)
        mine = length + sum(s[1] for s in self._occ if s[0] > a and s[2] == port)
        slot = self._occ[self._occ_next % OCC_SLOTS]
        if slot[0] > a:
            slot[1] += length
            slot[0] = max(slot[0], dep)
            self.occ_overflow += 1
        else:
            slot[:] = [dep, length, port]
        self._occ_next += 1
        self.max_occ_bytes = max(self.max_occ_bytes, total)
        self.state[port].max_occ_bytes = max(self.state[port].max_occ_bytes, mine)


def _gap(cal: list[tuple[int, int]], t: int, tau: int) -> int:
    """Earliest time >= t at which a buffer output with reservations ``cal`` (sorted,
    disjoint [start, end) in ns) is free for ``tau`` ns."""
    for start, end in cal:
        if end <= t:
            continue
        if start >= t + tau:
            break
        t = end
    return t


def _drop_ended_prefix(cal: list[tuple[int, int]], a: int) -> list[tuple[int, int]]:
    """``cal`` without its leading reservations that ended by ``a`` (a new list)."""
    i = 0
    while i < len(cal) and cal[i][1] <= a:
        i += 1
    return cal[i:]


def erlang_b1(rho: float) -> float:
    """Blocking probability of an Erlang loss system with one server at load ``rho``."""
    return rho / (1.0 + rho)
