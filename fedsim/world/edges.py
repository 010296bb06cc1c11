"""Which edge server each client belongs to (hierarchical FL): one rule per class, chosen
once per run, as the HFL literature varies it.

- ``ServingCell`` (the default): the edge at the site serving the client, which follows its
  handovers (attachment by path loss and shadowing, with hysteresis).
- ``NearestSite``: the edge at the geometrically nearest site (wrap-around distance), whatever
  the shadowing says; a client served by another site reaches its edge through the core.
- ``Balanced``: each edge takes at most ⌈n / sites⌉ of the n present clients, filled nearest
  pair first (all client-site distances ascending; ties by client, then site): the
  count-balanced association of load-aware HFL, recomputed every edge round as clients move,
  come and go.

A client whose edge is not its serving site is relayed: its site and the edge's exchange its
traffic over the backhaul (up to the core and down), as ``fedsim.sim.network`` does.

``EdgeServers`` is the part of the World an edge speaks through: where the edge servers sit,
their clients by the run's association, and the backhaul between them and the cloud.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence
from typing import Protocol

import numpy as np
import simpy
import torch

from fedsim.results.recorder import Recorder
from fedsim.sim.network import Network
from fedsim.sim.radio import Radio
from fedsim.world.tasks import Rounds


class Association(Protocol):
    def members(self, clients: list[int], now_s: float) -> dict[int, list[int]]:
        """Each site's clients among ``clients`` (ascending) now."""

    def destination(self, client: int, selected_by: int, now_s: float) -> int:
        """The edge a client's update goes to when it uploads, having been selected by the
        edge at ``selected_by``."""


class ServingCell:
    """A handed-over client carries its model to the edge of its new cell."""

    def __init__(self, radio: Radio) -> None:
        self._radio = radio

    def members(self, clients: list[int], now_s: float) -> dict[int, list[int]]:
        members: dict[int, list[int]] = {site: [] for site in range(self._radio.num_sites)}
        for client in clients:
            members[self._radio.serving_site(client, now_s)].append(client)
        return members

    def destination(self, client: int, selected_by: int, now_s: float) -> int:
        return self._radio.serving_site(client, now_s)


class _FixedForTheRound:
    """A rule by geometry: the edge that selected a client takes its update (relayed when
    the client is served elsewhere)."""

    def __init__(self, radio: Radio) -> None:
        self._radio = radio

    def destination(self, client: int, selected_by: int, now_s: float) -> int:
        return selected_by


class NearestSite(_FixedForTheRound):
    def members(self, clients: list[int], now_s: float) -> dict[int, list[int]]:
        members: dict[int, list[int]] = {site: [] for site in range(self._radio.num_sites)}
        distances_m = site_distances_m(self._radio, clients, now_s)
        for client, row in zip(clients, distances_m, strict=True):
            members[int(np.argmin(row))].append(client)
        return members


class Balanced(_FixedForTheRound):
    def members(self, clients: list[int], now_s: float) -> dict[int, list[int]]:
        sites = self._radio.num_sites
        members: dict[int, list[int]] = {site: [] for site in range(sites)}
        if not clients:
            return members
        room = math.ceil(len(clients) / sites)
        distances_m = site_distances_m(self._radio, clients, now_s)
        rows, columns = np.unravel_index(np.argsort(distances_m, axis=None, kind="stable"),
                                         distances_m.shape)  # fmt: skip
        placed: set[int] = set()
        for row, site in zip(rows.tolist(), columns.tolist(), strict=True):
            if row not in placed and len(members[site]) < room:
                members[site].append(clients[row])
                placed.add(row)
        for site in members:
            members[site].sort()
        return members


def site_distances_m(radio: Radio, clients: list[int], now_s: float) -> np.ndarray:
    """(clients, sites) distances from each client's position now to every site."""
    positions_m = np.array([radio.position_m(client, now_s) for client in clients])
    return radio.settings.cells.grid.distances_m(positions_m.reshape(-1, 2))


ASSOCIATIONS = {"serving_cell": ServingCell, "nearest_site": NearestSite, "balanced": Balanced}


class EdgeServers:
    """The World's primitives of hierarchical FL (a part of ``World``, which sets what it
    reads): the sites, each edge's clients, the edges' models over the backhaul."""

    env: simpy.Environment
    network: Network
    present: set[int]
    recorder: Recorder
    _rounds: Rounds
    _associations: dict[str, Association]

    @property
    def sites(self) -> list[int]:
        """The base-station sites, where edge servers sit: every site of the cells, or the
        one base station (site 0, where the server is when there are no cells)."""
        radio = self.network.radio
        return list(range(radio.num_sites)) if self.network.backhaul is not None else [0]

    def association(self, rule: str) -> Association:
        """The run's association of clients to edge servers by ``rule`` (``ASSOCIATIONS``)."""
        association = self._associations.get(rule)
        if association is None:
            association = self._associations[rule] = ASSOCIATIONS[rule](self.network.radio)
        return association

    def edge_members(self, rule: str = "serving_cell") -> dict[int, list[int]]:
        """Each site's present clients now by the association ``rule``, ascending (without
        cells, every present client at site 0)."""
        present = sorted(self.present)
        if self.network.backhaul is None:
            return {0: present}
        return self.association(rule).members(present, self.env.now)

    def edge_destination(self, rule: str, client: int, selected_by: int) -> int:
        """The edge a client's update goes to now, selected by the edge at ``selected_by``
        (``fedsim.world.edges``; site 0 without cells)."""
        if self.network.backhaul is None:
            return 0
        return self.association(rule).destination(client, selected_by, self.env.now)

    def over_backhaul(
        self, sites: Sequence[int], *tensors: torch.Tensor, up: bool
    ) -> Generator[simpy.Event, None, None]:
        """Process body: each of the sites sends tensors of these sizes to the cloud (``up``),
        or the cloud sends them to each site, over the backhaul, all at once, as they are (at
        the scenario's precision; codecs are for the radio). Nothing to send without cells:
        the one edge server is where the cloud is."""
        backhaul = self.network.backhaul
        if backhaul is not None and sites:
            nbytes = self.payload_bytes(*tensors)
            started_s = self.env.now
            yield from backhaul.send(sites, nbytes, up=up, round_index=self.round_index)
            self._rounds.stats.backhaul_s += self.env.now - started_s

    def note_cloud_round(self) -> None:
        """The cloud aggregated the edge servers' models (metrics count it)."""
        self.recorder.cloud_rounds += 1
