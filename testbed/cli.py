"""The ``testbed`` command line."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from testbed.errors import TestbedError, UsageError

EPILOG = """\
commands and examples:
  doctor   what this host's kernel can do, and where each experiment would run
             testbed doctor
  run      run an experiment definition (experiments/NAME.toml or a path)
             testbed run demo
             testbed run demo --set rate='20 Mbit/s,50 Mbit/s' --reps 3 --tdf 2
             testbed run demo --native --set switch=bridge --set delay='0 ms'
             testbed run demo --pcap h1-s1 --out results/demo/mine
  list     experiment definitions and kinds with their parameters
             testbed list
  report   regenerate figures, tables and the HTML index from a results folder
             testbed report results/demo/20261121-140000-ab12
  clean    remove leftovers of earlier (killed) runs, as recorded in their ledgers
             testbed clean
  guest    run any command inside the full-kernel guest (virtme-ng, distro kernel)
             testbed guest -- uname -r

environment: TESTBED_GUEST_CPUS, TESTBED_GUEST_MEMORY (e.g. 3G), TESTBED_GUEST_KVM
(auto|on|off), TESTBED_GUEST_KERNEL, TESTBED_STATE_DIR (ledgers; /var/lib/optical-tcp-testbed).
exit codes: 0 ok, 1 failure, 2 invalid definition or usage (nothing was created), 130 interrupted.
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="testbed", description="Real Linux TCP over emulated optical switches.",
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    sub.add_parser("doctor", help="what this host can do and where experiments run",
                   description="Probe netem, fq, HTB, TBF, clsact+BPF, struct_ops, BTF, modules, "
                   "OVS datapaths, KVM; print tool versions and each experiment's placement. "
                   "Example: testbed doctor")

    r = sub.add_parser("run", help="run an experiment definition",
                       description="Run EXPERIMENT (experiments/NAME.toml or a path). Natively when "
                       "this kernel has the features it needs, otherwise in the full-kernel guest. "
                       "Example: testbed run demo --set rate='20 Mbit/s' --reps 3",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("experiment", metavar="EXPERIMENT")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a parameter (paper units, e.g. rate='50 Mbit/s'); a comma-separated "
                   "value sweeps it")
    r.add_argument("--tdf", type=float, metavar="D", help="time dilation factor D >= 1")
    r.add_argument("--reps", type=int, metavar="N", help="repetitions per point")
    r.add_argument("--seed", type=int, metavar="S", help="base seed")
    r.add_argument("--out", type=Path, metavar="DIR",
                   help="results folder (default results/<experiment>/<run-id>); an existing "
                   "folder of the same configuration is resumed")
    where = r.add_mutually_exclusive_group()
    where.add_argument("--native", action="store_const", const="native", dest="placement",
                       help="run here; fail if this kernel lacks a needed feature")
    where.add_argument("--vm", action="store_const", const="vm", dest="placement",
                       help="run in the full-kernel guest even if the host could")
    r.add_argument("--pcap", action="append", default=[], metavar="LINK",
                   help="capture LINK (e.g. h1-s1) into the results' pcap/ folder")
    r.add_argument("--no-report", action="store_true", help=argparse.SUPPRESS)
    r.add_argument("--run-id", help=argparse.SUPPRESS)

    sub.add_parser("list", help="experiment definitions and kinds",
                   description="List experiments/ definitions and every kind's parameters. "
                   "Example: testbed list")

    rep = sub.add_parser("report", help="regenerate a results folder's report",
                         description="Regenerate figures, tables and index.html from the data "
                         "alone. Example: testbed report results/demo/RUN")
    rep.add_argument("results", type=Path, metavar="RESULTS_DIR")

    c = sub.add_parser("clean", help="remove leftovers of earlier runs",
                       description="Tear down every object recorded in the ledgers of runs that "
                       "no longer run; nothing else is touched. Example: testbed clean")
    c.add_argument("--include-running", action="store_true",
                   help="also tear down runs whose process is still alive")

    g = sub.add_parser("guest", help="run a command in the full-kernel guest",
                       description="Boot the distro kernel under virtme-ng and run COMMAND with "
                       "the repository shared read-write. Example: testbed guest -- uname -r")
    g.add_argument("--cpus", type=int, help="vCPUs (default TESTBED_GUEST_CPUS or 2)")
    g.add_argument("--memory", help="memory, e.g. 3G (default TESTBED_GUEST_MEMORY or 3G)")
    g.add_argument("--kvm", choices=("auto", "on", "off"), help="hardware acceleration")
    g.add_argument("--rwdir", action="append", default=[], type=Path,
                   help="another host folder to share read-write")
    g.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    console = logging.StreamHandler()
    console.setLevel(logging.DEBUG if args.verbose else logging.WARNING)
    logging.getLogger().addHandler(console)
    logging.getLogger().setLevel(logging.DEBUG if args.verbose else logging.INFO)
    try:
        if args.command is None:
            build_parser().print_help()
            return 2
        if args.command in ("run", "clean", "guest", "doctor") and os.geteuid() != 0:
            raise UsageError(f"`testbed {args.command}` needs root (namespaces, qdiscs, BPF, qemu)")
        return COMMANDS[args.command](args, argv)
    except TestbedError as exc:
        print(f"testbed: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("testbed: interrupted", file=sys.stderr)
        return 130


def cmd_run(args: argparse.Namespace, argv: list[str]) -> int:
    from testbed import definition, runner

    defn = definition.load(args.experiment, overrides=definition.parse_set(args.set),
                           tdf=args.tdf, reps=args.reps, seed=args.seed)
    opts = runner.RunOptions(out=args.out, run_id=args.run_id, placement=args.placement or "auto",
                             pcap=args.pcap, report=not args.no_report,
                             argv=[sys.executable, "-m", "testbed", *argv])
    return runner.run(defn, opts)


def cmd_clean(args: argparse.Namespace, argv: list[str]) -> int:
    from testbed.ledger import clean

    cleaned, skipped, errors = clean(include_running=args.include_running)
    for line in cleaned:
        print(f"cleaned  {line}")
    for line in skipped:
        print(f"skipped  {line}")
    for line in errors:
        print(f"error    {line}", file=sys.stderr)
    if not (cleaned or skipped or errors):
        print("nothing to clean")
    return 1 if errors else 0


def cmd_report(args: argparse.Namespace, argv: list[str]) -> int:
    from analysis.report import generate

    if not (args.results / "config.json").exists():
        raise UsageError(f"{args.results} is not a results folder (no config.json)")
    print(generate(args.results))
    return 0


def cmd_guest(args: argparse.Namespace, argv: list[str]) -> int:
    from testbed import vm

    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not command:
        raise UsageError("testbed guest: give a command after --")
    base = vm.GuestConfig.from_env()
    cfg = vm.GuestConfig(cpus=args.cpus or base.cpus, memory=args.memory or base.memory,
                         kvm=args.kvm or base.kvm, kernel=base.kernel)
    return vm.run_in_guest(command, rw_dirs=args.rwdir, cfg=cfg)


def cmd_list(args: argparse.Namespace, argv: list[str]) -> int:
    from testbed.definition import EXPERIMENTS_DIR
    from testbed.kinds import KINDS

    print("experiments (testbed run NAME):")
    for path in sorted(EXPERIMENTS_DIR.glob("*.toml")):
        print(f"  {path.stem}")
    for kind in KINDS.values():
        print(f"\nkind {kind.name}: {kind.doc}")
        for p in kind.params:
            print(f"  {p.name:<10} default {p.default!s:<12} {p.doc}; {p.accepted()}")
    return 0


def cmd_doctor(args: argparse.Namespace, argv: list[str]) -> int:
    from testbed import definition, doctor, features
    from testbed.runner import run_features
    from testbed.vm import GuestConfig

    probes = features.probe_all()
    kernel = features.distro_kernel()
    cfg = GuestConfig.from_env()
    kvm = features.kvm_probe(kernel) if kernel and cfg.kvm == "auto" else None
    exps = []
    for path in sorted(definition.EXPERIMENTS_DIR.glob("*.toml")):
        try:
            exps.append((path.stem, run_features(definition.load(str(path)))))
        except TestbedError as exc:
            print(f"warning: {path.name}: {exc}", file=sys.stderr)
    print(doctor.render_doctor(probes, kvm, features.tool_versions(), exps))
    return 0


COMMANDS = {"run": cmd_run, "clean": cmd_clean, "report": cmd_report, "guest": cmd_guest,
            "list": cmd_list, "doctor": cmd_doctor}
