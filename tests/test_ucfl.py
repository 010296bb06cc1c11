"""User-centric FL: eq. (9) weights, silhouette streams, communication pattern, learning."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch

from fedsim.algorithms.ucfl import collaboration_weights
from fedsim.config import parse_scenario
from fedsim.learn.clustering import kmeans, silhouette
from fedsim.study import run_scenario
from tests.conftest import requires_real_data, tiny_scenario
from tests.test_fedavg_world import MLP_32_PARAMS, read_metrics
from tests.test_system_model import budgets


def test_weights_follow_equation_9():
    gradients = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 3.0]])
    sigma2, sizes = np.array([0.5, 2.0, 1.0]), np.array([10, 20, 30])
    weights = collaboration_weights(gradients, sigma2, sizes)
    delta = np.array([[0, 1, 9], [1, 0, 10], [9, 10, 0]], dtype=float)
    expected = sizes[None, :] * np.exp(-delta / (2 * sigma2[:, None]))
    expected /= expected.sum(axis=1, keepdims=True)
    assert weights == pytest.approx(expected)
    assert weights.sum(axis=1) == pytest.approx(np.ones(3))
    symmetric = collaboration_weights(gradients, sigma2, sizes, "symmetric")
    assert symmetric[0, 1] / symmetric[0, 0] == pytest.approx(
        2 * np.exp(-1 / (2 * np.sqrt(0.5 * 2)))
    )


def test_identical_clients_get_fedavg_weights_and_huge_distances_do_not_underflow():
    same = collaboration_weights(torch.ones(3, 4), np.ones(3), np.array([1, 2, 5]))
    assert same == pytest.approx(np.tile([1 / 8, 2 / 8, 5 / 8], (3, 1)))
    far = collaboration_weights(torch.tensor([[0.0], [1e6]]), np.array([1e-3, 1e-3]), np.ones(2))
    assert far == pytest.approx(np.eye(2))  # local learning, no 0/0


def test_kmeans_and_silhouette_find_four_blobs():
    rng = np.random.default_rng(0)
    points = np.concatenate([rng.normal(c, 0.1, (8, 2)) for c in [(0, 0), (3, 0), (0, 3), (3, 3)]])
    scores = {k: silhouette(points, kmeans(points, k, rng).labels) for k in range(2, 8)}
    assert max(scores, key=scores.get) == 4
    with pytest.raises(ValueError, match="two clusters"):
        silhouette(points, np.zeros(len(points)))


def test_setup_and_rounds_move_what_the_paper_says(tmp_path):
    data = tiny_scenario(
        tmp_path,
        dataset={"partition": {"kind": "label_groups", "groups": 2}},
        algorithms=[{"name": "ucfl", "streams": 2, "variance_batches": 3}],
        run={"rounds": 3},
    )
    results_dir = run_scenario(parse_scenario(data), show_progress=False)
    model_bytes, m = MLP_32_PARAMS * 4, 6
    setup_up = m * (MLP_32_PARAMS + 2) * 4  # g_i and {sigma_i^2, n_i} per client
    with (results_dir / "ucfl" / "rounds.csv").open() as f:
        rounds = list(csv.DictReader(f))
    for r, row in enumerate(rounds, start=1):
        assert int(row["downlink_bytes"]) == model_bytes * (1 + 2 * r)  # theta0 + k streams
        assert int(row["uplink_bytes"]) == setup_up + r * m * model_bytes
    assert float(rounds[0]["start_s"]) > 0  # the setup round takes simulated time


T_DL_S = 8 * MLP_32_PARAMS * 4 / 4e6  # one model at rho x 1 Mbit/s
H_100 = sum(1 / r for r in range(1, 101))


def ucfl_budget(tmp_path, timing: str, rounds: int, **algorithm: object):
    """100 clients, k = 4 streams, rho = 4, T_min = mean = T_dl, parallel uplink, no latency."""
    data = tiny_scenario(
        tmp_path,
        clients={"count": 100},
        dataset={"num_samples": 3000},
        system={
            "network": {"uplink_mbps": 1.0, "rho": 4.0, "latency_s": 0.0},
            "compute": {"t_min_s": T_DL_S, "mean_extra_s": T_DL_S},
        },
        algorithms=[{"name": "ucfl", "streams": 4, "timing": timing, **algorithm}],
        run={"rounds": rounds},
    )
    [budget] = budgets(data)
    return budget


@pytest.mark.parametrize(
    ("timing", "closed_form"),
    [
        # stream n (25 clients) arrives at n T_dl: E[max_n (n + 1 + M_25)] + rho, numerically
        ("pipelined", 13.245892),
        # everyone starts at 4 T_dl, uploads after the slowest: k + 1 + H_m + rho (the paper)
        ("barrier", 4 + 1 + H_100 + 4),
    ],
)
def test_budget_sends_k_streams_and_runs_the_round_time_of_its_closed_form(
    tmp_path, timing, closed_form
):
    rounds = 300
    budget = ucfl_budget(tmp_path, timing, rounds)
    assert budget.downlink_transmissions_per_round * rounds == pytest.approx(1 + 4 * rounds)
    assert budget.uplink_transmissions_per_round * rounds == pytest.approx(100 * (1 + rounds))
    assert budget.closed_form_round_s / T_DL_S == pytest.approx(closed_form, rel=1e-6)
    # sd of one round's max is about 1.3 T_dl: the mean of 300 is within 0.08 T_dl (1 sd)
    assert budget.round_s / T_DL_S == pytest.approx(closed_form, abs=0.3)


def test_no_closed_form_where_the_model_is_not_exact(tmp_path):
    assert ucfl_budget(tmp_path, "pipelined", 2, deadline_s=100.0).closed_form_round_s is None


@requires_real_data
def test_finds_four_label_permutation_groups_and_beats_fedavg_with_the_oracle(tmp_path):
    data = tiny_scenario(
        tmp_path,
        dataset={
            "name": "fashion_mnist",
            "num_samples": 4800,
            "partition": {"kind": "iid"},
            "group_shift": {"kind": "label_permutation", "groups": 4},
        },
        model={"name": "mlp", "hidden_sizes": [64]},
        clients={"count": 16},
        training={"lr": 0.05, "momentum": 0.9},
        algorithms=[{"name": "ucfl"}, {"name": "oracle"}, {"name": "fedavg"}],
        run={"rounds": 5},
    )
    results_dir = run_scenario(parse_scenario(data), show_progress=False)
    state = np.load(results_dir / "ucfl" / "collaboration.npz")
    with (results_dir / "ucfl" / "clients.csv").open() as f:
        group = {int(r["client"]): int(r["group"]) for r in csv.DictReader(f)}
    groups = np.array([group[c] for c in state["clients"]])
    weights = state["weights"]
    own_mass = [weights[i, groups == groups[i]].sum() for i in range(len(groups))]
    assert min(own_mass) > 0.7  # 4 groups: 0.25 by chance; measured 0.80-0.92
    assert len(state["centroids"]) == 4  # the silhouette peaks at the true number of groups
    pairs = set(zip(groups.tolist(), state["streams"].tolist(), strict=True))
    assert len(pairs) == 4  # streams = groups up to relabelling
    final = {label: read_metrics(results_dir / label)[-1] for label in ("ucfl", "oracle", "fedavg")}
    for label in ("ucfl", "oracle"):
        assert final[label]["accuracy"] > final["fedavg"]["accuracy"] + 0.2
        assert final[label]["worst_accuracy"] > final["fedavg"]["worst_accuracy"] + 0.2
