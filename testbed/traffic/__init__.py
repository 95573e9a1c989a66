"""Traffic generation and per-flow measurement (see docs/traffic.md).

- :mod:`testbed.traffic.schedule`: size distributions and schedules (paper units);
- :mod:`testbed.traffic.agent`: the agent process serving all hosts (sinks + sources,
  one epoll loop, sockets in each host's namespace);
- :mod:`testbed.traffic.control`: the controller's side of it (pipes, ledger entry);
- :mod:`testbed.traffic.run`: ``TrafficRun`` context manager and ``TrafficResult``;
- :mod:`testbed.traffic.records`: raw records -> ``FlowRecord`` in paper units.

Names are re-exported lazily so that the agent process imports only what it needs.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "BimodalLognormal": "schedule", "EmpiricalCDF": "schedule", "Fixed": "schedule", "FlowSpec": "schedule",
    "Schedule": "schedule", "SizeDistribution": "schedule", "batch": "schedule", "long_lived": "schedule",
    "migration_batch": "schedule", "nested_subset": "schedule", "poisson_long_lived": "schedule",
    "poisson_schedule": "schedule",
    "TrafficRun": "run", "TrafficResult": "run", "TrafficError": "run", "Window": "run",
    "FlowRecord": "records", "LoopbackHost": "local", "LoopbackNet": "local",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"testbed.traffic.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'testbed.traffic' has no attribute {name!r}")
