"""Reference models of the optswitch port architectures: the oracle of the BPF tests.

One :class:`PortModel` is one node (switch or host NIC); each port architecture of the
registry (``testbed/optical/architectures.py``) has its subclass here, which decides
(:meth:`PortModel.decide`) exactly as its BPF header ``ebpf/arch/<name>.h`` does; the
base class keeps the counters and the occupancy as ``ebpf/optswitch.bpf.c`` does.
Packets are offered in the order they reach the node (non-decreasing arrival times in
the paper's model; the kernel processes them in the order it sees them) with
:meth:`PortModel.offer`, which returns the decision and the departure time exactly as
the BPF program computes them (integer nanoseconds, tau = len * ps_per_byte // 1000).

Architectures (Minakhmetov, Ware, Iannone, sections II and IV):

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
* ``fifo`` (E5's edge nodes): as ``electronic``, but a packet that would wait in the
  buffer (from its reception to its departure) longer than ``max_wait_ns`` is dropped.
* ``nic``: a host NIC serialising at the link rate (FIFO).

E5's optical RAM architectures (Alparslan, Arakawa, Murata, II-B; docs/e5.md): ``ob``,
``sb``, ``wcsb``: output free -> cut-through; else the packet waits in its output's FIFO
(leaving when the output is free) if the IP bytes waiting (its output's for ``ob``, the
node's for ``sb`` and ``wcsb``) plus its own fit in B (``ob``, ``wcsb``) or ports x B
(``sb``); else dropped. ``testbed/optical/ramsim.py`` is their independent reference.

Departures are committed when a packet arrives (the kernel must stamp the packet
then): a buffered packet reserves the output from its departure for tau, and a later
arrival finds the output busy until the end of the reservation. docs/optical-switch.md
explains where this differs from the paper's event-driven simulator
(``testbed/optical/eventsim.py`` is an independent one, written from the paper).
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.optical.layout import BOUT_RES, BUFFER, CUT, DROP, MAX_NE, MAX_PORTS, OCC_SLOTS, PortConfig, tau_ns


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


class PortModel:
    """One node: its ports (``ports``: rate, propagation), their counters (``state``) and
    the node's buffer occupancy; a subclass per port architecture decides.

    Raises ValueError for a port count out of 1..MAX_PORTS.
    """

    def __init__(self, ports: list[PortConfig]) -> None:
        if not 1 <= len(ports) <= MAX_PORTS:
            raise ValueError(f"{len(ports)} ports; a node has 1..{MAX_PORTS}")
        self.ports = list(ports)
        self.state = [PortCounters() for _ in self.ports]
        self.max_occ_bytes = 0
        self.occ_overflow = 0
        # Occupancy slots [dep_ns, bytes, port, packets] as the BPF code's (_free_slot
        # says which a buffered packet takes) and the slots used so far.
        self._occ = [[0, 0, 0, 0] for _ in range(OCC_SLOTS)]
        self._occ_used = 0

    def decide(self, a: int, tau: int, port: int) -> tuple[int, int | None]:
        """(CUT or BUFFER, departure of the head in ns) or (DROP, None) for a packet of
        ``tau`` ns arriving at ``a`` ns for output ``port``; may change the
        architecture's own state, not the counters (``offer`` keeps them)."""
        raise NotImplementedError

    def output_free(self, a: int, port: int) -> bool:
        """Whether output ``port`` is free for a packet arriving at ``a`` (an output
        released at a is free)."""
        return self.state[port].out_free_ns <= a

    def offer(self, arrival_ns: int, length: int, port: int) -> Decision:
        """The packet of ``length`` bytes reaching output ``port`` at ``arrival_ns``."""
        a = arrival_ns
        ps = self.state[port]
        tau = tau_ns(length, self.ports[port].ps_per_byte)
        kind, dep = self.decide(a, tau, port)
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

    def waiting(self, a: int, port: int) -> tuple[int, int, int, int]:
        """What waits in the node's buffer at ``a`` (buffered packets whose head has not
        left, dep > a): (frame bytes, frames) of the node, then of output ``port``. Exact
        while at most OCC_SLOTS packets wait at once; beyond, an upper bound (merged slots)."""
        live = [s for s in self._occ[:self._occ_used] if s[0] > a]
        mine = [s for s in live if s[2] == port]
        return (sum(s[1] for s in live), sum(s[3] for s in live), sum(s[1] for s in mine),
                sum(s[3] for s in mine))

    def _free_slot(self, a: int) -> int | None:
        """The slot the BPF's waiting() chooses at ``a``: the next never used while there
        is one, then the lowest whose packet's head has left (dep <= a); None if all
        OCC_SLOTS hold a waiting packet."""
        if self._occ_used < OCC_SLOTS:
            return self._occ_used
        return next((i for i, s in enumerate(self._occ) if s[0] <= a), None)

    def _occupy(self, port: int, a: int, dep: int, length: int) -> None:
        node_bytes, _, port_bytes, _ = self.waiting(a, port)
        total, mine = node_bytes + length, port_bytes + length
        free = self._free_slot(a)
        if free is not None:
            self._occ[free][:] = [dep, length, port, 1]
            self._occ_used = max(self._occ_used, free + 1)
        else:
            slot = self._occ[self.occ_overflow % OCC_SLOTS]  # as the BPF: round-robin by the count
            slot[1] += length
            slot[3] = min(slot[3] + 1, 0xFFFF)
            slot[0] = max(slot[0], dep)
            self.occ_overflow += 1
        self.max_occ_bytes = max(self.max_occ_bytes, total)
        self.state[port].max_occ_bytes = max(self.state[port].max_occ_bytes, mine)


class NicModel(PortModel):
    """``nic``: a host NIC serialising its own packets at the link rate (FIFO)."""

    def decide(self, a: int, tau: int, port: int) -> tuple[int, int | None]:
        return CUT, max(a, self.state[port].out_free_ns)


class ElectronicModel(PortModel):
    """``electronic``: received whole (tau), then FIFO per output; never drops."""

    def decide(self, a: int, tau: int, port: int) -> tuple[int, int | None]:
        return BUFFER, max(a + tau, self.state[port].out_free_ns)


class FifoModel(ElectronicModel):
    """``fifo``: store-and-forward FIFO per output with a delay bound (E5's edge nodes,
    docs/e5.md). A packet of duration ``tau`` arriving at ``a`` is received whole at
    ``a + tau`` and would leave at ``dep = max(a + tau, out_free)`` (as ``electronic``);
    it is dropped if it would wait in the buffer longer than ``max_wait_ns``, that is
    if ``dep - (a + tau) > max_wait_ns`` (a wait of exactly max_wait_ns is admitted).
    A drop changes no state (the output's ``out_free`` stays). So the bytes waiting
    ahead of an admitted packet are at most max_wait_ns x the output's rate.

    The model works in the time unit of the packets offered to it: given emulation
    times (as in the BPF tests), ``max_wait_ns`` must be the emulation value, the paper
    value x D (``Assignment.reference(ports, tdf=D)`` gives it so).

    Raises ValueError for a negative ``max_wait_ns``.
    """

    def __init__(self, ports: list[PortConfig], max_wait_ns: int) -> None:
        if max_wait_ns < 0:
            raise ValueError(f"max_wait_ns {max_wait_ns} < 0")
        super().__init__(ports)
        self.max_wait_ns = max_wait_ns

    def decide(self, a: int, tau: int, port: int) -> tuple[int, int | None]:
        kind, dep = super().decide(a, tau, port)
        assert dep is not None
        return (DROP, None) if dep - (a + tau) > self.max_wait_ns else (kind, dep)


class AllOpticalModel(PortModel):
    """``all-optical``: cut through on a free output, else drop."""

    def decide(self, a: int, tau: int, port: int) -> tuple[int, int | None]:
        return (CUT, a) if self.output_free(a, port) else (DROP, None)


class HybridModel(PortModel):
    """``hybrid`` with ``n_e`` buffer input and output ports (see the module docstring).

    Raises ValueError for n_e out of 0..MAX_NE or a port count out of range.
    """

    def __init__(self, ports: list[PortConfig], n_e: int) -> None:
        if not 0 <= n_e <= MAX_NE:
            raise ValueError(f"n_e {n_e} not in 0..{MAX_NE}")
        super().__init__(ports)
        self.n_e = n_e
        self.bin_free = [0] * n_e
        # per buffer output: reserved emissions [start, end), sorted and disjoint
        self.bout: list[list[tuple[int, int]]] = [[] for _ in range(n_e)]
        self.bout_overflow = 0

    def decide(self, a: int, tau: int, port: int) -> tuple[int, int | None]:
        if self.output_free(a, port):
            return CUT, a
        free_in = [i for i in range(self.n_e) if self.bin_free[i] < a or self.bin_free[i] == 0]
        if not free_in:
            return DROP, None
        t0 = max(a + tau, self.state[port].out_free_ns)
        gaps = [_gap(cal, t0, tau) for cal in self.bout]
        bo = min(range(self.n_e), key=lambda i: gaps[i])  # first minimum
        dep = gaps[bo]
        self.bin_free[free_in[0]] = a + tau
        self._reserve(bo, a, dep, dep + tau)
        return BUFFER, dep

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


#: bytes of an Ethernet header: the optical RAM models count IP datagram bytes (a
#: frame's length less this per frame), the paper's packet size
ETH_HLEN = 14


class OpticalRamModel(PortModel):
    """The optical RAM architectures (Alparslan, Arakawa, Murata, II-B), as
    ``optical_ram_decide`` of ``ebpf/optswitch.bpf.c``: cut-through on a free output;
    else the packet waits in its output's FIFO and leaves when the output is free if the
    IP bytes waiting (:meth:`PortModel.waiting`: its output's if ``per_port``, else the
    node's) plus its own are at most :meth:`bound`; else it is dropped. Needs the packet's
    length, so it decides in :meth:`offer`.

    Raises ValueError for a negative ``buffer_bytes``.
    """

    per_port = True

    def __init__(self, ports: list[PortConfig], buffer_bytes: int) -> None:
        if buffer_bytes < 0:
            raise ValueError(f"buffer_bytes {buffer_bytes} < 0")
        super().__init__(ports)
        self.buffer_bytes = buffer_bytes
        self._length = 0

    def bound(self) -> int:
        """The IP bytes that may wait (per output or in the node)."""
        return self.buffer_bytes

    def offer(self, arrival_ns: int, length: int, port: int) -> Decision:
        self._length = length
        return super().offer(arrival_ns, length, port)

    def decide(self, a: int, tau: int, port: int) -> tuple[int, int | None]:
        if self.output_free(a, port):
            return CUT, a
        node_bytes, node_packets, port_bytes, port_packets = self.waiting(a, port)
        held = port_bytes - ETH_HLEN * port_packets if self.per_port else node_bytes - ETH_HLEN * node_packets
        if held + max(self._length - ETH_HLEN, 0) > self.bound():
            return DROP, None
        return BUFFER, self.state[port].out_free_ns


class OutputRamModel(OpticalRamModel):
    """``ob``: B IP bytes per output."""


class SharedRamModel(OpticalRamModel):
    """``sb``: one memory of (ports x B) IP bytes for the node."""

    per_port = False

    def bound(self) -> int:
        return self.buffer_bytes * len(self.ports)


class WorstCaseSharedRamModel(OpticalRamModel):
    """``wcsb``: one memory of B IP bytes for the node."""

    per_port = False


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
