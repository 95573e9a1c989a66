"""The traffic agent: ``python -m testbed.traffic.agent``, controlled over stdin/stdout.

**One process for every host** of an emulation, single-threaded, one ``epoll`` loop
with non-blocking sockets (no thread or process per flow or per host). For each host
it is both

- a **sink**: a listener that accepts any number of concurrent connections, counts
  the payload bytes of each and, per interval of each configured granularity, the
  bytes received by the host (and by traced flows alone); and
- a **source**: it starts the host's flows of the schedule at their start times.

A host's sockets are created inside the host's network namespace: the thread enters
it with setns(2) (:mod:`testbed.setns`), creates the listener or the outgoing socket
and goes back to the namespace it started in (it keeps an fd of it). A socket stays
in the namespace it was created in, so the one loop serves all hosts. A host without
a namespace (``LoopbackHost``: its own address on ``lo``) needs no switch.

**Long-lived**: the agent is started once per emulation
(``testbed.net.Emulation.traffic_agent``) and runs one *point* (one ``TrafficRun``)
after the other. Listeners are kept from one point to the next for the same host,
address, port and ``SO_RCVBUF`` (between points they are set to ``reno``, which is
built in, so that they hold no reference to a congestion-control module that a
profile may want to unload; each point sets its own algorithm again); everything
else of a point (its flow sockets, records and counters) goes when the point ends.

Control protocol: newline-delimited JSON objects, controller -> agent on stdin,
agent -> controller on stdout; every message carries the point's ``seq``:

- ``{"op": "point", "seq", "out_dir", "hosts": [host config, ...]}``: one config per
  host (``TrafficRun.agent_config``: host, netns, listen_ip, listen_port, cca, rcvbuf,
  granularities, window, stop_after, start_timeout, flows; emulation units). The
  agent opens (or reuses) each host's listener in its namespace, sets the host's
  congestion control on it, and answers ``{"ev": "ready", "seq", "pid"}``, or
  ``{"ev": "error", "seq", "host", "reason"}`` (cannot set the congestion control,
  cannot bind, bad config; the point is then dropped and the agent waits for the
  next one).
- ``{"op": "start", "seq", "t0"}``: the schedule runs from ``t0`` (CLOCK_MONOTONIC).
  Without a start within the hosts' ``start_timeout`` seconds the point is dropped
  (an ``error`` message says so).
- While it runs: ``{"ev": "ended", "seq", "id", "status"}`` for every flow whose
  spec has ``"notify": true``, as it ends; ``{"ev": "all-ended", "seq"}`` once every
  flow ended when the point has a ``stop_after`` (it then runs on until that time).
- The point **ends** when every flow ended (no ``stop_after``), at ``stop_after``, on
  ``{"op": "stop", "seq"}``, on SIGTERM/SIGINT or when stdin closes (the controller is
  gone; the agent then exits). Flows still open are recorded as incomplete, the
  records are written (below) and the agent answers ``{"ev": "done", "seq", "reason",
  "written", "flows", "flows_ended"}`` (reason: done | stop_after | stopped | signal |
  eof | agent-error; written: false for a point stopped before its start, which writes
  nothing, and when writing failed). ``error`` is there when the point cannot be
  trusted: the agent ran out of a resource it needs to offer the schedule (descriptors
  or memory at ``socket()`` / ``accept()``: reason ``agent-error``; the point ends at
  once, its files are still written for the diagnosis) or writing failed. The
  controller then fails the point (``TrafficRun`` raises). A ``stop`` for a point that
  has already ended is ignored.
- An ``error`` message always means that the agent holds no point of that ``seq``
  (any more).

Closing stdin ends the agent (after ending a running point); so does SIGTERM.

**Descriptors.** The agent holds both ends of every open transfer (two descriptors
each, plus a listener per host): loaded E1 points held up to 1 244 transfer sockets at
once (measured), past the usual soft limit of 1 024. At start it raises ``RLIMIT_NOFILE`` to
:data:`WANT_NOFILE` (the hard limit too where it may; environment variable
``TESTBED_AGENT_NOFILE`` overrides the number, for tests) and records the limit in force
and the peak of open transfer sockets (``fd_limit``, ``max_open_connections`` in the
stats). Running out anyway is the point's error, never a "failed" transfer: a transfer
the agent could not offer to the network says nothing about the network.

**Open connections at the end of a point are aborted** (``SO_LINGER`` 0: the kernel
sends a RST and frees the socket): a graceful close would leave an orphan sending its
unsent data and FIN, with backoff where switches drop, into the next point on the same
network, holding its congestion-control module.

Wire protocol of one transfer (one TCP connection; handshake and teardown included):

1. the sender connects (``TCP_CONGESTION`` and optional ``SO_SNDBUF`` set before
   ``connect``), then sends a 28-byte header ``!4sBBHQQI`` = magic ``OTTF``, version 1,
   flags (bit 0: trace), 0, flow id, size (0 = until EOF), receive window clamp (0 =
   none), followed by ``size`` payload bytes (from one preallocated buffer);
2. the sink counts payload bytes (the header is not payload). When it has ``size``
   bytes (or, for size 0, at EOF after the sender's ``shutdown(SHUT_WR)``) it replies
   with its count as 8 bytes ``!Q`` and closes (its FIN follows the count);
3. the sender reads the count; the flow **ends** at that moment (``end``): the
   receiver has confirmed every byte. It then reads the FIN and closes. The flow is
   ``complete`` when the confirmed count equals the bytes sent.

So the completion time ``end - start`` spans the handshake (``start`` is taken just
before ``connect``), the data, and the receiver's confirmation, which arrives half an
RTT after the receiver got the last byte. The sink closes first, so TIME_WAIT sockets
sit at the listener's side and senders never run out of ephemeral ports.

Times are ``CLOCK_MONOTONIC`` seconds relative to ``t0`` (one clock for all network
namespaces of a kernel) in *emulation* units.

**Results are written once, when the point has ended**: the records are kept in
memory during the measurement (a write to the guest's 9p-shared results folder
blocks the agent on the host while the emulated network runs on, so flows would
start late) and then written into the point's ``out_dir`` (``<host>`` = host name):
``flows-<host>.jsonl`` (one record per own flow, in the order they ended),
``sink-<host>.jsonl`` (one record per accepted connection) and ``stats-<host>.json``
(series and counters; the CPU figures are the whole agent's for the point, all hosts
together). A point whose agent dies or is killed leaves no records: it fails, and a
resumed run runs it again.

This module imports only the standard library (it starts fast in a slow guest).
"""

from __future__ import annotations

import errno
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import time
import traceback
from pathlib import Path
from typing import Any, BinaryIO

from testbed import setns
from testbed.traffic import tcpinfo

HEADER = struct.Struct("!4sBBHQQI")
MAGIC = b"OTTF"
VERSION = 1
FLAG_TRACE = 1
CONFIRM = struct.Struct("!Q")

#: bytes per send()/recv_into() call
CHUNK = 256 * 1024
#: at most this many send()/recv() calls for one socket per wake-up (fairness)
MAX_CALLS_PER_EVENT = 8
#: congestion control of a kept listener between points (built into every kernel)
PARKED_CCA = b"reno"
#: longest epoll wait while a point runs (s)
MAX_WAIT_S = 0.25
#: descriptors the agent asks for (RLIMIT_NOFILE); ``TESTBED_AGENT_NOFILE`` overrides
WANT_NOFILE = 1 << 20
NOFILE_ENV = "TESTBED_AGENT_NOFILE"
#: errors of socket()/accept() that mean the agent, not the network, ran short
RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
#: SO_LINGER on, 0 s: close() aborts the connection (RST) and frees the socket
ABORT_LINGER = struct.pack("ii", 1, 0)

CONNECTING, SENDING, CONFIRMING = 0, 1, 2

EPOLLIN, EPOLLOUT = select.EPOLLIN, select.EPOLLOUT


class AgentError(Exception):
    """A point cannot run as configured; ``host`` names the host (None: the point)."""

    def __init__(self, host: str | None, reason: str) -> None:
        super().__init__(f"{host}: {reason}" if host else reason)
        self.host, self.reason = host, reason


class HostPoint:
    """One host's part of the running point: configuration, counters and records."""

    __slots__ = ("name", "cfg", "cca", "ns_fd", "grans", "bins", "w0", "w1", "window_bytes", "rx_bytes",
                 "accepted", "flows", "ended", "max_lag", "flow_recs", "sink_recs")

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.name: str = str(cfg["host"])
        self.cfg = cfg
        self.cca: bytes = str(cfg["cca"]).encode()
        self.ns_fd: int | None = None
        self.grans: list[float] = [float(g) for g in cfg.get("granularities") or []]
        if any(not g > 0 for g in self.grans):
            raise ValueError(f"granularities must be > 0 s: {self.grans}")
        self.bins: list[dict[int, int]] = [{} for _ in self.grans]
        w = cfg.get("window")
        self.w0, self.w1 = (float(w[0]), float(w[1])) if w else (0.0, -1.0)
        self.window_bytes = 0
        self.rx_bytes = 0
        self.accepted = 0
        self.flows = 0
        self.ended = 0
        self.max_lag = 0.0
        self.flow_recs: list[dict[str, Any]] = []
        self.sink_recs: list[dict[str, Any]] = []


class Listener:
    """A host's listening socket, kept across points."""

    __slots__ = ("host", "key", "sock")

    def __init__(self, host: str, key: tuple, sock: socket.socket) -> None:
        self.host, self.key, self.sock = host, key, sock


class Point:
    """One ``TrafficRun``: its hosts, schedule and state."""

    def __init__(self, seq: int, out: Path, hosts: dict[str, HostPoint],
                 flows: list[tuple[dict[str, Any], HostPoint]], stop_after: float | None,
                 start_timeout: float) -> None:
        self.seq, self.out, self.hosts, self.flows = seq, out, hosts, flows
        self.stop_after, self.start_timeout = stop_after, start_timeout
        self.next_flow = 0
        self.t0 = 0.0
        self.started = False
        self.stopping = False
        self.all_ended_sent = False
        self.ready_at = time.monotonic()
        self.ru0 = resource.getrusage(resource.RUSAGE_SELF)
        #: why the point cannot be trusted (the agent ran short of a resource); None: fine
        self.error: str | None = None
        #: most transfer sockets (both ends) open at once
        self.max_open = 0

    def now(self) -> float:
        return time.monotonic() - self.t0

    def close_fds(self) -> None:
        for h in self.hosts.values():
            if h.ns_fd is not None:
                os.close(h.ns_fd)
                h.ns_fd = None


class Sender:
    """One outgoing flow's state."""

    __slots__ = ("spec", "host", "sock", "state", "sched", "start", "connected", "end", "size", "sent", "hdr",
                 "hdr_off", "confirm", "deadline", "info")

    def __init__(self, spec: dict[str, Any], host: HostPoint) -> None:
        self.spec = spec
        self.host = host
        self.sock: socket.socket | None = None
        self.state = CONNECTING
        self.sched = spec["start"]
        self.start = self.connected = self.end = None
        self.size = int(spec["size"] or 0)  # 0 = long-lived
        self.sent = 0
        flags = FLAG_TRACE if spec.get("trace") else 0
        self.hdr = HEADER.pack(MAGIC, VERSION, flags, 0, spec["id"], self.size, spec.get("window_clamp") or 0)
        self.hdr_off = 0
        self.confirm = b""
        self.deadline: float | None = None
        self.info: dict[str, int] = {}


class SinkConn:
    """One accepted connection's state."""

    __slots__ = ("sock", "host", "peer", "accepted", "first", "last", "hdr", "flow_id", "size", "got", "trace",
                 "bins")

    def __init__(self, sock: socket.socket, host: HostPoint, peer: str, now: float) -> None:
        self.sock = sock
        self.host = host
        self.peer = peer
        self.accepted = now
        self.first: float | None = None
        self.last: float | None = None
        self.hdr = b""
        self.flow_id: int | None = None
        self.size = 0
        self.got = 0
        self.trace = False
        self.bins: list[dict[int, int]] | None = None


class Agent:
    """The event loop; see the module docstring. ``ctl_in``: fd of control messages;
    ``ctl_out``: where answers go (unbuffered binary)."""

    def __init__(self, ctl_in: int, ctl_out: BinaryIO) -> None:
        self.ctl_in, self.ctl_out = ctl_in, ctl_out
        self.inbuf = b""
        self.eof = False
        self.signalled = False
        self.home = setns.open_own()
        self.ep = select.epoll()
        self.listeners: dict[str, Listener] = {}
        self.by_lfd: dict[int, Listener] = {}
        self.point: Point | None = None
        self.senders: dict[int, Sender] = {}
        self.conns: dict[int, SinkConn] = {}
        self.long: list[Sender] = []
        self.buf = bytearray(CHUNK)
        self.mv = memoryview(self.buf)
        self.fd_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        os.set_blocking(ctl_in, False)
        self.ep.register(ctl_in, EPOLLIN)
        r, w = socket.socketpair()
        r.setblocking(False)
        w.setblocking(False)
        self.wake_r, self.wake_w = r, w
        signal.set_wakeup_fd(w.fileno())
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        self.ep.register(r.fileno(), EPOLLIN)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.signalled = True

    # -- control channel ----------------------------------------------------------------
    def send(self, msg: dict[str, Any]) -> None:
        """One answer line to the controller; a controller that is gone ends the agent."""
        view = memoryview(json.dumps(msg, separators=(",", ":")).encode() + b"\n")
        try:
            while view:  # a signal may cut a pipe write short
                view = view[self.ctl_out.write(view) or 0:]
        except (BrokenPipeError, ValueError):
            self.eof = True

    def on_control(self) -> None:
        while True:
            try:
                data = os.read(self.ctl_in, 1 << 20)
            except BlockingIOError:
                break
            if not data:
                self.eof = True
                self.ep.unregister(self.ctl_in)
                break
            self.inbuf += data
        *lines, self.inbuf = self.inbuf.split(b"\n")
        for line in lines:
            if line.strip():
                self.on_message(line)

    def on_message(self, line: bytes) -> None:
        try:
            msg = json.loads(line)
            op, seq = msg["op"], int(msg["seq"])
        except (ValueError, KeyError, TypeError) as exc:
            self.send({"ev": "error", "seq": None, "host": None, "reason": f"bad control message ({exc}): "
                       f"{line[:200]!r}"})
            return
        p = self.point
        if op == "point":
            self.setup(msg, seq)
        elif op == "start":
            if p is None or p.seq != seq:
                self.send({"ev": "error", "seq": seq, "host": None, "reason": "start for no point awaiting it"})
            elif not p.started:  # (a second start of a running point changes nothing)
                try:
                    p.t0 = float(msg["t0"])
                except (KeyError, TypeError, ValueError) as exc:
                    self.drop_point(f"bad start message ({exc!r})")
                    return
                p.started = True
        elif op == "stop":
            if p is not None and p.seq == seq:
                self.end_point("stopped")
        else:
            self.send({"ev": "error", "seq": seq, "host": None, "reason": f"unknown op {op!r}"})

    # -- set-up -------------------------------------------------------------------------
    def setup(self, msg: dict[str, Any], seq: int) -> None:
        """Open or reuse every host's listener for point ``seq``; answer ready or error."""
        if self.point is not None:
            self.send({"ev": "error", "seq": seq, "host": None,
                       "reason": f"busy with point {self.point.seq} (one point at a time)"})
            return
        try:
            p = self.make_point(msg, seq)
        except AgentError as exc:
            self.send({"ev": "error", "seq": seq, "host": exc.host, "reason": exc.reason})
            return
        try:
            for h in p.hosts.values():
                self.listen(h)
        except AgentError as exc:
            p.close_fds()
            self.send({"ev": "error", "seq": seq, "host": exc.host, "reason": exc.reason})
            return
        for name in [n for n in self.listeners if n not in p.hosts]:
            self.close_listener(name)
        self.drain_backlogs()
        self.point = p
        self.send({"ev": "ready", "seq": seq, "pid": os.getpid()})

    def make_point(self, msg: dict[str, Any], seq: int) -> Point:
        """The point of a ``point`` message; raises AgentError on a bad config or a
        namespace that cannot be opened (naming the host where there is one)."""
        try:
            out = Path(msg["out_dir"])
            cfgs = list(msg["hosts"])
        except (KeyError, TypeError) as exc:
            raise AgentError(None, f"bad point config: {exc!r}") from None
        if not out.is_dir():
            raise AgentError(None, f"out_dir {out} is not a folder")
        hosts: dict[str, HostPoint] = {}
        flows: list[tuple[dict[str, Any], HostPoint]] = []
        stops: set[float | None] = set()
        start_timeout = 0.0
        try:
            for cfg in cfgs:
                h = self.host_point(cfg, hosts)
                flows.extend((f, h) for f in cfg.get("flows", []))
                stop = cfg.get("stop_after")
                stops.add(None if stop is None else float(stop))
                start_timeout = max(start_timeout, float(cfg.get("start_timeout", 120.0)))
            if len(stops) > 1:
                raise AgentError(None, f"bad point config: the hosts' stop_after differ: {sorted(map(str, stops))}")
        except AgentError:
            Point(seq, out, hosts, [], None, 0.0).close_fds()
            raise
        except (TypeError, ValueError) as exc:
            Point(seq, out, hosts, [], None, 0.0).close_fds()
            raise AgentError(None, f"bad point config: {exc!r}") from None
        flows.sort(key=lambda fh: (fh[0]["start"], fh[0]["id"]))
        return Point(seq, out, hosts, flows, stops.pop() if stops else None, start_timeout)

    def host_point(self, cfg: dict[str, Any], hosts: dict[str, HostPoint]) -> HostPoint:
        """Check one host's config, open its namespace and add it to ``hosts``; raises
        AgentError naming the host."""
        name = cfg.get("host") if isinstance(cfg, dict) else None
        try:
            h = HostPoint(cfg)
            for f in cfg.get("flows", []):
                Sender(f, h)  # packs the header: id, size and window clamp in range
                socket.inet_aton(f["dst_ip"])
                if not isinstance(f["dst"], str) or not 0 < int(f["dst_port"]) < 65536 or not float(f["start"]) >= 0:
                    raise ValueError(f"flow {f['id']}: dst, dst_port or start out of range")
                h.flows += 1
        except (KeyError, TypeError, ValueError, OSError, struct.error) as exc:
            raise AgentError(name, f"bad config: {exc!r}") from None
        if h.name in hosts:
            raise AgentError(h.name, "bad config: host listed twice")
        hosts[h.name] = h
        if cfg.get("netns"):
            try:
                h.ns_fd = setns.open_named(str(cfg["netns"]))
            except OSError as exc:
                raise AgentError(h.name, f"network namespace {cfg['netns']}: {exc.strerror}") from None
        return h

    def new_socket(self, h: HostPoint) -> socket.socket:
        """A non-blocking TCP socket in host ``h``'s namespace. Raises OSError (cannot
        enter the namespace or create the socket; the thread is then still at home) and
        setns.ReturnFailed (it cannot go back: fatal)."""
        if h.ns_fd is None:
            return socket.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
        with setns.switched(h.ns_fd, self.home):
            return socket.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)

    def set_cca(self, h: HostPoint, sock: socket.socket) -> None:
        """The host's congestion control on ``sock``; raises AgentError naming it."""
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, h.cca)
        except OSError as exc:
            avail = _read("/proc/sys/net/ipv4/tcp_available_congestion_control")
            raise AgentError(h.name, f"congestion control {h.cca.decode()!r} cannot be set ({exc.strerror}); "
                             f"this kernel has: {avail or '?'} (load the module of the host's profile)") from None

    def listen(self, h: HostPoint) -> None:
        """Host ``h``'s listener: the kept one if address, port, rcvbuf and namespace
        match, else a new one; then the host's congestion control is set on it (the
        check that it can be set). Raises AgentError."""
        cfg = h.cfg
        try:
            key = (cfg.get("netns"), str(cfg.get("listen_ip", "0.0.0.0")), int(cfg["listen_port"]),
                   int(cfg["rcvbuf"]) if cfg.get("rcvbuf") else None)
        except (KeyError, TypeError, ValueError) as exc:
            raise AgentError(h.name, f"bad config: {exc!r}") from None
        kept = self.listeners.get(h.name)
        if kept is not None and kept.key == key:
            self.set_cca(h, kept.sock)
            return
        if kept is not None:
            self.close_listener(h.name)
        try:
            ls = self.new_socket(h)
        except OSError as exc:
            raise AgentError(h.name, f"listener socket: {exc.strerror}") from None
        try:
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.set_cca(h, ls)
            if key[3]:
                ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, key[3])
            try:
                ls.bind((key[1], key[2]))
            except OSError as exc:
                raise AgentError(h.name, f"cannot listen on {key[1]} port {key[2]}: {exc.strerror}") from None
            ls.listen(int(cfg.get("backlog", 4096)))
        except BaseException:
            ls.close()
            raise
        lst = Listener(h.name, key, ls)
        self.listeners[h.name] = lst
        self.by_lfd[ls.fileno()] = lst
        self.ep.register(ls.fileno(), EPOLLIN)

    def close_listener(self, name: str) -> None:
        lst = self.listeners.pop(name)
        self.by_lfd.pop(lst.sock.fileno(), None)
        lst.sock.close()

    def drain_backlogs(self) -> None:
        """Accept and close connections waiting on any listener (leftovers of an ended
        point, whose senders are closed)."""
        for lst in self.listeners.values():
            for _ in range(10000):
                try:
                    sock, _ = lst.sock.accept()
                except OSError:
                    break
                _abort(sock)

    # -- records ------------------------------------------------------------------------
    def write_flow(self, s: Sender, status: str, reason: str = "", confirmed: int | None = None) -> None:
        sp, h = s.spec, s.host
        rec = {"id": sp["id"], "src": h.name, "dst": sp["dst"], "size": s.size or None, "sent": s.sent,
               "confirmed": confirmed, "cca": h.cca.decode(), "tag": sp.get("tag", ""), "sched_start": s.sched,
               "start": s.start, "connected": s.connected, "end": s.end, "status": status, "reason": reason,
               "tcp_info": s.info}
        h.flow_recs.append(rec)
        h.ended += 1
        if sp.get("notify") and self.point is not None:
            self.send({"ev": "ended", "seq": self.point.seq, "id": sp["id"], "status": status})

    def write_sink(self, c: SinkConn, status: str, reason: str = "", info: dict[str, int] | None = None) -> None:
        h = c.host
        rec = {"id": c.flow_id, "peer": c.peer, "dst": h.name, "size": c.size or None, "got": c.got,
               "accepted": c.accepted, "first": c.first, "last": c.last, "status": status, "reason": reason,
               "tcp_info": info or {}}
        if c.bins is not None:
            rec["bins"] = {str(g): c.bins[i] for i, g in enumerate(h.grans)}
        h.sink_recs.append(rec)

    # -- source side --------------------------------------------------------------------
    def start_flow(self, spec: dict[str, Any], h: HostPoint, now: float) -> None:
        s = Sender(spec, h)
        h.max_lag = max(h.max_lag, now - s.sched)
        try:
            sock = self.new_socket(h)
        except OSError as exc:
            if exc.errno in RESOURCE_ERRNOS:
                s.start = now
                self.write_flow(s, "incomplete", f"not offered: the agent ran short ({exc.strerror})")
                self.resource_error(f"socket() for flow {spec['id']} of {h.name}: {exc.strerror}")
                return
            s.start = now
            self.write_flow(s, "failed", f"socket: {exc.strerror}")
            return
        s.sock = sock
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, h.cca)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if spec.get("sndbuf"):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, int(spec["sndbuf"]))
            s.start = self.point.now()
            err = sock.connect_ex((spec["dst_ip"], int(spec["dst_port"])))
        except OSError as exc:
            s.start = s.start if s.start is not None else now
            self.fail(s, f"set-up: {exc.strerror}")
            return
        if err not in (0, errno.EINPROGRESS):
            self.fail(s, f"connect: {os.strerror(err)}")
            return
        if spec.get("duration"):
            s.deadline = s.start + float(spec["duration"])
        if not s.size:
            self.long.append(s)
        self.senders[sock.fileno()] = s
        self.ep.register(sock.fileno(), EPOLLOUT)
        self.count_open(self.point)

    def count_open(self, p: Point | None) -> None:
        """Keep the point's peak of open transfer sockets."""
        if p is not None:
            n = len(self.senders) + len(self.conns)
            if n > p.max_open:
                p.max_open = n

    def resource_error(self, what: str) -> None:
        """The agent ran short of descriptors or memory: the schedule can no longer be
        offered as specified, so the point ends now with an error (files written)."""
        p = self.point
        if p is None or p.error is not None:
            return
        p.error = (f"the traffic agent ran short at {p.now():.6g} s (emulation): {what}; descriptor limit "
                   f"{self.fd_limit}, {len(self.senders) + len(self.conns)} transfer sockets open "
                   f"(raise it: {NOFILE_ENV})")
        self.end_point("agent-error")

    def close_sender(self, s: Sender, *, abort: bool = False) -> None:
        if s.sock is not None:
            self.senders.pop(s.sock.fileno(), None)
            if abort:
                _abort(s.sock)
            else:
                s.sock.close()
            s.sock = None
        if not s.size and s in self.long:
            self.long.remove(s)

    def run_stopping(self) -> bool:
        """True once the point is being stopped (stop time reached, or stop asked). A
        connection error from then on is the stop's doing, so the flow is incomplete,
        not failed."""
        p = self.point
        return p is None or p.stopping or (p.stop_after is not None and p.now() >= p.stop_after)

    def fail(self, s: Sender, reason: str) -> None:
        if s.sock is not None and not s.info:
            s.info = tcpinfo.read(s.sock)
        self.close_sender(s)
        if self.run_stopping():
            self.write_flow(s, "incomplete", f"run stopped ({reason})")
        else:
            self.write_flow(s, "failed", reason)

    def on_sender(self, s: Sender, ev: int) -> None:
        if s.state == CONNECTING:
            err = s.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                self.fail(s, f"connect: {os.strerror(err)}")
                return
            s.connected = self.point.now()
            s.state = SENDING
        if s.state == SENDING:
            self.pump(s)
        elif s.state == CONFIRMING:
            self.read_confirm(s)

    def pump(self, s: Sender) -> None:
        sock = s.sock
        for _ in range(MAX_CALLS_PER_EVENT):
            left = s.size - s.sent if s.size else CHUNK
            if left <= 0:
                self.to_confirming(s, shutdown=False)
                return
            k = left if left < CHUNK else CHUNK
            try:
                if s.hdr_off < HEADER.size:
                    h = HEADER.size - s.hdr_off
                    n = sock.sendmsg([s.hdr[s.hdr_off:], self.mv[:k]])
                    s.hdr_off += min(n, h)
                    s.sent += max(0, n - h)
                    want = k + h
                else:
                    n = sock.send(self.mv[:k])
                    s.sent += n
                    want = k
            except BlockingIOError:
                return
            except OSError as exc:
                self.fail(s, f"send: {exc.strerror}")
                return
            if n < want:
                break
        if s.size and s.sent >= s.size:
            self.to_confirming(s, shutdown=False)

    def to_confirming(self, s: Sender, *, shutdown: bool) -> None:
        """All payload handed to the kernel; wait for the receiver's count."""
        if shutdown:
            try:
                s.sock.shutdown(socket.SHUT_WR)
            except OSError as exc:
                self.fail(s, f"shutdown: {exc.strerror}")
                return
        s.state = CONFIRMING
        self.ep.modify(s.sock.fileno(), EPOLLIN)
        self.read_confirm(s)

    def read_confirm(self, s: Sender) -> None:
        for _ in range(3):
            try:
                data = s.sock.recv(64)
            except BlockingIOError:
                return
            except OSError as exc:
                self.fail(s, f"awaiting confirmation: {exc.strerror}")
                return
            if data:
                s.confirm += data
                if len(s.confirm) >= CONFIRM.size and s.end is None:
                    s.end = self.point.now()
                    s.info = tcpinfo.read(s.sock)
                continue
            # EOF from the receiver
            if s.end is None:
                self.fail(s, f"receiver closed before confirming ({len(s.confirm)} of 8 bytes)")
                return
            count = CONFIRM.unpack_from(s.confirm)[0]
            self.close_sender(s)
            if count == s.sent and len(s.confirm) == CONFIRM.size:
                self.write_flow(s, "complete", confirmed=count)
            else:
                self.write_flow(s, "failed", f"receiver confirmed {count} of {s.sent} bytes", confirmed=count)
            return

    def end_long_flows(self, now: float) -> float | None:
        """Shut down long-lived flows whose duration has passed; the next deadline."""
        nxt = None
        for s in list(self.long):
            if s.deadline is None or s.state == CONFIRMING:
                continue
            if now >= s.deadline and s.state == SENDING and s.hdr_off == HEADER.size:
                self.long.remove(s)
                self.to_confirming(s, shutdown=True)
            elif nxt is None or s.deadline < nxt:
                nxt = max(s.deadline, now + 0.001)
        return nxt

    # -- sink side ----------------------------------------------------------------------
    def on_listener(self, lst: Listener) -> None:
        p = self.point
        h = p.hosts.get(lst.host) if p is not None and p.started else None
        now = p.now() if h is not None else 0.0
        for _ in range(64):
            try:
                sock, addr = lst.sock.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if h is not None and exc.errno in RESOURCE_ERRNOS:
                    self.resource_error(f"accept() on {h.name}'s listener: {exc.strerror}")
                return
            if h is None:  # a leftover of an ended point: its sender is closed
                _abort(sock)
                continue
            sock.setblocking(False)
            h.accepted += 1
            self.conns[sock.fileno()] = SinkConn(sock, h, addr[0], now)
            self.ep.register(sock.fileno(), EPOLLIN)
            self.count_open(p)

    def on_conn(self, c: SinkConn) -> None:
        sock, buf = c.sock, self.buf
        for _ in range(MAX_CALLS_PER_EVENT):
            try:
                n = sock.recv_into(buf)
            except BlockingIOError:
                return
            except OSError as exc:
                self.close_conn(c, "failed", f"recv: {exc.strerror}")
                return
            now = self.point.now()
            if n == 0:
                if c.flow_id is None:
                    self.close_conn(c, "failed", f"sender closed after {len(c.hdr)} header bytes")
                elif c.size == 0:
                    self.confirm(c)
                else:
                    self.close_conn(c, "failed", f"sender closed after {c.got} of {c.size} bytes")
                return
            p = n
            if c.flow_id is None:
                take = min(n, HEADER.size - len(c.hdr))
                c.hdr += bytes(buf[:take])
                p -= take
                if len(c.hdr) == HEADER.size and not self.parse_header(c):
                    return
            if p:
                self.account(c, p, now)
                if c.size and c.got >= c.size:
                    if c.got > c.size:
                        self.close_conn(c, "failed", f"received {c.got} bytes, more than the size {c.size}")
                    else:
                        self.confirm(c)
                    return
            if n < CHUNK:
                return

    def parse_header(self, c: SinkConn) -> bool:
        magic, version, flags, _, flow_id, size, clamp = HEADER.unpack(c.hdr)
        if magic != MAGIC or version != VERSION:
            self.close_conn(c, "failed", f"bad header {c.hdr[:8]!r}")
            return False
        c.flow_id, c.size, c.trace = flow_id, size, bool(flags & FLAG_TRACE)
        if c.trace:
            c.bins = [{} for _ in c.host.grans]
        if clamp:
            try:
                c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP, clamp)
            except OSError as exc:
                self.close_conn(c, "failed", f"TCP_WINDOW_CLAMP {clamp}: {exc.strerror}")
                return False
        return True

    def account(self, c: SinkConn, p: int, now: float) -> None:
        h = c.host
        c.got += p
        if c.first is None:
            c.first = now
        c.last = now
        h.rx_bytes += p
        if h.w0 <= now < h.w1:
            h.window_bytes += p
        for i, g in enumerate(h.grans):
            b = h.bins[i]
            idx = int(now / g) if now >= 0 else -1
            b[idx] = b.get(idx, 0) + p
            if c.bins is not None:
                fb = c.bins[i]
                fb[idx] = fb.get(idx, 0) + p

    def confirm(self, c: SinkConn) -> None:
        try:
            c.sock.send(CONFIRM.pack(c.got))
        except OSError as exc:
            self.close_conn(c, "failed", f"sending confirmation: {exc.strerror}")
            return
        self.close_conn(c, "complete")

    def close_conn(self, c: SinkConn, status: str, reason: str = "", *, abort: bool = False) -> None:
        self.conns.pop(c.sock.fileno(), None)
        info = tcpinfo.read(c.sock)  # the receiver's view (e.g. out-of-order packets) before it closes
        if abort:
            _abort(c.sock)
        else:
            c.sock.close()
        if status == "failed" and self.run_stopping():
            status, reason = "incomplete", f"run stopped ({reason})"
        self.write_sink(c, status, reason, info)

    # -- main loop ----------------------------------------------------------------------
    def step(self) -> float | None:
        """Advance the point: start due flows, end long flows, end the point when it is
        over. Returns how long epoll may wait (s; None: until an event)."""
        p = self.point
        if p is None:
            return None
        if not p.started:
            left = p.start_timeout - (time.monotonic() - p.ready_at)
            if left <= 0:
                self.drop_point(f"no start within {p.start_timeout:g} s of ready")
                return None
            return left
        now = p.now()
        flows = p.flows
        while p.next_flow < len(flows) and flows[p.next_flow][0]["start"] <= now:
            spec, h = flows[p.next_flow]
            p.next_flow += 1
            self.start_flow(spec, h, now)
            if self.point is not p:  # the agent ran short: the point has ended
                return None
        next_long = self.end_long_flows(now) if self.long else None
        if not p.all_ended_sent and p.next_flow >= len(flows) and not self.senders:
            p.all_ended_sent = True
            if p.stop_after is None:
                self.end_point("done")
                return None
            self.send({"ev": "all-ended", "seq": p.seq})
        if p.stop_after is not None and now >= p.stop_after:
            self.end_point("stop_after")
            return None
        timeout = MAX_WAIT_S
        if p.next_flow < len(flows):
            timeout = min(timeout, flows[p.next_flow][0]["start"] - now)
        if next_long is not None:
            timeout = min(timeout, next_long - now)
        if p.stop_after is not None:
            timeout = min(timeout, p.stop_after - now)
        return max(timeout, 0.0)

    def serve(self) -> None:
        """Serve points until stdin closes or a signal arrives."""
        senders, conns, by_lfd = self.senders, self.conns, self.by_lfd
        ctl, wfd = self.ctl_in, self.wake_r.fileno()
        while not (self.eof or self.signalled):
            timeout = self.step()
            for fd, ev in self.ep.poll(-1 if timeout is None else timeout):
                s = senders.get(fd)
                if s is not None:
                    self.on_sender(s, ev)
                    continue
                c = conns.get(fd)
                if c is not None:
                    self.on_conn(c)
                    continue
                lst = by_lfd.get(fd)
                if lst is not None:
                    self.on_listener(lst)
                elif fd == ctl:
                    self.on_control()
                elif fd == wfd:
                    try:
                        self.wake_r.recv(64)
                    except BlockingIOError:
                        pass
        if self.point is not None:
            self.end_point("signal" if self.signalled else "eof")

    def drop_point(self, reason: str) -> None:
        """Forget a point that never started (nothing is written) and say why."""
        p = self.point
        self.point = None
        p.close_fds()
        self.park_listeners()
        self.send({"ev": "error", "seq": p.seq, "host": None, "reason": reason})

    def end_point(self, reason: str) -> None:
        """Record what is still open as incomplete, write the point's files, forget the
        point and answer ``done``."""
        p = self.point
        p.stopping = True
        written = False
        errors = [p.error] if p.error else []
        if p.started:
            for s in list(self.senders.values()):
                s.info = tcpinfo.read(s.sock)
                self.close_sender(s, abort=True)
                self.write_flow(s, "incomplete", "running when the run stopped")
            for spec, h in p.flows[p.next_flow:]:
                self.write_flow(Sender(spec, h), "incomplete", "not started when the run stopped")
            p.next_flow = len(p.flows)
            for c in list(self.conns.values()):
                self.close_conn(c, "incomplete", "open when the run stopped", abort=True)
            try:
                self.write_files(p)
                written = True
            except OSError as exc:
                errors.append(f"writing the results into {p.out}: {exc}")
        error = "; ".join(errors)
        self.long.clear()
        self.drain_backlogs()
        self.park_listeners()
        p.close_fds()
        self.point = None
        msg = {"ev": "done", "seq": p.seq, "reason": reason, "written": written, "flows": len(p.flows),
               "flows_ended": sum(h.ended for h in p.hosts.values())}
        if error:
            msg["error"] = error
        self.send(msg)

    def park_listeners(self) -> None:
        """Kept listeners hold no congestion-control module between points."""
        for lst in self.listeners.values():
            try:
                lst.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, PARKED_CCA)
            except OSError:
                pass

    def write_files(self, p: Point) -> None:
        """flows-, sink- and stats-<host> files of every host; raises OSError."""
        ru = resource.getrusage(resource.RUSAGE_SELF)
        stopped_at = p.now()
        for h in p.hosts.values():
            (p.out / f"flows-{h.name}.jsonl").write_text(_jsonl(h.flow_recs))
            (p.out / f"sink-{h.name}.jsonl").write_text(_jsonl(h.sink_recs))
            _atomic_json(p.out / f"stats-{h.name}.json", {
                "host": h.name, "t0": p.t0, "stopped_at": stopped_at, "granularities": h.grans,
                "bins": {str(g): {str(k): v for k, v in sorted(h.bins[i].items())} for i, g in enumerate(h.grans)},
                "window": [h.w0, h.w1] if h.w1 > h.w0 else None, "window_bytes": h.window_bytes,
                "rx_bytes": h.rx_bytes, "accepted": h.accepted, "flows": h.flows,
                "flows_ended": h.ended, "max_start_lag": h.max_lag,
                "cpu_user_s": ru.ru_utime - p.ru0.ru_utime, "cpu_sys_s": ru.ru_stime - p.ru0.ru_stime,
                "max_rss_kib": ru.ru_maxrss, "fd_limit": self.fd_limit, "max_open_connections": p.max_open,
                "error": p.error,
                "cpu_of": f"the agent process (pid {os.getpid()}) serving all {len(p.hosts)} hosts of the point, "
                          "from its set-up to its end; the same figures in every host's stats"})


def _abort(sock: socket.socket) -> None:
    """Close ``sock`` with a RST: no orphan is left sending into the network."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, ABORT_LINGER)
    except OSError:
        pass
    sock.close()


def raise_fd_limit(want: int) -> int:
    """Set the soft ``RLIMIT_NOFILE`` to ``want`` (raising the hard limit too where the
    process may, e.g. as root up to ``fs.nr_open``; else up to the hard limit). Returns
    the soft limit in force."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    inf = resource.RLIM_INFINITY
    if hard == inf or want <= hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    else:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))
        except (ValueError, OSError):  # unprivileged, or above fs.nr_open
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _jsonl(records: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def _atomic_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    """Serve control messages on stdin (see the module docstring); exit 0 when stdin
    closes or on SIGTERM, 2 on wrong use, 1 on an internal error (traceback on
    stderr)."""
    args = sys.argv[1:] if argv is None else argv
    if args:
        print("usage: python -m testbed.traffic.agent  (control messages on stdin, answers on stdout; "
              "see its module docstring)", file=sys.stderr)
        return 2
    try:
        want = int(os.environ.get(NOFILE_ENV) or WANT_NOFILE)
        if want < 16:
            raise ValueError
    except ValueError:
        print(f"traffic agent: {NOFILE_ENV}={os.environ.get(NOFILE_ENV)!r}: an integer >= 16 expected",
              file=sys.stderr)
        return 2
    raise_fd_limit(want)
    # answers go to a private copy of stdout; anything printed by mistake goes to stderr
    ctl_out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    try:
        agent = Agent(0, ctl_out)
    except PermissionError:  # epoll refuses regular files and /dev/null
        print("traffic agent: stdin must be a pipe or socket (control messages)", file=sys.stderr)
        return 2
    try:
        agent.serve()
    except Exception:  # a bug: say so on stderr (the controller reports its tail)
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
