"""Congestion-control profiles: a paper's TCP variant as Linux settings for one host.

A profile is a named object (``PROFILES`` maps names to classes, subclasses refine
their parents, as Mininet's node classes do). ``apply(host, tdf, link_rate_bps)``
configures one emulated host -- its namespace's TCP sysctls, its routes, the
congestion-control module and, where the paper changes the initial RTO, a sock_ops
program scoped to the host's netns -- and returns the effective settings (emulation
units, after time dilation) for the run manifest. ``undo()`` restores what it
changed, in reverse. Every object is written to the run ledger before it exists.

All paper times (initial RTO, min RTO, p x tau) pass through ``TimeDilation``:
emulation time = paper time x D, then rounded up to the kernel's timer unit (one
jiffy, 1/CONFIG_HZ s). Each class docstring lists where it differs from the paper.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any, ClassVar

from testbed import cmd
from testbed.bpf import PIN_ROOT
from testbed.cc import modules, sockops
from testbed.dilation import TimeDilation
from testbed.errors import DefinitionError
from testbed.ledger import TEARDOWN
from testbed.units import Dim, Quantity, packet_duration_s

log = logging.getLogger(__name__)

#: Paper's initial RTO T_1 for SAW / SACK / mSACK, and the conventional one.
PAPER_INIT_RTO_S = 1e-3
CONVENTIONAL_INIT_RTO_S = 1.0

#: Differences that hold for every paper profile on Linux.
COMMON_DIFFERENCES = (
    "timers have jiffy resolution (1/CONFIG_HZ, 4 ms at HZ=250): paper times x D are rounded "
    "up to whole jiffies; choose D so that they span several jiffies",
    "the SYN / SYN-ACK use the initial RTO but back off by doubling (kernel handshake code, "
    "not pluggable)",
    "tail loss probes (tcp_early_retrans=0) and F-RTO (tcp_frto=0) are turned off: the "
    "papers have neither",
)


class Profile:
    """Base: run kernel algorithm ``algorithm`` with the kernel's defaults.

    Options (all profiles): ``init_rto`` (paper time; None = kernel default 1 s),
    ``rto_min`` (paper time; None = kernel default 200 ms unless the profile lowers it).
    """

    name: ClassVar[str] = ""
    algorithm: ClassVar[str] = ""
    doc: ClassVar[str] = ""
    #: per-netns sysctls (net.ipv4.*) the profile sets
    sysctls: ClassVar[dict[str, str]] = {}
    #: default initial RTO in paper seconds (None: kernel default)
    default_init_rto_s: ClassVar[float | None] = None
    #: lower the minimum RTO to one jiffy (unless the option rto_min says otherwise)
    low_rto_min: ClassVar[bool] = False
    #: route attribute quickack 1 (no delayed ACKs)
    quickack: ClassVar[bool] = False
    #: route attribute initcwnd (None: kernel default 10)
    initcwnd: ClassVar[int | None] = None
    #: options accepted: name -> Dim or "int"
    options_spec: ClassVar[dict[str, Any]] = {"init_rto": Dim.TIME, "rto_min": Dim.TIME}
    differences: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **options: Any) -> None:
        self.options = self.parse_options(options)
        self._undo: list[Any] = []
        self._applied_to: str | None = None

    # -- options ---------------------------------------------------------------------
    @classmethod
    def parse_options(cls, options: dict[str, Any], key: str = "cca") -> dict[str, Any]:
        """Validate profile options (paper units); raises DefinitionError naming the key."""
        out: dict[str, Any] = {}
        for k, v in options.items():
            if k not in cls.options_spec:
                raise DefinitionError(f"{key}.{k}", v, f"options of profile {cls.name!r}: "
                                      + ", ".join(sorted(cls.options_spec)))
            spec = cls.options_spec[k]
            if spec == "int":
                if isinstance(v, bool) or not isinstance(v, int):
                    raise DefinitionError(f"{key}.{k}", v, "an integer")
                lo, hi = cls.int_bounds(k)
                if not lo <= v <= hi:
                    raise DefinitionError(f"{key}.{k}", v, f"an integer {lo}..{hi}")
                out[k] = v
            else:
                try:
                    q = v if isinstance(v, Quantity) else Quantity.parse(v, spec)
                except ValueError as exc:
                    raise DefinitionError(f"{key}.{k}", v, f"a {spec.value} with a unit ({exc})") from None
                if q.si <= 0 or q.si > 60:
                    raise DefinitionError(f"{key}.{k}", v, "a time > 0 and <= 60 s")
                out[k] = q
        return out

    @classmethod
    def int_bounds(cls, option: str) -> tuple[int, int]:
        return (0, 2**31 - 1)

    # -- settings (pure: also used for the manifest before anything runs) -----------
    def settings(self, tdf: TimeDilation, link_rate_bps: float | None = None, mtu: int = 1500,
                 hz: int = 250) -> dict[str, Any]:
        """Effective settings in emulation units (times after x D and jiffy rounding)."""
        s: dict[str, Any] = {"profile": self.name, "algorithm": self.algorithm,
                             "options": {k: str(v) for k, v in self.options.items()},
                             "tdf": tdf.factor, "kernel_hz": hz,
                             "sysctls": {f"net.ipv4.{k}": v for k, v in self.sysctls.items()},
                             "module_params": self.module_params(tdf, link_rate_bps, mtu),
                             "route": {}, "differences": [*COMMON_DIFFERENCES, *self.differences]
                             if self.name not in KERNEL_DEFAULT_PROFILES else list(self.differences)}
        init = self.options.get("init_rto")
        init_s = init.si if init is not None else self.default_init_rto_s
        if init_s is not None:
            emu = tdf.time_to_emulation(init_s)
            j = sockops.to_jiffies(emu, hz)
            s["init_rto"] = {"paper_s": init_s, "emulation_s": emu, "jiffies": j, "effective_s": j / hz}
        rto_min = self.options.get("rto_min")
        if rto_min is not None or self.low_rto_min:
            emu = tdf.time_to_emulation(rto_min.si) if rto_min is not None else 1.0 / hz
            ms = max(1, math.ceil(emu * 1e3 - 1e-9))
            j = sockops.to_jiffies(ms / 1e3, hz)
            s["rto_min"] = {"paper_s": rto_min.si if rto_min is not None else None, "emulation_s": emu,
                            "route_ms": ms, "effective_s": j / hz}
            s["route"]["rto_min"] = f"{ms}ms"  # iproute2 always locks rto_min
        if self.quickack:
            s["route"]["quickack"] = "1"
        if self.initcwnd is not None:
            s["route"]["initcwnd"] = str(self.initcwnd)
        return s

    def module_params(self, tdf: TimeDilation, link_rate_bps: float | None, mtu: int) -> dict[str, int]:
        return {}

    # -- apply / undo ------------------------------------------------------------------
    def apply(self, host: Any, tdf: TimeDilation, link_rate_bps: float | None = None) -> dict[str, Any]:
        """Configure ``host`` (a testbed.net.Host); returns the effective settings.

        ``link_rate_bps`` is the host's link rate in *paper* units (for tau)."""
        if self._applied_to is not None:
            raise RuntimeError(f"profile {self.name} already applied to {self._applied_to}")
        self._applied_to = host.name
        self._host = host
        ledger = host.emu.ledger
        mtu = host_mtu(host)
        s = self.settings(tdf, link_rate_bps, mtu, sockops.kernel_hz())
        # 1. the algorithm (module)
        loaded = False
        if self.algorithm in modules.OUR_MODULES or modules.module_name(self.algorithm):
            mod = modules.module_name(self.algorithm)
            if self.algorithm not in modules.available():
                ledger.add("module", name=mod)
                loaded = True
            modules.load(self.algorithm, s["module_params"])
            if loaded:
                self._undo.append(("module", self.algorithm, len(ledger.entries) - 1))
        modules.allow(self.algorithm)
        # 2. namespace sysctls, the default algorithm last
        for key, value in {**s["sysctls"], "net.ipv4.tcp_congestion_control": self.algorithm}.items():
            old = host.sysctl_get(key)
            self._undo.append(("sysctl", host, key, old))
            host.sysctl(key, value)
        # 3. route attributes
        if s["route"]:
            attrs = [x for k, v in s["route"].items() for x in (k, *v.split())]
            routes = host_routes(host)
            self._undo.append(("routes", host, routes))
            change_routes(host, [[*route, *attrs] for route in routes])
        # 4. initial RTO (sock_ops, per netns)
        if "init_rto" in s:
            pin = PIN_ROOT / f"{host.emu.token}-cc" / host.name
            info = sockops.attach(ledger, netns=host.netns, pin_dir=pin,
                                  init_rto_jiffies=s["init_rto"]["jiffies"])
            s["init_rto"]["netns_cookie"] = info["netns_cookie"]
            s["init_rto"]["pin_dir"] = str(pin)
            self._undo.append(("pin", len(ledger.entries) - 1))
        self.extra_apply(host, s)
        self._host = host
        return s

    def extra_apply(self, host: Any, settings: dict[str, Any]) -> None:
        """Hook for subclasses (e.g. fq for paced-reno); append undo steps to _undo."""

    def undo(self) -> None:
        """Restore everything apply() changed, in reverse; modules we loaded are
        removed only when nothing uses them any more (else left for `testbed clean`)."""
        errors = []
        while self._undo:
            step = self._undo.pop()
            try:
                self._undo_step(step)
            except Exception as exc:  # keep undoing the rest
                errors.append(f"{step[0]}: {exc}")
        self._applied_to = None
        if errors:
            raise modules.CongestionControlError("undo of profile incomplete: " + "; ".join(errors))

    def _undo_step(self, step: tuple) -> None:
        kind = step[0]
        if kind == "sysctl":
            _, host, key, old = step
            host.sysctl(key, old)
        elif kind == "routes":
            _, host, routes = step
            change_routes(host, routes)
        elif kind in ("pin", "qdisc"):
            ledger = self._host.emu.ledger
            entry = ledger.entries[step[1]]
            if not entry.gone:
                TEARDOWN[entry.kind](entry, ledger)
                ledger.mark_gone(entry.seq)
        elif kind == "module":
            _, algorithm, seq = step
            ledger = self._host.emu.ledger
            mod = modules.module_name(algorithm)
            count = modules.refcount(mod)
            if count == 0:
                modules.unload(algorithm)
                ledger.mark_gone(seq)
            elif count is None:
                ledger.mark_gone(seq)
            else:
                log.warning("%s still has %d reference(s); left loaded", mod, count)


def host_mtu(host: Any) -> int:
    """MTU of the host's first interface (bytes)."""
    from testbed import nsops

    return nsops.link_mtu(host.intfs[0], host.netns)


def change_routes(host: Any, routes: list[list[str]]) -> None:
    """``ip route change ROUTE`` for each of ``routes`` in one ``ip -batch`` process
    (each process costs ~0.5 s under software emulation). Raises CommandError."""
    if routes:
        host.run(["ip", "-batch", "-"], input="".join("route change " + " ".join(r) + "\n" for r in routes))


def host_routes(host: Any) -> list[list[str]]:
    """The host's IPv4 routes as ``ip route change`` selectors (dst, dev, proto, scope, src)."""
    import json

    out = host.run(["ip", "-j", "-4", "route", "show"]).stdout
    routes = []
    for r in json.loads(out or "[]"):
        sel = [r["dst"], "dev", r["dev"]]
        if r.get("protocol"):
            sel += ["proto", r["protocol"]]
        if r.get("scope"):
            sel += ["scope", r["scope"]]
        if r.get("prefsrc"):
            sel += ["src", r["prefsrc"]]
        routes.append(sel)
    return routes


# ---- the kernel's own algorithms -------------------------------------------------------
class Reno(Profile):
    """Kernel ``reno`` with the kernel's defaults (NewReno with SACK, PRR, RACK, TLP)."""

    name, algorithm = "reno", "reno"
    doc = "kernel reno, kernel defaults"


class Cubic(Profile):
    """Kernel ``cubic`` with the kernel's defaults (HyStart, PRR, RACK, TLP)."""

    name, algorithm = "cubic", "cubic"
    doc = "kernel cubic, kernel defaults"


class Bbr(Profile):
    """Kernel ``bbr`` (v1, module tcp_bbr) with the kernel's defaults; BBR paces
    internally when no fq qdisc is present."""

    name, algorithm = "bbr", "bbr"
    doc = "kernel bbr (tcp_bbr), kernel defaults"


class PacedReno(Reno):
    """Reno paced at cwnd/srtt: fq on the host's NIC and tcp_pacing_ss_ratio =
    tcp_pacing_ca_ratio = 100 (the kernel's defaults are 200 / 120).

    fq replaces the host interface's root qdisc, or, when the link is shaped on the
    host's side without netem, the pfifo leaf under HTB. A host interface with
    netem cannot also have fq: apply() refuses (shape the switch side instead).
    """

    name = "paced-reno"
    doc = "reno + fq, pacing rate = cwnd/srtt (pacing ratios 100 %)"
    sysctls = {"tcp_pacing_ss_ratio": "100", "tcp_pacing_ca_ratio": "100"}
    differences = ("Linux paces at ratio x cwnd/srtt from the current srtt; fq adds "
                   "its flow scheduling (quantum 2 MTU) on the host NIC",)

    def extra_apply(self, host: Any, settings: dict[str, Any]) -> None:
        ledger = host.emu.ledger
        for intf in host.intfs:
            qd = host.run(["tc", "qdisc", "show", "dev", intf]).stdout
            if "netem" in qd:
                raise modules.CongestionControlError(
                    f"paced-reno on {host.name}: {intf} has netem, which cannot be combined with fq; "
                    "shape the link on the switch side")
            if " htb " in qd or qd.startswith("qdisc htb"):
                where = ["parent", "1:1", "handle", "10:"]
                ledger.add("qdisc", dev=intf, netns=host.netns, parent="1:1")
                host.run(["tc", "qdisc", "replace", "dev", intf, *where, "fq"])
            else:
                ledger.add("qdisc", dev=intf, netns=host.netns, parent="root")
                host.run(["tc", "qdisc", "replace", "dev", intf, "root", "fq"])
            self._undo.append(("qdisc", len(ledger.entries) - 1))
            settings.setdefault("qdiscs", {})[intf] = "fq"


# ---- the papers' variants ------------------------------------------------------------------
class Sack(Profile):
    """TCP SACK of the paper (RFC 6675 on Reno): kernel ``reno`` with SACK on,
    initial RTO T_1 = 1 ms (option init_rto, e.g. "1 s" for the conventional value),
    min RTO one jiffy, classic three-dupACK fast retransmit (RACK off).

    Differences from the paper: the kernel's loss recovery is not RFC 6675 but its
    own SACK scoreboard with Proportional Rate Reduction: on three dupACKs ssthresh
    = max(cwnd/2, 2) at once (eq. 4) but cwnd reaches ssthresh gradually during
    recovery (eq. 5 holds at the end of recovery); there is no rescue retransmission
    (matches the paper, which omits it); spurious-retransmission undo (DSACK /
    timestamps) stays on; RTO backoff is the kernel's doubling.
    """

    name, algorithm = "sack", "reno"
    doc = "kernel reno + SACK, initial RTO 1 ms, min RTO 1 jiffy, no RACK/TLP/F-RTO"
    sysctls = {"tcp_sack": "1", "tcp_recovery": "0", "tcp_early_retrans": "0", "tcp_frto": "0",
               "tcp_no_metrics_save": "1"}
    default_init_rto_s = PAPER_INIT_RTO_S
    low_rto_min = True
    differences = (
        "fast recovery uses PRR: ssthresh halves at once, cwnd converges to it during recovery",
        "spurious-retransmission undo (DSACK, timestamps) is the kernel's; the paper has none",
        "RTO backoff doubles (kernel), the paper does not specify SACK's backoff",
    )


class MSack(Profile):
    """TCP mSACK of the paper: module ``tcp_msack`` (exponential growth always, RTO
    halves cwnd, three dupACKs leave cwnd unchanged), initial RTO 1 ms, min RTO one
    jiffy.

    Differences from the paper: dupACKs do not start a fast retransmit because the
    profile sets tcp_reordering=300 (the kernel's maximum) and RACK off, so losses
    are repaired by RTO as in the paper's Fig. 2b, but after 300 dupACKs the kernel
    would still retransmit (without reducing cwnd); growth pauses while the flow is
    not cwnd-limited; RTO backoff doubles (kernel).
    """

    name, algorithm = "msack", "msack"
    doc = "tcp_msack: exponential growth, RTO halves cwnd, dupACKs ignored; initial RTO 1 ms"
    sysctls = {"tcp_sack": "1", "tcp_recovery": "0", "tcp_reordering": "300", "tcp_early_retrans": "0",
               "tcp_frto": "0", "tcp_slow_start_after_idle": "0", "tcp_no_metrics_save": "1"}
    default_init_rto_s = PAPER_INIT_RTO_S
    low_rto_min = True
    options_spec = {**Profile.options_spec, "rto_decrease_pct": "int"}
    differences = (
        "loss detection: no fast retransmit before tcp_reordering (300) dupACKs; after that the "
        "kernel retransmits but cwnd stays",
        "cwnd grows only while cwnd-limited (not when application or receive window limited)",
        "RTO backoff doubles (kernel)",
    )

    @classmethod
    def int_bounds(cls, option: str) -> tuple[int, int]:
        lo, hi, _d, _doc = modules.OUR_MODULES["msack"]["rto_decrease_pct"]
        return lo, hi

    def module_params(self, tdf: TimeDilation, link_rate_bps: float | None, mtu: int) -> dict[str, int]:
        return {"rto_decrease_pct": self.options.get("rto_decrease_pct", 50)}


class Saw(Profile):
    """TCP SAW of the paper: module ``tcp_saw`` (one segment in flight; RTO backoff
    alpha = 1.1, RTO EWMA beta = 0.5 inside the module), no delayed ACKs (route
    quickack 1), initial RTO T_1 = 1 ms (sock_ops), min RTO one jiffy, initcwnd 1.

    Differences from the paper: alpha = 1.1 is obtained by leaving ceil(alpha*T/2)
    jiffies for the kernel's doubling, so each backoff step is alpha*T rounded up
    to an even number of jiffies... within one jiffy; the SYN backs off by
    doubling; T starts from the RTO the handshake left; the RTO is never below one
    jiffy; thin-stream linear timeouts are off (the module implements alpha).
    """

    name, algorithm = "saw", "saw"
    doc = "tcp_saw: 1 segment in flight, alpha 1.1, beta 0.5; quickack; initial RTO 1 ms"
    sysctls = {"tcp_sack": "1", "tcp_early_retrans": "0", "tcp_frto": "0",
               "tcp_thin_linear_timeouts": "0", "tcp_slow_start_after_idle": "0",
               "tcp_no_metrics_save": "1"}
    default_init_rto_s = PAPER_INIT_RTO_S
    low_rto_min = True
    quickack = True
    initcwnd = 1
    options_spec = {**Profile.options_spec, "alpha_pct": "int", "beta_pct": "int"}
    differences = (
        "RTO backoff alpha = 1.1 via the kernel's doubling of ceil(alpha*T/2) jiffies: "
        "exact to within one jiffy",
        "the RTO is never below one jiffy (route rto_min, locked by iproute2)",
        "T starts from the RTO left by the handshake (T_1 from sock_ops, or the kernel "
        "estimate from the SYN's RTT sample)",
        "delayed ACKs are off through the route (quickack 1) on every host of the profile",
    )

    @classmethod
    def int_bounds(cls, option: str) -> tuple[int, int]:
        lo, hi, _d, _doc = modules.OUR_MODULES[cls.algorithm][option]
        return lo, hi

    def module_params(self, tdf: TimeDilation, link_rate_bps: float | None, mtu: int) -> dict[str, int]:
        return {"alpha_pct": self.options.get("alpha_pct", 110), "beta_pct": self.options.get("beta_pct", 50)}


class Sawl(Saw):
    """TCP SAWL of the paper: SAW whose armed RTO is T + p x tau (module
    ``tcp_sawl``), p = 4 by default (option p), tau = duration of one MTU-sized
    packet at the host's link rate, x D: tau_emu = MTU * 8 / (rate / D).

    Differences from the paper: those of SAW; p and tau are module parameters, so
    all SAWL hosts in one guest share them (apply() refuses a second host whose
    link rate gives another tau).
    """

    name, algorithm = "sawl", "sawl"
    doc = "tcp_sawl: SAW with RTO + p*tau (p = 4, tau = MTU at the link rate, x D)"
    options_spec = {**Saw.options_spec, "p": "int"}
    differences = (*Saw.differences,
                   "p and tau are per module (per kernel), not per socket: SAWL hosts must share tau")

    def module_params(self, tdf: TimeDilation, link_rate_bps: float | None, mtu: int) -> dict[str, int]:
        if not link_rate_bps:
            raise DefinitionError("cca", self.name, "a host link rate (SAWL needs tau = MTU / rate)")
        tau_s = tdf.time_to_emulation(packet_duration_s(mtu, link_rate_bps))
        return {**super().module_params(tdf, link_rate_bps, mtu), "p": self.options.get("p", 4),
                "tau_ns": int(round(tau_s * 1e9))}

    def settings(self, tdf: TimeDilation, link_rate_bps: float | None = None, mtu: int = 1500,
                 hz: int = 250) -> dict[str, Any]:
        s = super().settings(tdf, link_rate_bps, mtu, hz)
        mp = s["module_params"]
        s["extra_rto"] = {"p": mp["p"], "tau_paper_s": packet_duration_s(mtu, link_rate_bps or 1),
                          "tau_emulation_s": mp["tau_ns"] / 1e9, "p_tau_emulation_s": mp["p"] * mp["tau_ns"] / 1e9}
        return s

    def apply(self, host: Any, tdf: TimeDilation, link_rate_bps: float | None = None) -> dict[str, Any]:
        mp = self.module_params(tdf, link_rate_bps, host_mtu(host))
        if "sawl" in modules.available():
            current = modules.parameters("tcp_sawl")
            users = modules.refcount("tcp_sawl") or 0
            if users and current.get("tau_ns") not in (None, str(mp["tau_ns"])):
                raise modules.CongestionControlError(
                    f"sawl on {host.name}: tau_ns={mp['tau_ns']} but tcp_sawl is in use with "
                    f"tau_ns={current['tau_ns']}; SAWL hosts of one kernel must share one link rate")
        return super().apply(host, tdf, link_rate_bps)


PROFILES: dict[str, type[Profile]] = {c.name: c for c in
                                      (Saw, Sawl, Sack, MSack, Reno, Cubic, Bbr, PacedReno)}
KERNEL_DEFAULT_PROFILES = {"reno", "cubic", "bbr"}


def make(name: str, options: dict[str, Any] | None = None, key: str = "cca") -> Profile:
    """A profile by name; raises DefinitionError naming the key and the known names."""
    if name not in PROFILES:
        raise DefinitionError(key, name, "one of " + ", ".join(sorted(PROFILES)))
    cls = PROFILES[name]
    cls.parse_options(options or {}, key)
    return cls(**(options or {}))
