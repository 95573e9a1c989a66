"""In the full-kernel guest: a SIGKILLed run (kernel OVS datapath, netem) followed by
`testbed clean` leaves nothing of that run; pre-existing veth and OVS bridge survive."""

from helpers import killed_run_then_clean, require_features, require_root


def test_killed_guest_run_is_cleaned(tmp_path):
    require_root()
    require_features("netns", "htb", "netem", "clsact-bpf", "ovs-kernel")
    killed_run_then_clean(tmp_path, datapath="system", extra_sets=["--set", "delay=10 ms"])
