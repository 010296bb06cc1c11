"""Energy against closed forms: p·8S/r per transfer, κ·c·D·f² per computation, a battery
that empties at the instant predicted by hand (the client then leaves, cause ``battery``),
charging, the participation rule, conservation between energy.csv, metrics.csv and
summary.json, determinism, and outputs unchanged without ``system.energy``."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import pytest

from fedsim.config import ScenarioError, parse_scenario
from fedsim.results.files import METRICS_COLUMNS
from fedsim.sim.event_check import check_events
from fedsim.study import run_scenario
from tests.conftest import tiny_scenario
from tests.test_cellular import cellular_scenario
from tests.test_fedavg_world import MLP_32_PARAMS, read_metrics

PAYLOAD_BYTES = MLP_32_PARAMS * 4
UPLINK_BPS, DOWNLINK_BPS = 1e6, 4e6  # the tiny scenario's links
TX_W, RX_W = 0.1, 0.05  # 20 dBm
KAPPA, CYCLES, FREQUENCY_HZ = 1e-28, 1e4, 2e9
TRAIN_SAMPLES = 160  # 1200 synthetic samples over 6 clients, 80% for training, one epoch

E_TX = TX_W * 8 * PAYLOAD_BYTES / UPLINK_BPS
E_RX = RX_W * 8 * PAYLOAD_BYTES / DOWNLINK_BPS
E_COMPUTE = KAPPA * CYCLES * TRAIN_SAMPLES * FREQUENCY_HZ**2


def energy_scenario(tmp_path, battery: dict | None = None, **overrides) -> dict:
    data = tiny_scenario(
        tmp_path,
        system={
            "network": {"latency_s": 0.0},
            "compute": {
                "model": "cycles",
                "cycles": {"frequency_ghz": FREQUENCY_HZ / 1e9, "cycles_per_sample": CYCLES,
                           "capacitance": KAPPA},
            },
            "energy": {"tx_power_dbm": 20.0, "rx_power_w": RX_W,
                       **({"battery": battery} if battery else {})},
        },
        algorithms=[{"name": "fedavg", "deadline_s": 10.0}],
        **overrides,
    )  # fmt: skip
    data["output"]["events"] = True
    return data


def run(data: dict):
    return run_scenario(parse_scenario(data), show_progress=False) / "fedavg"


def last_rows(run_dir) -> dict[int, dict]:
    rows = {}
    for row in csv.DictReader((run_dir / "energy.csv").open()):
        rows[int(row["client"])] = row
    return rows


def test_transfers_cost_p_times_air_time_and_computations_kappa_c_d_f_squared(tmp_path):
    run_dir = run(energy_scenario(tmp_path))
    rounds, clients = 3, 6
    summary = json.loads((run_dir / "summary.json").read_text())
    energy = summary["energy_j"]
    assert energy["tx_j"] == pytest.approx(rounds * clients * E_TX, rel=1e-12)
    assert energy["rx_j"] == pytest.approx(rounds * clients * E_RX, rel=1e-12)
    assert energy["compute_j"] == pytest.approx(rounds * clients * E_COMPUTE, rel=1e-12)
    assert energy["wasted_j"] == 0.0
    # The cycles model gives the compute time: c·D/f.
    rows = list(csv.DictReader((run_dir / "rounds.csv").open()))
    assert [float(r["compute_s"]) for r in rows] == pytest.approx([CYCLES * 160 / 2e9] * 3)


@pytest.mark.parametrize("efficiency", [1.0, 0.5])
def test_a_transmitter_draws_its_radiated_power_over_the_amplifier_efficiency(tmp_path, efficiency):
    """p/η + P_circuit over the air time: η = 0.5 is the circuit part plus twice the transmit
    part; η = 1 is the model without an amplifier (today's)."""
    circuit_w = 0.02
    data = energy_scenario(tmp_path)
    data["system"]["energy"].update(circuit_power_w=circuit_w, pa_efficiency=efficiency)
    energy = json.loads((run(data) / "summary.json").read_text())["energy_j"]
    air_s = 8 * PAYLOAD_BYTES / UPLINK_BPS
    transmit_j, circuit_j = 3 * 6 * TX_W * air_s, 3 * 6 * circuit_w * air_s
    expected_j = circuit_j + (2 * transmit_j if efficiency == 0.5 else transmit_j)
    assert energy["tx_j"] == pytest.approx(expected_j, rel=1e-12)
    assert energy["compute_j"] == pytest.approx(3 * 6 * E_COMPUTE, rel=1e-12)


def test_the_amplifier_efficiency_changes_what_is_drawn_not_what_is_radiated(tmp_path):
    """With power control (the power follows each share of the band) and no circuit power,
    η = 0.5 doubles every client's transmit joules; radio.csv (the power radiated) is the
    same."""
    joules, radio = {}, {}
    for efficiency in (1.0, 0.5):
        control = {"p0_dbm": -100, "alpha": 0.8}
        data = cellular_scenario(tmp_path / str(efficiency), {"power_control": control})
        data["system"]["energy"] = {"pa_efficiency": efficiency}
        run_dir = run(data)
        joules[efficiency] = {c: float(r["tx_j"]) for c, r in last_rows(run_dir).items()}
        radio[efficiency] = (run_dir / "radio.csv").read_text()
    assert any(joules[1.0].values())
    assert joules[0.5] == pytest.approx({c: 2 * j for c, j in joules[1.0].items()}, rel=1e-12)
    assert radio[0.5] == radio[1.0]
    assert "mean_tx_power_dbm" in radio[1.0].splitlines()[0]


def test_energy_is_conserved_across_energy_csv_metrics_and_summary(tmp_path):
    run_dir = run(energy_scenario(tmp_path))
    per_client = last_rows(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    final = read_metrics(run_dir)[-1]
    for column in ("compute_j", "tx_j", "rx_j", "idle_j", "wasted_j"):
        total = sum(float(row[column]) for row in per_client.values())
        assert total == pytest.approx(summary["energy_j"][column], rel=1e-12)
        assert total == pytest.approx(final[column], rel=1e-12)
    spent = [sum(float(r[c]) for c in ("compute_j", "tx_j", "rx_j", "idle_j"))
             for r in per_client.values()]  # fmt: skip
    assert summary["energy_per_client_j"]["max"] == pytest.approx(max(spent))


def test_a_battery_empties_at_the_instant_predicted_by_hand_and_the_client_leaves(tmp_path):
    round_j = E_RX + E_COMPUTE + E_TX
    capacity_j = 2 * round_j + E_RX + E_COMPUTE + 0.5 * E_TX  # half-way through upload 3
    data = energy_scenario(tmp_path, battery={"capacity_j": capacity_j}, run={"rounds": 5})
    run_dir = run(data)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").open()]
    assert check_events(run_dir / "events.jsonl").ok
    leaves = [e for e in events if e["kind"] == "leave"]
    assert sorted(e["client"] for e in leaves) == list(range(6))
    assert all(e["cause"] == "battery" for e in leaves)
    for leave in leaves:
        uploads = [e for e in events if e["kind"] == "send_start" and e["direction"] == "uplink"
                   and e["sender"] == leave["client"]]  # fmt: skip
        assert len(uploads) == 3 and uploads[-1]["round"] == 3
        expected_s = uploads[-1]["t"] + 0.5 * 8 * PAYLOAD_BYTES / UPLINK_BPS
        assert leave["t"] == pytest.approx(expected_s, rel=1e-9)
    aborts = [e for e in events if e["kind"] == "send_abort"]
    assert len(aborts) == 6 and all(e["reason"] == "battery" for e in aborts)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["battery_departures"] == 6
    assert summary["energy_j"]["wasted_j"] == pytest.approx(6 * 0.5 * E_TX, rel=1e-9)
    for row in last_rows(run_dir).values():
        assert float(row["battery_j"]) == pytest.approx(0.0, abs=1e-12)


def test_a_charging_client_goes_offline_and_comes_back_when_charged(tmp_path):
    round_j = E_RX + E_COMPUTE + E_TX
    charging = {"power_w": 0.01, "resume_fraction": 0.5}
    capacity_j = 1.5 * round_j
    data = energy_scenario(
        tmp_path, battery={"capacity_j": capacity_j, "charging": charging},
        run={"rounds": 3, "time_budget_s": 200},
    )  # fmt: skip
    run_dir = run(data)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").open()]
    assert check_events(run_dir / "events.jsonl").ok
    for client in range(6):
        offline = [e for e in events if e["kind"] == "offline" and e["client"] == client]
        online = [e for e in events if e["kind"] == "online" and e["client"] == client]
        assert offline and offline[0]["cause"] == "battery"
        assert online
        charge_s = 0.5 * capacity_j / charging["power_w"]
        assert online[0]["t"] - offline[0]["t"] == pytest.approx(charge_s, rel=1e-9)


def test_clients_below_the_minimum_battery_fraction_are_not_selected(tmp_path):
    round_j = E_RX + E_COMPUTE + E_TX
    data = energy_scenario(
        tmp_path, battery={"capacity_j": 10 * round_j, "min_fraction": 0.75},
        run={"rounds": 6},
    )  # fmt: skip
    run_dir = run(data)
    rows = list(csv.DictReader((run_dir / "rounds.csv").open()))
    # Each round costs a tenth of the battery: after 3 rounds 70% is left, below 75%.
    assert [int(r["selected"]) for r in rows[:3]] == [6, 6, 6]
    assert len(rows) == 3  # then nobody may take part: the server waits, the run ends


def test_same_seed_same_energy_files(tmp_path):
    outputs = []
    for name in ("a", "b"):
        data = energy_scenario(tmp_path / name, battery={"capacity_j": 1.0})
        data["clients"]["availability"] = {"kind": "renewal", "mean_online_s": 5,
                                           "mean_offline_s": 2}  # fmt: skip
        data["run"] = {"rounds": 4, "time_budget_s": 60}
        run_dir = run(data)
        outputs.append([(run_dir / f).read_bytes() for f in ("energy.csv", "metrics.csv")])
    assert outputs[0] == outputs[1]


def test_without_energy_the_outputs_keep_their_columns(tmp_path):
    run_dir = run(tiny_scenario(tmp_path))
    header = (run_dir / "metrics.csv").read_text().splitlines()[0]
    assert header == ",".join(METRICS_COLUMNS)
    assert not (run_dir / "energy.csv").exists()
    assert "energy_j" not in json.loads((run_dir / "summary.json").read_text())


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ({"compute": {"cycles": {"capacitance": -1e-28}}}, "system.compute.cycles.capacitance"),
        ({"energy": {"rx_power_w": -1}}, "system.energy.rx_power_w"),
        ({"energy": {"battery": {"capacity_j": 0}}}, "system.energy.battery.capacity_j"),
        ({"energy": {"battery": {"capacity_j": 5, "min_fraction": 1.5}}},
         "system.energy.battery.min_fraction"),
        ({"energy": {"pa_efficiency": 0}}, "system.energy.pa_efficiency"),
        ({"energy": {"pa_efficiency": 1.5}}, "system.energy.pa_efficiency"),
        ({"energy": {"pa_efficiency": True}}, "system.energy.pa_efficiency"),
    ],
)  # fmt: skip
def test_bad_energy_input_names_the_field(tmp_path, section, field):
    data = tiny_scenario(tmp_path, system=section)
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(data)
    assert any(p.startswith(field) for p in caught.value.problems), caught.value.problems


def test_a_transmit_power_beside_the_radio_is_an_error(tmp_path):
    data = tiny_scenario(tmp_path, system={"energy": {"tx_power_dbm": 15}, "radio": {}})
    data["system"]["network"] = {}
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(data)
    assert "system.energy.tx_power_dbm" in " ".join(caught.value.problems)
    assert "radio.tx_power_dbm" in " ".join(caught.value.problems)


def radio_energy_run(tmp_path, radio: dict) -> Path:
    """A run on a radio cell counting energy (circuit 0.02 W), with its event log."""
    data = tiny_scenario(
        tmp_path,
        system={"radio": radio, "energy": {"circuit_power_w": 0.02}},
        algorithms=[{"name": "fedavg", "deadline_s": 2.5}],
    )
    data["system"]["network"] = {}
    data["output"]["events"] = True
    return run(data)


def uploads_by_hand(run_dir: Path) -> tuple[float, Counter]:
    """Σ over uploads of the sender's drawn power × (end − start), and how the uploads ended
    (completed, or aborted by reason)."""
    power_w = {
        int(r["client"]): 10 ** (float(r["tx_power_dbm"]) / 10) / 1000 + 0.02
        for r in csv.DictReader((run_dir / "radio.csv").open())
    }
    events = [json.loads(line) for line in (run_dir / "events.jsonl").open()]
    started = {e["transfer"]: e for e in events if e["kind"] == "send_start"}
    expected_j, endings = 0.0, Counter()
    for e in events:
        if (
            e["kind"] in ("send_end", "send_abort")
            and started[e["transfer"]]["direction"] == "uplink"
        ):
            start = started[e["transfer"]]
            expected_j += power_w[start["sender"]] * (e["t"] - start["t"])
            endings[e.get("reason", "completed")] += 1
    return expected_j, endings


def test_with_the_radio_each_upload_costs_its_clients_power_times_its_air_time(tmp_path):
    run_dir = radio_energy_run(
        tmp_path,
        {"cell_radius_m": 300, "shadowing_db": 6, "uplink_bandwidth_hz": 2e5,
         "fading": {"model": "rayleigh", "coherence_s": 0.05},
         "tx_power_dbm": {"kind": "uniform", "low_dbm": 0, "high_dbm": 20}},
    )  # fmt: skip
    expected_j, endings = uploads_by_hand(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert endings["cancelled"] > 0  # the deadline cut some uploads: their joules are wasted
    assert summary["energy_j"]["tx_j"] == pytest.approx(expected_j, rel=1e-9)
    assert 0 < summary["energy_j"]["wasted_j"] < summary["energy_j"]["tx_j"] + 1e-12


def test_an_upload_the_link_gives_up_stops_drawing_power_when_it_ends(tmp_path):
    """Yang et al.'s per-upload rule loses the uploads below the SINR threshold: each still
    costs its power times its air time, and nothing after (the transmitter is off)."""
    run_dir = radio_energy_run(
        tmp_path,
        {"cell_radius_m": 500, "shadowing_db": 8, "uplink_bandwidth_hz": 2e5,
         "link": {"model": "per_upload", "sinr_threshold_db": 30.0}},
    )  # fmt: skip
    expected_j, endings = uploads_by_hand(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert endings["packet_error"] > 0  # some uploads fell below the threshold
    assert summary["energy_j"]["tx_j"] == pytest.approx(expected_j, rel=1e-9)


def test_a_share_under_one_prb_draws_its_share_of_the_power_and_the_circuits_throughout(tmp_path):
    """Six fixed sub-bands of half a PRB (3 PRBs on 1.08 MHz): each upload sends on one PRB in
    half the slots, so its battery pays p/2 + the circuits over its air time (before: p +
    the circuits, 1.7x the transmit joules at this power)."""
    run_dir = radio_energy_run(
        tmp_path,
        {"cell_radius_m": 150, "shadowing_db": 0, "uplink_bandwidth_hz": 1.08e6,
         "uplink_sharing": "fixed", "uplink_subbands": 6, "link": "harq", "tx_power_dbm": 13},
    )  # fmt: skip
    radiated_w = 10 ** (13 / 10) / 1000
    expected_j, _ = uploads_by_hand(run_dir)  # at p + the circuits
    air_s = (expected_j) / (radiated_w + 0.02)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["energy_j"]["tx_j"] == pytest.approx((0.5 * radiated_w + 0.02) * air_s, rel=1e-9)
