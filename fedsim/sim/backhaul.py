"""The backhaul: each base-station site's wired link to the core, where the cloud server is.

Every site has one link of rate_bps each way (full duplex) and a latency_s before a
transfer's first bit arrives. ``shared`` (the default, as a real link): the transfers a site
has in flight in one direction share its rate fairly (processor sharing, as TCP flows do),
so a site forwarding the uploads of all its clients forwards them more slowly than one. Not
shared: every transfer gets the whole rate, latency_s + 8 S / rate_bps whatever else is in
flight (a link provisioned far beyond the radio it serves). Both directions are logged
(``backhaul_up``: a site to the cloud, ``backhaul_down``: the cloud to a site), so their
bytes and transmissions are counted apart from the radio's. Sites never go offline; a
transfer is cut only when the work it serves is (its client's task interrupted), and then its
bytes so far are wasted.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence

import simpy

from fedsim.sim.events import EventLog
from fedsim.sim.medium import DedicatedMedium, Medium, SharedMedium


class Backhaul:
    """Every site's link to the cloud: one rate and latency for all of them."""

    def __init__(
        self,
        env: simpy.Environment,
        log: EventLog,
        rate_bps: float,
        latency_s: float,
        *,
        shared: bool = True,
    ) -> None:
        if not rate_bps > 0:
            raise ValueError(f"backhaul rate must be positive, got {rate_bps}")
        if not latency_s >= 0:
            raise ValueError(f"backhaul latency must be >= 0, got {latency_s}")
        self.env = env
        self.log = log
        self.rate_bps = rate_bps
        self.latency_s = latency_s
        self.shared = shared
        self._links: dict[tuple[int, bool], Medium] = {}  # (site, up) -> its link that way

    def transfer_s(self, num_bytes: int) -> float:
        """Seconds one transfer of num_bytes takes alone on a link, either way."""
        return self.latency_s + 8.0 * num_bytes / self.rate_bps

    def _link(self, site: int, up: bool) -> Medium:
        link = self._links.get((site, up))
        if link is None:
            env = self.env
            link = SharedMedium(env, self.rate_bps) if self.shared else DedicatedMedium(env)
            self._links[(site, up)] = link
        return link

    def send(
        self, sites: Sequence[int], num_bytes: int, *, up: bool, round_index: int | None = None
    ) -> Generator[simpy.Event, None, None]:
        """Process body: num_bytes from each of the sites to the cloud (``up``) or from the
        cloud to each, all started now; returns when every one has arrived."""
        direction = "backhaul_up" if up else "backhaul_down"
        sending = []
        for site in sites:
            transfer = self.log.transfer_start(
                direction, num_bytes, None, (), round_index, site=site
            )
            link = self._link(site, up)
            flow = link.start(num_bytes, self.rate_bps, setup_s=self.latency_s)
            flow.done.callbacks.append(
                lambda _, transfer=transfer: self.log.transfer_end(transfer, ())
            )
            sending.append((link, flow, transfer))
        try:
            yield self.env.all_of([flow.done for _, flow, _ in sending])
        except simpy.Interrupt as stop:  # the work this transfer served was cut
            for link, flow, transfer in sending:
                if not flow.done.triggered:
                    self.log.transfer_abort(transfer, link.cancel(flow), reason=str(stop.cause))
            raise
