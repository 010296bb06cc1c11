"""Messages relayed by plane-mates over the ring's inter-satellite links (FedISL's intra-plane
relaying, Razmi et al.): a satellite's message to the server, or the server's to it, goes hop
by hop along its plane's ring, either way round, to or from the plane-mate whose pass
delivers it first, stored at each satellite until its next link opens (store and forward).

Each link carries bits only inside its windows and is FIFO (a message started later never
arrives sooner: ``PassLink.arrival_s``), so the earliest arrival over the ring is Dijkstra's
on the time-dependent graph, searched once when the message is sent, over the windows the
orbits give ahead (``fedsim.sim.orbits``): a hop's time is its ISL's capacity over the bits
plus d/c, the last leg a mate's pass link's. Then the route runs leg by leg on the event
clock, each leg a transfer of the log (ISL legs as ``d2d``, their bytes sent traffic), so
a message costs as many wake-ups as it has legs and no loop waits by ticking.

Each message is routed on its own, as the direct links give each satellite its own beam: a
model the server sends to several satellites of a plane crosses a shared first leg once per
addressee (no forwarder keeps one copy for its mates), and concurrent legs of one link do
not share its capacity (``PassMedium``: every flow on its own link).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Generator, Mapping, Sequence

import simpy

from fedsim.sim.orbits import NeverVisible
from fedsim.sim.passes import PassLink, SatelliteNetwork

Hop = Callable[[int, int, float], float]
"""When a message held by one satellite at a time reaches a neighbour."""


def earliest_arrivals(
    sources: Mapping[int, float],
    neighbours: Callable[[int], Sequence[int]],
    hop: Hop,
    settle: Callable[[int, float], bool] = lambda _sat, _time_s: True,
) -> tuple[dict[int, float], dict[int, int]]:
    """Earliest arrival at every satellite reachable from ``sources`` (satellite -> when it
    holds the message) over FIFO links, and each one's predecessor on its route (absent
    for a source that holds the message first by itself). ``settle(sat, time_s)`` hears each
    satellite's earliest arrival, in time order; False: relay nothing on from it. Ties keep
    the route found first."""
    arrival = dict(sources)
    before: dict[int, int] = {}
    heap = sorted((time_s, sat) for sat, time_s in sources.items())
    settled: set[int] = set()
    while heap:
        time_s, sat = heapq.heappop(heap)
        if sat in settled:
            continue
        settled.add(sat)
        if not settle(sat, time_s):
            continue
        for mate in neighbours(sat):
            if mate in settled:
                continue
            try:
                reach_s = hop(sat, mate, time_s)
            except NeverVisible:  # that ISL never opens again: no route through it
                continue
            if reach_s < arrival.get(mate, math.inf):
                arrival[mate] = reach_s
                before[mate] = sat
                heapq.heappush(heap, (reach_s, mate))
    return arrival, before


def route_to(sat: int, before: Mapping[int, int]) -> list[int]:
    """The satellites from the route's source to ``sat``."""
    route = [sat]
    while route[-1] in before:
        route.append(before[route[-1]])
    return route[::-1]


class PlaneRelayNetwork(SatelliteNetwork):
    """A constellation's network whose server messages take the plane's fastest route; a
    message its own pass delivers first goes direct, exactly as without relaying."""

    def __init__(self, *args, planes: Sequence[Sequence[int]], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._ring: dict[int, list[int]] = {}
        self._plane_of: dict[int, Sequence[int]] = {}
        for members in planes:
            count = len(members)
            for k, sat in enumerate(members):
                self._plane_of[sat] = members
                mates = {members[(k - 1) % count], members[(k + 1) % count]} - {sat}
                self._ring[sat] = sorted(mates)
        self.messages = self.relayed = self.hops = 0  # for the summary's relay block

    def _hop(self, bits: float) -> Hop:
        return lambda a, b, start_s: self.satellites.isl(a, b).arrival_s(start_s, bits)

    def upload_route(self, client: int, bits: float, start_s: float) -> tuple[list[int], float]:
        """The satellites from ``client`` to the one whose pass delivers its message first,
        and when it arrives. A satellite reached no sooner than the best delivery so far
        relays nothing on: it cannot beat it."""
        best = [math.inf, client]  # arrival, the satellite whose pass delivers it

        def settle(sat: int, time_s: float) -> bool:
            if time_s >= best[0]:
                return False
            try:
                arrive_s = self.satellites.uplinks[sat].arrival_s(time_s, bits)
            except NeverVisible:  # it never sees a node again, but may still relay
                return True
            if arrive_s < best[0]:
                best[:] = [arrive_s, sat]
            return True

        _, before = earliest_arrivals(
            {client: start_s}, self._ring.__getitem__, self._hop(bits), settle
        )
        if math.isinf(best[0]):
            raise NeverVisible(f"satellite {client}'s plane sees no server node within reach")
        return route_to(best[1], before), best[0]

    def download_route(self, client: int, bits: float) -> list[int]:
        """The satellites from the one whose pass the server's message, sent now, reaches
        first to ``client``."""
        now, sources = self.env.now, {}
        for sat in self._plane_of[client]:
            try:
                sources[sat] = self.satellites.downlinks[sat].arrival_s(now, bits)
            except NeverVisible:
                continue
        if not sources:
            raise NeverVisible(f"satellite {client}'s plane sees no server node")
        _, before = earliest_arrivals(
            sources, self._ring.__getitem__, self._hop(bits), lambda sat, _t: sat != client
        )
        return route_to(client, before)

    def upload(
        self, client: int, num_bytes: int, *, to_site: int | None = None
    ) -> Generator[simpy.Event, None, tuple[list[int], float]]:
        route, _ = self.upload_route(client, 8.0 * num_bytes, self.env.now)
        return self._relayed_upload(client, num_bytes, route)

    def _relayed_upload(
        self, client: int, num_bytes: int, route: list[int]
    ) -> Generator[simpy.Event, None, tuple[list[int], float]]:
        self._count(route)
        relayed_for = client if len(route) > 1 else None
        air_s = yield from self._hops(route, num_bytes, relayed_for)
        mate = route[-1]
        reached, air = yield from self._transfer(
            self._passes, "uplink", mate, (), num_bytes, self.satellites.uplinks[mate], 0.0,
            relayed_for,
        )  # fmt: skip
        return reached, air_s + air

    def _beam(
        self, client: int, num_bytes: int, delivered: simpy.Event
    ) -> Generator[simpy.Event, None, None]:
        """One satellite's copy (of a model, or of a peer's message the ground relays): down
        at the pass of the mate it reaches first, then along the ring."""
        route = self.download_route(client, 8.0 * num_bytes)
        self._count(route)
        requested_s, first = self.env.now, route[0]
        relayed_for = client if len(route) > 1 else None
        reached, air_s = yield from self._transfer(
            self._passes, "downlink", None, [first], num_bytes, self.satellites.downlinks[first],
            0.0, relayed_for,
        )  # fmt: skip
        if not reached:
            return
        air_s += yield from self._hops(route, num_bytes, relayed_for)
        delivered.succeed((self.env.now - requested_s - air_s, air_s))

    def _hops(
        self, route: list[int], num_bytes: int, relayed_for: int | None
    ) -> Generator[simpy.Event, None, float]:
        """Process body: the message along ``route``'s ISLs; returns their air time."""
        air_s = 0.0
        for sender, receiver in zip(route, route[1:], strict=False):
            link: PassLink = self.satellites.isl(sender, receiver)
            _, air = yield from self._transfer(
                self._passes, "d2d", sender, [receiver], num_bytes, link, 0.0, relayed_for
            )
            air_s += air
        return air_s

    def _count(self, route: list[int]) -> None:
        self.messages += 1
        self.relayed += len(route) > 1
        self.hops += len(route) - 1
