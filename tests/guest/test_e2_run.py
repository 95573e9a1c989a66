"""E2 end to end in the full-kernel guest, through `testbed run`: TCP SACK over the OBS
path (family e2-obs) at two scales of the slow class, 2 and 4 sources (the paper's 80
/ 40 and / 20), Wm 64, Pl 0.1, 0.6 s of paper time, D = 1000.

Checked, per point:

* every burst the edge closed was announced to the core by its control packet (no
  control packet failed, no announcement overflowed the core's ring) and every
  announced burst was met by its packets;
* the core lost exactly the bursts the contract's draw loses (testbed.optical.burstloss,
  the reference, over burst ids 1..bursts at the point's seed), and the sources
  detected losses (RTO or duplicate ACKs) when bursts were lost;
* the fidelity monitor's p99 lateness is under 5 % of one 566 B frame at the scaled
  optical rate;
* the report was written with its findings table.

Across the two scales: the throughput per source is the same within its 95 % interval
(Welch, over the sources of both points) and each source has the same number of
segments per burst; the scale divides the optical rate and Lmax with the number of
sources, so each source's view of the network does not change (docs/e2.md, "Scale").
About 4 minutes under TCG.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
from helpers import require_features, require_root, run_testbed, summary_rows


from analysis.findings import welch_difference
from testbed.optical.burstloss import burst_lost

#: a study-like run of minutes of guest time: `make test-all`, not CI's `make test`
pytestmark = pytest.mark.long

DEFINITION = """
[experiment]
name = "e2-run"
family = "e2-obs"
[params]
path_class = "slow"
wm = 64
pl = 0.1
duration = "0.6 s"
warmup = "0.2 s"
bin = "10 ms"
trace_cwnd = false
[sweep]
scale = [40, 20]
[run]
reps = 1
seed = 5
tdf = 1000
"""
FRAME_BITS = 566 * 8


def per_source_bps(point: Path, warmup_s: float, end_s: float) -> list[float]:
    """Each source's payload throughput (paper bit/s) over (warmup, end] from its series."""
    got: dict[str, int] = {}
    with open(point / "throughput_series.csv") as f:
        for r in csv.DictReader(f):
            t = float(r["t_s"])
            if warmup_s + 1e-9 < t <= end_s + 1e-9:
                got[r["src"]] = got.get(r["src"], 0) + int(r["bytes"])
    return [8 * b / (end_s - warmup_s) for b in got.values()]


def test_e2_runs_end_to_end_and_a_source_sees_the_same_network_at_two_scales(tmp_path):
    require_root()
    require_features("netns", "fq", "clsact-bpf", "btf", "modules")
    (tmp_path / "e2-run.toml").write_text(DEFINITION)
    out = tmp_path / "out"
    run_testbed("run", str(tmp_path / "e2-run.toml"), "--native", "--out", str(out), timeout=2400)
    rows = {int(r["scale"]): r for r in summary_rows(out)}
    assert set(rows) == {40, 20}
    throughput = {}
    for scale, r in rows.items():
        point = out / "points" / r["point"]
        obs = json.loads((point / "obs.json").read_text())
        edge, core = obs["edge"], obs["core"]
        bursts = int(r["bursts"])
        assert bursts >= 8, r  # one burst per round trip while the windows are small
        assert edge["ctrl_packets"] == bursts and core["announced"] == bursts, obs
        assert core["ring_overflow"] == 0 and core["ctrl_invalid"] == 0 and core["empty_bursts"] == 0, core
        expected = sum(burst_lost(int(r["seed"]), i, 100_000_000) for i in range(1, bursts + 1))
        assert int(r["bursts_lost"]) == expected, (r["bursts_lost"], expected)
        assert expected > 0
        assert int(r["loss_events_rto"]) + int(r["loss_events_fast"]) > 0, r
        assert int(r["n_sources"]) == 80 // scale
        # timestamps off (512 B per segment in a 552 B packet), and the records say so
        for host, rec in json.loads((point / "profiles.json").read_text()).items():
            assert rec["sysctls"]["net.ipv4.tcp_timestamps"] == "0", (host, rec)
            assert rec["max_window"]["mss_bytes"] == 512, (host, rec)
        frame_s = FRAME_BITS / (10e9 / scale)
        assert float(r["lateness_p99_s"]) < 0.05 * frame_s, (r["lateness_p99_s"], frame_s)
        throughput[scale] = per_source_bps(point, 0.2, 0.6)
        assert len(throughput[scale]) == 80 // scale and min(throughput[scale]) > 0
    iv = welch_difference(throughput[40], throughput[20])
    assert iv.lo <= 0 <= iv.hi, (throughput, iv)
    spb = {s: float(rows[s]["segments_per_source_per_burst"]) for s in rows}
    assert math.isclose(spb[40], spb[20], rel_tol=0.15), spb
    assert (out / "report" / "findings.md").exists()
