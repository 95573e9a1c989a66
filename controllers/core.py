"""The E3 controller's state, independent of os-ken: fabric, scheduler, what is applied,
which switches are ready, and the reconfiguration log (JSON lines).

The os-ken app (controllers/e3_app.py) asks ``plan()`` what to change, applies it over
OpenFlow and reports back with ``applied()``; the REST API (controllers/rest.py) calls
``status()``, ``request()``, ``release()`` and ``reservation()``. Everything here is
plain Python with an injectable clock, so it is tested without OpenFlow.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from controllers.portmap import PortMap, desired_flows, desired_ports
from controllers.schedulers import Clock, OnDemandScheduler, Scheduler, SchedulerError, make


class ControllerCore:
    """See the module docstring. ``log_path``: reconfiguration log (JSON lines), None
    for none; ``events_path``: switch connection events (JSON lines), None for none.
    ``on_change``: called after a reservation changed the wanted state (the app wakes
    its loop)."""

    def __init__(self, portmap: PortMap, scheduler: Scheduler, clock: Clock = time.monotonic,
                 log_path: Path | None = None, on_change: Callable[[], None] | None = None,
                 events_path: Path | None = None) -> None:
        self.portmap, self.scheduler, self.clock = portmap, scheduler, clock
        self.on_change = on_change or (lambda: None)
        self.applied_state: frozenset = frozenset()
        self.ready_switches: set[str] = set()
        self.connected: set[str] = set()
        self.reconfigurations = 0
        self.disconnects = 0
        self._log: TextIO | None = open(log_path, "a") if log_path else None
        self._events: TextIO | None = open(events_path, "a") if events_path else None

    @classmethod
    def from_config(cls, cfg: dict[str, Any], clock: Clock = time.monotonic,
                    on_change: Callable[[], None] | None = None) -> "ControllerCore":
        """From the runner's JSON config (keys: portmap, scheduler, sse_s, pairs, elephants,
        log_path)."""
        fab = PortMap.from_dict(cfg["portmap"])
        pairs = [tuple(p) for p in cfg.get("pairs") or fab.cluster_pairs()]
        elephants: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for src, dst in cfg.get("elephants", []):
            key = (fab.tor_of_ip(src), fab.tor_of_ip(dst))
            elephants.setdefault(key, []).append((src, dst))  # type: ignore[arg-type]
        sched = make(cfg["scheduler"], clock, pairs=pairs, sse_s=float(cfg.get("sse_s", 10.0)),
                     elephants=elephants, tor_of_ip={h["ip"]: h["tor"] for h in fab.hosts.values()},
                     cluster=fab.cluster)
        log_path, events_path = cfg.get("log_path"), cfg.get("events_path")
        return cls(fab, sched, clock, Path(log_path) if log_path else None, on_change,
                   Path(events_path) if events_path else None)

    # -- what the app applies -------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self.ready_switches >= set(self.portmap.switches())

    def wanted(self) -> frozenset:
        return self.scheduler.circuits(self.clock())

    def plan(self, state: frozenset) -> tuple[dict[str, frozenset], dict[tuple[str, int], bool]]:
        """Flow tables and special-port states for ``state``."""
        return desired_flows(self.portmap, state), desired_ports(self.portmap, state)

    def applied(self, state: frozenset, *, reason: str, t_start: float, t_done: float, flow_mods: int,
                port_mods: int) -> dict[str, Any]:
        """Record that ``state`` is now installed (all barriers answered); log it."""
        before = self.applied_state
        self.applied_state = state
        self.reconfigurations += 1
        rec = {"seq": self.reconfigurations, "t_start": t_start, "t_done": t_done, "wall": time.time(),
               "scheduler": self.scheduler.name, "reason": reason,
               "circuits": sorted((c.to_json() for c in state), key=lambda c: (c["a"], c["b"])),
               "removed": sorted(f"{c.a}-{c.b}" for c in before - state),
               "added": sorted(f"{c.a}-{c.b}" for c in state - before),
               "flow_mods": flow_mods, "port_mods": port_mods}
        if self._log:
            self._log.write(json.dumps(rec, separators=(",", ":")) + "\n")
            self._log.flush()
        return rec

    # -- switch connections ---------------------------------------------------------
    def switch_connected(self, name: str) -> None:
        """``name`` (re)connected; it is not ready until ``switch_ready``."""
        self.connected.add(name)
        self._event(name, "connected")

    def switch_ready(self, name: str, flows: int) -> None:
        """``name`` holds the flows and port states of ``applied_state`` (barrier answered)."""
        self.ready_switches.add(name)
        self._event(name, "ready", flows=flows)

    def switch_lost(self, name: str) -> None:
        """``name``'s OpenFlow connection closed. The controller is not ready (no
        reconfiguration) until it is back: in fail_mode=secure the switch keeps its flows
        meanwhile, and on reconnecting it gets ``applied_state`` again."""
        self.connected.discard(name)
        self.ready_switches.discard(name)
        self.disconnects += 1
        self._event(name, "disconnected")

    def _event(self, name: str, event: str, **extra: Any) -> None:
        if self._events:
            rec = {"t": self.clock(), "wall": time.time(), "switch": name, "event": event, **extra}
            self._events.write(json.dumps(rec, separators=(",", ":")) + "\n")
            self._events.flush()

    # -- REST -----------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        return {**self.scheduler.describe(), "ready": self.ready, "connected": sorted(self.connected),
                "ready_switches": sorted(self.ready_switches), "switches": self.portmap.switches(),
                "reconfigurations": self.reconfigurations, "disconnects": self.disconnects,
                "circuits": [c.to_json() for c in self.applied_state]}

    def _on_demand(self) -> OnDemandScheduler:
        if not isinstance(self.scheduler, OnDemandScheduler):
            raise SchedulerError(f"scheduler {self.scheduler.name!r} takes no reservations "
                                 "(only on-demand does)", status=409)
        return self.scheduler

    def _view(self, r: Any) -> dict[str, Any]:
        out = r.to_json()
        out["installed"] = any(c.a == r.a and c.b == r.b and c.pairs and (r.src, r.dst) in c.pairs
                               for c in self.applied_state)
        return out

    def request(self, src: str, dst: str) -> dict[str, Any]:
        if not self.ready:
            raise SchedulerError("the controller is not ready (switches still connecting)", status=503)
        r = self._on_demand().request(src, dst)
        self.on_change()
        return self._view(r)

    def release(self, rid: int) -> dict[str, Any]:
        r = self._on_demand().release(rid)
        self.on_change()
        return self._view(r)

    def reservation(self, rid: int) -> dict[str, Any]:
        r = self._on_demand().reservations.get(rid)
        if r is None:
            raise SchedulerError(f"no reservation {rid}", status=404)
        return self._view(r)

    def reservations(self) -> list[dict[str, Any]]:
        return [self._view(r) for r in self._on_demand().reservations.values()]

    def close(self) -> None:
        for f in (self._log, self._events):
            if f:
                f.close()
        self._log = self._events = None
