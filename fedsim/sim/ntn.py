"""The non-terrestrial channel of 3GPP TR 38.811 (V15.4.0) and a satellite link budget.

Path loss PL = PL_b + PL_g + PL_s (dB, clause 6.6): the basic loss PL_b = FSPL(d, f_c) + SF
+ CL (eq. 6.6-2/-4: free space on the slant range, shadow fading SF ~ N(0, σ_SF²), and
for a link out of line of sight the clutter loss CL), the atmospheric gases PL_g =
A_zenith(f_c)/sin α (clause 6.6.4, eq. 6.6-8, the zenith attenuation of ITU-R P.676-10
Annex 2), and scintillation PL_s (clause 6.6.6: the tropospheric loss at 99% of Table
6.6.6.2.1-1 from 6 GHz on; below 6 GHz the ionospheric one within 20° of the magnetic
equator, 0 elsewhere). The line-of-sight probability (Table 6.6.1-1), σ_SF and CL (Tables
6.6.2-1 to -3) are given per scenario and band at the reference elevations 10°..90°; an
elevation takes the nearest (half up, as openntn). Suburban and rural share their tables in
TR 38.811. The tables are those openntn 2.0.0 ships (its ``models/*.json``, MIT/Apache-2.0,
identical for uplink and downlink), copied here so fedsim reads them without torch or Sionna;
``tests/test_ntn.py`` checks them against openntn where it is installed.

The link budget (TR 38.821 clause 6.1): C/N = EIRP + G/T − PL − k − 10 log10 B, with
Boltzmann's k = −228.6 dBW/K/Hz. Free-space links (a platform above the weather, satellite to
satellite) take FSPL alone. The Doppler shift of a link is f_c times the rate at which the range
shrinks, over c (reported, not compensated: NR NTN pre-compensates it at the terminal).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedsim.sim.orbits import SPEED_OF_LIGHT_M_S

BOLTZMANN_DBW_PER_K_HZ = -228.6
REFERENCE_ELEVATIONS_DEG = (10, 20, 30, 40, 50, 60, 70, 80, 90)
SCENARIOS = ("dense_urban", "urban", "suburban", "rural")
BANDS = ("S", "Ka")

# Table 6.6.1-1: LOS probability by elevation (suburban and rural share a column).
LOS_PROBABILITY = {
    "dense_urban": (0.282, 0.331, 0.398, 0.468, 0.537, 0.612, 0.738, 0.82, 0.981),
    "urban": (0.246, 0.386, 0.493, 0.613, 0.726, 0.805, 0.919, 0.968, 0.992),
    "suburban": (0.782, 0.869, 0.919, 0.929, 0.935, 0.94, 0.949, 0.952, 0.998),
}
# Tables 6.6.2-1 to -3: (σ_SF LOS, σ_SF NLOS, CL NLOS) in dB by elevation, per band.
SHADOWING_CLUTTER = {
    ("dense_urban", "S"): (
        (3.5, 3.4, 2.9, 3.0, 3.1, 2.7, 2.5, 2.3, 1.2),
        (15.5, 13.9, 12.4, 11.7, 10.6, 10.5, 10.1, 9.2, 9.2),
        (34.3, 30.9, 29.0, 27.7, 26.8, 26.2, 25.8, 25.5, 25.5),
    ),
    ("dense_urban", "Ka"): (
        (2.9, 2.4, 2.7, 2.4, 2.4, 2.7, 2.6, 2.8, 0.6),
        (17.1, 17.1, 15.6, 14.6, 14.2, 12.6, 12.1, 12.3, 12.3),
        (44.3, 39.9, 37.5, 35.8, 34.6, 33.8, 33.3, 33.0, 32.9),
    ),
    ("urban", "S"): (
        (4.0,) * 9,
        (6.0,) * 9,
        (34.3, 30.9, 29.0, 27.7, 26.8, 26.2, 25.8, 25.5, 25.5),
    ),
    ("urban", "Ka"): (
        (4.0,) * 9,
        (6.0,) * 9,
        (44.3, 39.9, 37.5, 35.8, 34.6, 33.8, 33.3, 33.0, 32.9),
    ),
    ("suburban", "S"): (
        (1.79, 1.14, 1.14, 0.92, 1.42, 1.56, 0.85, 0.72, 0.72),
        (8.93, 9.08, 8.78, 10.25, 10.56, 10.74, 10.17, 11.52, 11.52),
        (19.52, 18.17, 18.42, 18.28, 18.63, 17.68, 16.5, 16.3, 16.3),
    ),
    ("suburban", "Ka"): (
        (1.9, 1.6, 1.9, 2.3, 2.7, 3.1, 3.0, 3.6, 0.4),
        (10.7, 10.0, 11.2, 11.6, 11.8, 10.8, 10.8, 10.8, 10.8),
        (29.5, 24.6, 21.9, 20.0, 18.7, 17.8, 17.2, 16.9, 16.8),
    ),
}
# Table 6.6.6.2.1-1: tropospheric scintillation at 99% (20 GHz, Toulouse), dB.
TROPOSPHERIC_SCINTILLATION_DB = (1.08, 0.48, 0.30, 0.22, 0.17, 0.13, 0.12, 0.12, 0.12)


def table_scenario(scenario: str) -> str:
    """The table a scenario reads (rural is suburban's, TR 38.811 Tables 6.6.1-1, 6.6.2-3)."""
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario must be one of {SCENARIOS}, got {scenario!r}")
    return "suburban" if scenario == "rural" else scenario


def band_of(carrier_hz: float) -> str:
    """S band (1.9-4 GHz) or Ka band (19-40 GHz): the two TR 38.811 tabulates."""
    if 1.9e9 <= carrier_hz <= 4e9:
        return "S"
    if 19e9 <= carrier_hz <= 40e9:
        return "Ka"
    raise ValueError(f"carrier {carrier_hz / 1e9:g} GHz is in neither S (1.9-4) nor Ka (19-40)")


def reference_index(elevation_deg: np.ndarray | float) -> np.ndarray:
    """Index of the nearest reference elevation (10°..90°, half up), clipped to the table."""
    nearest = np.floor(np.asarray(elevation_deg, dtype=float) / 10.0 + 0.5).astype(int)
    return np.clip(nearest, 1, 9) - 1


def los_probability(scenario: str, elevation_deg: np.ndarray | float) -> np.ndarray:
    return np.asarray(LOS_PROBABILITY[table_scenario(scenario)])[reference_index(elevation_deg)]


def shadowing_sigma_db(
    scenario: str, band: str, elevation_deg: np.ndarray | float, los: np.ndarray | bool
) -> np.ndarray:
    sigma_los, sigma_nlos, _ = SHADOWING_CLUTTER[table_scenario(scenario), band]
    index = reference_index(elevation_deg)
    return np.where(los, np.asarray(sigma_los)[index], np.asarray(sigma_nlos)[index])


def clutter_loss_db(
    scenario: str, band: str, elevation_deg: np.ndarray | float, los: np.ndarray | bool
) -> np.ndarray:
    """CL: 0 in line of sight, the table's value out of it."""
    clutter = np.asarray(SHADOWING_CLUTTER[table_scenario(scenario), band][2])
    return np.where(los, 0.0, clutter[reference_index(elevation_deg)])


def free_space_loss_db(distance_m: np.ndarray | float, carrier_hz: float) -> np.ndarray:
    """FSPL = 32.45 + 20 log10(f_c/GHz) + 20 log10(d/m) (eq. 6.6-2)."""
    return 32.45 + 20.0 * math.log10(carrier_hz / 1e9) + 20.0 * np.log10(distance_m)


# --- atmospheric gases: ITU-R P.676-10 Annex 2 (as TR 38.811 clause 6.6.4 takes it) ---------


@dataclass(frozen=True)
class Atmosphere:
    """TR 38.811 clause 6.6.4's mean annual global reference atmosphere at the ground."""

    pressure_hpa: float = 1013.25  # dry air pressure
    temperature_k: float = 288.15
    water_vapour_g_m3: float = 7.5

    def ratios(self) -> tuple[float, float]:
        """(r_p of the total pressure p + e, e = ρT/216.7; r_t = 288/(273 + t))."""
        vapour_hpa = self.water_vapour_g_m3 * self.temperature_k / 216.7
        return (self.pressure_hpa + vapour_hpa) / 1013.0, 288.0 / (self.temperature_k - 0.15)


def _dry_air_db_km(f: float, rp: float, rt: float) -> float:
    """γ_o, eqs. (22a) and (22g)-(22i), for f ≤ 54 GHz (S and Ka bands)."""

    def phi(a: float, b: float, c: float, d: float) -> float:
        return rp**a * rt**b * math.exp(c * (1.0 - rp) + d * (1.0 - rt))

    xi1 = phi(0.0717, -1.8132, 0.0156, -1.6515)
    xi2 = phi(0.5146, -4.6368, -0.1921, -5.7416)
    xi3 = phi(0.3414, -6.5851, 0.2130, -8.5854)
    return (
        (
            7.2 * rt**2.8 / (f**2 + 0.34 * rp**2 * rt**1.6)
            + 0.62 * xi3 / ((54.0 - f) ** (1.16 * xi1) + 0.83 * xi2)
        )
        * f**2
        * rp**2
        * 1e-3
    )


def _water_vapour_db_km(f: float, rp: float, rt: float, rho: float) -> float:
    """γ_w, eqs. (23a)-(23d)."""
    eta1 = 0.955 * rp * rt**0.68 + 0.006 * rho
    eta2 = 0.735 * rp * rt**0.5 + 0.0353 * rt**4 * rho

    def g(f_i: float) -> float:
        return 1.0 + ((f - f_i) / (f + f_i)) ** 2

    lines = (  # (strength, f_i, width, exponent of (1 - r_t), eta, g's line or None)
        (3.98, 22.235, 9.42, 2.23, eta1, 22.0), (11.96, 183.31, 11.14, 0.7, eta1, None),
        (0.081, 321.226, 6.29, 6.44, eta1, None), (3.66, 325.153, 9.22, 1.6, eta1, None),
    )  # fmt: skip
    total = sum(
        a * eta * math.exp(x * (1.0 - rt)) / ((f - fi) ** 2 + w * eta**2) * (g(gi) if gi else 1.0)
        for a, fi, w, x, eta, gi in lines
    )
    far = (  # (strength, f_i, exponent, eta, g's line or None): lines far from the band
        (25.37, 380.0, 1.09, eta1, None), (17.4, 448.0, 1.46, eta1, None),
        (844.6, 557.0, 0.17, eta1, 557.0), (290.0, 752.0, 0.41, eta1, 752.0),
        (8.3328e4, 1780.0, 0.99, eta2, 1780.0),
    )  # fmt: skip
    total += sum(
        a * eta * math.exp(x * (1.0 - rt)) / (f - fi) ** 2 * (g(gi) if gi else 1.0)
        for a, fi, x, eta, gi in far
    )
    return total * f**2 * rt**2.5 * rho * 1e-4


def _dry_air_height_km(f: float, rp: float) -> float:
    """h_o, eqs. (25a)-(25e)."""
    t1 = (
        4.64
        / (1.0 + 0.066 * rp**-2.3)
        * math.exp(-(((f - 59.7) / (2.87 + 12.4 * math.exp(-7.9 * rp))) ** 2))
    )
    t2 = 0.14 * math.exp(2.12 * rp) / ((f - 118.75) ** 2 + 0.031 * math.exp(2.2 * rp))
    t3 = (
        0.0114 / (1.0 + 0.14 * rp**-2.6) * f * (-0.0247 + 0.0001 * f + 1.61e-6 * f**2)
        / (1.0 - 0.0169 * f + 4.1e-5 * f**2 + 3.2e-7 * f**3)
    )  # fmt: skip
    height = 6.1 / (1.0 + 0.17 * rp**-1.1) * (1.0 + t1 + t2 + t3)
    return min(height, 10.7 * rp**0.3) if f < 70.0 else height


def _water_vapour_height_km(f: float, rp: float) -> float:
    """h_w, eqs. (26a)-(26b)."""
    sigma = 1.013 / (1.0 + math.exp(-8.6 * (rp - 0.57)))
    return 1.66 * (
        1.0 + 1.39 * sigma / ((f - 22.235) ** 2 + 2.56 * sigma)
        + 3.37 * sigma / ((f - 183.31) ** 2 + 4.69 * sigma)
        + 1.58 * sigma / ((f - 325.1) ** 2 + 2.89 * sigma)
    )  # fmt: skip


def zenith_attenuation_db(carrier_hz: float, atmosphere: Atmosphere = Atmosphere()) -> float:
    """A_zenith = γ_o h_o + γ_w h_w (eq. 27), for 1 to 54 GHz."""
    f = carrier_hz / 1e9
    if not 1.0 <= f <= 54.0:
        raise ValueError(f"carrier {f:g} GHz outside 1-54 GHz (P.676-10 Annex 2 as used here)")
    rp, rt = atmosphere.ratios()
    return _dry_air_db_km(f, rp, rt) * _dry_air_height_km(f, rp) + _water_vapour_db_km(
        f, rp, rt, atmosphere.water_vapour_g_m3
    ) * _water_vapour_height_km(f, rp)


def gas_loss_db(
    carrier_hz: float, elevation_deg: np.ndarray | float, atmosphere: Atmosphere = Atmosphere()
) -> np.ndarray:
    """PL_g = A_zenith / sin α (eq. 6.6-8)."""
    zenith = zenith_attenuation_db(carrier_hz, atmosphere)
    return zenith / np.sin(np.radians(elevation_deg))


def scintillation_loss_db(
    carrier_hz: float, elevation_deg: np.ndarray | float, magnetic_latitude_deg: float
) -> np.ndarray:
    """PL_s: tropospheric from 6 GHz (Table 6.6.6.2.1-1), else ionospheric within 20° of the
    magnetic equator (eq. 6.6-13: 1.1 dB at 4 GHz × (f/4)^-1.5 / √2), else 0."""
    elevation = np.asarray(elevation_deg, dtype=float)
    f_ghz = carrier_hz / 1e9
    if f_ghz >= 6.0:
        return np.asarray(TROPOSPHERIC_SCINTILLATION_DB)[reference_index(elevation)]
    if abs(magnetic_latitude_deg) <= 20.0:
        return np.full(elevation.shape, 1.1 * (f_ghz / 4.0) ** -1.5 / math.sqrt(2.0))
    return np.zeros(elevation.shape)


# --- the link -------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroundChannel:
    """TR 38.811 between a satellite and a ground node: the scenario's tables, its
    atmosphere, and the node's latitude relative to the magnetic equator."""

    carrier_hz: float
    scenario: str = "rural"
    atmosphere: Atmosphere = Atmosphere()
    magnetic_latitude_deg: float = 47.0  # openntn's default: no ionospheric scintillation

    @property
    def band(self) -> str:
        return band_of(self.carrier_hz)

    def mean_loss_db(
        self, distance_m: np.ndarray, elevation_deg: np.ndarray, los: np.ndarray | bool
    ) -> np.ndarray:
        """FSPL + CL + PL_g + PL_s without the shadow fading (drawn by the caller)."""
        return (
            free_space_loss_db(distance_m, self.carrier_hz)
            + clutter_loss_db(self.scenario, self.band, elevation_deg, los)
            + gas_loss_db(self.carrier_hz, elevation_deg, self.atmosphere)
            + scintillation_loss_db(self.carrier_hz, elevation_deg, self.magnetic_latitude_deg)
        )

    def sigma_db(self, elevation_deg: np.ndarray, los: np.ndarray | bool) -> np.ndarray:
        return shadowing_sigma_db(self.scenario, self.band, elevation_deg, los)


@dataclass(frozen=True)
class FreeSpaceChannel:
    """Above the weather (a platform in the stratosphere, satellite to satellite): FSPL."""

    carrier_hz: float

    def mean_loss_db(
        self, distance_m: np.ndarray, _elevation_deg: np.ndarray, _los: np.ndarray | bool
    ) -> np.ndarray:
        return free_space_loss_db(distance_m, self.carrier_hz)

    def sigma_db(self, elevation_deg: np.ndarray, _los: np.ndarray | bool) -> np.ndarray:
        return np.zeros(np.shape(elevation_deg))


@dataclass(frozen=True)
class LinkBudget:
    """One direction of a link: the transmitter's EIRP, the receiver's G/T, the bandwidth."""

    eirp_dbw: float
    gt_db_per_k: float
    bandwidth_hz: float

    def snr_db(self, loss_db: np.ndarray) -> np.ndarray:
        """C/N = EIRP + G/T − L − k − 10 log10 B."""
        return (
            self.eirp_dbw + self.gt_db_per_k - loss_db - BOLTZMANN_DBW_PER_K_HZ
            - 10.0 * math.log10(self.bandwidth_hz)
        )  # fmt: skip


def doppler_hz(carrier_hz: float, range_rate_m_s: np.ndarray | float) -> np.ndarray:
    """The shift a receiver sees: −f_c · (d range/dt) / c (approaching: positive)."""
    return -carrier_hz * np.asarray(range_rate_m_s) / SPEED_OF_LIGHT_M_S


def propagation_delay_s(distance_m: np.ndarray | float) -> np.ndarray:
    return np.asarray(distance_m) / SPEED_OF_LIGHT_M_S
