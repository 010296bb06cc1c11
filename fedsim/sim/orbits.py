"""Orbits and visibility: where satellites are, who sees whom, and when passes begin and end.

Satellites fly circular orbits of a Walker-delta constellation ``total/planes/phasing`` (Walker
1984: plane p of P has its ascending node at 360°·p/P, satellite j of the S = T/P in a plane
its argument of latitude at 360°·j/S + 360°·F·p/T) or follow two-line element sets through
SGP4 (the ``sgp4`` package, Vallado's reference implementation; TEME rotated to the
Earth-fixed frame by the Greenwich mean sidereal time). The Earth is a sphere of radius
6,371 km that turns at 7.292115e-5 rad/s (``earth_rotation``; off, the Earth-fixed frame is
the inertial one: the closed forms of an overhead pass hold exactly). Ground stations and
high-altitude platforms stand at a latitude, longitude and altitude; a medium-orbit node flies
a circular orbit of its own.

Visibility is a continuous function of time that is positive while a link can close: the
elevation above a node's mask (ground stations, platforms) or the clearance of the line of
sight above the Earth and a grazing height (satellite to satellite, or to a MEO node). Passes
are its positive intervals, found ahead of time, a day at a time, by sampling every
``T_orbit / 120`` (under a minute for LEO), Brent's root-finding to 1e-6 s at each sign
change, and a bounded maximisation between samples where the function peaks, so a grazing
pass shorter than the step is found too. Nothing ticks: the event model asks for the windows
and schedules their ends as events.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Protocol

import numpy as np
from scipy.optimize import brentq, minimize_scalar
from sgp4.api import SGP4_ERRORS, Satrec, SatrecArray, jday

EARTH_RADIUS_M = 6_371_000.0  # mean radius (TR 38.811 eq. 6.6-3 takes the same)
EARTH_MU_M3_S2 = 3.986004418e14  # GM of the Earth (WGS 84)
EARTH_ROTATION_RAD_S = 7.2921150e-5  # sidereal rate
SPEED_OF_LIGHT_M_S = 299_792_458.0
DAY_S = 86_400.0
ROOT_TOLERANCE_S = 1e-6  # pass start and end to a microsecond


def orbital_period_s(altitude_m: float) -> float:
    """T = 2π sqrt(a³/μ) of a circular orbit at this altitude above the mean radius."""
    return 2.0 * math.pi * math.sqrt((EARTH_RADIUS_M + altitude_m) ** 3 / EARTH_MU_M3_S2)


def orbital_speed_m_s(altitude_m: float) -> float:
    return math.sqrt(EARTH_MU_M3_S2 / (EARTH_RADIUS_M + altitude_m))


def slant_range_m(altitude_m: float, elevation_rad: float) -> float:
    """Distance from a ground point to a satellite at this altitude seen at this elevation
    (TR 38.811 eq. 6.6-3), in a form without cancellation."""
    r_m = EARTH_RADIUS_M
    h_term = altitude_m * altitude_m + 2.0 * altitude_m * r_m
    sin_e = math.sin(elevation_rad)
    return h_term / (math.sqrt(r_m * r_m * sin_e * sin_e + h_term) + r_m * sin_e)


def rotation_angle_rad(time_s: np.ndarray, earth_rotation: bool) -> np.ndarray:
    """The Earth's turn since time 0 (zero on a non-rotating Earth)."""
    return EARTH_ROTATION_RAD_S * time_s if earth_rotation else np.zeros_like(time_s)


def to_earth_fixed(
    position_m: np.ndarray, velocity_m_s: np.ndarray, theta_rad: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Rotate inertial (..., 3) vectors by -θ about z; the velocity loses ω × r (θ = ω t)."""
    cos_t, sin_t = np.cos(theta_rad), np.sin(theta_rad)
    x, y, z = position_m[..., 0], position_m[..., 1], position_m[..., 2]
    fixed = np.stack([cos_t * x + sin_t * y, -sin_t * x + cos_t * y, z], axis=-1)
    vx, vy, vz = velocity_m_s[..., 0], velocity_m_s[..., 1], velocity_m_s[..., 2]
    omega = EARTH_ROTATION_RAD_S * (theta_rad != 0)
    speed = np.stack(
        [
            cos_t * vx + sin_t * vy + omega * fixed[..., 1],
            -sin_t * vx + cos_t * vy - omega * fixed[..., 0],
            vz,
        ],
        axis=-1,
    )
    return fixed, speed


class Orbits(Protocol):
    """Positions and velocities in the Earth-fixed frame, (satellites, times, 3), m and m/s."""

    @property
    def count(self) -> int: ...

    def state(self, time_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    @property
    def period_s(self) -> float:
        """The shortest orbital period (sets the sampling step of the pass search)."""

    def select(self, satellites: Sequence[int]) -> Orbits:
        """These satellites alone (the pass search's root finding follows one or two)."""


@dataclass(frozen=True)
class CircularOrbits:
    """Circular orbits, one per satellite: altitude, inclination, right ascension of the
    ascending node and argument of latitude at time 0 (radians)."""

    altitude_m: np.ndarray
    inclination_rad: np.ndarray
    raan_rad: np.ndarray
    latitude_arg_rad: np.ndarray
    earth_rotation: bool = True

    @property
    def count(self) -> int:
        return len(self.altitude_m)

    @property
    def period_s(self) -> float:
        return orbital_period_s(float(np.min(self.altitude_m)))

    @property
    def planes(self) -> list[int]:
        """Each satellite's orbital plane (index of its distinct node and inclination)."""
        keys = list(zip(np.round(self.raan_rad, 9), np.round(self.inclination_rad, 9), strict=True))
        order = {key: i for i, key in enumerate(dict.fromkeys(keys))}
        return [order[key] for key in keys]

    def select(self, satellites: Sequence[int]) -> CircularOrbits:
        index = list(satellites)
        return CircularOrbits(
            self.altitude_m[index], self.inclination_rad[index], self.raan_rad[index],
            self.latitude_arg_rad[index], self.earth_rotation,
        )  # fmt: skip

    def state(self, time_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t = np.atleast_1d(np.asarray(time_s, dtype=float))
        radius = (EARTH_RADIUS_M + self.altitude_m)[:, None]
        mean_motion = np.sqrt(EARTH_MU_M3_S2 / radius**3)
        u = self.latitude_arg_rad[:, None] + mean_motion * t[None, :]
        cos_u, sin_u = np.cos(u), np.sin(u)
        cos_o, sin_o = np.cos(self.raan_rad)[:, None], np.sin(self.raan_rad)[:, None]
        cos_i, sin_i = np.cos(self.inclination_rad)[:, None], np.sin(self.inclination_rad)[:, None]
        position = radius[..., None] * np.stack(
            [cos_o * cos_u - sin_o * sin_u * cos_i, sin_o * cos_u + cos_o * sin_u * cos_i,
             sin_u * sin_i * np.ones_like(cos_o)], axis=-1,
        )  # fmt: skip
        speed = (radius * mean_motion)[..., None] * np.stack(
            [-cos_o * sin_u - sin_o * cos_u * cos_i, -sin_o * sin_u + cos_o * cos_u * cos_i,
             cos_u * sin_i * np.ones_like(cos_o)], axis=-1,
        )  # fmt: skip
        theta = rotation_angle_rad(t, self.earth_rotation)[None, :]
        return to_earth_fixed(position, speed, theta)


def walker_delta(
    total: int,
    planes: int,
    phasing: int,
    altitude_m: float,
    inclination_deg: float,
    *,
    earth_rotation: bool = True,
) -> CircularOrbits:
    """A Walker-delta constellation i: T/P/F (satellite k is plane k // S, slot k % S)."""
    if total % planes:
        raise ValueError(f"total {total} is not a multiple of planes {planes}")
    per_plane = total // planes
    plane = np.repeat(np.arange(planes), per_plane)
    slot = np.tile(np.arange(per_plane), planes)
    return CircularOrbits(
        altitude_m=np.full(total, float(altitude_m)),
        inclination_rad=np.full(total, math.radians(inclination_deg)),
        raan_rad=2.0 * math.pi * plane / planes,
        latitude_arg_rad=2.0 * math.pi * (slot / per_plane + phasing * plane / total),
        earth_rotation=earth_rotation,
    )


# --- two-line element sets ---------------------------------------------------------------


def tle_checksum_ok(line: str) -> bool:
    """The last digit is the sum of the digits (a minus sign counts 1) modulo 10."""
    digits = sum(int(c) for c in line[:68] if c.isdigit()) + line[:68].count("-")
    return len(line) >= 69 and line[68].isdigit() and digits % 10 == int(line[68])


def parse_tle(text: str) -> list[tuple[str, str, str]]:
    """(name, line 1, line 2) of each element set of a file (an optional name line before
    each pair). Raises ValueError naming the line that does not parse."""
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    sets, name, i = [], "", 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("1 "):
            if line.startswith("2 "):
                raise ValueError(f"line {i + 1}: a line 2 without its line 1")
            name, i = line.strip(), i + 1
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("2 "):
            raise ValueError(f"line {i + 1}: a line 1 without its line 2")
        first, second = lines[i], lines[i + 1]
        for offset, tle_line in ((0, first), (1, second)):
            if not tle_checksum_ok(tle_line):
                raise ValueError(f"line {i + 1 + offset}: not a TLE line (length or checksum)")
        if first[2:7] != second[2:7]:
            raise ValueError(f"line {i + 2}: its catalogue number differs from line {i + 1}'s")
        try:
            Satrec.twoline2rv(first, second)
        except (ValueError, IndexError) as error:
            raise ValueError(f"line {i + 1}: {error}") from None
        sets.append((name or first[2:7].strip(), first, second))
        name, i = "", i + 2
    if not sets:
        raise ValueError("no element set (a line 1 and a line 2)")
    return sets


def julian_date(moment: datetime) -> tuple[float, float]:
    moment = moment.astimezone(timezone.utc)
    seconds = moment.second + moment.microsecond * 1e-6
    return jday(moment.year, moment.month, moment.day, moment.hour, moment.minute, seconds)


def gmst_rad(jd_whole: np.ndarray, jd_fraction: np.ndarray) -> np.ndarray:
    """Greenwich mean sidereal time (IAU 1982, as Vallado's ``gstime``)."""
    t_ut1 = (jd_whole - 2451545.0 + jd_fraction) / 36525.0
    seconds = (
        -6.2e-6 * t_ut1**3 + 0.093104 * t_ut1**2
        + (876600.0 * 3600 + 8640184.812866) * t_ut1 + 67310.54841
    )  # fmt: skip
    return np.mod(np.deg2rad(seconds / 240.0), 2.0 * math.pi)


@dataclass
class TleOrbits:
    """Satellites from element sets, propagated by SGP4 from ``epoch`` (time 0 of the run)."""

    elements: Sequence[tuple[str, str, str]]
    epoch: datetime
    _array: SatrecArray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        satellites = [Satrec.twoline2rv(first, second) for _, first, second in self.elements]
        self._array = SatrecArray(satellites)
        self._jd = julian_date(self.epoch)
        self._period_s = min(2.0 * math.pi / s.no_kozai * 60.0 for s in satellites)

    @property
    def count(self) -> int:
        return len(self.elements)

    @property
    def period_s(self) -> float:
        return self._period_s

    def select(self, satellites: Sequence[int]) -> TleOrbits:
        return TleOrbits([self.elements[k] for k in satellites], self.epoch)

    def state(self, time_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t = np.atleast_1d(np.asarray(time_s, dtype=float))
        whole = np.full(t.shape, self._jd[0])
        fraction = self._jd[1] + t / DAY_S
        errors, position_km, velocity_km_s = self._array.sgp4(whole, fraction)
        if np.any(errors):
            first = int(np.flatnonzero(errors.any(axis=1))[0])
            code = int(errors[first][errors[first] != 0][0])
            raise ValueError(
                f"element set {self.elements[first][0]!r}: SGP4 fails within the run "
                f"({SGP4_ERRORS.get(code, code)})"
            )
        theta = gmst_rad(whole, fraction)[None, :]
        return to_earth_fixed(position_km * 1e3, velocity_km_s * 1e3, theta)


# --- nodes that see satellites -------------------------------------------------------------


def geodetic_to_fixed(lat_deg: float, lon_deg: float, altitude_m: float) -> np.ndarray:
    """A point on (or above) the spherical Earth in the Earth-fixed frame."""
    lat, lon = math.radians(lat_deg), math.radians(lon_deg)
    radius = EARTH_RADIUS_M + altitude_m
    return radius * np.array([math.cos(lat) * math.cos(lon), math.cos(lat) * math.sin(lon),
                              math.sin(lat)])  # fmt: skip


@dataclass(frozen=True)
class FixedNode:
    """A ground station or a high-altitude platform, fixed to the turning Earth: it sees a
    satellite above ``min_elevation_deg`` (0 to 90: at or above the local horizontal, the
    line of sight clears the Earth)."""

    name: str
    position_m: np.ndarray
    min_elevation_deg: float
    altitude_m: float = 0.0

    def geometry(self, sat_m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(elevation in radians, range in m) to satellite positions (..., 3)."""
        delta = sat_m - self.position_m
        distance = np.linalg.norm(delta, axis=-1)
        up = self.position_m / np.linalg.norm(self.position_m)
        return np.arcsin(np.clip(delta @ up / distance, -1.0, 1.0)), distance

    def margin(self, sat_m: np.ndarray, _time_s: np.ndarray) -> np.ndarray:
        """Elevation above the mask, radians."""
        return self.geometry(sat_m)[0] - math.radians(self.min_elevation_deg)


@dataclass(frozen=True)
class OrbitingNode:
    """A node on a circular orbit (a MEO parameter server): it sees a satellite while their
    line of sight clears the Earth by ``grazing_m``."""

    name: str
    orbit: CircularOrbits
    grazing_m: float = 0.0
    max_range_m: float | None = None

    def position(self, time_s: np.ndarray) -> np.ndarray:
        return self.orbit.state(time_s)[0][0]

    def margin(self, sat_m: np.ndarray, time_s: np.ndarray) -> np.ndarray:
        return link_margin(self.position(time_s), sat_m, self.grazing_m, self.max_range_m)


def line_of_sight_margin(a_m: np.ndarray, b_m: np.ndarray, grazing_m: float) -> np.ndarray:
    """How far (m) the segment a–b passes above the Earth plus ``grazing_m``: the distance of
    its nearest point from the centre, less R + grazing (negative: blocked)."""
    a_m, b_m = np.broadcast_arrays(a_m, b_m)
    span = b_m - a_m
    length2 = np.maximum(np.sum(span * span, axis=-1), 1e-30)
    s = np.clip(-np.sum(a_m * span, axis=-1) / length2, 0.0, 1.0)
    nearest = a_m + s[..., None] * span
    return np.linalg.norm(nearest, axis=-1) - (EARTH_RADIUS_M + grazing_m)


def link_margin(
    a_m: np.ndarray, b_m: np.ndarray, grazing_m: float, max_range_m: float | None
) -> np.ndarray:
    """Line of sight above the grazing height and, with ``max_range_m``, within range (m)."""
    margin = line_of_sight_margin(a_m, b_m, grazing_m)
    if max_range_m is not None:
        margin = np.minimum(margin, max_range_m - np.linalg.norm(b_m - a_m, axis=-1))
    return margin


Node = FixedNode | OrbitingNode


def node_position(node: Node, time_s: np.ndarray) -> np.ndarray:
    """(times, 3) positions of a node."""
    if isinstance(node, FixedNode):
        return np.broadcast_to(node.position_m, (len(np.atleast_1d(time_s)), 3))
    return node.position(np.atleast_1d(time_s))


def radial_speed_m_s(
    node: Node, sat_m: np.ndarray, sat_v: np.ndarray, time_s: np.ndarray
) -> np.ndarray:
    """d(range)/dt between a node and satellites (positive: moving apart); the Doppler
    shift is -f_c times this over c."""
    node_m = node_position(node, time_s)
    if isinstance(node, FixedNode):
        node_v = np.zeros_like(node_m)
    else:
        node_v = node.orbit.state(np.atleast_1d(time_s))[1][0]
    delta = sat_m - node_m
    return np.sum(delta * (sat_v - node_v), axis=-1) / np.linalg.norm(delta, axis=-1)


# --- windows --------------------------------------------------------------------------------


class NeverVisible(ValueError):
    """A link that no pass will ever open (within ``MAX_WAIT_S`` of the time asked)."""


MAX_WAIT_S = 30 * DAY_S  # a transfer waiting longer than this for a pass is refused


def find_windows(
    times: np.ndarray, values: np.ndarray, scalar: Callable[[float], float]
) -> list[tuple[float, float]]:
    """The intervals of [times[0], times[-1]] where a continuous function is positive, from
    its samples ``values`` and the function itself (``scalar``), ends to ROOT_TOLERANCE_S: a
    window open at the first sample starts there, one open at the last ends there. A peak
    between samples that are all below zero is maximised, so a short pass is not missed."""
    crossings: list[float] = []
    positive = values > 0
    for i in np.flatnonzero(positive[:-1] != positive[1:]):
        crossings.append(brentq(scalar, times[i], times[i + 1], xtol=ROOT_TOLERANCE_S))
    inner = values[1:-1]
    peaks = (inner <= 0) & (values[:-2] < inner) & (values[2:] < inner)
    for i in np.flatnonzero(peaks) + 1:
        low, high = times[i - 1], times[i + 1]
        peak = minimize_scalar(
            lambda t: -scalar(t), bounds=(low, high), method="bounded",
            options={"xatol": ROOT_TOLERANCE_S},
        )  # fmt: skip
        if -peak.fun > 0:
            crossings.append(brentq(scalar, low, peak.x, xtol=ROOT_TOLERANCE_S))
            crossings.append(brentq(scalar, peak.x, high, xtol=ROOT_TOLERANCE_S))
    crossings.sort()
    edges = ([float(times[0])] if positive[0] else []) + crossings
    if len(edges) % 2:
        edges.append(float(times[-1]))
    return [(edges[k], edges[k + 1]) for k in range(0, len(edges), 2) if edges[k + 1] > edges[k]]


def merge_windows(windows: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of intervals, sorted, overlapping or touching ones joined."""
    merged: list[list[float]] = []
    for start, end in sorted(windows):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(start, end) for start, end in merged]


@dataclass(frozen=True)
class Pass:
    """One window of a satellite to one node."""

    satellite: int
    node: int
    start_s: float
    end_s: float


class Contacts:
    """When each satellite sees each node, and each pair of satellites (``pairs``, the
    inter-satellite links) sees each other: computed ahead, ``chunk_s`` at a time, as far as
    the run asks. Windows of one link that meet at a chunk's edge are joined."""

    def __init__(
        self,
        orbits: Orbits,
        nodes: Sequence[Node],
        pairs: Sequence[tuple[int, int]] = (),
        *,
        isl_grazing_m: float = 0.0,
        isl_max_range_m: float | None = None,
        chunk_s: float = DAY_S,
    ) -> None:
        self.orbits = orbits
        self.nodes = list(nodes)
        self.pairs = [tuple(sorted(pair)) for pair in pairs]
        self.isl_grazing_m = isl_grazing_m
        self.isl_max_range_m = isl_max_range_m
        self.chunk_s = chunk_s
        self.step_s = min(60.0, orbits.period_s / 120.0)
        self.computed_s = 0.0
        self._node_windows = [[[] for _ in self.nodes] for _ in range(orbits.count)]
        self._pair_windows: dict[tuple[int, int], list[tuple[float, float]]] = {
            pair: [] for pair in self.pairs
        }
        self._union: list[list[tuple[float, float]]] = [[] for _ in range(orbits.count)]

    def _node_scalar(self, satellite: int, node: Node) -> Callable[[float], float]:
        alone = self.orbits.select([satellite])

        def margin(t: float) -> float:
            times = np.array([t])
            return float(node.margin(alone.state(times)[0][0], times)[0])

        return margin

    def _pair_scalar(self, a: int, b: int) -> Callable[[float], float]:
        pair = self.orbits.select([a, b])

        def margin(t: float) -> float:
            positions = pair.state(np.array([t]))[0]
            return float(
                link_margin(positions[0, 0], positions[1, 0], self.isl_grazing_m,
                            self.isl_max_range_m)
            )  # fmt: skip

        return margin

    def extend(self, until_s: float) -> None:
        """Compute every window up to at least ``until_s``. Windows are kept as found in each
        chunk (one open at a chunk's edge is split there), so a list only grows: a link's
        windows never change once computed (``passes`` joins the pieces)."""
        while self.computed_s < until_s:
            start_s, end_s = self.computed_s, self.computed_s + self.chunk_s
            count = int(math.ceil((end_s - start_s) / self.step_s)) + 1
            times = np.linspace(start_s, end_s, count)
            positions = self.orbits.state(times)[0]
            for k, node in enumerate(self.nodes):
                values = node.margin(positions, times)
                for sat in range(self.orbits.count):
                    found = find_windows(times, values[sat], self._node_scalar(sat, node))
                    self._node_windows[sat][k].extend(found)
            for sat in range(self.orbits.count):
                chunk = [w for ws in self._node_windows[sat] for w in ws if w[0] >= start_s]
                self._union[sat].extend(merge_windows(chunk))
            for a, b in self.pairs:
                values = link_margin(positions[a], positions[b], self.isl_grazing_m,
                                     self.isl_max_range_m)  # fmt: skip
                self._pair_windows[a, b].extend(
                    find_windows(times, values, self._pair_scalar(a, b))
                )
            self.computed_s = end_s

    def windows(self, satellite: int, until_s: float) -> list[tuple[float, float]]:
        """When the satellite sees at least one node, up to at least ``until_s`` (a list that
        only grows)."""
        self.extend(until_s)
        return self._union[satellite]

    def windows_of(self, satellite: int, node: int, until_s: float) -> list[tuple[float, float]]:
        """When the satellite sees one node, up to at least ``until_s``."""
        self.extend(until_s)
        return self._node_windows[satellite][node]

    def pair_windows(self, a: int, b: int, until_s: float) -> list[tuple[float, float]]:
        self.extend(until_s)
        return self._pair_windows[min(a, b), max(a, b)]

    def passes(self, until_s: float) -> list[Pass]:
        """Every satellite's windows to every node that begin before ``until_s``."""
        self.extend(until_s)
        return [
            Pass(sat, k, start, min(end, until_s))
            for sat, per_node in enumerate(self._node_windows)
            for k, windows in enumerate(per_node)
            for start, end in merge_windows(windows)
            if start < until_s
        ]

    def max_range_rate_m_s(self, pass_: Pass, step_s: float = 1.0) -> float:
        """The largest |d(range)/dt| over a pass (its ends included, sampled every
        ``step_s``): times the carrier over c, the pass's largest Doppler shift (at the mask
        for a ground station: (v/c)·R/(R+h)·cos ε·f_c on a non-rotating Earth)."""
        count = max(2, math.ceil((pass_.end_s - pass_.start_s) / step_s) + 1)
        times = np.linspace(pass_.start_s, pass_.end_s, count)
        positions, velocities = self.orbits.state(times)
        speeds = radial_speed_m_s(
            self.nodes[pass_.node], positions[pass_.satellite], velocities[pass_.satellite], times
        )
        return float(np.max(np.abs(speeds)))

    def in_sight(self, satellite: int, node: int, times: np.ndarray) -> np.ndarray:
        """Whether the satellite sees the node at each of ``times`` (by the windows found:
        sorted and disjoint, so the one starting last by then holds each time or none)."""
        self.extend(float(np.max(times)) + 1.0)
        windows = self._node_windows[satellite][node]
        if not windows:
            return np.zeros(len(times), dtype=bool)
        starts, ends = np.array(windows).T
        index = np.searchsorted(starts, times, side="right") - 1
        return (index >= 0) & (times < ends[np.maximum(index, 0)])

    def pair_visible(self, a: int, b: int, time_s: float) -> bool:
        return any(start <= time_s < end for start, end in self.pair_windows(a, b, time_s + 1.0))
