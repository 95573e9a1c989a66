"""Live TCP state from the ``tcp:tcp_probe`` tracepoint, with a CO-RE BPF program.

``CwndTracer`` runs ``ebpf/cwndtrace`` (the loader of ``ebpf/cwndtrace.bpf.c``, built by
``make``; root and a kernel with BTF and kprobes: the full-kernel guest, or any stock
kernel) which attaches to

* ``tcp:tcp_probe`` (raw tracepoint): every segment a socket receives in the
  established state, *before* it is processed -> ``event = "ack"``;
* ``tcp:tcp_retransmit_skb`` (raw tracepoint): every retransmission, after the
  congestion state was updated -> ``event = "retrans"``;
* the entry of ``tcp_retransmit_timer`` (kprobe): an RTO fires, state *before* the
  stack reacts -> ``event = "rto"``;
* optionally (``arm=True``) the entry of ``tcp_rearm_rto`` (kprobe): the
  retransmission timer is (re)armed with ``icsk_rto`` -> ``event = "arm"``; the
  call after the first data segment is sent (``tcp_event_new_data_sent``, in
  tcp_output.c, so never inlined into the caller) shows the RTO that segment got.

Each sample has the socket's cwnd, ssthresh, srtt, RTO, packets in flight
(packets_out - sacked_out - lost_out + retrans_out, as tcp_packets_in_flight()),
congestion state, MSS, snd_una / snd_nxt and the tracepoint's data length. The raw
tracepoint form reads the socket itself, so RTO and in-flight are available, which
the tracepoint's own fields do not carry. Filters: a network namespace (host) and a
TCP port (either end).

The program is compiled once, at build time, against the build host's BTF and relocated
at load (CO-RE); it used to be bcc, compiled in the running kernel at every start
(minutes under TCG). The loader streams ``struct cwnd_event`` records (ebpf/cwndtrace.h:
:data:`EVENT`, checked against the object's BTF by tests/unit/test_btf_layout.py) on its
standard output: READY once attached, the events, LOST whenever the count of events its
ring buffer had no room for grows, END with that count when its standard input closes.
"""

from __future__ import annotations

import csv
import os
import socket
import struct
import subprocess
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import IO, Iterator

from testbed.errors import TestbedError

CA_STATES = {0: "open", 1: "disorder", 2: "cwr", 3: "recovery", 4: "loss"}
EVENTS = {0: "ack", 1: "retrans", 2: "rto", 3: "arm"}
TCP_STATES = {1: "established", 2: "syn_sent", 3: "syn_recv", 4: "fin_wait1", 5: "fin_wait2",
              6: "time_wait", 7: "close", 8: "close_wait", 9: "last_ack", 10: "listen", 11: "closing"}

#: the loader (ebpf/cwndtrace.c, ``make`` builds it)
LOADER = Path(__file__).resolve().parents[2] / "ebpf" / "cwndtrace"
#: ``struct cwnd_event`` (ebpf/cwndtrace.h), host byte order, members in this order
EVENT_MEMBERS = ("ts_ns", "netns", "saddr", "daddr", "sport", "dport", "type", "ca_state", "data_len", "cwnd",
                 "ssthresh", "srtt_us", "rto_jiffies", "packets_out", "sacked_out", "lost_out", "retrans_out",
                 "mss", "snd_una", "snd_nxt", "total_retrans", "reordering", "state")
EVENT = struct.Struct("=QIIIHHBBHIIIIIIIIIIIIIB7x")
#: the loader's own records (enum cwnd_event_type): the events lost so far, when that
#: number grows; first, once attached; last, on a clean stop (ts_ns: the lost events)
EV_LOST, EV_READY, EV_END = 0xFD, 0xFE, 0xFF
#: how long the loader may take to load and attach (s; CO-RE relocation reads the
#: kernel's BTF, seconds under TCG)
START_TIMEOUT_S = 300.0
#: how long stop() waits for the loader to drain and exit (s)
STOP_TIMEOUT_S = 60.0


class TraceError(TestbedError):
    """The tracer could not start (loader not built, not root, no BTF or kprobes)."""


@dataclass
class Sample:
    """One observation of a socket (times in emulation seconds, as measured)."""

    t_s: float
    event: str
    netns: int
    src: str
    sport: int
    dst: str
    dport: int
    ca_state: str
    data_len: int
    cwnd: int
    ssthresh: int
    srtt_s: float
    rto_s: float
    in_flight: int
    packets_out: int
    sacked_out: int
    lost_out: int
    retrans_out: int
    mss: int
    snd_una: int
    snd_nxt: int
    total_retrans: int
    tcp_state: str = "established"
    #: the socket's reordering degree (tp->reordering, segments; 3 until reordering is seen)
    reordering: int = 0

    def line(self) -> str:
        return (f"{self.t_s:12.6f} {self.event:<7} {self.src}:{self.sport}>{self.dst}:{self.dport} "
                f"{self.ca_state:<8} cwnd {self.cwnd:5d} ssthresh {self.ssthresh:10d} "
                f"srtt {self.srtt_s * 1e3:9.3f} ms rto {self.rto_s * 1e3:8.1f} ms inflight {self.in_flight}")


def netns_inode(name: str) -> int:
    """Inode number of a named network namespace (what sk->net->ns.inum holds)."""
    return os.stat(f"/run/netns/{name}").st_ino


class CwndTracer:
    """Collects :class:`Sample` objects in a background thread; a context manager.

    ``netns``: namespace name (a host's ``netns``) or None for all; ``port``: only
    sockets with this local or remote port (0 = all). ``on_sample`` is called for
    each sample (e.g. to print it); all samples are also kept in ``samples``.
    ``arm``: also sample every (re)arming of the retransmission timer (``"arm"``
    events: ``rto_s`` is the RTO being armed). ``changes_only``: an ``"ack"`` sample only
    when cwnd, ssthresh, the congestion state or the reordering degree changed since the
    socket's previous one (a long flow at a steady window then costs a few samples, not
    one per ACK). ``lost``: samples the ring buffer had no room for (the reader fell
    behind), since the start, updated while it runs (within ~0.1 s); ``complete``: the
    loader stopped cleanly (its END record came), so ``samples`` and ``lost`` are whole.
    """

    def __init__(self, *, netns: str | None = None, port: int = 0, hz: int | None = None,
                 on_sample=None, arm: bool = False, changes_only: bool = False) -> None:  # type: ignore[no-untyped-def]
        if not 0 <= port <= 65535:
            raise TraceError(f"port {port} out of range 0..65535")
        self.netns, self.port, self.on_sample, self.arm = netns, port, on_sample, arm
        self.changes_only = changes_only
        self.lost = 0
        self.complete = False
        if hz is None:
            from testbed.cc.sockops import kernel_hz
            hz = kernel_hz()
        self.hz = hz
        self.samples: list[Sample] = []
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._err: IO[bytes] | None = None

    def __enter__(self) -> "CwndTracer":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def argv(self) -> list[str]:
        """The loader's command line for this tracer's filters."""
        argv = [str(LOADER), "--port", str(int(self.port))]
        if self.netns:
            argv += ["--netns-inum", str(netns_inode(self.netns))]
        if self.changes_only:
            argv.append("--changes")
        if self.arm:
            argv.append("--arm")
        return argv

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start the loader and return once every probe is attached. Raises TraceError
        when the loader is not built, refuses (not root, no BTF, no kprobes: its message)
        or is not attached within ``timeout_s``."""
        if not os.access(LOADER, os.X_OK):
            raise TraceError(f"{LOADER} is not built: run `make` (ebpf/Makefile builds it)")
        self._err = tempfile.TemporaryFile()     # a file, not a pipe: libbpf's messages cannot fill it
        self._proc = subprocess.Popen(self.argv(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._err)
        self._thread = threading.Thread(target=self._read, name="cwnd-tracer", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._ready.wait(0.1):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                why = self._failure()
                self.stop()
                raise TraceError(f"the cwnd tracer did not start: {why}")

    def _failure(self) -> str:
        """Stop a loader that did not become ready; what it said (or that it timed out)."""
        assert self._proc is not None
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
            return f"not attached within the timeout (killed); {self._stderr() or 'no message'}"
        return f"{self._stderr() or 'no message'} (exit status {self._proc.returncode})"

    def _stderr(self) -> str:
        """What the loader wrote on its standard error, on one line."""
        if self._err is None:
            return ""
        self._err.seek(0)
        text = self._err.read().decode(errors="replace").strip()
        return " | ".join(line for line in text.splitlines() if line)

    def _read(self) -> None:
        """The loader's records until END or EOF (the reader thread)."""
        assert self._proc is not None and self._proc.stdout is not None
        out = self._proc.stdout
        while True:
            raw = out.read(EVENT.size)
            if len(raw) < EVENT.size:
                return
            v = EVENT.unpack(raw)
            typ = v[6]
            if typ == EV_READY:
                self._ready.set()
            elif typ == EV_LOST:
                self.lost = v[0]
            elif typ == EV_END:
                self.lost, self.complete = v[0], True
                return
            else:
                self._handle(v)

    def _handle(self, v: tuple[int, ...]) -> None:
        (ts, netns, saddr, daddr, sport, dport, typ, state, dlen, cwnd, ssth, srtt, rto, pout,
         sacked, lost, retrans, mss, una, nxt, total, reordering, sk_state) = v
        s = Sample(t_s=ts / 1e9, event=EVENTS.get(typ, str(typ)), netns=netns,
                   src=socket.inet_ntoa(struct.pack("=I", saddr)), sport=sport,
                   dst=socket.inet_ntoa(struct.pack("=I", daddr)), dport=dport,
                   ca_state=CA_STATES.get(state, str(state)), data_len=dlen, cwnd=cwnd, ssthresh=ssth,
                   srtt_s=srtt / 1e6, rto_s=rto / self.hz,
                   in_flight=max(0, pout - sacked - lost + retrans), packets_out=pout, sacked_out=sacked,
                   lost_out=lost, retrans_out=retrans, mss=mss, snd_una=una, snd_nxt=nxt,
                   total_retrans=total, tcp_state=TCP_STATES.get(sk_state, str(sk_state)),
                   reordering=reordering)
        self.samples.append(s)
        if self.on_sample:
            self.on_sample(s)

    def stop(self) -> None:
        """Drain what is buffered and detach (the loader exits once its standard input
        closes); idempotent. A loader that does not exit within STOP_TIMEOUT_S is killed
        (``complete`` stays False)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        assert proc.stdin is not None
        try:
            proc.stdin.close()
        except OSError:
            pass
        if self._thread:
            self._thread.join(timeout=STOP_TIMEOUT_S)
        try:
            proc.wait(timeout=5 if self.complete else 1)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        if self._err is not None:
            self._err.close()
            self._err = None


def write_csv(samples: list[Sample], path: Path) -> None:
    """Samples to CSV (one row each, header = Sample fields), written atomically."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[x.name for x in fields(Sample)])
        w.writeheader()
        for s in samples:
            w.writerow(asdict(s))
    tmp.replace(path)


def stream(netns: str | None, port: int, out: IO[str], csv_path: Path | None = None,
           duration_s: float | None = None) -> int:
    """``testbed trace cwnd``: print samples until Ctrl-C (or ``duration_s``); write CSV."""
    tracer = CwndTracer(netns=netns, port=port, on_sample=lambda s: print(s.line(), file=out, flush=True))
    tracer.start()
    try:
        deadline = None if duration_s is None else time.monotonic() + duration_s
        while deadline is None or time.monotonic() < deadline:
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        tracer.stop()
        if csv_path:
            write_csv(tracer.samples, csv_path)
            print(f"{len(tracer.samples)} samples -> {csv_path}", file=out)
    return 0


def per_socket(samples: list[Sample]) -> Iterator[tuple[tuple[str, int, str, int], list[Sample]]]:
    """Samples grouped by socket (src, sport, dst, dport), in time order."""
    groups: dict[tuple[str, int, str, int], list[Sample]] = {}
    for s in samples:
        groups.setdefault((s.src, s.sport, s.dst, s.dport), []).append(s)
    for k, v in groups.items():
        yield k, sorted(v, key=lambda s: s.t_s)
