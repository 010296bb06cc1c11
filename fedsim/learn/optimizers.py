"""The clients' optimizers on flat parameter vectors (the trainer's layout), equal to
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


Params = torch.Tensor | list[torch.Tensor]
"""What an optimizer steps: one flat vector, or a list of tensors stepped as one (the vmap
engine's per-layer stacks) with PyTorch's multi-tensor ``_foreach`` operations, one kernel
launch per operation for all of them on a GPU (elementwise: the same numbers either way)."""


def as_list(tensors: Params) -> list[torch.Tensor]:
    return [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)


class SGD:
    """torch.optim.SGD (dampening 0, no Nesterov) on flat tensors; fresh state per training."""

    def __init__(self, spec: OptimizerSpec) -> None:
        self.spec = spec
        self.momentum_buffer: list[torch.Tensor] | None = None

    def step(self, w: Params, g: Params) -> None:
        s = self.spec
        w, g = as_list(w), as_list(g)
        if s.weight_decay:
            torch._foreach_add_(g, w, alpha=s.weight_decay)
        if s.momentum:
            if self.momentum_buffer is None:
                self.momentum_buffer = [t.clone() for t in g]
            else:
                torch._foreach_mul_(self.momentum_buffer, s.momentum)
                torch._foreach_add_(self.momentum_buffer, g)
            g = self.momentum_buffer
        torch._foreach_add_(w, g, alpha=-s.lr)

    def keep_first(self, rows: int) -> None:
        """Keep the state of the first ``rows`` clients of a stacked (clients x params) run."""
        if self.momentum_buffer is not None:
            self.momentum_buffer = [t[:rows] for t in self.momentum_buffer]


class Adam:
    """torch.optim.Adam (L2 weight decay, no AMSGrad) on flat tensors."""

    def __init__(self, spec: OptimizerSpec, like: Params) -> None:
        self.spec = spec
        self.step_count = 0
        self.exp_avg = [torch.zeros_like(t) for t in as_list(like)]
        self.exp_avg_sq = [torch.zeros_like(t) for t in as_list(like)]

    def step(self, w: Params, g: Params) -> None:
        s = self.spec
        w, g = as_list(w), as_list(g)
        beta1, beta2 = s.betas
        self.step_count += 1
        if s.weight_decay:
            torch._foreach_add_(g, w, alpha=s.weight_decay)
        torch._foreach_lerp_(self.exp_avg, g, 1 - beta1)
        torch._foreach_mul_(self.exp_avg_sq, beta2)
        torch._foreach_addcmul_(self.exp_avg_sq, g, g, value=1 - beta2)
        step_size = s.lr / (1 - beta1**self.step_count)
        denom = torch._foreach_sqrt(self.exp_avg_sq)
        torch._foreach_div_(denom, math.sqrt(1 - beta2**self.step_count))
        torch._foreach_add_(denom, s.eps)
        torch._foreach_addcdiv_(w, self.exp_avg, denom, value=-step_size)

    def keep_first(self, rows: int) -> None:
        """Keep the state of the first ``rows`` clients of a stacked (clients x params) run."""
        self.exp_avg = [t[:rows] for t in self.exp_avg]
        self.exp_avg_sq = [t[:rows] for t in self.exp_avg_sq]


def make_optimizer(spec: OptimizerSpec, like: Params) -> SGD | Adam:
    """A fresh optimizer on tensors shaped like ``like``; ``step(w, g)`` updates w in place.

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
