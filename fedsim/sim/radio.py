"""The radio: where a link's rate comes from when the scenario has ``system.radio``.

A client at distance d from the base station (at the origin) sees a channel power gain
g = 10^(-(PL(d) + X)/10) · |h|², with PL a path-loss law, X log-normal shadowing (dB) and
|h|² small-scale fading (none, Rayleigh, Rician K), block fading re-drawn every
``coherence_s`` (or at every transmission); with a TR 38.901 TDL profile, a gain per subband
of the band instead (``fedsim.sim.selective``), whose PRB mean is |h|². On a band share of
b Hz, with transmit power p and noise density N0 (times the receiver's noise figure F: the
base station's on the uplink, the device's on the downlink and D2D), the SNR is
p·g / (F·N0·b): the noise scales with the share, so a rate is not linear in its share of
the band.

Every random draw after the start is *counter based*: the fading of client c's uplink in
block k is a hash of (seed, c, uplink, k), not the next number of a stream. Draws are made
lazily, only for links that carry a transfer, so idle clients cost no events; and a channel
is the same function of time in every run of a scenario (every algorithm meets the same fades,
whatever it transmits), which makes comparisons of algorithms paired.

What a transmitter does with the channel (the rate it picks, what is lost, HARQ) is the
link model's (``fedsim.sim.link``), built once from ``settings.link``; each transmission's
channel is a ``transmission.RadioLink``. Geometry, mobility and the draws at the start
(positions, shadowing, transmit powers) are seeded by the World's streams.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from fedsim.sim.cells import HexGrid, serving_site
from fedsim.sim.draws import (
    FADING,
    LOS,
    SHADOWING,
    Fading,
    block_of,
    hashed_normal_pair,
    hashed_uniform,
)
from fedsim.sim.geometry import RandomWaypoint
from fedsim.sim.link import IdealSettings, LinkModel, LinkSettings
from fedsim.sim.pathloss import PathLoss, Tr38901, UmiStreetCanyon
from fedsim.sim.records import LinkStats
from fedsim.sim.scheduler import num_prbs, open_loop_power_dbm, prb_hz
from fedsim.sim.selective import SelectiveFading, SubbandGrid
from fedsim.sim.transmission import D2D, DOWNLINK, UPLINK, RadioLink

__all__ = ["D2D", "DOWNLINK", "UPLINK", "Radio", "RadioLink", "RadioSettings"]


def db_to_linear(db: float | np.ndarray) -> float | np.ndarray:
    return 10.0 ** (np.asarray(db) / 10.0) if isinstance(db, np.ndarray) else 10.0 ** (db / 10.0)


def dbm_to_watts(dbm: float | np.ndarray) -> float | np.ndarray:
    return db_to_linear(dbm) / 1000.0


# --- the radio -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PowerControl:
    """Open-loop uplink power (TS 38.213 §7.1.1): min(P_max, P0 + 10 log10(2^μ M_PRB) + α PL)
    on the PRBs M_PRB of the transmitter's share of the band, PL its large-scale loss."""

    p0_dbm: float = -90.0
    alpha: float = 1.0
    subcarrier_spacing_khz: int = 30


@dataclass(frozen=True)
class CellSettings:
    """Several sites (``fedsim.sim.cells``): attachment with hysteresis, other cells' uploads
    as interference on the uplink, a backhaul from every site to the server."""

    grid: HexGrid
    interference: bool = True
    hysteresis_db: float = 3.0
    backhaul_bps: float = 1e9
    backhaul_latency_s: float = 0.005
    backhaul_shared: bool = True  # a site's transfers share its link (``fedsim.sim.backhaul``)


@dataclass(frozen=True)
class RadioSettings:
    """The radio's fixed parameters (the per-client draws are given to ``Radio``)."""

    path_loss: PathLoss | Tr38901 = PathLoss()
    line_of_sight: str = "probability"  # a TR 38.901 law: probability | always | never
    fading: Fading = Fading()
    # A gain per subband from a TDL profile (``fedsim.sim.selective``) instead of one over the
    # band; ``fading`` keeps its model and block. ``subband_prbs``: None, the RBG size.
    selective: SelectiveFading | None = None
    subband_prbs: int | None = None
    shadowing_db: float = 0.0
    shadowing_coherence_s: float | None = None  # None: one draw per client for the run
    noise_density_dbm_per_hz: float = -174.0
    bs_noise_figure_db: float = 0.0  # the base station's receiver: uplink (and over the air)
    ue_noise_figure_db: float = 0.0  # the device's receiver: downlink and D2D
    base_station_power_dbm: float = 30.0
    uplink_bandwidth_hz: float = 20e6
    downlink_bandwidth_hz: float = 20e6
    d2d_bandwidth_hz: float = 10e6
    min_distance_m: float = 1.0
    cell_radius_m: float = 500.0
    link: LinkSettings = IdealSettings()  # the link model's (``fedsim.sim.link``)
    d2d_path_loss: PathLoss | UmiStreetCanyon = UmiStreetCanyon()
    speed_mps: float | None = None  # random waypoint mobility, when set
    update_s: float = 1.0
    power_control: PowerControl | None = None
    cells: CellSettings | None = None


@dataclass(slots=True)
class _LargeScale:
    """A client's large-scale channel between two of its changes (a position update, a new
    shadowing block): its distance to every site, and what was asked so far: its loss to each
    site, its uplink power on each band share (power control)."""

    epoch: tuple[int, int]  # (position update, shadowing block): Radio._large_scale_state
    distances_m: tuple[float, ...] | None = None
    loss_db: dict[int, float] = field(default_factory=dict)  # per site
    uplink_power_w: dict[float, float] = field(default_factory=dict)  # per band share (Hz)


class Radio:
    """Channel gains of every client over time, and the links transfers ride on."""

    def __init__(
        self,
        settings: RadioSettings,
        clock: Callable[[], float],
        positions_m: np.ndarray,
        tx_power_dbm: np.ndarray,
        shadowing_db: np.ndarray,
        key: int,
        *,
        cache_channel: bool = True,
    ) -> None:
        """positions_m: (clients, 2) around the base station at the origin (with cells: over
        the grid); tx_power_dbm and shadowing_db: per client (the shadowing of the run, or of
        its first block, towards the first site; with a TR 38.901 law in units of its σ, the
        standard normal draw, as σ follows the client's line of sight).

        ``cache_channel``: keep what does not change between two channel changes: a client's
        large-scale loss per site and its power-controlled uplink power per band share until it
        moves or its shadowing block ends, a link's achievable rate per band share until its
        channel changes (a scheduler asks for them at every candidate PRB count of every
        period). False recomputes them at every query, with the same results: the reference a
        benchmark measures the caches against."""
        self.settings = settings
        self.now = clock
        self.key = key
        self.cache_channel = cache_channel
        self._large_scale: dict[int, _LargeScale] = {}  # client -> where it is now, its losses
        self.start_positions_m = np.asarray(positions_m, dtype=float)
        self.tx_power_w = np.asarray(dbm_to_watts(np.asarray(tx_power_dbm, dtype=float)))
        self._shadowing_db = np.asarray(shadowing_db, dtype=float)
        self._base_station_w = float(dbm_to_watts(settings.base_station_power_dbm))
        bs_w_per_hz, ue_w_per_hz = (
            float(dbm_to_watts(settings.noise_density_dbm_per_hz + figure_db))
            for figure_db in (settings.bs_noise_figure_db, settings.ue_noise_figure_db)
        )
        # F·N0 at the receiver of each direction (indexed by UPLINK, DOWNLINK, D2D)
        self._noise_w_per_hz = {UPLINK: bs_w_per_hz, DOWNLINK: ue_w_per_hz, D2D: ue_w_per_hz}
        self._standard = isinstance(settings.path_loss, Tr38901)
        self._sites_m = settings.cells.grid.sites_m() if settings.cells else np.zeros((1, 2))
        self._site_loss_db = self._static_site_losses_db()  # (clients, sites)
        self._start_serving = [
            serving_site(row) if settings.cells else 0 for row in self._site_loss_db
        ]
        self._serving = list(self._start_serving)  # handed over (mobility) when asked
        self._serving_block = [0] * len(self._serving)  # the update block it was chosen in
        self._static_loss_db = self._site_loss_db[np.arange(len(self._serving)), self._serving]
        self._transmitting: dict[int, tuple[int, float]] = {}  # client -> (site, power W)
        self._interference: dict[int, float] = {}  # site -> W/Hz, while the transmitters stay
        self.interference_epoch = 0
        self.on_interference_change: Callable[[], None] | None = None  # set by the network
        self.prb_seconds: Callable[[], dict[int, float]] | None = None  # a PRB scheduler's
        fading_s = settings.fading.coherence_s if settings.fading.model != "none" else None
        mobility_s = settings.update_s if settings.speed_mps else None
        # The periods at which a channel changes by itself (fading, shadowing, positions).
        self._periods_s = tuple(
            period_s for period_s in (fading_s, settings.shadowing_coherence_s, mobility_s)
            if period_s
        )  # fmt: skip
        self._walkers: dict[int, RandomWaypoint] = {}
        self._transmissions: dict[tuple[int, int, int], int] = {}  # per-transmission fading
        self.stats = [LinkStats() for _ in range(len(self.start_positions_m))]
        self.link: LinkModel = settings.link.build()
        self._uplink_usable_hz = self.link.usable_hz(settings.uplink_bandwidth_hz)
        self._grids = self._subband_grids()

    @property
    def num_clients(self) -> int:
        return len(self.start_positions_m)

    def _subband_grids(self) -> dict[int, SubbandGrid]:
        """Each direction's band cut into subbands (PRB groups) when the fading is frequency
        selective: the PRBs of the link model's numerology (TS 38.101-1's count)."""
        settings = self.settings
        if settings.selective is None:
            return {}
        spacing_khz = round(self.link.prb_hz / 12e3)
        bands_hz = {
            UPLINK: settings.uplink_bandwidth_hz,
            DOWNLINK: settings.downlink_bandwidth_hz,
            D2D: settings.d2d_bandwidth_hz,
        }
        return {
            direction: SubbandGrid.of(
                num_prbs(bandwidth_hz, spacing_khz), self.link.prb_hz, settings.subband_prbs
            )
            for direction, bandwidth_hz in bands_hz.items()
        }

    def subband_grid(self, direction: int) -> SubbandGrid | None:
        """The direction's subbands, or None when the fading is flat across the band."""
        return self._grids.get(direction)

    @property
    def num_sites(self) -> int:
        return len(self._sites_m)

    @property
    def sites_m(self) -> np.ndarray:
        return self._sites_m

    @property
    def power_controlled(self) -> bool:
        """Whether the uplink's power follows open-loop power control."""
        return self.settings.power_control is not None

    @property
    def transmitting(self) -> bool:
        """Whether an upload is on the air in some cell (interference, several cells)."""
        return bool(self._transmitting)

    @property
    def cellular(self) -> bool:
        """Whether a cellular feature is on (TR 38.901 law, cells, PRB scheduler, power
        control): radio.csv then carries their columns."""
        s = self.settings
        return bool(self._standard or s.cells or s.power_control or self.prb_seconds)

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

    # --- interference (several cells) ---

    def set_transmitting(self, client: int, site: int, power_w: float | None) -> None:
        """The client's upload to the site is on the air at power_w now (None: it stopped):
        the other sites' interference changes, and the network re-rates their uploads."""
        cells = self.settings.cells
        if cells is None or not cells.interference or self.num_sites == 1:
            return
        now = (site, power_w) if power_w is not None else None
        if self._transmitting.get(client) == now:
            return
        if now is None:
            del self._transmitting[client]
        else:
            self._transmitting[client] = now
        self._interference.clear()
        self.interference_epoch += 1
        if self.on_interference_change is not None:
            self.on_interference_change()

    def interference_w_per_hz(self, site: int) -> float:
        """The mean interference density at the site from uploads on the air in other cells:
        Σ p·g / B with g the large-scale gain (fading averaged; ``cells.interference_w_per_hz``
        says why a share of the band does not matter)."""
        if not self._transmitting:
            return 0.0
        cached = self._interference.get(site)
        if cached is None:
            cached = (
                sum(
                    power_w * 10.0 ** (-self.large_scale_loss_db(client, site=site) / 10.0)
                    for client, (serving, power_w) in self._transmitting.items()
                    if serving != site
                )
                / self._uplink_usable_hz
            )
            self._interference[site] = cached
        return cached

    def uplink_power_w(self, client: int, bandwidth_hz: float) -> float:
        """What the client transmits at on bandwidth_hz of the uplink: its maximum, or with
        power control P0 + 10 log10(2^μ M_PRB) + α PL capped at it."""
        control = self.settings.power_control
        if control is None:
            return float(self.tx_power_w[client])
        known = self._large_scale_state(client, self.now()).uplink_power_w
        power_w = known.get(bandwidth_hz)
        if power_w is None:
            prbs = bandwidth_hz / prb_hz(control.subcarrier_spacing_khz)
            power_dbm = open_loop_power_dbm(
                control.p0_dbm, control.alpha, self.large_scale_loss_db(client), prbs,
                10.0 * math.log10(self.tx_power_w[client] * 1000.0),
                control.subcarrier_spacing_khz,
            )  # fmt: skip
            power_w = known[bandwidth_hz] = float(dbm_to_watts(power_dbm))
        return power_w

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

    def nominal_rate_bps(
        self, downlink: bool, clients: Sequence[int], bandwidth_hz: float
    ) -> float:
        """The rate without fading (path loss and shadowing now) to or from the clients,
        the weakest of them: a model of a transfer's rate, for planning (UCFL's round time)."""
        power_w = (
            [self._base_station_w] if downlink else [float(self.tx_power_w[c]) for c in clients]
        )
        gains = [10.0 ** (-self.large_scale_loss_db(c) / 10.0) for c in clients]
        direction = DOWNLINK if downlink else UPLINK
        snr = min(gains) * min(power_w) / self.noise_w(direction, bandwidth_hz)
        return self.rate_bps(bandwidth_hz, snr, direction)

    def mean_snr_db(self, bandwidth_hz: float) -> np.ndarray:
        """Every client's uplink SNR without fading at the start, on bandwidth_hz, in dB."""
        noise_dbm = self.settings.noise_density_dbm_per_hz + self.settings.bs_noise_figure_db
        noise_dbm += 10.0 * math.log10(bandwidth_hz)  # the base station receives
        tx_dbm = 10.0 * np.log10(self.tx_power_w * 1000.0)
        return tx_dbm - self._static_loss_db - noise_dbm

    def uplink_snr_db_at(self, client: int, time_s: float, bandwidth_hz: float) -> float:
        """The client's uplink SNR at time_s on bandwidth_hz, fading included (its first
        transmission's fading when fading is drawn per transmission). Times must increase
        from call to call for a mobile client."""
        gain_db = -self.large_scale_loss_db(client, time_s)
        gain_db += 10.0 * math.log10(self.fading_gain(client, UPLINK, time_s, 0))
        power_dbm = 10.0 * math.log10(self.tx_power_w[client] * 1000.0)
        return power_dbm + gain_db - 10.0 * math.log10(self.noise_w(UPLINK, bandwidth_hz) * 1000.0)

    def uplink_gain(self, client: int) -> float:
        """The client's uplink channel power gain now (path loss, shadowing, fading): what an
        over-the-air transmitter inverts. Counted as a transmission on its link (with fading
        re-drawn per transmission, each slot gets its own)."""
        transmission = self.transmission_index(UPLINK, client)
        fading = self.fading_gain(client, UPLINK, self.now(), transmission)
        return 10.0 ** (-self.large_scale_loss_db(client) / 10.0) * fading

    def replica(self) -> Radio:
        """The same channel with fresh mobility state, to replay it from time 0 (its clock
        stays at 0: ask it at explicit times)."""
        tx_power_dbm = 10.0 * np.log10(self.tx_power_w * 1000.0)
        return Radio(
            self.settings, lambda: 0.0, self.start_positions_m, tx_power_dbm,
            self._shadowing_db, self.key, cache_channel=self.cache_channel,
        )  # fmt: skip

    # --- small scale and time ---

    def next_change_s(self, client: int, time_s: float) -> float:
        """When the client's channel next changes (new fading or shadowing block, or a
        position update); inf if it never does."""
        return min(
            ((block_of(time_s, period_s) + 1) * period_s for period_s in self._periods_s),
            default=math.inf,
        )

    def fading_gain(self, entity: int, direction: int, time_s: float, transmission: int) -> float:
        """|h|² over the band (frequency selective: the mean over its PRBs)."""
        return self.fading_state(entity, direction, time_s, transmission)[0]

    def fading_state(
        self, entity: int, direction: int, time_s: float, transmission: int
    ) -> tuple[float, np.ndarray | None]:
        """The link's fading now: |h|² over the band, and its gain on each subband (None when
        the fading is flat across the band)."""
        selective = self.settings.selective
        if selective is None:
            block = self.fading_block(time_s) if self.settings.fading.coherence_s else transmission
            return self.settings.fading.power_gain(self.key, FADING, direction, entity, block), None
        return self._subband_state(entity, direction, self.fading_block(time_s))

    def _subband_state(self, entity: int, direction: int, block: int) -> tuple[float, np.ndarray]:
        grid = self._grids[direction]
        gains = self.settings.selective.gains(self.key, grid, FADING, direction, entity, block)
        return float(gains @ grid.prb_weights), gains

    def earlier_subband_gains(
        self, entity: int, direction: int, block: int, age: int
    ) -> np.ndarray:
        """The link's subband gains ``age`` blocks before ``block``: a stale estimate's."""
        return self._subband_state(entity, direction, block - age)[1]

    def fading_block(self, time_s: float) -> int:
        """The fading block holding time_s (0 when fading is re-drawn per transmission)."""
        coherence_s = self.settings.fading.coherence_s
        return block_of(time_s, coherence_s) if coherence_s else 0

    def transmission_index(self, direction: int, entity: int, other: int = -1) -> int:
        """Count this transmission on a link; the index picks its fading when fading is
        re-drawn per transmission."""
        link = (direction, entity, other)
        index = self._transmissions.get(link, 0)
        self._transmissions[link] = index + 1
        return index

    def earlier_fading_gain(
        self, entity: int, direction: int, block: int, transmission: int, age: int
    ) -> float | None:
        """The link's fading ``age`` blocks before ``block`` (or transmissions before, with
        fading re-drawn per transmission): a stale channel estimate's; None without fading."""
        fading = self.settings.fading
        if fading.model == "none":
            return None
        counter = block - age if fading.coherence_s else transmission - age
        return fading.power_gain(self.key, FADING, direction, entity, counter)

    def rate_bps(self, bandwidth_hz: float, snr: float, direction: int = UPLINK) -> float:
        """The rate the link model gets on bandwidth_hz at this SNR (over that band)."""
        return self.link.rate_bps(bandwidth_hz, snr, direction)

    # --- links: what a medium asks about a transfer in progress ---

    def uplink(self, client: int, site: int = 0) -> RadioLink:
        """An upload from the client to the site (several cells: its serving site when the
        upload started; it stays there until it ends)."""
        power_w = float(self.tx_power_w[client])
        return self.link.transmission(self, UPLINK, [client], power_w, site=site)

    def downlink(self, clients: Sequence[int]) -> RadioLink:
        return self.link.transmission(self, DOWNLINK, clients, self._base_station_w)

    def d2d(self, sender: int, receiver: int) -> RadioLink:
        power_w = float(self.tx_power_w[sender])
        return self.link.transmission(self, D2D, [receiver], power_w, peer=sender)

    def note_attempt(self, link: RadioLink, bits: float, air_s: float, attempt: int) -> None:
        """Record one transmission on the link (for radio.csv): bits on the air, air time,
        who lost it, whether it was a retransmission."""
        if link.direction == D2D:
            return
        for client in link.receivers:
            stats = self.stats[client]
            if link.direction == UPLINK:
                stats.uplink_bits += bits
                stats.uplink_air_s += air_s
            else:
                stats.downlink_bits += bits
                stats.downlink_air_s += air_s
            stats.outages += client in link.missed
            stats.retransmissions += attempt > 0
            if link.direction == UPLINK:
                stats.uplink_joules += link.radiated_j

    def note_given_up(self, link: RadioLink) -> None:
        for client in link.missed if link.direction != D2D else [link.peer]:
            self.stats[client].given_up += 1

    def noise_w(self, direction: int, bandwidth_hz: float) -> float:
        """F·N0·B at the receiver of a direction: the base station's on the uplink (UPLINK), the
        device's on the downlink and D2D."""
        return self._noise_w_per_hz[direction] * bandwidth_hz
