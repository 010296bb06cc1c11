"""A World's constellation, built from ``system.constellation``: the satellites' links to the
server's nodes and to each other (``fedsim.sim.passes``), and what a run writes of them:
``passes.csv`` (every pass of the run, what it carried, its largest Doppler shifts),
``satellites.csv`` (per satellite: passes per day, contact time, bytes per pass, time spent
waiting for a pass) and the summary's ``constellation`` block."""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from pathlib import Path

import networkx as nx
import numpy as np
import simpy

from fedsim.config.constellation import ConstellationConfig
from fedsim.results.files import PASSES_COLUMNS, PASSES_FILE, SATELLITES_COLUMNS, SATELLITES_FILE
from fedsim.sim import ntn, orbits
from fedsim.sim.events import EventLog
from fedsim.sim.link import HarqSettings
from fedsim.sim.link.adaptation import Harq
from fedsim.sim.link.views import FlatSnr
from fedsim.sim.passes import PassLink, SatelliteLinks, SatelliteNetwork
from fedsim.sim.relay import PlaneRelayNetwork
from fedsim.sim.scheduler import prb_hz
from fedsim.streams import RandomStreams

NR_SPACING_KHZ = {"S": 30.0, "Ka": 120.0}  # NR numerologies of FR1 and FR2


def rate_function(config: ConstellationConfig, bandwidth_hz: float) -> Callable:
    """bit/s from SNR (dB) by the link's rate model."""
    rate = config.link.rate
    if rate.model == "fixed":
        fixed_bps = rate.mbps * 1e6
        return lambda snr_db: np.full(np.shape(snr_db), fixed_bps)
    if rate.model == "shannon":
        cap = rate.max_bits_per_hz or math.inf
        gap = 10.0 ** (rate.gap_db / 10.0)
        return lambda snr_db: (
            bandwidth_hz * np.minimum(np.log2(1.0 + 10.0 ** (np.asarray(snr_db) / 10.0) / gap), cap)
        )
    spacing_khz = NR_SPACING_KHZ[config.link.band]
    settings = HarqSettings(target_bler=rate.target_bler, subcarrier_spacing_khz=spacing_khz)
    harq = Harq(settings, "uplink")
    per_prb_db = 10.0 * math.log10(bandwidth_hz / prb_hz(spacing_khz))
    return lambda snr_db: np.array(
        [
            harq.best_use(_whole_band(float(s) + per_prb_db), bandwidth_hz)[1]
            for s in np.atleast_1d(snr_db)
        ]
    )


def _whole_band(per_prb_snr_db: float) -> FlatSnr:
    """A satellite link's channel as the link layer sees it: flat, its SNR known, sending on
    the whole band at a fixed power per PRB (an NTN link budget fixes the EIRP density, as a
    base station's energy per resource element), not on the fewer PRBs a phone would fill."""
    return FlatSnr(per_prb_snr_db, per_prb_snr_db, fills=True)


class ServerLink:
    """One direction between a satellite and the server's nodes: at each time the best node
    in sight serves it (the highest rate), with TR 38.811's channel to a ground station and
    free space to a platform or a MEO node."""

    def __init__(
        self,
        config: ConstellationConfig,
        contacts: orbits.Contacts,
        satellite: int,
        to_ground: bool,
        key: int,
    ) -> None:
        link = config.link
        self.contacts, self.satellite, self.key = contacts, satellite, key
        self.orbit = contacts.orbits.select([satellite])
        carrier_ghz = link.value("to_ground_ghz" if to_ground else "from_ground_ghz")
        bandwidth_hz = link.value("bandwidth_mhz") * 1e6
        eirp, gt = ("satellite_eirp_dbw", "station_gt_db_per_k") if to_ground else (
            "station_eirp_dbw", "satellite_gt_db_per_k")  # fmt: skip
        self.budget = ntn.LinkBudget(link.value(eirp), link.value(gt), bandwidth_hz)
        self.channels = [
            ntn.GroundChannel(carrier_ghz * 1e9, link.scenario, magnetic_latitude_deg=s.lat_deg)
            if s.kind == "ground" else ntn.FreeSpaceChannel(carrier_ghz * 1e9)
            for s in config.servers
        ]  # fmt: skip
        self.draw_los = link.line_of_sight == "probability"
        self.shadowing = link.shadowing
        self.scenario = link.scenario
        self.rate_of = rate_function(config, bandwidth_hz)
        self.carrier_hz = carrier_ghz * 1e9

    def geometry(self, node: orbits.Node, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(elevation in degrees, range in m) from a node to the satellite at times."""
        sat_m = self.orbit.state(times)[0][0]
        if isinstance(node, orbits.FixedNode):
            elevation, distance = node.geometry(sat_m)
            return np.degrees(elevation), distance
        distance = np.linalg.norm(sat_m - node.position(times), axis=-1)
        return np.full(len(times), 90.0), distance

    def snr_db(self, node_index: int, times: np.ndarray) -> np.ndarray:
        """The link budget's C/N, with the LOS state and shadow fading drawn from a stream
        hashed by (satellite, node, instant): the same channel in every run of a scenario."""
        node = self.contacts.nodes[node_index]
        channel = self.channels[node_index]
        elevation, distance = self.geometry(node, times)
        elevation = np.clip(elevation, 1e-3, 90.0)
        los = np.ones(len(times), dtype=bool)
        shadow = np.zeros(len(times))
        if isinstance(channel, ntn.GroundChannel) and (self.draw_los or self.shadowing):
            draws = np.zeros((len(times), 2))  # (uniform for the LOS state, normal for SF)
            for i, t in enumerate(times):
                rng = np.random.default_rng([self.key, self.satellite, node_index, round(t * 1e3)])
                draws[i] = (rng.random() if self.draw_los else 0.0,
                            rng.standard_normal() if self.shadowing else 0.0)  # fmt: skip
            if self.draw_los:
                los = draws[:, 0] < ntn.los_probability(self.scenario, elevation)
            if self.shadowing:
                shadow = draws[:, 1] * channel.sigma_db(elevation, los)
        loss = channel.mean_loss_db(distance, elevation, los) + shadow
        return self.budget.snr_db(loss)

    def rates(self, times: np.ndarray) -> np.ndarray:
        """bit/s at times: the best node in sight (0 where none is)."""
        best = np.zeros(len(times))
        for node_index in range(len(self.contacts.nodes)):
            visible = self.contacts.in_sight(self.satellite, node_index, times)
            if visible.any():
                rate = self.rate_of(self.snr_db(node_index, times[visible]))
                best[visible] = np.maximum(best[visible], rate)
        return best

    def ranges(self, times: np.ndarray) -> np.ndarray:
        """Distance to the nearest server node, in sight or not: the one in sight with a single
        node; with several, a nearer node below its mask would shorten the delay d/c."""
        distances = np.array([self.geometry(node, times)[1] for node in self.contacts.nodes])
        return distances.min(axis=0)


def build_satellite_network(
    config: ConstellationConfig,
    env: simpy.Environment,
    log: EventLog,
    streams: RandomStreams,
    is_online: Callable[[int], bool],
) -> SatelliteNetwork:
    sat_orbits = config.orbits()
    isl = config.isl
    plane_of = sat_orbits.planes if isinstance(sat_orbits, orbits.CircularOrbits) else [
        0] * sat_orbits.count  # fmt: skip
    members: dict[int, list[int]] = {}
    for sat, plane in enumerate(plane_of):
        members.setdefault(plane, []).append(sat)
    planes = [members[p] for p in sorted(members)]  # each plane's satellites in slot order
    pairs = config.isl_pairs(planes)
    contacts = orbits.Contacts(
        sat_orbits, config.nodes(), pairs,
        isl_grazing_m=isl.grazing_km * 1e3 if isl else 0.0,
        isl_max_range_m=isl.max_range_km * 1e3 if isl and isl.max_range_km else None,
    )  # fmt: skip
    key = streams.integer_seed("constellation")
    segment_s = config.link.segment_s

    def server_link(sat: int, to_ground: bool) -> PassLink:
        link = ServerLink(config, contacts, sat, to_ground, key + (0 if to_ground else 1))
        return PassLink(
            lambda until_s: contacts.windows(sat, until_s), link.rates, link.ranges, segment_s
        )

    uplinks = [server_link(sat, True) for sat in range(sat_orbits.count)]
    downlinks = [server_link(sat, False) for sat in range(sat_orbits.count)]
    isls = {pair: isl_link(config, contacts, pair, segment_s) for pair in pairs}
    graph = None
    if isl is not None:
        graph = nx.Graph()
        graph.add_nodes_from(range(sat_orbits.count))
        graph.add_edges_from(pairs)
    min_altitude_m = min(
        float(np.min(np.linalg.norm(sat_orbits.state(np.array([0.0]))[0], axis=-1)))
        - orbits.EARTH_RADIUS_M,
        1e5,
    )
    links = SatelliteLinks(
        uplinks, downlinks, isls, min_altitude_m / ntn.SPEED_OF_LIGHT_M_S, peak_rate_bps(config),
        config.link.value("to_ground_ghz") * 1e9, config.link.value("from_ground_ghz") * 1e9,
    )  # fmt: skip

    def visible_peers(sat: int, time_s: float) -> list[int]:
        if graph is None:
            return []
        return [p for p in sorted(graph.neighbors(sat)) if contacts.pair_visible(sat, p, time_s)]

    network = SatelliteNetwork(
        env, links, log=log, is_online=is_online, graph=graph, visible_peers=visible_peers
    ) if config.relay == "none" else PlaneRelayNetwork(
        env, links, log=log, is_online=is_online, graph=graph, visible_peers=visible_peers,
        planes=planes,
    )  # fmt: skip
    network.contacts = contacts
    return network


def isl_link(
    config: ConstellationConfig, contacts: orbits.Contacts, pair: tuple[int, int], segment_s: float
) -> PassLink:
    """An inter-satellite link: free space at the ISL's budget (Shannon), or a fixed rate."""
    a, b = pair
    isl = config.isl
    both = contacts.orbits.select(pair)

    def ranges(times: np.ndarray) -> np.ndarray:
        positions = both.state(times)[0]
        return np.linalg.norm(positions[0] - positions[1], axis=-1)

    def rates(times: np.ndarray) -> np.ndarray:
        if isl.rate_mbps is not None:
            return np.full(len(times), isl.rate_mbps * 1e6)
        budget = ntn.LinkBudget(isl.eirp_dbw, isl.gt_db_per_k, isl.bandwidth_mhz * 1e6)
        snr_db = budget.snr_db(ntn.free_space_loss_db(ranges(times), isl.carrier_ghz * 1e9))
        return isl.bandwidth_mhz * 1e6 * np.log2(1.0 + 10.0 ** (snr_db / 10.0))

    return PassLink(lambda until_s: contacts.pair_windows(a, b, until_s), rates, ranges, segment_s)


def peak_rate_bps(config: ConstellationConfig) -> float:
    """An upper bound of any server link's rate: the fixed rate, or the rate at the SNR of
    free space from the lowest altitude at zenith (no atmosphere, no shadowing)."""
    link = config.link
    if link.rate.model == "fixed":
        return link.rate.mbps * 1e6
    bandwidth_hz = link.value("bandwidth_mhz") * 1e6
    altitude_m = 100e3  # the lowest orbit a scenario takes
    best_db = -math.inf
    for eirp, gt, ghz in (
        ("satellite_eirp_dbw", "station_gt_db_per_k", "to_ground_ghz"),
        ("station_eirp_dbw", "satellite_gt_db_per_k", "from_ground_ghz"),
    ):
        budget = ntn.LinkBudget(link.value(eirp), link.value(gt), bandwidth_hz)
        loss = ntn.free_space_loss_db(altitude_m, link.value(ghz) * 1e9)
        best_db = max(best_db, float(budget.snr_db(loss)))
    return float(rate_function(config, bandwidth_hz)(np.array([best_db]))[0]) or 1.0


def write_satellite_files(network: SatelliteNetwork, run_dir: Path | None, end_s: float) -> dict:
    """passes.csv and satellites.csv (with a run folder); returns the summary's block. The
    transfers the run's end leaves waiting or on the air count up to ``end_s``."""
    network.note_unfinished()
    contacts = network.contacts
    links = network.satellites
    passes = contacts.passes(end_s) if end_s > 0 else []
    days = max(end_s, 1e-9) / orbits.DAY_S
    count = contacts.orbits.count
    rows, carried_by_pass = [], {}
    for sat in range(count):
        mine = sorted((p for p in passes if p.satellite == sat), key=lambda p: (p.start_s, p.node))
        union = orbits.merge_windows(contacts.windows(sat, end_s))
        contact_s = sum(min(end, end_s) - start for start, end in union if start < end_s)
        up, down = links.uplinks[sat].carried, links.downlinks[sat].carried
        used = {w for w in union for s in (*up.values(), *down.values())
                if s.bits and w[0] <= s.start_s < w[1]}  # fmt: skip
        for direction, stats in (("up", up), ("down", down)):
            for piece in stats.values():  # to the first pass (by start, node) holding it
                holder = next((p for p in mine if p.start_s <= piece.start_s < p.end_s), None)
                if holder is not None:
                    key = (holder, direction)
                    carried_by_pass[key] = carried_by_pass.get(key, 0.0) + piece.bits
        rows.append({
            "satellite": sat, "passes": len(mine), "passes_per_day": len(mine) / days,
            "contact_s": contact_s,
            "uplink_bytes": sum(s.bits for s in up.values()) / 8,
            "downlink_bytes": sum(s.bits for s in down.values()) / 8,
            "passes_used": len(used),
            "waiting_s": links.uplinks[sat].waiting_s + links.downlinks[sat].waiting_s,
        })  # fmt: skip
    for row in rows:
        row["bytes_per_pass_used"] = (
            (row["uplink_bytes"] + row["downlink_bytes"]) / row["passes_used"]
            if row["passes_used"]
            else 0.0
        )
    if run_dir is not None:
        with (run_dir / PASSES_FILE).open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(PASSES_COLUMNS)
            for p in sorted(passes, key=lambda p: (p.satellite, p.start_s, p.node)):
                range_rate = contacts.max_range_rate_m_s(p)
                writer.writerow([
                    p.satellite, contacts.nodes[p.node].name, f"{p.start_s:.6f}", f"{p.end_s:.6f}",
                    f"{p.end_s - p.start_s:.6f}", round(carried_by_pass.get((p, "up"), 0) / 8),
                    round(carried_by_pass.get((p, "down"), 0) / 8),
                    *(f"{abs(float(ntn.doppler_hz(carrier_hz, range_rate))):.3f}"
                      for carrier_hz in (links.uplink_carrier_hz, links.downlink_carrier_hz)),
                ])  # fmt: skip
        with (run_dir / SATELLITES_FILE).open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(SATELLITES_COLUMNS)
            for row in rows:
                writer.writerow([_plain(row[c]) for c in SATELLITES_COLUMNS])
    used = [r for r in rows if r["passes_used"]]
    block = {"constellation": {
        "satellites": count,
        "hours": end_s / 3600.0,
        "passes_per_satellite_per_day": float(np.mean([r["passes_per_day"] for r in rows])),
        "contact_s_per_satellite_per_day": float(np.mean([r["contact_s"] for r in rows])) / days,
        "mean_pass_s": (sum(p.end_s - p.start_s for p in passes) / len(passes)) if passes else 0.0,
        "bytes_per_pass_used": float(np.mean([r["bytes_per_pass_used"] for r in used]))
        if used else 0.0,
        "waiting_for_visibility_s": float(sum(r["waiting_s"] for r in rows)),
        "transfers": sum(link.transfers for link in (*links.uplinks, *links.downlinks)),
    }}  # fmt: skip
    if isinstance(network, PlaneRelayNetwork):  # messages to and from the server
        block["constellation"]["relay"] = {
            "messages": network.messages, "relayed": network.relayed, "hops": network.hops
        }  # fmt: skip
    return block


def _plain(value: float | int) -> str | int:
    return value if isinstance(value, int) else f"{value:.6g}"


def constellation_lines(runs: list[tuple[str, dict | None]], name_width: int) -> list[str]:
    """``fedsim budget``'s constellation table: per run, its simulated hours, passes per
    satellite per day, contact time per satellite per day, the mean pass, bytes per pass that
    carried anything, and the transfers' hours spent waiting for a pass."""
    rows = [(label, c) for label, c in runs if c is not None]
    if not rows:
        return []
    columns = ("hours", "passes/sat/day", "contact_min/day", "pass_s", "MB/pass_used",
               "wait_h", "wait_h/xfer")  # fmt: skip
    lines = ["", f"{'constellation':>{name_width}} " + " ".join(f"{c:>15}" for c in columns)]
    for label, c in rows:
        per_transfer_h = (
            c["waiting_for_visibility_s"] / 3600 / c["transfers"] if c["transfers"] else 0
        )
        values = (c["hours"], c["passes_per_satellite_per_day"],
                  c["contact_s_per_satellite_per_day"] / 60, c["mean_pass_s"],
                  c["bytes_per_pass_used"] / 1e6, c["waiting_for_visibility_s"] / 3600,
                  per_transfer_h)  # fmt: skip
        lines.append(f"{label:>{name_width}} " + " ".join(f"{v:>15.3f}" for v in values))
    for label, c in rows:
        relay = c.get("relay")
        if relay is not None:
            lines.append(
                f"{label:>{name_width}} relay: plane, {relay['relayed']:,} of "
                f"{relay['messages']:,} server messages relayed, {relay['hops']:,} ISL hops"
            )
    lines.append(
        "constellation: passes of a satellite to any server node; wait: transfers' time out of "
        "sight (store and forward to the next pass), summed over all the satellites' transfers, "
        "those the run's end leaves waiting included"
    )
    return lines
