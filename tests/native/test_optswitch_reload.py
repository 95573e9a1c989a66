"""Reloading a node's optswitch programs (testbed.bpf.reload_nodes, what
OpticalFabric.reconfigure does when a node's architecture starts or stops reading what
waits in it) against the real kernel: tc filters on a veth in a namespace, real packets.

An ob node whose programs were loaded without ``tb_reads_waiting`` drops a packet that
finds its output busy and counts it unmodelled (the egress has not scanned what waits for
it); after the reload such packets are admitted into the buffer, and the device holds
only the new filter in each direction."""

from __future__ import annotations

import re
import socket
import time
import uuid

import pytest

from helpers import require_root
from testbed import bpf, cmd, nsops
from testbed.optical import layout, maps
from testbed.optical.architectures import REGISTRY

NODE = 3
ADDR, PEER = "10.213.0.1", "10.213.0.2"


@pytest.fixture
def netns():
    require_root()
    name = f"tbreload{uuid.uuid4().hex[:6]}"
    cmd.run(["ip", "netns", "add", name])
    try:
        nsops.add_veth("va", name, "vb", name)
        nsops.configure_link("va", name, offloads=False, arp=False, up=True)
        nsops.configure_link("vb", name, offloads=False, arp=False, up=True)
        nsops.add_address("va", name, f"{ADDR}/24")
        yield name
    finally:
        nsops.delete_netns(name)


def _send(ns: str, n: int) -> None:
    """``n`` UDP datagrams from ADDR out of va (to PEER)."""
    def go() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for _ in range(n):
                s.sendto(b"x" * 100, (PEER, 9))
    nsops.call_in(ns, go)


def _filters(ns: str, direction: str) -> list[int]:
    """The program ids of the bpf filters on va's ``direction``."""
    out = cmd.run(["tc", "filter", "show", "dev", "va", direction], netns=ns).stdout
    return [int(i) for i in re.findall(r"\bid (\d+) name ", out)]


def _port0(pin_dir) -> dict:
    return maps.read_states(pin_dir, {NODE: 1})[NODE]["ports"][0]


@pytest.mark.root
def test_a_reload_swaps_the_programs_and_the_new_rodata_decides(netns, pin_dir):
    (old,) = bpf.attach_nodes(None, pin_dir, [bpf.NodeAttachment(NODE, netns, ["va"], True, reads_waiting=False)])
    ifx = {r["dev"]: r["ifindex"] for r in old}
    # 100 kbit/s: a 142 B frame holds the output 11 ms, so the next two find it busy
    maps.configure_node(pin_dir, NODE, REGISTRY.assignment("ob", {"buffer_bytes": 15000}),
                        [layout.PortConfig(layout.ps_per_byte(1e5))], ifindex_of_port={0: ifx["va"]})
    _send(netns, 3)
    before = _port0(pin_dir)
    assert (before["cut"], before["dropped"], before["nocfg"], before["buffered"]) == (1, 2, 2, 0), before

    (new,) = bpf.reload_nodes(None, pin_dir, [(bpf.NodeAttachment(NODE, netns, ["va"], True, reads_waiting=True),
                                                old)], generation=1)
    assert sorted(r["dir"] for r in new) == ["egress", "ingress"]
    for o, w in zip(old, new):
        assert (w["dev"], w["dir"]) == (o["dev"], o["dir"]) and w["prog_id"] != o["prog_id"]
        assert _filters(netns, w["dir"]) == [w["prog_id"]]        # the old one detached
    assert (pin_dir / "progs" / f"node{NODE}-r1" / bpf.OPTSW_EGRESS).exists()
    deadline = time.monotonic() + 5  # the output frees 11 ms after the first packet (bpf_ktime: CLOCK_MONOTONIC)
    while time.monotonic_ns() <= before["out_free_ns"]:
        assert time.monotonic() < deadline, before
        time.sleep(0.001)
    _send(netns, 3)
    after = _port0(pin_dir)
    assert (after["cut"], after["dropped"], after["nocfg"], after["buffered"]) == (2, 2, 2, 2), after


@pytest.mark.root
def test_a_reload_refuses_bad_arguments_before_loading(pin_dir):
    with pytest.raises(bpf.BpfError, match="generation 0"):
        bpf.reload_nodes(None, pin_dir, [(bpf.NodeAttachment(NODE, None, ["va"], True), [{}])], generation=0)
    with pytest.raises(bpf.BpfError, match="node 3: nothing attached"):
        bpf.reload_nodes(None, pin_dir, [(bpf.NodeAttachment(NODE, None, ["va"], True), [])], generation=1)
