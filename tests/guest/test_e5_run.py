"""E5 end to end in the full-kernel guest, through `testbed run`: TCP Reno over NSFNET
whose core nodes have an optical RAM (family e5-optram), at scale 400 (2.5 Mbit/s
links, 4 flows), 3 s of paper time, the last second measured, D = 20.

Points: output buffering with B = 0 (bufferless) and B = 15 kB (ten packets) with
standard senders, and B = 15 kB with paced senders. Checked:

* every point ran its flows and measured goodput over the window; the core decided on
  packets in the window;
* B = 0 buffers nothing (every contended packet dropped) and B = 15 kB buffers (the
  architecture is the point's, reconfigured on the kept fabric);
* the paced point's senders ran paced-reno with TCP's own pacer and the standard ones
  reno, both with the window limit of 20 segments (profiles.json);
* the core admission stayed exact (no occupancy overflow) and the report was written.
About 10 minutes under TCG (not measured yet).
"""

from __future__ import annotations

import json

import pytest
from helpers import require_features, require_root, run_testbed, summary_rows


from testbed.units import Dim, Quantity

#: a study-like run of minutes of guest time: `make test-all`, not CI's `make test`
pytestmark = pytest.mark.long

DEFINITION = """
[experiment]
name = "e5-run"
family = "e5-optram"
[params]
arch = "ob"
scale = 400
flows = 1586
duration = "3 s"
window = "1 s"
bin = "500 ms"
[sweep]
buffer = ["0 B", "15 kB"]
pacing = ["none", "tcp"]
[run]
reps = 1
seed = 3
tdf = 20
"""


def test_e5_runs_end_to_end_with_the_points_architecture_and_senders(tmp_path):
    require_root()
    require_features("netns", "fq", "clsact-bpf", "btf", "modules")
    (tmp_path / "e5-run.toml").write_text(DEFINITION)
    out = tmp_path / "out"
    run_testbed("run", str(tmp_path / "e5-run.toml"), "--native", "--out", str(out), timeout=3600)
    rows = {(Quantity.parse(r["buffer"], Dim.SIZE).si, r["pacing"]): r for r in summary_rows(out)}
    assert len(rows) == 4, rows.keys()
    for (b, pacing), r in rows.items():
        point = out / "points" / r["point"]
        assert int(r["flows_started"]) == 4 and int(r["flows_failed"]) == 0, r
        assert int(r["flows_measured"]) >= 1 and float(r["goodput_per_flow_Bps"]) > 0, r
        assert int(r["core_packets"]) > 0 and int(r["occ_overflow"]) == 0, r
        profiles = json.loads((point / "profiles.json").read_text())
        host = profiles["h0"]
        assert host["max_window"]["segments"] == 20, host
        # timestamps off: 1460 B per segment, as the records count
        assert host["sysctls"]["net.ipv4.tcp_timestamps"] == "0", host
        assert host["max_window"]["mss_bytes"] == 1460 and host["max_window"]["bytes"] == 20 * 1460, host
        if pacing == "tcp":
            assert host["profile"] == "paced-reno" and host["pacer"] == "tcp", host
        else:
            assert host["profile"] == "reno", host
        buffered = float(r["core_buffered_fraction"])
        assert (buffered == 0.0) if b == 0 else (buffered > 0.0), r
    assert (out / "report" / "index.html").exists()
