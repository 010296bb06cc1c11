"""HierFAVG (Liu, Zhang, Song and Letaief, "Client-Edge-Cloud Hierarchical Federated
Learning", ICC 2020, Algorithm 1) over the cells.

    for k = 1, 2, ...:                      every client: κ₁ local updates from its edge's model
        each edge ℓ:  w^ℓ = Σ_{i ∈ C^ℓ} |D_i| w_i / |D^ℓ|            (every κ₁ updates)
        if k is a multiple of κ₂:  w = Σ_ℓ |D^ℓ| w^ℓ / |D|,  every w^ℓ = w  (the cloud)

Here a round is an edge round, which the edges run side by side (the paper's iteration
index k is one clock for all of them): each edge server, at a base-station site, selects
among its clients, sends them its model from its own transmitter, lets them train
κ₁ = ``local_steps`` SGD steps (by default the scenario's local work, as FedAvg's clients),
and averages the updates they upload to it over the cell's radio (the uplink medium, link
layer, schedulers, codecs and energy of a flat run). Every κ₂ = ``cloud_every`` rounds the
edges send their models over the backhaul to the cloud, which averages them weighted by
their clients' samples and sends the result back.

An edge closes its round by the server policy of a flat run (wait for all, a deadline, the
first k of an over-selection), applied to its own clients; an edge that kept no update that
round (nobody online in its cell, every upload lost) passes its model on unchanged, and one
that serves nobody when the cloud aggregates weighs nothing in it.

Association (``association``, ``fedsim.world.edges``): a client belongs to the edge of the
site serving it (default), of the nearest site, or of a count-balanced assignment; one whose
edge is not its serving site is relayed over the backhaul. Mobility: under the serving-cell
rule a client handed over during a round carries its model on: it uploads its trained model
through the cell it is in, and that edge averages it with its own clients' (the static case
of the paper is the one where nobody moves); under the others its update goes to the edge
that selected it. Churn: a newcomer is selected by its cell's edge and starts from the edge's
model; one that leaves takes nothing with it.

Without cells there is one edge, where the cloud is, and no backhaul: HierFAVG is FedAvg
whatever κ₂ (``tests/test_hierfavg.py`` checks the files are the same).

Evaluation: each client uses the model of its edge (after a cloud aggregation, the cloud's).
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import replace

import simpy
import torch

from fedsim.algorithms._sync import LazyModels, ServerModels
from fedsim.config import HierFavgConfig, ServerOptimizerConfig
from fedsim.learn.aggregate import RunningAverage
from fedsim.learn.trainer import TrainResult
from fedsim.world import World


def run(world: World, config: HierFavgConfig) -> Generator[simpy.Event, object, None]:
    initial = world.initial_params()
    edges = ServerModels(world, ServerOptimizerConfig(), dict.fromkeys(world.sites, initial))
    world.set_models(initial)
    for round_index in world.rounds():
        members = world.edge_members(config.association)
        participants = yield from edge_round(world, config, edges, members)
        if round_index % config.cloud_every == 0:
            yield from cloud_aggregation(world, edges, members)
            world.note_cloud_round()
        world.end_round(
            round_index, evaluated(world, config, edges.models), participants=participants
        )


def edge_round(
    world: World,
    config: HierFavgConfig,
    edges: ServerModels[int],
    members: dict[int, list[int]],
) -> Generator[simpy.Event, object, int]:
    """Every edge at once: select among its clients, send them its model, gather their
    updates under its policy, average what reached it; returns the updates kept."""
    uploaded_to: dict[int, int] = {}  # client -> the edge its update went to (its selecting
    # edge's, or under serving_cell the edge of the cell it is in when it uploads)

    def take(client: int, result: TrainResult) -> None:
        edges.add(uploaded_to[client], client, result.params)

    gathers = []
    for site, clients in members.items():
        selected = yield from world.select_clients(
            config.client_fraction, config.over_selection, config.selection, among=clients
        )
        if not selected:
            continue
        arrivals, (received,) = world.send_down(selected, edges.models[site], site=site)
        tasks = {
            c: world.start_task(
                c, client_update(world, config, c, site, received, arrivals[c], uploaded_to)
            )
            for c in selected
        }
        gathers.append(
            world.gather(
                tasks,
                deadline_s=config.deadline_s,
                keep_first=world.wanted_updates(config.client_fraction, clients),
                take=take,
            )
        )
    kept = yield from run_side_by_side(world, gathers)
    yield from edges.receive()  # over the air: each edge's aggregation slot
    edges.step()
    return sum(len(k) for k in kept)


def client_update(
    world: World,
    config: HierFavgConfig,
    client: int,
    edge: int,
    params: torch.Tensor,
    model_arrived: simpy.Event,
    uploaded_to: dict[int, int],
) -> Generator[simpy.Event, object, TrainResult]:
    """κ₁ local updates from the edge's model, then the upload to its edge: the one that
    selected it, or under ``serving_cell`` the edge of the cell it is in now (its own, unless
    it was handed over meanwhile)."""
    result = yield from world.train(
        client, params, steps=config.local_steps, model_arrives=model_arrived
    )
    to_edge = uploaded_to[client] = world.edge_destination(config.association, client, edge)
    (sent,) = yield from world.upload(client, result.params, reference=params, to_edge=to_edge)
    return replace(result, params=sent)


def run_side_by_side(world: World, bodies: list[Generator]) -> Generator[simpy.Event, object, list]:
    """Process body: run the bodies concurrently; their return values, in order. One body
    runs inline (no process of its own, so one edge's round is FedAvg's, event for event)."""
    if len(bodies) == 1:
        return [(yield from bodies[0])]
    processes = [world.env.process(body) for body in bodies]
    yield world.env.all_of(processes)
    return [process.value for process in processes]


def cloud_aggregation(
    world: World, edges: ServerModels[int], members: dict[int, list[int]]
) -> Generator[simpy.Event, object, torch.Tensor]:
    """The edges that serve clients send their models up the backhaul; the cloud averages
    them by their clients' samples (|D^ℓ|) and sends the result to every edge."""
    weights = {
        site: float(sum(world.num_train(c) for c in clients))
        for site, clients in members.items()
        if clients
    }
    senders = sorted(weights)
    if not senders:  # nobody is present: nothing to aggregate
        return edges.models[world.sites[0]]
    yield from world.over_backhaul(senders, edges.models[senders[0]], up=True)  # same sizes
    if len(senders) == 1:
        cloud_model = edges.models[senders[0]]
    else:
        average = RunningAverage()
        for site in senders:
            average.add(edges.models[site], weights[site])
        cloud_model = average.result()
    yield from world.over_backhaul(world.sites, cloud_model, up=False)
    edges.models.update(dict.fromkeys(world.sites, cloud_model))
    return cloud_model


def evaluated(
    world: World, config: HierFavgConfig, models: dict[int, torch.Tensor]
) -> torch.Tensor | LazyModels:
    """One model when every edge holds the same (after a cloud aggregation, or one edge),
    else each client its edge's (by the association when the evaluation runs)."""
    first = next(iter(models.values()))
    if all(model is first for model in models.values()):
        return first
    edge_of: dict[int, int] = {}
    measured_at_s = [math.nan]

    def model_of(client: int) -> torch.Tensor:
        if measured_at_s[0] != world.env.now:  # a new evaluation: the association now
            measured_at_s[0] = world.env.now
            members = world.edge_members(config.association)
            edge_of.update((c, site) for site, clients in members.items() for c in clients)
        return models[edge_of[client]]

    return LazyModels(world, model_of)
