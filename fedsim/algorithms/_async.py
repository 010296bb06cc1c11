"""The asynchronous server FedAsync and FedBuff share; their modules give the update rules.

The server holds a model and its version, the number of server updates applied so far. It
keeps up to ``max_concurrency`` clients busy: whenever a slot is free it sends the current
model by unicast (different clients hold different versions) to a client chosen uniformly
at random among the available ones (online, not busy), and notes the version it carried.
The client trains and uploads its model (or its delta). An update that arrives has
staleness τ = version now − version dispatched; with τ > ``max_staleness`` it is dropped
(its bytes count as wasted), otherwise it goes into a buffer, and when the buffer holds
``buffer_size`` updates (1 for FedAsync) the rule turns them into the next model. One
server update is one "round": ``end_round`` after each, so run.rounds counts updates.

Choices where the papers are silent:
- The server learns of a lost client only through ``task_timeout_s`` after dispatch; it
  then cancels the task and re-uses the slot (the client may be drawn again). A task the
  radio loses (the base station could not deliver the model or decode the update, and knows
  it) frees its slot at once. A timeout shorter than the fastest task any client can do (its
  model down and up alone at the fastest rate, its shortest training) would make every task
  time out: the run refuses it at its start; and ``STALLED_TASKS_PER_SLOT`` x
  ``max_concurrency`` timeouts without a single update stop the run (the timeout is too
  short for this network), rather than re-dispatching forever.
- A radio that lets nothing through brings no update, hence no round to record (a round is
  a server update). The server goes on dispatching: a time budget ends the run (exit 0, no
  round), or the radio recovers. With run.rounds alone nothing else would end it, so as many
  tasks lost on the radio without an update stop it (exit 2, a message naming system.radio).
- A freed slot is re-filled after the updates that arrived at the same instant are
  applied, so the client gets the newest model.
- Newcomers become available for dispatch when they join; a client that leaves keeps its
  slot until the timeout frees it.
- ``async.npz`` (times, staleness and clients per server update, one column per buffered
  update) is rewritten after every update, so a run cut by the time budget keeps all of
  it; the arrays are small and each update costs a local training anyway.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass

import numpy as np
import simpy
import torch

from fedsim.config import AsyncServerConfig, ScenarioError
from fedsim.results.files import ASYNC_FILE
from fedsim.world import Task, World


def constant(staleness: int) -> float:
    """s(τ) = 1: every update counts fully, however old."""
    return 1.0


def polynomial(staleness: int, a: float) -> float:
    """s(τ) = (1 + τ)^−a; FedBuff's 1/sqrt(1 + τ) is a = 0.5."""
    return (1.0 + staleness) ** -a


def hinge(staleness: int, a: float, b: float) -> float:
    """s(τ) = 1 while τ <= b, then 1 / (a (τ − b) + 1)."""
    return 1.0 if staleness <= b else 1.0 / (a * (staleness - b) + 1.0)


def staleness_weight(config: AsyncServerConfig, staleness: int) -> float:
    """The configured s(τ) (FedAsync, eq. 3 of Xie et al.)."""
    if config.staleness == "constant":
        return constant(staleness)
    if config.staleness == "polynomial":
        return polynomial(staleness, config.staleness_a)
    return hinge(staleness, config.staleness_a, config.staleness_b)


@dataclass(frozen=True)
class Update:
    """An update the server accepted: who sent it, how stale it is, what it carries."""

    client: int
    staleness: int
    tensor: torch.Tensor


STALLED_TASKS_PER_SLOT = 100  # timeouts in a row per slot, no update between: too short a timeout

ServerRule = Callable[[torch.Tensor, list[Update]], torch.Tensor]
"""(model, buffered updates) -> the next model."""


@dataclass(frozen=True)
class _Dispatch:
    client: int
    version: int
    task: Task


def async_server(
    world: World,
    config: AsyncServerConfig,
    rule: ServerRule,
    *,
    buffer_size: int = 1,
    send_delta: bool = False,
) -> Generator[simpy.Event, object, None]:
    """Process body of the asynchronous server (see the module docstring).

    ``send_delta``: clients upload x_trained − x_dispatched instead of x_trained.
    """
    env = world.env
    rng = world.streams.generator("async-dispatch")
    model = world.initial_params()
    if config.task_timeout_s is not None:
        refuse_unbeatable(world, "task_timeout_s", config.task_timeout_s)
    version = 0
    stalled = STALLED_TASKS_PER_SLOT * config.max_concurrency  # tasks without an update: stop
    timeouts_in_a_row = lost_in_a_row = 0  # since the last update
    busy: dict[int, _Dispatch] = {}  # as the server sees it: dispatched, not yet settled
    settled: list[_Dispatch] = []  # delivered or timed out, in the order the server learns it
    wake = env.event()
    times: list[float] = []
    staleness: list[list[int]] = []
    senders: list[list[int]] = []

    def wake_up(*_: object) -> None:
        if not wake.triggered:
            wake.succeed()

    def settle(dispatch: _Dispatch) -> None:
        if busy.get(dispatch.client) is dispatch:  # the first of delivery and timeout
            del busy[dispatch.client]
            settled.append(dispatch)
            wake_up()

    def fill_slots() -> None:
        while len(busy) < config.max_concurrency:
            available = sorted(world.online - busy.keys())
            if not available:
                return
            client = int(rng.choice(available))
            arrivals, (received,) = world.send_down([client], model)
            body = client_update(world, client, received, arrivals[client], send_delta)
            dispatch = _Dispatch(client, version, world.start_task(client, body))
            busy[client] = dispatch
            dispatch.task.delivered.callbacks.append(lambda _, d=dispatch: settle(d))
            dispatch.task.on_lost = lambda _, d=dispatch: settle(d)  # the radio lost it
            if config.task_timeout_s is not None:
                if env.now + config.task_timeout_s == env.now:  # it would fire at once, forever
                    raise ScenarioError(
                        config.run_label,
                        [f"{world.setting('task_timeout_s')}: {config.task_timeout_s:g} s is "
                         f"below what the simulated clock resolves at t = {env.now:g} s"],
                    )  # fmt: skip
                timeout = env.timeout(config.task_timeout_s)
                timeout.callbacks.append(lambda _, d=dispatch: settle(d))

    world.on_join = wake_up
    for round_index in world.rounds():
        buffer: list[Update] = []
        while len(buffer) < buffer_size:
            if not settled:
                fill_slots()
                wake = env.event()
                waiting = [wake]
                if len(busy) < config.max_concurrency:  # nobody available: wait for someone
                    offline = world.present - world.online - busy.keys()
                    waiting += [world.until_online(c) for c in sorted(offline)]
                yield env.any_of(waiting)
                continue
            dispatch = settled.pop(0)
            if not dispatch.task.delivered.triggered:  # timed out or lost: give up on it
                world.cancel(dispatch.task)
                if dispatch.task.failed:  # the radio lost it, and the base station knows
                    lost_in_a_row += 1
                    if lost_in_a_row == stalled and world.scenario.run.time_budget_s is None:
                        raise ScenarioError(
                            config.run_label, [nothing_gets_through(world, stalled)]
                        )
                    continue
                timeouts_in_a_row += 1
                if timeouts_in_a_row == stalled:
                    lost = f" ({lost_in_a_row:,} more lost on the radio)" if lost_in_a_row else ""
                    raise ScenarioError(
                        config.run_label,
                        [
                            f"{world.setting('task_timeout_s')}: the last {stalled:,} tasks all "
                            f"timed out ({config.task_timeout_s:g} s after dispatch) by "
                            f"t = {env.now:g} s{lost}, not one update arrived: raise the timeout"
                        ],
                    )
                continue
            timeouts_in_a_row = lost_in_a_row = 0
            tensor = dispatch.task.delivered.value
            tau = version - dispatch.version
            if config.max_staleness is not None and tau > config.max_staleness:
                nbytes = world.uploaded_bytes(dispatch.client, tensor)
                world.log.update_dropped(dispatch.client, nbytes, "stale", round_index)
                continue
            buffer.append(Update(dispatch.client, tau, tensor))
        model = rule(model, buffer)
        version += 1
        world.end_round(round_index, model, participants=len(buffer))
        times.append(env.now)
        staleness.append([u.staleness for u in buffer])
        senders.append([u.client for u in buffer])
        world.save_arrays(
            ASYNC_FILE,
            times=np.array(times),
            staleness=np.array(staleness),
            clients=np.array(senders),
        )


def nothing_gets_through(world: World, lost: int) -> str:
    """Why a run with only a round count stops when the radio loses every task."""
    return (
        f"system.radio: by t = {world.env.now:g} s the radio had lost {lost:,} tasks since the "
        "last update (their model not delivered, or their update not decoded), and only "
        "run.rounds would end this run: no client gets through to the base station (check the "
        "transmit powers, the distances and the link), or set run.time_budget_s to keep "
        "trying until then"
    )


def refuse_unbeatable(world: World, name: str, limit_s: float) -> None:
    """Refuse a timeout (the algorithm's option ``name``) shorter than the fastest task any
    client can do (its model down and up alone at the fastest rate, its shortest local
    training): every task would time out, and the server re-dispatch forever. A lower bound,
    so only the certainly hopeless is refused."""
    fastest_s = math.inf
    down_bytes, up_bytes = (world.model_message_bytes(d) for d in ("downlink", "uplink"))
    for client in range(len(world.clients)):  # stops at the first client that can make it
        fastest_s = min(fastest_s, world.minimum_task_s(client, down_bytes, up_bytes))
        if fastest_s <= limit_s:
            return
    raise ScenarioError(
        world.algorithm.run_label,
        [f"{world.setting(name)}: {limit_s:g} s, but the fastest task of any client takes at "
         f"least {fastest_s:.4g} s (its model down and up alone at the fastest rate, and its "
         "shortest local training): every task would time out"],
    )  # fmt: skip


def client_update(
    world: World, client: int, params: torch.Tensor, model_arrived: simpy.Event, send_delta: bool
) -> Generator[simpy.Event, object, torch.Tensor]:
    """One client's task: receive, train (taking its compute time), upload; returns the upload."""
    result = yield from world.train(client, params, model_arrives=model_arrived)
    if send_delta:
        (delta,) = yield from world.upload(client, result.params - params)
        return delta
    (model,) = yield from world.upload(client, result.params, reference=params)
    return model
