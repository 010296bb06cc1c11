"""IFCA (Ghosh et al., 2020), model-averaging variant: k cluster models, each client trains
the one that fits its data best.

The k models start from k different random initialisations. Each round the server sends
all k models to the selected clients in one transmission (k models' bytes, once); each
client estimates its cluster as the model of lowest loss on its training data, trains
that model with the scenario's local work and uploads it with its cluster index (a
1-element tensor). The server sets each cluster model to the sample-weighted mean of the
updates for it (folded in as they arrive; with a server optimizer, it steps towards that
mean with its own state per cluster); a cluster without updates keeps its model. Sent: k
models down (one broadcast), (model + 1) values up per participant. Evaluation: every
present client uses the cluster model of lowest loss on its own training data
(``ClusterModels``).

Deviations: the k loss evaluations (k forward passes over the local data, about k/3 of an
epoch's work) take no simulated time of their own: the round's compute time is the
training's. The average weights updates by sample count (the paper's clients hold equal
amounts of data, where the two agree).
"""

from __future__ import annotations

from collections.abc import Generator, Mapping

import simpy
import torch

from fedsim.algorithms._sync import LazyModels, ServerModels, gather_updates
from fedsim.config import IfcaConfig
from fedsim.world import World


def run(world: World, config: IfcaConfig) -> Generator[simpy.Event, object, None]:
    server = ServerModels(world, config.server_optimizer, initial_models(world, config.clusters))
    models = server.models
    world.set_models(ClusterModels(world, models))

    def take(client: int, update: tuple[torch.Tensor, torch.Tensor]) -> None:
        params, index = update
        server.add(int(index), client, params)

    for round_index in world.rounds():
        selected = yield from world.select_clients(
            config.client_fraction, config.over_selection, config.selection
        )
        arrivals, received = world.send_down(selected, *models.values())
        received_models = dict(zip(models, received, strict=True))
        bodies = {c: client_update(world, c, received_models, arrivals[c]) for c in selected}
        kept = yield from gather_updates(world, config, bodies, take=take)
        models = server.step()
        world.end_round(round_index, ClusterModels(world, models), participants=len(kept))


def client_update(
    world: World, client: int, models: Mapping[int, torch.Tensor], models_arrived: simpy.Event
) -> Generator[simpy.Event, object, tuple[torch.Tensor, torch.Tensor]]:
    """Receive the k models, pick the best fitting one, train it, upload it with its index."""
    yield models_arrived
    cluster = best_cluster(world, models, client)
    result = yield from world.train(client, models[cluster])
    index = torch.tensor([float(cluster)])
    sent, _ = yield from world.upload(client, result.params, index, reference=models[cluster])
    return sent, index


def initial_models(world: World, clusters: int) -> dict[int, torch.Tensor]:
    """k models from k seeds (shape-only copies of the initial model in a timing-only run)."""
    if world.timing_only:
        return dict.fromkeys(range(clusters), world.initial_params())
    return {
        j: world.trainer.init_params(world.streams.integer_seed("ifca", j)) for j in range(clusters)
    }


def best_cluster(world: World, models: Mapping[int, torch.Tensor], client: int) -> int:
    """The cluster whose model has the lowest loss on the client's training data.

    A timing-only run has no values to compare (and the choice changes no byte): cluster 0.
    """
    if world.timing_only:
        return 0
    shard, trainer = world.clients[client].shard, world.trainer_of(client)
    losses = {
        j: trainer.evaluate(model, shard.x_train, shard.y_train).loss_sum
        for j, model in models.items()
    }
    return min(losses, key=losses.__getitem__)


class ClusterModels(LazyModels):
    """What the present clients use: each the cluster model that fits its data best.

    Computed only when evaluated; ``cluster_of`` exposes the assignment (for analysis).
    """

    def __init__(self, world: World, models: Mapping[int, torch.Tensor]) -> None:
        super().__init__(world, lambda client: self.models[self.cluster_of(client)])
        self.models = models

    def cluster_of(self, client: int) -> int:
        return best_cluster(self._world, self.models, client)
