#!/bin/sh
# First command inside the full-kernel guest (virtme-ng): read the command file the host
# wrote (testbed/vm.py, guest_script: the environment, then the command as "$@"), prepare,
# then exec "$@". The command comes in a file because the kernel's command line, where
# virtme-ng would put it, holds 2 047 bytes.
# The guest's root is the host's, over 9p: ovsdb-server needs O_TMPFILE, which 9p lacks,
# so /tmp, the Open vSwitch directories and the ledger directory become tmpfs. Nothing
# here touches the host: these mounts exist only in the guest.
echo "OT-GUEST-UP $(uname -r)"
if [ $# -ne 1 ] || [ ! -r "$1" ]; then
  echo "guest-init: expected one readable command file, got: $* (the testbed's state directory must be visible in the guest: not below /run, /var/tmp, /var/log or /var/cache)" >&2
  exit 70
fi
. "$1"
# The host directories a guest only reads (testbed/vm.py, cached_dirs) through a second
# export of the root, mounted with the page cache on: imports and process start-ups stop
# asking the host for every stat and read. Without it the guest still works, slower.
if [ -n "${OT_CACHED_DIRS:-}" ]; then
  mkdir -p /run/ot-cache
  if mount -t 9p -o ro,trans=virtio,version=9p2000.L,access=any,msize=524288,cache=loose ot-cache /run/ot-cache; then
    for d in $(echo "$OT_CACHED_DIRS" | tr ':' ' '); do
      [ -d "/run/ot-cache$d" ] && mount --bind "/run/ot-cache$d" "$d" || echo "guest-init: no cached view of $d" >&2
    done
  else
    echo "guest-init: the cached export ot-cache did not mount; reading the host uncached" >&2
  fi
fi
# Shared read-write folders below /tmp would vanish under the new tmpfs: park them.
i=0
for d in $(echo "${OT_RW_DIRS:-}" | tr ':' ' '); do
  case "$d" in /tmp/*) mkdir -p "/run/ot-rw/$i" && mount --bind "$d" "/run/ot-rw/$i"; i=$((i+1));; esac
done
for d in /tmp /var/lib/openvswitch /run/openvswitch /var/log/openvswitch "${TESTBED_STATE_DIR:-/var/lib/optical-tcp-testbed}"; do
  mkdir -p "$d" 2>/dev/null
  mount -t tmpfs -o mode=0755 tmpfs "$d" || { echo "guest-init: cannot mount tmpfs on $d" >&2; exit 70; }
done
i=0
for d in $(echo "${OT_RW_DIRS:-}" | tr ':' ' '); do
  case "$d" in /tmp/*) mkdir -p "$d" && mount --bind "/run/ot-rw/$i" "$d"; i=$((i+1));; esac
done
mkdir -p "${TESTBED_STATE_DIR:-/var/lib/optical-tcp-testbed}/ledgers"
grep -q ' /sys/fs/bpf ' /proc/mounts || mount -t bpf bpf /sys/fs/bpf
grep -q ' /sys/kernel/tracing ' /proc/mounts || mount -t tracefs tracefs /sys/kernel/tracing
# $HOME is read-only here: matplotlib would then rebuild its font cache in a new
# temporary directory in every process (measured: +4-6 s per import under TCG). One writable directory for the guest's
# life instead, seeded with the host's cache (matplotlib rebuilds it if it is stale).
if [ -z "${MPLCONFIGDIR:-}" ]; then
  export MPLCONFIGDIR=/tmp/matplotlib
  mkdir -p "$MPLCONFIGDIR"
  cp "${XDG_CACHE_HOME:-${HOME:-/root}/.cache}"/matplotlib/fontlist-*.json "$MPLCONFIGDIR"/ 2>/dev/null || true
fi
export TESTBED_IN_GUEST=1
cd "${OT_GUEST_CWD:-/}" || exit 70
exec "$@"
