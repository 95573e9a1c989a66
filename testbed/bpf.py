"""eBPF data-plane programs: locate the built objects and drive the `tbload` loader.

The objects and the loader are built by ``make -C ebpf`` (part of ``make setup``)
into the ``ebpf/`` directory of the repository. The loader is generic (load with
rodata, tc attach, map update/lookup/dump, BPF_PROG_TEST_RUN; keys, values and
packets as hex): every struct layout lives in Python, here for ``portstat`` and in
:mod:`testbed.optical.layout` for ``optswitch``, and tests/unit/test_btf_layout.py
checks them against the objects' BTF. :class:`Batch` gathers the operations of one
step into one loader process (each start costs ~0.3 s under software emulation);
the loader gets them on stdin, never through a shell.

Pins: every run keeps its BPF maps and programs under one pin directory below
:data:`PIN_ROOT` (``DIR/maps/<map>``, ``DIR/progs/<load>/<program>``, where
``<load>`` is ``<dev>-<dir>`` for portstat and ``node<id>`` for optswitch, ``node<id>-r<n>``
for its n-th reload, :func:`reload_nodes`). Maps
are shared by every load of the run through their pins. Removing the pin directory
(and the devices the programs are attached to) frees everything.

Network namespaces: the loader switches only its network namespace (``tbload
--netns``). ``ip netns exec`` is not used because it remounts ``/sys`` in a private
mount namespace, which hides the host's bpffs and thus every pin.

Ledger: a pin directory is recorded (resource ``bpf-pin``) before the loader creates
it; this module registers the teardown that removes it (``testbed clean`` too).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import socket
import struct
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from testbed import hostclock
from testbed.errors import CommandError, TestbedError
from testbed.ledger import Entry, Ledger, register

#: ``ebpf/`` of the repository (objects, loader).
EBPF_DIR = Path(__file__).resolve().parent.parent / "ebpf"
#: Mount point of the BPF filesystem.
BPFFS = Path("/sys/fs/bpf")
#: Every pin directory of the testbed lives below this directory.
PIN_ROOT = BPFFS / "optical-tcp-testbed"
#: The ledger resource of a pin directory (attribute ``path``).
PIN_RESOURCE = "bpf-pin"
#: Name of the counters map of ``portstat.bpf.o``.
PORTSTAT_MAP = "port_counters"
#: Values of ``portstat_key.dir`` / ``tb_direction`` (mirror ``ebpf/portstat.h``).
DIRECTIONS = {"ingress": 0, "egress": 1}
#: struct portstat_key (node, port, dir, pad) and struct portstat_value of ebpf/portstat.h
PORTSTAT_KEY = struct.Struct("<IHBB")
PORTSTAT_VALUE = struct.Struct("<4Q")
#: members of struct portstat_value, in order
PORTSTAT_VALUE_FIELDS = ("packets", "bytes", "first_ns", "last_ns")

#: struct __sk_buff (uapi, a stable ABI) as the BPF_PROG_TEST_RUN context of a tc
#: program: its size and the byte offsets of cb[0] and tstamp.
SKB_CTX_SIZE = 192
SKB_CB_OFFSET = 48
SKB_TSTAMP_OFFSET = 152
#: Largest frame BPF_PROG_TEST_RUN takes for a tc program here (no jumbo frames).
TEST_RUN_FRAME_MAX = 1514
#: Smallest synthesised frame: Ethernet + IPv4 + UDP headers.
UDP_FRAME_MIN = 14 + 20 + 8

#: Seconds a single loader invocation may take (per program load in a batch). optswitch's
#: egress program took the guest's 6.1 verifier 41 s under TCG beside two other guests
#: on 2 cores (2026-12-02, 1024 occupancy slots; docs/environment.md): 180 s leaves room
#: for a slower machine and still ends a hung loader.
LOADER_TIMEOUT_S = 180.0

_DEV_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:@-]{0,14}$")
_NETNS_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}$")


class BpfError(TestbedError):
    """A BPF object or the loader is missing, or a BPF argument or pin path is invalid."""


def loader_path() -> Path:
    """Return the path of the ``tbload`` loader; raise BpfError if it is not built."""
    return _require(EBPF_DIR / "tbload")


def object_path(name: str) -> Path:
    """Return the path of the built object ``ebpf/<name>.bpf.o``.

    Raises BpfError (telling the user to run ``make setup``) if it is not built.
    """
    return _require(EBPF_DIR / f"{name}.bpf.o")


def _require(path: Path) -> Path:
    if not path.exists():
        raise BpfError(
            f"{path} is missing: the eBPF programs are not built; run `make setup` "
            f"(or `make -C {EBPF_DIR}`)"
        )
    return path


def bpffs_mounted() -> bool:
    """True if a bpf filesystem is mounted at :data:`BPFFS` (per /proc/mounts)."""
    try:
        with open("/proc/mounts", encoding="utf-8") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 3 and fields[1] == str(BPFFS) and fields[2] == "bpf":
                    return True
    except OSError:
        return False
    return False


def ensure_bpffs() -> None:
    """Mount bpffs at :data:`BPFFS` unless it is mounted already.

    Raises CommandError if ``mount`` fails (e.g. not root).
    """
    if bpffs_mounted():
        return
    argv = ["mount", "-t", "bpf", "bpf", str(BPFFS)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise CommandError(argv, proc.returncode, proc.stderr)


def check_pin_dir(path: Path | str) -> Path:
    """Return ``path`` normalised if it lies strictly below :data:`PIN_ROOT`.

    Raises BpfError otherwise (relative paths, ``..`` escapes, PIN_ROOT itself).
    """
    p = Path(os.path.normpath(str(path)))
    if not p.is_absolute() or p == PIN_ROOT or PIN_ROOT not in p.parents:
        raise BpfError(f"pin directory {str(path)!r} is not below {PIN_ROOT}/")
    return p


def remove_pin_dir(path: Path | str) -> None:
    """Remove a pin directory and every pin in it (idempotent: a missing dir is fine).

    Unpinning drops the maps and programs unless something else still holds them
    (an attached program lives until its device or tc filter goes).
    Raises BpfError if ``path`` is not below :data:`PIN_ROOT`.
    """
    p = check_pin_dir(path)
    if p.is_symlink() or p.is_file():
        p.unlink()
    elif p.exists():
        shutil.rmtree(p)


def record_pin_dir(ledger: Any, pin_dir: Path) -> None:
    """Record ``pin_dir`` in ``ledger`` unless a live entry (not torn down yet) already
    records it (None: record nothing). A pin dir torn down with an emulation and
    created again later in the same run (a fabric rebuilt after a failed point) is
    recorded again, so the new emulation's teardown removes it too."""
    if ledger is None:
        return
    live = ledger.live() if hasattr(ledger, "live") else []
    if not any(e.resource == PIN_RESOURCE and e.attrs.get("path") == str(pin_dir) for e in live):
        ledger.add(PIN_RESOURCE, path=str(pin_dir))


def _remove_recorded_pin_dir(entry: Entry, ledger: Ledger) -> None:
    """Teardown of a ``bpf-pin`` entry: :func:`remove_pin_dir` of its ``path`` (BpfError
    for a path not below :data:`PIN_ROOT`; a directory already gone is fine)."""
    remove_pin_dir(entry.attrs["path"])


register(PIN_RESOURCE, _remove_recorded_pin_dir)


def _check_ids(node_id: int, port_id: int, direction: str) -> None:
    if not isinstance(node_id, int) or not 0 <= node_id < 2**32:
        raise BpfError(f"node_id {node_id!r} is not an integer in 0..{2**32 - 1}")
    if not isinstance(port_id, int) or not 0 <= port_id < 2**16:
        raise BpfError(f"port_id {port_id!r} is not an integer in 0..{2**16 - 1}")
    if direction not in DIRECTIONS:
        raise BpfError(f"direction {direction!r} is not one of {sorted(DIRECTIONS)}")


def _portstat_rodata(node_id: int, port_id: int, direction: str) -> dict[str, int]:
    """The ``const volatile`` variables of portstat.bpf.c for one port."""
    return {"tb_node_id": node_id, "tb_port_id": port_id, "tb_direction": DIRECTIONS[direction]}


def _run_loader(args: list[str], input: str | None = None, timeout_s: float = LOADER_TIMEOUT_S) -> str:
    """Run ``tbload ARGS`` (with ``input`` on stdin); return stdout. Raise CommandError
    on failure or after ``timeout_s`` seconds."""
    argv = [str(loader_path()), *args]
    try:
        proc = hostclock.run(argv, timeout=timeout_s, input=input)
    except subprocess.TimeoutExpired as e:
        raise CommandError(argv, -1, f"timed out after {timeout_s:g} s") from e
    if proc.returncode != 0:
        raise CommandError(argv, proc.returncode, proc.stderr)
    return proc.stdout


def _netns_field(netns: str | None) -> str:
    """The loader's NETNS field (``-`` for the current namespace); BpfError if malformed."""
    if netns is None:
        return "-"
    if not (netns.startswith("/") or _NETNS_NAME_RE.match(netns)):
        raise BpfError(f"network namespace {netns!r} is neither a name nor an absolute path")
    return netns


def _check_dev(dev: str) -> None:
    if not isinstance(dev, str) or not _DEV_RE.match(dev):
        raise BpfError(f"device name {dev!r} is not a valid interface name")


def _prepare(ledger: Any, pin: Path) -> None:
    """Before a loader call that pins: the loader exists, bpffs is mounted, the pin
    dir is in the ledger (before it is created)."""
    loader_path()
    ensure_bpffs()
    record_pin_dir(ledger, pin)


class Batch:
    """Loader operations run in order by one ``tbload batch`` process (:meth:`run`).

    Each loader process costs ~0.3 s under software emulation, so a step gathers its
    operations into one batch. A ``prog`` is ``"@NAME"`` (program NAME of the batch's
    latest :meth:`load`) or the path of a pinned program; a map is its pin path.
    Methods raise BpfError for a field the loader cannot take (empty, TAB, newline).
    """

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._ops: list[str] = []
        self._last_run: tuple[bytes | None, bytes | None] | None = None

    def __len__(self) -> int:
        return len(self._ops)

    def _add(self, *fields: str) -> "Batch":
        for f in fields:
            if not f or "\t" in f or "\n" in f:
                raise BpfError(f"loader field {f!r} of {fields[0]} is empty or holds a TAB or newline")
        self._lines.append("\t".join(fields) + "\n")
        self._ops.append(fields[0])
        return self

    def load(self, obj: Path, pin_dir: Path, *, prog_dir: Path | None = None,
             rodata: dict[str, int] | None = None) -> "Batch":
        """Load ``obj`` with ``rodata`` set, its maps pinned (or reused) at
        ``pin_dir/maps/<map>``; with ``prog_dir`` (which must not exist yet) its
        programs pinned at ``prog_dir/<program>``. Result: the loader's JSON."""
        sets = [f"{k}={int(v)}" for k, v in (rodata or {}).items()]
        return self._add("load", str(obj), str(pin_dir), str(prog_dir) if prog_dir else "-", *sets)

    def maps(self, obj: Path, pin_dir: Path) -> "Batch":
        """Create (or reuse) ``obj``'s maps pinned at ``pin_dir/maps/<map>`` without
        loading any program (nothing is verified: a fraction of a load's cost, which is
        seconds per program under software emulation). ``@NAME`` still names the
        latest :meth:`load`'s programs. Result: the loader's JSON (``maps``: the
        names)."""
        return self._add("maps", str(obj), str(pin_dir))

    def attach(self, netns: str | None, dev: str, direction: str, prog: str) -> "Batch":
        """Attach ``prog`` to tc ``direction`` (ingress/egress) of ``dev`` in ``netns``
        (a name in /run/netns, a path, or None for the current one). Result: ``dev``,
        ``dir``, ``prog_id``, ``handle``, ``priority``, ``ifindex``, ``prog_pin``."""
        _check_dev(dev)
        if direction not in DIRECTIONS:
            raise BpfError(f"direction {direction!r} is not one of {sorted(DIRECTIONS)}")
        return self._add("attach", _netns_field(netns), dev, direction, prog)

    def detach(self, netns: str | None, dev: str, direction: str, handle: int, priority: int) -> "Batch":
        """Remove the tc filter ``handle``/``priority`` (an :meth:`attach` result's) from
        ``direction`` of ``dev`` in ``netns``. Result: ``dev``, ``dir``, ``ifindex``."""
        _check_dev(dev)
        if direction not in DIRECTIONS:
            raise BpfError(f"direction {direction!r} is not one of {sorted(DIRECTIONS)}")
        for name, v in (("handle", handle), ("priority", priority)):
            if isinstance(v, bool) or not isinstance(v, int) or not 0 < v < 2**32:
                raise BpfError(f"{name} {v!r} is not an integer in 1..{2**32 - 1}")
        return self._add("detach", _netns_field(netns), dev, direction, str(handle), str(priority))

    def update(self, map_pin: Path, key: bytes, value: bytes) -> "Batch":
        """Write one entry. Result: None."""
        return self._add("update", str(map_pin), key.hex(), value.hex())

    def lookup(self, map_pin: Path, key: bytes) -> "Batch":
        """Read one entry. Result: the value's bytes, None if the key is absent."""
        return self._add("lookup", str(map_pin), key.hex())

    def dump(self, map_pin: Path) -> "Batch":
        """Read every entry. Result: [(key bytes, value bytes), ...]."""
        return self._add("dump", str(map_pin))

    def test_run(self, prog: str, *, data: bytes | None, ctx: bytes | None = None,
                 repeat: int = 1) -> "Batch":
        """BPF_PROG_TEST_RUN of ``prog`` on ``data`` (a frame for tc programs) with the
        context ``ctx``, ``repeat`` times. Result: ``retval``, ``duration_ns`` (mean per
        run), ``data_len``, ``repeat``, ``ctx_out`` (hex, None without ``ctx``)."""
        if not isinstance(repeat, int) or isinstance(repeat, bool) or not 1 <= repeat < 2**32:
            raise BpfError(f"repeat {repeat!r} is not an integer in 1..{2**32 - 1}")
        last = self._last_run

        def field(blob: bytes | None, i: int) -> str:
            if blob is None:
                return "-"
            return "=" if last is not None and last[i] == blob else blob.hex()

        self._add("test-run", prog, str(repeat), field(data, 0), field(ctx, 1))
        self._last_run = (data, ctx)
        return self

    def run(self) -> list[Any]:
        """Run every operation in one loader process; one result per operation.

        Raises CommandError if the loader fails (its stderr names the line, the operation
        and the step; operations before it stay done) or times out; BpfError if its
        output does not match the operations.
        """
        if not self._ops:
            return []
        # each load verifies its programs (seconds under software emulation, more on a
        # loaded host): the loader gets LOADER_TIMEOUT_S per load, as one load per
        # process had before batching
        loads = self._ops.count("load")
        out = _run_loader(["batch"], input="".join(self._lines), timeout_s=LOADER_TIMEOUT_S * max(1, loads))
        return _results(self._ops, out.splitlines())


def _results(ops: list[str], lines: list[str]) -> list[Any]:
    """Pair the loader's output lines with the operations that printed them."""
    it = iter(lines)
    out: list[Any] = []
    try:
        for op in ops:
            if op == "update":
                out.append(None)
            elif op == "dump":
                rows = []
                for line in it:
                    if line.startswith("{"):
                        break
                    k, v = line.split()
                    rows.append((bytes.fromhex(k), bytes.fromhex(v)))
                else:
                    raise ValueError("dump output ended without its count")
                out.append(rows)
            elif op == "lookup":
                _k, v = next(it).split()
                out.append(None if v == "-" else bytes.fromhex(v))
            else:
                out.append(json.loads(next(it)))
    except (StopIteration, ValueError) as e:
        raise BpfError(f"tbload output does not match its {len(ops)} operations ({e}): "
                       f"{lines[:4]!r}") from None
    return out


@functools.lru_cache(maxsize=64)
def udp_frame(length: int, dst: str = "10.0.0.2") -> bytes:
    """An Ethernet + IPv4 + UDP frame of exactly ``length`` bytes, 10.0.0.1:5001 ->
    ``dst``:5002 (header checksum set, payload byte i = i mod 256).

    Raises BpfError unless UDP_FRAME_MIN <= length <= 65535 and ``dst`` is an IPv4
    address.
    """
    if not isinstance(length, int) or not UDP_FRAME_MIN <= length <= 65535:
        raise BpfError(f"frame length {length!r}: a synthesised Ethernet+IPv4+UDP frame needs "
                       f"{UDP_FRAME_MIN}..65535 bytes")
    try:
        dst_ip = socket.inet_aton(dst)
    except OSError:
        raise BpfError(f"destination {dst!r} is not an IPv4 address") from None
    eth = bytes.fromhex("020000000002" "020000000001" "0800")
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, length - 14, 0, 0x4000, 64, 17, 0,
                               bytes([10, 0, 0, 1]), dst_ip))
    csum = sum(struct.unpack("!10H", ip))
    while csum >> 16:
        csum = (csum & 0xFFFF) + (csum >> 16)
    ip[10:12] = struct.pack("!H", ~csum & 0xFFFF)
    udp = struct.pack("!HHHH", 5001, 5002, length - 34, 0)
    return eth + bytes(ip) + udp + _PAYLOAD[UDP_FRAME_MIN:length]


_PAYLOAD = bytes(range(256)) * 256  # byte i = i mod 256, 64 KiB


class PortstatPort(NamedTuple):
    """One port to count: namespace (None: current), device, "ingress"/"egress", and the
    node and port ids the counters are keyed by (never the ifindex)."""

    netns: str | None
    dev: str
    direction: str
    node_id: int
    port_id: int


def attach_portstat(
    ledger: Any,
    *,
    netns: str | None,
    dev: str,
    direction: str,
    node_id: int,
    port_id: int,
    pin_dir: Path,
) -> dict:
    """Attach ``portstat`` to tc ``direction`` of ``dev`` and count into the run's map.

    ``netns`` is a named network namespace (``/run/netns/NAME``) or a namespace file
    path (e.g. ``/proc/PID/ns/net`` of a Mininet node); None means the current one.
    ``direction`` is ``"ingress"`` or ``"egress"``; ``node_id`` (u32) and ``port_id``
    (u16) identify the port in the counters (never the ifindex). The counters map is
    pinned at ``pin_dir/maps/port_counters`` and shared with every other attachment
    using the same ``pin_dir``; the program at ``pin_dir/progs/<dev>-<dir>/portstat``.

    The pin dir is recorded in ``ledger`` (``ledger.add(PIN_RESOURCE, path=...)``, once
    per pin dir) before anything is created; ``ledger`` None records nothing.

    Returns the loader's JSON: ``prog_id``, ``handle``, ``priority``, ``ifindex``,
    ``prog_pin`` (and ``dev``, ``dir``).
    Raises BpfError for invalid arguments, a pin dir outside :data:`PIN_ROOT` or
    unbuilt objects; CommandError if mounting bpffs or the loader fails (its stderr
    names the failing step: missing device, verifier, pinning, tc attach, ...).
    """
    return attach_portstats(ledger, pin_dir, [PortstatPort(netns, dev, direction, node_id, port_id)])[0]


def attach_portstats(ledger: Any, pin_dir: Path, ports: list[PortstatPort]) -> list[dict]:
    """:func:`attach_portstat` for every port of ``ports`` in one loader process.

    Every port is checked before anything is created. Returns one dict per port, in
    order. Raises like :func:`attach_portstat`; after a loader failure the ports before
    the failing one stay attached (the pin dir is in the ledger).
    """
    pin = check_pin_dir(pin_dir)
    for p in ports:
        _check_ids(p.node_id, p.port_id, p.direction)
        _check_dev(p.dev)
        _netns_field(p.netns)
    batch = Batch()
    obj = object_path("portstat")
    for p in ports:
        batch.load(obj, pin, prog_dir=pin / "progs" / f"{p.dev}-{p.direction}",
                   rodata=_portstat_rodata(p.node_id, p.port_id, p.direction))
        batch.attach(p.netns, p.dev, p.direction, "@portstat")
    _prepare(ledger, pin)
    return [r for r in batch.run() if r["op"] == "attach"]


def parse_port_counter(key: bytes, value: bytes) -> dict:
    """One port_counters entry as ``node``, ``port``, ``dir``, ``direction``,
    ``packets``, ``bytes``, ``first_ns``, ``last_ns``. Raises struct.error for bytes of
    the wrong size."""
    node, port, d, _pad = PORTSTAT_KEY.unpack(key)
    names = {v: k for k, v in DIRECTIONS.items()}
    return {"node": node, "port": port, "dir": d, "direction": names.get(d, "unknown"),
            **dict(zip(PORTSTAT_VALUE_FIELDS, PORTSTAT_VALUE.unpack(value)))}


def read_port_counters(pin_dir: Path) -> list[dict]:
    """Return every entry of the run's portstat counters map, sorted by key.

    Each dict has ``node``, ``port``, ``dir`` (0/1), ``direction`` ("ingress" /
    "egress"), ``packets``, ``bytes`` (skb->len summed, L2 header included),
    ``first_ns`` and ``last_ns`` (CLOCK_MONOTONIC ns of the first and a latest packet).
    Returns [] if no portstat map was pinned in ``pin_dir`` yet.
    Raises BpfError for a pin dir outside :data:`PIN_ROOT` or a missing loader;
    CommandError if the loader cannot read the map.
    """
    pin = check_pin_dir(pin_dir)
    map_path = pin / "maps" / PORTSTAT_MAP
    if not map_path.exists():
        return []
    (entries,) = Batch().dump(map_path).run()
    rows = [parse_port_counter(k, v) for k, v in entries]
    rows.sort(key=lambda r: (r["node"], r["port"], r["dir"]))
    return rows


def prog_test_run(name: str, prog: str, pin_dir: Path, *, rodata: dict[str, int], data: bytes,
                  ctx: bytes | None = None, repeat: int = 1, runs: int = 1,
                  ledger: Any = None) -> list[dict]:
    """Load ``ebpf/<name>.bpf.o`` with ``rodata`` (maps pinned or reused in ``pin_dir``)
    and run its program ``prog`` ``runs`` times through BPF_PROG_TEST_RUN, each run
    ``repeat`` times on ``data`` (and context ``ctx``), all in one loader process.

    Returns one dict per run: ``retval``, ``duration_ns`` (mean per repetition),
    ``data_len``, ``repeat``, ``ctx_out``. Raises BpfError for invalid arguments or
    unbuilt objects; CommandError if the loader fails.
    """
    pin = check_pin_dir(pin_dir)
    obj = object_path(name)
    batch = Batch().load(obj, pin, rodata=rodata)
    for _ in range(runs):
        batch.test_run(f"@{prog}", data=data, ctx=ctx, repeat=repeat)
    _prepare(ledger, pin)
    return batch.run()[1:]


def test_run(
    *,
    node_id: int,
    port_id: int,
    direction: str,
    pin_dir: Path,
    packet: bytes | int,
    repeat: int = 1,
    ledger: Any = None,
) -> dict:
    """Load ``portstat`` (no attachment) and run it through BPF_PROG_TEST_RUN.

    ``packet`` is the raw frame (bytes, Ethernet header first, >= 14 bytes) or a
    length in bytes of a synthesised Ethernet+IPv4+UDP frame (>= 42, see
    :func:`udp_frame`). The program runs ``repeat`` times on it and counts into
    ``pin_dir/maps/port_counters`` like an attached program. The kernel accepts frames
    up to about 3.7 KiB.

    Returns ``retval`` (the tc verdict, 0 = TC_ACT_OK), ``duration_ns`` (mean per
    run), ``packet_len`` (bytes) and ``repeat``.
    Raises BpfError for invalid arguments or unbuilt objects; CommandError if the
    loader fails.
    """
    _check_ids(node_id, port_id, direction)
    if not isinstance(repeat, int) or repeat < 1:
        raise BpfError(f"repeat {repeat!r} is not an integer >= 1")
    check_pin_dir(pin_dir)
    object_path("portstat")
    if isinstance(packet, (bytes, bytearray)):
        if not 14 <= len(packet) <= 65535:
            raise BpfError(f"packet of {len(packet)} bytes: a frame needs 14..65535 bytes")
        frame = bytes(packet)
    elif isinstance(packet, int) and not isinstance(packet, bool):
        frame = udp_frame(packet)
    else:
        raise BpfError(f"packet must be bytes or a length, not {type(packet).__name__}")
    (res,) = prog_test_run("portstat", "portstat", pin_dir, rodata=_portstat_rodata(node_id, port_id, direction),
                           data=frame, repeat=repeat, ledger=ledger)
    return {"retval": res["retval"], "duration_ns": res["duration_ns"], "packet_len": res["data_len"],
            "repeat": res["repeat"]}


# ---- optswitch (ebpf/optswitch.bpf.c): the optical switch / host NIC port model ----

#: Object name of the optical switch programs and their program names.
OPTSWITCH = "optswitch"
OPTSW_INGRESS = "optsw_ingress"
OPTSW_EGRESS = "optsw_egress"
#: Map names of optswitch.bpf.o (pinned at DIR/maps/<name>).
OPTSW_MAPS = ("optsw_cfg", "optsw_state", "optsw_ifport", "optsw_routes", "optsw_hook",
              "optsw_monitor", "optsw_xcp_acc", "optsw_xcp_cfg", "optsw_xcp_class")


def _check_node(node_id: int) -> None:
    from testbed.optical.layout import MAX_NODES

    if not isinstance(node_id, int) or not 0 <= node_id < MAX_NODES:
        raise BpfError(f"node_id {node_id!r} is not an integer in 0..{MAX_NODES - 1}")


def _optsw_rodata(node_id: int, *, is_switch: bool, test_mode: bool, reads_waiting: bool = False) -> dict[str, int]:
    """The ``const volatile`` variables of optswitch.bpf.c for one node (``reads_waiting``:
    its architecture's, :attr:`testbed.optical.architectures.Architecture.reads_waiting`;
    a node loaded without it drops an ob/sb/wcsb packet that finds its output busy and
    counts it unmodelled)."""
    return {"tb_node_id": node_id, "tb_is_switch": int(is_switch), "tb_test_mode": int(test_mode),
            "tb_reads_waiting": int(reads_waiting)}


def optswitch_load(pin_dir: Path, *, ledger: Any = None) -> None:
    """Create (or reuse) and pin the optswitch maps under ``pin_dir/maps`` without
    loading or attaching a program (:meth:`Batch.maps`), so they can be configured
    before the first packet; the programs are verified when a later load
    (:func:`attach_nodes`, :func:`trace_run`) loads them.

    Raises BpfError / CommandError like :func:`attach_portstat`.
    """
    pin = check_pin_dir(pin_dir)
    obj = object_path(OPTSWITCH)
    _prepare(ledger, pin)
    Batch().maps(obj, pin).run()


def map_update(pin_dir: Path, name: str, entries: list[tuple[bytes, bytes]]) -> int:
    """Write ``entries`` (key bytes, value bytes) into the pinned map ``name``.

    Returns the number of entries written; raises CommandError if the loader rejects a
    size or the kernel an update (the message names the map and the line).
    """
    return map_updates(pin_dir, {name: entries})


def map_updates(pin_dir: Path, maps: Mapping[str, list[tuple[bytes, bytes]]]) -> int:
    """:func:`map_update` of several pinned maps, in the order given, by one loader
    process (one costs ~0.3-3 s under software emulation). Returns the number of
    entries written; raises CommandError as :func:`map_update` does."""
    pin = check_pin_dir(pin_dir)
    batch = Batch()
    for name, entries in maps.items():
        for k, v in entries:
            batch.update(pin / "maps" / name, k, v)
    if len(batch):
        batch.run()
    return len(batch)


def map_dump(pin_dir: Path, name: str, keys: list[bytes] | None = None) -> list[tuple[bytes, bytes]]:
    """The (key, value) pairs of the pinned map ``name``: every entry, or only those of
    ``keys`` (absent keys are left out, so are the rows of a map that is not pinned).

    Listing the keys matters for big arrays: all of ``optsw_state`` is several MB of hex,
    seconds to print and parse under TCG, when a run uses a few of its 512 nodes.
    Raises CommandError if the loader rejects a key's size.
    """
    pin = check_pin_dir(pin_dir)
    path = pin / "maps" / name
    if not path.exists() or keys == []:
        return []
    if keys is None:
        (rows,) = Batch().dump(path).run()
        return rows
    batch = Batch()
    for k in keys:
        batch.lookup(path, k)
    return [(k, v) for k, v in zip(keys, batch.run()) if v is not None]


class NodeAttachment(NamedTuple):
    """One optswitch node to attach: its id, namespace (None: current), devices,
    whether it is a switch (False: a host, whose ingress only monitors) and whether its
    architecture's decision reads what waits in it (``reads_waiting``, see
    :func:`_optsw_rodata`)."""

    node_id: int
    netns: str | None
    devs: list[str]
    is_switch: bool
    reads_waiting: bool = False


def attach_node(
    ledger: Any,
    *,
    netns: str | None,
    node_id: int,
    devs: list[str],
    pin_dir: Path,
    is_switch: bool,
) -> list[dict]:
    """Load optswitch once for node ``node_id`` and attach its ingress and egress
    programs to every device in ``devs`` (in namespace ``netns``, see
    :func:`attach_portstat`). Maps are shared through ``pin_dir``; the programs are
    pinned at ``pin_dir/progs/node<id>/``; the pin dir is recorded in ``ledger`` before
    anything is created. The programs go with the devices.

    Returns one dict per attachment: ``dev``, ``dir``, ``prog_id``, ``handle``,
    ``priority``, ``ifindex``, ``prog_pin``.
    """
    return attach_nodes(ledger, pin_dir, [NodeAttachment(node_id, netns, devs, is_switch)])[0]


def attach_nodes(ledger: Any, pin_dir: Path, nodes: list[NodeAttachment]) -> list[list[dict]]:
    """:func:`attach_node` for every node of ``nodes`` in one loader process (one load
    per node, whose rodata carries the node id). Every node is checked before anything
    is created. Returns the attachments of each node, in order.
    """
    pin = check_pin_dir(pin_dir)
    for n in nodes:
        _check_node(n.node_id)
        if not n.devs:
            raise BpfError(f"node {n.node_id}: attach_node needs at least one device")
        for dev in n.devs:
            _check_dev(dev)
        _netns_field(n.netns)
    obj = object_path(OPTSWITCH)
    batch = Batch()
    for n in nodes:
        batch.load(obj, pin, prog_dir=pin / "progs" / f"node{n.node_id}",
                   rodata=_optsw_rodata(n.node_id, is_switch=n.is_switch, test_mode=False,
                                        reads_waiting=n.reads_waiting))
        for dev in n.devs:
            batch.attach(n.netns, dev, "ingress", f"@{OPTSW_INGRESS}")
            batch.attach(n.netns, dev, "egress", f"@{OPTSW_EGRESS}")
    _prepare(ledger, pin)
    return _attachments_per_load(batch.run())


def _attachments_per_load(results: list[Any]) -> list[list[dict]]:
    """The attach results of a batch of loads each followed by its attaches, grouped
    per load."""
    out: list[list[dict]] = []
    for r in results:
        if r["op"] == "load":
            out.append([])
        else:
            out[-1].append(r)
    return out


def reload_nodes(ledger: Any, pin_dir: Path, nodes: list[tuple[NodeAttachment, list[dict]]],
                 generation: int) -> list[list[dict]]:
    """Load optswitch anew for each (node, its current attachments) of ``nodes``, with
    the node's rodata (e.g. ``reads_waiting`` after a change of architecture), and swap
    its programs on every device of those attachments (rows of :func:`attach_nodes` or
    of an earlier reload): the new program attached first, which tc runs before the old
    (a filter added without a priority gets one below the chain's first), then the old
    detached, so no packet passes the device unmodelled. The programs are pinned at
    ``pin_dir/progs/node<id>-r<generation>/`` (``generation``: > 0, unique per reload of
    the node). One loader process for all. Returns the new attachments of each node, in
    order. Raises BpfError for a node without attachments, a bad generation, or when tc
    ordered the new filter after the old (the old is then left attached: the loader's
    rows say which)."""
    pin = check_pin_dir(pin_dir)
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < 1:
        raise BpfError(f"generation {generation!r} is not an integer >= 1")
    obj = object_path(OPTSWITCH)
    batch = Batch()
    for n, old in nodes:
        _check_node(n.node_id)
        if not old:
            raise BpfError(f"node {n.node_id}: nothing attached to reload")
        batch.load(obj, pin, prog_dir=pin / "progs" / f"node{n.node_id}-r{generation}",
                   rodata=_optsw_rodata(n.node_id, is_switch=n.is_switch, test_mode=False,
                                        reads_waiting=n.reads_waiting))
        for r in old:
            batch.attach(n.netns, r["dev"], r["dir"], f"@{OPTSW_INGRESS if r['dir'] == 'ingress' else OPTSW_EGRESS}")
    _prepare(ledger, pin)
    attached = _attachments_per_load(batch.run())
    detach = Batch()
    for (n, old), new in zip(nodes, attached):
        for o, w in zip(old, new):
            if w["priority"] >= o["priority"]:
                raise BpfError(f"node {n.node_id}: tc put the reloaded program on {o['dev']} {o['dir']} at "
                               f"priority {w['priority']}, not before the old one's {o['priority']}")
            detach.detach(n.netns, o["dev"], o["dir"], o["handle"], o["priority"])
    detach.run()
    return attached


def trace_run(pin_dir: Path, node_id: int, packets: list[tuple[str, int, int, int, int, str]],
              *, is_switch: bool = True, reads_waiting: bool = False, ledger: Any = None) -> list[dict]:
    """Run optswitch in test mode over a packet trace with injected time (``is_switch``,
    ``reads_waiting``: the node's rodata, :func:`_optsw_rodata`).

    Each packet is (program, now_ns, length, port, rand, dst IPv4): ``program`` is
    ``optsw_ingress`` or ``optsw_egress``; ``now_ns`` the time it reaches the program;
    ``length`` the wire length the model uses (the frame itself is at most 1514 bytes,
    BPF_PROG_TEST_RUN takes no jumbo frames); ``port`` the output (egress) or input
    (ingress) port; ``rand`` the ECMP random number. Before each packet the optsw_hook
    map gets (time, length, port, rand). One load serves the whole trace, one loader
    process runs it; maps (configuration, state) are those pinned in ``pin_dir``.

    Returns per packet ``retval`` (tc verdict: 0 ok, 2 shot, 7 redirect), ``cb0``
    (egress: decision CUT/BUFFER/DROP/NOCFG; ingress: chosen output port) and
    ``tstamp`` (egress: the stamped arrival time at the next node).
    Raises BpfError for a bad node id, length (< 42 bytes) or address.
    """
    from testbed.optical import layout

    _check_node(node_id)
    pin = check_pin_dir(pin_dir)
    obj = object_path(OPTSWITCH)
    hook_map = pin / "maps" / "optsw_hook"
    ctx = bytes(SKB_CTX_SIZE)
    batch = Batch().load(obj, pin, rodata=_optsw_rodata(node_id, is_switch=is_switch, test_mode=True,
                                                        reads_waiting=reads_waiting))
    for prog, now, length, port, rand, dst in packets:
        batch.update(hook_map, layout.u32_key(0),
                     layout.hook_value(int(now), int(length), int(port), int(rand) & 0xFFFFFFFF))
        frame = udp_frame(min(int(length), TEST_RUN_FRAME_MAX), dst) if int(length) >= UDP_FRAME_MIN \
            else udp_frame(int(length), dst)  # raises: too short for a frame
        batch.test_run(f"@{prog}", data=frame, ctx=ctx)
    _prepare(ledger, pin)
    rows = []
    for r in batch.run():
        if r is None or r["op"] != "test-run":
            continue
        out = bytes.fromhex(r["ctx_out"])
        rows.append({"retval": r["retval"],
                     "cb0": int.from_bytes(out[SKB_CB_OFFSET:SKB_CB_OFFSET + 4], "little"),
                     "tstamp": int.from_bytes(out[SKB_TSTAMP_OFFSET:SKB_TSTAMP_OFFSET + 8], "little")})
    if len(rows) != len(packets):
        raise BpfError(f"the loader returned {len(rows)} results for {len(packets)} packets")
    return rows


trace_run.__test__ = False  # type: ignore[attr-defined]


# pytest collects module-level callables named test_* from modules imported into a
# test file's namespace; mark this one as not a test.
test_run.__test__ = False  # type: ignore[attr-defined]
