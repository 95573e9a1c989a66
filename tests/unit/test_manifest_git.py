"""The manifest's git record: a commit and a dirty flag, or an honest 'unknown'; the
machine's facts beside it."""

import re

from testbed import manifest


def test_git_info_of_this_checkout_names_its_commit():
    info = manifest.git_info()
    assert re.fullmatch(r"[0-9a-f]{40}", info["sha"]) and isinstance(info["dirty"], bool)


def test_git_info_says_unknown_rather_than_clean_when_git_cannot_answer(monkeypatch, tmp_path):
    monkeypatch.setattr(manifest, "REPO", tmp_path / "not-a-repo")
    assert manifest.git_info() == {"sha": "unknown", "dirty": None}


def test_a_guest_takes_the_hosts_reading_and_ignores_a_malformed_one(monkeypatch, tmp_path):
    """testbed.vm gives the guest the host's reading (TESTBED_GIT): the guest's manifest
    records it without running git (slow over 9p); a malformed value is not trusted and
    git is asked as before."""
    sha = "0123456789abcdef0123456789abcdef01234567"
    for info in ({"sha": sha, "dirty": True}, {"sha": sha, "dirty": False}, {"sha": "unknown", "dirty": None}):
        monkeypatch.setenv(manifest.GIT_ENV, manifest.git_env(info))
        monkeypatch.setattr(manifest, "REPO", tmp_path / "not-a-repo")   # git would say unknown
        assert manifest.git_info() == info
    for bad in ("", sha, f"{sha}:2", f"{sha[:-1]}:0", f"{sha}x:1"):
        monkeypatch.setenv(manifest.GIT_ENV, bad)
        assert manifest.git_info() == {"sha": "unknown", "dirty": None}, bad


def test_the_guest_command_carries_the_hosts_reading():
    from testbed import vm

    cfg = vm.GuestConfig(kernel=manifest.REPO / "no-kernel-needed")
    sha = "0123456789abcdef0123456789abcdef01234567"
    with_git = vm.guest_script(["true"], cfg, [], use_kvm=False, git=f"{sha}:0")
    assert f"export {manifest.GIT_ENV}={sha}:0\n" in with_git
    assert manifest.GIT_ENV not in vm.guest_script(["true"], cfg, [], use_kvm=False)


def test_the_cpu_model_is_the_first_model_name_or_none():
    text = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor  \nflags\t: fpu\n\nmodel name\t: other\n"
    assert manifest.cpu_model(text) == "Intel(R) Xeon(R) Processor"
    assert manifest.cpu_model("processor\t: 0\nCPU part\t: 0xd0c\n") is None   # e.g. arm64's cpuinfo


def test_a_guest_without_the_hosts_facts_records_none_not_its_own(monkeypatch):
    """In a guest the machine's facts come only from the host (TCG shows QEMU's CPU): a
    missing or malformed value is recorded as unknown (None), never replaced by the
    guest's view; on the host they are read directly."""
    monkeypatch.setenv("TESTBED_IN_GUEST", "1")
    for bad in (None, "", "not json", "[1, 2]"):
        if bad is None:
            monkeypatch.delenv(manifest.HOST_ENV, raising=False)
        else:
            monkeypatch.setenv(manifest.HOST_ENV, bad)
        assert manifest.where()["host"] is None, bad
    monkeypatch.delenv("TESTBED_IN_GUEST")
    assert manifest.where()["host"] == manifest.host_facts()
