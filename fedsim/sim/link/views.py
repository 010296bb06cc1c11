"""What a period of the ``harq`` link sees of the channel (``adaptation.ChannelView``): the SNR
a block on m PRBs meets, and the MCS it picks there, flat across the band (``FlatSnr``) or per
subband with the PRBs it holds (``SubbandSnr``, EESM); and the rates on each PRB count that
decide how a transmitter fills its share (``adaptation.PrbRates``), worked out once per channel,
power and placement, vectorised over the counts."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from fedsim.sim.bler import GRID_SNR_DB, snr_step, snr_steps
from fedsim.sim.link.adaptation import Blocks, Harq, PrbRates
from fedsim.sim.link.eesm import eesm, eesm_rows
from fedsim.sim.link.placement import Placement


def _db(prbs: int) -> float:
    """10 log10(prbs): how much lower the SNR is over prbs PRBs than over one."""
    return 10.0 * math.log10(prbs)


@dataclass(slots=True)
class FlatSnr:
    """A channel flat across the band: the block's SNR and the transmitter's estimate of it,
    over one PRB with the whole power on it (a block on m PRBs has 1/m of it on each).
    ``power_db``: with power control, the power sent on m PRBs (index m − 1) over that power,
    dB (None: the same power on any count); ``fills``: it sends on its whole share (a base
    station), else on the PRB count link adaptation picks."""

    snr_db: float
    estimate_db: float
    power_db: np.ndarray | None = None
    fills: bool = False
    _rates: dict[float, PrbRates] = field(default_factory=dict)  # per outer-loop offset
    hops: ClassVar[int] = 1

    def _offset_db(self, prbs: int) -> float:
        """The SNR per PRB of a block on ``prbs`` PRBs over that of one PRB, dB."""
        if self.power_db is None:
            return -_db(prbs)
        return float(self.power_db[min(prbs, len(self.power_db)) - 1]) - _db(prbs)

    def blocks_of(self, harq: Harq, prbs: int, hop: int = 0) -> Blocks:
        shapes = harq.shapes(prbs)
        offset_db = self._offset_db(prbs)
        step = snr_step(self.snr_db + offset_db)
        failure = [shape.failure[step] for shape in shapes]
        shift = -(self.estimate_db + offset_db)  # the MCS meeting the target at the estimate
        return shapes, harq.floors_of(prbs), shift, failure, len(shapes) - 1

    def reaches(self, harq: Harq, most: int) -> bool:
        rates = self.rates(harq, most)
        return bool((rates.bits[most - 1] if self.fills else rates.peak[most - 1]) > 0.0)

    def rates(self, harq: Harq, most: int, offset_db: float = 0.0) -> PrbRates:
        rates = self._rates.get(offset_db)
        if rates is None or len(rates.bits) < most:
            counts = np.arange(1, most + 1)
            snr_db = self.estimate_db - offset_db - 10.0 * np.log10(counts)
            if self.power_db is not None:  # beyond the band (a scheduler's look-ahead): its last
                snr_db = snr_db + self.power_db[np.minimum(counts, len(self.power_db)) - 1]
            bits = harq.bits_table(most)[counts - 1, snr_steps(snr_db)]
            rates = _kept(self._rates, offset_db, PrbRates.of(bits))
        return rates


@dataclass
class SubbandSnr:
    """A frequency-selective channel: each receiver's SNR per PRB on each subband (linear, the
    whole power on one PRB), the block's and the estimate's, and the PRBs a block holds on
    each subband (``placement``, per count and hop). A block on m PRBs has 1/m of the power on
    each (``power_db`` as ``FlatSnr``'s); its effective SNR for an MCS is the EESM over its
    PRBs with that MCS's β (``eesm``), and a multicast's is its weakest receiver's, MCS by MCS.
    Flat gains give the flat SNR."""

    snr: tuple[np.ndarray, ...]  # per receiver
    estimate: tuple[np.ndarray, ...]
    placement: Placement
    power_db: np.ndarray | None = None
    fills: bool = False  # as ``FlatSnr``'s
    _effective_db: dict = field(default_factory=dict, compare=False, repr=False)
    _rates: dict[float, PrbRates] = field(default_factory=dict, compare=False, repr=False)

    @property
    def hops(self) -> int:
        return self.placement.hops

    def effective_db(self, harq: Harq, prbs: int, hop: int = 0, *, estimate: bool) -> np.ndarray:
        """Per shape on ``prbs`` PRBs (highest MCS first), the effective SNR of its blocks at
        the hop [dB] on the channel (or at the estimate), computed once per period."""
        if estimate and self.estimate is self.snr:
            estimate = False  # perfect CSI: the same numbers
        key = (prbs, hop, estimate)
        effective_db = self._effective_db.get(key)
        if effective_db is None:
            betas = harq.betas_of(prbs)
            weights = self.placement.weights(prbs, hop)
            scale = 1.0 / prbs
            if self.power_db is not None:
                scale *= 10.0 ** (float(self.power_db[min(prbs, len(self.power_db)) - 1]) / 10.0)
            snrs = self.estimate if estimate else self.snr
            effective = eesm(snrs[0] * scale, weights, betas)
            for snr in snrs[1:]:
                effective = np.minimum(effective, eesm(snr * scale, weights, betas))
            with np.errstate(divide="ignore"):  # an SNR of 0: -inf dB, below every threshold
                effective_db = self._effective_db[key] = 10.0 * np.log10(effective)
        return effective_db

    def blocks_of(self, harq: Harq, prbs: int, hop: int = 0) -> Blocks:
        shapes = harq.shapes(prbs)
        true_db = self.effective_db(harq, prbs, hop, estimate=False)
        estimate_db = self.effective_db(harq, prbs, hop, estimate=True)
        floors = (-np.minimum.accumulate(harq.thresholds_db(prbs) - estimate_db)).tolist()
        table = harq.failure_table(prbs)
        failure = table[np.arange(len(shapes)), snr_steps(true_db)].tolist()
        return shapes, floors, 0.0, failure, len(shapes) - 1

    def reaches(self, harq: Harq, most: int) -> bool:
        """Whether the lowest MCS meets the target at the estimate (on the curves' grid) on
        some PRB count up to ``most``, at some hop, for its first receiver."""
        lowest_db = harq.thresholds_upto(most)[:, -1]
        betas = harq.betas_of(1)[-1:]
        counts = slice(most - 1, most) if self.fills else slice(None)  # the whole share only
        return any(
            (
                lowest_db[counts]
                <= GRID_SNR_DB[snr_steps(self._effective_upto(most, hop, betas)[counts])]
            ).any()
            for hop in range(self.hops)
        )

    def rates(self, harq: Harq, most: int, offset_db: float = 0.0) -> PrbRates:
        """Per PRB count, the bits a block delivers at its first receiver's estimate less
        ``offset_db`` (a multicast puts its weakest first), over the hops in turn: the MCS of
        the highest shape whose threshold its effective SNR meets (on the curves' grid), times
        1 − its failure probability there. Every count's EESM at once."""
        rates = self._rates.get(offset_db)
        if rates is None or len(rates.bits) < most:
            bits = np.zeros(most)
            thresholds_db = harq.thresholds_upto(most)  # (counts, shapes)
            for hop in range(self.hops):
                effective_db = self._effective_upto(most, hop, harq.betas_of(1))
                steps = snr_steps(effective_db - offset_db)
                met = thresholds_db <= GRID_SNR_DB[steps]
                picked = met.argmax(axis=1)  # the highest MCS met (highest first)
                for row in np.flatnonzero(met.any(axis=1)).tolist():
                    prbs, shape = row + 1, int(picked[row])
                    failure = harq.failure_table(prbs)[shape, steps[row, shape]]
                    bits[row] += harq.shapes(prbs)[shape].bits * (1.0 - failure) / self.hops
            rates = _kept(self._rates, offset_db, PrbRates.of(bits))
        return rates

    def _effective_upto(self, most: int, hop: int, betas: np.ndarray) -> np.ndarray:
        """Its first receiver's effective SNR at the estimate [dB] of blocks on 1..``most``
        PRBs (rows) for each β (columns)."""
        counts = np.arange(1, most + 1)
        scale = 1.0 / counts
        if self.power_db is not None:
            scale = scale * 10.0 ** (self.power_db[np.minimum(counts, len(self.power_db)) - 1] / 10)
        snr = self.estimate[0][None, :] * scale[:, None]
        effective = eesm_rows(snr, self.placement.weights_upto(most, hop), betas)
        with np.errstate(divide="ignore"):  # an SNR of 0: -inf dB, below every threshold
            return 10.0 * np.log10(effective)


def _kept(known: dict[float, PrbRates], offset_db: float, rates: PrbRates) -> PrbRates:
    """Keep a view's rates at an offset (the last few: the loop moves between periods)."""
    if len(known) > 4:
        known.clear()
    known[offset_db] = rates
    return rates
