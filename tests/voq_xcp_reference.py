"""The XCP ring of an input-buffered node derived from the paper's node alone
(testbed/optical/ramsim.py's IB outcomes), independently of the qdisc's algorithm
(kernel/sch_voq.c, its mirror testbed/optical/ibsched.py): for each arrival, the backlog
of its output it found, and per (output, interval) the slot the ring must hold.
Imported as ``voq_xcp_reference`` by tests/unit/test_ibsched.py and
tests/unit/test_voq_kernel.py (pytest's pythonpath is tests/).

The backlog an arrival p (output o, instant a) finds (docs/xcp-edge.md, "IB nodes";
kernel/voq.h, ``struct tc_voq_xcp_slot``) is what o still has to send, in ns of its link:
the rest of the packet o is sending, (out_free - a)^+, plus the durations of the packets
waiting for o in the VOQs of every input. From ramsim's outcomes, with the node's order
of one instant (releases and the scheduler first, then the arrivals in ramsim's order:
by instant, ties in packet order):

* waiting for o: q buffered for o, processed before p, leaving after a (a buffered
  packet leaving at a was served by the scheduler of a, before p);
* out_free: the latest dep(q) + tau(q) over the packets forwarded on o that left before
  p was decided: dep(q) < a, or dep(q) = a and q buffered (served before the arrivals
  of a) or cut through before p.
"""

from __future__ import annotations

from collections.abc import Sequence

from testbed.optical import ramsim
from testbed.optical.ibsched import XcpSlot

XCP_NONE = 2**64 - 1


def backlogs(packets: Sequence[ramsim.Packet], outcomes: Sequence[ramsim.Outcome], ps_per_byte: int) -> list[int]:
    """Per packet (same order), the backlog of its output it found at its arrival (ns),
    from ramsim's ``outcomes`` of ``packets`` (IB) on links of ``ps_per_byte``."""
    pos = {k: r for r, k in enumerate(sorted(range(len(packets)), key=lambda k: packets[k].arrival_ns))}
    by_out: dict[int, list[int]] = {}
    for k, p in enumerate(packets):
        if outcomes[k].kind != "dropped":
            by_out.setdefault(p.out_port, []).append(k)
    out = []
    for k, p in enumerate(packets):
        a, waiting, free = p.arrival_ns, 0, 0
        for q in by_out.get(p.out_port, ()):
            dep, kind = outcomes[q].departure_ns, outcomes[q].kind
            tau = packets[q].duration_ns(ps_per_byte)
            if kind == "buffered" and pos[q] < pos[k] and dep > a:
                waiting += tau
            elif dep < a or (dep == a and (kind == "buffered" or pos[q] < pos[k])):
                free = max(free, dep + tau)
        out.append(waiting + max(0, free - a))
    return out


def ring_slots(packets: Sequence[ramsim.Packet], outcomes: Sequence[ramsim.Outcome], found: Sequence[int],
               epoch_ns: int, interval_ns: int) -> dict[tuple[int, int], XcpSlot]:
    """{(output, interval k): the slot} of every interval with an arrival at or after
    ``epoch_ns`` E (k = (a - E) // ``interval_ns``): frame bytes (``wire_bytes``, else
    ``length``), packets, drops and the smallest backlog ``found`` (:func:`backlogs`,
    same order) by its arrivals (the qdisc counts by decided instant, which is the
    arrival when no packet is late)."""
    slots: dict[tuple[int, int], XcpSlot] = {}
    for p, o, b in zip(packets, outcomes, found):
        if p.arrival_ns < epoch_ns:
            continue
        key = (p.out_port, (p.arrival_ns - epoch_ns) // interval_ns)
        s = slots.get(key, XcpSlot())
        frame = p.length if p.wire_bytes is None else p.wire_bytes
        slots[key] = XcpSlot(key[1], s.bytes + frame, min(s.qmin_ns, b), s.packets + 1,
                             s.drops + (o.kind == "dropped"))
    return slots
