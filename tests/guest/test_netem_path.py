"""Acceptance in the full-kernel guest: two hosts, one link with netem delay 10 ms (each
direction) and HTB rate 50 Mbit/s. RTT within 5 % of 20 ms + base RTT, iperf3 throughput
within 5 % of 50 Mbit/s; afterwards no object of the run is left.

The configured rate is a line rate (HTB counts whole Ethernet frames), while iperf3
reports TCP goodput; with a 1500 B MTU at most 1448 of every 1514 bytes are payload, so
the goodput is compared with rate x 1448/1514 (47.8 Mbit/s), not with 50 Mbit/s.

The base RTT is measured with netem in place at 1 ms each way (and those 2 ms taken off):
netem releases each delayed packet from an hrtimer, and under software emulation (TCG)
that timer fires ~0.5 ms late per direction. A base taken without netem misses that
per-packet overhead; the 10 ms run pays it on every ping (CI saw 21.55 ms vs 20.43 ms).
RTTs are compared by their minimum over the pings: timer lateness only ever adds
delay, and its size varies with the host's load (a loaded CI guest saw medians 5 %
above configuration), so the minimum is the estimator of the configured path delay."""

BASE_DELAY_S = 1e-3

GOODPUT_PER_LINE_RATE = 1448 / 1514  # TCP payload (timestamps on) per Ethernet frame

import subprocess

import pytest

from helpers import require_features, require_root, run_testbed, summary_rows


def leftovers() -> dict[str, str]:
    return {
        "netns": subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout,
        "veth": subprocess.run(["ip", "-o", "link", "show", "type", "veth"], capture_output=True, text=True).stdout,
        "iperf3": subprocess.run(["pgrep", "-a", "iperf3"], capture_output=True, text=True).stdout,
        "tcpdump": subprocess.run(["pgrep", "-a", "tcpdump"], capture_output=True, text=True).stdout,
    }


def test_rtt_and_throughput_match_configuration(tmp_path):
    require_root()
    require_features("netns", "htb", "netem", "clsact-bpf")
    common = ["--native", "--reps", "1", "--set", "switch=none", "--set", "rate=50 Mbit/s", "--set", "pings=50"]
    run_testbed("run", "demo", *common, "--set", "delay=1 ms", "--set", "duration=2 s", "--set", "omit=1 s",
            "--no-report", "--out", str(tmp_path / "base"))
    base = float(summary_rows(tmp_path / "base")[0]["rtt_min_s"]) - 2 * BASE_DELAY_S
    assert not (tmp_path / "base" / "report").exists()  # --no-report
    # 4 s measured after 1 s of slow start (the BDP is 125 kB: slow start ends within ~0.3 s).
    # It was 10 s with 2 s omitted: twice the packets, and under TCG the guest tier's wall
    # time goes with the packets (this test was 25 % of guest shard 2's, 2026-11-29).
    run_testbed("run", "demo", *common, "--set", "delay=10 ms", "--set", "duration=5 s", "--set", "omit=1 s",
            "--pcap", "h1-h2", "--no-report", "--out", str(tmp_path / "netem"))
    row = summary_rows(tmp_path / "netem")[0]
    rtt, thr = float(row["rtt_min_s"]), float(row["throughput_bps"])
    print(f"base RTT {base * 1e3:.3f} ms, RTT {rtt * 1e3:.3f} ms, throughput {thr / 1e6:.2f} Mbit/s")
    assert rtt == pytest.approx(0.020 + base, rel=0.05)
    assert thr == pytest.approx(50e6 * GOODPUT_PER_LINE_RATE, rel=0.05)
    # the capture is complete (tcpdump was stopped with SIGINT) and holds the transfer
    pcap = tmp_path / "netem" / "pcap" / "p0000-h1-h2.pcap"
    n = subprocess.run(["tcpdump", "-r", str(pcap), "-nn", "-q", "tcp"], capture_output=True, text=True)
    assert n.returncode == 0 and n.stdout.count("\n") > 1000, n.stderr
    # (no report: a guest run's report is made on the host, after the guest; in the guest
    # matplotlib's imports over 9p cost a minute of CI's wall time. tests/native/test_e3_run.py
    # and the unit tier make reports.)
    assert all(not v.strip() for v in leftovers().values()), leftovers()


def test_time_dilation_keeps_paper_units(tmp_path):
    """The same point at D = 1 and D = 4: RTT and throughput in paper units agree."""
    require_root()
    require_features("netns", "htb", "netem", "clsact-bpf")
    rows = {}
    for d in (1, 4):
        run_testbed("run", "demo", "--native", "--reps", "1", "--tdf", str(d), "--set", "switch=none",
                "--set", "rate=20 Mbit/s", "--set", "delay=5 ms", "--set", "duration=4 s",
                "--set", "omit=1 s", "--no-report", "--out", str(tmp_path / f"d{d}"))
        rows[d] = summary_rows(tmp_path / f"d{d}")[0]
    for key in ("throughput_bps", "rtt_min_s"):
        assert float(rows[4][key]) == pytest.approx(float(rows[1][key]), rel=0.08), key
