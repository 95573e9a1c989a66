import pytest

from testbed.dilation import TimeDilation
from testbed.errors import DefinitionError
from testbed.units import Dim, Quantity


@pytest.mark.parametrize("d", [1, 2.5, 100])
def test_to_emulation_and_back(d):
    td = TimeDilation(d)
    cases = {Dim.TIME: d, Dim.RATE: 1 / d, Dim.FREQUENCY: 1 / d, Dim.SIZE: 1, Dim.LENGTH: 1, Dim.RATIO: 1}
    for dim, factor in cases.items():
        q = Quantity(3.0, dim)
        emu = td.to_emulation(q)
        assert emu.si == pytest.approx(3.0 * factor), dim
        assert td.to_paper(emu).si == pytest.approx(3.0), dim


def test_float_shortcuts_match_quantities():
    td = TimeDilation(4)
    assert td.time_to_emulation(0.001) == pytest.approx(td.to_emulation(Quantity(0.001, Dim.TIME)).si)
    assert td.rate_to_emulation(10e9) == pytest.approx(2.5e9)
    assert td.rate_to_paper(2.5e9) == pytest.approx(10e9)
    assert td.time_to_paper(0.004) == pytest.approx(0.001)


def test_dimensionless_invariants_hold():
    # bandwidth-delay product in packets and a packet's duration / RTT are D-independent
    for d in (1, 7, 50):
        td = TimeDilation(d)
        rate, rtt = td.rate_to_emulation(10e9), td.time_to_emulation(20e-6)
        assert rate * rtt == pytest.approx(10e9 * 20e-6)


@pytest.mark.parametrize("bad", [0.5, 0, -1, float("nan"), 1e7, True])
def test_rejects_bad_factor(bad):
    with pytest.raises(DefinitionError, match="tdf"):
        TimeDilation(bad)


def test_warns_below_timer_resolution():
    assert TimeDilation(1).unresolvable("initial RTO", Quantity(0.001, Dim.TIME)) is not None
    assert TimeDilation(10).unresolvable("initial RTO", Quantity(0.001, Dim.TIME)) is None
