"""How many loader processes a k=4 fat-tree costs (each start ~0.3 s under software
emulation), counted without root: the Emulation and OpticalFabric code run as in a
run, with namespaces, links, tc and the loader replaced by recorders. The loader's
stand-in answers each operation of a batch as tbload does and records the batch, so
the pins, programs and ledger entries are checked as well as the count."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from testbed import bpf, cmd, ledger, net, nsops
from testbed.context import PointContext
from testbed.dilation import TimeDilation
from testbed.families.e1_fattree import E1FatTree

TOKEN = "tl"


class FakeLoader:
    """Stands in for ``tbload``: one call per process start; answers every operation."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], list[list[str]]]] = []
        #: (netns, dev) -> the ifindex the stand-in reported
        self.ifindex: dict[tuple[str, str], int] = {}
        #: the ledger's resources at each start (set ``ledger`` to record them)
        self.ledger: ledger.Ledger | None = None
        self.recorded: list[list[str]] = []

    def __call__(self, args: list[str], input: str | None = None, timeout_s: float | None = None) -> str:
        ops = [line.split("\t") for line in (input or "").splitlines()]
        self.calls.append((args, ops))
        if self.ledger is not None:
            self.recorded.append([e.resource for e in self.ledger.entries])
        out = []
        for op in ops:
            if op[0] == "load":
                out.append(json.dumps({"op": "load", "obj": op[1]}))
            elif op[0] == "attach":
                ifindex = self.ifindex.setdefault((op[1], op[2]), 100 + len(self.ifindex))
                out.append(json.dumps({"op": "attach", "dev": op[2], "dir": op[3], "ifindex": ifindex,
                                       "prog_id": 1, "handle": 1, "priority": 1, "prog_pin": op[4]}))
            elif op[0] == "lookup":
                out.append(f"{op[2]} -")
            elif op[0] == "dump":
                out.append(json.dumps({"op": "dump", "count": 0}))
        return "".join(line + "\n" for line in out)

    def ops(self, name: str) -> list[list[str]]:
        return [op for _, ops in self.calls for op in ops if op[0] == name]


@pytest.fixture
def loader(monkeypatch, tmp_path):
    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path / "state"))
    fake = FakeLoader()
    monkeypatch.setattr(bpf, "_run_loader", fake)
    monkeypatch.setattr(bpf, "ensure_bpffs", lambda: None)
    monkeypatch.setattr(bpf, "_require", lambda path: path)
    return fake


@pytest.fixture
def no_kernel(monkeypatch):
    """Namespaces, links, addresses, sysctls and tc replaced by no-ops."""
    for name in ("configure_link", "add_veth", "add_address", "set_default_route", "sysctl_write"):
        monkeypatch.setattr(nsops, name, lambda *a, **kw: None)
    monkeypatch.setattr(nsops, "link_exists", lambda *a, **kw: False)
    monkeypatch.setattr(net, "netns_exists", lambda name: False)
    monkeypatch.setattr(cmd, "run", lambda *a, **kw: None)


def fattree(k: int = 4):
    v = {p.name: p.parse(p.default, p.name) for p in E1FatTree.params}
    v["k"] = k
    return E1FatTree.topology(v, TimeDilation(10.0))


def test_a_k4_fat_tree_attaches_every_node_with_one_loader_start(loader, no_kernel):
    led = ledger.Ledger.create("loader-starts")
    loader.ledger = led
    emu = net.Emulation(fattree(), led, TOKEN)
    emu.build()
    fab = emu.optical
    assert fab is not None and len(fab.nodes) == 36
    pin = bpf.PIN_ROOT / f"{TOKEN}-optical"
    attaches = [args_ops for args_ops in loader.calls if any(op[0] == "attach" for op in args_ops[1])]
    assert len(attaches) == 1  # 36 nodes: was 37 starts (a map load, then one per node)
    loads, attach = loader.ops("load"), loader.ops("attach")
    obj = str(bpf.EBPF_DIR / "optswitch.bpf.o")
    assert loads == [["load", obj, str(pin), str(pin / "progs" / f"node{np.node_id}"), f"tb_node_id={np.node_id}",
                      f"tb_is_switch={int(np.role != 'host')}", "tb_test_mode=0",
                      f"tb_reads_waiting={int(np.assignment.arch.reads_waiting)}"] for np in fab.nodes.values()]
    assert attach == [["attach", np.netns, dev, d, f"@optsw_{d}"]
                      for np in fab.nodes.values() for dev in np.devs for d in ("ingress", "egress")]
    # every port's ifindex is its device's, as the loader reported it
    assert len(loader.ifindex) == 96
    for np in fab.nodes.values():
        assert np.ifindex_of_port == {i: loader.ifindex[(np.netns, d)] for i, d in enumerate(np.devs)}
        assert [p.ifindex for p in np.ports] == [loader.ifindex[(np.netns, d)] for d in np.devs]
    # the configuration (its three maps in one batch, in this order) and the routes follow
    assert [list(dict.fromkeys(op[1].rsplit("/", 1)[1] for op in ops)) for _, ops in loader.calls[1:]] == [
        ["optsw_cfg", "optsw_state", "optsw_ifport"], ["optsw_routes"]]
    assert len(loader.calls) == 3  # was 41, then 5 (a process per configuration map)
    pins = [e.attrs for e in led.entries if e.resource == "bpf-pin"]
    assert pins == [{"path": str(pin)}]
    qdiscs = [(e.attrs["netns"], e.attrs["dev"]) for e in led.entries if e.resource == "qdisc"]
    assert qdiscs == [(np.netns, d) for np in fab.nodes.values() for d in np.devs]
    # the pin dir is in the ledger before the first loader start creates it
    assert "bpf-pin" in loader.recorded[0]


def context(led: ledger.Ledger, tmp_path) -> PointContext:
    """The PointContext of point p1 of a run (what instruments() uses of it)."""
    return PointContext(defn=SimpleNamespace(tdf=TimeDilation(1.0)), point=SimpleNamespace(id="p1"),  # type: ignore[arg-type]
                        dir=tmp_path, ledger=led, token=TOKEN, pcap_links=[], pcap_dir=tmp_path)


def test_instruments_attach_every_host_port_counter_with_one_loader_start(loader, tmp_path):
    led = ledger.Ledger.create("instruments")
    hosts = [SimpleNamespace(name=f"h{i}", netns=f"{TOKEN}-h{i}", intfs=[f"h{i}-eth0"]) for i in range(16)]
    emu = SimpleNamespace(hosts=lambda: hosts, optical=None)
    with context(led, tmp_path).instruments(emu):
        assert len(loader.calls) == 1  # was 32: one per host port and direction
    pin = bpf.PIN_ROOT / f"{TOKEN}-p1"
    assert loader.ops("load") == [
        ["load", str(bpf.EBPF_DIR / "portstat.bpf.o"), str(pin), str(pin / "progs" / f"h{n - 1}-eth0-{d}"),
         f"tb_node_id={n}", "tb_port_id=1", f"tb_direction={bpf.DIRECTIONS[d]}"]
        for n in range(1, 17) for d in ("ingress", "egress")]
    assert loader.ops("attach") == [["attach", h.netns, h.intfs[0], d, "@portstat"]
                                    for h in hosts for d in ("ingress", "egress")]
    assert [e.attrs for e in led.entries if e.resource == "bpf-pin"] == [{"path": str(pin)}]
    assert (tmp_path / "ports.csv").exists() and (tmp_path / "machine.json").exists()


def test_a_port_the_loader_cannot_take_fails_before_any_loader_start(loader, tmp_path):
    led = ledger.Ledger.create("bad-port")
    hosts = [SimpleNamespace(name="h0", netns=f"{TOKEN}-h0", intfs=["h0-eth0"]),
             SimpleNamespace(name="h1", netns=f"{TOKEN}-h1", intfs=["bad dev"])]
    with pytest.raises(bpf.BpfError, match="'bad dev'"):
        with context(led, tmp_path).instruments(SimpleNamespace(hosts=lambda: hosts, optical=None)):
            pass
    assert loader.calls == [] and led.entries == []

