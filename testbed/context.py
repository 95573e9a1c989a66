"""What a family's ``run_point`` gets: :class:`PointContext` (the point, its folder,
the ledger, the instruments) and :class:`KeptResources` (objects kept from one point
to the next, e.g. a fabric that only needs reconfiguring).

Families import this module, the runner creates the objects; it imports neither.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, ContextManager, TypeVar

from testbed import hostclock
from testbed.dilation import TimeDilation
from testbed.experiment import Definition, Point
from testbed.ledger import Ledger
from testbed.metrics import Metric
from testbed.results import atomic_write, write_csv, write_json

log = logging.getLogger(__name__)
T = TypeVar("T")


class KeptResources:
    """Context-managed objects kept from one point to the next (e.g. an emulated network
    that only needs reconfiguring): at most one per ``slot`` (a name such as "fabric").
    Objects kept later may depend on earlier ones (profiles applied inside a network),
    so replacing or dropping one first closes every object kept after it, newest first.
    The runner drops them all when a point fails and at the end of the run."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[Hashable, contextlib.ExitStack, Any]] = {}

    def get(self, slot: str, key: Hashable, factory: Callable[[], ContextManager[T]]) -> T:
        """The object kept in ``slot`` if its key equals ``key``; else ``factory()``
        entered (after closing the old one and those kept after it)."""
        held = self._held.get(slot)
        if held is not None and held[0] == key:
            return held[2]
        self.drop(slot)
        stack = contextlib.ExitStack()
        value = stack.enter_context(factory())
        self._held[slot] = (key, stack, value)
        return value

    def drop(self, slot: str | None = None) -> None:
        """Close the object of ``slot`` and those kept after it (all when None), newest
        first; every one is closed even if an earlier close raises (the first error is
        re-raised)."""
        slots = list(self._held)
        if slot is not None:
            slots = slots[slots.index(slot):] if slot in slots else []
        with contextlib.ExitStack() as closing:
            for k in slots:  # ExitStack closes in reverse: newest first
                closing.push(self._held.pop(k)[1])


@dataclass
class PointContext:
    """What a family's ``run_point`` gets: the point, its folder, the ledger, helpers."""

    defn: Definition
    point: Point
    dir: Path
    ledger: Ledger
    token: str
    pcap_links: list[str]
    pcap_dir: Path
    progress_fn: Any = None
    kept: KeptResources = field(default_factory=KeptResources)
    #: the optical fabric's per-port counters, read once when instruments() ends
    optical_counters: list[dict] | None = None
    #: the point's time dilation when its family sets one per point (Family.point_tdf)
    point_tdf: TimeDilation | None = None

    def keep(self, slot: str, key: Hashable, factory: Callable[[], ContextManager[T]]) -> T:
        """The object ``factory()`` entered for ``key``, reused by later points that ask
        for the same ``slot`` and ``key`` (a different key closes the old one first).
        The runner closes it when a point fails and at the end of the run."""
        return self.kept.get(slot, key, factory)

    @property
    def tdf(self) -> TimeDilation:
        """The point's time dilation: its family's per-point D, else the definition's."""
        return self.point_tdf if self.point_tdf is not None else self.defn.tdf

    def log_file(self, name: str) -> IO[bytes]:
        return open(self.dir / name, "wb")

    def write_text(self, name: str, text: str) -> None:
        atomic_write(self.dir / name, text)

    def write_csv(self, name: str, rows: list[dict[str, Any]]) -> None:
        write_csv(self.dir / name, rows)

    def write_json(self, name: str, data: Any) -> None:
        write_json(self.dir / name, data)

    def progress(self, message: str) -> None:
        if self.progress_fn:
            self.progress_fn(message)

    @contextlib.contextmanager
    def instruments(self, emu: Any, *, count_ports: bool = True) -> Iterator[None]:
        """While the block runs: capture the links named with --pcap, and count packets
        and bytes on every host port with the ``portstat`` BPF program (ports.csv).
        The block's cost goes to machine.json: wall (host) seconds, emulation seconds,
        and the share of emulation time the kernel's CPUs were busy (a loaded CPU
        releases packets late)."""
        from testbed import bpf
        from testbed.capture import Capture

        caps = []
        cpu0, guest0, host0 = cpu_times(), time.monotonic(), hostclock.host_seconds()
        pin_dir = bpf.PIN_ROOT / f"{self.token}-{self.point.id}"
        ports: dict[tuple[int, int], tuple[str, str]] = {}
        try:
            if count_ports:
                counted: list[bpf.PortstatPort] = []
                for node_id, host in enumerate(emu.hosts(), start=1):
                    for port_id, intf in enumerate(host.intfs, start=1):
                        ports[(node_id, port_id)] = (host.name, intf)
                        counted += [bpf.PortstatPort(host.netns, intf, direction, node_id, port_id)
                                    for direction in ("ingress", "egress")]
                # one loader process for every port (each costs ~0.3 s under software
                # emulation); every port is checked before any is attached
                if counted:
                    bpf.attach_portstats(self.ledger, pin_dir, counted)
            for link in self.pcap_links:
                caps.append(Capture(emu, link, self.pcap_dir / f"{self.point.id}-{link}.pcap"))
            yield
        finally:
            for c in reversed(caps):
                c.stop()
        self._record_machine(cpu0, guest0, host0)
        self._record_optical(emu)
        if ports:
            rows = [{"node": ports[(c["node"], c["port"])][0], "intf": ports[(c["node"], c["port"])][1],
                     "direction": c["direction"], "packets": c["packets"], "bytes": c["bytes"]}
                    for c in bpf.read_port_counters(pin_dir) if (c["node"], c["port"]) in ports]
            self.write_csv("ports.csv", sorted(rows, key=lambda r: (r["node"], r["intf"], r["direction"])))

    def _record_machine(self, cpu0: tuple[float, float], guest0: float, host0: float) -> None:
        busy0, total0 = cpu0
        busy1, total1 = cpu_times()
        write_json(self.dir / "machine.json", {
            "wall_s": hostclock.host_seconds() - host0,
            "wall_resolution_s": 1.0 if hostclock.virtual() else 1e-6,
            "emulation_s": time.monotonic() - guest0,
            "cpu_busy_fraction": (busy1 - busy0) / (total1 - total0) if total1 > total0 else None,
            "note": "the instrumented block of the point (traffic and counters); emulation_s is "
                    "this kernel's clock (x 1/D = paper time), manifest.json names it; "
                    "cpu_busy_fraction from /proc/stat"})

    def _record_optical(self, emu: Any) -> None:
        """Optical fabric of ``emu`` (if any): per-port switch counters into
        optical_ports.csv, the fidelity monitor into fidelity.json, and a warning when
        the p99 lateness is not small (> 10 %) against tau of the largest frame."""
        fabric = getattr(emu, "optical", None)
        if fabric is None:
            return
        self.optical_counters = fabric.counters()
        self.write_csv("optical_ports.csv", self.optical_counters)
        mon = fabric.monitor()
        tau = fabric.ref_tau_ns()
        mon.update({"ref_tau_ns": tau, "ref_frame_bytes": fabric.max_frame_bytes(), "tdf": self.tdf.factor,
                    "p99_over_tau": mon["p99_ns"] / tau if tau else None})
        write_json(self.dir / "fidelity.json", mon)
        if tau and mon["p99_ns"] > 0.1 * tau:
            log.warning("%s: p99 emulation lateness %.3g us is %.0f%% of tau (%.3g us); raise --tdf",
                        self.point.id, mon["p99_ns"] / 1e3, 100 * mon["p99_ns"] / tau, tau / 1e3)
            self.progress(f"warning: p99 lateness {mon['p99_ns'] / 1e3:.3g} us is not small against "
                          f"tau {tau / 1e3:.3g} us; raise --tdf")


#: the declarations of :func:`emulation_columns` (families list them in their metrics)
EMULATION_METRICS = (
    Metric("lateness_p99_s", "s", "99th percentile of the fabric's release lateness (paper time)"),
    Metric("lateness_max_s", "s", "largest release lateness (paper time)"),
    Metric("paper_s_per_wall_s", "1", "emulated paper seconds per wall-clock second of the traffic"),
)


def read_point_json(point_dir: Path, name: str) -> dict[str, Any]:
    """A point file written by :meth:`PointContext.instruments` (``machine.json``,
    ``fidelity.json``) as a dict; {} when it is absent."""
    import json

    path = point_dir / name
    return json.loads(path.read_text()) if path.exists() else {}


def emulation_columns(point_dir: Path, tdf: TimeDilation) -> dict[str, float]:
    """The summary columns of :data:`EMULATION_METRICS` for the point in ``point_dir``,
    in paper units: lateness from fidelity.json (NaN when the monitor saw no packet or
    there is no fabric), speed from machine.json (NaN without it)."""
    mon, machine = read_point_json(point_dir, "fidelity.json"), read_point_json(point_dir, "machine.json")
    nan = float("nan")
    seen = bool(mon.get("packets"))
    wall, emu_s = machine.get("wall_s"), machine.get("emulation_s")
    return {"lateness_p99_s": tdf.time_to_paper(mon["p99_ns"] / 1e9) if seen else nan,
            "lateness_max_s": tdf.time_to_paper(mon["max_ns"] / 1e9) if seen else nan,
            "paper_s_per_wall_s": tdf.time_to_paper(emu_s) / wall if wall and emu_s else nan}


def cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat (idle and iowait
    are not busy)."""
    fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal (guest time is in user)
    return total - fields[3] - fields[4], total
