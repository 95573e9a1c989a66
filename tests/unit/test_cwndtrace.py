"""testbed.cc.trace.CwndTracer against a stand-in for its loader (no root, no kernel):
the record stream ebpf/cwndtrace writes (READY, events, LOST, END on standard input's
end; ebpf/cwndtrace.c), its failures, and the command line it is given. The real
loader runs in the guest tier (tests/guest/test_cwndtrace.py, test_cc_profiles.py);
the record layout is checked against the object's BTF in test_btf_layout.py."""

from __future__ import annotations

import socket
import stat
import struct
import sys
import textwrap
import time
from pathlib import Path

import pytest

from testbed.cc import trace


def record(**kw: int) -> bytes:
    """One struct cwnd_event with the members in ``kw`` (others zero)."""
    vals = {m: 0 for m in trace.EVENT_MEMBERS} | kw
    return trace.EVENT.pack(*(vals[m] for m in trace.EVENT_MEMBERS))


def ip(addr: str) -> int:
    return struct.unpack("=I", socket.inet_aton(addr))[0]


ACK = record(ts_ns=2_500_000_000, netns=4026531840, saddr=ip("10.0.0.1"), daddr=ip("10.0.0.2"), sport=40000,
             dport=5201, type=0, ca_state=3, data_len=1448, cwnd=20, ssthresh=10, srtt_us=12_000,
             rto_jiffies=50, packets_out=9, sacked_out=2, lost_out=1, retrans_out=1, mss=1448, snd_una=7,
             snd_nxt=9, total_retrans=4, reordering=3, state=1)
RTO = record(ts_ns=3_000_000_000, saddr=ip("10.0.0.1"), daddr=ip("10.0.0.99"), sport=40001, dport=80, type=2,
             ca_state=4, rto_jiffies=250, state=2)


def fake_loader(tmp_path: Path, body: str) -> Path:
    """An executable Python script standing in for ebpf/cwndtrace; ``body`` runs with
    ``out`` (binary stdout), the records ACK / RTO and ``rec(**kw)`` at hand; its
    command line goes to argv.txt beside it."""
    path = tmp_path / "cwndtrace"
    path.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import struct, sys
        from pathlib import Path
        Path({str(tmp_path / 'argv.txt')!r}).write_text(" ".join(sys.argv[1:]))
        EVENT = struct.Struct({trace.EVENT.format!r})
        MEMBERS = {trace.EVENT_MEMBERS!r}
        def rec(**kw):
            vals = dict.fromkeys(MEMBERS, 0) | kw
            return EVENT.pack(*(vals[m] for m in MEMBERS))
        ACK, RTO = {ACK!r}, {RTO!r}
        out = sys.stdout.buffer
        """) + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def loader(tmp_path, monkeypatch):
    def make(body: str) -> Path:
        path = fake_loader(tmp_path, body)
        monkeypatch.setattr(trace, "LOADER", path)
        return path
    return make


def test_records_become_samples_and_the_lost_count_follows_the_stream(loader, tmp_path):
    loader("""
        out.write(rec(type=0xFE)); out.flush()
        out.write(ACK + RTO + rec(type=0xFD, ts_ns=7)); out.flush()
        sys.stdin.buffer.read()                              # until the tracer stops
        out.write(rec(type=0xFF, ts_ns=9)); out.flush()
    """)
    seen = []
    t = trace.CwndTracer(port=5201, hz=250, changes_only=True, arm=True, on_sample=seen.append)
    with t:
        for _ in range(200):
            if len(t.samples) == 2 and t.lost == 7:
                break

            time.sleep(0.01)
        assert t.lost == 7 and not t.complete                 # live, before the end
    assert (tmp_path / "argv.txt").read_text() == "--port 5201 --changes --arm"
    assert t.complete and t.lost == 9 and seen == t.samples
    ack, rto = t.samples
    assert (ack.t_s, ack.event, ack.src, ack.sport, ack.dst, ack.dport) == (2.5, "ack", "10.0.0.1", 40000,
                                                                              "10.0.0.2", 5201)
    assert (ack.ca_state, ack.cwnd, ack.ssthresh, ack.srtt_s, ack.rto_s, ack.data_len) == ("recovery", 20, 10,
                                                                                            0.012, 0.2, 1448)
    assert (ack.in_flight, ack.total_retrans, ack.reordering, ack.tcp_state, ack.netns) == (9 - 2 - 1 + 1, 4, 3,
                                                                                            "established",
                                                                                            4026531840)
    assert (rto.event, rto.ca_state, rto.rto_s, rto.tcp_state, rto.dst) == ("rto", "loss", 1.0, "syn_sent",
                                                                            "10.0.0.99")
    t.stop()                                                  # idempotent


def test_a_refusing_loader_is_a_trace_error_with_its_message(loader):
    loader("""
        sys.stderr.write("libbpf: prog 'cwnd_rto': failed to create kprobe\\n")
        sys.stderr.write("cwndtrace: attaching the tracepoints and kprobes: No such file or directory\\n")
        sys.exit(1)
    """)
    with pytest.raises(trace.TraceError, match=r"did not start: libbpf: prog 'cwnd_rto': failed to create kprobe"
                                               r" \| cwndtrace: attaching .* \(exit status 1\)"):
        trace.CwndTracer(hz=250).start()


def test_a_loader_that_never_attaches_is_killed_after_the_timeout(loader):
    loader("""
        import time
        time.sleep(60)
    """)
    with pytest.raises(trace.TraceError, match="not attached within the timeout"):
        trace.CwndTracer(hz=250).start(timeout_s=0.5)


def test_a_missing_loader_says_how_to_build_it(monkeypatch, tmp_path):
    monkeypatch.setattr(trace, "LOADER", tmp_path / "cwndtrace")
    with pytest.raises(trace.TraceError, match="is not built: run `make`"):
        trace.CwndTracer(hz=250).start()


def test_the_namespace_filter_is_the_namespaces_inode(monkeypatch):
    monkeypatch.setattr(trace, "netns_inode", lambda name: {"ot1-h1": 4026532999}[name])
    argv = trace.CwndTracer(netns="ot1-h1", port=0, hz=250).argv()
    assert argv[1:] == ["--port", "0", "--netns-inum", "4026532999"]
    with pytest.raises(trace.TraceError, match="port 70000 out of range"):
        trace.CwndTracer(port=70000, hz=250)
