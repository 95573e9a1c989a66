"""The ``hostnic`` qdisc (``kernel/sch_hostnic.c``): the NIC queue of every host on the
optical fabric, and the mechanism that realises the hosts' ``nic`` architecture.

It releases each packet at the departure time the host's egress program stamped
(serialisation at the link rate, FIFO), as ``fq`` would, and orphans the packet when
the NIC takes it (``skb_orphan()``: it no longer belongs to its socket). With ``fq``
there, TCP Small Queues counted every packet against its sender
until the receiver got it (the socket reference crosses the veth pairs), with a budget
of a few packets (pacing rate x 1 ms, computed in emulation time): senders whose kernel
sets a pacing rate (the ``sack`` profile) were held far below their cwnd (E1, lone
flows across the core: 4.2 Gb/s with cwnd 12..19 instead of ~9.6 Gb/s;
docs/environment.md), and Linux skipped any retransmission due while the original was
still in a switch buffer (``TCPSpuriousRtxHostQueues``), which the papers' TCP sends. A
partial orphan (netem's) would cure the first and not the second.

* :class:`HostNicConfig` packs ``struct tc_hostnic_qopt`` (``kernel/hostnic.h``).
* :func:`install` / :func:`read` put the qdisc on a device and read it back (options
  and counters, :class:`HostNicState`) through rtnetlink (``testbed.optical.qdiscnl``).
* :data:`HOSTNIC`: the fabric mechanism (loads the module in ``prepare``, installs the
  qdisc with its defaults on every port of a host).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from testbed.features import Feature
from testbed.ledger import Ledger
from testbed.optical import qdiscnl
from testbed.optical.mechanisms import NodeContext, TcQdisc

MODULE_NAME = "sch_hostnic"
KIND = "hostnic"
VERSION = 1
LIMIT_DEFAULT = 1_000_000
LIMIT_BOUNDS = (1, 10_000_000)
_QOPT = struct.Struct("=2I")
_XSTATS = struct.Struct("=5Q")


class HostNicError(qdiscnl.QdiscError):
    """The hostnic qdisc or its module could not be configured, read or (un)loaded;
    ``errno`` the kernel's error number when it answered one (else 0)."""


@dataclass(frozen=True)
class HostNicConfig:
    """Options of one hostnic qdisc: ``limit`` packets held (1..1e7; beyond it a packet
    is dropped and counted). Raises HostNicError for a limit out of range."""

    limit: int = LIMIT_DEFAULT

    def __post_init__(self) -> None:
        lo, hi = LIMIT_BOUNDS
        if not isinstance(self.limit, int) or not lo <= self.limit <= hi:
            raise HostNicError(f"hostnic limit={self.limit!r} out of range: an integer {lo}..{hi} (packets)")

    def pack(self) -> bytes:
        return _QOPT.pack(VERSION, self.limit)

    @classmethod
    def unpack(cls, data: bytes) -> "HostNicConfig":
        if len(data) != _QOPT.size:
            raise HostNicError(f"hostnic options are {len(data)} bytes, expected {_QOPT.size}")
        version, limit = _QOPT.unpack(data)
        if version != VERSION:
            raise HostNicError(f"hostnic options version {version}, expected {VERSION}")
        return cls(limit)


@dataclass(frozen=True)
class HostNicState:
    """What the kernel reports for one hostnic qdisc: its options; packets that
    belonged to a socket, orphaned at enqueue (``orphaned``), packets stamped earlier
    than the queue's tail (``out_of_order``: the NIC program stamps in order, so 0),
    drops at the limit, the most packets it held at once, packets stamped more than
    1 h ahead (``horizon_capped``: released 1 h after enqueue, as fq's horizon_cap);
    packets and bytes sent, packets held now."""

    config: HostNicConfig
    orphaned: int
    out_of_order: int
    drops: int
    max_qlen: int
    horizon_capped: int
    sent_packets: int
    sent_bytes: int
    qlen: int


#: the module providing the qdisc (kernel/sch_hostnic.ko)
QDISC_MODULE = qdiscnl.QdiscModule(MODULE_NAME, KIND, HostNicError)


def load_module(ledger: Ledger) -> bool:
    """insmod ``kernel/sch_hostnic.ko`` unless loaded; True when this call loaded it
    (then recorded in ``ledger`` before loading, so teardown removes it). Raises
    HostNicError (e.g. not built, or a kernel that refuses modules)."""
    return QDISC_MODULE.load(ledger)


def install(dev: str, netns: str | None, config: HostNicConfig | None = None, ledger: Ledger | None = None) -> None:
    """Make a hostnic qdisc (``config``; None: the module's defaults) the root qdisc of
    ``dev`` in ``netns``; recorded in ``ledger`` (resource ``qdisc``) first. Raises
    HostNicError with the kernel's message."""
    if ledger is not None:
        ledger.add("qdisc", dev=dev, netns=netns, parent="root")
    qdiscnl.replace_root(dev, netns, KIND, None if config is None else config.pack(), HostNicError, QDISC_MODULE)


def read(dev: str, netns: str | None) -> HostNicState:
    """Options and counters of the hostnic root qdisc of ``dev``. Raises HostNicError
    when ``dev`` has none."""
    q = qdiscnl.dump_root(dev, netns, KIND, HostNicError)
    if len(q.app) != _XSTATS.size:
        raise HostNicError(f"hostnic counters are {len(q.app)} bytes, expected {_XSTATS.size}")
    return HostNicState(HostNicConfig.unpack(q.options), *_XSTATS.unpack(q.app), q.packets, q.bytes, q.qlen)


@dataclass(frozen=True)
class HostNicQdisc(TcQdisc):
    """The hostnic qdisc as a fabric mechanism: on every port of the node with the
    module's defaults, installed by ``tc`` like ``fq`` (``tc`` passes no options for a
    qdisc it has no parser for: a new qdisc takes the module's defaults, a replaced
    hostnic qdisc keeps its options). It releases
    packets at their stamped times, so it holds none past the egress program's
    decision (:meth:`holds` is all False). :meth:`prepare` loads the module (ledgered)
    before the namespaces exist, so that teardown removes it after them."""

    def prepare(self, ledger: Any) -> None:
        if ledger is not None:
            load_module(ledger)

    def install(self, netns: str | None, devs: Sequence[str], options: Any, ledger: Any,
                context: NodeContext | None = None) -> None:
        self.prepare(ledger)
        super().install(netns, devs, options, ledger, context)


#: hostnic: the hosts' NIC queue (kernel/sch_hostnic.c, a module loaded from kernel/):
#: releases each packet at its stamped time and orphans it at enqueue
HOSTNIC = HostNicQdisc("hostnic", "hostnic qdisc module: releases each packet at its skb->tstamp in stamp order "
                       "and orphans it at enqueue (TCP Small Queues see the NIC, not the whole emulated path, "
                       "and retransmissions of packets still in the network are sent)", frozenset({Feature.MODULES}), (KIND,))
