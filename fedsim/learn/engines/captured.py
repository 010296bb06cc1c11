"""A captured step (``training.compile: graph``, CUDA): a batched engine's whole step, forward,
backward and optimizer, recorded once as a CUDA graph and replayed, so that the host no
longer launches each kernel.

What a graph records is fixed: the addresses of its tensors and every shape. So a step reads
its inputs from static buffers (the next step's samples are gathered into them, outside the
graph), its state (the stacks, the optimizer's buffers, the loss sums) lives at fixed
addresses and is reloaded for each chunk, the optimizer keeps its step count on the device
(``start_in_place``), and the chunk's shape is fixed (``lockstep.padded_clients``, the batch
width at the batch size). One graph per shape and set of options, at most ``MAX_GRAPHS``
kept. The replayed kernels are the eager step's, so the results are the eager fixed-shape
step's (Adam: its device-scalar form)."""

from __future__ import annotations

import torch

from fedsim.learn.engines.base import Chunk, Setup
from fedsim.learn.engines.lockstep import Batch, Finished, Gradients, Lockstep, State

MAX_GRAPHS = 4
"""Captured shapes a trainer keeps (oldest dropped first): a run meets a handful (the power-of-
two paddings of ``padded_clients``), each holding its chunk's state on the device."""
WARMUP_STEPS = 2
"""Eager steps on a side stream before a capture (CUDA's advice: libraries set up their
handles and workspaces there, not inside the graph); their effect on the state is reloaded."""


class CapturedStep:
    """One shape's graph, its state and its input buffers."""

    def __init__(
        self, setup: Setup, gradients: Gradients, chunk: Chunk, lockstep: Lockstep
    ) -> None:
        self.setup, self.gradients = setup, gradients
        self.state = State.start(setup, chunk, lockstep.rows)
        self.state.optimizer.start_in_place(self.state.layers)
        rows, width = lockstep.index.shape[0], lockstep.index.shape[2]
        x_all, y_all = lockstep.x_all, lockstep.y_all
        public = targets = None
        distill_weight = 0.0
        if lockstep.distill is not None:
            count = lockstep.public_index.shape[2]
            public = x_all.new_zeros(rows, count, *lockstep.public_all.shape[1:])
            targets = x_all.new_zeros(rows, count, lockstep.targets_all.shape[1])
            distill_weight = lockstep.distill.weight
        self.batch = Batch(
            x_all.new_zeros(rows, width, *x_all.shape[1:]),
            y_all.new_zeros(rows, width),
            lockstep.weight.new_zeros(rows, width),
            public, targets, distill_weight,
        )  # fmt: skip
        self.graph = self._capture()

    def step(self) -> None:
        """The step the graph holds: every row of the state on the input buffers."""
        self.state.step(self.setup, self.gradients, len(self.state.loss_sum), self.batch)

    def _capture(self) -> torch.cuda.CUDAGraph:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_STEPS):
                self.step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.step()
        return graph

    def load(self, chunk: Chunk, lockstep: Lockstep) -> None:
        """A new chunk's start: its stacks in the state's place, fresh optimizer state."""
        state = self.state
        fresh = State.start(self.setup, chunk, lockstep.rows)
        with torch.no_grad():
            for mine, theirs in ((state.layers, fresh.layers), (state.centers, fresh.centers),
                                 (state.shifts, fresh.shifts)):  # fmt: skip
                if mine is not None:
                    torch._foreach_copy_(mine, theirs)
            state.optimizer.start_in_place(state.layers)
            state.loss_sum.zero_()

    def feed(self, lockstep: Lockstep, step: int) -> None:
        """Step ``step``'s inputs gathered into the graph's buffers."""
        batch = self.batch
        rows = lockstep.index[:, step].reshape(-1)
        torch.index_select(lockstep.x_all, 0, rows, out=batch.x.view(-1, *batch.x.shape[2:]))
        torch.index_select(lockstep.y_all, 0, rows, out=batch.y.view(-1))
        batch.weight.copy_(lockstep.weight[:, step])
        if batch.public is not None and batch.targets is not None:
            public = lockstep.public_index[:, step].reshape(-1)
            own = lockstep.target_index[:, step].reshape(-1)
            shape = batch.public.shape[2:]
            torch.index_select(lockstep.public_all, 0, public, out=batch.public.view(-1, *shape))
            torch.index_select(lockstep.targets_all, 0, own, out=batch.targets.flatten(0, 1))


def _key(chunk: Chunk, lockstep: Lockstep) -> tuple:
    distill = lockstep.distill
    public = None
    if distill is not None:
        public = (distill.batch_size, distill.weight, tuple(lockstep.public_all.shape),
                  tuple(lockstep.targets_all.shape[1:]))  # fmt: skip
    return (
        tuple(lockstep.index.shape[::2]),
        tuple(lockstep.x_all.shape[1:]),
        chunk.prox_mu if chunk.centers[0] is not None else None,
        chunk.corrections[0] is not None,
        public,
    )


def run_captured(
    setup: Setup,
    gradients: Gradients,
    cache: dict[tuple, CapturedStep],
    chunk: Chunk,
    lockstep: Lockstep,
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """The chunk's steps as replays of its shape's graph (captured on first use, kept in the
    engine's ``cache``); the clients' final stacks and summed losses."""
    key = _key(chunk, lockstep)
    captured = cache.pop(key, None) or CapturedStep(setup, gradients, chunk, lockstep)
    cache[key] = captured  # the most recent last
    while len(cache) > MAX_GRAPHS:
        del cache[next(iter(cache))]
    captured.load(chunk, lockstep)
    finished = Finished(captured.state.layers, lockstep)
    for step in range(max(lockstep.steps, default=0)):
        captured.feed(lockstep, step)
        captured.graph.replay()
        finished.copy(captured.state.layers, step + 1)
    return finished.layers, captured.state.loss_sum.clone()
