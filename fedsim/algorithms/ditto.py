"""Ditto (Li et al., 2021): a global FedAvg model plus a personal model per client.

Each round (Algorithm 1 of the paper) the server broadcasts the global model w; each
selected client (a) trains w on its data with the scenario's local work, (b) trains its
personal model v_i for ``personal_epochs`` epochs on F_i(v) + lam/2 ||v - w||^2, then
uploads the trained global model; the server averages those by sample count (FedAvg).
Both trainings take compute time, one after the other, before the upload, as in the paper.
Sent: one model down (broadcast), one model up per participant; v_i never leaves the client.

Personal models are client state, initialised from the initial global model. The client
keeps its updated v_i even if its upload is then lost to a deadline or a dropout (the
training was done on the device). A newcomer's v_i starts from the global model it
receives when first selected; until then it is evaluated on the current global model,
like under FedAvg. A client that leaves takes its v_i with it. Evaluation: personal models
(a client never selected keeps its initial one).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import replace

import simpy
import torch

from fedsim.algorithms._sync import LazyModels, fedavg_server
from fedsim.config import DittoConfig
from fedsim.learn.trainer import TrainResult
from fedsim.world import World


def run(world: World, config: DittoConfig) -> Generator[simpy.Event, object, None]:
    initial = world.initial_params()
    personal: dict[int, torch.Tensor] = {c: initial for c in world.client_ids}

    def client_update(
        client: int, global_params: torch.Tensor, model_arrived: simpy.Event
    ) -> Generator[simpy.Event, object, TrainResult]:
        result = yield from world.train(client, global_params, model_arrives=model_arrived)
        own = personal.setdefault(client, global_params)
        own_result = yield from world.train(
            client,
            own,
            epochs=config.personal_epochs,
            prox_center=global_params,
            prox_mu=config.lam,
        )
        personal[client] = own_result.params
        (sent,) = yield from world.upload(client, result.params, reference=global_params)
        return replace(result, params=sent)

    def personal_models(round_index: int, global_params: torch.Tensor) -> LazyModels:
        kept = dict(personal)  # as they are at the end of this round
        return LazyModels(world, lambda client: kept.get(client, global_params))

    def leave(client: int) -> None:
        personal.pop(client, None)

    world.on_leave = leave
    yield from fedavg_server(world, config, client_update, personal_models)
