"""The radio: where a link's rate comes from when the scenario has ``system.radio``.

A client at distance d from the base station (at the origin) sees a channel power gain
g = 10^(-(PL(d) + X)/10) · |h|², with PL a path-loss law, X log-normal shadowing (dB) and
|h|² small-scale fading (none, Rayleigh, Rician K), block fading re-drawn every
``coherence_s`` (or at every transmission). On a band share of b Hz, with transmit power p
and noise density N0 (times the receiver's noise figure F), the SNR is p·g / (F·N0·b) and the
rate is Shannon's b·log2(1 + SNR/Γ), with Γ an SNR gap and the spectral efficiency capped at
the highest modulation and coding scheme. The noise scales with the share, so a rate is not
linear in its share of the band.

Every random draw after the start is *counter based*: the fading of client c's uplink in
block k is a hash of (seed, c, uplink, k), not the next number of a stream. Draws are made
lazily, only for links that carry a transfer, so idle clients cost no events; and a channel
is the same function of time in every run of a scenario (every algorithm meets the same fades,
whatever it transmits), which makes comparisons of algorithms paired.

A transmission is in *outage* when, in any block it spans, a receiver's SNR is below the
threshold (the lowest modulation and coding scheme cannot be decoded; the transmitter keeps
sending at that scheme's rate, not knowing), or, with Chen et al.'s packet-error model, with
probability q = 1 − exp(−m / SNR) per block. The receiver cannot decode it: its bytes are
wasted, and the ``Network`` retries it. Geometry, mobility and the draws at the start
(positions, shadowing, transmit powers) are seeded by the World's streams.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

SPEED_OF_LIGHT_MPS = 299_792_458.0
UPLINK, DOWNLINK, D2D = 0, 1, 2  # direction codes in the hashed draws
_MASK64 = (1 << 64) - 1
_SHADOWING, _FADING, _OUTAGE, _WAYPOINT = 1, 2, 3, 4  # purposes in the hashed draws


def db_to_linear(db: float | np.ndarray) -> float | np.ndarray:
    return 10.0 ** (np.asarray(db) / 10.0) if isinstance(db, np.ndarray) else 10.0 ** (db / 10.0)


def dbm_to_watts(dbm: float | np.ndarray) -> float | np.ndarray:
    return db_to_linear(dbm) / 1000.0


# --- path loss ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PathLoss:
    """Path loss in dB at a distance, by one of three published laws.

    - ``macro``: 128.1 + 37.6·log10(d_km), the 3GPP TR 36.814 urban macro-cell law (2 GHz)
      used by Chen et al. (TWC 2021) and Yang et al. (TWC 2021);
    - ``log_distance``: PL(d0) + 10·α·log10(d/d0) (Rappaport, Wireless Communications, 4.9);
    - ``free_space``: Friis, 20·log10(4π·d·f/c).
    """

    model: str = "macro"
    reference_loss_db: float = 40.0  # log_distance: PL(d0)
    reference_distance_m: float = 1.0  # log_distance: d0
    exponent: float = 3.0  # log_distance: α
    carrier_hz: float = 2e9  # free_space: f

    def db(self, distance_m: float | np.ndarray) -> float | np.ndarray:
        d = np.asarray(distance_m, dtype=float)
        if self.model == "macro":
            loss = 128.1 + 37.6 * np.log10(d / 1000.0)
        elif self.model == "log_distance":
            ratio = d / self.reference_distance_m
            loss = self.reference_loss_db + 10.0 * self.exponent * np.log10(ratio)
        elif self.model == "free_space":
            loss = 20.0 * np.log10(4.0 * math.pi * d * self.carrier_hz / SPEED_OF_LIGHT_MPS)
        else:
            raise ValueError(f"unknown path-loss model {self.model!r}")
        return float(loss) if loss.ndim == 0 else loss


# --- counter-based draws -------------------------------------------------------------------------


def _mix(z: int) -> int:
    """SplitMix64's finalizer: a bijection of 64-bit words that scrambles every bit."""
    z = (z + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def hashed_uniform(key: int, *counters: int) -> float:
    """A uniform draw in (0, 1) that is a fixed function of (key, counters)."""
    z = key & _MASK64
    for counter in counters:
        z = _mix(z ^ (counter & _MASK64))
    return ((_mix(z) >> 11) + 0.5) * 2.0**-53


def hashed_normal_pair(key: int, *counters: int) -> tuple[float, float]:
    """Two independent standard normals (Box–Muller on two hashed uniforms)."""
    radius = math.sqrt(-2.0 * math.log(hashed_uniform(key, *counters, 0)))
    angle = 2.0 * math.pi * hashed_uniform(key, *counters, 1)
    return radius * math.cos(angle), radius * math.sin(angle)


@dataclass(frozen=True)
class Fading:
    """Small-scale fading |h|² (mean 1), re-drawn per block of ``coherence_s`` or, when
    that is None, at every transmission."""

    model: str = "none"  # none | rayleigh | rician
    k_factor: float = 0.0  # rician: power of the line of sight over the scattered power
    coherence_s: float | None = None

    def power_gain(self, key: int, *counters: int) -> float:
        if self.model == "none":
            return 1.0
        if self.model == "rayleigh":  # |h|² ~ Exp(1)
            return -math.log(hashed_uniform(key, *counters, 0))
        if self.model == "rician":
            k = self.k_factor
            n1, n2 = hashed_normal_pair(key, *counters)
            scatter = math.sqrt(0.5 / (k + 1.0))
            return (math.sqrt(k / (k + 1.0)) + scatter * n1) ** 2 + (scatter * n2) ** 2
        raise ValueError(f"unknown fading model {self.model!r}")


def block_of(time_s: float, period_s: float) -> int:
    """The block holding time_s, when blocks start at k·period_s, robust to float rounding
    (so that waking at (k+1)·period_s always lands in block k+1)."""
    block = math.floor(time_s / period_s)
    if (block + 1) * period_s <= time_s:
        block += 1
    elif block * period_s > time_s:
        block -= 1
    return block


# --- geometry and mobility -----------------------------------------------------------------------


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
    u_r = hashed_uniform(key, _WAYPOINT, client, leg, 0)
    u_angle = hashed_uniform(key, _WAYPOINT, client, leg, 1)
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


# --- the radio -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outage:
    """When a block is lost: SNR below a threshold, or Chen et al.'s packet-error law."""

    model: str = "threshold"  # threshold | packet_error
    snr_threshold_db: float = 0.0
    waterfall_m: float = 0.023  # packet_error: q = 1 − exp(−m / SNR)
    max_retransmissions: int = 3


@dataclass(frozen=True)
class RadioSettings:
    """The radio's fixed parameters (the per-client draws are given to ``Radio``)."""

    path_loss: PathLoss = PathLoss()
    fading: Fading = Fading()
    shadowing_db: float = 0.0
    shadowing_coherence_s: float | None = None  # None: one draw per client for the run
    noise_density_dbm_per_hz: float = -174.0
    noise_figure_db: float = 0.0
    base_station_power_dbm: float = 30.0
    uplink_bandwidth_hz: float = 20e6
    downlink_bandwidth_hz: float = 20e6
    d2d_bandwidth_hz: float = 10e6
    snr_gap_db: float = 0.0
    max_bits_per_hz: float = math.inf
    min_distance_m: float = 1.0
    cell_radius_m: float = 500.0
    outage: Outage | None = None
    speed_mps: float | None = None  # random waypoint mobility, when set
    update_s: float = 1.0


@dataclass
class LinkStats:
    """One client's radio record for radio.csv."""

    uplink_bits: float = 0.0
    uplink_air_s: float = 0.0
    downlink_bits: float = 0.0
    downlink_air_s: float = 0.0
    outages: int = 0
    retransmissions: int = 0
    given_up: int = 0


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
    ) -> None:
        """positions_m: (clients, 2) around the base station at the origin; tx_power_dbm and
        shadowing_db: per client (the shadowing of the run, or of its first block)."""
        self.settings = settings
        self.now = clock
        self.key = key
        self.start_positions_m = np.asarray(positions_m, dtype=float)
        self.tx_power_w = np.asarray(dbm_to_watts(np.asarray(tx_power_dbm, dtype=float)))
        self._shadowing_db = np.asarray(shadowing_db, dtype=float)
        self._base_station_w = float(dbm_to_watts(settings.base_station_power_dbm))
        self._noise_w_per_hz = float(
            dbm_to_watts(settings.noise_density_dbm_per_hz + settings.noise_figure_db)
        )
        distance_m = np.maximum(
            np.hypot(self.start_positions_m[:, 0], self.start_positions_m[:, 1]),
            settings.min_distance_m,
        )
        self._static_loss_db = np.asarray(settings.path_loss.db(distance_m)) + self._shadowing_db
        outage = settings.outage
        threshold = outage is not None and outage.model == "threshold"
        self._min_snr = 10.0 ** (outage.snr_threshold_db / 10.0) if threshold else 0.0
        self._gap = 10.0 ** (settings.snr_gap_db / 10.0)
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

    @property
    def num_clients(self) -> int:
        return len(self.start_positions_m)

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

    def _shadowing_at(self, client: int, time_s: float) -> float:
        period_s = self.settings.shadowing_coherence_s
        block = block_of(time_s, period_s) if period_s else 0
        if block == 0:
            return float(self._shadowing_db[client])
        normal, _ = hashed_normal_pair(self.key, _SHADOWING, client, block)
        return self.settings.shadowing_db * normal

    def large_scale_loss_db(self, client: int, time_s: float | None = None) -> float:
        """Path loss plus shadowing between the client and the base station, in dB."""
        s = self.settings
        if s.speed_mps is None and not s.shadowing_coherence_s:
            return float(self._static_loss_db[client])
        time_s = self.now() if time_s is None else time_s
        x, y = self.position_m(client, time_s)
        distance_m = max(math.hypot(x, y), s.min_distance_m)
        return float(s.path_loss.db(distance_m)) + self._shadowing_at(client, time_s)

    def pair_loss_db(self, a: int, b: int) -> float:
        """Path loss between two clients (D2D), at their current positions; no shadowing."""
        (xa, ya), (xb, yb) = self.position_m(a), self.position_m(b)
        distance_m = max(math.hypot(xa - xb, ya - yb), self.settings.min_distance_m)
        return float(self.settings.path_loss.db(distance_m))

    def nominal_rate_bps(
        self, downlink: bool, clients: Sequence[int], bandwidth_hz: float
    ) -> float:
        """The rate without fading (path loss and shadowing now) to or from the clients,
        the weakest of them: a model of a transfer's rate, for planning (UCFL's round time)."""
        power_w = (
            [self._base_station_w] if downlink else [float(self.tx_power_w[c]) for c in clients]
        )
        gains = [10.0 ** (-self.large_scale_loss_db(c) / 10.0) for c in clients]
        snr = min(gains) * min(power_w) / self.noise_w(bandwidth_hz)
        return self.rate_bps(bandwidth_hz, snr)

    def mean_snr_db(self, bandwidth_hz: float) -> np.ndarray:
        """Every client's uplink SNR without fading at the start, on bandwidth_hz, in dB."""
        noise_dbm = self.settings.noise_density_dbm_per_hz + self.settings.noise_figure_db
        noise_dbm += 10.0 * math.log10(bandwidth_hz)
        tx_dbm = 10.0 * np.log10(self.tx_power_w * 1000.0)
        return tx_dbm - self._static_loss_db - noise_dbm

    def uplink_snr_db_at(self, client: int, time_s: float, bandwidth_hz: float) -> float:
        """The client's uplink SNR at time_s on bandwidth_hz, fading included (its first
        transmission's fading when fading is drawn per transmission). Times must increase
        from call to call for a mobile client."""
        gain_db = -self.large_scale_loss_db(client, time_s)
        gain_db += 10.0 * math.log10(self.fading_gain(client, UPLINK, time_s, 0))
        power_dbm = 10.0 * math.log10(self.tx_power_w[client] * 1000.0)
        return power_dbm + gain_db - 10.0 * math.log10(self.noise_w(bandwidth_hz) * 1000.0)

    def replica(self) -> Radio:
        """The same channel with fresh mobility state, to replay it from time 0 (its clock
        stays at 0: ask it at explicit times)."""
        tx_power_dbm = 10.0 * np.log10(self.tx_power_w * 1000.0)
        return Radio(
            self.settings, lambda: 0.0, self.start_positions_m, tx_power_dbm,
            self._shadowing_db, self.key,
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
        block = self.fading_block(time_s) if self.settings.fading.coherence_s else transmission
        return self.settings.fading.power_gain(self.key, _FADING, direction, entity, block)

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

    def block_is_lost(self, snr: float, *counters: int) -> bool:
        outage = self.settings.outage
        if outage is None:
            return False
        if outage.model == "threshold":
            return snr < 10.0 ** (outage.snr_threshold_db / 10.0)
        q = 1.0 - math.exp(-outage.waterfall_m / snr) if snr > 0 else 1.0
        return hashed_uniform(self.key, _OUTAGE, *counters) < q

    def rate_bps(self, bandwidth_hz: float, snr: float) -> float:
        """Shannon's b·min(log2(1 + SNR/Γ), the cap): the rate the transmitter picks on
        bandwidth_hz at this SNR (never below the outage threshold's rate: the lowest scheme
        it has)."""
        snr = max(snr, self._min_snr)
        return bandwidth_hz * min(math.log2(1.0 + snr / self._gap), self.settings.max_bits_per_hz)

    # --- links: what a medium asks about a transfer in progress ---

    def uplink(self, client: int) -> RadioLink:
        return RadioLink(self, UPLINK, [client], float(self.tx_power_w[client]))

    def downlink(self, clients: Sequence[int]) -> RadioLink:
        return RadioLink(self, DOWNLINK, list(clients), self._base_station_w)

    def d2d(self, sender: int, receiver: int) -> RadioLink:
        return RadioLink(self, D2D, [receiver], float(self.tx_power_w[sender]), peer=sender)

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

    def note_given_up(self, link: RadioLink) -> None:
        for client in link.missed if link.direction != D2D else [link.peer]:
            self.stats[client].given_up += 1

    def noise_w(self, bandwidth_hz: float) -> float:
        return self._noise_w_per_hz * bandwidth_hz


@dataclass(eq=False)
class RadioLink:
    """One transmission's channel to its receivers: its rate on a band share at the current
    instant, when that changes, and which receivers lost a block of it (outage).

    The channel state (each receiver's p·g/N0, in Hz: its SNR on b Hz is that over b) is
    computed once per block and kept until the next change, so re-splitting the band costs a
    logarithm per receiver, not new draws.
    """

    radio: Radio
    direction: int
    receivers: list[int]
    power_w: float
    peer: int = -1  # d2d: the sender
    missed: set[int] = field(default_factory=set)
    _transmission: dict[int, int] = field(default_factory=dict)
    _gain_hz: dict[int, float] = field(default_factory=dict)
    _block: int = 0
    _valid_until_s: float = -math.inf

    def __post_init__(self) -> None:
        for receiver in self.receivers:
            entity, other = self._entity(receiver)
            self._transmission[receiver] = self.radio.transmission_index(
                self.direction, entity, other
            )

    def _entity(self, receiver: int) -> tuple[int, int]:
        """Who the fading belongs to: the client, or the (ordered) pair of a D2D link."""
        if self.direction == D2D:
            low, high = sorted((receiver, self.peer))
            return low * self.radio.num_clients + high, self.peer
        return receiver, -1

    def _loss_db(self, receiver: int) -> float:
        if self.direction == D2D:
            return self.radio.pair_loss_db(self.peer, receiver)
        return self.radio.large_scale_loss_db(receiver)

    def _state(self) -> dict[int, float]:
        """Each receiver's p·g/N0 (Hz) now, drawn at the first call of each block."""
        radio = self.radio
        now = radio.now()
        if now < self._valid_until_s:
            return self._gain_hz
        noise_w_per_hz = radio.noise_w(1.0)
        for receiver in self.receivers:
            entity, _ = self._entity(receiver)
            fading = radio.fading_gain(entity, self.direction, now, self._transmission[receiver])
            gain = 10.0 ** (-self._loss_db(receiver) / 10.0) * fading
            self._gain_hz[receiver] = self.power_w * gain / noise_w_per_hz
        self._block = radio.fading_block(now)
        clients = list(self.receivers) + ([self.peer] if self.direction == D2D else [])
        self._valid_until_s = min(radio.next_change_s(c, now) for c in clients)
        return self._gain_hz

    def rate_bps(self, bandwidth_hz: float) -> float:
        """The rate on this band share now, for the weakest receiver that can decode (every
        member of a broadcast). Called when a block or the share begins: it also notes which
        receivers lose this block (outage)."""
        radio = self.radio
        state = self._state()
        if radio.settings.outage is None:  # nobody loses a block: the weakest sets the rate
            return radio.rate_bps(bandwidth_hz, min(state.values()) / bandwidth_hz)
        snrs = {r: gain_hz / bandwidth_hz for r, gain_hz in state.items()}
        for receiver, snr in snrs.items():
            if receiver in self.missed:
                continue
            entity, _ = self._entity(receiver)
            counters = (self.direction, entity, self._transmission[receiver], self._block)
            if radio.block_is_lost(snr, *counters):
                self.missed.add(receiver)
        decodable = [snr for r, snr in snrs.items() if r not in self.missed]
        return radio.rate_bps(bandwidth_hz, min(decodable or snrs.values()))

    def next_change_s(self) -> float:
        """When the channel next changes (as of the last ``rate_bps``, at this instant)."""
        return self._valid_until_s
