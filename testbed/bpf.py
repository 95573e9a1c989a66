"""eBPF data-plane programs: locate the built objects and drive the `tbload` loader.

The objects and the loader are built by ``make -C ebpf`` (part of ``make setup``)
into the ``ebpf/`` directory of the repository. Everything here runs the loader as
an argument list (never through a shell).

Pins: every run keeps its BPF maps and programs under one pin directory below
:data:`PIN_ROOT` (``DIR/maps/<map>``, ``DIR/progs/<dev>-<dir>``). Maps are shared by
every attachment of the run through their pins. Removing the pin directory (and the
devices the programs are attached to) frees everything.

Network namespaces: the loader switches only its network namespace (``tbload
--netns``). ``ip netns exec`` is not used because it remounts ``/sys`` in a private
mount namespace, which hides the host's bpffs and thus every pin.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from testbed import hostclock
from testbed.errors import CommandError, TestbedError

#: ``ebpf/`` of the repository (objects, loader).
EBPF_DIR = Path(__file__).resolve().parent.parent / "ebpf"
#: Mount point of the BPF filesystem.
BPFFS = Path("/sys/fs/bpf")
#: Every pin directory of the testbed lives below this directory.
PIN_ROOT = BPFFS / "optical-tcp-testbed"
#: Name of the counters map of ``portstat.bpf.o``.
PORTSTAT_MAP = "port_counters"
#: Values of ``portstat_key.dir`` / ``tb_direction`` (mirror ``ebpf/portstat.h``).
DIRECTIONS = {"ingress": 0, "egress": 1}

#: Seconds a single loader invocation may take.
LOADER_TIMEOUT_S = 60.0

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


def _record_pin_dir(ledger: Any, pin_dir: Path) -> None:
    """Record ``pin_dir`` in the ledger once per ledger (None: record nothing)."""
    if ledger is None:
        return
    recorded = getattr(ledger, "_bpf_pin_dirs", None)
    if recorded is None:
        recorded = set()
        try:
            setattr(ledger, "_bpf_pin_dirs", recorded)
        except AttributeError:
            pass  # cannot remember: record every time (harmless duplicates)
    if str(pin_dir) in recorded:
        return
    ledger.add("bpf-pin", path=str(pin_dir))
    recorded.add(str(pin_dir))


def _check_ids(node_id: int, port_id: int, direction: str) -> None:
    if not isinstance(node_id, int) or not 0 <= node_id < 2**32:
        raise BpfError(f"node_id {node_id!r} is not an integer in 0..{2**32 - 1}")
    if not isinstance(port_id, int) or not 0 <= port_id < 2**16:
        raise BpfError(f"port_id {port_id!r} is not an integer in 0..{2**16 - 1}")
    if direction not in DIRECTIONS:
        raise BpfError(f"direction {direction!r} is not one of {sorted(DIRECTIONS)}")


def _portstat_sets(node_id: int, port_id: int, direction: str) -> list[str]:
    return [
        "--set", f"tb_node_id={node_id}",
        "--set", f"tb_port_id={port_id}",
        "--set", f"tb_direction={DIRECTIONS[direction]}",
    ]


def _run_loader(args: list[str]) -> str:
    """Run ``tbload ARGS``; return stdout. Raise CommandError on failure or timeout."""
    argv = [str(loader_path()), *args]
    try:
        proc = hostclock.run(argv, timeout=LOADER_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        raise CommandError(argv, -1, f"timed out after {LOADER_TIMEOUT_S} s") from e
    if proc.returncode != 0:
        raise CommandError(argv, proc.returncode, proc.stderr)
    return proc.stdout


def _json_line(argv_tail: list[str], out: str) -> dict:
    lines = [ln for ln in out.splitlines() if ln.strip()]
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError) as e:
        raise BpfError(f"tbload {' '.join(argv_tail[:1])} printed no JSON line: {out!r}") from e


def _netns_args(netns: str | None) -> list[str]:
    """``--netns NETNS`` for tbload (none for the root namespace); BpfError if malformed."""
    if netns is None:
        return []
    if not (netns.startswith("/") or _NETNS_NAME_RE.match(netns)):
        raise BpfError(f"network namespace {netns!r} is neither a name nor an absolute path")
    return ["--netns", netns]


def _prepare(ledger: Any, pin: Path) -> None:
    """Before a loader call that pins: the loader exists, bpffs is mounted, the pin
    dir is in the ledger (before it is created)."""
    loader_path()
    ensure_bpffs()
    _record_pin_dir(ledger, pin)


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
    using the same ``pin_dir``; the program is pinned at ``pin_dir/progs/<dev>-<dir>``.

    The pin dir is recorded in ``ledger`` (``ledger.add("bpf-pin", path=...)``, once
    per pin dir) before anything is created; ``ledger`` None records nothing.

    Returns the loader's JSON: ``prog_id``, ``handle``, ``priority``, ``ifindex``,
    ``prog_pin``.
    Raises BpfError for invalid arguments, a pin dir outside :data:`PIN_ROOT` or
    unbuilt objects; CommandError if mounting bpffs or the loader fails (its stderr
    names the failing step: missing device, verifier, pinning, tc attach, ...).
    """
    _check_ids(node_id, port_id, direction)
    if not _DEV_RE.match(dev):
        raise BpfError(f"device name {dev!r} is not a valid interface name")
    pin = check_pin_dir(pin_dir)
    args = [
        "attach", "--obj", str(object_path("portstat")), "--prog", "portstat",
        "--dev", dev, "--dir", direction, "--pin-dir", str(pin),
        *_portstat_sets(node_id, port_id, direction),
    ]
    args += _netns_args(netns)
    _prepare(ledger, pin)
    return _json_line(args, _run_loader(args))


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
    out = _run_loader(["dump-portstat", "--map", str(map_path)])
    rows = [json.loads(ln) for ln in out.splitlines() if ln.strip()]
    rows.sort(key=lambda r: (r["node"], r["port"], r["dir"]))
    return rows


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
    length in bytes of a synthesised Ethernet+IPv4+UDP frame (>= 42). The program
    runs ``repeat`` times on it and counts into ``pin_dir/maps/port_counters`` like
    an attached program. The kernel accepts frames up to about 3.7 KiB.

    Returns ``retval`` (the tc verdict, 0 = TC_ACT_OK), ``duration_ns`` (mean per
    run), ``packet_len`` (bytes) and ``repeat``.
    Raises BpfError for invalid arguments or unbuilt objects; CommandError if the
    loader fails.
    """
    _check_ids(node_id, port_id, direction)
    if not isinstance(repeat, int) or repeat < 1:
        raise BpfError(f"repeat {repeat!r} is not an integer >= 1")
    pin = check_pin_dir(pin_dir)
    obj = object_path("portstat")
    loader_path()
    ensure_bpffs()
    _record_pin_dir(ledger, pin)
    base = [
        "test-run", "--obj", str(obj), "--prog", "portstat", "--pin-dir", str(pin),
        *_portstat_sets(node_id, port_id, direction), "--repeat", str(repeat),
    ]
    if isinstance(packet, (bytes, bytearray)):
        with tempfile.NamedTemporaryFile(prefix="tbpkt-", suffix=".bin") as f:
            f.write(packet)
            f.flush()
            args = [*base, "--packet", f.name]
            return _json_line(args, _run_loader(args))
    if isinstance(packet, int) and not isinstance(packet, bool):
        args = [*base, "--packet", str(packet)]
        return _json_line(args, _run_loader(args))
    raise BpfError(f"packet must be bytes or a length, not {type(packet).__name__}")


# ---- optswitch (ebpf/optswitch.bpf.c): the optical switch / host NIC port model ----

#: Object name of the optical switch programs and their program names.
OPTSWITCH = "optswitch"
OPTSW_INGRESS = "optsw_ingress"
OPTSW_EGRESS = "optsw_egress"
#: Map names of optswitch.bpf.o (pinned at DIR/maps/<name>).
OPTSW_MAPS = ("optsw_cfg", "optsw_state", "optsw_ifport", "optsw_routes", "optsw_hook",
              "optsw_monitor")


def _check_node(node_id: int) -> None:
    from testbed.optical.layout import MAX_NODES

    if not isinstance(node_id, int) or not 0 <= node_id < MAX_NODES:
        raise BpfError(f"node_id {node_id!r} is not an integer in 0..{MAX_NODES - 1}")


def _optsw_sets(node_id: int, *, is_switch: bool, test_mode: bool) -> list[str]:
    return ["--set", f"tb_node_id={node_id}", "--set", f"tb_is_switch={int(is_switch)}",
            "--set", f"tb_test_mode={int(test_mode)}"]


def optswitch_load(pin_dir: Path, *, ledger: Any = None) -> None:
    """Create (or reuse) and pin the optswitch maps under ``pin_dir/maps`` without
    attaching anything, so they can be configured before the first packet.

    Raises BpfError / CommandError like :func:`attach_portstat`.
    """
    pin = check_pin_dir(pin_dir)
    loader_path()
    ensure_bpffs()
    _record_pin_dir(ledger, pin)
    _run_loader(["load", "--obj", str(object_path(OPTSWITCH)), "--prog", OPTSW_EGRESS,
                 "--pin-dir", str(pin)])


def map_update(pin_dir: Path, name: str, entries: list[tuple[bytes, bytes]]) -> int:
    """Write ``entries`` (key bytes, value bytes) into the pinned map ``name``.

    Returns the number of entries written; raises CommandError if the loader rejects a
    size or the kernel an update (the message names the map and the line).
    """
    pin = check_pin_dir(pin_dir)
    if not entries:
        return 0
    with tempfile.NamedTemporaryFile("w", prefix="tbmap-", suffix=".txt") as f:
        for k, v in entries:
            f.write(f"{k.hex()} {v.hex()}\n")
        f.flush()
        out = _run_loader(["map-update", "--map", str(pin / "maps" / name), "--file", f.name])
    return int(_json_line(["map-update"], out)["updated"])


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
        out = _run_loader(["map-dump", "--map", str(path)])
    else:
        with tempfile.NamedTemporaryFile("w", prefix="tbkeys-", suffix=".txt") as f:
            f.writelines(f"{k.hex()}\n" for k in keys)
            f.flush()
            out = _run_loader(["map-dump", "--map", str(path), "--file", f.name])
    rows = []
    for line in out.splitlines():
        if line.strip():
            k, v = line.split()
            rows.append((bytes.fromhex(k), bytes.fromhex(v)))
    return rows


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
    :func:`attach_portstat`). Maps are shared through ``pin_dir``; the pin dir is
    recorded in ``ledger`` before anything is created. The programs go with the devices.

    Returns one dict per attachment: ``dev``, ``dir``, ``prog_id``, ``handle``,
    ``priority``, ``ifindex``, ``prog_pin``.
    """
    _check_node(node_id)
    for dev in devs:
        if not _DEV_RE.match(dev):
            raise BpfError(f"device name {dev!r} is not a valid interface name")
    if not devs:
        raise BpfError("attach_node needs at least one device")
    pin = check_pin_dir(pin_dir)
    args = ["attach-node", "--obj", str(object_path(OPTSWITCH)), "--prog", OPTSW_INGRESS,
            "--prog2", OPTSW_EGRESS, "--pin-dir", str(pin),
            *_optsw_sets(node_id, is_switch=is_switch, test_mode=False)]
    for dev in devs:
        args += ["--dev", dev]
    args += _netns_args(netns)
    _prepare(ledger, pin)
    out = _run_loader(args)
    return [json.loads(ln) for ln in out.splitlines() if ln.strip()]


def trace_run(pin_dir: Path, node_id: int, packets: list[tuple[str, int, int, int, int, str]],
              *, is_switch: bool = True, ledger: Any = None) -> list[dict]:
    """Run optswitch in test mode over a packet trace with injected time.

    Each packet is (program, now_ns, length, port, rand, dst IPv4): ``program`` is
    ``optsw_ingress`` or ``optsw_egress``; ``now_ns`` the time it reaches the program;
    ``length`` the wire length the model uses (the frame itself is at most 1514 bytes,
    BPF_PROG_TEST_RUN takes no jumbo frames); ``port`` the output (egress) or input
    (ingress) port; ``rand`` the ECMP random number. One load serves the whole trace;
    maps (configuration, state) are those pinned in ``pin_dir``.

    Returns per packet ``retval`` (tc verdict: 0 ok, 2 shot, 7 redirect), ``cb0``
    (egress: decision CUT/BUFFER/DROP/NOCFG; ingress: chosen output port) and
    ``tstamp`` (egress: the stamped arrival time at the next node).
    """
    _check_node(node_id)
    pin = check_pin_dir(pin_dir)
    loader_path()
    ensure_bpffs()
    _record_pin_dir(ledger, pin)
    with tempfile.NamedTemporaryFile("w", prefix="tbtrace-", suffix=".txt") as f:
        for prog, now, length, port, rand, dst in packets:
            f.write(f"{prog} {int(now)} {int(length)} {int(port)} {int(rand) & 0xffffffff} {dst}\n")
        f.flush()
        out = _run_loader(["test-trace", "--obj", str(object_path(OPTSWITCH)), "--prog", OPTSW_EGRESS,
                           "--pin-dir", str(pin), "--trace", f.name,
                           *_optsw_sets(node_id, is_switch=is_switch, test_mode=True)])
    rows = [json.loads(ln) for ln in out.splitlines() if ln.strip()]
    if len(rows) != len(packets):
        raise BpfError(f"test-trace returned {len(rows)} results for {len(packets)} packets")
    return rows


trace_run.__test__ = False  # type: ignore[attr-defined]


# pytest collects module-level callables named test_* from modules imported into a
# test file's namespace; mark this one as not a test.
test_run.__test__ = False  # type: ignore[attr-defined]
