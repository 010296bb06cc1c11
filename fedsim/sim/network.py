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

With a ``radio`` (``fedsim.sim.radio``) the rates come from the channel instead: the uplink
band is split equally among the uploads in progress (``equal``), in fixed sub-bands
(``fixed``) or given to one upload at a time (``tdma``); the base station sends on the whole
downlink band, a multicast at its weakest member's SNR; each D2D transfer has its own D2D band.
A transfer whose receiver loses a block to outage is wasted (a multicast: for the members that
lost it) and sent again, up to ``max_retransmissions`` times; then it is given up, and the
sender's task ends without delivering (``TransmissionLost``): the server learns of it only by
its own policy, as when a client leaves.

With several cells the server sits behind every site's backhaul (``fedsim.sim.backhaul``): an
upload goes on from its site, a downlink comes to the sites first. An edge server at a site
(hierarchical FL) takes uploads there (``upload(..., to_site=s)``) and sends from its site's
transmitter (``send_down(..., site=s)``), each site its own. A client whose edge is at another
site than the one serving it is relayed: the two sites exchange its traffic over the
backhaul, up to the core and down.

A sender that goes offline interrupts its transfer: the bytes it had put on the air are
logged as wasted. The base station never goes offline; a receiver that is offline when a
transmission ends simply does not get it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Collection, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import networkx as nx
import simpy

from fedsim.sim.backhaul import Backhaul
from fedsim.sim.band import ChannelMedium, ScheduledMedium
from fedsim.sim.events import EventLog
from fedsim.sim.medium import (
    DedicatedMedium,
    FifoMedium,
    Flow,
    Medium,
    SharedMedium,
    TransmissionLost,
)
from fedsim.sim.radio import Radio
from fedsim.sim.scheduler import UplinkScheduling, make_scheduler, num_prbs, prb_hz
from fedsim.sim.topology import neighbours, peer_route
from fedsim.sim.transmission import UPLINK, RadioLink

UPLINK_MEDIA = ("parallel", "tdma", "shared")
UPLINK_SHARING = ("equal", "fixed", "tdma")
DOWNLINK_MODES = ("broadcast", "unicast")


class AirEnergy(Protocol):
    """What the network tells the energy model (``fedsim.world.energy.DeviceEnergy`` is one)."""

    def on_air(self, flow: Flow, sender: int | None, receivers: Sequence[int]) -> list: ...

    def off_air(self, draws: list, *, lost: Collection[int], tx_lost: bool) -> None: ...


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
        radio: Radio | None = None,
        uplink_sharing: str | UplinkScheduling = "equal",
        uplink_subbands: int = 1,
        latency_s: float = 0.0,
    ) -> None:
        """Without ``radio``, ``links`` give each client's rates; with it, they come from the
        channel and the uplink band is shared by ``uplink_sharing``."""
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
        self.radio = radio
        self.latency_s = latency_s  # with the radio (without, each Link has its own)
        self.air_energy: AirEnergy | None = None  # set by the World when energy is counted
        self.backhaul: Backhaul | None = None  # every site's link to the server (several cells)
        if radio is not None:
            self._radio_media(radio, uplink_sharing, uplink_subbands)
            return
        self._uplink: Medium | ChannelMedium = {
            "parallel": lambda: DedicatedMedium(env),
            "tdma": lambda: FifoMedium(env),
            "shared": lambda: SharedMedium(env, cell_capacity_bps),
        }[uplink_medium]()
        self._transmitter: Medium = FifoMedium(env)
        self._d2d: Medium = DedicatedMedium(env)

    def _radio_media(
        self, radio: Radio, uplink_sharing: str | UplinkScheduling, uplink_subbands: int
    ) -> None:
        """The uplink band of every site (each cell reuses it), the downlink transmitter and
        the D2D links. Other cells' uploads re-rate a cell's uploads (interference)."""
        settings, env = radio.settings, self.env
        self._uplinks = [
            self._uplink_band(radio, uplink_sharing, uplink_subbands)
            for _ in range(radio.num_sites)
        ]
        self._uplink = self._uplinks[0]
        if isinstance(uplink_sharing, UplinkScheduling):
            radio.prb_seconds = self._prb_seconds
        if radio.num_sites > 1:
            radio.on_interference_change = self._interference_changed
        usable_hz = radio.link.usable_hz
        self._transmitter = ChannelMedium(
            env, usable_hz(settings.downlink_bandwidth_hz), slots=1, split=False
        )
        cells = settings.cells
        if cells is not None:
            self.backhaul = Backhaul(
                env, self.log, cells.backhaul_bps, cells.backhaul_latency_s,
                shared=cells.backhaul_shared,
            )  # fmt: skip
        # Each site's own transmitter, for an edge server there (made when first used).
        self._site_transmitters: dict[int, ChannelMedium] = {}
        self._d2d = ChannelMedium(
            env, usable_hz(settings.d2d_bandwidth_hz), slots=None, split=False
        )

    def _uplink_band(
        self, radio: Radio, uplink_sharing: str | UplinkScheduling, uplink_subbands: int
    ) -> ChannelMedium:
        bandwidth_hz = radio.settings.uplink_bandwidth_hz
        if isinstance(uplink_sharing, UplinkScheduling):
            spacing_khz = uplink_sharing.subcarrier_spacing_khz
            scheduler = make_scheduler(uplink_sharing.scheduler, uplink_sharing.pf_beta)
            return ScheduledMedium(
                self.env, num_prbs(bandwidth_hz, spacing_khz), prb_hz(spacing_khz), scheduler,
                uplink_sharing.period_s, user_of=lambda link: link.receivers[0],
                power_aware=uplink_sharing.power_aware, subbands=radio.subband_grid(UPLINK),
            )  # fmt: skip
        if uplink_sharing not in UPLINK_SHARING:
            raise ValueError(f"uplink_sharing must be one of {UPLINK_SHARING}")
        slots = {"equal": None, "fixed": uplink_subbands, "tdma": 1}[uplink_sharing]
        usable_hz = radio.link.usable_hz(bandwidth_hz)
        return ChannelMedium(
            self.env, usable_hz, slots=slots, split=uplink_sharing == "equal",
            prb_hz=radio.link.prb_hz,
        )  # fmt: skip

    def _prb_seconds(self) -> dict[int, float]:
        """PRB·seconds each client's uploads got, over every site's band."""
        given: dict[int, float] = {}
        for band in self._uplinks:
            if isinstance(band, ScheduledMedium):
                band.bank_prb_time()
                for client, prb_s in band.prbs_given.items():
                    given[client] = given.get(client, 0.0) + prb_s
        return given

    def _interference_changed(self) -> None:
        for medium in self._uplinks:
            medium.rerate_soon()

    @property
    def uplink_bands(self) -> list[ChannelMedium]:
        """Each site's uplink band (with the radio)."""
        return self._uplinks

    def site_transmitter(self, site: int) -> ChannelMedium:
        """The site's downlink transmitter (an edge server's): the whole downlink band, one
        transmission at a time, independent of the other sites'."""
        medium = self._site_transmitters.get(site)
        if medium is None:
            medium = self._site_transmitters[site] = ChannelMedium(
                self.env, self._transmitter.bandwidth_hz, slots=1, split=False
            )
        return medium

    def sites_of(self, clients: Sequence[int]) -> list[int]:
        """The sites these clients were last attached to, ascending (site 0 without cells):
        where the server's downlink to them goes over the backhaul."""
        if self.radio is None:
            return [0]
        return sorted({self.radio.attached_site(client) for client in clients})

    def uplink_time_s(self, client: int, num_bytes: int) -> float:
        """Alone on its link; with the radio, on the share of the band one upload gets, at
        the SNR without fading (a model: the real rate follows the channel)."""
        if self.radio is not None:
            share_hz = self._uplink.share_alone_hz()
            rate_bps = self.radio.nominal_rate_bps(False, [client], share_hz)
            return transfer_time_s(num_bytes, rate_bps, self.latency_s) if rate_bps else math.inf
        link = self.links[client]
        return transfer_time_s(num_bytes, link.uplink_bps, link.latency_s)

    def fastest_transfer_s(self, client: int, num_bytes: int, *, downlink: bool) -> float:
        """A lower bound of the time one transfer to (``downlink``) or from the client takes:
        alone on its link at its rate (an upload within the shared cell's capacity); with the
        radio, on the whole band at the highest scheme where ``max_bits_per_hz`` caps the
        spectral efficiency, else the latency alone (a fade can give any rate)."""
        if self.radio is not None:
            settings = self.radio.settings
            band_hz = settings.downlink_bandwidth_hz if downlink else settings.uplink_bandwidth_hz
            peak_bps = band_hz * self.radio.link.peak_bits_per_hz
            return self.latency_s + (8.0 * num_bytes / peak_bps if math.isfinite(peak_bps) else 0)
        link = self.links[client]
        rate_bps = link.downlink_bps if downlink else link.uplink_bps
        if not downlink and isinstance(self._uplink, SharedMedium):
            rate_bps = min(rate_bps, self._uplink.capacity_bps)
        return transfer_time_s(num_bytes, rate_bps, link.latency_s)

    def group_downlink_time_s(self, clients: Sequence[int], num_bytes: int) -> float:
        """One multicast to the group, at its slowest member's rate (with the radio: at the
        weakest member's SNR without fading)."""
        if self.radio is not None:
            band_hz = self._transmitter.bandwidth_hz
            rate_bps = self.radio.nominal_rate_bps(True, clients, band_hz)
            return transfer_time_s(num_bytes, rate_bps, self.latency_s) if rate_bps else math.inf
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
        rate: float | Callable[[Sequence[int]], RadioLink],
        latency_s: float,
        relayed_for: int | None = None,
    ) -> Generator[simpy.Event, None, tuple[list[int], float]]:
        """Process body of one transfer; returns the receivers online when it ended and its
        air time (from getting the medium to the last bit: set-up included, queue not).

        ``rate``: bit/s, or with the radio the channel of each attempt to the receivers that
        still miss it; an attempt lost to outage is sent again (see the module docstring).
        ``relayed_for``: the client whose message this leg of a relayed route carries.
        """
        pending, reached, air_s = list(receivers), [], 0.0
        for attempt in itertools.count():
            transfer = self.log.transfer_start(
                direction, num_bytes, sender, pending, self.round_index, relayed_for=relayed_for
            )
            channel = rate(pending) if callable(rate) else rate
            flow = medium.start(num_bytes, channel, setup_s=latency_s)
            energy = self.air_energy
            listening = [r for r in pending if self.is_online(r)] if energy else []
            air = energy.on_air(flow, sender, listening) if energy else None
            try:
                yield flow.done
            except simpy.Interrupt as stop:
                if flow.done.triggered:  # it ended (or its radio link failed) this instant
                    sent = float(num_bytes) if flow.done.ok else flow.bytes_sent()
                else:
                    sent = medium.cancel(flow)
                resent = 0
                if isinstance(channel, RadioLink):
                    channel.finish()
                    resent = channel.resent_bytes
                self.log.transfer_abort(
                    transfer, sent, reason=str(stop.cause), retransmitted=resent
                )
                if air is not None:
                    energy.off_air(air, lost=listening, tx_lost=True)
                raise
            except TransmissionLost:  # every receiver's radio link failed (harq)
                channel.finish()
                self.radio.note_attempt(channel, 0.0, self.env.now - flow.served_s, attempt)
                channel.note_blocks()
                resent = channel.resent_bytes
                self.log.transfer_abort(
                    transfer, flow.bytes_sent(), reason="radio link failure", retransmitted=resent
                )
                if air is not None:
                    energy.off_air(air, lost=listening, tx_lost=True)
                raise
            air_s += self.env.now - flow.served_s
            if not isinstance(channel, RadioLink):
                got, retry, tx_lost = [r for r in receivers if self.is_online(r)], None, 0.0
                self.log.transfer_end(transfer, got)
            else:
                try:
                    got, retry, tx_lost = self._after_attempt(transfer, flow, channel, attempt)
                except TransmissionLost:  # the link model gave the transfer up: radios off
                    if air is not None:
                        energy.off_air(air, lost=listening, tx_lost=True)
                    raise
            reached.extend(got)
            if air is not None:  # the sender's joules are wasted if nobody got its bits
                missed = [r for r in listening if r not in got]
                nobody = bool(pending) and not got
                energy.off_air(air, lost=missed, tx_lost=1.0 if nobody else tx_lost)
            if retry is None:
                return reached, air_s
            pending = retry
        raise AssertionError("unreachable")  # pragma: no cover

    def _after_attempt(
        self, transfer: int, flow: Flow, channel: RadioLink, attempt: int
    ) -> tuple[list[int], list[int] | None, float]:
        """Log a radio attempt's outcome (its link model's, ``RadioLink.outcome``); returns
        the receivers that decoded it, those of the retry (the base station: []) or None when
        there is none, and the share of the sender's joules wasted.

        Raises TransmissionLost when the link model gives the transfer up."""
        channel.finish()
        self.radio.note_attempt(
            channel, 8.0 * flow.num_bytes, self.env.now - flow.served_s, attempt
        )
        outcome = channel.outcome(attempt, self.is_online)
        if outcome.lost_reason is not None:
            self.log.transfer_abort(transfer, float(flow.num_bytes), reason=outcome.lost_reason)
        else:
            self.log.transfer_end(transfer, outcome.logged, retransmitted=outcome.resent_bytes)
        if outcome.lost is not None:
            raise outcome.lost
        return outcome.got, outcome.retry, outcome.wasted

    def upload(
        self, client: int, num_bytes: int, *, to_site: int | None = None
    ) -> Generator[simpy.Event, None, tuple[list[int], float]]:
        """Process body: the client sends num_bytes to the base station; returns ([], its air
        time), so the time spent queueing for the medium is the rest of the call. With
        several cells its site forwards it over the backhaul to the server, or to the edge
        server at ``to_site`` (nothing to forward when that is its own site).

        Returns the transfer's generator itself rather than wrapping it: one generator frame
        fewer to resume at every event of the upload.
        """
        if self.radio is not None:
            radio = self.radio
            site = radio.serving_site(client)
            transfer = self._transfer(
                self._uplinks[site], "uplink", client, (), num_bytes,
                lambda _: radio.uplink(client, site), self.latency_s,
            )  # fmt: skip
            if self.backhaul is None or to_site == site:
                return transfer
            return self._then_backhaul(transfer, num_bytes, site, to_site)
        link = self.links[client]
        return self._transfer(
            self._uplink, "uplink", client, (), num_bytes, link.uplink_bps, link.latency_s
        )

    def _then_backhaul(
        self,
        transfer: Generator[simpy.Event, None, tuple[list[int], float]],
        num_bytes: int,
        site: int,
        to_site: int | None,
    ) -> Generator[simpy.Event, None, tuple[list[int], float]]:
        """The upload, then its site forwards it to the server (or through the core to the
        edge server at ``to_site``)."""
        result = yield from transfer
        yield from self.backhaul.send([site], num_bytes, up=True, round_index=self.round_index)
        if to_site is not None:
            yield from self.backhaul.send(
                [to_site], num_bytes, up=False, round_index=self.round_index
            )
        return result

    def send_down(
        self, clients: Sequence[int], num_bytes: int, *, site: int | None = None
    ) -> dict[int, simpy.Event]:
        """Start sending the same payload to every client of the group: from the server
        (over the backhaul to their sites first, with several cells), or from an edge server
        at ``site``: on that site's own transmitter to the clients it serves, through the
        core and their own site's transmitter to the others.

        Returns per-client delivery events; a client offline at the end of its
        transmission misses it (its event never fires). An event's value is (seconds the
        client's transmission waited for the transmitter since this call, its air time).
        """
        delivered = {client: self.env.event() for client in clients}
        if site is not None and self.backhaul is not None:
            by_site: dict[int, list[int]] = {}
            for client in clients:  # those served by other sites are relayed
                by_site.setdefault(self.radio.attached_site(client), []).append(client)
            for serving, members in sorted(by_site.items()):
                groups = self._groups(members)
                self.env.process(self._relayed(site, serving, groups, num_bytes, delivered))
            return delivered
        self.env.process(self._transmit(self._groups(clients), num_bytes, delivered))
        return delivered

    def _groups(self, clients: Sequence[int]) -> list[list[int]]:
        return [list(clients)] if self.downlink_mode == "broadcast" else [[c] for c in clients]

    def _relayed(
        self,
        site: int,
        serving: int,
        groups: list[list[int]],
        num_bytes: int,
        delivered: dict[int, simpy.Event],
    ) -> Generator[simpy.Event, None, None]:
        """An edge server's transmission to clients the site ``serving`` serves: through the
        core to that site first when it is not the edge's own."""
        requested_s = self.env.now
        if serving != site:
            for hop, up in ((site, True), (serving, False)):
                yield from self.backhaul.send([hop], num_bytes, up=up, round_index=self.round_index)
        yield from self._transmit(groups, num_bytes, delivered, serving, requested_s)

    def _transmit(
        self,
        groups: list[list[int]],
        num_bytes: int,
        delivered: dict[int, simpy.Event],
        site: int | None = None,
        requested_s: float | None = None,
    ) -> Generator[simpy.Event, None, None]:
        """Send to each group in turn; a receiver's wait is counted from ``requested_s``
        (default: now)."""
        requested_s = self.env.now if requested_s is None else requested_s
        transmitter = self._transmitter
        if site is not None:  # an edge server's site (several cells)
            transmitter = self.site_transmitter(site)
        elif self.backhaul is not None:  # the server to the sites of the receivers
            sites = self.sites_of([c for group in groups for c in group])
            yield from self.backhaul.send(sites, num_bytes, up=False, round_index=self.round_index)
        for group in groups:
            links: list[RadioLink] = []  # the radio's attempts, to learn whose link failed
            if self.radio is None:
                rate, latency_s = self._group_rate(group)
            else:
                rate, latency_s = self._recorded(links, self.radio.downlink), self.latency_s
            try:
                reached, air_s = yield from self._transfer(
                    transmitter, "downlink", None, group, num_bytes, rate, latency_s
                )
            except TransmissionLost as lost:  # every member's radio link failed
                for client in group:
                    _fail(delivered[client], lost)
                continue
            queued_s = self.env.now - air_s - requested_s
            for client in reached:
                delivered[client].succeed((queued_s, air_s))
            for link in links:  # members dropped on the way: they know, and their server
                for client in link.dropped - set(reached):
                    _fail(delivered[client], TransmissionLost("radio link failure", known=True))

    @staticmethod
    def _recorded(
        links: list[RadioLink], make: Callable[[Sequence[int]], RadioLink]
    ) -> Callable[[Sequence[int]], RadioLink]:
        def link(receivers: Sequence[int]) -> RadioLink:
            links.append(made := make(receivers))
            return made

        return link

    def peers(self, client: int) -> list[int]:
        """The client's D2D neighbours now (the graph's), ascending."""
        return neighbours(self.graph, client)

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
            radio = self.radio
            rate = route.rate_bps if radio is None else lambda _: radio.d2d(sender, receiver)
            reached, _ = yield from self._transfer(
                self._d2d, "d2d", sender, [receiver], num_bytes, rate, route.latency_s
            )
            if reached:
                delivered.succeed()
            return delivered
        yield from self.upload(sender, num_bytes)
        self.env.process(self._transmit([[receiver]], num_bytes, {receiver: delivered}))
        return delivered


def _fail(arrival: simpy.Event, lost: TransmissionLost) -> None:
    """A receiver's delivery that will not come: whoever waits for it learns why; nobody
    waiting is fine (defused: the simulation goes on)."""
    if not arrival.triggered:
        arrival.defused = True
        arrival.fail(lost)
