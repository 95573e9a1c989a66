"""analysis.flowtime: retransmissions by start time with the smallest RTT, paper units."""

import gzip
import json

import pytest

from analysis import flowtime

D = 10000.0


def point(tmp_path):
    t = tmp_path / "p0000" / "traffic"
    t.mkdir(parents=True)
    (t / "meta.json").write_text(json.dumps({"tdf": D}))

    def rec(start, retrans, segs, min_rtt_us):
        return json.dumps({"start": start, "tcp_info": {"total_retrans": retrans, "data_segs_out": segs,
                                                        "min_rtt_us": min_rtt_us}})
    # emulation seconds and microseconds: / D gives paper time
    plain = [rec(1.0, 0, 10, 2_000_000), rec(2.0, 1, 10, 4_000_000)]
    packed = [rec(30.0, 5, 10, 20_000_000), rec(40.0, 10, 10, 0xFFFFFFFF),
              json.dumps({"start": None, "tcp_info": {}})]   # never started: not counted
    (t / "flows-h0.jsonl").write_text("\n".join(plain) + "\n")
    (t / "flows-h1.jsonl.gz").write_bytes(gzip.compress(("\n".join(packed) + "\n").encode()))
    return tmp_path / "p0000"


def test_groups_by_start_in_paper_units_reading_plain_and_compressed_records(tmp_path):
    early, late = flowtime.groups(point(tmp_path), 2)
    assert (early.transfers, early.retransmitting, early.retransmissions, early.data_segments) == (2, 1, 1, 20)
    assert early.first_start_s == pytest.approx(1e-4) and early.last_start_s == pytest.approx(2e-4)
    assert early.median_min_rtt_s == pytest.approx(3e-4)       # median of 0.2 and 0.4 ms
    assert late.retransmissions == 15 and late.median_min_rtt_s == pytest.approx(2e-3)  # no-sample one left out
    md = flowtime.table([early, late]).splitlines()
    assert md[2] == "| 0.1-0.2 | 2 | 50% | 0.050 | 0.30 |" and md[3] == "| 3.0-4.0 | 2 | 100% | 0.750 | 2.00 |"


def test_bad_input_is_exit_2_with_the_reason(tmp_path, capsys):
    assert flowtime.main([str(tmp_path)]) == 2 and "meta.json" in capsys.readouterr().err
    assert flowtime.main([str(point(tmp_path)), "0"]) == 2 and "groups=0" in capsys.readouterr().err
    assert flowtime.main([]) == 2 and "usage" in capsys.readouterr().err
    assert flowtime.main([str(tmp_path / "p0000"), "2"]) == 0 and "| 0.1-0.2 |" in capsys.readouterr().out
