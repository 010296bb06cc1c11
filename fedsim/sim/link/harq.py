"""``harq`` (NR-like, the default of a lossy radio): transport blocks with link adaptation
and HARQ (``adaptation`` says how a period's MCS and failures are drawn). A receiver the
lowest MCS does not reach waits; one that has waited ``link_failure_s`` in a row has lost its
radio link (NR's T310)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from fedsim.sim.draws import HARQ, hashed_key, hashed_uniform
from fedsim.sim.link.adaptation import FlatSnr, Harq, HarqSettings, OuterLoop, Period, SubbandSnr
from fedsim.sim.link.base import LinkModel
from fedsim.sim.medium import TransmissionLost
from fedsim.sim.records import HarqTally
from fedsim.sim.scheduler import num_prbs
from fedsim.sim.transmission import D2D, DOWNLINK, UPLINK, Channel, Outcome, RadioLink


@dataclass(frozen=True)
class HarqLinkSettings:
    harq: HarqSettings = HarqSettings()

    def build(self) -> HarqLink:
        return HarqLink(self.harq)


class HarqLink(LinkModel):
    """Link adaptation and HARQ per direction (D2D, a sidelink, uses the uplink's curves),
    with an outer loop (``OuterLoop``) unless ``olla_step_db`` is None; the outer loops of
    every link persist across its transfers."""

    name = "harq"

    def __init__(self, settings: HarqSettings) -> None:
        self.settings = settings
        self.prb_hz = settings.prb_hz
        adaptation = OuterLoop if settings.olla_step_db else Harq
        self.adaptation = {
            UPLINK: adaptation(settings, "uplink"),
            DOWNLINK: adaptation(settings, "downlink"),
            D2D: adaptation(settings, "uplink"),
        }

    def usable_hz(self, bandwidth_hz: float) -> float:
        """NR's transmission bandwidth: the carrier's PRBs (TS 38.101-1 Table 5.3.2-1: 24 on
        10 MHz at 30 kHz, not 27.8; the guard bands take the rest)."""
        spacing_khz = self.settings.subcarrier_spacing_khz
        return num_prbs(bandwidth_hz, int(spacing_khz)) * self.settings.prb_hz

    def rate_bps(self, bandwidth_hz: float, snr: float, direction: int) -> float:
        """The rate it delivers on average: the MCS it would pick there times 1 − its BLER
        (0 below the lowest MCS), from the SNR over one PRB (the whole power on it)."""
        harq = self.adaptation[direction]
        snr *= bandwidth_hz / self.settings.prb_hz
        return harq.expected_rate_bps(bandwidth_hz, 10.0 * math.log10(snr) if snr > 0 else -300)

    def transmission(
        self, radio: Channel, direction: int, receivers: Sequence[int], power_w: float,
        *, peer: int = -1, site: int = 0,
    ) -> RadioLink:  # fmt: skip
        selective = radio.subband_grid(direction) is not None
        kind = SubbandHarqTransmission if selective else HarqTransmission
        link = kind(radio, direction, list(receivers), power_w, peer, site)
        link.harq = self.adaptation[direction]
        return link


class HarqTransmission(RadioLink):
    """A stream of transport blocks in periods of one channel and band share
    (``adaptation.Period``)."""

    harq: Harq

    def __post_init__(self) -> None:
        super().__post_init__()
        self.tally = HarqTally()  # the blocks it sent
        self._period: Period | None = None  # the period under way
        self._periods = 0
        self._period_entity = 0  # whose outer loop the period's blocks update
        self._waiting_since: dict[int, float] = {}  # receivers below the lowest MCS
        self._draw_keys: dict[int, int] = {}  # per receiver

    def speed_bps(self, bandwidth_hz: float, remaining_bits: float) -> float:
        """The delivered rate of the period that begins now (which also settles the period
        before): the MCS for the weakest receiver the lowest MCS reaches (a multicast serves
        its weakest member); a receiver it does not reach waits, and one that has waited
        ``link_failure_s`` in a row is dropped from the transmission, which fails when nobody
        is left. A re-split of the band that keeps the share's allocation (a share under one
        PRB stays on one PRB) only changes its slots: the period goes on at the new rate."""
        harq = self.harq
        now = self.radio.now()
        self._set_duty(harq.duty(bandwidth_hz))
        period = self._period
        if (
            period is not None
            and period.shape is not None
            and now < min(self._valid_until_s, period.review_s)
            and not self._waiting_since
            and harq.allocation(bandwidth_hz) == period.allocation
            and self._placed_as_planned()
        ):  # a re-split that keeps its allocation: the same blocks, other slots
            period.rescale(now, harq.blocks_per_s(bandwidth_hz))
            return period.speed_bps
        state = self._powered(bandwidth_hz)
        self.finish()
        weakest, weakest_gain, channels = -1, math.inf, {}
        for receiver in self.receivers:
            if receiver in self.dropped:
                continue
            gain_hz = state[receiver]
            channel = self._channel(receiver, gain_hz, bandwidth_hz)
            if harq.reaches(channel, bandwidth_hz):
                self._waiting_since.pop(receiver, None)
                channels[receiver] = channel
                if gain_hz < weakest_gain:
                    weakest, weakest_gain = receiver, gain_hz
            else:  # the failure is due when next_change_s says (the same sum, to the bit)
                since = self._waiting_since.setdefault(receiver, now)
                if now >= since + harq.settings.link_failure_s:
                    self.dropped.add(receiver)
        if len(self.dropped) == len(self.receivers):
            self.failure = TransmissionLost("radio link failure", known=True)
            return 0.0
        if weakest < 0:
            self._period = None
            return 0.0
        entity, _ = self._entity(weakest)
        draws = self._draw_keys.get(weakest)
        if draws is None:
            transmission = self._transmission[weakest]
            draws = hashed_key(self.radio.key, HARQ, self.direction, entity, transmission)
            self._draw_keys[weakest] = draws
        u = hashed_uniform(draws, self._block, self._periods)
        self._periods += 1
        self._period_entity = entity
        self._period = harq.plan(
            now, entity, self._served(channels, weakest), bandwidth_hz, remaining_bits,
            self._valid_until_s - now, u,
        )  # fmt: skip
        return self._period.speed_bps

    def _placed_as_planned(self) -> bool:
        """Whether the share sits where the period was planned on (flat: anywhere will do)."""
        return True

    def _channel(self, receiver: int, gain_hz: float, bandwidth_hz: float) -> FlatSnr:
        """The receiver's channel as the period sees it: its SNR over one PRB (the whole
        power on it) and the transmitter's estimate of it."""
        snr_db = 10.0 * math.log10(gain_hz / self.harq.settings.prb_hz)
        return FlatSnr(snr_db, self._estimate_db(receiver, snr_db))

    def _served(self, channels: dict, weakest: int) -> FlatSnr:
        """The channel the period's MCS serves: its weakest receiver's (a multicast)."""
        return channels[weakest]

    def _estimate_db(self, receiver: int, snr_db: float) -> float:
        """The SNR the transmitter believes in: the block's own, or that of the block (or the
        transmission, with fading per transmission) ``csi_age_blocks`` before, path loss and
        shadowing as now."""
        age = self.harq.settings.csi_age_blocks
        if not age:
            return snr_db
        entity, _ = self._entity(receiver)
        counter = self._transmission[receiver]
        fading = self.radio.earlier_fading_gain(entity, self.direction, self._block, counter, age)
        if fading is None:  # no fading: the estimate is exact
            return snr_db
        return snr_db + 10.0 * math.log10(fading / self._fading[receiver])

    def finish(self) -> None:
        """Settle the period under way: its blocks so far, and the outer loop's update."""
        if self._period is not None:
            self.tally.add(self.harq.settle(self._period, self.radio.now(), self._period_entity))
            self._period = None

    @property
    def sending(self) -> bool:
        """Whether the transmitter sends now (not waiting below the lowest MCS)."""
        return self._period is not None and self._period.shape is not None

    def next_change_s(self) -> float:
        """When the channel next changes, a waiting receiver's link fails, or a period whose
        blocks all fail picks its MCS again (as of the last ``speed_bps``, at this
        instant)."""
        change_s = self._valid_until_s
        if self._period is not None:
            change_s = min(change_s, self._period.review_s)
        if not self._waiting_since:
            return change_s
        failing_s = self.harq.settings.link_failure_s
        return min(change_s, min(self._waiting_since.values()) + failing_s)

    def note_blocks(self) -> None:
        if self.direction == D2D:
            return
        for client in self.receivers:
            self.radio.stats[client].blocks.add(self.tally)

    @property
    def resent_bytes(self) -> int:
        return round(self.tally.failed_bits / 8)

    def outcome(self, attempt: int, is_online: Callable[[int], bool]) -> Outcome:
        """Delivered to every receiver still reachable (HARQ retried what failed on the way);
        the sender's wasted share is that of its failed blocks."""
        self.note_blocks()
        tally = self.tally
        got = [r for r in self.receivers if is_online(r) and r not in self.dropped]
        logged = [] if self.direction == UPLINK else got
        wasted = tally.failed / tally.sent if tally.sent else 0.0
        return Outcome(got, None, wasted, logged, resent_bytes=self.resent_bytes)


class SubbandHarqTransmission(HarqTransmission):
    """A stream of transport blocks over a frequency-selective channel: a block's effective
    SNR is the EESM over the PRBs it holds (those a scheduler placed it on, or its share
    spread over the band), MCS by MCS (``adaptation.SubbandSnr``)."""

    _planned_on: np.ndarray | None = None  # the PRBs per subband its period was planned on

    def __post_init__(self) -> None:
        super().__post_init__()
        # per receiver: (its subband gains, (power scale, placement), the channel on them)
        self._channels: dict[int, tuple[np.ndarray, tuple, SubbandSnr]] = {}
        # the scheduler's view per reference PRB count, on the gains it was worked out on
        self._rates_for: np.ndarray | None = None
        self._rates_on: dict[float, np.ndarray] = {}

    def _placed_as_planned(self) -> bool:
        placed, planned = self.allocation_prbs, self._planned_on
        if placed is None or planned is None:
            return placed is planned
        return np.array_equal(placed, planned)

    def _channel(self, receiver: int, gain_hz: float, bandwidth_hz: float) -> SubbandSnr:
        """The receiver's subbands as the period sees them: kept (with the effective SNRs
        worked out on them) while the channel, the power and the placement stay, so a
        transmitter waiting below the lowest MCS costs one EESM per channel, not per re-split."""
        self._planned_on = weights = self.allocation_prbs
        gains = self._subband_gain_hz[receiver]
        scale = self._power_scale(bandwidth_hz, sends=False)
        placed = None if weights is None else weights.tobytes()
        kept = self._channels.get(receiver)
        if kept is not None and kept[0] is gains and kept[1] == (scale, placed):
            return kept[2]
        snr = gains * (scale / self.harq.settings.prb_hz)
        if weights is None:
            weights = self.radio.subband_grid(self.direction).prbs_array
        channel = SubbandSnr((snr,), (self._subband_estimate(receiver, snr),), weights)
        self._channels[receiver] = (gains, (scale, placed), channel)
        return channel

    def _subband_snr(self, receiver: int, bandwidth_hz: float) -> np.ndarray:
        """The receiver's SNR on each subband over one PRB, with the power sent on
        bandwidth_hz all on that PRB."""
        scale = self._power_scale(bandwidth_hz, sends=False)
        return self._subband_gain_hz[receiver] * (scale / self.harq.settings.prb_hz)

    def _subband_estimate(self, receiver: int, snr: np.ndarray) -> np.ndarray:
        """What the transmitter believes of it: the subbands' gains ``csi_age_blocks`` blocks
        ago (correlated with today's as the Doppler says), path loss and shadowing as now."""
        age = self.harq.settings.csi_age_blocks
        if not age:
            return snr
        entity, _ = self._entity(receiver)
        earlier = self.radio.earlier_subband_gains(entity, self.direction, self._block, age)
        return snr * (earlier / self._subband_fading[receiver])

    def _served(self, channels: dict, weakest: int) -> SubbandSnr:
        """Every receiver the lowest MCS reaches: each MCS's effective SNR is the weakest's."""
        served = list(channels.values())
        if len(served) == 1:
            return served[0]
        return SubbandSnr(
            tuple(c.snr[0] for c in served), tuple(c.estimate[0] for c in served),
            served[0].weights,
        )  # fmt: skip

    def subband_rates_bps(self, reference_prbs: float) -> np.ndarray:
        """The rate it would get on each subband alone, its power spread over
        ``reference_prbs`` PRBs, at the CSI it has (``csi_age_blocks`` old): a
        frequency-domain scheduler's metric (uplink: one receiver), kept until the channel
        changes (a scheduler asks at every start, end and period)."""
        [receiver] = self.receivers
        radio = self.radio
        if (
            radio.now() < self._valid_until_s
            and self._epoch == radio.interference_epoch
            and self._rates_for is self._subband_gain_hz[receiver]
        ):  # the channel it was worked out on holds: no need to ask the radio
            rates = self._rates_on.get(reference_prbs)
            if rates is not None:
                return rates
        self._state()
        gains = self._subband_gain_hz[receiver]
        if self._rates_for is not gains:
            self._rates_for, self._rates_on = gains, {}
        rates = self._rates_on.get(reference_prbs)
        if rates is None:
            snr = self._subband_snr(receiver, reference_prbs * self.harq.settings.prb_hz)
            per_prb = self._subband_estimate(receiver, snr) / reference_prbs
            grid = self.radio.subband_grid(self.direction)
            rates = self.harq.subband_rates_bps(per_prb, grid.prbs_array)
            if self.radio.cache_channel:
                self._rates_on[reference_prbs] = rates
        return rates
