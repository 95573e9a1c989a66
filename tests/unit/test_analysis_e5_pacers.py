"""analysis.e5_pacers: how often XCP's edge pacers held their macroflows back in the
measured window, on hand-built point folders whose answer is computed by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from analysis import e5_pacers
from analysis.e5_findings import prepare

E_NS = 1_000 * 10**9          # the agent's epoch (guest CLOCK_MONOTONIC)
I_NS = 10**9                  # control interval in emulation: 50 ms paper at D = 20
T0_S = 1_001.5                # the traffic starts 1.5 intervals after E


def write_point(folder: Path, rows: list[dict], *, t0_s: float = T0_S) -> Path:
    """A point folder with the three files the module reads."""
    (folder / "traffic").mkdir(parents=True)
    (folder / "xcp.json").write_text(json.dumps({"epoch_ns": E_NS, "interval_ns": I_NS, "tdf": 20.0}))
    for h in ("h0", "h1"):
        (folder / "traffic" / f"stats-{h}.json").write_text(json.dumps({"t0": t0_s}))
    pd.DataFrame(rows).to_csv(folder / "xcp_rates.csv", index=False)
    return folder


def rates(k_range: range, inside: range) -> list[dict]:
    """Probes of intervals k: inside the window, macroflow A sends 9.5 of its 10 Mbit/s
    (held), B 1 of 10 (not held), C nothing, the ACK macroflow all of its 1 (held, but
    ACKs are not counted); outside, every macroflow sends its whole grant, so a window
    read wrongly changes every number."""
    out = []
    for k in k_range:
        use = {"A": 9.5e6, "B": 1e6, "C": 0.0} if k in inside else {"A": 10e6, "B": 10e6, "C": 10e6}
        for m, u in use.items():
            out.append({"interval": k, "macroflow": m, "kind": "data", "rate_bps": 10e6, "measured_bps": u})
        out.append({"interval": k, "macroflow": "A-ack", "kind": "ack", "rate_bps": 1e6, "measured_bps": 1e6})
    return out


def test_the_window_holds_the_intervals_wholly_inside_it(tmp_path):
    # window (paper) [8 s, 10 s] from t0 = emulation [t0 + 160 s, t0 + 200 s] = [1161.5, 1201.5] s;
    # the probe of interval k measured [E + (k - 1) I, E + k I] = [999 + k, 1000 + k] s: k = 163 .. 201
    folder = write_point(tmp_path / "p0000", rates(range(150, 210), range(163, 202)))
    got = e5_pacers.read_run(folder, duration_s=10.0, window_s=2.0)
    assert got.intervals == 39
    assert got.active == 2 * 39
    assert got.held_bytes == pytest.approx(9.5 / 10.5)
    assert got.held_intervals == pytest.approx(0.5)
    assert got.median_use == pytest.approx((0.95 + 0.1) / 2)


def test_a_window_one_interval_off_is_seen(tmp_path):
    # the same rows with the traffic starting one interval earlier: k = 201 falls out and
    # k = 162 (whole grant used) comes in
    folder = write_point(tmp_path / "p0000", rates(range(150, 210), range(163, 202)), t0_s=T0_S - 1)
    got = e5_pacers.read_run(folder, duration_s=10.0, window_s=2.0)
    assert got.intervals == 39
    assert got.held_bytes > 9.5 / 10.5


def test_nothing_active_gives_nan_not_an_error(tmp_path):
    rows = [{"interval": k, "macroflow": "A", "kind": "data", "rate_bps": 1e6, "measured_bps": 0.0}
            for k in range(150, 210)]
    got = e5_pacers.read_run(write_point(tmp_path / "p0000", rows), duration_s=10.0, window_s=2.0)
    assert got.active == 0 and math.isnan(got.held_bytes) and math.isnan(got.median_use)


def summary(points: list[tuple[str, str, str]]) -> pd.DataFrame:
    """(point, pacing, run) rows of one SB point at 1.5 kB."""
    return prepare(pd.DataFrame([{"point": p, "pacing": pacing, "run": run, "arch": "sb", "buffer": "1.5 kB",
                                  "duration": "10 s", "window": "2 s", "xcp_alpha": 0.4, "xcp_gamma": 0.1,
                                  "goodput_per_flow_Bps": 6e5 + 1e4 * i}
                                 for i, (p, pacing, run) in enumerate(points)]))


def test_the_table_reads_xcp_runs_only_and_lists_the_unreadable(tmp_path):
    results = tmp_path / "block"
    for p in ("p0000", "p0001"):
        write_point(results / "points" / p, rates(range(150, 210), range(163, 202)))
    s = summary([("p0000", "xcp", ""), ("p0001", "xcp", ""), ("p0002", "xcp", ""), ("p0003", "none", "")])
    s = s.drop(columns=["run"])
    held, unread = e5_pacers.table(s, results)
    assert len(held) == 1
    row = held.iloc[0]
    assert row["runs read"] == 2 and row["pacing"] == "xcp" and row["xcp_alpha"] == 0.4
    assert row["bytes held (sent at >= 0.9 x grant) [%]"] == "90.5 [90.5, 90.5]"
    assert row["goodput per flow [kB/s]"] == pytest.approx(610.0)   # all three runs' goodput
    assert list(unread["point"]) == ["p0002"] and "xcp.json" in unread["why"].iloc[0]


def test_a_combined_report_reads_each_run_in_its_source_folder(tmp_path):
    a, b = tmp_path / "block-a", tmp_path / "block-b"
    write_point(a / "points" / "p0000", rates(range(150, 210), range(163, 202)))
    write_point(b / "points" / "p0000", rates(range(150, 210), range(0)))   # every interval at its grant
    combined = tmp_path / "findings"
    combined.mkdir()
    (combined / "sources.json").write_text(json.dumps([{"folder": str(a)}, {"folder": str(b)}]))
    held, unread = e5_pacers.table(summary([("p0000", "xcp", "block-a"), ("p0000", "xcp", "block-b")]), combined)
    assert unread.empty
    assert held.iloc[0]["bytes held (sent at >= 0.9 x grant) [%]"] == "95.2 [90.5, 100]"


def test_no_xcp_rows_no_table(tmp_path):
    held, unread = e5_pacers.table(summary([("p0000", "tcp", "")]), tmp_path)
    assert held.empty and unread.empty
