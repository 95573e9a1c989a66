"""The family contract: what every experiment family declares and implements.

A family (``testbed/families/<name>.py``, e.g. ``e1_fattree.py`` for ``e1-fattree``)
is a :class:`Family` subclass declaring

- ``params``: its parameters (:class:`~testbed.experiment.Param`, paper units, bounds);
- ``metrics``: its summary columns (:class:`~testbed.metrics.Metric`, with units),
  checked when a point's summary is written and when the report reads summary.csv;
- :meth:`Family.topology`: what it builds for a point (a Mininet ``Topo``), from which
  its kernel features (:meth:`Family.features`) and the links ``--pcap`` may name are
  derived before anything is created;
- :meth:`Family.analysis`: its analysis module (imported there, so a run never
  imports pandas or matplotlib), which implements :class:`Analysis`;
- :meth:`Family.check` for cross-parameter rules and :meth:`Family.run_point`.

Flow experiments (hosts exchanging TCP transfers over a fabric) derive from
:class:`testbed.flow_family.FlowFamily`, which owns their shared steps. The registry
is :mod:`testbed.families`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from testbed.dilation import TimeDilation
from testbed.errors import DefinitionError
from testbed.experiment import Definition, Param
from testbed.features import Feature
from testbed.metrics import Metric

if TYPE_CHECKING:
    import pandas as pd
    from mininet.topo import Topo

    from testbed.context import PointContext


class Analysis(Protocol):
    """What a family's analysis module (``analysis/<module>.py``) provides."""

    def analyse(self, summary: "pd.DataFrame", config: dict[str, Any],
                out: Path) -> tuple[list[Path], list[tuple[str, "pd.DataFrame"]]]:
        """Figures written into ``out`` (the report folder) and titled tables, from
        ``summary`` (summary.csv, its declared metrics checked) and ``config``
        (config.json)."""
        ...


class Family:
    """Base class of every family; see the module docstring."""

    name: ClassVar[str]
    doc: ClassVar[str] = ""
    params: ClassVar[tuple[Param, ...]]
    metrics: ClassVar[tuple[Metric, ...]]
    #: the instruments count packets and bytes on every host port (ports.csv), which
    #: needs clsact + BPF
    count_ports: ClassVar[bool] = True

    @classmethod
    def analysis(cls) -> Analysis:
        """The analysis module; its import lives here so that runs do not import it."""
        raise NotImplementedError

    @classmethod
    def topology(cls, values: dict[str, Any], tdf: TimeDilation) -> "Topo | None":
        """What one point with ``values`` builds, not built yet (None: nothing)."""
        return None

    @classmethod
    def point_tdf(cls, values: dict[str, Any], tdf: TimeDilation) -> TimeDilation:
        """The time dilation a point with ``values`` runs at, given the definition's
        ``tdf``. Default: the definition's. A family whose points differ by orders of
        magnitude in packet rate sets it per point (E4: 100 Mbit/s .. 10 Gbit/s flows),
        so that none runs needlessly slowly; every point records its D (status.json,
        the manifest's ``point_tdf``) and results stay in paper units. Raises
        DefinitionError for values it cannot dilate."""
        return tdf

    @classmethod
    def infeasible(cls, values: dict[str, Any], tdf: TimeDilation) -> str | None:
        """Why a point with ``values`` cannot run on this testbed at all, or None. For a
        fact, not a bad input (that is :meth:`check`'s): E4's 10 Gbit/s x 1000 ms needs a
        window above TCP's largest, as the paper's own omission of the case says. The
        runner records such a point as skipped with the reason (status.json, the run's
        progress, the report's list of points) and runs the others."""
        return None

    @classmethod
    def features(cls, values: dict[str, Any], tdf: TimeDilation) -> set[Feature]:
        """Kernel features one point with ``values`` needs: by default those of its
        topology's nodes and links, and clsact + BPF when the instruments count ports."""
        topo = cls.topology(values, tdf)
        need = topology_features(topo) if topo is not None else set()
        if cls.count_ports:
            need.add(Feature.CLSACT_BPF)
        return need

    @classmethod
    def check(cls, defn: Definition) -> None:
        """Cross-parameter validation; raise DefinitionError. Default: nothing."""

    @classmethod
    def check_links(cls, defn: Definition, links: Iterable[str], key: str = "--pcap") -> None:
        """Raise DefinitionError (``key``) for a link name that some point's topology
        lacks, listing that topology's links."""
        wanted = list(links)
        if not wanted:
            return
        for topo in cls.topologies(defn):
            names = link_names(topo) if topo is not None else []
            for link in wanted:
                if link not in names:
                    shown = ", ".join(names[:40]) + (f", ... ({len(names)} links)" if len(names) > 40 else "")
                    raise DefinitionError(key, link, f"a link of this topology: {shown or 'none'}", defn.source)

    @classmethod
    def topologies(cls, defn: Definition) -> Iterator["Topo | None"]:
        """The topology of each point of ``defn``, one per distinct set of values that
        shapes it (repetitions share theirs)."""
        seen: set[str] = set()
        for p in defn.points():
            key = repr(sorted((k, str(v)) for k, v in p.values.items()))
            if key not in seen:
                seen.add(key)
                yield cls.topology(p.values, cls.point_tdf(p.values, defn.tdf))

    @classmethod
    def run_point(cls, ctx: "PointContext") -> dict[str, Any]:
        """Run one point; write raw data via ``ctx``; return the summary row (exactly the
        declared metrics)."""
        raise NotImplementedError


def link_names(topo: "Topo") -> list[str]:
    """The names ``testbed.net.Emulation`` gives the links of ``topo`` ("a-b", in its
    build order), e.g. for ``--pcap``."""
    return [f"{a}-{b}" for a, b in topo.links(sort=True, withKeys=False)]


def topology_features(topo: "Topo") -> set[Feature]:
    """Kernel features the nodes and links of ``topo`` need: network namespaces for
    its nodes, what each switch class declares (``testbed.net.Switch.features``), HTB
    for a link shape with a rate and netem for one with delay or loss. Raises
    DefinitionError for a switch or host class the testbed does not have, or a router
    port without an address (testbed.net.check_router_ports)."""
    from testbed.net import SWITCH_CLASSES, check_router_ports  # Mininet: runs only, never the report

    check_router_ports(topo)  # also: every host's node class exists
    need = {Feature.NETNS}
    for name in topo.switches():
        info = dict(topo.nodeInfo(name))
        cls_name = str(info.get("cls", "bridge"))
        if cls_name not in SWITCH_CLASSES:
            raise DefinitionError(f"switch {name}", cls_name, "a switch class of testbed.net.SWITCH_CLASSES: "
                                  + ", ".join(sorted(SWITCH_CLASSES)))
        need |= SWITCH_CLASSES[cls_name].features(info)
    for _, _, info in topo.links(sort=True, withKeys=False, withInfo=True):
        for key in ("shape", "shape1", "shape2"):
            shape = info.get(key)
            if shape is None:
                continue
            if shape.rate_bps:
                need.add(Feature.HTB)
            if shape.needs_netem:
                need.add(Feature.NETEM)
    return need
