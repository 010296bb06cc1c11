"""One algorithm's timing-only run, summarised as its ``Budget``: bytes and transmissions per
round and direction, where each round's time goes, and, with cells, per level (the backhaul;
hierarchical FL's cloud)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from fedsim.algorithms import ALGORITHMS
from fedsim.budget.closed_forms import closed_form_round_s
from fedsim.config import AlgorithmConfig, HierFavgConfig, Scenario
from fedsim.learn.data import CountShard, FederatedDataset
from fedsim.learn.trainer import Trainer
from fedsim.results.files import BREAKDOWN
from fedsim.results.recorder import Recorder
from fedsim.world import World
from fedsim.world.network import rate_distribution
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
    # What a codec whose size depends on the values (QSGD) was counted on: "update" (a seeded
    # short training: ``representative_update``), "stand-in" (a standard-normal tensor, where
    # the clients' data is not loaded), None (no such codec).
    messages_sized_on: str | None = None
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
    # With system.constellation: passes, contact, bytes per pass, waiting (in hours).
    constellation: dict | None = None

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
    sized_on = None  # Budget.messages_sized_on
    if world.compression.sized_by_values:
        sample = representative_update(world)
        sized_on = "stand-in" if sample is None else "update"
        if sample is not None:
            world.compression.size_on(*sample)
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
        messages_sized_on=sized_on,
        radio=rate_distribution(world.network.radio) if world.network.radio else None,
        uplink_aggregation=scenario.system.uplink_aggregation,
        energy_j=world.energy.meter.totals() if world.energy else None,
        bler_tables=bler_tables(scenario),
        empty_rounds=len(empty),
        empty_rounds_cut_at={where: sum(r[where] for r in empty) for where in CUT_AT},
        backhaul=backhaul_totals(world),
        cloud=cloud_level(algorithm, rows, closed_form_s),
        constellation=recorder.summary_extra.get("constellation"),
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


def bler_tables(scenario: Scenario) -> dict | None:
    """The harq link's BLER curves as its validation resolved them; None without it."""
    radio = scenario.system.radio
    if radio is None or radio.link.model != "harq":
        return None
    return {"source": radio.link.bler_tables, "version": radio.link.bler_tables_version}


def representative_update(world: World) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The scenario's model at its seeded start and the update one local training of it makes
    on the first client's data (the scenario's local epochs or steps, batches seeded): what a
    codec whose size depends on the values (QSGD's Elias coding) is counted on in a
    timing-only run, where a standard-normal stand-in codes 1.5–2.4× larger than a trained
    LeNet-5 update. None where the clients' data is not loaded (sample counts only)."""
    shard = world.clients[0].shard
    if isinstance(shard, CountShard):
        return None
    trainer, training = world.trainer_of(0), world.scenario.training
    start = trainer.init_params(world.streams.integer_seed("init"))
    trained = trainer.train(
        start, shard.x_train, shard.y_train, epochs=training.local_epochs,
        steps=training.local_steps, seed=world.streams.integer_seed("batches", 0, 0),
    )  # fmt: skip
    return start, trained.params - start


def message_bytes(world: World) -> dict[str, int] | None:
    """Bytes of one model message per direction as its codec encodes it (None: no codec);
    a serverless algorithm's peer messages, a server's uplink and downlink."""
    codecs = world.compression.codecs
    if not world.compression.active:
        return None
    directions = ("peer",) if codecs["peer"] is not None else ("uplink", "downlink")
    return {d: world.model_message_bytes(d) for d in directions}
