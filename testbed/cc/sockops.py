"""Per-host initial RTO, maximum congestion window and TCP pacing through the ``tcp_rto`` sock_ops program.

sock_ops programs attach to a cgroup (v2), not to a network namespace, and the
testbed's processes all live in the cgroup of whoever started the run. So the
program is attached (``BPF_F_ALLOW_MULTI``, through a pinned bpf_link) to the root
of the cgroup v2 hierarchy, once per host, and filters on the host's netns cookie
(``bpf_get_netns_cookie``, sock_ops since Linux 5.15): each host's sockets get that
host's settings only. The pin directory is recorded in the run ledger as a
``bpf-pin`` before it exists; removing it detaches the program (``testbed clean``
does that after a crash).

Kernel units: the initial RTO reply of ``BPF_SOCK_OPS_TIMEOUT_INIT`` is in jiffies,
so emulation times are rounded *up* to whole jiffies (CONFIG_HZ of the running
kernel). ``TCP_BPF_RTO_MIN`` refuses values below 2 jiffies; the profiles therefore
set the minimum RTO with the route attribute ``rto_min`` (locked by iproute2) (1 jiffy) instead.

Pacing: with ``pacing`` the program sets SO_MAX_PACING_RATE to
:data:`MAX_PACING_RATE_BYTES_PER_S` on every connection of the host when it is
established, which turns on TCP's internal pacing (EDT stamps and an hrtimer, no qdisc
needed) at the kernel's own rate; ``ebpf/tcp_rto.bpf.c`` says how.
"""

from __future__ import annotations

import gzip
import json
import math
import platform
from pathlib import Path
from typing import Any

from testbed import cmd
from testbed.bpf import EBPF_DIR, PIN_ROOT, record_pin_dir
from testbed.errors import CommandError, TestbedError
from testbed.ledger import Ledger

LOADER = EBPF_DIR / "sockops_load"
#: SO_MAX_PACING_RATE the program sets with ``pacing`` (bytes/s; TCP_RTO_MAX_PACING_RATE of
#: ebpf/tcp_rto.h): the largest finite value bpf_setsockopt() takes, 34.4 Gbit/s, so it
#: turns pacing on without capping the kernel's rate below any emulated link's.
MAX_PACING_RATE_BYTES_PER_S = 0xFFFFFFFE


class SockopsError(TestbedError):
    """The sock_ops program could not be attached."""


def kernel_hz(release: str | None = None) -> int:
    """CONFIG_HZ of the running kernel (from /boot/config-<release> or /proc/config.gz)."""
    release = release or platform.release()
    for path in (Path(f"/boot/config-{release}"), Path("/proc/config.gz")):
        try:
            text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("CONFIG_HZ="):
                return int(line.split("=", 1)[1])
    raise SockopsError(f"cannot find CONFIG_HZ of kernel {release} (no /boot/config-{release}, "
                       "no /proc/config.gz): the initial RTO is given to the kernel in jiffies")


def to_jiffies(seconds: float, hz: int) -> int:
    """Seconds -> jiffies, rounded up (a timer never fires early), at least 1."""
    return max(1, math.ceil(seconds * hz - 1e-9))


def cgroup2_root() -> Path:
    """Mount point of the cgroup v2 hierarchy (raises when none is mounted)."""
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "cgroup2":
            return Path(fields[1])
    raise SockopsError("no cgroup v2 hierarchy is mounted (mount -t cgroup2 none /sys/fs/cgroup/unified): "
                       "sock_ops programs attach to a cgroup v2")


def attach(ledger: Ledger, *, netns: str, pin_dir: Path, init_rto_jiffies: int = 0,
           rto_min_us: int = 0, delack_max_us: int = 0, sndcwnd_clamp: int = 0,
           pacing: bool = False) -> dict[str, Any]:
    """Attach ``tcp_rto`` for the sockets of ``netns``; returns the loader's JSON.

    ``init_rto_jiffies``: reply to TIMEOUT_INIT; ``rto_min_us`` / ``delack_max_us``:
    TCP_BPF_RTO_MIN / TCP_BPF_DELACK_MAX at connect and establishment;
    ``sndcwnd_clamp``: maximum congestion window in segments (TCP_BPF_SNDCWND_CLAMP at
    establishment, 1..65535); ``pacing``: TCP's internal pacing on for the host's
    connections (SO_MAX_PACING_RATE = MAX_PACING_RATE_BYTES_PER_S at establishment; the
    JSON then has ``pacing: true`` and ``max_pacing_rate``). 0 / False leaves a setting at
    the kernel's default. Raises SockopsError when the loader is missing or refuses (its
    message names the step; a loader built before ``--pacing`` refuses the option)."""
    if not LOADER.exists():
        raise SockopsError(f"{LOADER} is not built: run `make -C {EBPF_DIR}` (or make setup)")
    if PIN_ROOT not in pin_dir.parents:
        raise SockopsError(f"pin directory {pin_dir} must be below {PIN_ROOT}")
    if pin_dir.parent != PIN_ROOT:
        # the hosts' common parent (<token>-cc) is the testbed's too: recorded once while
        # live, so the run's teardown (or `testbed clean`) removes it after its hosts' pins
        record_pin_dir(ledger, pin_dir.parent)
    pin_dir.parent.mkdir(parents=True, exist_ok=True)
    ledger.add("bpf-pin", path=str(pin_dir))
    argv = [str(LOADER), "attach", "--cgroup", str(cgroup2_root()), "--netns", netns,
            "--pin-dir", str(pin_dir), "--init-rto-jiffies", str(init_rto_jiffies),
            "--rto-min-us", str(rto_min_us), "--delack-max-us", str(delack_max_us)]
    if sndcwnd_clamp:   # only when asked: a loader built before the option still serves the rest
        argv += ["--sndcwnd-clamp", str(sndcwnd_clamp)]
    if pacing:
        argv.append("--pacing")
    try:
        out = cmd.run(argv)
    except CommandError as exc:
        raise SockopsError(f"attaching tcp_rto for netns {netns}: {exc.stderr.strip()}") from None
    return json.loads(out.stdout)


def stats(pin_dir: Path) -> dict[str, int]:
    """How often the host's program answered TIMEOUT_INIT / set options (``pacing``:
    connections whose internal pacing it turned on; ``setsockopt_errors``: refusals)."""
    out = cmd.run([str(LOADER), "stats", "--pin-dir", str(pin_dir)])
    return json.loads(out.stdout)
