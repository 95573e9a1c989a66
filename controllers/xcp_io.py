"""The XCP agent's real data plane (``controllers.xcp_agent.DataPlane``): the core nodes'
BPF accumulators read with bpf(2) from the pinned ``optsw_xcp_acc`` map (one lookup of
one node's 8 KB value per node and interval, no process started: ``testbed.bpfsys``),
the edges' ``xcppace`` qdiscs read and given rate changes over netlink in their
namespaces (``testbed.optical.xcppace``), and CLOCK_MONOTONIC.

Input-buffered cores (``CoreConfig.queue == "voq"``, architecture ``ib``): the egress
program sees only HOLD decisions there, so its slots have the bytes and packets but no
backlog sample. Their voq qdiscs' XCP rings (``testbed.optical.voq``, one netlink dump
of the node's outputs per interval) give qmin_ns and drops; :func:`merge_voq_ring`
puts the two rings of an output together slot by slot (docs/xcp-edge.md, "IB nodes").

Netlink: one session (``testbed.optical.qdiscnl.Session``: a socket made inside the
namespace once, the devices' indexes cached) per edge namespace for the life of the
XcpIo, so a read or a rate change costs its requests only, not a thread entering the
namespace and a fresh socket each. A namespace that does not exist when the XcpIo opens
has none: its edges are served a thread and a socket per request, which raise
NsOpsError naming it while it is missing.

Stopping: after :meth:`XcpIo.watch_signals` SIGTERM and SIGINT are blocked and taken
by :meth:`XcpIo.sleep_until` (``sigtimedwait``), which then returns at once and
:meth:`XcpIo.stop_requested` is true: the agent never stops half-way through an
interval's work, and its records are written after the loop.

Units: emulation ns (CLOCK_MONOTONIC), rates emulation bit/s towards the pacers.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controllers.xcp_agent import AccSlotView, AgentConfig, PacerIntervalView, RateChange
from testbed import bpfsys
# imported here, not where used: the guest cannot cache bytecode for the checkout, and
# compiling xcppace inside interval 0's step made the first rate changes 117 ms late
# (docs/xcp-edge.md, "The guest test, as run")
from testbed.optical import layout, qdiscnl, voq, xcppace
from testbed.optical.ibsched import XCP_NONE, XcpSlot
from testbed.optical.qdiscnl import Session

#: the accumulator map's pin below the optswitch pin directory
ACC_MAP = Path("maps") / "optsw_xcp_acc"
#: the pacer counters copied into xcp.json (docs/xcp-edge.md, "(d)")
PACER_COUNTERS = ("late", "late_rates", "max_rate_late_ns", "decided_after_stamp", "unmodelled",
                  "max_enqueue_late_ns", "max_decision_lag_ns", "last_ns")
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class XcpIoError(RuntimeError):
    """The data plane cannot be read: no pin directory, a node without a value."""


def parse_node(raw: bytes, ports: Sequence[int]) -> dict[int, list[AccSlotView]]:
    """{port: its 4 slots} of ``ports`` in one optsw_xcp_acc value (struct
    optsw_xcp_node), parsed by testbed.optical.layout. Raises ValueError for a value of
    the wrong size."""
    if not ports:
        return {}
    slots = layout.parse_xcp_node(raw, max(ports) + 1)
    return {p: slots[p] for p in ports}


@dataclass(frozen=True)
class VoqAccSlot:
    """One slot of a voq core's output (``controllers.xcp_agent.AccSlotView``): the BPF's
    ``interval``, ``bytes``, ``packets``; the voq ring's ``drops`` and ``qmin_ns`` of the
    same interval (the qdisc decides the drops and knows the backlog) and its count of
    decisions, ``decided`` (compared by the agent for lateness)."""

    interval: int | None
    bytes: int
    packets: int
    drops: int
    qmin_ns: int | None
    decided: int


def merge_voq_ring(bpf: Sequence[Any], ring: Sequence[XcpSlot]) -> list[VoqAccSlot]:
    """Slot by slot (index = interval % RING in both rings), the BPF accumulator's slot
    ``bpf[i]`` (layout.AccSlot: interval None when never used) with the voq ring's
    ``ring[i]`` (ibsched.XcpSlot, kernel values): the voq's drops, qmin_ns and count when
    it holds the same interval, else none of them (0, None, 0); a voq slot of an interval
    the BPF's slot does not hold (a late arrival counted where the qdisc decided it)
    keeps its interval with 0 bytes and packets. Raises ValueError for rings of
    different lengths."""
    if len(bpf) != len(ring):
        raise ValueError(f"BPF ring of {len(bpf)} slots, voq ring of {len(ring)}")
    out = []
    for b, v in zip(bpf, ring):
        vi = None if v.interval == XCP_NONE or not v.packets else v.interval
        q = None if v.qmin_ns == XCP_NONE else v.qmin_ns
        if b.interval is not None and b.interval == vi:
            out.append(VoqAccSlot(b.interval, b.bytes, b.packets, v.drops, q, v.packets))
        elif b.interval is None and vi is not None:
            out.append(VoqAccSlot(vi, 0, 0, v.drops, q, v.packets))
        else:
            out.append(VoqAccSlot(b.interval, b.bytes, b.packets, 0, None, 0))
    return out


class SignalClock:
    """CLOCK_MONOTONIC, and the stop signals taken while sleeping (module docstring)."""

    def __init__(self) -> None:
        self._stop = False
        self._watching = False

    def now_ns(self) -> int:
        return time.clock_gettime_ns(time.CLOCK_MONOTONIC)

    def watch_signals(self) -> None:
        """Block SIGTERM and SIGINT in this thread; :meth:`sleep_until` takes them."""
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        self._watching = True

    def stop_requested(self) -> bool:
        """True once a stop signal was taken (also one pending now)."""
        if self._watching and not self._stop and signal.sigtimedwait(STOP_SIGNALS, 0) is not None:
            self._stop = True
        return self._stop

    def sleep_until(self, t_ns: int) -> None:
        """Return when CLOCK_MONOTONIC reaches ``t_ns``, or at once when a stop signal
        arrives (with :meth:`watch_signals`)."""
        while not self._stop:
            left = t_ns - self.now_ns()
            if left <= 0:
                return
            if self._watching:
                if signal.sigtimedwait(STOP_SIGNALS, left / 1e9) is not None:
                    self._stop = True
            else:
                time.sleep(left / 1e9)


class XcpIo(SignalClock):
    """See the module docstring. ``pin_dir`` defaults to the config's. Raises
    XcpIoError when there is no pin directory for a config with core nodes, and
    bpfsys.BpfSyscallError when the map is not pinned there."""

    def __init__(self, cfg: AgentConfig, *, pin_dir: Path | str | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.node_ids = {c.name: c.node_id for c in cfg.cores}
        self.ports = {c.name: sorted(o.port for o in c.outputs) for c in cfg.cores}
        self.pacers = {e.name: (e.pacer_dev, e.netns or None) for e in cfg.edges}
        #: {voq core: (namespace, {port: device})}
        self.voq_cores = {c.name: (c.netns or None, {o.port: o.dev for o in c.outputs})
                          for c in cfg.cores if c.queue == "voq"}
        self.acc: bpfsys.PinnedMap | None = None
        pin = pin_dir if pin_dir is not None else cfg.pin_dir
        if cfg.cores:
            if pin is None:
                raise XcpIoError("no BPF pin directory (config pin_dir) to read optsw_xcp_acc from")
            self.acc = bpfsys.PinnedMap(Path(pin) / ACC_MAP, layout.XCP_NODE_SIZE)
        self._keys = {n: layout.u32_key(i) for n, i in self.node_ids.items()}
        #: {edge namespace: its netlink session} (module docstring)
        self.sessions: dict[str | None, Session] = {}
        try:
            self._open_sessions()
        except BaseException:
            self.close()
            raise

    def _open_sessions(self) -> None:
        """One qdiscnl.Session per edge and voq core namespace that exists (module
        docstring). Raises xcppace.XcpPaceError / voq.VoqError when one cannot be
        opened, OSError without a socket."""
        from testbed.nsops import netns_exists
        wanted = {ns: xcppace.XcpPaceError for _dev, ns in self.pacers.values()}
        for ns, _ports in self.voq_cores.values():
            wanted.setdefault(ns, voq.VoqError)
        for netns, error in wanted.items():
            if netns is None or netns_exists(netns):
                self.sessions[netns] = qdiscnl.Session(netns, error=error)

    def _session(self, netns: str | None) -> dict[str, Any]:
        """The keyword arguments giving xcppace the session of ``netns`` (none without)."""
        s = self.sessions.get(netns)
        return {} if s is None else {"session": s}

    # -- counters --------------------------------------------------------------------------------------
    def read_core(self, node: str) -> dict[int, list[AccSlotView]]:
        """{port: 4 slots} of ``node``'s controlled ports; for a voq core merged with its
        qdiscs' rings (:func:`merge_voq_ring`, one netlink dump of its outputs). Raises
        XcpIoError when the map has no value for it, bpfsys.BpfSyscallError when the
        lookup fails, voq.VoqError when an output has no voq qdisc."""
        assert self.acc is not None
        raw = self.acc.lookup(self._keys[node])
        if raw is None:
            raise XcpIoError(f"optsw_xcp_acc has no value for node {node} (id {self.node_ids[node]})")
        slots = parse_node(raw, self.ports[node])
        if node not in self.voq_cores:
            return slots
        netns, devs = self.voq_cores[node]
        states = voq.read_ports([devs[p] for p in self.ports[node]], netns, **self._session(netns))
        return {p: merge_voq_ring(slots[p], states[devs[p]].xcp) for p in self.ports[node]}

    def read_pacer(self, edge: str) -> Mapping[int, PacerIntervalView]:
        """``edge``'s pacer ring {interval: counters} (testbed.optical.xcppace.read)."""
        dev, netns = self.pacers[edge]
        return xcppace.read(dev, netns, **self._session(netns)).intervals

    def set_rates(self, edge: str, changes: list[RateChange]) -> None:
        """One netlink request with ``changes`` for ``edge``'s pacer
        (testbed.optical.xcppace.set_rates)."""
        dev, netns = self.pacers[edge]
        xcppace.set_rates(dev, netns, [xcppace.RateChange(c.cls, c.rate_bps, c.effective_ns) for c in changes],
                          **self._session(netns))

    def pacer_counters(self, edge: str) -> dict[str, Any]:
        """``edge``'s pacer lateness counters (PACER_COUNTERS; a counter the state does
        not have is left out)."""
        dev, netns = self.pacers[edge]
        state = xcppace.read(dev, netns, **self._session(netns))
        return {k: getattr(state, k) for k in PACER_COUNTERS if hasattr(state, k)}

    def close(self) -> None:
        """Close the map and the netlink sessions (idempotent)."""
        if self.acc is not None:
            self.acc.close()
            self.acc = None
        for s in self.sessions.values():
            s.close()
        self.sessions.clear()
