"""Budgets at internet scale: a timing-only run of more clients than the data takes the
clients' sample counts from dataset.timing_samples, loads no data, and keeps the World's
per-client state lazy."""

from __future__ import annotations

import re

import numpy as np
import pytest
import yaml

from fedsim.budget import budget_algorithm
from fedsim.cli import main
from fedsim.config import ScenarioError, parse_scenario
from fedsim.config.data import pool_size
from fedsim.learn.data import ClientShard, CountShard
from fedsim.runner import build_dataset, build_trainers
from tests.conftest import tiny_scenario


def scenario_data(tmp_path, clients: int, apply: str = "when_short") -> dict:
    return tiny_scenario(
        tmp_path,
        dataset={"timing_samples": {"per_client": {"kind": "uniform", "low": 50, "high": 150},
                                    "apply": apply}},
        clients={"count": clients},
        system={"compute": {"t_min_s": 0.01, "mean_extra_s": 0.0, "per": "sample"}},
        algorithms=[{"name": "fedavg", "client_fraction": 0.01, "deadline_s": 60.0}],
        run={"rounds": 2},
    )  # fmt: skip


def test_more_clients_than_samples_get_counts_from_the_law(tmp_path):
    scenario = parse_scenario(scenario_data(tmp_path, clients=20_000))  # synthetic: 6,000
    dataset = build_dataset(scenario, timing_only=True)
    assert len(dataset.shards) == 20_000 and isinstance(dataset.shards[0], CountShard)
    counts = np.array([s.num_train for s in dataset.shards])
    assert counts.min() >= 50 and counts.max() <= 150 and abs(counts.mean() - 100) < 2
    budget = budget_algorithm(
        scenario, scenario.algorithms[0], dataset, build_trainers(scenario, dataset)
    )
    assert budget.rounds == 2 and budget.participants_per_round == 200
    # compute per sample at 10 ms: a round waits for its slowest of 200 (<= 150 samples)
    assert budget.compute_s == pytest.approx(0.01 * counts.mean(), rel=0.1)
    with pytest.raises(ValueError, match="no data to read"):
        _ = dataset.shards[0].x_train


def test_the_data_is_used_when_it_suffices_unless_always(tmp_path):
    few = parse_scenario(scenario_data(tmp_path, clients=100))
    assert isinstance(build_dataset(few, timing_only=True).shards[0], ClientShard)
    assert isinstance(build_dataset(few).shards[0], ClientShard)  # a real run: always data
    always = parse_scenario(scenario_data(tmp_path, clients=100, apply="always"))
    assert isinstance(build_dataset(always, timing_only=True).shards[0], CountShard)


def test_fedsim_budget_of_many_clients_from_the_command_line(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario_data(tmp_path, clients=50_000)))
    assert main(["budget", str(path)]) == 0
    assert "fedavg" in capsys.readouterr().out


def test_validate_shows_the_timing_samples_line_a_million_clients_need(tmp_path, capsys):
    """As a user writes it: the data cannot give a million clients one sample each, so validate
    says so, naming the line to add; with it the budget is valid and a training run refused."""
    data = scenario_data(tmp_path, clients=1_000_000)
    del data["dataset"]["timing_samples"], data["dataset"]["num_samples"]  # all 6,000
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert (
        "  clients.count: 1,000,000 clients but dataset synthetic has 6,000 samples, at least "
        "one per client: to budget without data, set dataset.timing_samples: add "
        "`timing_samples: {per_client: 600}` under dataset (fedsim budget then gives each "
        "client a sample count from that law)\n"
    ) in err
    [line] = re.findall(r"`(timing_samples: .*?)`", err)
    data["dataset"].update(yaml.safe_load(line))  # the line it shows, as the user adds it
    path.write_text(yaml.safe_dump(data))
    assert main(["validate", str(path)]) == 0
    capsys.readouterr()
    assert main(["run", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "clients.count: 1,000,000 clients but dataset synthetic has 6,000 samples" in err
    assert "a training run needs a sample per client (dataset.timing_samples gives" in err
    assert not (tmp_path / "results").exists()  # refused before any folder was made


@pytest.mark.parametrize(
    ("dataset", "clients", "expected"),
    [
        ({"num_samples": 1200}, {"count": 1201}, "1,201 clients but dataset synthetic has 1,200 "
         "samples (dataset.num_samples), at least one per client"),
        ({"num_samples": None}, {"count": 6000, "arrivals": {"reserve": 1}}, "6,001 clients "
         "(with the arrivals' reserve) but dataset synthetic has 6,000 samples"),
        ({"name": "cifar10", "num_samples": None}, {"count": 50_001}, "50,001 clients but "
         "dataset cifar10 has 50,000 samples"),
    ],
)  # fmt: skip
def test_the_clients_may_not_outnumber_the_samples_they_share(tmp_path, dataset, clients, expected):
    data = scenario_data(tmp_path, clients=1)
    del data["dataset"]["timing_samples"]
    data["dataset"].update(dataset)
    data["clients"].update(clients)
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(data)
    assert caught.value.problems[0].startswith(f"clients.count: {expected}")
    data["clients"]["count"] -= 1  # one sample each: valid
    assert parse_scenario(data).clients.total == pool_size(
        data["dataset"]["name"], data["dataset"]["num_samples"]
    )


def test_a_training_run_of_more_clients_than_samples_names_the_fields(tmp_path):
    scenario = parse_scenario(scenario_data(tmp_path, clients=20_000))
    with pytest.raises(ScenarioError) as caught:
        build_dataset(scenario)  # not a timing-only run
    [problem] = caught.value.problems
    assert problem.startswith("clients.count: 20,000 clients but dataset synthetic has 1,200")
    assert "dataset.timing_samples gives sample counts to fedsim budget only" in problem
