"""The per-host traffic agent: ``python -m testbed.traffic.agent CONFIG.json``.

One process per host, single-threaded, one ``epoll`` loop with non-blocking sockets
(no thread or process per flow). It is both

- a **sink**: a listener that accepts any number of concurrent connections, counts
  the payload bytes of each and, per interval of each configured granularity, the
  bytes received by the host (and by traced flows alone); and
- a **source**: it starts the host's flows of the schedule at their start times.

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
namespaces of a kernel) in *emulation* units. The controller (``TrafficRun``) writes
``start.json`` holding ``t0`` once every agent reported ready.

Files written in the config's ``out_dir`` (``<host>`` = the host name):
``ready-<host>.json`` (listening), ``flows-<host>.jsonl`` (one record per own flow,
appended and flushed as each flow ends, so a killed run keeps the finished ones),
``sink-<host>.jsonl`` (one record per accepted connection), ``done-<host>`` (all own
flows ended), ``stats-<host>.json`` (series and counters, at a clean stop).

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
from pathlib import Path
from typing import Any

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

CONNECTING, SENDING, CONFIRMING = 0, 1, 2

EPOLLIN, EPOLLOUT = select.EPOLLIN, select.EPOLLOUT


class AgentError(Exception):
    """The agent cannot run as configured (exit 2 with the message on stderr)."""


class Sender:
    """One outgoing flow's state."""

    __slots__ = ("spec", "sock", "state", "sched", "start", "connected", "end", "size", "sent", "hdr",
                 "hdr_off", "confirm", "deadline", "info")

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
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

    __slots__ = ("sock", "peer", "accepted", "first", "last", "hdr", "flow_id", "size", "got", "trace", "bins")

    def __init__(self, sock: socket.socket, peer: str, now: float) -> None:
        self.sock = sock
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
    """The event loop; see the module docstring."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.host: str = cfg["host"]
        self.out = Path(cfg["out_dir"])
        self.cca = cfg["cca"].encode()
        self.grans: list[float] = [float(g) for g in cfg.get("granularities", [])]
        self.bins: list[dict[int, int]] = [{} for _ in self.grans]
        w = cfg.get("window")
        self.w0, self.w1 = (float(w[0]), float(w[1])) if w else (0.0, -1.0)
        self.window_bytes = 0
        self.rx_bytes = 0
        self.stop_after: float | None = cfg.get("stop_after")
        self.flows = sorted(cfg.get("flows", []), key=lambda f: (f["start"], f["id"]))
        self.next_flow = 0
        self.senders: dict[int, Sender] = {}
        self.conns: dict[int, SinkConn] = {}
        self.long: list[Sender] = []
        self.ended = 0
        self.done_written = False
        self.max_lag = 0.0
        self.accepted = 0
        self.stopping = False
        self.t0 = 0.0
        self.buf = bytearray(CHUNK)
        self.mv = memoryview(self.buf)
        self.ep = select.epoll()
        self.flows_f = open(self.out / f"flows-{self.host}.jsonl", "a")
        self.sink_f = open(self.out / f"sink-{self.host}.jsonl", "a")

    # -- set-up -------------------------------------------------------------------------
    def check_cca(self) -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, self.cca)
        except OSError as exc:
            avail = _read("/proc/sys/net/ipv4/tcp_available_congestion_control")
            raise AgentError(f"congestion control {self.cca.decode()!r} cannot be set ({exc.strerror}); "
                             f"this kernel has: {avail or '?'} (load the module of the host's profile)") from exc
        finally:
            s.close()

    def listen(self) -> None:
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, self.cca)
        if self.cfg.get("rcvbuf"):
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, int(self.cfg["rcvbuf"]))
        try:
            ls.bind((self.cfg.get("listen_ip", "0.0.0.0"), int(self.cfg["listen_port"])))
        except OSError as exc:
            raise AgentError(f"cannot listen on port {self.cfg['listen_port']}: {exc.strerror}") from exc
        ls.listen(int(self.cfg.get("backlog", 4096)))
        self.lsock = ls
        self.ep.register(ls.fileno(), EPOLLIN)

    def install_signals(self) -> None:
        r, w = socket.socketpair()
        r.setblocking(False)
        w.setblocking(False)
        self.wake_r, self.wake_w = r, w
        signal.set_wakeup_fd(w.fileno())
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        self.ep.register(r.fileno(), EPOLLIN)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.stopping = True

    def wait_start(self) -> None:
        """Write the ready file, then wait (bounded) for the controller's start.json."""
        _atomic_json(self.out / f"ready-{self.host}.json", {"pid": os.getpid(), "port": self.cfg["listen_port"]})
        path = self.out / "start.json"
        deadline = time.monotonic() + float(self.cfg.get("start_timeout", 120.0))
        while not path.exists():
            if self.stopping:
                raise SystemExit(0)
            if time.monotonic() > deadline:
                raise AgentError(f"no {path} within {self.cfg.get('start_timeout', 120.0)} s")
            time.sleep(0.005)
        self.t0 = float(json.loads(path.read_text())["t0"])

    # -- helpers ------------------------------------------------------------------------
    def now(self) -> float:
        return time.monotonic() - self.t0

    def write_flow(self, s: Sender, status: str, reason: str = "", confirmed: int | None = None) -> None:
        sp = s.spec
        rec = {"id": sp["id"], "src": self.host, "dst": sp["dst"], "size": s.size or None, "sent": s.sent,
               "confirmed": confirmed, "cca": self.cca.decode(), "tag": sp.get("tag", ""), "sched_start": s.sched,
               "start": s.start, "connected": s.connected, "end": s.end, "status": status, "reason": reason,
               "tcp_info": s.info}
        self.flows_f.write(json.dumps(rec, separators=(",", ":")) + "\n")
        self.flows_f.flush()
        self.ended += 1

    def write_sink(self, c: SinkConn, status: str, reason: str = "") -> None:
        rec = {"id": c.flow_id, "peer": c.peer, "dst": self.host, "size": c.size or None, "got": c.got,
               "accepted": c.accepted, "first": c.first, "last": c.last, "status": status, "reason": reason}
        if c.bins is not None:
            rec["bins"] = {str(g): c.bins[i] for i, g in enumerate(self.grans)}
        self.sink_f.write(json.dumps(rec, separators=(",", ":")) + "\n")
        self.sink_f.flush()

    # -- source side --------------------------------------------------------------------
    def start_flow(self, spec: dict[str, Any], now: float) -> None:
        s = Sender(spec)
        self.max_lag = max(self.max_lag, now - s.sched)
        try:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
        except OSError as exc:
            s.start = now
            self.write_flow(s, "failed", f"socket: {exc.strerror}")
            return
        s.sock = sock
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, self.cca)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if spec.get("sndbuf"):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, int(spec["sndbuf"]))
            s.start = self.now()
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

    def close_sender(self, s: Sender) -> None:
        if s.sock is not None:
            self.senders.pop(s.sock.fileno(), None)
            s.sock.close()
            s.sock = None
        if not s.size and s in self.long:
            self.long.remove(s)

    def run_stopping(self) -> bool:
        """True once the run is being stopped (stop time reached, or the controller wrote
        stop.json before signalling the agents). A connection error from then on is
        another agent shutting down, so the flow is incomplete, not failed."""
        if self.stopping or (self.stop_after is not None and self.now() >= self.stop_after):
            return True
        return (self.out / "stop.json").exists()

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
            s.connected = self.now()
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
                    s.end = self.now()
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
    def on_listener(self) -> None:
        now = self.now()
        for _ in range(64):
            try:
                sock, addr = self.lsock.accept()
            except BlockingIOError:
                return
            except OSError:
                return
            sock.setblocking(False)
            self.accepted += 1
            self.conns[sock.fileno()] = SinkConn(sock, addr[0], now)
            self.ep.register(sock.fileno(), EPOLLIN)

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
            now = self.now()
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
            c.bins = [{} for _ in self.grans]
        if clamp:
            try:
                c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP, clamp)
            except OSError as exc:
                self.close_conn(c, "failed", f"TCP_WINDOW_CLAMP {clamp}: {exc.strerror}")
                return False
        return True

    def account(self, c: SinkConn, p: int, now: float) -> None:
        c.got += p
        if c.first is None:
            c.first = now
        c.last = now
        self.rx_bytes += p
        if self.w0 <= now < self.w1:
            self.window_bytes += p
        for i, g in enumerate(self.grans):
            b = self.bins[i]
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

    def close_conn(self, c: SinkConn, status: str, reason: str = "") -> None:
        self.conns.pop(c.sock.fileno(), None)
        c.sock.close()
        if status == "failed" and self.run_stopping():
            status, reason = "incomplete", f"run stopped ({reason})"
        self.write_sink(c, status, reason)

    # -- main loop ----------------------------------------------------------------------
    def all_ended(self) -> bool:
        return self.next_flow >= len(self.flows) and not self.senders

    def run(self) -> None:
        flows, lfd, wfd = self.flows, self.lsock.fileno(), self.wake_r.fileno()
        senders, conns = self.senders, self.conns
        while not self.stopping:
            now = self.now()
            while self.next_flow < len(flows) and flows[self.next_flow]["start"] <= now:
                self.start_flow(flows[self.next_flow], now)
                self.next_flow += 1
            next_long = self.end_long_flows(now) if self.long else None
            if not self.done_written and self.all_ended():
                (self.out / f"done-{self.host}").write_text(f"{self.ended}\n")
                self.done_written = True
            if self.stop_after is not None and now >= self.stop_after:
                break
            timeout = 0.25
            if self.next_flow < len(flows):
                timeout = min(timeout, flows[self.next_flow]["start"] - now)
            if next_long is not None:
                timeout = min(timeout, next_long - now)
            if self.stop_after is not None:
                timeout = min(timeout, self.stop_after - now)
            for fd, ev in self.ep.poll(max(timeout, 0.0)):
                s = senders.get(fd)
                if s is not None:
                    self.on_sender(s, ev)
                    continue
                c = conns.get(fd)
                if c is not None:
                    self.on_conn(c)
                elif fd == lfd:
                    self.on_listener()
                elif fd == wfd:
                    try:
                        self.wake_r.recv(64)
                    except BlockingIOError:
                        pass

    def finish(self) -> None:
        """Record what is still open as incomplete and write the counters."""
        for s in list(self.senders.values()):
            s.info = tcpinfo.read(s.sock)
            self.close_sender(s)
            self.write_flow(s, "incomplete", "running when the run stopped")
        for spec in self.flows[self.next_flow:]:
            self.write_flow(Sender(spec), "incomplete", "not started when the run stopped")
        for c in list(self.conns.values()):
            self.close_conn(c, "incomplete", "open when the run stopped")
        ru = resource.getrusage(resource.RUSAGE_SELF)
        _atomic_json(self.out / f"stats-{self.host}.json", {
            "host": self.host, "t0": self.t0, "stopped_at": self.now(), "granularities": self.grans,
            "bins": {str(g): {str(k): v for k, v in sorted(self.bins[i].items())} for i, g in enumerate(self.grans)},
            "window": [self.w0, self.w1] if self.w1 > self.w0 else None, "window_bytes": self.window_bytes,
            "rx_bytes": self.rx_bytes, "accepted": self.accepted, "flows": len(self.flows),
            "flows_ended": self.ended, "max_start_lag": self.max_lag,
            "cpu_user_s": ru.ru_utime, "cpu_sys_s": ru.ru_stime, "max_rss_kib": ru.ru_maxrss})
        self.flows_f.close()
        self.sink_f.close()


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
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m testbed.traffic.agent CONFIG.json", file=sys.stderr)
        return 2
    try:
        cfg = json.loads(Path(args[0]).read_text())
        agent = Agent(cfg)
        agent.install_signals()
        agent.check_cca()
        agent.listen()
        agent.wait_start()
    except (AgentError, OSError, KeyError, ValueError) as exc:
        print(f"traffic agent: {exc}", file=sys.stderr)
        return 2
    try:
        agent.run()
    finally:
        agent.finish()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
