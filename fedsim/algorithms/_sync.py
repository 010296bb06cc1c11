"""Round logic the synchronous FedAvg-family baselines share.

``fedavg_server`` is FedAvg's server (see ``fedavg.py``) with the client's part of a round
and the models evaluated as parameters, so FedProx, FedAvg+FT and Ditto differ from FedAvg
only where their papers do. ``gather_updates`` and ``average_per_key`` serve the multi-model
servers (Oracle, IFCA).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Hashable, Iterator, Mapping, Sequence
from typing import TypeVar

import simpy
import torch

from fedsim.config import SyncServerConfig
from fedsim.learn.aggregate import weighted_average
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
    clients, average the kept updates (``TrainResult``) by sample count.

    ``evaluated(round, global model)`` gives what the clients use at evaluation time.
    """
    global_params = world.initial_params()
    world.set_models(evaluated(0, global_params))  # what clients use before round 1 ends
    for round_index in world.rounds():
        selected = yield from world.select_clients(config.client_fraction, config.over_selection)
        arrivals = world.send_down(selected, global_params)
        bodies = {c: client_update(c, global_params, arrivals[c]) for c in selected}
        results: dict[int, TrainResult] = yield from gather_updates(world, config, bodies)
        if results:
            global_params = weighted_average(
                [r.params for r in results.values()], [world.num_train(c) for c in results]
            )
        world.end_round(
            round_index, evaluated(round_index, global_params), participants=len(results)
        )


def gather_updates(
    world: World,
    config: SyncServerConfig,
    bodies: Mapping[int, Generator],
    barriers: Sequence[Barrier] = (),
) -> Generator[simpy.Event, object, dict]:
    """Run each selected client's part of the round (held at ``barriers`` with the other
    participants); return the updates the server keeps."""
    tasks = {c: world.start_task(c, body) for c, body in bodies.items()}
    for barrier in barriers:
        barrier.hold(tasks)
    return (
        yield from world.gather(
            tasks,
            deadline_s=config.deadline_s,
            keep_first=world.wanted_updates(config.client_fraction),
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


def average_per_key(
    world: World,
    models: Mapping[Key, torch.Tensor],
    updates: Mapping[int, tuple[Key, torch.Tensor]],
) -> dict[Key, torch.Tensor]:
    """Each model becomes the sample-weighted mean of the updates addressed to it
    (client -> (key, params)); a model nobody updated this round stays as it was."""
    averaged = dict(models)
    for key in {k for k, _ in updates.values()}:
        senders = [c for c, (k, _) in updates.items() if k == key]
        averaged[key] = weighted_average(
            [updates[c][1] for c in senders], [world.num_train(c) for c in senders]
        )
    return averaged


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
