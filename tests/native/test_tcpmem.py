"""The real kernel's global tcp_mem: raised for a block and put back, and put back by the
ledger's teardown after a run killed inside the block (what ``testbed clean`` runs)."""

from helpers import require_root

from testbed import tcpmem
from testbed.ledger import Ledger


def test_tcp_mem_raised_and_put_back(tmp_path, monkeypatch):
    require_root()
    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path / "state"))
    before = tcpmem.read()
    need = (before[2] + 1000) * tcpmem.page_size()
    led = Ledger.create("tcpmem-native")
    try:
        with tcpmem.at_least(led, need) as value:
            assert tcpmem.read() == value == (before[2] + 1000,) * 3
        assert tcpmem.read() == before
        block = tcpmem.at_least(led, need)
        block.__enter__()      # killed inside the block
        assert tcpmem.read() != before
        assert Ledger.load(led.path).teardown() == []
        assert tcpmem.read() == before
    finally:
        if tcpmem.read() != before:
            tcpmem._write(before)
