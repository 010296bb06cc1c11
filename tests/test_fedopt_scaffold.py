"""FedOpt server optimizers and SCAFFOLD on the World: bytes, invariants, wiring, learning."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
import torch

from fedsim.algorithms import scaffold
from fedsim.config import parse_scenario
from fedsim.study import run_scenario
from fedsim.world import World
from tests.conftest import requires_real_data, tiny_scenario
from tests.test_cfl_fedfomo import run_with_state
from tests.test_fedavg_world import MLP_32_PARAMS, read_metrics
from tests.test_system_model import budgets

MODEL_BYTES = MLP_32_PARAMS * 4


def run(tmp_path, algorithms: list[dict], **overrides: object) -> dict[str, list[dict]]:
    data = tiny_scenario(tmp_path, algorithms=algorithms, **overrides)
    results_dir = run_scenario(parse_scenario(data), show_progress=False)
    return {a.get("label", a["name"]): read_metrics(results_dir / a.get("label", a["name"]))
            for a in algorithms}  # fmt: skip


def test_sgd_with_server_lr_one_is_fedavg_byte_for_byte(tmp_path):
    algorithms = [
        {"name": "fedavg"},
        {"name": "fedavg", "label": "sgd_lr1", "server_optimizer": {"name": "sgd", "lr": 1.0}},
    ]
    run(tmp_path, algorithms)
    folder = tmp_path / "results" / "tiny"
    assert (folder / "sgd_lr1" / "metrics.csv").read_bytes() == (
        folder / "fedavg" / "metrics.csv"
    ).read_bytes()


def test_fedavgm_without_momentum_is_fedavg_up_to_rounding(tmp_path):
    rows = run(
        tmp_path,
        [{"name": "fedavg"}, {"name": "fedavgm", "server_optimizer": {"betas": [0.0, 0.99]}}],
    )
    for plain, momentum in zip(rows["fedavg"], rows["fedavgm"], strict=True):
        assert momentum["uplink_bytes"] == plain["uplink_bytes"]
        assert momentum["accuracy"] == pytest.approx(plain["accuracy"], abs=1 / 240 + 1e-9)
        assert momentum["train_loss"] == pytest.approx(plain["train_loss"], rel=1e-4)


@pytest.mark.parametrize(
    "algorithm",
    [
        {"name": "fedprox"},
        {"name": "fedavg_ft"},
        {"name": "ditto"},
        {"name": "ifca", "clusters": 2},
        {"name": "cfl", "warmup_rounds": 1, "eps1": 1e-9, "eps2": 1e6},
        {"name": "fedbuff", "buffer_size": 3},
    ],
)
def test_every_fedavg_family_server_steps_with_its_server_optimizer(tmp_path, algorithm):
    adam = {**algorithm, "label": "adam", "server_optimizer": {"name": "adam", "lr": 0.05}}
    rows = run(tmp_path, [algorithm, adam], run={"rounds": 3})
    plain, adaptive = rows[algorithm["name"]], rows["adam"]
    assert [r["uplink_bytes"] for r in adaptive] == [r["uplink_bytes"] for r in plain]
    # from round 2 on the clients train other models: the optimizer was applied
    assert adaptive[-1]["train_loss"] != pytest.approx(plain[-1]["train_loss"], rel=1e-3)


def test_oracle_steps_with_its_server_optimizer_too(tmp_path):
    grouped = {"partition": {"kind": "label_groups", "groups": 2}}
    algorithms = [
        {"name": "oracle"},
        {"name": "oracle", "label": "yogi", "server_optimizer": {"name": "yogi", "lr": 0.05}},
    ]
    rows = run(tmp_path, algorithms, dataset=grouped, run={"rounds": 3})
    assert rows["yogi"][-1]["train_loss"] != pytest.approx(rows["oracle"][-1]["train_loss"])


@pytest.mark.parametrize("downlink", ["broadcast", "unicast"])
def test_scaffold_sends_two_models_each_way(tmp_path, downlink):
    rows = run(
        tmp_path,
        [{"name": "scaffold", "client_fraction": 0.5}],
        system={"network": {"downlink": downlink}},
    )["scaffold"]
    transmissions = 1 if downlink == "broadcast" else 3  # 3 of the 6 clients each round
    for r, row in enumerate(rows, start=1):
        assert row["uplink_bytes"] == r * 3 * 2 * MODEL_BYTES  # Δy_i and Δc_i per participant
        assert row["downlink_bytes"] == r * transmissions * 2 * MODEL_BYTES  # x and c
    [budget] = budgets(
        tiny_scenario(tmp_path, algorithms=[{"name": "scaffold", "client_fraction": 0.5}])
    )
    assert budget.uplink_bytes_per_round == 3 * 2 * MODEL_BYTES  # the timing-only run too


@pytest.mark.parametrize(("fraction", "option"), [(1.0, "II"), (0.5, "II"), (0.5, "I")])
def test_scaffold_server_variate_is_the_mean_of_the_clients(tmp_path, fraction, option):
    # c <- c + (1/N) Σ_kept Δc_i keeps c = (1/N) Σ_i c_i (c_i = 0 before a client takes part)
    algorithm = {"name": "scaffold", "client_fraction": fraction, "control_update": option}
    state = scaffold.ScaffoldState()
    run_with_state(tiny_scenario(tmp_path, algorithms=[algorithm]), tmp_path, scaffold, state)
    assert state.controls  # some clients took part
    mean = sum(state.controls.values()) / 6
    assert torch.allclose(state.c, mean, atol=1e-6)
    assert float(state.c.norm()) > 0


def test_scaffold_forgets_the_variate_of_a_client_that_leaves(tmp_path):
    data = tiny_scenario(
        tmp_path,
        algorithms=[{"name": "scaffold", "deadline_s": 30.0}],
        clients={"departures": {"schedule": [{"time_s": 2.0, "count": 2}]}},
        run={"rounds": 4},
    )
    state = scaffold.ScaffoldState()
    world, _ = run_with_state(data, tmp_path, scaffold, state)
    assert len(world.present) == 4 and set(state.controls) == world.present


def update_dispersion(tmp_path, name: str, monkeypatch) -> list[float]:
    """Per round, how much the clients' model updates scatter around their mean, relative to
    the mean's size: Σ_i ||Δ_i − Δ̄||² / (n ||Δ̄||²), from the tensors put on the air."""
    sent: dict[int, torch.Tensor] = {}
    uploaded: dict[int, list[torch.Tensor]] = defaultdict(list)
    upload, send_down = World.upload, World.send_down

    def record_upload(self, client, *tensors, reference=None):
        uploaded[self.round_index].append(tensors[0])  # FedAvg: y_i; SCAFFOLD: Δy_i
        return (yield from upload(self, client, *tensors, reference=reference))

    def record_send_down(self, clients, *tensors):
        sent.setdefault(self.round_index, tensors[0])  # x
        return send_down(self, clients, *tensors)

    monkeypatch.setattr(World, "upload", record_upload)
    monkeypatch.setattr(World, "send_down", record_send_down)
    data = tiny_scenario(
        tmp_path / name,
        dataset={"num_samples": 3000, "partition": {"kind": "dirichlet", "alpha": 0.1}},
        clients={"count": 10},
        training={"lr": 0.05, "local_epochs": 3},
        algorithms=[{"name": name}],
        run={"rounds": 8},
    )
    run_scenario(parse_scenario(data), show_progress=False)
    monkeypatch.undo()
    dispersion = []
    for round_index, tensors in sorted(uploaded.items()):
        deltas = torch.stack(tensors) - (sent[round_index] if name == "fedavg" else 0)
        mean = deltas.mean(dim=0)
        spread = (deltas - mean).square().sum(dim=1).mean() / mean.square().sum()
        dispersion.append(float(spread))
    return dispersion


def test_scaffold_corrects_client_drift(tmp_path, monkeypatch):
    # Dirichlet(0.1) labels, 3 local epochs: FedAvg's clients drift towards their own optima
    # (updates scatter ~4x their mean); with c - c_i each follows the global direction.
    # Measured on seeds 1-3: FedAvg 3.6-7.0 per round, SCAFFOLD 1.0-2.7 from round 2 on.
    fedavg = update_dispersion(tmp_path, "fedavg", monkeypatch)
    scaffold_ = update_dispersion(tmp_path, "scaffold", monkeypatch)
    assert scaffold_[0] == pytest.approx(fedavg[0], rel=1e-4)  # round 1: c = c_i = 0
    assert np.mean(scaffold_[2:]) < 0.5 * np.mean(fedavg[2:])


def fashion_skew(tmp_path, seed: int) -> dict:
    """10 clients of 300 Fashion-MNIST images, Dirichlet(0.1) labels, 5 local epochs."""
    data = tiny_scenario(
        tmp_path / f"seed{seed}",
        dataset={"name": "fashion_mnist", "num_samples": 3000,
                 "partition": {"kind": "dirichlet", "alpha": 0.1, "min_samples_per_client": 20}},
        model={"name": "mlp", "hidden_sizes": [100]},
        clients={"count": 10},
        training={"lr": 0.02, "batch_size": 32, "local_epochs": 5},
        algorithms=[{"name": "fedavg"}, {"name": "scaffold"}],
        run={"rounds": 20},
    )  # fmt: skip
    data["seed"] = seed
    results_dir = run_scenario(parse_scenario(data), show_progress=False)
    return {name: read_metrics(results_dir / name) for name in ("fedavg", "scaffold")}


@requires_real_data
def test_scaffold_learns_a_label_skewed_fashion_mnist_split(tmp_path):
    rows = fashion_skew(tmp_path, seed=4)
    assert rows["scaffold"][-1]["accuracy"] > 0.7  # chance: 0.1
    assert rows["scaffold"][-1]["uplink_bytes"] == 2 * rows["fedavg"][-1]["uplink_bytes"]


@pytest.mark.slow
@requires_real_data
def test_scaffold_beats_fedavg_over_seeds(tmp_path):
    # Measured (2026-11-23, this split): mean of the last 5 evaluations over seeds 1-6,
    # FedAvg 75.8%, SCAFFOLD 77.4% (better on 4 of 6 seeds); a single seed can go either way.
    gains = []
    for seed in range(1, 7):
        rows = fashion_skew(tmp_path, seed)
        last = {name: np.mean([r["accuracy"] for r in rows[name][-5:]]) for name in rows}
        gains.append(last["scaffold"] - last["fedavg"])
    assert np.mean(gains) > 0
