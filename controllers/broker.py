"""The on-demand transfer agent of E3: asks the controller for the direct link before
each elephant transfer and releases it when the transfer has completed.

The hosts' network namespaces cannot reach the controller's API (it listens on the
management address only), so the migration agent runs beside the controller, on
behalf of the hosts: before the traffic starts it reserves the link for every elephant
of the schedule and waits (bounded) until every granted reservation is installed; while
the transfers run, ``poll(ended)`` gets the ids of the elephants that have ended (the
traffic agent reports them as they end: ``TrafficRun(notify_tags=("elephant",))``,
``TrafficRun.ended_flows()``) and releases their reservations at once. A reservation
that had to queue (its ToRs were busy with another
circuit) is granted by the controller when they become free; that elephant starts on
the leaf-spine and is moved then. Every request, grant and release is logged to
``broker.jsonl`` (CLOCK_MONOTONIC seconds, the agents' clock).
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any, Protocol

from controllers.process import ControlError
from testbed.traffic.schedule import Schedule
from testbed import hostclock


class Api(Protocol):
    def call(self, method: str, path: str, body: dict | None = None, timeout: float = 10.0) -> tuple[int, Any]: ...


class OnDemandBroker:
    """See the module docstring. ``ip_of`` maps host names to IPv4 addresses; ``tag``
    marks the elephants."""

    def __init__(self, api: Api, schedule: Schedule, ip_of: dict[str, str], log_path: Path,
                 tag: str = "elephant") -> None:
        self.api, self.ip_of = api, ip_of
        self.elephants = [f for f in schedule.flows if f.tag == tag]
        self.rid: dict[int, int] = {}          # flow id -> reservation id
        self.open: set[int] = set()            # flow ids still holding a reservation
        self._log = open(log_path, "a")

    def _record(self, event: str, **kw: Any) -> None:
        self._log.write(json.dumps({"t": time.monotonic(), "event": event, **kw}) + "\n")
        self._log.flush()

    def reserve_all(self, timeout_s: float = 30.0) -> None:
        """One reservation per elephant; wait until the granted ones are installed."""
        for f in self.elephants:
            code, body = self.api.call("POST", "/reservations", {"src": self.ip_of[f.src], "dst": self.ip_of[f.dst]})
            if code != 201:
                raise ControlError(f"reservation for flow {f.id} ({f.src} -> {f.dst}) refused ({code}): {body}")
            self.rid[f.id] = body["id"]
            self.open.add(f.id)
            self._record("request", flow=f.id, reservation=body["id"], state=body["state"])
        deadline = hostclock.Deadline(timeout_s)
        pending = dict(self.rid)
        while pending:
            for fid, rid in list(pending.items()):
                code, body = self.api.call("GET", f"/reservations/{rid}")
                if code != 200:
                    raise ControlError(f"GET /reservations/{rid} answered {code}: {body}")
                if body["state"] != "granted" or body["installed"]:
                    self._record("installed" if body["installed"] else body["state"], flow=fid, reservation=rid)
                    del pending[fid]
            if pending and deadline.expired():
                raise ControlError(f"reservations {sorted(pending.values())} granted but not installed "
                                      f"within {timeout_s:g} s")
            if pending:
                time.sleep(0.02)

    def poll(self, ended: Collection[int]) -> int:
        """Release the reservations of the elephants among ``ended`` (flow ids that have
        ended); returns how many are still open."""
        for fid in sorted(self.open.intersection(ended)):
            self.release(fid)
        return len(self.open)

    def release(self, fid: int) -> None:
        code, body = self.api.call("DELETE", f"/reservations/{self.rid[fid]}")
        if code != 200:
            raise ControlError(f"DELETE /reservations/{self.rid[fid]} answered {code}: {body}")
        self.open.discard(fid)
        self._record("release", flow=fid, reservation=self.rid[fid])

    def close(self) -> None:
        """Release whatever is still held (an interrupted run) and close the log."""
        for fid in sorted(self.open):
            try:
                self.release(fid)
            except (ControlError, OSError):
                pass
        self._log.close()
