"""The registry of port architectures: what a node of the optical fabric does with a
packet for one of its outputs. One :class:`Architecture` entry each, holding

* its ``name`` and spec syntax (``hybrid:N_E``; :meth:`Registry.parse` reads specs),
* its parameters with bounds (:class:`ArchParam`; errors name key, value and range);
  a duration is given in paper ns and configured dilated (x D, :meth:`Assignment.packed`),
* its packed configuration (:meth:`Architecture.pack`: the bytes of
  ``cfg_node.arch_cfg``, laid out as ``struct optsw_<bpf>_cfg``: the parameters in
  order, each of its C type, naturally aligned),
* its reference model (``reference``: a :class:`testbed.optical.model.PortModel`
  subclass deciding packet by packet as the BPF program does;
  ``testbed/optical/eventsim.py`` is the independent oracle of the paper's switches).
  An architecture whose behaviour is not a per-packet decision (E2's ``obs-edge``
  holds packets in a burst assembler; ``obs-core`` drops whole bursts announced by
  control packets; E5's ``ib`` serves its virtual output queues in an order later
  arrivals decide; ``xcp-edge`` paces macroflows at rates XCP changes) has
  ``reference = None`` and names its reference in ``oracle`` (a module:
  ``testbed.optical.burst``, ``testbed.optical.burstloss``, ``testbed.optical.ramsim``,
  ``testbed.xcpsim``),
* its BPF code identifier: ``bpf``, the header ``ebpf/arch/<bpf>.h`` defining
  ``optsw_<bpf>_decide`` (and optionally ``optsw_<bpf>_control``, ``optsw_<bpf>_prepare``), and ``code``, the value of ``cfg_node.arch``. This registry
  is the one source of the codes: ``testbed/optical/archgen.py`` generates the BPF
  dispatch from it (``make -C ebpf``),
* the ``roles`` a node with it may have (``host``, ``edge``, ``core``),
* its ``realisation`` (``testbed/optical/mechanisms.py``): ``edt`` (decided at arrival,
  stamped, released by fq) or ``holding`` (released by a mechanism that can wait for
  later events: ``obs-edge``'s obsburst qdisc, ``ib``'s voq qdisc, ``xcp-edge``'s
  xcppace qdisc; a holding
  realisation whose mechanism does not exist yet fails naming what is missing), and
  ``mechanism_options``: what that mechanism needs, from the parameter values and the node
  (:class:`~testbed.optical.mechanisms.NodeContext`: node id, D, port rates and
  propagation, host ports, lookahead).

A node gets an :class:`Assignment`: an architecture and its parameter values.

Adding an architecture: its entry below (and in ``REGISTRY``), its BPF header
``ebpf/arch/<bpf>.h`` and its reference model in ``testbed/optical/model.py``
(docs/optical-switch.md, "How to add a port architecture").
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction

from testbed.errors import DefinitionError
from testbed.optical import hostnic, layout, model, obsburst, voq, xcppace
from testbed.optical.burst import ClassParams
from testbed.optical.layout import ARCH_CFG_BYTES, MAX_NE, PortConfig
from testbed.optical.mechanisms import EDT, EDT_FQ, Mechanism, NodeContext, Realisation, holding

#: roles of a node in the fabric: an end host (its own packets), a switch at the edge of
#: the optical core (next to hosts: burst assembly, large electronic buffers), a switch
#: of the core
ROLES = ("host", "edge", "core")
#: roles of a switch node (testbed.net.OpticalSwitch)
SWITCH_ROLES = ("edge", "core")
#: the role of a switch that names none
DEFAULT_SWITCH_ROLE = "core"

_CTYPES = {"u32": "I", "u64": "Q"}
_CTYPE_MAX = {"u32": 2**32 - 1, "u64": 2**64 - 1}


@dataclass(frozen=True)
class ArchParam:
    """One integer parameter of an architecture: ``lo``..``hi`` inclusive, and at most
    the node's number of ports if ``at_most_ports``; ``ctype`` its C type in the
    architecture's configuration struct (``u32`` or ``u64``).

    ``duration``: the value is a paper duration in ns (specs and :attr:`Assignment.params`
    hold it so) and the BPF configuration holds its emulation value, value x D rounded
    to integer ns (:meth:`emulation`), which must be within ``lo``..``emulation_hi``
    (default: the C type's largest value). Every other parameter is packed as given."""

    name: str
    doc: str
    lo: int
    hi: int
    ctype: str = "u32"
    at_most_ports: bool = False
    duration: bool = False
    emulation_hi: int | None = None

    def __post_init__(self) -> None:
        if self.ctype not in _CTYPES:
            raise ValueError(f"parameter {self.name}: ctype {self.ctype!r} not in {sorted(_CTYPES)}")
        if self.emulation_hi is not None and not self.duration:
            raise ValueError(f"parameter {self.name}: emulation_hi is for a duration only")
        if not 0 <= self.emulation_bound <= _CTYPE_MAX[self.ctype]:
            raise ValueError(f"parameter {self.name}: emulation_hi {self.emulation_hi} does not fit a {self.ctype}")

    @property
    def emulation_bound(self) -> int:
        """The largest value the BPF configuration may hold (a duration: after dilation)."""
        return _CTYPE_MAX[self.ctype] if self.emulation_hi is None else self.emulation_hi

    def emulation(self, value: int, tdf: float, key: str) -> int:
        """The value the BPF configuration of a node of time dilation ``tdf`` (D >= 1)
        holds for ``value``: a duration's value x D rounded to integer ns (exactly, half
        to even), any other value as it is. Raises DefinitionError(key, value) naming the
        emulation range when a dilated duration leaves ``lo``..``emulation_hi``, and
        ValueError for D < 1."""
        if not tdf >= 1.0:
            raise ValueError(f"time dilation {tdf!r} < 1")
        if not self.duration:
            return value
        v = round(Fraction(value) * Fraction(tdf))
        if not self.lo <= v <= self.emulation_bound:
            raise DefinitionError(key, value, f"{self.label} ({self.doc}) whose emulation value (x D = {v} ns) is "
                                  f"within {self.lo}..{self.emulation_bound} ns at D = {tdf:g}")
        return v

    @property
    def label(self) -> str:
        """Its placeholder in a spec (``n_e`` -> ``N_E``)."""
        return self.name.upper()

    def bounds(self, ports: int | None) -> tuple[int, int]:
        """(lo, hi) for a node of ``ports`` ports (None: not known yet)."""
        hi = min(self.hi, ports) if self.at_most_ports and ports is not None else self.hi
        return self.lo, hi

    def accepted(self, ports: int | None) -> str:
        lo, hi = self.bounds(ports)
        why = f" (at most the node's {ports} ports)" if self.at_most_ports and ports is not None else ""
        return f"{self.label} ({self.doc}) an integer {lo}..{hi}{why}"

    def check(self, value: object, key: str, ports: int | None, shown: object = None) -> int:
        """``value`` as an int within bounds; else DefinitionError(key, ``shown`` or value)."""
        lo, hi = self.bounds(ports)
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise DefinitionError(key, value if shown is None else shown, self.accepted(ports))
        return value


@dataclass(frozen=True)
class Architecture:
    """One port architecture (see the module docstring). ``reference(ports, **values)``
    builds its per-packet reference model; None when its behaviour is not a per-packet
    decision, and then ``oracle`` names the module that is its reference."""

    name: str
    code: int
    bpf: str
    doc: str
    reference: Callable[..., model.PortModel] | None
    params: tuple[ArchParam, ...] = ()
    roles: tuple[str, ...] = SWITCH_ROLES
    realisation: Realisation = EDT_FQ
    #: the options its realisation's mechanism needs: ``hook(context, values, key)``
    #: with the node's NodeContext, the assignment's parameter values and the key that
    #: errors name (e.g. obs-edge's ObsBurstConfig in emulation units); None for none
    mechanism_options: Callable[[NodeContext, Mapping[str, int], str], object] | None = None
    #: the reference of an architecture without a per-packet model (a module name)
    oracle: str = ""
    #: its decision reads what waits in the node (``optical_ram_decide``: ob, sb, wcsb):
    #: its nodes' programs load with ``tb_reads_waiting`` = 1 and scan the occupancy slots
    #: before a decision whose output is busy (the others only for a packet they buffer)
    reads_waiting: bool = False

    def __post_init__(self) -> None:
        if self.reference is None and not self.oracle:
            raise ValueError(f"architecture {self.name}: without a per-packet reference model it must name "
                             "its oracle")
        if not self.bpf.isidentifier():
            raise ValueError(f"architecture {self.name}: bpf {self.bpf!r} is not a C identifier")
        if not 0 <= self.code < 2**32:
            raise ValueError(f"architecture {self.name}: code {self.code} is not a u32")
        if unknown := set(self.roles) - set(ROLES):
            raise ValueError(f"architecture {self.name}: roles {sorted(unknown)} not in {ROLES}")
        if self.cfg_size > ARCH_CFG_BYTES:
            raise ValueError(f"architecture {self.name}: configuration of {self.cfg_size} B exceeds "
                             f"{ARCH_CFG_BYTES} B (OPTSW_ARCH_CFG_BYTES)")

    @property
    def syntax(self) -> str:
        """Its spec syntax: ``name`` or ``name:P1,P2``."""
        return self.name + (":" + ",".join(p.label for p in self.params) if self.params else "")

    @property
    def cfg_format(self) -> str:
        """struct format of ``struct optsw_<bpf>_cfg`` (C layout: natural alignment,
        trailing padding to the largest member)."""
        fmt, off, align = "<", 0, 1
        for p in self.params:
            size = struct.calcsize("<" + _CTYPES[p.ctype])
            pad = -off % size
            fmt += "x" * pad + _CTYPES[p.ctype]
            off += pad + size
            align = max(align, size)
        return fmt + "x" * (-off % align)

    @property
    def cfg_size(self) -> int:
        """Bytes of its packed configuration."""
        return struct.calcsize(self.cfg_format)

    def pack(self, values: Mapping[str, int]) -> bytes:
        """The packed configuration of ``values`` (every parameter present)."""
        return struct.pack(self.cfg_format, *(values[p.name] for p in self.params))


@dataclass(frozen=True)
class Assignment:
    """An architecture with its parameter values (``values``: (name, value) pairs in the
    architecture's parameter order); built by :class:`Registry`, which checks them."""

    arch: Architecture
    values: tuple[tuple[str, int], ...] = ()

    @property
    def name(self) -> str:
        return self.arch.name

    @property
    def params(self) -> dict[str, int]:
        return dict(self.values)

    @property
    def spec(self) -> str:
        """Its spec (``hybrid:2``), which :meth:`Registry.parse` reads back."""
        return self.arch.name + (":" + ",".join(str(v) for _, v in self.values) if self.values else "")

    @property
    def mechanism(self) -> Mechanism:
        """The kernel mechanism releasing the node's packets (DefinitionError if it does
        not exist yet)."""
        return self.arch.realisation.require(self.arch.name, "arch", self.spec)

    def options(self, context: NodeContext, *, key: str = "arch") -> object:
        """What the mechanism of this assignment's realisation needs to be installed on
        a node described by ``context`` (the architecture's ``mechanism_options``; None
        for most). Raises DefinitionError naming ``key`` when the values do not fit
        the node (e.g. a dilated Tmax out of the qdisc's range)."""
        hook = self.arch.mechanism_options
        return hook(context, self.params, key) if hook is not None else None

    def emulation_values(self, tdf: float = 1.0, *, key: str = "arch") -> dict[str, int]:
        """The parameter values on a node of time dilation ``tdf`` (D): durations
        (``ArchParam.duration``) x D in integer ns, the others as they are. Raises
        DefinitionError naming ``key.<param>``, the paper value and the emulation range
        when a dilated duration leaves it."""
        return {p.name: p.emulation(v, tdf, f"{key}.{p.name}") for p, (_, v) in zip(self.arch.params, self.values)}

    def packed(self, tdf: float = 1.0, *, key: str = "arch") -> bytes:
        """The bytes of ``cfg_node.arch_cfg`` (zero-padded by the map writer) for a node
        of time dilation ``tdf`` (D): :meth:`emulation_values` packed. Raises
        DefinitionError as :meth:`emulation_values`."""
        return self.arch.pack(self.emulation_values(tdf, key=key))

    def reference(self, ports: list[PortConfig], tdf: float = 1.0) -> model.PortModel:
        """A fresh per-packet reference model of a node with ``ports`` under this
        assignment, given the :meth:`emulation_values` at time dilation ``tdf`` (the
        values the BPF program reads: the model works in the time unit of the packets
        offered to it, emulation ns when checking the program). Raises TypeError for an
        architecture that has none (its ``oracle`` is the reference), DefinitionError as
        :meth:`emulation_values`."""
        if self.arch.reference is None:
            raise TypeError(f"architecture {self.arch.name!r} has no per-packet reference model; "
                            f"its reference is {self.arch.oracle}")
        return self.arch.reference(ports, **self.emulation_values(tdf))

    def check(self, *, ports: int | None = None, role: str | None = None, key: str = "arch") -> None:
        """Raise DefinitionError(key, spec) unless the values fit a node of ``ports``
        ports (bounds that depend on them), the architecture allows ``role`` and the
        kernel mechanism of its realisation exists."""
        if role is not None and role not in self.arch.roles:
            raise DefinitionError(key, self.spec, f"an architecture for a node of role {role!r}; "
                                  f"{self.arch.name!r} serves {', '.join(self.arch.roles)}")
        for p, (_, v) in zip(self.arch.params, self.values):
            p.check(v, key, ports, shown=self.spec)
        self.arch.realisation.require(self.arch.name, key, self.spec)


class Registry:
    """The architectures by name. Raises ValueError when two share a name, code or BPF
    identifier."""

    def __init__(self, archs: Iterable[Architecture]) -> None:
        self._archs: dict[str, Architecture] = {}
        for a in archs:
            for other in self._archs.values():
                if a.name == other.name or a.code == other.code or a.bpf == other.bpf:
                    raise ValueError(f"architectures {other.name} and {a.name} share a name, code or bpf id")
            self._archs[a.name] = a

    def __iter__(self) -> Iterator[Architecture]:
        return iter(self._archs.values())

    def names(self, role: str | None = None) -> tuple[str, ...]:
        """Names of the architectures (for ``role`` only, if given)."""
        return tuple(a.name for a in self if role is None or role in a.roles)

    def syntax(self, role: str | None = None) -> str:
        """The accepted specs, e.g. ``electronic | all-optical | hybrid:N_E``."""
        return " | ".join(a.syntax for a in self if role is None or role in a.roles)

    def get(self, name: str, *, key: str = "arch", role: str | None = None) -> Architecture:
        """The architecture ``name``; DefinitionError(key) unless it exists (for ``role``)."""
        arch = self._archs.get(name)
        if arch is None or (role is not None and role not in arch.roles):
            raise DefinitionError(key, name, self.syntax(role) + (f" (role {role})" if role else ""))
        return arch

    def assignment(self, name: str, values: Mapping[str, object] | None = None, *, ports: int | None = None,
                   role: str | None = None, key: str = "arch") -> Assignment:
        """Architecture ``name`` with parameter ``values`` (keyword form, e.g.
        ``{"n_e": 2}``), checked: every parameter given and within bounds (errors name
        ``key.<param>``), none unknown, the role allowed and the realisation available."""
        arch = self.get(name, key=key, role=role)
        given = dict(values or {})
        if unknown := sorted(set(given) - {p.name for p in arch.params}):
            raise DefinitionError(f"{key}.{unknown[0]}", given[unknown[0]],
                                  f"no such parameter of {arch.name!r}; it takes: {arch.syntax}")
        out = []
        for p in arch.params:
            if p.name not in given:
                raise DefinitionError(f"{key}.{p.name}", None, p.accepted(ports))
            out.append((p.name, p.check(given[p.name], f"{key}.{p.name}", ports)))
        a = Assignment(arch, tuple(out))
        arch.realisation.require(arch.name, key, a.spec)
        return a

    def parse(self, spec: str, ports: int | None = None, *, role: str | None = DEFAULT_SWITCH_ROLE,
              key: str = "arch") -> Assignment:
        """``"hybrid:2"`` -> Assignment(hybrid, n_e = 2) for a node of ``ports`` ports
        (bounds that depend on them are checked when given) and ``role`` (None: any).
        Raises DefinitionError(key, spec) naming the accepted syntax and range."""
        name, sep, args = str(spec).strip().partition(":")
        arch = self.get(name.strip(), key=key, role=role)
        texts = [t.strip() for t in args.split(",")] if sep else []
        if len(texts) != len(arch.params):
            need = ", ".join(p.accepted(ports) for p in arch.params) or "no parameters"
            raise DefinitionError(key, spec, f"{arch.syntax} with {need}")
        values = [(p.name, p.check(t, key, ports, shown=spec)) for p, t in zip(arch.params, texts)]
        a = Assignment(arch, tuple(values))
        arch.realisation.require(arch.name, key, spec)
        return a


# ---- the architectures (docs/optical-switch.md; Minakhmetov, Ware, Iannone, II and IV) ----

NIC = Architecture(
    "nic", 0, "nic", "host NIC: serialises the host's own packets at the link rate, FIFO",
    reference=model.NicModel, roles=("host",), realisation=Realisation(EDT, hostnic.HOSTNIC))
ELECTRONIC = Architecture(
    "electronic", 1, "electronic", "store-and-forward: received whole, FIFO per output, never drops",
    reference=model.ElectronicModel)
ALL_OPTICAL = Architecture(
    "all-optical", 2, "all_optical", "bufferless: cut-through on a free output, else dropped",
    reference=model.AllOpticalModel)
HYBRID = Architecture(
    "hybrid", 3, "hybrid", "cut-through on a free output, else buffered through one of n_e buffer "
    "input/output ports (OE, FIFO per output, EO), else dropped",
    reference=model.HybridModel,
    params=(ArchParam("n_e", "buffer input and output ports", 1, MAX_NE, at_most_ports=True),))



def hybrid_hold_options(context: NodeContext, values: Mapping[str, int], key: str) -> voq.VoqOptions:
    """hybrid-hold's voq configuration on a node described by ``context``: the hybrid
    scheduler with ``n_e`` buffer ports, the node's id, per port its emulation rate,
    propagation and host flag, the lookahead M = the switch option ``lookahead_ns``,
    else :func:`testbed.optical.voq.hybrid_lookahead_ns` (1 ms, or half the node's
    shortest propagation if that is less). Raises DefinitionError as
    :func:`testbed.optical.voq.hybrid_node_options`."""
    return voq.hybrid_node_options(context, values["n_e"], key=key)


HYBRID_HOLD = Architecture(
    "hybrid-hold", 12, "hybrid_hold", "the hybrid switch as the paper states it, realised by holding: a buffered "
    "packet leaves when it is first in its output's FIFO, the output is free and a buffer output is free, so "
    "arrivals may cut through on an output a buffered packet waits for (voq qdisc, hybrid scheduler, decided on "
    "the intended timeline a lookahead M late); hybrid must commit departures at arrival",
    reference=None, oracle="testbed.optical.eventsim",
    params=(ArchParam("n_e", "buffer input and output ports", 0, MAX_NE, at_most_ports=True),),
    realisation=voq.VOQ_HOLDING, mechanism_options=hybrid_hold_options)

# ---- E2: optical burst switching (Casoni, Raffaelli, "TCP Performance in Hybrid Multigranular OBS
# Networks", section II; docs/obs.md) ----

#: packets an obs-edge obsburst qdisc may hold at least: a 10 MB burst of 578 B frames (the
#: paper's slow class, 512 B MSS) is 17 302 packets; bursts waiting for their offset and
#: the next one assembling add a few more; the fast class's 25 kB bursts are far below
OBS_EDGE_MIN_LIMIT = 1_000_000
#: the smallest frame an Lmax can be made of (an Ethernet frame of a bare IPv4/TCP header)
_MIN_FRAME = 54


def obs_edge_options(context: NodeContext, values: Mapping[str, int], key: str) -> obsburst.ObsBurstConfig:
    """obs-edge's obsburst configuration on a node described by ``context``: one class
    (every packet is class 0: ``class_by`` priority, default class 0) with Tmax and the
    offset times D, Lmax as given (Ethernet frame bytes: the qdisc counts frames from
    the Ethernet header, the paper IP datagrams, docs/obs.md), the optical rate = the
    rate of the node's ports towards other switches (emulation bit/s), a packet limit
    of at least :data:`OBS_EDGE_MIN_LIMIT` (more when Lmax could hold more smallest
    frames) and control packets on. Raises DefinitionError(key) when the dilated
    values leave the qdisc's bounds or the node has no single optical rate."""
    try:
        rate = context.optical_rate_bps()
    except ValueError as exc:
        raise DefinitionError(key, context.rates_bps, f"an obs-edge node with ports towards other switches of "
                              f"one rate ({exc})") from None
    dilated = {"tmax_ns": round(values["tmax_ns"] * context.tdf), "lmax_bytes": values["lmax_bytes"],
               "offset_ns": round(values["offset_ns"] * context.tdf), "rate_bps": round(rate)}
    for name, v in dilated.items():
        lo, hi = obsburst.BOUNDS[name]
        if not lo <= v <= hi:
            shown = values.get(name, rate * context.tdf)
            what = "bit/s (paper) / D" if name == "rate_bps" else "x D" if name.endswith("_ns") else ""
            raise DefinitionError(f"{key}.{name}", shown, f"a value whose emulation value ({what} = {v}) is within "
                                  f"the obsburst qdisc's {lo}..{hi} at D = {context.tdf:g}")
    limit = min(obsburst.LIMIT_BOUNDS[1], max(OBS_EDGE_MIN_LIMIT, 4 * -(-values["lmax_bytes"] // _MIN_FRAME)))
    return obsburst.ObsBurstConfig((ClassParams(**dilated),), class_by="priority", default_class=0, limit=limit,
                                   control=True)


OBS_EDGE = Architecture(
    "obs-edge", 4, "obs_edge", "OBS ingress edge: packets towards the core assembled into bursts (one class, mixed "
    "flows) closed at Tmax after opening or when they reach Lmax frame bytes, released after the offset as one unit "
    "at the optical rate behind a control packet (obsburst qdisc); packets towards hosts store-and-forward FIFO",
    reference=None, oracle="testbed.optical.burst",
    params=(ArchParam("tmax_ns", "assembly time Tmax, paper ns", 1, 3_600_000_000_000, ctype="u64"),
            ArchParam("lmax_bytes", "assembly volume Lmax, Ethernet frame bytes (the paper counts IP datagram "
                      "bytes)", 1, 1_000_000_000, ctype="u64"),
            ArchParam("offset_ns", "offset time between control packet and burst, paper ns", 0,
                      3_600_000_000_000, ctype="u64")),
    roles=("edge",), realisation=obsburst.OBS_ASSEMBLY, mechanism_options=obs_edge_options)
OBS_CORE = Architecture(
    "obs-core", 5, "obs_core", "bufferless OBS core: each burst announced by a control packet is lost with "
    "probability pl_ppb / 1e9, all of its packets together (drawn from seed and the burst id); other packets pass",
    reference=None, oracle="testbed.optical.burstloss",
    params=(ArchParam("pl_ppb", "burst loss probability, parts per 1e9", 0, 1_000_000_000),
            ArchParam("seed", "seed of the burst loss draw", 0, 2**64 - 1, ctype="u64")),
    roles=("core",))

# ---- E5: very small optical RAM (Alparslan, Arakawa, Murata, "Comparison of Packet Switch
# Architectures and Pacing Algorithms for Very Small Optical RAM", II-B; docs/e5.md) ----

#: the largest optical RAM per link accepted (bytes): far above the paper's 1 MB
MAX_RAM_BYTES = 1_000_000_000


def _ram_param(doc: str) -> tuple[ArchParam, ...]:
    return (ArchParam("buffer_bytes", doc, 0, MAX_RAM_BYTES, ctype="u64"),)


OB = Architecture(
    "ob", 6, "ob", "output buffering, optical RAM: cut-through on a free output, else wait in the output's FIFO if "
    "its waiting IP bytes plus the packet fit in B, else dropped",
    reference=model.OutputRamModel, reads_waiting=True,
    params=_ram_param("B, optical RAM per output, IP datagram bytes"), roles=("core",))


def ib_options(context: NodeContext, values: Mapping[str, int], key: str) -> voq.VoqOptions:
    """ib's voq configuration on a node described by ``context``: B =
    ``buffer_bytes`` per input shared by its VOQs, round-robin scheduling (ramsim's
    defaults), the node's id, per port its emulation rate, propagation and host flag,
    the lookahead M = the switch option ``lookahead_ns`` (default
    :data:`testbed.optical.voq.DEFAULT_LOOKAHEAD_NS`). Raises DefinitionError naming
    ``key.lookahead_ns`` when M is not below every link's propagation (emulation ns),
    ``key`` when a port leaves the qdisc's range (:func:`testbed.optical.voq.node_options`)."""
    return voq.node_options(context, values["buffer_bytes"], key=key)


IB = Architecture(
    "ib", 10, "ib", "input buffering, optical RAM: per input B bytes shared by a virtual output queue per output, "
    "an N x N fabric with speedup 1 (a packet holds its output and its input's fabric port); cut-through when both "
    "are free and its VOQ is empty, else it joins the VOQ if the input's waiting IP bytes plus its own fit in B, "
    "else dropped; at every instant a port frees, round-robin matches free outputs with free inputs (voq qdisc, "
    "decided on the intended timeline a lookahead M late)",
    reference=None, oracle="testbed.optical.ramsim",
    params=_ram_param("B, optical RAM per input, IP datagram bytes"), roles=("core",),
    realisation=voq.VOQ_HOLDING, mechanism_options=ib_options)
SB = Architecture(
    "sb", 7, "sb", "shared buffering, optical RAM: as ob, the node's waiting IP bytes against one memory of "
    "ports x B",
    reference=model.SharedRamModel, reads_waiting=True,
    params=_ram_param("B, optical RAM per link (the node has ports x B), IP datagram bytes"), roles=("core",))
WCSB = Architecture(
    "wcsb", 8, "wcsb", "worst-case shared buffering, optical RAM: as sb with one memory of B for the whole node",
    reference=model.WorstCaseSharedRamModel, reads_waiting=True,
    params=_ram_param("B, optical RAM of the whole node, IP datagram bytes"), roles=("core",))

# E5's edge nodes (Alparslan, Arakawa, Murata, III-A: "0.25 s of electronic buffering"; docs/e5.md)

#: the longest wait fq holds a stamped packet as stamped (emulation ns): its ``horizon
#: 3600s horizon_cap`` (mechanisms.FQ_OPTS) releases a packet stamped further ahead at
#: the horizon instead
FQ_HORIZON_NS = 3_600_000_000_000

FIFO = Architecture(
    "fifo", 9, "fifo", "store-and-forward FIFO per output with a delay bound: received whole (a + tau), then FIFO "
    "on the output; dropped if it would wait in the buffer (from its reception to its departure) longer than "
    "max_wait",
    reference=model.FifoModel,
    params=(ArchParam("max_wait_ns", "longest wait in the buffer, paper ns; x D at most fq's 3600 s horizon", 0,
                      FQ_HORIZON_NS, ctype="u64", duration=True, emulation_hi=FQ_HORIZON_NS),))

# E5's edge nodes when XCP paces macroflows (Alparslan, Arakawa, Murata, II-A, III-A;
# docs/xcp-edge.md, "(a) The edge pacer")

#: the control interval the xcppace qdiscs count in until a point gives its own (paper s;
#: the E5 paper's d)
XCP_DEFAULT_INTERVAL_S = 0.05


def xcp_edge_options(context: NodeContext, values: Mapping[str, int], key: str) -> xcppace.XcpPaceOptions:
    """xcp-edge's xcppace configuration on a node described by ``context``, before a
    point gives it macroflows: the uplink (the one port towards a switch: its emulation
    rate and propagation), the wait bound ``max_wait_ns`` x D, the lookahead M_p =
    the switch option ``lookahead_ns`` (default :data:`voq.DEFAULT_LOOKAHEAD_NS`) below
    the uplink's propagation, one unused class (every packet is dropped as unmodelled
    until the E5 family installs the point's classes, rates and epoch:
    ``OpticalFabric.set_node_options``). Raises DefinitionError naming ``key`` when the
    node has not exactly one port towards a switch, ``key.lookahead_ns`` when M does not
    fit below the uplink's propagation, ``key.max_wait_ns`` when the dilated bound leaves
    the qdisc's range."""
    up = [i for i, host in enumerate(context.peer_host) if not host]
    if len(up) != 1 or context.prop_ns is None:
        raise DefinitionError(key, context.peer_host, "an xcp-edge node with exactly one port towards a switch "
                                                      "(its uplink) and known link propagation")
    i = up[0]
    prop = context.prop_ns[i]
    m = voq.DEFAULT_LOOKAHEAD_NS if context.lookahead_ns is None else context.lookahead_ns
    if isinstance(m, bool) or not isinstance(m, int) or not 1 <= m < prop:
        raise DefinitionError(f"{key}.lookahead_ns", m, f"a lookahead M_p in emulation ns, an integer 1..{prop - 1}, "
                              f"below the uplink's propagation ({prop} ns), so that a packet decided M_p late still "
                              "leaves at its stamp (docs/xcp-edge.md)")
    try:
        return xcppace.XcpPaceOptions(
            nclasses=1, ps_per_byte=layout.ps_per_byte(context.rates_bps[i]), prop_ns=prop,
            max_wait_ns=round(values["max_wait_ns"] * context.tdf), lookahead_ns=m, epoch_ns=0,
            interval_ns=round(XCP_DEFAULT_INTERVAL_S * 1e9 * context.tdf), rates_bps=(0,))
    except ValueError as exc:
        raise DefinitionError(f"{key}.max_wait_ns", values["max_wait_ns"],
                              f"a wait bound, link and propagation the xcppace qdisc can hold at D = "
                              f"{context.tdf:g} ({exc})") from None


XCP_EDGE = Architecture(
    "xcp-edge", 11, "xcp_edge", "XCP edge: packets towards the core held by the xcppace qdisc, which paces each "
    "macroflow class (the destination's egress edge; its pure ACKs apart when ACK macroflows are separate) with a "
    "leaky bucket at the rate XCP grants and serialises the link, dropping a packet whose wait estimated at "
    "admission exceeds max_wait; a destination without a class is dropped unmodelled; packets towards hosts as fifo",
    reference=None, oracle="testbed.xcpsim",
    params=(ArchParam("max_wait_ns", "longest wait in the buffer, paper ns; x D at most fq's 3600 s horizon", 0,
                      FQ_HORIZON_NS, ctype="u64", duration=True, emulation_hi=FQ_HORIZON_NS),),
    roles=("edge",), realisation=xcppace.XCPPACE_HOLDING, mechanism_options=xcp_edge_options)

#: every architecture; the BPF dispatch is generated from this list (archgen.py)
REGISTRY = Registry([NIC, ELECTRONIC, FIFO, XCP_EDGE, ALL_OPTICAL, HYBRID, HYBRID_HOLD, OBS_EDGE, OBS_CORE, OB, IB, SB, WCSB])


def parse(spec: str, ports: int | None = None, *, role: str | None = DEFAULT_SWITCH_ROLE,
          key: str = "arch") -> Assignment:
    """:meth:`Registry.parse` of ``REGISTRY``."""
    return REGISTRY.parse(spec, ports, role=role, key=key)


def from_model(model_name: str, n_e: int, *, key: str = "switch") -> Assignment:
    """The assignment of the older (model, n_e) pair of topology options: ``n_e`` is
    the hybrid's buffer ports and ignored (as before) by architectures without them.
    Errors name ``key.model`` / ``key.n_e``."""
    arch = REGISTRY.get(str(model_name), key=f"{key}.model")
    if any(p.name == "n_e" for p in arch.params):
        return REGISTRY.assignment(arch.name, {"n_e": n_e}, key=key)
    if isinstance(n_e, bool) or not isinstance(n_e, int) or not 0 <= n_e <= MAX_NE:
        raise DefinitionError(f"{key}.n_e", n_e, f"an integer 0..{MAX_NE}")
    return REGISTRY.assignment(arch.name, key=key)


def switch_assignment(options: Mapping[str, object], *, role: str, key: str,
                      ports: int | None = None) -> Assignment:
    """A switch's assignment from its topology options: ``arch`` (a spec, or an
    Assignment), or the older ``model`` (default hybrid) with ``n_e`` (default 1 for
    hybrid, else 0); checked against ``role`` and the switch's number of ``ports``
    (None: not known). Raises DefinitionError naming ``key``."""
    if "arch" in options:
        if "model" in options or "n_e" in options:
            raise DefinitionError(f"{key}.arch", options["arch"], "either arch or the older model/n_e, not both")
        given = options["arch"]
        a = given if isinstance(given, Assignment) else parse(str(given), role=role, key=f"{key}.arch")
    else:
        name = str(options.get("model", "hybrid"))
        n_e = options.get("n_e", 1 if name == "hybrid" else 0)
        a = from_model(name, n_e, key=key)  # type: ignore[arg-type]
    a.check(ports=ports, role=role, key=f"{key}.arch")
    return a


def check_role(role: object, *, key: str, roles: tuple[str, ...] = ROLES) -> str:
    """``role`` if it is one of ``roles``; else DefinitionError(key, role)."""
    if role not in roles:
        raise DefinitionError(key, role, " | ".join(roles))
    return str(role)
