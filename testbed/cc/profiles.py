"""Congestion-control profiles: a paper's TCP variant as Linux settings for one host.

A profile is a named object (``PROFILES`` maps names to classes, subclasses refine
their parents, as Mininet's node classes do). ``apply(host, tdf, link_rate_bps)``
configures one emulated host -- its namespace's TCP sysctls, its routes, the
congestion-control module and, where the paper changes the initial RTO, a sock_ops
program scoped to the host's netns -- and returns the effective settings (emulation
units, after time dilation) for the run manifest. ``undo()`` restores what it
changed, in reverse. Every object is written to the run ledger before it exists.

All paper times (initial RTO, min RTO, p x tau, SAW's RTO cap) pass through
``TimeDilation``: emulation time = paper time x D, then rounded up to the kernel's
timer unit (one jiffy, 1/CONFIG_HZ s). Where the kernel cannot time a value (above
TCP_RTO_MAX = 120 s of emulation time) the settings record the value it does use
(``effective_s`` in emulation time, ``effective_paper_s`` in paper time) next to the
requested one, a note in ``differences``, and a logged warning: the manifest never
claims a value the kernel did not use. Each class docstring lists where it differs
from the paper; ``undilated_timers`` lists the kernel timer constants that still act
in emulation time, with their paper-time value at the run's D.
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
from testbed.units import Dim, Quantity, packet_duration_s

log = logging.getLogger(__name__)

#: Paper's initial RTO T_1 for SAW / SACK / mSACK, and the conventional one.
PAPER_INIT_RTO_S = 1e-3
CONVENTIONAL_INIT_RTO_S = 1.0
#: Paper's cap of SAW's RTO T_i ("up to a maximum value of T_i = 60 s"), paper seconds.
PAPER_SAW_RTO_MAX_S = 60.0
#: TCP_RTO_MAX of include/net/tcp.h (120*HZ jiffies): no retransmission timer is longer
#: (emulation seconds); tcp_timeout_init() clamps the initial RTO to it.
TCP_RTO_MAX_S = 120.0
#: Bounds of the profile option initial_window (segments; route attribute initcwnd).
INITIAL_WINDOW_BOUNDS = (1, 1000)
#: Bounds of the profile option max_window (segments; snd_cwnd_clamp). The kernel takes
#: any int > 0; above 65535 segments the buffers the profile sets for it (below) pass
#: 256 MiB per socket at MSS 1448, more than a guest has. E2's Wm is 64..512.
MAX_WINDOW_BOUNDS = (1, 65535)
#: Bounds of the profile option mss (TCP payload bytes per full segment). 88 is the
#: kernel's TCP_MIN_MSS; the upper bound is a 9000 B MTU less IPv4, TCP and timestamp
#: headers. settings() also checks it against the host's MTU.
MSS_BOUNDS = (88, 8948)
#: IPv4 + TCP header bytes without options, and the TCP timestamp option (10 B + 2 NOP).
TCPIP_HEADER_BYTES, TIMESTAMP_OPTION_BYTES = 40, 12
ETHERNET_HEADER_BYTES = 14
#: Upper bound of the memory the kernel charges a socket for one segment beyond its
#: payload (skb truesize - payload on 6.1 x86-64: struct sk_buff 232 B and
#: skb_shared_info 320 B, cache-aligned, plus a head of at most MAX_TCP_HEADER 320 B).
SKB_OVERHEAD_BYTES = 1024
#: Linux 6.1 defaults of net.ipv4.tcp_rmem / tcp_wmem (min, default, max bytes); a
#: max_window profile only raises them.
KERNEL_TCP_RMEM = (4096, 131072, 6291456)
KERNEL_TCP_WMEM = (4096, 16384, 4194304)

#: Kernel timer constants of Linux 6.1 that act in emulation time (undilated), with
#: their kernel value in seconds; ``undilated_timers`` converts them to paper time.
#: (name, kernel seconds or None for one jiffy, what it does and its state under the profiles).
#: Not listed: the SYN / SYN-ACK backoff, which starts from the (dilated) initial RTO and
#: doubles up to TCP_RTO_MAX, and its give-up time (tcp_syn_retries, modelled on the
#: initial RTO, so dilated too).
KERNEL_TIMERS: tuple[tuple[str, float | None, str], ...] = (
    ("jiffy (1/CONFIG_HZ)", None, "granularity of every TCP timer; RTOs are whole jiffies"),
    ("TCP_DELACK_MIN / TCP_ATO_MIN", 0.040, "minimum delayed-ACK timeout (off: route quickack 1)"),
    ("TCP_DELACK_MAX", 0.200, "maximum delayed-ACK timeout (off: route quickack 1)"),
    ("TCP_RTO_MIN", 0.200, "default minimum RTO (replaced: route rto_min 1 jiffy) and the base of "
     "the retries1/retries2 give-up model"),
    ("TCP_RTO_MAX", 120.0, "longest RTO, caps the initial RTO and SAW's 60 s (paper) cap"),
    ("TCP_TIMEOUT_INIT", 1.0, "initial RTO without a sock_ops answer (replaced by the profile's)"),
    ("TCP_TIMEOUT_FALLBACK", 3.0, "RTO after a handshake without RTT sample (replaced at .init by "
     "our modules; stays for reno/cubic)"),
    ("TCP_TIMEOUT_MIN", 0.008, "2 jiffies: least TCP_BPF_RTO_MIN (hence the route rto_min instead)"),
    ("tcp_retries2 (15) give-up", 924.6, "connection aborted after this long of unanswered "
     "retransmissions (model with TCP_RTO_MIN base)"),
    ("tcp_retries1 (3)", 3.0, "after this long of retransmissions the route is re-validated"),
    ("TCP_TIMEWAIT_LEN", 60.0, "TIME_WAIT and FIN_WAIT2 lifetime"),
    ("tcp_min_rtt_wlen", 300.0, "window of the min-RTT filter (RACK, BBR, HyStart)"),
    ("TCP_RESOURCE_PROBE_INTERVAL", 0.5, "retry interval when memory is short"),
    ("tcp timestamp clock (TCP_TS_HZ)", 0.001, "resolution of TSval/TSecr RTT samples "
     "(retransmitted segments, tcp_retries* timing)"),
    ("TCP Small Queues budget (sk_pacing_shift 10)", 1 / 1024, "bytes a socket may have below TCP: "
     "max(2 packets, pacing rate x this); neutralised on the optical fabric (the hosts' hostnic qdisc "
     "ends a packet's charge when the NIC takes it) and behind a netem qdisc with delay (it orphans)"),
)

#: Differences that hold for every paper profile on Linux.
COMMON_DIFFERENCES = (
    "timers have jiffy resolution (1/CONFIG_HZ, 4 ms at HZ=250): paper times x D are rounded "
    "up to whole jiffies; choose D so that they span several jiffies",
    "the SYN / SYN-ACK use the initial RTO but back off by doubling (kernel handshake code, "
    "not pluggable)",
    "tail loss probes (tcp_early_retrans=0) and F-RTO (tcp_frto=0) are turned off: the "
    "papers have neither",
)
#: Differences of the four paper profiles (saw, sawl, sack, msack: our modules).
PAPER_DIFFERENCES = (
    "the first data segment is timed with the initial RTO (the module's .init re-arms it after "
    "the handshake); the SYN/SYN-ACK RTT is not an RTT sample (it is dropped at .init)",
    "ACKs are the kernel's (with TCP timestamps and SACK options), one per data segment "
    "(route quickack 1); the paper's are 64 B signalling packets",
)


def undilated_timers(tdf: TimeDilation, hz: int = 250) -> list[dict[str, Any]]:
    """``KERNEL_TIMERS`` with their kernel value and the paper time it stands for at
    ``tdf`` (kernel seconds / D): rows name, kernel_s, paper_s, role."""
    out = []
    for name, kernel_s, role in KERNEL_TIMERS:
        k = 1.0 / hz if kernel_s is None else kernel_s
        out.append({"name": name, "kernel_s": k, "paper_s": tdf.time_to_paper(k), "role": role})
    return out


def _fmt_s(seconds: float) -> str:
    """A time in the most readable SI unit (``12 ms``, ``400 ns``)."""
    for unit, f in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
        if abs(seconds) >= f or unit == "ns":
            return f"{seconds / f:.6g} {unit}"
    return f"{seconds} s"


class Profile:
    """Base: run kernel algorithm ``algorithm`` with the kernel's defaults.

    Options (all profiles): ``init_rto`` (paper time; None = kernel default 1 s),
    ``rto_min`` (paper time; None = kernel default 200 ms unless the profile lowers it),
    ``initial_window`` (segments 1..1000, route ``initcwnd``; None = the profile's
    default: kernel 10, or 1 for the paper's profiles), ``quickack`` (0 or 1, route
    ``quickack``: 1 = an ACK for every segment, no delayed ACKs), ``timestamps`` (0 or
    1: ``net.ipv4.tcp_timestamps`` on the host; unset: the kernel's, on; a family that
    turns them off says so here, so that the records count a full segment's payload as
    the kernel does, MTU - 40 B instead of MTU - 52 B).

    Options of the window-based profiles (not ``saw`` / ``sawl``, which have one
    segment in flight): ``max_window`` (segments 1..65535: the maximum congestion
    window Wm; the sender's ``snd_cwnd_clamp``, set by the host's sock_ops program
    when a connection is established, and socket buffers that never limit below it;
    see :meth:`max_window_settings`), ``mss`` (TCP payload bytes per full segment,
    88..8948 and at most MTU - 52: route ``advmss`` = mss + 12 (timestamp option) on
    the host's routes; see :meth:`mss_settings`).

    A profile may have options of its own (e.g. ``paced-reno``'s ``pacer``, one of a
    fixed set of words: ``options_spec`` maps it to the tuple of accepted values).
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
    #: route attribute initcwnd (None: kernel default 10); option initial_window overrides
    initcwnd: ClassVar[int | None] = None
    #: options accepted: name -> Dim, "int", or a tuple of the accepted words
    options_spec: ClassVar[dict[str, Any]] = {"init_rto": Dim.TIME, "rto_min": Dim.TIME,
                                              "initial_window": "int", "quickack": "int",
                                              "max_window": "int", "mss": "int", "timestamps": "int"}
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
            if isinstance(spec, tuple):
                if not isinstance(v, str) or v not in spec:
                    raise DefinitionError(f"{key}.{k}", v, "one of " + ", ".join(spec))
                out[k] = v
            elif spec == "int":
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
        """Accepted range of an integer option (inclusive)."""
        if option == "initial_window":
            return INITIAL_WINDOW_BOUNDS
        if option in ("quickack", "timestamps"):
            return (0, 1)
        if option == "max_window":
            return MAX_WINDOW_BOUNDS
        if option == "mss":
            return MSS_BOUNDS
        spec = modules.OUR_MODULES.get(cls.algorithm, {})
        if option in spec:
            lo, hi, _default, _doc = spec[option]
            return lo, hi
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
            s["init_rto"] = self.initial_rto(init_s, tdf, hz, s["differences"])
        rto_min = self.options.get("rto_min")
        if rto_min is not None or self.low_rto_min:
            emu = tdf.time_to_emulation(rto_min.si) if rto_min is not None else 1.0 / hz
            ms = max(1, math.ceil(emu * 1e3 - 1e-9))
            j = sockops.to_jiffies(ms / 1e3, hz)
            s["rto_min"] = {"requested_paper_s": rto_min.si if rto_min is not None else None,
                            "requested_emulation_s": emu, "route_ms": ms, "effective_s": j / hz,
                            "effective_paper_s": tdf.time_to_paper(j / hz)}
            s["route"]["rto_min"] = f"{ms}ms"  # iproute2 always locks rto_min
            if rto_min is not None:
                s["differences"].append(
                    f"min RTO {_fmt_s(rto_min.si)} (paper): Linux bounds the variance term, RTO = SRTT + "
                    "max(4 RTTVAR, min RTO) (so every RTO after the first data ACK is >= SRTT + min RTO), "
                    "where ns-2's minrto_ bounds the whole value, max(minrto_, SRTT + 4 RTTVAR)")
        quickack = self.options.get("quickack", 1 if self.quickack else None)
        if quickack is not None:
            s["route"]["quickack"] = str(quickack)
        window = self.options.get("initial_window", self.initcwnd)
        if window is not None:
            s["route"]["initcwnd"] = str(window)
        s["initial_window_segments"] = window if window is not None else "kernel default (10)"
        s["per_packet_acks"] = quickack == 1
        timestamps = self.options.get("timestamps")
        if "mss" in self.options:
            if timestamps == 0:
                raise DefinitionError("cca.timestamps", 0, "1 or unset with option mss (its payload counts the "
                                      f"{TIMESTAMP_OPTION_BYTES} B timestamp option)")
            s["mss"] = self.mss_settings(self.options["mss"], mtu)
            s["route"]["advmss"] = str(s["mss"]["route_advmss"])
            s["sysctls"]["net.ipv4.tcp_timestamps"] = "1"
        elif timestamps is not None:
            s["sysctls"]["net.ipv4.tcp_timestamps"] = str(timestamps)
        if "max_window" in self.options:
            # a full segment's payload: the MTU less the headers and, with timestamps on
            # (the kernel's default), their option
            option_bytes = 0 if timestamps == 0 else TIMESTAMP_OPTION_BYTES
            mss = self.options.get("mss", mtu - TCPIP_HEADER_BYTES - option_bytes)
            s["max_window"] = self.max_window_settings(self.options["max_window"], mss)
            s["sysctls"].update(s["max_window"]["sysctls"])
        if self.name not in KERNEL_DEFAULT_PROFILES or self.options:
            s["undilated_timers"] = undilated_timers(tdf, hz)
            s["differences"].append(
                "kernel timers still in emulation time (paper time at D = %g): %s; see "
                "docs/congestion-control.md" % (tdf.factor, ", ".join(
                    f"{t['name']} {_fmt_s(t['kernel_s'])} ({_fmt_s(t['paper_s'])})"
                    for t in s["undilated_timers"])))
        return s

    @staticmethod
    def mss_settings(mss: int, mtu: int) -> dict[str, Any]:
        """How a payload of ``mss`` bytes per full segment is obtained, as recorded.

        The route attribute ``advmss`` of every route of the host is the MSS the host
        advertises in its SYN / SYN-ACK (RFC 9293: segment size without TCP options).
        The peer's sender then uses tcp_sync_mss(): min(MTU - 40, advertised MSS) less
        its own TCP option bytes per segment; with timestamps (on: net.ipv4.tcp_timestamps
        = 1) that is 12 B, so advmss = mss + 12 gives exactly ``mss`` payload bytes per
        segment. Data segments of a one-way transfer carry no SACK blocks (the sender
        receives nothing out of order), so the payload is constant. Both ends must carry
        the profile: the *receiver's* advmss sets the sender's segments.

        Raises DefinitionError (key ``cca.mss``) when mss + 52 exceeds ``mtu`` (bytes)."""
        advmss = mss + TIMESTAMP_OPTION_BYTES
        if advmss + TCPIP_HEADER_BYTES > mtu:
            raise DefinitionError("cca.mss", mss, f"at most {mtu - TCPIP_HEADER_BYTES - TIMESTAMP_OPTION_BYTES} "
                                  f"(MTU {mtu} B - 40 B IPv4/TCP headers - 12 B timestamp option)")
        ip = mss + TCPIP_HEADER_BYTES + TIMESTAMP_OPTION_BYTES
        return {"payload_bytes": mss, "timestamps": True, "tcp_option_bytes": TIMESTAMP_OPTION_BYTES,
                "route_advmss": advmss, "ip_datagram_bytes": ip, "ethernet_frame_bytes": ip + ETHERNET_HEADER_BYTES,
                "mechanism": f"route advmss {advmss} on every route of each host with the profile "
                             f"(advertised MSS {advmss} B - 12 B timestamp option = {mss} B payload per segment)"}

    @staticmethod
    def max_window_settings(segments: int, mss: int) -> dict[str, Any]:
        """The maximum congestion window Wm = ``segments`` and the buffers for it, as recorded.

        Mechanism: the host's sock_ops program (ebpf/tcp_rto.bpf.c) calls
        bpf_setsockopt(TCP_BPF_SNDCWND_CLAMP, Wm) at ACTIVE/PASSIVE_ESTABLISHED, i.e. in
        tcp_init_transfer() before the first data segment; every cwnd update of the
        kernel (slow start, congestion avoidance, undo, initial window) is bounded by
        snd_cwnd_clamp. The kernel also sets snd_ssthresh = Wm there, so the first slow
        start ends where the clamp holds cwnd anyway. (A route ``cwnd lock`` would not
        do: tcp_init_metrics() reads it from the TCP metrics cache, which the paper
        profiles bypass with tcp_no_metrics_save = 1.)

        Buffers: neither end may limit the window below Wm. The receive window is at most
        rcvbuf / 2 (tcp_adv_win_scale = 1, set), and each queued segment (in order, or
        out of order during SACK recovery) is charged up to mss + SKB_OVERHEAD_BYTES;
        the sender's autotuned sndbuf is 2 x cwnd x the same per-segment memory, capped by
        tcp_wmem[2]. So X = 4 x Wm x (mss + SKB_OVERHEAD_BYTES) (twice what a full window
        needs) and tcp_rmem = "4096 max(131072, X) max(6291456, X)" (the receiver starts
        with rcvbuf X, so its window can open to Wm without waiting for autotuning),
        tcp_wmem = "4096 16384 max(4194304, X)" (autotuning grows sndbuf with cwnd).
        A receive window >= Wm x mss bytes needs the profile on the receiving host too."""
        x = 4 * segments * (mss + SKB_OVERHEAD_BYTES)
        rmem = (KERNEL_TCP_RMEM[0], max(KERNEL_TCP_RMEM[1], x), max(KERNEL_TCP_RMEM[2], x))
        wmem = (KERNEL_TCP_WMEM[0], KERNEL_TCP_WMEM[1], max(KERNEL_TCP_WMEM[2], x))
        return {"segments": segments, "bytes": segments * mss, "mss_bytes": mss,
                "mechanism": "snd_cwnd_clamp = Wm via bpf_setsockopt(TCP_BPF_SNDCWND_CLAMP) in the "
                             "host's sock_ops program at ACTIVE/PASSIVE_ESTABLISHED (also sets "
                             "snd_ssthresh = Wm)",
                "receive_window_max_bytes": rmem[1] // 2, "send_buffer_max_bytes": wmem[2],
                "sysctls": {"net.ipv4.tcp_rmem": " ".join(map(str, rmem)),
                            "net.ipv4.tcp_wmem": " ".join(map(str, wmem)),
                            "net.ipv4.tcp_adv_win_scale": "1"}}

    def initial_rto(self, paper_s: float, tdf: TimeDilation, hz: int,
                    differences: list[str]) -> dict[str, Any]:
        """The initial RTO the kernel will use for ``paper_s`` (paper seconds) at ``tdf``:
        x D, rounded up to jiffies, clamped to TCP_RTO_MAX (tcp_timeout_init() does that in
        the kernel). A clamp is recorded (``clamped``, a note in ``differences``) and
        logged as a warning."""
        emu = tdf.time_to_emulation(paper_s)
        j = sockops.to_jiffies(emu, hz)
        limit = int(TCP_RTO_MAX_S * hz)
        rec: dict[str, Any] = {"requested_paper_s": paper_s, "requested_emulation_s": emu}
        clamped = j > limit
        j = min(j, limit)
        rec.update({"jiffies": j, "effective_s": j / hz, "effective_paper_s": tdf.time_to_paper(j / hz),
                    "clamped": clamped})
        if clamped:
            note = (f"initial RTO {_fmt_s(paper_s)} (paper) x D = {_fmt_s(emu)} exceeds the kernel's "
                    f"TCP_RTO_MAX ({TCP_RTO_MAX_S:g} s): the kernel uses {j / hz:g} s, i.e. "
                    f"{_fmt_s(tdf.time_to_paper(j / hz))} of paper time")
            rec["note"] = note
            differences.append(note)
            log.warning("profile %s: %s", self.name, note)
        return rec

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
        # 4. initial RTO, maximum window and TCP's internal pacing (sock_ops, per netns)
        pacing = self.sockops_pacing()
        if "init_rto" in s or "max_window" in s or pacing:
            pin = PIN_ROOT / f"{host.emu.token}-cc" / host.name
            info = sockops.attach(ledger, netns=host.netns, pin_dir=pin,
                                  init_rto_jiffies=s["init_rto"]["jiffies"] if "init_rto" in s else 0,
                                  sndcwnd_clamp=s.get("max_window", {}).get("segments", 0), pacing=pacing)
            for key in ("init_rto", "max_window", *(("pacing",) if pacing else ())):
                if key in s:
                    s[key]["netns_cookie"] = info["netns_cookie"]
                    s[key]["pin_dir"] = str(pin)
            self._undo.append(("pin", len(ledger.entries) - 1))
        self.extra_apply(host, s)
        self._host = host
        return s

    def sockops_pacing(self) -> bool:
        """Whether the host's sock_ops program turns TCP's internal pacing on for its
        connections (sockops.attach(pacing=True)); then settings() has a ``pacing`` record,
        which apply() completes with the program's ``netns_cookie`` and ``pin_dir``."""
        return False

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
            self._host.emu.ledger.remove(step[1])
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
    """The host's IPv4 routes as ``ip route change`` selectors (dst, dev, via, proto,
    scope, src)."""
    import json

    out = host.run(["ip", "-j", "-4", "route", "show"]).stdout
    routes = []
    for r in json.loads(out or "[]"):
        sel = [r["dst"], "dev", r["dev"]]
        if r.get("gateway"):  # a host behind a router (E4): `change` must keep its next hop
            sel += ["via", r["gateway"]]
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
    """Reno paced at cwnd/srtt: tcp_pacing_ss_ratio = tcp_pacing_ca_ratio = 100 (the
    kernel's defaults are 200 / 120), so the pacing rate is cwnd x mss / srtt and each
    window is spread over an RTT. Option ``pacer`` chooses who holds the packets:

    * ``"fq"`` (default): the fq qdisc on the host's NIC. fq replaces the host
      interface's root qdisc, or, when the link is shaped on the host's side without
      netem, the pfifo leaf under HTB. A host interface with netem cannot also have fq:
      apply() refuses (shape the switch side instead). fq adds its per-flow scheduling
      (round robin, quantum 2 MTU) and its own horizon / flow limits.
    * ``"tcp"``: TCP's internal pacing, turned on per connection by the host's sock_ops
      program (SO_MAX_PACING_RATE, ``ebpf/tcp_rto.bpf.c``); the host's qdiscs are left as
      they are (on the optical fabric the NIC model ``hostnic`` stays). The socket stamps
      each data skb with its earliest departure time (EDT) at the same rate and holds the
      next one on an hrtimer until then; the next qdisc (hostnic, via the fabric's host
      egress program, which takes max(now, stamp) as the packet's arrival) honours the
      stamp. TSO autosizing is told to build one segment per skb at the paper's rates
      (tcp_min_tso_segs = 1, kernel 2; tcp_tso_rtt_log = 0: no extra 64 KB >> (min RTT /
      512 us) per skb): each skb then holds max(1, pacing rate x 1 ms / mss) segments,
      so a window leaves segment by segment rather than in pairs.

    Both: the kernel does not pace the first 10 data segments of a connection
    (tcp_update_skb_after_send, "original sch_fq does not pace first 10 MSS").
    settings() records which pacer ran (``pacer``) and how (``pacing``).
    """

    name = "paced-reno"
    doc = "reno paced at cwnd/srtt (pacing ratios 100 %) by fq on the host NIC or by TCP itself (option pacer)"
    sysctls = {"tcp_pacing_ss_ratio": "100", "tcp_pacing_ca_ratio": "100"}
    #: option ``pacer``: fq on the host NIC (today's default) or TCP's internal pacing
    PACERS: ClassVar[tuple[str, ...]] = ("fq", "tcp")
    #: sysctls of pacer "tcp": one segment per skb below 1 ms x pacing rate (see the docstring)
    TCP_PACER_SYSCTLS: ClassVar[dict[str, str]] = {"tcp_min_tso_segs": "1", "tcp_tso_rtt_log": "0"}
    options_spec = {**Profile.options_spec, "pacer": PACERS}
    differences = ("Linux paces at ratio x cwnd x mss / srtt from the current srtt, and not the first 10 data "
                   "segments of a connection",)

    def pacer(self) -> str:
        """The pacer chosen: ``fq`` or ``tcp``."""
        return self.options.get("pacer", "fq")

    def sockops_pacing(self) -> bool:
        return self.pacer() == "tcp"

    def settings(self, tdf: TimeDilation, link_rate_bps: float | None = None, mtu: int = 1500,
                 hz: int = 250) -> dict[str, Any]:
        s = super().settings(tdf, link_rate_bps, mtu, hz)
        rate = "tcp_pacing_ss_ratio / tcp_pacing_ca_ratio 100 % x cwnd x mss / srtt"
        s["pacer"] = self.pacer()
        if s["pacer"] == "tcp":
            s["sysctls"].update({f"net.ipv4.{k}": v for k, v in self.TCP_PACER_SYSCTLS.items()})
            s["pacing"] = {
                "pacer": "tcp", "rate": rate, "qdisc": "the host's own, unchanged",
                "max_pacing_rate_bytes_per_s": sockops.MAX_PACING_RATE_BYTES_PER_S,
                "mechanism": "TCP's internal pacing (sk_pacing_status NEEDED: EDT stamps and an hrtimer in "
                             "tcp_write_xmit), turned on by the host's sock_ops program with SO_MAX_PACING_RATE "
                             f"= {sockops.MAX_PACING_RATE_BYTES_PER_S} B/s (a cap above every emulated link) at "
                             "ACTIVE/PASSIVE_ESTABLISHED; one segment per skb below 1 ms x pacing rate "
                             "(tcp_min_tso_segs 1, tcp_tso_rtt_log 0)"}
            s["differences"].append(
                "pacer tcp: TCP's internal pacing (EDT stamps, hrtimer) on the host's own NIC qdisc, which "
                "serves the packets in their order (no per-flow scheduling as fq's)")
        else:
            s["pacing"] = {"pacer": "fq", "rate": rate, "qdisc": "fq replaces the host NIC's qdisc",
                           "mechanism": "the fq qdisc paces each flow at the socket's sk_pacing_rate "
                                        "(sk_pacing_status FQ; TCP stamps, fq holds)"}
            s["differences"].append("pacer fq: fq adds its flow scheduling (quantum 2 MTU) and its horizon "
                                    "on the host NIC")
        return s

    def extra_apply(self, host: Any, settings: dict[str, Any]) -> None:
        if self.pacer() == "tcp":
            return  # the sock_ops program paces (Profile.apply step 4); qdiscs untouched
        ledger = host.emu.ledger
        for intf in host.intfs:
            qd = host.run(["tc", "qdisc", "show", "dev", intf]).stdout
            if "netem" in qd:
                raise modules.CongestionControlError(
                    f"paced-reno on {host.name}: {intf} has netem, which cannot be combined with fq; "
                    "shape the link on the switch side, or use pacer = \"tcp\"")
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
    """TCP SACK of the paper (RFC 6675 on Reno): module ``tcp_sack`` (the kernel's
    reno functions; its .init times the first data segment with the initial RTO and
    drops the handshake's RTT sample), SACK on, initial RTO T_1 = 1 ms (option
    init_rto, e.g. "1 s" for the conventional value), then the kernel's RFC 6298
    estimator with min RTO one jiffy, an ACK per segment (route quickack 1), initial
    window one segment (option initial_window), classic three-dupACK fast retransmit
    (RACK off).

    Min RTO: one jiffy (1/HZ of emulation time, 1/HZ/D of paper time), the least the
    kernel can time. The paper names none and lowers the initial RTO to 1 ms precisely
    so that timeouts follow the RTT; Linux's 200 ms default (20 us of paper time at
    D = 10 000) or RFC 6298's 1 s would be a floor the paper does not have. The
    estimator itself keeps RTO >= SRTT + max(4 RTTVAR, min RTO).

    Differences from the paper: the kernel's loss recovery is not RFC 6675 but its
    own SACK scoreboard with Proportional Rate Reduction: on three dupACKs ssthresh
    = max(cwnd/2, 2) at once (eq. 4) but cwnd reaches ssthresh gradually during
    recovery (eq. 5 holds at the end of recovery); there is no rescue retransmission
    (matches the paper, which omits it); spurious-retransmission undo (DSACK /
    timestamps) stays on; RTO backoff is the kernel's doubling.
    """

    name, algorithm = "sack", "sack"
    doc = "tcp_sack (reno) + SACK, first data RTO = initial RTO 1 ms, min RTO 1 jiffy, quickack, " \
          "initcwnd 1, no RACK/TLP/F-RTO"
    sysctls = {"tcp_sack": "1", "tcp_recovery": "0", "tcp_early_retrans": "0", "tcp_frto": "0",
               "tcp_no_metrics_save": "1"}
    default_init_rto_s = PAPER_INIT_RTO_S
    low_rto_min = True
    quickack = True
    initcwnd = 1
    differences = (
        *PAPER_DIFFERENCES,
        "fast recovery uses PRR: ssthresh halves at once, cwnd converges to it during recovery",
        "spurious-retransmission undo (DSACK, timestamps) is the kernel's; the paper has none",
        "RTO backoff doubles (kernel), the paper does not specify SACK's backoff",
        "after the first data segment the RTO is the kernel's RFC 6298 estimator "
        "(SRTT + max(4 RTTVAR, min RTO)) with min RTO one jiffy; the paper names no minimum",
        "the initial window is a parameter (default one segment); the paper states none",
    )


class MSack(Profile):
    """TCP mSACK of the paper: module ``tcp_msack`` (exponential growth always, RTO
    halves cwnd, three dupACKs leave cwnd unchanged), first data segment timed with
    the initial RTO 1 ms, then the kernel's estimator with min RTO one jiffy (as
    SACK, see there), an ACK per segment (route quickack 1), initial window one
    segment (option initial_window).

    Differences from the paper: dupACKs do not start a fast retransmit because the
    profile sets tcp_reordering=300 (the kernel's maximum) and RACK off, so losses
    are repaired by RTO as in the paper's Fig. 2b, but after 300 dupACKs the kernel
    would still retransmit (without reducing cwnd); growth pauses while the flow is
    not cwnd-limited; RTO backoff doubles (kernel).
    """

    name, algorithm = "msack", "msack"
    doc = "tcp_msack: exponential growth, RTO halves cwnd, dupACKs ignored; first data RTO = " \
          "initial RTO 1 ms; quickack; initcwnd 1"
    sysctls = {"tcp_sack": "1", "tcp_recovery": "0", "tcp_reordering": "300", "tcp_early_retrans": "0",
               "tcp_frto": "0", "tcp_slow_start_after_idle": "0", "tcp_no_metrics_save": "1"}
    default_init_rto_s = PAPER_INIT_RTO_S
    low_rto_min = True
    quickack = True
    initcwnd = 1
    options_spec = {**Profile.options_spec, "rto_decrease_pct": "int"}
    differences = (
        *PAPER_DIFFERENCES,
        "loss detection: no fast retransmit before tcp_reordering (300) dupACKs; after that the "
        "kernel retransmits but cwnd stays",
        "cwnd grows only while cwnd-limited (not when application or receive window limited)",
        "RTO backoff doubles (kernel)",
        "after the first data segment the RTO is the kernel's RFC 6298 estimator "
        "(SRTT + max(4 RTTVAR, min RTO)) with min RTO one jiffy; the paper names no minimum",
        "the initial window is a parameter (default one segment); the paper states none",
    )

    def module_params(self, tdf: TimeDilation, link_rate_bps: float | None, mtu: int) -> dict[str, int]:
        return {"rto_decrease_pct": self.options.get("rto_decrease_pct", 50)}


class Saw(Profile):
    """TCP SAW of the paper: module ``tcp_saw`` (one segment in flight; RTO backoff
    alpha = 1.1, RTO EWMA beta = 0.5 inside the module), no delayed ACKs (route
    quickack 1), initial RTO T_1 = 1 ms (sock_ops; the module's .init sets T = T_1
    for the first data segment, the SYN-ACK is not an RTT sample), min RTO one
    jiffy, initcwnd 1, T capped at 60 s x D (module parameter rto_max_ms; the
    kernel's TCP_RTO_MAX = 120 s limits it above D = 2: recorded as ``rto_max``).

    Differences from the paper: alpha = 1.1 is obtained by leaving ceil(alpha*T/2)
    jiffies for the kernel's doubling, so each backoff step is alpha*T within one
    jiffy; the SYN backs off by doubling; the RTO is never below one jiffy;
    thin-stream linear timeouts are off (the module implements alpha).
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
    options_spec = {k: v for k, v in {**Profile.options_spec, "alpha_pct": "int",
                                      "beta_pct": "int"}.items()
                    if k not in ("initial_window", "max_window")}
    differences = (
        *PAPER_DIFFERENCES,
        "RTO backoff alpha = 1.1 via the kernel's doubling of ceil(alpha*T/2) jiffies: "
        "exact to within one jiffy",
        "the RTO is never below one jiffy (route rto_min, locked by iproute2)",
        "T starts at T_1 (the profile's initial RTO) for the first data segment; the SYN-ACK "
        "is not an RTT sample of eq. 2; each ACK with an RTT sample updates T by eq. 2",
        "delayed ACKs are off through the route (quickack 1) on every host of the profile",
    )

    def module_params(self, tdf: TimeDilation, link_rate_bps: float | None, mtu: int) -> dict[str, int]:
        return {"alpha_pct": self.options.get("alpha_pct", 110), "beta_pct": self.options.get("beta_pct", 50),
                "rto_max_ms": self.rto_max_ms(tdf)}

    @staticmethod
    def rto_max_ms(tdf: TimeDilation) -> int:
        """The module's cap of T: the paper's 60 s x D in ms, at most TCP_RTO_MAX (120 s)."""
        return min(math.ceil(tdf.time_to_emulation(PAPER_SAW_RTO_MAX_S) * 1e3 - 1e-6), int(TCP_RTO_MAX_S * 1e3))

    def settings(self, tdf: TimeDilation, link_rate_bps: float | None = None, mtu: int = 1500,
                 hz: int = 250) -> dict[str, Any]:
        s = super().settings(tdf, link_rate_bps, mtu, hz)
        ms = s["module_params"]["rto_max_ms"]
        emu = tdf.time_to_emulation(PAPER_SAW_RTO_MAX_S)
        eff = sockops.to_jiffies(ms / 1e3, hz) / hz
        clamped = emu > TCP_RTO_MAX_S
        s["rto_max"] = {"requested_paper_s": PAPER_SAW_RTO_MAX_S, "requested_emulation_s": emu,
                        "module_param_ms": ms, "effective_s": eff, "effective_paper_s": tdf.time_to_paper(eff),
                        "clamped": clamped}
        if clamped:
            s["differences"].append(
                f"the cap of T is the paper's 60 s x D = {_fmt_s(emu)} but the kernel times at most "
                f"TCP_RTO_MAX = {TCP_RTO_MAX_S:g} s: the effective cap is {_fmt_s(tdf.time_to_paper(eff))} "
                "of paper time")
        return s


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
