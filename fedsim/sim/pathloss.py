"""Path loss in dB between a transmitter and a receiver at a distance, by published laws."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SPEED_OF_LIGHT_MPS = 299_792_458.0


@dataclass(frozen=True)
class PathLoss:
    """Path loss in dB at a distance, by one of three published laws.

    - ``macro``: 128.1 + 37.6·log10(d_km), the 3GPP TR 36.814 urban macro-cell law (2 GHz)
      used by Chen et al. (TWC 2021) and Yang et al. (TWC 2021);
    - ``log_distance``: PL(d0) + 10·α·log10(d/d0) (Rappaport, Wireless Communications, 4.9);
    - ``free_space``: Friis, 20·log10(4π·d·f/c).
    """

    model: str = "macro"
    reference_loss_db: float = 40.0  # log_distance: PL(d0)
    reference_distance_m: float = 1.0  # log_distance: d0
    exponent: float = 3.0  # log_distance: α
    carrier_hz: float = 2e9  # free_space: f

    def db(self, distance_m: float | np.ndarray) -> float | np.ndarray:
        d = np.asarray(distance_m, dtype=float)
        if self.model == "macro":
            loss = 128.1 + 37.6 * np.log10(d / 1000.0)
        elif self.model == "log_distance":
            ratio = d / self.reference_distance_m
            loss = self.reference_loss_db + 10.0 * self.exponent * np.log10(ratio)
        elif self.model == "free_space":
            loss = 20.0 * np.log10(4.0 * math.pi * d * self.carrier_hz / SPEED_OF_LIGHT_MPS)
        else:
            raise ValueError(f"unknown path-loss model {self.model!r}")
        return float(loss) if loss.ndim == 0 else loss


@dataclass(frozen=True)
class UmiStreetCanyon:
    """3GPP TR 38.901 UMi-Street Canyon (Table 7.4.1-1) between two antennas at
    ``height_m`` (1.5 m: two handsets, as TR 37.885 takes it for vehicle-to-vehicle links),
    for device-to-device links; ``los``: whether a pair sees each other is drawn from the
    LOS probability of Table 7.4.2-1 (``probability``), or fixed. Distances below 10 m are
    taken as 10 m (the law's range). No shadowing."""

    carrier_hz: float = 2e9
    height_m: float = 1.5
    los: str = "probability"  # probability | always | never

    def los_probability(self, distance_m: float) -> float:
        if distance_m <= 18.0:
            return 1.0
        return 18.0 / distance_m + math.exp(-distance_m / 36.0) * (1.0 - 18.0 / distance_m)

    def db(self, distance_m: float, line_of_sight: bool) -> float:
        d = max(distance_m, 10.0)  # both antennas at one height: the 3D distance is the 2D one
        f_ghz = self.carrier_hz / 1e9
        effective_m = self.height_m - 1.0  # h' = h - h_E, h_E = 1 m
        breakpoint_m = 4.0 * effective_m * effective_m * self.carrier_hz / SPEED_OF_LIGHT_MPS
        if d <= breakpoint_m:
            los_db = 32.4 + 21.0 * math.log10(d) + 20.0 * math.log10(f_ghz)
        else:
            los_db = (
                32.4 + 40.0 * math.log10(d) + 20.0 * math.log10(f_ghz)
                - 9.5 * math.log10(breakpoint_m**2)
            )  # fmt: skip
        if line_of_sight:
            return los_db
        nlos_db = (
            35.3 * math.log10(d) + 22.4 + 21.3 * math.log10(f_ghz) - 0.3 * (self.height_m - 1.5)
        )
        return max(los_db, nlos_db)
