"""E4's flow mover: a control loop inside router r1 that moves a flow from the IP path
onto the optical path with one atomic route replace (Moura et al., section 2: "the
router r1 performs the transition of the TCP flow to the optical level").

Run as ``python -m controllers.flowmover CONFIG.json`` inside r1's network namespace
(:class:`controllers.flowmover_process.FlowMoverProcess` starts it). Two triggers:

* ``command``: the move happens when the process gets SIGUSR1, or at the
  CLOCK_MONOTONIC instant written in ``at_path`` when it gets SIGUSR2 (E4 arms it as
  soon as the flow started: the mover then sleeps until that instant itself, so the
  move does not wait for the run's Python loop, measured 5 ms of paper time late at
  D = 50);
* ``threshold`` ("self-management", the paper's refs. [5, 6]): every ``interval_s`` the
  loop reads the byte counter of r1's port from the sender (the flow's rate as the
  router sees it, not the traffic generator's numbers) and moves the flow once the
  rate has been at least ``threshold_bps`` for ``consecutive`` intervals in a row.

The move is one RTM_NEWROUTE with NLM_F_REPLACE for ``prefix`` via ``via``: the kernel
swaps the route atomically, so each packet r1 forwards takes either the old or the new
path. Every event is a JSON line in ``log_path`` with CLOCK_MONOTONIC seconds (the
emulation's clock, shared by all namespaces) and, at the move, CLOCK_REALTIME too
(tcpdump's timestamps): ``{"event": "sample", "t": .., "rate_bps": ..}`` per interval in
threshold mode (also after the move: the router's view of the flow's rate), ``{"event": "move", "trigger": .., "t_request": .., "t_before": ..,
"t_after": .., "realtime_before": .., "realtime_after": .., "rate_bps": .., "counters": {netns: {name: value}},
"t_counters": ..}`` once: ``counters`` are the kernel counters (testbed.cc.lossdetect)
of the namespaces named in ``counters_netns``, read right after the route replace, before
any packet can have taken the new path to the receiver and back (E4 splits its counts
there into before and after the move).
``status_path`` holds ``{"ready": true, "moved": false}`` once the loop runs (the
health check) and is rewritten after the move. Units: emulation seconds and bit/s.

Standard library, testbed.nsops (its own rtnetlink messages) and testbed.cc.lossdetect
only: it starts in the slow guest, where importing pyroute2, which it used until
2026-11-29, took 13-40 s.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from testbed import nsops

TRIGGERS = ("command", "threshold")


class MoverConfigError(ValueError):
    """The mover's config file is missing a key or has a bad value."""


def load_config(path: Path) -> dict[str, Any]:
    """The config (see the module docstring); raises MoverConfigError naming the key."""
    cfg = json.loads(path.read_text())
    for key in ("trigger", "prefix", "via", "watch_intf", "log_path", "status_path", "at_path"):
        if key not in cfg:
            raise MoverConfigError(f"mover config {path}: missing {key!r}")
    if cfg["trigger"] not in TRIGGERS:
        raise MoverConfigError(f"mover config {path}: trigger {cfg['trigger']!r}; accepted: {', '.join(TRIGGERS)}")
    if cfg["trigger"] == "threshold":
        for key in ("interval_s", "threshold_bps", "consecutive"):
            if not (isinstance(cfg.get(key), (int, float)) and cfg[key] > 0):
                raise MoverConfigError(f"mover config {path}: {key} = {cfg.get(key)!r}; accepted: a number > 0")
    return cfg


class Mover:
    """The route replace and its log; one move per process."""

    def __init__(self, cfg: dict[str, Any], log: TextIO) -> None:
        self.cfg, self.log = cfg, log
        if not nsops.link_exists(cfg["watch_intf"]):
            raise MoverConfigError(f"no interface {cfg['watch_intf']} in this namespace")
        self.moved = False
        self.counters_netns = list(cfg.get("counters_netns") or [])
        if self.counters_netns:
            from testbed.cc import lossdetect  # imported before the move, not at it

            self.read_counters = lossdetect.read

    def rx_bytes(self) -> int:
        """Bytes received on the watched port (the flow's data towards the receiver)."""
        return nsops.link_counters(self.cfg["watch_intf"], None)["rx_bytes"]

    def move(self, trigger: str, t_request: float, rate_bps: float | None) -> None:
        """Replace the route (once) and log the instants around it."""
        if self.moved:
            return
        rt0, t0 = time.clock_gettime(time.CLOCK_REALTIME), time.monotonic()
        nsops.replace_route(None, self.cfg["prefix"], self.cfg["via"])
        t1, rt1 = time.monotonic(), time.clock_gettime(time.CLOCK_REALTIME)
        self.moved = True
        counters = {ns: self.read_counters(ns) for ns in self.counters_netns}
        self.emit({"event": "move", "trigger": trigger, "t_request": t_request, "t_before": t0, "t_after": t1,
                   "realtime_before": rt0, "realtime_after": rt1, "rate_bps": rate_bps,
                   "prefix": self.cfg["prefix"], "via": self.cfg["via"], "counters": counters,
                   "t_counters": time.monotonic()})
        write_status(Path(self.cfg["status_path"]), moved=True)

    def emit(self, record: dict[str, Any]) -> None:
        self.log.write(json.dumps(record) + "\n")
        self.log.flush()


def write_status(path: Path, *, moved: bool) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"ready": True, "moved": moved, "pid": os.getpid()}))
    tmp.replace(path)


def run(cfg: dict[str, Any]) -> None:
    """The loop (see the module docstring); returns on SIGTERM."""
    stop = False

    def on_term(_sig: int, _frame: Any) -> None:
        nonlocal stop
        stop = True

    with open(cfg["log_path"], "a") as log:
        mover = Mover(cfg, log)

        deadline: float | None = None

        def on_usr1(_sig: int, _frame: Any) -> None:
            # acted on at once: the handler runs between two bytecodes of the main
            # thread, a sleep is interrupted
            mover.move("command", time.monotonic(), None)

        def on_usr2(_sig: int, _frame: Any) -> None:
            nonlocal deadline
            deadline = float(json.loads(Path(cfg["at_path"]).read_text())["at"])

        signal.signal(signal.SIGTERM, on_term)
        if cfg["trigger"] == "command":
            signal.signal(signal.SIGUSR1, on_usr1)
            signal.signal(signal.SIGUSR2, on_usr2)
        write_status(Path(cfg["status_path"]), moved=False)
        if cfg["trigger"] == "command":
            while not stop:
                if deadline is None or mover.moved:
                    signal.pause()
                    continue
                left = deadline - time.monotonic()
                if left > 0:
                    time.sleep(left)  # a signal ends it early; the loop then looks again
                    continue
                mover.move("command", deadline, None)
            return
        interval, threshold, need = float(cfg["interval_s"]), float(cfg["threshold_bps"]), int(cfg["consecutive"])
        last_t, last_b, above = time.monotonic(), mover.rx_bytes(), 0
        next_t = last_t + interval
        while not stop:
            time.sleep(max(0.0, next_t - time.monotonic()))
            next_t += interval
            t, b = time.monotonic(), mover.rx_bytes()
            rate = 8 * (b - last_b) / (t - last_t) if t > last_t else 0.0
            last_t, last_b = t, b
            mover.emit({"event": "sample", "t": t, "rate_bps": rate})
            above = above + 1 if rate >= threshold else 0
            if above >= need and not mover.moved:
                mover.move("threshold", t, rate)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m controllers.flowmover CONFIG.json", file=sys.stderr)
        return 2
    try:
        cfg = load_config(Path(argv[1]))
        run(cfg)
    except (MoverConfigError, OSError, json.JSONDecodeError) as exc:
        print(f"flowmover: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
