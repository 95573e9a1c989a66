"""A SIGKILLed native run followed by `testbed clean` leaves nothing of that run, and
leaves alone a veth and an OVS bridge that existed before (OVS userspace datapath)."""

from helpers import killed_run_then_clean, require_features, require_root


def test_killed_native_run_is_cleaned(tmp_path):
    require_root()
    require_features("netns", "htb", "clsact-bpf", "ovs-userspace")
    killed_run_then_clean(tmp_path, datapath="netdev", extra_sets=["--set", "delay=0 ms"])
