"""Congestion-control modules: list, load, unload, set the default.

Our modules are built by ``make -C kernel`` into ``kernel/tcp_<name>.ko`` (for the
full-kernel guest); the kernel's own algorithms (``reno`` is built in, ``cubic``
usually too, ``bbr`` is ``tcp_bbr``) are loaded with ``modprobe``. Unloading checks
the module's reference count first: a module that sockets (or a netns default)
still use is refused with a clear message instead of a ``rmmod`` that fails or
waits. Every command is an argument list.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from testbed import cmd
from testbed.errors import CommandError, TestbedError
from testbed.ledger import Entry, Ledger, register

log = logging.getLogger(__name__)

KERNEL_DIR = Path(__file__).resolve().parents[2] / "kernel"

#: Our modules: algorithm name -> {parameter: (lo, hi, default, doc)} (bounds as
#: in kernel/tcp_<name>.c; the kernel checks them, this table documents them and
#: lets us reject a bad value before touching the kernel).
#: Every module's .init times the first data segment with the profile's initial RTO
#: (kernel/tcp_paper_init.h); "sack" is the kernel's reno plus that .init.
OUR_MODULES: dict[str, dict[str, tuple[int, int, int, str]]] = {
    "saw": {"beta_pct": (1, 99, 50, "RTO smoothing beta, percent"),
            "alpha_pct": (100, 1000, 110, "RTO backoff factor alpha, percent"),
            "rto_max_ms": (1, 120_000, 60_000, "cap of T, ms of kernel time (paper 60 s x D, "
                           "at most TCP_RTO_MAX)")},
    "sawl": {"p": (0, 64, 4, "RTO extension in packet durations"),
             "tau_ns": (0, 1_000_000_000, 7200, "packet duration tau, ns"),
             "beta_pct": (1, 99, 50, "RTO smoothing beta, percent"),
             "alpha_pct": (100, 1000, 110, "RTO backoff factor alpha, percent"),
             "rto_max_ms": (1, 120_000, 60_000, "cap of T, ms of kernel time (paper 60 s x D, "
                            "at most TCP_RTO_MAX)")},
    "sack": {},
    "msack": {"rto_decrease_pct": (1, 100, 50, "cwnd after an RTO, percent of before")},
}
#: Kernel algorithms and the module that provides them when not built in.
KERNEL_ALGORITHMS = {"reno": None, "cubic": "tcp_cubic", "bbr": "tcp_bbr"}

_SYSCTL = Path("/proc/sys/net/ipv4")


class CongestionControlError(TestbedError):
    """A congestion-control module could not be loaded, unloaded or selected."""


def module_name(algorithm: str) -> str | None:
    """Kernel module providing ``algorithm`` (None: built into the kernel)."""
    if algorithm in OUR_MODULES:
        return f"tcp_{algorithm}"
    if algorithm in KERNEL_ALGORITHMS:
        return KERNEL_ALGORITHMS[algorithm]
    raise CongestionControlError(
        f"unknown congestion control {algorithm!r}; known: {', '.join(sorted(all_algorithms()))}")


def all_algorithms() -> list[str]:
    return sorted([*OUR_MODULES, *KERNEL_ALGORITHMS])


def ko_path(algorithm: str) -> Path:
    """``kernel/tcp_<name>.ko``; raises with the build command when it is missing."""
    path = KERNEL_DIR / f"tcp_{algorithm}.ko"
    if not path.exists():
        raise CongestionControlError(f"{path} is not built: run `make -C {KERNEL_DIR}` "
                                     "(needs linux-headers-amd64 of the guest kernel)")
    return path


def available() -> list[str]:
    """Algorithms registered in the running kernel (tcp_available_congestion_control)."""
    try:
        return (_SYSCTL / "tcp_available_congestion_control").read_text().split()
    except OSError:
        return []


def refcount(module: str) -> int | None:
    """The module's reference count, None when it is not loaded (or built in)."""
    try:
        return int(Path(f"/sys/module/{module}/refcnt").read_text())
    except (OSError, ValueError):
        return None


def parameters(module: str) -> dict[str, str]:
    """Current parameter values of a loaded module (from /sys/module/<m>/parameters)."""
    d = Path(f"/sys/module/{module}/parameters")
    if not d.is_dir():
        return {}
    return {p.name: p.read_text().strip() for p in sorted(d.iterdir())}


def check_params(algorithm: str, params: dict[str, int]) -> dict[str, int]:
    """Validate ``params`` against the module's bounds; raises naming key, value, range."""
    spec = OUR_MODULES.get(algorithm, {})
    out = {}
    for key, value in params.items():
        if key not in spec:
            raise CongestionControlError(
                f"module tcp_{algorithm} has no parameter {key!r}; it has: {', '.join(spec) or 'none'}")
        lo, hi, _default, doc = spec[key]
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise CongestionControlError(
                f"tcp_{algorithm} parameter {key}={value!r} out of range: an integer {lo}..{hi} ({doc})")
        out[key] = value
    return out


@dataclass(frozen=True)
class Status:
    """One algorithm as ``testbed cc list`` shows it."""

    name: str
    module: str | None
    registered: bool
    refcount: int | None
    params: dict[str, str]
    default: bool


def status() -> list[Status]:
    """Every known algorithm plus any other registered one, with module state."""
    regs = available()
    try:
        default = (_SYSCTL / "tcp_congestion_control").read_text().strip()
    except OSError:
        default = ""
    names = sorted(set(all_algorithms()) | set(regs))
    out = []
    for n in names:
        mod = module_name(n) if n in all_algorithms() else None
        out.append(Status(n, mod, n in regs, refcount(mod) if mod else None,
                          param_display(n, parameters(mod) if mod else {}), n == default))
    return out


def param_display(algorithm: str, current: dict[str, str]) -> dict[str, str]:
    """Parameters as ``testbed cc list`` shows them: the running value (or the default
    when the module is not loaded, marked ``default``) and the accepted range."""
    spec = OUR_MODULES.get(algorithm)
    if spec is None:
        return current
    out = {}
    for key, (lo, hi, default, _doc) in spec.items():
        out[key] = f"{current[key]} ({lo}..{hi})" if key in current else f"{default} (default, {lo}..{hi})"
    return out


def load(algorithm: str, params: dict[str, int] | None = None) -> bool:
    """Make ``algorithm`` available; returns True if this call loaded a module.

    Our modules are inserted from kernel/ with ``params`` (refused before loading
    when out of range; the kernel refuses them too). If the module is already
    loaded, the given parameters are written to /sys/module/<m>/parameters.
    """
    mod = module_name(algorithm)
    params = check_params(algorithm, params or {})
    if algorithm in available():
        if mod:
            set_params(algorithm, params)
        return False
    if mod is None:
        raise CongestionControlError(f"{algorithm} is built in but not registered: kernel problem")
    if algorithm in OUR_MODULES:
        argv = ["insmod", str(ko_path(algorithm)), *(f"{k}={v}" for k, v in params.items())]
    else:
        argv = ["modprobe", mod]
    insert(argv, mod, f"testbed guest -- testbed cc load {algorithm}", CongestionControlError)
    if algorithm not in available():
        raise CongestionControlError(f"{mod} loaded but {algorithm!r} is not registered")
    return True


def insert(argv: list[str], module: str, in_guest: str, error: type[TestbedError]) -> None:
    """Run ``argv`` (insmod or modprobe of ``module``); on failure raise ``error`` with
    the kernel's message and, where this kernel refuses module loading (the host),
    ``in_guest``: the command that does it in the full-kernel guest."""
    try:
        cmd.run(argv)
    except CommandError as exc:
        refused = any(m in exc.stderr for m in ("not permitted", "not implemented"))
        raise error(f"loading {module} failed: {exc.stderr.strip() or exc}"
                    + (f" (this kernel refuses module loading; run it in the guest: {in_guest})" if refused else "")
                    ) from None


def set_params(algorithm: str, params: dict[str, int]) -> None:
    """Write parameters of a loaded module (bounds checked here and by the kernel)."""
    mod = module_name(algorithm)
    for key, value in check_params(algorithm, params).items():
        path = Path(f"/sys/module/{mod}/parameters/{key}")
        try:
            path.write_text(str(value))
        except OSError as exc:
            raise CongestionControlError(f"{mod}: setting {key}={value} refused: {exc}") from None


def users(algorithm: str) -> list[str]:
    """Why ``algorithm`` is in use: sockets (from ss, all namespaces we can see) and
    namespace defaults. Best effort, for the error message of unload."""
    out = []
    ss = cmd.run(["ss", "-tinH", "state", "all"], check=False)
    n = sum(1 for line in ss.stdout.splitlines() if f" {algorithm} " in f" {line.strip()} ")
    if n:
        out.append(f"{n} socket(s) in the root namespace")
    for ns in cmd.run(["ip", "netns", "list"], check=False).stdout.split("\n"):
        name = ns.split(" ")[0].strip()
        if not name:
            continue
        d = cmd.run(["sysctl", "-n", "net.ipv4.tcp_congestion_control"], netns=name, check=False)
        if d.stdout.strip() == algorithm:
            out.append(f"default of netns {name}")
        s = cmd.run(["ss", "-tinH", "state", "all"], netns=name, check=False)
        k = sum(1 for line in s.stdout.splitlines() if f" {algorithm} " in f" {line.strip()} ")
        if k:
            out.append(f"{k} socket(s) in netns {name}")
    return out


def unload(algorithm: str) -> None:
    """Remove our module; refuses (without calling rmmod) while anything uses it."""
    mod = module_name(algorithm)
    if algorithm not in OUR_MODULES and mod is None:
        raise CongestionControlError(f"{algorithm} is built into the kernel: nothing to unload")
    count = refcount(mod) if mod else None
    if count is None:
        raise CongestionControlError(f"{mod} is not loaded")
    if count > 0:
        who = users(algorithm)
        raise CongestionControlError(
            f"{mod} is in use (reference count {count}"
            + (f": {'; '.join(who)}" if who else "") + "); close those sockets or switch the "
            f"default away from {algorithm} (testbed cc set-default reno), then unload")
    try:
        cmd.run(["rmmod", mod], timeout=10)
    except CommandError as exc:
        raise CongestionControlError(f"rmmod {mod} failed: {exc.stderr.strip()}") from None


def allow(algorithm: str) -> None:
    """Add ``algorithm`` to net.ipv4.tcp_allowed_congestion_control (global).

    Only allowed ("non-restricted") algorithms may become the default of a network
    namespace other than the initial one; the 6.1 kernel answers EPERM otherwise,
    and on that error path it also leaks a module reference (the module can then
    never be unloaded until reboot), so this must run before any per-netns default.
    """
    path = _SYSCTL / "tcp_allowed_congestion_control"
    allowed = path.read_text().split()
    if algorithm not in allowed:
        cmd.run(["sysctl", "-q", "-w", f"net.ipv4.tcp_allowed_congestion_control={' '.join([*allowed, algorithm])}"])


def get_default(netns: str | None = None) -> str:
    return cmd.run(["sysctl", "-n", "net.ipv4.tcp_congestion_control"], netns=netns).stdout.strip()


def set_default(algorithm: str, netns: str | None = None) -> str:
    """Default for *new* sockets of a network namespace; returns the previous default.

    Existing connections keep their algorithm. Loads the module first if needed.
    """
    load(algorithm)
    allow(algorithm)
    previous = get_default(netns)
    cmd.run(["sysctl", "-q", "-w", f"net.ipv4.tcp_congestion_control={algorithm}"], netns=netns)
    return previous


# -- ledger teardown ------------------------------------------------------------------------
#: ledger resource: a kernel module a run loaded (removed when nothing uses it any more)
MODULE = "module"


#: seconds the ledger waits for a module's users to go before it gives up (the kernel
#: destroys deleted namespaces, and the qdiscs or sockets in them, asynchronously)
MODULE_RELEASE_TIMEOUT_S = 10.0


def _remove_module(entry: Entry, ledger: Ledger) -> None:
    """rmmod a module the run loaded, once nothing uses it. Namespaces deleted just
    before (a killed run's teardown) still hold their qdiscs for a moment (the kernel
    destroys them asynchronously), so this waits up to MODULE_RELEASE_TIMEOUT_S for the
    reference count to reach 0. A module still in use then (sockets of a congestion-
    control module the kernel is still closing: FIN / TIME_WAIT timers run for minutes
    of emulation time) is left loaded with a warning, as before; ``rmmod`` it later.
    Raises TestbedError when rmmod fails on an unused module."""
    from testbed import hostclock

    name = entry.attrs["name"]
    deadline = hostclock.Deadline(MODULE_RELEASE_TIMEOUT_S)
    while (count := refcount(name)) not in (None, 0):
        if deadline.expired():
            log.warning("module %s is still in use (reference count %s) %g s after its run's objects went; "
                        "left loaded (rmmod %s once its sockets are gone)", name, count,
                        MODULE_RELEASE_TIMEOUT_S, name)
            return
        time.sleep(0.2)
    if count is None:
        return
    # rmmod, not modprobe -r: our modules are insmod-ed from kernel/ and are not in
    # modules.dep, and rmmod never removes dependencies we did not load
    try:
        cmd.run(["rmmod", name], timeout=30)
    except CommandError as exc:
        if refcount(name) is not None:
            raise TestbedError(f"rmmod {name} failed: {exc.stderr.strip() or exc}") from None


register(MODULE, _remove_module)
