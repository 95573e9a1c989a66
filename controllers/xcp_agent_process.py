"""E5's XCP agent (:mod:`controllers.xcp_agent`) as a process of its own, beside the
emulation, in the root namespace (the pacers are reached in their namespaces over
netlink, the accumulators through the pinned map).

    python -m controllers.xcp_agent_process CONFIG.json OUTDIR

runs the loop on the real data plane (:class:`controllers.xcp_io.XcpIo`) until SIGTERM
or SIGINT, or until the config's ``end_ns``, then writes its records into OUTDIR:

* ``xcp_rates.csv`` (``xcp_agent.RATE_COLUMNS``): one row per probe, i.e. per interval
  per active macroflow;
* ``xcp_links.csv`` (``xcp_agent.LINK_COLUMNS``): one row per interval per controlled
  output;
* ``xcp.json``: the summary (``XcpAgent.summary``, with the pacers' own counters), and
  ``error`` when the loop ended on an exception;
* ``xcp-status.json``: ``{"ready": true, "pid": ..}`` once the loop runs (the health
  check of :class:`XcpAgentProcess`).

A stop signal is taken only between intervals (``XcpIo.watch_signals``), so the records
are complete up to the last interval decided; they are written once, after the loop
(nothing waits for file I/O during a point). Exit status 0, 1 when the loop or the
config failed (the message on stderr, the records written as far as they go), 2 for a
wrong command line.

:class:`XcpAgentProcess` starts it ledgered and stops it (``controllers.process``):

    with XcpAgentProcess(ledger, cfg, out_dir) as agent:
        ...                          # the point's traffic
    agent.summary()                  # xcp.json
"""

from __future__ import annotations

import csv
import json
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from controllers.process import ControlError, ControlProcess
from controllers.xcp_agent import LINK_COLUMNS, RATE_COLUMNS, AgentConfig, XcpAgent, XcpConfigError, config_loads
from testbed.ledger import Ledger

CONFIG_NAME = "xcp-agent.json"
STATUS_NAME = "xcp-status.json"
RATES_NAME, LINKS_NAME, SUMMARY_NAME = "xcp_rates.csv", "xcp_links.csv", "xcp.json"
#: seconds the agent gets to write its records after SIGTERM
STOP_GRACE_S = 30.0


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _write_csv(path: Path, columns: Sequence[str], rows: list[dict[str, Any]]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns))
        w.writeheader()
        w.writerows(rows)
    tmp.replace(path)


def write_records(agent: XcpAgent, out_dir: Path, pacer_counters: dict[str, dict[str, Any]] | None = None,
                  error: str | None = None) -> dict[str, Any]:
    """Write xcp_rates.csv, xcp_links.csv and xcp.json of ``agent`` into ``out_dir``;
    returns the summary. Raises OSError when a file cannot be written."""
    _write_csv(out_dir / RATES_NAME, RATE_COLUMNS, agent.rates_table())
    _write_csv(out_dir / LINKS_NAME, LINK_COLUMNS, agent.links_table())
    summary = agent.summary(pacer_counters)
    if error is not None:
        summary["error"] = error
        summary["exact"] = False
    _write_atomic(out_dir / SUMMARY_NAME, json.dumps(summary, indent=1))
    return summary


def run(cfg: AgentConfig, out_dir: Path, io: Any = None) -> int:
    """The loop on the real data plane (``io`` None: an XcpIo of ``cfg``; else an object
    with XcpIo's methods), then the records (module docstring). Returns the exit status.
    Raises what XcpIo raises when it cannot open the data plane."""
    if io is None:
        from controllers.xcp_io import XcpIo
        io = XcpIo(cfg)
    io.watch_signals()
    agent = XcpAgent(cfg, io)
    error = None
    _write_atomic(out_dir / STATUS_NAME, json.dumps({"ready": True, "pid": os.getpid(), "epoch_ns": cfg.epoch_ns,
                                                     "interval_ns": cfg.interval_ns}))
    try:
        agent.run(io.stop_requested)
    except Exception as exc:  # the records of the intervals decided are kept whatever failed
        error = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    pacers: dict[str, dict[str, Any]] = {}
    for edge in io.pacers:
        try:
            pacers[edge] = io.pacer_counters(edge)
        except Exception as exc:
            pacers[edge] = {"error": f"{type(exc).__name__}: {exc}"}
    io.close()
    write_records(agent, out_dir, pacers, error)
    return 0 if error is None else 1


def _yield_to_the_data_path() -> None:
    """Run the agent under SCHED_IDLE: on the guest's one vCPU its per-interval work (10-40
    ms of CPU) must not delay the emulated data path (qdisc timers, softirq work deferred
    to ksoftirqd), which decides on stamps with a lookahead of about a millisecond. Its
    own timing has the margin M_x, and a late read is counted (acc_late), not hidden."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError) as exc:      # not Linux, or refused: run as before
        print(f"xcp_agent_process: SCHED_IDLE not set ({exc})", file=sys.stderr)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m controllers.xcp_agent_process CONFIG.json OUTDIR", file=sys.stderr)
        return 2
    out_dir = Path(argv[2])
    try:
        cfg = config_loads(Path(argv[1]).read_text())
        out_dir.mkdir(parents=True, exist_ok=True)
        return run(cfg, out_dir)
    except (XcpConfigError, OSError) as exc:
        print(f"xcp_agent_process: {exc}", file=sys.stderr)
        return 1


class XcpAgentProcess(ControlProcess):
    """The agent for one point: ``cfg`` written to ``out_dir``/xcp-agent.json, records
    in ``out_dir`` (module docstring), started with ``python`` from this checkout in
    the root namespace (``netns`` to run it elsewhere), healthy once xcp-status.json
    says ready; stopped with SIGTERM and STOP_GRACE_S to write its records."""

    what = "the XCP agent"
    healthy = "the XCP agent's loop to run"

    def __init__(self, ledger: Ledger, cfg: AgentConfig, out_dir: Path, *, python: str = sys.executable,
                 netns: str | None = None, ready_timeout_s: float = 60.0) -> None:
        super().__init__(ledger, [], out_dir, log_name="xcp-agent.log", netns=netns, ready_timeout_s=ready_timeout_s,
                         grace_s=STOP_GRACE_S)
        self.cfg, self.python = cfg, python
        self.health = self._status

    def prepare(self) -> None:
        path = self.out_dir / CONFIG_NAME
        path.write_text(self.cfg.dumps())
        for name in (STATUS_NAME, SUMMARY_NAME, RATES_NAME, LINKS_NAME):
            (self.out_dir / name).unlink(missing_ok=True)
        # -m from the checkout (cwd): the guest runs the checkout it was started from
        self.argv = [self.python, "-m", "controllers.xcp_agent_process", str(path.resolve()),
                     str(self.out_dir.resolve())]
        self.cwd = Path(__file__).resolve().parent.parent

    def _status(self) -> dict[str, Any]:
        path = self.out_dir / STATUS_NAME
        try:
            status = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ControlError(f"{path}: not written yet ({exc})") from None
        if not status.get("ready"):
            raise ControlError(f"{path}: not ready")
        return status

    def summary(self) -> dict[str, Any]:
        """xcp.json (after stop). Raises ControlError when it was not written."""
        path = self.out_dir / SUMMARY_NAME
        try:
            return json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ControlError(f"{path}: no summary ({exc}); see {self.log_path}") from None


if __name__ == "__main__":
    # the process only: main() called in another process (a test) must leave that
    # process's scheduling alone (a pytest worker made SCHED_IDLE ran every later test
    # only when nothing else wanted the CPU)
    _yield_to_the_data_path()
    sys.exit(main(sys.argv))
