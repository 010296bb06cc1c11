"""Over-the-air aggregation (BAA, OBDA) against its closed forms and hand-made channels: the
noiseless sum, the noise's MSE, truncation, the slot's length, the power limit, the majority
vote, the energy; the slot inside a run; what validation refuses; and learning with it."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
import torch
import yaml

from fedsim.cli import main
from fedsim.learn.overtheair import AnalogSum, normalization, one_bit_vote
from fedsim.sim.aircomp import AirSlot, slot_s
from fedsim.sim.event_check import check_events
from fedsim.sim.radio import dbm_to_watts
from tests.conftest import tiny_scenario
from tests.test_compression import assert_refused
from tests.test_fedavg_world import make_world, run_world


def updates_of(count: int, numel: int, seed: int = 0, spread=None) -> dict[int, tuple]:
    generator = torch.Generator().manual_seed(seed)
    spread = spread or [1.0] * count
    return {
        k: (torch.randn(numel, generator=generator) * spread[k] + 0.1 * k,) for k in range(count)
    }


# --- the arithmetic: BAA's estimate and OBDA's vote ---


def test_without_noise_the_air_average_is_the_exact_weighted_average():
    updates = updates_of(5, 300, spread=[0.5, 1, 2, 3, 0.1])
    weights = {0: 10.0, 1: 40.0, 2: 25.0, 3: 5.0, 4: 20.0}
    exact = sum(weights[k] * updates[k][0].double() for k in updates) / sum(weights.values())
    estimate = AnalogSum(updates, weights).estimate(list(updates), 0.0, torch.Generator())
    assert torch.allclose(estimate.tensors[0].double(), exact, atol=1e-6)
    assert estimate.mse < 1e-12 and estimate.snr_db == math.inf
    # truncated clients are not in the sum: the average of the transmitters, and an MSE
    # against all participants' average (the truncation's bias)
    some = [0, 2, 3]
    part = sum(weights[k] * updates[k][0].double() for k in some) / sum(weights[k] for k in some)
    truncated = AnalogSum(updates, weights).estimate(some, 0.0, torch.Generator())
    assert torch.allclose(truncated.tensors[0].double(), part, atol=1e-6)
    assert truncated.mse == pytest.approx(float((part - exact).square().mean()), rel=1e-5)


def test_the_noise_on_the_average_matches_the_closed_form():
    """Each coordinate of the estimate has noise variance C² / (SNR₀ (Σ_T w)²); for K equal
    clients of spread σ, σ² / (SNR₀ K²)."""
    snr = 10.0 ** (5 / 10)  # 5 dB
    k, numel, trials = 4, 2000, 150
    updates = updates_of(k, numel, seed=1)
    weights = dict.fromkeys(updates, 1.0)
    generator = torch.Generator().manual_seed(7)
    analog = AnalogSum(updates, weights)
    mse = np.mean([
        analog.estimate(list(updates), 1 / math.sqrt(snr), generator).mse for _ in range(trials)
    ])  # fmt: skip
    (scale,) = analog.scale
    expected = scale**2 / (snr * k**2)
    assert mse == pytest.approx(expected, rel=0.03)  # MC error: √(2 / 300,000) ≈ 0.3%
    # and with unequal weights and spreads, the general form
    updates = updates_of(3, numel, seed=2, spread=[0.2, 1.0, 3.0])
    weights = {0: 1.0, 1: 2.0, 2: 0.5}
    analog = AnalogSum(updates, weights)
    mse = np.mean([analog.estimate([0, 1, 2], 0.5, generator).mse for _ in range(trials)])
    (scale,) = analog.scale
    assert scale == pytest.approx(
        max(weights[c] * normalization(updates[c])[0][1] for c in range(3))
    )
    assert mse == pytest.approx(scale**2 * 0.25 / 3.5**2, rel=0.03)


def test_no_client_transmits_above_unit_symbol_power():
    updates = updates_of(6, 500, seed=3, spread=[0.1, 1, 5, 2, 0.3, 9])
    weights = {k: float(10 + 7 * k) for k in updates}
    analog = AnalogSum(updates, weights)
    powers = [analog.symbol_power(k) for k in updates]
    assert max(powers) == pytest.approx(1.0)  # the client that sets C sends at full power
    assert all(0 < p <= 1.0 + 1e-12 for p in powers)


def test_one_bit_vote_is_the_sign_of_the_summed_signs():
    updates = {
        0: (torch.tensor([1.0, -2.0, 3.0, -0.5, 0.0]),),
        1: (torch.tensor([2.0, -1.0, -3.0, 0.5, 0.0]),),
        2: (torch.tensor([-1.0, -4.0, 1.0, 0.5, 1.0]),),
    }
    vote = one_bit_vote(updates, [0, 1, 2], 0.0, torch.Generator())
    assert vote.tensors[0].tolist() == [1.0, -1.0, 1.0, 1.0, 1.0]  # by hand: +,-,+,+,+
    assert vote.mse == 0.0
    # client 2 truncated: the votes of 0 and 1 tie on numbers 3 and 4 and are 0 on the last
    vote = one_bit_vote(updates, [0, 1], 0.0, torch.Generator())
    assert vote.tensors[0].tolist() == [1.0, -1.0, 0.0, 0.0, 0.0]
    assert vote.mse == pytest.approx((1 + 1 + 1) / 5)  # against all three's vote
    assert one_bit_vote(updates, [], 0.0, torch.Generator()).tensors is None


# --- the physics: truncation, power, slot ---


def test_truncation_excludes_exactly_the_clients_below_the_threshold():
    """A hand-made channel: g_th = ρ₀ / P; a client at or above it transmits."""
    power_w = [0.2, 0.2, 0.1, 0.2, 0.2]
    snr, noise_w = 10.0, 1e-13
    rho0 = snr * noise_w  # 1e-12 W
    gains = [1e-11, 5e-12, 5e-12, 4.9e-12, 2e-11]  # thresholds 5e-12, 5e-12, 1e-11, 5e-12, 5e-12
    slot = AirSlot.at_snr([10, 11, 12, 13, 14], gains, power_w, snr, noise_w)
    assert slot.receive_power_w == pytest.approx(rho0)
    assert slot.transmitters == [10, 11, 14]
    assert [slot.threshold(i) for i in range(5)] == pytest.approx(
        [5e-12, 5e-12, 1e-11, 5e-12, 5e-12]
    )
    for i in range(5):  # the power limit holds, at any symbol power up to 1
        for symbol in (1.0, 0.5):
            assert slot.power_w(i, symbol) <= power_w[i]
    assert slot.power_w(0) == pytest.approx(rho0 / 1e-11)
    assert slot.power_w(1) == pytest.approx(0.2)  # exactly at the threshold: full power
    assert slot.power_w(2) == 0.0
    assert slot.sum_noise_std == pytest.approx(1 / math.sqrt(10))


def test_the_slot_lasts_d_over_2b_whatever_the_number_of_clients():
    assert slot_s(44_426, 1e6) == pytest.approx(0.022213)
    assert slot_s(1000, 5e5) == slot_s(1000, 5e5)  # no client count enters it
    with pytest.raises(ValueError, match="bandwidth"):
        slot_s(10, 0.0)


# --- in a run ---

TX_DBM = 20.0
RADIO = {
    "shadowing_db": 0.0,
    "fading": {"model": "none"},
    "tx_power_dbm": TX_DBM,
    "uplink_bandwidth_hz": 1.0e6,
    "path_loss": {"kind": "log_distance", "reference_loss_db": 40, "exponent": 3.0},
    "noise_density_dbm_per_hz": -174.0,
    "cell_radius_m": 2000,
    "min_distance_m": 1,
}
DISTANCES_M = [50, 300, 900, 1200, 1500, 1800]
NOISE_DBM = -174.0 + 5.0 + 60.0  # F·N0·B at the base station (bs_noise_figure_db 5) on 1 MHz


def air_scenario(tmp_path, mode: str, *, count: int = 6, receive_snr_db: float = 20.0, **extra):
    tmp_path.mkdir(parents=True, exist_ok=True)
    positions = tmp_path / "positions.csv"
    positions.write_text(
        "client,x_m,y_m\n" + "".join(f"{c},{DISTANCES_M[c % 6] + c // 6},0\n" for c in range(count))
    )
    radio = {
        **RADIO,
        "positions": str(positions),
        "uplink_aggregation": mode,
        "aircomp": {"receive_snr_db": receive_snr_db, "server_lr": 0.01},
    }
    system = {
        "network": {"latency_s": 0.01},
        "compute": {"t_min_s": 0.5, "mean_extra_s": 0.0},
        "radio": radio,
        **extra.pop("system", {}),
    }
    data = tiny_scenario(tmp_path, system=system, clients={"count": count}, **extra)
    data["system"]["network"] = {"latency_s": 0.01}  # the rates come from the radio
    data["dataset"]["num_samples"] = 200 * count
    return data


def full_power_snr_db(distance_m: float) -> float:
    loss_db = 40 + 30 * math.log10(distance_m)
    return TX_DBM - loss_db - NOISE_DBM


def read_rounds(run_dir) -> list[dict]:
    with (run_dir / "rounds.csv").open() as f:
        return list(csv.DictReader(f))


def test_a_run_truncates_by_the_channel_and_times_the_slot(tmp_path):
    data = air_scenario(tmp_path, "aircomp")
    data["output"]["events"] = True
    world = make_world(data, tmp_path)
    run_world(world)
    expected = [c for c in range(6) if full_power_snr_db(DISTANCES_M[c]) >= 20.0]
    assert 0 < len(expected) < 6  # the hand-made cell cuts some and not others
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").open()]
    slots = [e for e in events if e["kind"] == "air_slot"]
    assert len(slots) == 3
    assert check_events(tmp_path / "run" / "events.jsonl").ok  # nobody offline transmits
    for slot in slots:
        assert slot["transmitters"] == expected
        assert slot["truncated"] == sorted(set(range(6)) - set(expected))
    rows = read_rounds(tmp_path / "run")
    d = world.trainer.num_params
    for row in rows:
        assert int(row["air_transmitters"]) == len(expected)
        assert int(row["air_truncated"]) == 6 - len(expected)
        assert float(row["air_slot_s"]) == pytest.approx(d / 2e6)
        assert float(row["air_snr_db"]) > 0
    # the side information went digitally: 2 numbers of 4 bytes per client and round
    assert int(rows[-1]["uplink_bytes"]) == 3 * 6 * 8


def test_the_slot_does_not_grow_with_the_clients(tmp_path):
    lengths = []
    for count in (6, 18):
        world = make_world(
            air_scenario(tmp_path / str(count), "obda", count=count), tmp_path / str(count)
        )
        run_world(world)
        lengths.append({float(r["air_slot_s"]) for r in read_rounds(tmp_path / str(count) / "run")})
    assert lengths[0] == lengths[1]
    (length,) = lengths[0]
    assert length == pytest.approx(world.trainer.num_params / 2e6)


def test_obda_energy_is_power_times_slot_per_transmitter(tmp_path):
    """OBDA sends no side information: a client's transmit joules are the slots', each
    ρ₀ / g_k (unit-power BPSK) plus the circuit power, times d / (2B)."""
    energy = {"circuit_power_w": 0.05, "rx_power_w": 0.0}
    data = air_scenario(tmp_path, "obda", system={"energy": energy})
    world = make_world(data, tmp_path)
    run_world(world)
    rho0 = 100.0 * dbm_to_watts(NOISE_DBM)  # 20 dB over the base station's noise
    slot = world.trainer.num_params / 2e6
    meter = world.energy.meter
    tx = list(meter.joules[:, 1])  # CATEGORIES: compute, tx, rx, idle
    for client in range(6):
        gain = 10 ** (-(40 + 30 * math.log10(DISTANCES_M[client])) / 10)
        transmits = full_power_snr_db(DISTANCES_M[client]) >= 20.0
        expected = 3 * (rho0 / gain + 0.05) * slot if transmits else 0.0
        assert tx[client] == pytest.approx(expected, rel=1e-9)
        assert rho0 / gain <= dbm_to_watts(TX_DBM) or not transmits


def test_a_clean_channel_gives_fedavgs_model(tmp_path):
    """With every client above the threshold and 30 dB of receive SNR, over-the-air FedAvg
    follows digital FedAvg; at -10 dB the noise pulls it away."""
    models, transmitters = {}, {}
    for mode, snr_db in (("digital", 30.0), ("aircomp", 30.0), ("noisy", -10.0)):
        data = air_scenario(tmp_path / mode, "digital" if mode == "digital" else "aircomp")
        data["system"]["radio"]["tx_power_dbm"] = 60.0  # 36 dB at the farthest client
        data["system"]["radio"]["aircomp"]["receive_snr_db"] = snr_db
        world = make_world(data, tmp_path / mode)
        run_world(world)
        models[mode] = world.models
        if mode != "digital":
            rows = read_rounds(tmp_path / mode / "run")
            transmitters[mode] = [int(r["air_transmitters"]) for r in rows]

    def distance(mode: str) -> float:
        return float((models["digital"] - models[mode]).norm() / models["digital"].norm())

    assert transmitters == {"aircomp": [6, 6, 6], "noisy": [6, 6, 6]}
    assert distance("aircomp") < 0.01
    assert distance("noisy") > 10 * distance("aircomp")


def test_the_default_uplink_writes_the_files_as_before(tmp_path):
    data = tiny_scenario(tmp_path, system={"radio": {"cell_radius_m": 400}})
    data["system"]["network"] = {"latency_s": 0.01}
    world = make_world(data, tmp_path)
    run_world(world)
    header = (tmp_path / "run" / "rounds.csv").read_text().splitlines()[0]
    assert "air_" not in header
    assert "uplink_aggregation" not in world.scenario.to_yaml()
    assert "aircomp" not in world.scenario.to_yaml()


# --- what validation refuses ---


@pytest.mark.parametrize(
    ("mode", "algorithm", "message"),
    [
        ("aircomp", {"name": "ucfl"}, "algorithms[0].name: ucfl cannot use system.radio"),
        ("aircomp", {"name": "fedbuff"}, "algorithms[0].name: fedbuff cannot use"),
        ("obda", {"name": "scaffold"}, "algorithms[0].name: scaffold cannot use"),
        (
            "aircomp",
            {"name": "fedavg", "compression": {"uplink": {"codec": "qsgd"}}},
            "algorithms[0].compression.uplink: with system.radio.uplink_aggregation aircomp",
        ),
    ],
)
def test_what_a_slot_cannot_serve_is_refused(tmp_path, mode, algorithm, message):
    data = tiny_scenario(tmp_path, system={"radio": {"uplink_aggregation": mode}})
    data["system"]["network"] = {"latency_s": 0.01}
    assert_refused(tmp_path, algorithm, message, data)


def test_scaffold_sends_both_tensors_in_one_slot(tmp_path):
    """SCAFFOLD's Δy and Δc go in one slot of 2d reals; on a clean channel its x follows
    digital SCAFFOLD's."""
    models, slots = {}, {}
    for mode in ("digital", "aircomp"):
        data = air_scenario(tmp_path / mode, mode, algorithms=[{"name": "scaffold"}])
        data["system"]["radio"]["tx_power_dbm"] = 60.0
        data["system"]["radio"]["aircomp"]["receive_snr_db"] = 30.0
        world = make_world(data, tmp_path / mode)
        run_world(world)
        models[mode] = world.models
        if mode == "aircomp":
            slots = {float(r["air_slot_s"]) for r in read_rounds(tmp_path / mode / "run")}
    (slot,) = slots
    assert slot == pytest.approx(2 * world.trainer.num_params / 2e6)
    difference = (models["digital"] - models["aircomp"]).norm() / models["digital"].norm()
    assert float(difference) < 0.01


def test_the_figure_compares_the_uplinks_by_client_count(tmp_path):
    from analysis.figures import plot_runs
    from analysis.results import find_runs

    folders = []
    for mode in ("digital", "aircomp", "obda"):
        for count in (6, 12):
            folder = tmp_path / f"{mode}{count}"
            world = make_world(air_scenario(folder, mode, count=count), folder)
            run_world(world)
            folders.append(folder / "run")
    runs = find_runs(folders)
    written = plot_runs(runs, tmp_path / "figures")
    assert tmp_path / "figures" / "aircomp.png" in written
    assert (tmp_path / "figures" / "aircomp.png").stat().st_size > 10_000


def test_the_event_check_refuses_an_offline_transmitter():
    from fedsim.sim.event_check import check_event_records

    records = [
        {"t": 0.0, "kind": "run_start", "clients": [0, 1]},
        {"t": 1.0, "kind": "offline", "client": 1},
        {"t": 2.0, "kind": "air_slot", "transmitters": [0, 1], "truncated": [], "duration_s": 0.1},
        {"t": 3.0, "kind": "run_end"},
    ]
    report = check_event_records(records)
    assert report.violations == [
        "line 3 (air_slot): client 1 transmits in an over-the-air slot while offline"
    ]


def test_a_sweep_of_the_uplink_keeps_the_slot_settings_in_the_resolved_file(tmp_path):
    """A study sweeping uplink_aggregation from digital keeps its aircomp section (the obda
    runs need it when the study's scenario.yaml is read again)."""
    from fedsim.config import parse_scenario

    data = air_scenario(tmp_path, "digital")
    data["sweep"] = {"system.radio.uplink_aggregation": ["digital", "obda"]}
    text = parse_scenario(data).to_yaml()
    assert "server_lr: 0.01" in text and "receive_snr_db: 20.0" in text
    assert "uplink_aggregation: digital" not in text  # the default, left out as before


def test_churn_and_a_deadline_never_put_an_offline_client_in_the_sum(tmp_path):
    """Clients going offline and back: every slot's transmitters were online (the event
    check), transmitters + truncated = the updates the server kept, and the run ends."""
    data = air_scenario(tmp_path, "aircomp", count=12)
    data["clients"]["availability"] = {"kind": "renewal", "mean_online_s": 3, "mean_offline_s": 1}
    data["algorithms"] = [{"name": "fedavg", "deadline_s": 2.0}]
    data["run"] = {"time_budget_s": 40}
    data["output"]["events"] = True
    world = make_world(data, tmp_path)
    run_world(world)
    assert check_events(tmp_path / "run" / "events.jsonl").ok
    rows = [r for r in read_rounds(tmp_path / "run") if r["air_transmitters"]]
    assert len(rows) > 5
    for row in rows:
        assert int(row["air_transmitters"]) + int(row["air_truncated"]) == int(row["completed"])
    assert any(int(r["completed"]) < int(r["selected"]) for r in read_rounds(tmp_path / "run"))


def test_the_budget_labels_the_side_informations_rate_of_an_air_uplink(tmp_path, capsys):
    """Over the air the digital uplink carries a few bytes per client: its rate and rho are
    marked as that, not read as the model's."""
    data = air_scenario(tmp_path, "aircomp")
    data["sweep"] = {"system.radio.uplink_aggregation": ["digital", "aircomp"]}
    path = tmp_path / "air.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["budget", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if "up Mbps p10/p50/p90" in line)
    digital, aircomp = lines[header + 1 : header + 3]
    assert "aircomp" in aircomp and aircomp.count("*") == 2  # up Mbps and rho
    assert "digital" in digital and "*" not in digital
    assert any(
        line.startswith("*: over the air the updates go in one analog slot") for line in lines
    )
