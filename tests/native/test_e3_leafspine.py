"""E3 integration natively (root, OVS userspace datapath): the scenarios of
``tests/e3_scenarios.py`` on ``datapath=netdev``. The guest tier runs them on the kernel
datapath (tests/guest/test_e3_kernel_datapath.py)."""

from __future__ import annotations

import pytest

from e3_scenarios import e3_ledger, on_demand_scenario, reconnect_scenario, ut_scenario


@pytest.fixture
def ledger():
    with e3_ledger("ovs-userspace") as led:
        yield led


def test_on_demand_elephant_crosses_the_oss_and_mice_do_not(ledger, tmp_path):
    on_demand_scenario(ledger, tmp_path, "netdev")


def test_ut_moves_the_circuit_every_share_and_strands_packets(ledger, tmp_path):
    ut_scenario(ledger, tmp_path, "netdev")


def test_a_switch_that_reconnects_gets_the_applied_state_back(ledger, tmp_path):
    reconnect_scenario(ledger, tmp_path, "netdev")
