"""Fixtures shared by all tiers (helper functions are in helpers.py)."""

import os
import uuid

import pytest

from testbed import bpf


@pytest.fixture
def pin_dir():
    """A fresh BPF pin dir of this test, removed afterwards (and the pin root if empty)."""
    path = bpf.PIN_ROOT / f"pytest-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        yield path
    finally:
        bpf.remove_pin_dir(path)
        try:
            bpf.PIN_ROOT.rmdir()  # only if no other run uses it
        except OSError:
            pass
