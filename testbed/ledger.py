"""Run ledgers: every object a run creates is written down before it is created.

A ledger is an append-only JSON-lines file in ``<state dir>/ledgers/<run-id>.jsonl``.
Lines are a header (run id, boot id, owner pid), ``add`` entries (the object's
``resource`` and its attributes, written and fsync'ed *before* the object exists),
``update`` lines (e.g. a PID known only after spawning) and ``gone`` lines (the object
was removed). Teardown walks the live entries in reverse creation order; normal exit,
exceptions, SIGINT/SIGTERM and ``testbed clean`` after a SIGKILL all use this one code
path. Ledgers written before version 2 name the resource ``kind``; they are read alike.

Each resource (``process``, ``netns``, ``ovs-bridge``, ...) is removed by a
:class:`Teardown` that the module creating such objects registers with :func:`register`
when it is imported: processes in :mod:`testbed.process`, namespaces, links and qdiscs
in :mod:`testbed.nsops`, OVS bridges and daemons in :mod:`testbed.ovs`, kernel modules
in :mod:`testbed.cc.modules`, the guest in :mod:`testbed.vm`, BPF pin directories in
:mod:`testbed.bpf`, a raised global ``tcp_mem`` in :mod:`testbed.tcpmem`; files here.
This module imports none of them (they import it); a process that tears down ledgers it
did not write imports them all through :mod:`testbed.clean`.

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
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from testbed import cmd
from testbed.errors import LedgerError, TestbedError

log = logging.getLogger(__name__)

#: the header's format version: 2 names an entry's resource ``resource`` (1: ``kind``)
VERSION = 2


def ledger_dir() -> Path:
    return cmd.state_dir() / "ledgers"


@dataclass
class Entry:
    """One recorded object: its ``resource`` (what it is, e.g. ``netns``) and attributes."""

    seq: int
    resource: str
    attrs: dict = field(default_factory=dict)
    gone: bool = False


@dataclass(frozen=True)
class Teardown:
    """How the objects of one resource are removed (see :func:`register`)."""

    #: remove one object; idempotent (an object already gone is fine), checks identity
    #: first; raises TestbedError or OSError when the object stays
    remove: Callable[[Entry, "Ledger"], None]
    #: the objects die with the kernel that holds them: on another boot they are gone
    per_boot: bool = True
    #: remove all of one teardown's objects of this resource at once (when the newest
    #: is due), instead of one ``remove`` call each
    batch: Callable[[list[Entry], "Ledger"], None] | None = None
    #: the objects are containers (network namespaces): the container's name
    container: Callable[[Entry], str] | None = None
    #: the containers an object lives in (None: the root namespace); an object wholly
    #: inside containers removed by the same teardown goes with them (no ``remove``)
    within: Callable[[Entry], Sequence[str | None]] | None = None


#: resource -> its teardown; filled by the owners' :func:`register` calls
TEARDOWNS: dict[str, Teardown] = {}


def register(resource: str, remove: Callable[[Entry, "Ledger"], None], **options: object) -> Teardown:
    """Register how objects of ``resource`` are removed (``options``: the other fields
    of :class:`Teardown`). Called once by the module that creates them, at import.
    Raises LedgerError when another module registered ``resource`` already."""
    old = TEARDOWNS.get(resource)
    if old is not None and old.remove.__module__ != remove.__module__:
        raise LedgerError(f"ledger resource {resource!r} is registered by {old.remove.__module__} already; "
                          f"{remove.__module__} cannot register it too")
    TEARDOWNS[resource] = Teardown(remove, **options)  # type: ignore[arg-type]
    return TEARDOWNS[resource]


def _teardown_of(entry: Entry) -> Teardown:
    """The registered teardown of ``entry``'s resource; LedgerError naming the known
    resources when none is."""
    try:
        return TEARDOWNS[entry.resource]
    except KeyError:
        raise LedgerError(f"no teardown is registered for ledger resource {entry.resource!r} (known: "
                          f"{', '.join(sorted(TEARDOWNS))}); was this ledger written by another version of "
                          "the testbed?") from None


class Ledger:
    """The ledger of one run; see the module docstring."""

    def __init__(self, path: Path, header: dict, entries: list[Entry]) -> None:
        self.path = path
        self.header = header
        self.entries = entries
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
        header = {"type": "header", "version": VERSION, "run_id": run_id, "boot_id": cmd.boot_id(),
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

    def add(self, resource: str, **attrs: object) -> int:
        """Record an object of ``resource`` that is about to be created; returns its seq.
        Raises LedgerError when no teardown is registered for ``resource`` (its owner
        module was not imported) or the ledger cannot be written."""
        if resource not in TEARDOWNS:
            raise LedgerError(f"unknown ledger resource {resource!r}: registered are "
                              f"{', '.join(sorted(TEARDOWNS))}")
        seq = len(self.entries)
        self._append({"type": "add", "seq": seq, "resource": resource, **attrs})
        self.entries.append(Entry(seq, resource, dict(attrs)))
        return seq

    def update(self, seq: int, **attrs: object) -> None:
        """Add attributes learnt after creation (e.g. the PID of a spawned process)."""
        self._append({"type": "update", "seq": seq, **attrs})
        self.entries[seq].attrs.update(attrs)

    def mark_gone(self, seq: int) -> None:
        self._append({"type": "gone", "seq": seq})
        self.entries[seq].gone = True

    # -- reading -------------------------------------------------------------------
    @classmethod
    def load(cls, path: Path) -> "Ledger":
        """Read a ledger (either version); a truncated last line (killed mid-write) is
        ignored, and so is an ``add`` line naming no resource."""
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
                # version 1 called the resource "kind"
                resource = rec.pop("resource") if "resource" in rec else rec.pop("kind", None)
                if isinstance(resource, str):
                    entries.append(Entry(rec.pop("seq"), resource, rec))
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
    def remove(self, seq: int) -> None:
        """Remove the object of live entry ``seq`` now (out of order: its owner undoes
        one step) and mark it gone. Raises LedgerError for an unregistered resource and
        what its teardown raises (TestbedError, OSError)."""
        entry = self.entries[seq]
        if not entry.gone:
            _teardown_of(entry).remove(entry, self)
            self.mark_gone(seq)

    def teardown(self, since: int = 0, *, archive: bool = True) -> list[str]:
        """Remove live objects with seq >= ``since`` in reverse creation order.

        Returns error texts (empty when all went); an entry whose resource has no
        registered teardown is one such error (the others are still removed). Each
        teardown is idempotent and checks identity first; an object already gone is
        just marked gone. With ``archive``, when the whole ledger is gone (``since`` 0,
        no errors) its file is archived into the run's results folder
        (``logs/ledger.jsonl``) or deleted, and the ledger takes no more records. A
        user that keeps recording afterwards (an Emulation torn down inside a longer
        run) passes ``archive=False``.
        """
        errors: list[str] = []
        same_boot = self.same_boot()
        todo = [e for e in self.live() if e.seq >= since]
        # Devices and qdiscs wholly inside namespaces this teardown deletes go with them:
        # deleting them one by one first cost minutes under software emulation.
        dying: set[str] = set()
        for e in todo if same_boot else []:
            how = TEARDOWNS.get(e.resource)
            if how is not None and how.container is not None:
                dying.add(how.container(e))
        # Batched resources (OVS bridges) go in one call, when the newest is due: one
        # reconfiguration of ovs-vswitchd instead of one per bridge (each took over 10 s
        # on the kernel datapath under software emulation).
        batched: set[str] = set()
        for entry in reversed(todo):
            if entry.gone:          # went with its resource's batch
                continue
            try:
                how = _teardown_of(entry)
                if how.per_boot and not same_boot:
                    pass            # died with the kernel that held it
                elif how.batch is not None:
                    if entry.resource in batched:
                        raise LedgerError(f"removing this run's {entry.resource} objects together failed")
                    batched.add(entry.resource)
                    group = [e for e in todo if e.resource == entry.resource]
                    how.batch(group, self)
                    for e in group:
                        if e is not entry:
                            self.mark_gone(e.seq)
                elif how.within is not None and all(ns is not None and ns in dying for ns in how.within(entry)):
                    pass            # went with its namespaces
                else:
                    how.remove(entry, self)
                self.mark_gone(entry.seq)
            except (TestbedError, OSError) as exc:
                errors.append(f"{entry.resource} {entry.attrs}: {exc}")
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


# -- shared objects ----------------------------------------------------------------------
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


def holders(resource: str, pid: int, start_time: int | None, *, besides: str | None = None) -> list[str]:
    """Run ids whose ledgers hold a live ``resource`` entry for process ``pid`` (same
    start time), except run ``besides``. Shared daemons (OVS) are entered in the ledger
    of every run that uses them: the last holder's teardown stops them."""
    return [led.run_id for led in all_ledgers() if led.run_id != besides and led.same_boot()
            and any(e.resource == resource and not e.gone and e.attrs.get("pid") == pid
                    and e.attrs.get("start_time") == start_time for e in led.entries)]


def all_ledgers() -> list[Ledger]:
    """Every ledger in the state directory (unreadable ones are skipped with a warning)."""
    out = []
    for path in sorted(ledger_dir().glob("*.jsonl")):
        try:
            out.append(Ledger.load(path))
        except (OSError, LedgerError) as exc:
            log.warning("skipping ledger %s: %s", path, exc)
    return out


# -- files -------------------------------------------------------------------------------
def remove_tree(path: Path) -> None:
    """Remove ``path`` (a file, or a directory with its contents, deepest first: bpffs
    unlinks one by one); nothing when it does not exist."""
    if path.is_dir():
        for p in sorted(path.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            p.rmdir() if p.is_dir() else p.unlink()
        path.rmdir()
    elif path.exists():
        path.unlink()


def _remove_file(entry: Entry, ledger: Ledger) -> None:
    """A temporary file or directory outside the results folder (e.g. a netns config)."""
    remove_tree(Path(entry.attrs["path"]))


register("file", _remove_file, per_boot=False)
