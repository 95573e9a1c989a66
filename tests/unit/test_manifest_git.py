"""The manifest's git record: a commit and a dirty flag, or an honest 'unknown'."""

import re

from testbed import manifest


def test_git_info_of_this_checkout_names_its_commit():
    info = manifest.git_info()
    assert re.fullmatch(r"[0-9a-f]{40}", info["sha"]) and isinstance(info["dirty"], bool)


def test_git_info_says_unknown_rather_than_clean_when_git_cannot_answer(monkeypatch, tmp_path):
    monkeypatch.setattr(manifest, "REPO", tmp_path / "not-a-repo")
    assert manifest.git_info() == {"sha": "unknown", "dirty": None}
