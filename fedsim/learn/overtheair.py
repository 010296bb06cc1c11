"""What the server gets from an over-the-air aggregation slot: the superposition of the
transmitters' signals plus the receiver's noise, turned back into an average (BAA) or a
majority vote (OBDA). The physics (who transmits, the noise level) is ``fedsim.sim.aircomp``;
this is the arithmetic on the updates.

BAA (Zhu, Wang, Huang, TWC 2020) with the weighted average FedAvg needs. Client k's update
Δ_k (one tensor of it; each tensor is its own segment of the slot) is normalized with its mean
μ_k and its root mean square σ_k about it, which it sends digitally before the slot (the
papers' two side numbers). The server announces the scale C = max_k w_k σ_k over the round's
participants (in the slot's grant), and client k transmits the real values
a_k (Δ_k − μ_k), a_k = w_k / C: mean power (w_k σ_k / C)² ≤ 1 per real, so its transmit power
stays within ρ₀ / g_k, which its power limit allows. The base station receives, per real,
√ρ₀ Σ_T a_k (Δ_k − μ_k) + noise; the server scales by C / √ρ₀, adds Σ_T w_k μ_k and divides by
Σ_T w_k over the transmitters T. Each coordinate of the estimated average then carries
Gaussian noise of variance C² / (SNR₀ (Σ_T w_k)²): for K transmitters of equal weight and
spread σ, σ² / (SNR₀ K²) (the receive SNR SNR₀ = ρ₀ / (F·N0·B) per transmitter).

OBDA (Zhu, Du, Gündüz, Huang, TWC 2021): every transmitter sends sign(Δ_k) as unit-power
BPSK; the server takes the sign of the received sum (a majority vote, one vote per client
whatever its weight, as signSGD's) and steps along it.

Sums are taken in float64 (as ``RunningAverage``'s), so the result does not depend on the
order of the clients; the noise is drawn from a seeded generator on the CPU, so a run is
reproducible on any device.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

Update = tuple[torch.Tensor, ...]


@dataclass(frozen=True)
class AirEstimate:
    """The server's estimate from one slot, and how good it is.

    ``tensors``: the estimated weighted average of the transmitters' updates (BAA) or the
    vote's signs (OBDA), or None when nobody transmitted. ``snr_db``: the effective SNR of the
    aggregate (mean square of its noiseless value over the noise variance, per number).
    ``mse``: the mean squared error per number against what an error-free uplink would have
    given the server from all the participants (the truncated ones included).
    """

    tensors: Update | None
    snr_db: float
    mse: float


def normalization(update: Update) -> list[tuple[float, float]]:
    """Each tensor's (mean, root mean square about the mean): the side information a client
    sends digitally before the slot."""
    sides = []
    for tensor in update:
        values = tensor.double()
        mean = values.mean()
        sides.append((float(mean), float((values - mean).square().mean().sqrt())))
    return sides


def _noise(like: torch.Tensor, std: float, generator: torch.Generator) -> torch.Tensor:
    noise = torch.randn(like.shape, generator=generator, dtype=torch.float64)
    return (noise * std).to(like.device)


class AnalogSum:
    """BAA's slot for one round's participants: their side information and the scale C the
    grant announces, computed once, then what each transmits and what the server gets."""

    def __init__(self, updates: Mapping[int, Update], weights: Mapping[int, float]) -> None:
        self.updates = updates
        self.weights = weights
        self.sides = {k: normalization(u) for k, u in updates.items()}
        count = len(next(iter(updates.values())))
        self.scale = [  # C per tensor: max over the participants of w_k σ_k
            max(weights[k] * self.sides[k][t][1] for k in updates) for t in range(count)
        ]

    def symbol_power(self, client: int) -> float:
        """The mean power per real value the client transmits, Σ_t n_t (w_k σ_k,t / C_t)² /
        Σ_t n_t (at most 1: its transmit power is this times ρ₀ / g_k)."""
        update, weight = self.updates[client], self.weights[client]
        power = 0.0
        for tensor, (_, spread), c in zip(update, self.sides[client], self.scale, strict=True):
            power += tensor.numel() * (weight * spread / c) ** 2 if c > 0 else 0.0
        return power / sum(t.numel() for t in update)

    def estimate(
        self, transmitters: Sequence[int], noise_std: float, generator: torch.Generator
    ) -> AirEstimate:
        """The weighted average of the transmitters' updates as the server estimates it from
        the superposed signals, with ``noise_std`` the noise on each real of the received sum
        (in units of one unit-power signal: 1 / √SNR₀). All the participants set C and the
        error-free reference; only ``transmitters`` add in."""
        if not transmitters:
            return AirEstimate(None, math.nan, math.nan)
        updates, weights = self.updates, self.weights
        exact = _weighted_mean(updates, weights, list(updates))
        clean = _weighted_mean(updates, weights, transmitters)
        total_w = sum(weights[k] for k in transmitters)
        estimate, signal_sq, noise_sq, error_sq, numel = [], 0.0, 0.0, 0.0, 0
        for t, c in enumerate(self.scale):
            like = clean[t]
            received = torch.zeros(like.shape, dtype=torch.float64, device=like.device)
            means = 0.0
            for k in sorted(transmitters):  # the superposition of a_k (Δ_k − μ_k), a_k = w_k / C
                mean, _ = self.sides[k][t]
                if c > 0:
                    received.add_(updates[k][t].double() - mean, alpha=weights[k] / c)
                means += weights[k] * mean  # sent digitally
            received += _noise(like, noise_std, generator)
            average = (c * received + means) / total_w
            estimate.append(average.to(like.dtype))
            signal_sq += float(like.double().square().sum())
            noise_sq += (noise_std * c / total_w) ** 2 * like.numel()
            error_sq += float((average - exact[t].double()).square().sum())
            numel += like.numel()
        return AirEstimate(tuple(estimate), _db(signal_sq, noise_sq), error_sq / numel)


def _weighted_mean(
    updates: Mapping[int, Update], weights: Mapping[int, float], clients: Sequence[int]
) -> list[torch.Tensor]:
    """Σ w_k Δ_k / Σ w_k over ``clients``, per tensor: what an error-free uplink from them
    would give the server."""
    total_w = sum(weights[k] for k in clients)
    first = updates[clients[0]]
    sums = [torch.zeros(t.shape, dtype=torch.float64, device=t.device) for t in first]
    for k in sorted(clients):
        for total, tensor in zip(sums, updates[k], strict=True):
            total.add_(tensor.double(), alpha=weights[k])
    return [(s / total_w).to(t.dtype) for s, t in zip(sums, first, strict=True)]


def one_bit_vote(
    updates: Mapping[int, Update],
    transmitters: Sequence[int],
    noise_std: float,
    generator: torch.Generator,
) -> AirEstimate:
    """OBDA: sign(Σ_T sign(Δ_k) + noise) per number, the noise of variance ``noise_std``² on
    each real of the received sum of unit-power BPSK symbols. The error-free reference is the
    majority vote of all the participants."""
    exact = _vote_sum(updates, list(updates))
    if not transmitters:
        return AirEstimate(None, math.nan, math.nan)
    votes = _vote_sum(updates, transmitters)
    estimate, signal_sq, error_sq, numel = [], 0.0, 0.0, 0
    dtypes = [t.dtype for t in updates[transmitters[0]]]
    for vote, reference, dtype in zip(votes, exact, dtypes, strict=True):
        received = vote + _noise(vote, noise_std, generator)
        signs = torch.sign(received)
        estimate.append(signs.to(dtype))
        signal_sq += float(vote.square().sum())
        error_sq += float((signs - torch.sign(reference)).square().sum())
        numel += vote.numel()
    noise_sq = noise_std**2 * numel
    return AirEstimate(tuple(estimate), _db(signal_sq, noise_sq), error_sq / numel)


def _vote_sum(updates: Mapping[int, Update], clients: Sequence[int]) -> list[torch.Tensor]:
    first = updates[clients[0]]
    sums = [torch.zeros(t.shape, dtype=torch.float64, device=t.device) for t in first]
    for k in clients:
        for total, tensor in zip(sums, updates[k], strict=True):
            total.add_(torch.sign(tensor).double())
    return sums


def _db(signal: float, noise: float) -> float:
    """signal / noise in dB (inf without noise, -inf without signal)."""
    if noise <= 0:
        return math.inf
    return 10.0 * math.log10(signal / noise) if signal > 0 else -math.inf
