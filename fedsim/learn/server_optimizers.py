"""Server optimizers: FedOpt (Reddi et al., "Adaptive Federated Optimization", ICLR 2021).

The server treats the aggregate of a round's client models minus its own model as a
pseudo-gradient Δ = avg_i x_i − x (the sample-weighted mean delta, as FedAvg weighs) and
steps with an optimizer of its own (Algorithm 2; m starts at 0 and v at τ², no bias
correction, as in the paper):

    sgd       x ← x + η Δ                      (η = 1 is FedAvg: the average itself)
    momentum  v ← β₁ v + Δ;   x ← x + η v      (FedAvgM, Hsu et al. 2019)
    adagrad   m ← β₁ m + (1 − β₁) Δ;  v ← v + Δ²
    adam      m ← β₁ m + (1 − β₁) Δ;  v ← β₂ v + (1 − β₂) Δ²
    yogi      m ← β₁ m + (1 − β₁) Δ;  v ← v − (1 − β₂) Δ² sign(v − Δ²)
              (the three adaptive ones) x ← x + η m / (√v + τ)

State is one or two model-sized vectors per server model (a cluster keeps its own).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

SERVER_OPTIMIZERS = ("sgd", "momentum", "adagrad", "adam", "yogi")


@dataclass(frozen=True)
class ServerOptimizerSpec:
    name: str = "sgd"
    lr: float = 1.0  # η
    beta1: float = 0.9  # momentum: β of FedAvgM; adaptive: first-moment decay
    beta2: float = 0.99  # adam, yogi: second-moment decay
    tau: float = 1e-3  # adaptivity: √v + τ, and v starts at τ²

    def __post_init__(self) -> None:
        if self.name not in SERVER_OPTIMIZERS:
            raise ValueError(f"unknown server optimizer {self.name!r}; one of {SERVER_OPTIMIZERS}")
        if not (self.lr > 0 and self.tau > 0 and 0 <= self.beta1 < 1 and 0 <= self.beta2 < 1):
            raise ValueError("need lr > 0, tau > 0 and betas in [0, 1)")


class ServerOptimizer:
    """One server model's optimizer: ``step(x, average)`` returns the next model."""

    def __init__(self, spec: ServerOptimizerSpec) -> None:
        self.spec = spec
        self._m: torch.Tensor | None = None
        self._v: torch.Tensor | None = None

    def copy(self) -> ServerOptimizer:
        """The same state, to go on with separately (the halves of a cluster that splits)."""
        other = ServerOptimizer(self.spec)
        other._m, other._v = self._m, self._v  # replaced at each step, never written into
        return other

    def step(self, params: torch.Tensor, average: torch.Tensor) -> torch.Tensor:
        """The next server model from its current one and the round's aggregate of the
        clients' models (``Δ = average − params``); inputs are left as they are."""
        spec = self.spec
        if params.is_meta:  # timing-only: shapes alone
            return torch.empty_like(params)
        if spec.name == "sgd":
            return torch.lerp(params, average, spec.lr)  # exact average at η = 1
        delta = average - params
        if spec.name == "momentum":
            self._m = delta if self._m is None else spec.beta1 * self._m + delta
            return params + spec.lr * self._m
        if self._m is None:
            self._m = torch.zeros_like(params)
            self._v = torch.full_like(params, spec.tau**2)
        self._m = spec.beta1 * self._m + (1 - spec.beta1) * delta
        squared = delta.square()
        if spec.name == "adagrad":
            self._v = self._v + squared
        elif spec.name == "adam":
            self._v = spec.beta2 * self._v + (1 - spec.beta2) * squared
        else:  # yogi: v moves towards Δ² by at most (1 − β₂) Δ² per round
            self._v = self._v - (1 - spec.beta2) * squared * torch.sign(self._v - squared)
        return params + spec.lr * self._m / (self._v.sqrt() + spec.tau)
