"""The E3 controller (:mod:`controllers.e3_app`) in a process of its own for a run.

    with Emulation(topo, ledger, token) as emu, \\
            E3ControllerProcess(ledger, portmap, out_dir, scheduler="ut", sse_s=10.0) as ctl:
        ctl.status()      # the REST API at ctl.rest_url

An :class:`controllers.osken.OsKenProcess` (ports on the management address, ledgered
process, readiness: every switch of the fabric connected with its initial flows
acknowledged) with E3's app and config: the port map, the scheduler (checked here), the
space switch epoch, the ToR pairs and elephants, and where the app logs. Files in
``out_dir``: ``controller.json`` (config), ``controller.log`` (os-ken output),
``reconfigurations.jsonl`` (one line per reconfiguration, CLOCK_MONOTONIC seconds: the
traffic agents' clock), ``switch-events.jsonl`` (switches connecting, ready,
disconnecting; same clock).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from controllers.portmap import PortMap
from controllers.osken import OsKenProcess
from controllers.schedulers import SCHEDULERS
from testbed.errors import DefinitionError
from testbed.ledger import Ledger
from testbed.traffic.records import read_jsonl

#: the environment variable controllers.e3_app reads its config's path from
CONFIG_ENV = "E3_CONTROLLER_CONFIG"


class E3ControllerProcess(OsKenProcess):
    """See the module docstring. ``scheduler`` in SCHEDULERS; ``sse_s`` the space switch
    epoch in emulation seconds; ``pairs`` the ToR pairs UT/DT rotate over (default: the
    k-th ToR of cluster 0 with the k-th of cluster 1); ``elephants`` (src IP, dst IP)
    of elephant transfers (DT). Raises DefinitionError for an unknown scheduler or a
    wildcard ``host``."""

    app = "controllers.e3_app"
    config_env = CONFIG_ENV

    def __init__(self, ledger: Ledger, portmap: PortMap, out_dir: Path, *, scheduler: str, sse_s: float = 10.0,
                 pairs: list[tuple[str, str]] | None = None, elephants: list[tuple[str, str]] | None = None,
                 host: str = "127.0.0.1", ready_timeout_s: float = 60.0, python: str = sys.executable) -> None:
        if scheduler not in SCHEDULERS:
            raise DefinitionError("params.scheduler", scheduler, " | ".join(SCHEDULERS))
        super().__init__(ledger, out_dir, list(portmap.bridges.values()), host=host,
                         ready_timeout_s=ready_timeout_s, python=python)
        self.portmap, self.scheduler, self.sse_s = portmap, scheduler, sse_s
        self.pairs, self.elephants = pairs, elephants or []
        self.reconfigurations_path = self.out_dir / "reconfigurations.jsonl"
        self.events_path = self.out_dir / "switch-events.jsonl"

    def app_config(self) -> dict[str, Any]:
        return {"portmap": json.loads(self.portmap.to_json()), "scheduler": self.scheduler, "sse_s": self.sse_s,
                "pairs": [list(p) for p in self.pairs] if self.pairs else None,
                "elephants": [list(e) for e in self.elephants],
                "log_path": str(self.reconfigurations_path.resolve()), "events_path": str(self.events_path.resolve())}

    def reconfigurations(self) -> list[dict[str, Any]]:
        return read_jsonl(self.reconfigurations_path)

    def switch_events(self) -> list[dict[str, Any]]:
        return read_jsonl(self.events_path)
