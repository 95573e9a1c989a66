"""The ``xcppace`` qdisc (``kernel/sch_xcppace.c``: E5's XCP edge pacer, a leaky bucket
per macroflow class at timed rates, serialised on the edge link, decided on the intended
timeline; design in docs/xcp-edge.md, "(a) The edge pacer") from Python: its options,
timed rate changes, counters, the module that provides it and its fabric mechanism.

* :class:`XcpPaceOptions`: the options (a :class:`~testbed.optical.xcppacer.PacerConfig`,
  checked against the module's bounds, that packs into ``TCA_OPTIONS``); the same object
  drives the algorithm's mirror :func:`testbed.optical.xcppacer.run`.
* :func:`install` / :func:`remove` put the qdisc on a device and take it off;
  :func:`set_rates` sends timed :class:`RateChange` s in one netlink request;
  :func:`read` returns an :class:`XcpPaceState` (options, counters, the per-interval
  ring, per-class counters) from one qdisc dump and one class dump (the qdisc's counters
  are its xstats, each class's those of class ``cls + 1``: all of them would not fit the
  one-page netlink message of a qdisc dump). All through rtnetlink in-process
  (:mod:`testbed.optical.qdiscnl`: ``tc`` has no parser for this qdisc).
* :data:`QDISC_MODULE` (``kernel/sch_xcppace.ko``), loaded into the run's ledger.
* :data:`XCPPACE_MECHANISM` (:class:`XcpPaceQdisc`): the pacer on the node's ports
  towards switches, ``fq`` on its ports towards hosts; released packets carry their
  intended arrival at the peer (:meth:`XcpPaceQdisc.restamps` all False).

Units: times in emulation ns (CLOCK_MONOTONIC), rates given to the kernel in emulation
bit/s, the link's rate in ps per byte, lengths in frame bytes (``qdisc_pkt_len``).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from testbed.features import Feature
from testbed.ledger import Ledger
from testbed.nsops import call_in
from testbed.optical import qdiscnl
from testbed.optical.mechanisms import FQ, HOLDING, Mechanism, NodeContext, Realisation
from testbed.optical.xcppacer import (LATE_BUCKETS, MAX_CLASSES, MAX_PENDING, SLOTS, U64_MAX, PacerConfig,
                                      PacerError, PacerInterval, RateChange)

__all__ = ["XcpPaceOptions", "RateChange", "PacerInterval", "ClassStats", "XcpPaceState", "XcpPaceError",
           "install", "remove", "set_rates", "read", "pack_rates", "unpack_xstats", "unpack_class_xstats",
           "intervals_of", "QDISC_MODULE", "XCPPACE_MECHANISM", "XCPPACE_HOLDING", "MAX_PENDING", "PacerError"]

MODULE_NAME = "sch_xcppace"
KIND = "xcppace"
VERSION = 1
#: the nested attributes of TCA_OPTIONS (kernel/xcppace.h)
TCA_XCPPACE_PARMS, TCA_XCPPACE_RATES = 1, 2
#: what the optical switch's egress program leaves in skb->cb for a paced packet:
#: cb[CB_DECISION] = OPTSW_HOLD, cb[CB_CLASS] = its class
CB_DECISION, CB_CLASS, OPTSW_HOLD = 0, 2, 4
RTM_NEWTCLASS, RTM_GETTCLASS = 40, 42

#: struct tc_xcppace_qopt: (member, C type) in order (rate_bps is u64[MAX_CLASSES])
QOPT_MEMBERS = (("version", "u32"), ("nclasses", "u32"), ("limit", "u32"), ("flags", "u32"),
                ("ps_per_byte", "u64"), ("prop_ns", "u64"), ("max_wait_ns", "u64"), ("lookahead_ns", "u64"),
                ("epoch_ns", "u64"), ("interval_ns", "u64"), ("rate_bps", f"u64[{MAX_CLASSES}]"))
_QOPT = struct.Struct(f"=4I6Q{MAX_CLASSES}Q")
QOPT_SIZE = _QOPT.size                                                   # 576
#: struct tc_xcppace_rate
_RATE = struct.Struct("=IIQQ")
RATE_SIZE = _RATE.size                                                   # 24


class XcpPaceError(qdiscnl.QdiscError):
    """The xcppace qdisc or its module could not be configured, read or (un)loaded;
    ``errno`` the kernel's error number when it answered one (else 0)."""


@dataclass(frozen=True)
class XcpPaceOptions(PacerConfig):
    """The options of one xcppace qdisc (fields of
    :class:`~testbed.optical.xcppacer.PacerConfig`: nclasses, ps_per_byte, prop_ns,
    max_wait_ns, lookahead_ns, epoch_ns, interval_ns, rates_bps (initial, per class,
    emulation bit/s, 0 = unused), limit). Raises PacerError (a ValueError) naming a
    field out of the module's range."""

    def qopt(self) -> bytes:
        """``struct tc_xcppace_qopt`` (host byte order, QOPT_SIZE bytes)."""
        rates = list(self.rates_bps) + [0] * (MAX_CLASSES - self.nclasses)
        return _QOPT.pack(VERSION, self.nclasses, self.limit, 0, self.ps_per_byte, self.prop_ns, self.max_wait_ns,
                          self.lookahead_ns, self.epoch_ns, self.interval_ns, *rates)

    def pack(self, changes: Sequence[RateChange] = ()) -> bytes:
        """The TCA_OPTIONS payload: TCA_XCPPACE_PARMS, and TCA_XCPPACE_RATES with
        ``changes`` if any (applied at their instants from creation on)."""
        out = qdiscnl.attr(TCA_XCPPACE_PARMS, self.qopt())
        return out + (qdiscnl.attr(TCA_XCPPACE_RATES, pack_rates(changes)) if changes else b"")

    @classmethod
    def unpack(cls, data: bytes) -> "XcpPaceOptions":
        """Decode a dumped TCA_OPTIONS (the nest). Raises XcpPaceError unless it holds a
        TCA_XCPPACE_PARMS of QOPT_SIZE bytes."""
        raw = qdiscnl.attrs(data).get(TCA_XCPPACE_PARMS, b"")
        if len(raw) != QOPT_SIZE:
            raise XcpPaceError(f"xcppace options hold {len(raw)} bytes of parameters, expected {QOPT_SIZE}")
        v = _QOPT.unpack(raw)
        if v[0] != VERSION:
            raise XcpPaceError(f"xcppace options of version {v[0]}, expected {VERSION}")
        n = v[1]
        return cls(n, v[4], v[5], v[6], v[7], v[8], v[9], tuple(v[10:10 + n]), v[2])


def pack_rates(changes: Sequence[RateChange]) -> bytes:
    """TCA_XCPPACE_RATES: ``struct tc_xcppace_rate`` per change, in order."""
    return b"".join(_RATE.pack(c.cls, 0, c.rate_bps, c.effective_ns) for c in changes)


# -- counters ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ClassStats:
    """``struct tc_xcppace_class_xstats`` of one class: packets admitted or dropped by
    the wait bound (``arrivals``), of which ``drops``; departures decided
    (``released``, ``released_bytes``); the rate in force (emulation bit/s, 0 = unused);
    what the class holds now (``queued_bytes``, ``queued_packets``, of which
    ``eligible_packets`` wait for the link); ``next_eligible_ns`` (its bucket head's
    eligibility, None: none); ``slots`` its ring, (interval or None, bytes, packets)."""

    arrivals: int
    drops: int
    released: int
    released_bytes: int
    rate_bps: int
    queued_bytes: int
    queued_packets: int
    eligible_packets: int
    next_eligible_ns: int | None
    slots: tuple[tuple[int | None, int, int], ...]


#: the scalar u64 members of struct tc_xcppace_xstats before late_log2, in order
XSTATS_MEMBERS = ("arrivals", "drops", "released", "released_bytes", "late", "late_rates", "max_rate_late_ns",
                  "decided_after_stamp", "unmodelled", "overlimit", "max_enqueue_late_ns", "max_decision_lag_ns",
                  "last_ns", "link_free_ns", "before_epoch", "rate_changes", "pending", "pending_rates", "queued",
                  "ready")
SLOT_MEMBERS = ("interval", "bytes", "packets", "qmin_ns", "offered_bytes", "offered_packets")
XSTATS_SIZE = 8 * (len(XSTATS_MEMBERS) + LATE_BUCKETS + SLOTS * len(SLOT_MEMBERS))          # 736
CLASS_XSTATS_MEMBERS = tuple(f.name for f in fields(ClassStats))[:-1]
CLASS_XSTATS_SIZE = 8 * (len(CLASS_XSTATS_MEMBERS) + SLOTS * 3)                              # 168
_CLASS_XSTATS = struct.Struct(f"={CLASS_XSTATS_SIZE // 8}Q")


@dataclass(frozen=True)
class PortSlot:
    """One slot of the port's ring (``struct tc_xcppace_slot``); interval None: never used,
    qmin_ns None: no departure."""

    interval: int | None
    bytes: int
    packets: int
    qmin_ns: int | None
    offered_bytes: int
    offered_packets: int


@dataclass(frozen=True)
class XcpPaceState:
    """What the kernel reports for one xcppace qdisc: its ``options``; ``intervals`` {k:
    :class:`PacerInterval`} for the intervals its ring holds (up to SLOTS); ``classes``
    (:class:`ClassStats` per class); its counters (``struct tc_xcppace_xstats``, named as
    there: ``late``, ``late_rates``, ``max_rate_late_ns``, ``decided_after_stamp``,
    ``unmodelled``, ``max_enqueue_late_ns`` and the others, ``late_log2`` the enqueue
    lateness histogram); the generic counters (packets and bytes dequeued, packets held)."""

    options: XcpPaceOptions
    intervals: dict[int, PacerInterval]
    classes: tuple[ClassStats, ...]
    arrivals: int
    drops: int
    released: int
    released_bytes: int
    late: int
    late_rates: int
    max_rate_late_ns: int
    decided_after_stamp: int
    unmodelled: int
    overlimit: int
    max_enqueue_late_ns: int
    max_decision_lag_ns: int
    last_ns: int
    link_free_ns: int
    before_epoch: int
    rate_changes: int
    pending: int
    pending_rates: int
    queued: int
    ready: int
    late_log2: tuple[int, ...]
    sent_packets: int
    sent_bytes: int
    qlen: int


def _opt(v: int) -> int | None:
    return None if v == U64_MAX else v


def unpack_xstats(data: bytes) -> tuple[dict[str, int], tuple[int, ...], tuple[PortSlot, ...]]:
    """Decode ``struct tc_xcppace_xstats``: ({member: value}, late_log2, ring slots).
    Raises XcpPaceError unless it is XSTATS_SIZE bytes."""
    if len(data) != XSTATS_SIZE:
        raise XcpPaceError(f"xcppace counters are {len(data)} bytes, expected {XSTATS_SIZE}")
    v = struct.unpack(f"={XSTATS_SIZE // 8}Q", data)
    n = len(XSTATS_MEMBERS)
    slots = tuple(PortSlot(_opt(s[0]), s[1], s[2], _opt(s[3]), s[4], s[5])
                  for s in (v[n + LATE_BUCKETS + 6 * k:n + LATE_BUCKETS + 6 * k + 6] for k in range(SLOTS)))
    return dict(zip(XSTATS_MEMBERS, v[:n])), tuple(v[n:n + LATE_BUCKETS]), slots


def unpack_class_xstats(data: bytes) -> ClassStats:
    """Decode ``struct tc_xcppace_class_xstats``. Raises XcpPaceError unless it is
    CLASS_XSTATS_SIZE bytes."""
    if len(data) != CLASS_XSTATS_SIZE:
        raise XcpPaceError(f"xcppace class counters are {len(data)} bytes, expected {CLASS_XSTATS_SIZE}")
    v = _CLASS_XSTATS.unpack(data)
    n = len(CLASS_XSTATS_MEMBERS)
    slots = tuple(zip(map(_opt, v[n::3]), v[n + 1::3], v[n + 2::3]))
    return ClassStats(*v[:n - 1], _opt(v[n - 1]), slots)


def intervals_of(port: Sequence[PortSlot], classes: Sequence[ClassStats]) -> dict[int, PacerInterval]:
    """{k: interval k} from the port's ring and the classes' rings (a class slot counts
    for k only when it is tagged k: else the class had no departure in k)."""
    out: dict[int, PacerInterval] = {}
    for s in port:
        if s.interval is None:
            continue
        k = s.interval
        cs = [c.slots[k % SLOTS] for c in classes]
        out[k] = PacerInterval(s.bytes, s.packets, s.qmin_ns, tuple(b if i == k else 0 for i, b, _ in cs),
                               tuple(p if i == k else 0 for i, _, p in cs), s.offered_bytes, s.offered_packets)
    return dict(sorted(out.items()))


# -- rtnetlink (testbed.optical.qdiscnl) and the module ----------------------------------------
def install(dev: str, netns: str | None, options: XcpPaceOptions, ledger: Ledger | None = None) -> None:
    """Make an xcppace qdisc with ``options`` the root qdisc of ``dev`` (replacing another
    kind; an xcppace root takes only its own options again); recorded in ``ledger``
    (resource ``qdisc``) first. Raises XcpPaceError with the kernel's message."""
    if ledger is not None:
        ledger.add("qdisc", dev=dev, netns=netns, parent="root")
    install_raw(dev, netns, options.pack())


def install_raw(dev: str, netns: str | None, options: bytes) -> None:
    """:func:`install` with the TCA_OPTIONS payload ``options`` as given (unchecked: the
    kernel's own checks answer; for tests)."""
    qdiscnl.replace_root(dev, netns, KIND, options, XcpPaceError, QDISC_MODULE)


def remove(dev: str, netns: str | None) -> None:
    """Delete the root qdisc of ``dev`` (the device falls back to its default; the
    packets it held are freed)."""
    qdiscnl.delete_root(dev, netns, XcpPaceError)


def set_rates(dev: str, netns: str | None, changes: Sequence[RateChange],
              session: qdiscnl.Session | None = None) -> None:
    """Send ``changes`` (class, emulation bit/s, effective instant in emulation ns) to the
    xcppace root qdisc of ``dev`` in one netlink request (``RTM_NEWQDISC`` changing the
    qdisc with TCA_XCPPACE_RATES), on ``session`` (a :class:`qdiscnl.Session` of
    ``netns``) when given. Each applies at its instant; one whose instant is decided
    already applies at the qdisc's last decided instant and is counted ``late_rates``.
    Raises XcpPaceError (none applied) for an empty request, a class not below
    nclasses, a rate not 1..8e12 bit/s, more than MAX_PENDING changes waiting, or no
    xcppace qdisc on ``dev`` (with a session also when its namespace is gone or the
    reply is missing or malformed)."""
    if not changes:
        raise XcpPaceError("set_rates needs at least one rate change")
    payload = (qdiscnl.attr(qdiscnl.TCA_KIND, KIND.encode() + b"\0")
               + qdiscnl.attr(qdiscnl.TCA_OPTIONS, qdiscnl.attr(TCA_XCPPACE_RATES, pack_rates(changes))))

    def body() -> None:
        qdiscnl.request(qdiscnl.RTM_NEWQDISC, qdiscnl.NLM_F_ACK, qdiscnl.ifindex(dev, netns, XcpPaceError),
                        payload, XcpPaceError)
    try:
        if session is None:
            call_in(netns, body)
        else:
            qdiscnl.device_request(dev, netns, qdiscnl.RTM_NEWQDISC, qdiscnl.NLM_F_ACK, payload, XcpPaceError,
                                   session)
    except XcpPaceError as exc:
        raise XcpPaceError(f"rate changes for {KIND} on {dev} in {netns or 'the root namespace'}: {exc.args[0]}",
                           exc.errno) from None


_TCM = struct.Struct("=BxxxiIII")


def _class_dump(dev: str, netns: str | None, session: qdiscnl.Session | None) -> list[bytes]:
    """The RTM_NEWTCLASS messages of a class dump of ``dev`` (on ``session`` when given,
    else in a thread inside ``netns``): tcm_parent 0 (every qdisc of the device), not
    TC_H_ROOT, which a class dump takes as a qdisc handle."""
    try:
        replies = qdiscnl.device_request(dev, netns, RTM_GETTCLASS, qdiscnl.NLM_F_DUMP, error=XcpPaceError,
                                         session=session, parent=0)
    except XcpPaceError as exc:
        raise XcpPaceError(f"class dump of {dev} in {netns or 'the root namespace'}: {exc.args[0]}",
                           exc.errno) from None
    return [msg for mtype, msg in replies if mtype == RTM_NEWTCLASS]


def _classes(dev: str, netns: str | None, nclasses: int,
             session: qdiscnl.Session | None = None) -> tuple[ClassStats, ...]:
    return classes_of(_class_dump(dev, netns, session), nclasses, dev)


def classes_of(msgs: Sequence[bytes], nclasses: int, dev: str = "the device") -> tuple[ClassStats, ...]:
    """The :class:`ClassStats` of classes 0..nclasses-1 from the RTM_NEWTCLASS messages
    of a class dump (netlink header removed; class ``cls`` is the message of handle
    minor cls + 1; other kinds' classes are skipped). Raises XcpPaceError when one is
    missing or its counters have the wrong size."""
    got: dict[int, ClassStats] = {}
    kind = KIND.encode()
    for msg in msgs:
        _fam, _idx, handle, _parent, _info = _TCM.unpack_from(msg)
        if (qdiscnl.find_attr(msg, qdiscnl.TCA_KIND, _TCM.size) or b"").rstrip(b"\0") != kind:
            continue
        stats = qdiscnl.find_attr(msg, qdiscnl.TCA_STATS2, _TCM.size) or b""
        got[(handle & 0xFFFF) - 1] = unpack_class_xstats(qdiscnl.find_attr(stats, qdiscnl.TCA_STATS_APP) or b"")
    missing = [k for k in range(nclasses) if k not in got]
    if missing:
        raise XcpPaceError(f"the class dump of {dev} lacks classes {missing} of {nclasses}")
    return tuple(got[k] for k in range(nclasses))


def read(dev: str, netns: str | None, session: qdiscnl.Session | None = None) -> XcpPaceState:
    """Options, counters, classes and interval ring of the xcppace root qdisc of ``dev``
    (one qdisc dump, then one class dump: an interval still filling may differ between
    the two; closed intervals do not), on ``session`` (a :class:`qdiscnl.Session` of
    ``netns``) when given, else each in a thread inside ``netns``. Raises XcpPaceError
    (with a session also when its namespace is gone or a reply is missing or
    malformed)."""
    q = qdiscnl.dump_root(dev, netns, KIND, XcpPaceError, session)
    options = XcpPaceOptions.unpack(q.options)
    scalars, late_log2, slots = unpack_xstats(q.app)
    classes = _classes(dev, netns, options.nclasses, session)
    return XcpPaceState(options, intervals_of(slots, classes), classes, **scalars, late_log2=late_log2,
                        sent_packets=q.packets, sent_bytes=q.bytes, qlen=q.qlen)


#: the module providing the qdisc (kernel/sch_xcppace.ko)
QDISC_MODULE = qdiscnl.QdiscModule(MODULE_NAME, KIND, XcpPaceError)


def ko_path() -> Path:
    return QDISC_MODULE.ko_path()


def load_module(ledger: Ledger) -> bool:
    """insmod ``kernel/sch_xcppace.ko`` unless loaded; True when this call loaded it (then
    recorded in ``ledger`` before loading, so teardown removes it)."""
    return QDISC_MODULE.load(ledger)


def unload_module(ledger: Ledger) -> None:
    """rmmod the module this ``ledger`` loaded; refuses one it did not load or one still
    in use."""
    QDISC_MODULE.unload(ledger)


@dataclass(frozen=True)
class XcpPaceQdisc(Mechanism):
    """The xcppace qdisc as a fabric mechanism: on the node's ports towards switches
    (the edge's uplinks), with the options its architecture's ``mechanism_options`` gives
    (one :class:`XcpPaceOptions` for every such port, or {device: XcpPaceOptions}); fq on
    its ports towards hosts (stamped packets, released at their stamps). Every port's
    packets leave stamped with their intended arrival at the peer (:meth:`restamps` all
    False). :meth:`prepare` loads the module (ledgered) before the namespaces exist."""

    def plan(self, devs: Sequence[str], context: NodeContext | None) -> dict[str, str]:
        return {dev: KIND if held else FQ.name for dev, held in zip(devs, self.holds(devs, context))}

    def holds(self, devs: Sequence[str], context: NodeContext | None) -> tuple[bool, ...]:
        if context is None or len(context.peer_host) != len(devs):
            raise XcpPaceError(f"the xcppace mechanism needs the node's ports (a NodeContext of {len(devs)} "
                               f"ports), got {context!r}")
        return tuple(not h for h in context.peer_host)

    def restamps(self, devs: Sequence[str], context: NodeContext | None) -> tuple[bool, ...]:
        return tuple(False for _ in devs)

    def prepare(self, ledger: Any) -> None:
        if ledger is not None:
            load_module(ledger)

    def _options(self, dev: str, options: Any) -> XcpPaceOptions:
        opt = options.get(dev) if isinstance(options, Mapping) else options
        if not isinstance(opt, XcpPaceOptions):
            raise XcpPaceError(f"the xcppace mechanism needs XcpPaceOptions (or {{device: XcpPaceOptions}}) from "
                               f"its architecture's mechanism_options for {dev}, got {options!r}")
        return opt

    def install(self, netns: str | None, devs: Sequence[str], options: Any, ledger: Any,
                context: NodeContext | None = None) -> None:
        plan = self.plan(devs, context)
        paced = [d for d in devs if plan[d] == KIND]
        opts = {d: self._options(d, options) for d in paced}
        self.prepare(ledger)
        FQ.install(netns, [d for d in devs if plan[d] == FQ.name], None, ledger)
        for dev in paced:
            install(dev, netns, opts[dev])

    def remove(self, netns: str | None, devs: Sequence[str], context: NodeContext | None = None) -> None:
        for dev, held in zip(devs, self.holds(devs, context)):
            if held:
                remove(dev, netns)

    def reset(self, netns: str | None, devs: Sequence[str], options: Any, ledger: Any,
              context: NodeContext | None = None) -> None:
        self.remove(netns, devs, context)
        self.prepare(ledger)
        for dev, held in zip(devs, self.holds(devs, context)):
            if held:
                install(dev, netns, self._options(dev, options))

    def port_counters(self, netns: str | None, devs: Sequence[str],
                      context: NodeContext | None) -> dict[str, dict[str, int]]:
        """Per paced port the pacer's drops (the wait bound at admission, packets of an
        unused class, the packet limit) as the port's ``dropped``, and its exactness counters
        (``pacer_late``: arrivals after their instant was decided; ``pacer_late_rates``:
        rate changes applied after their instant; ``pacer_decided_after_stamp``)."""
        return {dev: {"dropped": st.drops + st.unmodelled + st.overlimit, "pacer_late": st.late,
                      "pacer_late_rates": st.late_rates, "pacer_decided_after_stamp": st.decided_after_stamp}
                for dev, st in self.read(netns, devs, context).items()}

    def read(self, netns: str | None, devs: Sequence[str], context: NodeContext | None) -> dict[str, XcpPaceState]:
        """{device: :func:`read` of its xcppace qdisc} for the paced ports."""
        return {dev: read(dev, netns) for dev, held in zip(devs, self.holds(devs, context)) if held}


#: xcppace: E5's XCP edge pacer (kernel/sch_xcppace.c, a module loaded from kernel/) on
#: the ports towards switches; fq on the ports towards hosts (docs/xcp-edge.md)
XCPPACE_MECHANISM = XcpPaceQdisc(
    "xcppace", "xcppace qdisc module on the ports towards switches: a leaky bucket per macroflow class at timed "
    "rates, serialised on the link, wait bound at admission, decided on the intended timeline a lookahead M_p "
    "late, released at the intended arrival at the next node; fq on the ports towards hosts",
    frozenset({Feature.MODULES, Feature.FQ}))

#: held per class by the leaky buckets and the link, released by xcppace
XCPPACE_HOLDING = Realisation(HOLDING, XCPPACE_MECHANISM)
