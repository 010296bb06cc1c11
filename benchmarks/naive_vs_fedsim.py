"""FedAvg rounds: fedsim against a naive implementation typical of FL libraries.

The same workload on both sides: Fashion-MNIST partitioned by fedsim (iid; by default all
60,000 training images over 100 clients, i.e. 600 each, of which 480 train locally and 120
are the client's test split), the same model, SGD (lr 0.05, momentum 0.9), batch 32, one
local epoch per round, every client in every round, the same initial model.

The naive side is what an FL library typically does: each client's data is a
``torch.utils.data.Dataset`` of uint8 images that a ``DataLoader`` turns into tensors one
sample at a time (PIL image -> torchvision ToTensor + Normalize), each client trains a
``copy.deepcopy`` of the global ``nn.Module`` with a fresh ``torch.optim.SGD``, and the server
averages ``state_dict``s. fedsim runs its own World (SimPy clock, FedAvg protocol, evaluation
of the last round) on pre-normalized tensor shards with flat parameter vectors.

Same results: the naive DataLoader draws each client's batches in fedsim's order (same
per-client seeds), so both compute the same arithmetic; the final global parameters are
compared (relative L2 difference <= 1e-4: the same arithmetic up to float rounding, which
grows a little over the steps) and so are the pooled test accuracies (within 0.5 points).

    python -m benchmarks.naive_vs_fedsim [--clients 100] [--rounds 1] [--models cnn mlp]
"""

from __future__ import annotations

import copy
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms

from benchmarks._common import base_parser, set_threads, table, write_results
from fedsim.algorithms import ALGORITHMS
from fedsim.config import Scenario, parse_scenario
from fedsim.learn.data import FederatedDataset
from fedsim.results.recorder import Recorder
from fedsim.runner import build_dataset, build_trainers
from fedsim.streams import RandomStreams
from fedsim.world import World

MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST's normalization, as fedsim's data module uses
PARAMS_RTOL = 1e-4  # ||fedsim - naive|| / ||fedsim||: same arithmetic up to float rounding
ACCURACY_TOL = 0.005  # pooled accuracy: a handful of borderline test samples may flip
# (and at least one sample of a small test set: the two evaluate in different batch sizes,
# whose kernels may round a near-tie either way on some CPUs)


def scenario(model: str, clients: int, rounds: int, num_samples: int | None) -> Scenario:
    """The FedAvg workload; the system model does not affect how long training takes here."""
    return parse_scenario(
        {
            "name": "naive_vs_fedsim",
            "seed": 0,
            "dataset": {"name": "fashion_mnist", "num_samples": num_samples,
                        "partition": {"kind": "iid"}, "download": False},
            "model": {"name": model},
            "clients": {"count": clients},
            "training": {"optimizer": "sgd", "lr": 0.05, "momentum": 0.9, "batch_size": 32,
                         "local_epochs": 1},
            "algorithms": [{"name": "fedavg", "client_fraction": 1.0}],
            "run": {"rounds": rounds},
            "evaluation": {"every_rounds": rounds},
        }
    )  # fmt: skip


def run_fedsim(sc: Scenario, dataset: FederatedDataset) -> tuple[float, torch.Tensor, float]:
    """Seconds, final global parameters and final pooled accuracy of fedsim's run (which
    writes its results folder, as a real run does)."""
    trainers = build_trainers(sc, dataset)
    algorithm = sc.algorithms[0]
    with tempfile.TemporaryDirectory() as run_dir:
        start = time.perf_counter()
        recorder = Recorder(Path(run_dir), scenario_name=sc.name, label="fedavg",
                            target_accuracy=None, resolved_scenario_yaml="")  # fmt: skip
        world = World(sc, algorithm, dataset, trainers, recorder)
        world.run(ALGORITHMS[algorithm.name](world, algorithm))
        summary = world.finish(complete=True)
        seconds = time.perf_counter() - start
    final = world.models  # the global model FedAvg set at its last round
    return seconds, final, summary["final_accuracy"]


# --- the naive implementation -------------------------------------------------------------------


class ImageDataset(Dataset):
    """uint8 images transformed per sample, as torchvision's datasets do."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, transform: transforms.Compose):
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image = Image.fromarray(self.images[index], mode="L")
        return self.transform(image), int(self.labels[index])


def raw_images(x: torch.Tensor) -> np.ndarray:
    """A shard's uint8 pixels (H, W per image), recovered exactly from its normalized floats."""
    pixels = (x * STD + MEAN).mul_(255).round_().clamp_(0, 255).to(torch.uint8)
    check = pixels.to(torch.float32).div_(255).sub_(MEAN).div_(STD)
    if not torch.allclose(check, x, atol=1e-5):
        raise RuntimeError("the shard's pixels are not recoverable as uint8")
    return pixels[:, 0].numpy()


def naive_clients(dataset: FederatedDataset) -> list[tuple[ImageDataset, ImageDataset]]:
    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((MEAN,), (STD,))])
    return [
        (
            ImageDataset(raw_images(s.x_train), s.y_train.numpy(), transform),
            ImageDataset(raw_images(s.x_test), s.y_test.numpy(), transform),
        )
        for s in dataset.shards
    ]


def run_naive(
    sc: Scenario,
    global_model: nn.Module,
    clients: list[tuple[ImageDataset, ImageDataset]],
) -> tuple[float, torch.Tensor, float]:
    """Seconds, final global parameters and final pooled accuracy of the naive FedAvg."""
    training = sc.training
    streams = RandomStreams(sc.seed)
    start = time.perf_counter()
    for round_index in range(sc.run.rounds):
        states, weights = [], []
        for client, (train_set, _) in enumerate(clients):
            local = copy.deepcopy(global_model)
            optimizer = torch.optim.SGD(
                local.parameters(), lr=training.lr, momentum=training.momentum
            )
            # fedsim's batch order for this client and round, so both compute the same steps
            seed = streams.integer_seed("batches", client, round_index)
            order = torch.randperm(len(train_set), generator=torch.Generator().manual_seed(seed))
            loader = DataLoader(train_set, batch_size=training.batch_size, sampler=order.tolist())
            local.train()
            for x, y in loader:
                optimizer.zero_grad()
                F.cross_entropy(local(x), y).backward()
                optimizer.step()
            states.append(local.state_dict())
            weights.append(len(train_set))
        total = sum(weights)
        global_model.load_state_dict(
            {key: sum(w / total * s[key] for s, w in zip(states, weights, strict=True))
             for key in states[0]}
        )  # fmt: skip
    correct = count = 0
    global_model.eval()
    with torch.no_grad():
        for _, test_set in clients:
            for x, y in DataLoader(test_set, batch_size=1024):
                correct += int((global_model(x).argmax(dim=1) == y).sum())
                count += len(y)
    seconds = time.perf_counter() - start
    final = nn.utils.parameters_to_vector(global_model.parameters()).detach()
    return seconds, final, correct / count


def compare(model: str, clients: int, rounds: int, num_samples: int | None) -> dict:
    sc = scenario(model, clients, rounds, num_samples)
    dataset = build_dataset(sc)
    naive_data = naive_clients(dataset)
    trainer = build_trainers(sc, dataset)[0]
    global_model = copy.deepcopy(trainer._model)  # the architecture, as a plain module
    initial = trainer.init_params(RandomStreams(sc.seed).integer_seed("init"))  # World's start
    nn.utils.vector_to_parameters(initial.clone(), global_model.parameters())
    fedsim_s, fedsim_params, fedsim_acc = run_fedsim(sc, dataset)
    naive_s, naive_params, naive_acc = run_naive(sc, global_model, naive_data)
    test_samples = sum(s.num_test for s in dataset.shards)
    accuracy_tol = max(ACCURACY_TOL, 1.5 / test_samples)
    max_diff = float((fedsim_params - naive_params).abs().max())
    rel_diff = float((fedsim_params - naive_params).norm() / fedsim_params.norm())
    return {
        "model": model,
        "clients": clients,
        "rounds": rounds,
        "train_samples_per_client": float(np.mean([s.num_train for s in dataset.shards])),
        "fedsim_s_per_round": fedsim_s / rounds,
        "naive_s_per_round": naive_s / rounds,
        "speedup": naive_s / fedsim_s,
        "params_max_abs_diff": max_diff,
        "params_rel_diff": rel_diff,
        "fedsim_accuracy": fedsim_acc,
        "naive_accuracy": naive_acc,
        "accuracy_tolerance": accuracy_tol,
        "same_results": rel_diff <= PARAMS_RTOL and abs(fedsim_acc - naive_acc) <= accuracy_tol,
    }


COLUMNS = (
    "model", "clients", "rounds", "fedsim_s_per_round", "naive_s_per_round", "speedup",
    "params_rel_diff", "fedsim_accuracy", "naive_accuracy", "same_results",
)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> dict:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["cnn", "mlp"])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--num-samples", type=int, default=None, help="training images used (default: all)"
    )
    args = parser.parse_args(argv)
    set_threads(args.threads)
    rows = [compare(m, args.clients, args.rounds, args.num_samples) for m in args.models]
    results = {
        "target_speedup": 3.0,
        "tolerances": {"params_rel": PARAMS_RTOL, "accuracy_at_least": ACCURACY_TOL},
        "rows": rows,
    }
    path = write_results("naive_vs_fedsim", results, args.out)
    print(table(rows, COLUMNS))
    print(f"written: {path}")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
