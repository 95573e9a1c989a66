"""E4 end to end in the full-kernel guest, through `testbed run`: one CUBIC flow held by
a 1.25 MB window at 1 Gbit/s over a 10 ms RTT (the paper's Table 2 row), moved by r1
onto the optical path (RTT 6 ms) after 1 s, measured for 1 s more; D = 1 Gbit/s /
emulated_rate (per point).

Checked (issue 15's acceptance) on CUBIC held by its buffer (the paper's):

* the post-move rate is within 5 % of the paper's new limit buffer / RTT-after;
* no duplicate ACK and no out-of-order arrival before the move;
* r1 logged its route replace within one RTT (before the move) of the request;
* the flow was held by the buffer, not a link: the receiver's window held the sender
  most of its busy time, no qdisc dropped a packet, and the rate before the move was
  the limit;
* the report was written with its findings table.

And on CUBIC held by r1's ports at the same rate (``limiter = "link"``): the move
reorders (the sender detects reordering after it and never before: its own losses at
r1's queue are holes, not reordering), duplicate ACKs follow it, and the rate after is
the link's. (A window-held flow sends its window in a train per RTT, so a move in the gap
between two trains reorders nothing: measured 0 duplicate ACKs at a phase of 0.84 RTT,
78-152 at 0.03-0.26. BBR is no fix: in this test's guest run of 2026-11-24 a BBR flow
at its limit had 0 duplicate ACKs after the move (its data were not kept; presumably its
paced window left a gap the move fell into), in a second run of the same definition at
0.80 of the limit 332 (results/e4-debug/bbr1). A link-held flow's
bottleneck queue keeps packets on the IP path at every instant, so the move overtakes
some whatever its phase.)

And with ``trigger = threshold`` (self-management), r1 moves the flow once its own
counters saw it at 90 % of the limit for three RTTs. About 25 minutes under TCG.
"""

from __future__ import annotations

import json

import pytest
from helpers import require_features, require_root, run_testbed, summary_rows


from testbed.families.e4_flowmove import E4FlowMove

#: a study-like run of minutes of guest time: `make test-all`, not CI's `make test`
pytestmark = pytest.mark.long

DEFINITION = """
[experiment]
name = "e4-run"
family = "e4-flowmove"
[params]
limit_rate = "1 Gbit/s"
rtt = "10 ms"
before = "1 s"
after = "1 s"
emulated_rate = "20 Mbit/s"
[sweep]
limiter = ["buffer", "link"]
[run]
reps = 1
seed = 3
"""


def test_a_buffer_limited_flow_moves_onto_the_optical_path(tmp_path):
    require_root()
    require_features("netns", "htb", "netem")
    (tmp_path / "e4-run.toml").write_text(DEFINITION)
    out = tmp_path / "out"
    run_testbed("run", str(tmp_path / "e4-run.toml"), "--native", "--out", str(out), timeout=5400)
    rows = {row["limiter"]: row for row in summary_rows(out)}
    assert set(rows) == {"buffer", "link"}
    metrics = {limiter: {k: float(row[k]) for k in (m.name for m in E4FlowMove.metrics)}
               for limiter, row in rows.items()}
    for limiter, r in metrics.items():
        row = rows[limiter]
        assert abs(r["rate_after_bps"] / r["limit_after_bps"] - 1) < 0.05, row
        # within one RTT of the set time (it is microseconds)
        assert r["moved"] == 1 and 0 <= r["move_lateness_s"] < 10e-3, row
        assert r["retrans_suppressed"] == 0, row
        move = json.loads((out / "points" / row["point"] / "move.json").read_text())
        assert move["record"]["trigger"] == "command"
    buffer, link = metrics["buffer"], metrics["link"]
    assert buffer["limit_after_bps"] == 8 * 1_250_000 / 6e-3
    assert 0.95 < buffer["reached_before"] < 1.05, rows["buffer"]  # the buffer, not a link, held it
    assert buffer["dupacks_before"] == 0 and buffer["ooo_segments_before"] == 0, rows["buffer"]
    assert buffer["router_drops"] == 0 and buffer["rwnd_limited_share"] > 0.5, rows["buffer"]
    # a single FIFO path reorders nothing (its losses are holes, not reordering); the move does
    assert buffer["reorder_detections_before"] == 0 == link["reorder_detections_before"], rows
    assert link["reorder_detections"] > 0 and link["dupacks"] > 0, rows["link"]
    assert (out / "report" / "index.html").exists() and (out / "report" / "findings.md").exists()


def test_self_management_moves_the_flow_once_r1_sees_it_at_its_limit(tmp_path):
    """trigger = threshold: r1's mover reads its own port counters every RTT-before and
    moves the flow after three intervals at >= 90 % of the limit; the flow then reaches
    the new limit as with a set time."""
    require_root()
    require_features("netns", "htb", "netem")
    (tmp_path / "e4-th.toml").write_text(DEFINITION.replace('name = "e4-run"', 'name = "e4-th"')
                                         .replace('[sweep]\nlimiter = ["buffer", "link"]\n', "")
                                         .replace("[run]", 'trigger = "threshold"\ncapture = false\n'
                                                  'trace_cwnd = false\n[run]'))
    out = tmp_path / "out"
    run_testbed("run", str(tmp_path / "e4-th.toml"), "--native", "--no-report", "--out", str(out), timeout=3600)
    (row,) = summary_rows(out)
    assert float(row["moved"]) == 1, row
    point = out / "points" / row["point"]
    move = json.loads((point / "move.json").read_text())["record"]
    assert move["trigger"] == "threshold" and move["rate_bps"] >= 0.9 * 1e9 / 50  # emulation units, D = 50
    samples = [json.loads(line) for line in (point / "mover.jsonl").read_text().splitlines()]
    before = [s for s in samples if s["event"] == "sample" and s["t"] <= move["t_request"]]
    assert all(s["rate_bps"] >= 0.9 * 1e9 / 50 for s in before[-3:]) and len(before) >= 3
    # moved within a few RTTs of reaching the limit, well before the latest allowed (1 s)
    assert float(row["move_requested_s"]) < 0.5, row
