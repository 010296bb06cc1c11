"""Each receiver its own noise figure: the base station's on the uplink (and the over-the-air
slot), the device's on the downlink and D2D, by hand; the defaults are 3GPP's evaluation
values; the old single ``noise_figure_db`` is refused, naming the two keys."""

from __future__ import annotations

import math

import numpy as np
import pytest
import simpy
import yaml

from fedsim.config import RadioConfig, ScenarioError, parse_scenario
from fedsim.sim.radio import D2D, DOWNLINK, UPLINK, Radio, RadioSettings
from fedsim.world.network import radio_settings
from tests.conftest import run_fedsim, tiny_scenario

BAND_HZ = 10e6
N0_DBM_PER_HZ = -174.0
UE_DBM, BS_DBM = 10.0, 30.0
DISTANCE_M = 300.0


def macro_loss_db(distance_m: float) -> float:
    return 128.1 + 37.6 * math.log10(distance_m / 1000)


def snr_by_hand(power_dbm: float, loss_db: float, figure_db: float) -> float:
    """p·g / (F·N0·B) on the whole band, no fading."""
    noise_dbm = N0_DBM_PER_HZ + figure_db + 10 * math.log10(BAND_HZ)
    return 10 ** ((power_dbm - loss_db - noise_dbm) / 10)


def radio(bs_db: float, ue_db: float) -> Radio:
    """Two clients on the macro law, no shadowing nor fading, Shannon's rate: one at
    DISTANCE_M from the base station, the other 100 m further out."""
    settings = RadioSettings(
        bs_noise_figure_db=bs_db, ue_noise_figure_db=ue_db, base_station_power_dbm=BS_DBM,
        uplink_bandwidth_hz=BAND_HZ, downlink_bandwidth_hz=BAND_HZ, d2d_bandwidth_hz=BAND_HZ,
    )  # fmt: skip
    env = simpy.Environment()
    positions_m = np.array([(0.0, DISTANCE_M), (0.0, DISTANCE_M + 100.0)])
    return Radio(settings, lambda: env.now, positions_m, np.full(2, UE_DBM), np.zeros(2), key=5)


def shannon_snr(rate_bps: float) -> float:
    return 2 ** (rate_bps / BAND_HZ) - 1


def test_the_uplink_has_the_base_stations_figure_and_the_downlink_the_devices():
    cell = radio(bs_db=5.0, ue_db=9.0)
    loss_db = macro_loss_db(DISTANCE_M)
    uplink = snr_by_hand(UE_DBM, loss_db, 5.0)
    downlink = snr_by_hand(BS_DBM, loss_db, 9.0)
    assert shannon_snr(cell.uplink(0).achievable_bps(BAND_HZ)) == pytest.approx(uplink)
    assert shannon_snr(cell.downlink([0]).achievable_bps(BAND_HZ)) == pytest.approx(downlink)
    # 20 dB more power, 4 dB more noise: the downlink is 16 dB above the uplink.
    assert 10 * math.log10(downlink / uplink) == pytest.approx(16.0)
    assert cell.mean_snr_db(BAND_HZ)[0] == pytest.approx(10 * math.log10(uplink))
    assert cell.uplink_snr_db_at(0, 0.0, BAND_HZ) == pytest.approx(10 * math.log10(uplink))
    up_bps, down_bps = (BAND_HZ * math.log2(1 + snr) for snr in (uplink, downlink))
    assert cell.nominal_rate_bps(False, [0], BAND_HZ) == pytest.approx(up_bps)
    assert cell.nominal_rate_bps(True, [0], BAND_HZ) == pytest.approx(down_bps)


def test_each_direction_follows_its_own_receivers_figure_only():
    base = radio(bs_db=5.0, ue_db=9.0)
    noisier_bs, noisier_ue = radio(bs_db=8.0, ue_db=9.0), radio(bs_db=5.0, ue_db=12.0)

    def snrs(cell: Radio) -> tuple[float, float, float]:
        return (
            shannon_snr(cell.uplink(0).achievable_bps(BAND_HZ)),
            shannon_snr(cell.downlink([0]).achievable_bps(BAND_HZ)),
            shannon_snr(cell.d2d(0, 1).achievable_bps(BAND_HZ)),
        )

    up, down, d2d = snrs(base)
    bs_up, bs_down, bs_d2d = snrs(noisier_bs)
    ue_up, ue_down, ue_d2d = snrs(noisier_ue)
    assert 10 * math.log10(up / bs_up) == pytest.approx(3.0)  # 3 dB more at the base station
    assert (bs_down, bs_d2d) == (pytest.approx(down), pytest.approx(d2d))
    assert ue_up == pytest.approx(up)  # 3 dB more at the device: its receptions only
    assert 10 * math.log10(down / ue_down) == pytest.approx(3.0)
    assert 10 * math.log10(d2d / ue_d2d) == pytest.approx(3.0)
    # The receivers' noise, F·N0·B: the over-the-air slot is received at the base station.
    for direction, figure_db in ((UPLINK, 5.0), (DOWNLINK, 9.0), (D2D, 9.0)):
        by_hand_w = 10 ** ((N0_DBM_PER_HZ + figure_db) / 10) / 1000 * BAND_HZ
        assert base.noise_w(direction, BAND_HZ) == pytest.approx(by_hand_w)


def test_the_defaults_are_3gpps_evaluation_values_and_reach_the_radio():
    config = RadioConfig()
    assert (config.bs_noise_figure_db, config.ue_noise_figure_db) == (5.0, 9.0)
    for name in ("bs_noise_figure_db", "ue_noise_figure_db"):
        description = RadioConfig.model_fields[name].description
        assert "TR 36.814 Table A.2.1.1-3" in description
        assert "TR 38.802 Table A.2.1-1" in description
    settings = radio_settings(RadioConfig(bs_noise_figure_db=3.0, ue_noise_figure_db=7.0))
    assert (settings.bs_noise_figure_db, settings.ue_noise_figure_db) == (3.0, 7.0)


def radio_scenario(tmp_path, **radio_keys) -> dict:
    data = tiny_scenario(tmp_path)
    data["system"] = {"network": {"latency_s": 0.01}, "radio": radio_keys}
    return data


def test_the_old_single_figure_is_refused_naming_the_two_receivers(tmp_path):
    with pytest.raises(ScenarioError) as refused:
        parse_scenario(radio_scenario(tmp_path, noise_figure_db=9))
    [problem] = refused.value.problems
    assert "noise_figure_db" in problem
    assert "bs_noise_figure_db" in problem and "ue_noise_figure_db" in problem
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(radio_scenario(tmp_path, noise_figure_db=9)))
    result = run_fedsim("validate", str(path))
    assert result.returncode == 2
    assert "system.radio" in result.stderr and "noise_figure_db" in result.stderr
    assert "bs_noise_figure_db" in result.stderr and "ue_noise_figure_db" in result.stderr
    assert "Traceback" not in result.stderr
    scenario = parse_scenario(radio_scenario(tmp_path, bs_noise_figure_db=2, ue_noise_figure_db=7))
    assert scenario.system.radio.bs_noise_figure_db == 2.0
    assert scenario.system.radio.ue_noise_figure_db == 7.0
