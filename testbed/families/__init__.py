"""Experiment kinds: the code that runs one point of an experiment definition.

A kind declares its parameters (paper units, with bounds), the kernel features a point
needs (so the runner can choose native or guest), and ``run_point``. ``KINDS`` maps the
``experiment.kind`` names used in definitions to classes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from testbed.definition import Definition, Param

if TYPE_CHECKING:
    from testbed.runner import PointContext


class ExperimentKind:
    """Base class; subclasses set ``name``, ``params``, ``analysis`` and implement run_point."""

    name: ClassVar[str]
    params: ClassVar[tuple[Param, ...]]
    analysis: ClassVar[str]  # module in the ``analysis`` package that draws the report
    doc: ClassVar[str] = ""

    @classmethod
    def features(cls, values: dict[str, Any]) -> set[str]:
        """Kernel features (names from testbed.features) one point with ``values`` needs."""
        raise NotImplementedError

    @classmethod
    def check(cls, defn: Definition) -> None:
        """Cross-parameter validation; raise DefinitionError. Default: nothing."""

    @classmethod
    def run_point(cls, ctx: "PointContext") -> dict[str, Any]:
        """Run one point; write raw data via ``ctx``; return the summary record."""
        raise NotImplementedError


def _registry() -> dict[str, type[ExperimentKind]]:
    from testbed.kinds.e1_fattree import E1FatTree
    from testbed.kinds.e3_leafspine import E3LeafSpine
    from testbed.kinds.netem_path import NetemPath

    return {k.name: k for k in (NetemPath, E1FatTree, E3LeafSpine)}


KINDS: dict[str, type[ExperimentKind]] = _registry()
