"""``harq`` (NR-like, the default of a lossy radio): transport blocks with link adaptation
and HARQ (``adaptation`` says how a period fills its share and how its MCS and failures are
drawn). A receiver the lowest MCS does not reach on any PRB count of the share waits; one that
has waited ``link_failure_s`` in a row has lost its radio link (NR's T310)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from fedsim.sim.draws import HARQ, PLACEMENT, hashed_key, hashed_uniform
from fedsim.sim.link.adaptation import Harq, HarqSettings, OuterLoop, Period, Use
from fedsim.sim.link.base import LinkModel
from fedsim.sim.link.placement import Held, Placement, unscheduled
from fedsim.sim.link.views import FlatSnr, SubbandSnr
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
        """The rate it delivers on average on a share of bandwidth_hz at a steady SNR over it:
        on the PRB count that delivers the most (a device's power on fewer PRBs at a higher
        density; the base station on its whole band), the MCS it would pick there times
        1 − its BLER (0 below the lowest MCS on every count)."""
        snr *= bandwidth_hz / self.settings.prb_hz  # over one PRB, the whole power on it
        snr_db = 10.0 * math.log10(snr) if snr > 0 else -300.0
        view = FlatSnr(snr_db, snr_db, fills=direction == DOWNLINK)
        return self.adaptation[direction].best_use(view, bandwidth_hz)[1]

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
        # per receiver: the channel view of the state it was worked out on, kept while the
        # channel, the power and the placement stay (a scheduler asks its rates every period)
        self._views: dict[int, tuple[tuple, FlatSnr | SubbandSnr]] = {}

    def speed_bps(self, bandwidth_hz: float, remaining_bits: float) -> float:
        """The delivered rate of the period that begins now (which also settles the period
        before): the PRB count and MCS for the weakest receiver the lowest MCS reaches (a
        multicast serves its weakest member); a receiver it does not reach waits, and one
        that has waited ``link_failure_s`` in a row is dropped from the transmission, which
        fails when nobody is left. A re-split of the band that keeps its blocks (a share
        under one PRB stays on one PRB; a share keeps the PRB count its rate peaks at) only
        changes its slots: the period goes on at the new rate."""
        harq = self.harq
        now = self.radio.now()
        period = self._period
        if (
            period is not None
            and period.shape is not None
            and now < min(self._valid_until_s, period.review_s)
            and not self._waiting_since
            and self._placed_as_planned()
        ):
            use = harq.choose(period.channel, bandwidth_hz, period.offset_db)
            if use.same_blocks(period.use):  # the same blocks, other slots
                self._send_as(use)
                period.rescale(now, harq.blocks_per_s(use))
                return period.speed_bps
        state = self._state()
        self.finish()
        weakest, weakest_gain, views = -1, math.inf, {}
        for receiver in self.receivers:
            if receiver in self.dropped:
                continue
            gain_hz = state[receiver]
            view = self._view(receiver, gain_hz)
            if harq.reaches(view, bandwidth_hz):
                self._waiting_since.pop(receiver, None)
                views[receiver] = view
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
            now, entity, self._served(views, weakest), bandwidth_hz, remaining_bits,
            self._valid_until_s - now, u,
        )  # fmt: skip
        self._send_as(self._period.use)
        return self._period.speed_bps

    def _send_as(self, use: Use) -> None:
        """It sends as ``use`` says from now: its power (power control: the mean of the powers
        of the PRB counts it sends on, TS 38.213 with M_RB the PRBs used) and its duty."""
        powers_w = self._powers_w()
        if powers_w is None:
            power_w = self.power_w
        elif use.low:
            weight = use.high_share
            power_w = (1.0 - weight) * powers_w[use.low - 1] + weight * powers_w[use.high - 1]
        else:
            power_w = float(powers_w[use.high - 1])
        self._set_power(power_w)
        self._set_duty(use.blocks_per_slot)

    @property
    def _fills(self) -> bool:
        """Whether it sends on its whole share: a base station, not power-limited as a device
        is (a gNB's fixed energy per resource element, TS 38.214 §4.1: fewer PRBs would not
        get more power each), fills its band; a device fills the PRB count that delivers
        the most."""
        return self.direction == DOWNLINK

    def _powers_w(self) -> np.ndarray | None:
        """The uplink's power on each PRB count under power control (TS 38.213 §7.1.1 with
        M_RB the PRBs used), or None: its maximum on any."""
        if self.direction != UPLINK or not self.radio.power_controlled:
            return None
        [client] = self.receivers
        return self.radio.uplink_powers_w(client)

    def _power_db(self) -> np.ndarray | None:
        """The power on each PRB count over the maximum, dB (None: the maximum on any)."""
        powers_w = self._powers_w()
        return None if powers_w is None else 10.0 * np.log10(powers_w / self.power_w)

    def achievable_bps(self, bandwidth_hz: float) -> float:
        """The rate the weakest receiver would get on bandwidth_hz now (a scheduler's
        metric): that of the best use of the share at the estimate (``Harq.best_use``),
        non-decreasing in the share."""
        self._state()  # a new channel state forgets the rates of the last one
        rate_bps = self._achievable_bps_on.get(bandwidth_hz)
        if rate_bps is None:
            rate_bps = self.harq.best_use(self._weakest_view(), bandwidth_hz)[1]
            if self.radio.cache_channel:
                self._achievable_bps_on[bandwidth_hz] = rate_bps
        return rate_bps

    def usable_hz(self, bandwidth_hz: float) -> float:
        """The most of bandwidth_hz its weakest receiver's rate grows on [Hz]: the fewest
        PRBs that carry the most at the estimate (at least one: a transmitter waiting below
        the lowest MCS keeps a PRB to find out when its channel comes back)."""
        prb_hz = self.harq.settings.prb_hz
        most = max(1, math.floor(bandwidth_hz / prb_hz + 1e-9))
        rates = self._weakest_view().rates(self.harq, most)
        return int(rates.peak_at[most - 1]) * prb_hz

    def _weakest_view(self) -> FlatSnr | SubbandSnr:
        """The view of the receiver of least gain now (a scheduler's and the band's metric)."""
        state = self._state()
        weakest = min(state, key=state.__getitem__)
        return self._view(weakest, state[weakest])

    def _placed_as_planned(self) -> bool:
        """Whether the share sits where the period was planned on (flat: anywhere will do)."""
        return True

    def _view(self, receiver: int, gain_hz: float) -> FlatSnr:
        """The receiver's channel as a period sees it: its SNR over one PRB (the whole power
        on it), the transmitter's estimate of it, and the power on each PRB count; kept while
        the channel state holds."""
        key = (self._state_count,)
        kept = self._views.get(receiver)
        if kept is not None and kept[0] == key:
            return kept[1]
        snr_db = 10.0 * math.log10(gain_hz / self.harq.settings.prb_hz)
        view = FlatSnr(snr_db, self._estimate_db(receiver, snr_db), self._power_db(), self._fills)
        if self.radio.cache_channel:
            self._views[receiver] = (key, view)
        return view

    def _served(self, views: dict, weakest: int) -> FlatSnr:
        """The channel the period's MCS serves: its weakest receiver's (a multicast)."""
        return views[weakest]

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
    SNR is the EESM over the PRBs it holds, MCS by MCS (``views.SubbandSnr``): of those a
    scheduler placed it on, the strongest it fills; else in a row where ``fading.placement``
    puts a share no scheduler placed (``placement``)."""

    _planned_on: np.ndarray | None = None  # the PRBs per subband its period was planned on

    def __post_init__(self) -> None:
        super().__post_init__()
        # the scheduler's view per reference PRB count, on the gains it was worked out on
        self._rates_for: np.ndarray | None = None
        self._rates_on: dict[float, np.ndarray] = {}
        self._unscheduled: Placement | None = None  # where it sits when no scheduler placed it

    def _placed_as_planned(self) -> bool:
        placed, planned = self.allocation_prbs, self._planned_on
        if placed is None or planned is None:
            return placed is planned
        return np.array_equal(placed, planned)

    def _view(self, receiver: int, gain_hz: float) -> SubbandSnr:
        """The receiver's subbands as a period sees them: kept (with the effective SNRs and
        rates worked out on them) while the channel, the power and the placement stay, so a
        transmitter waiting below the lowest MCS costs its EESMs once per channel, not per
        re-split."""
        self._planned_on = held = self.allocation_prbs
        key = (self._state_count, None if held is None else held.tobytes())
        kept = self._views.get(receiver)
        if kept is not None and kept[0] == key:
            return kept[1]
        snr = self._subband_gain_hz[receiver] / self.harq.settings.prb_hz
        estimate = self._subband_estimate(receiver, snr)
        if held is None:
            placement = self._placement()
        else:  # a block on fewer PRBs takes the strongest by the estimate
            placement = Held(held, np.argsort(-estimate, kind="stable"))
        view = SubbandSnr((snr,), (estimate,), placement, self._power_db(), self._fills)
        if self.radio.cache_channel:
            self._views[receiver] = (key, view)
        return view

    def _placement(self) -> Placement:
        """Where a share no scheduler placed sits: drawn once per transmission."""
        if self._unscheduled is None:
            receiver = self.receivers[0]
            entity, _ = self._entity(receiver)
            u = hashed_uniform(
                self.radio.key, PLACEMENT, self.direction, entity, self._transmission[receiver]
            )
            grid = self.radio.subband_grid(self.direction)
            self._unscheduled = unscheduled(self.radio.subband_placement, grid, u)
        return self._unscheduled

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

    def _served(self, views: dict, weakest: int) -> SubbandSnr:
        """Every receiver the lowest MCS reaches: each MCS's effective SNR is the weakest's;
        the PRB count is the one for the receiver of least gain over the band (first)."""
        if len(views) == 1:
            return views[weakest]
        served = [views[weakest], *(v for r, v in views.items() if r != weakest)]
        return SubbandSnr(
            tuple(v.snr[0] for v in served), tuple(v.estimate[0] for v in served),
            served[0].placement, served[0].power_db, served[0].fills,
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
