"""Configure and read the optswitch BPF maps of one run (through ``testbed.bpf``).

Used by the optical switch node class (testbed/net.py), by the BPF tests (single
switch, injected time) and by the runner (counters and fidelity monitor at the end of
a point).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from testbed import bpf
from testbed.optical import layout
from testbed.optical.architectures import Assignment
from testbed.optical.layout import PortConfig


@dataclass
class NodeConfig:
    """One node's configuration: its port architecture with its parameters
    (``assignment``), its ports, the ifindex of each port number (optional) and its
    time dilation ``tdf`` (D: the architecture's durations are configured x D)."""

    node_id: int
    assignment: Assignment
    ports: list[PortConfig]
    ifindex_of_port: dict[int, int] | None = None
    tdf: float = 1.0


def configure_nodes(pin_dir: Path, nodes: list[NodeConfig]) -> None:
    """Write every node's configuration and (ifindex -> port) entries and reset its
    state (all ports free, counters zero, and the OBS state inside it: announced bursts,
    core counters, holding-delay histogram): one loader call for all of it.
    Raises DefinitionError (key ``node<id>.arch.<param>``) when a duration dilated by
    the node's D leaves its range; nothing is written then."""
    cfgs = [(layout.u32_key(n.node_id),
             layout.node_cfg(n.assignment.arch.code, n.assignment.packed(n.tdf, key=f"node{n.node_id}.arch"), n.ports))
            for n in nodes]
    bpf.map_updates(pin_dir, {
        "optsw_cfg": cfgs,
        "optsw_state": [(layout.u32_key(n.node_id), bytes(layout.STATE_SIZE)) for n in nodes],
        "optsw_ifport": [(layout.ifport_key(n.node_id, ifx), layout.u32_key(port))
                         for n in nodes for port, ifx in sorted((n.ifindex_of_port or {}).items())]})


def configure_node(pin_dir: Path, node_id: int, assignment: Assignment, ports: list[PortConfig],
                   *, ifindex_of_port: dict[int, int] | None = None, tdf: float = 1.0) -> None:
    """:func:`configure_nodes` for one node."""
    configure_nodes(pin_dir, [NodeConfig(node_id, assignment, ports, ifindex_of_port, tdf)])



def set_routes(pin_dir: Path, routes: dict[tuple[int, str], list[int]], *, flow_hash: bool = False) -> None:
    """Write routes {(node id, destination IPv4): [equal-cost output ports]}."""
    bpf.map_update(pin_dir, "optsw_routes",
                   [(layout.route_key(n, dst), layout.route_value(ports, flow_hash))
                    for (n, dst), ports in sorted(routes.items())])


def read_raw_states(pin_dir: Path, nodes: list[int] | set[int] | dict[int, int]) -> dict[int, bytes]:
    """The optsw_state value (struct optsw_node_state, bytes) of each node of ``nodes``
    (one lookup per node, not a dump of all 512); nodes whose row is absent are left out."""
    wanted = set(nodes)
    out = {}
    for k, v in bpf.map_dump(pin_dir, "optsw_state", [layout.u32_key(n) for n in sorted(wanted)]):
        node = int.from_bytes(k, "little")
        if node in wanted:
            out[node] = v
    return out


def read_states(pin_dir: Path, n_ports: dict[int, int]) -> dict[int, dict]:
    """Counters of the nodes in ``n_ports`` ({node id: ports in use}): per node
    ``max_occ_bytes``, ``occ_overflow``, ``bout_overflow`` and ``ports`` (a dict per port)."""
    return {node: layout.parse_node_state(v, n_ports[node]) for node, v in read_raw_states(pin_dir, n_ports).items()}


def configure_xcp(pin_dir: Path, configs: Mapping[int, layout.XcpConfig]) -> None:
    """Write each node's XCP configuration ({node id: XcpConfig}; ``XcpConfig()``
    disables) and reset its accumulator (every slot never used), one loader call per
    map. Nodes not given keep theirs. Call it before the epoch of a point: a slot left
    from an earlier point would otherwise be counted into an interval of the same number."""
    if not configs:
        return
    empty = layout.pack_xcp_node()
    bpf.map_update(pin_dir, "optsw_xcp_acc", [(layout.u32_key(n), empty) for n in sorted(configs)])
    bpf.map_update(pin_dir, "optsw_xcp_cfg", [(layout.u32_key(n), c.pack()) for n, c in sorted(configs.items())])


def set_xcp_classes(pin_dir: Path, classes: Mapping[tuple[int, str], int]) -> None:
    """Write the class map of the xcp-edge nodes: {(edge node id, destination IPv4):
    data class id} (``XcpPlan.class_map``). Raises ValueError for a class that is not an
    id, OSError for a bad address."""
    bpf.map_update(pin_dir, "optsw_xcp_class",
                   [(layout.xcp_class_key(n, dst), layout.xcp_class_value(c)) for (n, dst), c in sorted(classes.items())])


def read_xcp_acc(pin_dir: Path, n_ports: Mapping[int, int]) -> dict[int, dict[int, list[layout.AccSlot]]]:
    """The XCP accumulators of the nodes in ``n_ports`` ({node id: ports in use}): per
    node {port: its XCP_SLOTS slots} (:func:`testbed.optical.layout.parse_xcp_node`),
    one lookup per node through the loader (a process: the agent reads with bpf(2)
    itself). Nodes whose row is absent are left out."""
    wanted = sorted(n_ports)
    return {int.from_bytes(k, "little"): layout.parse_xcp_node(v, n_ports[int.from_bytes(k, "little")])
            for k, v in bpf.map_dump(pin_dir, "optsw_xcp_acc", [layout.u32_key(n) for n in wanted])}


def reset_monitor(pin_dir: Path) -> None:
    """Zero the fidelity monitor (count, maxima, histogram)."""
    bpf.map_update(pin_dir, "optsw_monitor", [(layout.u32_key(0), bytes(layout.MONITOR_SIZE))])


def read_monitor(pin_dir: Path) -> dict:
    """The fidelity monitor's summary (packets, early, p50_ns, p99_ns, max_ns, mean_ns)."""
    rows = bpf.map_dump(pin_dir, "optsw_monitor")
    if not rows:
        return layout.lateness_summary({"count": 0, "early": 0, "max_ns": 0, "sum_ns": 0, "buckets": []})
    return layout.lateness_summary(layout.parse_monitor(rows[0][1]))
