"""E4's flow mover (:mod:`controllers.flowmover`) in a process of its own, inside r1.

    with FlowMoverProcess(ledger, r1.netns, out_dir, prefix="10.0.2.0/24", via="10.0.13.3",
                          watch_intf="r1-eth0", trigger="command") as mover:
        ...                      # traffic runs
        mover.request_move()     # at the requested time (command trigger)
    mover.moves()                # [{"event": "move", "t_before": .., ...}]

Files in ``out_dir``: ``mover.json`` (config), ``mover.log`` (its output),
``mover.jsonl`` (samples and the move, CLOCK_MONOTONIC seconds: the emulation's clock),
``mover-status.json`` (readiness). Units: emulation seconds and bit/s.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from controllers.flowmover import TRIGGERS
from controllers.process import ControlError, ControlProcess
from testbed.errors import DefinitionError
from testbed.ledger import Ledger
from testbed.traffic.records import read_jsonl


class FlowMoverProcess(ControlProcess):
    """See the module docstring. ``trigger`` "command" (move on :meth:`request_move`,
    or at the instant given to :meth:`request_move_at`) or "threshold" (move once r1's port ``watch_intf`` received at least
    ``threshold_bps`` for ``consecutive`` intervals of ``interval_s``, emulation units);
    ``counters_netns``: namespaces whose kernel counters the mover reads right after the
    move (in its log record).
    Raises DefinitionError for an unknown trigger or a threshold trigger without a
    positive interval, threshold and count."""

    what = "the flow mover"
    healthy = "the flow mover's loop to run"

    def __init__(self, ledger: Ledger, netns: str, out_dir: Path, *, prefix: str, via: str, watch_intf: str,
                 trigger: str, interval_s: float | None = None, threshold_bps: float | None = None,
                 consecutive: int = 1, counters_netns: list[str] | None = None, python: str = sys.executable,
                 ready_timeout_s: float = 60.0) -> None:
        if trigger not in TRIGGERS:
            raise DefinitionError("params.trigger", trigger, " | ".join(TRIGGERS))
        if trigger == "threshold":
            for key, value in (("interval", interval_s), ("threshold", threshold_bps), ("consecutive", consecutive)):
                if not (value is not None and value > 0):
                    raise DefinitionError(f"params.{key}", value, "a value > 0 for the threshold trigger")
        super().__init__(ledger, [], out_dir, log_name="mover.log", netns=netns, ready_timeout_s=ready_timeout_s)
        self.python = python
        self.config = {"trigger": trigger, "prefix": prefix, "via": via, "watch_intf": watch_intf,
                       "interval_s": interval_s, "threshold_bps": threshold_bps, "consecutive": consecutive,
                       "counters_netns": list(counters_netns or []),
                       "log_path": str((self.out_dir / "mover.jsonl").resolve()),
                       "status_path": str((self.out_dir / "mover-status.json").resolve()),
                       "at_path": str((self.out_dir / "mover-at.json").resolve())}
        self.health = self._status

    def prepare(self) -> None:
        path = self.out_dir / "mover.json"
        path.write_text(json.dumps(self.config, indent=1))
        for name in ("mover.jsonl", "mover-status.json", "mover-at.json"):
            (self.out_dir / name).unlink(missing_ok=True)
        # -m from the checkout (cwd): the guest runs the checkout it was started from
        self.argv = [self.python, "-m", "controllers.flowmover", str(path.resolve())]
        self.cwd = Path(__file__).resolve().parent.parent

    def _status(self) -> dict[str, Any]:
        path = Path(self.config["status_path"])
        try:
            return json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ControlError(f"{path}: not written yet ({exc})") from None

    def request_move(self) -> float:
        """Ask the mover to move now (command trigger); returns the CLOCK_MONOTONIC
        time of the request. Raises ControlError if it is not running."""
        if not self.alive() or self.proc is None:
            raise ControlError(f"{self.what} is not running: {self.log_tail()}")
        t = time.monotonic()
        os.kill(self.proc.pid, signal.SIGUSR1)
        return t

    def request_move_at(self, t_monotonic: float) -> None:
        """Ask the mover to move at CLOCK_MONOTONIC instant ``t_monotonic`` (command
        trigger; the emulation's clock); it sleeps until then itself. Raises
        ControlError if it is not running."""
        if not self.alive() or self.proc is None:
            raise ControlError(f"{self.what} is not running: {self.log_tail()}")
        path = Path(self.config["at_path"])
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"at": t_monotonic}))
        tmp.replace(path)
        os.kill(self.proc.pid, signal.SIGUSR2)

    def events(self) -> list[dict[str, Any]]:
        """Every line of mover.jsonl (samples and the move)."""
        path = Path(self.config["log_path"])
        return read_jsonl(path) if path.exists() else []

    def moves(self) -> list[dict[str, Any]]:
        """The move records (none or one)."""
        return [e for e in self.events() if e.get("event") == "move"]
