"""``ControllerRunner``: the E3 os-ken controller for the length of a ``with`` block.

    with Emulation(topo, ledger, token) as emu, \\
            ControllerRunner(ledger, fabric, out_dir, scheduler="ut", sse_s=10.0) as ctl:
        ctl.status()      # the REST API at ctl.rest_url

On entry it picks free TCP ports on the management address (127.0.0.1 unless told
otherwise; never a wildcard address), writes the controller's config into ``out_dir``,
records the os-ken process in the run's ledger *before* starting it (so ``testbed
clean`` stops it after a SIGKILL), waits until the REST API answers, points every OVS
bridge of the fabric at the OpenFlow listener, and waits (bounded, polled) until every
switch is connected and its initial flows are acknowledged by a barrier. On exit it
stops the process (also on exceptions). Files: ``controller.json`` (config),
``controller.log`` (os-ken output), ``reconfigurations.jsonl`` (one line per
reconfiguration, CLOCK_MONOTONIC seconds: the traffic agents' clock),
``switch-events.jsonl`` (switches connecting, ready, disconnecting; same clock).
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from controllers.fabric import Fabric
from controllers.schedulers import SCHEDULERS
from testbed import ovs, process
from testbed.errors import DefinitionError, TestbedError
from testbed.ledger import Ledger
from testbed.traffic.records import read_jsonl
from testbed import hostclock

CONFIG_ENV = "E3_CONTROLLER_CONFIG"


class ControllerError(TestbedError):
    """The controller did not start, or the switches did not become ready in time."""


def free_port(host: str) -> int:
    """A TCP port free on ``host`` right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def check_mgmt_host(host: str) -> str:
    """``host`` if it is a specific IPv4 address (loopback or management), else
    DefinitionError: listeners never bind a wildcard address."""
    try:
        addr = ipaddress.IPv4Address(host)
    except ValueError:
        raise DefinitionError("controller.host", host, "an IPv4 address such as 127.0.0.1") from None
    if addr.is_unspecified:
        raise DefinitionError("controller.host", host, "a specific address (not 0.0.0.0): loopback or management")
    return host


class ControllerRunner:
    """See the module docstring. ``scheduler`` in SCHEDULERS; ``sse_s`` the space switch
    epoch in emulation seconds; ``pairs`` the ToR pairs UT/DT rotate over (default: the
    k-th ToR of cluster 0 with the k-th of cluster 1); ``elephants`` (src IP, dst IP)
    of elephant transfers (DT)."""

    def __init__(self, ledger: Ledger, fabric: Fabric, out_dir: Path, *, scheduler: str, sse_s: float = 10.0,
                 pairs: list[tuple[str, str]] | None = None, elephants: list[tuple[str, str]] | None = None,
                 host: str = "127.0.0.1", ready_timeout_s: float = 60.0, python: str = sys.executable) -> None:
        if scheduler not in SCHEDULERS:
            raise DefinitionError("params.scheduler", scheduler, " | ".join(SCHEDULERS))
        self.ledger, self.fabric, self.out_dir = ledger, fabric, Path(out_dir)
        self.host = check_mgmt_host(host)
        self.scheduler, self.sse_s, self.pairs, self.elephants = scheduler, sse_s, pairs, elephants or []
        self.ready_timeout_s, self.python = ready_timeout_s, python
        self.proc: process.Process | None = None
        self.ofp_port = self.rest_port = 0
        self.log_path = self.out_dir / "reconfigurations.jsonl"
        self.events_path = self.out_dir / "switch-events.jsonl"

    @property
    def rest_url(self) -> str:
        return f"http://{self.host}:{self.rest_port}"

    def config(self) -> dict[str, Any]:
        return {"fabric": json.loads(self.fabric.to_json()), "scheduler": self.scheduler, "sse_s": self.sse_s,
                "pairs": [list(p) for p in self.pairs] if self.pairs else None,
                "elephants": [list(e) for e in self.elephants], "log_path": str(self.log_path.resolve()),
                "events_path": str(self.events_path.resolve()),
                "rest_host": self.host, "rest_port": self.rest_port, "ofp_host": self.host,
                "ofp_port": self.ofp_port}

    # -- life cycle ----------------------------------------------------------------------
    def __enter__(self) -> "ControllerRunner":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.ofp_port, self.rest_port = free_port(self.host), free_port(self.host)
        cfg_path = self.out_dir / "controller.json"
        cfg_path.write_text(json.dumps(self.config(), indent=1))
        argv = [self.python, "-m", "os_ken.cmd.manager", "--ofp-listen-host", self.host,
                "--ofp-tcp-listen-port", str(self.ofp_port), "controllers.e3_app"]
        env = {**os.environ, CONFIG_ENV: str(cfg_path.resolve())}
        self.proc = process.spawn(self.ledger, argv, log=self.out_dir / "controller.log", env=env,
                                  cwd=Path(__file__).resolve().parent.parent)
        self.wait_for(lambda s: True, "the REST API to answer")
        target = f"tcp:{self.host}:{self.ofp_port}"
        args: list[str] = []
        for bridge in self.fabric.bridges.values():
            args += ["--", "set-controller", bridge, target]
        ovs.vsctl(*args[1:])
        self.wait_for(lambda s: s.get("ready"), "every switch to connect and acknowledge its flows")

    def stop(self) -> None:
        if self.proc is not None:
            process.stop(self.proc)
        self.proc = None

    # -- REST client -----------------------------------------------------------------
    def call(self, method: str, path: str, body: dict | None = None, timeout: float = 10.0) -> tuple[int, Any]:
        """(HTTP status, decoded JSON) of one request to the controller's API."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.rest_url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def status(self) -> dict[str, Any]:
        code, body = self.call("GET", "/status")
        if code != 200:
            raise ControllerError(f"GET /status answered {code}: {body}")
        return body

    def wait_for(self, predicate: Any, what: str) -> dict[str, Any]:
        """Poll GET /status until ``predicate(status)``; ControllerError after the timeout
        or if the process exits."""
        deadline = hostclock.Deadline(self.ready_timeout_s)
        last: Any = None
        while True:
            if self.proc is None or self.proc.poll() is not None:
                raise ControllerError(f"the controller exited ({self.proc.returncode if self.proc else '?'}) "
                                      f"waiting for {what}: {self.log_tail()}")
            try:
                last = self.status()
                if predicate(last):
                    return last
            except (OSError, ControllerError) as exc:
                last = str(exc)
            if deadline.expired():
                raise ControllerError(f"timed out after {self.ready_timeout_s:g} s waiting for {what}; "
                                      f"last status: {last}; log: {self.log_tail()}")
            time.sleep(0.05)

    def log_tail(self, n: int = 800) -> str:
        try:
            return (self.out_dir / "controller.log").read_text(errors="replace")[-n:].strip()
        except OSError:
            return "(no log)"

    def reconfigurations(self) -> list[dict[str, Any]]:
        return read_jsonl(self.log_path)

    def switch_events(self) -> list[dict[str, Any]]:
        return read_jsonl(self.events_path)
