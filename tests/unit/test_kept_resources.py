"""KeptResources: objects kept across points, replaced by key, closed newest first."""

import contextlib

import pytest

from testbed.context import KeptResources


def _tracked(log: list[str], name: str, fail_close: bool = False):
    @contextlib.contextmanager
    def cm():
        log.append(f"open {name}")
        try:
            yield name
        finally:
            log.append(f"close {name}")
            if fail_close:
                raise RuntimeError(f"close {name} failed")
    return cm


def test_same_key_reuses_and_new_key_replaces_dependents_first():
    log: list[str] = []
    kept = KeptResources()
    assert kept.get("net", 1, _tracked(log, "net1")) == "net1"
    assert kept.get("prof", "a", _tracked(log, "profA")) == "profA"
    assert kept.get("net", 1, _tracked(log, "unused")) == "net1"
    assert kept.get("prof", "a", _tracked(log, "unused")) == "profA"
    assert log == ["open net1", "open profA"]
    kept.get("prof", "b", _tracked(log, "profB"))          # only the profiles change
    assert log[2:] == ["close profA", "open profB"]
    kept.get("net", 2, _tracked(log, "net2"))              # the net changes: profiles go first
    assert log[4:] == ["close profB", "close net1", "open net2"]
    kept.drop()
    assert log[-1] == "close net2"


def test_drop_closes_all_even_when_one_close_fails():
    log: list[str] = []
    kept = KeptResources()
    kept.get("net", 1, _tracked(log, "net"))
    kept.get("prof", 1, _tracked(log, "prof", fail_close=True))
    with pytest.raises(RuntimeError, match="close prof failed"):
        kept.drop()
    assert log[-2:] == ["close prof", "close net"]
    kept.drop()  # nothing left: no error
