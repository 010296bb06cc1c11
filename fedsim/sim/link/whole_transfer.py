"""``whole_transfer``: fedsim's first loss rule, kept as a pessimistic stress test.

A transfer is one codeword: it is in *outage* for a receiver when, in any block it spans, that
receiver's SNR is below the threshold (the lowest scheme cannot be decoded; the transmitter
keeps sending at that scheme's rate, not knowing), or, with Chen et al.'s packet-error law,
with probability q = 1 − exp(−m / SNR) per block. The receiver cannot decode it: its bytes are
wasted and it is sent again, up to ``max_retransmissions`` times; then it is given up (an
upload or D2D message fails, a multicast's losers miss it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fedsim.sim.draws import OUTAGE, hashed_uniform
from fedsim.sim.link.base import LinkModel, Shannon
from fedsim.sim.medium import TransmissionLost
from fedsim.sim.transmission import DOWNLINK, UPLINK, Channel, Outcome, RadioLink


@dataclass(frozen=True)
class Outage:
    """When a block is lost: SNR below a threshold, or Chen et al.'s packet-error law."""

    model: str = "threshold"  # threshold | packet_error
    snr_threshold_db: float = 0.0
    waterfall_m: float = 0.023  # packet_error: q = 1 − exp(−m / SNR)
    max_retransmissions: int = 3


@dataclass(frozen=True)
class WholeTransferSettings:
    outage: Outage = Outage()
    shannon: Shannon = Shannon()

    def build(self) -> WholeTransfer:
        return WholeTransfer(self.outage, self.shannon)


class WholeTransfer(LinkModel):
    """Shannon's rate (floored at the threshold's: the lowest scheme), a transfer lost whole
    for a receiver when any block it spans is lost."""

    name = "whole_transfer"

    def __init__(self, outage: Outage, shannon: Shannon) -> None:
        self.outage = outage
        self._threshold = 10.0 ** (outage.snr_threshold_db / 10.0)  # linear
        floor = self._threshold if outage.model == "threshold" else 0.0
        self.shannon = Shannon(shannon.snr_gap_db, shannon.max_bits_per_hz, floor)
        self.peak_bits_per_hz = shannon.max_bits_per_hz

    def rate_bps(self, bandwidth_hz: float, snr: float, direction: int) -> float:
        return self.shannon.rate_bps(bandwidth_hz, snr)

    def block_is_lost(self, key: int, snr: float, *counters: int) -> bool:
        outage = self.outage
        if outage.model == "threshold":
            return snr < self._threshold
        q = 1.0 - math.exp(-outage.waterfall_m / snr) if snr > 0 else 1.0
        return hashed_uniform(key, OUTAGE, *counters) < q

    def transmission(
        self, radio: Channel, direction: int, receivers: Sequence[int], power_w: float,
        *, peer: int = -1, site: int = 0,
    ) -> RadioLink:  # fmt: skip
        link = WholeTransferTransmission(radio, direction, list(receivers), power_w, peer, site)
        link.model = self
        return link


class WholeTransferTransmission(RadioLink):
    """Notes, at each block it spans, which receivers lose it; goes on at the rate of the
    weakest receiver that can still decode it."""

    model: WholeTransfer

    def speed_bps(self, bandwidth_hz: float, remaining_bits: float) -> float:
        radio, model = self.radio, self.model
        snrs = {r: gain_hz / bandwidth_hz for r, gain_hz in self._powered(bandwidth_hz).items()}
        for receiver, snr in snrs.items():
            if receiver in self.missed:
                continue
            entity, _ = self._entity(receiver)
            counters = (self.direction, entity, self._transmission[receiver], self._block)
            if model.block_is_lost(radio.key, snr, *counters):
                self.missed.add(receiver)
        decodable = [snr for r, snr in snrs.items() if r not in self.missed]
        return radio.rate_bps(bandwidth_hz, min(decodable or snrs.values()))

    def outcome(self, attempt: int, is_online: Callable[[int], bool]) -> Outcome:
        """The receivers that lost a block try again (an upload: the whole of it), until the
        retransmissions are used up."""
        lost = sorted(self.missed)
        to_base_station = self.direction == UPLINK
        got: list[int] = []
        reason = None
        if to_base_station and lost:
            reason = "outage"
        else:
            got = [r for r in self.receivers if r not in self.missed and is_online(r)]
        logged = [] if to_base_station else got
        lost_online = [r for r in lost if to_base_station or is_online(r)]
        wasted = float(to_base_station and bool(lost))
        if not lost_online:
            return Outcome(got, None, wasted, logged, reason)
        if attempt >= self.model.outage.max_retransmissions:
            self.radio.note_given_up(self)
            if self.direction == DOWNLINK:
                return Outcome(got, None, wasted, logged, reason)
            failure = TransmissionLost(f"{self.direction} lost to outage {attempt + 1} times")
            return Outcome(got, None, wasted, logged, reason, lost=failure)
        return Outcome(got, [] if to_base_station else lost_online, wasted, logged, reason)
