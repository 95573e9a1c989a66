"""Optical switch benchmarks: ns per packet of the optswitch ingress and egress programs
(JIT, native, BPF_PROG_TEST_RUN repeat), the fidelity monitor's p99 lateness at the
default D in the full-kernel guest, a CUBIC transfer's goodput with the hosts' hostnic
queue and with fq (TCP Small Queues), and the port model against the independent
simulator of the paper's switch (testbed/optical/oracle.py; a table on stdout), and the
optical-RAM reference node's speed (testbed/optical/ramsim.py, every architecture).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

from testbed.benchmarks import REPO, Measurement

#: D of the guest lateness benchmark (the guest tests' D: tau of 1514 B = 48 ms)
DEFAULT_TDF = 40000.0


def _prog_ns(prog: str, spec: str, repeat: int = 100000, runs: int = 5) -> list[float]:
    """Mean ns per run of ``prog`` over ``repeat`` runs of one 1514 B frame on a node of
    4 ports whose architecture is ``spec`` (``"hybrid:2"``, ``"electronic"``,
    ``"sb:1000000"``; loaded with its ``reads_waiting``).

    Test mode with the hook left at zero (time 0, output port 0, length skb->len): the
    egress repeats the same arrival, so a ``hybrid`` port mostly takes the drop path
    (lock, buffer-port scan), an ``electronic`` one always the buffer path with the full
    scan of the OCC_SLOTS occupancy slots (the worst case), and an optical RAM node whose
    buffer never fills scans them once per packet, before the decision (every slot soon
    holds a waiting packet).
    """
    from testbed import bpf
    from testbed.optical import architectures, layout, maps

    assignment = architectures.parse(spec, 4, role=None)
    pin = bpf.PIN_ROOT / f"bench-optsw-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    try:
        bpf.optswitch_load(pin)
        ports = [layout.PortConfig(layout.ps_per_byte(10e9)) for _ in range(4)]
        maps.configure_node(pin, 0, assignment, ports)
        maps.set_routes(pin, {(0, "10.0.0.2"): [0, 1, 2, 3]})
        res = bpf.prog_test_run("optswitch", prog, pin,
                                rodata=bpf._optsw_rodata(0, is_switch=True, test_mode=True,
                                                         reads_waiting=assignment.arch.reads_waiting),
                                data=bpf.udp_frame(1514), repeat=repeat, runs=runs)
        return [float(r["duration_ns"]) for r in res]
    finally:
        bpf.remove_pin_dir(pin)


def _guest_measurements() -> dict[str, list[float]]:
    """From one guest boot: the fidelity monitor's p99 lateness (us) at D = DEFAULT_TDF
    (``lateness``) and the goodput (Gb/s) of a CUBIC transfer over 4 electronic switches
    with the hosts' hostnic qdisc and with fq as their queue (``tsq-hostnic``,
    ``tsq-fq``: TCP Small Queues hold the sender only under fq)."""
    p = subprocess.run([sys.executable, "-m", "testbed", "guest", "--", "env", "TESTBED_REQUIRE_FEATURES=1",
                        sys.executable, "-m", "pytest", "-q", "-s", "-k", "lateness or small_queues",
                        "tests/guest/test_optical_switch.py"],
                       cwd=REPO, capture_output=True, text=True, timeout=1800)
    out: dict[str, list[float]] = {"lateness": [], "tsq-hostnic": [], "tsq-fq": []}
    for ln in p.stdout.splitlines():
        if ln.startswith("OPTSW_P99_US "):
            out["lateness"].append(float(ln.split()[-1]))
        elif ln.startswith("TSQ_GOODPUT "):
            _tag, qdisc, value, _unit = ln.split()
            out[f"tsq-{qdisc}"].append(float(value))
    return out


#: packets per configuration of the oracle comparison
ORACLE_PACKETS = 100_000


def _oracle_table() -> list[float]:
    """Print the port model vs simulator table (every E1 configuration, k = 4 and 8);
    returns the wall seconds of each configuration."""
    import time

    from testbed.optical import oracle

    rows, secs = [], []
    for cfg in oracle.configs(4) + oracle.configs(8):
        t0 = time.monotonic()
        rows.append(oracle.compare(cfg, ORACLE_PACKETS, seed=1))
        secs.append(time.monotonic() - t0)
    print(f"port model vs the paper's switch, {ORACLE_PACKETS} packets per configuration "
          f"(bounds: PLR {oracle.PLR_BOUND}, mean sojourn {oracle.SOJOURN_BOUND:.0%}):")
    print(oracle.table(rows), flush=True)
    held = [oracle.compare(cfg, ORACLE_PACKETS, seed=1, runner=oracle.holding_outcomes)
            for cfg in oracle.configs(4) + oracle.configs(8) if cfg.model != "electronic"]
    same = sum(r.model == r.sim for r in held)
    print(f"holding realisation (hybrid-hold, the voq qdisc's hybrid scheduler) vs the paper's switch: identical "
          f"statistics in {same} of {len(held)} configurations", flush=True)
    if same < len(held):
        print(oracle.table([r for r in held if r.model != r.sim]), flush=True)
    return secs


#: packets, ports, load and RAM of the ramsim speed benchmark (E5's node: 3 MSS per link at 1 Gb/s)
RAMSIM_PACKETS, RAMSIM_PORTS, RAMSIM_LOAD, RAMSIM_BUFFER, RAMSIM_PS_PER_BYTE = 100_000, 4, 0.9, 4500, 8000


def _ramsim_seconds() -> dict[str, list[float]]:
    """Wall seconds ramsim takes for RAMSIM_PACKETS packets (E1-like inputs, ACK / 576 /
    1500 B) per architecture, 3 runs each."""
    import random
    import time

    from testbed.optical import ramsim, traces

    trace = [ramsim.Packet(p.arrival_ns, p.length, p.in_port, p.out_port)
             for p in traces.e1_like_trace(random.Random(1), RAMSIM_PACKETS, RAMSIM_PORTS, RAMSIM_LOAD,
                                           RAMSIM_PS_PER_BYTE, lengths=(40, 576, 1500))]
    out: dict[str, list[float]] = {}
    for arch in ramsim.ARCHITECTURES:
        for _ in range(3):
            t0 = time.monotonic()
            ramsim.simulate(trace, arch, RAMSIM_PORTS, RAMSIM_BUFFER, RAMSIM_PS_PER_BYTE)
            out.setdefault(arch, []).append(time.monotonic() - t0)
    return out


def run() -> list[Measurement]:
    out = [Measurement("oracle comparison, one configuration (Python)", _oracle_table())]
    for arch, secs in _ramsim_seconds().items():
        out.append(Measurement(f"ramsim {arch}, {RAMSIM_PACKETS} packets (Python)", secs))
    if os.geteuid() == 0:
        out.append(Measurement("optswitch ingress (JIT, native, per packet)",
                               _prog_ns("optsw_ingress", "hybrid:2"), "ns"))
        out.append(Measurement("optswitch egress hybrid, drop path (JIT, native)",
                               _prog_ns("optsw_egress", "hybrid:2"), "ns"))
        out.append(Measurement("optswitch egress electronic, buffer path (JIT, native)",
                               _prog_ns("optsw_egress", "electronic"), "ns"))
        out.append(Measurement("optswitch egress sb, buffer path, every slot waiting (JIT, native)",
                               _prog_ns("optsw_egress", "sb:1000000000"), "ns"))
    guest = _guest_measurements()
    if guest["lateness"]:
        out.append(Measurement(f"optswitch p99 lateness in the guest (D={DEFAULT_TDF:g})", guest["lateness"], "us"))
    for qdisc in ("hostnic", "fq"):
        if guest[f"tsq-{qdisc}"]:
            out.append(Measurement(f"CUBIC goodput over 4 electronic switches, hosts' queue {qdisc} (paper Gb/s; "
                                   "line rate 10)", guest[f"tsq-{qdisc}"], "Gb/s"))
    return out
