"""Path loss in dB between a transmitter and a receiver at a distance, by published laws."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SPEED_OF_LIGHT_MPS = 299_792_458.0
# The macro law's range starts at 35 m: TR 36.814 Table A.2.1.1-2's minimum distance between
# UE and cell (TR 38.901 Table 7.2-1 keeps 35 m, 2D, for UMa).
MACRO_MIN_DISTANCE_M = 35.0


@dataclass(frozen=True)
class PathLoss:
    """Path loss in dB at a distance, by one of three published laws.

    - ``macro``: 128.1 + 37.6·log10(d_km), the 3GPP TR 36.814 urban macro-cell law (2 GHz)
      used by Chen et al. (TWC 2021) and Yang et al. (TWC 2021);
    - ``log_distance``: PL(d0) + 10·α·log10(d/d0) (Rappaport, Wireless Communications, 4.9);
    - ``free_space``: Friis, 20·log10(4π·d·f/c).

    The macro law is specified from 35 m (``MACRO_MIN_DISTANCE_M``): nearer, its edge is used
    (the loss at 35 m), as the TR 38.901 laws below take theirs.
    """

    model: str = "macro"
    reference_loss_db: float = 40.0  # log_distance: PL(d0)
    reference_distance_m: float = 1.0  # log_distance: d0
    exponent: float = 3.0  # log_distance: α
    carrier_hz: float = 2e9  # free_space: f

    def db(self, distance_m: float | np.ndarray) -> float | np.ndarray:
        d = np.asarray(distance_m, dtype=float)
        if self.model == "macro":
            loss = 128.1 + 37.6 * np.log10(np.maximum(d, MACRO_MIN_DISTANCE_M) / 1000.0)
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


TR38901_SPEED_OF_LIGHT_MPS = 3.0e8  # TR 38.901 Table 7.4.1-1 notes 1 and 5 take c = 3.0e8 m/s
_TR38901_SCENARIOS = ("uma", "umi", "rma", "inh")
_TR38901_BS_HEIGHT_M = {"uma": 25.0, "umi": 10.0, "rma": 35.0, "inh": 3.0}
_TR38901_SIGMA_SF_DB = {"uma": (4.0, 6.0), "umi": (4.0, 7.82), "inh": (3.0, 8.03)}  # (LOS, NLOS)
_ENVIRONMENT_HEIGHT_M = 1.0  # h_E of UMi, and of UMa when C(d_2D, h_UT) = 0


def _as_output(value: np.ndarray) -> float | np.ndarray:
    return float(value) if value.ndim == 0 else value


@dataclass(frozen=True)
class Tr38901:
    """3GPP TR 38.901 (V17/V18) path loss of Table 7.4.1-1, LOS probability of Table 7.4.2-1
    and the shadow-fading σ_SF of Table 7.4.1-1, between a base station and a UT at a 2D
    (ground) distance, for ``uma`` (urban macro), ``umi`` (urban micro, street canyon),
    ``rma`` (rural macro) and ``inh`` (indoor hotspot, office). Specified for f_c from 0.5 to
    100 GHz (RMa: 0.5 to 30 GHz); not enforced here.

    Readings:

    - d_3D = √(d_2D² + (h_BS − h_UT)²); heights and f_c (GHz) enter the formulas as printed,
      c = 3.0e8 m/s as the table's notes say (not 299 792 458 m/s);
    - UMa/UMi breakpoint d'_BP = 4·h'_BS·h'_UT·f_c/c with h' = h − h_E and h_E = 1 m. For UMi
      that is the table's value. For UMa it is exact when h_UT ≤ 13 m (then C(d_2D, h_UT) = 0);
      above 13 m the table draws h_E = 1 m with probability 1/(1 + C) and otherwise uniformly
      from {12, 15, …, h_UT − 1.5} m: this deterministic law keeps the h_E = 1 m branch
      throughout, while ``los_probability`` does include the C'(h_UT) = ((h_UT − 13)/10)^1.5
      factor (13 < h_UT ≤ 23 m; UMa refuses h_UT > 23 m, where C' is not defined), capped at
      1: with C' > 0 the table's product exceeds 1 for d_2D just above 18 m (up to 18.5 m);
    - RMa d_BP = 2π·h_BS·h_UT·f_c/c; LOS uses PL1 for d_2D ≤ d_BP, PL2 = PL1(d_BP) +
      40·log10(d_3D/d_BP) beyond (to 10 km), and σ_SF is 4 dB with PL1, 6 dB with PL2;
    - NLOS is max(PL_LOS, PL'_NLOS) for every scenario (the optional simpler NLOS laws are not
      used); σ_SF NLOS: UMa 6, UMi 7.82, RMa 8, InH 8.03 dB (LOS: 4, 4, 4/6, 3 dB);
    - below the law's minimum distance the law's edge is used: outdoor d_2D < 10 m is taken as
      10 m, InH d_3D < 1 m as 1 m (the InH range is on d_3D). Beyond the upper end of the
      range (5 km UMa/UMi/RMa NLOS, 10 km RMa LOS, 150 m InH) the formulas are extrapolated;
    - LOS probability: outdoor laws on d_2D-out (the UT is outdoors), InH on d_2D-in (mixed or
      open office). The table derived them for the default BS heights (UMa 25, UMi 10, InH 3 m).

    Applicability heights of the table (not enforced beyond what the formulas need): UMa/UMi
    1.5 ≤ h_UT ≤ 22.5 m; RMa 10 ≤ h_BS ≤ 150, 1 ≤ h_UT ≤ 10, 5 ≤ h ≤ 50, 5 ≤ W ≤ 50 m; InH h_BS
    3 m, h_UT 1 m. UMa/UMi refuse heights below h_E = 1 m (a negative breakpoint; at 1 m,
    d'_BP = 0 and PL2 applies throughout).
    """

    scenario: str  # uma | umi | rma | inh
    carrier_hz: float = 3.5e9
    bs_height_m: float | None = None  # None: UMa 25, UMi 10, RMa 35, InH 3 m
    ut_height_m: float = 1.5  # InH: 1.0 is typical
    building_height_m: float = 5.0  # RMa: h, the average building height
    street_width_m: float = 20.0  # RMa: W, the average street width
    inh_office: str = "mixed"  # InH LOS probability: mixed | open

    def __post_init__(self) -> None:
        if self.scenario not in _TR38901_SCENARIOS:
            raise ValueError(
                f"unknown TR 38.901 scenario {self.scenario!r}; expected one of "
                f"{', '.join(_TR38901_SCENARIOS)}"
            )
        if self.inh_office not in ("mixed", "open"):
            raise ValueError(f"inh_office must be 'mixed' or 'open', not {self.inh_office!r}")
        positive = {
            "carrier_hz": self.carrier_hz,
            "bs_height_m": self.resolved_bs_height_m,
            "ut_height_m": self.ut_height_m,
            "building_height_m": self.building_height_m,
            "street_width_m": self.street_width_m,
        }
        for name, value in positive.items():
            if not (math.isfinite(value) and value > 0.0):
                raise ValueError(f"{name} must be positive and finite, not {value!r}")
        if self.scenario in ("uma", "umi"):
            for name in ("bs_height_m", "ut_height_m"):
                if positive[name] < _ENVIRONMENT_HEIGHT_M:
                    raise ValueError(
                        f"{name} must be at least h_E = 1 m for {self.scenario} "
                        f"(the breakpoint uses h - h_E), not {positive[name]!r}"
                    )
        if self.scenario == "uma" and self.ut_height_m > 23.0:
            raise ValueError(
                f"ut_height_m must be at most 23 m for uma (C'(h_UT) of Table 7.4.2-1), "
                f"not {self.ut_height_m!r}"
            )

    @property
    def resolved_bs_height_m(self) -> float:
        """h_BS: the given height, or the scenario's default."""
        if self.bs_height_m is None:
            return _TR38901_BS_HEIGHT_M.get(self.scenario, math.nan)
        return float(self.bs_height_m)

    @property
    def breakpoint_m(self) -> float:
        """d'_BP (UMa, UMi) or d_BP (RMa) in metres; InH has none (inf)."""
        f_hz, h_bs, h_ut = self.carrier_hz, self.resolved_bs_height_m, self.ut_height_m
        c = TR38901_SPEED_OF_LIGHT_MPS
        if self.scenario in ("uma", "umi"):
            h_e = _ENVIRONMENT_HEIGHT_M
            return 4.0 * (h_bs - h_e) * (h_ut - h_e) * f_hz / c
        if self.scenario == "rma":
            return 2.0 * math.pi * h_bs * h_ut * f_hz / c
        return math.inf

    def los_probability(self, distance_2d_m: float | np.ndarray) -> float | np.ndarray:
        """Pr_LOS of Table 7.4.2-1 at a 2D distance."""
        d = self._checked(distance_2d_m)
        if self.scenario in ("uma", "umi"):
            ds = np.maximum(d, 18.0)
            scale_m = 63.0 if self.scenario == "uma" else 36.0
            p = 18.0 / ds + np.exp(-ds / scale_m) * (1.0 - 18.0 / ds)
            if self.scenario == "uma" and self.ut_height_m > 13.0:
                c_prime = ((self.ut_height_m - 13.0) / 10.0) ** 1.5
                p = p * (1.0 + c_prime * 1.25 * (ds / 100.0) ** 3 * np.exp(-ds / 150.0))
                p = np.minimum(p, 1.0)  # the product exceeds 1 just beyond 18 m
            p = np.where(d <= 18.0, 1.0, p)
        elif self.scenario == "rma":
            p = np.where(d <= 10.0, 1.0, np.exp(-(d - 10.0) / 1000.0))
        elif self.inh_office == "mixed":
            p = np.where(
                d <= 1.2,
                1.0,
                np.where(d < 6.5, np.exp(-(d - 1.2) / 4.7), 0.32 * np.exp(-(d - 6.5) / 32.6)),
            )
        else:
            p = np.where(
                d <= 5.0,
                1.0,
                np.where(d <= 49.0, np.exp(-(d - 5.0) / 70.8), 0.54 * np.exp(-(d - 49.0) / 211.7)),
            )
        return _as_output(np.asarray(p, dtype=float))

    def db(self, distance_2d_m: float | np.ndarray, los: bool | np.ndarray) -> float | np.ndarray:
        """Basic path loss in dB (Table 7.4.1-1; NLOS is max(PL_LOS, PL'_NLOS))."""
        d_2d = self._checked(distance_2d_m)
        line_of_sight = np.asarray(los, dtype=bool)
        los_db, nlos_prime_db = self._laws_db(d_2d)
        loss = np.where(line_of_sight, los_db, np.maximum(los_db, nlos_prime_db))
        return _as_output(np.asarray(loss, dtype=float))

    def shadowing_std_db(
        self, distance_2d_m: float | np.ndarray, los: bool | np.ndarray
    ) -> float | np.ndarray:
        """σ_SF in dB of Table 7.4.1-1 for the link's state (RMa LOS: 4 dB up to d_BP, then 6)."""
        d_2d = self._checked(distance_2d_m)
        line_of_sight = np.asarray(los, dtype=bool)
        if self.scenario == "rma":
            los_sigma = np.where(np.maximum(d_2d, 10.0) <= self.breakpoint_m, 4.0, 6.0)
            sigma = np.where(line_of_sight, los_sigma, 8.0)
        else:
            los_sigma, nlos_sigma = _TR38901_SIGMA_SF_DB[self.scenario]
            sigma = np.where(line_of_sight, los_sigma, nlos_sigma) + np.zeros_like(d_2d)
        return _as_output(np.asarray(sigma, dtype=float))

    @staticmethod
    def _checked(distance_2d_m: float | np.ndarray) -> np.ndarray:
        d = np.asarray(distance_2d_m, dtype=float)
        if d.ndim == 0:  # the radio's one distance at a time: checked without numpy's reductions
            valid = math.isfinite(distance := float(d)) and distance >= 0.0
        else:
            valid = bool(np.all(np.isfinite(d))) and not np.any(d < 0.0)
        if not valid:
            raise ValueError("distance_2d_m must be finite and non-negative")
        return d

    def _laws_db(self, d_2d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(PL_LOS, PL'_NLOS) in dB at 2D distances (clamped to the law's minimum)."""
        f_ghz = self.carrier_hz / 1e9
        h_bs, h_ut = self.resolved_bs_height_m, self.ut_height_m
        if self.scenario == "inh":
            d_3d = np.maximum(np.hypot(d_2d, h_bs - h_ut), 1.0)
            los_db = 32.4 + 17.3 * np.log10(d_3d) + 20.0 * np.log10(f_ghz)
            nlos_prime_db = 17.3 + 38.3 * np.log10(d_3d) + 24.9 * np.log10(f_ghz)
            return los_db, nlos_prime_db
        d_2d = np.maximum(d_2d, 10.0)
        d_3d = np.hypot(d_2d, h_bs - h_ut)
        d_bp = self.breakpoint_m
        if self.scenario == "rma":
            h, w = self.building_height_m, self.street_width_m

            def pl1(d_m: np.ndarray | float) -> np.ndarray:
                return (
                    20.0 * np.log10(40.0 * math.pi * d_m * f_ghz / 3.0)
                    + min(0.03 * h**1.72, 10.0) * np.log10(d_m)
                    - min(0.044 * h**1.72, 14.77)
                    + 0.002 * math.log10(h) * d_m
                )

            pl2 = pl1(d_bp) + 40.0 * np.log10(d_3d / d_bp)
            los_db = np.where(d_2d <= d_bp, pl1(d_3d), pl2)
            nlos_prime_db = (
                161.04
                - 7.1 * math.log10(w)
                + 7.5 * math.log10(h)
                - (24.37 - 3.7 * (h / h_bs) ** 2) * math.log10(h_bs)
                + (43.42 - 3.1 * math.log10(h_bs)) * (np.log10(d_3d) - 3.0)
                + 20.0 * math.log10(f_ghz)
                - (3.2 * math.log10(11.75 * h_ut) ** 2 - 4.97)
            )
            return los_db, nlos_prime_db
        if self.scenario == "uma":
            intercept_db, near_slope, far_term = 28.0, 22.0, 9.0
            nlos_prime_db = (
                13.54 + 39.08 * np.log10(d_3d) + 20.0 * np.log10(f_ghz) - 0.6 * (h_ut - 1.5)
            )
        else:  # umi
            intercept_db, near_slope, far_term = 32.4, 21.0, 9.5
            nlos_prime_db = (
                22.4 + 35.3 * np.log10(d_3d) + 21.3 * np.log10(f_ghz) - 0.3 * (h_ut - 1.5)
            )
        pl1 = intercept_db + near_slope * np.log10(d_3d) + 20.0 * np.log10(f_ghz)
        pl2 = (
            intercept_db
            + 40.0 * np.log10(d_3d)
            + 20.0 * np.log10(f_ghz)
            - far_term * np.log10(d_bp**2 + (h_bs - h_ut) ** 2)
        )
        return np.where(d_2d <= d_bp, pl1, pl2), nlos_prime_db
