"""Clustered FL and FedFomo: bytes from the recorder, clusters and affinities on label groups."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from fedsim.algorithms import cfl, fedfomo
from fedsim.sim.event_check import check_events
from tests.conftest import requires_real_data, tiny_scenario
from tests.test_fedavg_world import MLP_32_PARAMS, make_world, read_metrics, run_world
from tests.test_system_model import CHURN, budgets

MODEL_BYTES = MLP_32_PARAMS * 4  # 25,450 float32 parameters


def run_with_state(data: dict, tmp_path: Path, module: ModuleType, state: object):
    """Run one algorithm on its own World, handing ``state`` to its ``run``."""
    world = make_world(data, tmp_path)
    world.env.process(module.run(world, world.algorithm, state))
    world.env.run(until=world.scenario.run.time_budget_s)
    world.finish(complete=True)
    return world, read_metrics(world.recorder.run_dir)


def fashion_groups(tmp_path: Path, algorithm: dict, rounds: int) -> dict:
    """Fashion-MNIST in 2 label groups of 5 clients (240 training samples each)."""
    return tiny_scenario(
        tmp_path,
        dataset={"name": "fashion_mnist", "num_samples": 3000,
                 "partition": {"kind": "label_groups", "groups": 2}},
        clients={"count": 10},
        training={"lr": 0.05, "momentum": 0.9},
        algorithms=[algorithm],
        run={"rounds": rounds},
    )  # fmt: skip


# --- bipartition -------------------------------------------------------------------------------


def test_bipartition_is_complete_linkage():
    # points on a line, similarity = -distance: single linkage would chain 0..3 together
    x = np.array([0.0, 1.0, 2.0, 3.1, 4.2])
    assert cfl.bipartition(-abs(x[:, None] - x[None, :])) == [[0, 1], [2, 3, 4]]


def test_bipartition_matches_scipy_complete_linkage():
    hierarchy = pytest.importorskip("scipy.cluster.hierarchy")
    rng = np.random.default_rng(0)
    for size in (2, 3, 7, 20):
        points = rng.normal(size=(size, 5))
        directions = points / np.linalg.norm(points, axis=1, keepdims=True)
        similarity = directions @ directions.T
        distance = 1 - similarity[np.triu_indices(size, k=1)]  # -similarity, shifted
        labels = hierarchy.fcluster(hierarchy.linkage(distance, "complete"), 2, "maxclust")
        expected = sorted(sorted(np.flatnonzero(labels == k).tolist()) for k in (1, 2))
        assert sorted(cfl.bipartition(similarity)) == expected


def test_bipartition_of_a_slightly_asymmetric_similarity():
    # X Xᵀ from another BLAS kernel: symmetric up to the 7th digit. Nudging the lower triangle
    # up makes argmin name (i, j) with i > j first, which once merged the wrong groups and
    # popped past the end of the list (IndexError on AMD CPUs).
    rng = np.random.default_rng(1)
    centers = np.eye(8)[:2]
    points = np.repeat(centers, [4, 3], axis=0) + 0.05 * rng.normal(size=(7, 8))
    directions = points / np.linalg.norm(points, axis=1, keepdims=True)
    similarity = directions @ directions.T
    expected = [[0, 1, 2, 3], [4, 5, 6]]
    assert cfl.bipartition(similarity) == expected
    nudged = similarity + np.tril(np.full((7, 7), 3e-7), k=-1)
    assert cfl.bipartition(nudged) == expected
    assert cfl.bipartition(nudged.T) == expected


# --- bytes from the recorder -------------------------------------------------------------------


def test_cfl_bytes_are_one_multicast_per_cluster_and_one_update_per_client(tmp_path):
    # eps such that any cluster with two updates qualifies after round 1: clusters split every
    # round from round 2 until the cap of 4 (which halves depends on the updates' rounding)
    algorithm = {"name": "cfl", "warmup_rounds": 1, "eps1": 1e3, "eps2": 1e-6, "max_clusters": 4}
    data = tiny_scenario(tmp_path, algorithms=[algorithm], run={"rounds": 5})
    server = cfl.CflServer()
    _, rows = run_with_state(data, tmp_path, cfl, server)
    assert len(server.clusters) == 4 and sum(len(c.members) for c in server.clusters) == 6
    split_rounds = [r for r, _ in server.splits]
    assert split_rounds[0] == 2 and len(split_rounds) == 3
    assert set(split_rounds) == set(range(2, max(split_rounds) + 1))  # one round after another
    # everyone is selected, so every cluster (one more per earlier split) gets one multicast
    clusters_per_round = [
        1 + sum(r < round_index for r in split_rounds) for round_index in range(1, 6)
    ]
    down = up = 0
    for row, clusters in zip(rows, clusters_per_round, strict=True):
        down += clusters * MODEL_BYTES
        up += 6 * MODEL_BYTES
        assert (row["downlink_bytes"], row["uplink_bytes"]) == (down, up)


@pytest.mark.parametrize("downlink", ["broadcast", "unicast"])
def test_fedfomo_sends_m_models_to_each_client_and_gets_a_model_and_m_weights(tmp_path, downlink):
    m, models = 3, 4  # 6 clients, client_fraction 0.5
    algorithm = {"name": "fedfomo", "client_fraction": 0.5, "models_per_client": models}
    data = tiny_scenario(
        tmp_path, algorithms=[algorithm], system={"network": {"downlink": downlink}}
    )
    rows = run_world(make_world(data, tmp_path))
    for r, row in enumerate(rows, start=1):
        assert row["downlink_bytes"] == r * m * models * MODEL_BYTES  # a unicast each, always
        assert row["uplink_bytes"] == r * m * (MLP_32_PARAMS + models) * 4
    [budget] = budgets(data)  # the timing-only run sends the same
    assert budget.downlink_bytes_per_round == m * models * MODEL_BYTES
    assert budget.uplink_bytes_per_round == m * (MLP_32_PARAMS + models) * 4


# --- learning on label groups ------------------------------------------------------------------


def misplaced(clusters: list[set[int]], groups: list[int]) -> int:
    """Clients outside their cluster's majority group (the clusters relabelled at best)."""
    return sum(
        len(members) - max(np.bincount([groups[c] for c in members])) for members in clusters
    )


@requires_real_data
@pytest.mark.parametrize("fraction", [1.0, 0.6])
def test_cfl_finds_the_label_groups_after_warm_up(tmp_path, fraction):
    # update norms here: before the split the mean update is 0.5-1.8 and the largest 1.7-4;
    # inside a true group the largest stays below 0.9
    algorithm = {"name": "cfl", "client_fraction": fraction, "warmup_rounds": 5,
                 "eps1": 0.8, "eps2": 1.5}  # fmt: skip
    server = cfl.CflServer()
    world, rows = run_with_state(fashion_groups(tmp_path, algorithm, 12), tmp_path, cfl, server)
    groups = [c.shard.group for c in world.clients]
    clusters = [cluster.members for cluster in server.clusters]
    assert server.splits and all(r > 5 for r, _ in server.splits)  # nothing before warm-up
    assert len(clusters) == 2 and misplaced(clusters, groups) <= 1
    first_split = server.splits[0][0]
    assert rows[-1]["accuracy"] > rows[first_split - 2]["accuracy"] + 0.1  # before the split


@requires_real_data
def test_cfl_would_split_before_the_warm_up_ends(tmp_path):
    # the same set-up without warm-up: the criterion already holds in round 2
    algorithm = {"name": "cfl", "warmup_rounds": 0, "eps1": 0.8, "eps2": 1.5}
    server = cfl.CflServer()
    run_with_state(fashion_groups(tmp_path, algorithm, 3), tmp_path, cfl, server)
    assert server.splits and server.splits[0][0] <= 3


@requires_real_data
def test_fedfomo_weighs_its_own_group_and_beats_fedavg(tmp_path):
    algorithm = {"name": "fedfomo", "models_per_client": 3}
    state = fedfomo.FedFomoState()
    world, rows = run_with_state(
        fashion_groups(tmp_path / "fomo", algorithm, 10), tmp_path / "fomo", fedfomo, state
    )
    groups = np.array([c.shard.group for c in world.clients])
    clients = np.arange(len(groups))
    shares = []
    for i in clients:
        mass = state.affinity[i].sum()
        if mass > 0:
            shares.append(state.affinity[i, (groups == groups[i]) & (clients != i)].sum() / mass)
    assert len(shares) >= 7  # most clients found peers worth weighing
    assert min(shares) > 0.7
    fedavg = run_world(
        make_world(fashion_groups(tmp_path / "avg", {"name": "fedavg"}, 10), tmp_path / "avg")
    )
    assert rows[-1]["accuracy"] > fedavg[-1]["accuracy"] + 0.05


# --- churn and deadlines -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("algorithm", "module", "state"),
    [
        ({"name": "cfl", "warmup_rounds": 2, "eps1": 1e3, "eps2": 1e-6}, cfl, cfl.CflServer),
        ({"name": "fedfomo", "models_per_client": 3}, fedfomo, fedfomo.FedFomoState),
    ],
    ids=["cfl", "fedfomo"],
)
def test_churn_with_a_deadline_passes_the_event_invariants(tmp_path, algorithm, module, state):
    data = tiny_scenario(
        tmp_path,
        dataset={"num_samples": 2400},
        clients=CHURN,
        algorithms=[{**algorithm, "deadline_s": 6.0, "over_selection": 0.3}],
        run={"rounds": None, "time_budget_s": 80.0},
        evaluation={"every_rounds": 2},
    )
    data["output"]["events"] = True
    state = state()
    world, rows = run_with_state(data, tmp_path, module, state)
    report = check_events(world.recorder.run_dir / "events.jsonl")
    assert report.ok, report.violations[:5]
    assert report.sent_bytes == report.received_bytes + report.wasted_bytes > 0
    assert len(rows) >= 3
    if module is cfl:  # every present client in exactly one cluster
        assert state.splits
        assigned = sorted(c for cluster in state.clusters for c in cluster.members)
        assert assigned == world.client_ids
    else:
        assert sorted(state.client_models) == world.client_ids
