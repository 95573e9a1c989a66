"""Live TCP state from the ``tcp:tcp_probe`` tracepoint, with bcc.

``CwndTracer`` attaches (bcc compiles it in the running kernel, so it needs that
kernel's headers: run it in the full-kernel guest) to

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
"""

from __future__ import annotations

import csv
import os
import socket
import struct
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

_PROGRAM = r"""
#include <uapi/linux/ptrace.h>
#include <net/sock.h>
#include <net/tcp.h>
#include <net/inet_connection_sock.h>

struct event_t {
    u64 ts_ns;
    u32 netns;
    u32 saddr;
    u32 daddr;
    u16 sport;
    u16 dport;
    u8  type;
    u8  ca_state;
    u16 data_len;
    u32 cwnd;
    u32 ssthresh;
    u32 srtt_us;
    u32 rto_jiffies;
    u32 packets_out;
    u32 sacked_out;
    u32 lost_out;
    u32 retrans_out;
    u32 mss;
    u32 snd_una;
    u32 snd_nxt;
    u32 total_retrans;
    u32 reordering;
    u8  state;
    u8  pad[3];
};

BPF_PERF_OUTPUT(events);

/* TB_CHANGES: an "ack" event only when cwnd, ssthresh, the congestion state or the
 * reordering degree differ from the socket's previous one */
struct seen_t {
    u32 cwnd;
    u32 ssthresh;
    u32 reordering;
    u8 ca_state;
    u8 pad[3];
};
BPF_HASH(last_seen, u64, struct seen_t, 4096);

/* Explicit reads: bcc only rewrites dereferences inside the probe functions
 * themselves, not in helpers they call. */
#define RD(dst, src) bpf_probe_read_kernel(&(dst), sizeof(dst), (const void *)&(src))

static __always_inline int emit(void *ctx, struct sock *sk, struct sk_buff *skb, u8 type)
{
    u16 family = 0, sport = 0, dport = 0;
    struct net *net = NULL;
    u32 netns = 0;
    RD(family, sk->__sk_common.skc_family);
    if (family != AF_INET)
        return 0;
    RD(sport, sk->__sk_common.skc_num);
    RD(dport, sk->__sk_common.skc_dport);
    dport = ntohs(dport);
    if (TB_PORT && sport != TB_PORT && dport != TB_PORT)
        return 0;
    RD(net, sk->__sk_common.skc_net.net);
    if (net)
        RD(netns, net->ns.inum);
    if (TB_NETNS && netns != TB_NETNS)
        return 0;
    struct tcp_sock *tp = (struct tcp_sock *)sk;
    struct inet_connection_sock *icsk = (struct inet_connection_sock *)sk;
    struct event_t e = {};
    u8 bits = 0;
    u32 srtt = 0, len = 0;
    e.ts_ns = bpf_ktime_get_ns();
    e.netns = netns;
    RD(e.saddr, sk->__sk_common.skc_rcv_saddr);
    RD(e.daddr, sk->__sk_common.skc_daddr);
    e.sport = sport;
    e.dport = dport;
    e.type = type;
    /* icsk_ca_state is a 5-bit field in the byte before icsk_retransmits */
    bpf_probe_read_kernel(&bits, 1, ((u8 *)&icsk->icsk_retransmits) - 1);
    e.ca_state = bits & 0x1f;
    if (skb) {
        RD(len, skb->len);
        e.data_len = len;
    }
    RD(e.cwnd, tp->snd_cwnd);
    RD(e.ssthresh, tp->snd_ssthresh);
    RD(srtt, tp->srtt_us);
    e.srtt_us = srtt >> 3;
    RD(e.rto_jiffies, icsk->icsk_rto);
    RD(e.packets_out, tp->packets_out);
    RD(e.sacked_out, tp->sacked_out);
    RD(e.lost_out, tp->lost_out);
    RD(e.retrans_out, tp->retrans_out);
    RD(e.mss, tp->mss_cache);
    RD(e.snd_una, tp->snd_una);
    RD(e.snd_nxt, tp->snd_nxt);
    RD(e.total_retrans, tp->total_retrans);
    RD(e.reordering, tp->reordering);
    RD(e.state, sk->__sk_common.skc_state);
    if (TB_CHANGES && type == 0) {
        u64 key = (u64)sk;
        struct seen_t now = {.cwnd = e.cwnd, .ssthresh = e.ssthresh, .reordering = e.reordering,
                             .ca_state = e.ca_state};
        struct seen_t *old = last_seen.lookup(&key);
        if (old && old->cwnd == now.cwnd && old->ssthresh == now.ssthresh &&
            old->reordering == now.reordering && old->ca_state == now.ca_state)
            return 0;
        last_seen.update(&key, &now);
    }
    events.perf_submit(ctx, &e, sizeof(e));
    return 0;
}

RAW_TRACEPOINT_PROBE(tcp_probe)
{
    return emit(ctx, (struct sock *)ctx->args[0], (struct sk_buff *)ctx->args[1], 0);
}

RAW_TRACEPOINT_PROBE(tcp_retransmit_skb)
{
    return emit(ctx, (struct sock *)ctx->args[0], NULL, 1);
}

int kprobe__tcp_retransmit_timer(struct pt_regs *ctx, struct sock *sk)
{
    return emit(ctx, sk, NULL, 2);
}
"""

_ARM_PROBE = r"""
int kprobe__tcp_rearm_rto(struct pt_regs *ctx, struct sock *sk)
{
    return emit(ctx, sk, NULL, 3);
}
"""

_FMT = "=QIIIHHBBHIIIIIIIIIIIIIB3x"
_SIZE = struct.calcsize(_FMT)


class TraceError(TestbedError):
    """The tracer could not start (no bcc, no kernel headers, not root)."""


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
    one per ACK). ``lost``: samples the perf buffer dropped (the reader fell behind).
    """

    def __init__(self, *, netns: str | None = None, port: int = 0, hz: int | None = None,
                 on_sample=None, arm: bool = False, changes_only: bool = False) -> None:  # type: ignore[no-untyped-def]
        if not 0 <= port <= 65535:
            raise TraceError(f"port {port} out of range 0..65535")
        self.netns, self.port, self.on_sample, self.arm = netns, port, on_sample, arm
        self.changes_only = changes_only
        self.lost = 0
        if hz is None:
            from testbed.cc.sockops import kernel_hz
            hz = kernel_hz()
        self.hz = hz
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bpf = None
        self._t0 = 0

    def __enter__(self) -> "CwndTracer":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        try:
            from bcc import BPF  # Debian python3-bpfcc (venv with system site packages)
        except ImportError as exc:
            raise TraceError(f"bcc is not importable ({exc}): install python3-bpfcc and use the venv "
                             "made with --system-site-packages") from None
        ino = netns_inode(self.netns) if self.netns else 0
        text = (_PROGRAM + (_ARM_PROBE if self.arm else "")).replace("TB_PORT", str(int(self.port))) \
            .replace("TB_NETNS", f"{ino}U").replace("TB_CHANGES", "1" if self.changes_only else "0")
        try:
            self._bpf = BPF(text=text)
        except Exception as exc:
            raise TraceError(f"bcc could not compile/attach the tracer ({exc}); it needs root and the "
                             "running kernel's headers: run it in the guest (testbed guest -- ...)") from None
        self._t0 = time.monotonic_ns()
        self._bpf["events"].open_perf_buffer(self._handle, page_cnt=256, lost_cb=self._lost)
        self._thread = threading.Thread(target=self._poll, name="cwnd-tracer", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            self._bpf.perf_buffer_poll(timeout=100)  # type: ignore[union-attr]

    def _lost(self, count: int) -> None:
        self.lost += count

    def _handle(self, cpu: int, data: int, size: int) -> None:
        import ctypes

        raw = ctypes.string_at(data, _SIZE)
        v = struct.unpack(_FMT, raw)
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
        """Drain what is buffered and detach."""
        if self._bpf is None:
            return
        self._bpf.perf_buffer_poll(timeout=200)
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
        self._bpf.perf_buffer_poll(timeout=50)
        self._bpf.cleanup()
        self._bpf = None


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
