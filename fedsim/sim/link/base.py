"""What every link model is: the rate a transmitter picks at an SNR, and the transmissions
it runs (``transmission.RadioLink`` subclasses). A model is chosen once, when the radio is
built from its settings (``settings.build()``); nothing else asks which model is active."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

from fedsim.sim.transmission import Channel, RadioLink


class LinkModel(ABC):
    """A link model: how fast a transmitter gets bits through a channel, and what is lost."""

    name: ClassVar[str]
    peak_bits_per_hz: float = math.inf  # a cap on the spectral efficiency, if the model has one
    prb_hz: float = math.nan  # its resource block's width, if it has resource blocks

    def usable_hz(self, bandwidth_hz: float) -> float:
        """The part of a carrier of bandwidth_hz that carries data (all of it, unless the
        model has resource blocks and guard bands)."""
        return bandwidth_hz

    @abstractmethod
    def rate_bps(self, bandwidth_hz: float, snr: float, direction: int) -> float:
        """The rate a transmitter gets on bandwidth_hz at a steady SNR (linear, over that
        band): a scheduler's metric and the planning rate."""

    @abstractmethod
    def transmission(
        self, radio: Channel, direction: int, receivers: Sequence[int], power_w: float,
        *, peer: int = -1, site: int = 0,
    ) -> RadioLink:  # fmt: skip
        """A new transmission to the receivers (``transmission.RadioLink``'s arguments)."""


@dataclass(frozen=True)
class Shannon:
    """Shannon's b·min(log2(1 + SNR/Γ), cap) with an SNR gap Γ and a spectral-efficiency cap:
    the rate of the models without transport blocks. ``floor_snr``: the SNR never counts as
    below it (the lowest scheme a transmitter keeps sending at, not knowing)."""

    snr_gap_db: float = 0.0
    max_bits_per_hz: float = math.inf
    floor_snr: float = 0.0

    def rate_bps(self, bandwidth_hz: float, snr: float) -> float:
        snr = max(snr, self.floor_snr)
        return bandwidth_hz * min(math.log2(1.0 + snr / self._gap), self.max_bits_per_hz)

    @cached_property
    def _gap(self) -> float:
        return 10.0 ** (self.snr_gap_db / 10.0)
