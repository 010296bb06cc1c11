"""Federated datasets, built once as plain tensors: each client's shard of a dataset's pool
(``fedsim.learn.datasets`` reads the pool, ``fedsim.learn.partitions`` says who holds what).

Clients' data are contiguous slices of one normalized float32 tensor (no per-sample objects,
no DataLoader), so thousands of simulated clients cost little more than the pool itself.
Every random choice comes from ``np.random.default_rng(seed)``: the same arguments give
bit-identical shards, whichever algorithm later runs on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import numpy as np
import torch

from fedsim.learn.datasets import (
    DATASET_NAMES,
    INPUT_SHAPES,
    NUM_CLASSES,
    check_choice,
    load_pool,
    normalize_,
)
from fedsim.learn.partitions import (
    PARTITION_NAMES,
    check_group_transform,
    contiguous_groups,
    group_label_permutations,
    partition_dirichlet,
    partition_iid,
    partition_label_groups,
    rotate_images,
)


@dataclass(frozen=True)
class ClientShard:
    """One client's local data, already tensorized and normalized (float32 NCHW)."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    group: int  # true group id from the partitioner or group transform (-1 if neither has one)

    @property
    def num_train(self) -> int:
        return int(self.y_train.shape[0])

    @property
    def num_test(self) -> int:
        return int(self.y_test.shape[0])


@dataclass(frozen=True, slots=True)
class CountShard:
    """A client known only by how many samples it has: timing-only runs of more clients than
    the data can give a sample each (``fedsim budget`` at internet scale). Its data cannot be
    read; an algorithm that reads a client's data has no timing-only run at this scale."""

    num_train: int
    num_test: int
    group: int = -1

    def __getattr__(self, name: str) -> object:
        if name in ("x_train", "y_train", "x_test", "y_test"):
            raise ValueError(
                "this timing-only run takes the clients' sample counts from "
                "dataset.timing_samples: it has no data to read"
            )
        raise AttributeError(name)


def count_shards(name: str, train_counts: np.ndarray, test_fraction: float) -> FederatedDataset:
    """A dataset of clients with only sample counts: ``train_counts`` training samples each,
    and test samples in the proportion ``test_fraction`` of a client's data."""
    check_choice("dataset", name, DATASET_NAMES)
    tests = np.ceil(train_counts * test_fraction / (1.0 - test_fraction)).astype(int)
    shards = [CountShard(int(n), int(t)) for n, t in zip(train_counts, tests, strict=True)]
    return FederatedDataset(name, shards, NUM_CLASSES[name], INPUT_SHAPES[name])


@dataclass(frozen=True)
class FederatedDataset:
    name: str
    shards: list[ClientShard] | list[CountShard]
    num_classes: int
    input_shape: tuple[int, int, int]  # (C, H, W)


def _split_sizes(
    n: int, test_fraction: float, client: int, train_fraction: float | None = None
) -> tuple[int, int]:
    """(train, test) sizes: test is round(fraction * n), clamped so both sides are non-empty;
    train is the rest, or round(train_fraction * n) of it (at least one sample)."""
    if n < 2:
        raise ValueError(
            f"client {client} has {n} sample(s); it needs one to train and one to test"
        )
    n_test = min(max(round(test_fraction * n), 1), n - 1)
    if train_fraction is None:
        return n - n_test, n_test
    return min(max(round(train_fraction * n), 1), n - n_test), n_test


def build_federated_dataset(
    name: str,
    *,
    root: Path | None,
    download: bool,
    num_clients: int,
    partition: str,
    alpha: float = 0.5,
    num_groups: int = 2,
    balanced_groups: bool = True,
    num_samples: int | None = None,
    test_fraction: float = 0.2,
    train_fractions: tuple[float, ...] | None = None,
    seed: int = 0,
    min_samples_per_client: int = 10,
    group_transform: str | None = None,
    transform_groups: int = 4,
    rotation_angles: tuple[float, ...] | None = None,
    group_sizes: tuple[int, ...] | None = None,
) -> FederatedDataset:
    """Partition (a random subset of) the official train split; each client splits its own
    share into local train/test (personalized-FL style).

    ``group_transform`` adds group-wise shift on top of the iid or dirichlet partition: the
    clients form ``transform_groups`` contiguous blocks (their shards' ``group``; of
    ``group_sizes`` clients if given, else as equal as possible) and block g's
    train and test data get 'label_permutation' (concept shift: g's own relabelling, identity
    for g = 0) or 'rotation' (covariate shift: images turned ``rotation_angles[g]`` degrees,
    by default g * 360 / transform_groups). Rotation acts on [0, 1] pixels before
    normalization, so arbitrary angles fill corners with black, as a PIL pipeline would.
    Transforms draw their randomness after the partition, so the shards are otherwise
    bit-identical to the build without them.

    ``train_fractions`` (PerFed-CKT's small labelled shards): client c trains on a share of
    its data drawn uniformly from the tuple (from a stream of its own, so the partition is
    the same as without it); the samples between that share and the test share go unused.
    """
    check_choice("dataset", name, DATASET_NAMES)
    check_choice("partition", partition, PARTITION_NAMES)
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    check_group_transform(
        group_transform, partition, num_clients, transform_groups, rotation_angles, group_sizes
    )
    rng = np.random.default_rng(seed)
    images, labels = load_pool(name, root, download, "train")
    if num_samples is None:
        subset = np.arange(len(labels))
    elif not 1 <= num_samples <= len(labels):
        raise ValueError(f"num_samples must be in 1..{len(labels)} for {name}, got {num_samples}")
    else:
        subset = rng.choice(len(labels), size=num_samples, replace=False)
    subset_labels = labels.numpy()[subset]

    groups = [-1] * num_clients
    if partition == "iid":
        parts = partition_iid(subset_labels, num_clients, rng)
    elif partition == "dirichlet":
        parts = partition_dirichlet(
            subset_labels, num_clients, alpha, rng, min_samples=min_samples_per_client
        )
    else:
        parts, groups = partition_label_groups(
            subset_labels, num_clients, num_groups, rng, balanced=balanced_groups
        )

    # One gather in client order (train then test), so every client tensor is a slice of it.
    shares: list[float | None] = [None] * num_clients
    if train_fractions is not None:
        shares = list(np.random.default_rng([seed, 1]).choice(train_fractions, num_clients))
    sizes = [
        _split_sizes(len(p), test_fraction, c, share)
        for c, (p, share) in enumerate(zip(parts, shares, strict=True))
    ]
    order = np.concatenate(
        [rng.permutation(p)[: sum(size)] for p, size in zip(parts, sizes, strict=True)]
    )
    selected = torch.from_numpy(subset[order])
    x_all = images[selected].to(torch.float32).div_(255.0)
    y_all = labels[selected]
    starts = np.cumsum([0] + [n_train + n_test for n_train, n_test in sizes]).tolist()
    spans = list(pairwise(starts))  # client c's rows in x_all / y_all

    # Transforms work in place, one client at a time: no transient copy exceeds one client.
    if group_transform is not None:
        groups = contiguous_groups(num_clients, transform_groups, group_sizes)
    if group_transform == "rotation":
        angles = rotation_angles or [g * 360 / transform_groups for g in range(transform_groups)]
        for (start, end), group in zip(spans, groups, strict=True):
            x_all[start:end] = rotate_images(x_all[start:end], angles[group])
    elif group_transform == "label_permutation":
        tables = torch.from_numpy(
            group_label_permutations(NUM_CLASSES[name], transform_groups, rng)
        )
        for (start, end), group in zip(spans, groups, strict=True):
            y_all[start:end] = tables[group][y_all[start:end]]
    normalize_(x_all, name)

    shards = []
    for (start, end), group, (n_train, _) in zip(spans, groups, sizes, strict=True):
        mid = start + n_train
        shards.append(
            ClientShard(x_all[start:mid], y_all[start:mid], x_all[mid:end], y_all[mid:end], group)
        )
    return FederatedDataset(name, shards, NUM_CLASSES[name], INPUT_SHAPES[name])


def build_public_set(
    name: str,
    *,
    root: Path | None,
    download: bool,
    num_samples: int,
    seed: int,
    exclude_client_data: bool = True,
) -> torch.Tensor:
    """Unlabeled, normalized images (num_samples, C, H, W) for distillation (PerFed-CKT).

    The paper draws 2000 CIFAR-100 images for CIFAR-10 clients; CIFAR-100 is not available
    offline, so held-out same-domain images stand in: by default a uniform draw from the
    official test split, which no client holds (clients partition the train split). With
    ``exclude_client_data=False`` the draw comes from the train split and may repeat client
    samples, for when the test split is too small (offline CIFAR-10 has 1000 test images).
    """
    split = "test" if exclude_client_data else "train"
    images, _ = load_pool(name, root, download, split)
    if not 1 <= num_samples <= len(images):
        hint = "; exclude_client_data=False draws from the train split" if split == "test" else ""
        raise ValueError(
            f"public set num_samples must be in 1..{len(images)} (the {name} {split} split), "
            f"got {num_samples}{hint}"
        )
    chosen = np.random.default_rng(seed).choice(len(images), size=num_samples, replace=False)
    x = images[torch.from_numpy(chosen)].to(torch.float32).div_(255.0)
    return normalize_(x, name)
