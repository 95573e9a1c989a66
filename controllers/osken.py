"""An os-ken application in a control process of its own, with the OVS bridges it drives.

:class:`OsKenProcess` runs ``python -m os_ken.cmd.manager --ofp-listen-host H
--ofp-tcp-listen-port P <app module>`` as a :class:`controllers.process.ControlProcess`
for the length of a ``with`` block. A subclass names the app (``app``, a module), the
environment variable the app reads its JSON config's path from (``config_env``) and the
app's part of that config (:meth:`OsKenProcess.app_config`, validated by the subclass);
e.g. :class:`controllers.e3_process.E3ControllerProcess`.

On entry it picks free TCP ports on the management address (127.0.0.1 unless told
otherwise; never a wildcard address) for OpenFlow and for the app's REST API, writes
the config into ``out_dir/controller.json`` (the app's part, then ``rest_host``,
``rest_port``, ``ofp_host``, ``ofp_port``), starts the process (ledgered, output in
``out_dir/controller.log``), waits until ``GET /status`` answers, points every bridge
at the OpenFlow listener, and waits (bounded, polled) until the status says
``"ready": true`` (for E3: every switch connected and its initial flows acknowledged).
On exit it stops the process (also on exceptions).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from controllers.process import ControlError, ControlProcess, check_mgmt_host, free_port, http_json
from testbed import ovs
from testbed.ledger import Ledger

#: the repository (the app module is imported from there)
REPO = Path(__file__).resolve().parent.parent


class OsKenProcess(ControlProcess):
    """See the module docstring. ``bridges``: the OVS bridges to point at the
    controller once its API answers."""

    what = "the controller"
    healthy = "the REST API to answer"
    #: the os-ken application module (set by subclasses)
    app: ClassVar[str]
    #: the environment variable naming the app's JSON config (set by subclasses)
    config_env: ClassVar[str]

    def __init__(self, ledger: Ledger, out_dir: Path, bridges: Sequence[str], *, host: str = "127.0.0.1",
                 ready_timeout_s: float = 60.0, python: str = sys.executable) -> None:
        super().__init__(ledger, [], out_dir, log_name="controller.log", ready_timeout_s=ready_timeout_s, cwd=REPO)
        self.bridges, self.host, self.python = list(bridges), check_mgmt_host(host), python
        self.ofp_port = self.rest_port = 0

    @property
    def rest_url(self) -> str:
        return f"http://{self.host}:{self.rest_port}"

    def app_config(self) -> dict[str, Any]:
        """The app's part of its config (JSON-serialisable)."""
        raise NotImplementedError

    def config(self) -> dict[str, Any]:
        return {**self.app_config(), "rest_host": self.host, "rest_port": self.rest_port, "ofp_host": self.host,
                "ofp_port": self.ofp_port}

    # -- ControlProcess hooks ------------------------------------------------------------
    def prepare(self) -> None:
        self.ofp_port, self.rest_port = free_port(self.host), free_port(self.host)
        cfg_path = self.out_dir / "controller.json"
        cfg_path.write_text(json.dumps(self.config(), indent=1))
        self.argv = [self.python, "-m", "os_ken.cmd.manager", "--ofp-listen-host", self.host,
                     "--ofp-tcp-listen-port", str(self.ofp_port), self.app]
        self.env = {**os.environ, self.config_env: str(cfg_path.resolve())}
        self.health = self.status

    def ready(self) -> None:
        target = f"tcp:{self.host}:{self.ofp_port}"
        args: list[str] = []
        for bridge in self.bridges:
            args += ["--", "set-controller", bridge, target]
        if args:
            ovs.vsctl(*args[1:])
        self.wait_for(lambda s: s.get("ready"), "every switch to connect and acknowledge its flows")

    # -- REST client -----------------------------------------------------------------
    def call(self, method: str, path: str, body: dict | None = None, timeout: float = 10.0) -> tuple[int, Any]:
        """(HTTP status, decoded JSON) of one request to the app's API."""
        return http_json(method, self.rest_url + path, body, timeout)

    def status(self) -> dict[str, Any]:
        code, body = self.call("GET", "/status")
        if code != 200:
            raise ControlError(f"GET /status answered {code}: {body}")
        return body
