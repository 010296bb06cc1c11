"""End-to-end runs on the event clock: round times, bytes, files, determinism."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from fedsim.config import parse_scenario
from fedsim.results.files import METRICS_COLUMNS
from fedsim.results.recorder import Recorder
from fedsim.runner import build_dataset, build_trainers
from fedsim.study import run_scenario
from fedsim.world import World
from tests.conftest import requires_real_data, tiny_scenario

MLP_32_PARAMS = (784 * 32 + 32) + (32 * 10 + 10)  # synthetic 1x28x28, hidden [32], 10 classes


def read_metrics(run_dir: Path) -> list[dict[str, float]]:
    with (run_dir / "metrics.csv").open() as f:
        return [
            {k: float(v) if v else float("nan") for k, v in row.items()}
            for row in csv.DictReader(f)
        ]


def make_world(data: dict, tmp_path: Path) -> World:
    scenario = parse_scenario(data)
    dataset = build_dataset(scenario)
    algorithm = scenario.algorithms[0]
    recorder = Recorder(
        tmp_path / "run",
        scenario_name=scenario.name,
        label=algorithm.run_label,
        target_accuracy=scenario.evaluation.target_accuracy,
        resolved_scenario_yaml=scenario.to_yaml(),
        energy=scenario.system.energy is not None,
        over_the_air=scenario.system.uplink_aggregation != "digital",
    )
    return World(scenario, algorithm, dataset, build_trainers(scenario, dataset), recorder)


def run_world(world: World) -> list[dict[str, float]]:
    from fedsim.algorithms import ALGORITHMS

    world.env.process(ALGORITHMS[world.algorithm.name](world, world.algorithm))
    world.env.run(until=world.scenario.run.time_budget_s)
    world.finish(complete=True)
    return read_metrics(world.recorder.run_dir)


def deterministic_compute(**network: object) -> dict:
    return {
        "network": {"uplink_mbps": {"kind": "uniform", "low": 0.5, "high": 4.0}, "rho": 4.0,
                    "latency_s": 0.01, **network},
        "compute": {"t_min_s": 0.5, "mean_extra_s": 0.0},
    }  # fmt: skip


def test_parallel_round_time_is_max_of_downlink_compute_uplink(tmp_path):
    world = make_world(tiny_scenario(tmp_path, system=deterministic_compute()), tmp_path)
    payload = MLP_32_PARAMS * 4
    assert world.trainer.num_params == MLP_32_PARAMS
    links = list(world.network.links.values())
    t_dl = 0.01 + 8 * payload / min(link.downlink_bps for link in links)
    round_s = max(t_dl + 0.5 + 0.01 + 8 * payload / link.uplink_bps for link in links)
    rows = run_world(world)
    assert [r["time_s"] for r in rows] == pytest.approx([round_s, 2 * round_s, 3 * round_s])


def test_tdma_uplink_phase_is_the_sum_of_uploads(tmp_path):
    system = deterministic_compute(uplink_medium="tdma")
    world = make_world(tiny_scenario(tmp_path, system=system), tmp_path)
    payload = MLP_32_PARAMS * 4
    links = list(world.network.links.values())
    t_dl = 0.01 + 8 * payload / min(link.downlink_bps for link in links)
    round_s = t_dl + 0.5 + sum(0.01 + 8 * payload / link.uplink_bps for link in links)
    rows = run_world(world)
    assert rows[0]["time_s"] == pytest.approx(round_s)
    assert rows[2]["time_s"] == pytest.approx(3 * round_s)


@pytest.mark.parametrize(
    ("downlink", "precision_bits", "fraction", "down_messages", "up_messages"),
    [("broadcast", 32, 1.0, 1, 6), ("broadcast", 32, 0.5, 1, 3), ("unicast", 16, 0.5, 3, 3)],
)
def test_bytes_are_params_times_precision_times_messages(
    tmp_path, downlink, precision_bits, fraction, down_messages, up_messages
):
    system = {"network": {"downlink": downlink, "precision_bits": precision_bits}}
    algorithms = [{"name": "fedavg", "client_fraction": fraction}]
    world = make_world(tiny_scenario(tmp_path, system=system, algorithms=algorithms), tmp_path)
    rows = run_world(world)
    model_bytes = MLP_32_PARAMS * precision_bits // 8
    for r, row in enumerate(rows, start=1):
        assert row["downlink_bytes"] == r * down_messages * model_bytes
        assert row["uplink_bytes"] == r * up_messages * model_bytes
        assert row["participants"] == up_messages


def test_local_never_communicates_and_runs_at_its_own_pace(tmp_path):
    system = {"compute": {"t_min_s": 0.5, "mean_extra_s": 0.0}}
    world = make_world(
        tiny_scenario(tmp_path, system=system, algorithms=[{"name": "local", "barrier": False}]),
        tmp_path,
    )
    rows = run_world(world)
    assert [r["time_s"] for r in rows] == pytest.approx([0.5, 1.0, 1.5])
    assert all(r["uplink_bytes"] == 0 and r["downlink_bytes"] == 0 for r in rows)


def test_step_scaled_compute(tmp_path):
    system = {"compute": {"t_min_s": 0.01, "mean_extra_s": 0.0, "per": "step"}}
    data = tiny_scenario(tmp_path, system=system, algorithms=[{"name": "local"}],
                         training={"local_epochs": None, "local_steps": 7})  # fmt: skip
    rows = run_world(make_world(data, tmp_path))
    assert rows[0]["time_s"] == pytest.approx(7 * 0.01)


def test_time_budget_stops_the_run_and_keeps_the_last_round(tmp_path):
    data = tiny_scenario(
        tmp_path, run={"rounds": None, "time_budget_s": 4.0}, evaluation={"every_rounds": 2}
    )
    world = make_world(data, tmp_path)
    rows = run_world(world)
    assert rows and rows[-1]["time_s"] <= 4.0
    summary = json.loads((world.recorder.run_dir / "summary.json").read_text())
    assert summary["complete"] is True and summary["rounds"] == rows[-1]["round"]


def test_scenario_writes_results_plots_and_summary(tmp_path):
    data = tiny_scenario(
        tmp_path, algorithms=[{"name": "local"}, {"name": "fedavg", "label": "fedavg_all"}]
    )
    results_dir = run_scenario(parse_scenario(data), show_progress=False)
    assert (results_dir / "time_to_accuracy.png").stat().st_size > 5000
    assert (results_dir / "accuracy_vs_bytes.png").stat().st_size > 5000
    for label in ("local", "fedavg_all"):
        run_dir = results_dir / label
        with (run_dir / "metrics.csv").open() as f:
            assert next(csv.reader(f)) == list(METRICS_COLUMNS)
        rows = read_metrics(run_dir)
        assert len(rows) == 3
        with (run_dir / "clients.csv").open() as f:
            assert sum(1 for _ in f) == 1 + 3 * 6
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["final_accuracy"] == pytest.approx(rows[-1]["accuracy"])
        reached = [r for r in rows if r["accuracy"] >= 0.5]
        assert summary["time_to_target_s"] == (reached[0]["time_s"] if reached else None)
        resolved = parse_scenario(
            __import__("yaml").safe_load((run_dir / "scenario.yaml").read_text())
        )
        assert [a.run_label for a in resolved.algorithms] == [label]


def test_same_seed_gives_identical_metrics_files(tmp_path):
    first = run_scenario(parse_scenario(tiny_scenario(tmp_path / "a")), show_progress=False)
    second = run_scenario(parse_scenario(tiny_scenario(tmp_path / "b")), show_progress=False)
    for name in ("metrics.csv", "clients.csv"):
        assert (first / "fedavg" / name).read_bytes() == (second / "fedavg" / name).read_bytes()
    other = run_scenario(
        parse_scenario({**tiny_scenario(tmp_path / "c"), "seed": 4}), show_progress=False
    )
    assert (other / "fedavg" / "metrics.csv").read_bytes() != (
        first / "fedavg" / "metrics.csv"
    ).read_bytes()


def test_interrupted_run_keeps_what_it_measured(tmp_path):
    world = make_world(tiny_scenario(tmp_path, run={"rounds": 10}), tmp_path)

    def interrupt_after_two(round_index: int, time_s: float) -> None:
        if round_index == 2:
            raise KeyboardInterrupt

    world._progress = interrupt_after_two
    from fedsim.algorithms import ALGORITHMS

    world.env.process(ALGORITHMS["fedavg"](world, world.algorithm))
    with pytest.raises(KeyboardInterrupt):
        world.env.run()
    rows = read_metrics(world.recorder.run_dir)  # on disk before any clean-up ran
    assert [r["round"] for r in rows] == [1, 2]
    world.finish(complete=False)
    assert json.loads((world.recorder.run_dir / "summary.json").read_text())["complete"] is False


@requires_real_data
def test_fedavg_and_local_learn_real_fashion_mnist(tmp_path):
    data = tiny_scenario(
        tmp_path,
        dataset={"name": "fashion_mnist", "num_samples": 3000, "partition": {"kind": "iid"}},
        model={"name": "mlp", "hidden_sizes": [100]},
        clients={"count": 10},
        training={"lr": 0.05, "momentum": 0.9},
        algorithms=[{"name": "local"}, {"name": "fedavg"}],
    )
    results_dir = run_scenario(parse_scenario(data), show_progress=False)
    fedavg, local = read_metrics(results_dir / "fedavg"), read_metrics(results_dir / "local")
    assert fedavg[-1]["accuracy"] > 0.65  # random guessing: 0.10
    assert fedavg[-1]["worst_accuracy"] > 0.45
    assert fedavg[-1]["accuracy"] > local[-1]["accuracy"]  # iid data: collaboration pays
    assert fedavg[-1]["train_loss"] < fedavg[0]["train_loss"]


def test_train_indices_restrict_training_to_those_samples(tmp_path):
    world = make_world(tiny_scenario(tmp_path), tmp_path)
    shard = world.clients[0].shard
    keep = torch.arange(0, shard.num_train, 2)
    params = world.initial_params()
    process = world.env.process(world.train(0, params, steps=3, train_indices=keep))
    world.env.run()
    seed = world.streams.integer_seed("batches", 0, 0)
    expected = world.trainer.train(
        params, shard.x_train[keep], shard.y_train[keep], steps=3, seed=seed
    )
    assert torch.equal(process.value.params, expected.params)
