"""testbed.tcpmem: the global TCP memory limit raised for a run, put back after it (also
by the ledger after a killed run), never lowered, never put back over someone else's value."""

import pytest

from testbed import nsops, tcpmem
from testbed.ledger import Ledger

PAGE = tcpmem.page_size()


@pytest.fixture
def sysctl(tmp_path, monkeypatch):
    """A fake root-namespace tcp_mem: {'value': text}; writes recorded in order."""
    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path / "state"))
    box = {"value": "100 200 300", "writes": []}

    def read(netns, key):
        assert netns is None and key == tcpmem.KEY
        return box["value"]

    def write(netns, key, value):
        assert netns is None and key == tcpmem.KEY
        box["writes"].append(value)
        box["value"] = value

    monkeypatch.setattr(nsops, "sysctl_read", read)
    monkeypatch.setattr(nsops, "sysctl_write", write)
    return box


def test_raised_rounds_up_to_pages_and_never_lowers():
    assert tcpmem.raised((100, 200, 300), 250 * PAGE + 1) == (251, 251, 300)
    assert tcpmem.raised((100, 200, 300), 0) == (100, 200, 300)
    assert tcpmem.raised((10, 20, 30), 1000 * PAGE) == (1000, 1000, 1000)
    with pytest.raises(ValueError):
        tcpmem.raised((1, 2, 3), -1)


def test_raised_for_the_block_and_put_back(sysctl):
    led = Ledger.create("t1")
    with tcpmem.at_least(led, 1000 * PAGE) as value:
        assert value == (1000, 1000, 1000)
        assert sysctl["value"] == "1000 1000 1000"
        (entry,) = led.live()
        assert entry.resource == "sysctl" and entry.attrs["old"] == [100, 200, 300]
    assert sysctl["value"] == "100 200 300"
    assert led.live() == []


def test_enough_already_changes_nothing(sysctl):
    led = Ledger.create("t2")
    with tcpmem.at_least(led, 150 * PAGE) as value:
        assert value == (150, 200, 300)
    assert sysctl["writes"] == ["150 200 300", "100 200 300"]
    sysctl["writes"].clear()
    with tcpmem.at_least(led, 200 * PAGE) as value:
        assert value == (200, 200, 300)
    with tcpmem.at_least(led, 100 * PAGE) as value:   # below every threshold: untouched
        assert value == (100, 200, 300)
    assert sysctl["writes"] == ["200 200 300", "100 200 300"]


def test_a_value_changed_by_someone_else_is_left_alone(sysctl):
    led = Ledger.create("t3")
    with tcpmem.at_least(led, 1000 * PAGE):
        sysctl["value"] = "5000 6000 7000"
    assert sysctl["value"] == "5000 6000 7000"


def test_killed_run_is_put_back_by_its_ledger(sysctl):
    led = Ledger.create("t4")
    block = tcpmem.at_least(led, 1000 * PAGE)
    block.__enter__()          # the run dies inside the block: no exit
    assert sysctl["value"] == "1000 1000 1000"
    errors = Ledger.load(led.path).teardown()
    assert errors == []
    assert sysctl["value"] == "100 200 300"


def test_malformed_value_is_an_error(sysctl):
    sysctl["value"] = "100 200"
    with pytest.raises(tcpmem.TcpMemError, match="not three page counts"):
        tcpmem.read()


def test_a_refused_write_leaves_nothing_to_put_back(sysctl, monkeypatch):
    def refuse(netns, key, value):
        raise nsops.NsOpsError(f"sysctl {key}={value} in the root namespace: Read-only file system")

    monkeypatch.setattr(nsops, "sysctl_write", refuse)
    led = Ledger.create("t5")
    with pytest.raises(tcpmem.TcpMemError, match="Read-only"):
        with tcpmem.at_least(led, 1000 * PAGE):
            pass
    assert led.live() == []


def test_half_of_memory_reads_memtotal(tmp_path):
    f = tmp_path / "meminfo"
    f.write_text("MemFree:  100 kB\nMemTotal:        3000000 kB\n")
    assert tcpmem.half_of_memory(str(f)) == 3000000 * 1024 // 2
    f.write_text("MemFree:  100 kB\n")
    with pytest.raises(tcpmem.TcpMemError, match="no MemTotal"):
        tcpmem.half_of_memory(str(f))
