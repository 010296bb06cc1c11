"""Link adaptation and HARQ for the ``harq`` link model (``harq.py``): a transfer is a stream of
transport blocks, one per slot on the resource blocks of its band share (a share under one PRB
time-shares one PRB). In each period of a constant channel and share (a fading block, or until
the band is re-split) the transmitter picks the MCS from its channel estimate: the highest of
the NR table whose transport-block error rate (``bler.BlerCurves``: code blocks of 38.212's
segmentation, TBLER = 1 − (1 − BLER)^blocks) is at most ``target_bler`` at the estimate minus
the outer-loop offset. The real channel of the period decides the blocks that fail; HARQ sends
each again until it gets through (optionally with chase combining: the k-th transmission of a
block is decoded at k times the SNR), so the transfer goes on with what was delivered, never
starting over. Below the lowest MCS nothing is sent until the channel changes.

No event per transport block: per period, the number of failed blocks is drawn at once (they
are independent given the SNR): Binomial(n, p) of the n blocks that fit in the period, or,
when the transfer ends within it, the negative binomial count of failures before its last
block gets through; the transfer then moves at the period's delivered rate. Draws are
hashed from counters, like the radio's, so that a run is reproducible.

Outer-loop link adaptation (Sampath et al. 1997, as Sionna SYS's ``OuterLoopLinkAdaptation``):
an offset subtracted from the estimate when the MCS is picked, which rises by ``step_db`` per
failed block and falls by step_db·target/(1 − target) per delivered one, so that the achieved
BLER converges to the target whatever the estimate's error. The MCS is picked once per period
here, not per slot, so the loop is updated once per period with the same fixed point:
by step_db·(BLER of the period − target)/(1 − target), within ±20 dB (per acknowledgement, a
period of twenty blocks at the wrong MCS would swing it by ten dB before any slot could react);
a period cut short, when the band is re-split, moves it by the share of the period that ran.
``link`` is whose loop it is: a client for the uplink and downlink, a pair for D2D.
The offset never stops a transmission: whether the transmitter is scheduled at all follows the
estimate alone (below the lowest MCS's threshold it waits, as NR's "CQI out of range").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache

import numpy as np

from fedsim.sim.bler import GRID_SNR_DB, BlerCurves, curves_for, snr_step, snr_steps
from fedsim.sim.nr import DATA_RE_PER_PRB, SUBCARRIERS_PER_PRB, code_blocks, transport_block_bits

OLLA_LIMIT_DB = 20.0
NORMAL_APPROXIMATION_VARIANCE = 25.0  # count draws with a larger variance use a normal law


@dataclass(frozen=True)
class HarqSettings:
    """Link adaptation and HARQ (see the module docstring)."""

    target_bler: float = 0.1
    mcs_table: str = "64qam"
    subcarrier_spacing_khz: float = 30.0  # numerology 1: 0.5 ms slots
    bler_source: str = "builtin"  # sionna | builtin
    max_transmissions: int = 4  # per block before RLC starts it over (HARQ's limit)
    combining: str = "chase"  # chase | none
    csi_age_blocks: int = 0  # 0: the estimate is the block's own SNR; 1: the previous block's
    olla_step_db: float | None = 1.0  # None: no outer loop
    link_failure_s: float = 1.0  # unreachable this long in a row: radio link failure (NR T310)

    @property
    def slot_s(self) -> float:
        return 1e-3 * 15.0 / self.subcarrier_spacing_khz

    @property
    def prb_hz(self) -> float:
        return SUBCARRIERS_PER_PRB * self.subcarrier_spacing_khz * 1e3


@dataclass(frozen=True)
class Shape:
    """A transport block of one MCS on a whole number of PRBs."""

    mcs: int
    bits: int  # information bits (TBS)
    cb_size: int
    blocks: int
    threshold_db: float  # the SNR at which the TBLER meets the target
    # per SNR of the curves' 0.1 dB grid, the share of its transmissions that fail (HARQ's
    # combining included): what a period draws its failures from
    failure: tuple[float, ...] = field(default=(), repr=False, compare=False)


@dataclass(slots=True)
class Period:
    """What a transmitter does from ``start_s`` until the channel or its PRB count changes:
    one MCS, and the failures drawn for the blocks planned (their ratio holds for the
    period). A re-split of the band that keeps its PRB count only changes how many slots it
    gets: the period goes on at the new rate (``rescale``)."""

    start_s: float
    shape: Shape | None  # None: below the lowest MCS, nothing sent
    prbs: int  # the whole PRBs a block occupies
    blocks_per_s: float  # transport blocks sent per second
    sent: float  # blocks it plans to send in the period
    failed: float  # of those, the failures drawn
    speed_bps: float  # information bits delivered per second
    duration_s: float  # how long it was planned to last
    since_s: float = -math.inf  # when blocks_per_s last changed (start_s at first)
    blocks_run: float = 0.0  # blocks sent before since_s
    review_s: float = math.inf  # when to pick the MCS again though the channel is the same

    @property
    def raw_bps(self) -> float:
        return 0.0 if self.shape is None else self.shape.bits * self.blocks_per_s

    def rescale(self, now_s: float, blocks_per_s: float) -> None:
        """The transmitter gets another number of slots from now on."""
        self.blocks_run += (now_s - max(self.since_s, self.start_s)) * self.blocks_per_s
        self.since_s = now_s
        self.speed_bps *= blocks_per_s / self.blocks_per_s
        self.blocks_per_s = blocks_per_s

    def blocks_until(self, end_s: float) -> float:
        return self.blocks_run + (end_s - max(self.since_s, self.start_s)) * self.blocks_per_s


@dataclass
class HarqTally:
    """A link's transport blocks: sent, failed, and the sum of their MCS."""

    sent: float = 0.0
    failed: float = 0.0
    mcs_sum: float = 0.0
    failed_bits: float = 0.0  # information bits of the failed blocks (resent: wasted air)

    def add(self, other: HarqTally) -> None:
        self.sent += other.sent
        self.failed += other.failed
        self.mcs_sum += other.mcs_sum
        self.failed_bits += other.failed_bits


class Harq:
    """Link adaptation and HARQ for one direction's BLER curves; the outer-loop offsets of
    every link (a client's uplink, the downlink to it) persist across its transfers."""

    def __init__(self, settings: HarqSettings, direction: str) -> None:
        self.settings = settings
        self.curves: BlerCurves = curves_for(direction, settings.mcs_table, settings.bler_source)
        self.offsets_db: dict[int, float] = {}
        self._up_db = settings.olla_step_db or 0.0
        self._prb_hz = settings.prb_hz
        self._shapes: dict[int, tuple[Shape, ...]] = {}

    def shapes(self, prbs: int) -> tuple[Shape, ...]:
        """The transport blocks each MCS (with a curve) makes on ``prbs`` PRBs, highest MCS
        first, each with the SNR at which it meets the target."""
        shapes = self._shapes.get(prbs)
        if shapes is None:
            s = self.settings
            shapes = _shapes(self.curves, prbs, s.target_bler, s.combining, s.max_transmissions)
            self._shapes[prbs] = shapes
        return shapes

    def prbs(self, share_hz: float) -> int:
        """The PRBs a block occupies on a band share: its whole PRBs (at least one: a share
        under one PRB gets a PRB in some of the slots)."""
        return max(1, math.floor(share_hz / self._prb_hz))

    def blocks_per_s(self, share_hz: float) -> float:
        """Transport blocks per second on the share: a block per slot on its whole PRBs,
        scaled by the share's fraction beyond (or under) them."""
        prbs = share_hz / self._prb_hz
        return prbs / max(1, math.floor(prbs)) / self.settings.slot_s

    def occupied_hz(self, share_hz: float) -> float:
        """The band a block occupies: the SNR the curves read is over it."""
        return self.prbs(share_hz) * self._prb_hz

    def reaches(self, estimate_db: float, share_hz: float) -> bool:
        """Whether the lowest MCS meets the target at the estimate: below it the transmitter
        is not scheduled and sends nothing."""
        return estimate_db >= self.lowest_threshold_db(share_hz)

    def lowest_threshold_db(self, share_hz: float) -> float:
        """The estimate the lowest MCS needs on this share to meet the target."""
        return self.shapes(self.prbs(share_hz))[-1].threshold_db

    def plan(
        self,
        start_s: float,
        link: int,
        snr_db: float,
        estimate_db: float,
        share_hz: float,
        remaining_bits: float,
        until_change_s: float,
        u: float,
    ) -> Period:
        """The period starting now on ``share_hz`` at ``snr_db`` over the band its blocks
        occupy (the transmitter chose its MCS at ``estimate_db``), given the bits still to
        deliver and the time until the channel changes; ``u`` a uniform draw for the
        failures."""
        s = self.settings
        whole = self.prbs(share_hz)
        blocks_per_s = self.blocks_per_s(share_hz)
        shapes = self.shapes(whole)
        if estimate_db < shapes[-1].threshold_db:  # not reached: nothing sent
            return Period(start_s, None, whole, blocks_per_s, 0.0, 0.0, 0.0, until_change_s)
        chosen_db = estimate_db - self.offsets_db.get(link, 0.0)
        shape = next((x for x in shapes if x.threshold_db <= chosen_db), shapes[-1])
        p = self.failure_probability(snr_db, shape)
        if p >= 1.0 - 1e-12:  # every block fails: the outer loop hears it after one block's
            review_s = s.max_transmissions / blocks_per_s  # transmissions and re-picks
            period = Period(start_s, shape, whole, blocks_per_s, 1.0, 1.0, 0.0, review_s)
            period.review_s = start_s + min(review_s, until_change_s)
            return period
        needed = math.ceil(remaining_bits / shape.bits)
        fit = until_change_s * blocks_per_s
        if needed / (1.0 - p) <= fit:  # it should end in the period: failures until done
            sent = needed + negative_binomial_ppf(u, needed, 1.0 - p)
            speed_bps = remaining_bits * blocks_per_s / sent
            return Period(start_s, shape, whole, blocks_per_s, sent, sent - needed, speed_bps,
                          sent / blocks_per_s)  # fmt: skip
        sent = max(1, math.floor(fit))
        failed = binomial_ppf(u, sent, p)
        speed_bps = shape.bits * blocks_per_s * (sent - failed) / sent
        return Period(start_s, shape, whole, blocks_per_s, sent, failed, speed_bps, until_change_s)

    def expected_rate_bps(self, share_hz: float, snr_db: float) -> float:
        """The information rate the link delivers on average at a steady snr_db (over the
        band its blocks occupy): the MCS it picks there (no outer loop), times 1 − its
        failure probability; 0 below the lowest."""
        shape = next(
            (x for x in self.shapes(self.prbs(share_hz)) if x.threshold_db <= snr_db), None
        )
        if shape is None:
            return 0.0
        p = self.failure_probability(snr_db, shape)
        return shape.bits * self.blocks_per_s(share_hz) * (1.0 - p)

    @staticmethod
    def failure_probability(snr_db: float, shape: Shape) -> float:
        """The share of a block's transmissions that fail at snr_db (on the curves' grid)."""
        return shape.failure[snr_step(snr_db)]

    def settle(self, period: Period, end_s: float, link: int) -> HarqTally:
        """The part of the period that ran (to ``end_s``): its blocks, failures and MCS, and
        the outer loop's update."""
        shape = period.shape
        ran = period.blocks_until(end_s)
        if shape is None or ran <= 0 or period.sent <= 0:
            return HarqTally()
        ratio = period.failed / period.sent
        if self._up_db:  # a period cut short moves it by the share of its time that ran
            planned_s = period.duration_s
            done = min((end_s - period.start_s) / planned_s, 1.0) if planned_s > 0 else 1.0
            error = (ratio - self.settings.target_bler) / (1.0 - self.settings.target_bler)
            offset = self.offsets_db.get(link, 0.0) + self._up_db * error * done
            self.offsets_db[link] = min(max(offset, -OLLA_LIMIT_DB), OLLA_LIMIT_DB)
        failed = ratio * ran
        return HarqTally(ran, failed, ran * shape.mcs, failed * shape.bits)


@cache
def _shapes(
    curves: BlerCurves, prbs: int, target: float, combining: str, max_transmissions: int
) -> tuple[Shape, ...]:
    shapes = []
    for mcs in reversed(curves.mcs):
        if mcs.index not in curves.curves:
            continue  # no curve for it (Sionna's tables start at MCS 3 and so on)
        bits = transport_block_bits(DATA_RE_PER_PRB * prbs, mcs)
        if not bits:
            continue
        cb_size, blocks = code_blocks(bits, mcs.code_rate)
        threshold = curves.threshold_db(mcs.index, cb_size, blocks, target)
        table = curves.transport_table(mcs.index, cb_size, blocks)
        failure = table if combining == "none" else _chase(table, max_transmissions)
        shapes.append(Shape(mcs.index, bits, cb_size, blocks, threshold, tuple(failure)))
    return tuple(shapes)


def _chase(transport_bler: list[float], max_transmissions: int) -> list[float]:
    """With chase combining, the share of transmissions that fail at each SNR of the grid:
    1 − 1/E[transmissions per block], the k-th decoded at k times the SNR (read at the grid
    point nearest to it) and RLC starting the block over after ``max_transmissions``."""
    bler = np.asarray(transport_bler)
    all_failed, expected = np.ones_like(bler), np.zeros_like(bler)
    for k in range(1, max_transmissions + 1):
        expected += all_failed
        all_failed = all_failed * bler[snr_steps(GRID_SNR_DB + 10.0 * math.log10(k))]
    failure = np.where(all_failed >= 1.0 - 1e-12, 1.0, 1.0 - (1.0 - all_failed) / expected)
    return failure.tolist()


# --- counts of failures from one uniform draw ---------------------------------------------------


def binomial_ppf(u: float, n: int, p: float) -> int:
    """The u-quantile of Binomial(n, p): exact by summing the probabilities when the variance
    is small (from the likelier end), else the normal approximation with continuity
    correction, clipped to 0..n."""
    variance = n * p * (1.0 - p)
    if variance > NORMAL_APPROXIMATION_VARIANCE:
        z = _normal_ppf(u)
        return min(max(round(n * p + z * math.sqrt(variance)), 0), n)
    if p > 0.5:  # count the successes instead: fewer terms
        return n - binomial_ppf(1.0 - u, n, 1.0 - p)
    if p <= 0.0:
        return 0
    probability = (1.0 - p) ** n
    cumulative, k = probability, 0
    ratio = p / (1.0 - p)
    while cumulative < u and k < n:
        probability *= (n - k) / (k + 1) * ratio
        k += 1
        cumulative += probability
    return k


def negative_binomial_ppf(u: float, successes: int, q: float) -> int:
    """The u-quantile of the failures before the ``successes``-th success, each trial a
    success with probability q: exact when the variance is small, else normal."""
    p = 1.0 - q
    variance = successes * p / (q * q)
    if variance > NORMAL_APPROXIMATION_VARIANCE:
        z = _normal_ppf(u)
        return max(round(successes * p / q + z * math.sqrt(variance)), 0)
    probability = q**successes
    cumulative, k = probability, 0
    while cumulative < u and probability > 0:
        probability *= (successes + k) / (k + 1) * p
        k += 1
        cumulative += probability
    return k


def _normal_ppf(u: float) -> float:
    """The standard normal quantile (Acklam's rational approximation, relative error
    below 1.2e-9: plenty for a count)."""
    a = (
        -3.969683028665376e01,
        2.209460984245205e02,
        -2.759285104469687e02,
        1.383577518672690e02,
        -3.066479806614716e01,
        2.506628277459239e00,
    )
    b = (
        -5.447609879822406e01,
        1.615858368580409e02,
        -1.556989798598866e02,
        6.680131188771972e01,
        -1.328068155288572e01,
    )
    c = (
        -7.784894002430293e-03,
        -3.223964580411365e-01,
        -2.400758277161838e00,
        -2.549732539343734e00,
        4.374664141464968e00,
        2.938163982698783e00,
    )
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00,
         3.754408661907416e00)  # fmt: skip
    if u < 0.02425:
        q = math.sqrt(-2.0 * math.log(u))
        return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / (
            (((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0
        )
    if u > 1.0 - 0.02425:
        return -_normal_ppf(1.0 - u)
    q = u - 0.5
    r = q * q
    return (
        (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5])
        * q
        / (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0)
    )
