"""FedAsync and FedBuff: dispatch schedule and staleness, the update rules, drops, churn."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from fedsim.algorithms import ALGORITHMS
from fedsim.algorithms._async import staleness_weight
from fedsim.config import FedAsyncConfig
from fedsim.sim.event_check import check_events
from fedsim.world import World
from tests.conftest import tiny_scenario
from tests.test_fedavg_world import make_world, read_metrics, run_world
from tests.test_system_model import CHURN

MODEL = ((784 * 32 + 32) + (32 * 10 + 10)) * 4  # bytes of tiny_scenario's float32 MLP

# 3 clients, compute exactly 1 s per task, one of them a straggler taking 2.2 s; links so
# fast (0.08 ms a model) that only compute sets the order, and 2.2 s never ties with whole
# seconds. Every client is busy at once (max_concurrency 3), so every freed slot goes back
# to the client that freed it and the random choice of client cannot change the schedule.
THREE_CLIENTS = {
    "clients": {"count": 3},
    "system": {
        "network": {"uplink_mbps": 10_000.0, "rho": 1.0, "latency_s": 0.0},
        "compute": {
            "t_min_s": 1.0,
            "mean_extra_s": 0.0,
            "stragglers": {"fraction": 1 / 3, "slowdown": 2.2},
        },
    },
}


def run_async(tmp_path: Path, algorithm: dict, rounds: int) -> tuple[World, dict]:
    data = tiny_scenario(tmp_path, **THREE_CLIENTS, algorithms=[algorithm], run={"rounds": rounds})
    world = make_world(data, tmp_path)
    run_world(world)
    return world, dict(np.load(world.recorder.run_dir / "async.npz"))


def roles(world: World, clients: np.ndarray) -> list[list[str]]:
    """Client ids as 'a' (the fast client served first), 'b' (the other fast one), 's' (slow)."""
    slow = next(c.id for c in world.clients if c.speed < 1)
    first_fast = int(clients.flat[0])
    return [["s" if c == slow else "a" if c == first_fast else "b" for c in row] for row in clients]


def test_fedasync_applies_updates_in_arrival_order_with_their_staleness(tmp_path):
    world, saved = run_async(
        tmp_path, {"name": "fedasync", "max_concurrency": 3, "staleness": "constant"}, rounds=12
    )
    # a, b (fast) and s (slow) all get version 0 at t = 0; each update bumps the version and
    # its sender is sent the new model at once. τ = version at arrival - version carried.
    #   t=1: a (v0) τ=0 -> v1, a gets v1      b (v0) τ=1 -> v2, b gets v2
    #   t=2: a (v1) τ=1 -> v3, a gets v3      b (v2) τ=1 -> v4, b gets v4
    #   t=2.2: s (v0) τ=4 -> v5, s gets v5
    #   t=3: a (v3) τ=2 -> v6                 b (v4) τ=2 -> v7
    #   t=4: a (v6) τ=1 -> v8                 b (v7) τ=1 -> v9
    #   t=4.4: s (v5) τ=4 -> v10
    #   t=5: a (v8) τ=2 -> v11                b (v9) τ=2 -> v12
    assert saved["times"] == pytest.approx([1, 1, 2, 2, 2.2, 3, 3, 4, 4, 4.4, 5, 5], abs=0.01)
    assert saved["staleness"].ravel().tolist() == [0, 1, 1, 1, 4, 2, 2, 1, 1, 4, 2, 2]
    assert "".join(r[0] for r in roles(world, saved["clients"])) == "ababsababsab"
    rows = read_metrics(world.recorder.run_dir)
    assert [r["round"] for r in rows] == list(range(1, 13))  # one round per update
    assert all(r["participants"] == 1 for r in rows)
    assert rows[-1]["uplink_bytes"] == 12 * MODEL  # one model up per update
    # 3 first dispatches, and a re-dispatch after each update but the last (the run ends)
    assert rows[-1]["downlink_bytes"] == 14 * MODEL


def test_fedbuff_flushes_every_k_updates_with_their_staleness(tmp_path):
    world, saved = run_async(
        tmp_path, {"name": "fedbuff", "max_concurrency": 3, "buffer_size": 2}, rounds=5
    )
    # K = 2: the version only moves when the buffer is full, so a slot freed by the first
    # update of a buffer is re-filled with the version still in force.
    #   t=1:   a (v0) τ=0 buffered, a gets v0;  b (v0) τ=0 -> flush v1, b gets v1
    #   t=2:   a (v0) τ=1 buffered, a gets v1;  b (v1) τ=0 -> flush v2, b gets v2
    #   t=2.2: s (v0) τ=2 buffered, s gets v2
    #   t=3:   a (v1) τ=1 -> flush v3, a gets v3;  b (v2) τ=1 buffered, b gets v3
    #   t=4:   a (v3) τ=0 -> flush [b, a] v4, a gets v4;  b (v3) τ=1 buffered, b gets v4
    #   t=4.4: s (v2) τ=2 -> flush [b, s] v5
    assert saved["times"] == pytest.approx([1, 2, 3, 4, 4.4], abs=0.01)
    assert saved["staleness"].tolist() == [[0, 0], [1, 0], [2, 1], [1, 0], [1, 2]]
    assert ["".join(r) for r in roles(world, saved["clients"])] == ["ab", "ab", "sa", "ba", "bs"]
    rows = read_metrics(world.recorder.run_dir)
    assert all(r["participants"] == 2 for r in rows)
    assert rows[-1]["uplink_bytes"] == 10 * MODEL  # a delta is model-sized


FAST_IDENTICAL = {
    "network": {"uplink_mbps": 10_000.0, "rho": 1.0, "latency_s": 0.0},
    "compute": {"t_min_s": 1.0, "mean_extra_s": 0.0},
}


def first_model(tmp_path: Path, algorithm: dict, **overrides: dict) -> torch.Tensor:
    """The model the server holds after its first round (or update)."""
    data = tiny_scenario(
        tmp_path, system=FAST_IDENTICAL, algorithms=[algorithm], run={"rounds": 1}, **overrides
    )
    world = make_world(data, tmp_path / algorithm["name"])
    models = []
    end_round = world.end_round

    def keep_model(round_index: int, params: torch.Tensor, participants: int) -> None:
        models.append(params)
        end_round(round_index, params, participants)

    world.end_round = keep_model
    run_world(world)
    assert {world.num_train(c) for c in world.client_ids} == {1200 * 0.8 / len(world.clients)}
    return models[0]


def test_fedbuff_first_model_is_a_fedavg_round_with_equal_data(tmp_path):
    # 6 identical clients with 160 training samples each; K = concurrency = 6, constant
    # staleness, server lr 1: x0 + (1/6) Σ (x_i - x0) is FedAvg's sample-weighted mean.
    fedavg = first_model(tmp_path, {"name": "fedavg"})
    fedbuff = first_model(
        tmp_path,
        {"name": "fedbuff", "max_concurrency": 6, "buffer_size": 6, "staleness": "constant"},
    )
    torch.testing.assert_close(fedbuff, fedavg, rtol=0, atol=1e-6)


def test_fedasync_mixes_the_first_update_in_by_alpha(tmp_path):
    # one client: its first update (τ = 0) is FedAvg's first model; x1 = 0.7 x0 + 0.3 x_client
    initial = make_world(tiny_scenario(tmp_path), tmp_path / "init").initial_params()
    fedasync = {"name": "fedasync", "max_concurrency": 1, "mixing": 0.3}
    trained = first_model(tmp_path, {"name": "fedavg"}, clients={"count": 1})
    mixed = first_model(tmp_path, fedasync, clients={"count": 1})
    assert not torch.allclose(trained, initial)
    torch.testing.assert_close(mixed, 0.7 * initial + 0.3 * trained)


@pytest.mark.parametrize(
    ("kind", "a", "b", "weights"),
    [
        ("constant", 0.5, 4.0, {0: 1.0, 3: 1.0, 100: 1.0}),
        ("polynomial", 0.5, 4.0, {0: 1.0, 3: 0.5, 8: 1 / 3}),  # 1 / sqrt(1 + τ)
        ("polynomial", 1.0, 4.0, {0: 1.0, 4: 0.2, 9: 0.1}),  # 1 / (1 + τ)
        ("hinge", 10.0, 4.0, {0: 1.0, 4: 1.0, 5: 1 / 11, 6: 1 / 21}),  # 1 / (10 (τ - 4) + 1)
        ("hinge", 0.5, 0.0, {0: 1.0, 2: 0.5, 6: 0.25}),
    ],
)
def test_staleness_weights_follow_their_formulas(kind, a, b, weights):
    config = FedAsyncConfig(name="fedasync", staleness=kind, staleness_a=a, staleness_b=b)
    assert {tau: staleness_weight(config, tau) for tau in weights} == pytest.approx(weights)


def test_max_staleness_drops_updates_and_wastes_their_bytes(tmp_path):
    algorithm = {"name": "fedasync", "max_concurrency": 3, "max_staleness": 3}
    world, saved = run_async(tmp_path, algorithm, rounds=10)
    # the schedule of the first test, but the slow client's τ = 4 updates (t = 2.2 and 4.4)
    # are dropped: the version does not move, so fast updates stay at τ = 1.
    assert saved["staleness"].ravel().tolist() == [0, 1, 1, 1, 1, 1, 1, 1, 1, 1]
    assert "s" not in "".join(r[0] for r in roles(world, saved["clients"]))
    rows = read_metrics(world.recorder.run_dir)
    assert rows[-1]["time_s"] == pytest.approx(5, abs=0.01)
    assert rows[-1]["wasted_bytes"] == 2 * MODEL
    assert rows[-1]["uplink_bytes"] == 12 * MODEL  # received, then two of them discarded


@pytest.mark.parametrize(
    "algorithm",
    [
        {"name": "fedasync", "max_concurrency": 3, "task_timeout_s": 4.0, "max_staleness": 6},
        {"name": "fedbuff", "max_concurrency": 4, "buffer_size": 2, "task_timeout_s": 4.0},
    ],
    ids=["fedasync", "fedbuff"],
)
def test_churn_and_timeouts_keep_the_event_invariants(tmp_path, algorithm):
    # a straggler's task takes at least 8 x 0.5 s = 4 s: the timeout gives up on it
    data = tiny_scenario(
        tmp_path,
        dataset={"num_samples": 2400},
        clients=CHURN,
        system={"compute": {"stragglers": {"fraction": 0.25, "slowdown": 8.0}}},
        algorithms=[algorithm],
        run={"rounds": None, "time_budget_s": 80.0},
        evaluation={"every_rounds": None, "every_s": 10.0},
    )
    data["output"]["events"] = True
    world = make_world(data, tmp_path)
    world.run(ALGORITHMS[algorithm["name"]](world, world.algorithm))
    world.finish(complete=True)
    run_dir = world.recorder.run_dir
    report = check_events(run_dir / "events.jsonl")
    assert report.ok, report.violations[:5]
    assert report.sent_bytes == report.received_bytes + report.wasted_bytes
    assert report.wasted_bytes > 0  # churn cut work short
    events = [json.loads(line) for line in (run_dir / "events.jsonl").open()]
    training: set[int] = set()
    most_at_once = 0
    for event in events:
        if event["kind"] == "train_start":
            training.add(event["client"])
        elif event["kind"] in ("train_end", "train_abort"):
            training.discard(event["client"])
        most_at_once = max(most_at_once, len(training))
    assert most_at_once == algorithm["max_concurrency"]
    reasons = {e.get("reason") for e in events if e["kind"] == "train_abort"}
    assert reasons == {"lost", "cancelled"}  # offline, and given up at the timeout (stragglers)
    assert any(e["kind"] == "join" for e in events)
    rows = read_metrics(run_dir)
    assert len(rows) == 8 and rows[-1]["round"] >= 10


@pytest.mark.parametrize(
    "algorithm",
    [
        {"name": "fedasync", "max_concurrency": 3},
        {"name": "fedbuff", "max_concurrency": 4, "buffer_size": 3},
    ],
    ids=["fedasync", "fedbuff"],
)
def test_accuracy_improves_over_updates(tmp_path, algorithm):
    data = tiny_scenario(
        tmp_path,
        system={"compute": {"t_min_s": 0.5, "mean_extra_s": 0.5}},
        algorithms=[algorithm],
        run={"rounds": 30},
        evaluation={"every_rounds": 5},
    )
    rows = run_world(make_world(data, tmp_path))
    accuracies = [r["accuracy"] for r in rows]
    assert accuracies[-1] > accuracies[0] + 0.1 and accuracies[-1] > 0.7, accuracies
