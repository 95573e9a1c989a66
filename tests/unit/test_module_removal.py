"""The ledger's module teardown (testbed.cc.modules): it waits, bounded, for a module's
users to go (a killed run's namespaces are destroyed asynchronously, their qdiscs
still holding the module), then rmmods it; a module still in use then is left loaded."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from testbed.cc import modules


def entry(name: str = "sch_obsburst"):
    return SimpleNamespace(attrs={"name": name})


def test_waits_for_the_reference_count_to_reach_zero_then_rmmods(monkeypatch):
    counts = iter([2, 1, 0, None])
    seen, removed = [], []

    def refcount(name):
        c = next(counts)
        seen.append(c)
        return c

    monkeypatch.setattr(modules, "refcount", refcount)
    monkeypatch.setattr(modules.time, "sleep", lambda s: None)
    monkeypatch.setattr(modules.cmd, "run", lambda argv, **kw: removed.append(argv))
    modules._remove_module(entry(), None)  # type: ignore[arg-type]
    assert seen == [2, 1, 0] and removed == [["rmmod", "sch_obsburst"]]


def test_a_module_still_in_use_after_the_wait_is_left_loaded_with_a_warning(monkeypatch, caplog):
    removed = []
    monkeypatch.setattr(modules, "refcount", lambda name: 1)
    monkeypatch.setattr(modules, "MODULE_RELEASE_TIMEOUT_S", 0.05)
    monkeypatch.setattr(modules.cmd, "run", lambda argv, **kw: removed.append(argv))
    modules._remove_module(entry(), None)  # type: ignore[arg-type]
    assert not removed
    assert "sch_obsburst is still in use (reference count 1)" in caplog.text


def test_a_module_already_gone_is_nothing_to_do(monkeypatch):
    monkeypatch.setattr(modules, "refcount", lambda name: None)
    monkeypatch.setattr(modules.cmd, "run", lambda argv, **kw: pytest.fail("rmmod of a module not loaded"))
    modules._remove_module(entry(), None)  # type: ignore[arg-type]
