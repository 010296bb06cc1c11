"""Link adaptation and HARQ for the ``harq`` link model (``harq.py``): a transfer is a stream of
transport blocks, one per slot on whole PRBs of its band share (``Harq`` says how a fractional
share is split into slots and how the power spreads). The transmitter picks each block's MCS
from its channel estimate: the highest of the NR table whose transport-block error rate
(``bler.BlerCurves``: code blocks of 38.212's segmentation, TBLER = 1 − (1 − BLER)^blocks) is
at most ``target_bler`` at the estimate minus the outer-loop offset. The real channel decides
the blocks that fail; HARQ sends each again until it gets through (optionally with chase
combining: the k-th transmission of a block is decoded at k times the SNR), so the transfer
goes on with what was delivered, never starting over. Below the lowest MCS nothing is sent
until the channel changes.

No event per transport block: in each period of a constant channel and share (a fading block,
or until the band is re-split), the blocks are run one by one without events, from one stream
of draws seeded by a hashed counter (so a run is reproducible), and the transfer moves at the
period's average delivered rate; a period cut short counts the blocks that ran.

Outer-loop link adaptation (Sampath et al. 1997; Sionna SYS's ``OuterLoopLinkAdaptation``,
``OuterLoop`` here): an offset subtracted from the estimate when the MCS is picked, which rises
by ``step_db`` at each failed transmission (a NACK) and falls by step_db·target/(1 − target)
at each delivered one (an ACK), within ±20 dB, so that the achieved BLER converges to the
target whatever the estimate's error. As in Sionna, the MCS is picked again at every block
with the offset of the feedback so far (the feedback's few slots of delay are neglected).
``link`` is whose loop it is: a client for the uplink and downlink, a pair for D2D.
The offset never stops a transmission: whether the transmitter is scheduled at all follows the
estimate alone (below the lowest MCS's threshold it waits, as NR's "CQI out of range").
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from dataclasses import dataclass, field
from functools import cache

import numpy as np

from fedsim.sim.bler import GRID_SNR_DB, BlerCurves, curves_for, snr_step, snr_steps
from fedsim.sim.link.eesm import eesm, eesm_betas
from fedsim.sim.nr import DATA_RE_PER_PRB, SUBCARRIERS_PER_PRB, code_blocks, transport_block_bits
from fedsim.sim.records import HarqTally

OLLA_LIMIT_DB = 20.0
MAX_PLANNED_BLOCKS = 2000  # a period runs at most this many blocks, then again


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
    """What a transmitter does from ``start_s`` until its channel or its band share changes:
    its blocks one by one (``trace``), and the average rate they deliver at. A re-split of
    the band that keeps the share's allocation (a share under one PRB: one PRB in some of the
    slots) only changes how many slots it gets: the same blocks go on at the new rate
    (``rescale``)."""

    start_s: float
    shape: Shape | None  # its first block's (None: below the lowest MCS, nothing sent)
    allocation: tuple[int, float]  # Harq.allocation of its share
    blocks_per_s: float  # transport blocks sent per second
    sent: int  # blocks it plans to send in the period
    failed: int  # of those, the failures drawn
    speed_bps: float  # information bits delivered per second, on average over the period
    duration_s: float  # how long it was planned to last
    review_s: float = math.inf  # when to run it again though the channel is the same
    # after each block: (outer-loop offset, failed, sum of MCS, failed bits, delivered bits)
    trace: list[tuple[float, int, int, int, int]] = field(default_factory=list)
    since_s: float = -math.inf  # when blocks_per_s last changed (start_s at first)
    blocks_run: float = 0.0  # blocks sent before since_s

    def rescale(self, now_s: float, blocks_per_s: float) -> None:
        """The transmitter gets another number of slots from now on: the blocks it planned go
        on at the new rate, and it runs again when they are used up."""
        self.blocks_run += (now_s - max(self.since_s, self.start_s)) * self.blocks_per_s
        self.since_s = now_s
        self.speed_bps *= blocks_per_s / self.blocks_per_s
        self.blocks_per_s = blocks_per_s
        left = len(self.trace) - self.blocks_run
        self.review_s = min(self.review_s, now_s + max(left, 0.0) / blocks_per_s)

    def blocks_until(self, end_s: float) -> int:
        """The blocks sent from its start to end_s."""
        since_s = max(self.since_s, self.start_s)
        return math.floor(self.blocks_run + (end_s - since_s) * self.blocks_per_s + 1e-6)


class Harq:
    """Link adaptation (the MCS meets the target at the estimate) and HARQ for one
    direction's BLER curves: the inner loop, without an outer one (``OuterLoop`` adds it).

    A band share of b PRBs gets, in each slot, one transport block on whole PRBs: ⌊b⌋ PRBs in
    a fraction 1 − (b − ⌊b⌋) of the slots and ⌈b⌉ in the others (a share under one PRB: one
    PRB in a fraction b of the slots). The transmit power spreads over the PRBs of the slot,
    so the SNR over m PRBs is the SNR over one PRB (the whole power on it) over m: a share
    never radiates more than the device has, and the rate is continuous in b."""

    _up_db = _down_db = 0.0  # the outer loop's steps: none

    def __init__(self, settings: HarqSettings, direction: str) -> None:
        self.settings = settings
        self.curves: BlerCurves = curves_for(direction, settings.mcs_table, settings.bler_source)
        self._prb_hz = settings.prb_hz
        self._shapes: dict[int, tuple[Shape, ...]] = {}
        self._floors: dict[int, list[float]] = {}
        self._thresholds: dict[int, np.ndarray] = {}
        self._rate_tables: dict[int, np.ndarray] = {}
        self._betas: dict[int, np.ndarray] = {}
        self._failure_tables: dict[int, np.ndarray] = {}
        self.betas = np.asarray(eesm_betas(settings.mcs_table))  # per MCS index, for EESM

    def shapes(self, prbs: int) -> tuple[Shape, ...]:
        """The transport blocks each MCS (with a curve) makes on ``prbs`` PRBs, highest MCS
        first, each with the SNR at which it meets the target."""
        shapes = self._shapes.get(prbs)
        if shapes is None:
            s = self.settings
            shapes = _shapes(self.curves, prbs, s.target_bler, s.combining, s.max_transmissions)
            self._shapes[prbs] = shapes
        return shapes

    def allocation(self, share_hz: float) -> tuple[int, float]:
        """The whole PRBs of the share's small blocks (at least one), and the fraction of its
        blocks on one PRB more (0 under one PRB)."""
        prbs = share_hz / self._prb_hz
        whole = math.floor(prbs + 1e-9)  # an exact multiple stays whole
        if whole < 1:
            return 1, 0.0
        return whole, max(prbs - whole, 0.0)

    def blocks_per_s(self, share_hz: float) -> float:
        """Transport blocks per second: one per slot, in a fraction of them under one PRB."""
        return self.duty(share_hz) / self.settings.slot_s

    def duty(self, share_hz: float) -> float:
        """The share of the time the transmitter radiates: a share under one PRB sends on a
        whole PRB in that fraction of the slots."""
        return min(share_hz / self._prb_hz, 1.0)

    def reaches(self, channel: FlatSnr | SubbandSnr, share_hz: float) -> bool:
        """Whether the lowest MCS meets the target on the share's small blocks at the
        channel's estimate: below it the transmitter is not scheduled, sends nothing."""
        prbs, _ = self.allocation(share_hz)
        return channel.reaches(self, prbs)

    def offset_db(self, link: int) -> float:
        """The outer loop's offset of the link (none: 0)."""
        return 0.0

    def remember(self, link: int, offset_db: float) -> None:
        """Keep the outer loop's offset of the link (none: nothing to keep)."""

    def plan(
        self,
        start_s: float,
        link: int,
        channel: FlatSnr | SubbandSnr,
        share_hz: float,
        remaining_bits: float,
        until_change_s: float,
        u: float,
    ) -> Period:
        """The period starting now on ``share_hz`` over the channel (the transmitter picks
        its MCS at the channel's estimate minus the outer loop's offset), given the bits
        still to deliver and the time until the channel changes: its blocks one by one,
        drawn from a stream seeded by the uniform ``u``."""
        blocks_per_s = self.blocks_per_s(share_hz)
        allocation = self.allocation(share_hz)
        if not self.reaches(channel, share_hz):  # not reached: nothing sent
            return Period(start_s, None, allocation, blocks_per_s, 0, 0, 0.0, until_change_s)
        fit = until_change_s * blocks_per_s
        capped = fit > MAX_PLANNED_BLOCKS
        blocks = MAX_PLANNED_BLOCKS if capped else max(1, math.floor(fit))
        trace, first = self._run(link, channel, share_hz, remaining_bits, blocks, u)
        sent, (_, failed, _, _, delivered) = len(trace), trace[-1]
        if delivered >= remaining_bits:  # it ends in the period
            speed_bps = remaining_bits * blocks_per_s / sent
            duration_s = sent / blocks_per_s
        else:
            speed_bps = delivered * blocks_per_s / sent
            duration_s = sent / blocks_per_s if capped else until_change_s
        period = Period(
            start_s, first, allocation, blocks_per_s, sent, failed, speed_bps, duration_s
        )
        period.trace = trace
        if capped:  # run it again then, the channel the same
            period.review_s = start_s + duration_s
        return period

    def _run(
        self, link: int, channel: FlatSnr | SubbandSnr, share_hz: float,
        remaining_bits: float, blocks: int, u: float,
    ) -> tuple[list[tuple[float, int, int, int, int]], Shape]:  # fmt: skip
        """Up to ``blocks`` blocks one by one, until ``remaining_bits`` are delivered (the
        ⌈b⌉-PRB ones spread evenly among the others): each block's MCS picked at the
        estimate minus the offset, its failure drawn at the SNR, the offset updated by its
        feedback. Returns, after each block, (offset, failed, sum of MCS, failed bits,
        delivered bits) so far, and the first block's shape."""
        small, extra = self.allocation(share_hz)
        sizes = [
            channel.blocks_of(self, m) for m in ((small, small + 1) if extra > 0 else (small,))
        ]
        draw = random.Random(int(u * 2.0**53)).random  # Mersenne Twister: cheap to seed
        bisect_left = bisect.bisect_left
        offset = self.offset_db(link)
        up_db, down_db = self._up_db, self._down_db
        failed = mcs_sum = failed_bits = delivered = 0
        trace, first = [], None
        for k in range(blocks):
            bigger = int((k + 1) * extra) - int(k * extra) if extra else 0
            shapes, floors, shift, failure, lowest = sizes[bigger]
            picked = min(bisect_left(floors, offset + shift), lowest)
            shape = shapes[picked]
            if first is None:
                first = shape
            mcs_sum += shape.mcs
            if draw() < failure[picked]:  # a NACK
                failed += 1
                failed_bits += shape.bits
                offset = min(offset + up_db, OLLA_LIMIT_DB)
            else:  # an ACK
                delivered += shape.bits
                offset = max(offset - down_db, -OLLA_LIMIT_DB)
            trace.append((offset, failed, mcs_sum, failed_bits, delivered))
            if delivered >= remaining_bits:
                break
        return trace, first

    def subband_rates_bps(self, per_prb_snr: np.ndarray, subband_prbs: np.ndarray) -> np.ndarray:
        """The rate it delivers on average on each subband alone (``expected_rate_bps``, read
        on the curves' 0.1 dB grid) at these SNRs per PRB (linear, the power it has on each):
        a frequency-domain scheduler's metric."""
        with np.errstate(divide="ignore"):  # an SNR of 0: the grid's bottom
            steps = snr_steps(10.0 * np.log10(per_prb_snr))
        rates = np.empty(len(subband_prbs))
        for prbs in np.unique(subband_prbs):
            on = subband_prbs == prbs
            rates[on] = self._rates_on(int(prbs))[steps[on]]
        return rates

    def _rates_on(self, prbs: int) -> np.ndarray:
        """``expected_rate_bps`` on ``prbs`` PRBs at each SNR per PRB of the curves' grid."""
        rates = self._rate_tables.get(prbs)
        if rates is None:
            share_hz = prbs * self._prb_hz
            rates = np.array([self.expected_rate_bps(share_hz, x + _db(prbs)) for x in GRID_SNR_DB])
            self._rate_tables[prbs] = rates
        return rates

    def betas_of(self, prbs: int) -> np.ndarray:
        """EESM's β of each shape on ``prbs`` PRBs (highest MCS first)."""
        betas = self._betas.get(prbs)
        if betas is None:
            betas = self._betas[prbs] = self.betas[[shape.mcs for shape in self.shapes(prbs)]]
        return betas

    def failure_table(self, prbs: int) -> np.ndarray:
        """Each shape's failure probability on ``prbs`` PRBs (rows, highest MCS first) at
        each SNR of the curves' grid (columns)."""
        table = self._failure_tables.get(prbs)
        if table is None:
            table = np.array([shape.failure for shape in self.shapes(prbs)])
            self._failure_tables[prbs] = table
        return table

    def thresholds_db(self, prbs: int) -> np.ndarray:
        """Each shape's threshold on ``prbs`` PRBs (highest MCS first)."""
        thresholds = self._thresholds.get(prbs)
        if thresholds is None:
            thresholds = np.array([shape.threshold_db for shape in self.shapes(prbs)])
            self._thresholds[prbs] = thresholds
        return thresholds

    def floors_of(self, prbs: int) -> list[float]:
        """The negated running minimum of the thresholds on ``prbs`` PRBs: the first (highest)
        MCS whose threshold is at most x is at bisect_left(floors, -x) (else the lowest)."""
        floors = self._floors.get(prbs)
        if floors is None:
            thresholds = (shape.threshold_db for shape in self.shapes(prbs))
            floors = [-x for x in itertools.accumulate(thresholds, min)]
            self._floors[prbs] = floors
        return floors

    def expected_rate_bps(self, share_hz: float, snr_db: float) -> float:
        """The information rate the link delivers on average at a steady snr_db (over one
        PRB): on each block size, the MCS it picks there (no outer loop) times 1 − its
        failure probability; 0 where the lowest MCS does not meet the target."""
        small, extra = self.allocation(share_hz)
        bits = 0.0
        for prbs, weight in ((small, 1.0 - extra), (small + 1, extra)):
            if weight <= 0:
                continue
            snr_on_db = snr_db - _db(prbs)
            shape = next((x for x in self.shapes(prbs) if x.threshold_db <= snr_on_db), None)
            if shape is not None:
                bits += weight * shape.bits * (1.0 - self.failure_probability(snr_on_db, shape))
        return bits * self.blocks_per_s(share_hz)

    @staticmethod
    def failure_probability(snr_db: float, shape: Shape) -> float:
        """The share of a block's transmissions that fail at snr_db (on the curves' grid)."""
        return shape.failure[snr_step(snr_db)]

    def settle(self, period: Period, end_s: float, link: int) -> HarqTally:
        """The blocks of the period that ran (to ``end_s``), and the offset after them."""
        ran = min(period.blocks_until(end_s), len(period.trace))
        if period.shape is None or ran <= 0:
            return HarqTally()
        offset, failed, mcs_sum, failed_bits, _ = period.trace[ran - 1]
        self.remember(link, offset)
        return HarqTally(ran, failed, mcs_sum, failed_bits)


class OuterLoop(Harq):
    """Harq with outer-loop link adaptation per HARQ feedback (see the module docstring):
    the offsets of every link (a client's uplink, the downlink to it) persist across its
    transfers."""

    def __init__(self, settings: HarqSettings, direction: str) -> None:
        super().__init__(settings, direction)
        self.offsets_db: dict[int, float] = {}
        target = settings.target_bler
        self._up_db = settings.olla_step_db or 0.0
        self._down_db = self._up_db * target / (1.0 - target)

    def offset_db(self, link: int) -> float:
        return self.offsets_db.get(link, 0.0)

    def remember(self, link: int, offset_db: float) -> None:
        self.offsets_db[link] = offset_db


# What a period's blocks see of the channel, per block size: its shapes (highest MCS first),
# the floors and shift that pick the MCS at an outer-loop offset (the first index where
# floors[i] >= offset + shift), each shape's failure probability, and the lowest's index.
Blocks = tuple[tuple[Shape, ...], list[float], float, list[float], int]


@dataclass(frozen=True, slots=True)
class FlatSnr:
    """A channel flat across the band: the block's SNR and the transmitter's estimate of it,
    over one PRB with the whole power on it (a block on m PRBs has 1/m of it on each)."""

    snr_db: float
    estimate_db: float

    def blocks_of(self, harq: Harq, prbs: int) -> Blocks:
        shapes = harq.shapes(prbs)
        step = snr_step(self.snr_db - _db(prbs))
        failure = [shape.failure[step] for shape in shapes]
        shift = -(self.estimate_db - _db(prbs))  # the MCS meeting the target at the estimate
        return shapes, harq.floors_of(prbs), shift, failure, len(shapes) - 1

    def reaches(self, harq: Harq, prbs: int) -> bool:
        return self.estimate_db - _db(prbs) >= harq.shapes(prbs)[-1].threshold_db


@dataclass(frozen=True)
class SubbandSnr:
    """A frequency-selective channel: each receiver's SNR per PRB on each subband (linear,
    the whole power on one PRB), the block's and the estimate's, and the PRBs a block holds
    on each subband (``weights``). A block on m PRBs has 1/m of the power on each; its
    effective SNR for an MCS is the EESM over its PRBs with that MCS's β (``eesm``), and a
    multicast's is its weakest receiver's, MCS by MCS. Flat gains give the flat SNR."""

    snr: tuple[np.ndarray, ...]  # per receiver
    estimate: tuple[np.ndarray, ...]
    weights: np.ndarray
    _effective_db: dict = field(default_factory=dict, compare=False, repr=False)

    def effective_db(self, harq: Harq, prbs: int, *, estimate: bool) -> np.ndarray:
        """Per shape on ``prbs`` PRBs (highest MCS first), the effective SNR of its blocks
        [dB] on the channel (or at the estimate), computed once per period."""
        if estimate and self.estimate is self.snr:
            estimate = False  # perfect CSI: the same numbers
        key = (prbs, estimate)
        effective_db = self._effective_db.get(key)
        if effective_db is None:
            betas = harq.betas_of(prbs)
            snrs = self.estimate if estimate else self.snr
            effective = eesm(snrs[0] / prbs, self.weights, betas)
            for snr in snrs[1:]:
                effective = np.minimum(effective, eesm(snr / prbs, self.weights, betas))
            with np.errstate(divide="ignore"):  # an SNR of 0: -inf dB, below every threshold
                effective_db = self._effective_db[key] = 10.0 * np.log10(effective)
        return effective_db

    def blocks_of(self, harq: Harq, prbs: int) -> Blocks:
        shapes = harq.shapes(prbs)
        true_db = self.effective_db(harq, prbs, estimate=False)
        estimate_db = self.effective_db(harq, prbs, estimate=True)
        floors = (-np.minimum.accumulate(harq.thresholds_db(prbs) - estimate_db)).tolist()
        table = harq.failure_table(prbs)
        failure = table[np.arange(len(shapes)), snr_steps(true_db)].tolist()
        return shapes, floors, 0.0, failure, len(shapes) - 1

    def reaches(self, harq: Harq, prbs: int) -> bool:
        lowest = harq.shapes(prbs)[-1]
        return bool(self.effective_db(harq, prbs, estimate=True)[-1] >= lowest.threshold_db)


def _db(prbs: int) -> float:
    """10 log10(prbs): how much lower the SNR is over prbs PRBs than over one."""
    return 10.0 * math.log10(prbs)


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
