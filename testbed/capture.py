"""Packet captures on named links (``--pcap h1-s1``), written into the results folder."""

from __future__ import annotations

import re
import selectors
import signal
import subprocess
from pathlib import Path

from testbed import hostclock, process
from testbed.errors import DefinitionError, TestbedError
from testbed.net import Emulation


class CaptureError(TestbedError):
    """tcpdump did not start or did not stop cleanly."""


class Capture:
    """tcpdump on one end of a link; ``stop()`` ends it with SIGINT so the file is complete.

    ``packet_buffered`` (tcpdump -U, the default): every packet is written when it is
    captured, so a killed run leaves a file complete up to its last packet; False
    writes in blocks with a 32 MB kernel buffer (-B), which costs far less per packet
    where the file lives on a slow file system (the guest's 9p share) at the price of
    the last block of a killed capture."""

    def __init__(self, emu: Emulation, link: str, path: Path, snaplen: int = 256,
                 packet_buffered: bool = True) -> None:
        if link not in emu.links:
            raise DefinitionError("--pcap", link, "a link of this topology: " + ", ".join(sorted(emu.links)))
        (intf, netns) = emu.links[link][0]
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        #: packets the kernel dropped before tcpdump read them (set by stop())
        self.dropped = 0
        argv = ["tcpdump", "-i", intf, *(["-U"] if packet_buffered else ["-B", "32768"]), "-s", str(snaplen),
                "-w", str(path)]
        # in the namespace of the link's end (None: a root-namespace end, an OVS port)
        self.proc = process.spawn(emu.ledger, argv, netns=netns, stderr=subprocess.PIPE,
                                  stop_signal=signal.SIGINT)
        self._wait_listening(timeout_s=10.0)

    def _wait_listening(self, timeout_s: float) -> None:
        """tcpdump prints 'listening on' once the capture is armed."""
        sel = selectors.DefaultSelector()
        assert self.proc.stderr is not None
        sel.register(self.proc.stderr, selectors.EVENT_READ)
        deadline, seen = hostclock.Deadline(timeout_s), b""
        while not deadline.expired():
            if sel.select(timeout=0.2):
                chunk = self.proc.stderr.read1(4096)  # type: ignore[attr-defined]
                if not chunk:
                    break
                seen += chunk
                if b"listening on" in seen:
                    return
        self.proc.kill()
        raise CaptureError(f"tcpdump did not start within {timeout_s:g} s: {seen.decode(errors='replace')}")

    def stop(self) -> None:
        """SIGINT (tcpdump flushes and closes the file), SIGKILL after 10 s (then
        CaptureError); marked gone in the ledger. Sets :attr:`dropped`."""
        if not process.stop(self.proc, grace_s=10):
            raise CaptureError(f"tcpdump writing {self.path} did not stop on SIGINT")
        assert self.proc.stderr is not None
        self.dropped = dropped_by_kernel(self.proc.stderr.read().decode(errors="replace"))


def dropped_by_kernel(stderr: str) -> int:
    """Packets tcpdump's closing statistics say the kernel dropped ("N packets dropped
    by kernel"; 0 if it printed none)."""
    m = re.search(r"(\d+) packets? dropped by kernel", stderr)
    return int(m.group(1)) if m else 0
