"""E1 analysis: aggregation over repetitions, curve labels, and the figure files."""

import pandas as pd
import pytest

from analysis import e1


def summary() -> pd.DataFrame:
    rows = []
    for cca in ("saw", "sack"):
        for sw, rto in (("all-optical", "1 ms"), ("hybrid:2", "1 ms"), ("electronic@1 s", "1 ms")):
            for load in ("1000 /s", "10000 /s"):
                for rep, thr in enumerate((1e9, 3e9)):
                    rows.append({"cca": cca, "switch": sw, "initial_rto": rto, "load": load,
                                 "link_length": "10 m", "rep": rep, "throughput_bps": thr,
                                 "loss_ratio": 0.1 * rep, "oeo_fraction": 0.5, "max_buffer_bytes": 2e5})
    return pd.DataFrame(rows)


def test_aggregate_means_and_labels():
    agg = e1.aggregate(summary())
    assert set(agg["switch"]) == {"n_e = 0", "n_e = 2", "electronic, RTO 1 s"}
    assert len(agg) == 2 * 3 * 2
    row = agg.iloc[0]
    assert row["n"] == 2
    assert row["throughput_Gbit_s"] == pytest.approx(2.0)
    # two samples 1 and 3: sd = sqrt(2), t(0.975, 1) = 12.706 -> half-width 12.706
    assert row["throughput_ci95_Gbit_s"] == pytest.approx(12.706, rel=1e-3)
    assert row["max_buffer_MB"] == pytest.approx(0.2)
    assert row["packet_loss_ratio"] == pytest.approx(0.05)


def test_analyse_draws_one_figure_per_link_length(tmp_path):
    s = summary()
    s2 = s.copy()
    s2["link_length"] = "100 m"
    figs, tables = e1.analyse(pd.concat([s, s2]), {}, tmp_path)
    assert sorted(f.name for f in figs) == ["throughput_vs_load_100m.png", "throughput_vs_load_10m.png"]
    assert all(f.stat().st_size > 10_000 for f in figs)
    assert len(tables) == 2 and len(tables[0][1]) == 24
