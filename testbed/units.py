"""Physical quantities with units, parsed from strings such as ``"10 ms"``.

Every quantity in an experiment definition carries a unit; a bare number where a
quantity is expected is an error. Values are stored in SI base units: seconds, bit/s,
bytes, metres, events/s, and plain ratios.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import Enum


class Dim(Enum):
    """A physical dimension and how it behaves under time dilation."""

    TIME = "time"            # seconds; x D in the emulation
    RATE = "rate"            # bit/s; / D in the emulation
    SIZE = "size"            # bytes; unchanged
    LENGTH = "length"        # metres; unchanged (its propagation delay is a TIME)
    FREQUENCY = "frequency"  # events/s (e.g. requests/s); / D in the emulation
    RATIO = "ratio"          # dimensionless fraction (e.g. loss); unchanged


_UNITS: dict[Dim, dict[str, float]] = {
    Dim.TIME: {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0},
    Dim.RATE: {
        "bit/s": 1.0, "bps": 1.0,
        "kbit/s": 1e3, "kbps": 1e3, "Kbit/s": 1e3,
        "Mbit/s": 1e6, "Mbps": 1e6,
        "Gbit/s": 1e9, "Gbps": 1e9,
        "Tbit/s": 1e12,
    },
    Dim.SIZE: {
        "B": 1.0, "kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9,
        "KiB": 1024.0, "MiB": 1024.0**2, "GiB": 1024.0**3,
    },
    Dim.LENGTH: {"mm": 1e-3, "cm": 1e-2, "m": 1.0, "km": 1e3},
    Dim.FREQUENCY: {"/s": 1.0, "1/s": 1.0, "req/s": 1.0, "Hz": 1.0, "kHz": 1e3, "/ms": 1e3},
    Dim.RATIO: {"%": 1e-2, "ppm": 1e-6},
}

# The unit used when formatting a value back to text, per dimension, by magnitude.
_FORMAT_UNITS: dict[Dim, list[tuple[str, float]]] = {
    Dim.TIME: [("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)],
    Dim.RATE: [("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3), ("bit/s", 1.0)],
    Dim.SIZE: [("GB", 1e9), ("MB", 1e6), ("kB", 1e3), ("B", 1.0)],
    Dim.LENGTH: [("km", 1e3), ("m", 1.0), ("mm", 1e-3)],
    Dim.FREQUENCY: [("/s", 1.0)],
    Dim.RATIO: [("%", 1e-2)],
}

_QUANTITY_RE = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([^\s\d].*?)?\s*$")


def accepted_units(dim: Dim) -> str:
    """Human-readable list of the units accepted for ``dim``."""
    return ", ".join(_UNITS[dim])


class UnitError(ValueError):
    """A text could not be read as a quantity of the wanted dimension."""


@dataclass(frozen=True, order=True)
class Quantity:
    """A value in SI base units of one dimension (see :class:`Dim`)."""

    si: float
    dim: Dim

    @classmethod
    def parse(cls, text: object, dim: Dim) -> "Quantity":
        """Parse ``"<number> <unit>"``; raises UnitError (no unit, wrong unit, not a number)."""
        if isinstance(text, bool) or not isinstance(text, str):
            raise UnitError(f"needs a unit: write it as text such as {example(dim)!r}")
        m = _QUANTITY_RE.match(text)
        if not m:
            raise UnitError(f"not a number with a unit, e.g. {example(dim)!r}")
        number, unit = m.group(1), m.group(2)
        if not unit:
            raise UnitError(f"missing unit; write e.g. {example(dim)!r} (units: {accepted_units(dim)})")
        factor = _UNITS[dim].get(unit)
        if factor is None:
            raise UnitError(f"unit {unit!r} is not a {dim.value} unit (units: {accepted_units(dim)})")
        value = float(number) * factor
        if not math.isfinite(value):
            raise UnitError("not a finite number")
        return cls(value, dim)

    def __str__(self) -> str:
        return format_si(self.si, self.dim)

    def __mul__(self, k: float) -> "Quantity":
        return Quantity(self.si * k, self.dim)

    __rmul__ = __mul__

    def __truediv__(self, k: float) -> "Quantity":
        return Quantity(self.si / k, self.dim)


def example(dim: Dim) -> str:
    """An example of a valid quantity text of ``dim``."""
    return {Dim.TIME: "10 ms", Dim.RATE: "50 Mbit/s", Dim.SIZE: "9064 B", Dim.LENGTH: "100 m",
            Dim.FREQUENCY: "200 req/s", Dim.RATIO: "1 %"}[dim]


def format_si(si: float, dim: Dim) -> str:
    """Format an SI value with the largest unit that keeps the number >= 1."""
    if si == 0:
        return "0 " + next((u for u, f in _FORMAT_UNITS[dim] if f == 1.0), _FORMAT_UNITS[dim][0][0])
    for unit, factor in _FORMAT_UNITS[dim]:
        if abs(si) >= factor or factor == _FORMAT_UNITS[dim][-1][1]:
            return f"{si / factor:.6g} {unit}"
    raise AssertionError("unreachable")


def packet_duration_s(size_bytes: float, rate_bps: float) -> float:
    """tau: seconds to serialise ``size_bytes`` at ``rate_bps``."""
    return size_bytes * 8.0 / rate_bps


# Light in fibre with group index n = 1.45 (the papers' value): ~4.83 ns per metre.
FIBRE_GROUP_INDEX = 1.45
SPEED_OF_LIGHT_M_PER_S = 299_792_458.0


def propagation_delay_s(length_m: float, group_index: float = FIBRE_GROUP_INDEX) -> float:
    """One-way propagation delay in seconds over ``length_m`` metres of fibre."""
    return length_m * group_index / SPEED_OF_LIGHT_M_PER_S
