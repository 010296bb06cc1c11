"""The clients' optimizers on one flat parameter vector (the trainer's layout), equal to
torch.optim's step for step, and the dynamic loss scaling of fp16 training."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class OptimizerSpec:
    name: str = "sgd"  # "sgd" | "adam"
    lr: float = 0.05
    momentum: float = 0.0  # sgd only
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)  # adam only
    eps: float = 1e-8  # adam only

    def __post_init__(self) -> None:
        if self.name not in ("sgd", "adam"):
            raise ValueError(f"unknown optimizer {self.name!r}; choose one of: sgd, adam")
        if self.lr <= 0 or self.momentum < 0 or self.weight_decay < 0 or self.eps <= 0:
            raise ValueError("lr and eps must be > 0, momentum and weight_decay >= 0")
        if not all(0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"adam betas must be in [0, 1), got {self.betas}")


class SGD:
    """torch.optim.SGD (dampening 0, no Nesterov) on one flat tensor; fresh state per training."""

    def __init__(self, spec: OptimizerSpec) -> None:
        self.spec = spec
        self.momentum_buffer: torch.Tensor | None = None

    def step(self, w: torch.Tensor, g: torch.Tensor) -> None:
        s = self.spec
        if s.weight_decay:
            g.add_(w, alpha=s.weight_decay)
        if s.momentum:
            if self.momentum_buffer is None:
                self.momentum_buffer = g.clone()
            else:
                self.momentum_buffer.mul_(s.momentum).add_(g)
            g = self.momentum_buffer
        w.add_(g, alpha=-s.lr)

    def keep_first(self, rows: int) -> None:
        """Keep the state of the first ``rows`` clients of a stacked (clients x params) run."""
        if self.momentum_buffer is not None:
            self.momentum_buffer = self.momentum_buffer[:rows]


class Adam:
    """torch.optim.Adam (L2 weight decay, no AMSGrad) on one flat tensor."""

    def __init__(self, spec: OptimizerSpec, like: torch.Tensor) -> None:
        self.spec = spec
        self.step_count = 0
        self.exp_avg = torch.zeros_like(like)
        self.exp_avg_sq = torch.zeros_like(like)

    def step(self, w: torch.Tensor, g: torch.Tensor) -> None:
        s = self.spec
        beta1, beta2 = s.betas
        self.step_count += 1
        if s.weight_decay:
            g.add_(w, alpha=s.weight_decay)
        self.exp_avg.lerp_(g, 1 - beta1)
        self.exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        step_size = s.lr / (1 - beta1**self.step_count)
        denom = (self.exp_avg_sq.sqrt() / math.sqrt(1 - beta2**self.step_count)).add_(s.eps)
        w.addcdiv_(self.exp_avg, denom, value=-step_size)

    def keep_first(self, rows: int) -> None:
        """Keep the state of the first ``rows`` clients of a stacked (clients x params) run."""
        self.exp_avg, self.exp_avg_sq = self.exp_avg[:rows], self.exp_avg_sq[:rows]


def make_optimizer(spec: OptimizerSpec, like: torch.Tensor) -> SGD | Adam:
    """A fresh optimizer on flat vectors shaped like ``like``; ``step(w, g)`` updates w in place.

    For algorithms that keep an optimizer across rounds (e.g. FedeRiCo's owner-side Adam).
    """
    return Adam(spec, like) if spec.name == "adam" else SGD(spec)


class LossScaler:
    """Dynamic loss scaling for fp16 (what ``torch.amp.GradScaler`` does, on the flat
    gradient): the loss is multiplied by ``scale`` before backward so small fp16 gradients do
    not underflow; a step whose unscaled gradient is not finite is skipped and the scale
    halved, and after ``growth_interval`` good steps in a row it doubles."""

    def __init__(self, scale: float = 2.0**16, growth_interval: int = 2000) -> None:
        self.scale = scale
        self.growth_interval = growth_interval
        self._good_steps = 0

    def unscale(self, g: torch.Tensor) -> bool:
        """Divide the gradient by the scale; whether the optimizer may step with it."""
        g.div_(self.scale)
        if not bool(torch.isfinite(g).all()):
            self.scale /= 2.0
            self._good_steps = 0
            return False
        self._good_steps += 1
        if self._good_steps == self.growth_interval:
            self.scale *= 2.0
            self._good_steps = 0
        return True
