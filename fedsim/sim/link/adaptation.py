"""Link adaptation and HARQ for the ``harq`` link model (``harq.py``): a transfer is a stream of
transport blocks, one per slot on whole PRBs of its band share. Link adaptation decides how
many PRBs of the share a block takes (``PrbRates.best``: the count that delivers the most at
the estimate, fewer PRBs at a higher power spectral density for a power-limited transmitter,
as TS 38.213's PUSCH power and an NR scheduler's link adaptation give it) and each block's MCS
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
The offset never stops a transmission: whether the transmitter is scheduled at all, and on
how many PRBs, follows the estimate alone (below the lowest MCS's threshold on every PRB count
it waits, as NR's "CQI out of range"). What a period sees of the channel (flat, or per
subband with the PRBs a block holds) is a ``views`` object.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from dataclasses import dataclass, field
from functools import cache
from typing import Protocol

import numpy as np

from fedsim.sim.bler import GRID_SNR_DB, BlerCurves, curves_for, snr_step, snr_steps
from fedsim.sim.link.eesm import eesm_betas
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


@dataclass(frozen=True, slots=True)
class Use:
    """How a transmitter fills its band share: each slot's block on ``high`` PRBs in a
    fraction ``weight`` of the slots and on ``low`` PRBs in the others; ``low`` 0: no block
    there (a share under one PRB, one PRB in that fraction of the slots). A whole count m is
    Use(m, m, 0)."""

    low: int
    high: int
    weight: float

    @property
    def blocks_per_slot(self) -> float:
        """Transport blocks per slot: the share of the slots it radiates in."""
        return 1.0 if self.low else self.weight

    @property
    def sizes(self) -> tuple[int, ...]:
        """The block sizes it sends, smallest first."""
        return (self.low, self.high) if 0 < self.low < self.high else (self.high,)

    @property
    def high_share(self) -> float:
        """The share of its blocks on ``high`` PRBs (0 with one size)."""
        return self.weight if 0 < self.low < self.high else 0.0

    @property
    def prbs(self) -> float:
        """The PRBs it occupies on average."""
        return (1.0 - self.weight) * self.low + self.weight * self.high

    def same_blocks(self, other: Use) -> bool:
        """Whether it sends the same blocks as ``other`` in every slot that has one (only the
        share of the slots that do differs)."""
        return (self.low, self.high) == (other.low, other.high) and (
            self.low == 0 or self.weight == other.weight
        )


@dataclass(frozen=True, slots=True)
class PrbRates:
    """What a channel carries on each whole PRB count m = 1..len(bits): ``bits[m - 1]``, the
    information bits a block on m PRBs delivers on average at the transmitter's estimate (the
    MCS it picks there, no outer loop, times 1 − its failure probability), and for each m the
    most of them on at most m PRBs (``peak``) and the fewest PRBs that give it (``peak_at``)."""

    bits: np.ndarray
    peak: np.ndarray
    peak_at: np.ndarray  # PRB counts

    @classmethod
    def of(cls, bits: np.ndarray) -> PrbRates:
        peak = np.maximum.accumulate(bits)
        rising = np.r_[True, bits[1:] > peak[:-1]]  # a count that beats every smaller one
        peak_at = np.maximum.accumulate(np.where(rising, np.arange(1, len(bits) + 1), 0))
        return cls(bits, peak, peak_at)

    def best(self, share_prbs: float, *, fill: bool = False) -> tuple[Use, float]:
        """The use of a share of ``share_prbs`` PRBs that delivers the most bits per slot at
        the estimate, and those bits: the fewest whole PRBs that give the most (m ≤ ⌊b⌋
        every slot), or ⌊b⌋ and ⌈b⌉ in turn (⌈b⌉ in a fraction b − ⌊b⌋ of the slots) where
        that gives more; under one PRB, one PRB in a fraction b of the slots. The bits are
        non-decreasing and continuous from the left in b: the most any smaller share gets,
        and a share larger than the PRBs the rate peaks at gains nothing. ``fill``: the
        whole share, ⌊b⌋ and ⌈b⌉ in turn (a transmitter that is not power-limited)."""
        whole = math.floor(share_prbs + 1e-9)  # an exact multiple stays whole
        if whole < 1:
            return Use(0, 1, share_prbs), share_prbs * float(self.bits[0])
        most = min(whole, len(self.bits))
        count = most if fill else int(self.peak_at[most - 1])
        use, bits = Use(count, count, 0.0), float(self.bits[count - 1])
        extra = share_prbs - whole
        if extra > 1e-9 and whole < len(self.bits):
            mixed = (1.0 - extra) * float(self.bits[whole - 1]) + extra * float(self.bits[whole])
            if fill or mixed > bits:
                use, bits = Use(whole, whole + 1, extra), mixed
        return use, bits

    @property
    def usable_prbs(self) -> int:
        """The fewest PRBs that carry as much as any count here: more add nothing."""
        return int(self.peak_at[-1])


class ChannelView(Protocol):
    """What a period's blocks see of the channel (``views``: flat, or per subband): a block's
    MCS choice and failures on m PRBs (per hop of its placement), and the rates per PRB count
    that decide how the transmitter fills its share (``fills``: the whole of it, as a base
    station does)."""

    hops: int
    fills: bool

    def blocks_of(self, harq: Harq, prbs: int, hop: int = 0) -> Blocks: ...

    def reaches(self, harq: Harq, most: int) -> bool: ...

    def rates(self, harq: Harq, most: int, offset_db: float = 0.0) -> PrbRates: ...


@dataclass(slots=True)
class Period:
    """What a transmitter does from ``start_s`` until its channel or its band share changes:
    its blocks one by one (``trace``), and the average rate they deliver at. A re-split of
    the band that keeps its blocks (``Use.same_blocks``: a share under one PRB stays on one
    PRB; a share that keeps the PRB count its rate peaks at) only changes how many slots it
    gets: the same blocks go on at the new rate (``rescale``)."""

    start_s: float
    shape: Shape | None  # its first block's (None: below the lowest MCS, nothing sent)
    use: Use  # how it fills its share
    channel: ChannelView  # the channel it was planned on
    blocks_per_s: float  # transport blocks sent per second
    sent: int  # blocks it plans to send in the period
    failed: int  # of those, the failures drawn
    speed_bps: float  # information bits delivered per second, on average over the period
    duration_s: float  # how long it was planned to last
    offset_db: float = 0.0  # the outer loop's offset its use was chosen at (``Harq.choose``)
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
    """Link adaptation (the PRB count and the MCS that deliver the most at the estimate) and
    HARQ for one direction's BLER curves: the inner loop, without an outer one (``OuterLoop``
    adds it).

    A share of b PRBs sends one transport block per slot on whole PRBs, as ``PrbRates.best``
    says: the PRB count m ≤ b that carries the most at the estimate, or ⌊b⌋ and ⌈b⌉ in turn
    (under one PRB: one PRB in a fraction b of the slots). The transmit power of a slot
    spreads over its PRBs, so the SNR per PRB on m PRBs is that over one PRB (the power it
    sends on m, all on it) over m: a power-limited transmitter gets more through on fewer
    PRBs at a higher power spectral density, as NR's link adaptation gives it (the rest of
    the share is left to others where the scheduler hands it on). The rate is then
    non-decreasing in b, and a share never radiates more than the device has."""

    _up_db = _down_db = 0.0  # the outer loop's steps: none

    def __init__(self, settings: HarqSettings, direction: str) -> None:
        self.settings = settings
        self.curves: BlerCurves = curves_for(direction, settings.mcs_table, settings.bler_source)
        self._prb_hz = settings.prb_hz
        self._shapes: dict[int, tuple[Shape, ...]] = {}
        self._floors: dict[int, list[float]] = {}
        self._thresholds: dict[int, np.ndarray] = {}
        self._betas: dict[int, np.ndarray] = {}
        self._failure_tables: dict[int, np.ndarray] = {}
        self._bits = np.empty((0, len(GRID_SNR_DB)))  # expected bits per block, per PRB count
        self._threshold_rows: np.ndarray | tuple = ()  # thresholds_upto's rows
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

    def blocks_per_s(self, use: Use) -> float:
        """Transport blocks per second: one per slot, or in a fraction of them."""
        return use.blocks_per_slot / self.settings.slot_s

    def best_use(
        self, channel: ChannelView, share_hz: float, offset_db: float = 0.0
    ) -> tuple[Use, float]:
        """How it fills a share of ``share_hz`` on the channel (``PrbRates.best``) and the
        information rate that delivers on average at the estimate less ``offset_db`` [bit/s];
        0: the lowest MCS does not meet the target on any PRB count of the share (at the
        estimate itself, it waits, as NR's "CQI out of range")."""
        share_prbs = share_hz / self._prb_hz
        most = max(1, math.ceil(share_prbs - 1e-9))
        use, bits = channel.rates(self, most, offset_db).best(share_prbs, fill=channel.fills)
        return use, bits / self.settings.slot_s

    def choose(self, channel: ChannelView, share_hz: float, offset_db: float) -> Use:
        """How a transmitter whose outer loop stands at ``offset_db`` fills its share: the
        best use at the estimate less the offset, as its MCS is picked (a loop that found the
        estimate optimistic moves to fewer PRBs too); where the lowest MCS meets the target
        there on no count, the best at the estimate (the offset never stops a transmission)."""
        use, rate_bps = self.best_use(channel, share_hz, offset_db)
        if rate_bps > 0.0 or not offset_db:
            return use
        return self.best_use(channel, share_hz)[0]

    def reaches(self, channel: ChannelView, share_hz: float) -> bool:
        """Whether the lowest MCS meets the target at the channel's estimate on some PRB count
        of the share: below it the transmitter is not scheduled, sends nothing."""
        return channel.reaches(self, max(1, math.ceil(share_hz / self._prb_hz - 1e-9)))

    def offset_db(self, link: int) -> float:
        """The outer loop's offset of the link (none: 0)."""
        return 0.0

    def remember(self, link: int, offset_db: float) -> None:
        """Keep the outer loop's offset of the link (none: nothing to keep)."""

    def plan(
        self,
        start_s: float,
        link: int,
        channel: ChannelView,
        share_hz: float,
        remaining_bits: float,
        until_change_s: float,
        u: float,
    ) -> Period:
        """The period starting now on ``share_hz`` over the channel (the transmitter fills the
        share as ``best_use`` says and picks each block's MCS at the channel's estimate minus
        the outer loop's offset), given the bits still to deliver and the time until the
        channel changes: its blocks one by one, drawn from a stream seeded by the uniform
        ``u``."""
        offset_db = self.offset_db(link)
        use, rate_bps = self.best_use(channel, share_hz)
        if rate_bps <= 0.0:  # not reached: nothing sent
            return Period(
                start_s, None, use, channel, self.blocks_per_s(use), 0, 0, 0.0, until_change_s
            )  # fmt: skip
        use = self.choose(channel, share_hz, offset_db)
        blocks_per_s = self.blocks_per_s(use)
        fit = until_change_s * blocks_per_s
        capped = fit > MAX_PLANNED_BLOCKS
        blocks = MAX_PLANNED_BLOCKS if capped else max(1, math.floor(fit))
        trace, first = self._run(link, channel, use, remaining_bits, blocks, u)
        sent, (_, failed, _, _, delivered) = len(trace), trace[-1]
        if delivered >= remaining_bits:  # it ends in the period
            speed_bps = remaining_bits * blocks_per_s / sent
            duration_s = sent / blocks_per_s
        else:
            speed_bps = delivered * blocks_per_s / sent
            duration_s = sent / blocks_per_s if capped else until_change_s
        period = Period(
            start_s, first, use, channel, blocks_per_s, sent, failed, speed_bps, duration_s,
            offset_db,
        )  # fmt: skip
        period.trace = trace
        if capped:  # run it again then, the channel the same
            period.review_s = start_s + duration_s
        return period

    def _run(
        self, link: int, channel: ChannelView, use: Use, remaining_bits: float, blocks: int,
        u: float,
    ) -> tuple[list[tuple[float, int, int, int, int]], Shape]:  # fmt: skip
        """Up to ``blocks`` blocks one by one, until ``remaining_bits`` are delivered (the
        ``high``-PRB ones spread evenly among the others, each on its hop of the placement in
        turn): each block's MCS picked at the estimate minus the offset, its failure drawn at
        the SNR, the offset updated by its feedback. Returns, after each block, (offset,
        failed, sum of MCS, failed bits, delivered bits) so far, and the first block's
        shape."""
        hops = channel.hops
        kinds = [[channel.blocks_of(self, m, hop) for hop in range(hops)] for m in use.sizes]
        extra = use.high_share
        draw = random.Random(int(u * 2.0**53)).random  # Mersenne Twister: cheap to seed
        bisect_left = bisect.bisect_left
        offset = self.offset_db(link)
        up_db, down_db = self._up_db, self._down_db
        failed = mcs_sum = failed_bits = delivered = 0
        trace, first = [], None
        for k in range(blocks):
            bigger = int((k + 1) * extra) - int(k * extra) if extra else 0
            shapes, floors, shift, failure, lowest = kinds[bigger][k % hops]
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

    def bits_table(self, most: int) -> np.ndarray:
        """The expected information bits of a block on m = 1..``most`` PRBs (rows) at each SNR
        per PRB of the curves' grid (columns): the MCS it picks there (the highest whose
        threshold the SNR meets, no outer loop) times 1 − its failure probability; 0 below
        the lowest MCS. Rows are added as larger counts are asked for."""
        known = len(self._bits)
        if known < most:
            rows = [self._bits_row(prbs) for prbs in range(known + 1, most + 1)]
            self._bits = np.vstack([self._bits, *rows])
        return self._bits

    def _bits_row(self, prbs: int) -> np.ndarray:
        shapes = self.shapes(prbs)
        if not shapes:
            return np.zeros(len(GRID_SNR_DB))
        met = self.thresholds_db(prbs)[:, None] <= GRID_SNR_DB[None, :]  # (shapes, grid)
        picked = met.argmax(axis=0)  # the highest MCS meeting it (highest first)
        bits = np.array([shape.bits for shape in shapes], dtype=float)[picked]
        delivered = bits * (1.0 - self.failure_table(prbs)[picked, np.arange(met.shape[1])])
        return np.where(met.any(axis=0), delivered, 0.0)

    def subband_rates_bps(self, per_prb_snr: np.ndarray, subband_prbs: np.ndarray) -> np.ndarray:
        """The rate it delivers on average on each subband alone (the expected bits of
        ``bits_table`` per slot) at these SNRs per PRB (linear, the power it has on each): a
        frequency-domain scheduler's metric."""
        with np.errstate(divide="ignore"):  # an SNR of 0: the grid's bottom
            steps = snr_steps(10.0 * np.log10(per_prb_snr))
        counts = subband_prbs.astype(int)
        table = self.bits_table(int(counts.max()))
        return table[counts - 1, steps] / self.settings.slot_s

    def thresholds_upto(self, most: int) -> np.ndarray:
        """``thresholds_db`` of 1..``most`` PRBs, one row each (every count has the same
        MCSs: those of the table with a curve)."""
        known = len(self._threshold_rows)
        if known < most:
            rows = [self.thresholds_db(prbs) for prbs in range(known + 1, most + 1)]
            self._threshold_rows = np.vstack([*self._threshold_rows, *rows])
        return self._threshold_rows[:most]

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


# What a period's blocks see of the channel, per block size (and hop): its shapes (highest MCS
# first), the floors and shift that pick the MCS at an outer-loop offset (the first index where
# floors[i] >= offset + shift), each shape's failure probability, and the lowest's index.
Blocks = tuple[tuple[Shape, ...], list[float], float, list[float], int]


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
