"""``testbed clean``: remove what earlier (killed) runs left, as recorded in their ledgers.

A ledger written by another process may name any resource, so this module imports every
module that owns one (each registers its resource's teardown with
:func:`testbed.ledger.register` when imported): after ``import testbed.clean`` every
teardown is registered, whatever else the process imported. The owners import the
ledger, never this module, so there is no cycle.
"""

from __future__ import annotations

from testbed import bpf, ledger, nsops, ovs, process, tcpmem, vm
from testbed.cc import modules

#: the modules that register ledger teardowns (files: testbed.ledger)
OWNERS = (ledger, process, nsops, ovs, modules, vm, bpf, tcpmem)


def clean(*, include_running: bool = False) -> tuple[list[str], list[str], list[str]]:
    """Tear down the ledgers of runs that no longer run (with ``include_running`` all of
    them); returns (cleaned, skipped, errors) texts, one per ledger or failed object.
    An object whose resource is unknown is an error naming it; the rest of its ledger
    is still removed and the ledger kept."""
    cleaned, skipped, errors = [], [], []
    for led in ledger.all_ledgers():
        if led.owner_alive() and not include_running:
            skipped.append(f"{led.run_id}: still running (pid {led.header.get('pid')})")
            continue
        n = len(led.live())
        errs = led.teardown()
        if errs:
            errors.extend(f"{led.run_id}: {e}" for e in errs)
        else:
            cleaned.append(f"{led.run_id}: removed {n} object(s)")
    return cleaned, skipped, errors
