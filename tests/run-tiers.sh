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

tier() {
  local name=$1; shift
  echo "=== tier: $name ==="
  local t0=$SECONDS
  "$@" || status=1
  echo "=== tier $name: $((SECONDS - t0)) s ==="
}

tier unit   "$py" -m pytest -q -p no:cacheprovider --junitxml="$junit/unit.xml" tests/unit
tier bpf    "$py" -m pytest -q -p no:cacheprovider --junitxml="$junit/bpf.xml" tests/bpf
tier native "$py" -m pytest -q -p no:cacheprovider --junitxml="$junit/native.xml" tests/native
# In the guest the BPF and feature-probe tests run again on the distro kernel, and a
# missing kernel feature is a failure, not a skip. (The native killed-run test targets
# the host's OVS userspace datapath; the guest tier has its own, on the kernel datapath.)
# Tests marked `long` (minutes of guest time each) run only with TESTBED_LONG_TESTS=1
# (`make test-all`): `make test` is CI's and keeps within its time budget. Durations:
# pytest's are guest time (icount); the host-clock list (tests/conftest.py) is wall time.
select=(-m "not long")
if [ "${TESTBED_LONG_TESTS:-0}" = 1 ]; then select=(); fi
tier guest  .venv/bin/testbed guest --rwdir "$junit" -- env TESTBED_REQUIRE_FEATURES=1 TESTBED_HOST_CLOCK_DIR="$junit" \
  "$py" -m pytest -q -p no:cacheprovider --durations=12 "${select[@]}" --junitxml="$junit/guest.xml" \
  tests/guest tests/native/test_features.py tests/bpf

"$py" - "$junit" <<'PY'
import sys, pathlib, xml.etree.ElementTree as ET
tot = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
tiers = []
for name in ("unit", "bpf", "native", "guest"):
    p = pathlib.Path(sys.argv[1]) / f"{name}.xml"
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
