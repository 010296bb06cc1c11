"""Local training: every client trains alone on its own data and never communicates.

Two paces (``barrier``):

- **in rounds** (default): each round, the clients a synchronous server with the same
  ``client_fraction`` would select (``World.select_clients``, the same sampling stream;
  ∝ n_k with ``sample_by_size``, as PerFed-CKT's server)
  train once from their own model; the round ends when each has finished or dropped out
  (offline or gone: its training is lost and holds nobody up). After round r no client has
  trained more than r times, so "equal rounds" means equal training against any server.
- **at its own pace**: there is no server, so no barrier: each client trains back to back
  while it is online (training cut by going offline is lost and redone). Round r is complete
  when every present client has finished r trainings counted from its arrival.

Either way a newcomer starts from the common initial model (at the round completed when it
joined, at its own pace), and the evaluation takes each client's current model.
"""

from __future__ import annotations

from collections.abc import Generator

import simpy
import torch

from fedsim.config import LocalConfig
from fedsim.world import World


def run(world: World, config: LocalConfig) -> Generator[simpy.Event, object, None]:
    if config.barrier:
        yield from _in_rounds(world, config)
    else:
        yield from _at_own_pace(world)


def _in_rounds(world: World, config: LocalConfig) -> Generator[simpy.Event, object, None]:
    models: dict[int, torch.Tensor] = {}

    def join(client: int) -> None:
        models[client] = world.initial_params(client)  # its architecture's common start

    def leave(client: int) -> None:
        models.pop(client, None)

    def train_once(client: int) -> Generator[simpy.Event, object, torch.Tensor]:
        result = yield from world.train(client, models[client])
        return result.params

    world.on_join, world.on_leave = join, leave
    for client in world.client_ids:
        join(client)
    world.set_models(models)  # live: a time-cadence evaluation sees every finished training
    for round_index in world.rounds():
        selected = yield from world.select_clients(
            config.client_fraction, by_size=config.sample_by_size
        )
        tasks = {c: world.start_task(c, train_once(c)) for c in selected}
        trained = yield from world.finish_all(tasks)
        for client, params in trained.items():
            if client in models:  # it may have left since
                models[client] = params
        world.end_round(round_index, dict(models), participants=len(trained))


def _at_own_pace(world: World) -> Generator[simpy.Event, object, None]:
    models: dict[int, torch.Tensor] = {}
    trainings: dict[int, int] = {}  # per present client, counted from the round it joined at
    rounds = world.rounds()
    completed = 0
    behind = 0  # present clients that have not finished round completed + 1 yet
    last_round = world.scenario.run.rounds
    all_done = world.env.event()

    def close_finished_rounds() -> None:
        nonlocal completed, behind
        while trainings and behind == 0:
            completed += 1
            world.end_round(completed, {c: models[c] for c in trainings}, len(trainings))
            if completed == last_round:
                all_done.succeed()
                return
            next(rounds)  # the next round starts now
            behind = sum(1 for done in trainings.values() if done == completed)

    def train_alone(client: int) -> Generator[simpy.Event, object, None]:
        nonlocal behind
        params = models[client]
        while client in world.present and trainings[client] != last_round:
            try:
                yield world.until_online(client)
                result = yield from world.train(client, params)
            except simpy.Interrupt:
                continue  # offline or gone: this training is lost
            params = models[client] = result.params
            trainings[client] += 1
            if trainings[client] == completed + 1:
                behind -= 1
                close_finished_rounds()

    def join(client: int) -> None:
        nonlocal behind
        models[client] = world.initial_params(client)  # its architecture's common start
        trainings[client] = completed
        behind += 1
        world.start_task(client, train_alone(client))

    def leave(client: int) -> None:
        nonlocal behind
        models.pop(client, None)
        if trainings.pop(client, None) == completed:
            behind -= 1
            close_finished_rounds()

    world.on_join, world.on_leave = join, leave
    world.set_models(models)  # live: a time-cadence evaluation sees every finished training
    next(rounds)  # round 1 starts now; later rounds start as the previous one closes
    for client in world.client_ids:
        join(client)
    yield all_done
