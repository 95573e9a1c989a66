"""The manifest's git record: a commit and a dirty flag, or an honest 'unknown'."""

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
