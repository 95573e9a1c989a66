"""Pin directories in the ledger (resource ``bpf-pin``, owned by testbed.bpf): recorded
once per ledger before the loader runs, removed by ``testbed clean`` after a killed run,
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

    def loader(args, input=None):
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
