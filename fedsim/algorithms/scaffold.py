"""SCAFFOLD (Karimireddy et al., ICML 2020, Algorithm 1) on the wireless clock.

The server holds the model x and a control variate c; client i keeps its own c_i. Each
synchronous round the server samples clients among those online and sends them x and c
(two model-sized tensors in one transmission). Each selected client trains from y_i = x with
every local step's gradient corrected by c − c_i,

    y_i ← y_i − η_l (g_i(y_i) − c_i + c),

computes its new control variate

    option I:   c_i⁺ = ∇f_i(x), the gradient of its training set at x (one more pass of work)
    option II:  c_i⁺ = c_i − c + (x − y_i) / (K η_l)   (K local steps; the paper's experiments)

and uploads Δy_i = y_i − x and Δc_i = c_i⁺ − c_i (two model-sized tensors). The server closes
the round by its policy (as FedAvg) and, over the S updates it kept, applies

    x ← x + η_g (1/S) Σ Δy_i        (the server optimizer: sgd, η_g = lr, 1 by default)
    c ← c + (S / N) (1/S) Σ Δc_i    (N: the clients present)

Both means are unweighted, as in the paper (FedAvg weighs by samples); they are folded in as
the updates arrive, so a round holds two sums, not every upload. Over the air
(``uplink_aggregation: aircomp``) the two tensors go in one slot and the server gets their
noisy means; when nobody transmits, x and c stay.

Choices where the paper is silent: a client commits c_i⁺ once its upload has gone through
(it cannot know whether the server keeps it: an update the server drops as surplus leaves
c_i ahead of c, as it would in a deployment). Option II's formula assumes plain SGD steps;
with momentum or Adam it is applied as written, and the correction c - c_i is a step of its
own outside the optimizer's state (NIID-Bench's convention; through momentum it would be
amplified and training diverges, ``fedsim.learn.optimizers.corrected_step``). A newcomer
starts with c_i = 0; a client that leaves takes its c_i with it, while c keeps what its
updates added. Client state: one model-sized vector per client that has taken part.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field

import simpy
import torch

from fedsim.algorithms._sync import Received, gather_updates, server_optimizer
from fedsim.config import ScaffoldConfig
from fedsim.learn.aggregate import RunningAverage
from fedsim.world import World


@dataclass
class ScaffoldState:
    """The server's x and c, and each client's c_i (pass one to ``run`` to read it after)."""

    x: torch.Tensor | None = None
    c: torch.Tensor | None = None
    controls: dict[int, torch.Tensor] = field(default_factory=dict)  # of clients that took part


def run(
    world: World, config: ScaffoldConfig, state: ScaffoldState | None = None
) -> Generator[simpy.Event, object, None]:
    state = ScaffoldState() if state is None else state
    x = state.x = world.initial_params()
    c = state.c = torch.zeros_like(x)
    controls = state.controls
    optimizer = server_optimizer(config.server_optimizer)
    world.on_leave = lambda client: controls.pop(client, None)
    world.set_models(x)
    for round_index in world.rounds():
        selected = yield from world.select_clients(
            config.client_fraction, config.over_selection, config.selection
        )
        arrivals, (x_received, c_received) = world.send_down(selected, x, c)
        bodies = {
            i: client_update(world, config, i, x_received, c_received, controls, arrivals[i])
            for i in selected
        }
        deltas = (RunningAverage(), RunningAverage())  # of the models, of the control variates

        def take(client: int, update: tuple[torch.Tensor, ...], deltas=deltas) -> None:
            for total, delta in zip(deltas, update, strict=True):
                total.add(delta, 1.0)

        # Over the air the server keeps the updates until the round's slot sends them.
        kept = yield from gather_updates(world, config, bodies, take=None if world.air else take)
        summed = len(kept)  # S: the updates in the means
        if world.air is not None:  # both means received over the air, unweighted
            received = yield from world.over_the_air(kept, dict.fromkeys(kept, 1.0))
            summed = 0 if received is None else world.air.last.air_transmitters
            if received is not None:
                deltas = tuple(Received(mean) for mean in received)
        if summed:
            model_delta, control_delta = (total.result() for total in deltas)
            x = state.x = optimizer.step(x, x + model_delta)
            c = state.c = c + summed / len(world.present) * control_delta
        world.end_round(round_index, x, participants=len(kept))


def client_update(
    world: World,
    config: ScaffoldConfig,
    client: int,
    x: torch.Tensor,
    c: torch.Tensor,
    controls: dict[int, torch.Tensor],
    arrived: simpy.Event,
) -> Generator[simpy.Event, object, tuple[torch.Tensor, torch.Tensor]]:
    """Receive x and c, train with the corrected gradients, upload Δy_i and Δc_i."""
    yield arrived
    c_i = controls.get(client)
    c_i = torch.zeros_like(x) if c_i is None else c_i
    result = yield from world.train(client, x, correction=c - c_i)
    if config.control_update == "I":
        c_new = yield from full_gradient(world, client, x)
    elif result.steps:
        c_new = c_i - c + (x - result.params) / (result.steps * world.scenario.training.lr)
    else:  # no local data, no step: nothing learned about the drift
        c_new = c_i
    sent = yield from world.upload(client, result.params - x, c_new - c_i)
    controls[client] = c_new
    return sent


def full_gradient(
    world: World, client: int, x: torch.Tensor
) -> Generator[simpy.Event, object, torch.Tensor]:
    """Option I: ∇f_i(x) over the training set, charged as one epoch of compute."""
    shard = world.clients[client].shard
    trainer = world.trainer_of(client)
    n = shard.num_train
    yield from world.work(client, steps=trainer.num_steps(n, epochs=1), samples=n)
    if world.timing_only:
        return torch.empty_like(x)
    return trainer.gradient(x, shard.x_train, shard.y_train)
