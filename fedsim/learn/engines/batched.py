"""The batched engines' common part: a chunk's clients trained in lockstep (``lockstep``),
eager or at fixed shapes, compiled or captured (``captured``); the step itself (gradients,
prox term, SCAFFOLD's corrected step: ``State.step``) is the same in every mode."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from fedsim.learn.engines.base import Chunk, Setup, TrainResult, client_floats, result_of
from fedsim.learn.engines.captured import CapturedStep, run_captured
from fedsim.learn.engines.lockstep import Batch, Finished, Lockstep, State, padded_clients
from fedsim.learn.execution import ACTIVATION_COPIES


class BatchedEngine:
    """A chunk's clients in lockstep; subclasses say how one step's gradients are computed
    (``gradients``) and what the clients' models output (``logits``)."""

    batched = True
    refused_layer: str | None = None
    """Why the engine cannot take the model (the layer), found once by the subclass."""

    def __init__(self, setup: Setup) -> None:
        self.setup = setup
        self.fixed_shapes = setup.compile != "eager"
        self._captured: dict[tuple, CapturedStep] = {}

    def cannot_run(self) -> str | None:
        """The model's layer the engine cannot take; else fp16, whose loss scaling skips
        steps per client (the loop's ``LossScaler``)."""
        if self.refused_layer is None and self.setup.precision == "fp16":
            return "fp16 needs a loss scale per client (skipped steps): the loop has it"
        return self.refused_layer

    def gradients(
        self, ws: list[torch.Tensor], batch: Batch
    ) -> tuple[Sequence[torch.Tensor], torch.Tensor]:
        """Each client's gradient of its loss (masked mean cross-entropy, plus the distillation
        term) per layer, and its cross-entropy (for the reported mean loss)."""
        raise NotImplementedError

    def logits(self, layers: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """(clients, samples, classes): each client's model on its own rows of x."""
        raise NotImplementedError

    def held_per_sample(self, sample_shape: tuple[int, ...]) -> int:
        """Floats a training step holds per sample beyond the input: ``ACTIVATION_COPIES`` of
        every layer's output (the output, its gradient, the backward's temporaries)."""
        return ACTIVATION_COPIES * self.setup.activation_floats(sample_shape)

    def evaluation_floats(self, sample_shape: tuple[int, ...]) -> int:
        """Floats an evaluation pass holds per sample beyond the input: the layers' outputs."""
        return self.setup.activation_floats(sample_shape)

    def training_floats(self, sample_shape: tuple[int, ...], width: int, extra: int) -> int:
        held = self.held_per_sample(sample_shape)
        return client_floats(self.setup, sample_shape, width, extra, held)

    def train_chunk(self, chunk: Chunk) -> list[TrainResult]:
        """The chunk trained in lockstep (eager), or at fixed shapes: its clients padded to
        ``padded_clients(count, chunk.capacity)``, the width to the batch size (module doc)."""
        setup = self.setup
        count = len(chunk.plans)
        if self.fixed_shapes:
            rows, width = padded_clients(count, chunk.capacity), setup.batch_size
        else:
            rows = count
            width = max((len(b) for plan in chunk.plans for b in plan.batches), default=1)
        lockstep = Lockstep(setup, chunk, rows, width)
        if self.fixed_shapes and setup.compile == "graph":
            layers, loss_sum = run_captured(setup, self.gradients, self._captured, chunk, lockstep)
        else:
            layers, loss_sum = self._run(chunk, lockstep)
        losses = loss_sum[:count].tolist()
        flats = setup.unstack(layers, count)
        return [
            result_of(flat, loss, plan)
            for flat, loss, plan in zip(flats, losses, chunk.plans, strict=True)
        ]

    def _run(self, chunk: Chunk, lockstep: Lockstep) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Every step, eager: on a shrinking prefix, or at fixed shapes with finished clients'
        rows copied out as they finish (masked rows keep moving: momentum, weight decay)."""
        setup = self.setup
        state = State.start(setup, chunk, lockstep.rows)
        finished = Finished(state.layers, lockstep) if self.fixed_shapes else None
        active = lockstep.count
        for step in range(max(lockstep.steps, default=0)):
            if finished is not None:
                batch = lockstep.batch(step, lockstep.rows)
                state.step(setup, self.gradients, lockstep.rows, batch)
                finished.copy(state.layers, step + 1)
                continue
            if lockstep.steps[active - 1] == step:  # the last clients are done
                active = lockstep.active(step)
                state.optimizer.keep_first(active)
            state.step(setup, self.gradients, active, lockstep.batch(step, active))
        return (state.layers if finished is None else finished.layers), state.loss_sum
