"""The full-kernel guest: re-run a command inside virtme-ng booting the distro kernel.

The guest shares the host's root filesystem read-only (9p) and the repository and the
results folder read-write, so results land on the host; the trees a run only reads
(Python's libraries, the venv, system binaries) come through a second, cached export.
Output is streamed, the exit code propagated, Ctrl-C stops the guest, a failed boot is
retried once, and the qemu process is recorded in a host-side ledger (resource
``guest``, whose teardown is registered here) so `testbed clean` can stop a guest
whose parent was SIGKILLed.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from testbed import cmd, process
from testbed.errors import GuestError, UsageError
from testbed.ledger import Entry, Ledger, ledger_dir, register
from testbed.manifest import GIT_ENV, HOST_ENV, git_env, git_info, host_facts

REPO = Path(__file__).resolve().parent.parent
INIT = Path(__file__).resolve().parent / "guest-init.sh"
BOOT_MARKER = "OT-GUEST-UP"


CLOCKS = ("realtime", "icount")
#: QEMU options for every guest. virtme-ng gives each of its six script streams (stdin,
#: stdout, ...) a virtio-serial device of its own with one port; QEMU's default of 31
#: ports per device made 384 virtqueues whose ~390 eventfds QEMU's main loop polled on
#: every iteration: a third of each guest's host CPU under instruction counting, where
#: every guest timer passes through the main loop (docs/guest-clock.md, "Host cost").
#: Two ports per device (port 0 stays reserved for a console) are enough.
QEMU_OPTS = ("-global", "virtio-serial-pci.max_ports=2")
#: The 9p tag of a second, read-only export of the host's root, which guest-init.sh
#: mounts with ``cache=loose`` and binds over :func:`cached_dirs`. virtme-ng mounts the root and
#: the shared folders without a cache mode (9p's default, none): every stat, open and
#: read of a file goes to the host, and a Python process's imports in the guest cost
#: tens of seconds (docs/environment.md). A virtio-9p channel serves one mount, so the
#: cached view needs an export of its own.
CACHED_TAG = "ot-cache"
CACHED_QEMU_OPTS = ("-fsdev", "local,id=otcache,path=/,security_model=none,readonly=on,multidevs=remap",
                    "-device", f"virtio-9p-pci,fsdev=otcache,mount_tag={CACHED_TAG}")


#: Folders virtme-ng's guest init (virtme-ng-init of virtme-ng 1.42: its strings, and
#: guest/virtme-init) mounts afresh before the command runs: the host's files below them
#: are hidden in the guest, so a guest's command file (in the state directory) cannot be
#: there
GUEST_FRESH_MOUNTS = ("/run", "/var/log", "/var/tmp", "/var/cache", "/var/spool/rsyslog", "/var/lib/portables",
                      "/var/lib/machines", "/var/lib/sudo", "/var/lib/apt", "/var/lib/private", "/dev", "/proc",
                      "/sys")


def check_guest_reads(state: Path) -> None:
    """Check that a guest can read the files the host writes into the state directory
    ``state`` (a guest's command file, beside its ledger) through its root: not below one
    of :data:`GUEST_FRESH_MOUNTS` (a shared folder there is not exempt: whether
    virtme-ng mounts it before or after its tmpfs was not checked). Raises UsageError
    naming TESTBED_STATE_DIR, its value and what is accepted, before anything is
    created (the guest would otherwise stop with exit 70 after booting)."""
    d = state.resolve()
    hidden = next((m for m in GUEST_FRESH_MOUNTS if d.is_relative_to(m)), None)
    if hidden is not None:
        raise UsageError(f"TESTBED_STATE_DIR={str(state)!r}: the guest reads its command file from the state "
                         f"directory ({d}), below {hidden}, which the guest mounts afresh (virtme-ng), so the file "
                         f"is hidden there; "
                         f"accepted: a state directory outside {', '.join(GUEST_FRESH_MOUNTS)} "
                         f"(default {cmd.DEFAULT_STATE_DIR})")


def cached_dirs() -> list[str]:
    """The host directories a guest only reads and reads often: the Python interpreter's
    libraries, the venv, the binaries and shared libraries that every process loads. The
    guest sees them through the cached export: a change the host makes to them while a
    guest runs may not be seen by it (nothing in a run or a test changes them)."""
    py = f"python{sys.version_info.major}.{sys.version_info.minor}"
    dirs = [f"/usr/lib/{py}", "/usr/lib/python3", "/usr/bin", "/usr/sbin", "/usr/lib/x86_64-linux-gnu",
            str(Path(sys.prefix))]
    return [d for d in dirs if Path(d).is_dir() and not Path(d).is_symlink()]


@dataclass(frozen=True)
class IcountOptions:
    """QEMU ``-icount`` settings: the guest clock advances 2**shift ns per executed
    instruction; with ``sleep`` False an idle guest jumps to its next timer at once."""

    shift: int = 0
    sleep: bool = False

    @classmethod
    def parse(cls, text: str) -> "IcountOptions":
        """Parse ``shift=N,sleep=on|off``; raises UsageError naming the bad part."""
        from testbed.errors import UsageError

        vals: dict[str, str] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, val = part.partition("=")
            if not sep or key not in ("shift", "sleep"):
                raise UsageError(f"TESTBED_GUEST_ICOUNT: {part!r}: accepted keys are shift=0..10 and "
                                 "sleep=on|off")
            vals[key] = val
        shift = vals.get("shift", str(cls.shift))
        if not shift.isdigit() or not 0 <= int(shift) <= 10:
            raise UsageError(f"TESTBED_GUEST_ICOUNT: shift={shift!r}: accepted range 0..10")
        sleep = vals.get("sleep", "on" if cls.sleep else "off")
        if sleep not in ("on", "off"):
            raise UsageError(f"TESTBED_GUEST_ICOUNT: sleep={sleep!r}: accepted on or off")
        return cls(shift=int(shift), sleep=sleep == "on")

    def qemu(self) -> str:
        return f"shift={self.shift},sleep={'on' if self.sleep else 'off'}"


@dataclass(frozen=True)
class GuestConfig:
    """Guest size, acceleration, clock and file cache; from
    TESTBED_GUEST_{CPUS,MEMORY,KVM,CLOCK,ICOUNT,CACHE} by default."""

    cpus: int | None = None  # None: 1 under icount (see vcpus), else the host's CPUs up to 4
    memory: str = "3G"
    kvm: str = "auto"  # auto (probe once per boot) | on | off
    kernel: Path | None = None
    clock: str = "icount"  # icount | realtime (see docs/guest-clock.md); KVM guests: realtime
    icount: IcountOptions = IcountOptions()
    cache: bool = True  # read cached_dirs() through the cached export (CACHED_TAG)

    @classmethod
    def from_env(cls) -> "GuestConfig":
        from testbed.errors import UsageError

        e = os.environ
        clock = e.get("TESTBED_GUEST_CLOCK", cls.clock)
        if clock not in CLOCKS:
            raise UsageError(f"TESTBED_GUEST_CLOCK={clock!r}: accepted {' or '.join(CLOCKS)}")
        cpus = e.get("TESTBED_GUEST_CPUS") or None
        if cpus is not None and not (cpus.isdigit() and 1 <= int(cpus) <= 64):
            raise UsageError(f"TESTBED_GUEST_CPUS={cpus!r}: accepted a whole number 1..64")
        cache = e.get("TESTBED_GUEST_CACHE", "on")
        if cache not in ("on", "off"):
            raise UsageError(f"TESTBED_GUEST_CACHE={cache!r}: accepted on or off")
        return cls(cpus=int(cpus) if cpus else None,
                   memory=e.get("TESTBED_GUEST_MEMORY", "3G"), kvm=e.get("TESTBED_GUEST_KVM", "auto"),
                   kernel=Path(e["TESTBED_GUEST_KERNEL"]) if e.get("TESTBED_GUEST_KERNEL") else None,
                   clock=clock, icount=IcountOptions.parse(e.get("TESTBED_GUEST_ICOUNT", "")),
                   cache=cache == "on")


def vcpus(cfg: GuestConfig, use_kvm: bool) -> int:
    """The guest's vCPU count: as configured, else one under instruction counting (QEMU
    then runs every vCPU in one host thread, round-robin: a second vCPU adds no speed,
    and a vCPU spinning on a lock starves the other; docs/guest-clock.md), else the
    host's CPUs up to 4."""
    if cfg.cpus:
        return cfg.cpus
    if clock_label(cfg, use_kvm).startswith("icount"):
        return 1
    return min(os.cpu_count() or 2, 4)


def shared_dirs(rw_dirs: list[Path]) -> list[str]:
    """The host folders the guest writes: the repository and ``rw_dirs``, resolved."""
    return sorted({str(REPO), *(str(d.resolve()) for d in rw_dirs)})


def guest_script(argv: list[str], cfg: GuestConfig, rw_dirs: list[Path], use_kvm: bool,
                 git: str | None = None) -> str:
    """The text of a guest's command file, which guest-init.sh sources first (POSIX sh):
    the environment guest-init.sh and the command need, then ``argv`` as its positional
    parameters. ``git``: the checkout's git state for the guest's manifests
    (testbed.manifest.GIT_ENV); the machine's own facts go with it for the same
    manifests (testbed.manifest.HOST_ENV). The command travels in a file, not on the
    kernel's command line: that line holds 2 047 bytes on x86 and virtme-ng puts the command
    there in base64; a longer line is cut, ``init=`` (virtme-ng's last argument) with it,
    and the guest hangs instead of failing (found 2026-11-29, docs/environment.md)."""
    env = {"OT_GUEST_CWD": os.getcwd(), "OT_RW_DIRS": ":".join(shared_dirs(rw_dirs)),
           "TESTBED_GUEST_ACCEL": "kvm" if use_kvm else "tcg",
           "TESTBED_GUEST_CLOCK": clock_label(cfg, use_kvm),
           "OT_CACHED_DIRS": ":".join(cached_dirs()) if cfg.cache else "",
           HOST_ENV: json.dumps(host_facts(), sort_keys=True),
           **({GIT_ENV: git} if git else {})}
    lines = ["# testbed.vm: one guest's command, written by the host, sourced by guest-init.sh",
             *(f"export {k}={shlex.quote(v)}" for k, v in env.items()),
             f"set -- {shlex.join(argv)}"]
    return "\n".join(lines) + "\n"


def vng_command(command_file: Path, cfg: GuestConfig, rw_dirs: list[Path], use_kvm: bool) -> list[str]:
    """The virtme-ng argument list of a guest that runs the command in ``command_file``
    (:func:`guest_script`; a path the guest can read through its root: not below the
    guest's own mounts, :data:`GUEST_FRESH_MOUNTS`).

    Raises GuestError when no distro kernel is installed."""
    from testbed.features import distro_kernel

    kernel = cfg.kernel or distro_kernel()
    if kernel is None:
        raise GuestError("no distro kernel with modules found in /boot (apt package linux-image-amd64); "
                         "run `make setup`")
    vng = [str(Path(sys.executable).parent / "vng"), "--run", str(kernel), "--cpus", str(vcpus(cfg, use_kvm)),
           "--memory", cfg.memory, *[f"--rwdir={d}" for d in shared_dirs(rw_dirs)],
           "--exec", shlex.join([str(INIT), str(command_file)])]
    qemu = [*QEMU_OPTS, *(CACHED_QEMU_OPTS if cfg.cache else ())]
    if not use_kvm:
        vng.insert(1, "--disable-kvm")
        if cfg.clock == "icount":
            qemu += ["-icount", cfg.icount.qemu()]
    vng.insert(1, f"--qemu-opts={shlex.join(qemu)}")  # "=": vng would read "-global ..." as its -g
    return vng


def clock_choice(cfg: GuestConfig, use_kvm: bool, from_env: bool) -> tuple[str, str]:
    """(label, why): what will drive the guest's clock, for `testbed doctor`.
    ``from_env``: TESTBED_GUEST_CLOCK was set (else the default was used)."""
    label = clock_label(cfg, use_kvm)
    if cfg.clock == "icount" and use_kvm:
        return label, "KVM runs the guest at host speed; instruction counting needs software emulation"
    if cfg.clock == "realtime":
        why = ("set by TESTBED_GUEST_CLOCK" if from_env else "configured") + \
            ": timers fire on host time, late by whatever the host scheduler does"
        return label, why
    why = "set by TESTBED_GUEST_CLOCK" if from_env else "default under software emulation"
    why += (f", {vcpus(cfg, use_kvm)} vCPU: the guest clock counts executed instructions (1 ns x 2^{cfg.icount.shift} each)"
            + (", idle time is skipped" if not cfg.icount.sleep else ", idle time passes at host speed")
            + "; timers fire on time in guest time whatever the host's load (docs/guest-clock.md)")
    return label, why


def clock_label(cfg: GuestConfig, use_kvm: bool) -> str:
    """What drives the guest clock, as recorded in manifests: ``realtime``,
    ``icount:shift=N,sleep=on|off`` (TCG only; KVM guests always run in real time)."""
    if cfg.clock == "icount" and not use_kvm:
        return f"icount:{cfg.icount.qemu()}"
    return "realtime"


def decide_kvm(cfg: GuestConfig) -> bool:
    if cfg.kvm in ("on", "off"):
        return cfg.kvm == "on"
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False
    from testbed.features import distro_kernel, kvm_probe

    kernel = cfg.kernel or distro_kernel()
    return bool(kernel and kvm_probe(kernel).ok)


def run_in_guest(argv: list[str], *, rw_dirs: list[Path] | None = None, ledger_id: str | None = None,
                 cfg: GuestConfig | None = None) -> int:
    """Run ``argv`` in the guest and return its exit code (130 on Ctrl-C).

    Raises GuestError when the guest fails to boot twice, UsageError for a state
    directory the guest cannot read (:func:`check_guest_reads`) or a bad guest setting.
    """
    cfg = cfg or GuestConfig.from_env()
    check_guest_reads(cmd.state_dir())
    use_kvm = decide_kvm(cfg)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    script = guest_script(argv, cfg, rw_dirs or [], use_kvm, git=git_env(git_info()))
    for attempt in (1, 2):
        t0 = time.monotonic()
        code, booted = _boot_once(script, cfg, rw_dirs or [], use_kvm, env,
                                  ledger_id or f"guest-{os.getpid()}-{attempt}")
        if booted or code in (130, 143):
            return code
        print(f"testbed: the guest did not boot (exit {code} after {time.monotonic() - t0:.0f} s)"
              + ("; retrying once" if attempt == 1 else ""), file=sys.stderr)
    raise GuestError("the full-kernel guest failed to boot twice; see the output above and "
                     "`testbed doctor`")


def _boot_once(script: str, cfg: GuestConfig, rw_dirs: list[Path], use_kvm: bool, env: dict[str, str],
               ledger_id: str) -> tuple[int, bool]:
    run_id = f"{ledger_id}-{os.getpid()}-{time.monotonic_ns() % 10**6}"
    # the command file beside the ledger (the guest reads it through its 9p root), in the
    # ledger so that `testbed clean` removes it after a killed run
    command_file = ledger_dir().resolve() / f"{run_id}.guest.sh"
    vng = vng_command(command_file, cfg, rw_dirs, use_kvm)
    ledger = Ledger.create(run_id, argv=vng)
    try:
        ledger.add("file", path=str(command_file))
        command_file.write_text(script)
        proc = process.spawn(ledger, vng, stdout=subprocess.PIPE, env=env, resource=GUEST)
    except BaseException:
        ledger.teardown()
        raise
    booted, interrupted = False, 0

    def stop(signum: int, frame: object) -> None:
        nonlocal interrupted
        interrupted = signum
        process.stop(proc, grace_s=5.0)

    old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode(errors="replace")
            if not booted and BOOT_MARKER in line:
                booted = True
                continue
            sys.stdout.write(line)
            sys.stdout.flush()
        code = proc.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        ledger.teardown()
    if interrupted:
        return 128 + interrupted, booted
    return code, booted


#: ledger resource: the qemu process of a guest (with its process group)
GUEST = "guest"


def _remove_guest(entry: Entry, ledger: Ledger) -> None:
    # version-1 ledgers recorded no group flag for the guest: its group is always killed
    process.remove_process(entry, ledger, group=True)


register(GUEST, _remove_guest)
