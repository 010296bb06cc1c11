"""What the radio records per client for radio.csv: its transfers' bits, air time and losses,
and, with the harq link, its transport blocks."""

from __future__ import annotations

from dataclasses import dataclass, field


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


@dataclass
class LinkStats:
    """One client's radio record for radio.csv."""

    uplink_bits: float = 0.0
    uplink_air_s: float = 0.0
    downlink_bits: float = 0.0
    downlink_air_s: float = 0.0
    outages: int = 0
    retransmissions: int = 0
    given_up: int = 0
    blocks: HarqTally = field(default_factory=HarqTally)  # harq: its transport blocks
    uplink_joules: float = 0.0  # radiated (power control: what it used), for radio.csv
    handovers: int = 0
