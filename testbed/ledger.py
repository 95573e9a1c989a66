"""Run ledgers: every object a run creates is written down before it is created.

A ledger is an append-only JSON-lines file in ``<state dir>/ledgers/<run-id>.jsonl``.
Lines are a header (run id, boot id, owner pid), ``add`` entries (kind + attributes,
written and fsync'ed *before* the object exists), ``update`` lines (e.g. a PID known
only after spawning) and ``gone`` lines (the object was removed). Teardown walks the
live entries in reverse creation order; normal exit, exceptions, SIGINT/SIGTERM and
``testbed clean`` after a SIGKILL all use this one code path.

Objects that existed before the run are never touched: namespaces and interfaces carry
the run's unique token in their names and creation fails rather than reuse an existing
name, OVS bridges are deleted only when their ``external_ids`` carry this run's id, and
processes are killed only when PID *and* start time match on the same boot.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from testbed import cmd, nsops
from testbed.errors import CommandError, LedgerError

log = logging.getLogger(__name__)

OVS_RUN_KEY = "optical-tcp-testbed-run"
from testbed.bpf import PIN_ROOT as BPF_PIN_ROOT  # noqa: E402
# Kinds whose objects cannot outlive a reboot of the kernel that holds them.
PER_BOOT_KINDS = {"process", "netns", "link", "qdisc", "bpf-pin", "module", "guest", "ovs-daemon"}


def ledger_dir() -> Path:
    return cmd.state_dir() / "ledgers"


@dataclass
class Entry:
    """One recorded object."""

    seq: int
    kind: str
    attrs: dict = field(default_factory=dict)
    gone: bool = False


class Ledger:
    """The ledger of one run; see the module docstring."""

    def __init__(self, path: Path, header: dict, entries: list[Entry]) -> None:
        self.path = path
        self.header = header
        self.entries = entries
        self._bpf_pin_dirs: set[str] = {e.attrs.get("path", "") for e in entries if e.kind == "bpf-pin"}
        self.archived = False

    @property
    def run_id(self) -> str:
        return self.header["run_id"]

    # -- writing -------------------------------------------------------------------
    @classmethod
    def create(cls, run_id: str, **meta: object) -> "Ledger":
        """Start a new ledger for ``run_id``; raises LedgerError if one exists."""
        directory = ledger_dir()
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{run_id}.jsonl"
        pid = os.getpid()
        header = {"type": "header", "version": 1, "run_id": run_id, "boot_id": cmd.boot_id(),
                  "pid": pid, "pid_start": cmd.process_start_time(pid), "created": time.time(), **meta}
        try:
            with open(path, "x") as f:
                f.write(json.dumps(header) + "\n")
                f.flush()
                os.fsync(f.fileno())
        except FileExistsError as exc:
            raise LedgerError(f"a ledger for run {run_id} already exists: {path}") from exc
        return cls(path, header, [])

    def _append(self, record: dict) -> None:
        if self.archived:
            raise LedgerError(f"ledger {self.run_id} was torn down and archived; cannot record {record}")
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def add(self, kind: str, **attrs: object) -> int:
        """Record an object of ``kind`` that is about to be created; returns its seq."""
        if kind not in TEARDOWN:
            raise LedgerError(f"unknown ledger kind {kind!r}")
        seq = len(self.entries)
        self._append({"type": "add", "seq": seq, "kind": kind, **attrs})
        self.entries.append(Entry(seq, kind, dict(attrs)))
        if kind == "bpf-pin":
            self._bpf_pin_dirs.add(str(attrs.get("path")))
        return seq

    def has_bpf_pin(self, path: str) -> bool:
        return path in self._bpf_pin_dirs

    def update(self, seq: int, **attrs: object) -> None:
        """Add attributes learnt after creation (e.g. the PID of a spawned process)."""
        self._append({"type": "update", "seq": seq, **attrs})
        self.entries[seq].attrs.update(attrs)

    def mark_gone(self, seq: int) -> None:
        self._append({"type": "gone", "seq": seq})
        self.entries[seq].gone = True

    def popen(self, argv: list[str], *, netns: str | None = None, stop_signal: int = signal.SIGTERM,
              **kwargs: object) -> subprocess.Popen:
        """Start a long-lived process in a session of its own, recorded first: ``add``
        (argv, ``netns`` it runs in, group kill with ``stop_signal``), then
        ``subprocess.Popen(argv, start_new_session=True, **kwargs)``, then ``update``
        with its PID and start time. The process carries its seq as ``ledger_seq``.

        Raises OSError when ``argv`` cannot start (its entry is then marked gone) and
        LedgerError when the ledger cannot be written."""
        argv = [str(a) for a in argv]
        seq = self.add("process", argv=argv, netns=netns, group=True, stop_signal=int(stop_signal))
        try:
            proc = subprocess.Popen(argv, start_new_session=True, **kwargs)  # type: ignore[call-overload]
        except OSError:
            self.mark_gone(seq)
            raise
        self.update(seq, pid=proc.pid, start_time=cmd.process_start_time(proc.pid))
        proc.ledger_seq = seq  # type: ignore[attr-defined]
        return proc

    # -- reading -------------------------------------------------------------------
    @classmethod
    def load(cls, path: Path) -> "Ledger":
        """Read a ledger; a truncated last line (killed mid-write) is ignored."""
        header: dict | None = None
        entries: list[Entry] = []
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            t = rec.pop("type", None)
            if t == "header":
                header = rec
            elif t == "add":
                entries.append(Entry(rec.pop("seq"), rec.pop("kind"), rec))
            elif t == "update" and rec.get("seq", -1) < len(entries):
                entries[rec.pop("seq")].attrs.update(rec)
            elif t == "gone" and rec.get("seq", -1) < len(entries):
                entries[rec["seq"]].gone = True
        if header is None:
            raise LedgerError(f"{path}: no header line")
        return cls(path, header, entries)

    def live(self) -> list[Entry]:
        return [e for e in self.entries if not e.gone]

    def same_boot(self) -> bool:
        return self.header.get("boot_id") == cmd.boot_id()

    def owner_alive(self) -> bool:
        """True when the process that owns this ledger still runs (then clean skips it)."""
        pid = self.header.get("pid")
        return bool(self.same_boot() and pid and pid != os.getpid()
                    and cmd.process_start_time(pid) == self.header.get("pid_start"))

    # -- teardown ------------------------------------------------------------------
    def teardown(self, since: int = 0, *, archive: bool = True) -> list[str]:
        """Remove live objects with seq >= ``since`` in reverse creation order.

        Returns error texts (empty when all went). Each handler is idempotent and checks
        identity first; an object already gone is just marked gone. With ``archive``,
        when the whole ledger is gone (``since`` 0, no errors) its file is archived into
        the run's results folder (``logs/ledger.jsonl``) or deleted, and the ledger
        takes no more records. A user that keeps recording afterwards (an Emulation
        torn down inside a longer run) passes ``archive=False``.
        """
        errors: list[str] = []
        same_boot = self.same_boot()
        todo = [e for e in self.live() if e.seq >= since]
        # Devices and qdiscs wholly inside namespaces this teardown deletes go with them:
        # deleting them one by one first cost minutes under software emulation.
        dying = {e.attrs["name"] for e in todo if e.kind == "netns"} if same_boot else set()
        # All OVS bridges go in one ovs-vsctl transaction, when the newest is due: one
        # reconfiguration of ovs-vswitchd instead of one per bridge (each took over 10 s
        # on the kernel datapath under software emulation).
        bridges = [e for e in todo if e.kind == "ovs-bridge"]
        bridges_tried = False
        for entry in reversed(todo):
            if entry.gone:          # went with the bridges' transaction
                continue
            try:
                if entry.kind == "ovs-bridge":
                    if bridges_tried:
                        raise LedgerError("the transaction deleting this run's bridges failed")
                    bridges_tried = True
                    _delete_bridges(bridges, self)
                    for b in bridges:
                        if b is not entry:
                            self.mark_gone(b.seq)
                elif _inside(entry, dying):
                    pass
                elif same_boot or entry.kind not in PER_BOOT_KINDS:
                    TEARDOWN[entry.kind](entry, self)
                self.mark_gone(entry.seq)
            except (CommandError, OSError, LedgerError, nsops.NsOpsError) as exc:
                errors.append(f"{entry.kind} {entry.attrs}: {exc}")
        if not errors and since == 0 and archive:
            self._archive()
        return errors

    def _archive(self) -> None:
        results = self.header.get("results_dir")
        self.archived = True
        if not self.path.exists():  # archived by an earlier full teardown
            return
        try:
            if results and Path(results).is_dir():
                logs = Path(results) / "logs"
                logs.mkdir(exist_ok=True)
                (logs / "ledger.jsonl").write_text(self.path.read_text())
            self.path.unlink()
        except OSError as exc:
            log.warning("could not archive ledger %s: %s", self.path, exc)


def _inside(entry: Entry, namespaces: set[str]) -> bool:
    """True for a link or qdisc whose every end lies in one of ``namespaces``."""
    if entry.kind == "qdisc":
        ends = [entry.attrs.get("netns")]
    elif entry.kind == "link":
        ends = [entry.attrs.get("netns"), entry.attrs.get("peer_netns")]
    else:
        return False
    return all(ns is not None and ns in namespaces for ns in ends)


# -- per-kind teardown handlers ------------------------------------------------------
TEARDOWN: dict[str, Callable[[Entry, Ledger], None]] = {}


def _handler(kind: str) -> Callable[[Callable[[Entry, Ledger], None]], Callable[[Entry, Ledger], None]]:
    def register(fn: Callable[[Entry, Ledger], None]) -> Callable[[Entry, Ledger], None]:
        TEARDOWN[kind] = fn
        return fn
    return register


def kill_process(pid: int, start_time: int | None, *, group: bool = False,
                 first_signal: int = signal.SIGTERM, grace_s: float = 3.0) -> bool:
    """Stop ``pid`` if it is still the same process; True if it was ours and is gone."""
    if not pid or cmd.process_start_time(pid) is None or cmd.process_start_time(pid) != start_time:
        return False
    sender = os.killpg if group else os.kill
    try:
        sender(pid, first_signal)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if cmd.process_start_time(pid) != start_time:
            return True
        _reap(pid)
        time.sleep(0.05)
    try:
        sender(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    _reap(pid)
    return True


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


@_handler("process")
def _teardown_process(entry: Entry, ledger: Ledger) -> None:
    a = entry.attrs
    kill_process(a.get("pid", 0), a.get("start_time"), group=a.get("group", False),
                 first_signal=a.get("stop_signal", signal.SIGTERM))


@_handler("guest")
def _teardown_guest(entry: Entry, ledger: Ledger) -> None:
    a = entry.attrs
    kill_process(a.get("pid", 0), a.get("start_time"), group=True)


@contextlib.contextmanager
def shared_lock(name: str) -> Iterator[None]:
    """An exclusive machine-wide lock (flock on ``<state dir>/ledgers/.<name>.lock``):
    taken by a run that joins a shared object and by a teardown that may stop it, so
    one never stops what the other has just joined."""
    directory = ledger_dir()
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / f".{name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def holders(kind: str, pid: int, start_time: int | None, *, besides: str | None = None) -> list[str]:
    """Run ids whose ledgers hold a live ``kind`` entry for process ``pid`` (same start
    time), except run ``besides``. Shared daemons (OVS) are entered in the ledger of
    every run that uses them: the last holder's teardown stops them."""
    return [led.run_id for led in all_ledgers() if led.run_id != besides and led.same_boot()
            and any(e.kind == kind and not e.gone and e.attrs.get("pid") == pid
                    and e.attrs.get("start_time") == start_time for e in led.entries)]


@_handler("ovs-daemon")
def _teardown_ovs_daemon(entry: Entry, ledger: Ledger) -> None:
    a = entry.attrs
    with shared_lock("ovs-daemons"):
        others = holders("ovs-daemon", a.get("pid", 0), a.get("start_time"), besides=ledger.run_id)
        if others:
            log.info("leaving %s (pid %s) running: run(s) %s use it too", a.get("name"), a.get("pid"),
                     ", ".join(others))
            return
        kill_process(a.get("pid", 0), a.get("start_time"))


def netns_exists(name: str) -> bool:
    return Path("/run/netns", name).exists()


@_handler("netns")
def _teardown_netns(entry: Entry, ledger: Ledger) -> None:
    name = entry.attrs["name"]
    if not netns_exists(name):
        return
    # Processes keep a namespace alive after `ip netns del`; every process inside a
    # namespace of ours is ours.
    for _ in range(3):
        pids = nsops.netns_pids(name)
        if not pids:
            break
        for pid in pids:
            kill_process(pid, cmd.process_start_time(pid), first_signal=signal.SIGKILL, grace_s=1.0)
    nsops.delete_netns(name)


def link_exists(name: str, netns: str | None = None) -> bool:
    return nsops.link_exists(name, netns)


@_handler("link")
def _teardown_link(entry: Entry, ledger: Ledger) -> None:
    name, netns = entry.attrs["name"], entry.attrs.get("netns")
    if link_exists(name, netns):
        nsops.delete_link(name, netns)


@_handler("qdisc")
def _teardown_qdisc(entry: Entry, ledger: Ledger) -> None:
    dev, netns = entry.attrs["dev"], entry.attrs.get("netns")
    if link_exists(dev, netns):
        parent = entry.attrs.get("parent", "root")
        where = ["root"] if parent == "root" else ["parent", parent] if parent != "clsact" else []
        kind = ["clsact"] if parent == "clsact" else []
        cmd.run(["tc", "qdisc", "del", "dev", dev, *where, *kind], check=False, netns=netns)


OVS_DELETE_TIMEOUT_S = 120


def _bridge_owners() -> dict[str, str | None]:
    """Every OVS bridge -> the run id in its external_ids (None if unmarked); {} when
    no ovsdb-server answers (then no bridge of ours can exist either)."""
    res = cmd.run(["ovs-vsctl", "--timeout=10", "--format=json", "--columns=name,external_ids", "list", "Bridge"],
                  check=False, timeout=15)
    if res.returncode != 0:
        return {}
    out = {}
    for name, ids in json.loads(res.stdout)["data"]:
        out[name] = dict(ids[1]).get(OVS_RUN_KEY) if isinstance(ids, list) and ids[0] == "map" else None
    return out


def _delete_bridges(entries: list[Entry], ledger: Ledger) -> None:
    """Delete the entries' bridges that exist and carry this run's id, in one
    transaction; others are left alone (with a warning when not ours)."""
    owners = _bridge_owners()
    doomed = []
    for e in entries:
        name = e.attrs["name"]
        if name not in owners:
            continue
        if owners[name] != ledger.run_id:
            log.warning("not deleting OVS bridge %s: it is not marked as created by run %s", name, ledger.run_id)
            continue
        doomed.append(name)
    if doomed:
        args = [a for name in doomed for a in ("--", "--if-exists", "del-br", name)]
        cmd.run(["ovs-vsctl", f"--timeout={OVS_DELETE_TIMEOUT_S}", *args], timeout=OVS_DELETE_TIMEOUT_S + 5)


@_handler("ovs-bridge")
def _teardown_ovs_bridge(entry: Entry, ledger: Ledger) -> None:
    _delete_bridges([entry], ledger)


@_handler("bpf-pin")
def _teardown_bpf_pin(entry: Entry, ledger: Ledger) -> None:
    path = Path(entry.attrs["path"])
    if BPF_PIN_ROOT not in path.parents:
        raise LedgerError(f"refusing to remove {path}: not under {BPF_PIN_ROOT}")
    if not path.exists():
        return
    # bpffs: files are unlinked one by one, then the directories, deepest first.
    for p in sorted(path.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        p.rmdir() if p.is_dir() else p.unlink()
    path.rmdir()


@_handler("module")
def _teardown_module(entry: Entry, ledger: Ledger) -> None:
    name = entry.attrs["name"]
    refcnt = Path(f"/sys/module/{name}/refcnt")
    if refcnt.exists() and refcnt.read_text().strip() == "0":
        # rmmod, not modprobe -r: our modules are insmod-ed from kernel/ and are not in
        # modules.dep, and rmmod never removes dependencies we did not load
        cmd.run(["rmmod", name], check=False)


@_handler("file")
def _teardown_file(entry: Entry, ledger: Ledger) -> None:
    """A temporary file or directory outside the results folder (e.g. a netns config)."""
    path = Path(entry.attrs["path"])
    if path.is_dir():
        for p in sorted(path.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            p.rmdir() if p.is_dir() else p.unlink()
        path.rmdir()
    elif path.exists():
        path.unlink()


def all_ledgers() -> list[Ledger]:
    """Every ledger in the state directory (unreadable ones are skipped with a warning)."""
    out = []
    for path in sorted(ledger_dir().glob("*.jsonl")):
        try:
            out.append(Ledger.load(path))
        except (OSError, LedgerError) as exc:
            log.warning("skipping ledger %s: %s", path, exc)
    return out


def clean(*, include_running: bool = False) -> tuple[list[str], list[str], list[str]]:
    """Tear down leftovers of earlier runs; returns (cleaned, skipped, errors) texts."""
    cleaned, skipped, errors = [], [], []
    for ledger in all_ledgers():
        if ledger.owner_alive() and not include_running:
            skipped.append(f"{ledger.run_id}: still running (pid {ledger.header.get('pid')})")
            continue
        n = len(ledger.live())
        errs = ledger.teardown()
        if errs:
            errors.extend(f"{ledger.run_id}: {e}" for e in errs)
        else:
            cleaned.append(f"{ledger.run_id}: removed {n} object(s)")
    return cleaned, skipped, errors
