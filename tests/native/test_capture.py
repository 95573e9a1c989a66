"""Packet captures (``--pcap``) natively: tcpdump on a host's end of a link (inside its
namespace) and on an OVS port (the root namespace), each recorded in the ledger before it
starts, stopped with SIGINT so the file is complete, and marked gone."""

import os
import secrets
import signal
import subprocess
import time

import pytest

from helpers import require_features, require_root
from testbed.capture import Capture
from testbed.ledger import Ledger
from testbed.net import Emulation
from topologies.path import TwoHostPath


@pytest.fixture
def ledger():
    require_root()
    require_features("netns", "htb", "ovs-userspace")
    led = Ledger.create(f"test-capture-{os.getpid()}-{time.monotonic_ns()}")
    yield led
    if led.path.exists():
        led.teardown()


def icmp_packets(pcap) -> int:
    out = subprocess.run(["tcpdump", "-r", str(pcap), "-nn", "icmp"], capture_output=True, text=True, check=True)
    return len(out.stdout.splitlines())


def test_captures_in_a_namespace_and_on_an_ovs_port(ledger, tmp_path):
    topo = TwoHostPath(switch="ovs", datapath="netdev")
    with Emulation(topo, ledger, "ot" + secrets.token_hex(2)) as emu:
        assert emu.links["h1-s1"][0][1] is not None and emu.links["s1-h2"][0][1] is None
        caps = {link: Capture(emu, link, tmp_path / f"{link}.pcap") for link in ("h1-s1", "s1-h2")}
        entries = {link: ledger.entries[c.proc.ledger_seq] for link, c in caps.items()}
        assert entries["h1-s1"].attrs["argv"][:4] == ["ip", "netns", "exec", emu["h1"].netns]
        assert entries["s1-h2"].attrs["argv"][0] == "tcpdump" and entries["s1-h2"].attrs["netns"] is None
        assert all(e.attrs["stop_signal"] == signal.SIGINT and e.attrs["pid"] == caps[k].proc.pid
                   for k, e in entries.items())
        emu["h1"].run(["ping", "-c", "3", "-i", "0.2", emu["h2"].ip], timeout=30)
        # tcpdump (without --immediate-mode) hands packets over in ring blocks retired
        # after up to 1 s; a block still open at SIGINT is not written
        time.sleep(1.5)
        for link, cap in caps.items():
            cap.stop()
            assert cap.proc.returncode == 0, link          # exited on SIGINT (not killed)
            assert entries[link].gone
    # request and reply on each link: the files were flushed and closed
    assert {link: icmp_packets(tmp_path / f"{link}.pcap") >= 6 for link in caps} == {"h1-s1": True, "s1-h2": True}
