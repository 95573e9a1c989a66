"""Open vSwitch: starting the daemons when nobody runs them, and ledgered bridges."""

from __future__ import annotations

import time
from pathlib import Path

from testbed import cmd
from testbed.errors import LedgerError, TestbedError
from testbed.ledger import OVS_RUN_KEY, Ledger, holders, shared_lock

RUN_DIR = Path("/var/run/openvswitch")
DB_FILE = Path("/var/lib/openvswitch/conf.db")
SCHEMA = Path("/usr/share/openvswitch/vswitch.ovsschema")
DATAPATHS = ("system", "netdev")


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
        held_by = holders("ovs-daemon", *proc) if proc else []
        # none: not started by a testbed run, never ours to stop; ours: recorded already
        if held_by and ledger.run_id not in held_by:
            ledger.add("ovs-daemon", name=name, pidfile=str(RUN_DIR / f"{name}.pid"), pid=proc[0],
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
        seq = ledger.add("ovs-daemon", name=name, pidfile=str(pidfile)) if ledger else None
        cmd.run([name, *args, f"--pidfile={pidfile}", "--detach", "--no-chdir",
                 f"--log-file=/var/log/openvswitch/{name}.log"], timeout=30)
        pid = int(pidfile.read_text().strip())
        if ledger is not None and seq is not None:
            ledger.update(seq, pid=pid, start_time=cmd.process_start_time(pid))
        if name == "ovsdb-server":
            vsctl("--no-wait", "init")
    deadline = time.monotonic() + 10
    while not daemons_running():
        if time.monotonic() > deadline:
            raise OVSError("ovs-vswitchd did not answer within 10 s; see /var/log/openvswitch/")
        time.sleep(0.1)


def load_module(ledger: Ledger | None, name: str) -> None:
    """modprobe ``name`` unless loaded; recorded so teardown unloads only what we loaded."""
    if Path(f"/sys/module/{name}").exists():
        return
    if ledger is not None:
        ledger.add("module", name=name)
    cmd.run(["modprobe", name])


def add_bridge(ledger: Ledger, name: str, *, datapath: str, fail_mode: str = "standalone",
               controller: str | None = None, protocols: str = "OpenFlow13") -> None:
    """Create bridge ``name`` marked with this run's id; refuses an existing name."""
    if datapath not in DATAPATHS:
        raise OVSError(f"datapath {datapath!r} not in {DATAPATHS}")
    if cmd.ok(["ovs-vsctl", "--timeout=5", "br-exists", name]):
        raise LedgerError(f"OVS bridge {name} already exists and is not ours; not touching it")
    ledger.add("ovs-bridge", name=name)
    args = ["add-br", name, "--", "set", "bridge", name, f"datapath_type={datapath}",
            f"fail_mode={fail_mode}", f"protocols={protocols}",
            f"external_ids:{OVS_RUN_KEY}={ledger.run_id}"]
    if controller:
        args += ["--", "set-controller", name, controller]
    vsctl(*args)


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
