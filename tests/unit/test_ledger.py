"""The ledger: written before creation, torn down in reverse, never touches foreign objects."""

import dataclasses
import json
import subprocess
import time

import pytest

from testbed import cmd
from testbed.clean import clean
from testbed.errors import LedgerError
from testbed.ledger import TEARDOWNS, Ledger


@pytest.fixture(autouse=True)
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path / "state"))
    return tmp_path


def test_teardown_reverse_order_and_archive(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    led = Ledger.create("r1", results_dir=str(results))
    d = tmp_path / "d"
    led.add("file", path=str(d))
    d.mkdir()
    led.add("file", path=str(d / "f"))
    (d / "f").write_text("x")
    assert led.teardown() == []
    assert not d.exists()  # f went first, then d: reverse order
    assert not led.path.exists()
    lines = [json.loads(x) for x in (results / "logs/ledger.jsonl").read_text().splitlines()]
    assert [x["type"] for x in lines] == ["header", "add", "add", "gone", "gone"]
    assert [x["seq"] for x in lines if x["type"] == "gone"] == [1, 0]


def test_truncated_last_line_is_tolerated(tmp_path):
    led = Ledger.create("r2")
    led.add("file", path=str(tmp_path / "x"))
    with open(led.path, "a") as f:
        f.write('{"type": "add", "seq": 1, "resource": "fi')  # killed mid-write
    again = Ledger.load(led.path)
    assert len(again.live()) == 1


def test_process_killed_only_if_identity_matches(tmp_path):
    ours = subprocess.Popen(["sleep", "60"], start_new_session=True)
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        led = Ledger.create("r3")
        s = led.add("process", argv=["sleep"], group=True)
        led.update(s, pid=ours.pid, start_time=cmd.process_start_time(ours.pid))
        # same pid number recorded with a wrong start time stands for a recycled PID
        s = led.add("process", argv=["sleep"])
        led.update(s, pid=other.pid, start_time=cmd.process_start_time(other.pid) + 1)
        assert led.teardown() == []
        assert ours.wait(timeout=5) is not None
        time.sleep(0.2)
        assert other.poll() is None
    finally:
        ours.kill()
        other.kill()
        ours.wait()
        other.wait()


def test_clean_skips_a_live_run_and_finishes_a_dead_one(tmp_path):
    victim = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        dead = Ledger.create("dead")
        s = dead.add("process", argv=["sleep"])
        dead.update(s, pid=victim.pid, start_time=cmd.process_start_time(victim.pid))
        # the owner of "dead" is this process, which counts as not running for clean
        live_owner = subprocess.Popen(["sleep", "60"])
        live = Ledger.create("live")
        header = dict(live.header, pid=live_owner.pid, pid_start=cmd.process_start_time(live_owner.pid))
        live.path.write_text(json.dumps({"type": "header", **header}) + "\n")
        cleaned, skipped, errors = clean()
        assert errors == [] and len(cleaned) == 1 and "dead" in cleaned[0]
        assert len(skipped) == 1 and "live" in skipped[0]
        assert victim.wait(timeout=5) is not None
        live_owner.kill()
        live_owner.wait()
    finally:
        victim.kill()
        victim.wait()


def test_devices_inside_deleted_namespaces_are_not_removed_one_by_one(monkeypatch):
    """A netns teardown takes its devices and qdiscs along: only what has an end outside
    the namespaces being deleted gets its own handler call; a second teardown (archived
    ledger) is a no-op."""
    calls: list[tuple[str, str]] = []
    for resource in ("netns", "link", "qdisc"):
        record = lambda e, led, r=resource: calls.append((r, e.attrs.get("name") or e.attrs["dev"]))  # noqa: E731
        monkeypatch.setitem(TEARDOWNS, resource, dataclasses.replace(TEARDOWNS[resource], remove=record))
    led = Ledger.create("r-inside")
    led.add("netns", name="nsA")
    led.add("netns", name="nsB")
    led.add("link", name="a0", netns="nsA", peer="b0", peer_netns="nsB")      # wholly inside
    led.add("link", name="a1", netns="nsA", peer="root1", peer_netns=None)    # one end in root
    led.add("qdisc", dev="a0", netns="nsA", parent="root")                    # inside
    led.add("qdisc", dev="root1", netns=None, parent="root")                  # root namespace
    assert led.teardown() == []
    assert calls == [("qdisc", "root1"), ("link", "a1"), ("netns", "nsB"), ("netns", "nsA")]
    assert all(e.gone for e in led.entries)
    assert led.teardown() == []  # already archived: nothing to do, no warning


def test_partial_teardown_of_a_kept_namespace_removes_its_devices(monkeypatch):
    """Teardown since a later seq (a point's objects) does not skip devices whose
    namespace stays (the namespace is not part of that teardown)."""
    calls: list[str] = []
    for resource, key in (("qdisc", "dev"), ("netns", "name")):
        record = lambda e, led, k=key: calls.append(e.attrs[k])  # noqa: E731
        monkeypatch.setitem(TEARDOWNS, resource, dataclasses.replace(TEARDOWNS[resource], remove=record))
    led = Ledger.create("r-partial")
    led.add("netns", name="nsA")
    seq = led.add("qdisc", dev="a0", netns="nsA", parent="root")
    assert led.teardown(since=seq) == []
    assert calls == ["a0"]


def test_a_shared_daemon_is_stopped_by_its_last_holder_only(tmp_path):
    """OVS daemons started by one run and joined by another (ovs.ensure_daemons records
    them in both ledgers): the first teardown leaves them running, the last stops them,
    whichever run started them."""
    daemon = subprocess.Popen(["sleep", "60"])
    try:
        ident = {"name": "ovs-vswitchd", "pid": daemon.pid, "start_time": cmd.process_start_time(daemon.pid)}
        starter, joiner = Ledger.create("starter"), Ledger.create("joiner")
        starter.add("ovs-daemon", **ident)
        joiner.add("ovs-daemon", **ident, shared=True)
        assert starter.teardown() == []
        assert daemon.poll() is None                     # the joiner still holds it
        assert joiner.teardown() == []
        assert daemon.wait(timeout=5) is not None        # the last holder stopped it
    finally:
        daemon.kill()
        daemon.wait()


def test_ensure_daemons_joins_testbed_daemons_and_never_system_ones(tmp_path, monkeypatch):
    from testbed import ovs

    run_dir = tmp_path / "ovs-run"
    run_dir.mkdir()
    monkeypatch.setattr(ovs, "RUN_DIR", run_dir)
    monkeypatch.setattr(ovs, "daemons_running", lambda: True)
    ours, system = subprocess.Popen(["sleep", "60"]), subprocess.Popen(["sleep", "60"])
    try:
        (run_dir / "ovs-vswitchd.pid").write_text(f"{ours.pid}\n")
        (run_dir / "ovsdb-server.pid").write_text(f"{system.pid}\n")   # e.g. the system service's
        starter = Ledger.create("starter")
        starter.add("ovs-daemon", name="ovs-vswitchd", pid=ours.pid, start_time=cmd.process_start_time(ours.pid))
        joiner = Ledger.create("joiner")
        ovs.ensure_daemons(joiner, kernel_datapath=False)
        ovs.ensure_daemons(joiner, kernel_datapath=False)                 # once per run, not per call
        held = [(e.attrs["name"], e.attrs["pid"]) for e in joiner.live()]
        assert held == [("ovs-vswitchd", ours.pid)]
    finally:
        for p in (ours, system):
            p.kill()
            p.wait()


def test_a_partial_user_starting_at_seq_0_does_not_archive_the_ledger(tmp_path):
    """An Emulation that is the first object of a longer run (the E3 UT test builds two
    in one ledger) tears down from seq 0 without archiving: the ledger keeps its file and
    header for what comes next, while recording into an archived ledger is refused
    (it used to recreate the file without a header, which `testbed clean` skipped)."""
    led = Ledger.create("r-partial")
    led.add("file", path=str(tmp_path / "a"))
    assert led.teardown(since=0, archive=False) == []
    led.add("file", path=str(tmp_path / "b"))
    assert Ledger.load(led.path).header["run_id"] == "r-partial"
    assert led.teardown() == [] and not led.path.exists()
    with pytest.raises(LedgerError, match="archived"):
        led.add("file", path=str(tmp_path / "c"))


# -- the teardown registry: each resource's owner registers its teardown ------------------
OWNERS = {"process": "testbed.process", "netns": "testbed.nsops", "link": "testbed.nsops",
          "qdisc": "testbed.nsops", "ovs-bridge": "testbed.ovs", "ovs-daemon": "testbed.ovs",
          "module": "testbed.cc.modules", "guest": "testbed.vm", "file": "testbed.ledger",
          "bpf-pin": "testbed.bpf", "sysctl": "testbed.tcpmem"}


def test_every_resource_is_registered_by_its_owner():
    assert {r: t.remove.__module__ for r, t in TEARDOWNS.items()} == OWNERS


def test_the_ledger_imports_no_owner_and_testbed_clean_imports_them_all():
    """A fresh interpreter: the ledger alone knows only its own resources (it imports
    none of the owners, which import it: no cycle); `import testbed.clean` registers
    every one, whatever else was imported."""
    import sys

    code = ("import sys, testbed.ledger as l; before = sorted(l.TEARDOWNS); "
            "owners = sorted(m for m in sys.modules if m in ('testbed.process', 'testbed.nsops', 'testbed.ovs', "
            "'testbed.cc.modules', 'testbed.vm', 'testbed.bpf')); import testbed.clean; "
            "print(before, owners, sorted(l.TEARDOWNS))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split("] [") == ["['file'", "", f"{', '.join(repr(r) for r in sorted(OWNERS))}]\n"], out


def test_a_resource_has_one_owner():
    from testbed.ledger import register

    with pytest.raises(LedgerError, match="'netns' is registered by testbed.nsops"):
        register("netns", lambda e, led: None)   # this test module is not its owner
    assert TEARDOWNS["netns"].remove.__module__ == "testbed.nsops"


def _write_ledger(path, header: dict, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in [{"type": "header", **header}, *records]))


def test_a_version_1_ledger_with_kind_is_read_and_cleaned(tmp_path):
    """Ledgers written before the rename name the resource "kind": `testbed clean` still
    removes their objects (a file, a process group) and archives them."""
    from testbed.ledger import ledger_dir

    victim = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        f = tmp_path / "leftover"
        f.write_text("x")
        header = {"version": 1, "run_id": "old", "boot_id": cmd.boot_id(), "pid": 1, "pid_start": -1}
        _write_ledger(ledger_dir() / "old.jsonl", header, [
            {"type": "add", "seq": 0, "kind": "file", "path": str(f)},
            {"type": "add", "seq": 1, "kind": "process", "argv": ["sleep", "60"], "netns": None, "group": True,
             "stop_signal": 15},
            {"type": "update", "seq": 1, "pid": victim.pid, "start_time": cmd.process_start_time(victim.pid)},
            {"type": "add", "seq": 2, "kind": "file", "path": str(tmp_path / "went")},
            {"type": "gone", "seq": 2}])
        led = Ledger.load(ledger_dir() / "old.jsonl")
        assert [(e.resource, e.gone) for e in led.entries] == [("file", False), ("process", False), ("file", True)]
        assert led.entries[1].attrs["pid"] == victim.pid and "kind" not in led.entries[1].attrs
        cleaned, skipped, errors = clean()
        assert (errors, skipped) == ([], []) and cleaned == ["old: removed 2 object(s)"]
        assert victim.wait(timeout=5) is not None and not f.exists()   # (reaped by the teardown)
        assert not (ledger_dir() / "old.jsonl").exists()
    finally:
        victim.kill()
        victim.wait()


def test_an_unknown_resource_is_a_clear_error_not_a_crash(tmp_path):
    """A ledger naming a resource nobody registers (a newer testbed's): clean reports it
    by name, removes the rest and keeps the ledger; recording one is refused."""
    from testbed.ledger import ledger_dir

    f = tmp_path / "leftover"
    f.write_text("x")
    header = {"version": 2, "run_id": "future", "boot_id": cmd.boot_id(), "pid": 1, "pid_start": -1}
    path = ledger_dir() / "future.jsonl"
    _write_ledger(path, header, [{"type": "add", "seq": 0, "resource": "file", "path": str(f)},
                                 {"type": "add", "seq": 1, "resource": "widget", "name": "w0"}])
    for _ in range(2):                     # and again: the kept ledger reports the same
        cleaned, skipped, errors = clean()
        assert cleaned == [] and len(errors) == 1, errors
        assert errors[0].startswith("future: widget {'name': 'w0'}: no teardown is registered for ledger "
                                    "resource 'widget' (known: bpf-pin, file, guest, link, module, netns"), errors
        assert path.exists() and not f.exists()
    with pytest.raises(LedgerError, match="unknown ledger resource 'widget'"):
        Ledger.create("r-widget").add("widget", name="w1")
