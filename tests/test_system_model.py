"""The system model through the World: policies, stragglers, media, churn, invariants, budgets."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
import yaml

from fedsim.budget import budget_algorithm
from fedsim.config import parse_scenario
from fedsim.runner import build_dataset, build_trainers
from fedsim.sim.compute import device_speeds
from fedsim.sim.event_check import check_events
from fedsim.study import run_scenario
from tests.conftest import run_fedsim, tiny_scenario
from tests.test_fedavg_world import MLP_32_PARAMS, read_metrics

PAYLOAD = MLP_32_PARAMS * 4


def budgets(data: dict) -> list:
    scenario = parse_scenario(data)
    dataset = build_dataset(scenario)
    trainers = build_trainers(scenario, dataset)
    return [budget_algorithm(scenario, a, dataset, trainers) for a in scenario.algorithms]


def fast_links(**network: object) -> dict:
    return {"uplink_mbps": 10_000.0, "rho": 1.0, "latency_s": 0.0, **network}


def test_deadline_keeps_the_fraction_the_shifted_exponential_predicts(tmp_path):
    t_min_s, mean_s, deadline_s = 1.0, 2.0, 3.0  # links so fast that compute decides
    data = tiny_scenario(
        tmp_path,
        clients={"count": 300},
        dataset={"num_samples": 3000},
        system={"network": fast_links(), "compute": {"t_min_s": t_min_s, "mean_extra_s": mean_s}},
        algorithms=[{"name": "fedavg", "deadline_s": deadline_s}],
        run={"rounds": 20},
    )
    [budget] = budgets(data)
    expected = 1 - math.exp(-(deadline_s - t_min_s) / mean_s)  # 0.632
    assert budget.participants_per_round / 300 == pytest.approx(expected, abs=0.03)
    assert budget.round_s == pytest.approx(deadline_s)


def test_waiting_for_all_lasts_t_min_plus_harmonic_times_mean(tmp_path):
    data = tiny_scenario(
        tmp_path,
        clients={"count": 50},
        dataset={"num_samples": 1000},
        system={"network": fast_links(), "compute": {"t_min_s": 1.0, "mean_extra_s": 1.0}},
        run={"rounds": 200},
    )
    [budget] = budgets(data)
    # E[max of 50] = 1 + H_50 = 5.499; std of the mean of 200 maxima ~ 1.28 / sqrt(200)
    assert budget.closed_form_round_s == pytest.approx(1 + 4.4992, abs=1e-3)
    assert budget.round_s == pytest.approx(budget.closed_form_round_s, abs=0.3)
    assert budget.participants_per_round == 50


@pytest.mark.parametrize(
    ("network", "closed_form"),
    [
        # deterministic compute 0.5 s; each upload 8 * PAYLOAD / 1e6 s alone
        ({"uplink_medium": "tdma"}, lambda m, t_ul: 0.25 * t_ul + 0.5 + m * (0.01 + t_ul)),
        (
            {"uplink_medium": "shared", "cell_capacity_mbps": 2.0},
            lambda m, t_ul: 0.25 * t_ul + 0.5 + 0.01 + m * t_ul / 2,
        ),
        ({"uplink_medium": "parallel"}, lambda m, t_ul: 0.25 * t_ul + 0.5 + 0.01 + t_ul),
    ],
)
def test_media_match_their_closed_forms(tmp_path, network, closed_form):
    data = tiny_scenario(
        tmp_path,
        system={
            "network": {"uplink_mbps": 1.0, "rho": 4.0, "latency_s": 0.01, **network},
            "compute": {"t_min_s": 0.5, "mean_extra_s": 0.0},
        },
    )
    [budget] = budgets(data)
    t_ul = 8 * PAYLOAD / 1e6
    expected = closed_form(6, t_ul) + 0.01  # + the broadcast's latency
    assert budget.round_s == pytest.approx(expected)
    assert budget.closed_form_round_s == pytest.approx(expected)
    assert budget.uplink_bytes_per_round == 6 * PAYLOAD
    assert budget.downlink_bytes_per_round == PAYLOAD


@pytest.mark.parametrize("downlink", ["broadcast", "unicast"])
def test_round_breakdown_splits_queueing_from_air_time(tmp_path, downlink):
    # 6 clients, deterministic compute, TDMA slots of 0.01 + t_ul each: the i-th uploader
    # idles (6 - i) slots after its upload; after a broadcast it queues (i - 1) slots, after
    # unicast copies (each waiting i - 1 copies) it arrives i - 1 copies later, so it queues
    # (i - 1) (slot - copy)
    data = tiny_scenario(
        tmp_path,
        system={
            "network": {"uplink_medium": "tdma", "downlink": downlink},
            "compute": {"t_min_s": 0.5, "mean_extra_s": 0.0},
        },
    )
    [budget] = budgets(data)
    t_ul = 8 * PAYLOAD / 1e6
    uplink_slot, copy_s = 0.01 + t_ul, 0.01 + t_ul / 4  # tiny: 1 Mbit/s up, rho 4, 10 ms
    assert budget.uplink_s == pytest.approx(uplink_slot)  # on the air, not ~3.5 slots
    staggered_s = copy_s if downlink == "unicast" else 0.0
    assert budget.uplink_queue_s == pytest.approx(2.5 * (uplink_slot - staggered_s))
    assert budget.downlink_s == pytest.approx(copy_s)
    assert budget.downlink_queue_s == pytest.approx(2.5 * copy_s if downlink == "unicast" else 0)
    assert budget.compute_s == pytest.approx(0.5)
    parts = [budget.downlink_queue_s, budget.downlink_s, budget.compute_s]
    parts += [budget.uplink_queue_s, budget.uplink_s, budget.waiting_s]
    assert min(parts) >= 0
    assert sum(parts) == pytest.approx(budget.round_s)
    assert budget.waiting_s == pytest.approx(2.5 * uplink_slot)


def test_breakdown_is_not_applicable_without_server_rounds(tmp_path):
    algorithms = [
        {"name": "local", "barrier": False, "label": "own_pace"},
        {"name": "fedbuff"},
        {"name": "local"},
    ]
    own_pace, fedbuff, in_rounds = budgets(tiny_scenario(tmp_path, algorithms=algorithms))
    for budget in (own_pace, fedbuff):
        assert budget.compute_s is None and budget.waiting_s is None and budget.round_s > 0
    # Local in rounds has a barrier: computing, then idle until the slowest has trained.
    assert in_rounds.downlink_s == in_rounds.uplink_s == 0.0
    assert in_rounds.compute_s > 0 and in_rounds.waiting_s > 0
    assert in_rounds.compute_s + in_rounds.waiting_s == pytest.approx(in_rounds.round_s)


def test_over_selection_keeps_the_first_k(tmp_path):
    data = tiny_scenario(
        tmp_path,
        clients={"count": 40},
        system={"network": fast_links(), "compute": {"t_min_s": 1.0, "mean_extra_s": 1.0}},
        algorithms=[
            {"name": "fedavg", "client_fraction": 0.25, "label": "plain"},
            {"name": "fedavg", "client_fraction": 0.25, "over_selection": 0.5, "label": "over"},
        ],
        run={"rounds": 100},
    )
    plain, over = budgets(data)
    assert plain.participants_per_round == over.participants_per_round == 10
    # the 10th of 15 arrivals comes well before the 10th of 10: H_15 - H_5 = 1.035 vs H_10 = 2.93
    assert over.round_s == pytest.approx(1 + 1.035, abs=0.2)
    assert plain.round_s == pytest.approx(1 + 2.929, abs=0.3)


def test_stragglers_are_an_exact_share_slowed_down():
    speeds = device_speeds(100, np.random.default_rng(0), [(0.5, 1.0), (0.5, 2.0)], 0.1, 5.0)
    slowed = np.isin(speeds, [1.0 / 5, 2.0 / 5])
    assert slowed.sum() == 10
    assert set(np.round(speeds[~slowed], 6)) <= {1.0, 2.0}


def test_a_straggler_sets_the_pace_of_waiting_for_all(tmp_path):
    system = {
        "network": fast_links(),
        "compute": {
            "t_min_s": 1.0,
            "mean_extra_s": 0.0,
            "stragglers": {"fraction": 0.2, "slowdown": 4.0},
        },
    }
    [budget] = budgets(tiny_scenario(tmp_path, clients={"count": 10}, system=system))
    assert budget.round_s == pytest.approx(4.0, rel=1e-3)


CHURN = {
    "count": 8,
    "availability": {"kind": "renewal", "mean_online_s": 30.0, "mean_offline_s": 10.0},
    "arrivals": {"reserve": 4, "schedule": [{"time_s": 20.0, "count": 3}], "rate_per_s": 0.01},
    "departures": {"schedule": [{"time_s": 40.0, "count": 2}]},
}


def test_churn_run_passes_the_event_invariants(tmp_path):
    data = tiny_scenario(
        tmp_path,
        dataset={"num_samples": 2400},
        clients=CHURN,
        algorithms=[
            {"name": "fedavg", "deadline_s": 6.0, "over_selection": 0.3},
            {"name": "local"},
        ],
        run={"rounds": None, "time_budget_s": 80.0},
        evaluation={"every_rounds": 2},
    )
    data["output"]["events"] = True
    results_dir = run_scenario(parse_scenario(data), show_progress=False)
    for label in ("fedavg", "local"):
        report = check_events(results_dir / label / "events.jsonl")
        assert report.ok, report.violations[:5]
        assert report.sent_bytes == report.received_bytes + report.wasted_bytes
        kinds = [json.loads(line)["kind"] for line in (results_dir / label / "events.jsonl").open()]
        assert 3 <= kinds.count("join") <= 4  # 3 scheduled, Poisson ones up to the reserve of 4
        assert kinds.count("leave") == 2
        assert "offline" in kinds and "online" in kinds
    activity = np.loadtxt(results_dir / "fedavg" / "activity.csv", delimiter=",", skiprows=1)
    assert activity[0, 1] == 8 and activity[:, 1].max() >= 11 - 2
    summary = json.loads((results_dir / "fedavg" / "summary.json").read_text())
    assert [e["event_time_s"] for e in summary["churn_events"]] == [20.0, 40.0]
    assert (results_dir / "active_clients.png").stat().st_size > 5000
    events_file = str(results_dir / "fedavg" / "events.jsonl")
    cli = run_fedsim("check-events", events_file)
    assert cli.returncode == 0 and "OK" in cli.stdout


def test_departure_mid_upload_is_wasted_not_received(tmp_path):
    # 4 clients, deterministic compute 1 s, uplink 0.2 Mbit/s: each upload takes 4.07 s,
    # broadcast 1.02 s; one client leaves at t = 4 s, in the middle of every upload.
    data = tiny_scenario(
        tmp_path,
        clients={"count": 4, "departures": {"schedule": [{"time_s": 4.0, "count": 1}]}},
        system={
            "network": {"uplink_mbps": 0.2, "rho": 4.0, "latency_s": 0.0},
            "compute": {"t_min_s": 1.0, "mean_extra_s": 0.0},
        },
        algorithms=[{"name": "fedavg", "deadline_s": 20.0}],
        run={"rounds": 1},
    )
    data["output"]["events"] = True
    results_dir = run_scenario(parse_scenario(data), show_progress=False)
    events = [json.loads(line) for line in (results_dir / "fedavg" / "events.jsonl").open()]
    [leave] = [e for e in events if e["kind"] == "leave"]
    starts = {e["transfer"]: e for e in events if e["kind"] == "send_start"}
    [abort] = [e for e in events if e["kind"] == "send_abort"]
    assert starts[abort["transfer"]]["sender"] == leave["client"]
    assert starts[abort["transfer"]]["direction"] == "uplink"
    t_dl, t_ul = 8 * PAYLOAD / 0.8e6, 8 * PAYLOAD / 0.2e6
    assert abort["bytes_sent"] == pytest.approx((4.0 - t_dl - 1.0) / t_ul * PAYLOAD, rel=1e-6)
    ends = [
        e
        for e in events
        if e["kind"] == "send_end" and starts[e["transfer"]]["direction"] == "uplink"
    ]
    assert len(ends) == 3 and all(starts[e["transfer"]]["sender"] != leave["client"] for e in ends)
    [row] = read_metrics(results_dir / "fedavg")
    assert row["participants"] == 3
    assert row["wasted_bytes"] == abort["bytes_sent"] and row["uplink_bytes"] == 3 * PAYLOAD
    assert row["time_s"] == pytest.approx(20.0)  # the server learns only at its deadline
    assert check_events(results_dir / "fedavg" / "events.jsonl").ok


@pytest.mark.parametrize("barrier", [False, True])
def test_newcomers_train_and_are_evaluated_under_local(tmp_path, barrier):
    data = tiny_scenario(
        tmp_path,
        clients={"count": 4, "arrivals": {"reserve": 2, "schedule": [{"time_s": 1.2, "count": 2}]}},
        system={"compute": {"t_min_s": 0.5, "mean_extra_s": 0.0}},
        algorithms=[{"name": "local", "barrier": barrier}],
        run={"rounds": 6},
    )
    results_dir = run_scenario(parse_scenario(data), show_progress=False)
    clients = np.loadtxt(results_dir / "local" / "clients.csv", delimiter=",", skiprows=1)
    evaluated = {r: set(clients[clients[:, 1] == r, 2].astype(int)) for r in range(1, 7)}
    assert evaluated[1] == evaluated[2] == {0, 1, 2, 3}  # rounds 1-2 end at 0.5 s and 1.0 s
    assert evaluated[6] == {0, 1, 2, 3, 4, 5}
    times = [row["time_s"] for row in read_metrics(results_dir / "local")]
    if barrier:  # round 3 (1.0 to 1.5 s) trains the four; the newcomers from round 4 on
        assert evaluated[3] == {0, 1, 2, 3, 4, 5}  # evaluated at their initial model
        assert times == pytest.approx([0.5, 1.0, 1.5, 2.0, 2.5, 3.0])
        rounds = list(csv.DictReader((results_dir / "local" / "rounds.csv").open()))
        assert [int(r["selected"]) for r in rounds] == [4, 4, 4, 6, 6, 6]
    else:  # they joined when round 2 was complete and count from there: round 3 ends at 1.7 s
        assert times[2] == pytest.approx(1.7)


def test_sweep_runs_every_value_into_one_folder(tmp_path):
    data = tiny_scenario(tmp_path, run={"rounds": 1}, sweep={"system.network.rho": [1.0, 4.0]})
    results_dir = run_scenario(parse_scenario(data), show_progress=False)
    fast, slow = (
        read_metrics(results_dir / "fedavg@rho=4.0"),
        read_metrics(results_dir / "fedavg@rho=1.0"),
    )
    assert fast[0]["time_s"] < slow[0]["time_s"]
    assert (
        yaml.safe_load((results_dir / "fedavg@rho=4.0" / "scenario.yaml").read_text())["system"][
            "network"
        ]["rho"]
        == 4.0
    )


def test_budget_cli_prints_bytes_and_breakdown(tmp_path):
    path = tmp_path / "s.yaml"
    data = tiny_scenario(
        tmp_path,
        clients={"count": 2000},
        dataset={"num_samples": 6000},
        algorithms=[{"name": "fedavg", "client_fraction": 0.1}],
    )
    path.write_text(yaml.safe_dump(data))
    out = tmp_path / "b.json"
    result = run_fedsim("budget", str(path), "--json", str(out))
    assert result.returncode == 0, result.stderr
    assert "closed_form_s" in result.stdout
    [budget] = json.loads(out.read_text())
    assert budget["uplink_bytes_per_round"] == 200 * PAYLOAD
    assert budget["downlink_bytes_per_round"] == PAYLOAD


def test_time_cadence_measures_at_fixed_instants_even_when_rounds_stall(tmp_path):
    data = tiny_scenario(
        tmp_path,
        clients={
            "count": 6,
            "availability": {"kind": "renewal", "mean_online_s": 3.0, "mean_offline_s": 3.0},
        },
        algorithms=[{"name": "local"}, {"name": "fedavg", "deadline_s": 3.0}],
        run={"rounds": None, "time_budget_s": 20.0},
        evaluation={"every_rounds": None, "every_s": 2.5},
    )
    results_dir = run_scenario(parse_scenario(data), show_progress=False)
    for label in ("local", "fedavg"):
        times = [row["time_s"] for row in read_metrics(results_dir / label)]
        assert times == pytest.approx([2.5 * k for k in range(1, 9)])  # the last one is at 20 s


def test_uploads_cut_by_a_deadline_are_wasted_in_the_round_that_cut_them(tmp_path):
    # every upload starts at T_dl + 0.5 s + 10 ms and is half on the air at the deadline
    t_ul = 8 * PAYLOAD / 1e6
    deadline_s = (0.01 + t_ul / 4) + 0.5 + 0.01 + t_ul / 2
    data = tiny_scenario(
        tmp_path,
        system={"compute": {"t_min_s": 0.5, "mean_extra_s": 0.0}},
        algorithms=[{"name": "fedavg", "deadline_s": deadline_s}],
        run={"rounds": 3},
    )
    results_dir = run_scenario(parse_scenario(data), show_progress=False)
    with (results_dir / "fedavg" / "rounds.csv").open() as f:
        cumulative = [int(row["wasted_bytes"]) for row in csv.DictReader(f)]
    per_round = np.diff([0, *cumulative])
    assert per_round == pytest.approx([6 * PAYLOAD / 2] * 3, abs=6)  # rounding: a byte each
    metrics = read_metrics(results_dir / "fedavg")
    assert [int(row["wasted_bytes"]) for row in metrics] == cumulative
    summary = json.loads((results_dir / "fedavg" / "summary.json").read_text())
    assert summary["wasted_bytes"] == cumulative[-1] == per_round.sum()


def test_serverless_rounds_break_down_without_negative_idle_time(tmp_path):
    # round 1 starts at t = 0, where a compute start of 0.0 was once read as "never started"
    data = tiny_scenario(
        tmp_path,
        system={"d2d": {"graph": "complete", "rate_mbps": 5.0}},
        algorithms=[{"name": "dsgd"}],
        run={"rounds": 3},
    )
    [budget] = budgets(data)
    assert budget.downlink_s == budget.downlink_queue_s == budget.uplink_s == 0.0
    assert budget.compute_s > 0 and budget.waiting_s > 0  # the peers' models arrive meanwhile
    assert budget.compute_s + budget.waiting_s == pytest.approx(budget.round_s)
