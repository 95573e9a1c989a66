"""Probes of what the running kernel and host can do.

Every probe *tries* the feature instead of guessing from version numbers or config
files, and returns a :class:`Probe` whose ``detail`` says why it is (not) available.
Network probes run in a throwaway, uniquely named namespace (``ot-probe-<pid>-<hex>``)
that is always deleted again; nothing that existed before is touched.

Families declare the features they need as :class:`Feature` members (derived where
possible from what they build, see testbed.family); the runner compares them with
:func:`probe_all` and runs the experiment natively or in the distro-kernel guest. All
commands are argument lists with timeouts; no shell is involved.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import re
import secrets
import shutil
import signal
import sys
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path

from testbed import btf, cmd, hostclock

class Feature(StrEnum):
    """A kernel or host feature a run may need; the value is the probe's name."""

    NETEM = "netem"
    FQ = "fq"
    HTB = "htb"
    TBF = "tbf"
    CLSACT_BPF = "clsact-bpf"
    BPF_STRUCT_OPS = "bpf-struct-ops"
    BTF = "btf"
    MODULES = "modules"
    OVS_KERNEL = "ovs-kernel"
    OVS_USERSPACE = "ovs-userspace"
    TRACEPOINTS = "tracepoints"
    KPROBES = "kprobes"
    NETNS = "netns"


#: every feature, in probe (and report) order
FEATURES: tuple[Feature, ...] = tuple(Feature)

KVM = "kvm"
KVM_MARKER = "OT-KVM-OK"
VMLINUX_BTF = Path("/sys/kernel/btf/vmlinux")
KPROBE_PMU = Path("/sys/bus/event_source/devices/kprobe")
STRUCT_OPS_TYPE = "bpf_struct_ops_tcp_congestion_ops"
PROBE_NS_PREFIX = "ot-probe-"
# Interface names used inside the probe namespace only (never in the root namespace).
_VETH_A, _VETH_B = "otp0", "otp1"

_TIMEOUT = 5.0  # seconds, for every ordinary command
_REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Probe:
    """Outcome of one probe: ``detail`` says why ``ok`` is what it is."""

    name: str
    ok: bool
    detail: str


# --------------------------------------------------------------------------- helpers


@dataclass(frozen=True)
class _Result:
    rc: int | None  # None: not run (binary missing) or timed out
    out: str
    err: str

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def why(self) -> str:
        """The most telling one-line reason for a failure."""
        text = (self.err.strip() or self.out.strip())
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        if not lines:
            return f"exit {self.rc}" if self.rc is not None else "no output"
        return "; ".join(lines[:3])


def _run(argv: Sequence[str], timeout: float = _TIMEOUT, env: dict[str, str] | None = None,
         cwd: str | None = None) -> _Result:
    """Run ``argv`` (a list, never a shell string); never raises for the usual failures."""
    try:
        cp = hostclock.run(argv, timeout=timeout, stdin=subprocess.DEVNULL, env=env, cwd=cwd)
    except FileNotFoundError:
        return _Result(None, "", f"{argv[0]}: not found")
    except PermissionError as exc:
        return _Result(None, "", f"{argv[0]}: {exc.strerror}")
    except subprocess.TimeoutExpired:
        return _Result(None, "", f"{argv[0]}: timed out after {timeout:g} s")
    return _Result(cp.returncode, cp.stdout, cp.stderr)


def _cmd(argv: Sequence[str]) -> str:
    return " ".join(argv)


def _fail(name: str, argv: Sequence[str], res: _Result) -> Probe:
    return Probe(name, False, f"{_cmd(argv)}: {res.why()}")


def _new_ns_name() -> str:
    return f"{PROBE_NS_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"


class _SetupError(Exception):
    """The probe namespace could not be made; carries the reason."""


@contextmanager
def _probe_ns(veth: bool = True) -> Iterator[str]:
    """A fresh namespace (with a veth pair inside if ``veth``), deleted afterwards."""
    ns = _new_ns_name()
    argv = ["ip", "netns", "add", ns]
    res = _run(argv)
    if not res.ok:
        raise _SetupError(f"{_cmd(argv)}: {res.why()}")
    try:
        if veth:
            argv = ["ip", "-n", ns, "link", "add", "name", _VETH_A, "type", "veth",
                    "peer", "name", _VETH_B]
            res = _run(argv)
            if not res.ok:
                raise _SetupError(f"{_cmd(argv)}: {res.why()}")
            for dev in (_VETH_A, _VETH_B):
                _run(["ip", "-n", ns, "link", "set", dev, "up"])
        yield ns
    finally:
        # Deleting the namespace destroys the veth pair, qdiscs and filters inside it.
        _run(["ip", "netns", "del", ns])


def _try_qdisc(name: str, qdisc_args: Sequence[str]) -> Probe:
    """Add ``qdisc_args`` as the root qdisc of a veth in a throwaway namespace."""
    shown = ["tc", "qdisc", "add", "dev", _VETH_A, "root", *qdisc_args]
    try:
        with _probe_ns() as ns:
            res = _run(["tc", "-n", ns, *shown[1:]])
    except _SetupError as exc:
        return Probe(name, False, f"could not set up probe namespace: {exc}")
    if not res.ok:
        return _fail(name, shown, res)
    return Probe(name, True, f"{_cmd(shown)} succeeded")


# ---------------------------------------------------------------------------- probes


def probe_netem() -> Probe:
    return _try_qdisc(Feature.NETEM, ["netem", "delay", "1ms"])


def probe_fq() -> Probe:
    return _try_qdisc(Feature.FQ, ["fq"])


def probe_htb() -> Probe:
    return _try_qdisc(Feature.HTB, ["handle", "1:", "htb", "default", "1"])


def probe_tbf() -> Probe:
    return _try_qdisc(Feature.TBF, ["tbf", "rate", "1mbit", "burst", "32kbit", "latency", "50ms"])


_BPF_PROG_C = """\
/* Minimal tc classifier: no headers needed, so no kernel headers are required. */
__attribute__((section("classifier"), used)) int ot_probe(void *skb) { return 0; }
char _license[] __attribute__((section("license"), used)) = "GPL";
"""


def probe_clsact_bpf() -> Probe:
    """clsact qdisc plus an eBPF classifier loaded by tc: the object `make -C ebpf`
    prebuilt (ebpf/probe_classifier.bpf.o), else one compiled here with clang."""
    prebuilt = Path(__file__).resolve().parent.parent / "ebpf" / "probe_classifier.bpf.o"
    clang = shutil.which("clang")
    if clang is None and not prebuilt.is_file():
        return Probe(Feature.CLSACT_BPF, False, "clang not found and ebpf/probe_classifier.bpf.o not built: "
                                        "cannot make the test eBPF program")
    with tempfile.TemporaryDirectory(prefix="ot-probe-bpf-") as tmp:
        src, obj = Path(tmp) / "probe.c", Path(tmp) / "probe.o"
        if prebuilt.is_file():
            obj = prebuilt
        else:
            src.write_text(_BPF_PROG_C)
            argv = [str(clang), "-O2", "-target", "bpf", "-c", str(src), "-o", str(obj)]
            # clang's cold start under TCG on a loaded 2-core host took > 20 s (CI)
            res = _run(argv, timeout=120)
            if not res.ok:
                return _fail(Feature.CLSACT_BPF, ["clang", "-target", "bpf", "-c", "probe.c"], res)
        try:
            with _probe_ns() as ns:
                shown = ["tc", "qdisc", "add", "dev", _VETH_A, "clsact"]
                res = _run(["tc", "-n", ns, *shown[1:]])
                if not res.ok:
                    return _fail(Feature.CLSACT_BPF, shown, res)
                shown = ["tc", "filter", "add", "dev", _VETH_A, "ingress", "bpf", "da",
                         "obj", "probe.o", "sec", "classifier"]
                real = ["tc", "-n", ns, "filter", "add", "dev", _VETH_A, "ingress", "bpf",
                        "da", "obj", str(obj), "sec", "classifier"]
                # tc loads the object (ELF parse, verifier): 5 s was overrun in a guest
                # beside two other guests (2026-11-28), which read as "lacks clsact-bpf"
                res = _run(real, timeout=60)
                if not res.ok:
                    return _fail(Feature.CLSACT_BPF, shown, res)
                show = _run(["tc", "-n", ns, "filter", "show", "dev", _VETH_A, "ingress"])
                if "ot_probe" not in show.out and "probe.o" not in show.out:
                    return Probe(Feature.CLSACT_BPF, False,
                                 "tc filter add returned 0 but the BPF filter is not listed")
        except _SetupError as exc:
            return Probe(Feature.CLSACT_BPF, False, f"could not set up probe namespace: {exc}")
    how = "prebuilt" if obj == prebuilt else "clang-built"
    return Probe(Feature.CLSACT_BPF, True, f"clsact qdisc + eBPF classifier ({how}, direct-action) loaded")


def probe_btf() -> Probe:
    if VMLINUX_BTF.is_file():
        return Probe(Feature.BTF, True, f"{VMLINUX_BTF} present")
    return Probe(Feature.BTF, False, f"{VMLINUX_BTF} missing (kernel built without CONFIG_DEBUG_INFO_BTF)")


def probe_bpf_struct_ops() -> Probe:
    """Registering a BPF tcp_congestion_ops needs this struct in the kernel's BTF (read
    in-process: ``bpftool btf dump`` printed 12 MB to search and timed out at 15 s on a
    loaded host)."""
    try:
        kinds = btf.kinds_named(VMLINUX_BTF.read_bytes(), STRUCT_OPS_TYPE)
    except FileNotFoundError:
        return Probe(Feature.BPF_STRUCT_OPS, False, f"{VMLINUX_BTF} missing, so no struct_ops types")
    except (OSError, btf.BtfError) as exc:
        return Probe(Feature.BPF_STRUCT_OPS, False, f"cannot read {VMLINUX_BTF}: {exc}")
    if "STRUCT" in kinds:
        return Probe(Feature.BPF_STRUCT_OPS, True, f"vmlinux BTF has STRUCT '{STRUCT_OPS_TYPE}'")
    return Probe(Feature.BPF_STRUCT_OPS, False,
                 f"vmlinux BTF has no STRUCT '{STRUCT_OPS_TYPE}' (no CONFIG_BPF_JIT / "
                 "struct_ops for TCP congestion control)")


def probe_modules() -> Probe:
    release = platform.release()
    problems: list[str] = []
    if not Path("/proc/modules").exists():
        problems.append("/proc/modules missing (kernel built without CONFIG_MODULES)")
    moddir = Path("/lib/modules") / release
    if not moddir.is_dir():
        problems.append(f"{moddir} missing")
    argv = ["modprobe", "-n", "dummy"]
    res = _run(argv)
    if not res.ok:
        problems.append(f"{_cmd(argv)}: {res.why()}")
    if problems:
        return Probe(Feature.MODULES, False, "; ".join(problems))
    return Probe(Feature.MODULES, True, f"/proc/modules, {moddir} present; {_cmd(argv)} works")


def _genl_family(name: str) -> _Result:
    return _run(["genl", "ctrl", "get", "name", name])


def probe_ovs_kernel() -> Probe:
    if Path("/sys/module/openvswitch").exists():
        return Probe(Feature.OVS_KERNEL, True, "openvswitch module loaded (/sys/module/openvswitch)")
    genl = _genl_family("ovs_datapath")
    if genl.ok:
        return Probe(Feature.OVS_KERNEL, True, "generic netlink family ovs_datapath present")
    argv = ["modprobe", "openvswitch"]
    res = _run(argv, timeout=15)
    if res.ok:
        # We loaded it: unload it again (best effort) so the probe leaves nothing behind.
        _run(["modprobe", "-r", "-q", "openvswitch"], timeout=15)
        return Probe(Feature.OVS_KERNEL, True, f"{_cmd(argv)} works (unloaded again)")
    genl_why = "genl not found" if genl.rc is None else genl.why()
    return Probe(Feature.OVS_KERNEL, False,
                 f"{_cmd(argv)}: {res.why()}; no /sys/module/openvswitch; generic netlink "
                 f"family ovs_datapath absent ({genl_why})")


def _ovs_rundir() -> Path:
    return Path(os.environ.get("OVS_RUNDIR", "/var/run/openvswitch"))


def _pid_alive(pidfile: Path) -> bool:
    try:
        pid = int(pidfile.read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    return True


def probe_ovs_userspace() -> Probe:
    missing = [b for b in ("ovs-vswitchd", "ovsdb-server", "ovs-vsctl") if shutil.which(b) is None]
    if missing:
        return Probe(Feature.OVS_USERSPACE, False, f"not installed: {', '.join(missing)}")
    rundir = _ovs_rundir()
    down = [d for d in ("ovsdb-server", "ovs-vswitchd") if not _pid_alive(rundir / f"{d}.pid")]
    if down:
        return Probe(Feature.OVS_USERSPACE, True,
                     f"binaries present; {', '.join(down)} not running (no live pid in "
                     f"{rundir}), so add-br of a datapath_type=netdev bridge was not tried")
    br = f"otp{secrets.token_hex(4)}"
    vsctl = ["ovs-vsctl", "--timeout=5"]
    shown = ["ovs-vsctl", "add-br", br, "--", "set", "bridge", br, "datapath_type=netdev"]
    try:
        res = _run([*vsctl, *shown[1:]], timeout=10)
        if not res.ok:
            return _fail(Feature.OVS_USERSPACE, shown, res)
        port = _run([*vsctl, "get", "Interface", br, "ofport"], timeout=10)
        if not port.ok or port.out.strip() in ("", "-1", "[]"):
            err = _run([*vsctl, "get", "Interface", br, "error"], timeout=10)
            return Probe(Feature.OVS_USERSPACE, False,
                         f"{_cmd(shown)}: bridge added but its port did not come up "
                         f"(ofport {port.out.strip() or port.why()}, error {err.out.strip()})")
    finally:
        _run([*vsctl, "--if-exists", "del-br", br], timeout=10)
    return Probe(Feature.OVS_USERSPACE, True, "daemons running; datapath_type=netdev bridge added and deleted")


def _tracefs_mount() -> Path | None:
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    for line in mounts:
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "tracefs":
            return Path(fields[1])
    return None


def _check_tcp_probe(root: Path, how: str) -> Probe:
    event = root / "events" / "tcp" / "tcp_probe"
    if event.is_dir():
        return Probe(Feature.TRACEPOINTS, True, f"tracefs {how}; events/tcp/tcp_probe exists")
    return Probe(Feature.TRACEPOINTS, False, f"tracefs {how} but events/tcp/tcp_probe does not exist")


def probe_tracepoints() -> Probe:
    mounted = _tracefs_mount()
    if mounted is not None:
        return _check_tcp_probe(mounted, f"mounted at {mounted}")
    # Not mounted: try a private, temporary mount (unmounted again at once).
    with tempfile.TemporaryDirectory(prefix="ot-probe-tracefs-") as tmp:
        argv = ["mount", "-t", "tracefs", "nodev", tmp]
        res = _run(argv)
        if not res.ok:
            return Probe(Feature.TRACEPOINTS, False,
                         f"tracefs not mounted and {_cmd(argv[:4])} failed: {res.why()}")
        try:
            return _check_tcp_probe(Path(tmp), "not mounted but mountable")
        finally:
            _run(["umount", tmp])


def probe_kprobes() -> Probe:
    """The perf ``kprobe`` event source (Linux >= 4.17) or tracefs ``kprobe_events``: how
    libbpf attaches a kprobe (the cwnd tracer's timer probes, ebpf/cwndtrace.bpf.c)."""
    pmu = KPROBE_PMU
    if pmu.is_dir():
        return Probe(Feature.KPROBES, True, f"{pmu} exists (perf kprobe events)")
    mounted = _tracefs_mount()
    if mounted is not None and (mounted / "kprobe_events").exists():
        return Probe(Feature.KPROBES, True, f"{mounted}/kprobe_events exists (legacy kprobe events)")
    return Probe(Feature.KPROBES, False, f"no {pmu}, and no kprobe_events in a mounted tracefs (libbpf "
                                         "attaches kprobes through one of them; CONFIG_KPROBE_EVENTS)")


def probe_netns() -> Probe:
    ns = _new_ns_name()
    res = _run(["ip", "netns", "add", ns])
    if not res.ok:
        return _fail(Feature.NETNS, ["ip", "netns", "add", ns], res)
    res = _run(["ip", "netns", "del", ns])
    if not res.ok:
        return _fail(Feature.NETNS, ["ip", "netns", "del", ns], res)
    return Probe(Feature.NETNS, True, "ip netns add/del works")


PROBES: dict[Feature, Callable[[], Probe]] = {
    Feature.NETEM: probe_netem,
    Feature.FQ: probe_fq,
    Feature.HTB: probe_htb,
    Feature.TBF: probe_tbf,
    Feature.CLSACT_BPF: probe_clsact_bpf,
    Feature.BPF_STRUCT_OPS: probe_bpf_struct_ops,
    Feature.BTF: probe_btf,
    Feature.MODULES: probe_modules,
    Feature.OVS_KERNEL: probe_ovs_kernel,
    Feature.OVS_USERSPACE: probe_ovs_userspace,
    Feature.TRACEPOINTS: probe_tracepoints,
    Feature.KPROBES: probe_kprobes,
    Feature.NETNS: probe_netns,
}


def probe_all(names: Iterable[str] | None = None) -> dict[str, Probe]:
    """Run every probe, or those of ``names`` that exist (in :data:`FEATURES` order); a
    crashing probe reports ok=False."""
    wanted = set(FEATURES if names is None else names)
    results: dict[str, Probe] = {}
    for name in (f for f in FEATURES if f in wanted):
        try:
            results[name] = PROBES[name]()
        except Exception as exc:  # noqa: BLE001 - a probe bug must not hide the others
            results[name] = Probe(name, False, f"probe crashed: {type(exc).__name__}: {exc}")
    return results


def missing_features(needed: set[str] | frozenset[str], probes: dict[str, Probe]) -> list[str]:
    """The features in ``needed`` that are not ok (unknown ones count as missing)."""
    order = {f: i for i, f in enumerate(FEATURES)}
    bad = [f for f in needed if not (f in probes and probes[f].ok)]
    return sorted(bad, key=lambda f: (order.get(f, len(order)), f))


# ------------------------------------------------------------------- distro kernel, KVM


def _version_key(ver: str) -> tuple:
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", ver) if p)


def distro_kernel(boot_dir: Path = Path("/boot"), modules_dir: Path = Path("/lib/modules")) -> Path | None:
    """The newest ``vmlinuz-<ver>`` in ``boot_dir`` whose ``modules_dir/<ver>`` exists."""
    best: tuple[tuple, Path] | None = None
    for image in boot_dir.glob("vmlinuz-*"):
        ver = image.name[len("vmlinuz-"):]
        if not ver or not image.is_file() or not (modules_dir / ver).is_dir():
            continue
        key = _version_key(ver)
        if best is None or key > best[0]:
            best = (key, image)
    return best[1] if best else None


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown-boot"


def _vng_path() -> str:
    """PATH with the venv's bin first: vng needs virtme-run next to it."""
    dirs = [str(_REPO / ".venv" / "bin"), str(Path(sys.executable).parent)]
    rest = os.environ.get("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    return os.pathsep.join([*dict.fromkeys(d for d in dirs if Path(d).is_dir()), rest])


def _kvm_reason(out: str, err: str, rc: int | None) -> str:
    text = f"{err}\n{out}"
    hits = [ln.strip() for ln in text.splitlines()
            if re.search(r"error|failed|abort|assert|cannot|could not|no such", ln, re.I)]
    hits = list(dict.fromkeys(hits))[:3]
    code = "timed out" if rc is None else f"exited {rc}"
    reason = "; ".join(hits) if hits else (text.strip().splitlines() or ["no output"])[-1].strip()
    return f"{code} without printing {KVM_MARKER}: {reason}"[:500]


def _boot_with_kvm(image: Path, timeout_s: float) -> Probe:
    path = _vng_path()
    vng = shutil.which("vng", path=path)
    if vng is None:
        return Probe(KVM, False, "vng (virtme-ng) not found on PATH or in the venv")
    argv = [vng, "--run", str(image), "--cpus", "1", "--memory", "512M",
            "--exec", f"echo {KVM_MARKER}"]
    env = {**os.environ, "PATH": path}
    shown = f"vng --run {image} --cpus 1 --memory 512M --exec 'echo {KVM_MARKER}'"
    # Own session so a timeout kills QEMU too (it is a child of vng).
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd="/",
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        rc = None
    if any(ln.strip() == KVM_MARKER for ln in out.splitlines()):
        return Probe(KVM, True, f"{shown}: guest booted with KVM and printed {KVM_MARKER}")
    if rc is None:
        return Probe(KVM, False, f"{shown}: timed out after {timeout_s:g} s; "
                     + _kvm_reason(out, err, rc))
    return Probe(KVM, False, f"{shown}: {_kvm_reason(out, err, rc)}")


def kvm_probe(kernel_image: Path, timeout_s: float = 60) -> Probe:
    """Boot ``kernel_image`` under virtme-ng with KVM; ok only if the guest ran a command.

    The boot result is cached per host boot, image path and image mtime in
    ``<state dir>/kvm-probe.json``.
    """
    kvm_dev = Path("/dev/kvm")
    if not kvm_dev.exists():
        return Probe(KVM, False, "/dev/kvm does not exist")
    if not os.access(kvm_dev, os.R_OK | os.W_OK):
        return Probe(KVM, False, "/dev/kvm is not readable and writable by this user")
    image = Path(kernel_image)
    try:
        mtime = image.stat().st_mtime_ns
    except OSError as exc:
        return Probe(KVM, False, f"kernel image {image}: {exc.strerror}")
    key = f"{_boot_id()}|{image.resolve()}|{mtime}"
    cache = cmd.state_dir() / "kvm-probe.json"
    entries: dict = {}
    try:
        entries = json.loads(cache.read_text())
        hit = entries.get(key) if isinstance(entries, dict) else None
        if isinstance(hit, dict) and {"ok", "detail"} <= hit.keys():
            return Probe(KVM, bool(hit["ok"]), str(hit["detail"]))
    except (OSError, ValueError):
        entries = {}
    if not isinstance(entries, dict):
        entries = {}
    probe = _boot_with_kvm(image, timeout_s)
    # Keep only this boot's entries; write atomically; a read-only state dir is fine.
    boot = _boot_id()
    entries = {k: v for k, v in entries.items() if k.startswith(boot + "|")}
    entries[key] = {**asdict(probe), "probed_at": time.time()}
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entries, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, cache)
    except OSError:
        pass
    return probe


# ----------------------------------------------------------------------- tool versions

# tool -> command printing its version (None: handled specially)
_VERSION_CMDS: dict[str, list[str] | None] = {
    "python": None,
    "mininet": ["mn", "--version"],
    "ovs-vswitchd": ["ovs-vswitchd", "--version"],
    "iperf3": ["iperf3", "--version"],
    "tcpdump": ["tcpdump", "--version"],
    "tshark": ["tshark", "--version"],
    "tc": ["tc", "-V"],
    "bpftool": ["bpftool", "--version"],
    "clang": ["clang", "--version"],
    "qemu-system-x86_64": ["qemu-system-x86_64", "--version"],
    "virtme-ng": ["vng", "--version"],
    "os-ken": None,
    "vagrant": ["vagrant", "--version"],
}
_DISTS = {"os-ken": "os-ken"}


def _first_version_line(text: str) -> str | None:
    for line in text.splitlines():
        line = line.strip()
        if re.search(r"\d+\.\d+", line) and not line.lower().startswith("running as"):
            return line[:120]
    return None


def _tool_version(tool: str) -> str:
    if tool == "python":
        return platform.python_version()
    if tool in _DISTS:
        try:
            return importlib.metadata.version(_DISTS[tool])
        except importlib.metadata.PackageNotFoundError:
            return "missing"
    argv = list(_VERSION_CMDS[tool] or [])
    path = _vng_path()
    exe = shutil.which(argv[0], path=path)
    if exe is None:
        return "missing"
    env = {**os.environ, "PATH": path, "VAGRANT_CHECKPOINT_DISABLE": "1"}
    res = _run([exe, *argv[1:]], timeout=10, env=env)
    if res.rc is None:
        return f"unknown ({res.why()})"
    line = _first_version_line(res.out) or _first_version_line(res.err)
    if line:
        return line.replace(exe, argv[0])
    return f"unknown (exit {res.rc})"


def tool_versions() -> dict[str, str]:
    """Version line of each tool the testbed uses; ``"missing"`` when absent."""
    from concurrent.futures import ThreadPoolExecutor

    tools = list(_VERSION_CMDS)
    with ThreadPoolExecutor(max_workers=len(tools)) as pool:
        return dict(zip(tools, pool.map(_tool_version, tools)))
