"""The scenario: every section together, the checks that span sections, and sweeps (one
scenario per combination of swept values)."""

from __future__ import annotations

import copy
import itertools
import math
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import yaml
from pydantic import AfterValidator, Field, ValidationError, field_validator, model_validator

from fedsim.config.algorithms import AlgorithmConfig, CoboConfig, LocalConfig, UcflConfig
from fedsim.config.algorithms._async import AsyncServerConfig
from fedsim.config.algorithms._decentralized import DecentralizedConfig
from fedsim.config.algorithms._sync import CHANNEL_AWARE_POLICIES, SelectionConfig, SyncServerConfig
from fedsim.config.algorithms.cobo import (
    cobo_auto_penalty,
    cobo_largest_penalty,
    cobo_round_factor,
)
from fedsim.config.algorithms.ucfl import UCFL_PAPER_BATCHES
from fedsim.config.base import (
    MAX_RATE_MBPS,
    MAX_SEED,
    MAX_SWEEP_RUNS,
    MAX_TIME_S,
    MIN_RATE_MBPS,
    NO_BOOL,
    Fraction,
    Rounds,
    Seconds,
    SweepValue,
    _read_referenced_file,
    _scenario_name,
    _Strict,
)
from fedsim.config.clients import ClientsConfig
from fedsim.config.data import (
    SUGGESTED_TIMING_SAMPLES,
    DatasetConfig,
    pool_size,
    sample_shortage,
)
from fedsim.config.errors import describe
from fedsim.config.radio import AirCompConfig
from fedsim.config.system import SystemConfig
from fedsim.config.training import ModelConfig, TrainingConfig
from fedsim.sim.readers import read_availability, read_device_profiles, read_positions
from fedsim.sim.topology import build_graph

COBO_CHECKED_STEPS = 64  # local_epochs: the X-step counts checked, up to the mean client's


SATELLITE_CHECK_S = 86_400.0  # a constellation's visibility is checked over a day (or the budget)


class RunConfig(_Strict):
    """When a run ends: after so many rounds, so much simulated time, or the first of both."""

    rounds: Rounds | None = Field(
        default=None, description="rounds (an asynchronous server: its model updates)"
    )
    time_budget_s: Seconds | None = Field(
        default=None, description="simulated seconds (<= 1e7, ~116 days)"
    )

    @model_validator(mode="after")
    def _bounded(self) -> RunConfig:
        if self.rounds is None and self.time_budget_s is None:
            raise ValueError("set rounds, time_budget_s or both, so the run ends")
        return self


class EvaluationConfig(_Strict):
    """When to measure: every few rounds, or every few simulated seconds (not both).

    A time cadence compares algorithms at the same instants and keeps measuring when
    rounds stall (churn) or do not exist (asynchronous and decentralized algorithms).
    """

    every_rounds: Rounds | None = Field(
        default=None,
        description="evaluate every so many rounds, and at the last (1 when neither this nor "
        "every_s is given)",
    )
    every_s: Annotated[float, Field(ge=1e-3, le=MAX_TIME_S), NO_BOOL] | None = Field(
        default=None, description="evaluate every so many simulated seconds instead"
    )
    target_accuracy: Fraction | None = Field(
        default=None,
        description="the accuracy whose time, bytes and joules to reach go to summary.json",
    )

    @model_validator(mode="before")
    @classmethod
    def _one_cadence(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if data.get("every_rounds") is not None and data.get("every_s") is not None:
            raise ValueError("give every_rounds or every_s, not both")
        if data.get("every_rounds") is None and data.get("every_s") is None:
            return {**data, "every_rounds": 1}
        return data


class OutputConfig(_Strict):
    """Where results go, and whether the event log is written."""

    dir: Path = Field(
        default=Path("results"), description="results root: runs go to <dir>/<name>/<label>/"
    )
    events: bool = Field(default=False, description="write every event to events.jsonl")


MIXABLE_ALGORITHMS = ("local", "perfed_ckt")  # they never add up different clients' parameters
OVER_THE_AIR_ALGORITHMS = (
    "fedavg", "fedavgm", "fedadagrad", "fedadam", "fedyogi", "fedprox", "fedavg_ft", "ditto",
    "scaffold", "local",
)  # fmt: skip
"""What ``uplink_aggregation: aircomp | obda`` serves: the servers that average one model's
updates of a synchronous round (SCAFFOLD two tensors, not under obda), and Local (no uplink)."""


class Scenario(_Strict):
    name: Annotated[str, AfterValidator(_scenario_name)] = Field(
        description="results folder name: letters, digits, _ . + -"
    )
    seed: Annotated[int, Field(ge=0, le=MAX_SEED), NO_BOOL] = Field(
        default=0, description="derives independent random streams per purpose and client"
    )
    dataset: DatasetConfig = Field(description="the data and how it is split among the clients")
    model: ModelConfig = Field(description="what the clients train")
    clients: ClientsConfig = Field(description="how many, when online, who arrives and leaves")
    system: SystemConfig = Field(
        default=SystemConfig(), description="the system model: links, radio, compute, energy"
    )
    training: TrainingConfig = Field(
        default=TrainingConfig(), description="local training, and where it runs"
    )
    algorithms: Annotated[list[AlgorithmConfig], Field(min_length=1)] = Field(
        description="the algorithms compared, each run on the same world"
    )
    run: RunConfig = Field(description="when each run ends")
    evaluation: EvaluationConfig = Field(
        default=EvaluationConfig(), description="when accuracy is measured, and the target"
    )
    output: OutputConfig = Field(default=OutputConfig(), description="where results go")
    sweep: dict[str, Annotated[list[SweepValue], Field(min_length=1)]] = Field(
        default={},
        description="dotted key -> values (numbers, strings, booleans, null): every combination "
        f"(at most {MAX_SWEEP_RUNS}) runs on its own world",
    )

    @field_validator("algorithms")
    @classmethod
    def _unique_labels(cls, algorithms: list[AlgorithmConfig]) -> list[AlgorithmConfig]:
        labels = [a.run_label.casefold() for a in algorithms]  # folders: case may not count
        repeated = sorted({label for label in labels if labels.count(label) > 1})
        if repeated:
            raise ValueError(
                f"two runs share the label {repeated[0]!r} (case aside: they name folders): give "
                "each a distinct `label`"
            )
        return algorithms

    @model_validator(mode="after")
    def _oracle_needs_groups(self) -> Scenario:
        grouped = self.dataset.partition.kind == "label_groups" or self.dataset.group_shift
        for i, algorithm in enumerate(self.algorithms):
            if algorithm.name == "oracle" and not grouped:
                raise ValueError(
                    f"algorithms[{i}].name: oracle needs true groups: use partition "
                    "label_groups or a dataset.group_shift"
                )
        return self

    @model_validator(mode="after")
    def _group_sizes_cover_the_clients(self) -> Scenario:
        shift = self.dataset.group_shift
        clients = self.clients.count + self.clients.arrivals.reserve
        if shift is not None and shift.sizes is not None and sum(shift.sizes) != clients:
            raise ValueError(
                f"dataset.group_shift.sizes: they sum to {sum(shift.sizes)}, but there are "
                f"{clients} clients (clients.count plus the arrivals' reserve)"
            )
        return self

    @model_validator(mode="after")
    def _ucfl_takes_the_papers_variance_batches(self) -> Scenario:
        """UCFL's ``variance_batches: paper``: the paper's K for the dataset's kind of shift
        (§V-F: N/3 for covariate or concept shift, 100 of 1,000 samples for label shift)."""
        paper_k = UCFL_PAPER_BATCHES["group_shift" if self.dataset.group_shift else "label"]
        for i, algorithm in enumerate(self.algorithms):
            if isinstance(algorithm, UcflConfig) and algorithm.variance_batches == "paper":
                self.algorithms[i] = algorithm.model_copy(update={"variance_batches": paper_k})
        return self

    @model_validator(mode="after")
    def _gossip_needs_a_graph(self) -> Scenario:
        """D-SGD and ``peers: d2d`` talk over D2D links only: the scenario must have some."""
        constellation = self.system.constellation
        if self.system.d2d is not None or (constellation and constellation.isl is not None):
            return self
        for i, algorithm in enumerate(self.algorithms):
            if algorithm.name == "dsgd":
                where, what = "name", "dsgd gossips with its D2D neighbours"
            elif getattr(algorithm, "peers", "all") == "d2d":
                where, what = "peers", "d2d picks peers among the D2D neighbours"
            else:
                continue
            raise ValueError(
                f"algorithms[{i}].{where}: {what}: add a system.d2d section (its graph), or "
                "system.constellation.isl"
            )
        return self

    @model_validator(mode="after")
    def _satellites_are_the_clients(self) -> Scenario:
        """Each satellite is a client; a server that would wait for ever for a satellite no
        node sees (or a node that sees none) is refused here, not found as a hang."""
        constellation = self.system.constellation
        if constellation is None:
            return self
        clients = self.clients
        if clients.count + clients.arrivals.reserve != constellation.count:
            raise ValueError(
                f"clients.count: {clients.count} clients (with the reserve) for "
                f"{constellation.count} satellites: each satellite is a client"
            )
        if constellation.relay == "plane" and (clients.can_drop_out or clients.arrivals.reserve):
            raise ValueError(
                "system.constellation.relay: plane relays through every satellite of a plane, "
                "always there: no clients.availability, departures or arrivals"
            )
        budget_s = self.run.time_budget_s
        horizon_s = SATELLITE_CHECK_S if budget_s is None else min(budget_s, SATELLITE_CHECK_S)
        problems = constellation.check_visibility(horizon_s, clients.count, budget_s is None)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="after")
    def _cobo_penalty_step_is_stable(self) -> Scenario:
        """CoBo's X-step pulls every client towards its collaborators (``cobo_round_factor``);
        at W⁰ = 1, the worst case, a round must shrink the models' differences, or they blow
        up before the W-step can cut the links. Checked for SGD (the paper's optimizer) with
        as many clients as can be present at once, for the round's local steps (with
        local_epochs, every count up to the mean client's, at most ``COBO_CHECKED_STEPS``).
        ``penalty: auto`` is resolved here (``cobo_auto_penalty``), so scenario.yaml records
        the ρ a run used."""
        training, clients = self.training, self.clients.total
        if training.local_steps is not None:
            counts = [training.local_steps]
        else:
            per_client = pool_size(self.dataset.name, self.dataset.num_samples) / max(clients, 1)
            batches = math.ceil(per_client * (1 - self.dataset.test_fraction) / training.batch_size)
            counts = range(1, max(1, min(training.local_epochs * batches, COBO_CHECKED_STEPS)) + 1)
        sgd = training.optimizer == "sgd" and clients >= 2
        for i, algorithm in enumerate(self.algorithms):
            if isinstance(algorithm, CoboConfig) and algorithm.penalty == "auto":
                penalty = cobo_auto_penalty(training.lr, clients, counts, training.momentum, sgd)
                self.algorithms[i] = algorithm.model_copy(update={"penalty": penalty})
        if not sgd:
            return self
        for i, algorithm in enumerate(self.algorithms):
            if not isinstance(algorithm, CoboConfig):
                continue
            step, momentum = training.lr * algorithm.penalty, training.momentum
            factors = {k: cobo_round_factor(step, clients, k, momentum) for k in counts}
            steps, factor = max(factors.items(), key=lambda item: abs(item[1]))
            if abs(factor) < 1:
                continue
            largest = min(cobo_largest_penalty(training.lr, clients, k, momentum) for k in counts)
            why = (
                f"lr x penalty x clients = {step * clients:.3g}, at or over 2"
                if steps == 1
                else f"{steps} local steps, momentum {momentum:g}"
            )
            raise ValueError(
                f"algorithms[{i}].penalty: with W0 = 1 and {clients} clients one round of the "
                f"X-step multiplies the models' differences by {factor:.3g} ({why}): they "
                f"diverge; use penalty < {largest:.3g} (well below: the loss's own curvature "
                "takes its share of the step)"
            )
        return self

    @model_validator(mode="after")
    def _mixed_models_do_not_average(self) -> Scenario:
        if not self.model.mix:
            return self
        for i, algorithm in enumerate(self.algorithms):
            if algorithm.name not in MIXABLE_ALGORITHMS:
                raise ValueError(
                    f"algorithms[{i}].name: {algorithm.name} averages parameters, so every client "
                    f"needs the same model; model.mix works with {', '.join(MIXABLE_ALGORITHMS)}"
                )
        return self

    @model_validator(mode="after")
    def _over_the_air_serves_averaging_servers(self) -> Scenario:
        """A slot returns one noisy average (or vote) of the round's updates: only servers that
        need nothing else of the uploads can use it, and an analog uplink has no codec."""
        mode = self.system.uplink_aggregation
        if mode == "digital":
            return self
        served = [a for a in OVER_THE_AIR_ALGORITHMS if a != "scaffold" or mode == "aircomp"]
        for i, algorithm in enumerate(self.algorithms):
            if algorithm.name not in served:
                raise ValueError(
                    f"algorithms[{i}].name: {algorithm.name} cannot use system.radio."
                    f"uplink_aggregation {mode}: a slot gives the server only the "
                    f"{'average' if mode == 'aircomp' else 'majority vote'} of the round's "
                    f"updates, which serves {', '.join(served)}"
                )
            compression = getattr(algorithm, "compression", None)
            if compression is not None and compression.uplink is not None:
                raise ValueError(
                    f"algorithms[{i}].compression.uplink: with system.radio.uplink_aggregation "
                    f"{mode} the updates go over the air as analog amplitudes, not as coded bits"
                )
        return self

    @model_validator(mode="after")
    def _channel_aware_selection_needs_a_radio(self) -> Scenario:
        """A channel-aware policy ranks clients by the uplink SNR the base station knows: that
        needs a channel (system.radio), and one that a pilot sent before the upload tells
        something about (block fading; fading re-drawn per transmission is new every time)."""
        radio = self.system.radio
        for i, algorithm in enumerate(self.algorithms):
            policy = algorithm.selection.policy if isinstance(algorithm, SyncServerConfig) else None
            if policy not in CHANNEL_AWARE_POLICIES:
                continue
            if radio is None:
                raise ValueError(
                    f"algorithms[{i}].selection.policy: {policy} ranks clients by their "
                    "uplink SNR: add a system.radio section (the channel), or use random, "
                    "round_robin or age_based"
                )
            if radio.fading.model != "none" and radio.fading.coherence_s is None:
                raise ValueError(
                    f"algorithms[{i}].selection.policy: {policy} needs block fading "
                    "(system.radio.fading.coherence_s): fading re-drawn at every transmission "
                    "makes a reported SNR say nothing of the upload's"
                )
        return self

    @model_validator(mode="after")
    def _renewal_churn_needs_a_time_budget(self) -> Scenario:
        """On/off renewals never stop. A deadline closes every synchronous round, but Local and
        asynchronous runs count completed work, and work longer than the online periods never
        completes: without a time budget such a run (or its budget) would never end."""
        if self.clients.availability.kind != "renewal" or self.run.time_budget_s is not None:
            return self
        for i, algorithm in enumerate(self.algorithms):
            if isinstance(algorithm, LocalConfig | AsyncServerConfig):
                raise ValueError(
                    f"run.time_budget_s: required for algorithms[{i}] ({algorithm.name}) with "
                    "clients.availability 'renewal': clients go offline and come back forever, "
                    "and work longer than the online periods never completes, so rounds alone "
                    "may never end the run"
                )
        return self

    @model_validator(mode="after")
    def _dropouts_need_deadlines(self) -> Scenario:
        if not self.clients.can_drop_out:
            return self
        for i, algorithm in enumerate(self.algorithms):
            if (
                isinstance(algorithm, SyncServerConfig | DecentralizedConfig)
                and algorithm.deadline_s is None
            ):
                raise ValueError(
                    f"algorithms[{i}].deadline_s: required when clients can go offline or "
                    "leave (a lost update or message is only noticed through the deadline)"
                )
            if isinstance(algorithm, AsyncServerConfig) and algorithm.task_timeout_s is None:
                raise ValueError(
                    f"algorithms[{i}].task_timeout_s: required when clients can go offline or "
                    "leave (a lost client's slot is freed only by the timeout)"
                )
        return self

    @model_validator(mode="after")
    def _traces_cover_the_clients(self) -> Scenario:
        """A device or availability trace must have an entry for every client."""
        traces = []
        if self.system.devices is not None:
            traces.append(("system.devices.path", self.system.devices.path, read_device_profiles))
        if self.clients.availability.kind == "intervals":
            traces.append(
                ("clients.availability.path", self.clients.availability.path, read_availability)
            )
        for field_name, path, read in traces:
            entries = len(_read_referenced_file(path, read))
            if entries < self.clients.total:
                raise ValueError(
                    f"{field_name}: {path} has {entries} clients, the scenario "
                    f"{self.clients.total} (clients.count plus the arrivals' reserve)"
                )
        return self

    @model_validator(mode="after")
    def _positions_cover_the_clients(self) -> Scenario:
        radio = self.system.radio
        if radio is None or radio.positions is None:
            return self
        placed = _read_referenced_file(radio.positions, read_positions)
        missing = sorted(set(range(self.clients.total)) - set(placed))
        if missing:
            shown = ", ".join(map(str, missing[:5])) + (", ..." if len(missing) > 5 else "")
            raise ValueError(
                f"system.radio.positions: {radio.positions} places no client {shown} "
                f"({len(missing)} of the {self.clients.total} clients, reserve included)"
            )
        return self

    @model_validator(mode="after")
    def _edge_list_fits_the_clients(self) -> Scenario:
        """Read the D2D edge-list file now (it needs the number of clients): a missing,
        malformed or disconnected one is found by validate, not when the world is built."""
        d2d = self.system.d2d
        if d2d is None or d2d.edge_list is None:
            return self

        def read(path: Path) -> Any:
            rng = np.random.default_rng(0)  # an edge list draws nothing
            return build_graph("edge_list", self.clients.total, rng, edge_list_path=path)

        try:
            graph = _read_referenced_file(d2d.edge_list, read)
        except ValueError as error:
            raise ValueError(f"system.d2d.edge_list: {error}") from None
        for u, v, rate_bps in graph.edges(data="rate_bps"):
            if rate_bps is not None and not MIN_RATE_MBPS <= rate_bps / 1e6 <= MAX_RATE_MBPS:
                raise ValueError(
                    f"system.d2d.edge_list: edge {u}-{v} has rate {rate_bps / 1e6:g} Mbps, "
                    f"outside {MIN_RATE_MBPS:g}..{MAX_RATE_MBPS:g}"
                )
        return self

    @model_validator(mode="after")
    def _a_sample_per_client(self) -> Scenario:
        """Every client trains on at least one sample of the shared pool. A budget of more
        clients than samples needs dataset.timing_samples; with it the scenario is valid, and
        a training run refuses it when it builds the data (runner.build_dataset)."""
        clients = self.clients
        shortage = sample_shortage(self.dataset, clients.count, clients.arrivals.reserve)
        if shortage is not None and self.dataset.timing_samples is None:
            raise ValueError(
                f"{shortage}: to budget without data, set dataset.timing_samples: add "
                f"`timing_samples: {{per_client: {SUGGESTED_TIMING_SAMPLES}}}` under dataset "
                "(fedsim budget then gives each client a sample count from that law)"
            )
        return self

    @model_validator(mode="after")
    def _sweep_values_are_valid(self) -> Scenario:
        self.variants()  # raises, naming the swept key, if a combination is invalid
        return self

    def variants(self) -> list[Scenario]:
        """One scenario per combination of the sweep (just this one without a sweep).

        Each variant's runs are labelled ``<label>@<key>=<value>`` so that all of them
        land side by side in this scenario's results folder.
        """
        if not self.sweep:
            return [self]
        base = self.model_dump(mode="json", exclude={"sweep"})
        keys = list(self.sweep)
        combinations = int(np.prod([len(self.sweep[k]) for k in keys], dtype=float))
        if combinations > MAX_SWEEP_RUNS:
            raise ValueError(
                f"sweep: {combinations:,} combinations; at most {MAX_SWEEP_RUNS} (each is a run)"
            )
        variants, suffixes = [], set()
        for values in itertools.product(*(self.sweep[k] for k in keys)):
            data = copy.deepcopy(base)
            suffix = ",".join(
                f"{k.rsplit('.', 1)[-1]}={v}" for k, v in zip(keys, values, strict=True)
            )
            if suffix.casefold() in suffixes:  # e.g. [1, 1], or [a, A] on a case-blind disk
                raise ValueError(
                    f"sweep.{keys[0]}: two combinations are both labelled {suffix!r}, so their "
                    "runs would share a results folder: list each value once"
                )
            suffixes.add(suffix.casefold())
            for key, value in zip(keys, values, strict=True):
                _set_dotted(data, key, value)
            for algorithm in data["algorithms"]:
                algorithm["label"] = f"{algorithm['label'] or algorithm['name']}@{suffix}"
            try:
                variants.append(Scenario.model_validate(data))
            except ValidationError as error:
                first = _describe(error.errors()[0])
                raise ValueError(
                    f"sweep.{keys[0]}: the combination {suffix} is invalid: {first}"
                ) from None
        return variants

    def settings(self, unit: str) -> dict[str, float]:
        """Every number set in a field whose name ends with ``unit`` (``_s``, ``_mbps``), by its
        path (``algorithms[0].deadline_s``): what a stop message can name as the cause."""
        found: dict[str, float] = {}

        def walk(node: Any, path: str) -> None:
            if isinstance(node, dict):
                for key, value in node.items():
                    inner = f"{path}.{key}" if path else str(key)
                    if key == "value" and isinstance(value, (int, float)):
                        inner = path  # a constant law: the number the user wrote there
                    walk(value, inner)
            elif isinstance(node, list):
                for index, value in enumerate(node):
                    walk(value, f"{path}[{index}]")
            elif isinstance(node, (int, float)) and not isinstance(node, bool):
                *_, parent, key = ["", *path.split(".")]
                own = key.endswith(unit) and not key.endswith("_per_s")  # rate_per_s: no span
                if own or (key in ("low", "median") and parent.endswith(unit)):
                    found[path] = float(node)

        walk(self.model_dump(mode="json", exclude={"sweep"}), "")
        return found

    def results_dir(self) -> Path:
        return self.output.dir / self.name

    def to_yaml(self, algorithms: list[AlgorithmConfig] | None = None) -> str:
        """The resolved scenario (defaults filled in), optionally narrowed to some runs."""
        data = self.model_dump(mode="json")
        if algorithms is not None:
            data["algorithms"] = [a.model_dump(mode="json") for a in algorithms]
        for algorithm in data["algorithms"]:  # options of codecs not used: the file as before
            compression = algorithm.get("compression")
            if compression is None:
                algorithm.pop("compression", None)
            elif compression.get("peer") is None:
                compression.pop("peer", None)
            if "consensus_step" in algorithm and algorithm["consensus_step"] is None:
                del algorithm["consensus_step"]  # D-SGD without a peer codec
            if algorithm.get("selection") == SelectionConfig().model_dump(mode="json"):
                del algorithm["selection"]  # random, the only policy before there were others
        if data["system"].get("constellation", 0) is None:
            del data["system"]["constellation"]  # no satellites: the file as before
        radio = data["system"].get("radio")
        if radio is not None:  # an over-the-air uplink's keys at their defaults: as before
            if radio["uplink_aggregation"] == "digital":
                del radio["uplink_aggregation"]
            if radio["aircomp"] == AirCompConfig().model_dump(mode="json"):
                del radio["aircomp"]
            for key in ("power_control", "cells"):  # the cellular keys, off: as before
                if radio[key] is None:
                    del radio[key]
            if radio["link"].get("sinr_threshold_db", 0) is None:
                del radio["link"]["sinr_threshold_db"]
            if radio["fading"]["profile"] == "flat":  # fading flat across the band: as before
                for key in ("profile", "delay_spread_ns", "subband_prbs", "placement"):
                    del radio["fading"][key]
        return yaml.safe_dump(data, sort_keys=False)


def _set_dotted(data: dict, key: str, value: Any) -> None:
    *parents, last = key.split(".")
    node = data
    for part in parents:
        if not isinstance(node.get(part), dict):
            raise ValueError(f"sweep.{key}: {part!r} is not a section of the scenario")
        node = node[part]
    if last not in node:
        raise ValueError(
            f"sweep.{key}: {last!r} is not a key of {'.'.join(parents) or 'the scenario'}"
        )
    node[last] = value


def _describe(error: dict) -> str:
    """A pydantic error of a scenario as ``field.path: reason``."""
    return describe(error, Scenario)
