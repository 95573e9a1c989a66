"""Definitions are validated before anything is created; bad input exits 2 with a message
naming the key, the value and what is accepted."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import definition
from testbed.errors import DefinitionError

GOOD = """
[experiment]
name = "t"
family = "netem-path"
[params]
delay = "10 ms"
[sweep]
rate = ["20 Mbit/s", "50 Mbit/s"]
[run]
reps = 3
seed = 7
tdf = 2
"""


def write(tmp_path: Path, text: str, name: str = "exp") -> str:
    p = tmp_path / f"{name}.toml"
    p.write_text(text)
    return str(p)


def test_good_definition_points(tmp_path):
    d = definition.load(write(tmp_path, GOOD))
    pts = d.points()
    assert len(pts) == 6 and d.tdf.factor == 2
    assert [p.seed for p in pts[:3]] == [7000, 7001, 7002]
    assert pts[3].values["rate"].si == 50e6 and pts[0].values["delay"].si == 0.01
    assert d.resolved()["sweep"]["rate"] == ["20 Mbit/s", "50 Mbit/s"]


def test_overrides(tmp_path):
    d = definition.load(write(tmp_path, GOOD), overrides=definition.parse_set(["rate=5 Mbit/s", "delay=1 ms,2 ms"]),
                        tdf=3, reps=1)
    assert d.params["rate"].si == 5e6 and [q.si for q in d.sweep["delay"]] == [0.001, 0.002]
    assert d.tdf.factor == 3 and len(d.points()) == 2


@pytest.mark.parametrize("edit,key,needle", [
    (("[params]\n", "[params]\nspeed = \"1 s\"\n"), "params.speed", "parameters of family"),
    (("delay = \"10 ms\"", "delay = \"10\""), "params.delay", "missing unit"),
    (("delay = \"10 ms\"", "delay = 10"), "params.delay", "needs a unit"),
    (("rate = [\"20 Mbit/s\"", "rate = [\"-20 Mbit/s\""), "sweep.rate[0]", "> 0 bit/s"),
    (("tdf = 2", "tdf = 0.5"), "run.tdf", ">= 1"),
    (("name = \"t\"", "name = \"t; rm -rf /\""), "experiment.name", "[a-z0-9_.-]"),
    (("family = \"netem-path\"", "family = \"nope\""), "experiment.family", "one of e1-fattree, "),
    (("family = \"netem-path\"", "kind = \"netem-path\""), "experiment.kind", "now experiment.family"),
    (("[run]", "[bogus]\nx = 1\n[run]"), "bogus", "sections"),
    (("reps = 3", "reps = 0"), "run.reps", ">= 1"),
])
def test_invalid(tmp_path, edit, key, needle):
    with pytest.raises(DefinitionError) as e:
        definition.load(write(tmp_path, GOOD.replace(*edit)))
    assert e.value.key == key
    assert needle in str(e.value)
    assert "accepted" in str(e.value)


def test_cli_exits_2_before_creating_anything(tmp_path):
    """Through the real CLI: exit code 2, the message, and no results folder or ledger."""
    bad = write(tmp_path, GOOD.replace("tdf = 2", "tdf = 0.5"), name="bad")
    out = tmp_path / "out"
    env = dict(os.environ, TESTBED_STATE_DIR=str(tmp_path / "state"))
    for args in (["run", bad, "--out", str(out)],
                 ["run", write(tmp_path, GOOD), "--set", "rate=-1 Mbit/s", "--out", str(out)],
                 ["run", write(tmp_path, GOOD), "--tdf", "0.9", "--out", str(out)],
                 ["run", write(tmp_path, GOOD), "--set", "nosuch=1", "--out", str(out)]):
        p = subprocess.run([sys.executable, "-m", "testbed", *args], capture_output=True, text=True, env=env)
        assert p.returncode == 2, p.stderr
        assert "invalid value for" in p.stderr and "accepted:" in p.stderr
    assert not out.exists() and not (tmp_path / "state").exists()


def test_shipped_definitions_are_valid():
    for path in definition.EXPERIMENTS_DIR.glob("*.toml"):
        definition.load(str(path))


@pytest.mark.parametrize("profile,needs_modules", [("sack", True), ("saw", True), ("cubic", False)])
def test_a_cca_table_of_our_modules_needs_module_loading(tmp_path, profile, needs_modules):
    """A [cca] profile that runs one of kernel/'s modules (sack is one now) makes the run
    need module loading, so it is placed where modules load (the guest here)."""
    from testbed.runner import run_features

    defn = definition.load(write(tmp_path, GOOD + f'[cca]\nprofile = "{profile}"\n'))
    assert ("modules" in run_features(defn)) is needs_modules
    # E1's fabric needs modules whatever the profile: its hosts' NIC queue is the hostnic qdisc
    e1 = definition.load("e1-demo", overrides={"cca": profile})
    assert "modules" in run_features(e1)
