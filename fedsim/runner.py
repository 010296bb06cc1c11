"""Run a scenario: build the shared world once, run each algorithm on it, plot."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from fedsim.algorithms import ALGORITHMS
from fedsim.config import (
    DATA_ENV_VAR,
    AlgorithmConfig,
    Scenario,
    ScenarioError,
    pool_size,
    sample_shortage,
)
from fedsim.learn.data import FederatedDataset, build_federated_dataset, count_shards
from fedsim.learn.datasets import missing_files
from fedsim.learn.engines import EngineRefused
from fedsim.learn.execution import configure_threads
from fedsim.learn.models import build_model
from fedsim.learn.optimizers import OptimizerSpec
from fedsim.learn.trainer import Trainer
from fedsim.results.recorder import Recorder
from fedsim.streams import RandomStreams
from fedsim.world import World


def build_dataset(scenario: Scenario, *, timing_only: bool = False) -> FederatedDataset:
    """The clients' data, identical for every algorithm of the scenario.

    ``timing_only`` (``fedsim budget``): with ``dataset.timing_samples``, when the clients
    outnumber the samples (or always, if it says so) the clients get only sample counts drawn
    from its law, and no data is loaded."""
    dataset = scenario.dataset
    counts = dataset.timing_samples
    total = scenario.clients.total
    by_law = counts is not None and (
        counts.apply == "always" or total > pool_size(dataset.name, dataset.num_samples)
    )
    if timing_only and by_law:
        rng = RandomStreams(scenario.seed).generator("timing_samples")
        train = np.maximum(np.rint(counts.per_client.sample(rng, total)), 1).astype(int)
        return count_shards(dataset.name, train, dataset.test_fraction)
    require_a_sample_per_client(scenario)
    partition, shift = dataset.partition, dataset.group_shift
    try:
        return build_federated_dataset(
            dataset.name,
            root=dataset.resolved_root(),
            download=dataset.download,
            num_clients=scenario.clients.total,
            partition=partition.kind,
            alpha=getattr(partition, "alpha", 0.5),
            num_groups=getattr(partition, "groups", 2),
            balanced_groups=getattr(partition, "balanced", True),
            min_samples_per_client=getattr(partition, "min_samples_per_client", 10),
            num_samples=dataset.num_samples,
            test_fraction=dataset.test_fraction,
            train_fractions=tuple(dataset.train_fractions) if dataset.train_fractions else None,
            seed=RandomStreams(scenario.seed).integer_seed("partition"),
            group_transform=shift.kind if shift else None,
            transform_groups=shift.groups if shift else 4,
            rotation_angles=tuple(shift.angles_deg) if shift and shift.angles_deg else None,
            group_sizes=tuple(shift.sizes) if shift and shift.sizes else None,
        )
    except (OSError, ValueError) as error:
        said = str(error)  # the data's own checks name their field already
        problem = said if said.startswith(("dataset.", "dataset:")) else f"dataset: {said}"
        raise ScenarioError("dataset", [problem]) from None


def require_a_sample_per_client(scenario: Scenario) -> None:
    """Raise a ScenarioError naming the fields when the clients outnumber the training samples:
    validation lets such a scenario through with dataset.timing_samples, for budgets only."""
    clients = scenario.clients
    shortage = sample_shortage(scenario.dataset, clients.count, clients.arrivals.reserve)
    if shortage is not None:
        raise ScenarioError(
            "clients.count",
            [
                f"{shortage}: a training run needs a sample per client (dataset.timing_samples "
                "gives sample counts to fedsim budget only): use fewer clients or more samples"
            ],
        )


def build_trainers(
    scenario: Scenario, dataset: FederatedDataset, *, timing_only: bool = False
) -> list[Trainer]:
    """One trainer per client, shared by all clients of the same architecture.

    With a model mix, ``assign: by_size`` gives the first listed architecture to the
    clients with the most training data (PerFed-CKT: larger models for larger datasets).
    ``timing_only`` (``fedsim budget``): nothing is trained, the trainers only give the
    models' shapes, so they live on the CPU in fp32, eager, whatever ``training.device`` says
    (a budget of a GPU scenario runs on a machine without one). An engine named that cannot
    run a model is refused (``training.engine``, naming the layer).
    """
    training = scenario.training
    if timing_only:
        training = training.model_copy(
            update={"device": "cpu", "precision": "fp32", "compile": "eager"}
        )
    if training.device == "cuda" and not torch.cuda.is_available():
        raise ScenarioError(
            "training.device", ["training.device: cuda, but this machine has no CUDA device"]
        )
    optimizer = OptimizerSpec(
        name=training.optimizer,
        lr=training.lr,
        momentum=training.momentum,
        weight_decay=training.weight_decay,
    )
    shares = scenario.model.architectures
    try:
        trainers = [
            Trainer(
                build_model(share.name, dataset.input_shape, dataset.num_classes,
                            hidden_sizes=share.hidden_sizes),
                optimizer,
                batch_size=training.batch_size,
                device=training.device,
                engine=training.engine,
                precision=training.precision,
                memory_format=training.memory_format,
                vmap_chunk=training.vmap_chunk,
                compile=training.compile,
                family=share.name,
            )
            for share in shares
        ]  # fmt: skip
    except EngineRefused as refused:
        raise ScenarioError("training.engine", [f"training.engine: {refused}"]) from None
    num_clients = len(dataset.shards)
    if len(shares) == 1:
        return trainers * num_clients
    if scenario.model.assign == "by_size":
        order = sorted(range(num_clients), key=lambda c: -dataset.shards[c].num_train)
    else:
        order = RandomStreams(scenario.seed).generator("models").permutation(num_clients).tolist()
    bounds = np.round(np.cumsum([share.fraction for share in shares]) * num_clients).astype(int)
    per_client: list[Trainer] = [trainers[0]] * num_clients
    for rank, client in enumerate(order):
        per_client[client] = trainers[int(np.searchsorted(bounds, rank, side="right"))]
    return per_client


def select_algorithms(scenario: Scenario, only: Sequence[str] | None) -> list[AlgorithmConfig]:
    """The runs to do: all, or those whose label is in ``only`` (a swept run: its base label)."""
    if not only:
        return list(scenario.algorithms)
    labels = [a.run_label for a in scenario.algorithms]
    bases = {label.split("@", 1)[0] for label in labels}
    unknown = [label for label in only if label not in labels and label not in bases]
    if unknown:
        choices = ", ".join(sorted(bases))
        raise ScenarioError("--only", [f"no run labelled {unknown[0]!r}; labels: {choices}"])
    return [
        a for a in scenario.algorithms if {a.run_label, a.run_label.split("@", 1)[0]} & set(only)
    ]


def missing_data(scenario: Scenario, root: Path) -> str | None:
    """Why the dataset files a run of the scenario reads are not under ``root`` (naming who
    chose the root), or None when they are all there."""
    dataset = scenario.dataset
    needs_test = any(a.name == "perfed_ckt" for a in scenario.algorithms)  # its public set
    splits = ("train", "test") if needs_test else ("train",)
    missing = [path for split in splits for path in missing_files(dataset.name, root, split)]
    if not missing:
        return None
    if dataset.root is not None:
        chosen_by = "dataset.root"
    elif os.environ.get(DATA_ENV_VAR):
        chosen_by = DATA_ENV_VAR
    else:
        chosen_by = f"dataset.root (unset, and ${DATA_ENV_VAR} too: the default ./data)"
    fetch = "a run would download them" if dataset.download else "dataset.download is false"
    return f"{chosen_by}: no {dataset.name} files under {root}: {missing[0]} is missing ({fetch})"


def churn_times_s(scenario: Scenario) -> list[float]:
    """Times of the scheduled arrivals and departures (the moments to measure recovery at)."""
    clients = scenario.clients
    return sorted({c.time_s for c in (*clients.arrivals.schedule, *clients.departures.schedule)})


def run_algorithm(
    scenario: Scenario,
    algorithm: AlgorithmConfig,
    dataset: FederatedDataset,
    trainers: Trainer | list[Trainer],
    show_progress: bool = True,
    progress: Callable[[int, float], None] | None = None,
) -> dict:
    """One algorithm on the scenario's world; returns its summary.

    Torch runs with the scenario's ``training.threads`` (results depend on the count).
    """
    configure_threads(scenario.training.threads)
    label = algorithm.run_label
    recorder = Recorder(
        scenario.results_dir() / label,
        scenario_name=scenario.name,
        label=label,
        target_accuracy=scenario.evaluation.target_accuracy,
        resolved_scenario_yaml=scenario.to_yaml([algorithm]),
        churn_times_s=churn_times_s(scenario),
        energy=scenario.system.energy is not None,
        over_the_air=scenario.system.uplink_aggregation != "digital",
        backhaul=scenario.system.radio is not None and scenario.system.radio.cells is not None,
        hierarchical=algorithm.name == "hierfavg",
    )
    bar = tqdm(
        total=scenario.run.rounds,
        desc=label,
        unit="round",
        disable=not (show_progress and sys.stderr.isatty()),
        file=sys.stderr,
    )

    def on_round(round_index: int, time_s: float) -> None:
        bar.update(round_index - bar.n)
        bar.set_postfix_str(f"t={time_s:.1f}s")
        if progress is not None:
            progress(round_index, time_s)

    world = World(scenario, algorithm, dataset, trainers, recorder, on_round)
    try:
        world.run(ALGORITHMS[algorithm.name](world, algorithm))
    except (KeyboardInterrupt, ScenarioError):  # interrupted, or a setting stopped it
        world.finish(complete=False)
        raise
    finally:
        bar.close()
    return world.finish(complete=True)
