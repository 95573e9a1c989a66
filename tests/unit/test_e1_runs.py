"""analysis.e1_runs: the per-run table of E1 results folders (docs/e1.md)."""

import json

import pandas as pd

from analysis import e1_runs


def folder(tmp_path, name="block-x"):
    d = tmp_path / name
    (d / "points" / "p0001").mkdir(parents=True)
    (d / "points" / "p0001" / "machine.json").write_text(json.dumps({"wall_s": 1234.4}))
    rows = [{"point": p, "cca": "sack", "switch": "electronic", "link_length": "10 m", "load": "20000 /s", "rep": rep,
             "throughput_bps": 100.04e9, "flows_failed": 0, "retransmits": 5897, "spurious_retransmits": 2321,
             "data_segments": 128664, "packets_dropped": 0, "loss_events_rto": 1114, "memory_pressures": 0,
             "memory_drops": 1, "listen_drops": 2, "retransmits_suppressed": 0}
            for p, rep in (("p0001", 1), ("p0000", 0))]
    pd.DataFrame(rows).to_csv(d / "summary.csv", index=False)
    return d


def test_one_row_per_run_in_point_order_with_the_host_seconds_where_recorded(tmp_path):
    out = e1_runs.table([folder(tmp_path)]).splitlines()
    assert out[0].startswith("| run | cca | switch |") and len(out) == 4
    assert out[2] == ("| block-x | sack | electronic | 10 m | 20000 /s | 0 | 100.0 | 0 | 5897 | 2321 | 128664 | 0 "
                      "| 1114 | - | - | 0/1/2 | 0 | - |")
    assert out[3].endswith("| 1 | 100.0 | 0 | 5897 | 2321 | 128664 | 0 | 1114 | - | - | 0/1/2 | 0 | 1234 |")


def test_a_holding_switch_shows_its_late_decisions(tmp_path):
    d = folder(tmp_path)
    s = pd.read_csv(d / "summary.csv")
    s["switch"], s["decisions_late"] = "hybrid-hold:2", [3, 0]      # (p0001, p0000)
    s.to_csv(d / "summary.csv", index=False)
    out = e1_runs.table([d]).splitlines()
    assert "| late decisions |" in out[0] and "| hybrid-hold:2 |" in out[2]
    assert out[2].endswith("| 1114 | 0 | - | 0/1/2 | 0 | - |") and out[3].endswith("| 1114 | 3 | - | 0/1/2 | 0 | 1234 |")


def test_a_summary_without_a_column_shows_a_dash(tmp_path):
    d = folder(tmp_path)
    pd.read_csv(d / "summary.csv").drop(columns=["memory_drops"]).to_csv(d / "summary.csv", index=False)
    assert "| 0/-/2 |" in e1_runs.table([d])


def test_a_folder_without_a_summary_is_exit_2_naming_it(tmp_path, capsys):
    assert e1_runs.main([str(tmp_path)]) == 2
    assert str(tmp_path) in capsys.readouterr().err
    assert e1_runs.main([]) == 2 and "usage" in capsys.readouterr().err
    assert e1_runs.main([str(folder(tmp_path))]) == 0 and "block-x" in capsys.readouterr().out
