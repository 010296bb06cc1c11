"""The cellular system model in the event loop: PRB schedulers on the uplink band, open-loop
power control, several cells with interference and handover, TR 38.901 laws in the radio,
the per-upload SINR threshold, and their outputs (radio.csv columns, the map, the budget)."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
import simpy

from fedsim.budget import budget_algorithm, format_budgets
from fedsim.config import ScenarioError, parse_scenario
from fedsim.runner import build_dataset, build_trainers
from fedsim.sim.cells import HexGrid
from fedsim.sim.draws import Fading
from fedsim.sim.events import EventLog
from fedsim.sim.link import PerUploadSettings
from fedsim.sim.network import Network
from fedsim.sim.pathloss import Tr38901
from fedsim.sim.radio import CellSettings, PowerControl, Radio, RadioSettings
from fedsim.sim.scheduler import UplinkScheduling, num_prbs, prb_hz
from fedsim.study import run_scenario
from tests.conftest import tiny_scenario

BAND_HZ = 10e6
NOISE_W_PER_HZ = 10 ** (-174 / 10) / 1000


def make_radio(env, positions_m, *, tx_dbm=23.0, shadowing=None, **settings) -> Radio:
    count = len(positions_m)
    return Radio(
        RadioSettings(uplink_bandwidth_hz=BAND_HZ, **settings), lambda: env.now,
        np.array(positions_m, dtype=float), np.full(count, tx_dbm),
        np.zeros(count) if shadowing is None else shadowing, key=3,
    )  # fmt: skip


def upload_all(env, network, sizes: dict[int, int], until_s: float = 1e4) -> dict[int, float]:
    """Start every client's upload at 0; their end times."""
    ends: dict[int, float] = {}

    def body(client, num_bytes):
        yield from network.upload(client, num_bytes)
        ends[client] = env.now

    for client, num_bytes in sizes.items():
        env.process(body(client, num_bytes))
    env.run(until=until_s)
    return ends


def macro_gain(distance_m: float) -> float:
    return 10 ** (-(128.1 + 37.6 * math.log10(distance_m / 1000)) / 10)


# --- PRB schedulers in the medium ---


def scheduled_network(env, radio, scheduler: str, period_s=0.1, power_aware=True) -> Network:
    sharing = UplinkScheduling(scheduler, 30, period_s, power_aware=power_aware)
    return Network(env, {}, log=EventLog(lambda: env.now), radio=radio, uplink_sharing=sharing)


def test_round_robin_gives_identical_uploads_equal_prbs_and_they_end_together():
    env = simpy.Environment()
    radio = make_radio(env, [(200, 0), (0, 200), (-200, 0)])
    network = scheduled_network(env, radio, "round_robin")
    ends = upload_all(env, network, {0: 500_000, 1: 500_000, 2: 500_000})
    prbs = num_prbs(BAND_HZ, 30)  # 24 PRBs of 360 kHz: 8 each
    snr = 10 ** (23 / 10) / 1000 * macro_gain(200) / (NOISE_W_PER_HZ * 8 * prb_hz(30))
    rate_bps = 8 * prb_hz(30) * math.log2(1 + snr)
    for client in range(3):
        assert ends[client] == pytest.approx(8 * 500_000 / rate_bps, rel=1e-9)
    given = radio.prb_seconds()
    assert sum(given.values()) == pytest.approx(prbs * ends[0], rel=1e-9)
    assert max(given.values()) == pytest.approx(min(given.values()), rel=1e-9)


def test_proportional_fair_shares_the_prbs_evenly_among_statistically_identical_uploads():
    """Four clients at one distance, Rayleigh blocks of 10 ms: over a long upload each gets
    about a quarter of the PRB·seconds, and PF's pick follows each one's fading peaks."""
    env = simpy.Environment()
    angles = np.linspace(0, 2 * np.pi, 4, endpoint=False)
    positions = [(300 * math.cos(a), 300 * math.sin(a)) for a in angles]
    fading = Fading("rayleigh", coherence_s=0.01)
    radio = make_radio(env, positions, fading=fading)
    network = scheduled_network(env, radio, "proportional_fair", period_s=0.01)
    upload_all(env, network, dict.fromkeys(range(4), 20_000_000), until_s=20.0)
    given = radio.prb_seconds()
    shares = np.array([given[c] for c in range(4)]) / sum(given.values())
    assert np.all(np.abs(shares - 0.25) < 0.03), shares
    # The scheduled client is the one whose rate over its average is highest: at its peak,
    # its fading is above its own median far more often than not.
    band = network.uplink_bands[0]
    assert band.num_prbs == num_prbs(BAND_HZ, 30)


def test_power_aware_pf_splits_a_power_limited_band_where_the_per_prb_view_serves_one():
    """Four cell-edge clients (1 km, -0.5 dB SNR on the whole band), no fading: PF that sees
    each one's power spread over its PRBs gives each a quarter of the band (their rates add
    up to 2.4x one client's on the whole band), and the four equal uploads end together at
    the hand-computed time; the per-PRB view gives each period's band to one (0.8 s)."""
    positions = [(1000.0, 0.0), (0.0, 1000.0), (-1000.0, 0.0), (0.0, -1000.0)]
    prbs = num_prbs(BAND_HZ, 30)  # 24: 6 each
    share_hz = prbs // 4 * prb_hz(30)
    snr = 10 ** (23 / 10) / 1000 * macro_gain(1000) / (NOISE_W_PER_HZ * share_hz)
    split_end_s = 8 * 200_000 / (share_hz * math.log2(1 + snr))
    makespans = {}
    for power_aware in (True, False):
        env = simpy.Environment()
        radio = make_radio(env, positions)
        network = scheduled_network(env, radio, "proportional_fair", power_aware=power_aware)
        ends = upload_all(env, network, dict.fromkeys(range(4), 200_000))
        makespans[power_aware] = max(ends.values())
        if power_aware:
            for client in range(4):
                assert ends[client] == pytest.approx(split_end_s, rel=1e-6)
            given = radio.prb_seconds()
            np.testing.assert_allclose([given[c] for c in range(4)], prbs / 4 * split_end_s)
    assert makespans[True] < 0.5 * makespans[False]


def test_max_rate_starves_the_far_client_that_proportional_fair_serves():
    shares = {}
    for scheduler in ("max_rate", "proportional_fair"):
        env = simpy.Environment()
        radio = make_radio(env, [(100, 0), (450, 0)], fading=Fading("rayleigh", coherence_s=0.01))
        network = scheduled_network(env, radio, scheduler, period_s=0.01)
        upload_all(env, network, {0: 50_000_000, 1: 50_000_000}, until_s=2.0)
        given = radio.prb_seconds()
        shares[scheduler] = given.get(1, 0.0) / sum(given.values())
    assert shares["max_rate"] < 0.05
    assert shares["proportional_fair"] > 0.3


def test_a_scheduled_upload_without_prbs_draws_no_transmit_energy(tmp_path):
    data = cellular_scenario(tmp_path, {"uplink_sharing": "max_rate"})
    data["system"]["energy"] = {"circuit_power_w": 0.0}
    run_dir = run_scenario(parse_scenario(data), show_progress=False) / "fedavg"
    rows = list(csv.DictReader((run_dir / "radio.csv").open()))
    assert "prb_share" in rows[0]
    shares = [float(r["prb_share"]) for r in rows if r["prb_share"]]
    assert sum(shares) == pytest.approx(1.0, rel=1e-5)  # written to 6 digits


# --- power control ---


def test_open_loop_power_follows_the_formula_and_is_capped_at_the_maximum():
    env = simpy.Environment()
    control = PowerControl(p0_dbm=-90.0, alpha=0.8, subcarrier_spacing_khz=30)
    radio = make_radio(env, [(50, 0), (480, 0)], tx_dbm=23.0, power_control=control)
    for client, distance_m in ((0, 50), (1, 480)):
        loss_db = 128.1 + 37.6 * math.log10(distance_m / 1000)
        share_hz = 12 * prb_hz(30)
        by_hand_dbm = min(23.0, -90.0 + 10 * math.log10(2 * 12) + 0.8 * loss_db)
        power_w = radio.uplink_power_w(client, share_hz)
        assert 10 * math.log10(power_w * 1000) == pytest.approx(by_hand_dbm, abs=1e-9)
    full = PowerControl(p0_dbm=-90.0, alpha=1.0, subcarrier_spacing_khz=30)
    capped = make_radio(env, [(480, 0)], tx_dbm=23.0, power_control=full)
    assert capped.uplink_power_w(0, BAND_HZ) == pytest.approx(10 ** (23 / 10) / 1000)


def test_power_control_lowers_the_energy_a_near_client_spends_on_its_upload(tmp_path):
    joules = {}
    for name, control in (("max", None), ("controlled", {"p0_dbm": -100, "alpha": 0.8})):
        data = cellular_scenario(tmp_path / name, {"power_control": control})
        data["system"]["energy"] = {"circuit_power_w": 0.0}
        run_dir = run_scenario(parse_scenario(data), show_progress=False) / "fedavg"
        rows = list(csv.DictReader((run_dir / "energy.csv").open()))
        joules[name] = sum(float(r["tx_j"]) for r in rows if r.get("tx_j"))
    assert 0 < joules["controlled"] < joules["max"]


# --- several cells ---


def test_one_cell_without_interference_is_todays_single_cell():
    positions = [(120, 40), (-300, 200), (50, -420)]
    ends = []
    for cells in (None, CellSettings(HexGrid(0, 1000.0), interference=False)):
        env = simpy.Environment()
        radio = make_radio(env, positions, fading=Fading("rayleigh", coherence_s=0.1), cells=cells)
        network = Network(
            env, {}, log=EventLog(lambda env=env: env.now), radio=radio, latency_s=0.01
        )
        ends.append(upload_all(env, network, {0: 400_000, 1: 300_000, 2: 200_000}))
    for client in range(3):  # the single cell has no backhaul; the grid's adds 5 ms + 8S/1 Gbit/s
        backhaul_s = 0.005 + 8 * (400_000, 300_000, 200_000)[client] / 1e9
        assert ends[1][client] == pytest.approx(ends[0][client] + backhaul_s, rel=1e-12)


def test_sinr_with_one_interferer_in_the_next_cell_matches_the_hand_computation():
    """Client 0 in cell 0 and client 1 in cell 1 upload at once: client 0's rate on the whole
    band is B log2(1 + p g00 / (B (N0 + p g10 / B)))."""
    grid = HexGrid(1, 500.0)
    positions = [(100.0, 0.0), (400.0, 0.0)]  # site 1 is at (500, 0)
    env = simpy.Environment()
    radio = make_radio(env, positions, cells=CellSettings(grid), tx_dbm=20.0)
    assert [radio.serving_site(c) for c in range(2)] == [0, 1]
    network = Network(env, {}, log=EventLog(lambda: env.now), radio=radio)
    started = {}

    def body(client):
        flow_link = radio.uplink(client, radio.serving_site(client))
        started[client] = flow_link
        yield from network.upload(client, 10_000_000)

    for client in range(2):
        env.process(body(client))
    env.run(until=0.5)
    p_w = 10 ** (20 / 10) / 1000
    interference = p_w * macro_gain(400.0) / BAND_HZ  # client 1 is 400 m from site 0
    snr = p_w * macro_gain(100.0) / (BAND_HZ * (NOISE_W_PER_HZ + interference))
    assert radio.interference_w_per_hz(0) == pytest.approx(interference, rel=1e-9)
    band = network.uplink_bands[0]
    [flow] = list(band._sending)
    assert flow.rate_bps == pytest.approx(BAND_HZ * math.log2(1 + snr), rel=1e-9)


def test_interference_ends_when_the_other_cells_upload_ends():
    grid = HexGrid(1, 500.0)
    env = simpy.Environment()
    radio = make_radio(env, [(100.0, 0.0), (400.0, 0.0)], cells=CellSettings(grid))
    network = Network(env, {}, log=EventLog(lambda: env.now), radio=radio)
    ends = upload_all(env, network, {0: 20_000_000, 1: 10_000})
    alone = make_radio(simpy.Environment(), [(100.0, 0.0)], cells=CellSettings(grid))
    assert ends[1] < ends[0]
    assert radio.interference_w_per_hz(0) == 0.0
    assert not radio._transmitting
    assert alone.interference_w_per_hz(0) == 0.0


def test_a_client_walking_across_the_grid_is_handed_over_to_the_nearer_site():
    grid = HexGrid(1, 300.0)
    env = simpy.Environment()
    radio = make_radio(
        env, [(10.0, 0.0)], cells=CellSettings(grid, hysteresis_db=3.0), speed_mps=30.0,
        update_s=1.0, cell_radius_m=500.0, min_distance_m=5.0,
    )  # fmt: skip
    sites = []
    for second in range(1, 200):
        sites.append(radio.serving_site(0, float(second)))
        x, y = radio.position_m(0, float(second))
        nearest = int(np.argmin(grid.distances_m(np.array([[x, y]]))[0]))
        losses = [radio.large_scale_loss_db(0, float(second), s) for s in range(7)]
        # never served by a site more than the hysteresis weaker than the best
        assert losses[sites[-1]] - min(losses) <= 3.0 + 1e-9
        assert nearest in range(7)
    assert radio.stats[0].handovers > 0
    assert len(set(sites)) > 1


# --- TR 38.901 laws in the radio ---


def test_a_tr38901_radio_draws_line_of_sight_and_shadowing_with_the_tables_sigma():
    law = Tr38901("umi", 3.5e9)
    count = 4000
    env = simpy.Environment()
    rng = np.random.default_rng(5)
    positions = np.column_stack([rng.uniform(20, 400, count), np.zeros(count)])
    normals = rng.standard_normal(count)
    radio = make_radio(env, positions, path_loss=law, shadowing=normals, shadowing_db=1.0)
    los = np.array([radio.start_line_of_sight(c) for c in range(count)])
    expected = np.array([law.los_probability(d) for d in positions[:, 0]])
    assert abs(los.mean() - expected.mean()) < 0.03
    losses = np.array([radio.large_scale_loss_db(c) for c in range(count)])
    for state, sigma_db in ((True, 4.0), (False, 7.82)):
        mine = los == state
        residual = losses[mine] - law.db(positions[mine, 0], state)
        assert np.allclose(residual, sigma_db * normals[mine])


# --- per-upload SINR threshold (Yang et al.) ---


def test_an_upload_below_the_sinr_threshold_is_lost_and_one_above_is_kept():
    outcomes = {}
    for threshold_db in (0.0, 40.0):
        env = simpy.Environment()
        link = PerUploadSettings(sinr_threshold=10 ** (threshold_db / 10))
        radio = make_radio(env, [(200.0, 0.0)], link=link)
        network = Network(env, {}, log=EventLog(lambda env=env: env.now), radio=radio)
        result = []

        def body(network=network, result=result):
            try:
                yield from network.upload(0, 10_000)
                result.append("kept")
            except Exception as error:  # TransmissionLost
                result.append(type(error).__name__)

        env.process(body())
        env.run(until=10)
        outcomes[threshold_db] = result
    snr_db = 10 * math.log10(10 ** (23 / 10) / 1000 * macro_gain(200) / (NOISE_W_PER_HZ * BAND_HZ))
    assert 0.0 < snr_db < 40.0
    assert outcomes[0.0] == ["kept"] and outcomes[40.0] == ["TransmissionLost"]


# --- scenarios, outputs, validation ---

CELLULAR_RADIO = {
    "path_loss": {"kind": "uma", "carrier_ghz": 2.0},
    "fading": {"model": "rayleigh", "coherence_s": 0.1},
    "tx_power_dbm": 23,
    "uplink_bandwidth_hz": 5.0e6,
    "cells": {"rings": 1, "inter_site_distance_m": 300},
}


def cellular_scenario(tmp_path, radio: dict) -> dict:
    merged = {**CELLULAR_RADIO, **{k: v for k, v in radio.items() if v is not None}}
    if "power_control" in radio and radio["power_control"] is None:
        merged.pop("power_control", None)
    data = tiny_scenario(
        tmp_path, clients={"count": 8}, system={"network": {"latency_s": 0.01}, "radio": merged},
        algorithms=[{"name": "fedavg", "client_fraction": 0.5}], run={"rounds": 3},
    )  # fmt: skip
    data["system"]["network"] = {"latency_s": 0.01}
    return data


def test_a_cellular_run_writes_the_new_columns_and_the_map(tmp_path):
    data = cellular_scenario(tmp_path, {"uplink_sharing": "proportional_fair"})
    run_dir = run_scenario(parse_scenario(data), show_progress=False) / "fedavg"
    rows = list(csv.DictReader((run_dir / "radio.csv").open()))
    assert {r["site"] for r in rows} <= {str(s) for s in range(7)}
    assert {r["los"] for r in rows} <= {"0", "1"}
    grid = HexGrid(1, 300.0, wrap_around=True)
    for row in rows:  # distance_m is to the serving site
        here = np.array([[float(row["x_m"]), float(row["y_m"])]])
        assert float(row["distance_m"]) == pytest.approx(
            grid.distances_m(here)[0, int(row["site"])], abs=2e-3
        )
    assert (run_dir / "channel.png").stat().st_size > 0
    scenario = parse_scenario(data)
    dataset = build_dataset(scenario)
    trainers = build_trainers(scenario, dataset)
    budget = budget_algorithm(scenario, scenario.algorithms[0], dataset, trainers)
    assert len(budget.radio["prb_deciles"]) == 10
    assert sum(budget.radio["prb_deciles"]) == pytest.approx(1.0)
    assert "PRB share by SNR decile" in format_budgets(scenario, [budget], 1000)


def test_without_the_new_keys_radio_csv_keeps_its_columns(tmp_path):
    data = cellular_scenario(tmp_path, {})
    data["system"]["radio"] = {"fading": {"model": "rayleigh", "coherence_s": 0.1}}
    run_dir = run_scenario(parse_scenario(data), show_progress=False) / "fedavg"
    header = (run_dir / "radio.csv").read_text().splitlines()[0]
    assert "site" not in header and "prb_share" not in header


@pytest.mark.parametrize(
    ("radio", "field"),
    [
        ({"path_loss": "uma", "shadowing_db": 4}, "shadowing_db"),
        ({"uplink_sharing": {"scheduler": "proportional_fair", "subcarrier_spacing_khz": 15},
          "link": "harq"}, "subcarrier_spacing_khz"),
        ({"cells": {}, "uplink_aggregation": "aircomp"}, "cells"),
        ({"uplink_sharing": "fair_share"}, "uplink_sharing"),
        ({"cells": {"rings": 3}}, "rings"),
        ({"uplink_sharing": {"scheduler": "max_rate", "power_aware": "yes"}}, "power_aware"),
    ],
)  # fmt: skip
def test_bad_cellular_input_names_the_field(tmp_path, radio, field):
    data = cellular_scenario(tmp_path, {})
    data["system"]["radio"] = radio
    with pytest.raises(ScenarioError, match=field):
        parse_scenario(data)
