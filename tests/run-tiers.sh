#!/usr/bin/env bash
# All test tiers, in order: unit (no root), BPF (BPF_PROG_TEST_RUN, native, root),
# native integration (namespaces, OVS userspace), then the guest tier inside the
# full-kernel guest (netem, fq, OVS kernel datapath, modules). Exit non-zero on any
# failure; a closing line sums the tiers.
set -uo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
junit=$(mktemp -d)
trap 'rm -rf "$junit"' EXIT
status=0

# The guest tier's two shards (see the guest tier below); checked before any tier runs.
shard1=(tests/guest/test_optical_switch.py tests/guest/test_guest_killed_run.py
        tests/guest/test_voq.py tests/guest/test_obsburst.py tests/guest/test_e1_smoke.py tests/guest/test_e4_run.py
        tests/guest/test_obs_fabric.py tests/guest/test_xcppace.py tests/guest/test_hostnic.py
        tests/guest/test_cwndtrace.py tests/guest/test_lossdetect.py
        tests/native/test_features.py tests/bpf)
shard2=(tests/guest/test_netem_path.py tests/guest/test_e3_kernel_datapath.py tests/guest/test_cc_profiles.py
        tests/guest/test_e2_run.py tests/guest/test_e5_run.py tests/guest/test_xcp_edge.py)
for f in tests/guest/test_*.py; do
  n=0
  for g in "${shard1[@]}" "${shard2[@]}"; do [ "$g" = "$f" ] && n=$((n + 1)); done
  if [ "$n" != 1 ]; then
    echo "tests/run-tiers.sh: $f is in $n guest shards (each guest test file must be in exactly one)" >&2
    exit 2
  fi
done

tier() {
  local name=$1; shift
  echo "=== tier: $name ==="
  local t0=$SECONDS
  "$@" || status=1
  echo "=== tier $name: $((SECONDS - t0)) s ==="
}

# The unit tier runs on every core (pytest-xdist, one test file per worker at a time, so a
# file's module fixtures are built once): it needs no root and nothing it touches is
# shared; run alone in one process it left a core of CI's two idle.
jobs=$(nproc 2>/dev/null || echo 1)
unit_par=()
if [ "$jobs" -gt 1 ]; then unit_par=(-n "$jobs" --dist loadfile); fi
tier unit   "$py" -m pytest -q -p no:cacheprovider "${unit_par[@]}" --junitxml="$junit/unit.xml" tests/unit
# The BPF tier too (each test has its own pin directory): one process left a core idle
# while the other spent ~70 s of system time loading programs and running them with
# BPF_PROG_TEST_RUN (measured 2026-11-30 alone on the host: 74 s in one process, 38 s in
# two; beside two guests 147 s and 118 s). Since then a test's first optswitch call
# creates the maps without loading the programs (`tbload maps`): one process beside two
# guests 61.6 s instead of 99.8 s.
bpf_par=()
if [ "$jobs" -gt 1 ]; then bpf_par=(-n "$jobs" --dist load); fi
tier bpf    "$py" -m pytest -q -p no:cacheprovider "${bpf_par[@]}" --junitxml="$junit/bpf.xml" tests/bpf
tier native "$py" -m pytest -q -p no:cacheprovider --junitxml="$junit/native.xml" tests/native
# In the guest the BPF and feature-probe tests run again on the distro kernel (one case
# per BPF test there, TESTBED_BPF_ONE_CASE; tests/conftest.py), and a missing kernel
# feature is a failure, not a skip. (The native killed-run test targets the host's OVS
# userspace datapath; the guest tier has its own, on the kernel datapath.)
# Tests marked `long` (minutes of guest time each) run only with TESTBED_LONG_TESTS=1
# (`make test-all`): `make test` is CI's and keeps within its time budget.
# The guest tier runs as two guests at once (one vCPU each, the 2 cores CI has; the
# guests share only the repository), split by file so that the two take about the same
# wall time. Measured 2026-11-25 on the host's clock (tests/conftest.py, host-wall.tsv),
# both shards beside a third guest: shard 1 1 229 s of tests (optical_switch 555,
# BPF + feature probes 390, killed run 100, ...), shard 2 1 231 s (cc_profiles 438,
# netem_path 362, e3_kernel_datapath 252, obs_fabric 115, ...); the tier 1 371 s, where
# one guest (before the one-case cut, same load) took 1 784 s. Keep them balanced when
# adding a file. Again 2026-11-29 (beside three other guests, so ~3x CI's times; shares
# are what counts): shard 1 4 126 s (optical_switch 40 %: 11 emulations of 88-279 s each;
# one profiled alone spent ~35 of its ~65 s of guest time after imports building its
# emulation; BPF tests 34 %; killed run 11 %), shard 2 4 199 s (netem_path
# 40 %; its 10 ms run since halved, about a quarter of the file's time, estimated;
# cc_profiles 30 %; e3_kernel_datapath 22 %); lossdetect (3.5 % of shard 1) then moved to
# shard 2 to keep them level. Again 2026-11-29 (nineteenth session, beside two to three
# other guests, with the cached 9p export, nsops without pyroute2 and the feature probes
# once per process): shard 1 3 083 s of tests (optical_switch 1 476 s with its eleven
# builds; with one emulation per topology, run alone beside the same guests, 891 s),
# shard 2 3 190 s (netem_path 1 276, cc_profiles 903, e3_kernel_datapath 725, obs_fabric
# 170, lossdetect 61, ...). Since then each guest `testbed run` skips git (~60 s of its
# wall time there) and the e3 scenario checks its ports with one tc; obs_fabric,
# lossdetect, hostnic, cwndtrace and xcppace (~290 s) moved to shard 1: about 2 700 s of
# tests each at that load (estimated). netem_path and e3_kernel_datapath after all of it,
# in one guest beside two others: 344 s and 362 s (were 1 276 s and 725 s beside three
# to four).
# Again 2026-11-30 (twentieth session, both shards beside the two E5 block guests, four
# in all; the command now in a file, testbed/vm.py): shard 1 2 904 s of wall time (2 665 s
# of tests: optical_switch 833, BPF tests 898 = 34 %, obs_fabric 246, voq 204, killed run
# 129, lossdetect 117, obsburst 114), shard 2 2 704 s (2 420 s: e3_kernel_datapath 720,
# netem_path 673, cc_profiles 1 027); lossdetect then moved to shard 2 (about 2 790 and
# 2 820 s at that load, estimated).
# Then (2026-11-30, twenty-first session) the BPF tests' first optswitch call stopped
# verifying the programs (`tbload maps`): 38 % off the BPF tier on the host; applied to
# shard 1's 898 s of BPF tests, about 560 s, so lossdetect (117 s) went back to shard 1:
# about 2 440 and 2 420 s of tests at that load (estimated). Measured in a guest beside one
# other (CI's load: two guests on the 2 cores): tests/bpf as shard 1 runs it 300 s of host
# wall time (the tests' sum) instead of 419 s (-28 %), the guest command 366 s instead of 496 s.
# Durations: pytest's are guest time (icount); the host-clock list is wall time.
# COLUMNS=400: pytest cuts each line of its closing "short test summary" to the terminal's
# width (80 when, as here, its output is a pipe), which left only "AssertionError" of a
# failure's message in CI's tail; with 400 columns the message, and its numbers, stay on
# that line.
select=(-m "not long")
if [ "${TESTBED_LONG_TESTS:-0}" = 1 ]; then select=(); fi
guest_shard() {
  local i=$1; shift
  "$py" -m testbed guest --rwdir "$junit/g$i" -- env COLUMNS=400 TESTBED_REQUIRE_FEATURES=1 TESTBED_BPF_ONE_CASE=1 \
    TESTBED_HOST_WALL_TSV="$junit/g$i/host-wall.tsv" "$py" -m pytest -q -p no:cacheprovider --durations=12 "${select[@]}" \
    --junitxml="$junit/g$i/guest.xml" "$@" 2>&1 | sed -u "s/^/[guest $i] /"
}
guest_tier() {
  mkdir -p "$junit/g1" "$junit/g2"
  guest_shard 1 "${shard1[@]}" & local p1=$!
  guest_shard 2 "${shard2[@]}" & local p2=$!
  local rc=0
  wait "$p1" || rc=1
  wait "$p2" || rc=1
  return $rc
}
tier guest guest_tier

"$py" - "$junit" <<'PY'
import sys, pathlib, xml.etree.ElementTree as ET
tot = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
tiers = []
for name, file in (("unit", "unit.xml"), ("bpf", "bpf.xml"), ("native", "native.xml"),
                   ("guest 1", "g1/guest.xml"), ("guest 2", "g2/guest.xml")):
    p = pathlib.Path(sys.argv[1]) / file
    if not p.exists():
        tiers.append(f"{name}: no result (tier crashed)")
        tot["errors"] += 1
        continue
    s = ET.parse(p).getroot()
    s = s.find("testsuite") if s.tag == "testsuites" else s
    for k in tot:
        tot[k] += int(s.get(k, 0))
    tiers.append(f"{name}: {s.get('tests')} tests, {s.get('failures')} failed, {s.get('errors')} errors, {s.get('skipped')} skipped")
print("\n".join(tiers))
failed = tot["failures"] + tot["errors"]
print(f"{tot['tests'] - failed - tot['skipped']} passed, {failed} failed, {tot['skipped']} skipped")
PY
exit $status
