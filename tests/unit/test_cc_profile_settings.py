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
    assert algs["sack"] == algs["paced-reno"] == "reno" and algs["sawl"] == "sawl"
    for name in ("saw", "sawl", "sack", "msack", "paced-reno"):
        assert profiles.PROFILES[name].differences, f"{name} documents no paper-vs-kernel difference"


def test_paper_times_are_dilated_and_rounded_up_to_jiffies():
    s = profiles.make("saw").settings(TimeDilation(20), hz=250)
    assert s["init_rto"] == {"paper_s": 1e-3, "emulation_s": pytest.approx(0.020), "jiffies": 5,
                             "effective_s": pytest.approx(0.020)}
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
    for key, (lo, hi, default, _doc) in modules.OUR_MODULES["sawl"].items():
        assert f"param_set_uint_minmax(val, kp, {lo}, {hi})" in source, key
        assert f"{key} __read_mostly = {default};" in source, key


def test_definition_cca_table_with_per_host_override():
    raw = {"experiment": {"name": "t", "kind": "netem-path"},
           "cca": {"profile": "msack", "hosts": {"h2": {"profile": "sack", "init_rto": "1 s"}}}}
    defn = validate(raw)
    assert defn.cca.choice_for("h1").profile == "msack"
    assert defn.cca.profile_for("h2").options["init_rto"].si == 1.0
    assert defn.resolved()["cca"] == {"profile": "msack", "hosts": {"h2": {"profile": "sack", "init_rto": "1 s"}}}
    with pytest.raises(DefinitionError) as exc:
        validate({**raw, "cca": {"profile": "sack", "hosts": {"h2": {"profile": "vegas"}}}})
    assert exc.value.key == "cca.hosts.h2.profile"
    assert validate({"experiment": {"name": "t", "kind": "netem-path"}}).cca is None


def test_manifest_records_effective_settings():
    from testbed import manifest

    defn = validate({"experiment": {"name": "t", "kind": "netem-path"}, "run": {"tdf": 20},
                     "cca": {"profile": "saw", "hosts": {"h2": {"profile": "reno"}}}})
    rec = manifest.congestion_control(defn)
    assert rec["selection"]["profile"] == "saw"
    assert rec["hosts"]["h1"]["init_rto"]["emulation_s"] == pytest.approx(0.020)
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
