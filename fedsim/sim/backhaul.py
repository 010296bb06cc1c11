"""The backhaul: each base-station site's wired link to the core, where the cloud server is.

A transfer of S bytes between a site and the cloud takes latency_s + 8 S / rate_bps, whichever
way it goes. The link is provisioned per transfer (fibre far faster than the radio it serves):
transfers do not queue for it or share it, so a site forwarding several uploads at once
forwards each in that time. Both directions are logged (``backhaul_up``: a site to the cloud,
``backhaul_down``: the cloud to a site), so their bytes and transmissions are counted apart
from the radio's. Sites never go offline: a backhaul transfer always arrives.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass

import simpy

from fedsim.sim.events import EventLog


@dataclass(frozen=True)
class Backhaul:
    """Every site's link to the cloud: one rate and latency for all of them."""

    env: simpy.Environment
    log: EventLog
    rate_bps: float
    latency_s: float

    def __post_init__(self) -> None:
        if not self.rate_bps > 0:
            raise ValueError(f"backhaul rate must be positive, got {self.rate_bps}")
        if not self.latency_s >= 0:
            raise ValueError(f"backhaul latency must be >= 0, got {self.latency_s}")

    def transfer_s(self, num_bytes: int) -> float:
        """Seconds one transfer of num_bytes takes, either way."""
        return self.latency_s + 8.0 * num_bytes / self.rate_bps

    def send(
        self, sites: Sequence[int], num_bytes: int, *, up: bool, round_index: int | None = None
    ) -> Generator[simpy.Event, None, None]:
        """Process body: num_bytes from each of the sites to the cloud (``up``) or from the
        cloud to each, all at once (one transfer per site, none waits for another)."""
        direction = "backhaul_up" if up else "backhaul_down"
        transfers = [
            self.log.transfer_start(direction, num_bytes, None, (), round_index, site=site)
            for site in sites
        ]
        yield self.env.timeout(self.transfer_s(num_bytes))
        for transfer in transfers:
            self.log.transfer_end(transfer, ())
