"""Helpers shared by the test tiers: root/feature skips (kselftest style), two
namespaces joined by a veth pair, a timestamping packet tap, the killed-run scenario.

Imported as `helpers` (pyproject sets pytest's pythonpath to tests/). Fixtures live in
conftest.py and no test imports a conftest module: two conftest.py files collected in one
session shadow each other in sys.modules, which broke the guest tier once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed import cmd, hostclock, ovs
from testbed.bpf import PIN_ROOT
from testbed.ledger import Ledger, ledger_dir
from testbed.nsops import link_exists, netns_exists
from testbed.traffic.records import read_jsonl

REPO = Path(__file__).resolve().parent.parent


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (namespaces, qdiscs, BPF)")


#: probe results of this test process, by feature: a kernel's features do not change
#: while a pytest process runs, and each probe makes namespaces, qdiscs and processes
#: (the 13 of them ~1 s natively; in the TCG guest beside four other guests all 13 took
#: 43 s of wall time, the five an optical test names 21 s, and every test paid them
#: again: 2026-11-29)
_PROBED: dict = {}


def require_features(*names: str) -> None:
    """Skip with the probe's reason when this kernel lacks a feature, unless the tier
    demands it (TESTBED_REQUIRE_FEATURES=1, set for the guest tier): then fail. Probes
    only the features named, each once per process."""
    from testbed.features import probe_all

    unknown = [n for n in names if n not in _PROBED]
    _PROBED.update(probe_all(unknown))
    missing = {n: _PROBED[n].detail for n in names if not _PROBED[n].ok}
    if missing:
        msg = "; ".join(f"{k}: {v}" for k, v in missing.items())
        if os.environ.get("TESTBED_REQUIRE_FEATURES") == "1":
            pytest.fail(f"this kernel must have {', '.join(missing)}: {msg}")
        pytest.skip(f"kernel lacks {msg}")


def veth_between_namespaces(ledger: Ledger, ns_a: str, ns_b: str, dev_a: str, dev_b: str,
                            address_a: str) -> None:
    """Namespaces ``ns_a`` and ``ns_b`` (IPv6 off) joined by a veth pair ``dev_a`` --
    ``dev_b``, both up, offloads off and NOARP (frames go out to ``dev_a``'s own MAC, so
    nothing but the test's packets crosses); ``address_a`` (CIDR) on ``dev_a``. Each
    object is recorded in ``ledger`` before it is created."""
    from testbed import nsops

    for ns in (ns_a, ns_b):
        assert not netns_exists(ns)
        ledger.add("netns", name=ns)
        cmd.run(["ip", "netns", "add", ns])
        for key in ("net.ipv6.conf.all.disable_ipv6", "net.ipv6.conf.default.disable_ipv6"):
            try:
                nsops.sysctl_write(ns, key, 1)
            except nsops.NsOpsError:
                pass            # no IPv6 in this kernel: nothing to silence
    ledger.add("link", name=dev_a, netns=ns_a, peer=dev_b, peer_netns=ns_b)
    nsops.add_veth(dev_a, ns_a, dev_b, ns_b)
    nsops.configure_link(dev_a, ns_a, offloads=False, arp=False, up=True)
    nsops.configure_link(dev_b, ns_b, offloads=False, arp=False, up=True)
    nsops.add_address(dev_a, ns_a, address_a)


def packet_tap(ns: str, dev: str, rcvbuf_bytes: int = 64 << 20) -> "socket.socket":
    """An AF_PACKET socket on ``dev`` in namespace ``ns`` seeing every frame in and out,
    each with its kernel timestamp (SO_TIMESTAMPNS, CLOCK_REALTIME: a frame received
    when it arrived, a frame sent when the device transmitted it)."""
    import socket

    from testbed import setns

    eth_p_all, so_timestampns, so_rcvbufforce = 0x0003, 35, 33
    with setns.entered(ns):
        r = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(eth_p_all))
        r.bind((dev, eth_p_all))
    r.setsockopt(socket.SOL_SOCKET, so_rcvbufforce, rcvbuf_bytes)
    r.setsockopt(socket.SOL_SOCKET, so_timestampns, 1)
    return r


def run_testbed(*args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
    # the timeout holds on the host's clock too (an instruction-counted guest's clock races
    # while it waits for the host: testbed.hostclock)
    p = hostclock.run([sys.executable, "-m", "testbed", *args], timeout=timeout, cwd=REPO)
    if check and p.returncode != 0:
        raise AssertionError(f"testbed {' '.join(args)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p


def summary_rows(out: Path) -> list[dict[str, str]]:
    import csv

    with open(out / "summary.csv") as f:
        return list(csv.DictReader(f))


def killed_run_then_clean(tmp_path: Path, datapath: str, extra_sets: list[str]) -> None:
    """SIGKILL a running demo mid-experiment, run `testbed clean`, and check that no
    object of that run is left while pre-existing objects of the same kinds survive."""
    tag = f"{os.getpid() % 10000:04d}"
    pre_veth, pre_br = f"otpre{tag}a", f"otpre{tag}br"
    helper = Ledger.create(f"test-helper-{os.getpid()}-{time.monotonic_ns()}")
    ovs.ensure_daemons(helper, kernel_datapath=datapath == "system")
    cmd.run(["ip", "link", "add", "name", pre_veth, "type", "veth", "peer", "name", f"otpre{tag}b"])
    cmd.run(["ovs-vsctl", "add-br", pre_br, "--", "set", "bridge", pre_br, f"datapath_type={datapath}"])
    run_id = f"killtest-{tag}-{int(time.time())}"
    proc = None
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "testbed", "run", "demo", "--native", "--reps", "1", "--run-id", run_id,
             "--out", str(tmp_path / "out"), "--set", "rate=20 Mbit/s", "--set", "duration=120 s",
             "--set", f"datapath={datapath}", "--set", "switch=ovs", *extra_sets],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        path = ledger_dir() / f"{run_id}-{proc.pid}.jsonl"
        deadline = hostclock.Deadline(300)
        records: list[dict] = []
        # Wait (bounded) until the run holds every resource: then kill it.
        while not deadline.expired():
            records = read_jsonl(path)
            resources = {r.get("resource") for r in records if r.get("type") == "add"}
            iperf_running = any(r.get("type") == "update" and "pid" in r for r in records) and \
                any("iperf3" in " ".join(r.get("argv", [])) for r in records if r.get("resource") == "process")
            if {"netns", "link", "ovs-bridge", "qdisc", "bpf-pin", "process"} <= resources and iperf_running:
                break
            assert proc.poll() is None, f"the run ended early (exit {proc.returncode})"
            time.sleep(0.2)
        else:
            pytest.fail(f"the run did not create every resource in time; ledger: {records}")
        time.sleep(1.0)
        proc.send_signal(signal.SIGKILL)
        hostclock.wait(proc, 10)
        records = read_jsonl(path)
        adds = [r for r in records if r.get("type") == "add"]
        netns = [r["name"] for r in adds if r["resource"] == "netns"]
        bridges = [r["name"] for r in adds if r["resource"] == "ovs-bridge"]
        links = [(r["name"], r.get("netns")) for r in adds if r["resource"] == "link"]
        pins = [Path(r["path"]) for r in adds if r["resource"] == "bpf-pin"]
        pids = [(r["pid"], r["start_time"]) for r in records if r.get("type") == "update" and "pid" in r]
        # The kill really left objects behind (so this test can fail).
        assert all(netns_exists(n) for n in netns) and netns
        assert any(cmd.process_start_time(p) == s for p, s in pids)

        clean = run_testbed("clean")
        assert run_id in clean.stdout, clean.stdout

        assert not [n for n in netns if netns_exists(n)]
        assert not [b for b in bridges if cmd.ok(["ovs-vsctl", "br-exists", b])]
        assert not [n for n, ns in links if link_exists(n, ns)]
        assert not [p for p in pins if p.exists()]
        assert not [p for p, s in pids if cmd.process_start_time(p) == s]
        token = netns[0].split("-")[0]
        veths = cmd.run(["ip", "-o", "link", "show", "type", "veth"]).stdout
        assert token not in veths
        assert not list(PIN_ROOT.glob(f"{token}-*")) if PIN_ROOT.exists() else True
        assert not path.exists()
        # Objects that existed before the run are untouched.
        assert link_exists(pre_veth)
        assert cmd.ok(["ovs-vsctl", "br-exists", pre_br])
    finally:
        if proc and proc.poll() is None:
            proc.kill()
            proc.wait()
        cmd.run(["ovs-vsctl", "--if-exists", "del-br", pre_br], check=False)
        cmd.run(["ip", "link", "del", "dev", pre_veth], check=False)
        helper.teardown()
