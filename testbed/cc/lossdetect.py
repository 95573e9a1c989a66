"""How TCP detected its losses: the kernel's counters of one host, before and after.

E2 (the OBS paper, ``../shared/papers/obs-multigranular-tcp.txt``, Figs. 5-12 and the
text around them) asks whether each loss was detected by an RTO expiry or by triple
duplicate ACKs (fast retransmit / fast recovery). Linux counts both per network
namespace, so a host's namespace is read before and after a run (``snapshot``), the
two are subtracted (``delta``) and the difference is classified (``classify``).

Counters are read from ``/proc/thread-self/net/netstat`` (``TcpExt:`` lines) and
``/proc/thread-self/net/snmp`` (``Tcp:`` lines) by a thread that entered the host's
namespace (``/proc/net`` would be the namespace of the process's *main* thread). Names
are ``<section><counter>`` as ``nstat`` prints them: ``TcpExtTCPTimeouts``,
``TcpRetransSegs``.

Meaning in Linux 6.1 (net/ipv4/tcp_timer.c, tcp_input.c, tcp_output.c, tcp_minisocks.c):

``TcpExtTCPTimeouts``
    Each expiry of a socket's retransmission timer that retransmits
    (``tcp_retransmit_timer()``: every expiry with data outstanding, the backed-off
    repeats of one loss included; not the zero-window probe path), and each SYN-ACK
    timeout of a request socket (``tcp_syn_ack_timeout()``). A SYN in SYN_SENT goes
    through ``tcp_retransmit_timer()`` too.
``TcpExtTCPSynRetrans``
    SYN and SYN-ACK retransmissions (each one follows one of the timeouts above), so
    ``TCPTimeouts - TCPSynRetrans`` are the expiries of established connections.
``TcpExtTCPSackRecovery`` / ``TcpExtTCPRenoRecovery``
    Entries into fast recovery (``tcp_enter_recovery()``), with SACK / without: a loss
    detected by duplicate ACKs or SACK blocks (the dupACK threshold tcp_reordering, 3;
    RACK when tcp_recovery has it on -- the paper profiles turn RACK off).
``TcpExtTCPSackRecoveryFail`` / ``TCPRenoRecoveryFail``
    The first RTO expiry (no earlier unanswered one) that happened *during* fast
    recovery: a fast-detected loss that still needed the timer.
``TcpExtTCPSackFailures`` / ``TCPRenoFailures`` / ``TCPLossFailures``
    The first RTO expiry in the Disorder state (or with SACKed data) / in Loss.
    A first expiry in the Open state without SACKed data (a whole window lost: no
    dupACK came) has no counter of its own.
``TcpExtTCPLossUndo`` / ``TcpExtTCPSpuriousRTOs``
    An RTO recovery undone because it was spurious: detected by timestamps or DSACK /
    by F-RTO (tcp_frto, off in the paper profiles).
``TcpExtTCPFullUndo`` / ``TCPPartialUndo`` / ``TCPDSACKUndo``
    A fast recovery undone (spurious fast retransmit): fully, partially, by DSACK.
``TcpExtTCPLossProbes`` / ``TCPLossProbeRecovery``
    Tail loss probes sent / losses repaired by one (tcp_early_retrans, off in the paper
    profiles).
``TcpExtTCPFastRetrans`` / ``TCPSlowStartRetrans``
    Segments retransmitted from the retransmission queue outside / inside the Loss
    state (``tcp_xmit_retransmit_queue()``); the one segment the timer itself
    retransmits at each expiry is in neither.
``TcpRetransSegs`` (snmp)
    Every retransmitted segment (``__tcp_retransmit_skb()``: fast, slow start, timer,
    TLP, SYN / SYN-ACK).
``TcpExtTCPSACKReorder`` / ``TCPRenoReorder`` / ``TCPTSReorder``
    Reordering detected (``tcp_check_sack_reordering()``, ``tcp_update_reordering()``:
    by SACK blocks, by dupACKs without SACK, by timestamps): a segment was reported
    received out of order by more than the reordering threshold's distance, which is
    then raised. With per-packet multipath routing this is how a fast retransmit of a
    segment that was only late (not lost) shows up.
``TcpExtTCPSpuriousRtxHostQueues``
    Retransmissions the kernel did not send because the original copy was still
    queued below TCP (``skb_still_in_host_queue()``: the original's clone still
    belongs to the socket). In an emulated network every hop keeps that ownership
    unless a qdisc orphans the packet fully, so an RTO that fires while the original is
    still in a switch buffer skips its retransmission, which the papers' TCP would send.
``TcpExtTCPDSACKRecv`` / ``TCPDSACKOfoRecv`` / ``TCPDSACKRecvSegs``
    DSACK blocks received (below / above the cumulative ACK) and the segments they
    cover: retransmissions the receiver already had (spurious ones).
``TcpExtTCPMemoryPressures``
    Entries of the kernel's TCP memory accounting into pressure (``tcp_mem[1]``, one
    limit for the whole kernel shared by every emulated host: testbed.tcpmem), counted
    in the namespace of the socket that crossed it.
``TcpExtTCPOFODrop`` / ``TCPRcvQDrop``
    Segments a receiver dropped for want of socket memory (out of order / in order):
    losses the emulation made, not the network.
``TcpExtListenDrops``
    Connection requests a listener dropped (accept queue full, or no memory).

Classification (``LossDetection``):

* ``rto`` = ``TCPTimeouts - TCPSynRetrans``: losses detected by the timer, one per
  expiry (an expiry means the oldest outstanding segment, or its retransmission, was
  not acknowledged in time; the paper's RTO-detected losses);
* ``fast`` = ``TCPSackRecovery + TCPRenoRecovery``: losses detected by duplicate ACKs;
* ``rto_in_recovery`` = ``TCPSackRecoveryFail + TCPRenoRecoveryFail``: how many of the
  fast detections were followed by an RTO before the recovery ended (they are in both
  counts);
* ``spurious_rto`` = ``TCPLossUndo + TCPSpuriousRTOs``, ``spurious_fast`` =
  ``TCPFullUndo + TCPPartialUndo + TCPDSACKUndo``;
* ``reordering`` = ``TCPSACKReorder + TCPRenoReorder + TCPTSReorder``;
* ``rtx_suppressed`` = ``TCPSpuriousRtxHostQueues``;
* ``memory_pressures`` = ``TCPMemoryPressures``, ``memory_drops`` = ``TCPOFODrop +
  TCPRcvQDrop``, ``listen_drops`` = ``ListenDrops``: artefacts of the emulating kernel
  (:data:`MEMORY_METRICS`), expected 0;
* ``retrans_segs`` = ``TcpRetransSegs - TCPSynRetrans`` (data segments),
  ``spurious_retrans_segs`` = ``TCPDSACKRecvSegs`` (a lower bound: a DSACK carried by a
  lost ACK is not counted).

Counters are per network namespace, so a host's numbers include every socket of the
host (the control connection of an iperf3 too); sum ``classify`` over the sources'
namespaces for a run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from testbed.errors import TestbedError
from testbed.metrics import Metric

#: The files a host's counters come from (its namespace, read by a thread inside it).
NETSTAT = Path("/proc/thread-self/net/netstat")
SNMP = Path("/proc/thread-self/net/snmp")
#: Sections kept (the others are IP / UDP / ICMP / MPTCP counters).
SECTIONS = ("TcpExt", "Tcp")
#: Counters classify() needs (nstat names); a kernel without one of them is refused.
REQUIRED = ("TcpExtTCPTimeouts", "TcpExtTCPSynRetrans", "TcpExtTCPSackRecovery", "TcpExtTCPRenoRecovery",
            "TcpExtTCPSackRecoveryFail", "TcpExtTCPRenoRecoveryFail", "TcpExtTCPLossUndo",
            "TcpExtTCPSpuriousRTOs", "TcpExtTCPFullUndo", "TcpExtTCPPartialUndo", "TcpExtTCPDSACKUndo",
            "TcpExtTCPLossProbes", "TcpExtTCPLossProbeRecovery", "TcpExtTCPFastRetrans",
            "TcpExtTCPSlowStartRetrans", "TcpExtTCPDSACKRecv", "TcpExtTCPDSACKRecvSegs", "TcpRetransSegs",
            "TcpExtTCPSACKReorder", "TcpExtTCPRenoReorder", "TcpExtTCPTSReorder",
            "TcpExtTCPSpuriousRtxHostQueues", "TcpExtTCPMemoryPressures", "TcpExtTCPOFODrop",
            "TcpExtTCPRcvQDrop", "TcpExtListenDrops")


class LossDetectError(TestbedError):
    """The kernel's counters could not be read or parsed (message names file and line)."""


def parse(text: str, source: str = "/proc/net text") -> dict[str, int]:
    """Counters of a ``/proc/net/netstat`` or ``/proc/net/snmp`` text, as nstat names them.

    Each section is a header line ``Name: A B C`` followed by a value line
    ``Name: 1 2 3``; only ``SECTIONS`` are kept. Raises LossDetectError naming
    ``source`` when a header has no value line of the same length or a value is not an
    integer (``Tcp: MaxConn`` is -1: signed values are accepted)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    out: dict[str, int] = {}
    i = 0
    while i < len(lines):
        name, _, rest = lines[i].partition(":")
        if i + 1 >= len(lines) or not lines[i + 1].startswith(name + ":"):
            raise LossDetectError(f"{source}: section {name!r} (line {i + 1}) has no value line")
        keys = rest.split()
        values = lines[i + 1].partition(":")[2].split()
        if len(keys) != len(values):
            raise LossDetectError(f"{source}: section {name!r} has {len(keys)} names and {len(values)} values")
        if name in SECTIONS:
            for k, v in zip(keys, values):
                try:
                    out[name + k] = int(v)
                except ValueError:
                    raise LossDetectError(f"{source}: {name}{k} = {v!r} is not an integer") from None
        i += 2
    return out


def read(netns: str | None = None) -> dict[str, int]:
    """The TCP counters of network namespace ``netns`` (a name under /run/netns; None =
    the caller's). Raises LossDetectError when a file cannot be read or parsed and
    testbed.nsops.NsOpsError when the namespace cannot be entered."""
    from testbed import nsops

    def body() -> dict[str, int]:
        counters: dict[str, int] = {}
        for path in (NETSTAT, SNMP):
            try:
                text = path.read_text()
            except OSError as exc:
                raise LossDetectError(f"{path} in {netns or 'the own namespace'}: {exc.strerror}") from None
            counters.update(parse(text, f"{path} ({netns or 'own namespace'})"))
        return counters

    return nsops.call_in(netns, body)


def snapshot(netns_names: Iterable[str]) -> dict[str, dict[str, int]]:
    """``read()`` of each namespace: {netns: counters}."""
    return {ns: read(ns) for ns in netns_names}


def delta(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """``after - before`` for every counter in ``after`` (a counter new in ``after``
    counts from 0). Raises LossDetectError when a counter went down (a wrap or two
    different namespaces: the kernel's counters only grow; ``TcpCurrEstab`` and
    ``TcpMaxConn``, which are gauges, are left out)."""
    out: dict[str, int] = {}
    for k, v in after.items():
        if k in ("TcpCurrEstab", "TcpMaxConn", "TcpRtoAlgorithm", "TcpRtoMin", "TcpRtoMax"):
            continue
        d = v - before.get(k, 0)
        if d < 0:
            raise LossDetectError(f"counter {k} went down ({before.get(k)} -> {v}): not the same namespace?")
        out[k] = d
    return out


@dataclass(frozen=True)
class LossDetection:
    """Loss detections of one host (or a sum of hosts) over an interval; see the module
    docstring for the counters behind each field. Events and segments are counts."""

    rto: int                    #: losses detected by an RTO expiry (established connections)
    fast: int                   #: losses detected by duplicate ACKs / SACK (fast recovery entries)
    rto_in_recovery: int        #: RTO expiries during a fast recovery (also in ``rto``)
    spurious_rto: int           #: RTO recoveries undone (timestamps / DSACK / F-RTO)
    spurious_fast: int          #: fast recoveries undone
    loss_probes: int            #: tail loss probes sent
    retrans_segs: int           #: retransmitted data segments (SYN / SYN-ACK excluded)
    fast_retrans_segs: int      #: of those, sent from the queue outside the Loss state
    slow_start_retrans_segs: int  #: of those, sent from the queue in the Loss state (after an RTO)
    spurious_retrans_segs: int  #: segments a DSACK reported as received twice
    syn_timeouts: int           #: SYN / SYN-ACK retransmissions (timer expiries of handshakes)
    reordering: int = 0         #: reorderings detected (SACK, dupACKs or timestamps)
    rtx_suppressed: int = 0     #: retransmissions skipped: the original still queued below TCP
    memory_pressures: int = 0   #: entries into the kernel's TCP memory pressure
    memory_drops: int = 0       #: segments receivers dropped for want of socket memory
    listen_drops: int = 0       #: connection requests listeners dropped

    @classmethod
    def zero(cls) -> LossDetection:
        """No event of any kind (the start of a sum)."""
        return cls(**{k: 0 for k in cls.__dataclass_fields__})

    def __add__(self, other: LossDetection) -> LossDetection:
        return LossDetection(**{k: v + getattr(other, k) for k, v in asdict(self).items()})

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def summary_columns(self) -> dict[str, int]:
        """The summary.csv columns of E2 and E5 (declared by :data:`SUMMARY_METRICS`):
        loss_events_rto, loss_events_fast, retrans_segs, spurious_retrans_segs."""
        return {"loss_events_rto": self.rto, "loss_events_fast": self.fast,
                "retrans_segs": self.retrans_segs, "spurious_retrans_segs": self.spurious_retrans_segs}


#: the declarations of :meth:`LossDetection.summary_columns` (families list them in
#: their metrics)
SUMMARY_METRICS = (
    Metric("loss_events_rto", "count", "losses the senders detected by RTO expiry (kernel counters)"),
    Metric("loss_events_fast", "count", "losses the senders detected by duplicate ACKs / SACK (fast "
           "retransmit; kernel counters)"),
    Metric("retrans_segs", "count", "retransmitted segments (kernel counters)"),
    Metric("spurious_retrans_segs", "count", "retransmissions a DSACK showed spurious (lower bound)"),
)

#: The emulating kernel's artefacts in a point's summary (each expected 0; E1 and E5
#: list them in their metrics, E4 declares its own with an earlier date): :func:`memory_columns`
MEMORY_METRICS = (
    Metric("memory_pressures", "count", "entries into the kernel's TCP memory pressure (tcp_mem, one limit for "
           "every emulated host; an emulation artefact, expected 0)", since="2026-11-28"),
    Metric("memory_drops", "count", "segments receivers dropped for want of socket memory (TCPOFODrop + "
           "TCPRcvQDrop; an emulation artefact, expected 0)", since="2026-11-28"),
    Metric("listen_drops", "count", "connection requests listeners dropped (ListenDrops; expected 0)",
           since="2026-11-28"),
)


def memory_columns(tcp: LossDetection | None) -> dict[str, float]:
    """The :data:`MEMORY_METRICS` columns of a point (None: not measured, NaN)."""
    keys = [m.name for m in MEMORY_METRICS]
    if tcp is None:
        return {k: float("nan") for k in keys}
    return {k: getattr(tcp, k) for k in keys}


def classify(d: Mapping[str, int]) -> LossDetection:
    """Classify a counter difference (``delta()``) into loss detections.

    Raises LossDetectError naming the missing counters when ``d`` lacks one of
    ``REQUIRED`` (a kernel older than 5.10 has no TCPDSACKRecvSegs)."""
    missing = [k for k in REQUIRED if k not in d]
    if missing:
        raise LossDetectError("counters missing (kernel too old or not a delta of /proc/net/netstat + snmp): "
                              + ", ".join(missing))

    def g(*names: str) -> int:
        return sum(d["TcpExt" + n] for n in names)

    syn = g("TCPSynRetrans")
    return LossDetection(
        rto=max(g("TCPTimeouts") - syn, 0),
        fast=g("TCPSackRecovery", "TCPRenoRecovery"),
        rto_in_recovery=g("TCPSackRecoveryFail", "TCPRenoRecoveryFail"),
        spurious_rto=g("TCPLossUndo", "TCPSpuriousRTOs"),
        spurious_fast=g("TCPFullUndo", "TCPPartialUndo", "TCPDSACKUndo"),
        loss_probes=g("TCPLossProbes"),
        retrans_segs=max(d["TcpRetransSegs"] - syn, 0),
        fast_retrans_segs=g("TCPFastRetrans"),
        slow_start_retrans_segs=g("TCPSlowStartRetrans"),
        spurious_retrans_segs=g("TCPDSACKRecvSegs"),
        syn_timeouts=syn,
        reordering=g("TCPSACKReorder", "TCPRenoReorder", "TCPTSReorder"),
        rtx_suppressed=g("TCPSpuriousRtxHostQueues"),
        memory_pressures=g("TCPMemoryPressures"),
        memory_drops=g("TCPOFODrop", "TCPRcvQDrop"),
        listen_drops=g("ListenDrops"),
    )


def between(before: Mapping[str, Mapping[str, int]], after: Mapping[str, Mapping[str, int]]) -> LossDetection:
    """Sum of ``classify(delta(...))`` over the namespaces of two ``snapshot()`` results.

    Raises LossDetectError when the two snapshots do not cover the same namespaces."""
    if set(before) != set(after):
        raise LossDetectError(f"snapshots of different namespaces: {sorted(set(before) ^ set(after))}")
    total = LossDetection.zero()
    for ns in sorted(before):
        total = total + classify(delta(before[ns], after[ns]))
    return total


def per_namespace(before: Mapping[str, Mapping[str, int]],
                  after: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, Any]]:
    """{netns: classify(delta).as_dict()} for a run's record."""
    return {ns: classify(delta(before[ns], after[ns])).as_dict() for ns in sorted(before) if ns in after}
