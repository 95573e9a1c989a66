"""`testbed doctor`: render what this host can do, and where each experiment would run.

Rendering is kept apart from probing (:mod:`testbed.features`) so the placement logic
can be unit-tested with hand-made :class:`~testbed.features.Probe` values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from testbed.features import FEATURES, Probe, missing_features

# Tools without which the full-kernel guest cannot be booted.
GUEST_TOOLS = ("qemu-system-x86_64", "virtme-ng")


class _Auto:
    def __repr__(self) -> str:
        return "AUTO"


AUTO = _Auto()  # "look the distro kernel up with features.distro_kernel()"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """Plain-text columns; the last column is not padded (it may be long)."""
    rows = [list(header), *[list(r) for r in rows]]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
    out = []
    for i, row in enumerate(rows):
        cells = [c.ljust(w) for c, w in zip(row, widths)] + [row[-1]]
        out.append("  ".join(cells).rstrip())
        if i == 0:
            out.append("  ".join(["-" * w for w in widths] + ["-" * max(3, len(row[-1]))]))
    return out


def _ok(flag: bool) -> str:
    return "ok" if flag else "NO"


def guest_blockers(versions: Mapping[str, str], kernel: Path | None) -> list[str]:
    """Why the full-kernel guest cannot be booted here (empty list: it can)."""
    why = []
    if kernel is None:
        why.append("no distro kernel (/boot/vmlinuz-<ver> with /lib/modules/<ver>; "
                   "install linux-image-amd64)")
    for tool in GUEST_TOOLS:
        if versions.get(tool, "missing") == "missing":
            why.append(f"{tool} missing")
    return why


def placement(needed: set[str], probes: Mapping[str, Probe], kvm: Probe | None,
              versions: Mapping[str, str], kernel: Path | None) -> str:
    """One line: where an experiment needing ``needed`` runs, and why."""
    missing = missing_features(needed, dict(probes))
    if not missing:
        return "native"
    miss = f"missing: {', '.join(missing)}"
    blockers = guest_blockers(versions, kernel)
    if blockers:
        return f"cannot run ({miss}); no guest possible: {'; '.join(blockers)}"
    accel = "with KVM" if kvm is not None and kvm.ok else "without KVM (software emulation, ~10x slower CPU)"
    return f"guest ({miss}); guest possible: {kernel} under virtme-ng, {accel}"


def render_doctor(probes: Mapping[str, Probe], kvm: Probe | None, versions: Mapping[str, str],
                  experiments: list[tuple[str, set[str]]], *,
                  distro_kernel: Path | None | _Auto = AUTO,
                  guest_clock: tuple[str, str] | None = None) -> str:
    """The doctor report as plain text.

    ``distro_kernel`` is the guest kernel image (None: there is none); by default it is
    looked up with :func:`testbed.features.distro_kernel`. ``guest_clock`` is (label,
    why) from :func:`testbed.vm.clock_choice`.
    """
    if isinstance(distro_kernel, _Auto):
        from testbed.features import distro_kernel as find_kernel

        kernel = find_kernel()
    else:
        kernel = distro_kernel

    order = {f: i for i, f in enumerate(FEATURES)}
    names = sorted(probes, key=lambda n: (order.get(n, len(order)), n))
    lines = ["Kernel and host features"]
    lines += _table(("feature", "ok", "why"),
                    ((n, _ok(probes[n].ok), probes[n].detail) for n in names))

    lines += ["", "KVM"]
    if kvm is None:
        lines.append("kvm  not probed")
    else:
        lines += _table(("probe", "ok", "why"), [(kvm.name, _ok(kvm.ok), kvm.detail)])
    lines.append(f"guest kernel: {kernel if kernel is not None else 'none found'}")
    if guest_clock is not None:
        lines.append(f"guest clock: {guest_clock[0]} ({guest_clock[1]})")

    lines += ["", "Tool versions"]
    lines += _table(("tool", "version"), ((t, v) for t, v in versions.items()))

    lines += ["", "Experiments"]
    if experiments:
        lines += _table(("experiment", "runs"),
                        ((name, placement(set(needed), probes, kvm, versions, kernel))
                         for name, needed in experiments))
    else:
        lines.append("(no experiments)")
    return "\n".join(lines) + "\n"
