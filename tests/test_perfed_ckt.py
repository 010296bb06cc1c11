"""PerFed-CKT: outputs up, centroids down, heterogeneous models, co-distillation."""

from __future__ import annotations

import csv

import pytest

from fedsim.config import ScenarioError, parse_scenario
from fedsim.runner import build_dataset, build_trainers
from fedsim.study import run_scenario
from tests.conftest import requires_real_data, tiny_scenario
from tests.test_fedavg_world import read_metrics

MIX = {
    "name": None,
    "mix": [
        {"name": "mlp", "fraction": 0.5, "hidden_sizes": [32]},
        {"name": "lenet5", "fraction": 0.5},
    ],
}


def test_outputs_up_and_centroids_down(tmp_path):
    public, classes, clusters, m = 200, 10, 2, 3
    data = tiny_scenario(
        tmp_path,
        model=MIX,
        algorithms=[
            {"name": "perfed_ckt", "client_fraction": 0.5, "clusters": clusters,
             "public_samples": public, "public_batch_size": 32},
        ],
        training={"local_epochs": None, "local_steps": 5},
    )  # fmt: skip
    results_dir = run_scenario(parse_scenario(data), show_progress=False)
    matrix_bytes = public * classes * 4
    with (results_dir / "perfed_ckt" / "rounds.csv").open() as f:
        rounds = list(csv.DictReader(f))
    for r, row in enumerate(rounds, start=1):
        # bootstrap: m fresh-model output matrices; then m matrices up, c centroids down per round
        assert int(row["uplink_bytes"]) == (r + 1) * m * matrix_bytes
        assert int(row["downlink_bytes"]) == r * clusters * matrix_bytes
    assert read_metrics(results_dir / "perfed_ckt")[-1]["d2d_bytes"] == 0


def test_a_model_mix_gives_larger_models_to_larger_datasets(tmp_path):
    data = tiny_scenario(
        tmp_path, model=MIX, dataset={"partition": {"kind": "dirichlet", "alpha": 0.3}}
    )
    data["algorithms"] = [{"name": "local"}]
    scenario = parse_scenario(data)
    dataset = build_dataset(scenario)
    trainers = build_trainers(scenario, dataset)
    sizes = [s.num_train for s in dataset.shards]
    mlp = trainers[sizes.index(min(sizes))].num_params
    assert trainers[sizes.index(max(sizes))].num_params != mlp  # the largest got lenet5
    assert sorted({t.num_params for t in trainers}) == sorted({44_426, 784 * 32 + 32 + 330})


def test_a_model_mix_is_refused_for_algorithms_that_average(tmp_path):
    with pytest.raises(ScenarioError, match="averages parameters"):
        parse_scenario(tiny_scenario(tmp_path, model=MIX))


@requires_real_data
def test_heterogeneous_clients_learn_with_co_distillation(tmp_path):
    data = tiny_scenario(
        tmp_path,
        dataset={
            "name": "fashion_mnist",
            "num_samples": 3000,
            "partition": {"kind": "dirichlet", "alpha": 0.5},
        },
        model=MIX,
        clients={"count": 8},
        algorithms=[
            {"name": "perfed_ckt", "client_fraction": 0.5, "clusters": 2, "public_samples": 500}
        ],
        training={"lr": 0.05, "local_epochs": None, "local_steps": 20},
        run={"rounds": 6},
    )  # fmt: skip
    rows = read_metrics(run_scenario(parse_scenario(data), show_progress=False) / "perfed_ckt")
    assert rows[-1]["accuracy"] > 0.6  # random guessing: 0.1
    assert rows[-1]["accuracy"] > rows[0]["accuracy"]
