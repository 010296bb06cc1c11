"""Counter-based random draws: a draw is a fixed function of (seed, purpose, counters), not the
next number of a stream, so a channel is the same function of time in every run of a scenario
and idle links cost nothing. And block fading, the draws the radio makes most."""

from __future__ import annotations

import math
from dataclasses import dataclass

_MASK64 = (1 << 64) - 1
SHADOWING, FADING, OUTAGE, WAYPOINT, HARQ, LOS, UPLOAD = 1, 2, 3, 4, 5, 6, 7  # purposes


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
    """Small-scale fading |h|² (mean 1), re-drawn per block of ``coherence_s`` or, when
    that is None, at every transmission."""

    model: str = "none"  # none | rayleigh | rician
    k_factor: float = 0.0  # rician: power of the line of sight over the scattered power
    coherence_s: float | None = None

    def power_gain(self, key: int, *counters: int) -> float:
        if self.model == "none":
            return 1.0
        if self.model == "rayleigh":  # |h|² ~ Exp(1)
            return -math.log(hashed_uniform(key, *counters, 0))
        if self.model == "rician":
            k = self.k_factor
            n1, n2 = hashed_normal_pair(key, *counters)
            scatter = math.sqrt(0.5 / (k + 1.0))
            return (math.sqrt(k / (k + 1.0)) + scatter * n1) ** 2 + (scatter * n2) ** 2
        raise ValueError(f"unknown fading model {self.model!r}")


def block_of(time_s: float, period_s: float) -> int:
    """The block holding time_s, when blocks start at k·period_s, robust to float rounding
    (so that waking at (k+1)·period_s always lands in block k+1)."""
    block = math.floor(time_s / period_s)
    if (block + 1) * period_s <= time_s:
        block += 1
    elif block * period_s > time_s:
        block -= 1
    return block
