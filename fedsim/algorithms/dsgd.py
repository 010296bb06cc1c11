"""Decentralized SGD (gossip averaging over the D2D graph; Lian et al. 2017, Koloskova et al.
2020): the serverless baseline of the decentralized setting.

Each round, in lock-step, every online client trains its model with the scenario's local
work, sends the result to each of its D2D neighbours (``system.d2d.graph``) and averages
what it has with Metropolis–Hastings weights, which are symmetric and doubly stochastic on
any connected graph, so the models reach consensus at the global average:

    x_i ← Σ_j m_ij x_j,   m_ij = 1 / (1 + max(d_i, d_j)) for each neighbour j,
    m_ii = 1 − Σ_j m_ij   (d = degree among the present clients).

The averaging happens when the round closes (all models in, or the deadline): a neighbour
whose model has not arrived (offline, slow link) is left out and its weight goes to the
client's own model, so the row still sums to 1; a client whose training did not finish keeps
its model. Per round:
one model-sized message per directed edge. The mixing matrix is saved as the collaboration
weights (``collaboration.npz``).

With a peer codec (``compression.peer``) this is CHOCO-SGD (Koloskova, Stich, Jaggi 2019,
Algorithm 2): each client sends its trained model once, as the compressed difference to its
public copy x̂_i (see ``fedsim.world.compression``), and gossips over the copies,

    x_i ← x_i + γ Σ_j m_ij (x̂_j − x̂_i),   γ = ``consensus_step``,

which with exact messages and γ = 1 is the averaging above.
"""

from __future__ import annotations

from collections.abc import Generator

import numpy as np
import simpy
import torch

from fedsim.algorithms._decentralized import RoundMessages, WeightHistory, run_round
from fedsim.config import DsgdConfig
from fedsim.learn.aggregate import weighted_average
from fedsim.world import World


def mixing_weights(peers: dict[int, list[int]], client: int) -> dict[int, float]:
    """Metropolis–Hastings weights of the client's row over its present neighbours
    (``peers``: the present neighbours of this client and of every present one)."""
    return {j: 1 / (1 + max(len(peers[client]), len(peers[j]))) for j in peers[client]}


def run(world: World, config: DsgdConfig) -> Generator[simpy.Event, object, None]:
    models: dict[int, torch.Tensor] = {}
    initial = world.initial_params()
    history = WeightHistory(world)
    world.on_join = lambda client: models.__setitem__(client, initial)
    world.on_leave = lambda client: models.pop(client, None)
    models |= {c: initial for c in world.client_ids}
    world.set_models(models)
    for round_index in world.rounds():
        clients = yield from world.online_clients()
        messages = RoundMessages(world)
        trained: dict[int, torch.Tensor] = {}
        bodies = {i: gossip_round(world, i, models, trained, messages) for i in clients}
        finished = yield from run_round(world, config, bodies)
        yield from messages.close()
        mixing = np.full((len(world.clients),) * 2, np.nan)
        # Neighbour lists once per round; a client that trained may have left since, and its
        # row still mixes what reached it.
        peers = {c: world.peers_of(c) for c in {*world.client_ids, *trained}}
        for i, params in trained.items():
            received = messages.delivered("model", i)
            weights = {j: w for j, w in mixing_weights(peers, i).items() if j in received}
            own = 1.0 - sum(weights.values())
            mixing[i, world.client_ids] = 0.0
            mixing[i, i], mixing[i, list(weights)] = own, list(weights.values())
            if i not in models:
                continue
            if world.compression.codecs["peer"] is None:
                models[i] = weighted_average(
                    [params, *(received[j] for j in weights)], [own, *weights.values()]
                )
            elif weights and not world.timing_only:
                models[i] = choco_step(
                    params, world.public_model(i, params), received, weights, config
                )
            else:
                models[i] = params
        history.record(round_index, mixing)
        world.end_round(round_index, dict(models), participants=len(finished))


def choco_step(
    params: torch.Tensor,
    own_copy: torch.Tensor,
    copies: dict[int, torch.Tensor],
    weights: dict[int, float],
    config: DsgdConfig,
) -> torch.Tensor:
    """x_i + γ Σ_j m_ij (x̂_j − x̂_i) over the neighbours' public copies that arrived."""
    pull = weighted_average([copies[j] for j in weights], list(weights.values()))
    return params + config.consensus_step * sum(weights.values()) * (pull - own_copy)


def gossip_round(
    world: World,
    client: int,
    models: dict[int, torch.Tensor],
    trained: dict[int, torch.Tensor],
    messages: RoundMessages,
) -> Generator[simpy.Event, object, int]:
    """Train, send the result to every neighbour, wait for the neighbours' results."""
    result = yield from world.train(client, models[client])
    trained[client] = result.params
    neighbours = world.peers_of(client)
    for j in neighbours:
        messages.send("model", client, j, result.params, own_model=True)
    yield world.env.all_of([messages.expect("model", j, client) for j in neighbours])
    return len(neighbours)
