"""testbed.cc.lossdetect without a kernel: parsing /proc/net text as Linux 6.1 writes it,
deltas, and the classification of counter differences into loss detections.

The header lines below are Linux 6.1's (recorded in the guest, kernel 6.1.0-56-amd64:
``cat /proc/net/netstat /proc/net/snmp``); RECORDED holds the TcpExt/Tcp value lines a
guest run of tests/guest/test_lossdetect.py read before and after each of its cases
(one dropped data segment; a dropped window), with what the wire did in each.
"""

from __future__ import annotations

import pytest

from testbed.cc import lossdetect
from testbed.cc.lossdetect import LossDetectError

NETSTAT_HEADER = (
    "TcpExt: SyncookiesSent SyncookiesRecv SyncookiesFailed EmbryonicRsts PruneCalled RcvPruned "
    "OfoPruned OutOfWindowIcmps LockDroppedIcmps ArpFilter TW TWRecycled TWKilled PAWSActive "
    "PAWSEstab DelayedACKs DelayedACKLocked DelayedACKLost ListenOverflows ListenDrops TCPHPHits "
    "TCPPureAcks TCPHPAcks TCPRenoRecovery TCPSackRecovery TCPSACKReneging TCPSACKReorder "
    "TCPRenoReorder TCPTSReorder TCPFullUndo TCPPartialUndo TCPDSACKUndo TCPLossUndo "
    "TCPLostRetransmit TCPRenoFailures TCPSackFailures TCPLossFailures TCPFastRetrans "
    "TCPSlowStartRetrans TCPTimeouts TCPLossProbes TCPLossProbeRecovery TCPRenoRecoveryFail "
    "TCPSackRecoveryFail TCPRcvCollapsed TCPBacklogCoalesce TCPDSACKOldSent TCPDSACKOfoSent "
    "TCPDSACKRecv TCPDSACKOfoRecv TCPAbortOnData TCPAbortOnClose TCPAbortOnMemory TCPAbortOnTimeout "
    "TCPAbortOnLinger TCPAbortFailed TCPMemoryPressures TCPMemoryPressuresChrono TCPSACKDiscard "
    "TCPDSACKIgnoredOld TCPDSACKIgnoredNoUndo TCPSpuriousRTOs TCPMD5NotFound TCPMD5Unexpected "
    "TCPMD5Failure TCPSackShifted TCPSackMerged TCPSackShiftFallback TCPBacklogDrop PFMemallocDrop "
    "TCPMinTTLDrop TCPDeferAcceptDrop IPReversePathFilter TCPTimeWaitOverflow TCPReqQFullDoCookies "
    "TCPReqQFullDrop TCPRetransFail TCPRcvCoalesce TCPOFOQueue TCPOFODrop TCPOFOMerge TCPChallengeACK "
    "TCPSYNChallenge TCPFastOpenActive TCPFastOpenActiveFail TCPFastOpenPassive "
    "TCPFastOpenPassiveFail TCPFastOpenListenOverflow TCPFastOpenCookieReqd TCPFastOpenBlackhole "
    "TCPSpuriousRtxHostQueues BusyPollRxPackets TCPAutoCorking TCPFromZeroWindowAdv "
    "TCPToZeroWindowAdv TCPWantZeroWindowAdv TCPSynRetrans TCPOrigDataSent TCPHystartTrainDetect "
    "TCPHystartTrainCwnd TCPHystartDelayDetect TCPHystartDelayCwnd TCPACKSkippedSynRecv "
    "TCPACKSkippedPAWS TCPACKSkippedSeq TCPACKSkippedFinWait2 TCPACKSkippedTimeWait "
    "TCPACKSkippedChallenge TCPWinProbe TCPKeepAlive TCPMTUPFail TCPMTUPSuccess TCPDelivered "
    "TCPDeliveredCE TCPAckCompressed TCPZeroWindowDrop TCPRcvQDrop TCPWqueueTooBig "
    "TCPFastOpenPassiveAltKey TcpTimeoutRehash TcpDuplicateDataRehash TCPDSACKRecvSegs "
    "TCPDSACKIgnoredDubious TCPMigrateReqSuccess TCPMigrateReqFailure")
SNMP_TCP_HEADER = ("Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets "
                   "CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors")
IP_LINES = ("Ip: Forwarding DefaultTTL InReceives InHdrErrors InAddrErrors ForwDatagrams InUnknownProtos "
            "InDiscards InDelivers OutRequests OutDiscards OutNoRoutes ReasmTimeout ReasmReqds ReasmOKs "
            "ReasmFails FragOKs FragFails FragCreates\nIp: 2 64 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n")

#: recorded value lines: case -> (netstat TcpExt values before, after, snmp Tcp values before, after)
RECORDED: dict[str, tuple[str, str, str, str]] = {
    "one_segment": (
        ("0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 "
         "0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 "
         "0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0"),
        ("0 0 0 0 0 0 0 0 0 0 1 0 0 0 0 0 0 0 0 0 0 27 3 0 1 0 0 0 0 0 0 0 0 0 0 0 0 1 0 0 0 0 0 0 0 "
         "0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 2 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 "
         "0 0 0 0 0 0 0 30 0 0 0 0 0 0 0 0 0 0 0 0 0 0 31 0 0 0 0 0 0 0 0 0 0 0 0"),
        ("1 200 120000 -1 0 0 0 0 0 0 0 0 0 0 0"),
        ("1 200 120000 -1 1 0 0 0 0 32 33 1 0 0 0"),
    ),
    "whole_window": (
        ("0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 "
         "0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 "
         "0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0"),
        ("0 0 0 0 0 0 0 0 0 0 1 0 0 0 0 0 0 0 0 0 0 22 7 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 7 1 0 0 0 0 0 "
         "0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 "
         "0 0 0 0 0 0 0 29 0 0 0 0 0 0 0 0 0 0 0 0 0 0 30 0 0 0 0 0 0 1 0 0 0 0 0"),
        ("1 200 120000 -1 0 0 0 0 0 0 0 0 0 0 0"),
        ("1 200 120000 -1 1 0 0 0 0 31 32 8 0 0 0"),
    ),
}


def text(netstat_values: str, tcp_values: str) -> str:
    """/proc/net/netstat + /proc/net/snmp text of 6.1 with these TcpExt / Tcp value lines."""
    return (f"{NETSTAT_HEADER}\nTcpExt: {netstat_values}\nIpExt: InNoRoutes InTruncatedPkts\nIpExt: 0 0\n"
            f"{IP_LINES}{SNMP_TCP_HEADER}\nTcp: {tcp_values}\n")


def synthetic(**values: int) -> str:
    """A 6.1 text whose counters are 0 except ``values`` (nstat names)."""
    names = NETSTAT_HEADER.split()[1:]
    tcp = SNMP_TCP_HEADER.split()[1:]
    for k in values:
        assert k.removeprefix("TcpExt") in names or k.removeprefix("Tcp") in tcp, k
    ext = " ".join(str(values.get("TcpExt" + n, 0)) for n in names)
    return text(ext, " ".join(str(values.get("Tcp" + n, -1 if n == "MaxConn" else 0)) for n in tcp))


def test_parse_keeps_tcp_sections_with_nstat_names():
    c = lossdetect.parse(synthetic(TcpExtTCPTimeouts=7, TcpRetransSegs=9))
    assert c["TcpExtTCPTimeouts"] == 7 and c["TcpRetransSegs"] == 9 and c["TcpMaxConn"] == -1
    assert not any(k.startswith(("Ip", "IpExt")) for k in c)
    # every counter classify() needs exists in Linux 6.1, and the module docstring explains each
    for name in lossdetect.REQUIRED:
        assert name in c, name
        assert name.removeprefix("TcpExt") in lossdetect.__doc__, name


@pytest.mark.parametrize("bad,match", [
    ("TcpExt: A B\n", "no value line"),
    ("TcpExt: A B\nTcpExt: 1\n", "2 names and 1 values"),
    ("TcpExt: A B\nTcpExt: 1 x\n", "TcpExtB = 'x'"),
    ("TcpExt: A B\nIpExt: 1 2\n", "no value line"),
])
def test_parse_refuses_malformed_text(bad, match):
    with pytest.raises(LossDetectError, match=match):
        lossdetect.parse(bad, "netstat")


def test_delta_and_its_refusals():
    before = lossdetect.parse(synthetic(TcpExtTCPTimeouts=3, TcpCurrEstab=4))
    after = lossdetect.parse(synthetic(TcpExtTCPTimeouts=5, TcpCurrEstab=1))
    d = lossdetect.delta(before, after)
    assert d["TcpExtTCPTimeouts"] == 2 and "TcpCurrEstab" not in d and "TcpMaxConn" not in d
    with pytest.raises(LossDetectError, match="TcpExtTCPTimeouts went down"):
        lossdetect.delta(after, before)
    assert lossdetect.delta({}, {"TcpExtX": 4}) == {"TcpExtX": 4}


def test_classify_counts_each_detection_from_its_counters():
    # hand-made difference, expected values computed from the counters' meaning:
    # 5 timer expiries of which 2 were SYN retransmissions -> 3 RTO detections
    d = lossdetect.delta(lossdetect.parse(synthetic()), lossdetect.parse(synthetic(
        TcpExtTCPTimeouts=5, TcpExtTCPSynRetrans=2, TcpExtTCPSackRecovery=4, TcpExtTCPRenoRecovery=1,
        TcpExtTCPSackRecoveryFail=1, TcpExtTCPLossUndo=1, TcpExtTCPSpuriousRTOs=1, TcpExtTCPDSACKUndo=2,
        TcpExtTCPFastRetrans=6, TcpExtTCPSlowStartRetrans=8, TcpRetransSegs=19, TcpExtTCPDSACKRecvSegs=3,
        TcpExtTCPLossProbes=2, TcpExtTCPSACKReorder=2, TcpExtTCPTSReorder=1, TcpExtTCPSpuriousRtxHostQueues=4)))
    det = lossdetect.classify(d)
    assert det == lossdetect.LossDetection(
        rto=3, fast=5, rto_in_recovery=1, spurious_rto=2, spurious_fast=2, loss_probes=2, retrans_segs=17,
        fast_retrans_segs=6, slow_start_retrans_segs=8, spurious_retrans_segs=3, syn_timeouts=2, reordering=3,
        rtx_suppressed=4)
    assert det.summary_columns() == {"loss_events_rto": 3, "loss_events_fast": 5, "retrans_segs": 17,
                                     "spurious_retrans_segs": 3}
    with pytest.raises(LossDetectError, match="TcpExtTCPDSACKRecvSegs"):
        lossdetect.classify({k: v for k, v in d.items() if k != "TcpExtTCPDSACKRecvSegs"})


def test_between_sums_namespaces_and_refuses_different_ones():
    zero = lossdetect.parse(synthetic())
    one = lossdetect.parse(synthetic(TcpExtTCPTimeouts=1, TcpRetransSegs=1))
    fast = lossdetect.parse(synthetic(TcpExtTCPSackRecovery=1, TcpRetransSegs=2, TcpExtTCPFastRetrans=2))
    total = lossdetect.between({"a": zero, "b": zero}, {"a": one, "b": fast})
    assert (total.rto, total.fast, total.retrans_segs) == (1, 1, 3)
    assert lossdetect.per_namespace({"a": zero}, {"a": one})["a"]["rto"] == 1
    with pytest.raises(LossDetectError, match="different namespaces"):
        lossdetect.between({"a": zero}, {"b": zero})


@pytest.mark.parametrize("case", sorted(RECORDED))
def test_recorded_guest_cases_classify_as_the_wire_did(case):
    """What the guest's drop rule did (tc's own drop counter), against the classification
    of the counters recorded around it: one segment -> fast retransmit, window -> RTO."""
    nb, na, tb, ta = RECORDED[case]
    det = lossdetect.classify(lossdetect.delta(lossdetect.parse(text(nb, tb)), lossdetect.parse(text(na, ta))))
    if case == "one_segment":       # tc dropped 1 full data segment of the connection
        assert (det.fast, det.rto, det.retrans_segs) == (1, 0, 1), det
    else:                           # tc dropped the 8 segments of a window
        assert (det.rto, det.fast, det.retrans_segs, det.slow_start_retrans_segs) == (1, 0, 8, 7), det
