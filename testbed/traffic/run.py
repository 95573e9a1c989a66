"""``TrafficRun``: run a schedule on an emulated network, one agent for all hosts.

    sched = poisson_schedule(["h1", "h2", "h3"], rate_per_s=50, duration_s=3,
                             sizes=BimodalLognormal(0.8, 10e6, 0.5, 1e9, 0.5), seed=7)
    with TrafficRun(emu, emu.hosts(), sched, cca_of_host="cubic", out_dir=ctx.dir / "traffic",
                    tdf=ctx.tdf, window=Window(warmup_s=1, length_s=2), duration_s=3,
                    granularities_s=(0.1,)) as run:
        run.wait()
    res = run.result            # paper units
    res.throughput_bps, res.flows, res.series(0.1)

Inputs are in *paper units* (schedule times, window, granularities, duration); the
agent gets emulation units (times x D) and writes raw records in emulation units; the
result converts back (see :mod:`testbed.traffic.records`).

One agent process serves every host (:mod:`testbed.traffic.agent`): the emulation's
own, started on first use and kept for the emulation's life, so consecutive runs on
one emulation (the points of a kept fabric) share it (``Emulation.traffic_agent``:
recorded in the run's ledger, stopped at teardown, and by `testbed clean` after a
SIGKILL). Loopback hosts (no emulation) get an agent of the run's own. The run talks
to it over its stdin/stdout (:mod:`testbed.traffic.control`): the point's
configuration, ``ready`` (awaited with a timeout), the start time t0, and ``done``
once the agent has ended the point and written its files. On exit (also on
exceptions) a point still running is stopped: the agent records open flows as
incomplete and writes the files. The agent keeps a point's records in memory and
writes them once, at its end: a point whose agent dies has no records (it fails, and
a resumed run runs it again).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.dilation import TimeDilation
from testbed.errors import DefinitionError
from testbed.results import write_csv
from testbed.traffic.control import AgentProcess, TrafficError
from testbed.traffic.records import FlowRecord, load_flows, merge_bins, read_jsonl, series_from_bins
from testbed.traffic.schedule import Schedule
from testbed import hostclock

log = logging.getLogger(__name__)

DEFAULT_PORT = 5300

__all__ = ["DEFAULT_PORT", "TrafficError", "TrafficResult", "TrafficRun", "Window"]


@dataclass(frozen=True)
class Window:
    """Measurement window in paper units: from ``warmup_s`` after t0 for ``length_s``."""

    warmup_s: float
    length_s: float

    def __post_init__(self) -> None:
        if not self.warmup_s >= 0:
            raise DefinitionError("window.warmup_s", self.warmup_s, "a time >= 0 s")
        if not self.length_s > 0:
            raise DefinitionError("window.length_s", self.length_s, "a time > 0 s")

    @property
    def end_s(self) -> float:
        return self.warmup_s + self.length_s


class TrafficResult:
    """What a run measured, in paper units (raw files stay in ``out_dir``)."""

    def __init__(self, out_dir: Path, hosts: Sequence[str], tdf: TimeDilation, window: Window | None,
                 granularities_s: Sequence[float]) -> None:
        self.out_dir, self.hosts, self.tdf, self.window = out_dir, list(hosts), tdf, window
        self.granularities_s = list(granularities_s)
        self.flows: list[FlowRecord] = load_flows(out_dir, hosts, tdf)
        self.stats: dict[str, dict[str, Any]] = {}
        for h in hosts:
            p = out_dir / f"stats-{h}.json"
            if p.exists():
                self.stats[h] = json.loads(p.read_text())
        self.sink_records = [r for h in hosts for r in read_jsonl(out_dir / f"sink-{h}.jsonl")]

    @property
    def window_bytes(self) -> int:
        """Payload bytes received by all hosts inside the window (all flows, also
        those that straddle its edges)."""
        return sum(s.get("window_bytes", 0) for s in self.stats.values())

    @property
    def throughput_bps(self) -> float | None:
        """Network throughput: payload bytes delivered in the window x 8 / window
        length (paper units); None without a window."""
        if self.window is None:
            return None
        return 8 * self.window_bytes / self.window.length_s

    def _g_key(self, granularity_s: float) -> str:
        g_emu = self.tdf.time_to_emulation(granularity_s)
        for s in self.stats.values():
            for k in s.get("bins", {}):
                if abs(float(k) - g_emu) <= 1e-9 * max(1.0, g_emu):
                    return k
        raise DefinitionError("granularity_s", granularity_s, f"one of the run's {self.granularities_s}")

    def series(self, granularity_s: float, host: str | None = None) -> list[dict[str, float]]:
        """Received throughput per interval of ``granularity_s`` (paper s), for the whole
        network or one receiving host: rows t_s, bytes, throughput_bps."""
        key = self._g_key(granularity_s)
        parts = [s["bins"][key] for h, s in self.stats.items() if host is None or h == host]
        until = max((s.get("stopped_at", 0.0) for s in self.stats.values()), default=0.0)
        return series_from_bins(merge_bins(parts), float(key), self.tdf, until_emu=until)

    def flow_series(self, flow_id: int, granularity_s: float) -> list[dict[str, float]]:
        """The same for one traced flow (``FlowSpec.trace``)."""
        key = self._g_key(granularity_s)
        for r in self.sink_records:
            if r.get("id") == flow_id and "bins" in r:
                return series_from_bins(r["bins"][key], float(key), self.tdf)
        raise DefinitionError("flow_id", flow_id, "the id of a traced flow (FlowSpec.trace=True) that connected")

    def agent_cpu_s(self) -> float:
        """CPU seconds (user + system) the agent used for the point, all hosts together
        (every host's stats hold the same figures: one process serves them all)."""
        return max((s["cpu_user_s"] + s["cpu_sys_s"] for s in self.stats.values()), default=0.0)

    def counts(self) -> dict[str, int]:
        out = {k: 0 for k in ("complete", "incomplete", "failed")}
        for f in self.flows:
            out[f.status] = out.get(f.status, 0) + 1
        return out

    def write(self, out_dir: Path | None = None) -> None:
        """flows.csv and series-<granularity>.csv (paper units) next to the raw files."""
        d = out_dir or self.out_dir
        write_csv(d / "flows.csv", [f.row() for f in self.flows])
        for g in self.granularities_s:
            write_csv(d / f"series-{g:g}s.csv", self.series(g))


class TrafficRun:
    """Context manager running ``schedule`` on one agent serving all hosts; see module doc.

    emu: the ``Emulation`` (its agent serves the run; None for
    :class:`~testbed.traffic.local.LoopbackHost` hosts, which get an agent of the run's
    own, recorded in a host's ``ledger`` if it has one). hosts: the ``Host`` objects
    taking part (every schedule host must be among them; hosts without flows still run
    a sink). cca_of_host: kernel congestion-control name for all hosts, or per host name.
    duration_s: the agent stops the point by itself this long after t0 (paper s; None:
    when every flow ended, see :meth:`wait`). window / granularities_s: measurement
    window and series granularities (paper s). rcvbuf_of_host: ``SO_RCVBUF`` of a
    host's listener (bytes). ready_timeout_s: bound on the agent's start-up and set-up
    (s). start_delay_s: time between the start message and t0 (s). notify_tags: flows
    with these tags are reported as they end (:meth:`ended_flows`; E3's broker releases
    a reservation then). python: the agent's interpreter (an emulation's agent keeps
    the one it was started with).
    """

    def __init__(self, emu: Any, hosts: Sequence[Any], schedule: Schedule, cca_of_host: str | Mapping[str, str],
                 out_dir: Path, tdf: TimeDilation = TimeDilation(1.0), *, window: Window | None = None,
                 granularities_s: Sequence[float] = (), duration_s: float | None = None,
                 rcvbuf_of_host: Mapping[str, int] | None = None, port: int = DEFAULT_PORT,
                 ready_timeout_s: float = 60.0, start_delay_s: float = 0.2, notify_tags: Collection[str] = (),
                 python: str = sys.executable) -> None:
        self.emu, self.schedule, self.tdf = emu, schedule, tdf
        self.hosts = {h.name: h for h in hosts}
        self.out_dir = Path(out_dir)
        self.window, self.granularities_s = window, [float(g) for g in granularities_s]
        self.duration_s, self.port = duration_s, port
        self.ready_timeout_s, self.start_delay_s, self.python = ready_timeout_s, start_delay_s, python
        self.rcvbuf_of_host = dict(rcvbuf_of_host or {})
        self.notify_tags = frozenset(notify_tags)
        missing = sorted(schedule.hosts() - set(self.hosts))
        if missing:
            raise DefinitionError("schedule hosts", missing, f"hosts of the emulation taking part: {sorted(self.hosts)}")
        if isinstance(cca_of_host, str):
            self.cca = {h: cca_of_host for h in self.hosts}
        else:
            self.cca = dict(cca_of_host)
            lacking = sorted(set(self.hosts) - set(self.cca))
            if lacking:
                raise DefinitionError("cca_of_host", lacking, "a congestion control for every host")
        for g in self.granularities_s:
            if not g > 0:
                raise DefinitionError("granularities_s", g, "intervals > 0 s")
        if duration_s is not None and not duration_s > 0:
            raise DefinitionError("duration_s", duration_s, "None or a time > 0 s")
        if window and duration_s is not None and window.end_s > duration_s + 1e-12:
            raise DefinitionError("window", f"{window.warmup_s}+{window.length_s} s",
                                  f"a window ending by duration_s = {duration_s} s")
        #: the agent serving this run (set by start(); kept after stop() for its pid)
        self.agent: AgentProcess | None = None
        self._own_agent = False
        self._holding = False
        self._open = False  # the agent holds this run's point (sent, not yet done or refused)
        self.seq: int | None = None
        self.t0: float | None = None
        self.result: TrafficResult | None = None
        #: ids of flows with a tag in notify_tags that have ended
        self.ended: set[int] = set()
        self._all_ended = False
        #: the agent's ``done`` message once the point has ended
        self.finished: dict[str, Any] | None = None
        self._stderr0 = 0

    # -- configuration -----------------------------------------------------------------
    def agent_config(self, name: str) -> dict[str, Any]:
        """Host ``name``'s part of the point's configuration, in emulation units."""
        D = self.tdf
        flows = []
        for f in self.schedule.flows:
            if f.src != name:
                continue
            spec = {"id": f.id, "dst": f.dst, "dst_ip": self.hosts[f.dst].ip, "dst_port": self.port,
                    "size": f.size_bytes or 0, "start": D.time_to_emulation(f.start_s),
                    "duration": D.time_to_emulation(f.duration_s) if f.duration_s else None,
                    "sndbuf": f.sndbuf_bytes, "window_clamp": f.window_clamp_bytes, "trace": f.trace, "tag": f.tag}
            if f.tag in self.notify_tags:
                spec["notify"] = True
            flows.append(spec)
        w = self.window
        return {"host": name, "netns": getattr(self.hosts[name], "netns", None), "listen_ip": self.hosts[name].ip,
                "listen_port": self.port, "cca": self.cca[name],
                "rcvbuf": self.rcvbuf_of_host.get(name), "out_dir": str(self.out_dir.resolve()),
                "granularities": [D.time_to_emulation(g) for g in self.granularities_s],
                "window": [D.time_to_emulation(w.warmup_s), D.time_to_emulation(w.end_s)] if w else None,
                "stop_after": D.time_to_emulation(self.duration_s) if self.duration_s else None,
                "start_timeout": self.ready_timeout_s + 60.0, "flows": flows}

    # -- life cycle ----------------------------------------------------------------------
    def __enter__(self) -> "TrafficRun":
        try:
            self.start()
        except BaseException:
            self._stop_quietly()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is None:
            self.stop()
        else:
            self._stop_quietly()

    def _stop_quietly(self) -> None:
        """stop() while another exception is on its way (that one is the news)."""
        try:
            self.stop()
        except TrafficError as exc:
            log.warning("stopping the traffic run in %s: %s", self.out_dir, exc)

    def _agent(self) -> AgentProcess:
        """The emulation's agent, or one of this run's own (loopback hosts)."""
        if self.emu is not None and hasattr(self.emu, "traffic_agent"):
            return self.emu.traffic_agent(self.python)
        ledger = getattr(self.emu, "ledger", None) or next(
            (h.ledger for h in self.hosts.values() if getattr(h, "ledger", None) is not None), None)
        self._own_agent = True
        return AgentProcess.start(ledger, self.python)

    def start(self) -> None:
        """Send the point to the agent, wait until it listens for every host, then send
        t0. Raises TrafficError (agent refused the point, naming host and reason; not
        ready in time; died) and OSError (out_dir not writable)."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if (self.out_dir / "agent.json").exists():
            raise TrafficError(f"{self.out_dir} already holds a traffic run (agent.json); use a fresh folder")
        (self.out_dir / "schedule.json").write_text(self.schedule.to_json())
        (self.out_dir / "meta.json").write_text(json.dumps({
            "tdf": self.tdf.factor, "window": vars(self.window) if self.window else None,
            "granularities_s": self.granularities_s, "duration_s": self.duration_s, "cca": self.cca,
            "port": self.port, "schedule_meta": self.schedule.meta, "units": "raw files: emulation seconds "
            "since t0; flows.csv/series: paper units (t / D, rate x D)"}, indent=1))
        deadline = hostclock.Deadline(self.ready_timeout_s)
        agent = self.agent = self._agent()
        if agent.busy:
            raise TrafficError(f"the traffic agent (pid {agent.pid}) serves another TrafficRun; one at a time")
        agent.busy = self._holding = True
        self.seq = agent.next_seq()
        msg = {"op": "point", "seq": self.seq, "out_dir": str(self.out_dir.resolve()),
               "hosts": [self.agent_config(n) for n in self.hosts]}
        (self.out_dir / "agent.json").write_text(json.dumps(msg))
        self._stderr0 = agent.stderr_size()
        self._open = True
        agent.send(msg, timeout_s=self.ready_timeout_s)
        if self._await("ready", deadline) is None:
            raise TrafficError(f"the traffic agent (pid {agent.pid}) was not ready within "
                               f"{self.ready_timeout_s:g} s; {agent.stderr_tail()}")
        self.t0 = time.monotonic() + self.start_delay_s
        agent.send({"op": "start", "seq": self.seq, "t0": self.t0})

    def _await(self, event: str | None, deadline: hostclock.Deadline | None) -> dict[str, Any] | None:
        """Read the agent's messages about this point until one of kind ``event`` (any
        kind: None), which is returned, or the deadline (None; with no deadline: until
        no message is waiting). Raises TrafficError for an error (naming host and
        reason) or a dead agent."""
        assert self.agent is not None
        while True:
            msg = self.agent.receive(deadline)
            if msg is None:
                return None
            if msg.get("seq") not in (self.seq, None):
                continue  # a late answer about an earlier point
            ev = msg.get("ev")
            if ev == "ended":
                self.ended.add(int(msg["id"]))
            elif ev == "all-ended":
                self._all_ended = True
            elif ev == "done":
                self.finished, self._open = msg, False
                if msg.get("error"):
                    raise TrafficError(f"traffic agent (pid {self.agent.pid}): {msg['error']}")
            elif ev == "error":
                self._open = False  # the agent holds no point of this seq
                where = f"host {msg['host']}: " if msg.get("host") else ""
                raise TrafficError(f"traffic agent (pid {self.agent.pid}): {where}{msg.get('reason')}")
            if event is None or ev == event:
                return msg

    def done(self) -> bool:
        """True once every flow has ended (reads what the agent has said, without
        waiting). Raises TrafficError when the agent reported an error or died."""
        if self._open:
            self._await("done", None)
        return self._all_ended or self.finished is not None

    def poll(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` guest (emulation) seconds for news from the agent (a
        flow of ``notify_tags`` ended, every flow ended); returns :meth:`done`. The wait
        is the traffic loop's step, so it is on the guest's clock only: under the
        instruction-counted clock a host-clock margin (1 s at least, the RTC's
        resolution) made every step last a host second or more, and timeline actions ran
        late by seconds of emulation time (E5: 2 s late at D = 20)."""
        if self._open:
            self._await(None, hostclock.Deadline(timeout_s, guest_only=True))
        return self.done()

    def ended_flows(self) -> set[int]:
        """Ids of the flows tagged with one of ``notify_tags`` that have ended so far."""
        self.done()
        return set(self.ended)

    def wait(self, timeout_s: float | None = None) -> None:
        """Wait until the agent has ended the point: every flow ended or (with
        ``duration_s``) the duration passed; its files are then written.

        ``timeout_s`` bounds the wait in seconds (default: the dilated duration +
        30 s, or 3600 s without a duration). Raises TrafficError on timeout or when the
        agent reported an error or died."""
        if self.t0 is None:
            raise TrafficError("wait() before start()")
        if self.finished is not None:
            return
        stop_emu = self.tdf.time_to_emulation(self.duration_s) if self.duration_s else None
        if timeout_s is None:
            timeout_s = stop_emu + 30.0 if stop_emu is not None else 3600.0
        if self._await("done", hostclock.Deadline(timeout_s)) is None:
            raise TrafficError(f"traffic did not finish within {timeout_s:g} s (flows still running; "
                               f"see {self.out_dir})")

    def stop(self, grace_s: float = 30.0) -> None:
        """End the point if it still runs (the agent records open flows as incomplete
        and writes the files; killed when it has not answered within ``grace_s``
        seconds), then read the results. The agent stays up for the emulation's next
        run (a run's own agent is ended). Raises TrafficError when the agent died or
        hung (``result`` is then None: nothing was written)."""
        agent = self.agent
        if agent is None or not self._holding:
            return
        error: TrafficError | None = None
        try:
            if self._open:
                try:
                    agent.send({"op": "stop", "seq": self.seq})
                    if self._await("done", hostclock.Deadline(grace_s)) is None:
                        agent.kill()
                        error = TrafficError(f"the traffic agent (pid {agent.pid}) did not end the point within "
                                             f"{grace_s:g} s of the stop; killed")
                except TrafficError as exc:
                    error = exc
                self._open = False
        finally:
            self._holding = agent.busy = False
            self._save_log()
            if self._own_agent:
                agent.close()
        if self.t0 is not None and self.finished is not None and self.finished.get("written"):
            self.result = TrafficResult(self.out_dir, list(self.hosts), self.tdf, self.window,
                                        self.granularities_s)
        if error is not None:
            raise error

    def _save_log(self) -> None:
        """What the agent wrote to stderr during this run, as ``agent.log`` (only when
        there is something)."""
        assert self.agent is not None
        try:
            text = self.agent.stderr_since(self._stderr0)
            if text:
                (self.out_dir / "agent.log").write_bytes(text)
        except (OSError, ValueError) as exc:
            log.warning("could not save the traffic agent's log in %s: %s", self.out_dir, exc)
