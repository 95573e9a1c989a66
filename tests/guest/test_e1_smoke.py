"""E1 smoke test in the full-kernel guest: k = 4 fat-tree, one load, all-optical and
electronic switches, TCP SACK, a short window, end to end through `testbed run`.

Checks the results folder and report are complete and the numbers are sane: throughput
positive and below the bisection capacity (8 x 10 Gb/s for k = 4), the all-optical
switches drop packets under this load while the electronic ones never drop, every
electronic packet is an OEO conversion and no optical one is, completed flows exist,
the emulation's p99 lateness stays small against one 9064 B packet duration, and the
second point reused the first point's fat-tree (one build per run). Electronic
switches never drop, so with the paper's 1 ms initial RTO (the first data segment timed
with it, then the kernel's estimator), an ACK per segment and an initial window of one
segment, SACK's retransmissions there stay below 1 % of its data segments (before: 23
retransmissions of ~300 segments, all spurious, from the RTO the 74 B SYN left); the
spurious-retransmission and loss-detection columns are in the summary.

D = 10000 (a 9064 B packet lasts 72.5 ms): at D = 1000 a TCG guest showed p99 lateness
58.7 ms against tau = 7.25 ms. About 5 minutes under TCG.
"""

import json

import pytest
from helpers import require_features, require_root, run_testbed, summary_rows

#: a study-like run of minutes of guest time: `make test-all`, not CI's `make test`
pytestmark = pytest.mark.long


DEFINITION = """
[experiment]
name = "e1-smoke"
family = "e1-fattree"
[params]
k = 4
cca = "sack"
load = "50000 /s"
size_scale = "0.1 %"
warmup = "0.2 ms"
window = "0.5 ms"
[sweep]
switch = ["all-optical", "electronic"]
[run]
reps = 1
seed = 3
tdf = 10000
"""

BISECTION_BPS = 16 / 2 * 10e9
TAU_9064_S = 9064 * 8 / 10e9


def test_e1_smoke(tmp_path):
    require_root()
    require_features("netns", "fq", "clsact-bpf", "btf", "modules")
    (tmp_path / "e1-smoke.toml").write_text(DEFINITION)
    out = tmp_path / "res"
    proc = run_testbed("run", str(tmp_path / "e1-smoke.toml"), "--native", "--out", str(out), timeout=1500)
    assert (proc.stdout + proc.stderr).count("building the k=4 fat-tree") == 1, "fat-tree not reused"
    rows = {r["switch"]: r for r in summary_rows(out)}
    assert set(rows) == {"all-optical", "electronic"}, rows
    for sw, r in rows.items():
        thr = float(r["throughput_bps"])
        print(f"{sw}: throughput {thr / 1e9:.2f} Gb/s, flows {r['flows_completed']}/{r['flows']}, "
              f"loss {float(r['loss_ratio']):.4f}, OEO {float(r['oeo_fraction']):.3f}, "
              f"max buffer {float(r['max_buffer_bytes']) / 1e3:.1f} kB, "
              f"p99 lateness {float(r['lateness_p99_s']) * 1e6:.3f} us, data segments {r['data_segments']}, "
              f"retransmits {r['retransmits']} (DSACK-confirmed spurious {r['spurious_retransmits']}, "
              f"beyond drops {r['retransmits_beyond_drops']})")
        assert 0 < thr < BISECTION_BPS, (sw, thr)
        assert int(r["flows_completed"]) > 0
        assert float(r["lateness_p99_s"]) < TAU_9064_S, "emulation lateness not small against tau"
    assert int(rows["all-optical"]["packets_dropped"]) > 0
    assert float(rows["all-optical"]["oeo_fraction"]) == 0
    assert int(rows["electronic"]["packets_dropped"]) == 0
    assert float(rows["electronic"]["oeo_fraction"]) == 1.0
    assert float(rows["electronic"]["max_buffer_bytes"]) > 0
    # spurious retransmissions are a first-class metric; none on electronic switches
    for r in rows.values():
        assert int(r["data_segments"]) > 0 and 0 <= int(r["spurious_retransmits"]) <= int(r["retransmits"])
        assert float(r["spurious_fraction"]) == int(r["spurious_retransmits"]) / int(r["data_segments"])
        assert float(r["initial_rto_effective_s"]) == 1e-3
    # Electronic switches never drop, so every retransmission there is spurious: at most
    # 1 % of the data segments (issue 11). The SYN-seeded RTO made 23 here (of ~300);
    # none since the first data segment is timed with T_1. What can remain is the
    # paper's own model: packets are sprayed over equal-cost paths, so a segment can
    # arrive late behind later ones (reorderings below) and SACK's dupACK rule may
    # retransmit it (the smoke point saw 0 or 1 once senders were no longer held to two
    # packets in flight by TCP Small Queues).
    el = rows["electronic"]
    assert int(el["retransmits"]) <= 0.01 * int(el["data_segments"]), el
    assert int(el["retransmits_beyond_drops"]) == int(el["retransmits"]), el
    assert int(el["reorderings"]) > 0, "no reordering on sprayed paths: is per-packet ECMP on?"
    for r in rows.values():
        print(f"{r['switch']}: loss events RTO {r['loss_events_rto']}, fast {r['loss_events_fast']}, undone "
              f"{r['spurious_recoveries_undone']}, reorderings {r['reorderings']}")
    # the results folder is complete: raw data of every point, manifest, report
    for p in sorted((out / "points").glob("p[0-9]*")):
        assert json.loads((p / "status.json").read_text())["state"] == "complete"
        for f in ("summary.json", "optical_ports.csv", "fidelity.json", "profiles.json", "traffic/flows.csv"):
            assert (p / f).exists(), p / f
    report = out / "report" / "index.html"
    assert report.exists() and "throughput_vs_load_10m.png" in report.read_text()
    assert (out / "report" / "throughput_vs_load_10m.png").stat().st_size > 10_000
