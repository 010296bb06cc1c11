"""The personalized-FL baselines: what they send, how they learn, and churn invariants."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from fedsim.algorithms import ALGORITHMS
from fedsim.config import ScenarioError, parse_scenario
from fedsim.sim.event_check import check_events
from fedsim.world import World
from tests.conftest import requires_real_data, tiny_scenario
from tests.test_fedavg_world import make_world, read_metrics, run_world
from tests.test_system_model import CHURN, budgets

P = (784 * 32 + 32) + (32 * 10 + 10)  # tiny_scenario's MLP: 1x28x28 -> 32 -> 10, 25,450 values
MODEL = P * 4  # bytes of one float32 model
BASELINES = ("fedprox", "fedavg_ft", "ditto", "oracle", "ifca")


def read_rounds(run_dir: Path) -> list[dict[str, float]]:
    with (run_dir / "rounds.csv").open() as f:
        return [
            {k: float(v) if v else float("nan") for k, v in r.items()} for r in csv.DictReader(f)
        ]


def per_round(rows: list[dict[str, float]], column: str) -> list[float]:
    """A cumulative byte column of rounds.csv as bytes per round."""
    return list(np.diff([0.0] + [r[column] for r in rows]))


@pytest.mark.parametrize(
    ("algorithm", "up_per_client", "down", "trainings"),
    [
        ({"name": "fedprox", "mu": 0.5}, MODEL, MODEL, 1),
        ({"name": "fedavg_ft", "finetune_epochs": 2}, MODEL, MODEL, 1),
        ({"name": "ditto", "lam": 0.5, "personal_epochs": 2}, MODEL, MODEL, 2),
        ({"name": "ifca", "clusters": 3}, (P + 1) * 4, 3 * MODEL, 1),  # model + cluster index
    ],
    ids=["fedprox", "fedavg_ft", "ditto", "ifca"],
)
def test_bytes_per_round_follow_the_papers(tmp_path, algorithm, up_per_client, down, trainings):
    data = tiny_scenario(
        tmp_path,
        system={"compute": {"t_min_s": 0.5, "mean_extra_s": 0.0}},
        algorithms=[{**algorithm, "client_fraction": 0.5}],  # m = 3 of 6 clients
    )
    world = make_world(data, tmp_path)
    run_world(world)
    rows = read_rounds(world.recorder.run_dir)
    assert len(rows) == 3 and all(r["completed"] == 3 for r in rows)
    assert per_round(rows, "uplink_bytes") == [3 * up_per_client] * 3
    assert per_round(rows, "downlink_bytes") == [down] * 3  # one broadcast
    assert [r["compute_s"] for r in rows] == pytest.approx([0.5 * trainings] * 3)  # Ditto: 2
    [budget] = budgets(data)  # the timing-only run (shape-only models) sends the same
    assert budget.uplink_bytes_per_round == 3 * up_per_client
    assert budget.downlink_bytes_per_round == down


def test_oracle_multicasts_each_group_its_own_model(tmp_path):
    data = tiny_scenario(
        tmp_path,
        dataset={"partition": {"kind": "label_groups", "groups": 3}},
        algorithms=[{"name": "oracle", "client_fraction": 0.5}],
        run={"rounds": 6},
    )
    data["output"]["events"] = True
    world = make_world(data, tmp_path)
    run_world(world)
    group = {c.id: c.shard.group for c in world.clients}
    events = [json.loads(line) for line in (world.recorder.run_dir / "events.jsonl").open()]
    multicasts: dict[int, list[set[int]]] = defaultdict(list)
    trained: dict[int, set[int]] = defaultdict(set)
    for e in events:
        if e["kind"] == "send_start" and e["direction"] == "downlink":
            multicasts[e["round"]].append(set(e["receivers"]))
            assert e["bytes"] == MODEL
        elif e["kind"] == "train_start":
            trained[e["round"]].add(e["client"])
    rows = read_rounds(world.recorder.run_dir)
    for round_index, down in enumerate(per_round(rows, "downlink_bytes"), start=1):
        receivers = multicasts[round_index]
        groups = [{group[c] for c in r} for r in receivers]
        assert all(len(g) == 1 for g in groups)  # each transmission serves one group...
        assert len(set().union(*groups)) == len(receivers)  # ...and each group once
        assert set().union(*receivers) == trained[round_index]  # exactly the selected
        assert down == len(receivers) * MODEL


def test_oracle_refuses_a_partition_without_groups(tmp_path):
    with pytest.raises(ScenarioError, match="algorithms\\[0\\].name: oracle needs true groups"):
        parse_scenario(tiny_scenario(tmp_path, algorithms=[{"name": "oracle"}]))


def test_ditto_clients_never_selected_keep_their_initial_personal_model(tmp_path):
    data = tiny_scenario(
        tmp_path, algorithms=[{"name": "ditto", "client_fraction": 0.5}], run={"rounds": 1}
    )
    data["output"]["events"] = True
    world = make_world(data, tmp_path)
    run_world(world)
    events = [json.loads(line) for line in (world.recorder.run_dir / "events.jsonl").open()]
    trainings = [e["client"] for e in events if e["kind"] == "train_start"]
    assert len(trainings) == 6 and len(set(trainings)) == 3  # global, then personal model
    with (world.recorder.run_dir / "clients.csv").open() as f:
        accuracy = {int(r["client"]): float(r["accuracy"]) for r in csv.DictReader(f)}
    initial = world.initial_params()
    for client in set(world.client_ids) - set(trainings):
        shard = world.clients[client].shard
        expected = world.trainer.evaluate(initial, shard.x_test, shard.y_test).accuracy
        assert accuracy[client] == pytest.approx(expected)


@pytest.mark.parametrize("name", BASELINES)
def test_churn_and_deadlines_keep_the_event_invariants(tmp_path, name):
    data = tiny_scenario(
        tmp_path,
        dataset={"num_samples": 2400, "partition": {"kind": "label_groups", "groups": 2}},
        clients=CHURN,
        algorithms=[{"name": name, "deadline_s": 6.0, "over_selection": 0.3}],
        run={"rounds": None, "time_budget_s": 60.0},
        evaluation={"every_rounds": None, "every_s": 10.0},
    )
    data["output"]["events"] = True
    world = make_world(data, tmp_path)
    world.run(ALGORITHMS[name](world, world.algorithm))  # as the runner does, without plots
    world.finish(complete=True)
    run_dir = world.recorder.run_dir
    report = check_events(run_dir / "events.jsonl")
    assert report.ok, report.violations[:5]
    assert report.sent_bytes == report.received_bytes + report.wasted_bytes
    assert report.wasted_bytes > 0  # churn and the deadline did cut work short
    rows = read_metrics(run_dir)
    assert len(rows) >= 5 and any(r["participants"] > 0 for r in rows)
    with (run_dir / "clients.csv").open() as f:
        evaluated = {int(r["client"]) for r in csv.DictReader(f)}
    assert max(evaluated) >= CHURN["count"]  # newcomers are measured too


# --- behaviour on Fashion-MNIST with two label groups ---------------------------------------

FASHION = {
    "seed": 3,
    "dataset": {
        "name": "fashion_mnist",
        "num_samples": 3000,
        "partition": {"kind": "label_groups", "groups": 2},
    },
    "model": {"name": "mlp", "hidden_sizes": [100]},
    "clients": {"count": 10},
    "training": {"lr": 0.05, "momentum": 0.9},
    "run": {"rounds": 3},
}
FASHION_RUNS = {
    "fedavg": {"name": "fedavg"},
    "fedprox_mu0": {"name": "fedprox", "mu": 0.0},
    "fedprox_mu1": {"name": "fedprox", "mu": 1.0},
    "fedavg_ft": {"name": "fedavg_ft"},
    "ditto": {"name": "ditto", "lam": 0.1},
    "oracle": {"name": "oracle"},
    "ifca": {"name": "ifca", "clusters": 2},
}


class Observed:
    """One run, watched from outside: its metrics, the model drift of every training, and
    what the last round handed to the evaluation."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.drift: list[float] = []  # ||trained - start|| per training
        self.last_models: object = None
        train, end_round = world.train, world.end_round

        def watched_train(client, params, **options):
            result = yield from train(client, params, **options)
            self.drift.append(float((result.params - params).norm()))
            return result

        def watched_end_round(round_index, params, participants):
            self.last_models = params
            end_round(round_index, params, participants)

        world.train, world.end_round = watched_train, watched_end_round
        self.rows = run_world(world)
        self.metrics_csv = (world.recorder.run_dir / "metrics.csv").read_bytes()


@pytest.fixture(scope="module")
def fashion(tmp_path_factory) -> dict[str, Observed]:
    tmp_path = tmp_path_factory.mktemp("fashion")
    return {
        label: Observed(
            make_world(tiny_scenario(tmp_path, **FASHION, algorithms=[algorithm]), tmp_path / label)
        )
        for label, algorithm in FASHION_RUNS.items()
    }


@requires_real_data
def test_personalized_baselines_beat_fedavg_on_label_groups(fashion):
    final = {label: run.rows[-1]["accuracy"] for label, run in fashion.items()}
    fedavg_best = max(r["accuracy"] for r in fashion["fedavg"].rows)  # 0.63; random: 0.10
    for label in ("oracle", "ditto", "fedavg_ft", "ifca"):  # 0.82 to 0.87 after 3 rounds
        assert final[label] > fedavg_best + 0.1, final


@requires_real_data
def test_ifca_recovers_the_true_groups(fashion):
    world = fashion["ifca"].world
    models = fashion["ifca"].last_models
    pairs = {(models.cluster_of(c), world.clients[c].shard.group) for c in world.client_ids}
    clusters, groups = {j for j, _ in pairs}, {g for _, g in pairs}
    assert len(pairs) == len(clusters) == len(groups) == 2  # a bijection clusters <-> groups


@requires_real_data
def test_fedprox_with_mu_zero_is_fedavg_and_a_large_mu_stays_near_the_global_model(fashion):
    assert fashion["fedprox_mu0"].metrics_csv == fashion["fedavg"].metrics_csv
    assert fashion["fedprox_mu0"].drift == fashion["fedavg"].drift
    # every FedProx training starts from the global model: its drift is ||w_i - w_global||
    assert np.mean(fashion["fedprox_mu1"].drift) < 0.75 * np.mean(fashion["fedavg"].drift)


@requires_real_data
def test_fine_tuning_takes_no_time_and_sends_nothing(fashion):
    columns = ("time_s", "uplink_bytes", "downlink_bytes", "participants")
    for ft, plain in zip(fashion["fedavg_ft"].rows, fashion["fedavg"].rows, strict=True):
        assert [ft[c] for c in columns] == [plain[c] for c in columns]
