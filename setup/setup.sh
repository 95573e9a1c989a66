#!/usr/bin/env bash
# One idempotent set-up step for a Debian 12 host (called by `make setup`).
# Installs missing apt packages, creates .venv from /usr/bin/python3 with
# --system-site-packages (so Debian's mininet imports), installs the pinned
# requirements and the package (editable). On a prepared machine every step is a
# check that takes milliseconds: nothing is reinstalled.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
venv="$repo/.venv"
state_dir=${TESTBED_STATE_DIR:-/var/lib/optical-tcp-testbed}

log() { printf '[setup] %s\n' "$*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then exec sudo -E "$0" "$@"; fi
  log "must run as root (network namespaces, qdiscs, BPF and apt need it); no sudo found"
  exit 1
fi
if ! grep -q '^ID=debian' /etc/os-release || ! grep -q '^VERSION_ID="12"' /etc/os-release; then
  log "warning: written for Debian 12; this is $(. /etc/os-release; echo "$PRETTY_NAME"). Continuing."
fi

# 1. apt packages: dpkg-query tells which are missing; only those trigger apt.
mapfile -t wanted < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' setup/apt-packages.txt)
missing=()
for pkg in "${wanted[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null || true)
  [ "${status:0:2}" = "ii" ] || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${#missing[@]} apt packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# 2. venv from Debian's python (the python3 first on PATH may be another build).
if [ ! -x "$venv/bin/python" ] || ! grep -q '^include-system-site-packages = true' "$venv/pyvenv.cfg" 2>/dev/null; then
  log "creating $venv from /usr/bin/python3 with --system-site-packages"
  rm -rf "$venv"
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi

# 3. pinned requirements + editable package; a stamp holds the hash of their inputs.
stamp="$venv/.setup-stamp"
want_hash=$(cat requirements.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want_hash" ]; then
  log "installing pinned Python requirements"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r requirements.txt
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
  echo "$want_hash" > "$stamp"
fi

# 4. state directory for run ledgers (persistent: OVS bridges outlive reboots).
mkdir -p "$state_dir/ledgers"
log "ready"
