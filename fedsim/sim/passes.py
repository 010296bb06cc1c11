"""Transfers over links that exist only during passes: store and forward on the event clock.

A satellite's link to the server's nodes (ground stations, a platform, a MEO node) or to
another satellite carries bits only inside its visibility windows (``fedsim.sim.orbits``), at
a rate that follows the geometry over each pass (the link budget of ``fedsim.sim.ntn`` on the
slant range, sampled every ``segment_s`` and held over the segment). A transfer started out of
sight waits for the next pass; one that a pass's end cuts keeps the bits it sent and goes on at
the next pass (store and forward, as DTN bundles do); its last bit reaches the far end d/c
later, d the range then. A transfer is one SimPy wake-up: its end is found by inverting the
link's cumulative capacity, so the events are bounded by transfers, never by time steps.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
import simpy

from fedsim.sim.events import EventLog
from fedsim.sim.medium import Flow, Medium
from fedsim.sim.network import Network
from fedsim.sim.ntn import propagation_delay_s
from fedsim.sim.orbits import DAY_S, MAX_WAIT_S, NeverVisible

Windows = Callable[[float], list[tuple[float, float]]]
"""Merged windows of a link up to at least a time."""
Rates = Callable[[np.ndarray], np.ndarray]
"""bit/s of a link at times inside its windows."""


@dataclass
class WindowStats:
    """What one pass carried."""

    start_s: float
    end_s: float
    bits: float = 0.0


@dataclass
class PassLink:
    """One direction of a link: its windows, its rate over them, and what it carried.

    ``ranges(times)`` gives the distance (m) to the far end, for the propagation delay."""

    windows: Windows
    rates: Rates
    ranges: Rates
    segment_s: float = 5.0
    _curves: dict[tuple[float, float], tuple[np.ndarray, np.ndarray]] = field(
        default_factory=dict, repr=False
    )
    carried: dict[float, WindowStats] = field(default_factory=dict)
    waiting_s: float = 0.0  # transfers' time out of sight, summed
    transfers: int = 0

    def curve(self, window: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
        """(segment edges, bits from the window's start to each edge)."""
        cached = self._curves.get(window)
        if cached is None:
            start, end = window
            count = max(1, math.ceil((end - start) / self.segment_s))
            edges = np.linspace(start, end, count + 1)
            rates = np.maximum(self.rates(0.5 * (edges[:-1] + edges[1:])), 0.0)
            cached = edges, np.concatenate([[0.0], np.cumsum(rates * np.diff(edges))])
            self._curves[window] = cached
        return cached

    def _bits_to(self, window: tuple[float, float], time_s: float) -> float:
        edges, cumulative = self.curve(window)
        return float(np.interp(time_s, edges, cumulative))

    def _in_window(self, window: tuple[float, float], bits: float) -> float:
        """The time at which the window has carried ``bits`` from its start."""
        edges, cumulative = self.curve(window)
        i = min(int(np.searchsorted(cumulative, bits, side="left")), len(edges) - 1)
        if i == 0:
            return float(edges[0])
        span = cumulative[i] - cumulative[i - 1]
        share = (bits - cumulative[i - 1]) / span if span > 0 else 1.0
        return float(edges[i - 1] + min(max(share, 0.0), 1.0) * (edges[i] - edges[i - 1]))

    def _windows_from(self, time_s: float) -> Generator[tuple[float, float], None, None]:
        """The windows that end after ``time_s``, in order, as far as needed; NeverVisible
        when none opens within MAX_WAIT_S of the last one (or of ``time_s``)."""
        horizon_s, since_s, index = time_s + DAY_S, time_s, None
        while True:
            windows = self.windows(horizon_s)
            if index is None:
                index = bisect.bisect_right(windows, (time_s, math.inf))
                if index and windows[index - 1][1] > time_s:
                    index -= 1
            while index < len(windows):
                window = windows[index]
                index += 1
                since_s = window[1]
                yield window
            if horizon_s - since_s > MAX_WAIT_S:
                raise NeverVisible(
                    f"no pass within {MAX_WAIT_S / DAY_S:g} days of t = {since_s:g} s"
                )
            horizon_s += DAY_S

    def finish(self, start_s: float, bits: float) -> tuple[float, float]:
        """(when the last of ``bits`` sent from ``start_s`` leaves, when the first leaves)."""
        first_s = None
        for window in self._windows_from(start_s):
            begin = max(start_s, window[0])
            done = self._bits_to(window, begin)
            available = self._bits_to(window, window[1]) - done
            if available > 0 and first_s is None:
                first_s = begin
            if available >= bits:
                return self._in_window(window, done + bits), first_s
            bits -= available
        raise AssertionError("unreachable")  # pragma: no cover

    def delay_s(self, time_s: float) -> float:
        """d/c to the far end at ``time_s``."""
        return float(propagation_delay_s(self.ranges(np.array([time_s]))[0]))

    def arrival_s(self, start_s: float, bits: float) -> float:
        """When the last of ``bits`` sent from ``start_s`` reaches the far end."""
        last_bit_s, _ = self.finish(start_s, bits)
        return last_bit_s + self.delay_s(last_bit_s)

    def carried_between(self, start_s: float, end_s: float) -> float:
        """Bits the link can carry from ``start_s`` to ``end_s`` (noted per window)."""
        total = 0.0
        for window in self._windows_from(start_s):
            if window[0] >= end_s:
                break
            begin, stop = max(start_s, window[0]), min(end_s, window[1])
            bits = self._bits_to(window, stop) - self._bits_to(window, begin)
            total += bits
        return total

    def note(self, start_s: float, end_s: float, bits: float) -> None:
        """A transfer ran from ``start_s`` to ``end_s`` and sent ``bits``: add them to the
        passes that carried them, and its time out of sight to the waiting."""
        self.transfers += 1
        left, visible_s = bits, 0.0
        for window in self._windows_from(start_s):
            if window[0] >= end_s:
                break
            begin, stop = max(start_s, window[0]), min(end_s, window[1])
            visible_s += max(stop - begin, 0.0)
            sent = min(left, self._bits_to(window, stop) - self._bits_to(window, begin))
            if sent > 0:
                stats = self.carried.setdefault(window[0], WindowStats(*window))
                stats.bits += sent
                left -= sent
        self.waiting_s += max(end_s - start_s - visible_s, 0.0)


class PassFlow(Flow):
    """A flow whose progress is its link's capacity since it started."""

    __slots__ = ("link", "begin_s", "last_bit_s")

    def bytes_sent(self) -> float:
        now = self._env.now
        if self.done.triggered or self.cancelled:
            return super().bytes_sent()
        if now <= self.begin_s:
            return 0.0
        bits = self.link.carried_between(self.begin_s, min(now, self.last_bit_s))
        return min(bits, 8.0 * self.num_bytes) / 8.0


class PassMedium(Medium):
    """Every flow on its own link (a beam per satellite, each ISL its own terminal)."""

    def __init__(self, env: simpy.Environment) -> None:
        super().__init__(env)
        self._flows: set[PassFlow] = set()

    @property
    def active(self) -> int:
        return len(self._flows)

    def start(self, num_bytes: int, link: PassLink, setup_s: float = 0.0) -> Flow:  # type: ignore[override]
        flow = PassFlow(self, num_bytes, math.inf, self._arrivals, setup_s)
        self._arrivals += 1
        flow.link, flow.begin_s = link, self.env.now + setup_s
        last_bit_s, first_bit_s = link.finish(flow.begin_s, 8.0 * num_bytes)
        flow.last_bit_s = last_bit_s
        flow.served_s = first_bit_s if first_bit_s is not None else flow.begin_s
        self._flows.add(flow)
        end_s = last_bit_s + link.delay_s(last_bit_s)
        self._wake_at(end_s - self.env.now, lambda _event: self._complete(flow))
        return flow

    def note_unfinished(self) -> None:
        """Note the transfers still waiting for a pass or on the air (at the run's end) up to
        now, in the order they started: their bits so far and their time out of sight."""
        now = self.env.now
        for flow in sorted(self._flows, key=lambda f: f._seq):
            if flow.begin_s < now:
                flow.link.note(flow.begin_s, min(now, flow.last_bit_s), 8.0 * flow.bytes_sent())

    def _admit(self, flow: Flow) -> None:  # pragma: no cover - start() admits itself
        raise NotImplementedError

    def _complete(self, flow: PassFlow) -> None:
        if flow in self._flows:
            self._flows.remove(flow)
            flow.link.note(flow.begin_s, flow.last_bit_s, 8.0 * flow.num_bytes)
            flow._finish()

    def _withdraw(self, flow: PassFlow) -> float:  # type: ignore[override]
        sent = flow.bytes_sent()
        self._flows.remove(flow)
        flow.link.note(flow.begin_s, min(self.env.now, flow.last_bit_s), 8.0 * sent)
        flow._cancelled = True
        flow._bits = 8.0 * sent
        return sent


@dataclass
class SatelliteLinks:
    """Each satellite's links: up to the server's nodes, down from them, and the ISLs; the
    carriers up and down (for the Doppler shifts reported)."""

    uplinks: Sequence[PassLink]
    downlinks: Sequence[PassLink]
    isls: dict[tuple[int, int], PassLink]
    min_delay_s: float
    peak_bps: float
    uplink_carrier_hz: float
    downlink_carrier_hz: float

    def isl(self, a: int, b: int) -> PassLink:
        return self.isls[min(a, b), max(a, b)]


class SatelliteNetwork(Network):
    """The network of a constellation: satellites (the clients) reach the server only over
    their passes, the downlink reaches each satellite at its own pass (a beam per
    satellite), and peers talk over their inter-satellite link when it has line of sight as
    the message starts (a window's end then holds the rest for the next one) or, without
    one, through the ground (up at one pass, down at the receiver's): an ISL pair out of
    sight, perhaps for good, is no route."""

    def __init__(
        self,
        env: simpy.Environment,
        links: SatelliteLinks,
        *,
        log: EventLog,
        is_online: Callable[[int], bool],
        graph: nx.Graph | None,
        visible_peers: Callable[[int, float], list[int]],
    ) -> None:
        super().__init__(env, {}, log=log, is_online=is_online, graph=graph)
        self.satellites = links
        self.visible_peers = visible_peers
        self._passes = PassMedium(env)

    def upload(
        self, client: int, num_bytes: int, *, to_site: int | None = None
    ) -> Generator[simpy.Event, None, tuple[list[int], float]]:
        link = self.satellites.uplinks[client]
        return self._transfer(self._passes, "uplink", client, (), num_bytes, link, 0.0)

    def send_down(
        self, clients: Sequence[int], num_bytes: int, *, site: int | None = None
    ) -> dict[int, simpy.Event]:
        delivered = {client: self.env.event() for client in clients}
        for client in clients:
            self.env.process(self._beam(client, num_bytes, delivered[client]))
        return delivered

    def _beam(
        self, client: int, num_bytes: int, delivered: simpy.Event
    ) -> Generator[simpy.Event, None, None]:
        """One satellite's copy, at its pass: the wait for the pass counts as its queue."""
        requested_s = self.env.now
        link = self.satellites.downlinks[client]
        reached, air_s = yield from self._transfer(
            self._passes, "downlink", None, [client], num_bytes, link, 0.0
        )
        if reached:
            delivered.succeed((self.env.now - requested_s - air_s, air_s))

    def send_peer(
        self, sender: int, receiver: int, num_bytes: int
    ) -> Generator[simpy.Event, None, simpy.Event]:
        delivered = self.env.event()
        if receiver in self.visible_peers(sender, self.env.now):  # an ISL in sight now
            link = self.satellites.isl(sender, receiver)
            reached, _ = yield from self._transfer(
                self._passes, "d2d", sender, [receiver], num_bytes, link, 0.0
            )
            if reached:
                delivered.succeed()
            return delivered
        yield from self.upload(sender, num_bytes)
        self.env.process(self._beam(receiver, num_bytes, delivered))
        return delivered

    def note_unfinished(self) -> None:
        """Count the transfers the run's end leaves waiting or on the air (``PassMedium``)."""
        self._passes.note_unfinished()

    def peers(self, client: int) -> list[int]:
        """The satellite's ISL neighbours in line of sight now: the graph at a time is who
        sees whom."""
        return self.visible_peers(client, self.env.now)

    def uplink_time_s(self, client: int, num_bytes: int) -> float:
        """In sight at the link's peak rate (the wait for a pass not counted)."""
        return self.fastest_transfer_s(client, num_bytes, downlink=False)

    def fastest_transfer_s(self, client: int, num_bytes: int, *, downlink: bool) -> float:
        return self.satellites.min_delay_s + 8.0 * num_bytes / self.satellites.peak_bps

    def group_downlink_time_s(self, clients: Sequence[int], num_bytes: int) -> float:
        return self.fastest_transfer_s(0, num_bytes, downlink=True)

    def sites_of(self, clients: Sequence[int]) -> list[int]:
        return [0]
