"""Over-the-air aggregation's physical layer: who transmits in an aggregation slot, at what
power, for how long, and how much noise the base station adds (plain numbers, no torch).

Broadband analog aggregation (BAA; Zhu, Wang, Huang, IEEE TWC 2020): the participants of a
round transmit their updates as analog amplitudes on the whole uplink band at the same time,
and the base station receives their superposition plus noise. Each transmitter inverts its
channel (truncated channel inversion) so every signal arrives at one receive power ρ₀:
client k with channel power gain g_k (path loss, shadowing and fading) transmits at
p_k = ρ₀ / g_k per unit-power symbol, which its power limit P_k allows only when
g_k ≥ g_th,k = ρ₀ / P_k; below it the client does not transmit this round (its update is
lost). fedsim sets ρ₀ by the receive SNR it asks for, SNR₀ = ρ₀ / (F·N0·B), so the
threshold reads: a client transmits when its SNR at full power on the whole band reaches
SNR₀. A higher SNR₀ gives a cleaner sum from fewer transmitters: BAA's trade-off between
update reliability and truncation.

Model assumptions (BAA's, and OBDA's): perfect channel knowledge at the transmitters and
perfect synchronization (signals add coherently); the channel a transmitter inverts is the
one at the slot's start and holds for the slot; complex baseband at the Nyquist rate, so a
band of B Hz carries B complex symbols a second, two real values each: a slot for d real
values lasts d / (2B) seconds, whatever the number of transmitters. Packing two unit-power
reals into one complex symbol of unit power, the estimate of the sum of the transmitted reals
(received sum over √ρ₀) carries Gaussian noise of variance 1 / SNR₀ on every real value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

AGGREGATION_MODES = ("digital", "aircomp", "obda")


def slot_s(num_reals: int, bandwidth_hz: float) -> float:
    """Seconds an analog slot of ``num_reals`` real values takes on ``bandwidth_hz``: two real
    values per complex channel use, B channel uses a second."""
    if bandwidth_hz <= 0:
        raise ValueError(f"bandwidth must be positive, got {bandwidth_hz}")
    return num_reals / (2.0 * bandwidth_hz)


@dataclass(frozen=True)
class AirSlot:
    """One aggregation slot's physics: who transmits and at what power.

    ``gains``: each candidate's channel power gain now (linear); ``max_power_w``: its power
    limit; ``receive_power_w``: ρ₀; ``noise_w``: F·N0·B on the band.
    """

    clients: tuple[int, ...]
    gains: tuple[float, ...]
    max_power_w: tuple[float, ...]
    receive_power_w: float
    noise_w: float

    @classmethod
    def at_snr(
        cls,
        clients: Sequence[int],
        gains: Sequence[float],
        max_power_w: Sequence[float],
        receive_snr: float,
        noise_w: float,
    ) -> AirSlot:
        """The slot whose every transmitter arrives at ``receive_snr`` (linear) over noise."""
        if receive_snr <= 0 or noise_w <= 0:
            raise ValueError("the receive SNR and the noise power must be positive")
        return cls(
            tuple(clients), tuple(map(float, gains)), tuple(map(float, max_power_w)),
            receive_snr * noise_w, noise_w,
        )  # fmt: skip

    @property
    def receive_snr(self) -> float:
        """SNR₀ = ρ₀ / (F·N0·B): each transmitter's signal over the receiver's noise."""
        return self.receive_power_w / self.noise_w

    def threshold(self, index: int) -> float:
        """g_th of the candidate at ``index``: the least gain its power limit inverts."""
        return self.receive_power_w / self.max_power_w[index]

    def transmits(self, index: int) -> bool:
        """Truncated channel inversion: whether the candidate's gain reaches its g_th.
        (Written as p·g ≥ ρ₀, the same test without a division's rounding.)"""
        return self.gains[index] * self.max_power_w[index] >= self.receive_power_w

    @property
    def transmitters(self) -> list[int]:
        """The candidates that transmit, in the order given."""
        return [c for i, c in enumerate(self.clients) if self.transmits(i)]

    def power_w(self, index: int, symbol_power: float = 1.0) -> float:
        """The candidate's transmit power when its symbols have mean power ``symbol_power``
        (at most 1): ρ₀·symbol_power / g_k, within its limit when it transmits; 0 when not."""
        if not self.transmits(index):
            return 0.0
        return min(self.receive_power_w * symbol_power / self.gains[index], self.max_power_w[index])

    @property
    def sum_noise_std(self) -> float:
        """The noise standard deviation on each real value of the received sum, in units of
        one transmitter's unit-power signal: 1 / √SNR₀."""
        return 1.0 / math.sqrt(self.receive_snr)
