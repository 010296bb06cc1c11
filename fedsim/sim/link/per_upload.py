"""``per_upload``: Chen et al. (TWC 2021): each upload is lost whole, once, with
q = 1 − exp(−m/SNR) at the SNR it started at (its first block, on the share it had then), not
retried: the round goes on without it. With an SINR threshold, Yang et al. (TCOM 2020)'s rule
instead: lost iff that SINR (other cells' interference included) is below it. Downlink and
D2D are ideal."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fedsim.sim.draws import UPLOAD, hashed_uniform
from fedsim.sim.link.base import Shannon
from fedsim.sim.link.ideal import Ideal, IdealTransmission
from fedsim.sim.medium import TransmissionLost
from fedsim.sim.transmission import UPLINK, Channel, Outcome, RadioLink


@dataclass(frozen=True)
class PerUploadSettings:
    waterfall_m: float = 10.0 ** (0.023 / 10.0)  # m, linear
    sinr_threshold: float | None = None  # decoded iff SINR >= this (linear)
    shannon: Shannon = Shannon()

    def build(self) -> PerUpload:
        return PerUpload(self)


class PerUpload(Ideal):
    """The ideal link, but an upload may be lost whole when it ends."""

    name = "per_upload"

    def __init__(self, settings: PerUploadSettings) -> None:
        super().__init__(settings.shannon)
        self.settings = settings

    def transmission(
        self, radio: Channel, direction: int, receivers: Sequence[int], power_w: float,
        *, peer: int = -1, site: int = 0,
    ) -> RadioLink:  # fmt: skip
        link = PerUploadTransmission(radio, direction, list(receivers), power_w, peer, site)
        link.model = self
        return link

    def upload_lost(self, link: PerUploadTransmission) -> bool:
        """Whether the upload is lost: one draw against q at its first SNR, or its SINR
        against the threshold."""
        snr = link.first_snr
        threshold = self.settings.sinr_threshold
        if threshold is not None:
            return snr < threshold
        q = 1.0 - math.exp(-self.settings.waterfall_m / snr) if snr > 0 else 1.0
        [client] = link.receivers
        return hashed_uniform(link.radio.key, UPLOAD, client, link.transmission_of(client)) < q


class PerUploadTransmission(IdealTransmission):
    model: PerUpload
    first_snr: float = 0.0  # the SNR its first block started at

    def speed_bps(self, bandwidth_hz: float, remaining_bits: float) -> float:
        rate_bps = super().speed_bps(bandwidth_hz, remaining_bits)
        if not self.first_snr:
            self.first_snr = min(self._powered(bandwidth_hz).values()) / bandwidth_hz
        return rate_bps

    def outcome(self, attempt: int, is_online: Callable[[int], bool]) -> Outcome:
        if self.direction != UPLINK or not self.model.upload_lost(self):
            return super().outcome(attempt, is_online)
        [client] = self.receivers
        self.radio.stats[client].outages += 1
        self.radio.stats[client].given_up += 1
        lost = TransmissionLost(
            "upload lost to a packet error (per_upload: not retried)", known=True
        )
        return Outcome([], lost_reason="packet_error", lost=lost)
