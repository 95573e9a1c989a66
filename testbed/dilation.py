"""Time dilation (principle 3): paper units <-> emulation units.

With factor D >= 1 the emulation runs D times slower than the paper's hardware:
rates and event frequencies are divided by D, times multiplied by D, sizes, lengths and
ratios unchanged. Measured results come back the other way. Because every link rate and
every time shrink together, the dimensionless behaviour (utilisation, loss, cwnd in
packets) is the same at any D; changing D and getting the same paper-unit results is
the testbed's fidelity check.
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.errors import DefinitionError
from testbed.units import Dim, Quantity

# Linux timers below this are rounded (jiffies at HZ=250); dilated times shorter than
# this are flagged by warn_unresolvable().
KERNEL_TIMER_RESOLUTION_S = 0.004

_TO_EMULATION_EXPONENT = {Dim.TIME: 1, Dim.RATE: -1, Dim.FREQUENCY: -1,
                          Dim.SIZE: 0, Dim.LENGTH: 0, Dim.RATIO: 0}


@dataclass(frozen=True)
class TimeDilation:
    """A time dilation factor D (>= 1) and the conversions it implies."""

    factor: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.factor, (int, float)) or isinstance(self.factor, bool) \
                or not self.factor >= 1.0 or self.factor > 1e6:
            raise DefinitionError("tdf", self.factor, "a number D with 1 <= D <= 1e6")

    def to_emulation(self, q: Quantity) -> Quantity:
        """Paper-unit quantity -> the value the emulation must use."""
        return Quantity(q.si * self.factor ** _TO_EMULATION_EXPONENT[q.dim], q.dim)

    def to_paper(self, q: Quantity) -> Quantity:
        """Quantity measured in the emulation -> paper units."""
        return Quantity(q.si * self.factor ** -_TO_EMULATION_EXPONENT[q.dim], q.dim)

    # Shortcuts on plain SI floats, for measurement code.
    def time_to_emulation(self, seconds: float) -> float:
        return seconds * self.factor

    def time_to_paper(self, seconds: float) -> float:
        return seconds / self.factor

    def rate_to_emulation(self, bps: float) -> float:
        return bps / self.factor

    def rate_to_paper(self, bps: float) -> float:
        return bps * self.factor

    def unresolvable(self, label: str, paper_time: Quantity) -> str | None:
        """A warning text when ``paper_time`` x D is below the kernel timer resolution."""
        emu = self.to_emulation(paper_time).si
        if 0 < emu < KERNEL_TIMER_RESOLUTION_S:
            return (f"{label} = {paper_time} becomes {emu * 1e3:.3g} ms at D = {self.factor:g}, "
                    f"below the kernel timer resolution ({KERNEL_TIMER_RESOLUTION_S * 1e3:g} ms); "
                    f"raise --tdf")
        return None
