"""The ``testbed`` command line."""

from __future__ import annotations

import argparse
import dataclasses
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
  list     experiment definitions and families with their parameters and metrics
             testbed list
  report   regenerate figures, tables and the HTML index from a results folder
             testbed report results/demo/20261121-140000-ab12
  clean    remove leftovers of earlier (killed) runs, as recorded in their ledgers
             testbed clean
  guest    run any command inside the full-kernel guest (virtme-ng, distro kernel)
             testbed guest -- uname -r
  cc       congestion-control modules (SAW, SAWL, mSACK from kernel/, kernel reno/cubic/bbr)
             testbed cc list
             testbed cc load sawl --param p=4 --param tau_ns=1200000
             testbed cc set-default saw --netns ot1a2b-h1
             testbed cc unload saw
  trace    live cwnd / ssthresh / srtt / RTO / in-flight of TCP sockets (CO-RE BPF, tcp:tcp_probe)
             testbed trace cwnd --port 5201
             testbed trace cwnd --host ot1a2b-h1 --csv results/trace.csv

environment: TESTBED_GUEST_CLOCK (icount|realtime; default icount under software emulation),
TESTBED_GUEST_ICOUNT (shift=0..10,sleep=on|off; default shift=0,sleep=off), TESTBED_GUEST_CPUS,
TESTBED_GUEST_MEMORY (e.g. 3G), TESTBED_GUEST_KVM (auto|on|off), TESTBED_GUEST_KERNEL,
TESTBED_GUEST_CACHE (on|off: read the venv and system libraries through a cached export; default on),
TESTBED_STATE_DIR (ledgers; /var/lib/optical-tcp-testbed; a guest must see it: not below /run or /var/tmp). Guest clock: docs/guest-clock.md.
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
    r.add_argument("--tdf", type=float, metavar="D",
                   help="time dilation factor D >= 1 (a family that sets D per point, e4-flowmove, multiplies "
                        "its own by this; every point records the D it ran at)")
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
    r.add_argument("--clock", choices=("realtime", "icount"),
                   help="guest clock when the run goes to the full-kernel guest (default "
                   "TESTBED_GUEST_CLOCK; docs/guest-clock.md)")
    r.add_argument("--pcap", action="append", default=[], metavar="LINK",
                   help="capture LINK (e.g. h1-s1) into the results' pcap/ folder")
    r.add_argument("--no-report", action="store_true",
                   help="write the data and summary only; `testbed report DIR` makes the figures "
                   "and HTML later (saves ~40 s per run in the full-kernel guest)")
    r.add_argument("--run-id", help=argparse.SUPPRESS)

    sub.add_parser("list", help="experiment definitions and families",
                   description="List experiments/ definitions and every family's parameters and "
                   "summary metrics. Example: testbed list")

    rep = sub.add_parser("report", help="regenerate a results folder's report, or combine several",
                         description="Regenerate figures, tables and index.html from the data "
                         "alone. Example: testbed report results/demo/RUN. With several folders of "
                         "one family and --out DIR, one report over all their points (their summaries "
                         "concatenated, a `run` column naming each): testbed report results/e1-paper/A "
                         "results/e1-paper/B --out results/e1-paper/findings")
    rep.add_argument("results", type=Path, metavar="RESULTS_DIR", nargs="+")
    rep.add_argument("--out", type=Path, metavar="DIR",
                     help="with several RESULTS_DIR: the combined report's folder (required then)")
    rep.add_argument("--exclude", action="append", default=[], metavar="FOLDER:KEY=VALUE[,VALUE...]",
                     help="with several RESULTS_DIR: leave out the rows of the folder named FOLDER whose "
                     "summary column KEY is one of the values (e.g. points run again from a later commit "
                     "into another folder): --exclude 'block-sb:buffer=45 kB'; repeatable; the report's "
                     "description and sources.json say what was left out")

    c = sub.add_parser("clean", help="remove leftovers of earlier runs",
                       description="Tear down every object recorded in the ledgers of runs that "
                       "no longer run; nothing else is touched. Example: testbed clean")
    c.add_argument("--include-running", action="store_true",
                   help="also tear down runs whose process is still alive")

    g = sub.add_parser("guest", help="run a command in the full-kernel guest",
                       description="Boot the distro kernel under virtme-ng and run COMMAND with "
                       "the repository shared read-write. Example: testbed guest -- uname -r")
    g.add_argument("--cpus", type=int, help="vCPUs (default TESTBED_GUEST_CPUS, else 1 under --clock icount, else up to 4)")
    g.add_argument("--memory", help="memory, e.g. 3G (default TESTBED_GUEST_MEMORY or 3G)")
    g.add_argument("--kvm", choices=("auto", "on", "off"), help="hardware acceleration")
    g.add_argument("--clock", choices=("realtime", "icount"),
                   help="what drives the guest clock (default TESTBED_GUEST_CLOCK; docs/guest-clock.md)")
    g.add_argument("--rwdir", action="append", default=[], type=Path,
                   help="another host folder to share read-write")
    g.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND")

    cc = sub.add_parser("cc", help="list, load, unload, set-default congestion-control modules",
                        formatter_class=argparse.RawDescriptionHelpFormatter,
                        description="Congestion-control modules. Our modules (saw, sawl, msack) are "
                        "built by `make -C kernel` for the guest kernel; load them there.",
                        epilog="examples:\n  testbed cc list\n  testbed cc load saw\n"
                        "  testbed cc load sawl --param p=4 --param tau_ns=1200000\n"
                        "  testbed cc set-default msack --netns ot1a2b-h1\n  testbed cc unload saw\n"
                        "unload refuses (exit 1) while sockets or a namespace default use the module.")
    ccs = cc.add_subparsers(dest="cc_command", metavar="ACTION", required=True)
    ccs.add_parser("list", help="algorithms, modules, reference counts, parameters")
    ld = ccs.add_parser("load", help="load a module (parameters are bounds-checked)")
    ld.add_argument("name", metavar="NAME")
    ld.add_argument("--param", action="append", default=[], metavar="KEY=INT",
                    help="module parameter, e.g. p=4 (see `testbed cc list`)")
    ul = ccs.add_parser("unload", help="unload a module; refused while in use")
    ul.add_argument("name", metavar="NAME")
    sd = ccs.add_parser("set-default", help="default algorithm for NEW connections")
    sd.add_argument("name", metavar="NAME")
    sd.add_argument("--netns", help="network namespace (default: this one)")

    ck = sub.add_parser("check-tdf", help="run one point at D and 2D; do the results agree?",
                        formatter_class=argparse.RawDescriptionHelpFormatter,
                        description="Run EXPERIMENT reduced to one sweep point (fix every swept key "
                        "with --set) at its time dilation factor D and at 2D, and report whether the "
                        "paper-unit METRIC agrees within the 95 % Student-t intervals of the "
                        "repetitions. Disagreement means D is too small for this host.",
                        epilog="example:\n  testbed check-tdf e1-demo --set cca=sack --set switch=hybrid:2 "
                        "--set load='20000 /s' --reps 3")
    ck.add_argument("experiment", metavar="EXPERIMENT")
    ck.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="fix a parameter (every swept key must be fixed)")
    ck.add_argument("--tdf", type=float, metavar="D", help="the lower factor (default: the definition's)")
    ck.add_argument("--reps", type=int, default=3, metavar="N", help="repetitions at each factor (default 3)")
    ck.add_argument("--metric", default="throughput_bps", help="summary column to compare")
    ck.add_argument("--out", type=Path, metavar="DIR", help="folder for both runs and tdf-check.json")
    ckw = ck.add_mutually_exclusive_group()
    ckw.add_argument("--native", action="store_const", const="--native", dest="placement")
    ckw.add_argument("--vm", action="store_const", const="--vm", dest="placement")

    tr = sub.add_parser("trace", help="live TCP state (cwnd, ssthresh, srtt, RTO, in flight)",
                        formatter_class=argparse.RawDescriptionHelpFormatter,
                        description="Stream the state of matching TCP sockets from the tcp:tcp_probe "
                        "tracepoint (and retransmissions / RTO expiries) with a CO-RE BPF program "
                        "(ebpf/cwndtrace, built by make). Needs root and a kernel with BTF and kprobes: "
                        "the guest, or any stock kernel.",
                        epilog="examples:\n  testbed trace cwnd --port 5201\n"
                        "  testbed trace cwnd --host ot1a2b-h1 --csv /tmp/cwnd.csv --duration 10\n"
                        "  testbed guest -- testbed trace cwnd --out results/traces --duration 5")
    trs = tr.add_subparsers(dest="trace_command", metavar="WHAT", required=True)
    cw = trs.add_parser("cwnd", help="cwnd, ssthresh, srtt, RTO, packets in flight")
    cw.add_argument("--host", metavar="NETNS", help="only sockets of this network namespace")
    cw.add_argument("--port", type=int, default=0, metavar="P", help="only sockets with local or remote port P")
    out = cw.add_mutually_exclusive_group()
    out.add_argument("--csv", type=Path, metavar="FILE", help="also write the samples to FILE")
    out.add_argument("--out", type=Path, metavar="DIR", help="also write DIR/cwnd-<time>.csv")
    cw.add_argument("--duration", type=float, metavar="S", help="stop after S seconds (default: Ctrl-C)")
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
        if args.command in ("clean", "guest", "doctor", "trace", "check-tdf") and os.geteuid() != 0:
            raise UsageError(f"`testbed {args.command}` needs root (namespaces, qdiscs, BPF, qemu)")
        if getattr(args, "clock", None):
            # Read by vm.GuestConfig.from_env here and in child `testbed run`s (check-tdf).
            os.environ["TESTBED_GUEST_CLOCK"] = args.clock
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
    runner.check_options(defn, opts)  # every input is checked before root is asked for
    if os.geteuid() != 0:
        raise UsageError("`testbed run` needs root (namespaces, qdiscs, BPF, qemu)")
    return runner.run(defn, opts)


def cmd_check_tdf(args: argparse.Namespace, argv: list[str]) -> int:
    from testbed import definition, families, tdfcheck
    from testbed.errors import DefinitionError
    from testbed.results import new_run_dir, write_json
    from testbed.runner import new_run_id

    defn = definition.load(args.experiment, overrides=definition.parse_set(args.set), tdf=args.tdf,
                           reps=1)
    if len(defn.points()) != 1:
        swept = [k for k, vs in defn.sweep.items() if len(vs) > 1]
        raise UsageError(f"check-tdf needs one point; fix the swept key(s) {', '.join(swept)} with --set")
    metrics = [m.name for m in families.load(defn.family).metrics]
    if args.metric not in metrics:
        raise DefinitionError("--metric", args.metric, f"a summary metric of family {defn.family}: "
                              + ", ".join(metrics))
    d = defn.tdf.factor
    out = (args.out or new_run_dir(f"{defn.name}-tdf-check", new_run_id())).resolve()
    dirs = {}
    for factor in (d, 2 * d):
        dirs[factor] = out / f"tdf-{factor:g}"
        code = main(["run", args.experiment, *[x for kv in args.set for x in ("--set", kv)],
                     "--tdf", f"{factor:g}", "--reps", str(args.reps), "--out", str(dirs[factor]),
                     *([args.placement] if args.placement else [])])
        if code != 0:
            print(f"testbed: check-tdf: the run at D = {factor:g} failed (exit {code})", file=sys.stderr)
            return code
    comparison = tdfcheck.compare(dirs[d], dirs[2 * d], d, 2 * d, metric=args.metric)
    write_json(out / "tdf-check.json", comparison.to_data())
    print(comparison.line())
    print(f"results: {out}")
    return 0 if comparison.agree else 1


def cmd_clean(args: argparse.Namespace, argv: list[str]) -> int:
    from testbed.clean import clean

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
    from analysis.report import CombineError, Exclusion, combine, generate

    for r in args.results:
        if not (r / "config.json").exists():
            raise UsageError(f"{r} is not a results folder (no config.json)")
    if len(args.results) == 1 and args.out is None:
        if args.exclude:
            raise UsageError("testbed report: --exclude applies to a combined report (several folders and --out)")
        print(generate(args.results[0]))
        return 0
    if args.out is None:
        raise UsageError("testbed report with several results folders needs --out DIR (the combined report)")
    try:
        print(combine(args.results, args.out, [Exclusion.parse(e) for e in args.exclude]))
    except CombineError as exc:
        raise UsageError(str(exc)) from None
    return 0


def cmd_guest(args: argparse.Namespace, argv: list[str]) -> int:
    from testbed import vm

    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not command:
        raise UsageError("testbed guest: give a command after --")
    base = vm.GuestConfig.from_env()
    cfg = dataclasses.replace(base, cpus=args.cpus or base.cpus, memory=args.memory or base.memory,
                              kvm=args.kvm or base.kvm)
    return vm.run_in_guest(command, rw_dirs=args.rwdir, cfg=cfg)


def cmd_list(args: argparse.Namespace, argv: list[str]) -> int:
    from testbed import families
    from testbed.definition import EXPERIMENTS_DIR

    print("experiments (testbed run NAME):")
    for path in sorted(EXPERIMENTS_DIR.glob("*.toml")):
        print(f"  {path.stem}")
    for name in families.names():
        family = families.load(name)
        print(f"\nfamily {family.name}: {family.doc}")
        for p in family.params:
            print(f"  {p.name:<10} default {p.default!s:<12} {p.doc}; {p.accepted()}")
        print("  summary metrics:")
        for m in family.metrics:
            print(f"    {m.name:<26} [{m.unit}] {m.doc}")
    return 0


def cmd_doctor(args: argparse.Namespace, argv: list[str]) -> int:
    from testbed import definition, doctor, features, vm
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
    use_kvm = kvm.ok if kvm is not None else cfg.kvm == "on"
    clock = vm.clock_choice(cfg, use_kvm, from_env="TESTBED_GUEST_CLOCK" in os.environ)
    print(doctor.render_doctor(probes, kvm, features.tool_versions(), exps, guest_clock=clock))
    return 0


def cmd_cc(args: argparse.Namespace, argv: list[str]) -> int:
    from testbed.cc import modules

    if args.cc_command == "list":
        print(f"{'name':<8} {'module':<11} {'registered':<10} {'refs':>4}  default  parameters")
        for st in modules.status():
            params = " ".join(f"{k}={v}" for k, v in st.params.items())
            print(f"{st.name:<8} {st.module or '(built in)':<11} {'yes' if st.registered else 'no':<10} "
                  f"{'' if st.refcount is None else st.refcount:>4}  {'*' if st.default else ' ':<7}  {params}")
        return 0
    if os.geteuid() != 0:
        raise UsageError(f"`testbed cc {args.cc_command}` needs root")
    if args.cc_command == "load":
        params = {}
        for item in args.param:
            key, sep, value = item.partition("=")
            try:
                params[key] = int(value)
            except ValueError:
                raise UsageError(f"--param {item}: expected KEY=INTEGER") from None
            if not sep:
                raise UsageError(f"--param {item}: expected KEY=INTEGER")
        loaded = modules.load(args.name, params)
        print(f"{args.name}: {'loaded' if loaded else 'already loaded'}")
    elif args.cc_command == "unload":
        modules.unload(args.name)
        print(f"{args.name}: unloaded")
    elif args.cc_command == "set-default":
        prev = modules.set_default(args.name, args.netns)
        print(f"default for new connections{' in ' + args.netns if args.netns else ''}: {prev} -> {args.name}"
              " (existing connections keep theirs)")
    return 0


def cmd_trace(args: argparse.Namespace, argv: list[str]) -> int:
    import time

    from testbed.cc import trace

    path = args.csv
    if args.out:
        path = args.out / time.strftime("cwnd-%Y%m%d-%H%M%S.csv")
    return trace.stream(args.host, args.port, sys.stdout, path, args.duration)


COMMANDS = {"run": cmd_run, "clean": cmd_clean, "report": cmd_report, "guest": cmd_guest,
            "list": cmd_list, "doctor": cmd_doctor, "cc": cmd_cc, "trace": cmd_trace,
            "check-tdf": cmd_check_tdf}
