"""The SAW audit's replay of the paper's timer (eqs. 1-3), on flows written by hand from
the paper's rules: what the paper's sender does is worked out here, in the test."""

import pytest

from testbed.cc.sawaudit import SawRule, replay, segments_of, summary

MS = 1e-3
RULE = SawRule(1 * MS)


def flow(events):
    """events: (send times, ack time or None) per segment of 1000 B, in order."""
    sends, acks = [], []
    for i, (times, ack) in enumerate(events):
        sends += [(t, i * 1000, (i + 1) * 1000) for t in times]
        if ack is not None:
            acks.append((ack, (i + 1) * 1000))
    return segments_of(sends, acks)


def test_in_time_acks_update_t_by_eq2_and_nothing_is_retransmitted():
    segs = replay(flow([([0.0], 0.4 * MS), ([0.4 * MS], 1.0 * MS), ([1.0 * MS], 1.6 * MS)]), RULE)
    # T1 = 1 ms; after gamma 0.4: 0.7 ms; after gamma 0.6: 0.65 ms
    assert [s.t_s for s in segs] == pytest.approx([1 * MS, 0.7 * MS, 0.65 * MS])
    assert [s.rule_retransmissions for s in segs] == [0, 0, 0] and all(s.agrees for s in segs)
    assert [s.margin_s for s in segs] == pytest.approx([0.6 * MS, 0.1 * MS, 0.05 * MS])
    # an ACK 0.7 ms after the third send, beyond its T = 0.65 ms: the paper retransmits at 1.65 ms
    late = replay(flow([([0.0], 0.4 * MS), ([0.4 * MS], 1.0 * MS), ([1.0 * MS, 1.65 * MS], 1.7 * MS)]), RULE)
    assert late[2].rule_retransmissions == late[2].kernel_retransmissions == 1
    assert late[2].interval_errors_s == pytest.approx([0.0], abs=1e-12)


def test_a_late_ack_is_a_retransmission_of_the_rule_with_backoff_by_eq1():
    # ACK 2.5 ms after the send: deadlines at 1 ms and 1 + 1.1 = 2.1 ms: two retransmissions
    segs = replay(flow([([0.0, 1.0 * MS, 2.1 * MS], 2.5 * MS), ([2.5 * MS], 2.9 * MS)]), RULE)
    s = segs[0]
    assert s.rule_retransmissions == s.kernel_retransmissions == 2 and s.agrees
    assert s.interval_errors_s == pytest.approx([0.0, 0.0], abs=1e-12)
    # no timestamps: the echoed reading has no sample, T = 1.1^2 ms for the next segment
    assert segs[1].t_s == pytest.approx(1.21 * MS)
    karn = replay(flow([([0.0, 1.0 * MS, 2.1 * MS], 2.5 * MS), ([2.5 * MS], 2.9 * MS)]), SawRule(1 * MS, samples="karn"))
    assert karn[1].t_s == pytest.approx(1.21 * MS)
    first = replay(flow([([0.0, 1.0 * MS, 2.1 * MS], 2.5 * MS), ([2.5 * MS], 2.9 * MS)]),
                   SawRule(1 * MS, samples="first"))
    assert first[1].t_s == pytest.approx(0.5 * 2.5 * MS + 0.5 * 1.21 * MS)


def test_the_echoed_timestamp_names_the_acknowledged_copy():
    # three copies with TSvals 10, 20, 31; the ACK at 2.5 ms echoes 20: gamma = 2.5 - 1.0
    sends = [(0.0, 0, 1000, 10), (1.0 * MS, 0, 1000, 20), (2.1 * MS, 0, 1000, 31), (2.5 * MS, 1000, 2000, 35)]
    acks = [(2.5 * MS, 1000, 20), (2.9 * MS, 2000, 35)]
    segs = replay(segments_of(sends, acks), RULE)
    assert segs[1].t_s == pytest.approx(0.5 * 1.5 * MS + 0.5 * 1.21 * MS)
    assert segs[1].rule_retransmissions == 0 and segs[1].margin_s == pytest.approx(segs[1].t_s - 0.4 * MS)


def test_disagreements_each_way_with_their_margins():
    # the kernel retransmitted a segment whose ACK came in time (kernel_more), and did
    # not retransmit one whose ACK came late (rule_more)
    segs = replay(flow([([0.0, 0.9 * MS], 0.95 * MS), ([0.95 * MS], 2.2 * MS)]), RULE)
    assert segs[0].rule_retransmissions == 0 and segs[0].kernel_retransmissions == 1
    assert segs[1].rule_retransmissions == 1 and segs[1].kernel_retransmissions == 0
    out = summary({"f": segs}, RULE)
    assert (out["segments_kernel_more"], out["segments_rule_more"], out["segments_agreeing"]) == (1, 1, 0)
    assert out["kernel_retransmissions"] == 1 and out["rule_retransmissions"] == 1
    # segment 0: deadline 1 ms, ACK at 0.95 (in time by 0.05 ms); T = (0.95 + 1) / 2 = 0.975 ms;
    # segment 1: deadline 0.95 + 0.975 = 1.925 ms, ACK at 2.2 (late by 0.275 ms)
    assert sorted(out["disagreement_margins_s"]) == pytest.approx([-0.275 * MS, 0.05 * MS])


def test_sawl_arms_t_plus_p_tau_and_a_tie_is_in_time():
    rule = SawRule(1 * MS, extra_s=0.2 * MS)
    segs = replay(flow([([0.0], 1.2 * MS), ([1.2 * MS, 2.4 * MS + 0.2 * MS], 3.0 * MS)]), rule)
    assert segs[0].rule_retransmissions == 0 and segs[0].margin_s == pytest.approx(0.0)
    # T after gamma 1.2: 1.1 ms; deadline 1.2 + 1.1 + 0.2 = 2.5 ms; the kernel went 0.1 ms late
    assert segs[1].rule_retransmissions == 1 and segs[1].interval_errors_s == pytest.approx([0.1 * MS])


def test_a_segment_sent_again_with_another_length_is_refused():
    with pytest.raises(ValueError, match="not one segment in flight"):
        segments_of([(0.0, 0, 1000), (1.0, 0, 2000)], [])


def test_bad_rules_are_refused():
    for kw in ({"t1_s": 0}, {"t1_s": 1, "alpha": 1.0}, {"t1_s": 1, "beta": 1.0}, {"t1_s": 1, "extra_s": -1},
               {"t1_s": 1, "samples": "last"}):
        with pytest.raises(ValueError):
            SawRule(**kw)


def test_the_margin_is_the_deadline_nearest_to_the_ack():
    # deadlines at 1 ms and 1 + 1.1 = 2.1 ms, ACK at 2.15 ms: the paper retransmits twice,
    # the kernel once; the call was decided by the second deadline, 0.05 ms before the ACK
    (s,) = replay(flow([([0.0, 1.0 * MS], 2.15 * MS)]), RULE)
    assert (s.rule_retransmissions, s.kernel_retransmissions) == (2, 1)
    assert s.margin_s == pytest.approx(-0.05 * MS)


def test_command_line_refuses_bad_input_with_exit_2(tmp_path, capsys):
    from testbed.cc.sawaudit import main

    assert main([str(tmp_path / "none.pcap"), "--sender", "10.0.0.1"]) == 2
    assert "none.pcap" in capsys.readouterr().err
    assert main([str(tmp_path / "none.pcap"), "--sender", "10.0.0.1", "--t1", "1 parsec"]) == 2
    assert main([str(tmp_path / "none.pcap"), "--sender", "10.0.0.1", "--tdf", "0"]) == 2
