"""Frequency-selective small-scale fading: one power gain per subband, from a tapped delay line.

The channel of a link is H(f, t) = Σ_l √P_l h_l(t) exp(−j2π f τ_l) over the taps of a 3GPP
TR 38.901 TDL profile (§7.7.2, Tables 7.7.2-1..3: TDL-A, TDL-B, TDL-C, all taps Rayleigh), whose
normalized delays are scaled by the wanted delay spread (§7.7.3). The tap gains h_l are
independent, unit-variance complex Gaussians, re-drawn every block or, given a Doppler
frequency, each a Zheng–Xiao sum of sinusoids in time (Zheng and Xiao, IEEE Trans. Commun.
2003), as the flat ``draws.Fading`` does. The tap powers are normalized to sum 1, so the mean
power gain of every subband is 1 and the large-scale path loss keeps its meaning.

The gain is taken at each subband's centre and held across the subband, which is right while
the subband is narrower than the coherence bandwidth. At TR 38.901's nominal delay spread of
100 ns (Table 7.7.3-1), |H|² decorrelates to 0.5 over 3.3 MHz (TDL-C), 2.8 MHz (TDL-A) and
1.8 MHz (TDL-B), while a 4-PRB resource block group at 30 kHz spacing (51 PRBs, 20 MHz) spans
1.44 MHz: the power at its edges is still 0.83–0.87 correlated with its centre. Long delay
spreads (300 ns) or 16-PRB groups (5.76 MHz at 100 MHz) break this; pass a smaller
``group_prbs`` there.

Draws are counter-based like ``draws``: a gain is a fixed function of (key, counters), the same
in any call order."""

from __future__ import annotations

import importlib.util
import json
import math
from dataclasses import dataclass
from functools import cache, cached_property, lru_cache
from pathlib import Path

import numpy as np

from fedsim.sim.draws import hashed_key

PROFILES = ("TDL-A", "TDL-B", "TDL-C")  # NLOS: every tap Rayleigh
SINUSOIDS = 8  # per quadrature per tap: the α_n tile [0, π/2), so the mean is J0 for any M
_TABLE_VERSIONS = ("v19_2", "v16_1")  # Sionna's TR 38.901 releases, newest first


@dataclass(frozen=True)
class TdlProfile:
    """A TDL profile scaled to a delay spread: tap delays and linear powers summing to 1."""

    name: str
    delays_s: tuple[float, ...]
    powers: tuple[float, ...]

    def frequency_correlation(self, delta_f_hz: float | np.ndarray) -> complex | np.ndarray:
        """R(Δf) = Σ_l P_l exp(-j 2π Δf τ_l): the channel's frequency correlation; the
        correlation coefficient of the power gains |H|² at two frequencies Δf apart is |R(Δf)|²."""
        delta = np.asarray(delta_f_hz, dtype=float)
        phases = np.exp(-2j * np.pi * np.multiply.outer(delta, np.asarray(self.delays_s)))
        correlation = phases @ np.asarray(self.powers)
        return complex(correlation) if correlation.ndim == 0 else correlation


def _profile_file(name: str) -> Path:
    """The JSON table of a profile in the installed Sionna, found without importing it."""
    spec = importlib.util.find_spec("sionna")
    if spec is not None and spec.submodule_search_locations:
        models = Path(next(iter(spec.submodule_search_locations))) / "phy/channel/tr38901/models"
        for version in _TABLE_VERSIONS:
            if (models / version / f"{name}.json").is_file():
                return models / version / f"{name}.json"
    raise ValueError(
        f"the {name} profile's TR 38.901 table was not found: the sionna-no-rt package "
        "provides it (pip install sionna-no-rt)"
    )


@cache
def _normalized_taps(name: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(normalized delays, linear powers summing to 1) of a profile, read once per process."""
    if name not in PROFILES:
        raise ValueError(f"unknown TDL profile {name!r}: expected one of {', '.join(PROFILES)}")
    table = json.loads(_profile_file(name).read_text())
    powers = 10.0 ** (np.asarray(table["powers"], dtype=float) / 10.0)
    powers /= powers.sum()
    return tuple(float(d) for d in table["delays"]), tuple(float(p) for p in powers)


@cache
def tdl_profile(name: str, delay_spread_s: float) -> TdlProfile:
    """Profile ``name`` (TDL-A, TDL-B or TDL-C) with its delays scaled to ``delay_spread_s``."""
    if not (delay_spread_s > 0 and math.isfinite(delay_spread_s)):
        raise ValueError(f"delay_spread_s must be positive and finite, got {delay_spread_s}")
    delays, powers = _normalized_taps(name)
    return TdlProfile(name, tuple(d * delay_spread_s for d in delays), powers)


def rbg_prbs(num_prbs: int) -> int:
    """Nominal RBG size P of TS 38.214 Table 6.1.2.2.1-1 (configuration 1): 1–36 PRBs: 2,
    37–72: 4, 73–144: 8, 145–275: 16."""
    for most, size in ((36, 2), (72, 4), (144, 8), (275, 16)):
        if 1 <= num_prbs <= most:
            return size
    raise ValueError(f"num_prbs must be in 1..275 (TS 38.214 Table 6.1.2.2.1-1), got {num_prbs}")


@dataclass(frozen=True)
class SubbandGrid:
    """A band cut into subbands of whole PRBs, lowest first; PRB k spans [k, k + 1)·prb_hz."""

    prbs: tuple[int, ...]  # PRBs per subband
    prb_hz: float

    @classmethod
    def of(cls, num_prbs: int, prb_hz: float, group_prbs: int | None = None) -> SubbandGrid:
        """Groups of ``group_prbs`` PRBs (the last may be smaller); None: the RBG size, taking
        the bandwidth part to start on an RBG boundary."""
        group = rbg_prbs(num_prbs) if group_prbs is None else group_prbs
        if num_prbs < 1 or group < 1 or not prb_hz > 0:
            raise ValueError(
                f"need num_prbs >= 1, group_prbs >= 1 and prb_hz > 0, "
                f"got {num_prbs}, {group_prbs}, {prb_hz}"
            )
        full, rest = divmod(num_prbs, group)
        return cls((group,) * full + ((rest,) if rest else ()), float(prb_hz))

    @property
    def count(self) -> int:
        return len(self.prbs)

    @property
    def num_prbs(self) -> int:
        return sum(self.prbs)

    @cached_property
    def prbs_array(self) -> np.ndarray:
        """PRBs per subband, as floats (a share spread over the band holds these)."""
        prbs = np.asarray(self.prbs, dtype=float)
        prbs.flags.writeable = False
        return prbs

    @cached_property
    def prb_weights(self) -> np.ndarray:
        """Each subband's share of the band's PRBs: what a gain over the band averages with."""
        weights = self.prbs_array / self.num_prbs
        weights.flags.writeable = False
        return weights

    def overlap(self, first: int | np.ndarray, count: int | np.ndarray) -> np.ndarray:
        """The PRBs of [first, first + count) on each subband (floats; arrays of ranges as
        columns broadcast to one row each)."""
        ends = np.cumsum(self.prbs_array)
        starts = ends - self.prbs_array
        return np.clip(np.minimum(ends, first + count) - np.maximum(starts, first), 0.0, None)

    @property
    def centers_hz(self) -> np.ndarray:
        """Each subband's centre frequency relative to the band's lower edge."""
        widths = np.asarray(self.prbs, dtype=float)
        return (np.cumsum(widths) - widths / 2.0) * self.prb_hz


@lru_cache(maxsize=64)
def _steering(profile: TdlProfile, grid: SubbandGrid) -> np.ndarray:
    """The (subbands × taps) matrix √P_l exp(−j2π f_s τ_l): H at the centres is this times h."""
    phases = np.exp(-2j * np.pi * np.multiply.outer(grid.centers_hz, np.asarray(profile.delays_s)))
    matrix = phases * np.sqrt(np.asarray(profile.powers))
    matrix.flags.writeable = False
    return matrix


@lru_cache(maxsize=1 << 15)  # bounded (~6 kB a link, ~200 MB at most, as draws.py's flat terms)
def _tap_sinusoids(
    key: int, link: tuple[int, ...], taps: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each tap's M paths (taps × M): cos α_n, sin α_n, φ_n, ψ_n with α_n = (2πn − π + θ)/(4M)
    and θ, φ_n, ψ_n uniform on [−π, π) (Zheng and Xiao 2003, eq. 7), independent per tap."""
    rng = np.random.Generator(np.random.PCG64(hashed_key(key, *link)))
    theta = rng.uniform(-np.pi, np.pi, size=(taps, 1))
    phi = rng.uniform(-np.pi, np.pi, size=(taps, SINUSOIDS))
    psi = rng.uniform(-np.pi, np.pi, size=(taps, SINUSOIDS))
    alpha = (2.0 * np.pi * np.arange(1, SINUSOIDS + 1) - np.pi + theta) / (4 * SINUSOIDS)
    terms = (np.cos(alpha), np.sin(alpha), phi, psi)
    for array in terms:
        array.flags.writeable = False
    return terms


@dataclass(frozen=True)
class SelectiveFading:
    """Per-subband block fading |H(f_s)|² (mean 1) of a TDL profile, constant over blocks of
    ``coherence_s``; blocks independent unless ``doppler_hz`` is set, then each tap is a sum of
    sinusoids sampled at its block's start, so blocks are as correlated as the Doppler says."""

    profile: TdlProfile
    coherence_s: float
    doppler_hz: float | None = None

    def __post_init__(self) -> None:
        if not self.coherence_s > 0:
            raise ValueError(f"coherence_s must be positive, got {self.coherence_s}")
        if self.doppler_hz is not None and not self.doppler_hz >= 0:
            raise ValueError(f"doppler_hz must be non-negative, got {self.doppler_hz}")

    def gains(self, key: int, grid: SubbandGrid, *counters: int) -> np.ndarray:
        """|H(f_s)|² at each subband centre of the grid (mean 1) for the link named by the
        counters; the LAST counter is the block index (like draws.Fading.power_gain)."""
        if not counters:
            raise ValueError("gains needs the block index as its last counter")
        taps = len(self.profile.powers)
        if self.doppler_hz is None:
            rng = np.random.Generator(np.random.PCG64(hashed_key(key, *counters)))
            normal = rng.standard_normal(2 * taps) * math.sqrt(0.5)
            h = normal[:taps] + 1j * normal[taps:]
        else:
            *link, block = counters
            cos_alpha, sin_alpha, phi, psi = _tap_sinusoids(key, tuple(link), taps)
            omega = 2.0 * math.pi * self.doppler_hz * block * self.coherence_s
            scale = math.sqrt(1.0 / SINUSOIDS)
            real = np.cos(omega * cos_alpha + phi).sum(axis=1)
            imaginary = np.cos(omega * sin_alpha + psi).sum(axis=1)
            h = (real + 1j * imaginary) * scale
        response = _steering(self.profile, grid) @ h
        return response.real**2 + response.imag**2
