"""The environment record written beside every run's data (manifest.json)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from testbed import cmd, hostclock

REPO = Path(__file__).resolve().parent.parent
PYTHON_PACKAGES = ("virtme-ng", "os-ken", "scapy", "numpy", "scipy", "pandas",
                   "matplotlib", "mininet", "optical-tcp-testbed")
SYSCTLS = ("net.ipv4.tcp_congestion_control", "net.ipv4.tcp_sack", "net.ipv4.tcp_timestamps",
           "net.ipv4.tcp_window_scaling", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem", "net.ipv4.tcp_mem",
           "net.ipv4.tcp_no_metrics_save", "net.ipv4.tcp_thin_linear_timeouts",
           "net.core.default_qdisc", "net.ipv4.tcp_allowed_congestion_control", "kernel.hz")


#: the checkout's git state as the host read it when it launched the guest
#: (``<sha>:<0|1|?>``, :func:`git_env`; set by testbed.vm for the guest's command). In
#: the guest `git status` stats every tracked file over uncached 9p: 62 s of a 187 s
#: `testbed run` of the netem demo there (profiled 2026-11-29, beside four other
#: guests); the guest runs the very checkout the host read.
GIT_ENV = "TESTBED_GIT"


def git_env(info: dict[str, Any]) -> str:
    """:func:`git_info`'s record as the value of :data:`GIT_ENV`."""
    return f"{info['sha']}:{'?' if info['dirty'] is None else int(bool(info['dirty']))}"


def _from_git_env(value: str) -> dict[str, Any] | None:
    sha, sep, dirty = value.partition(":")
    if not sep or dirty not in ("0", "1", "?") or not (sha == "unknown" or re.fullmatch(r"[0-9a-f]{40}", sha)):
        return None
    return {"sha": sha, "dirty": None if dirty == "?" else dirty == "1"}


def git_info(timeout_s: float = 60.0) -> dict[str, Any]:
    """The commit the run uses: ``sha`` ("unknown" when git could not answer) and
    ``dirty`` (tracked files changed; None when git could not answer: never a guess).
    In a guest launched by testbed.vm, the host's reading at launch (:data:`GIT_ENV`).
    Each git call is bounded on both clocks (testbed.hostclock: a loaded icount guest's
    clock runs ahead of the host's; 10 s on the guest's clock alone was overrun)."""
    from testbed import hostclock

    given = _from_git_env(os.environ.get(GIT_ENV, ""))
    if given is not None:
        return given

    def git(*args: str) -> str | None:
        try:
            cp = hostclock.run(["git", "-C", str(REPO), *args], timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return cp.stdout.strip() if cp.returncode == 0 else None

    sha = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"sha": sha or "unknown", "dirty": None if status is None else bool(status)}


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PYTHON_PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "missing"
    return out


def sysctls() -> dict[str, str]:
    out = {}
    for key in SYSCTLS:
        p = Path("/proc/sys") / key.replace(".", "/")
        try:
            out[key] = " ".join(p.read_text().split())
        except OSError:
            out[key] = "n/a"
    return out


#: the host's own facts (:func:`host_facts`, JSON) as the host read them when it launched
#: the guest (set by testbed.vm): under TCG the guest sees QEMU's CPU model, not the
#: machine's, and the speed of an emulated run depends on the machine
HOST_ENV = "TESTBED_HOST"


def cpu_model(cpuinfo: str) -> str | None:
    """The first ``model name`` of a /proc/cpuinfo text; None without one."""
    m = re.search(r"^model name\s*:\s*(.+?)\s*$", cpuinfo, re.MULTILINE)
    return m.group(1) if m else None


def host_facts() -> dict[str, Any]:
    """This machine's CPU model (/proc/cpuinfo; None when unreadable), logical CPUs and
    kernel (release and build)."""
    try:
        model = cpu_model(Path("/proc/cpuinfo").read_text())
    except OSError:
        model = None
    return {"cpu_model": model, "cpus": os.cpu_count(), "kernel": platform.release(),
            "kernel_version": platform.version()}


def _host_from_env(value: str) -> dict[str, Any] | None:
    try:
        facts = json.loads(value)
    except ValueError:
        return None
    return facts if isinstance(facts, dict) else None


def where() -> dict[str, Any]:
    """Where the run runs: place (host or guest), the guest's accelerator and clock, this
    kernel, boot id, CPUs, and ``host``: the machine's facts (:func:`host_facts`; in a
    guest the host's reading at launch, :data:`HOST_ENV`, None when it is missing)."""
    in_guest = os.environ.get("TESTBED_IN_GUEST") == "1"
    return {"place": "guest" if in_guest else "host",
            "guest_accel": os.environ.get("TESTBED_GUEST_ACCEL") if in_guest else None,
            # what drove the clock every time in this run was measured with
            "clock": hostclock.guest_clock(),
            "kernel": platform.release(), "kernel_version": platform.version(),
            "boot_id": cmd.boot_id(), "cpus": os.cpu_count(), "hostname": platform.node(),
            "host": _host_from_env(os.environ.get(HOST_ENV, "")) if in_guest else host_facts()}


def congestion_control(defn: Any, host_names: list[str] | None = None,
                       link_rate_bps: float | None = None) -> dict[str, Any]:
    """The [cca] selection of ``defn`` and each host's effective profile settings
    (emulation units after time dilation, jiffy rounding at this kernel's HZ, and the
    profile's list of differences from the paper). Empty when no [cca] is given."""
    if getattr(defn, "cca", None) is None:
        return {}
    from testbed.cc.selection import settings
    from testbed.cc.sockops import SockopsError, kernel_hz

    try:
        hz = kernel_hz()
    except SockopsError:
        hz = 250
    hosts = host_names or sorted({"h1", "h2", *defn.cca.hosts})
    try:
        per_host = settings(defn.cca, hosts, defn.tdf, link_rate_bps, hz=hz)
    except Exception as exc:  # e.g. SAWL without a link rate: record why
        per_host = {"error": str(exc)}
    return {"selection": defn.cca.to_data(), "hosts": per_host}


def build(*, argv: list[str], tdf: float, seeds: list[int], features: list[str],
          extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything needed to interpret the data later without this machine."""
    return {"created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "argv": argv,
            "python_executable": sys.executable, "git": git_info(), "time_dilation_factor": tdf,
            "seeds": seeds, "kernel_features_needed": features, "where": where(),
            "versions": package_versions(), "sysctls": sysctls(), **(extra or {})}
