"""Where clients are: placed uniformly in the cell's annulus, and moving by random waypoint."""

from __future__ import annotations

import math

import numpy as np

from fedsim.sim.draws import WAYPOINT, block_of, hashed_uniform


def place_in_annulus(
    rng: np.random.Generator, count: int, radius_m: float, min_distance_m: float
) -> np.ndarray:
    """count points uniform in area over min_distance_m <= |x| <= radius_m; shape (count, 2)."""
    r = np.sqrt(rng.uniform(min_distance_m**2, radius_m**2, count))
    angle = rng.uniform(0.0, 2.0 * math.pi, count)
    return np.column_stack([r * np.cos(angle), r * np.sin(angle)])


def _hashed_point_in_annulus(
    key: int, client: int, leg: int, radius_m: float, min_distance_m: float
) -> tuple[float, float]:
    u_r = hashed_uniform(key, WAYPOINT, client, leg, 0)
    u_angle = hashed_uniform(key, WAYPOINT, client, leg, 1)
    r = math.sqrt(min_distance_m**2 + u_r * (radius_m**2 - min_distance_m**2))
    return r * math.cos(2.0 * math.pi * u_angle), r * math.sin(2.0 * math.pi * u_angle)


class RandomWaypoint:
    """Random waypoint without pauses: walk at speed_mps to a point drawn uniformly in the
    cell, then to the next. The position is sampled every ``update_s`` (path loss follows at
    those instants), and computed lazily: only when asked, moving forward in time."""

    def __init__(
        self,
        key: int,
        client: int,
        start_xy: tuple[float, float],
        radius_m: float,
        min_distance_m: float,
        speed_mps: float,
        update_s: float,
    ) -> None:
        self._key, self._client = key, client
        self._radius_m, self._min_distance_m = radius_m, min_distance_m
        self._speed_mps, self.update_s = speed_mps, update_s
        self._leg = 0
        self._from, self._to = start_xy, self._waypoint(0)
        self._leg_start_s = 0.0
        self._leg_end_s = self._leg_seconds()

    def _waypoint(self, leg: int) -> tuple[float, float]:
        return _hashed_point_in_annulus(
            self._key, self._client, leg, self._radius_m, self._min_distance_m
        )

    def _leg_seconds(self) -> float:
        (x0, y0), (x1, y1) = self._from, self._to
        return self._leg_start_s + math.hypot(x1 - x0, y1 - y0) / self._speed_mps

    def position(self, time_s: float) -> tuple[float, float]:
        """Where the client was at the last position update at or before time_s."""
        tick_s = block_of(time_s, self.update_s) * self.update_s
        if tick_s < self._leg_start_s:
            raise ValueError("random waypoint positions are computed forward in time only")
        while self._leg_end_s <= tick_s:
            self._leg += 1
            self._from, self._to = self._to, self._waypoint(self._leg)
            self._leg_start_s = self._leg_end_s
            self._leg_end_s = self._leg_seconds()
        span_s = self._leg_end_s - self._leg_start_s
        done = (tick_s - self._leg_start_s) / span_s if span_s > 0 else 1.0
        (x0, y0), (x1, y1) = self._from, self._to
        return x0 + done * (x1 - x0), y0 + done * (y1 - y0)
