"""What the batched engines (vmap, stacked) share: a chunk's clients trained in lockstep, one
batched forward/backward and one multi-tensor optimizer step for all of them per step.

Parameters are kept per layer, (clients, *shape), with one optimizer over all layers
(elementwise, so the same as one on each flat vector): a flat stack would cost a concatenation
of every gradient per step. Partial batches are padded to a common width and masked out of the
loss (weight 0). Two ways to run the steps:

- eager (``training.compile: eager``): clients sorted longest training first, the stack shrinks
  to the clients still training (a prefix), so no work is spent on finished ones;
- fixed shapes (every other ``training.compile``): the clients padded to ``padded_clients``
  and the batch width to the trainer's batch size, chosen once, finished and padding clients
  masked out (weight 0, their rows copied out as they finish), so that one step can be
  captured once and replayed (``captured.py``) or compiled without a new shape per step.
  The masked rows cost compute; the arithmetic of a real client's rows is the eager one's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from fedsim.learn.engines.base import Chunk, Setup
from fedsim.learn.optimizers import SGD, Adam, corrected_step, make_optimizer


class Batch(NamedTuple):
    """One lockstep step's inputs, a row per client: samples (padded), labels, weights (1 a
    real sample, 0 padding), and with distillation the public samples and their targets."""

    x: torch.Tensor
    y: torch.Tensor
    weight: torch.Tensor
    public: torch.Tensor | None
    targets: torch.Tensor | None
    distill_weight: float


Gradients = Callable[[list[torch.Tensor], Batch], tuple[Sequence[torch.Tensor], torch.Tensor]]
"""An engine's step: each client's gradient of its loss (masked mean cross-entropy, plus the
distillation term) per layer, and its cross-entropy (for the reported mean loss)."""


@dataclass
class State:
    """A chunk's training state on the device: the stacks and the optimizer over them."""

    layers: list[torch.Tensor]
    centers: list[torch.Tensor] | None
    shifts: list[torch.Tensor] | None
    optimizer: SGD | Adam
    loss_sum: torch.Tensor
    prox_mu: float

    @classmethod
    def start(cls, setup: Setup, chunk: Chunk, rows: int) -> State:
        """A chunk's state: its stacks (padded to ``rows``) and a fresh optimizer."""
        layers = setup.stack(chunk.params, rows)
        centers = shifts = None
        if chunk.prox_mu and chunk.centers[0] is not None:
            centers = setup.stack(chunk.centers, rows)
        if chunk.corrections[0] is not None:
            shifts = setup.stack(chunk.corrections, rows)
        optimizer = make_optimizer(setup.optimizer, layers)
        loss_sum = torch.zeros(rows, device=setup.device)
        return cls(layers, centers, shifts, optimizer, loss_sum, chunk.prox_mu)

    def step(self, setup: Setup, gradients: Gradients, active: int, batch: Batch) -> None:
        """One step of the first ``active`` clients: gradients, prox term, corrected step."""
        ws = [layer[:active] for layer in self.layers]  # views: updated in place
        with setup.mixed():
            gs, loss = gradients(ws, batch)
        with torch.no_grad():
            gs = list(gs)
            if self.centers is not None:
                centers = [c[:active] for c in self.centers]
                torch._foreach_add_(gs, ws, alpha=self.prox_mu)
                torch._foreach_sub_(gs, centers, alpha=self.prox_mu)
            shifts = None if self.shifts is None else [s[:active] for s in self.shifts]
            corrected_step(self.optimizer, setup.optimizer, ws, gs, shifts)
            self.loss_sum[:active] += loss.detach()


def padded_clients(count: int, chunk: int) -> int:
    """The fixed client count of a chunk of ``count`` clients: the chunk size where it is at
    least half full, else the next power of two (a handful of shapes per run, each captured
    once, at most half of a step spent on padding)."""
    if 2 * count > chunk:
        return chunk
    return 1 << (count - 1).bit_length()


class Lockstep:
    """One chunk on the device: its index and weight tensors (clients, steps, width), its data,
    its public set; ``batch`` gathers one step's inputs."""

    def __init__(self, setup: Setup, chunk: Chunk, rows: int, width: int) -> None:
        plans = chunk.plans
        self.count, self.rows = len(plans), rows
        self.steps = [len(plan.batches) for plan in plans]
        total = self.steps[0]
        index = torch.zeros(rows, total, width, dtype=torch.long)
        weight = torch.zeros(rows, total, width)
        offset = 0
        for row, plan in enumerate(plans):
            if plan.batches:
                padded = nn.utils.rnn.pad_sequence(plan.batches, batch_first=True)
                index[row, : len(plan.batches), : padded.shape[1]] = padded + offset
                lengths = torch.tensor([len(b) for b in plan.batches])
                weight[row, : len(plan.batches)] = (torch.arange(width) < lengths[:, None]).float()
            offset += len(chunk.datasets[row][1])
        self.x_all = setup.to_device(torch.cat([x for x, _ in chunk.datasets]))
        self.y_all = setup.to_device(torch.cat([y for _, y in chunk.datasets]))
        self.index, self.weight = setup.to_device(index), setup.to_device(weight)
        distill = chunk.distills[0]
        self.distill = distill
        if distill is not None:  # public rows per step; each client's own targets
            public = torch.zeros(rows, total, distill.batch_size, dtype=torch.long)
            for row, plan in enumerate(plans):
                if plan.public_rows:
                    public[row, : len(plan.public_rows)] = torch.stack(plan.public_rows)
            size = len(distill.inputs)
            own = public + size * torch.arange(rows)[:, None, None].clamp(max=self.count - 1)
            self.public_index, self.target_index = setup.to_device(public), setup.to_device(own)
            self.public_all = setup.to_device(distill.inputs)
            self.targets_all = setup.to_device(torch.cat([d.targets for d in chunk.distills]))

    def active(self, step: int) -> int:
        """Clients still training at ``step``: a prefix, longest training first."""
        return sum(1 for k in self.steps if k > step)

    def batch(self, step: int, active: int) -> Batch:
        rows = self.index[:active, step]
        public = targets = None
        if self.distill is not None:
            public = self.public_all[self.public_index[:active, step]]
            targets = self.targets_all[self.target_index[:active, step]]
        weight = 0.0 if self.distill is None else self.distill.weight
        return Batch(self.x_all[rows], self.y_all[rows], self.weight[:active, step], public,
                     targets, weight)  # fmt: skip


class Finished:
    """The rows of clients that finished, copied out of stacks that keep stepping (fixed
    shapes): clients are sorted longest first, so those done after a step are a range."""

    def __init__(self, layers: list[torch.Tensor], lockstep: Lockstep) -> None:
        self.steps = lockstep.steps
        self.layers = [layer[: lockstep.count].clone() for layer in layers]  # 0 steps: as is

    def copy(self, layers: list[torch.Tensor], done: int) -> None:
        rows = [row for row, k in enumerate(self.steps) if k == done]
        if rows:
            with torch.no_grad():
                for out, layer in zip(self.layers, layers, strict=True):
                    out[rows[0] : rows[-1] + 1] = layer[rows[0] : rows[-1] + 1]
