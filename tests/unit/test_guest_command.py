"""How a guest gets its command (testbed.vm): a command file that guest-init.sh sources,
not the kernel's command line (2 047 bytes on x86, where virtme-ng would put the command
in base64; a longer line lost virtme-ng's ``init=`` and the guest hung). Without booting:
the file is sourced by the host's /bin/sh (dash on Debian, as in the guest)."""

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from testbed import vm
from testbed import manifest
from testbed.manifest import GIT_ENV, HOST_ENV

KERNEL = Path("/boot/vmlinuz-test")
ENV_KEYS = ("OT_GUEST_CWD", "OT_RW_DIRS", "TESTBED_GUEST_ACCEL", "TESTBED_GUEST_CLOCK", "OT_CACHED_DIRS", GIT_ENV,
            HOST_ENV)


def _sourced(script: str, tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    """(positional parameters, environment) after POSIX sh sources ``script``, as
    guest-init.sh does."""
    f = tmp_path / "cmd.guest.sh"
    f.write_text(script)
    show = '. "$0" && printf "%s\\0" "$#" "$@" && for k in ' + " ".join(ENV_KEYS) + \
        '; do printenv "$k" >/dev/null && printf "%s=%s\\0" "$k" "$(printenv "$k")"; done'
    out = subprocess.run(["/bin/sh", "-c", show, str(f)], capture_output=True, check=True, env={}).stdout
    fields = out.decode().split("\0")[:-1]
    n = int(fields[0])
    return fields[1:1 + n], dict(x.split("=", 1) for x in fields[1 + n:])


def test_a_long_awkward_command_comes_back_exactly(tmp_path):
    """Arguments with quotes, $, backticks, newlines, spaces, non-ASCII, and 6 kB in all
    (three times what the kernel's command line could hold) reach "$@" unchanged, with
    the environment guest-init.sh needs."""
    argv = ["env", "COLUMNS=400", "python3", "-c", "print('it''s $HOME `id`')", "a b\nc", "é–x", "",
            *[f"tests/guest/test_{i:03d}_with_a_long_name.py" for i in range(150)]]
    assert len(" ".join(argv)) > 6000
    cfg = vm.GuestConfig(kernel=KERNEL, clock="icount")
    rw = [tmp_path / "results dir"]
    rw[0].mkdir()
    sha = "0123456789abcdef0123456789abcdef01234567"
    got, env = _sourced(vm.guest_script(argv, cfg, rw, use_kvm=False, git=f"{sha}:1"), tmp_path)
    assert got == argv
    assert env["OT_RW_DIRS"] == ":".join(sorted({str(vm.REPO), str(rw[0].resolve())}))
    assert env["TESTBED_GUEST_ACCEL"] == "tcg" and env["TESTBED_GUEST_CLOCK"].startswith("icount:")
    assert env[GIT_ENV] == f"{sha}:1" and env["OT_CACHED_DIRS"] == ":".join(vm.cached_dirs())


def test_the_guests_manifest_names_the_machine(tmp_path, monkeypatch):
    """Under TCG the guest sees QEMU's CPU, not the machine's: the command file carries
    the host's facts, and the guest's manifest records exactly what the host read."""
    _, env = _sourced(vm.guest_script(["true"], vm.GuestConfig(kernel=KERNEL), [], use_kvm=False), tmp_path)
    monkeypatch.setenv("TESTBED_IN_GUEST", "1")
    monkeypatch.setenv(HOST_ENV, env[HOST_ENV])
    host = manifest.where()["host"]
    assert host == manifest.host_facts() and host["cpus"] >= 1 and host["kernel"]


def test_the_kernel_command_line_carries_only_the_files_name(tmp_path):
    """virtme-ng's --exec (which it puts on the kernel's command line) is guest-init.sh
    and the command file, whatever the command."""
    command_file = Path("/var/lib/optical-tcp-testbed/ledgers/guest-1-2-3.guest.sh")
    vng = vm.vng_command(command_file, vm.GuestConfig(kernel=KERNEL), [tmp_path], use_kvm=False)
    assert shlex.split(vng[vng.index("--exec") + 1]) == [str(vm.INIT), str(command_file)]
    assert f"--rwdir={tmp_path.resolve()}" in vng and f"--rwdir={vm.REPO}" in vng


def test_guest_init_refuses_a_missing_command_file(tmp_path):
    """guest-init.sh stops (exit 70) naming what it got when the file is not readable
    (e.g. a state directory the guest cannot see), before it mounts anything. Its PATH
    has only uname: were the check gone, the script could mount nothing on this host."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "uname").symlink_to(shutil.which("uname"))
    r = subprocess.run(["/bin/sh", str(vm.INIT), str(tmp_path / "absent.guest.sh")], capture_output=True,
                       text=True, env={"PATH": str(bin_dir)})
    assert r.returncode == 70 and "absent.guest.sh" in r.stderr and "state directory" in r.stderr
    assert r.stdout.startswith("OT-GUEST-UP ")


def test_a_launch_that_fails_before_the_guest_runs_leaves_no_file(tmp_path, monkeypatch):
    """QEMU that cannot be started: the error propagates, and neither the ledger nor the
    command file stays behind."""
    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path / "state"))

    def refuse(*args, **kwargs):
        raise FileNotFoundError("no such program: vng")

    monkeypatch.setattr(vm.process, "spawn", refuse)
    with pytest.raises(FileNotFoundError, match="vng"):
        vm._boot_once("set -- true\n", vm.GuestConfig(kernel=KERNEL), [], False, {}, "guest-test")
    assert list((tmp_path / "state" / "ledgers").iterdir()) == []


@pytest.mark.parametrize("where", ["/var/tmp/ot-state-x", "/run/ot-state-x", "link"])
def test_a_state_directory_the_guest_cannot_read_is_refused_before_anything_starts(tmp_path, monkeypatch, where):
    """A state directory below a folder the guest mounts afresh (directly, or through a
    symlink) is refused with UsageError (exit 2) naming TESTBED_STATE_DIR, its value
    and the default; no ledger, no command file, no QEMU, nothing created there."""
    if where == "link":
        (tmp_path / "state").symlink_to("/var/tmp/ot-state-link-x")
        state = str(tmp_path / "state")
    else:
        state = where
    monkeypatch.setenv("TESTBED_STATE_DIR", state)

    def spawn(*args, **kwargs):
        raise AssertionError("a guest was started")

    monkeypatch.setattr(vm.process, "spawn", spawn)
    with pytest.raises(vm.UsageError) as err:
        vm.run_in_guest(["true"], cfg=vm.GuestConfig(kernel=KERNEL))
    msg = str(err.value)
    assert f"TESTBED_STATE_DIR={state!r}" in msg and "/var/lib/optical-tcp-testbed" in msg, msg
    assert err.value.exit_code == 2
    assert not Path(state).resolve().exists()


def test_the_default_state_directory_and_a_tmp_one_are_readable_by_the_guest(tmp_path):
    vm.check_guest_reads(Path(vm.cmd.DEFAULT_STATE_DIR))
    vm.check_guest_reads(tmp_path / "state")
