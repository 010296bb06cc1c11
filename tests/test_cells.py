"""Several cells by hand: the hexagonal layout's sites, its wrap-around against a brute-force
search over cluster copies, placement uniform over the hexagons, the serving site with
hysteresis, and the interference other cells' uploads put on each site."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from fedsim.sim.cells import HexGrid, interference_w_per_hz, serving_site, sinr

ISD_M = 500.0


def _nearest_other_m(points_m: np.ndarray) -> np.ndarray:
    gaps_m = np.linalg.norm(points_m[:, None, :] - points_m[None, :, :], axis=-1)
    np.fill_diagonal(gaps_m, np.inf)
    return gaps_m.min(axis=1)


def _lattice_keys(points_m: np.ndarray) -> list[tuple[int, int]]:
    """Integer coordinates (q, r) of lattice points q·(ISD, 0) + r·(ISD/2, ISD·√3/2)."""
    basis_m = np.array([[ISD_M, 0.0], [ISD_M / 2.0, ISD_M * math.sqrt(3.0) / 2.0]])
    coords = points_m @ np.linalg.inv(basis_m)
    assert np.allclose(coords, np.rint(coords), rtol=0, atol=1e-9)
    return [(int(q), int(r)) for q, r in np.rint(coords)]


@pytest.mark.parametrize(("rings", "count"), [(0, 1), (1, 7), (2, 19)])
def test_sites_counts_and_spacing(rings: int, count: int) -> None:
    grid = HexGrid(rings, ISD_M)
    sites = grid.sites_m()
    assert grid.num_sites == count and sites.shape == (count, 2)
    assert np.allclose(sites[0], 0.0)
    assert math.isclose(grid.cell_radius_m, ISD_M / math.sqrt(3.0))
    radii_m = np.linalg.norm(sites, axis=1)
    assert all(math.isclose(r, ISD_M) for r in radii_m[1:7])
    # Pointy-top cells: ring 1 at 0°, 60°, …, 300°, counter-clockwise from +x.
    angles_deg = np.degrees(np.arctan2(sites[1:7, 1], sites[1:7, 0])) % 360.0
    assert np.allclose(angles_deg, [0.0, 60.0, 120.0, 180.0, 240.0, 300.0][: count - 1])
    # Ring 2 alternates corners at 2·ISD and edge midpoints at √3·ISD.
    assert all(
        math.isclose(r, 2.0 * ISD_M) or math.isclose(r, math.sqrt(3.0) * ISD_M) for r in radii_m[7:]
    )
    if count > 1:
        assert all(math.isclose(d, ISD_M) for d in _nearest_other_m(sites))
        assert len(set(_lattice_keys(sites))) == count


@pytest.mark.parametrize("rings", [1, 2])
def test_wrap_around_gives_every_site_six_neighbours_at_isd(rings: int) -> None:
    sites = HexGrid(rings, ISD_M).sites_m()
    for wrap in (False, True):
        distances_m = HexGrid(rings, ISD_M, wrap_around=wrap).distances_m(sites)
        neighbours = [sum(math.isclose(d, ISD_M) for d in row) for row in distances_m]
        assert all(math.isclose(distances_m[s, s], 0.0, abs_tol=1e-9) for s in range(len(sites)))
        assert (distances_m + np.eye(len(sites)) * ISD_M >= ISD_M * (1 - 1e-9)).all()
        if wrap:
            assert neighbours == [6] * len(sites)
        else:
            assert neighbours[0] == 6 and min(neighbours) == 3  # a corner of the outer ring


@pytest.mark.parametrize("rings", [1, 2])
def test_cluster_shifts_tile_the_plane(rings: int) -> None:
    grid = HexGrid(rings, ISD_M, wrap_around=True)
    shifts_m = grid.cluster_shifts_m()
    lengths_m = np.linalg.norm(shifts_m, axis=1)
    assert all(math.isclose(r, math.sqrt(grid.num_sites) * ISD_M) for r in lengths_m)
    angles_deg = np.degrees(np.arctan2(shifts_m[:, 1], shifts_m[:, 0]))
    assert all(math.isclose((b - a) % 360.0, 60.0) for a, b in itertools.pairwise(angles_deg))
    # The copies of the cluster cover every lattice site near the origin exactly once.
    copies = range(-4, 5)
    images_m = np.array(
        [
            site + i * shifts_m[0] + j * shifts_m[1]
            for site in grid.sites_m()
            for i, j in itertools.product(copies, copies)
        ]
    )
    near = _lattice_keys(images_m[np.linalg.norm(images_m, axis=1) < 3.8 * ISD_M])
    lattice_m = HexGrid(4, ISD_M).sites_m()
    expected = _lattice_keys(lattice_m[np.linalg.norm(lattice_m, axis=1) < 3.8 * ISD_M])
    assert sorted(near) == sorted(expected) and len(set(near)) == len(near)


@pytest.mark.parametrize("rings", [1, 2])
def test_wrap_around_is_the_nearest_image_and_shift_invariant(rings: int) -> None:
    grid = HexGrid(rings, ISD_M, wrap_around=True)
    shifts_m = grid.cluster_shifts_m()
    rng = np.random.default_rng(3)
    span_m = 3.0 * math.sqrt(grid.num_sites) * ISD_M  # inside the layout and far beyond it
    points_m = np.vstack([grid.place(rng, 200, 0.0), rng.uniform(-span_m, span_m, (200, 2))])
    # Brute force over the surrounding copies of the cluster.
    copies = range(-5, 6)
    images_m = np.array(
        [i * shifts_m[0] + j * shifts_m[1] for i, j in itertools.product(copies, copies)]
    )
    offsets_m = points_m[:, None, None, :] - grid.sites_m()[None, :, None, :] - images_m
    brute_m = np.linalg.norm(offsets_m, axis=-1).min(axis=-1)
    assert np.allclose(grid.distances_m(points_m), brute_m, rtol=0, atol=1e-6)
    for shift_m in shifts_m:
        assert np.allclose(grid.distances_m(points_m + shift_m), brute_m, rtol=0, atol=1e-6)


@pytest.mark.parametrize("rings", [1, 2])
def test_wrap_around_keeps_the_nearest_site_distance_inside_the_layout(rings: int) -> None:
    plain, wrapped = HexGrid(rings, ISD_M), HexGrid(rings, ISD_M, wrap_around=True)
    points_m = plain.place(np.random.default_rng(5), 2000, 0.0)
    plain_m, wrapped_m = plain.distances_m(points_m), wrapped.distances_m(points_m)
    assert np.allclose(plain_m.min(axis=1), wrapped_m.min(axis=1))
    assert (wrapped_m <= plain_m + 1e-9).all()
    # Points in the centre cell keep site 0 as their nearest, at the same distance.
    centre = plain_m.argmin(axis=1) == 0
    assert centre.sum() > 50
    assert (wrapped_m[centre].argmin(axis=1) == 0).all()
    assert np.allclose(wrapped_m[centre, 0], plain_m[centre, 0])


def test_contains_matches_each_pointy_top_hexagon() -> None:
    grid = HexGrid(1, ISD_M)
    radius_m = grid.cell_radius_m
    inside, outside = [], []
    for site in grid.sites_m():
        for k in range(6):
            corner = math.radians(30 + 60 * k)
            edge = math.radians(60 * k)
            inside.append(site + 0.99 * radius_m * np.array([math.cos(corner), math.sin(corner)]))
            inside.append(site + 0.49 * ISD_M * np.array([math.cos(edge), math.sin(edge)]))
    # Within 0.1·ISD < ISD/2 of a ring-2 site, so in its hexagon; and beyond the outer edges.
    outside.extend(0.95 * HexGrid(2, ISD_M).sites_m()[7:])
    for k in range(6):
        angle = math.radians(60 * k)
        outside.append(1.51 * ISD_M * np.array([math.cos(angle), math.sin(angle)]))
    assert grid.contains(np.array(inside)).all()
    assert not grid.contains(np.array(outside)).any()
    single = HexGrid(0, ISD_M)
    assert single.contains(np.array([[0.0, 0.99 * radius_m], [0.49 * ISD_M, 0.0]])).all()
    assert not single.contains(np.array([[0.0, 1.01 * radius_m], [0.51 * ISD_M, 0.0]])).any()
    # Against brute force: inside when the nearest site of a wider lattice is one of the layout's.
    points_m = np.random.default_rng(7).uniform(-3 * ISD_M, 3 * ISD_M, (5000, 2))
    wider = HexGrid(4, ISD_M).distances_m(points_m).argmin(axis=1)
    assert np.array_equal(grid.contains(points_m), wider < grid.num_sites)


def test_place_is_uniform_over_the_cells_and_deterministic() -> None:
    grid, min_m = HexGrid(1, ISD_M), 35.0
    points_m = grid.place(np.random.default_rng(11), 7000, min_m)
    assert points_m.shape == (7000, 2)
    assert grid.contains(points_m).all()
    distances_m = grid.distances_m(points_m)
    assert distances_m.min() >= min_m
    counts = np.bincount(distances_m.argmin(axis=1), minlength=7)
    assert (np.abs(counts - 1000) < 150).all(), counts  # σ ≈ 29 per cell
    # Uniform in area within a cell: the share of the centre cell's points inside ISD/4.
    centre_m = distances_m[distances_m.argmin(axis=1) == 0, 0]
    hex_area_m2 = 3.0 * math.sqrt(3.0) / 2.0 * grid.cell_radius_m**2
    expected = (math.pi * ((ISD_M / 4) ** 2 - min_m**2)) / (hex_area_m2 - math.pi * min_m**2)
    assert math.isclose((centre_m < ISD_M / 4).mean(), expected, abs_tol=0.05)
    again = grid.place(np.random.default_rng(11), 7000, min_m)
    assert np.array_equal(points_m, again)
    assert not np.array_equal(points_m, grid.place(np.random.default_rng(12), 7000, min_m))
    assert grid.place(np.random.default_rng(0), 0, min_m).shape == (0, 2)


def test_layout_rejects_what_it_cannot_do() -> None:
    with pytest.raises(ValueError, match="wrap-around"):
        HexGrid(0, ISD_M, wrap_around=True)
    with pytest.raises(ValueError, match="inter-site"):
        HexGrid(1, 0.0)
    with pytest.raises(ValueError, match="min distance"):
        HexGrid(1, ISD_M).place(np.random.default_rng(0), 10, ISD_M / 2)


def test_serving_site_takes_the_strongest_with_hysteresis() -> None:
    loss_db = np.array([100.0, 97.0, 97.0, 110.0])
    assert serving_site(loss_db) == 1  # the tie between 1 and 2 goes to the lower index
    assert serving_site(loss_db, current=0, hysteresis_db=3.0) == 0  # 3 dB is not more than 3
    assert serving_site(loss_db, current=0, hysteresis_db=2.9) == 1
    assert serving_site(loss_db, current=2, hysteresis_db=0.0) == 2  # equal is not stronger
    assert serving_site(loss_db, current=3, hysteresis_db=12.0) == 1
    assert serving_site(loss_db, current=3, hysteresis_db=13.0) == 3


def test_interference_counts_only_active_uploads_of_other_cells() -> None:
    band_hz = 10e6
    # One interferer: client 1 (cell 1) reaches site 0 with 2e-12 W.
    received_w = np.array([[5e-10, 1e-13], [2e-12, 4e-10]])
    one = interference_w_per_hz(received_w, np.array([0, 1]), np.array([False, True]), band_hz)
    assert np.allclose(one, [2e-12 / band_hz, 0.0], rtol=1e-12, atol=0)
    # Two: client 2 uploads in site 0's own cell and must not count at site 0.
    received_w = np.array([[5e-10, 1e-13], [2e-12, 4e-10], [3e-10, 7e-12], [9e-12, 8e-12]])
    serving = np.array([0, 1, 0, 1])
    active = np.array([True, True, True, False])  # client 3 is idle
    both = interference_w_per_hz(received_w, serving, active, band_hz)
    assert np.allclose(both, [2e-12 / band_hz, (1e-13 + 7e-12) / band_hz], rtol=1e-12, atol=0)
    assert np.array_equal(
        interference_w_per_hz(received_w, serving, np.zeros(4, dtype=bool), band_hz), [0.0, 0.0]
    )
    # SINR of client 0 at site 0 with client 1 interfering, all as densities on the band.
    noise_w_per_hz = 4e-21
    expected = (5e-10 / band_hz) / (noise_w_per_hz + 2e-12 / band_hz)
    assert math.isclose(sinr(5e-10 / band_hz, noise_w_per_hz, both[0]), expected)
    with pytest.raises(ValueError, match="n_clients"):
        interference_w_per_hz(received_w, serving[:3], active, band_hz)
