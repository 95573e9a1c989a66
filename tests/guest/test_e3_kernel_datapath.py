"""E3 integration in the full-kernel guest: the on-demand scenario of
``tests/e3_scenarios.py`` on the OVS kernel datapath (``datapath=system``), which the
host kernel lacks (the native tier runs every scenario on the userspace datapath).

The UT scenario is not repeated here: under software emulation (TCG) one
reconfiguration takes 180-600 ms, longer than its 0.4 s share, so its timing checks
cannot hold, and a longer share would cost the guest tier four more minutes. Run once
by hand on the kernel datapath it showed the stranding (2 retransmissions without moves,
386 with UT); docs/e3.md has the numbers."""

from __future__ import annotations

from e3_scenarios import e3_ledger, on_demand_scenario


def test_on_demand_on_the_kernel_datapath(tmp_path):
    with e3_ledger("ovs-kernel") as ledger:
        on_demand_scenario(ledger, tmp_path, "system")
