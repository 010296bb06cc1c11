"""FedAvg+FT ("FedAvg+", Jiang et al., 2019): FedAvg, then each client fine-tunes the global model.

Training and traffic are FedAvg's (see ``fedavg.py``): one model down (broadcast), one up per
participant. A client uses the model by first training the latest global model for
``finetune_epochs`` epochs on its own training data (a fresh optimizer, the scenario's
settings); the evaluation measures those fine-tuned models. Fine-tuning is how a client
uses the model, not part of the protocol: it is done at evaluation time, takes no
simulated time and sends nothing, and the fine-tuned models never go back to the server.
"""

from __future__ import annotations

from collections.abc import Generator
from functools import partial

import simpy
import torch

from fedsim.algorithms._sync import LazyModels, client_update, fedavg_server
from fedsim.config import FedAvgFTConfig
from fedsim.world import World


def run(world: World, config: FedAvgFTConfig) -> Generator[simpy.Event, object, None]:
    def fine_tuned(round_index: int, global_params: torch.Tensor) -> LazyModels:
        tune = partial(
            fine_tune,
            world,
            global_params=global_params,
            epochs=config.finetune_epochs,
            round_index=round_index,
        )
        return LazyModels(world, tune)

    yield from fedavg_server(world, config, partial(client_update, world), fine_tuned)


def fine_tune(
    world: World, client: int, *, global_params: torch.Tensor, epochs: int, round_index: int
) -> torch.Tensor:
    """The client's model: the global one after ``epochs`` local epochs (no simulated time)."""
    shard = world.clients[client].shard
    seed = world.streams.integer_seed("finetune", client, round_index)
    trainer = world.trainer_of(client)
    tuned = trainer.train(global_params, shard.x_train, shard.y_train, epochs=epochs, seed=seed)
    return tuned.params
