"""Local training as a fair baseline: in rounds with a barrier it trains exactly the clients
a synchronous server with the same client_fraction selects, and after round r nobody has
trained more than r times; at its own pace the fast clients run ahead."""

from __future__ import annotations

import csv
import json
from collections import Counter, defaultdict

import pytest

from fedsim.config import ScenarioError, parse_scenario
from fedsim.study import run_scenario
from tests.conftest import tiny_scenario


def trainings_by_round(run_dir) -> dict[int, list[int]]:
    """The clients whose training ended in each round, from the event log."""
    rounds: dict[int, list[int]] = defaultdict(list)
    started: dict[int, int] = {}
    for line in (run_dir / "events.jsonl").open():
        event = json.loads(line)
        if event["kind"] == "train_start":
            started[event["client"]] = event["round"]
        elif event["kind"] == "train_end":
            rounds[started.pop(event["client"])].append(event["client"])
    return {r: sorted(clients) for r, clients in rounds.items()}


def test_local_with_a_fraction_trains_exactly_the_clients_fedavg_selects(tmp_path):
    data = tiny_scenario(
        tmp_path,
        clients={"count": 10},
        algorithms=[
            {"name": "fedavg", "client_fraction": 0.3},
            {"name": "local", "client_fraction": 0.3},
        ],
        run={"rounds": 5},
    )
    data["output"]["events"] = True
    results = run_scenario(parse_scenario(data), show_progress=False)
    fedavg, local = (trainings_by_round(results / label) for label in ("fedavg", "local"))
    assert sorted(local) == [1, 2, 3, 4, 5]
    assert local == fedavg  # the same draws of the same sampling stream
    assert all(len(clients) == 3 for clients in local.values())
    assert len(set().union(*map(set, local.values()))) > 3  # not the same three each round
    metrics = {
        label: list(csv.DictReader((results / label / "metrics.csv").open()))
        for label in ("fedavg", "local")
    }
    assert [row["participants"] for row in metrics["local"]] == ["3"] * 5
    # equal training: the same samples processed after every round, and it grows each round
    samples = [[int(row["samples_trained"]) for row in metrics[label]] for label in metrics]
    assert samples[0] == samples[1]
    assert all(a < b for a, b in zip(samples[0], samples[0][1:], strict=False))


@pytest.mark.parametrize("barrier", [True, False])
def test_after_round_r_nobody_trained_more_than_r_times_with_the_barrier(tmp_path, barrier):
    data = tiny_scenario(
        tmp_path,
        system={"compute": {"t_min_s": 0.2, "mean_extra_s": 1.0}},  # stragglers
        algorithms=[{"name": "local", "barrier": barrier}],
        run={"rounds": 6},
    )
    data["output"]["events"] = True
    run_dir = run_scenario(parse_scenario(data), show_progress=False) / "local"
    trained: Counter[int] = Counter()
    most_by_round_end = {}
    for line in (run_dir / "events.jsonl").open():
        event = json.loads(line)
        if event["kind"] == "train_end":
            trained[event["client"]] += 1
        elif event["kind"] == "round_end":
            most_by_round_end[event["round"]] = max(trained.values())
    ahead = [most - r for r, most in most_by_round_end.items()]
    if barrier:
        assert ahead == [0] * 6  # each round trains every client exactly once
    else:
        assert max(ahead) >= 1  # the fastest ran ahead of the round being closed


def test_a_fraction_without_the_barrier_is_refused(tmp_path):
    data = tiny_scenario(
        tmp_path, algorithms=[{"name": "local", "client_fraction": 0.5, "barrier": False}]
    )
    with pytest.raises(ScenarioError, match="client_fraction"):
        parse_scenario(data)


def test_work_outside_training_proper_is_counted_too(tmp_path):
    """FedeRiCo computes losses and gradients without world.train: its samples still count
    (one batch per gradient, a third of a sample per loss-only forward pass)."""
    data = tiny_scenario(
        tmp_path,
        system={"d2d": {"graph": "complete", "rate_mbps": 20.0}},
        training={"local_epochs": None, "local_steps": 1},
        algorithms=[{"name": "federico", "neighbours": 2}],
    )
    run_dir = run_scenario(parse_scenario(data), show_progress=False) / "federico"
    samples = [
        int(row["samples_trained"]) for row in csv.DictReader((run_dir / "metrics.csv").open())
    ]
    assert samples[0] > 0 and all(a < b for a, b in zip(samples, samples[1:], strict=False))


def test_local_by_size_trains_the_clients_perfed_ckt_selects(tmp_path):
    """sample_by_size: the draw ∝ n_k of PerFed-CKT's server, on the same stream (whose
    first draw PerFed-CKT spends on its bootstrap round, so its round r is local's r + 1)."""
    data = tiny_scenario(
        tmp_path,
        dataset={"partition": {"kind": "dirichlet", "alpha": 0.3}},
        clients={"count": 10},
        algorithms=[
            {"name": "perfed_ckt", "client_fraction": 0.3, "public_samples": 20},
            {"name": "local", "client_fraction": 0.3, "sample_by_size": True},
        ],
        run={"rounds": 6},
    )
    data["output"]["events"] = True
    results = run_scenario(parse_scenario(data), show_progress=False)
    perfed, local = (trainings_by_round(results / label) for label in ("perfed_ckt", "local"))
    assert all(len(clients) == 3 for clients in local.values())
    assert [local[r + 1] for r in range(1, 6)] == [perfed[r] for r in range(1, 6)]
