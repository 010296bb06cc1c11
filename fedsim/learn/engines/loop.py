"""The loop engine: one client after the other, each an ordinary forward/backward of the
trainer's module whose parameters are views of one flat buffer (``Setup``). Runs any model
and every option, fp16's loss scaling included (its skipped steps are per client)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedsim.learn.engines.base import (
    CPU,
    Chunk,
    Distillation,
    Plan,
    Setup,
    TrainResult,
    client_floats,
    result_of,
)
from fedsim.learn.execution import ACTIVATION_COPIES
from fedsim.learn.optimizers import LossScaler, corrected_step, make_optimizer


class LoopEngine:
    name = "loop"
    batched = False

    def __init__(self, setup: Setup) -> None:
        self.setup = setup

    def cannot_run(self) -> str | None:
        return None

    def training_floats(self, sample_shape: tuple[int, ...], width: int, extra: int) -> int:
        """One client's (the loop holds one at a time, whatever the chunk)."""
        activations = ACTIVATION_COPIES * self.setup.activation_floats(sample_shape)
        return client_floats(self.setup, sample_shape, width, extra, activations)

    def train_chunk(self, chunk: Chunk) -> list[TrainResult]:
        return [
            self.train_one(p, x, y, plan, c, chunk.prox_mu, d, s)
            for p, (x, y), plan, c, d, s in zip(
                chunk.params, chunk.datasets, chunk.plans, chunk.centers, chunk.distills,
                chunk.corrections, strict=True,
            )
        ]  # fmt: skip

    def train_one(
        self,
        params: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        plan: Plan,
        prox_center: torch.Tensor | None,
        prox_mu: float,
        distill: Distillation | None,
        correction: torch.Tensor | None,
    ) -> TrainResult:
        """One training from ``params`` with a fresh optimizer (stateless FL clients): the
        plan's batches, the prox term prox_mu/2 ||w - center||^2, the co-distillation term on
        the plan's public rows, SCAFFOLD's ``correction`` at every step (``corrected_step``)."""
        setup = self.setup
        device = setup.device
        x, y = x.to(device), y.to(device)
        center = None if prox_center is None or not prox_mu else prox_center.to(device)
        shift = None if correction is None else correction.to(device)
        distill = None if distill is None else distill.to(device)
        w, g = setup.flat, setup.grad
        with torch.no_grad():
            w.copy_(params)
        opt = make_optimizer(setup.optimizer, w)
        loss_sum = torch.zeros((), device=device)
        scaler = LossScaler() if setup.precision == "fp16" else None
        model = setup.module
        model.train()
        for step, batch in enumerate(plan.batches):
            batch = batch.to(device)
            g.zero_()
            with setup.mixed():
                loss = F.cross_entropy(model(x[batch]), y[batch])
                total = loss
                if distill is not None:
                    total = loss + distill.loss(model, plan.public_rows[step])
            (total if scaler is None else total * scaler.scale).backward()
            with torch.no_grad():
                if scaler is not None and not scaler.unscale(g):
                    continue  # an overflowing fp16 step is skipped, as GradScaler does
                if center is not None:
                    g.add_(w, alpha=prox_mu).sub_(center, alpha=prox_mu)
                corrected_step(opt, setup.optimizer, w, g, shift)
            loss_sum += loss.detach()
        return result_of(w.to(CPU, copy=True), loss_sum.item(), plan)
