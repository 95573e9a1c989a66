"""The ``obsburst`` qdisc (``kernel/sch_obsburst.c``) from Python: its options, its
counters, its control packets, and the module that provides it.

* :class:`ObsBurstConfig` packs ``struct tc_obsburst_qopt`` (``kernel/obsburst.h``),
  checking the module's bounds first (errors name the key, the value and the range).
* :func:`install` / :func:`remove` / :func:`read` put the qdisc on a device, take it
  off and read it back (options and counters), through rtnetlink in-process: a plain
  ``AF_NETLINK`` socket opened inside the namespace (:func:`testbed.nsops.call_in`)
  carrying ``TCA_KIND`` and the packed ``TCA_OPTIONS`` (``tc`` has no parser for this
  qdisc). The kernel's extended-ack message is the error text.
* :func:`load_module` / :func:`unload_module`: ``insmod kernel/sch_obsburst.ko``,
  recorded in the run's ledger (resource ``module``, torn down by
  :mod:`testbed.cc.modules` when nothing uses it); unloading refuses a module this
  ledger did not load, or one still in use (a qdisc instance holds a reference).
* :func:`parse_control` decodes a control packet (Ethernet frame, EtherType 0x88B5);
  ``obsburst.lua`` (next to this file) is its Wireshark dissector, and
  :func:`tshark_controls` decodes a capture with it (:func:`write_pcap` writes one).

docs/obs.md describes the mechanism.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed import cmd
from testbed.errors import CommandError
from testbed.features import Feature
from testbed.ledger import Ledger
from testbed.optical import qdiscnl
from testbed.optical.burst import ClassParams
from testbed.optical.mechanisms import FQ, HOLDING, Mechanism, NodeContext, Realisation

MODULE_NAME = "sch_obsburst"
KIND = "obsburst"
VERSION = 1
MAX_CLASSES = 4
CLASS_BY = {"priority": 0, "mark": 1}
F_CTRL = 0x1
ETH_P_OBSB = 0x88B5
CTRL_MAGIC = 0x4F425342
CTRL_F_VOLUME = 0x1

#: bounds, as kernel/obsburst.h
BOUNDS = {"tmax_ns": (1, 3_600_000_000_000), "lmax_bytes": (1, 1_000_000_000),
          "offset_ns": (0, 3_600_000_000_000), "rate_bps": (1000, 10_000_000_000_000)}
LIMIT_BOUNDS = (1, 10_000_000)

_QOPT_HEAD = struct.Struct("=6I")
_CLASS = struct.Struct("=4Q")
QOPT_SIZE = _QOPT_HEAD.size + MAX_CLASSES * _CLASS.size          # 152
_CLASS_STATS = struct.Struct("=5Q")
XSTATS_SIZE = MAX_CLASSES * _CLASS_STATS.size + 3 * 8            # 184
#: struct obsb_ctrl_hdr (big endian, 48 bytes)
_CTRL = struct.Struct("!IBBHQQIIQQ")


class ObsBurstError(qdiscnl.QdiscError):
    """The obsburst qdisc or its module could not be configured, read or (un)loaded;
    ``errno`` the kernel's error number when it answered one (else 0)."""


@dataclass(frozen=True)
class ObsBurstConfig:
    """Options of one obsburst qdisc: per class (index = class) Tmax, Lmax, offset and
    optical rate in emulation units; how a packet's class is chosen (``priority``: the
    minor number of skb->priority, e.g. SO_PRIORITY; ``mark``: skb->mark); the class of
    packets whose value is out of range; the packet limit; control packets on/off."""

    classes: tuple[ClassParams, ...]
    class_by: str = "priority"
    default_class: int = 0
    limit: int = 1_000_000
    control: bool = True

    def __post_init__(self) -> None:
        if not 1 <= len(self.classes) <= MAX_CLASSES:
            raise ObsBurstError(f"obsburst classes: {len(self.classes)} given, accepted 1..{MAX_CLASSES}")
        for i, c in enumerate(self.classes):
            for key, (lo, hi) in BOUNDS.items():
                v = getattr(c, key)
                if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                    raise ObsBurstError(f"obsburst class {i} {key}={v!r} out of range: an integer {lo}..{hi}")
        if self.class_by not in CLASS_BY:
            raise ObsBurstError(f"obsburst class_by={self.class_by!r}: accepted {', '.join(CLASS_BY)}")
        if not 0 <= self.default_class < len(self.classes):
            raise ObsBurstError(f"obsburst default_class={self.default_class!r} out of range: "
                                f"0..{len(self.classes) - 1}")
        lo, hi = LIMIT_BOUNDS
        if not lo <= self.limit <= hi:
            raise ObsBurstError(f"obsburst limit={self.limit!r} out of range: {lo}..{hi} packets")

    def pack(self) -> bytes:
        """``struct tc_obsburst_qopt``."""
        out = _QOPT_HEAD.pack(VERSION, len(self.classes), CLASS_BY[self.class_by], self.default_class,
                              self.limit, F_CTRL if self.control else 0)
        for i in range(MAX_CLASSES):
            c = self.classes[i] if i < len(self.classes) else None
            out += _CLASS.pack(*((c.tmax_ns, c.lmax_bytes, c.offset_ns, c.rate_bps) if c else (0, 0, 0, 0)))
        return out

    @classmethod
    def unpack(cls, data: bytes) -> "ObsBurstConfig":
        if len(data) != QOPT_SIZE:
            raise ObsBurstError(f"obsburst options are {len(data)} bytes, expected {QOPT_SIZE}")
        version, n, by, default, limit, flags = _QOPT_HEAD.unpack_from(data)
        if version != VERSION:
            raise ObsBurstError(f"obsburst options version {version}, this code knows {VERSION}")
        classes = tuple(ClassParams(*_CLASS.unpack_from(data, _QOPT_HEAD.size + i * _CLASS.size))
                        for i in range(n))
        by_name = {v: k for k, v in CLASS_BY.items()}[by]
        return cls(classes, by_name, default, limit, bool(flags & F_CTRL))


@dataclass(frozen=True)
class ClassCounters:
    bursts: int
    closed_time: int
    closed_volume: int
    packets: int
    bytes: int


@dataclass(frozen=True)
class QdiscState:
    """What the kernel reports for one obsburst qdisc: its options, per-class counters,
    control packets sent and failed, drops at the limit, and the generic counters
    (packets and bytes sent, packets held)."""

    config: ObsBurstConfig
    classes: tuple[ClassCounters, ...]
    ctrl_packets: int
    ctrl_failed: int
    drops: int
    sent_packets: int
    sent_bytes: int
    qlen: int


def unpack_xstats(data: bytes, nclasses: int) -> tuple[tuple[ClassCounters, ...], int, int, int]:
    if len(data) != XSTATS_SIZE:
        raise ObsBurstError(f"obsburst counters are {len(data)} bytes, expected {XSTATS_SIZE}")
    cls = tuple(ClassCounters(*_CLASS_STATS.unpack_from(data, i * _CLASS_STATS.size)) for i in range(nclasses))
    ctrl, failed, drops = struct.unpack_from("=3Q", data, MAX_CLASSES * _CLASS_STATS.size)
    return cls, ctrl, failed, drops


# -- control packets ------------------------------------------------------------------------
@dataclass(frozen=True)
class ControlPacket:
    """A burst control packet as on the wire (``struct obsb_ctrl_hdr``)."""

    burst_id: int
    cls: int
    volume: bool        # closed by Lmax (else by Tmax)
    bytes: int
    packets: int
    offset_ns: int
    close_ns: int


    def frame(self, src_mac: bytes = b"\x02\0\0\0\0\x01") -> bytes:
        """The Ethernet frame the qdisc sends for this control packet (broadcast)."""
        return (b"\xff" * 6 + src_mac + struct.pack("!H", ETH_P_OBSB)
                + _CTRL.pack(CTRL_MAGIC, VERSION, self.cls, CTRL_F_VOLUME if self.volume else 0, self.burst_id,
                             self.bytes, self.packets, 0, self.offset_ns, self.close_ns))


def parse_control(frame: bytes) -> ControlPacket | None:
    """The control packet in Ethernet ``frame``, None when it is not one."""
    if len(frame) < 14 + _CTRL.size or struct.unpack_from("!H", frame, 12)[0] != ETH_P_OBSB:
        return None
    magic, version, cls, flags, bid, nbytes, npk, _res, offset, close = _CTRL.unpack_from(frame, 14)
    if magic != CTRL_MAGIC or version != VERSION:
        return None
    return ControlPacket(bid, cls, bool(flags & CTRL_F_VOLUME), nbytes, npk, offset, close)


#: Wireshark / tshark dissector of the control packet
DISSECTOR = Path(__file__).with_name("obsburst.lua")
_TSHARK_FIELDS = ("obsb.burst_id", "obsb.class", "obsb.volume", "obsb.bytes", "obsb.packets", "obsb.offset_ns",
                  "obsb.close_ns")


def write_pcap(path: Path, frames: list[tuple[int, bytes]]) -> None:
    """A pcap (nanosecond timestamps, Ethernet) of ``frames``: (time ns, frame)."""
    with open(path, "wb") as f:
        f.write(struct.pack("=IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, 1))
        for t, frame in frames:
            f.write(struct.pack("=IIII", t // 1_000_000_000, t % 1_000_000_000, len(frame), len(frame)))
            f.write(frame)


def tshark_controls(pcap: Path) -> list[ControlPacket]:
    """The control packets of ``pcap`` as tshark decodes them with :data:`DISSECTOR`."""
    argv = ["tshark", "-n", "-X", f"lua_script:{DISSECTOR}", "-r", str(pcap), "-Y", "obsb", "-T", "fields",
            "-E", "separator=,", *(x for name in _TSHARK_FIELDS for x in ("-e", name))]
    try:
        out = cmd.run(argv, timeout=300).stdout
    except CommandError as exc:
        raise ObsBurstError(f"tshark could not decode {pcap}: {exc.stderr.strip() or exc}") from None
    result = []
    for line in out.splitlines():
        bid, cls, volume, nbytes, npk, offset, close = line.split(",")
        result.append(ControlPacket(int(bid), int(cls), volume in ("1", "True"), int(nbytes), int(npk),
                                    int(offset), int(close)))
    return result


# -- rtnetlink (testbed.optical.qdiscnl) and the module -------------------------------------
def install(dev: str, netns: str | None, config: ObsBurstConfig, ledger: Ledger | None = None) -> None:
    """Make an obsburst qdisc with ``config`` the root qdisc of ``dev`` (replacing
    whatever is there); recorded in ``ledger`` (resource ``qdisc``) first."""
    if ledger is not None:
        ledger.add("qdisc", dev=dev, netns=netns, parent="root")
    install_raw(dev, netns, config.pack())


def install_raw(dev: str, netns: str | None, options: bytes) -> None:
    """:func:`install` with ``options`` as given (unchecked: the kernel's own checks
    are what answers; for tests)."""
    qdiscnl.replace_root(dev, netns, KIND, options, ObsBurstError, QDISC_MODULE)


def remove(dev: str, netns: str | None) -> None:
    """Delete the root qdisc of ``dev`` (the device falls back to its default)."""
    qdiscnl.delete_root(dev, netns, ObsBurstError)


def read(dev: str, netns: str | None) -> QdiscState:
    """Options and counters of the obsburst root qdisc of ``dev``."""
    q = qdiscnl.dump_root(dev, netns, KIND, ObsBurstError)
    config = ObsBurstConfig.unpack(q.options)
    cls, ctrl, failed, drops = unpack_xstats(q.app, len(config.classes))
    return QdiscState(config, cls, ctrl, failed, drops, q.packets, q.bytes, q.qlen)


#: the module providing the qdisc (kernel/sch_obsburst.ko)
QDISC_MODULE = qdiscnl.QdiscModule(MODULE_NAME, KIND, ObsBurstError)


def ko_path() -> Path:
    return QDISC_MODULE.ko_path()


def loaded() -> bool:
    return QDISC_MODULE.loaded()


def load_module(ledger: Ledger) -> bool:
    """insmod ``kernel/sch_obsburst.ko`` unless loaded; True when this call loaded it
    (then recorded in ``ledger`` before loading, so teardown removes it)."""
    return QDISC_MODULE.load(ledger)


def unload_module(ledger: Ledger) -> None:
    """rmmod the module this ``ledger`` loaded; refuses (without rmmod) one it did not
    load or one still in use (an obsburst qdisc holds a reference)."""
    QDISC_MODULE.unload(ledger)


@dataclass(frozen=True)
class ObsBurstQdisc(Mechanism):
    """The obsburst qdisc as a fabric mechanism. On a node it assembles the packets of
    the ports towards other switches (the optical side: an obsburst qdisc with the
    node architecture's options, an :class:`ObsBurstConfig` from its
    ``mechanism_options``) and releases the packets of the ports towards hosts with
    ``fq`` at their stamped times (ACKs going back to the sources are not assembled).
    :meth:`prepare` loads the module (ledgered) before the namespaces exist, so that
    teardown removes it after them; :meth:`remove` takes the obsburst qdiscs off first
    on a normal teardown (then nothing holds the module)."""

    def plan(self, devs: Sequence[str], context: NodeContext | None) -> dict[str, str]:
        return {dev: KIND if held else FQ.name for dev, held in zip(devs, self.holds(devs, context))}

    def holds(self, devs: Sequence[str], context: NodeContext | None) -> tuple[bool, ...]:
        if context is None or len(context.peer_host) != len(devs):
            raise ObsBurstError(f"the obsburst mechanism needs the node's ports (a NodeContext of "
                                f"{len(devs)} ports), got {context!r}")
        return tuple(not h for h in context.peer_host)

    def prepare(self, ledger: Any) -> None:
        if ledger is not None:
            load_module(ledger)

    def install(self, netns: str | None, devs: Sequence[str], options: Any, ledger: Any,
                context: NodeContext | None = None) -> None:
        if not isinstance(options, ObsBurstConfig):
            raise ObsBurstError(f"the obsburst mechanism needs an ObsBurstConfig from its architecture's "
                                f"mechanism_options, got {options!r}")
        plan = self.plan(devs, context)
        self.prepare(ledger)
        FQ.install(netns, [d for d in devs if plan[d] == FQ.name], None, ledger)
        for dev in devs:
            if plan[dev] == KIND:
                install(dev, netns, options)

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
                install(dev, netns, options)

    def read(self, netns: str | None, devs: Sequence[str], context: NodeContext | None) -> dict[str, QdiscState]:
        """{device: :func:`read` of its obsburst qdisc (a :class:`QdiscState`)} for the
        assembling ports."""
        return {dev: read(dev, netns) for dev, held in zip(devs, self.holds(devs, context)) if held}


#: obsburst: E2's ingress-edge burst assembler (kernel/sch_obsburst.c, a module loaded
#: from kernel/): per class, bursts closed by Tmax or Lmax, released after the offset
#: at the optical rate, a control packet at close (docs/obs.md); fq on ports to hosts
OBSBURST = ObsBurstQdisc("obsburst", "obsburst qdisc module on the ports towards switches: per-class time-volume "
                         "burst assembly, release after the offset at the optical rate, control packet at close; "
                         "fq on the ports towards hosts", frozenset({Feature.MODULES, Feature.FQ}))

#: held per class until the burst closes, released by the obsburst qdisc
OBS_ASSEMBLY = Realisation(HOLDING, OBSBURST)
