"""render_doctor placement logic, with hand-made probe values (no root, no probing)."""

from __future__ import annotations

from pathlib import Path

from testbed.doctor import render_doctor
from testbed.features import FEATURES, Probe

KERNEL = Path("/boot/vmlinuz-6.1.0-56-amd64")
VERSIONS = {"python": "3.11.2", "qemu-system-x86_64": "QEMU emulator version 7.2.22",
            "virtme-ng": "virtme-ng 1.42", "iperf3": "missing"}
NO_KVM = Probe("kvm", False, "qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69")


def probes(missing: dict[str, str] | None = None) -> dict[str, Probe]:
    missing = missing or {}
    return {f: Probe(f, f not in missing, missing.get(f, "works")) for f in FEATURES}


def line_of(report: str, experiment: str) -> str:
    section = report.split("\nExperiments\n", 1)[1]
    [line] = [ln for ln in section.splitlines() if ln.split()[:1] == [experiment]]
    return line


def test_missing_netem_goes_to_guest_and_names_it() -> None:
    host = probes({"netem": "tc qdisc add dev otp0 root netem: Error: Specified qdisc kind is unknown.",
                   "fq": "tc qdisc add dev otp0 root fq: Error: Specified qdisc kind is unknown."})
    report = render_doctor(host, NO_KVM, VERSIONS, [("e4", {"netem", "htb"})],
                           distro_kernel=KERNEL)
    line = line_of(report, "e4")
    assert "guest" in line and "native" not in line
    assert "missing: netem" in line and "fq" not in line  # only what e4 needs
    assert str(KERNEL) in line and "without KVM" in line


def test_missing_features_are_listed_in_feature_order() -> None:
    host = probes({"netem": "no", "fq": "no"})
    report = render_doctor(host, NO_KVM, VERSIONS, [("e5", {"fq", "netem"})],
                           distro_kernel=KERNEL)
    assert "guest (missing: netem, fq)" in line_of(report, "e5")


def test_all_ok_runs_native() -> None:
    report = render_doctor(probes(), NO_KVM, VERSIONS, [("e1", {"netem", "fq", "modules"})],
                           distro_kernel=KERNEL)
    assert line_of(report, "e1").split()[1:] == ["native"]


def test_no_distro_kernel_cannot_run_and_says_why() -> None:
    host = probes({"netem": "Specified qdisc kind is unknown."})
    report = render_doctor(host, NO_KVM, VERSIONS, [("e2", {"netem"})], distro_kernel=None)
    line = line_of(report, "e2")
    assert "cannot run" in line and "missing: netem" in line
    assert "no distro kernel" in line
    assert "guest (" not in line


def test_missing_qemu_blocks_guest() -> None:
    host = probes({"fq": "unknown qdisc"})
    versions = {**VERSIONS, "qemu-system-x86_64": "missing"}
    report = render_doctor(host, NO_KVM, versions, [("e3", {"fq"})], distro_kernel=KERNEL)
    line = line_of(report, "e3")
    assert "cannot run" in line and "qemu-system-x86_64 missing" in line


def test_unprobed_feature_counts_as_missing() -> None:
    host = probes()
    del host["ovs-kernel"]
    report = render_doctor(host, NO_KVM, VERSIONS, [("e3", {"ovs-kernel"})], distro_kernel=KERNEL)
    assert "missing: ovs-kernel" in line_of(report, "e3")


def test_kvm_ok_guest_uses_kvm() -> None:
    kvm = Probe("kvm", True, "guest booted with KVM")
    report = render_doctor(probes({"fq": "no"}), kvm, VERSIONS, [("e5", {"fq"})],
                           distro_kernel=KERNEL)
    line = line_of(report, "e5")
    assert "with KVM" in line and "without KVM" not in line


def test_report_shows_feature_reasons_kvm_and_versions() -> None:
    reason = "tc qdisc add dev otp0 root netem: Error: Specified qdisc kind is unknown."
    report = render_doctor(probes({"netem": reason}), NO_KVM, VERSIONS, [], distro_kernel=KERNEL)
    [netem] = [ln for ln in report.splitlines() if ln.startswith("netem ")]
    assert netem.split()[1] == "NO" and netem.endswith(reason)
    [htb] = [ln for ln in report.splitlines() if ln.startswith("htb ")]
    assert htb.split()[1] == "ok"
    assert "failed to set MSR" in report
    assert any(ln.startswith("iperf3") and ln.endswith("missing") for ln in report.splitlines())
    assert "(no experiments)" in report


def test_kvm_not_probed() -> None:
    report = render_doctor(probes(), None, VERSIONS, [], distro_kernel=KERNEL)
    assert "not probed" in report


def test_guest_clock_line_names_clock_and_reason() -> None:
    report = render_doctor(probes(), NO_KVM, VERSIONS, [], distro_kernel=KERNEL,
                           guest_clock=("icount:shift=0,sleep=off", "default under software emulation"))
    assert "guest clock: icount:shift=0,sleep=off (default under software emulation)" in report
    assert "guest clock" not in render_doctor(probes(), NO_KVM, VERSIONS, [], distro_kernel=KERNEL)
