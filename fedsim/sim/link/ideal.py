"""``ideal``: Shannon's rate on the band share, nothing lost (the default of a radio)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fedsim.sim.link.base import LinkModel, Shannon
from fedsim.sim.transmission import UPLINK, Channel, Outcome, RadioLink


@dataclass(frozen=True)
class IdealSettings:
    shannon: Shannon = Shannon()

    def build(self) -> Ideal:
        return Ideal(self.shannon)


class Ideal(LinkModel):
    """Every transfer gets through at Shannon's rate of its weakest receiver."""

    name = "ideal"

    def __init__(self, shannon: Shannon) -> None:
        self.shannon = shannon
        self.peak_bits_per_hz = shannon.max_bits_per_hz

    def rate_bps(self, bandwidth_hz: float, snr: float, direction: int) -> float:
        return self.shannon.rate_bps(bandwidth_hz, snr)

    def transmission(
        self, radio: Channel, direction: int, receivers: Sequence[int], power_w: float,
        *, peer: int = -1, site: int = 0,
    ) -> RadioLink:  # fmt: skip
        return IdealTransmission(radio, direction, list(receivers), power_w, peer, site)


class IdealTransmission(RadioLink):
    """At the rate of the weakest receiver; every receiver online at the end gets it."""

    def speed_bps(self, bandwidth_hz: float, remaining_bits: float) -> float:
        state = self._powered(bandwidth_hz)
        return self.radio.rate_bps(bandwidth_hz, min(state.values()) / bandwidth_hz)

    def outcome(self, attempt: int, is_online: Callable[[int], bool]) -> Outcome:
        got = [r for r in self.receivers if is_online(r)]
        return Outcome(got, logged=[] if self.direction == UPLINK else got)
