"""Each client's large-scale channel over time: where it is (random-waypoint mobility), its
path loss and shadowing to every site, its line of sight, the site it is attached to (handed
over with hysteresis), and its records. ``radio.Radio`` adds the channel law on top (fading,
noise, interference, power, the links transfers ride on).

Draws after the start are counter based (``draws``): a client's shadowing in block k towards a
site is a hash of (seed, client, k, site), so its channel is the same function of time in every
run of a scenario."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from fedsim.sim.cells import serving_site
from fedsim.sim.draws import LOS, SHADOWING, block_of, hashed_normal_pair, hashed_uniform
from fedsim.sim.geometry import RandomWaypoint
from fedsim.sim.pathloss import PathLoss, Tr38901
from fedsim.sim.radio_settings import RadioSettings
from fedsim.sim.records import LinkStats


@dataclass(slots=True)
class _LargeScale:
    """A client's large-scale channel between two of its changes (a position update, a new
    shadowing block): its distance to every site, and what was asked so far: its loss to each
    site, its uplink power on each band share (power control)."""

    epoch: tuple[int, int]  # (position update, shadowing block): Radio._large_scale_state
    distances_m: tuple[float, ...] | None = None
    loss_db: dict[int, float] = field(default_factory=dict)  # per site
    uplink_power_w: dict[float, float] = field(default_factory=dict)  # per band share (Hz)
    uplink_powers_w: np.ndarray | None = None  # per PRB count (1, 2, ...)


class LargeScale:
    """Where every client is and what it loses to each site, over time (see the module
    docstring); per-client state, computed lazily and kept until the client moves or its
    shadowing block ends."""

    def __init__(
        self,
        settings: RadioSettings,
        clock: Callable[[], float],
        positions_m: np.ndarray,
        shadowing_db: np.ndarray,
        key: int,
        *,
        cache_channel: bool = True,
    ) -> None:
        """positions_m: (clients, 2) around the base station at the origin (with cells: over
        the grid); shadowing_db: per client (the shadowing of the run, or of its first block,
        towards the first site; with a TR 38.901 law in units of its σ, the standard normal
        draw, as σ follows the client's line of sight). ``cache_channel``: see ``Radio``."""
        self.settings = settings
        self.now = clock
        self.key = key
        self.cache_channel = cache_channel
        self._large_scale: dict[int, _LargeScale] = {}  # client -> where it is now, its losses
        self.start_positions_m = np.asarray(positions_m, dtype=float)
        self._shadowing_db = np.asarray(shadowing_db, dtype=float)
        self._standard = isinstance(settings.path_loss, Tr38901)
        self._sites_m = settings.cells.grid.sites_m() if settings.cells else np.zeros((1, 2))
        self._site_loss_db = self._static_site_losses_db()  # (clients, sites)
        self._start_serving = [
            serving_site(row) if settings.cells else 0 for row in self._site_loss_db
        ]
        self._serving = list(self._start_serving)  # handed over (mobility) when asked
        self._serving_block = [0] * len(self._serving)  # the update block it was chosen in
        self._static_loss_db = self._site_loss_db[np.arange(len(self._serving)), self._serving]
        self._walkers: dict[int, RandomWaypoint] = {}
        self.stats = [LinkStats() for _ in range(len(self.start_positions_m))]

    @property
    def num_clients(self) -> int:
        return len(self.start_positions_m)

    @property
    def num_sites(self) -> int:
        return len(self._sites_m)

    @property
    def sites_m(self) -> np.ndarray:
        return self._sites_m

    @property
    def cellular_law(self) -> bool:
        return self._standard

    def start_distance_m(self, client: int, site: int) -> float:
        """The client's distance to the site where it started."""
        return float(self._start_distance_m[client, site])

    def start_line_of_sight(self, client: int) -> bool:
        """Whether the client saw its serving site at the start (TR 38.901 laws)."""
        site = self._start_serving[client]
        distance_m = max(self.start_distance_m(client, site), self.settings.min_distance_m)
        return self.line_of_sight(client, distance_m, site)

    def _static_site_losses_db(self) -> np.ndarray:
        """Path loss plus shadowing from every client to every site at the start. The first
        site's shadowing is the draw given; the others' are hashed (one per client and site)."""
        settings = self.settings
        positions_m = self.start_positions_m
        if settings.cells is None:
            self._start_distance_m = np.hypot(positions_m[:, 0], positions_m[:, 1])[:, None]
        else:
            self._start_distance_m = settings.cells.grid.distances_m(positions_m)
        distance_m = np.maximum(self._start_distance_m, settings.min_distance_m)
        losses_db = np.empty_like(distance_m)
        for site in range(distance_m.shape[1]):
            column = distance_m[:, site]
            if site == 0:
                normal = self._shadowing_db
            else:
                normal = np.array([
                    hashed_normal_pair(self.key, SHADOWING, client, -site)[0]
                    for client in range(len(column))
                ])  # fmt: skip
            if not self._standard:
                shadowing_db = normal if site == 0 else settings.shadowing_db * normal
                losses_db[:, site] = np.asarray(settings.path_loss.db(column)) + shadowing_db
                continue
            for client, d in enumerate(column):
                los = self.line_of_sight(client, float(d), site)
                sigma_db = settings.path_loss.shadowing_std_db(float(d), los)
                losses_db[client, site] = (
                    settings.path_loss.db(float(d), los) + sigma_db * normal[client]
                )
        return losses_db

    def line_of_sight(self, client: int, distance_m: float, site: int = 0) -> bool:
        """Whether the client sees the site (a TR 38.901 law; other laws: True): one uniform
        per client and site for the run against the LOS probability at the distance, so a
        moving client gains and loses sight as it nears and leaves."""
        mode = self.settings.line_of_sight
        if not self._standard or mode != "probability":
            return mode != "never"
        draw = hashed_uniform(self.key, LOS, -1 - site, client)
        return draw < self.settings.path_loss.los_probability(distance_m)

    # --- large scale: distance, path loss, shadowing ---

    def position_m(self, client: int, time_s: float | None = None) -> tuple[float, float]:
        if self.settings.speed_mps is None:
            x, y = self.start_positions_m[client]
            return float(x), float(y)
        walker = self._walkers.get(client)
        if walker is None:
            s = self.settings
            walker = RandomWaypoint(
                self.key, client, tuple(self.start_positions_m[client]), s.cell_radius_m,
                s.min_distance_m, s.speed_mps, s.update_s,
            )  # fmt: skip
            self._walkers[client] = walker
        return walker.position(self.now() if time_s is None else time_s)

    def _shadowing_normal(self, client: int, time_s: float, site: int) -> float:
        """The client's shadowing towards the site in the block holding time_s, in units of σ
        (or in dB, for the first site's first block of a law with a fixed σ)."""
        period_s = self.settings.shadowing_coherence_s
        block = block_of(time_s, period_s) if period_s else 0
        if block == 0:
            if site == 0:
                return float(self._shadowing_db[client])
            return hashed_normal_pair(self.key, SHADOWING, client, -site)[0]
        counters = (client, block) if site == 0 else (client, block, site)
        return hashed_normal_pair(self.key, SHADOWING, *counters)[0]

    def large_scale_loss_db(
        self, client: int, time_s: float | None = None, site: int | None = None
    ) -> float:
        """Path loss plus shadowing between the client and a site (default: its serving
        site), in dB."""
        s = self.settings
        if s.speed_mps is None and not s.shadowing_coherence_s:
            if site is None:
                return float(self._static_loss_db[client])
            return float(self._site_loss_db[client, site])
        time_s = self.now() if time_s is None else time_s
        if site is None:
            site = self.serving_site(client, time_s)
        state = self._large_scale_state(client, time_s)
        loss_db = state.loss_db.get(site)
        if loss_db is None:
            loss_db = self._computed_loss_db(client, time_s, site, state)
            state.loss_db[site] = loss_db
        return loss_db

    def _large_scale_state(self, client: int, time_s: float) -> _LargeScale:
        """What is known of the client's large-scale channel at time_s: kept (with
        ``cache_channel``) until it moves or its shadowing block ends. Its loss is a function
        of (position update, shadowing block) and the site alone, and so is its serving site
        (chosen again at those instants only) and its power-controlled uplink power."""
        s = self.settings
        position_block = block_of(time_s, s.update_s) if s.speed_mps else 0
        period_s = s.shadowing_coherence_s
        epoch = (position_block, block_of(time_s, period_s) if period_s else 0)
        state = self._large_scale.get(client)
        if state is None or state.epoch != epoch:  # it moved, or its shadowing block ended
            state = _LargeScale(epoch)
            if self.cache_channel:
                self._large_scale[client] = state
        return state

    def _computed_loss_db(self, client: int, time_s: float, site: int, state: _LargeScale) -> float:
        """The large-scale loss to the site at time_s, from the position of that instant
        (``state`` keeps the distances to every site, computed once per position)."""
        s = self.settings
        if state.distances_m is None:
            x, y = self.position_m(client, time_s)
            if s.cells is None:
                state.distances_m = (math.hypot(x, y),)
            else:
                state.distances_m = tuple(
                    float(d) for d in s.cells.grid.distances_m(np.array([[x, y]]))[0]
                )
        distance_m = max(state.distances_m[site], s.min_distance_m)
        normal = self._shadowing_normal(client, time_s, site)
        if self._standard:
            los = self.line_of_sight(client, distance_m, site)
            sigma_db = s.path_loss.shadowing_std_db(distance_m, los)
            return float(s.path_loss.db(distance_m, los)) + sigma_db * normal
        if site != 0 or (s.shadowing_coherence_s and block_of(time_s, s.shadowing_coherence_s)):
            normal *= s.shadowing_db
        return float(s.path_loss.db(distance_m)) + normal

    def attached_site(self, client: int) -> int:
        """The site the client was last found attached to, with no handover check (asking
        ``serving_site`` at a new time may hand it over)."""
        return self._serving[client]

    def serving_site(self, client: int, time_s: float | None = None) -> int:
        """The site the client is attached to: the strongest at the start; a moving client (or
        one whose shadowing changes) is handed over, at each of its position updates, to a
        site stronger than its own by the hysteresis. Times must increase per client."""
        cells = self.settings.cells
        s = self.settings
        if cells is None or (s.speed_mps is None and not s.shadowing_coherence_s):
            return self._serving[client]
        time_s = self.now() if time_s is None else time_s
        period_s = min(
            p for p in (s.update_s if s.speed_mps else None, s.shadowing_coherence_s) if p
        )
        block = block_of(time_s, period_s)
        if block > self._serving_block[client]:
            self._serving_block[client] = block
            losses_db = np.array([
                self.large_scale_loss_db(client, time_s, site) for site in range(self.num_sites)
            ])  # fmt: skip
            site = serving_site(losses_db, self._serving[client], cells.hysteresis_db)
            if site != self._serving[client]:
                self._serving[client] = site
                self.stats[client].handovers += 1
        return self._serving[client]

    def pair_loss_db(self, a: int, b: int) -> float:
        """Path loss between two clients (D2D) by the D2D law, at their current positions;
        no shadowing. Whether a pair has line of sight is one draw per pair for the run,
        against the law's LOS probability at the current distance."""
        (xa, ya), (xb, yb) = self.position_m(a), self.position_m(b)
        distance_m = max(math.hypot(xa - xb, ya - yb), self.settings.min_distance_m)
        law = self.settings.d2d_path_loss
        if isinstance(law, PathLoss):
            return float(law.db(distance_m))
        if law.los == "probability":
            low, high = sorted((a, b))
            sight = hashed_uniform(self.key, LOS, low, high) < law.los_probability(distance_m)
        else:
            sight = law.los == "always"
        return law.db(distance_m, sight)
