"""Packet captures on named links (``--pcap h1-s1``), written into the results folder."""

from __future__ import annotations

import selectors
import signal
import subprocess
import time
from pathlib import Path

from testbed import cmd
from testbed.errors import DefinitionError, TestbedError
from testbed.net import Emulation
from testbed import hostclock


class CaptureError(TestbedError):
    """tcpdump did not start or did not stop cleanly."""


class Capture:
    """tcpdump on one end of a link; ``stop()`` ends it with SIGINT so the file is complete."""

    def __init__(self, emu: Emulation, link: str, path: Path, snaplen: int = 256) -> None:
        if link not in emu.links:
            raise DefinitionError("--pcap", link, "a link of this topology: " + ", ".join(sorted(emu.links)))
        (intf, netns) = emu.links[link][0]
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        argv = ["tcpdump", "-i", intf, "-U", "-s", str(snaplen), "-w", str(path)]
        node = emu.nodes[link.split("-")[0]]
        # Root-namespace ends (OVS ports) are captured from the root namespace.
        if netns is None:
            seq = emu.ledger.add("process", argv=argv, group=True, stop_signal=int(signal.SIGINT))
            self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
            emu.ledger.update(seq, pid=self.proc.pid, start_time=cmd.process_start_time(self.proc.pid))
        else:
            self.proc = node.popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   stop_signal=int(signal.SIGINT))
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
        """SIGINT (tcpdump flushes and closes the file), then wait up to 10 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                hostclock.wait(self.proc, 10)
            except subprocess.TimeoutExpired as exc:
                self.proc.kill()
                raise CaptureError(f"tcpdump writing {self.path} did not stop on SIGINT") from exc
