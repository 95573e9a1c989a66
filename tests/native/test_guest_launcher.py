"""A SIGKILLed `testbed guest` (the host's launcher, testbed.vm) followed by `testbed
clean`: the guest's QEMU and the command file the launcher wrote for it go with its
ledger. Needs only the launch (QEMU, the distro kernel), not a booted guest."""

import os
import signal
import subprocess
import sys
import time

import pytest

from helpers import REPO, require_root, run_testbed
from testbed import cmd, hostclock
from testbed.features import distro_kernel
from testbed.ledger import Ledger, LedgerError, ledger_dir


def test_killed_guest_launcher_is_cleaned():
    require_root()
    if distro_kernel() is None:
        pytest.skip("no distro kernel with modules in /boot (make setup installs linux-image-amd64)")
    env = dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}:{os.environ.get('PATH', '')}")
    proc = subprocess.Popen([sys.executable, "-m", "testbed", "guest", "--", "sleep", "600"], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = hostclock.Deadline(120)
        qemu = None
        while qemu is None and not deadline.expired():
            assert proc.poll() is None, f"testbed guest ended early (exit {proc.returncode})"
            for path in ledger_dir().glob(f"guest-{proc.pid}-1-{proc.pid}-*.jsonl"):
                try:
                    led = Ledger.load(path)
                except LedgerError:         # the header line is still being written
                    continue
                qemu = next((e.attrs for e in led.live() if e.resource == "guest" and "pid" in e.attrs), None)
                files = [e.attrs["path"] for e in led.live() if e.resource == "file"]
            time.sleep(0.2)
        assert qemu is not None, "no guest entry with a pid in the launcher's ledger in 120 s"
        assert len(files) == 1 and files[0].endswith(".guest.sh") and os.path.exists(files[0]), files
        assert "sleep 600" in open(files[0]).read()
        proc.send_signal(signal.SIGKILL)
        hostclock.wait(proc, 10)
        # the kill left the guest running (so this test can fail)
        assert cmd.process_start_time(qemu["pid"]) == qemu["start_time"]
        out = run_testbed("clean").stdout
        assert path.stem in out, out
        assert cmd.process_start_time(qemu["pid"]) != qemu["start_time"]
        assert not os.path.exists(files[0]) and not path.exists()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
