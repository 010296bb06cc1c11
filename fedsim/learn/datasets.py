"""The datasets fedsim reads, as plain tensors: where their files are (``dataset.root``, else
$FEDSIM_DATA, else ./data), the IDX (MNIST, Fashion-MNIST) and CIFAR-10 formats, the synthetic
task fedsim generates, and each dataset's classes, shape and normalization. torchvision is
needed only to download a dataset (and to rotate images by an angle that is not a multiple of
90 degrees, ``fedsim.learn.partitions``).
"""

from __future__ import annotations

import gzip
import importlib
import os
import pickle
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from types import ModuleType

import numpy as np
import torch

from fedsim.config import DATA_ENV_VAR, DEFAULT_DATA_ROOT, TRAIN_POOL_SIZES, data_root_problem

DATASET_NAMES = ("mnist", "fashion_mnist", "cifar10", "synthetic")

NUM_CLASSES = {"mnist": 10, "fashion_mnist": 10, "cifar10": 10, "synthetic": 10}
INPUT_SHAPES = {
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


def _resolve_root(root: Path | None) -> Path:
    """An explicit root wins; then $FEDSIM_DATA; then ./data (git-ignored)."""
    if root is not None:
        return Path(root)
    return Path(os.environ.get(DATA_ENV_VAR) or DEFAULT_DATA_ROOT)


def missing_files(name: str, root: Path, split: str = "train") -> list[Path]:
    """The files of a split that are not under root (without downloading); [] for synthetic."""
    check_choice("dataset", name, DATASET_NAMES)
    check_choice("split", split, ("train", "test"))
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
    check_choice("dataset", name, DATASET_NAMES)
    check_choice("split", split, ("train", "test"))
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


def check_choice(kind: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ValueError(f"unknown {kind} {value!r}; choose one of: {', '.join(choices)}")


def normalize_(x: torch.Tensor, name: str) -> torch.Tensor:
    """Standardize [0, 1] images in place with the dataset's channel statistics."""
    stats = _NORMALIZATION[name]
    if stats is not None:
        mean, std = (torch.tensor(s, dtype=torch.float32).view(1, -1, 1, 1) for s in stats)
        x.sub_(mean).div_(std)
    return x
