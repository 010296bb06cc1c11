"""A whole run end to end: where its wall time goes, and how close its training gets to peak.

A scenario's (first) algorithm runs as ``fedsim run`` runs it (``build_dataset``,
``build_trainers``, ``run_algorithm``, results written to a temporary folder), and its wall
time is split into:

- start-up: building the dataset, the trainers and the World;
- training: inside ``Trainer.train`` / ``Trainer.train_many``;
- evaluation: inside ``Trainer.evaluate`` / ``evaluate_many`` / ``evaluate_each`` /
  ``probabilities`` / ``evaluate_ensemble``;
- other trainer calls (``gradient``, ``init_params``, ...) outside the above;
- the rest: the event loop, the protocol, aggregation and the recorder.

Beside it, the training phase's client-samples/s against one ``train_many`` call over every
client's training data with the same trainer (``train_many_rate``): how much of the engine's
rate on those clients the run keeps (``run_over_train_many``; issue 39's target: within 20%).

The phases are timed by wrappers around those methods (and ``World.__init__``) that add up
``perf_counter`` over the outermost call only (train_many's loop calls train: counted once).
The training phase's achieved GFLOP/s: FLOPs of one step on one full batch of the client's
model, counted by ``FlopCounterMode`` after the run (as ``training_throughput`` does), times
the samples trained over the batch size (the steps, where every batch is full: matmul and
convolution FLOPs are linear in the batch), from the ``TrainResult`` objects; as a share of
the matmul peak of the precision used on the device that trains (``precision.matmul_peak``
with the run's threads, or on the GPU, measured before and after the runs: the better of the
two).

Default: built in code, 20 MNIST clients (``--clients``; IID, 12,000 images shared, each
client's 80% trained on), FedAvg on every client per round, the FedAvg paper's ``cnn``, plain
SGD (lr 0.05), one local epoch, 5 rounds, evaluation every round, one torch thread; once with
batch 10 and once with batch 32.

    FEDSIM_DATA=../shared/data python -m benchmarks.whole_run [--batch-sizes 10 32]
        [--rounds 5] [--precision fp32] [--memory-format auto] [--scenario FILE]
        [--device cuda] [--clients 100]
"""

from __future__ import annotations

import functools
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from unittest import mock

import torch

from benchmarks._common import base_parser, table, write_results
from benchmarks.precision import cpu_features, matmul_peak
from benchmarks.training_throughput import step_flops
from fedsim.config import Scenario, load_scenario, parse_scenario
from fedsim.learn.data import FederatedDataset
from fedsim.learn.execution import PRECISIONS, configure_determinism
from fedsim.learn.trainer import Trainer, TrainResult
from fedsim.runner import build_dataset, build_trainers, run_algorithm
from fedsim.world import World

TRAINING = ("train", "train_many")
EVALUATION = ("evaluate", "evaluate_many", "evaluate_each", "probabilities", "evaluate_ensemble")
PHASES = ("startup", "training", "evaluation", "other_trainer")


def default_scenario(rounds: int, num_samples: int | None, clients: int = 20) -> Scenario:
    """``clients`` MNIST clients, IID, FedAvg with every client, the FedAvg paper's CNN."""
    return parse_scenario(
        {
            "name": "whole_run",
            "seed": 0,
            "dataset": {"name": "mnist", "num_samples": num_samples, "download": False,
                        "partition": {"kind": "iid"}},
            "model": {"name": "cnn"},
            "clients": {"count": clients},
            "training": {"optimizer": "sgd", "lr": 0.05, "momentum": 0.0, "local_epochs": 1},
            "algorithms": [{"name": "fedavg", "client_fraction": 1.0}],
            "run": {"rounds": rounds},
            "evaluation": {"every_rounds": 1},
        }
    )  # fmt: skip


class PhaseClock:
    """Seconds per phase (outermost wrapped call only) and the training each trainer did."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.calls = dict.fromkeys(PHASES, 0)
        self.trained: dict[int, dict] = {}  # id(trainer) -> trainer, steps, samples
        self._inside = False

    def wrap(self, method: Callable, phase: str) -> Callable:
        @functools.wraps(method)
        def wrapper(*args, **kwargs):
            if self._inside:  # nested in a timed call: counted by that one
                return method(*args, **kwargs)
            self._inside = True
            start = time.perf_counter()
            try:
                result = method(*args, **kwargs)
            finally:
                self.seconds[phase] += time.perf_counter() - start
                self.calls[phase] += 1
                self._inside = False
            if phase == "training":
                self._count(args[0], result if isinstance(result, list) else [result])
            return result

        return wrapper

    def _count(self, trainer: Trainer, results: list[TrainResult]) -> None:
        entry = self.trained.setdefault(id(trainer), {"trainer": trainer, "steps": 0, "samples": 0})
        entry["steps"] += sum(r.steps for r in results)
        entry["samples"] += sum(r.samples for r in results)

    @contextmanager
    def patched(self) -> Iterator[PhaseClock]:
        public = [n for n, v in vars(Trainer).items() if callable(v) and not n.startswith("_")]
        with ExitStack() as stack:
            for name in public:
                patch = mock.patch.object(
                    Trainer, name, self.wrap(getattr(Trainer, name), _phase(name))
                )
                stack.enter_context(patch)
            world_init = self.wrap(World.__init__, "startup")
            stack.enter_context(mock.patch.object(World, "__init__", world_init))
            yield self


def _phase(method_name: str) -> str:
    if method_name in TRAINING:
        return "training"
    return "evaluation" if method_name in EVALUATION else "other_trainer"


def training_flops(clock: PhaseClock, dataset: FederatedDataset) -> float:
    """FLOPs of the training phase: per-sample FLOPs of each trainer's step x samples."""
    shard = max(dataset.shards, key=lambda s: s.num_train)
    total = 0.0
    for entry in clock.trained.values():
        trainer = entry["trainer"]
        x, y = shard.x_train[: trainer.batch_size], shard.y_train[: trainer.batch_size]
        if len(y) < trainer.batch_size:
            raise ValueError(f"no shard holds a full batch of {trainer.batch_size}")
        total += step_flops(trainer, x, y) / trainer.batch_size * entry["samples"]
    return total


def train_many_rate(sc: Scenario, dataset: FederatedDataset, trainers: list[Trainer]) -> float:
    """Client-samples/s of one ``train_many`` call over every client's training data with the
    run's trainer and work unit (one FedAvg round with all clients at once): the engine's
    rate on the run's own clients, which the run's training phase is measured against.
    Timed after one untimed call, to the end of the device's kernels (results on the host)."""
    trainer = trainers[0]
    shards = dataset.shards
    data = [(shard.x_train, shard.y_train) for shard in shards]
    starts = [trainer.init_params(0)] * len(shards)

    def train() -> list[TrainResult]:
        return trainer.train_many(
            starts, data, steps=sc.training.local_steps, epochs=sc.training.local_epochs,
            seeds=list(range(len(shards))),
        )  # fmt: skip

    train()
    start = time.perf_counter()
    samples = sum(r.samples for r in train())
    return samples / (time.perf_counter() - start)


def whole_run(sc: Scenario) -> dict:
    """One run of the scenario's first algorithm, its wall time split into phases."""
    algorithm = sc.algorithms[0]
    configure_determinism(sc.training.deterministic)  # as fedsim run does
    clock = PhaseClock()
    with tempfile.TemporaryDirectory() as out:
        sc = sc.model_copy(update={"output": sc.output.model_copy(update={"dir": Path(out)})})
        with clock.patched():
            start = time.perf_counter()
            dataset = build_dataset(sc)
            trainers = build_trainers(sc, dataset)
            clock.seconds["startup"] += time.perf_counter() - start
            summary = run_algorithm(sc, algorithm, dataset, trainers, show_progress=False)
            total_s = time.perf_counter() - start
    flops = training_flops(clock, dataset)
    seconds = {f"{p}_s": clock.seconds[p] for p in PHASES}
    rest_s = total_s - sum(seconds.values())
    training_s = clock.seconds["training"]
    gflops = flops / training_s / 1e9 if training_s else None
    train_samples = sum(e["samples"] for e in clock.trained.values())
    run_rate = train_samples / training_s if training_s else None
    one_trainer = len({id(t) for t in trainers}) == 1  # else no single reference call
    reference = train_many_rate(sc, dataset, trainers) if one_trainer else None
    return {
        "scenario": sc.name,
        "algorithm": algorithm.run_label,
        "model": "+".join(a.name for a in sc.model.architectures),
        "batch": sc.training.batch_size,
        "precision": sc.training.precision,
        "memory_format": sc.training.memory_format,
        "channels_last": any(t.channels_last for t in trainers),
        "threads": sc.training.threads,
        "rounds": sc.run.rounds,
        "total_s": total_s,
        **seconds,
        "rest_s": rest_s,
        **{f"{p}_share": clock.seconds[p] / total_s for p in PHASES},
        "rest_share": rest_s / total_s,
        "training_calls": clock.calls["training"],
        "evaluation_calls": clock.calls["evaluation"],
        "train_steps": sum(e["steps"] for e in clock.trained.values()),
        "train_samples": train_samples,
        "run_samples_per_s": run_rate,
        "train_many_samples_per_s": reference,
        "run_over_train_many": run_rate / reference if run_rate and reference else None,
        "training_gflop": flops / 1e9,
        "training_gflops": gflops,
        "final_accuracy": summary.get("final_accuracy"),
    }


def scenarios(args) -> list[Scenario]:
    """The scenario (built in, or the file's first algorithm) once per batch size."""
    if args.scenario is None:
        base = default_scenario(args.rounds or 5, args.num_samples or None, args.clients)
    else:
        base = load_scenario(args.scenario)
        base = base.model_copy(update={"algorithms": base.algorithms[:1]})
        if args.rounds is not None:
            base = base.model_copy(
                update={"run": base.run.model_copy(update={"rounds": args.rounds})}
            )
    training = {"precision": args.precision} if args.precision else {}
    if args.memory_format:
        training["memory_format"] = args.memory_format
    if args.threads is not None:
        training["threads"] = args.threads
    if args.device is not None:
        training["device"] = args.device
    runs = []
    for batch_size in args.batch_sizes or [base.training.batch_size]:
        update = {**training, "batch_size": batch_size}
        runs.append(base.model_copy(update={"training": base.training.model_copy(update=update)}))
    return runs


COLUMNS = ("model", "batch", "precision", "channels_last", "total_s", "startup_s",
           "training_s", "evaluation_s", "other_trainer_s", "rest_s", "rest_share", "train_steps",
           "training_gflops", "training_share_of_peak", "run_samples_per_s",
           "train_many_samples_per_s", "run_over_train_many")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> dict:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--scenario", type=Path, default=None,
                        help="run its first algorithm, not the built-in FedAvg")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=None, help="default 5 (or the file's)")
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=None,
                        help="one run each (default 10 32, or the file's)")  # fmt: skip
    parser.add_argument("--precision", choices=PRECISIONS, default=None,
                        help="training.precision (default fp32, or the file's)")  # fmt: skip
    parser.add_argument("--memory-format", choices=["auto", "contiguous", "channels_last"],
                        default=None, help="training.memory_format (default: auto)")  # fmt: skip
    parser.add_argument("--num-samples", type=int, default=12_000,
                        help="built-in scenario's MNIST images (0: all 60,000)")  # fmt: skip
    parser.add_argument("--matmul-size", type=int, default=2048)
    parser.add_argument("--clients", type=int, default=20, help="built-in scenario's clients")
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None,
                        help="training.device (default: cpu, or the file's)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.scenario is None and args.batch_sizes is None:
        args.batch_sizes = [10, 32]
    runs = scenarios(args)
    before = matmul_peaks(runs, args.matmul_size)
    rows = [whole_run(sc) for sc in runs]
    after = matmul_peaks(runs, args.matmul_size)
    peaks = {key: max(before[key], after[key]) for key in before}
    for row in rows:
        gflops = row["training_gflops"]
        row["training_share_of_peak"] = None if gflops is None else gflops / peaks[row["precision"]]
    results = {"cpu_features": cpu_features(), "matmul_peak_gflops": peaks,
               "matmul_size": args.matmul_size, "rows": rows}  # fmt: skip
    path = write_results("whole_run", results, args.out)
    print(", ".join(f"{p} matmul peak {g:.1f} GFLOP/s" for p, g in peaks.items()))
    print(table(rows, COLUMNS))
    print(f"written: {path}")
    return results


def matmul_peaks(runs: list[Scenario], size: int) -> dict[str, float]:
    """The matmul peak of each precision the runs train with, on as many threads (the runs
    of one invocation share the scenario's, or --threads)."""
    before = torch.get_num_threads()
    torch.set_num_threads(runs[0].training.threads)
    device = runs[0].training.device  # the peak of the device that trains, not the host's
    try:
        return {
            p: matmul_peak(p, size, 3, device)
            for p in dict.fromkeys(sc.training.precision for sc in runs)
        }
    finally:
        torch.set_num_threads(before)


if __name__ == "__main__":
    main(sys.argv[1:])
