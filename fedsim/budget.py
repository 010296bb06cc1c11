"""Communication and time budgets without training.

The same World and the same algorithm code run with training replaced by its timing:
models are shape-only ("meta") tensors, so every message has its true size while no
arithmetic is done, and evaluation is skipped. What remains is the event model: bytes per
round and direction, and where each round's time goes.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import simpy

from fedsim.algorithms import ALGORITHMS
from fedsim.config import AlgorithmConfig, HierFavgConfig, Scenario, SyncServerConfig
from fedsim.learn.data import FederatedDataset
from fedsim.learn.trainer import Trainer
from fedsim.results.files import BREAKDOWN
from fedsim.results.recorder import Recorder
from fedsim.streams import RandomStreams
from fedsim.world import World
from fedsim.world.network import build_radio, cell_grid, fading_block_s, rate_distribution
from fedsim.world.tasks import CUT_AT
from fedsim.world.world import ProgressCallback


@dataclass(frozen=True)
class Budget:
    """One algorithm's budget; per-round figures are means over its rounds, None when the
    server completed no round (an asynchronous buffer never filled: it never stepped).

    The breakdown of a participant's round (queueing for and on the air in each direction,
    compute, idle) is None where no round has server-gathered participants to break down
    (``local``, asynchronous servers). ``time_s``: when the last round ended;
    ``simulated_s``: when the run ended.
    """

    algorithm: str
    rounds: int
    time_s: float
    round_s: float | None
    downlink_queue_s: float | None
    downlink_s: float | None
    compute_s: float | None
    uplink_queue_s: float | None
    uplink_s: float | None
    waiting_s: float | None
    uplink_bytes_per_round: float | None
    downlink_bytes_per_round: float | None
    d2d_bytes_per_round: float | None
    wasted_bytes_per_round: float | None
    uplink_transmissions_per_round: float | None
    downlink_transmissions_per_round: float | None
    d2d_transmissions_per_round: float | None
    uplink_bytes: int
    downlink_bytes: int
    d2d_bytes: int
    wasted_bytes: int  # on the air for nothing: retransmitted blocks and cut transfers
    retransmitted_bytes: int  # of those, failed transport blocks sent again (harq)
    participants_per_round: float | None  # updates the server kept (applied, if asynchronous)
    closed_form_round_s: float | None
    simulated_s: float = 0.0
    # Rounds that selected clients but kept no update, and where those clients' tasks were
    # when the rounds closed (``fedsim.world.tasks.CUT_AT``, summed over those rounds).
    empty_rounds: int = 0
    empty_rounds_cut_at: dict[str, int] = field(default_factory=dict)
    # Bytes of one model-shaped message as the algorithm's codecs encode it (None: no codec).
    message_bytes: dict[str, int] | None = None
    radio: dict | None = None  # with system.radio: world.network.rate_distribution
    uplink_aggregation: str = "digital"  # system.radio.uplink_aggregation (over the air or not)
    energy_j: dict | None = None  # with system.energy: joules by category, over the run
    # With the harq link: its BLER curves, {"source": sionna | builtin, "version": the
    # sionna-no-rt version whose tables it read, or None}.
    bler_tables: dict | None = None
    # With several cells: the backhaul's bytes and transmissions each way (``backhaul_totals``).
    backhaul: dict | None = None
    # Hierarchical FL: the cloud's level (``cloud_level``).
    cloud: dict | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def budget_algorithm(
    scenario: Scenario,
    algorithm: AlgorithmConfig,
    dataset: FederatedDataset,
    trainer: Trainer | list[Trainer],
    *,
    max_events: int | None = None,
    progress: ProgressCallback | None = None,
) -> Budget:
    """Run one algorithm on the event model alone and summarize its rounds (``max_events``:
    see ``World.run``; ``progress``: told each round's end and the simulated time, as a run
    tells its progress bar)."""
    recorder = Recorder(
        None,
        scenario_name=scenario.name,
        label=algorithm.run_label,
        target_accuracy=None,
        resolved_scenario_yaml="",
        hierarchical=algorithm.name == "hierfavg",
    )
    world = World(scenario, algorithm, dataset, trainer, recorder, progress, timing_only=True)
    world.run(ALGORITHMS[algorithm.name](world, algorithm), max_events=max_events)
    world.finish(complete=True)
    rows = recorder.round_rows
    log = world.log

    def mean(values: list[float]) -> float | None:
        values = [v for v in values if not math.isnan(v)]
        return float(np.mean(values)) if values else None

    def per_round(total: float) -> float | None:
        return total / len(rows) if rows else None

    breakdown = {part: mean([r[part] for r in rows]) for part in (*BREAKDOWN, "waiting_s")}
    closed_form_s = closed_form_round_s(scenario, algorithm, world)
    empty = [r for r in rows if r["selected"] and not r["participants"]]
    return Budget(
        algorithm=algorithm.run_label,
        rounds=len(rows),
        time_s=rows[-1]["end_s"] if rows else 0.0,
        round_s=mean([r["end_s"] - r["start_s"] for r in rows]),
        **breakdown,
        uplink_bytes_per_round=per_round(log.uplink_bytes),
        downlink_bytes_per_round=per_round(log.downlink_bytes),
        d2d_bytes_per_round=per_round(log.d2d_bytes),
        wasted_bytes_per_round=per_round(log.wasted_bytes),
        uplink_transmissions_per_round=per_round(log.transmissions["uplink"]),
        downlink_transmissions_per_round=per_round(log.transmissions["downlink"]),
        d2d_transmissions_per_round=per_round(log.transmissions["d2d"]),
        uplink_bytes=log.uplink_bytes,
        downlink_bytes=log.downlink_bytes,
        d2d_bytes=log.d2d_bytes,
        wasted_bytes=log.wasted_bytes,
        retransmitted_bytes=log.retransmitted_bytes,
        participants_per_round=mean([r["participants"] for r in rows]),
        closed_form_round_s=closed_form_s,
        simulated_s=world.env.now,
        message_bytes=message_bytes(world),
        radio=rate_distribution(world.network.radio) if world.network.radio else None,
        uplink_aggregation=scenario.system.uplink_aggregation,
        energy_j=world.energy.meter.totals() if world.energy else None,
        bler_tables=bler_tables(scenario),
        empty_rounds=len(empty),
        empty_rounds_cut_at={where: sum(r[where] for r in empty) for where in CUT_AT},
        backhaul=backhaul_totals(world),
        cloud=cloud_level(algorithm, rows, closed_form_s),
    )


def backhaul_totals(world: World) -> dict | None:
    """Bytes and transmissions on the sites' backhaul, each way (None without cells)."""
    if world.network.backhaul is None:
        return None
    log = world.log
    return {
        "up_bytes": log.backhaul_up_bytes,
        "down_bytes": log.backhaul_down_bytes,
        "up_transmissions": log.transmissions["backhaul_up"],
        "down_transmissions": log.transmissions["backhaul_down"],
    }


def cloud_level(
    algorithm: AlgorithmConfig, rows: list[dict], closed_form_round_s: float | None
) -> dict | None:
    """Hierarchical FL's cloud level: its aggregations, the mean time from one to the next
    (the first from the start), the part of it on the backhaul, and its closed form (κ₂
    rounds, each with its share of the backhaul: ``closed_form_round_s``)."""
    if not isinstance(algorithm, HierFavgConfig):
        return None
    periods: list[list[dict]] = [[]]  # the rounds of each cloud round
    for row in rows:
        periods[-1].append(row)
        if row["cloud_rounds"] == len(periods):
            periods.append([])
    complete = periods[:-1]
    durations_s = [p[-1]["end_s"] - p[0]["start_s"] for p in complete]
    backhaul_s = [sum(r["backhaul_s"] for r in p) for p in complete]
    every = algorithm.cloud_every
    return {
        "edge_rounds_per_cloud": every,
        "cloud_rounds": len(complete),
        "cloud_round_s": float(np.mean(durations_s)) if complete else None,
        "backhaul_s": float(np.mean(backhaul_s)) if complete else None,
        "closed_form_cloud_round_s": None
        if closed_form_round_s is None
        else every * closed_form_round_s,
    }


def backhaul_transfer_s(world: World) -> float:
    """One model over the backhaul, either way (0 without cells: no backhaul)."""
    backhaul = world.network.backhaul
    if backhaul is None:
        return 0.0
    return backhaul.transfer_s(world.payload_bytes(world.initial_params()))


def edge_round_closed_form_s(
    scenario: Scenario, algorithm: HierFavgConfig, world: World
) -> float | None:
    """HierFAVG's edge round where its duration is fixed, else None. Without cells it is
    FedAvg's round (one edge, where the cloud is). With cells, where every duration is
    fixed (compute deterministic per round; no fading, shadowing, interference, mobility or
    power control; the ideal link; each upload on a fixed sub-band of its own; every client
    selected, none leaving, each with the edge of its cell): the edges' rounds run side by
    side, so the round lasts max over edges ℓ of T_dl,ℓ + t_min + max_{i ∈ ℓ} T_ul,i, the
    edge's multicast at its weakest member's rate and each upload at its own."""
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
        and compute.per == "round"
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
        + compute.t_min_s
        + max(network.uplink_time_s(c, up_bytes) for c in clients)
        for clients in members
    )


def bler_tables(scenario: Scenario) -> dict | None:
    """The harq link's BLER curves as its validation resolved them; None without it."""
    radio = scenario.system.radio
    if radio is None or radio.link.model != "harq":
        return None
    return {"source": radio.link.bler_tables, "version": radio.link.bler_tables_version}


def bler_tables_text(tables: dict) -> str:
    """``sionna (sionna-no-rt 2.2.0)`` or ``builtin (the finite-length bound, no Sionna)``."""
    if tables["source"] == "sionna":
        return f"sionna (sionna-no-rt {tables['version']})"
    return "builtin (the finite-length bound, no Sionna)"


def message_bytes(world: World) -> dict[str, int] | None:
    """Bytes of one model message per direction as its codec encodes it (None: no codec);
    a serverless algorithm's peer messages, a server's uplink and downlink."""
    codecs = world.compression.codecs
    if not world.compression.active:
        return None
    directions = ("peer",) if codecs["peer"] is not None else ("uplink", "downlink")
    return {d: world.model_message_bytes(d) for d in directions}


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


def format_budgets(scenario: Scenario, budgets: list[Budget], model_bytes: int) -> str:
    """Two readable tables, time per round (its breakdown) and traffic per round, then notes."""

    def cell(value: float | None, width: int, digits: int = 3) -> str:
        return f"{'n/a':>{width}}" if value is None else f"{value:>{width}.{digits}f}"

    name_width = max([12, *(len(b.algorithm) for b in budgets)])
    time_columns = (
        "rounds", "kept/rnd", "round_s", "closed_form_s", "dl_queue_s", "downlink_s",
        "compute_s", "ul_queue_s", "uplink_s", "waiting_s", "total_s",
    )  # fmt: skip
    traffic_columns = (
        "up_MB/rnd", "down_MB/rnd", "d2d_MB/rnd", "up_tx/rnd", "down_tx/rnd", "d2d_tx/rnd",
        "delivered_MB", "retx_MB", "cut_MB", "on_air_MB", "wasted",
    )  # fmt: skip
    shares = scenario.model.architectures
    models = (
        f"model {shares[0].name} ({model_bytes:,} bytes per model message)"
        if len(shares) == 1
        else "models "
        + ", ".join(f"{share.name} {share.fraction:.0%}" for share in shares)
        + f" ({model_bytes:,} bytes per message of the largest)"
    )
    lines = [
        f"scenario {scenario.name}: {scenario.clients.count} clients, {models}",
        "",
        f"{'time per round':>{name_width}} " + " ".join(f"{c:>13}" for c in time_columns),
    ]
    for b in budgets:
        times = (b.round_s, b.closed_form_round_s, b.downlink_queue_s, b.downlink_s, b.compute_s)
        times += (b.uplink_queue_s, b.uplink_s, b.waiting_s)
        lines.append(
            f"{b.algorithm:>{name_width}} {b.rounds:>13} {cell(b.participants_per_round, 13, 1)} "
            + " ".join(cell(t, 13) for t in times)
            + f" {b.time_s:>13.1f}"
        )
    lines += ["", f"{'traffic':>{name_width}} " + " ".join(f"{c:>11}" for c in traffic_columns)]
    for b in budgets:
        per_round = (b.uplink_bytes_per_round, b.downlink_bytes_per_round, b.d2d_bytes_per_round)
        transmissions = (
            b.uplink_transmissions_per_round,
            b.downlink_transmissions_per_round,
            b.d2d_transmissions_per_round,
        )
        delivered = b.uplink_bytes + b.downlink_bytes + b.d2d_bytes
        on_air = delivered + b.wasted_bytes
        totals = (delivered, b.retransmitted_bytes, b.wasted_bytes - b.retransmitted_bytes)
        lines.append(
            f"{b.algorithm:>{name_width}} "
            + " ".join(cell(None if v is None else v / 1e6, 11) for v in per_round)
            + " "
            + " ".join(cell(v, 11, 1) for v in transmissions)
            + " "
            + " ".join(cell(v / 1e6, 11, 2) for v in (*totals, on_air))
            + f" {b.wasted_bytes / on_air if on_air else 0:>11.1%}"
        )
    lines += _no_round_lines(budgets)
    lines += _empty_round_lines(budgets)
    lines += _compression_lines(budgets, name_width, model_bytes)
    lines += _radio_lines(budgets, name_width)
    lines += _level_lines(budgets, name_width)
    lines += _energy_lines(budgets, name_width)
    lines += [
        "",
        "kept/rnd: updates the server kept per round (applied, for an asynchronous server). "
        "round_s = dl_queue_s + downlink_s + compute_s + ul_queue_s + uplink_s + waiting_s for "
        "the mean participant: waiting for the base station's transmitter and on the air, "
        "computing, waiting for the uplink medium (TDMA) and on the air, then idle until the "
        "round closes (or at a barrier).",
        "closed_form_s: E[round time] where a closed form is exact, n/a otherwise. Breakdown "
        "n/a: no participant to break down (local training at its own pace and asynchronous "
        "servers gather no round; a round that kept no update has none: see why above). "
        "_tx/rnd: transmissions started per round (a multicast counts once). on_air_MB = "
        "delivered_MB + retx_MB (transport blocks that failed and were sent again) + cut_MB "
        "(transfers cut or lost, updates dropped, broadcasts nobody received); wasted = "
        "(retx + cut) / on_air.",
    ]
    return "\n".join(lines)


def _no_round_lines(budgets: list[Budget]) -> list[str]:
    """Runs whose server completed no round: per-round figures have nothing to divide by."""
    lines = [
        f"{b.algorithm}: the server never stepped: no round completed in the "
        f"{b.simulated_s:.1f} s simulated, though {b.uplink_bytes / 1e6:.2f} MB went up "
        "(per-round figures n/a; totals as sent). An asynchronous buffer the arrivals never "
        "fill (buffer_size above what arrives before the run ends), or updates all dropped as "
        "stale, do this; a smaller buffer_size or a longer run lets it step."
        for b in budgets
        if b.rounds == 0
    ]
    return ["", *lines] if lines else []


_CUT_WORDS = {
    "cut_before_model": "still waiting for the model",
    "cut_computing": "training",
    "cut_uploading": "sending their update",
    "cut_after_delivery": "delivered but not kept",
}


def _empty_round_lines(budgets: list[Budget]) -> list[str]:
    """Why rounds kept nothing: where the selected clients' tasks were when the rounds closed
    (a broadcast that outlasts the deadline leaves everyone waiting for the model)."""
    lines = []
    for b in budgets:
        if not b.empty_rounds:
            continue
        cut = b.empty_rounds_cut_at
        total = sum(cut.values())
        shares = ", ".join(
            f"{count / total:.0%} {_CUT_WORDS[where]}"
            for where, count in sorted(cut.items(), key=lambda item: -item[1])
            if count
        )
        line = (
            f"{b.algorithm}: {b.empty_rounds} of {b.rounds} rounds kept no update; when they "
            f"closed, their {total:,} selected clients were: {shares or 'none cut'}"
        )
        if cut.get("cut_before_model", 0) == total and total:
            line += (
                " (the model never reached them in time: a broadcast runs at its slowest "
                "member's rate, so many clients per round make it long; fewer per round, a "
                "longer deadline_s or unicast shorten the wait)"
            )
        lines.append(line + ".")
    return ["", *lines] if lines else []


def _compression_lines(budgets: list[Budget], name_width: int, model_bytes: int) -> list[str]:
    """Each codec's bytes per model message, beside the uncompressed size."""
    coded = [b for b in budgets if b.message_bytes is not None]
    if not coded:
        return []
    headers = {"uplink": "up_bytes/msg", "downlink": "down_bytes/msg", "peer": "peer_bytes/msg"}
    directions = [d for d in headers if any(d in b.message_bytes for b in coded)]
    title = f"{'compression':>{name_width}} "
    lines = ["", title + " ".join(f"{headers[d]:>17}" for d in directions)]
    for b in coded:
        sizes = [b.message_bytes.get(d) for d in directions]
        lines.append(
            f"{b.algorithm:>{name_width}} "
            + " ".join(
                f"{'-':>17}" if size is None else f"{size:>9,} ({model_bytes / size:>4.0f}x)"
                for size in sizes
            )
        )
    lines.append(
        f"compression: the encoded bytes of one model-shaped message ({model_bytes:,} bytes "
        "uncompressed), measured on a seeded standard-normal tensor of the model's shape "
        "(exact for every codec whose size depends on the shape only; QSGD's Elias coding "
        "varies with the update)."
    )
    return lines


def _radio_lines(budgets: list[Budget], name_width: int) -> list[str]:
    """With the radio: each run's clients' uplink SNR (whole band, no fading), the rates
    their transfers got and ρ (10th, 50th, 90th percentile over the clients), and outages."""
    runs = [b for b in budgets if b.radio is not None]
    if not runs:
        return []
    keys = ("uplink_snr_db", "uplink_mbps", "downlink_mbps", "rho")
    columns = ("SNR dB", "up Mbps", "down Mbps", "rho")

    def spread(values: list[float] | None, mark: str = "") -> str:
        text = "n/a" if values is None else " / ".join(f"{v:.3g}" for v in values) + mark
        return f"{text:>20}"

    def side_information(b: Budget, key: str) -> str:
        """Over the air the uplink's digital bytes are side information, not the updates."""
        over_the_air = b.uplink_aggregation != "digital" and key in ("uplink_mbps", "rho")
        return "*" if over_the_air else ""

    lines = [
        "",
        f"{'radio':>{name_width}} "
        + " ".join(f"{c + ' p10/p50/p90':>20}" for c in columns)
        + f" {'outages':>9} {'retransmit':>10} {'given_up':>9} {'BLER':>7} {'MCS':>6}",
    ]
    for b in runs:
        radio = b.radio
        harq = (
            f" {radio['bler']:>7.1%} {radio['mean_mcs']:>6.1f}"
            if radio.get("bler") is not None
            else f" {'n/a':>7} {'n/a':>6}"
        )
        lines.append(
            f"{b.algorithm:>{name_width}} "
            + " ".join(spread(radio[k], side_information(b, k)) for k in keys)
            + f" {radio['outages']:>9} {radio['retransmissions']:>10} {radio['given_up']:>9}"
            + harq
        )
    for b in runs:
        if b.radio.get("prb_deciles"):
            shares = " ".join(f"{share:.1%}" for share in b.radio["prb_deciles"])
            lines.append(
                f"{b.algorithm:>{name_width}} PRB share by SNR decile (low→high): {shares}"
            )
    tables = {b.algorithm: bler_tables_text(b.bler_tables) for b in runs if b.bler_tables}
    if len(set(tables.values())) == 1:
        lines.append(f"{'BLER tables':>{name_width}} {next(iter(tables.values()))}")
    else:  # a sweep of bler_tables
        lines += [f"{label:>{name_width}} BLER tables: {text}" for label, text in tables.items()]
    lines.append(
        "radio: SNR on the whole uplink band without fading; rates as the transfers got them "
        "(band shares, fading, outages, failed blocks), over the clients that used the link; "
        "rho = down / up; outages, retransmit, given_up: whole transfers (whole_transfer and "
        "per_upload links); BLER and MCS: the harq link's transport blocks (failed share, mean "
        "MCS index)."
    )
    if any(side_information(b, "rho") for b in runs):
        lines.append(
            "*: over the air the updates go in one analog slot, not as bits: up Mbps is the rate "
            "of the digital side information each client sends before it (BAA: the mean and "
            "spread of each tensor, a few bytes), and rho is the downlink's rate over that one, "
            "not over the model's."
        )
    return lines


def _level_lines(budgets: list[Budget], name_width: int) -> list[str]:
    """With several cells: the backhaul's traffic per round; under hierarchical FL, per level
    (clients and edges over the radio, edges and the cloud over the backhaul) per cloud round,
    and the cloud round's time, measured and in closed form."""
    runs = [b for b in budgets if b.backhaul is not None]
    if not runs:
        return []
    columns = ("bh_up_MB/rnd", "bh_down_MB/rnd", "bh_up_tx/rnd", "bh_down_tx/rnd")
    lines = ["", f"{'backhaul':>{name_width}} " + " ".join(f"{c:>14}" for c in columns)]
    for b in runs:
        count = max(b.rounds, 1)
        values = (b.backhaul["up_bytes"] / 1e6, b.backhaul["down_bytes"] / 1e6)
        values += (b.backhaul["up_transmissions"], b.backhaul["down_transmissions"])
        lines.append(
            f"{b.algorithm:>{name_width}} " + " ".join(f"{v / count:>14.3f}" for v in values)
        )
    hierarchical = [b for b in runs if b.cloud is not None]
    if not hierarchical:
        return lines
    columns = (
        "cloud_rnds", "edge/cloud", "cloud_rnd_s", "closed_form_s", "backhaul_s",
        "radio_MB/cld", "bh_MB/cld",
    )  # fmt: skip
    lines += ["", f"{'cloud level':>{name_width}} " + " ".join(f"{c:>13}" for c in columns)]
    for b in hierarchical:
        cloud = b.cloud
        count = max(cloud["cloud_rounds"], 1)
        radio_mb = (b.uplink_bytes + b.downlink_bytes) / 1e6 / count
        backhaul_mb = (b.backhaul["up_bytes"] + b.backhaul["down_bytes"]) / 1e6 / count
        timed = (cloud["cloud_round_s"], cloud["closed_form_cloud_round_s"], cloud["backhaul_s"])
        lines.append(
            f"{b.algorithm:>{name_width}} {cloud['cloud_rounds']:>13} "
            f"{cloud['edge_rounds_per_cloud']:>13} "
            + " ".join(f"{'n/a':>13}" if t is None else f"{t:>13.3f}" for t in timed)
            + f" {radio_mb:>13.3f} {backhaul_mb:>13.3f}"
        )
    lines.append(
        "cloud level: a cloud round is edge/cloud edge rounds (the time per round above: "
        "clients and their edge over the radio), then the edges' models up the backhaul and "
        "the cloud's down (backhaul_s); radio_MB and bh_MB are per cloud round, both ways."
    )
    return lines


def _energy_lines(budgets: list[Budget], name_width: int) -> list[str]:
    """With system.energy: joules per round (computing, transmitting, receiving, idle, and of
    those wasted) and over the run, summed over the clients."""
    runs = [b for b in budgets if b.energy_j is not None]
    if not runs:
        return []
    parts = ("compute_j", "tx_j", "rx_j", "idle_j", "wasted_j")
    lines = [
        "",
        f"{'energy':>{name_width}} " + " ".join(f"{p[:-2] + ' J/rnd':>13}" for p in parts)
        + f" {'total J':>13} {'wasted':>8}",
    ]  # fmt: skip
    for b in runs:
        count = max(b.rounds, 1)
        total_j = sum(b.energy_j[p] for p in parts[:-1])
        share = b.energy_j["wasted_j"] / total_j if total_j else 0.0
        lines.append(
            f"{b.algorithm:>{name_width}} "
            + " ".join(f"{b.energy_j[p] / count:>13.4g}" for p in parts)
            + f" {total_j:>13.4g} {share:>8.1%}"
        )
    lines.append(
        "energy: summed over the clients; compute = the cycles model's k c D f^2, tx = transmit "
        "(uplink and D2D) power x air time, rx = receive power x air time; wasted is the part of "
        "those spent on work that was lost (cut, aborted, lost to outage, the air time of failed "
        "transport blocks), and its share of the total."
    )
    return lines


# --- settings that multiply the event model's work ----------------------------------------------

HEAVY_RATIO = 10  # a setting this many times finer than the channel needs...
HEAVY_WORK_PER_S = 10_000  # ...and this much work per simulated second: a warning
REFERENCE_MODEL_BITS = 8 * 100_000  # a 100 kB model: what the slow-uplink warning times
MANY_BLOCKS = 100_000  # fading blocks in one such upload: each an event, a warning
POSITION_STEP_M = 1.0  # a position per metre walked tracks path loss and shadowing, which
# change over tens of metres (TR 38.901 Table 7.5-6: shadowing decorrelates over 10-50 m)


def event_load_warnings(scenario: Scenario) -> list[str]:
    """One line per radio setting that multiplies the event model's work far beyond what the
    channel needs, with the field, an estimate of the work and what to change: a PRB
    scheduler's ``period_s`` many times shorter than the fading block, or position updates
    many times finer than a walk changes the path loss, with many clients."""
    radio = scenario.system.radio
    if radio is None:
        return []
    clients = scenario.clients.count
    sites = cell_grid(radio).num_sites if radio.cells is not None else 1
    block_s = fading_block_s(radio)
    block = (
        f"the fading block (system.radio.fading.coherence_s = {block_s:g} s), over which the "
        "channel stays the same"
        if block_s == radio.fading.coherence_s and radio.fading.model != "none"
        else f"the default period without block fading ({block_s:g} s)"
    )
    warnings = []
    sharing = radio.uplink_sharing
    period_s = None if isinstance(sharing, str) else sharing.period_s
    if period_s is not None:
        ratio, periods_per_s = block_s / period_s, sites / period_s
        if ratio >= HEAVY_RATIO and periods_per_s * clients >= HEAVY_WORK_PER_S:
            warnings.append(
                f"warning: system.radio.uplink_sharing.period_s = {period_s:g} s is "
                f"{ratio:.0f}x shorter than {block}: up to {periods_per_s:,.0f} scheduling "
                f"periods per simulated second ({sites} cell{'s' * (sites > 1)} / "
                f"{period_s:g} s), each re-planning the uploads of its cell, up to "
                f"{periods_per_s * clients:,.0f} upload re-plans per simulated second with "
                f"{clients:,} clients: {ratio:.0f}x the scheduling work of period_s = "
                f"{block_s:g} s; leave period_s out (the fading block) unless scheduling within "
                "a block is what you study"
            )
    slow = _weakest_uplink_warning(scenario, block_s)
    if slow is not None:
        warnings.append(slow)
    mobility = radio.mobility
    if mobility is not None:
        step_m = mobility.speed_mps * mobility.update_s
        updates_per_s = 1.0 / mobility.update_s
        work_per_s = updates_per_s * clients * sites
        if (
            step_m * HEAVY_RATIO <= POSITION_STEP_M
            and mobility.update_s < block_s
            and work_per_s >= HEAVY_WORK_PER_S
        ):
            warnings.append(
                f"warning: system.radio.mobility.update_s = {mobility.update_s:g} s moves a "
                f"client {100 * step_m:.3g} cm per position update (speed_mps = "
                f"{mobility.speed_mps:g}), while path loss and shadowing change over metres: "
                f"each update re-plans the client's upload and recomputes its path loss to "
                f"{'each of the ' * (sites > 1)}{sites} site{'s' * (sites > 1)}, up to "
                f"{work_per_s:,.0f} path losses per simulated second with "
                f"{clients:,} clients ({updates_per_s:.0f} updates per second, against "
                f"{1.0 / block_s:.0f} fading blocks); update_s = "
                f"{POSITION_STEP_M / mobility.speed_mps:.3g} s (a position per metre walked) "
                "tracks the path loss as well"
            )
    return warnings


def _weakest_uplink_warning(scenario: Scenario, block_s: float) -> str | None:
    """A warning where the weakest client's uplink, alone on the band and without fading (its
    best case), needs more than ``MANY_BLOCKS`` fading blocks for a 100 kB model: the channel
    changes, and the event model works, once per block of every such upload, so the run takes
    long though nothing is wrong with it. The clients are placed as the run places them. (The
    harq link sends nothing below MCS 0, and ends such an upload as a radio link failure.)"""
    radio_config = scenario.system.radio
    if radio_config is None or radio_config.fading.model == "none":
        return None
    if radio_config.link.model == "harq":  # below MCS 0 no block is sent: a link failure
        return None
    clients = scenario.clients.total
    radio = build_radio(radio_config, simpy.Environment(), RandomStreams(scenario.seed), clients)
    bandwidth_hz = radio_config.uplink_bandwidth_hz
    weakest = int(np.argmin(radio.mean_snr_db(bandwidth_hz)))
    rate_bps = radio.nominal_rate_bps(False, [weakest], bandwidth_hz)
    if rate_bps <= 0 or REFERENCE_MODEL_BITS / rate_bps < MANY_BLOCKS * block_s:
        return None  # no rate: an outage, which its link model ends
    upload_s = REFERENCE_MODEL_BITS / rate_bps
    x_m, y_m = radio.position_m(weakest)
    return (
        f"warning: system.radio: the weakest client's uplink (client {weakest}, "
        f"{math.hypot(x_m, y_m):,.0f} m from the centre, mean SNR "
        f"{float(radio.mean_snr_db(bandwidth_hz)[weakest]):.1f} dB on "
        f"uplink_bandwidth_hz = {bandwidth_hz:g}) carries {rate_bps:.3g} bit/s at best: a "
        f"100 kB model takes {upload_s:.3g} s, {upload_s / block_s:.3g} fading blocks of "
        f"{block_s:g} s, and the event model works once per block: the run will take long; "
        "raise tx_power_dbm, or bring cell_radius_m (or the sites) closer"
    )
