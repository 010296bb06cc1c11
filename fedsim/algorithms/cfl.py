"""Clustered FL (Sattler, Müller, Samek, 2020) on the wireless clock.

The server holds a list of clusters (client sets), one model each; at first one cluster of
everyone. Each synchronous round it samples clients among those online and multicasts each
cluster's model to that cluster's selected members (one transmission per cluster that has
selected members); every client trains and uploads its weight update Δθ_i = θ_i' − θ_c
(model-sized). The server closes the round by its policy (as FedAvg), then, after
``warmup_rounds``, splits every cluster c that got at least two updates this round and sits at
a stationary point of its joint objective while some member is far from its own:

    ‖mean_i Δθ_i‖ < eps1   and   max_i ‖Δθ_i‖ > eps2        (while < max_clusters clusters)

(the plain mean of the updates, as in the authors' code). The split is Sattler's optimal
bipartition: complete-linkage agglomerative clustering of the members' updates into two groups
on the negated cosine similarity. Members that sent no update this round join the half whose
mean update is closest (cosine) to their last known update, the first half if they never sent
one. Then, as in the paper's Algorithm 1, each (new) cluster adds the sample-weighted mean of
its own members' updates to its model, so both halves start from the split cluster's model.
Each client is evaluated on its cluster's model. With a ``server_optimizer`` each cluster
steps from its model towards model + that mean with an optimizer of its own, whose state
both halves of a split inherit. The server needs every update of the round to decide a split,
so it gathers them all (no running sum).

Scale: eps1 and eps2 bound Euclidean norms of parameter updates, which grow with the learning
rate, the local steps and the model's size; they have no universal values and must be tuned
per model and training set-up (e.g. from the update norms of a run without splits).

Memory: the server keeps the last update of every client that sent one (a model-sized vector
each) to place absent members at a split.

Churn: a newcomer joins the first cluster (the paper instead descends the tree of splits by
similarity, which needs extra messages); a client that leaves is removed, an emptied cluster
dropped. Other deviations: splits follow eps1/eps2 alone, without the paper's further test of
the bipartition's largest cross-cluster similarity (γ_max), as in the authors' code; that code
splits only clusters of more than two clients, here two updates are enough.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, field

import numpy as np
import simpy
import torch
import torch.nn.functional as F

from fedsim.algorithms._sync import server_optimizer
from fedsim.config import CflConfig
from fedsim.learn.aggregate import weighted_average
from fedsim.learn.server_optimizers import ServerOptimizer
from fedsim.world import World


@dataclass(eq=False)
class Cluster:
    members: set[int]
    model: torch.Tensor
    optimizer: ServerOptimizer


@dataclass
class CflServer:
    """What the server holds; pass one to ``run`` to read it after the run."""

    clusters: list[Cluster] = field(default_factory=list)
    last_update: dict[int, torch.Tensor] = field(default_factory=dict)  # per client
    splits: list[tuple[int, tuple[int, ...]]] = field(default_factory=list)  # (round, sizes)

    def cluster_of(self, client: int) -> Cluster:
        return next(c for c in self.clusters if client in c.members)


def run(
    world: World, config: CflConfig, server: CflServer | None = None
) -> Generator[simpy.Event, object, None]:
    server = CflServer() if server is None else server
    server.clusters.append(
        Cluster(
            set(world.client_ids), world.initial_params(), server_optimizer(config.server_optimizer)
        )
    )

    def join(client: int) -> None:
        server.clusters[0].members.add(client)

    def leave(client: int) -> None:
        cluster = server.cluster_of(client)
        cluster.members.discard(client)
        if not cluster.members and len(server.clusters) > 1:
            server.clusters.remove(cluster)

    world.on_join, world.on_leave = join, leave
    for round_index in world.rounds():
        selected = yield from world.select_clients(
            config.client_fraction, config.over_selection, config.selection
        )
        arrivals: dict[int, simpy.Event] = {}
        received: dict[int, torch.Tensor] = {}  # each receiver's cluster model, as decoded
        for cluster in server.clusters:
            receivers = [c for c in selected if c in cluster.members]
            if receivers:
                sent = world.send_down(receivers, cluster.model)
                arrivals |= sent.arrivals
                received |= dict.fromkeys(receivers, sent.received[0])
        tasks = {
            c: world.start_task(c, client_update(world, c, received[c], arrivals[c]))
            for c in selected
        }
        updates: dict[int, torch.Tensor] = yield from world.gather(
            tasks,
            deadline_s=config.deadline_s,
            keep_first=world.wanted_updates(config.client_fraction),
        )
        server.last_update |= updates
        if round_index > config.warmup_rounds and not world.timing_only:  # meta: no norms
            for cluster in list(server.clusters):
                deltas = [updates[c] for c in sorted(cluster.members) if c in updates]
                if len(server.clusters) < config.max_clusters and should_split(
                    deltas, config.eps1, config.eps2
                ):
                    halves = split(cluster, updates, server.last_update)
                    index = server.clusters.index(cluster)
                    server.clusters[index : index + 1] = halves
                    server.splits.append((round_index, tuple(len(h.members) for h in halves)))
        for cluster in server.clusters:
            mine = [c for c in sorted(cluster.members) if c in updates]
            if mine:
                mean_update = weighted_average(
                    [updates[c] for c in mine], [world.num_train(c) for c in mine]
                )
                cluster.model = cluster.optimizer.step(cluster.model, cluster.model + mean_update)
        models = {c: cluster.model for cluster in server.clusters for c in cluster.members}
        world.end_round(round_index, models, participants=len(updates))


def client_update(
    world: World, client: int, params: torch.Tensor, model_arrived: simpy.Event
) -> Generator[simpy.Event, object, torch.Tensor]:
    """Receive the cluster's model, train, upload the weight update Δθ = θ' − θ."""
    result = yield from world.train(client, params, model_arrives=model_arrived)
    (update,) = yield from world.upload(client, result.params - params)
    return update


def should_split(deltas: Sequence[torch.Tensor], eps1: float, eps2: float) -> bool:
    """Near a stationary point of the cluster's objective, yet far from some member's own."""
    if len(deltas) < 2:
        return False
    stacked = torch.stack(list(deltas))
    return bool(stacked.mean(dim=0).norm() < eps1 and stacked.norm(dim=1).max() > eps2)


def split(
    cluster: Cluster, updates: dict[int, torch.Tensor], last_update: dict[int, torch.Tensor]
) -> list[Cluster]:
    """Bipartition the members who sent updates; place the others by their last update."""
    senders = [c for c in sorted(cluster.members) if c in updates]
    stacked = torch.stack([updates[c] for c in senders])
    directions = F.normalize(stacked, dim=1).double()
    parts = bipartition((directions @ directions.T).numpy())
    halves = [
        Cluster({senders[k] for k in part}, cluster.model, cluster.optimizer.copy())
        for part in parts
    ]
    half_directions = F.normalize(torch.stack([stacked[part].mean(dim=0) for part in parts]), dim=1)
    for client in sorted(cluster.members - set(senders)):
        known = last_update.get(client)
        best = 0 if known is None else int(torch.argmax(half_directions @ known))
        halves[best].members.add(client)
    return halves


def bipartition(similarity: np.ndarray) -> list[list[int]]:
    """Sattler's optimal bipartition: complete-linkage agglomerative clustering on
    −similarity, merged down to two groups (indices into the matrix, each group sorted).

    Complete linkage: the distance between two groups is the largest distance between their
    members, so a merge of a and b leaves max(d(k, a), d(k, b)) to any other group k.
    A similarity computed as X Xᵀ is symmetric only up to rounding, which differs between
    BLAS kernels (CPUs): the mean of it and its transpose is exactly symmetric, and the merge
    does not depend on which of the pair ``argmin`` names first.
    """
    groups = [[i] for i in range(len(similarity))]
    similarity = np.asarray(similarity, dtype=float)
    distance = -(similarity + similarity.T) / 2
    np.fill_diagonal(distance, np.inf)
    while len(groups) > 2:
        a, b = sorted(np.unravel_index(np.argmin(distance), distance.shape))
        groups[a] += groups.pop(b)
        distance[a] = distance[:, a] = np.maximum(distance[a], distance[b])
        distance[a, a] = np.inf
        distance = np.delete(np.delete(distance, b, axis=0), b, axis=1)
    return [sorted(g) for g in groups]
