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

import numpy as np

from fedsim.sim.draws import FADING, block_of
from fedsim.sim.large_scale import LargeScale
from fedsim.sim.link import LinkModel
from fedsim.sim.radio_settings import CellSettings, PowerControl, RadioSettings
from fedsim.sim.scheduler import num_prbs, open_loop_power_dbm, prb_hz
from fedsim.sim.selective import SubbandGrid
from fedsim.sim.transmission import D2D, DOWNLINK, UPLINK, RadioLink

__all__ = [
    "D2D",
    "DOWNLINK",
    "UPLINK",
    "CellSettings",
    "PowerControl",
    "Radio",
    "RadioLink",
    "RadioSettings",
]


def db_to_linear(db: float | np.ndarray) -> float | np.ndarray:
    return 10.0 ** (np.asarray(db) / 10.0) if isinstance(db, np.ndarray) else 10.0 ** (db / 10.0)


def dbm_to_watts(dbm: float | np.ndarray) -> float | np.ndarray:
    return db_to_linear(dbm) / 1000.0


class Radio(LargeScale):
    """Channel gains of every client over time, and the links transfers ride on: the channel
    law (fading, noise, interference, power control) over each client's large-scale state
    (``LargeScale``: position, path loss, shadowing, serving site)."""

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
        super().__init__(
            settings, clock, positions_m, shadowing_db, key, cache_channel=cache_channel
        )
        self.tx_power_w = np.asarray(dbm_to_watts(np.asarray(tx_power_dbm, dtype=float)))
        self._base_station_w = float(dbm_to_watts(settings.base_station_power_dbm))
        bs_w_per_hz, ue_w_per_hz = (
            float(dbm_to_watts(settings.noise_density_dbm_per_hz + figure_db))
            for figure_db in (settings.bs_noise_figure_db, settings.ue_noise_figure_db)
        )
        # F·N0 at the receiver of each direction (indexed by UPLINK, DOWNLINK, D2D)
        self._noise_w_per_hz = {UPLINK: bs_w_per_hz, DOWNLINK: ue_w_per_hz, D2D: ue_w_per_hz}
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
        self._transmissions: dict[tuple[int, int, int], int] = {}  # per-transmission fading
        self.link: LinkModel = settings.link.build()
        self._uplink_usable_hz = self.link.usable_hz(settings.uplink_bandwidth_hz)
        self._grids = self._subband_grids()

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

    def uplink_powers_w(self, client: int) -> np.ndarray:
        """What the client transmits at on m = 1..N PRBs of the uplink (N its band's), with
        power control: P0 + 10 log10(2^μ m) + α PL capped at its maximum (TS 38.213 §7.1.1
        with M_RB the PRBs it sends on), kept until it moves or its shadowing block ends."""
        control = self.settings.power_control
        state = self._large_scale_state(client, self.now())
        if state.uplink_powers_w is None:
            spacing_khz = control.subcarrier_spacing_khz
            counts = np.arange(1, num_prbs(self.settings.uplink_bandwidth_hz, spacing_khz) + 1)
            power_dbm = open_loop_power_dbm(
                control.p0_dbm, control.alpha, self.large_scale_loss_db(client), counts,
                10.0 * math.log10(self.tx_power_w[client] * 1000.0), spacing_khz,
            )  # fmt: skip
            state.uplink_powers_w = np.asarray(dbm_to_watts(power_dbm))
        return state.uplink_powers_w

    @property
    def subband_placement(self) -> str:
        """Where a share no scheduler placed sits on a frequency-selective band
        (``fedsim.sim.link.placement``)."""
        return self.settings.placement

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
