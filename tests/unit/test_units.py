import pytest

from testbed.units import Dim, Quantity, UnitError, packet_duration_s, propagation_delay_s


@pytest.mark.parametrize("text,dim,si", [
    ("10 ms", Dim.TIME, 0.01), ("10ms", Dim.TIME, 0.01), ("1.5 us", Dim.TIME, 1.5e-6),
    ("50 Mbit/s", Dim.RATE, 50e6), ("10 Gbps", Dim.RATE, 10e9), ("9064 B", Dim.SIZE, 9064),
    ("1 GiB", Dim.SIZE, 2**30), ("100 m", Dim.LENGTH, 100), ("200 req/s", Dim.FREQUENCY, 200),
    ("1 %", Dim.RATIO, 0.01), ("-3 ms", Dim.TIME, -0.003), ("1e3 B", Dim.SIZE, 1000),
])
def test_parse(text, dim, si):
    assert Quantity.parse(text, dim).si == pytest.approx(si)


@pytest.mark.parametrize("value,dim,needle", [
    ("10", Dim.TIME, "missing unit"), (10, Dim.TIME, "needs a unit"), ("10 Mbit/s", Dim.TIME, "not a time unit"),
    ("fast", Dim.RATE, "not a number"), (True, Dim.SIZE, "needs a unit"), ("inf s", Dim.TIME, "not a number"),
])
def test_parse_rejects(value, dim, needle):
    with pytest.raises(UnitError, match=needle):
        Quantity.parse(value, dim)


def test_format_round_trip():
    for text, dim in [("10 ms", Dim.TIME), ("50 Mbit/s", Dim.RATE), ("9.064 kB", Dim.SIZE)]:
        q = Quantity.parse(text, dim)
        assert Quantity.parse(str(q), dim) == q


def test_packet_duration_and_propagation():
    # a 9064 B jumbo frame at 10 Gb/s lasts 7.2512 us; light needs ~4.83 ns per metre of fibre
    assert packet_duration_s(9064, 10e9) == pytest.approx(7.2512e-6)
    assert propagation_delay_s(100) == pytest.approx(483.6e-9, rel=1e-3)
