"""PerFed-CKT (Cho, Wang, Chiruvolu, Joshi): clustered co-distillation on a public set.

Clients keep their own models (architectures may differ) and never send parameters. Each
round (Algorithm 1):
  server: k-means (c clusters) on the |P| x N output matrices uploaded by last round's
          participants; sample m clients ∝ n_k without replacement; send them the c
          centroids (one transmission of c |P| x N matrices);
  client: compute its outputs s_k on P, take the nearest centroid as target s̄_k, run its
          local steps on CE(private batch) + λ mean ||softmax(f(x_pub)) - s̄_k(x_pub)||^2
          (eq. 1-3), and upload its new outputs on P (one |P| x N matrix).
The "logits" are softmax outputs (the paper defines them on the simplex), no temperature.

Choices where the paper is silent (spec §7.2): an explicit bootstrap round -1 in which
m clients upload the outputs of their fresh models; c_eff = min(c, uploads received);
with none received the last centroids are reused, and a bootstrap that received none (a
radio that lets nothing through) leaves the spec's other start, c = 1 with the uniform
target 1/N, until outputs arrive (every round's uploads are the next round's clustering
input, so nothing needs repeating); a client keeps its trained model even
if its upload is lost; the public set is held-out images of the same dataset's official
test split (CIFAR-100 is not available offline; see ``World.public_inputs``); computing
the outputs on P is part of the client's round time (not a separate compute draw).
"""

from __future__ import annotations

from collections.abc import Generator

import numpy as np
import simpy
import torch

from fedsim.config import PerFedCktConfig
from fedsim.learn.clustering import kmeans
from fedsim.learn.trainer import Distillation
from fedsim.world import World


def run(world: World, config: PerFedCktConfig) -> Generator[simpy.Event, object, None]:
    public = world.public_inputs(config.public_samples)
    models = {c: world.initial_params(c) for c in range(len(world.clients))}  # client state
    world.set_models(models)
    rng = world.streams.generator("perfed-ckt-kmeans")

    # --- bootstrap (round -1): fresh models' outputs from m clients ---
    selected = yield from world.select_clients(
        config.client_fraction, selection=config.selection, by_size=config.sample_by_size
    )
    tasks = {c: world.start_task(c, upload_outputs(world, c, models, public)) for c in selected}
    outputs = yield from world.gather(tasks, deadline_s=config.deadline_s)
    centroids = [torch.full((len(public), world.num_classes), 1 / world.num_classes)]

    for round_index in world.rounds():
        if outputs:
            centroids = cluster(outputs, config.clusters, rng)
        selected = yield from world.select_clients(
            config.client_fraction,
            config.over_selection,
            config.selection,
            by_size=config.sample_by_size,
        )
        arrivals, _ = world.send_down(selected, *centroids)  # outputs: never compressed
        tasks = {
            c: world.start_task(
                c, client_round(world, c, models, public, centroids, arrivals[c], config)
            )
            for c in selected
        }
        outputs = yield from world.gather(
            tasks,
            deadline_s=config.deadline_s,
            keep_first=world.wanted_updates(config.client_fraction),
        )
        world.end_round(round_index, models, participants=len(outputs))


def client_round(
    world: World,
    client: int,
    models: dict[int, torch.Tensor],
    public: torch.Tensor,
    centroids: list[torch.Tensor],
    arrived: simpy.Event,
    config: PerFedCktConfig,
) -> Generator[simpy.Event, object, torch.Tensor]:
    """Nearest centroid as target, local steps with co-distillation, upload new outputs."""
    yield arrived
    current = outputs_on(world, client, models[client], public)
    if current.is_meta:
        target = centroids[0]
    else:
        distances = [float((centroid - current).square().sum()) for centroid in centroids]
        target = centroids[int(np.argmin(distances))]
    distill = Distillation(public, target, config.distill_weight, config.public_batch_size)
    result = yield from world.train(client, models[client], distill=distill)
    models[client] = result.params  # kept even if the upload below is lost
    return (yield from upload_outputs(world, client, models, public))


def upload_outputs(
    world: World, client: int, models: dict[int, torch.Tensor], public: torch.Tensor
) -> Generator[simpy.Event, object, torch.Tensor]:
    """The client's softmax outputs on the public set, sent to the server."""
    outputs = outputs_on(world, client, models[client], public)
    yield from world.upload(client, outputs)
    return outputs


def outputs_on(
    world: World, client: int, params: torch.Tensor, public: torch.Tensor
) -> torch.Tensor:
    """Softmax outputs of a client's model on P (shape only in a timing-only run)."""
    if params.is_meta:
        return torch.empty(len(public), world.num_classes, device="meta")
    return world.trainer_of(client).probabilities(params, public)


def cluster(
    outputs: dict[int, torch.Tensor], clusters: int, rng: np.random.Generator
) -> list[torch.Tensor]:
    """k-means on the flattened output matrices; the centroids as |P| x N matrices."""
    stacked = torch.stack([outputs[c] for c in sorted(outputs)])
    if stacked.is_meta:
        return [stacked[0]] * min(clusters, len(stacked))
    points = stacked.flatten(1).double().numpy()
    fit = kmeans(points, min(clusters, len(points)), rng)
    shape = stacked.shape[1:]
    return [torch.from_numpy(c).float().reshape(shape) for c in fit.centroids]
