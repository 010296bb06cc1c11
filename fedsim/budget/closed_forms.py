"""E[round time] in closed form, where one is exact: FedAvg's synchronous round and
HierFAVG's edge round and its share of the cloud's backhaul transfers (``fedsim budget``
prints them beside the measured mean, as a check of the event model)."""

from __future__ import annotations

from fedsim.config import AlgorithmConfig, HierFavgConfig, Scenario, SyncServerConfig
from fedsim.world import World

FEDAVG_PATTERN = (
    "fedavg",
    "fedprox",
    "fedavg_ft",
    "hierfavg",
)  # one model down, one training, one model up


def closed_form_round_s(
    scenario: Scenario, algorithm: AlgorithmConfig, world: World
) -> float | None:
    """E[round time] of a synchronous round where a closed form is exact, else None: the
    algorithm's own (``World.closed_form_round_s``), HierFAVG's (its edge round, plus its
    share of the cloud's backhaul transfers), or FedAvg's round.
    """
    stated_s = world.closed_form_round_s()
    if stated_s is not None:
        return stated_s
    if isinstance(algorithm, HierFavgConfig):
        edge_s = edge_round_closed_form_s(scenario, algorithm, world)
        if edge_s is None:
            return None
        return edge_s + 2 * backhaul_transfer_s(world) / algorithm.cloud_every
    return fedavg_round_s(scenario, algorithm, world)


def fedavg_round_s(scenario: Scenario, algorithm: AlgorithmConfig, world: World) -> float | None:
    """FedAvg's E[round time] where a closed form is exact, else None.

    FedAvg's is exact when every client has the same link, compute is per round with no device
    classes, stragglers or tail, nobody drops out and the server waits for all m selected:
    broadcast T_dl + E[max of m shifted exponentials] + T_ul (parallel uplink), or with
    deterministic compute, + m T_ul (TDMA) or + latency + m 8S/C (shared cell, m 8S/C
    within each client's own rate cap).
    """
    system, clients = scenario.system, scenario.clients
    compute = system.compute
    homogeneous = (
        system.radio is None
        and system.constellation is None  # a round waits for passes: no closed form
        and system.network.uplink_mbps.kind == "constant"
        and compute.per == "round"
        and not compute.device_classes
        and compute.stragglers.fraction == 0
        and compute.heavy_tail is None
        and not clients.can_drop_out
        and clients.arrivals.reserve == 0
    )
    if not (homogeneous and isinstance(algorithm, SyncServerConfig)):
        return None
    if algorithm.name not in FEDAVG_PATTERN:
        return None
    if algorithm.deadline_s is not None or algorithm.over_selection > 0:
        return None
    m = world.wanted_updates(algorithm.client_fraction)
    down_bytes, up_bytes = (world.model_message_bytes(d) for d in ("downlink", "uplink"))
    link = world.network.links[0]
    t_dl = link.latency_s + 8 * down_bytes / link.downlink_bps
    if system.network.downlink == "unicast":
        if compute.mean_extra_s > 0:
            return None
        t_dl *= m
    t_ul = link.latency_s + 8 * up_bytes / link.uplink_bps
    expected_compute_s = world.devices.compute_model.base.expected_max_s(m)
    medium = system.network.uplink_medium
    if medium == "parallel":
        return t_dl + expected_compute_s + t_ul
    if compute.mean_extra_s > 0:
        return None
    if medium == "tdma":
        return t_dl + compute.t_min_s + m * t_ul
    capacity_bps = system.network.cell_capacity_mbps * 1e6
    if capacity_bps / m > link.uplink_bps:
        return None  # each upload is capped by its own link, not by its share
    return t_dl + compute.t_min_s + link.latency_s + m * 8 * up_bytes / capacity_bps


def edge_round_closed_form_s(
    scenario: Scenario, algorithm: HierFavgConfig, world: World
) -> float | None:
    """HierFAVG's edge round where its duration is fixed, else None. Without cells it is
    FedAvg's round (one edge, where the cloud is). With cells, where every duration is
    fixed (compute deterministic per round, step or sample; no fading, shadowing,
    interference, mobility or power control; the ideal link; each upload on a fixed sub-band
    of its own; every client selected, none leaving, each with the edge of its cell): the
    edges' rounds run side by side, so the round lasts max over edges ℓ of
    T_dl,ℓ + max_{i ∈ ℓ} (C_i + T_ul,i), the edge's multicast at its weakest member's rate,
    C_i client i's κ₁ steps (t_min per round, per step or per sample) and each upload at its
    own rate."""
    if world.network.backhaul is None:
        return fedavg_round_s(scenario, algorithm, world)
    system, radio, compute = scenario.system, scenario.system.radio, scenario.system.compute
    fixed = (
        radio.fading.model == "none"
        and world.network.radio.settings.shadowing_db == 0
        and not radio.cells.interference
        and radio.mobility is None
        and radio.power_control is None
        and radio.link.model == "ideal"
        and radio.uplink_sharing == "fixed"
        and system.uplink_aggregation == "digital"
        and system.network.downlink == "broadcast"
        and system.energy is None
        and not world.compression.active
        and compute.mean_extra_s == 0
        and not compute.device_classes
        and compute.stragglers.fraction == 0
        and compute.heavy_tail is None
        and not scenario.clients.can_drop_out
        and scenario.clients.arrivals.reserve == 0
        and algorithm.client_fraction == 1
        and algorithm.deadline_s is None
        and algorithm.association == "serving_cell"  # no client relayed between sites
    )
    members = [m for m in world.edge_members().values() if m]
    if not fixed or max(map(len, members)) > radio.uplink_subbands:
        return None
    down_bytes, up_bytes = (world.model_message_bytes(d) for d in ("downlink", "uplink"))
    network = world.network
    return max(
        network.group_downlink_time_s(clients, down_bytes)
        + max(compute_s(world, algorithm, c) + network.uplink_time_s(c, up_bytes) for c in clients)
        for clients in members
    )


def compute_s(world: World, algorithm: HierFavgConfig, client: int) -> float:
    """Client i's deterministic compute time for its κ₁ steps (``local_steps``; null: the
    scenario's local work), as its device spends it."""
    training = world.scenario.training
    trainer = world.trainer_of(client)
    n = world.num_train(client)
    if algorithm.local_steps is None:
        steps = trainer.num_steps(n, epochs=training.local_epochs, steps=training.local_steps)
    else:
        steps = trainer.num_steps(n, epochs=None, steps=algorithm.local_steps)
    return world.devices.minimum_s(client, steps, trainer.samples_processed(n, steps))


def backhaul_transfer_s(world: World) -> float:
    """One model over the backhaul, either way (0 without cells: no backhaul)."""
    backhaul = world.network.backhaul
    if backhaul is None:
        return 0.0
    return backhaul.transfer_s(world.payload_bytes(world.initial_params()))
