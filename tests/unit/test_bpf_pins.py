"""Pin directories in the ledger (resource ``bpf-pin``, owned by testbed.bpf): recorded
before the loader runs unless a live entry records it already (again after a teardown), removed by ``testbed clean`` after a killed run,
never outside the testbed's pin root. Without root: the pin root is a temporary folder."""

from __future__ import annotations

import json

import pytest

from testbed import bpf, cmd
from testbed.clean import clean
from testbed.ledger import TEARDOWNS, Ledger, ledger_dir


@pytest.fixture(autouse=True)
def pin_root(tmp_path, monkeypatch):
    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path / "state"))
    root = tmp_path / "bpffs" / "optical-tcp-testbed"
    monkeypatch.setattr(bpf, "PIN_ROOT", root)
    return root


def killed_run_ledger(run_id: str, paths: list[str]) -> None:
    """The ledger a killed run left: its owner is gone (pid 1 with another start time)."""
    header = {"type": "header", "version": 2, "run_id": run_id, "boot_id": cmd.boot_id(), "pid": 1,
              "pid_start": -1}
    adds = [{"type": "add", "seq": i, "resource": "bpf-pin", "path": p} for i, p in enumerate(paths)]
    ledger_dir().mkdir(parents=True, exist_ok=True)
    (ledger_dir() / f"{run_id}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [header, *adds]))


def pins(root):
    """A pin directory as the loader leaves it: maps and per-load program folders."""
    (root / "maps").mkdir(parents=True)
    (root / "progs" / "node0").mkdir(parents=True)
    for f in (root / "maps" / "optsw_cfg", root / "progs" / "node0" / "optsw_ingress"):
        f.write_text("")
    return root


def test_the_bpf_pin_teardown_is_testbed_bpfs():
    assert TEARDOWNS["bpf-pin"].remove.__module__ == "testbed.bpf"
    assert TEARDOWNS["bpf-pin"].per_boot  # pins die with the kernel


def test_clean_removes_the_pin_directories_of_a_killed_run(pin_root):
    a, b = pins(pin_root / "tok-optical"), pins(pin_root / "tok-p1")
    killed_run_ledger("killed", [str(a), str(b), str(pin_root / "tok-never-created")])
    cleaned, skipped, errors = clean()
    assert (errors, skipped) == ([], []) and cleaned == ["killed: removed 3 object(s)"]
    assert not a.exists() and not b.exists() and pin_root.exists()
    assert not (ledger_dir() / "killed.jsonl").exists()


@pytest.mark.parametrize("path", ["{root}", "{root}/../elsewhere", "{tmp}/elsewhere", "relative/pins"])
def test_clean_refuses_a_pin_path_outside_the_pin_root(pin_root, tmp_path, path):
    path = path.format(root=pin_root, tmp=tmp_path)
    target = tmp_path / "elsewhere"
    target.mkdir()
    pins(pin_root / "tok-optical")
    killed_run_ledger("odd", [path])
    cleaned, _, errors = clean()
    assert cleaned == [] and len(errors) == 1 and f"is not below {pin_root}/" in errors[0], errors
    assert target.exists() and (pin_root / "tok-optical" / "maps" / "optsw_cfg").exists()
    assert (ledger_dir() / "odd.jsonl").exists()  # kept: its object is still there


def test_a_pin_dir_is_recorded_once_per_ledger_before_the_loader_runs(pin_root, monkeypatch):
    led = Ledger.create("once")
    seen = []

    def loader(args, input=None, **kw):
        seen.append([e.resource for e in led.entries])
        return "".join(json.dumps({"op": op.split("\t")[0], "ifindex": 2, "dev": "eth0", "dir": "ingress"}) + "\n"
                       for op in (input or "").splitlines())

    monkeypatch.setattr(bpf, "_run_loader", loader)
    monkeypatch.setattr(bpf, "ensure_bpffs", lambda: None)
    for port in (1, 2):
        bpf.attach_portstat(led, netns=None, dev="eth0", direction="ingress", node_id=1, port_id=port,
                            pin_dir=pin_root / "tok-p1")
    bpf.attach_portstat(led, netns=None, dev="eth0", direction="ingress", node_id=1, port_id=1,
                        pin_dir=pin_root / "tok-p2")
    assert [(e.resource, e.attrs) for e in led.entries] == [
        ("bpf-pin", {"path": str(pin_root / "tok-p1")}), ("bpf-pin", {"path": str(pin_root / "tok-p2")})]
    assert seen == [["bpf-pin"], ["bpf-pin"], ["bpf-pin", "bpf-pin"]]
    other = Ledger.create("other")  # another ledger records it again
    bpf.attach_portstat(other, netns=None, dev="eth0", direction="ingress", node_id=1, port_id=1,
                        pin_dir=pin_root / "tok-p1")
    assert [e.resource for e in other.entries] == ["bpf-pin"]


def test_a_pin_dir_torn_down_with_its_emulation_is_recorded_again(pin_root, monkeypatch):
    """A fabric rebuilt in the same run after a failed point: its pin dir (same token,
    same path) must be in the new emulation's part of the ledger, or that emulation's
    teardown leaves the pinned programs behind and the next build finds them."""
    led = Ledger.create("rebuild")
    monkeypatch.setattr(bpf, "_run_loader", lambda args, input=None, **kw: "".join(
        json.dumps({"op": "attach", "ifindex": 2, "dev": "eth0", "dir": "ingress"}) + "\n"
        for _ in (input or "").splitlines()))
    monkeypatch.setattr(bpf, "ensure_bpffs", lambda: None)
    pin_dir = pin_root / "tok-optical"

    def build() -> int:
        first = len(led.entries)
        bpf.attach_portstat(led, netns=None, dev="eth0", direction="ingress", node_id=1, port_id=1,
                            pin_dir=pin_dir)
        pins(pin_dir)  # what the loader pinned
        return first

    first = build()
    assert led.teardown(since=first, archive=False) == [] and not pin_dir.exists()
    second = build()
    assert [e.resource for e in led.entries[second:]] == ["bpf-pin"]
    assert led.teardown(since=second, archive=False) == [] and not pin_dir.exists()


def test_a_batch_gets_the_loader_timeout_per_load(monkeypatch, tmp_path):
    """One load per process had LOADER_TIMEOUT_S; a batch of N loads (a fat-tree's
    nodes) gets N times that: under software emulation on a loaded host, 36 loads
    took over 60 s."""
    seen = []
    monkeypatch.setattr(bpf, "_run_loader", lambda args, input=None, timeout_s=None: seen.append(timeout_s) or
                        "".join(json.dumps({"op": "load"}) + "\n" for _ in (input or "").splitlines()))
    batch = bpf.Batch()
    for node in range(3):
        batch.load(tmp_path / "x.bpf.o", tmp_path / "pins", prog_dir=tmp_path / f"progs{node}",
                   rodata={"node_id": node})
    batch.attach(None, "eth0", "ingress", "@x")
    batch.run()
    assert seen == [3 * bpf.LOADER_TIMEOUT_S]
    bpf.Batch().update(tmp_path / "m", b"k", b"v").run()
    assert seen[-1] == bpf.LOADER_TIMEOUT_S
