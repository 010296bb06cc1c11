"""FedFomo (Zhang et al., 2021): each client weighs a few peers' models on its own held-out data.

The server stores each client's latest uploaded model and an affinity matrix A (n × n, all zero
at first: no preference). Each synchronous round, for every selected client i, it picks
M = ``models_per_client`` peers ε-greedily (with probability ``epsilon`` a uniformly random one,
otherwise the next best by A[i]; never i itself; peers that have uploaded first, and while fewer
than M have, peers that have not, whose stored model is the common initial model) and sends
their models to i as one unicast: M model-sized tensors, the large downlink that client-side
personalized aggregation pays for. Client i keeps its own model θ_i (at first the initial
model) and scores the received ones on its validation split:

    w_j = max(0, L(θ_i) − L(θ_j)) / ‖θ_j − θ_i‖,    θ_i ← θ_i + Σ_j (w_j / Σ w)(θ_j − θ_i)

(the move only if Σ w > 0); it trains from there, keeps the result and uploads it with its M
weights (P + M numbers). The server stores θ_i and sets A[i, j] += w_j. Each client is
evaluated on its own θ_i.

The validation split (``validation_fraction`` of the client's training samples, drawn once
per client; FedeRiCo's comparison held out 20%) is withheld from local training, which uses
the rest. Deviation: scoring the received models takes no simulated time (the compute model
times the local training only).

Memory: flat tensors in dicts; the server holds the last model of every client that uploaded,
each present client its own θ_i (often the same tensor) and its validation view, copied once.

Churn: a newcomer starts from the initial model and becomes a preferred peer once it uploads;
a client that leaves stays a candidate peer through the last model it uploaded.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import simpy
import torch

from fedsim.config import FedFomoConfig
from fedsim.learn.aggregate import weighted_average
from fedsim.world import World


@dataclass
class FedFomoState:
    """Server and client state; pass one to ``run`` to read it after the run."""

    affinity: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))  # A[i, j]
    server_models: dict[int, torch.Tensor] = field(default_factory=dict)  # latest uploads
    client_models: dict[int, torch.Tensor] = field(default_factory=dict)  # each client's θ_i


def run(
    world: World, config: FedFomoConfig, state: FedFomoState | None = None
) -> Generator[simpy.Event, object, None]:
    state = FedFomoState() if state is None else state
    initial = world.initial_params()
    state.affinity = np.zeros((len(world.clients), len(world.clients)))
    state.client_models |= {c: initial for c in world.client_ids}
    peer_rng = world.streams.generator("fedfomo_peers")
    held_out: dict[int, Split] = {}

    def validation_set(client: int) -> Split:
        if client not in held_out:
            held_out[client] = validation_split(world, client, config.validation_fraction)
        return held_out[client]

    def join(client: int) -> None:
        state.client_models[client] = initial

    def leave(client: int) -> None:
        state.client_models.pop(client)
        held_out.pop(client, None)

    world.on_join, world.on_leave = join, leave
    for round_index in world.rounds():
        selected = yield from world.select_clients(
            config.client_fraction, config.over_selection, config.selection
        )
        peers: dict[int, list[int]] = {}
        tasks = {}
        for i in selected:
            peers[i] = choose_peers(
                peer_rng,
                state.affinity[i],
                uploaded=[j for j in state.server_models if j != i],
                fresh=[j for j in world.client_ids if j != i and j not in state.server_models],
                count=config.models_per_client,
                epsilon=config.epsilon,
            )
            models = [state.server_models.get(j, initial) for j in peers[i]]
            sent = world.send_down([i], *models)  # one unicast of M models
            received = list(sent.received)
            body = client_update(
                world, i, received, sent.arrivals[i], state.client_models, validation_set(i)
            )
            tasks[i] = world.start_task(i, body)
        results: dict[int, tuple[torch.Tensor, torch.Tensor]] = yield from world.gather(
            tasks,
            deadline_s=config.deadline_s,
            keep_first=world.wanted_updates(config.client_fraction),
        )
        for i, (params, weights) in results.items():
            state.server_models[i] = params
            state.affinity[i, peers[i]] += weights.numpy()
        world.end_round(round_index, dict(state.client_models), participants=len(results))


def client_update(
    world: World,
    client: int,
    peer_models: Sequence[torch.Tensor],
    models_arrived: simpy.Event,
    own_models: dict[int, torch.Tensor],
    validation: Split,
) -> Generator[simpy.Event, object, tuple[torch.Tensor, torch.Tensor]]:
    """Receive the peers' models, move towards the better ones, train, upload θ_i and w."""
    yield models_arrived
    params = own_models[client]
    weights = peer_weights(world, params, peer_models, validation.x, validation.y)
    if weights.sum() > 0:  # θ_i + Σ ŵ_j (θ_j − θ_i) = Σ ŵ_j θ_j, since Σ ŵ_j = 1
        params = weighted_average(peer_models, weights.tolist())
    result = yield from world.train(client, params, train_indices=validation.train_indices)
    own_models[client] = result.params  # the client keeps it, whether or not the server does
    # The server cannot rebuild the model the client trained from (its own may be the
    # start): an uplink codec compresses the model itself.
    sent, _ = yield from world.upload(client, result.params, weights)
    return sent, weights


def peer_weights(
    world: World,
    params: torch.Tensor,
    peer_models: Sequence[torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
) -> torch.Tensor:
    """w_j = max(0, L(θ_i) − L(θ_j)) / ‖θ_j − θ_i‖ on the validation split (0 if θ_j = θ_i)."""
    if world.timing_only:
        return torch.zeros(len(peer_models))  # shape-only models: no losses to compare
    own_loss = validation_loss(world, params, x, y)
    weights = []
    for peer in peer_models:
        distance = float(torch.linalg.vector_norm(peer - params))
        gain = max(0.0, own_loss - validation_loss(world, peer, x, y))
        weights.append(gain / distance if distance > 0 else 0.0)
    return torch.tensor(weights, dtype=torch.float32)


def validation_loss(world: World, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> float:
    result = world.trainer.evaluate(params, x, y)
    return result.loss_sum / result.total


def choose_peers(
    rng: np.random.Generator,
    affinity: np.ndarray,
    *,
    uploaded: list[int],
    fresh: list[int],
    count: int,
    epsilon: float,
) -> list[int]:
    """ε-greedy among the peers that have uploaded (each slot: a random remaining one with
    probability ε, else the best remaining by affinity, ties in random order); peers that
    never uploaded fill the slots left."""
    ranked = sorted(rng.permutation(uploaded).tolist(), key=lambda j: -affinity[j])
    chosen: list[int] = []
    while ranked and len(chosen) < count:
        chosen.append(ranked.pop(int(rng.integers(len(ranked))) if rng.random() < epsilon else 0))
    return chosen + rng.permutation(fresh).tolist()[: count - len(chosen)]


class Split(NamedTuple):
    """A client's held-out validation samples (copied once) and the indices it trains on."""

    x: torch.Tensor
    y: torch.Tensor
    train_indices: torch.Tensor


def validation_split(world: World, client: int, fraction: float) -> Split:
    """A fixed random ``fraction`` of the client's training samples (at least one, and at
    least one left to train on)."""
    shard = world.clients[client].shard
    rng = world.streams.generator("fedfomo_validation", client)
    size = min(max(1, round(fraction * shard.num_train)), shard.num_train - 1)
    held = np.zeros(shard.num_train, dtype=bool)
    held[rng.choice(shard.num_train, size, replace=False)] = True
    index = torch.from_numpy(np.flatnonzero(held))
    return Split(
        shard.x_train[index], shard.y_train[index], torch.from_numpy(np.flatnonzero(~held))
    )
