"""The clients' optimizers on flat parameter vectors (the trainer's layout), equal to
torch.optim's step for step, SCAFFOLD's corrected step, and the dynamic loss scaling of fp16
training."""

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

    def start_in_place(self, like: Params) -> None:
        """Fresh state that later steps update where it lies (a captured step replays at fixed
        addresses): zero momentum buffers, so that the first step's buffer is 0·m + g = g, the
        gradient itself, as the eager first step's copy of it."""
        if not self.spec.momentum:
            return
        if self.momentum_buffer is None:
            self.momentum_buffer = [torch.zeros_like(t) for t in as_list(like)]
        else:
            torch._foreach_zero_(self.momentum_buffer)


class Adam:
    """torch.optim.Adam (L2 weight decay, no AMSGrad) on flat tensors.

    The step count is a Python number, except after ``start_in_place``: then a tensor on the
    parameters' device, so that a captured step (replayed, never re-run in Python) counts
    too, as torch.optim's ``capturable`` Adam does (the same formula, other roundings)."""

    def __init__(self, spec: OptimizerSpec, like: Params) -> None:
        self.spec = spec
        self.step_count: int | torch.Tensor = 0
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
        denom = torch._foreach_sqrt(self.exp_avg_sq)
        if isinstance(self.step_count, torch.Tensor):  # device scalars: no host sync
            count = self.step_count
            torch._foreach_div_(denom, (1 - torch.pow(beta2, count)).sqrt())
            torch._foreach_add_(denom, s.eps)
            update = torch._foreach_div(self.exp_avg, denom)
            torch._foreach_mul_(update, -s.lr / (1 - torch.pow(beta1, count)))
            torch._foreach_add_(w, update)
            return
        step_size = s.lr / (1 - beta1**self.step_count)
        torch._foreach_div_(denom, math.sqrt(1 - beta2**self.step_count))
        torch._foreach_add_(denom, s.eps)
        torch._foreach_addcdiv_(w, self.exp_avg, denom, value=-step_size)

    def start_in_place(self, like: Params) -> None:
        """Fresh state at fixed addresses, the step count a device tensor (see the class)."""
        torch._foreach_zero_(self.exp_avg)
        torch._foreach_zero_(self.exp_avg_sq)
        if isinstance(self.step_count, torch.Tensor):
            self.step_count.zero_()
        else:
            device = as_list(like)[0].device
            self.step_count = torch.zeros((), dtype=torch.float32, device=device)

    def keep_first(self, rows: int) -> None:
        """Keep the state of the first ``rows`` clients of a stacked (clients x params) run."""
        self.exp_avg = [t[:rows] for t in self.exp_avg]
        self.exp_avg_sq = [t[:rows] for t in self.exp_avg_sq]


def corrected_step(
    opt: SGD | Adam, spec: OptimizerSpec, w: Params, g: Params, shift: Params | None
) -> None:
    """One optimizer step of w on g, corrected by ``shift`` (SCAFFOLD's c - c_i): y <- y -
    lr (g + c - c_i). With plain SGD the correction joins the gradient, as the paper writes
    it; with optimizer state (momentum, Adam) it is a step of its own, -lr (c - c_i), outside
    that state, as NIID-Bench's SCAFFOLD does: fed through momentum 0.9 it would be amplified
    tenfold, on top of option II's c_i already measuring momentum-amplified displacements,
    and training diverges (CIFAR-10 Dirichlet(0.5), scenarios/papers/scaffold_niid_bench)."""
    if shift is None:
        opt.step(w, g)
    elif spec.name == "sgd" and not spec.momentum:
        torch._foreach_add_(as_list(g), as_list(shift))
        opt.step(w, g)
    else:
        opt.step(w, g)
        torch._foreach_sub_(as_list(w), as_list(shift), alpha=spec.lr)


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
