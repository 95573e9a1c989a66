"""Open vSwitch: starting the daemons when nobody runs them, and ledgered bridges.

Registers the ledger teardowns of ``ovs-bridge`` (this run's bridges, in one
transaction) and ``ovs-daemon`` (a daemon a testbed run started, stopped by the last
run that holds it).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from testbed import cmd, hostclock
from testbed.cc import modules as kernel_modules
from testbed.errors import LedgerError, TestbedError
from testbed.ledger import Entry, Ledger, holders, register, shared_lock
from testbed.process import kill_process

log = logging.getLogger(__name__)

RUN_DIR = Path("/var/run/openvswitch")
DB_FILE = Path("/var/lib/openvswitch/conf.db")
SCHEMA = Path("/usr/share/openvswitch/vswitch.ovsschema")
DATAPATHS = ("system", "netdev")
#: the external_ids key marking a bridge with the id of the run that created it
OVS_RUN_KEY = "optical-tcp-testbed-run"
OVS_DELETE_TIMEOUT_S = 120
#: seconds ovs-vsctl waits for ovs-vswitchd to create a bridge: the first system-datapath
#: bridge in a guest loads and sets up the kernel datapath, and under the guest's
#: instruction-counted clock a wait on the host's I/O may advance the clock; 10 s timed out
#: once (exit -14, SIGALRM) with three guests on two cores (2026-11-24)
OVS_ADD_TIMEOUT_S = 120
#: ledger resources: a bridge of this run; a daemon a testbed run started
BRIDGE, DAEMON = "ovs-bridge", "ovs-daemon"


class OVSError(TestbedError):
    """Open vSwitch could not be started or configured."""


def vsctl(*args: str, timeout: float = 10.0) -> str:
    return cmd.run(["ovs-vsctl", f"--timeout={int(timeout)}", *args], timeout=timeout + 2).stdout


def daemons_running() -> bool:
    return cmd.ok(["ovs-vsctl", "--timeout=2", "show"], timeout=4)


def ensure_daemons(ledger: Ledger | None, *, kernel_datapath: bool) -> None:
    """Start ovsdb-server and ovs-vswitchd unless they already run.

    Daemons this run starts are recorded in the ledger. Daemons another testbed run
    started (found in its ledger, even a killed run's) are recorded here too, so they
    are shared: a teardown stops them only when no other run's ledger holds them, i.e.
    the last user stops them. Daemons started outside the testbed (a system service) are
    never recorded, so never stopped. With ``kernel_datapath`` the openvswitch module is
    loaded first (recorded only if this run loaded it). Raises OVSError.
    """
    if kernel_datapath:
        load_module(ledger, "openvswitch")
    with shared_lock("ovs-daemons"):
        if daemons_running():
            if ledger is not None:
                _share_daemons(ledger)
            return
        _start_daemons(ledger)


def _pidfile_process(name: str) -> tuple[int, int | None] | None:
    """(pid, start time) of daemon ``name`` from its pidfile, None if none runs."""
    try:
        pid = int((RUN_DIR / f"{name}.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    start = cmd.process_start_time(pid)
    return (pid, start) if start is not None else None


def _share_daemons(ledger: Ledger) -> None:
    for name in ("ovsdb-server", "ovs-vswitchd"):
        proc = _pidfile_process(name)
        held_by = holders(DAEMON, *proc) if proc else []
        # none: not started by a testbed run, never ours to stop; ours: recorded already
        if held_by and ledger.run_id not in held_by:
            ledger.add(DAEMON, name=name, pidfile=str(RUN_DIR / f"{name}.pid"), pid=proc[0],
                       start_time=proc[1], shared=True)


def _start_daemons(ledger: Ledger | None) -> None:
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    DB_FILE.parent.mkdir(parents=True, exist_ok=True)
    if not DB_FILE.exists():
        cmd.run(["ovsdb-tool", "create", str(DB_FILE), str(SCHEMA)])
    sock = f"punix:{RUN_DIR}/db.sock"
    specs = [("ovsdb-server", [str(DB_FILE), f"--remote={sock}", "--remote=db:Open_vSwitch,Open_vSwitch,manager_options"]),
             ("ovs-vswitchd", [f"unix:{RUN_DIR}/db.sock"])]
    for name, args in specs:
        pidfile = RUN_DIR / f"{name}.pid"
        seq = ledger.add(DAEMON, name=name, pidfile=str(pidfile)) if ledger else None
        cmd.run([name, *args, f"--pidfile={pidfile}", "--detach", "--no-chdir",
                 f"--log-file=/var/log/openvswitch/{name}.log"], timeout=30)
        pid = int(pidfile.read_text().strip())
        if ledger is not None and seq is not None:
            ledger.update(seq, pid=pid, start_time=cmd.process_start_time(pid))
        if name == "ovsdb-server":
            vsctl("--no-wait", "init")
    deadline = hostclock.Deadline(10)
    while not daemons_running():
        if deadline.expired():
            raise OVSError("ovs-vswitchd did not answer within 10 s; see /var/log/openvswitch/")
        time.sleep(0.1)


def load_module(ledger: Ledger | None, name: str) -> None:
    """modprobe ``name`` unless loaded; recorded so teardown unloads only what we loaded."""
    if Path(f"/sys/module/{name}").exists():
        return
    if ledger is not None:
        ledger.add(kernel_modules.MODULE, name=name)
    cmd.run(["modprobe", name])


def add_bridge(ledger: Ledger, name: str, *, datapath: str, fail_mode: str = "standalone",
               controller: str | None = None, protocols: str = "OpenFlow13") -> None:
    """Create bridge ``name`` marked with this run's id; refuses an existing name."""
    if datapath not in DATAPATHS:
        raise OVSError(f"datapath {datapath!r} not in {DATAPATHS}")
    if cmd.ok(["ovs-vsctl", "--timeout=5", "br-exists", name]):
        raise LedgerError(f"OVS bridge {name} already exists and is not ours; not touching it")
    ledger.add(BRIDGE, name=name)
    args = ["add-br", name, "--", "set", "bridge", name, f"datapath_type={datapath}",
            f"fail_mode={fail_mode}", f"protocols={protocols}",
            f"external_ids:{OVS_RUN_KEY}={ledger.run_id}"]
    if controller:
        args += ["--", "set-controller", name, controller]
    vsctl(*args, timeout=OVS_ADD_TIMEOUT_S)


def add_port(bridge: str, port: str, ofport: int | None = None, *, keep_qdisc: bool = False) -> None:
    """Add ``port`` to ``bridge`` (OpenFlow port number ``ofport`` if given). With
    ``keep_qdisc`` the port gets QoS type linux-noop: without any QoS, ovs-vswitchd
    replaces the port's root qdisc (and so any shaping) when the port joins, and again
    at later reconfigurations."""
    args = ["add-port", bridge, port]
    if ofport is not None:
        args += ["--", "set", "interface", port, f"ofport_request={ofport}"]
    if keep_qdisc:
        args += ["--", "set", "port", port, "qos=@noop", "--", "--id=@noop", "create", "qos", "type=linux-noop"]
    vsctl(*args)


# -- ledger teardowns ----------------------------------------------------------------------
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


def _remove_bridges(entries: list[Entry], ledger: Ledger) -> None:
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


def _remove_bridge(entry: Entry, ledger: Ledger) -> None:
    _remove_bridges([entry], ledger)


def _remove_daemon(entry: Entry, ledger: Ledger) -> None:
    a = entry.attrs
    with shared_lock("ovs-daemons"):
        others = holders(DAEMON, a.get("pid", 0), a.get("start_time"), besides=ledger.run_id)
        if others:
            log.info("leaving %s (pid %s) running: run(s) %s use it too", a.get("name"), a.get("pid"),
                     ", ".join(others))
            return
        kill_process(a.get("pid", 0), a.get("start_time"))


# bridges live in OVS's database, which outlives a reboot
register(BRIDGE, _remove_bridge, per_boot=False, batch=_remove_bridges)
register(DAEMON, _remove_daemon)
