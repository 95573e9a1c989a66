"""``paced-reno``'s option ``pacer``: parsing, what settings() records, and what apply()
does to a host (a fake host that records the commands run in it, the sysctls written
and the sock_ops attachment asked for; no kernel needed)."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace
from typing import Any

import pytest

from testbed.cc import modules, profiles, sockops
from testbed.dilation import TimeDilation
from testbed.errors import DefinitionError


class FakeLedger:
    def __init__(self) -> None:
        self.entries: list[tuple[str, dict[str, Any]]] = []
        self.removed: list[int] = []

    def add(self, resource: str, **attrs: Any) -> int:
        self.entries.append((resource, attrs))
        return len(self.entries) - 1

    def remove(self, seq: int) -> None:
        self.removed.append(seq)


class FakeHost:
    """One interface ``h1-eth0`` whose ``tc qdisc show`` prints ``qdisc``."""

    def __init__(self, qdisc: str) -> None:
        self.name, self.netns, self.intfs = "h1", "tok-h1", ["h1-eth0"]
        self.emu = SimpleNamespace(ledger=FakeLedger(), token="tok")
        self.qdisc = qdisc
        self.commands: list[list[str]] = []
        self.sysctls: dict[str, str] = {"net.ipv4.tcp_congestion_control": "cubic"}

    def run(self, argv: list[str], **_kw: Any) -> subprocess.CompletedProcess[str]:
        self.commands.append(argv)
        out = self.qdisc if argv[:3] == ["tc", "qdisc", "show"] else "[]" if argv[:2] == ["ip", "-j"] else ""
        return subprocess.CompletedProcess(argv, 0, out, "")

    def sysctl_get(self, key: str) -> str:
        return self.sysctls.get(key, "kernel")

    def sysctl(self, key: str, value: str | int) -> None:
        self.sysctls[key] = str(value)

    def tc_changes(self) -> list[list[str]]:
        return [c for c in self.commands if c[:1] == ["tc"] and c[2] != "show"]


@pytest.fixture
def attached(monkeypatch) -> list[dict[str, Any]]:
    """The sock_ops attachments apply() asks for (keyword arguments), none made."""
    calls: list[dict[str, Any]] = []

    def attach(ledger, **kw):
        ledger.add("bpf-pin", path=str(kw["pin_dir"]))
        calls.append(kw)
        return {"netns_cookie": 4242}

    monkeypatch.setattr(sockops, "attach", attach)
    monkeypatch.setattr(sockops, "kernel_hz", lambda release=None: 250)
    monkeypatch.setattr(modules, "allow", lambda algorithm: None)
    monkeypatch.setattr(profiles, "host_mtu", lambda host: 1500)
    return calls


HOSTNIC = "qdisc hostnic 8001: root refcnt 2 rate 125Mbit\n"


@pytest.mark.parametrize("value", ["FQ", "none", "", "tcp ", 1, True, None])
def test_pacer_accepts_fq_or_tcp_only_and_names_key_value_and_words(value):
    with pytest.raises(DefinitionError) as exc:
        profiles.make("paced-reno", {"pacer": value}, key="cca.hosts.h2")
    assert exc.value.key == "cca.hosts.h2.pacer" and exc.value.value == value
    assert exc.value.accepted == "one of fq, tcp"


def test_pacer_is_an_option_of_paced_reno_only():
    assert profiles.make("paced-reno", {"pacer": "tcp"}).options == {"pacer": "tcp"}
    for name in ("reno", "sack", "cubic"):
        with pytest.raises(DefinitionError) as exc:
            profiles.make(name, {"pacer": "tcp"})
        assert exc.value.key == "cca.pacer" and "pacer" not in exc.value.accepted, name


def test_settings_record_the_pacer():
    fq = profiles.make("paced-reno").settings(TimeDilation(1))
    tcp = profiles.make("paced-reno", {"pacer": "tcp"}).settings(TimeDilation(1))
    assert fq["pacer"] == "fq" and fq["pacing"]["pacer"] == "fq"   # the default: as before
    assert "net.ipv4.tcp_min_tso_segs" not in fq["sysctls"]
    assert tcp["pacer"] == "tcp" and tcp["options"] == {"pacer": "tcp"}
    assert tcp["pacing"]["max_pacing_rate_bytes_per_s"] == 4_294_967_294
    for s in (fq, tcp):
        assert s["sysctls"]["net.ipv4.tcp_pacing_ss_ratio"] == s["sysctls"]["net.ipv4.tcp_pacing_ca_ratio"] == "100"
    assert tcp["sysctls"]["net.ipv4.tcp_min_tso_segs"] == "1" and tcp["sysctls"]["net.ipv4.tcp_tso_rtt_log"] == "0"
    assert any(d.startswith("pacer tcp:") for d in tcp["differences"])
    assert any(d.startswith("pacer fq:") for d in fq["differences"])


def test_tcp_pacer_changes_no_qdisc_and_has_the_program_pace(attached):
    host = FakeHost(HOSTNIC)
    p = profiles.make("paced-reno", {"pacer": "tcp", "max_window": 20})
    s = p.apply(host, TimeDilation(1))
    assert host.tc_changes() == []                       # hostnic stays
    assert "qdiscs" not in s and s["pacer"] == "tcp"
    assert len(attached) == 1
    assert attached[0]["pacing"] is True and attached[0]["sndcwnd_clamp"] == 20 and attached[0]["netns"] == "tok-h1"
    assert s["pacing"]["netns_cookie"] == 4242 and s["pacing"]["pin_dir"].endswith("tok-cc/h1")
    assert host.sysctls["net.ipv4.tcp_congestion_control"] == "reno"
    assert host.sysctls["net.ipv4.tcp_min_tso_segs"] == "1" and host.sysctls["net.ipv4.tcp_pacing_ca_ratio"] == "100"
    p.undo()
    assert host.sysctls["net.ipv4.tcp_congestion_control"] == "cubic"
    assert host.sysctls["net.ipv4.tcp_min_tso_segs"] == "kernel"   # written back as read
    assert host.emu.ledger.removed == [0]                           # the program's pin


def test_tcp_pacer_attaches_the_program_even_without_other_sockops_settings(attached):
    host = FakeHost("qdisc netem 8002: root refcnt 2 limit 1000 delay 5ms\n")
    profiles.make("paced-reno", {"pacer": "tcp"}).apply(host, TimeDilation(1))   # netem is fine here
    assert [a["pacing"] for a in attached] == [True]
    assert attached[0]["sndcwnd_clamp"] == 0 and attached[0]["init_rto_jiffies"] == 0
    assert host.tc_changes() == []


def test_fq_pacer_replaces_the_root_qdisc_as_before(attached):
    host = FakeHost("qdisc pfifo_fast 0: root refcnt 2 bands 3\n")
    s = profiles.make("paced-reno").apply(host, TimeDilation(1))
    assert host.tc_changes() == [["tc", "qdisc", "replace", "dev", "h1-eth0", "root", "fq"]]
    assert s["qdiscs"] == {"h1-eth0": "fq"} and s["pacer"] == "fq"
    assert attached == []                                 # nothing for sock_ops to do
    with pytest.raises(modules.CongestionControlError, match='netem.*pacer = "tcp"'):
        profiles.make("paced-reno").apply(FakeHost("qdisc netem 8002: root refcnt 2\n"), TimeDilation(1))


def test_reno_with_a_window_limit_does_not_pace(attached):
    profiles.make("reno", {"max_window": 20}).apply(FakeHost(HOSTNIC), TimeDilation(1))
    assert [(a["pacing"], a["sndcwnd_clamp"]) for a in attached] == [(False, 20)]
