"""Round logic the synchronous FedAvg-family baselines share.

``fedavg_server`` is FedAvg's server (see ``fedavg.py``) with the client's part of a round
and the models evaluated as parameters, so FedProx, FedAvg+FT and Ditto differ from FedAvg
only where their papers do. ``ServerModels`` holds a server's models (one, or one per group
or cluster for Oracle and IFCA): each kept update is folded into its model's running average
the moment it arrives (a round holds one sum per model, not every upload), and at the end
of the round each model takes a step of its own server optimizer (FedOpt; plain averaging
by default). ``client_update`` is FedAvg's client (receive, train, upload), which FedAvg+FT,
Oracle and UCFL's pipelined rounds use as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Hashable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Generic, TypeVar

import simpy
import torch

from fedsim.config import ServerOptimizerConfig, SyncServerConfig
from fedsim.learn.aggregate import MajorityVote, RunningAverage
from fedsim.learn.server_optimizers import ServerOptimizer, ServerOptimizerSpec
from fedsim.learn.trainer import TrainResult
from fedsim.world import Task, World

Key = TypeVar("Key", bound=Hashable)
Models = torch.Tensor | Mapping[int, torch.Tensor]
"""What ``World.end_round`` evaluates: one model for everyone, or each client's own."""
ClientUpdate = Callable[[int, torch.Tensor, simpy.Event], Generator[simpy.Event, object, object]]
"""A client's part of a round: (client, global model, its arrival event) -> its update."""


def fedavg_server(
    world: World,
    config: SyncServerConfig,
    client_update: ClientUpdate,
    evaluated: Callable[[int, torch.Tensor], Models] = lambda round_index, params: params,
) -> Generator[simpy.Event, object, None]:
    """FedAvg's rounds: broadcast the global model, run ``client_update`` on the selected
    clients, average the kept updates (``TrainResult``) by sample count. A round that kept
    none (nothing got through) leaves the global model as it was, with participants = 0.

    ``evaluated(round, global model)`` gives what the clients use at evaluation time.
    """
    server = ServerModels(world, config.server_optimizer, {0: world.initial_params()})
    global_params = server.models[0]

    def take(client: int, result: TrainResult) -> None:
        server.add(0, client, result.params)

    world.set_models(evaluated(0, global_params))  # what clients use before round 1 ends
    for round_index in world.rounds():
        selected = yield from world.select_clients(
            config.client_fraction, config.over_selection, config.selection
        )
        arrivals, (received,) = world.send_down(selected, global_params)
        bodies = {c: client_update(c, received, arrivals[c]) for c in selected}
        kept = yield from gather_updates(world, config, bodies, take=take)
        yield from server.receive()  # over the air: the round's aggregation slot
        global_params = server.step()[0]
        world.end_round(round_index, evaluated(round_index, global_params), participants=len(kept))


def client_update(
    world: World, client: int, params: torch.Tensor, model_arrived: simpy.Event
) -> Generator[simpy.Event, object, TrainResult]:
    """One client's part of a round: receive, train (taking its compute time), upload
    (its update on the received model: what the server gets is what it decodes)."""
    result = yield from world.train(client, params, model_arrives=model_arrived)
    (sent,) = yield from world.upload(client, result.params, reference=params)
    return replace(result, params=sent)


def gather_updates(
    world: World,
    config: SyncServerConfig,
    bodies: Mapping[int, Generator],
    barriers: Sequence[Barrier] = (),
    take: Callable[[int, object], object] | None = None,
) -> Generator[simpy.Event, object, dict]:
    """Run each selected client's part of the round (held at ``barriers`` with the other
    participants); return the updates the server keeps, or what ``take`` made of each as
    it arrived (see ``World.gather``)."""
    tasks = {c: world.start_task(c, body) for c, body in bodies.items()}
    for barrier in barriers:
        barrier.hold(tasks)
    return (
        yield from world.gather(
            tasks,
            deadline_s=config.deadline_s,
            keep_first=world.wanted_updates(config.client_fraction),
            take=take,
        )
    )


class Barrier:
    """A point of a round that every participant must reach before any goes on.

    A participant whose task stopped (it went offline, left, or the server gave up on it)
    no longer holds the others, so a lost client delays nobody beyond its loss.
    """

    def __init__(self, world: World) -> None:
        self._env = world.env
        self._reached: dict[int, simpy.Event] = {}
        self._passed: simpy.Event | None = None

    def hold(self, tasks: Mapping[int, Task]) -> None:
        """The participants, by their tasks (just started: none has reached it yet)."""
        self._reached = {c: self._env.event() for c in tasks}
        self._passed = self._env.all_of(
            [self._reached[c] | task.process for c, task in tasks.items()]
        )

    def reach(self, client: int) -> simpy.Event:
        """The client is here; the returned event fires when everyone is (yield it)."""
        self._reached[client].succeed()
        return self._passed


def server_optimizer(config: ServerOptimizerConfig) -> ServerOptimizer:
    """A fresh optimizer of the scenario's kind (one per server model)."""
    beta1, beta2 = config.betas
    return ServerOptimizer(ServerOptimizerSpec(config.name, config.lr, beta1, beta2, config.tau))


class ServerModels(Generic[Key]):
    """A server's models by key, each with its own server optimizer.

    ``add`` folds a kept update into its model's running average (weighted by the sender's
    sample count) as it arrives; ``step`` ends the round: each model that got updates steps
    from the average (plain FedAvg: becomes it), the others stay as they were. Under a
    signSGD uplink the average is the majority vote's step instead (``MajorityVote``).

    Over the air (``system.radio.uplink_aggregation``) the uploads are not the server's to
    add up: ``add`` keeps each kept model until the round's slot, and ``receive`` runs the
    slot, whose noisy average of the updates (or step along the vote) the model steps from
    (the model stays when nobody transmitted). A round then holds its participants' models.
    """

    def __init__(
        self, world: World, config: ServerOptimizerConfig, models: Mapping[Key, torch.Tensor]
    ) -> None:
        self.models = dict(models)
        self._world = world
        self._optimizers = {key: server_optimizer(config) for key in self.models}
        self._averages: dict[Key, RunningAverage | MajorityVote | Received] = {}
        self._vote_step = world.compression.vote_step  # signSGD's uplink: a majority vote
        self._on_air: dict[Key, dict[int, torch.Tensor]] = {}  # kept models awaiting the slot

    def add(self, key: Key, client: int, params: torch.Tensor) -> None:
        if self._world.air is not None:
            self._on_air.setdefault(key, {})[client] = params
            return
        if key not in self._averages:
            self._averages[key] = (
                RunningAverage()
                if self._vote_step is None
                else MajorityVote(self.models[key], self._vote_step)
            )
        self._averages[key].add(params, self._world.num_train(client))

    def receive(self) -> Generator[simpy.Event, object, None]:
        """Process body: over the air, each model's aggregation slot (nothing otherwise)."""
        for key, kept in self._on_air.items():
            model = self.models[key]
            updates = {client: (params - model,) for client, params in kept.items()}
            weights = {client: float(self._world.num_train(client)) for client in kept}
            estimate = yield from self._world.over_the_air(updates, weights)
            if estimate is not None:
                self._averages[key] = Received(model + estimate[0])
        self._on_air = {}

    def step(self) -> dict[Key, torch.Tensor]:
        """This round's models (a new dict: earlier rounds' views keep theirs)."""
        for key, average in self._averages.items():
            self.models[key] = self._optimizers[key].step(self.models[key], average.result())
        self._averages = {}
        return dict(self.models)


class Received:
    """The average the server received over the air (``ServerModels.step`` reads it)."""

    def __init__(self, average: torch.Tensor) -> None:
        self._average = average

    def result(self) -> torch.Tensor:
        return self._average


class LazyModels(Mapping[int, torch.Tensor]):
    """The model of each client present when the evaluation runs, computed when asked for.

    For models a client derives at evaluation time (fine-tuning, a choice among clusters):
    rounds the evaluation cadence skips, and timing-only runs, cost nothing. Membership is
    read at evaluation time, so a client that joined after the round is measured too.
    """

    def __init__(self, world: World, model_of: Callable[[int], torch.Tensor]) -> None:
        self._world = world
        self._model_of = model_of

    def __getitem__(self, client: int) -> torch.Tensor:
        if client not in self:
            raise KeyError(client)
        return self._model_of(client)

    def __contains__(self, client: object) -> bool:  # Mapping's default would compute the model
        return client in self._world.present

    def __iter__(self) -> Iterator[int]:
        return iter(self._world.client_ids)

    def __len__(self) -> int:
        return len(self._world.present)
