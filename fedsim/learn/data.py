"""Datasets and federated partitions, built once as plain tensors.

Clients' data are contiguous slices of one normalized float32 tensor (no per-sample objects,
no DataLoader), so thousands of simulated clients cost little more than the pool itself.
Every random choice comes from ``np.random.default_rng(seed)``: the same arguments give
bit-identical shards, whichever algorithm later runs on them.
"""

from __future__ import annotations

import gzip
import importlib
import math
import os
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import pairwise
from pathlib import Path
from types import ModuleType

import numpy as np
import torch

from fedsim.config import DATA_ENV_VAR, DEFAULT_DATA_ROOT, TRAIN_POOL_SIZES, data_root_problem

DATASET_NAMES = ("mnist", "fashion_mnist", "cifar10", "synthetic")
PARTITION_NAMES = ("iid", "dirichlet", "label_groups")
GROUP_TRANSFORMS = ("label_permutation", "rotation")

_NUM_CLASSES = {"mnist": 10, "fashion_mnist": 10, "cifar10": 10, "synthetic": 10}
_INPUT_SHAPES = {
    "mnist": (1, 28, 28),
    "fashion_mnist": (1, 28, 28),
    "cifar10": (3, 32, 32),
    "synthetic": (1, 28, 28),
}
# Standard per-channel (mean, std) of the training sets; synthetic data is only scaled to [0, 1].
_NORMALIZATION: dict[str, tuple[tuple[float, ...], tuple[float, ...]] | None] = {
    "mnist": ((0.1307,), (0.3081,)),
    "fashion_mnist": ((0.2860,), (0.3530,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "synthetic": None,
}
# torchvision's folder and class name for the IDX datasets.
_IDX_FOLDERS = {"mnist": "MNIST", "fashion_mnist": "FashionMNIST"}
_IDX_PREFIX = {"train": "train", "test": "t10k"}

_SYNTHETIC_SEED = 20240607  # fixed: the synthetic task is the same for every experiment seed
_SYNTHETIC_SIZES = {"train": TRAIN_POOL_SIZES["synthetic"], "test": 1000}
_SYNTHETIC_CONTRAST = 70.0  # prototype amplitude around mid-grey, in pixel levels
_SYNTHETIC_NOISE = 100.0  # per-pixel noise std: an MLP needs ~150 SGD steps for >90%


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
    _check_choice("dataset", name, DATASET_NAMES)
    tests = np.ceil(train_counts * test_fraction / (1.0 - test_fraction)).astype(int)
    shards = [CountShard(int(n), int(t)) for n, t in zip(train_counts, tests, strict=True)]
    return FederatedDataset(name, shards, _NUM_CLASSES[name], _INPUT_SHAPES[name])


@dataclass(frozen=True)
class FederatedDataset:
    name: str
    shards: list[ClientShard] | list[CountShard]
    num_classes: int
    input_shape: tuple[int, int, int]  # (C, H, W)


# --- loading ------------------------------------------------------------------------------------


def _resolve_root(root: Path | None) -> Path:
    """An explicit root wins; then $FEDSIM_DATA; then ./data (git-ignored)."""
    if root is not None:
        return Path(root)
    return Path(os.environ.get(DATA_ENV_VAR) or DEFAULT_DATA_ROOT)


def missing_files(name: str, root: Path, split: str = "train") -> list[Path]:
    """The files of a split that are not under root (without downloading); [] for synthetic."""
    _check_choice("dataset", name, DATASET_NAMES)
    _check_choice("split", split, ("train", "test"))
    if name == "synthetic":
        return []
    if name == "cifar10":
        folder = root / "cifar-10-batches-py"
        return [] if _cifar_files(folder, split) else [folder / _cifar_names(split)[0]]
    folder, prefix = root / _IDX_FOLDERS[name] / "raw", _IDX_PREFIX[split]
    paths = [folder / f"{prefix}-{kind}-ubyte.gz" for kind in ("images-idx3", "labels-idx1")]
    return [path for path in paths if not path.is_file()]


def _missing(what: str, expected: Path) -> FileNotFoundError:
    return FileNotFoundError(
        f"{what} not found: expected {expected}. Set dataset.root (or the FEDSIM_DATA "
        "environment variable) to the folder holding it, or enable dataset.download."
    )


def _download(fetch: Callable[[], object], expected: Path, folder: Path) -> None:
    """Run torchvision's download into ``folder``; a failure (e.g. no internet) says where the
    files should be and removes the folders it created that stayed empty."""
    created = [d for d in (folder, *folder.parents) if not d.exists()]  # deepest first
    try:
        fetch()
    except (RuntimeError, OSError) as error:
        for directory in created:
            try:
                directory.rmdir()  # only if empty: a partial download stays for a retry
            except OSError:
                break
        raise FileNotFoundError(
            f"dataset not found at {expected} and the download failed ({error}). Set "
            "dataset.root (or the FEDSIM_DATA environment variable) to a folder holding it."
        ) from None


def torchvision_module(name: str, needed_for: str) -> ModuleType:
    """``torchvision.<name>``, imported only where fedsim needs torchvision: to download a
    dataset and to rotate images by an angle that is not a multiple of 90 degrees. Everything
    else works without it, so a missing torchvision, or one built for another PyTorch (whose
    import fails: "operator torchvision::nms does not exist"), is a ValueError saying what to
    install, raised only there."""
    try:
        return importlib.import_module(f"torchvision.{name}")
    except (ImportError, RuntimeError, OSError, AttributeError) as error:
        major, minor = (int(part) for part in torch.__version__.split(".")[:2])
        pair = f"torchvision 0.{minor + 15}" if major == 2 else "the torchvision of its release"
        raise ValueError(
            f"{needed_for} needs torchvision, which cannot be imported here "
            f"({type(error).__name__}: {error}); install the one built for this PyTorch "
            f"{torch.__version__}: {pair}, from the same index as torch (fedsim needs it for "
            "nothing else)"
        ) from None


def _read_idx(path: Path, header_bytes: int) -> np.ndarray:
    with gzip.open(path, "rb") as f:  # copy: arrays over bytes are read-only, torch wants writable
        return np.frombuffer(f.read(), np.uint8, offset=header_bytes).copy()


def _load_idx(name: str, root: Path, download: bool, split: str) -> tuple[np.ndarray, np.ndarray]:
    folder = root / _IDX_FOLDERS[name] / "raw"
    prefix = _IDX_PREFIX[split]
    images_path = folder / f"{prefix}-images-idx3-ubyte.gz"
    labels_path = folder / f"{prefix}-labels-idx1-ubyte.gz"
    if not (images_path.is_file() and labels_path.is_file()):
        if not download:
            raise _missing(f"{_IDX_FOLDERS[name]} {split} files", images_path)
        tvd = torchvision_module("datasets", f"downloading {_IDX_FOLDERS[name]}")
        dataset = getattr(tvd, _IDX_FOLDERS[name])
        fetch = partial(dataset, str(root), train=split == "train", download=True)
        _download(fetch, images_path, folder)
    images = _read_idx(images_path, 16).reshape(-1, 1, 28, 28)
    labels = _read_idx(labels_path, 8)
    if len(images) != len(labels):
        raise ValueError(f"{folder}: {len(images)} images but {len(labels)} labels")
    return images, labels


def _cifar_names(split: str) -> list[str]:
    return [f"data_batch_{i}" for i in range(1, 6)] if split == "train" else ["test_batch"]


def _cifar_files(folder: Path, split: str) -> list[Path]:
    return [folder / n for n in _cifar_names(split) if (folder / n).is_file()]


def _load_cifar10(root: Path, download: bool, split: str) -> tuple[np.ndarray, np.ndarray]:
    folder = root / "cifar-10-batches-py"
    files = _cifar_files(folder, split)
    if not files:
        if not download:
            raise _missing(f"CIFAR-10 {split} batches", folder)
        tvd = torchvision_module("datasets", "downloading CIFAR-10")
        fetch = partial(tvd.CIFAR10, str(root), train=split == "train", download=True)
        _download(fetch, folder, folder)
        files = _cifar_files(folder, split)
    images, labels = [], []
    for path in files:  # the offline copy has batches 1..3 only: use whichever exist
        with open(path, "rb") as f:
            batch = pickle.load(f, encoding="latin1")
        images.append(np.asarray(batch["data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        labels.append(np.asarray(batch["labels"], dtype=np.int64))
    return np.concatenate(images), np.concatenate(labels)


def _synthetic(split: str) -> tuple[np.ndarray, np.ndarray]:
    """Noisy copies of 10 fixed blocky prototypes: a real learning task that takes milliseconds."""
    seeds = np.random.SeedSequence(_SYNTHETIC_SEED).spawn(3)
    coarse = np.random.default_rng(seeds[0]).uniform(-1.0, 1.0, size=(10, 7, 7))
    prototypes = 127.5 + _SYNTHETIC_CONTRAST * coarse.repeat(4, axis=1).repeat(4, axis=2)
    rng = np.random.default_rng(seeds[1] if split == "train" else seeds[2])
    n = _SYNTHETIC_SIZES[split]
    labels = rng.permutation(np.arange(n) % 10)
    noisy = prototypes[labels] + rng.normal(0.0, _SYNTHETIC_NOISE, size=(n, 28, 28))
    images = np.clip(np.rint(noisy), 0, 255).astype(np.uint8)
    return images.reshape(n, 1, 28, 28), labels.astype(np.int64)


def load_pool(
    name: str, root: Path | None, download: bool, split: str = "train"
) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 images (N, C, H, W) and int64 labels of the official split ('train' or 'test').

    'synthetic' is generated and ignores root. ``root=None`` means $FEDSIM_DATA, else ./data.
    """
    _check_choice("dataset", name, DATASET_NAMES)
    _check_choice("split", split, ("train", "test"))
    if name == "synthetic":
        images, labels = _synthetic(split)
    else:
        resolved = _resolve_root(root)
        problem = data_root_problem(resolved)  # never download into a folder nobody chose
        if problem is not None:
            raise FileNotFoundError(problem)
        if name == "cifar10":
            images, labels = _load_cifar10(resolved, download, split)
        else:
            images, labels = _load_idx(name, resolved, download, split)
    return torch.from_numpy(images), torch.from_numpy(labels.astype(np.int64, copy=False))


# --- partitions ---------------------------------------------------------------------------------


def _check_choice(kind: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ValueError(f"unknown {kind} {value!r}; choose one of: {', '.join(choices)}")


def _check_clients(num_samples: int, num_clients: int) -> None:
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    if num_samples < num_clients:
        raise ValueError(f"{num_samples} samples cannot give each of {num_clients} clients one")


def partition_iid(
    labels: np.ndarray, num_clients: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """A uniform random split into client sizes that differ by at most one."""
    _check_clients(len(labels), num_clients)
    return np.array_split(rng.permutation(len(labels)), num_clients)


def partition_dirichlet(
    labels: np.ndarray,
    num_clients: int,
    alpha: float,
    rng: np.random.Generator,
    min_samples: int = 10,
) -> list[np.ndarray]:
    """Label skew: each class is spread over the clients with shares ~ Dir(alpha * 1).

    Small alpha concentrates a class on few clients; client sizes are unequal. The split is
    redrawn (up to 100 times) until every client holds at least ``min_samples``.
    """
    _check_clients(len(labels), num_clients)
    if alpha <= 0:
        raise ValueError(f"dirichlet alpha must be > 0, got {alpha}")
    if len(labels) < num_clients * min_samples:
        raise ValueError(
            f"{len(labels)} samples cannot give {num_clients} clients {min_samples} each"
        )
    by_class = [np.flatnonzero(labels == c) for c in np.unique(labels)]
    for _ in range(100):
        parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for indices in by_class:
            shares = rng.dirichlet(np.full(num_clients, alpha))
            cuts = (np.cumsum(shares)[:-1] * len(indices)).astype(np.int64)
            for client, chunk in enumerate(np.split(rng.permutation(indices), cuts)):
                parts[client].append(chunk)
        clients = [np.concatenate(p) for p in parts]
        if min(len(c) for c in clients) >= min_samples:
            return clients
    raise ValueError(
        f"dirichlet partition with alpha={alpha} left some of the {num_clients} clients with "
        f"fewer than {min_samples} samples in 100 tries; raise alpha or the number of samples, "
        "or lower num_clients or min_samples_per_client"
    )


def partition_label_groups(
    labels: np.ndarray,
    num_clients: int,
    num_groups: int,
    rng: np.random.Generator,
    balanced: bool = True,
) -> tuple[list[np.ndarray], list[int]]:
    """FedeRiCo's split: clients in a group share a label set disjoint from other groups'.

    The classes are shuffled into ``num_groups`` sets of equal size (leftover classes go one
    each to the first groups). Each client joins one group: ``balanced`` gives group sizes that
    differ by at most one, otherwise the assignment is uniform with every group non-empty. A
    group's samples are split evenly among its clients. Returns (indices per client, group id
    per client).
    """
    classes = np.unique(labels)
    if not 1 <= num_groups <= len(classes):
        raise ValueError(f"num_groups must be in 1..{len(classes)} (the classes), got {num_groups}")
    if num_groups > num_clients:
        raise ValueError(f"num_groups ({num_groups}) cannot exceed num_clients ({num_clients})")
    label_sets = np.array_split(rng.permutation(classes), num_groups)
    if balanced:
        assignment = rng.permutation(np.arange(num_clients) % num_groups)
    else:
        assignment = rng.integers(0, num_groups, size=num_clients)
        assignment[rng.choice(num_clients, size=num_groups, replace=False)] = np.arange(num_groups)
    clients: list[np.ndarray] = [np.empty(0, np.int64)] * num_clients
    for group, label_set in enumerate(label_sets):
        members = np.flatnonzero(assignment == group)
        pool = rng.permutation(np.flatnonzero(np.isin(labels, label_set)))
        if len(pool) < len(members):
            raise ValueError(f"group {group} has {len(pool)} samples for {len(members)} clients")
        for client, chunk in zip(members, np.array_split(pool, len(members)), strict=True):
            clients[client] = chunk
    return clients, [int(g) for g in assignment]


# --- group transforms ---------------------------------------------------------------------------


def contiguous_groups(
    num_clients: int, num_groups: int, sizes: Sequence[int] | None = None
) -> list[int]:
    """Group id per client: ``num_groups`` contiguous blocks whose sizes differ by at most one,
    or have the given ``sizes`` (e.g. CoBo's cross-device clusters 6, 6, 7, 7, ..., 10, 10).

    Contiguous blocks, as in the user-centric FL authors' code, keep a group's data one slice
    of the client-ordered pool and make the true grouping readable from the client ids.
    """
    if not 1 <= num_groups <= num_clients:
        raise ValueError(
            f"transform groups must be in 1..{num_clients} (the clients), got {num_groups}"
        )
    if sizes is None:
        return [c * num_groups // num_clients for c in range(num_clients)]
    if len(sizes) != num_groups or sum(sizes) != num_clients or min(sizes) < 1:
        raise ValueError(
            f"group sizes {list(sizes)} must be {num_groups} positive numbers summing to "
            f"{num_clients} (the clients, the reserve of later arrivals included)"
        )
    return [g for g, size in enumerate(sizes) for _ in range(size)]


def group_label_permutations(
    num_classes: int, num_groups: int, rng: np.random.Generator
) -> np.ndarray:
    """(num_groups, num_classes) relabelling tables for concept shift: row 0 is the identity and
    the others are distinct non-identity permutations, so any two groups disagree on f(x).
    """
    if num_groups > math.factorial(num_classes):
        raise ValueError(
            f"{num_classes} classes have only {math.factorial(num_classes)} permutations, "
            f"fewer than the {num_groups} groups"
        )
    tables = [tuple(range(num_classes))]
    while len(tables) < num_groups:  # rejection: collisions are rare for 10 classes
        table = tuple(rng.permutation(num_classes).tolist())
        if table not in tables:
            tables.append(table)
    return np.array(tables, dtype=np.int64)


def rotate_images(x: torch.Tensor, angle: float) -> torch.Tensor:
    """NCHW images rotated ``angle`` degrees counter-clockwise about their centre (a new tensor).

    Multiples of 90 degrees are exact pixel permutations (``torch.rot90``); other angles are
    resampled bilinearly by torchvision, with zeros filling the corners.
    """
    if angle % 90 == 0:
        return torch.rot90(x, int(angle // 90) % 4, dims=(2, 3))
    tvf = torchvision_module(
        "transforms.functional", f"rotating images by {angle:g} degrees (not a multiple of 90)"
    )
    return tvf.rotate(x, float(angle), interpolation=tvf.InterpolationMode.BILINEAR)


def _check_group_transform(
    group_transform: str | None,
    partition: str,
    num_clients: int,
    num_groups: int,
    rotation_angles: tuple[float, ...] | None,
    group_sizes: tuple[int, ...] | None = None,
) -> None:
    """Fail before any data is loaded, so a bad config costs no load time."""
    if rotation_angles is not None and group_transform != "rotation":
        raise ValueError(
            f"rotation_angles only apply to group_transform='rotation', got {group_transform!r}"
        )
    if group_transform is None:
        return
    _check_choice("group_transform", group_transform, GROUP_TRANSFORMS)
    if partition == "label_groups":
        raise ValueError(
            f"group_transform {group_transform!r} cannot be combined with the label_groups "
            "partition: both define the client groups; use iid or dirichlet as the base"
        )
    contiguous_groups(num_clients, num_groups, group_sizes)
    if rotation_angles is not None and len(rotation_angles) != num_groups:
        raise ValueError(
            f"rotation_angles has {len(rotation_angles)} angles for {num_groups} transform groups"
        )


# --- the federated dataset ----------------------------------------------------------------------


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
    _check_choice("dataset", name, DATASET_NAMES)
    _check_choice("partition", partition, PARTITION_NAMES)
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    _check_group_transform(
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
            group_label_permutations(_NUM_CLASSES[name], transform_groups, rng)
        )
        for (start, end), group in zip(spans, groups, strict=True):
            y_all[start:end] = tables[group][y_all[start:end]]
    _normalize_(x_all, name)

    shards = []
    for (start, end), group, (n_train, _) in zip(spans, groups, sizes, strict=True):
        mid = start + n_train
        shards.append(
            ClientShard(x_all[start:mid], y_all[start:mid], x_all[mid:end], y_all[mid:end], group)
        )
    return FederatedDataset(name, shards, _NUM_CLASSES[name], _INPUT_SHAPES[name])


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
    return _normalize_(x, name)


def _normalize_(x: torch.Tensor, name: str) -> torch.Tensor:
    """Standardize [0, 1] images in place with the dataset's channel statistics."""
    stats = _NORMALIZATION[name]
    if stats is not None:
        mean, std = (torch.tensor(s, dtype=torch.float32).view(1, -1, 1, 1) for s in stats)
        x.sub_(mean).div_(std)
    return x
