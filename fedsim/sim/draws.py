"""Counter-based random draws: a draw is a fixed function of (seed, purpose, counters), not the
next number of a stream, so a channel is the same function of time in every run of a scenario
and idle links cost nothing. And block fading, the draws the radio makes most."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

_MASK64 = (1 << 64) - 1
SHADOWING, FADING, OUTAGE, WAYPOINT, HARQ, LOS, UPLOAD, PLACEMENT = range(1, 9)  # purposes


def _mix(z: int) -> int:
    """SplitMix64's finalizer: a bijection of 64-bit words that scrambles every bit."""
    z = (z + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def hashed_key(key: int, *counters: int) -> int:
    """The key that draws sharing these leading counters start from:
    ``hashed_uniform(hashed_key(key, a), b) == hashed_uniform(key, a, b)``."""
    z = key & _MASK64
    for counter in counters:
        z = _mix(z ^ (counter & _MASK64))
    return z


def hashed_uniform(key: int, *counters: int) -> float:
    """A uniform draw in (0, 1) that is a fixed function of (key, counters)."""
    return ((_mix(hashed_key(key, *counters)) >> 11) + 0.5) * 2.0**-53


def hashed_normal_pair(key: int, *counters: int) -> tuple[float, float]:
    """Two independent standard normals (Box–Muller on two hashed uniforms)."""
    radius = math.sqrt(-2.0 * math.log(hashed_uniform(key, *counters, 0)))
    angle = 2.0 * math.pi * hashed_uniform(key, *counters, 1)
    return radius * math.cos(angle), radius * math.sin(angle)


@dataclass(frozen=True)
class Fading:
    """Small-scale fading |h|² (mean 1), constant over blocks of ``coherence_s`` or, when that
    is None, re-drawn at every transmission.

    Blocks are independent draws unless ``doppler_hz`` is set: then the scattered part of h is
    a sum of sinusoids (Zheng and Xiao, IEEE Trans. Commun. 2003, after Clarke 1968 and Jakes
    1974), a fixed function of time per link whose autocorrelation is J0(2π f_D τ) (the power's
    J0²(2π f_D τ) for Rayleigh), sampled at each block's start: consecutive blocks are then as
    correlated as the Doppler says, which a channel estimate some blocks old needs."""

    model: str = "none"  # none | rayleigh | rician
    k_factor: float = 0.0  # rician: power of the line of sight over the scattered power
    coherence_s: float | None = None
    doppler_hz: float | None = None  # None: independent blocks

    def power_gain(self, key: int, *counters: int) -> float:
        """|h|² of the link named by the counters (the last one: its block, or transmission)."""
        if self.model == "none":
            return 1.0
        if self.doppler_hz is not None and self.coherence_s:
            *link, block = counters
            real, imaginary = _sum_of_sinusoids(key, tuple(link), self.doppler_hz,
                                                block * self.coherence_s)  # fmt: skip
            n1, n2 = math.sqrt(2.0) * real, math.sqrt(2.0) * imaginary  # two N(0, 1)
        elif self.model == "rayleigh":  # |h|² ~ Exp(1)
            return -math.log(hashed_uniform(key, *counters, 0))
        else:
            n1, n2 = hashed_normal_pair(key, *counters)
        if self.model == "rayleigh":
            return 0.5 * (n1 * n1 + n2 * n2)
        if self.model == "rician":
            k = self.k_factor
            scatter = math.sqrt(0.5 / (k + 1.0))
            return (math.sqrt(k / (k + 1.0)) + scatter * n1) ** 2 + (scatter * n2) ** 2
        raise ValueError(f"unknown fading model {self.model!r}")


SINUSOIDS = 16  # per quadrature: Zheng and Xiao's statistics hold from about 8


@lru_cache(maxsize=1 << 16)
def _sinusoid_terms(
    key: int, link: tuple[int, ...]
) -> tuple[tuple[float, float, float, float], ...]:
    """The link's M paths: (cos α_n, sin α_n, φ_n, ψ_n) with α_n = (2πn − π + θ)/(4M) and θ,
    φ_n, ψ_n uniform on [−π, π) (Zheng and Xiao 2003, eq. 7)."""
    theta = 2.0 * math.pi * hashed_uniform(key, *link, -1) - math.pi
    terms = []
    for n in range(1, SINUSOIDS + 1):
        alpha = (2.0 * math.pi * n - math.pi + theta) / (4 * SINUSOIDS)
        phi = 2.0 * math.pi * hashed_uniform(key, *link, -2, n) - math.pi
        psi = 2.0 * math.pi * hashed_uniform(key, *link, -3, n) - math.pi
        terms.append((math.cos(alpha), math.sin(alpha), phi, psi))
    return tuple(terms)


def _sum_of_sinusoids(
    key: int, link: tuple[int, ...], doppler_hz: float, time_s: float
) -> tuple[float, float]:
    """The link's h(t) = (X, Y), each of variance 1/2: X = √(1/M) Σ cos(2π f_D t cos α_n + φ_n),
    Y = √(1/M) Σ cos(2π f_D t sin α_n + ψ_n)."""
    omega = 2.0 * math.pi * doppler_hz * time_s
    real = imaginary = 0.0
    for cos_alpha, sin_alpha, phi, psi in _sinusoid_terms(key, link):
        real += math.cos(omega * cos_alpha + phi)
        imaginary += math.cos(omega * sin_alpha + psi)
    scale = math.sqrt(1.0 / SINUSOIDS)
    return real * scale, imaginary * scale


def block_of(time_s: float, period_s: float) -> int:
    """The block holding time_s, when blocks start at k·period_s, robust to float rounding
    (so that waking at (k+1)·period_s always lands in block k+1)."""
    block = math.floor(time_s / period_s)
    if (block + 1) * period_s <= time_s:
        block += 1
    elif block * period_s > time_s:
        block -= 1
    return block
