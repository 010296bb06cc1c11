"""Orbits and passes (fedsim.sim.orbits) against the closed forms of an overhead pass of a
non-rotating Earth, Walker-delta geometry, inter-satellite line of sight, and TLEs."""

from __future__ import annotations

import math
from datetime import datetime, timezone

import numpy as np
import pytest

from fedsim.sim import orbits
from fedsim.sim.ntn import doppler_hz
from fedsim.sim.orbits import EARTH_RADIUS_M as R
from fedsim.sim.orbits import SPEED_OF_LIGHT_M_S as C

# The ISS, epoch 2024-01-01 (checksums valid).
ISS = """ISS (ZARYA)
1 25544U 98067A   24001.50000000  .00016717  00000-0  10270-3 0  9009
2 25544  51.6416 247.4627 0006703 130.5360 325.0288 15.49815308432057
"""


def overhead(altitude_m: float) -> orbits.CircularOrbits:
    """One polar satellite that passes over (0°, 0°) a quarter orbit after time 0."""
    return orbits.CircularOrbits(
        np.array([altitude_m]), np.array([math.pi / 2]), np.array([0.0]),
        np.array([-math.pi / 2]), earth_rotation=False,
    )  # fmt: skip


@pytest.mark.parametrize(("altitude_km", "mask_deg"), [(600, 10), (550, 25), (1200, 0.5)])
def test_overhead_pass_matches_the_closed_forms(altitude_km: float, mask_deg: float) -> None:
    """Duration (2λ/2π)·T with λ = arccos(R cos ε/(R+h)) − ε; slant range, elevation and the
    round trip 2d/c at the pass's start; the Doppler there (v/c)·R/(R+h)·cos ε·f_c: 1e-6."""
    h = altitude_km * 1e3
    eps = math.radians(mask_deg)
    station = orbits.FixedNode("gs", orbits.geodetic_to_fixed(0.0, 0.0, 0.0), mask_deg)
    contacts = orbits.Contacts(overhead(h), [station])
    period = orbits.orbital_period_s(h)
    (start, end), *_ = contacts.windows(0, period)
    lam = math.acos(R * math.cos(eps) / (R + h)) - eps
    assert end - start == pytest.approx(2 * lam / (2 * math.pi) * period, rel=1e-6)
    assert (start + end) / 2 == pytest.approx(period / 4, rel=1e-6)
    position, velocity = overhead(h).state(np.array([start]))
    elevation, distance = station.geometry(position[0])
    d = math.sqrt((R + h) ** 2 - (R * math.cos(eps)) ** 2) - R * math.sin(eps)
    assert distance[0] == pytest.approx(d, rel=1e-6)
    assert orbits.slant_range_m(h, eps) == pytest.approx(d, rel=1e-12)
    assert math.degrees(elevation[0]) == pytest.approx(mask_deg, rel=1e-6)
    rate = orbits.radial_speed_m_s(station, position[0], velocity[0], np.array([start]))
    v = orbits.orbital_speed_m_s(h)
    f_c = 20e9
    assert doppler_hz(f_c, rate)[0] == pytest.approx(
        v / C * R / (R + h) * math.cos(eps) * f_c, rel=1e-6
    )


def test_the_issues_numbers() -> None:
    """600 km, 10°: a 510 s pass of a 5,792 s orbit and a 12.89 ms round trip."""
    assert orbits.orbital_period_s(600e3) == pytest.approx(5792.3, abs=0.1)
    station = orbits.FixedNode("gs", orbits.geodetic_to_fixed(0.0, 0.0, 0.0), 10.0)
    (start, end), *_ = orbits.Contacts(overhead(600e3), [station]).windows(0, 6000.0)
    assert end - start == pytest.approx(509.6, abs=0.1)
    assert 2 * orbits.slant_range_m(600e3, math.radians(10)) / C == pytest.approx(
        12.886e-3, abs=1e-6
    )


def test_a_grazing_pass_between_samples_is_found() -> None:
    """A pass whose highest elevation is a hair above the mask lasts seconds, far less than
    the search's step: the peak between samples is maximised and its two roots found."""
    h = 600e3
    station = orbits.FixedNode("gs", orbits.geodetic_to_fixed(0.0, 0.0, 0.0), 10.0)
    lam = math.acos(R * math.cos(math.radians(10)) / (R + h)) - math.radians(10)
    # the ground track passes lam - 1e-4 rad away from the station: a very short pass
    tilted = orbits.CircularOrbits(
        np.array([h]), np.array([math.pi / 2]), np.array([lam - 1e-4]), np.array([-math.pi / 2]),
        earth_rotation=False,
    )  # fmt: skip
    contacts = orbits.Contacts(tilted, [station])
    windows = contacts.windows(0, orbits.orbital_period_s(h))
    assert len(windows) >= 1
    duration = windows[0][1] - windows[0][0]
    assert 0 < duration < contacts.step_s


def test_walker_delta_geometry() -> None:
    walker = orbits.walker_delta(40, 5, 1, 600e3, 53.0)
    assert walker.count == 40 and walker.planes == [p for p in range(5) for _ in range(8)]
    position, velocity = walker.state(np.array([0.0, 1234.5]))
    radius = np.linalg.norm(position, axis=-1)
    assert np.allclose(radius, R + 600e3, rtol=1e-12)
    # in the Earth-fixed frame the speed is the orbital speed less the Earth's turn
    inertial = orbits.walker_delta(40, 5, 1, 600e3, 53.0, earth_rotation=False)
    speed = np.linalg.norm(inertial.state(np.array([10.0]))[1], axis=-1)
    assert np.allclose(speed, orbits.orbital_speed_m_s(600e3), rtol=1e-12)
    # phasing: the first satellite of plane p is 360·F·p/T ahead
    assert walker.latitude_arg_rad[8] == pytest.approx(2 * math.pi / 40)
    with pytest.raises(ValueError, match="multiple"):
        orbits.walker_delta(41, 5, 1, 600e3, 53.0)


def test_selected_satellites_move_as_in_the_whole_constellation() -> None:
    """The pass search and the links follow one satellite (or an ISL's two) through
    ``select``: the whole constellation's states, to rounding (numpy may vectorise the two
    array lengths differently); ``in_sight`` reads the windows found (a window's start in
    sight, its end not)."""
    walker = orbits.walker_delta(40, 5, 1, 600e3, 53.0)
    times = np.linspace(0.0, 7200.0, 97)
    for whole, picked in zip(walker.state(times), walker.select([33, 4]).state(times), strict=True):
        np.testing.assert_allclose(picked, whole[[33, 4]], rtol=1e-12, atol=1e-6)
    station = orbits.FixedNode("gs", orbits.geodetic_to_fixed(53.1, 8.8, 0.0), 10.0)
    contacts = orbits.Contacts(walker, [station])
    found = contacts.windows_of(4, 0, 2 * orbits.DAY_S)  # probed in the first day only
    windows = [w for w in found if w[1] < orbits.DAY_S]
    starts, ends = np.array(windows).T
    probes = np.sort(np.concatenate([starts, ends, (starts + ends) / 2, ends + 60.0]))
    expected = [any(start <= t < end for start, end in found) for t in probes]
    assert len(windows) > 1 and contacts.in_sight(4, 0, probes).tolist() == expected
    assert contacts.in_sight(4, 0, starts).all() and not contacts.in_sight(4, 0, ends).any()


@pytest.mark.parametrize("per_plane", [6, 8, 12])
def test_intra_plane_line_of_sight_clears_the_earth_by_the_closed_form(per_plane: int) -> None:
    """Neighbours 2π/S apart on a circle of radius R + h: the chord's nearest point to the
    centre is (R + h)·cos(π/S) from it."""
    walker = orbits.walker_delta(per_plane, 1, 0, 600e3, 53.0)
    positions = walker.state(np.array([100.0]))[0]
    margin = orbits.line_of_sight_margin(positions[0, 0], positions[1, 0], 0.0)
    assert margin == pytest.approx((R + 600e3) * math.cos(math.pi / per_plane) - R, rel=1e-9)
    contacts = orbits.Contacts(walker, [], [(0, 1)])
    clear = (R + 600e3) * math.cos(math.pi / per_plane) > R
    assert bool(contacts.pair_windows(0, 1, 3600.0)) == clear


def test_tle_parses_and_propagates() -> None:
    ((name, first, second),) = orbits.parse_tle(ISS)
    assert name == "ISS (ZARYA)"
    epoch = datetime(2024, 1, 1, 12, tzinfo=timezone.utc)
    iss = orbits.TleOrbits([(name, first, second)], epoch)
    position, velocity = iss.state(np.linspace(0, 5400, 7))
    altitude_km = (np.linalg.norm(position, axis=-1) - R) / 1e3
    assert np.all((altitude_km > 390) & (altitude_km < 440))
    assert iss.period_s == pytest.approx(86400 / 15.49815308, rel=1e-3)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("1 25544U 98067A   24001.50000000", "line 1: a line 1 without its line 2"),
        (ISS.replace("9009", "9008"), "line 2: not a TLE line"),
        ("junk\n", "no element set"),
        ("2 25544  51.6416 247.4627 0006703 130.5360 325.0288 15.49815308432057", "line 2"),
    ],
)
def test_a_tle_that_does_not_parse_is_refused(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        orbits.parse_tle(text)
