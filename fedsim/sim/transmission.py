"""One transmission's channel: what a band asks of a transfer in progress.

A ``RadioLink`` is the channel of one transmission to its receivers over the radio
(``fedsim.sim.radio``): each receiver's p·g/(N0 + I) per Hz, computed once per channel block
and kept until the next change, so re-splitting the band costs a logarithm per receiver, not
new draws. What the transmitter does with that channel is the link model's (``fedsim.sim.link``):
each model subclasses ``RadioLink`` and says how fast its bits get through (``speed_bps``),
when that changes by itself, and what an attempt's end means (``outcome``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from fedsim.sim.medium import TransmissionLost
from fedsim.sim.records import LinkStats
from fedsim.sim.selective import SubbandGrid

UPLINK, DOWNLINK, D2D = 0, 1, 2  # direction codes in the hashed draws


class Channel(Protocol):
    """What a transmission asks of the radio (``radio.Radio`` is the one): the channel's
    state, its draws' key, and the clients' records."""

    now: Callable[[], float]
    key: int
    cache_channel: bool
    interference_epoch: int
    stats: Sequence[LinkStats]

    @property
    def num_clients(self) -> int: ...
    @property
    def power_controlled(self) -> bool: ...
    @property
    def transmitting(self) -> bool: ...
    def transmission_index(self, direction: int, entity: int, other: int = -1) -> int: ...
    def pair_loss_db(self, a: int, b: int) -> float: ...
    def large_scale_loss_db(
        self, client: int, time_s: float | None = None, site: int | None = None
    ) -> float: ...
    def noise_w(self, direction: int, bandwidth_hz: float) -> float: ...
    def interference_w_per_hz(self, site: int) -> float: ...
    def fading_gain(
        self, entity: int, direction: int, time_s: float, transmission: int
    ) -> float: ...
    def fading_state(
        self, entity: int, direction: int, time_s: float, transmission: int
    ) -> tuple[float, np.ndarray | None]: ...
    def subband_grid(self, direction: int) -> SubbandGrid | None: ...
    def earlier_subband_gains(
        self, entity: int, direction: int, block: int, age: int
    ) -> np.ndarray: ...
    def fading_block(self, time_s: float) -> int: ...
    def earlier_fading_gain(
        self, entity: int, direction: int, block: int, transmission: int, age: int
    ) -> float | None: ...
    def next_change_s(self, client: int, time_s: float) -> float: ...
    def uplink_power_w(self, client: int, bandwidth_hz: float) -> float: ...
    def uplink_powers_w(self, client: int) -> np.ndarray: ...
    @property
    def subband_placement(self) -> str: ...
    def rate_bps(self, bandwidth_hz: float, snr: float, direction: int = UPLINK) -> float: ...
    def set_transmitting(self, client: int, site: int, power_w: float | None) -> None: ...
    def note_given_up(self, link: RadioLink) -> None: ...


@dataclass(frozen=True)
class Outcome:
    """What became of one attempt of a transmission: the receivers that decoded it, those of
    the retry (the base station: []) or None when there is none, the share of the sender's
    joules wasted, and what the event log says: ``lost_reason`` for an attempt lost whole
    (else it ended, with ``resent_bytes`` of failed transport blocks); ``lost``: the
    transfer fails with it."""

    got: list[int]
    retry: list[int] | None = None
    wasted: float = 0.0
    logged: list[int] = field(default_factory=list)  # the receivers the log names
    lost_reason: str | None = None
    resent_bytes: int = 0
    lost: TransmissionLost | None = None


@dataclass(eq=False)
class RadioLink:
    """One transmission's channel to its receivers: its state on a band share at the current
    instant, when that changes, and the energy its transmitter radiates. A link model's
    subclass adds what the transmitter does with it."""

    radio: Channel
    direction: int
    receivers: list[int]
    power_w: float  # the transmitter's maximum (without power control: what it sends at)
    peer: int = -1  # d2d: the sender
    site: int = 0  # uplink: the site it is received at (several cells)
    tx_power_w: float = 0.0  # uplink: what it transmits at now, when it sends (power control)
    duty: float = 1.0  # the share of the time it sends (a share under one PRB: some slots)
    radiated_j: float = 0.0  # uplink: energy radiated so far
    _radiating_since_s: float = math.inf
    _epoch: int = -1  # the radio's interference epoch its state was computed in
    _state_count: int = 0  # how many times its state was computed (what was worked out on it)
    missed: set[int] = field(default_factory=set)  # receivers that lost this attempt (outage)
    dropped: set[int] = field(default_factory=set)  # receivers whose radio link failed
    failure: TransmissionLost | None = None  # every receiver's link failed: the flow fails
    _transmission: dict[int, int] = field(default_factory=dict)
    _gain_hz: dict[int, float] = field(default_factory=dict)
    _block: int = 0
    _valid_until_s: float = -math.inf
    _fading: dict[int, float] = field(default_factory=dict)
    # frequency-selective fading: each receiver's p·g/(N0 + I) per Hz on each subband
    _subband_fading: dict[int, np.ndarray] = field(default_factory=dict)
    _subband_gain_hz: dict[int, np.ndarray] = field(default_factory=dict)
    # the PRBs a scheduler placed it on, per subband (None: its share spread over the band)
    allocation_prbs: np.ndarray | None = None
    # The achievable rate per band share (Hz) while the state holds: a scheduler asks for it
    # at every candidate PRB count of a period.
    _achievable_bps_on: dict[float, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.tx_power_w = self.power_w
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
        if self.direction == UPLINK:  # to the site it started at (several cells)
            return self.radio.large_scale_loss_db(receiver, site=self.site)
        return self.radio.large_scale_loss_db(receiver)

    def _state(self) -> dict[int, float]:
        """Each receiver's p·g/(N0 + I) (Hz) now, drawn at the first call of each block (and
        again when other cells' uploads change the interference I)."""
        radio = self.radio
        now = radio.now()
        if now < self._valid_until_s and self._epoch == radio.interference_epoch:
            return self._gain_hz
        self._epoch = radio.interference_epoch
        self._state_count += 1
        self._achievable_bps_on.clear()
        noise_w_per_hz = radio.noise_w(self.direction, 1.0)  # F·N0 at this receiver
        if self.direction == UPLINK and radio.transmitting:
            noise_w_per_hz += radio.interference_w_per_hz(self.site)
        for receiver in self.receivers:
            entity, _ = self._entity(receiver)
            transmission = self._transmission[receiver]
            fading, subbands = radio.fading_state(entity, self.direction, now, transmission)
            self._fading[receiver] = fading
            large_scale = 10.0 ** (-self._loss_db(receiver) / 10.0)
            gain = large_scale * fading
            self._gain_hz[receiver] = self.power_w * gain / noise_w_per_hz
            if subbands is not None:
                self._subband_fading[receiver] = subbands
                self._subband_gain_hz[receiver] = (
                    self.power_w * large_scale / noise_w_per_hz * subbands
                )
        self._block = radio.fading_block(now)
        clients = list(self.receivers) + ([self.peer] if self.direction == D2D else [])
        self._valid_until_s = min(radio.next_change_s(c, now) for c in clients)
        return self._gain_hz

    def _powered(self, bandwidth_hz: float, *, sends: bool = True) -> dict[int, float]:
        """The state at the power sent on bandwidth_hz (power control scales it down);
        ``sends``: the transmitter sends at that power from now (else only a what-if)."""
        state = self._state()
        if self.direction != UPLINK or not self.radio.power_controlled:
            return state
        scale = self._power_scale(bandwidth_hz, sends=sends)
        return {receiver: gain_hz * scale for receiver, gain_hz in state.items()}

    def _power_scale(self, bandwidth_hz: float, *, sends: bool = True) -> float:
        """What power control leaves of the maximum power on bandwidth_hz of the uplink (1
        without it); ``sends``: the transmitter sends at that power from now."""
        if self.direction != UPLINK or not self.radio.power_controlled:
            return 1.0
        [client] = self.receivers
        power_w = self.radio.uplink_power_w(client, bandwidth_hz)
        if sends:
            self._set_power(power_w)
        return power_w / self.power_w

    def achievable_bps(self, bandwidth_hz: float) -> float:
        """The rate the weakest receiver would get on bandwidth_hz now (a scheduler's metric):
        the link model's rate there (with harq, the delivered rate of the MCS it would pick)."""
        self._state()  # a new channel state forgets the rates of the last one
        rate_bps = self._achievable_bps_on.get(bandwidth_hz)
        if rate_bps is None:
            snr = min(self._powered(bandwidth_hz, sends=False).values()) / bandwidth_hz
            rate_bps = self.radio.rate_bps(bandwidth_hz, snr, self.direction)
            if self.radio.cache_channel:
                self._achievable_bps_on[bandwidth_hz] = rate_bps
        return rate_bps

    def usable_hz(self, bandwidth_hz: float) -> float:
        """The most of bandwidth_hz its rate grows on (a share beyond it gains nothing): all
        of it, unless the link model fills a share on fewer PRBs."""
        return bandwidth_hz

    def _bank_radiated(self) -> None:
        now = self.radio.now()
        if self._radiating_since_s < now:
            self.radiated_j += self.radiated_w * (now - self._radiating_since_s)
            self._radiating_since_s = now

    def radiating(self, on: bool) -> None:
        """The uplink transmitter is on the air (at radiated_w) from now, or stops: its
        radiated energy, and the interference it causes in other cells."""
        if self.direction != UPLINK:
            return
        now = self.radio.now()
        self._bank_radiated()
        self._radiating_since_s = now if on else math.inf
        if not on:  # it lost its share of the band, or ended
            self.finish()
        [client] = self.receivers
        self.radio.set_transmitting(client, self.site, self.radiated_w if on else None)

    @property
    def radiated_w(self) -> float:
        """The power it radiates on average while it has a share of the band."""
        return self.tx_power_w * self.duty

    def _set_power(self, power_w: float) -> None:
        """It transmits at power_w from now on (the energy so far banked at the previous)."""
        if power_w != self.tx_power_w:
            self._bank_radiated()
            self.tx_power_w = power_w

    def _set_duty(self, duty: float) -> None:
        """It sends in this share of the time from now on (the energy so far banked)."""
        if duty != self.duty:
            self._bank_radiated()
            self.duty = duty

    def transmission_of(self, receiver: int) -> int:
        return self._transmission[receiver]

    # --- what the link model adds ---

    def speed_bps(self, bandwidth_hz: float, remaining_bits: float) -> float:
        """How fast the transfer's information bits get through on this share from now.
        Called when a block or the share begins."""
        raise NotImplementedError

    @property
    def sending(self) -> bool:
        """Whether the transmitter sends now (a link model may make it wait)."""
        return True

    def next_change_s(self) -> float:
        """When the speed next changes by itself (as of the last ``speed_bps``, at this
        instant): the channel's next change."""
        return self._valid_until_s

    def finish(self) -> None:
        """The transmission ended, was cut, or lost its share of the band now."""

    def note_blocks(self) -> None:
        """Add what the link layer sent (its transport blocks) to its clients' records."""

    @property
    def resent_bytes(self) -> int:
        """Bytes sent again so far (failed transport blocks): wasted air."""
        return 0

    def outcome(self, attempt: int, is_online: Callable[[int], bool]) -> Outcome:
        """What became of the attempt that just ended (the ``attempt``-th retry)."""
        raise NotImplementedError
