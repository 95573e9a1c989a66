"""``TrafficRun``: run a schedule on an emulated network, one agent per host.

    sched = poisson_schedule(["h1", "h2", "h3"], rate_per_s=50, duration_s=3,
                             sizes=BimodalLognormal(0.8, 10e6, 0.5, 1e9, 0.5), seed=7)
    with TrafficRun(emu, emu.hosts(), sched, cca_of_host="cubic", out_dir=ctx.dir / "traffic",
                    tdf=ctx.tdf, window=Window(warmup_s=1, length_s=2), duration_s=3,
                    granularities_s=(0.1,)) as run:
        run.wait()
    res = run.result            # paper units
    res.throughput_bps, res.flows, res.series(0.1)

Inputs are in *paper units* (schedule times, window, granularities, duration); the
agents get emulation units (times x D) and write raw records in emulation units; the
result converts back (see :mod:`testbed.traffic.records`). Each agent is started with
``Host.popen`` (so it is in the run's ledger and `testbed clean` stops it), readiness
is awaited with a timeout, and on exit the agents are stopped with SIGTERM (they then
record open flows as incomplete and write their series), also on exceptions.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.dilation import TimeDilation
from testbed.errors import DefinitionError, TestbedError
from testbed.results import write_csv
from testbed.traffic.records import FlowRecord, load_flows, merge_bins, read_jsonl, series_from_bins
from testbed.traffic.schedule import Schedule

DEFAULT_PORT = 5300


class TrafficError(TestbedError):
    """A traffic agent failed to start, died, or did not finish in time."""


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

    def cpu_s(self) -> dict[str, float]:
        """CPU seconds (user + system) each agent used."""
        return {h: s["cpu_user_s"] + s["cpu_sys_s"] for h, s in self.stats.items()}

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
    """Context manager running ``schedule`` with one agent per host; see module doc.

    emu: the ``Emulation`` (its ledger records the agents; None for
    :class:`~testbed.traffic.local.LoopbackHost` hosts). hosts: the ``Host`` objects
    taking part (every schedule host must be among them; hosts without flows still run
    a sink). cca_of_host: kernel congestion-control name for all hosts, or per host name.
    duration_s: the agents stop by themselves this long after t0 (paper s; None: run
    until every flow ended, see :meth:`wait`). window / granularities_s: measurement
    window and series granularities (paper s). rcvbuf_of_host: ``SO_RCVBUF`` of a
    host's listener (bytes). start_delay_s: wall time between the start signal and t0.
    """

    def __init__(self, emu: Any, hosts: Sequence[Any], schedule: Schedule, cca_of_host: str | Mapping[str, str],
                 out_dir: Path, tdf: TimeDilation = TimeDilation(1.0), *, window: Window | None = None,
                 granularities_s: Sequence[float] = (), duration_s: float | None = None,
                 rcvbuf_of_host: Mapping[str, int] | None = None, port: int = DEFAULT_PORT,
                 ready_timeout_s: float = 60.0, start_delay_s: float = 0.2,
                 python: str = sys.executable) -> None:
        self.emu, self.schedule, self.tdf = emu, schedule, tdf
        self.hosts = {h.name: h for h in hosts}
        self.out_dir = Path(out_dir)
        self.window, self.granularities_s = window, [float(g) for g in granularities_s]
        self.duration_s, self.port = duration_s, port
        self.ready_timeout_s, self.start_delay_s, self.python = ready_timeout_s, start_delay_s, python
        self.rcvbuf_of_host = dict(rcvbuf_of_host or {})
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
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Any] = {}
        self.t0: float | None = None
        self.result: TrafficResult | None = None

    # -- configuration -----------------------------------------------------------------
    def agent_config(self, name: str) -> dict[str, Any]:
        """The agent's configuration for host ``name``, in emulation units."""
        D = self.tdf
        flows = [{"id": f.id, "dst": f.dst, "dst_ip": self.hosts[f.dst].ip, "dst_port": self.port,
                  "size": f.size_bytes or 0, "start": D.time_to_emulation(f.start_s),
                  "duration": D.time_to_emulation(f.duration_s) if f.duration_s else None,
                  "sndbuf": f.sndbuf_bytes, "window_clamp": f.window_clamp_bytes, "trace": f.trace, "tag": f.tag}
                 for f in self.schedule.flows if f.src == name]
        w = self.window
        return {"host": name, "listen_ip": self.hosts[name].ip, "listen_port": self.port, "cca": self.cca[name],
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
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Write configs, start the agents, wait until all listen, then set t0."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if (self.out_dir / "start.json").exists():
            raise TrafficError(f"{self.out_dir} already holds a traffic run (start.json); use a fresh folder")
        (self.out_dir / "schedule.json").write_text(self.schedule.to_json())
        (self.out_dir / "meta.json").write_text(json.dumps({
            "tdf": self.tdf.factor, "window": vars(self.window) if self.window else None,
            "granularities_s": self.granularities_s, "duration_s": self.duration_s, "cca": self.cca,
            "port": self.port, "schedule_meta": self.schedule.meta, "units": "raw files: emulation seconds "
            "since t0; flows.csv/series: paper units (t / D, rate x D)"}, indent=1))
        for name, host in self.hosts.items():
            cfg_path = self.out_dir / f"agent-{name}.json"
            cfg_path.write_text(json.dumps(self.agent_config(name)))
            log = open(self.out_dir / f"agent-{name}.log", "wb")
            self.logs[name] = log
            self.procs[name] = host.popen([self.python, "-m", "testbed.traffic.agent", str(cfg_path.resolve())],
                                          stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.ready_timeout_s
        waiting = set(self.hosts)
        while waiting:
            for name in list(waiting):
                if (self.out_dir / f"ready-{name}.json").exists():
                    waiting.discard(name)
                elif self.procs[name].poll() is not None:
                    raise TrafficError(f"traffic agent on {name} exited {self.procs[name].returncode} before "
                                       f"listening: {self.log_tail(name)}")
            if waiting and time.monotonic() > deadline:
                raise TrafficError(f"traffic agents on {sorted(waiting)} not ready within {self.ready_timeout_s:g} s")
            time.sleep(0.02)
        self.t0 = time.monotonic() + self.start_delay_s
        tmp = self.out_dir / "start.json.tmp"
        tmp.write_text(json.dumps({"t0": self.t0}))
        tmp.replace(self.out_dir / "start.json")

    def log_tail(self, name: str, n: int = 600) -> str:
        try:
            return (self.out_dir / f"agent-{name}.log").read_text(errors="replace")[-n:].strip()
        except OSError:
            return "(no log)"

    def done(self) -> bool:
        """True when every agent's own flows have ended."""
        return all((self.out_dir / f"done-{n}").exists() for n in self.hosts)

    def wait(self, timeout_s: float | None = None) -> None:
        """Wait until every flow ended or (with ``duration_s``) the agents stopped.

        ``timeout_s`` bounds the wait in wall seconds (default: the dilated duration +
        30 s, or 3600 s without a duration). Raises TrafficError on timeout or when an
        agent died."""
        if self.t0 is None:
            raise TrafficError("wait() before start()")
        stop_emu = self.tdf.time_to_emulation(self.duration_s) if self.duration_s else None
        if timeout_s is None:
            timeout_s = stop_emu + 30.0 if stop_emu is not None else 3600.0
        deadline = time.monotonic() + timeout_s
        while True:
            exited = {n: p.poll() for n, p in self.procs.items()}
            bad = {n: rc for n, rc in exited.items() if rc not in (None, 0)}
            if bad:
                n = next(iter(bad))
                raise TrafficError(f"traffic agent on {n} died (exit {bad[n]}): {self.log_tail(n)}")
            if stop_emu is not None and all(rc == 0 for rc in exited.values()):
                return
            if stop_emu is None and self.done():
                return
            if time.monotonic() > deadline:
                raise TrafficError(f"traffic did not finish within {timeout_s:g} s (flows still running; "
                                   f"see {self.out_dir})")
            time.sleep(0.05)

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM every agent, wait, SIGKILL after ``grace_s``; then read the results.

        ``stop.json`` is written first: agents then count a connection reset by a peer
        that is shutting down as an incomplete flow, not a failed one."""
        if self.procs and self.out_dir.is_dir():
            (self.out_dir / "stop.json").write_text(json.dumps({"at": time.monotonic()}))
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for name, p in self.procs.items():
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
            seq = getattr(p, "ledger_seq", None)
            ledger = getattr(self.emu, "ledger", None) or getattr(self.hosts[name], "ledger", None)
            if seq is not None and ledger is not None and not ledger.entries[seq].gone:
                ledger.mark_gone(seq)
        for log in self.logs.values():
            log.close()
        if self.procs and self.t0 is not None:
            self.result = TrafficResult(self.out_dir, list(self.hosts), self.tdf, self.window,
                                        self.granularities_s)
        self.procs = {}
