"""Several cells: the sites of a hexagonal layout, who serves a client, and the interference
the other cells' uploads put on each site (plain numbers, numpy only).

Orientation: sites lie on a triangular lattice with basis a1 = ISD·(1, 0) and
a2 = ISD·(1/2, √3/2), so every site has 6 neighbours at ISD, at 0°, 60°, …, 300°. A site's cell
(its Voronoi cell) is then a pointy-top hexagon: corners at 30°, 90°, …, 330° at the cell radius
ISD/√3, flat edges facing the neighbours at ISD/2. Sites are indexed by axial coordinates
(q, r) at q·a1 + r·a2; ring k holds the sites at hexagonal distance max(|q|, |r|, |q + r|) = k.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

_SQRT3 = math.sqrt(3.0)
# The 6 axial steps to a site's neighbours, at 0°, 60°, …, 300° (counter-clockwise).
_AXIAL_DIRECTIONS = ((1, 0), (0, 1), (-1, 1), (-1, 0), (0, -1), (1, -1))


def _ring_axial(rings: int) -> list[tuple[int, int]]:
    """Axial coordinates of the sites out to ``rings``, ring by ring; each ring starts on the +x
    axis at k·a1 and runs counter-clockwise, k steps along each of its 6 sides."""
    sites = [(0, 0)]
    for k in range(1, rings + 1):
        q, r = k * _AXIAL_DIRECTIONS[0][0], k * _AXIAL_DIRECTIONS[0][1]
        for side in range(6):
            # The side that starts at k·d_side runs towards k·d_(side+1), i.e. along d_(side+2).
            dq, dr = _AXIAL_DIRECTIONS[(side + 2) % 6]
            for _ in range(k):
                sites.append((q, r))
                q, r = q + dq, r + dr
    return sites


@dataclass(frozen=True)
class HexGrid:
    """Sites of a hexagonal cellular layout, one omnidirectional base station per site (site 0
    at the origin), in the orientation of the module docstring.

    With ``wrap_around`` (the usual system-level wrap-around), distances go to the nearest image
    of each site on the lattice of copies of the whole cluster, so edge cells see as much
    interference as the centre one. For positions inside the layout the nearest image lies in the
    cluster itself or in one of its 6 surrounding copies (``cluster_shifts_m``).
    """

    rings: int  # 0: one site; 1: 7 sites; 2: 19 sites (3GPP's 19-site layout)
    inter_site_distance_m: float  # e.g. 500 m UMa, 200 m UMi (TR 38.901 Table 7.2-1)
    wrap_around: bool = False

    def __post_init__(self) -> None:
        if self.rings < 0:
            raise ValueError(f"rings must be >= 0, got {self.rings}")
        if not self.inter_site_distance_m > 0:
            raise ValueError(
                f"inter-site distance must be positive, got {self.inter_site_distance_m}"
            )
        if self.wrap_around and self.rings < 1:
            raise ValueError("wrap-around needs rings >= 1 (a single site has no neighbours)")

    @property
    def num_sites(self) -> int:
        return 3 * self.rings**2 + 3 * self.rings + 1

    @property
    def cell_radius_m(self) -> float:
        """Centre to hexagon corner: ISD/√3 (the inradius, centre to edge, is ISD/2)."""
        return self.inter_site_distance_m / _SQRT3

    def _basis_m(self) -> np.ndarray:
        """Rows a1, a2: the lattice vectors to the neighbours at 0° and 60°."""
        isd = self.inter_site_distance_m
        return np.array([[isd, 0.0], [isd / 2.0, isd * _SQRT3 / 2.0]])

    def sites_m(self) -> np.ndarray:
        """(num_sites, 2) site positions, ring by ring, each ring counter-clockwise from +x."""
        return np.array(_ring_axial(self.rings), dtype=float) @ self._basis_m()

    def cluster_shifts_m(self) -> np.ndarray:
        """(6, 2) translations from the cluster to its 6 surrounding copies, at 60° from each other.

        For a cluster of rings r the first is T0 = (r + 1)·a1 + r·a2: the copy centred there
        holds (r + 1)·a1, the site just beyond the cluster's ring r on the +x axis, on its own ring
        r (T0 − (r + 1)·a1 = r·a2), so the copies abut without gap or overlap. Its length is
        √(N)·ISD, N = 3r² + 3r + 1 sites (|q·a1 + s·a2|² = ISD²·(q² + q·s + s²)): a copy's centre
        lattice has cells of N sites' area, as a tiling must. The others are T0 rotated by k·60°.
        """
        if self.rings < 1:
            raise ValueError("a single site has no cluster copies (rings >= 1)")
        t0 = np.array([self.rings + 1, self.rings], dtype=float) @ self._basis_m()
        angles = np.arange(6) * (math.pi / 3.0)
        cos, sin = np.cos(angles), np.sin(angles)
        return np.column_stack([cos * t0[0] - sin * t0[1], sin * t0[0] + cos * t0[1]])

    def distances_m(self, positions_m: np.ndarray) -> np.ndarray:
        """(n, num_sites) 2D distances from each position to each site (to its nearest image with
        wrap-around)."""
        positions = np.asarray(positions_m, dtype=float).reshape(-1, 2)
        offsets_m = positions[:, None, :] - self.sites_m()[None, :, :]
        if not self.wrap_around:
            return np.linalg.norm(offsets_m, axis=-1)
        # Nearest image = the offset minus its nearest point on the lattice of cluster shifts
        # (basis T0, T1 at 60°). That lattice splits into equilateral triangles, and a point's
        # nearest lattice point is a corner of its triangle, so the 4 corners of the enclosing
        # parallelogram suffice; exact for any position, not only inside the layout.
        shift_basis_m = self.cluster_shifts_m()[:2]
        corner = np.floor(offsets_m @ np.linalg.inv(shift_basis_m))
        candidates = corner[..., None, :] + np.array([[0, 0], [1, 0], [0, 1], [1, 1]])
        images_m = candidates @ shift_basis_m
        return np.linalg.norm(offsets_m[..., None, :] - images_m, axis=-1).min(axis=-1)

    def _nearest_axial(self, positions_m: np.ndarray) -> np.ndarray:
        """(n, 2) axial coordinates of the nearest lattice site (the hexagon a point lies in), by
        rounding cube coordinates (q, r, −q − r) and fixing the one rounded furthest."""
        positions = np.asarray(positions_m, dtype=float).reshape(-1, 2)
        fractional = positions @ np.linalg.inv(self._basis_m())
        cube = np.column_stack([fractional, -fractional.sum(axis=1)])
        rounded = np.round(cube)
        worst = np.argmax(np.abs(rounded - cube), axis=1)
        rows = np.arange(len(cube))
        rounded[rows, worst] = 0.0
        rounded[rows, worst] = -rounded.sum(axis=1)
        return rounded[:, :2].astype(int)

    def contains(self, positions_m: np.ndarray) -> np.ndarray:
        """(n,) bool: inside the layout, the union of the sites' hexagons."""
        q, r = self._nearest_axial(positions_m).T
        return np.maximum(np.maximum(np.abs(q), np.abs(r)), np.abs(q + r)) <= self.rings

    def place(
        self, rng: np.random.Generator, num_clients: int, min_distance_m: float
    ) -> np.ndarray:
        """(num_clients, 2) points uniform over the layout, at least min_distance_m from every
        site: rejection sampling from the bounding box, so a deterministic function of the rng.
        min_distance_m must stay below the inradius ISD/2, so the excluded disc fits the cell."""
        if num_clients < 0:
            raise ValueError(f"num_clients must be >= 0, got {num_clients}")
        if not 0.0 <= min_distance_m < self.inter_site_distance_m / 2.0:
            raise ValueError(
                f"min distance must lie in [0, ISD/2 = {self.inter_site_distance_m / 2.0}) m, "
                f"got {min_distance_m}"
            )
        sites = self.sites_m()
        low_m = sites.min(axis=0) - self.cell_radius_m
        high_m = sites.max(axis=0) + self.cell_radius_m
        accepted: list[np.ndarray] = []
        missing = num_clients
        while missing > 0:
            # The layout fills about 3/4 of its box; 2× plus a margin rarely needs a second pass.
            draws = rng.uniform(low_m, high_m, size=(2 * missing + 16, 2))
            nearest_site_m = np.linalg.norm(draws[:, None, :] - sites, axis=-1).min(axis=1)
            kept = draws[self.contains(draws) & (nearest_site_m >= min_distance_m)][:missing]
            accepted.append(kept)
            missing -= len(kept)
        return np.concatenate(accepted) if accepted else np.empty((0, 2))


def serving_site(
    loss_db: np.ndarray, current: int | None = None, hysteresis_db: float = 0.0
) -> int:
    """The site with the lowest large-scale loss (the strongest); ties go to the lowest index.
    With a ``current`` site, hand over only when another site is stronger by more than
    hysteresis_db (an A3-like event without time-to-trigger), so a client on a cell edge does not
    ping-pong between sites on every shadowing or position update."""
    if hysteresis_db < 0:
        raise ValueError(f"hysteresis must be >= 0 dB, got {hysteresis_db}")
    losses_db = np.asarray(loss_db, dtype=float)
    best = int(np.argmin(losses_db))
    if current is None or losses_db[current] - losses_db[best] > hysteresis_db:
        return best
    return current


def interference_w_per_hz(
    received_w: np.ndarray, serving: np.ndarray, active: np.ndarray, band_hz: float
) -> np.ndarray:
    """(n_sites,) mean interference power spectral density at each site, from the active uploads
    served by other sites: sum over those uploads u of received_w[u, s] / band_hz.

    received_w (n_clients, n_sites) is each client's transmit power times its channel gain to each
    site; serving (n_clients,) its serving site; active (n_clients,) whether it uploads now.

    Why p/B whatever the upload's share of the band: an upload that spreads its received power p
    over a share b of the band B, placed at random within it, overlaps a given PRB with
    probability b/B, and there at density p/b, so its expected density on that PRB is
    (b/B)·(p/b) = p/B. This is exact when each cell gives one upload the whole band (as a
    proportional-fair scheduler does under flat fading), and the mean otherwise.
    """
    received = np.asarray(received_w, dtype=float)
    serving_sites = np.asarray(serving)
    uploading = np.asarray(active, dtype=bool)
    clients = (received.shape[0],) if received.ndim == 2 else None
    if clients is None or serving_sites.shape != clients or uploading.shape != clients:
        raise ValueError(
            f"received_w must be (n_clients, n_sites) with serving and active (n_clients,), got "
            f"{received.shape}, {serving_sites.shape}, {uploading.shape}"
        )
    if not band_hz > 0:
        raise ValueError(f"band must be positive, got {band_hz}")
    other_cell = serving_sites[:, None] != np.arange(received.shape[1])[None, :]
    counted = uploading[:, None] & other_cell
    return np.where(counted, received, 0.0).sum(axis=0) / band_hz


def sinr(signal_w_per_hz: float, noise_w_per_hz: float, interference_w_per_hz: float) -> float:
    """Signal over noise plus interference, all as power spectral densities on the same band."""
    return signal_w_per_hz / (noise_w_per_hz + interference_w_per_hz)
