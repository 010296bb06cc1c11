"""Server-side aggregation of flat parameter vectors."""

from __future__ import annotations

from collections.abc import Sequence

import torch


class RunningAverage:
    """Σ_i w_i v_i / Σ_i w_i, folded in one vector at a time.

    A server adds each update as it arrives and holds one sum, not the round's uploads. The
    sum is kept in float64: the products of float32 entries and sample counts are exact
    there and a round's rounding stays far below float32's, so the float32 result does not
    depend on the order the updates arrived in (nor on a BLAS kernel, as a stacked matrix
    product would). Shape-only ("meta") vectors of a timing-only run go through the same
    code without arithmetic.
    """

    def __init__(self) -> None:
        self._sum: torch.Tensor | None = None
        self._dtype = torch.float32
        self.weight = 0.0  # Σ w_i so far

    def add(self, vector: torch.Tensor, weight: float) -> None:
        if weight < 0:
            raise ValueError(f"weights must be non-negative, got {weight}")
        self.weight += weight
        if self._sum is None:
            self._dtype = vector.dtype
            self._sum = torch.zeros(vector.shape, dtype=torch.float64, device=vector.device)
        if not vector.is_meta:
            self._sum.add_(vector, alpha=weight)

    def result(self) -> torch.Tensor:
        """The weighted mean so far, in the vectors' dtype."""
        if self._sum is None or self.weight <= 0:
            raise ValueError("need at least one vector and a positive total weight")
        if self._sum.is_meta:
            return torch.empty_like(self._sum, dtype=self._dtype)
        return (self._sum / self.weight).to(self._dtype)


def weighted_average(vectors: Sequence[torch.Tensor], weights: Sequence[float]) -> torch.Tensor:
    """sum_i w_i v_i / sum_i w_i (FedAvg weights by local sample counts), as a
    ``RunningAverage`` of the vectors in the order given."""
    if len(vectors) != len(weights) or not vectors:
        raise ValueError("need one weight per vector and at least one vector")
    average = RunningAverage()
    for vector, weight in zip(vectors, weights, strict=True):
        average.add(vector, weight)
    return average.result()


class MajorityVote:
    """signSGD's server (Bernstein et al. 2018): each client votes sign(v_i − base) per
    number, one vote per client whatever its weight; the result steps ``step`` from
    ``base`` along the sign of the votes (a tie, zero: no step)."""

    def __init__(self, base: torch.Tensor, step: float) -> None:
        self._base = base
        self._step = step
        self._votes = torch.zeros(base.shape, dtype=torch.int32, device=base.device)
        self.weight = 0.0

    def add(self, vector: torch.Tensor, weight: float) -> None:
        self.weight += weight
        if not vector.is_meta:
            self._votes += torch.sign(vector - self._base).to(torch.int32)

    def result(self) -> torch.Tensor:
        if self._base.is_meta:
            return torch.empty_like(self._base)
        return self._base + self._step * torch.sign(self._votes).to(self._base.dtype)
