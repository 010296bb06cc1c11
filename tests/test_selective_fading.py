"""Frequency-selective fading per subband (``fedsim.sim.selective``): the TR 38.901 TDL profiles,
the RBG grid, and Monte Carlo over links against the closed forms in frequency and time."""

import math

import numpy as np
import pytest
from scipy.special import j0

from fedsim.sim import selective
from fedsim.sim.selective import (
    SelectiveFading,
    SubbandGrid,
    _profile_file,
    _steering,
    _tap_sinusoids,
    rbg_prbs,
    tdl_profile,
)

LINKS = 4000  # Monte Carlo over links: a correlation's standard error about 1/√LINKS
KEY = 11
GRID = SubbandGrid.of(51, 360e3)  # 20 MHz at 30 kHz: 13 RBGs of 4 PRBs, 1.44 MHz each
PROFILE = tdl_profile("TDL-C", 100e-9)


def link_gains(fading: SelectiveFading, block: int, key: int = KEY) -> np.ndarray:
    """(links × subbands) gains of LINKS links at one block."""
    return np.array([fading.gains(key, GRID, 2, link, block) for link in range(LINKS)])


@pytest.mark.parametrize("name, taps", [("TDL-A", 23), ("TDL-B", 23), ("TDL-C", 24)])
def test_profiles_are_normalized_to_unit_power_and_delay_spread(name, taps):
    profile = tdl_profile(name, 100e-9)
    assert len(profile.powers) == len(profile.delays_s) == taps
    assert sum(profile.powers) == pytest.approx(1.0, rel=1e-12)
    powers, delays = np.asarray(profile.powers), np.asarray(profile.delays_s)
    mean_s = powers @ delays
    rms_s = math.sqrt(powers @ delays**2 - mean_s**2)
    assert rms_s == pytest.approx(100e-9, rel=0.02)  # TR 38.901 normalizes the tables to 1
    double = tdl_profile(name, 200e-9)
    assert np.allclose(double.delays_s, 2 * delays, rtol=1e-12, atol=0)
    assert double.powers == profile.powers


def test_frequency_correlation_is_one_at_zero_and_vectorized():
    assert PROFILE.frequency_correlation(0.0) == pytest.approx(1.0)
    assert isinstance(PROFILE.frequency_correlation(1e6), complex)
    spacings = np.array([0.0, 1e6, 3e6])
    values = PROFILE.frequency_correlation(spacings)
    assert values.shape == (3,)
    assert values[2] == pytest.approx(PROFILE.frequency_correlation(3e6))
    assert abs(values[1]) < 1.0


def test_unknown_profiles_and_delay_spreads_are_refused():
    with pytest.raises(ValueError, match="TDL-A, TDL-B, TDL-C"):
        tdl_profile("TDL-Z", 100e-9)
    with pytest.raises(ValueError, match="delay_spread_s"):
        tdl_profile("TDL-A", -1e-9)


def test_without_sionna_the_error_names_the_profile_and_the_package(monkeypatch):
    monkeypatch.setattr(selective.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ValueError, match=r"TDL-B.*sionna-no-rt"):
        _profile_file("TDL-B")


@pytest.mark.parametrize(
    "num_prbs, size",
    [(1, 2), (36, 2), (37, 4), (72, 4), (73, 8), (144, 8), (145, 16), (275, 16)],
)
def test_rbg_size_follows_ts_38_214_table(num_prbs, size):
    assert rbg_prbs(num_prbs) == size


@pytest.mark.parametrize("num_prbs", [0, 276])
def test_rbg_size_outside_the_table_is_refused(num_prbs):
    with pytest.raises(ValueError, match="1..275"):
        rbg_prbs(num_prbs)


def test_subband_grid_groups_prbs_and_centres_them():
    assert GRID.count == 13
    assert GRID.num_prbs == 51
    assert GRID.prbs == (4,) * 12 + (3,)
    expected = [(4 * k + 2) * 360e3 for k in range(12)] + [(48 + 1.5) * 360e3]
    assert np.allclose(GRID.centers_hz, expected, rtol=1e-12, atol=0)
    assert SubbandGrid.of(10, 180e3, group_prbs=3).prbs == (3, 3, 3, 1)
    assert SubbandGrid.of(8, 180e3, group_prbs=4).prbs == (4, 4)
    with pytest.raises(ValueError):
        SubbandGrid.of(10, 180e3, group_prbs=0)


@pytest.mark.parametrize("doppler_hz", [None, 10.0])
def test_power_is_exponential_with_mean_one(doppler_hz):
    gains = link_gains(SelectiveFading(PROFILE, 0.005, doppler_hz), block=100)
    assert gains.shape == (LINKS, GRID.count)
    assert gains.mean() == pytest.approx(1.0, abs=4 / math.sqrt(LINKS))
    for x in (0.1, 1.0, 2.0):  # P(|H|² < x) = 1 − exp(−x)
        p = 1 - math.exp(-x)
        assert np.mean(gains < x) == pytest.approx(p, abs=4 * math.sqrt(p * (1 - p) / LINKS))


@pytest.mark.parametrize("doppler_hz", [None, 10.0])
def test_subbands_are_correlated_as_the_squared_frequency_correlation(doppler_hz):
    """corr(|H(f)|², |H(f + Δf)|²) = |R(Δf)|²: not |R|, which exceeds it by 0.1 or more here."""
    gains = link_gains(SelectiveFading(PROFILE, 0.005, doppler_hz), block=100)
    centers_hz = GRID.centers_hz
    for other in (1, 2, 3, 5, 8):
        expected = abs(PROFILE.frequency_correlation(centers_hz[other] - centers_hz[0])) ** 2
        measured = np.corrcoef(gains[:, 0], gains[:, other])[0, 1]
        assert measured == pytest.approx(expected, abs=0.05)


def test_with_doppler_blocks_are_correlated_as_j0_squared():
    fading = SelectiveFading(PROFILE, 0.005, doppler_hz=10.0)
    start = link_gains(fading, block=100)
    for lag in (2, 5, 10):
        later = link_gains(fading, block=100 + lag)
        expected = j0(2 * math.pi * 10.0 * lag * 0.005) ** 2
        for subband in (0, 6):
            measured = np.corrcoef(start[:, subband], later[:, subband])[0, 1]
            assert measured == pytest.approx(expected, abs=5 / math.sqrt(LINKS))


def test_without_doppler_blocks_are_independent():
    fading = SelectiveFading(PROFILE, 0.005)
    start, later = link_gains(fading, block=100), link_gains(fading, block=101)
    for subband in (0, 6):
        assert abs(np.corrcoef(start[:, subband], later[:, subband])[0, 1]) < 4 / math.sqrt(LINKS)


@pytest.mark.parametrize("doppler_hz", [None, 10.0])
def test_gains_are_a_fixed_function_of_key_and_counters(doppler_hz):
    fading = SelectiveFading(PROFILE, 0.005, doppler_hz)
    calls = [(link, block) for link in range(5) for block in range(4)]
    forward = {call: fading.gains(KEY, GRID, 2, *call) for call in calls}
    _tap_sinusoids.cache_clear()
    _steering.cache_clear()
    backward = {call: fading.gains(KEY, GRID, 2, *call) for call in reversed(calls)}
    for call in calls:
        assert np.array_equal(forward[call], backward[call])
    assert not np.array_equal(forward[0, 0], forward[1, 0])
    assert not np.array_equal(forward[0, 0], forward[0, 1])
    assert not np.array_equal(forward[0, 0], fading.gains(KEY + 1, GRID, 2, 0, 0))


def test_the_sinusoid_cache_stays_bounded():
    fading = SelectiveFading(PROFILE, 0.005, doppler_hz=10.0)
    limit = _tap_sinusoids.cache_info().maxsize
    assert limit is not None and limit <= 1 << 15  # about 6 kB a link
    for link in range(limit + 100):
        fading.gains(KEY, GRID, 3, link, 0)
    assert _tap_sinusoids.cache_info().currsize == limit
