"""A point's run timeline: what happens while its traffic runs.

Two sorts of entries, both called with the point's ``TrafficRun``:

- actions at paper times after t0 (``timeline.at(2.0, "move flow 1", move)``: E4 moves
  a flow at t, E3's schedulers could reserve at t); each runs once, as soon as the
  traffic loop sees it due, and is recorded with the time it ran;
- hooks polled while the traffic runs (``timeline.poll(hook)``: E3's on-demand broker
  releases a reservation when an elephant ended).

The flow families' traffic loop (testbed.flow_family) executes it; a point whose
timeline is empty just waits for its traffic to end.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from testbed.dilation import TimeDilation

#: a timeline entry's body; gets the point's TrafficRun
Step = Callable[[Any], None]


class Timeline:
    """Actions at paper times and polled hooks of one point (see the module docstring)."""

    def __init__(self, tdf: TimeDilation) -> None:
        self.tdf = tdf
        self._actions: list[tuple[float, int, str, Step]] = []
        self._hooks: list[Step] = []
        #: actions that ran: label, planned_s and ran_s (paper seconds after t0)
        self.done: list[dict[str, Any]] = []

    def at(self, t_s: float, label: str, action: Step) -> None:
        """Run ``action`` once ``t_s`` paper seconds after t0 (>= 0) have passed."""
        if not t_s >= 0:
            raise ValueError(f"timeline action {label!r}: time {t_s!r} s; accepted: a time >= 0 s after t0")
        heapq.heappush(self._actions, (t_s, len(self.done) + len(self._actions), label, action))

    def poll(self, hook: Step) -> None:
        """Call ``hook`` at every turn of the traffic loop."""
        self._hooks.append(hook)

    @property
    def empty(self) -> bool:
        return not self._actions and not self._hooks

    def wait_s(self, elapsed_s: float, longest_s: float) -> float:
        """Emulation seconds the loop may wait at ``elapsed_s`` emulation seconds after
        t0 before the next action is due (at most ``longest_s``)."""
        if not self._actions:
            return longest_s
        due = self.tdf.time_to_emulation(self._actions[0][0]) - elapsed_s
        return max(0.0, min(longest_s, due))

    def step(self, run: Any, elapsed_s: float) -> None:
        """Run the actions due at ``elapsed_s`` emulation seconds after t0, in time order,
        then every polled hook."""
        ran = self.tdf.time_to_paper(elapsed_s)
        while self._actions and self._actions[0][0] <= ran:
            t_s, _, label, action = heapq.heappop(self._actions)
            action(run)
            self.done.append({"label": label, "planned_s": t_s, "ran_s": ran})
        for hook in self._hooks:
            hook(run)
