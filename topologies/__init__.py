"""Topology builders: Mininet ``Topo`` subclasses, realised by ``testbed.net.Emulation``.

``TOPOLOGIES`` maps the names used in experiment definitions to classes.
"""

from topologies.path import TwoHostPath

TOPOLOGIES = {"path": TwoHostPath}
