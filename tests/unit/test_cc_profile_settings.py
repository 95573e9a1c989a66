"""Congestion-control profiles without a kernel: selection, dilation, bounds."""

from __future__ import annotations

import pytest

from testbed.cc import modules, profiles, selection, sockops
from testbed.definition import validate
from testbed.dilation import TimeDilation
from testbed.errors import DefinitionError


def test_every_profile_is_registered_with_its_algorithm():
    assert set(profiles.PROFILES) == {"saw", "sawl", "sack", "msack", "reno", "cubic", "bbr", "paced-reno"}
    algs = {n: c.algorithm for n, c in profiles.PROFILES.items()}
    assert algs["paced-reno"] == "reno" and algs["sack"] == "sack" and algs["sawl"] == "sawl"
    # every paper profile runs one of our modules (their .init arms the initial RTO)
    for name in ("saw", "sawl", "sack", "msack"):
        assert algs[name] in modules.OUR_MODULES and (modules.KERNEL_DIR / f"tcp_{algs[name]}.c").exists()
    for name in ("saw", "sawl", "sack", "msack", "paced-reno"):
        assert profiles.PROFILES[name].differences, f"{name} documents no paper-vs-kernel difference"


def test_paper_times_are_dilated_and_rounded_up_to_jiffies():
    s = profiles.make("saw").settings(TimeDilation(20), hz=250)
    assert s["init_rto"] == {"requested_paper_s": 1e-3, "requested_emulation_s": pytest.approx(0.020),
                             "jiffies": 5, "effective_s": pytest.approx(0.020),
                             "effective_paper_s": pytest.approx(1e-3), "clamped": False}
    assert s["route"] == {"rto_min": "4ms", "quickack": "1", "initcwnd": "1"}
    # 1 ms x 10 = 10 ms is 2.5 jiffies: rounded up to 3 (12 ms), never early
    assert profiles.make("sack").settings(TimeDilation(10), hz=250)["init_rto"]["jiffies"] == 3
    conventional = profiles.make("sack", {"init_rto": "1 s"}).settings(TimeDilation(2), hz=250)
    assert conventional["init_rto"]["effective_s"] == pytest.approx(2.0)


def test_sawl_tau_is_mtu_duration_at_link_rate_times_d():
    s = profiles.make("sawl").settings(TimeDilation(20), link_rate_bps=12e6, mtu=1500)
    assert s["module_params"]["tau_ns"] == 20_000_000  # 1 ms x 20
    assert s["extra_rto"]["p_tau_emulation_s"] == pytest.approx(0.080)
    assert profiles.make("sawl", {"p": 0}).settings(TimeDilation(1), 10e9, 9000)["module_params"]["tau_ns"] == 7200
    with pytest.raises(DefinitionError, match="link rate"):
        profiles.make("sawl").settings(TimeDilation(1))


@pytest.mark.parametrize("name,options,key", [
    ("sawl", {"p": 65}, "cca.p"), ("saw", {"alpha_pct": 99}, "cca.alpha_pct"),
    ("sack", {"init_rto": "1"}, "cca.init_rto"), ("sack", {"init_rto": "0 s"}, "cca.init_rto"),
    ("reno", {"p": 4}, "cca.p"), ("nope", {}, "cca"),
])
def test_bad_profile_options_name_key_value_and_range(name, options, key):
    with pytest.raises(DefinitionError) as exc:
        profiles.make(name, options)
    assert exc.value.key == key


def test_module_parameter_bounds_mirror_the_kernel_modules():
    assert modules.check_params("sawl", {"p": 64, "tau_ns": 0}) == {"p": 64, "tau_ns": 0}
    with pytest.raises(modules.CongestionControlError, match=r"p=65 out of range: an integer 0\.\.64"):
        modules.check_params("sawl", {"p": 65})
    with pytest.raises(modules.CongestionControlError, match="no parameter"):
        modules.check_params("saw", {"p": 1})
    source = (modules.KERNEL_DIR / "tcp_sawl.c").read_text()
    for name in ("saw", "sawl", "msack"):
        source = (modules.KERNEL_DIR / f"tcp_{name}.c").read_text() + \
            (modules.KERNEL_DIR / "tcp_saw_core.h").read_text()
        for key, (lo, hi, default, _doc) in modules.OUR_MODULES[name].items():
            assert f"param_set_uint_minmax(val, kp, {lo}, {hi})" in source, (name, key)
            assert f"{key} __read_mostly = {default};" in source, (name, key)
            assert f"MODULE_PARM_DESC({key}," in source, (name, key)
    assert modules.OUR_MODULES["sack"] == {}
    assert "module_param" not in (modules.KERNEL_DIR / "tcp_sack.c").read_text()


def test_definition_cca_table_with_per_host_override():
    raw = {"experiment": {"name": "t", "family": "netem-path"},
           "cca": {"profile": "msack", "hosts": {"h2": {"profile": "sack", "init_rto": "1 s"}}}}
    defn = validate(raw)
    assert defn.cca.choice_for("h1").profile == "msack"
    assert defn.cca.profile_for("h2").options["init_rto"].si == 1.0
    assert defn.resolved()["cca"] == {"profile": "msack", "hosts": {"h2": {"profile": "sack", "init_rto": "1 s"}}}
    with pytest.raises(DefinitionError) as exc:
        validate({**raw, "cca": {"profile": "sack", "hosts": {"h2": {"profile": "vegas"}}}})
    assert exc.value.key == "cca.hosts.h2.profile"
    assert validate({"experiment": {"name": "t", "family": "netem-path"}}).cca is None


def test_manifest_records_effective_settings():
    from testbed import manifest

    defn = validate({"experiment": {"name": "t", "family": "netem-path"}, "run": {"tdf": 20},
                     "cca": {"profile": "saw", "hosts": {"h2": {"profile": "reno"}}}})
    rec = manifest.congestion_control(defn)
    assert rec["selection"]["profile"] == "saw"
    assert rec["hosts"]["h1"]["init_rto"]["effective_s"] == pytest.approx(0.020)
    assert rec["hosts"]["h2"]["algorithm"] == "reno" and "init_rto" not in rec["hosts"]["h2"]
    assert any("alpha" in d for d in rec["hosts"]["h1"]["differences"])


def test_jiffies_round_up():
    assert sockops.to_jiffies(0.020, 250) == 5
    assert sockops.to_jiffies(0.0201, 250) == 6
    assert sockops.to_jiffies(1e-6, 250) == 1


def test_cli_help_has_examples():
    from testbed.cli import build_parser

    text = build_parser().format_help()
    assert "testbed cc load sawl --param p=4" in text and "testbed trace cwnd --port 5201" in text


# ---- initial RTO, SAW's cap, windows and ACKs: what the kernel really uses ----------------
def test_initial_rto_above_tcp_rto_max_is_recorded_with_its_effective_value(caplog):
    """electronic@1 s at D = 10 000: 10 000 s of kernel time, but tcp_timeout_init() clamps
    to TCP_RTO_MAX = 120 s, i.e. 12 ms of paper time; the record says so, with a warning."""
    with caplog.at_level("WARNING", logger="testbed.cc.profiles"):
        s = profiles.make("sack", {"init_rto": "1 s"}).settings(TimeDilation(10_000), hz=250)
    r = s["init_rto"]
    assert r["requested_paper_s"] == 1.0 and r["requested_emulation_s"] == pytest.approx(10_000)
    assert r["clamped"] is True and r["jiffies"] == 120 * 250
    assert r["effective_s"] == pytest.approx(120.0) and r["effective_paper_s"] == pytest.approx(0.012)
    assert "TCP_RTO_MAX" in r["note"] and r["note"] in s["differences"]
    assert any("TCP_RTO_MAX" in m and "sack" in m for m in caplog.messages), caplog.messages
    # no value claims more than the kernel can time
    assert all(v != pytest.approx(10_000) for k, v in r.items() if k.startswith("effective"))
    # 1 ms at D = 10 000 is 10 s: exact, no warning, no note
    caplog.clear()
    with caplog.at_level("WARNING", logger="testbed.cc.profiles"):
        ok = profiles.make("sack").settings(TimeDilation(10_000), hz=250)["init_rto"]
    assert ok["clamped"] is False and ok["effective_paper_s"] == pytest.approx(1e-3) and not caplog.messages
    # the last value the kernel can time is not clamped: 120 s at D = 120 -> 1 s paper
    edge = profiles.make("sack", {"init_rto": "1 s"}).settings(TimeDilation(120), hz=250)["init_rto"]
    assert edge["clamped"] is False and edge["effective_paper_s"] == pytest.approx(1.0)


@pytest.mark.parametrize("tdf,param_ms,clamped,cap_paper_s", [
    (1, 60_000, False, 60.0), (2, 120_000, False, 60.0), (20, 120_000, True, 6.0),
    (10_000, 120_000, True, 0.012)])
def test_saw_rto_cap_is_60_s_times_d_at_most_tcp_rto_max(tdf, param_ms, clamped, cap_paper_s):
    for name, rate in (("saw", None), ("sawl", 10e9)):
        s = profiles.make(name).settings(TimeDilation(tdf), rate, 9000, hz=250)
        assert s["module_params"]["rto_max_ms"] == param_ms
        modules.check_params(name, s["module_params"])          # within the module's bounds
        cap = s["rto_max"]
        assert cap["requested_paper_s"] == 60.0 and cap["clamped"] is clamped
        assert cap["effective_paper_s"] == pytest.approx(cap_paper_s)
        assert any("TCP_RTO_MAX" in d and "cap of T" in d for d in s["differences"]) is clamped


def test_initial_window_and_per_packet_acks():
    for name in ("sack", "msack"):
        s = profiles.make(name).settings(TimeDilation(10_000), hz=250)
        assert s["route"]["initcwnd"] == "1" and s["route"]["quickack"] == "1", name
        assert s["initial_window_segments"] == 1 and s["per_packet_acks"] is True
        assert profiles.make(name, {"initial_window": 10}).settings(TimeDilation(1))["route"]["initcwnd"] == "10"
    # kernel profiles keep the kernel's defaults unless asked (E1 asks)
    reno = profiles.make("reno").settings(TimeDilation(1))
    assert "initcwnd" not in reno["route"] and "quickack" not in reno["route"]
    assert reno["initial_window_segments"] == "kernel default (10)" and reno["per_packet_acks"] is False
    e1 = profiles.make("cubic", {"initial_window": 1, "quickack": 1}).settings(TimeDilation(1))
    assert e1["route"] == {"initcwnd": "1", "quickack": "1"}
    # only our modules re-arm the first data segment: the kernel's reno does not claim it
    paced = profiles.make("paced-reno").settings(TimeDilation(1))["differences"]
    assert not any("first data segment" in d or "quickack 1" in d for d in paced)
    for name in ("saw", "sawl", "sack", "msack"):
        diffs = profiles.make(name).settings(TimeDilation(1), 10e9)["differences"]
        assert any("first data segment is timed with the initial RTO" in d for d in diffs), name
    # SAW has one segment in flight by construction: no initial_window option
    with pytest.raises(DefinitionError) as exc:
        profiles.make("saw", {"initial_window": 2})
    assert exc.value.key == "cca.initial_window"


@pytest.mark.parametrize("value", [0, 1001, -1, 2.5, True])
def test_initial_window_bounds(value):
    with pytest.raises(DefinitionError) as exc:
        profiles.make("sack", {"initial_window": value})
    assert exc.value.key == "cca.initial_window" and exc.value.value == value
    assert profiles.make("sack", {"initial_window": 1000}).options["initial_window"] == 1000
    with pytest.raises(DefinitionError) as exc:
        profiles.make("sack", {"quickack": 2})
    assert exc.value.key == "cca.quickack"


def test_undilated_kernel_timers_are_listed_in_paper_time():
    rows = {r["name"]: r for r in profiles.undilated_timers(TimeDilation(10_000), hz=250)}
    assert rows["TCP_RTO_MAX"]["paper_s"] == pytest.approx(0.012)
    assert rows["TCP_DELACK_MAX"]["paper_s"] == pytest.approx(20e-6)
    assert rows["TCP_TIMEWAIT_LEN"]["paper_s"] == pytest.approx(6e-3)
    assert rows["jiffy (1/CONFIG_HZ)"]["paper_s"] == pytest.approx(0.4e-6)
    s = profiles.make("msack").settings(TimeDilation(10_000), hz=250)
    assert any("emulation time" in d and "TCP_RTO_MAX 120 s (12 ms)" in d for d in s["differences"])
    # every constant in the table is in docs/congestion-control.md
    doc = (modules.KERNEL_DIR.parent / "docs" / "congestion-control.md").read_text()
    for name, _k, _role in profiles.KERNEL_TIMERS:
        assert name.split(" (")[0].split(" /")[0] in doc, name


def test_e1_passes_initial_window_and_refuses_it_for_saw():
    from testbed.families.e1_fattree import E1FatTree, retransmission_columns

    base = {"initial_rto": "1 ms", "sawl_p": 4, "initial_window": 3}
    assert E1FatTree.profile_options({**base, "cca": "sack"})["initial_window"] == 3
    assert E1FatTree.profile_options({**base, "cca": "cubic"})["quickack"] == 1
    assert "initial_window" not in E1FatTree.profile_options({**base, "cca": "saw"})
    for cca in ("saw", "sawl", "sack", "msack", "reno", "cubic"):
        profiles.make(cca, E1FatTree.profile_options({**base, "cca": cca}))  # accepted options
    raw = {"experiment": {"name": "t", "family": "e1-fattree"}, "params": {"cca": "saw", "initial_window": 2}}
    with pytest.raises(DefinitionError) as exc:
        validate(raw)
    assert exc.value.key == "params.initial_window" and "1..1000" in exc.value.accepted
    with pytest.raises(DefinitionError) as exc:
        validate({**raw, "params": {"cca": "sack", "initial_window": 1001}})
    assert exc.value.key == "params.initial_window"

    class F:
        def __init__(self, data, retrans, dsack):
            self.data_segs_out, self.retrans_segs, self.dsack_dups = data, retrans, dsack

    cols = retransmission_columns([F(100, 3, 1), F(300, 1, 1), F(None, None, None)])
    assert cols == {"data_segments": 400, "retransmits": 4, "spurious_retransmits": 2,
                    "spurious_fraction": 0.005}
    import math
    assert math.isnan(retransmission_columns([])["spurious_fraction"])


# ---- E2: maximum window, MSS, the paper's RTO ------------------------------------------------
@pytest.mark.parametrize("key,value", [("max_window", 0), ("max_window", 65536), ("max_window", 2.5),
                                       ("max_window", True), ("mss", 87), ("mss", 8949), ("mss", "512")])
def test_max_window_and_mss_bounds_name_key_value_and_range(key, value):
    with pytest.raises(DefinitionError) as exc:
        profiles.make("sack", {key: value})
    assert exc.value.key == f"cca.{key}" and exc.value.value == value
    lo, hi = {"max_window": (1, 65535), "mss": (88, 8948)}[key]
    if not isinstance(value, (str, float)) and value is not True:
        assert f"{lo}..{hi}" in exc.value.accepted
    for ok in (lo, hi):
        assert profiles.make("sack", {key: ok}).options[key] == ok


def test_saw_has_no_max_window_and_mss_must_fit_the_mtu():
    for name in ("saw", "sawl"):
        with pytest.raises(DefinitionError) as exc:
            profiles.make(name, {"max_window": 8})
        assert exc.value.key == "cca.max_window"
    # 1448 B of payload + 12 B timestamps + 40 B headers = 1500 B: the largest at MTU 1500
    assert profiles.make("sack", {"mss": 1448}).settings(TimeDilation(1), mtu=1500)["mss"]["ip_datagram_bytes"] == 1500
    with pytest.raises(DefinitionError) as exc:
        profiles.make("sack", {"mss": 1449}).settings(TimeDilation(1), mtu=1500)
    assert exc.value.key == "cca.mss" and "1448" in exc.value.accepted


def test_e2_mss_is_512_payload_bytes_through_advmss():
    s = profiles.make("sack", {"mss": 512}).settings(TimeDilation(1000), mtu=1500, hz=250)
    # RFC 9293: the advertised MSS excludes TCP options; the sender subtracts the 12 B of
    # the timestamp option it puts in every segment -> 512 B of payload
    assert s["route"]["advmss"] == "524" and s["sysctls"]["net.ipv4.tcp_timestamps"] == "1"
    assert s["mss"] == {**s["mss"], "payload_bytes": 512, "route_advmss": 524, "ip_datagram_bytes": 564,
                        "ethernet_frame_bytes": 578, "timestamps": True}


def per_mss_sndbuf(mss: int) -> int:
    """tcp_sndbuf_expand()'s memory per segment in 6.1 (x86-64): payload + MAX_TCP_HEADER
    (320) + SKB_DATA_ALIGN(sizeof(struct skb_shared_info)) (320), rounded up to a power of 2."""
    v = mss + 320 + 320
    return 1 << (v - 1).bit_length()


@pytest.mark.parametrize("wm,mss", [(8, 512), (64, 512), (512, 512), (512, 1448), (65535, 1448), (65535, 88)])
def test_max_window_settings_and_buffers_that_never_limit_below_it(wm, mss):
    opts = {"max_window": wm, "mss": mss} if mss != 1448 else {"max_window": wm}
    s = profiles.make("sack", opts).settings(TimeDilation(1000), mtu=1500, hz=250)
    mw = s["max_window"]
    assert mw["segments"] == wm and mw["mss_bytes"] == mss and mw["bytes"] == wm * mss
    assert "TCP_BPF_SNDCWND_CLAMP" in mw["mechanism"] and "ssthresh" in mw["mechanism"]
    rmem = [int(x) for x in s["sysctls"]["net.ipv4.tcp_rmem"].split()]
    wmem = [int(x) for x in s["sysctls"]["net.ipv4.tcp_wmem"].split()]
    assert s["sysctls"]["net.ipv4.tcp_adv_win_scale"] == "1"
    # never below the kernel's defaults (4096 131072 6291456 / 4096 16384 4194304)
    assert rmem[0] == 4096 and rmem[1] >= 131072 and rmem[2] >= max(6291456, rmem[1])
    assert wmem[:2] == [4096, 16384] and wmem[2] >= 4194304
    # receiver: window = rcvbuf / 2 (adv_win_scale 1) must hold Wm segments at their
    # memory cost (truesize <= payload + 1 KiB), from the start (rmem[1] is the initial rcvbuf)
    assert rmem[1] // 2 >= wm * (mss + 1024)
    # sender: autotuning wants 2 x cwnd x per-segment memory; tcp_wmem[2] must allow it at cwnd = Wm
    assert wmem[2] >= 2 * wm * per_mss_sndbuf(mss)
    assert mw["sysctls"] == {k: v for k, v in s["sysctls"].items() if k in mw["sysctls"]}


@pytest.mark.parametrize("rto,tdf,jiffies,route_ms", [
    ("30 ms", 1000, 7500, "30000ms"), ("10.5 ms", 1000, 2625, "10500ms"),
    ("10.5 ms", 1024, 2688, "10752ms"), ("30 ms", 999, 7493, "29970ms")])
def test_e2_rto_is_initial_and_minimum_rto_at_d_1000(rto, tdf, jiffies, route_ms):
    """The paper's "RTO is set to 30 ms" (slow) / 10.5 ms (fast): init_rto = rto_min = that,
    x D, in whole jiffies (HZ = 250: 4 ms), never early."""
    s = profiles.make("sack", {"init_rto": rto, "rto_min": rto}).settings(TimeDilation(tdf), hz=250)
    paper = float(rto.split()[0]) * 1e-3
    init, low = s["init_rto"], s["rto_min"]
    assert init["jiffies"] == jiffies and init["clamped"] is False
    assert init["effective_s"] == pytest.approx(jiffies / 250)
    assert init["effective_s"] >= paper * tdf - 1e-9
    assert init["effective_s"] - paper * tdf < 1 / 250
    assert init["effective_paper_s"] == pytest.approx(jiffies / 250 / tdf)
    assert s["route"]["rto_min"] == route_ms
    assert low["requested_paper_s"] == pytest.approx(paper) and low["effective_s"] >= paper * tdf - 1e-9
    # the difference from ns-2's minrto_ is written down with the run
    assert any("SRTT + max(4 RTTVAR, min RTO)" in d and "ns-2" in d for d in s["differences"])


def test_definition_accepts_e2_options_and_the_manifest_records_them():
    from testbed import manifest

    defn = validate({"experiment": {"name": "t", "family": "netem-path"}, "run": {"tdf": 1000},
                     "cca": {"profile": "sack", "init_rto": "30 ms", "rto_min": "30 ms", "max_window": 512,
                             "mss": 512}})
    rec = manifest.congestion_control(defn)["hosts"]["h1"]
    assert rec["max_window"]["segments"] == 512 and rec["mss"]["payload_bytes"] == 512
    assert rec["init_rto"]["effective_paper_s"] == pytest.approx(0.030)
    assert rec["route"]["advmss"] == "524" and rec["route"]["rto_min"] == "30000ms"
    with pytest.raises(DefinitionError) as exc:
        validate({"experiment": {"name": "t", "family": "netem-path"}, "cca": {"profile": "sack", "max_window": 0}})
    assert exc.value.key == "cca.max_window"


def test_timestamps_off_counts_the_payload_the_kernel_sends():
    """E2 and E5 turn TCP timestamps off (payload MTU - 40 B); the profile's option says so,
    sets the sysctl, and the maximum window's record counts those bytes (it counted
    MTU - 52 B before, 0.8 % low at MTU 1500, 2.4 % at E2's 552)."""
    off = profiles.make("reno", {"max_window": 20, "timestamps": 0}).settings(TimeDilation(20), mtu=1500, hz=250)
    assert off["sysctls"]["net.ipv4.tcp_timestamps"] == "0"
    assert off["max_window"]["mss_bytes"] == 1460 and off["max_window"]["bytes"] == 20 * 1460
    on = profiles.make("reno", {"max_window": 20, "timestamps": 1}).settings(TimeDilation(20), mtu=1500, hz=250)
    assert on["sysctls"]["net.ipv4.tcp_timestamps"] == "1" and on["max_window"]["mss_bytes"] == 1448
    unset = profiles.make("reno", {"max_window": 20}).settings(TimeDilation(20), mtu=1500, hz=250)
    assert "net.ipv4.tcp_timestamps" not in unset["sysctls"] and unset["max_window"]["mss_bytes"] == 1448
    with pytest.raises(DefinitionError) as exc:
        profiles.make("sack", {"max_window": 8, "mss": 512, "timestamps": 0}).settings(TimeDilation(1000))
    assert exc.value.key == "cca.timestamps"
    with pytest.raises(DefinitionError) as exc:
        profiles.make("reno", {"timestamps": 2})
    assert exc.value.key == "cca.timestamps" and "0..1" in str(exc.value)


def test_e2_and_e5_profiles_record_their_segments_without_timestamps():
    from testbed.families.e2_obs import MTU, E2Obs
    from testbed.families.e5_optram import E5OpticalRam

    e5 = {p.name: p.parse(p.default, p.name) for p in E5OpticalRam.params}
    s5 = profiles.make("reno", E5OpticalRam.profile_options(e5)).settings(TimeDilation(20), mtu=1500, hz=250)
    assert s5["sysctls"]["net.ipv4.tcp_timestamps"] == "0" and s5["max_window"]["mss_bytes"] == 1460
    e2 = {p.name: p.parse(p.default, p.name) for p in E2Obs.params}
    s2 = profiles.make("sack", E2Obs.profile_options(e2)).settings(TimeDilation(1000), mtu=MTU, hz=250)
    assert s2["sysctls"]["net.ipv4.tcp_timestamps"] == "0" and s2["max_window"]["mss_bytes"] == 512
