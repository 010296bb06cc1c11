"""FedProx (Li et al., 2020): FedAvg whose local objective keeps the model near the global one.

Each round is FedAvg's (see ``fedavg.py``): the server broadcasts the global model w, each
selected client minimizes F_i(v) + mu/2 ||v - w||^2 from v = w on its own data, spends its
compute time and uploads v; the server averages the kept models by sample count. Sent:
one model down (broadcast), one model up per participant, exactly as FedAvg; mu = 0 is
FedAvg to the bit. FedProx's acceptance of partial work from slow devices (gamma-inexact
local solutions) is not modelled: every client does the configured local work, and a
server deadline drops the late ones, as under FedAvg.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import replace
from functools import partial

import simpy
import torch

from fedsim.algorithms._sync import fedavg_server
from fedsim.config import FedProxConfig
from fedsim.learn.trainer import TrainResult
from fedsim.world import World


def run(world: World, config: FedProxConfig) -> Generator[simpy.Event, object, None]:
    yield from fedavg_server(world, config, partial(client_update, world, mu=config.mu))


def client_update(
    world: World, client: int, params: torch.Tensor, model_arrived: simpy.Event, *, mu: float
) -> Generator[simpy.Event, object, TrainResult]:
    """Receive w, train with the proximal term centred at w, upload."""
    result = yield from world.train(
        client, params, prox_center=params, prox_mu=mu, model_arrives=model_arrived
    )
    (sent,) = yield from world.upload(client, result.params, reference=params)
    return replace(result, params=sent)
