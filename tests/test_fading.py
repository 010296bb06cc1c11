"""Fading correlated in time (``fading.doppler_hz``): Clarke/Jakes's sum of sinusoids against
its closed forms, and what it gives a channel estimate some blocks old."""

import math

import numpy as np
import pytest
import simpy
import yaml
from scipy.special import j0

from fedsim.sim.draws import FADING, Fading, hashed_uniform
from fedsim.sim.link import HarqLinkSettings, HarqSettings
from tests.conftest import run_fedsim, tiny_scenario
from tests.test_radio import make_network, make_radio, upload_ends

LINKS = 4000  # Monte Carlo over links: a correlation's standard error about 1/√LINKS


@pytest.mark.parametrize("model", ["rayleigh", "rician"])
def test_the_power_is_exponential_or_rician_with_mean_one(model):
    fading = Fading(model, k_factor=2.0, coherence_s=0.005, doppler_hz=10.0)
    gains = np.array([fading.power_gain(7, FADING, 0, link, 100) for link in range(LINKS)])
    assert gains.mean() == pytest.approx(1.0, abs=4 / math.sqrt(LINKS))
    if model == "rayleigh":  # P(|h|² < x) = 1 − exp(−x)
        for x in (0.1, 1.0, 2.0):
            p = 1 - math.exp(-x)
            assert np.mean(gains < x) == pytest.approx(p, abs=4 * math.sqrt(p * (1 - p) / LINKS))


def test_the_power_is_correlated_in_time_as_j0_squared():
    """Rayleigh |h|²'s correlation between blocks τ apart is J0²(2π f_D τ)."""
    fading = Fading("rayleigh", coherence_s=0.005, doppler_hz=10.0)
    start = [fading.power_gain(7, FADING, 0, link, 100) for link in range(LINKS)]
    for lag in (2, 5, 10):
        later = [fading.power_gain(7, FADING, 0, link, 100 + lag) for link in range(LINKS)]
        expected = j0(2 * math.pi * 10.0 * lag * 0.005) ** 2
        assert np.corrcoef(start, later)[0, 1] == pytest.approx(expected, abs=5 / math.sqrt(LINKS))


def test_without_a_doppler_blocks_stay_independent_draws():
    fading = Fading("rayleigh", coherence_s=0.1)
    assert fading.power_gain(7, FADING, 0, 3, 5) == -math.log(hashed_uniform(7, FADING, 0, 3, 5, 0))


@pytest.mark.parametrize("doppler_hz, expected_bler", [(None, 0.104), (5.0, 0.1)])
def test_a_one_block_old_estimate_follows_a_slow_channel(doppler_hz, expected_bler):
    """At 300 m, blocks of 10 ms, the MCS picked at the previous block's SNR: over
    independent blocks the estimate misses the fades (the goodput is under half of perfect
    CSI's; the outer loop holds the BLER near the target only by moving to fewer PRBs as well
    as lower MCS: 10.4 %, 11.9 % when the share was always spread over the band); at a
    pedestrian's 5 Hz Doppler the block before is nearly the same channel (J0²(2π·5·0.01) =
    0.95): the target, 85% of the goodput."""
    rates = {}
    for age in (0, 1):
        env = simpy.Environment()
        fading = Fading("rayleigh", coherence_s=0.01, doppler_hz=doppler_hz)
        link = HarqLinkSettings(HarqSettings(bler_source="builtin", csi_age_blocks=age))
        radio = make_radio(env, [(300.0, 0.0)], fading=fading, link=link)
        network = make_network(env, radio)
        ends = upload_ends(env, network, 0, 20_000_000)
        env.run()
        [end_s] = ends
        rates[age] = 8 * 20_000_000 / end_s
        blocks = radio.stats[0].blocks
    assert blocks.failed / blocks.sent == pytest.approx(expected_bler, abs=0.01)
    share = rates[1] / rates[0]
    assert share > 0.8 if doppler_hz else share < 0.5


def test_a_doppler_needs_fading_blocks(tmp_path):
    data = tiny_scenario(tmp_path)
    fading = {"model": "rayleigh", "coherence_s": None, "doppler_hz": 5.0}
    data["system"] = {"network": {"latency_s": 0.01}, "radio": {"fading": fading}}
    path = tmp_path / "doppler.yaml"
    path.write_text(yaml.safe_dump(data))
    result = run_fedsim("validate", str(path))
    assert result.returncode == 2 and "doppler_hz" in result.stderr
    assert "Traceback" not in result.stderr
