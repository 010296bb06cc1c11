"""A World's network, built from its scenario: fixed-rate links or the radio, the media
and the D2D graph. The system model is in ``fedsim.sim``; this only reads the scenario."""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import networkx as nx
import numpy as np
import simpy

from fedsim.config import (
    TR38901_KINDS,
    D2DPathLossConfig,
    PathLossConfig,
    RadioConfig,
    Scenario,
    ScenarioError,
)
from fedsim.results.files import (
    CELLULAR_COLUMNS,
    CHANNEL_COLUMNS,
    CHANNEL_FILE,
    RADIO_COLUMNS,
    RADIO_FILE,
)
from fedsim.sim.cells import HexGrid
from fedsim.sim.draws import Fading
from fedsim.sim.events import EventLog
from fedsim.sim.geometry import place_in_annulus
from fedsim.sim.link import (
    HarqLinkSettings,
    HarqSettings,
    IdealSettings,
    LinkSettings,
    Outage,
    PerUploadSettings,
    Shannon,
    WholeTransferSettings,
)
from fedsim.sim.network import Link, Network
from fedsim.sim.pathloss import PathLoss, Tr38901, UmiStreetCanyon
from fedsim.sim.radio import CellSettings, PowerControl, Radio, RadioSettings
from fedsim.sim.readers import DeviceProfile, read_positions
from fedsim.sim.scheduler import UplinkScheduling
from fedsim.sim.selective import SelectiveFading, tdl_profile
from fedsim.sim.topology import assign_edge_rates, build_graph
from fedsim.streams import RandomStreams
from fedsim.world.satellites import build_satellite_network


def build_network(
    scenario: Scenario,
    env: simpy.Environment,
    log: EventLog,
    streams: RandomStreams,
    num_clients: int,
    is_online: Callable[[int], bool],
    profiles: Sequence[DeviceProfile] | None = None,
) -> Network:
    """``profiles``: device profiles (``system.devices``) giving the clients' link rates."""
    system = scenario.system
    if system.constellation is not None:  # the satellites' links follow their passes
        return build_satellite_network(system.constellation, env, log, streams, is_online)
    network = system.network
    common = {
        "log": log,
        "downlink_mode": network.downlink,
        "is_online": is_online,
        "graph": d2d_graph(scenario, streams, num_clients),
        "relay": system.d2d.relay if system.d2d else False,
    }
    if system.radio is not None:
        radio = build_radio(system.radio, env, streams, num_clients)
        return Network(
            env, {}, radio=radio, uplink_sharing=uplink_sharing(system.radio),
            uplink_subbands=system.radio.uplink_subbands, latency_s=network.latency_s, **common,
        )  # fmt: skip
    if profiles is not None:  # a device trace: the i-th profile is client i's
        uplink_bps = [p.uplink_bps for p in profiles[:num_clients]]
        downlink_bps = [p.downlink_bps or network.rho * p.uplink_bps for p in profiles]
    else:
        uplink_bps = network.uplink_mbps.sample(streams.generator("links"), num_clients) * 1e6
        downlink_bps = network.rho * uplink_bps
    links = {
        client: Link(
            uplink_bps=float(uplink_bps[client]),
            downlink_bps=float(downlink_bps[client]),
            latency_s=network.latency_s,
        )
        for client in range(num_clients)
    }
    return Network(
        env,
        links,
        uplink_medium=network.uplink_medium,
        cell_capacity_bps=(network.cell_capacity_mbps or 0) * 1e6 or None,
        **common,
    )


def uplink_sharing(config: RadioConfig) -> str | UplinkScheduling:
    """equal, fixed, tdma, or a PRB scheduler's settings (its period: the fading block)."""
    sharing = config.uplink_sharing
    if isinstance(sharing, str):
        return sharing
    period_s = sharing.period_s or fading_block_s(config)
    return UplinkScheduling(
        sharing.scheduler, config.subcarrier_spacing_khz, period_s, sharing.pf_beta,
        sharing.power_aware,
    )  # fmt: skip


def fading_block_s(config: RadioConfig) -> float:
    """How long the small-scale fading holds: its block, or 0.1 s without block fading (a
    PRB scheduler's default period)."""
    fading = config.fading
    return fading.coherence_s if fading.model != "none" and fading.coherence_s else 0.1


def cell_grid(config: RadioConfig) -> HexGrid | None:
    cells = config.cells
    if cells is None:
        return None
    return HexGrid(cells.rings, cells.inter_site_distance_m, cells.wrap_around and cells.rings > 0)


def radio_settings(config: RadioConfig) -> RadioSettings:
    grid = cell_grid(config)
    cells = config.cells
    law = config.path_loss
    standard = law.kind in TR38901_KINDS
    return RadioSettings(
        path_loss=path_loss(law),
        line_of_sight=law.los if standard else "probability",
        power_control=PowerControl(
            config.power_control.p0_dbm,
            config.power_control.alpha,
            config.subcarrier_spacing_khz,
        )
        if config.power_control
        else None,  # fmt: skip
        cells=CellSettings(
            grid,
            cells.interference,
            cells.handover_hysteresis_db,
            cells.backhaul_mbps * 1e6,
            cells.backhaul_latency_s,
            cells.backhaul_sharing == "shared",
        )
        if grid is not None and cells is not None
        else None,  # fmt: skip
        d2d_path_loss=path_loss(config.d2d_path_loss),
        fading=Fading(
            model=config.fading.model,
            k_factor=10.0 ** (config.fading.k_factor_db / 10.0),
            coherence_s=config.fading.coherence_s,
            doppler_hz=config.fading.doppler_hz,
        ),
        selective=selective_fading(config),
        subband_prbs=config.fading.subband_prbs,
        placement=config.fading.placement,
        shadowing_db=(1.0 if law.shadowing else 0.0) if standard else config.shadowing_db,
        shadowing_coherence_s=config.shadowing_coherence_s,
        noise_density_dbm_per_hz=config.noise_density_dbm_per_hz,
        bs_noise_figure_db=config.bs_noise_figure_db,
        ue_noise_figure_db=config.ue_noise_figure_db,
        base_station_power_dbm=config.base_station_power_dbm,
        uplink_bandwidth_hz=config.uplink_bandwidth_hz,
        downlink_bandwidth_hz=config.downlink_bandwidth_hz,
        d2d_bandwidth_hz=config.d2d_bandwidth_hz,
        min_distance_m=config.min_distance_m,
        cell_radius_m=config.cell_radius_m if grid is None else layout_radius_m(grid),
        link=link_settings(config),
        speed_mps=config.mobility.speed_mps if config.mobility else None,
        update_s=config.mobility.update_s if config.mobility else 1.0,
    )


def selective_fading(config: RadioConfig) -> SelectiveFading | None:
    """The fading per subband of a TDL profile (None: flat across the band)."""
    fading = config.fading
    if fading.profile == "flat":
        return None
    profile = tdl_profile(fading.profile, fading.delay_spread_ns * 1e-9)
    return SelectiveFading(profile, fading.coherence_s, fading.doppler_hz)


def layout_radius_m(grid: HexGrid) -> float:
    """The disc from the centre site that holds every cell of the grid: where a moving
    client's waypoints fall."""
    return grid.rings * grid.inter_site_distance_m + grid.cell_radius_m


def path_loss(
    config: PathLossConfig | D2DPathLossConfig,
) -> PathLoss | UmiStreetCanyon | Tr38901:
    if config.kind in TR38901_KINDS:
        defaults = {"inh": 1.0}
        return Tr38901(
            config.kind, config.carrier_ghz * 1e9, config.bs_height_m,
            config.ut_height_m or defaults.get(config.kind, 1.5), config.building_height_m,
            config.street_width_m, config.inh_office,
        )  # fmt: skip
    if config.kind == "umi_street_canyon":
        return UmiStreetCanyon(config.carrier_ghz * 1e9, config.height_m, config.los)
    if config.kind == "log_distance":
        return PathLoss(
            "log_distance", reference_loss_db=config.reference_loss_db,
            reference_distance_m=config.reference_distance_m, exponent=config.exponent,
        )  # fmt: skip
    if config.kind == "free_space":
        return PathLoss("free_space", carrier_hz=config.carrier_ghz * 1e9)
    return PathLoss(config.kind)


def link_settings(config: RadioConfig) -> LinkSettings:
    """The link model's settings (``fedsim.sim.link``): Shannon's rate for the models without
    transport blocks, from the radio's SNR gap and spectral-efficiency cap."""
    link = config.link
    shannon = Shannon(config.snr_gap_db, config.max_bits_per_hz or math.inf)
    if link.model == "ideal":
        return IdealSettings(shannon)
    if link.model == "per_upload":
        threshold_db = link.sinr_threshold_db
        return PerUploadSettings(
            waterfall_m=10.0 ** (link.waterfall_db / 10.0),
            sinr_threshold=None if threshold_db is None else 10.0 ** (threshold_db / 10.0),
            shannon=shannon,
        )
    if link.model == "whole_transfer":
        outage = Outage(link.loss, link.snr_threshold_db, link.waterfall_m,
                        link.max_retransmissions)  # fmt: skip
        return WholeTransferSettings(outage, shannon)
    harq = HarqSettings(
        target_bler=link.target_bler,
        mcs_table=link.mcs_table,
        subcarrier_spacing_khz=float(link.subcarrier_spacing_khz),
        bler_source=link.bler_tables,
        max_transmissions=link.max_transmissions,
        combining=link.combining,
        csi_age_blocks=link.csi_age_blocks,
        olla_step_db=link.olla.step_db if link.olla else None,
        link_failure_s=link.link_failure_s,
    )
    return HarqLinkSettings(harq)


def build_radio(
    config: RadioConfig, env: simpy.Environment, streams: RandomStreams, num_clients: int
) -> Radio:
    """Place the clients, draw their transmit powers and shadowing (seeded), once per world."""
    rng = streams.generator("radio")
    grid = cell_grid(config)
    if config.positions is not None:
        placed = read_positions(config.positions)
        positions_m = [placed[client] for client in range(num_clients)]
    elif grid is not None:
        positions_m = grid.place(rng, num_clients, config.min_distance_m)
    else:
        positions_m = place_in_annulus(
            rng, num_clients, config.cell_radius_m, config.min_distance_m
        )
    settings = radio_settings(config)
    return Radio(
        settings,
        lambda: env.now,
        positions_m,
        config.tx_power_dbm.sample(rng, num_clients),
        settings.shadowing_db * rng.standard_normal(num_clients),
        key=streams.integer_seed("radio"),
    )


def d2d_graph(scenario: Scenario, streams: RandomStreams, num_clients: int) -> nx.Graph | None:
    d2d = scenario.system.d2d
    if d2d is None:
        return None
    rng = streams.generator("topology")
    try:
        graph = build_graph(d2d.graph, num_clients, rng, p=d2d.p, radius=d2d.radius,
                            edge_list_path=d2d.edge_list)  # fmt: skip
    except ValueError as error:  # e.g. a random graph that will not come out connected
        raise ScenarioError("system.d2d", [f"system.d2d.graph: {error}"]) from None
    rates_bps = d2d.rate_mbps.sample(rng, graph.number_of_edges()) * 1e6
    assign_edge_rates(graph, rates_bps, d2d.latency_s)
    return graph


CHANNEL_CLIENTS = 4  # the nearest, the farthest and two between (by distance)
CHANNEL_POINTS = 500  # samples per client over the run


def write_radio_files(radio: Radio, run_dir: Path, end_s: float) -> None:
    """radio.csv (one row per client: where it is, its mean SNR, the rates its transfers got,
    outages) and channel.csv (the uplink SNR and rate on the whole band over the run, for a
    few clients), for ``channel.png``."""
    settings = radio.settings
    snr_db = radio.mean_snr_db(settings.uplink_bandwidth_hz)
    distance_m = np.hypot(radio.start_positions_m[:, 0], radio.start_positions_m[:, 1])
    cellular = radio.cellular
    sites = [radio.serving_site(c, radio.now()) for c in range(radio.num_clients)]
    if settings.cells is not None:  # to the serving site
        distance_m = np.array([radio.start_distance_m(c, s) for c, s in enumerate(sites)])
    prb_seconds = radio.prb_seconds() if radio.prb_seconds else None
    total_prb_s = sum(prb_seconds.values()) if prb_seconds else 0.0
    with (run_dir / RADIO_FILE).open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(RADIO_COLUMNS + (CELLULAR_COLUMNS if cellular else ()))
        for client, stats in enumerate(radio.stats):
            up_mbps = stats.uplink_bits / stats.uplink_air_s / 1e6 if stats.uplink_air_s else ""
            down = stats.downlink_bits / stats.downlink_air_s / 1e6 if stats.downlink_air_s else ""
            x_m, y_m = radio.start_positions_m[client]
            blocks = stats.blocks
            harq = (
                [f"{blocks.sent:.6g}", f"{blocks.failed / blocks.sent:.6g}",
                 f"{blocks.mcs_sum / blocks.sent:.4g}", f"{blocks.failed:.6g}"]
                if blocks.sent else ["", "", "", ""]
            )  # fmt: skip
            writer.writerow([
                client, f"{x_m:.3f}", f"{y_m:.3f}", f"{distance_m[client]:.3f}",
                f"{10 * math.log10(radio.tx_power_w[client] * 1000):.12g}",
                f"{snr_db[client]:.4f}", _number(up_mbps), _number(down),
                _number(down / up_mbps if up_mbps and down else ""),
                stats.outages, stats.retransmissions, stats.given_up, *harq,
                *(
                    _cellular_row(radio, client, sites[client], prb_seconds, total_prb_s)
                    if cellular
                    else ()
                ),
            ])  # fmt: skip
    order = np.argsort(distance_m, kind="stable")
    picks = list(
        dict.fromkeys(int(order[round(q * (len(order) - 1))]) for q in (0, 1 / 3, 2 / 3, 1))
    )  # nearest first
    bandwidth_hz = settings.uplink_bandwidth_hz
    with (run_dir / CHANNEL_FILE).open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CHANNEL_COLUMNS)
        for client in picks[:CHANNEL_CLIENTS]:
            replay = radio.replica()  # the client's mobility replayed from the start
            for time_s in np.linspace(0.0, max(end_s, 1.0), CHANNEL_POINTS):
                snr = replay.uplink_snr_db_at(client, float(time_s), bandwidth_hz)
                rate_bps = replay.rate_bps(bandwidth_hz, 10.0 ** (snr / 10.0))
                writer.writerow([client, f"{time_s:.6g}", f"{snr:.4f}", f"{rate_bps / 1e6:.6g}"])


def _cellular_row(
    radio: Radio,
    client: int,
    site: int,
    prb_seconds: dict[int, float] | None,
    total_prb_s: float,
) -> list[str | int]:
    stats = radio.stats[client]
    site_x_m, site_y_m = radio.sites_m[site]
    los = int(radio.start_line_of_sight(client)) if radio.cellular_law else ""
    share = prb_seconds.get(client, 0.0) / total_prb_s if prb_seconds and total_prb_s else ""
    power = (
        10 * math.log10(stats.uplink_joules / stats.uplink_air_s * 1000)
        if stats.uplink_joules > 0 and stats.uplink_air_s
        else ""
    )
    return [
        los, site, f"{site_x_m:.3f}", f"{site_y_m:.3f}", stats.handovers, _number(share),
        _number(power),
    ]  # fmt: skip


def prb_share_by_decile(radio: Radio) -> list[float] | None:
    """The share of the uplink's PRB·seconds that went to each tenth of the clients, from the
    weakest mean SNR to the strongest (a PRB scheduler's fairness at a glance)."""
    if radio.prb_seconds is None:
        return None
    given = radio.prb_seconds()
    total = sum(given.values())
    if not total:
        return None
    order = np.argsort(radio.mean_snr_db(radio.settings.uplink_bandwidth_hz), kind="stable")
    return [
        sum(given.get(int(c), 0.0) for c in tenth) / total for tenth in np.array_split(order, 10)
    ]


def rate_distribution(radio: Radio) -> dict[str, float | list[float] | None]:
    """Percentiles (10, 50, 90) over the clients of the mean SNR and of the rates their
    transfers got (over those that used the link), and the outage totals: ``fedsim budget``."""

    def percentiles(values: list[float]) -> list[float] | None:
        return [float(v) for v in np.percentile(values, (10, 50, 90))] if values else None

    stats = radio.stats
    up = {c: s.uplink_bits / s.uplink_air_s / 1e6 for c, s in enumerate(stats) if s.uplink_air_s}
    down = {
        c: s.downlink_bits / s.downlink_air_s / 1e6 for c, s in enumerate(stats) if s.downlink_air_s
    }
    return {
        "uplink_snr_db": percentiles(list(radio.mean_snr_db(radio.settings.uplink_bandwidth_hz))),
        "uplink_mbps": percentiles(list(up.values())),
        "downlink_mbps": percentiles(list(down.values())),
        "rho": percentiles([down[c] / up[c] for c in up if c in down and up[c]]),
        "outages": sum(s.outages for s in stats),
        "retransmissions": sum(s.retransmissions for s in stats),
        "given_up": sum(s.given_up for s in stats),
        "blocks": (blocks := sum(s.blocks.sent for s in stats)),
        "bler": sum(s.blocks.failed for s in stats) / blocks if blocks else None,
        "mean_mcs": sum(s.blocks.mcs_sum for s in stats) / blocks if blocks else None,
        **({"prb_deciles": deciles} if (deciles := prb_share_by_decile(radio)) else {}),
    }


def _number(value: float | str) -> str:
    return value if isinstance(value, str) else f"{value:.6g}"
