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
        proc = subprocess.run(
            argv, capture_output=True, text=True, check=False, timeout=LOADER_TIMEOUT_S
        )
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
    if netns is not None:
        if not (netns.startswith("/") or _NETNS_NAME_RE.match(netns)):
            raise BpfError(f"network namespace {netns!r} is neither a name nor an absolute path")
        args += ["--netns", netns]
    loader_path()
    ensure_bpffs()
    _record_pin_dir(ledger, pin)
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


# pytest collects module-level callables named test_* from modules imported into a
# test file's namespace; mark this one as not a test.
test_run.__test__ = False  # type: ignore[attr-defined]
