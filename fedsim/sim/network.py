"""Wireless links and media between the base station, the clients, and peers.

Every transfer of S bytes on a link of rate R bit/s takes latency_s + 8 S / R when it has
the medium to itself; the latency is a set-up that holds a TDMA slot (or the base
station's transmitter) but takes no share of a shared cell. Uplink media:
- ``parallel``: orthogonal resources (FDMA); every client uploads at its own rate at once.
- ``tdma``: one upload at a time, first come first served.
- ``shared``: processor sharing of a cell capacity among the concurrent uploads (each
  capped by its own link rate), re-split whenever one starts or ends.
Downlink: the base station has one transmitter and sends one transmission at a time.
- ``broadcast``: one transmission reaches a whole group, at the rate of its slowest
  member (a multicast must be decodable by everyone).
- ``unicast``: one copy per receiver, each at that receiver's rate, one after another.
Peers: a D2D edge of the topology (its own rate, independent of other edges), or, when
there is no edge or relaying is asked for, the base station relays (uplink, then downlink).

A sender that goes offline interrupts its transfer: the bytes it had put on the air are
logged as wasted. The base station never goes offline; a receiver that is offline when a
transmission ends simply does not get it.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass

import networkx as nx
import simpy

from fedsim.sim.events import EventLog
from fedsim.sim.medium import DedicatedMedium, FifoMedium, Medium, SharedMedium
from fedsim.sim.topology import peer_route

UPLINK_MEDIA = ("parallel", "tdma", "shared")
DOWNLINK_MODES = ("broadcast", "unicast")


def transfer_time_s(num_bytes: int, rate_bps: float, latency_s: float = 0.0) -> float:
    """Seconds to move num_bytes over a link of rate_bps with a fixed latency."""
    if rate_bps <= 0:
        raise ValueError(f"rate must be positive, got {rate_bps}")
    return latency_s + 8.0 * num_bytes / rate_bps


@dataclass(frozen=True)
class Link:
    """One client's radio link to the base station; downlink = rho * uplink."""

    uplink_bps: float
    downlink_bps: float
    latency_s: float = 0.0


class Network:
    """Times transfers on the SimPy clock and logs them (bytes, waste) in the event log."""

    def __init__(
        self,
        env: simpy.Environment,
        links: Mapping[int, Link],
        *,
        log: EventLog,
        uplink_medium: str = "parallel",
        cell_capacity_bps: float | None = None,
        downlink_mode: str = "broadcast",
        is_online: Callable[[int], bool] = lambda client: True,
        graph: nx.Graph | None = None,
        relay: bool = False,
    ) -> None:
        if uplink_medium not in UPLINK_MEDIA:
            raise ValueError(f"uplink_medium must be one of {UPLINK_MEDIA}, got {uplink_medium!r}")
        if downlink_mode not in DOWNLINK_MODES:
            raise ValueError(f"downlink must be one of {DOWNLINK_MODES}, got {downlink_mode!r}")
        if uplink_medium == "shared" and not cell_capacity_bps:
            raise ValueError("a shared uplink needs cell_capacity_bps")
        self.env = env
        self.links = dict(links)
        self.log = log
        self.downlink_mode = downlink_mode
        self.is_online = is_online
        self.graph = graph
        self.relay = relay
        self.round_index: int | None = None
        self._uplink: Medium = {
            "parallel": lambda: DedicatedMedium(env),
            "tdma": lambda: FifoMedium(env),
            "shared": lambda: SharedMedium(env, cell_capacity_bps),
        }[uplink_medium]()
        self._transmitter = FifoMedium(env)
        self._d2d = DedicatedMedium(env)

    def uplink_time_s(self, client: int, num_bytes: int) -> float:
        link = self.links[client]
        return transfer_time_s(num_bytes, link.uplink_bps, link.latency_s)

    def group_downlink_time_s(self, clients: Sequence[int], num_bytes: int) -> float:
        """One multicast to the group, at its slowest member's rate."""
        rate_bps, latency_s = self._group_rate(clients)
        return transfer_time_s(num_bytes, rate_bps, latency_s)

    def _group_rate(self, clients: Sequence[int]) -> tuple[float, float]:
        rate_bps = min(self.links[c].downlink_bps for c in clients)
        return rate_bps, max(self.links[c].latency_s for c in clients)

    # --- transfers -------------------------------------------------------------------------------

    def _transfer(
        self,
        medium: Medium,
        direction: str,
        sender: int | None,
        receivers: Sequence[int],
        num_bytes: int,
        rate_bps: float,
        latency_s: float,
    ) -> Generator[simpy.Event, None, tuple[list[int], float]]:
        """Process body of one transfer; returns the receivers online when it ended and its
        air time (from getting the medium to the last bit: set-up included, queue not)."""
        transfer = self.log.transfer_start(
            direction, num_bytes, sender, receivers, self.round_index
        )
        flow = medium.start(num_bytes, rate_bps, setup_s=latency_s)
        try:
            yield flow.done
        except simpy.Interrupt as stop:
            sent = float(num_bytes) if flow.done.triggered else medium.cancel(flow)
            self.log.transfer_abort(transfer, sent, reason=str(stop.cause))
            raise
        reached = [r for r in receivers if self.is_online(r)]
        self.log.transfer_end(transfer, reached)
        return reached, self.env.now - flow.served_s

    def upload(
        self, client: int, num_bytes: int
    ) -> Generator[simpy.Event, None, tuple[list[int], float]]:
        """Process body: the client sends num_bytes to the base station; returns ([], its air
        time), so the time spent queueing for the medium is the rest of the call.

        Returns the transfer's generator itself rather than wrapping it: one generator frame
        fewer to resume at every event of the upload.
        """
        link = self.links[client]
        return self._transfer(
            self._uplink, "uplink", client, (), num_bytes, link.uplink_bps, link.latency_s
        )

    def send_down(self, clients: Sequence[int], num_bytes: int) -> dict[int, simpy.Event]:
        """Start sending the same payload to every client of the group.

        Returns per-client delivery events; a client offline at the end of its
        transmission misses it (its event never fires). An event's value is (seconds the
        client's transmission waited for the transmitter since this call, its air time).
        """
        delivered = {client: self.env.event() for client in clients}
        groups = [list(clients)] if self.downlink_mode == "broadcast" else [[c] for c in clients]
        self.env.process(self._transmit(groups, num_bytes, delivered))
        return delivered

    def _transmit(
        self, groups: list[list[int]], num_bytes: int, delivered: dict[int, simpy.Event]
    ) -> Generator[simpy.Event, None, None]:
        requested_s = self.env.now
        for group in groups:
            rate_bps, latency_s = self._group_rate(group)
            reached, air_s = yield from self._transfer(
                self._transmitter, "downlink", None, group, num_bytes, rate_bps, latency_s
            )
            queued_s = self.env.now - air_s - requested_s
            for client in reached:
                delivered[client].succeed((queued_s, air_s))

    def send_peer(
        self, sender: int, receiver: int, num_bytes: int
    ) -> Generator[simpy.Event, None, simpy.Event]:
        """Process body: sender's part of a peer message; returns the delivery event.

        Over a D2D edge the sender is busy until the last bit arrives. When relayed, the
        sender is done once its upload is in; the base station forwards it by itself.
        """
        delivered = self.env.event()
        route = peer_route(self.graph, sender, receiver, self.relay)
        if route.direct:
            reached, _ = yield from self._transfer(
                self._d2d, "d2d", sender, [receiver], num_bytes, route.rate_bps, route.latency_s
            )
            if reached:
                delivered.succeed()
            return delivered
        yield from self.upload(sender, num_bytes)
        self.env.process(self._transmit([[receiver]], num_bytes, {receiver: delivered}))
        return delivered
