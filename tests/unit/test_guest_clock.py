"""The guest clock option (testbed.vm) and timeouts that hold on both clocks
(testbed.hostclock), without booting anything."""

import dataclasses
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from virtme_ng import run as vng_run

from testbed import hostclock, vm
from testbed.errors import UsageError

KERNEL = Path("/boot/vmlinuz-test")
COMMAND_FILE = Path("/var/lib/optical-tcp-testbed/ledgers/guest-test.guest.sh")


def test_icount_options_parse_and_render():
    assert vm.IcountOptions.parse("") == vm.IcountOptions()
    opts = vm.IcountOptions.parse("shift=3, sleep=on")
    assert (opts.shift, opts.sleep) == (3, True)
    assert opts.qemu() == "shift=3,sleep=on"


@pytest.mark.parametrize("text, names", [("shift=11", "shift='11'"), ("shift=-1", "shift='-1'"),
                                         ("sleep=maybe", "sleep='maybe'"), ("align=on", "'align=on'"),
                                         ("shift", "'shift'")])
def test_bad_icount_options_name_key_value_and_range(text, names):
    with pytest.raises(UsageError) as exc:
        vm.IcountOptions.parse(text)
    assert names in str(exc.value) and "TESTBED_GUEST_ICOUNT" in str(exc.value)
    assert exc.value.exit_code == 2


def test_bad_clock_name_is_a_usage_error(monkeypatch):
    monkeypatch.setenv("TESTBED_GUEST_CLOCK", "virtual")
    with pytest.raises(UsageError, match="TESTBED_GUEST_CLOCK='virtual'.*realtime or icount"):
        vm.GuestConfig.from_env()


@pytest.mark.parametrize("value", ["two", "0", "-1"])
def test_bad_vcpu_count_is_a_usage_error(monkeypatch, value):
    monkeypatch.setenv("TESTBED_GUEST_CPUS", value)
    with pytest.raises(UsageError, match=f"TESTBED_GUEST_CPUS='{value}'.*1..64"):
        vm.GuestConfig.from_env()


def test_icount_by_default_with_one_vcpu_unless_told(monkeypatch):
    for var in ("TESTBED_GUEST_CPUS", "TESTBED_GUEST_CLOCK", "TESTBED_GUEST_ICOUNT"):
        monkeypatch.delenv(var, raising=False)
    cfg = vm.GuestConfig.from_env()
    assert vm.clock_label(cfg, use_kvm=False) == "icount:shift=0,sleep=off"
    assert vm.vcpus(cfg, use_kvm=False) == 1
    assert vm.vcpus(cfg, use_kvm=True) >= 1 and vm.clock_label(cfg, use_kvm=True) == "realtime"
    monkeypatch.setenv("TESTBED_GUEST_CPUS", "2")
    assert vm.vcpus(vm.GuestConfig.from_env(), use_kvm=False) == 2


def _qemu_opts(command: list[str]) -> list[str]:
    """QEMU's extra arguments in a vng command (one --qemu-opts=... element)."""
    opts = [a for a in command if a.startswith("--qemu-opts")]
    assert len(opts) == 1 and opts[0].startswith("--qemu-opts="), command
    return shlex.split(opts[0].split("=", 1)[1])


def test_qemu_gets_icount_only_under_software_emulation():
    cfg = vm.GuestConfig(cpus=1, kernel=KERNEL, clock="icount", icount=vm.IcountOptions(0, False))
    tcg = vm.vng_command(COMMAND_FILE, cfg, [], use_kvm=False)
    base = [*vm.QEMU_OPTS, *vm.CACHED_QEMU_OPTS]
    assert _qemu_opts(tcg) == [*base, "-icount", "shift=0,sleep=off"]
    assert "TESTBED_GUEST_CLOCK=icount:shift=0,sleep=off" in vm.guest_script(["true"], cfg, [], use_kvm=False)
    kvm = vm.vng_command(COMMAND_FILE, cfg, [], use_kvm=True)
    assert _qemu_opts(kvm) == base
    assert "TESTBED_GUEST_CLOCK=realtime" in vm.guest_script(["true"], cfg, [], use_kvm=True)
    rt_cfg = vm.GuestConfig(kernel=KERNEL, clock="realtime")
    assert _qemu_opts(vm.vng_command(COMMAND_FILE, rt_cfg, [], use_kvm=False)) == base
    assert "TESTBED_GUEST_CLOCK=realtime" in vm.guest_script(["true"], rt_cfg, [], use_kvm=False)


def test_virtio_serial_devices_get_two_ports_not_qemus_31():
    """Each of virtme-ng's six script streams has a virtio-serial device with one port;
    QEMU's default of 31 ports each gave its main loop ~390 eventfds to poll on every
    iteration. vng must take the option as QEMU's (with "=", not as its own -g...)."""
    assert vm.QEMU_OPTS == ("-global", "virtio-serial-pci.max_ports=2")
    cfg = vm.GuestConfig(cpus=1, kernel=KERNEL, clock="icount", icount=vm.IcountOptions(0, False))
    parser = vng_run.make_parser()
    args = parser.parse_args(vm.vng_command(COMMAND_FILE, cfg, [], use_kvm=True)[1:])
    assert shlex.split(" ".join(args.qemu_opts)) == [*vm.QEMU_OPTS, *vm.CACHED_QEMU_OPTS]


def test_the_cached_export_is_read_only_and_can_be_turned_off(monkeypatch):
    """The second 9p export of the root (the guest mounts it with cache=loose and binds
    the read-only trees over their uncached views) is read-only; with
    TESTBED_GUEST_CACHE=off neither the export nor the list of trees goes to the guest,
    and a bad value is refused naming the variable."""
    fsdev = vm.CACHED_QEMU_OPTS[vm.CACHED_QEMU_OPTS.index("-fsdev") + 1]
    assert "path=/," in fsdev and "readonly=on" in fsdev
    assert f"mount_tag={vm.CACHED_TAG}" in vm.CACHED_QEMU_OPTS[-1]
    dirs = vm.cached_dirs()
    assert dirs and all(d.startswith("/") for d in dirs) and not any("results" in d for d in dirs)
    on = vm.vng_command(COMMAND_FILE, vm.GuestConfig(kernel=KERNEL), [], use_kvm=False)
    assert "-fsdev" in _qemu_opts(on)
    assert f"OT_CACHED_DIRS={shlex.quote(':'.join(dirs))}" in vm.guest_script(["true"], vm.GuestConfig(kernel=KERNEL), [], False)
    monkeypatch.setenv("TESTBED_GUEST_CACHE", "off")
    cfg = vm.GuestConfig.from_env()
    off_cfg = dataclasses.replace(cfg, kernel=KERNEL)
    assert "-fsdev" not in _qemu_opts(vm.vng_command(COMMAND_FILE, off_cfg, [], use_kvm=False))
    assert "export OT_CACHED_DIRS=''\n" in vm.guest_script(["true"], off_cfg, [], use_kvm=False)
    monkeypatch.setenv("TESTBED_GUEST_CACHE", "yes")
    with pytest.raises(UsageError, match="TESTBED_GUEST_CACHE='yes': accepted on or off"):
        vm.GuestConfig.from_env()


def test_clock_choice_says_why():
    cfg = vm.GuestConfig(clock="icount", icount=vm.IcountOptions(0, False))
    label, why = vm.clock_choice(cfg, use_kvm=False, from_env=False)
    assert label == "icount:shift=0,sleep=off" and "idle time is skipped" in why
    label, why = vm.clock_choice(cfg, use_kvm=True, from_env=False)
    assert label == "realtime" and "KVM" in why
    label, why = vm.clock_choice(vm.GuestConfig(clock="realtime"), use_kvm=False, from_env=True)
    assert label == "realtime" and "TESTBED_GUEST_CLOCK" in why


def test_clock_is_realtime_outside_the_guest(monkeypatch):
    monkeypatch.delenv("TESTBED_IN_GUEST", raising=False)
    monkeypatch.setenv("TESTBED_GUEST_CLOCK", "icount:shift=0,sleep=off")
    assert hostclock.guest_clock() == "realtime" and not hostclock.virtual()
    monkeypatch.setenv("TESTBED_IN_GUEST", "1")
    assert hostclock.virtual()


class FakeHost:
    """A host clock the test moves by hand (the RTC of an instruction-counted guest)."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_deadline_waits_for_the_host_clock_when_guest_time_races(monkeypatch):
    host = FakeHost()
    monkeypatch.setattr(hostclock, "virtual", lambda: True)
    monkeypatch.setattr(hostclock, "host_seconds", host)
    d = hostclock.Deadline(0.05)
    time.sleep(0.08)             # the guest's clock passed the timeout ...
    assert not d.expired()       # ... but the host's did not: keep waiting
    host.t += 0.9
    assert not d.expired()       # whole-second RTC: one second more than asked
    host.t += 0.2
    assert d.expired()


def test_a_guest_only_deadline_does_not_wait_for_the_host_clock(monkeypatch):
    """The traffic loop's polling step belongs to the experiment: it expires on the
    guest's clock even when the host's has not moved (a stepped timeline would
    otherwise run at most one action per host second)."""
    host = FakeHost()
    monkeypatch.setattr(hostclock, "virtual", lambda: True)
    monkeypatch.setattr(hostclock, "host_seconds", host)
    d = hostclock.Deadline(0.05, guest_only=True)
    assert not d.expired()
    time.sleep(0.08)
    assert d.expired()
    assert hostclock.Deadline(0.05).virtual and not d.virtual   # the default still waits for both


def test_the_traffic_loop_polls_on_the_guest_clock(monkeypatch):
    """TrafficRun.poll hands the agent a guest-only deadline."""
    from testbed.traffic.run import TrafficRun

    seen = []
    run = TrafficRun.__new__(TrafficRun)
    run._open = True
    monkeypatch.setattr(TrafficRun, "_await", lambda self, ev, deadline: seen.append(deadline))
    monkeypatch.setattr(TrafficRun, "done", lambda self: False)
    monkeypatch.setattr(hostclock, "virtual", lambda: True)
    run.poll(0.05)
    assert len(seen) == 1 and seen[0].timeout_s == 0.05 and not seen[0].virtual


def test_deadline_waits_for_the_guest_clock_when_it_is_slow(monkeypatch):
    host = FakeHost()
    monkeypatch.setattr(hostclock, "virtual", lambda: True)
    monkeypatch.setattr(hostclock, "host_seconds", host)
    d = hostclock.Deadline(5.0)
    host.t += 60                 # the host moved on, the busy guest's clock did not
    assert not d.expired() and d.guest_remaining() > 4


def test_run_times_out_on_both_clocks_and_kills(monkeypatch):
    host = FakeHost()
    monkeypatch.setattr(hostclock, "virtual", lambda: True)
    monkeypatch.setattr(hostclock, "host_seconds", host)
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        # the host clock jumps 10 s per look: the 0.3 s timeout must still wait 0.3 s of guest time
        monkeypatch.setattr(hostclock, "host_seconds", lambda: host.__setattr__("t", host.t + 10) or host.t)
        hostclock.run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.3)
    assert 0.3 <= time.monotonic() - t0 < 10


def test_run_returns_output_and_feeds_input(monkeypatch):
    monkeypatch.setattr(hostclock, "virtual", lambda: True)
    cp = hostclock.run([sys.executable, "-c", "import sys; print(sys.stdin.read().upper())"], timeout=30,
                       input="abc")
    assert (cp.returncode, cp.stdout.strip()) == (0, "ABC")


def test_vm_placement_runs_natively_in_the_guest_without_the_vm_flag(monkeypatch, tmp_path):
    """`testbed run X --vm` re-runs X in the guest with --native: passing --vm along made
    the guest's argparse refuse the pair (exit 2) before this was fixed."""
    from testbed import definition, runner

    seen = {}

    def fake_guest(argv, *, rw_dirs, ledger_id):
        seen["argv"] = argv
        return 0

    monkeypatch.setattr(vm, "run_in_guest", fake_guest)
    defn = definition.load("demo")
    argv = [sys.executable, "-m", "testbed", "run", "demo", "--vm", "--no-report"]
    code = runner.run(defn, runner.RunOptions(out=tmp_path / "out", placement="vm", report=False, argv=argv))
    assert code == 0
    inner = seen["argv"]
    assert "--vm" not in inner and "--native" in inner and inner[:5] == argv[:5]
    cli = __import__("testbed.cli", fromlist=["build_parser"])
    cli.build_parser().parse_args(inner[3:])  # the guest's command line parses


def test_communicate_feeds_input_larger_than_a_pipe_across_steps():
    """A child that reads 2 MB slowly (~1.6 s) outlives several communicate() steps
    (hostclock.STEP_S = 0.5 s): every byte must
    still reach it and stdin be closed (a stepped Popen.communicate(input) stopped
    writing after its first timeout and the child waited until the deadline)."""
    import subprocess
    import sys

    reader = ("import sys, time\nn = 0\nwhile True:\n    b = sys.stdin.buffer.read(65536)\n"
              "    if not b:\n        break\n    n += len(b)\n    time.sleep(0.05)\nprint(n)\n")
    data = "x" * (2 * 1024 * 1024)
    with subprocess.Popen([sys.executable, "-c", reader], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:
        out, err = hostclock.communicate(proc, data, timeout_s=60)
    assert (proc.returncode, out.strip()) == (0, str(len(data))), err
