"""Reading, partitioning and building federated datasets (learn.datasets, partitions, data)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsim.config.data import TRAIN_POOL_SIZES
from fedsim.learn.data import build_federated_dataset
from fedsim.learn.datasets import DATASET_NAMES, load_pool
from fedsim.learn.partitions import partition_dirichlet, partition_iid, partition_label_groups
from tests.conftest import DATA_ROOT, requires_real_data


def assert_disjoint_cover(parts: list[np.ndarray], n: int) -> None:
    joined = np.concatenate(parts)
    assert len(joined) == n
    assert np.array_equal(np.sort(joined), np.arange(n))


def label_skew(labels: np.ndarray, parts: list[np.ndarray]) -> float:
    """Mean total-variation distance between each client's label mix and the global one."""
    classes = np.unique(labels)
    overall = np.array([np.mean(labels == c) for c in classes])
    mixes = [np.array([np.mean(labels[p] == c) for c in classes]) for p in parts]
    return float(np.mean([0.5 * np.abs(mix - overall).sum() for mix in mixes]))


# --- loading -----------------------------------------------------------------------------------


@requires_real_data
@pytest.mark.parametrize("name", ["mnist", "fashion_mnist"])
def test_idx_datasets_parse_to_official_shapes(name: str) -> None:
    x, y = load_pool(name, DATA_ROOT, download=False)
    assert x.shape == (60000, 1, 28, 28) and x.dtype == torch.uint8
    assert y.shape == (60000,) and y.dtype == torch.int64
    assert torch.equal(torch.unique(y), torch.arange(10))
    assert torch.bincount(y).min() > 5000  # all classes roughly balanced
    x_test, y_test = load_pool(name, DATA_ROOT, download=False, split="test")
    assert x_test.shape == (10000, 1, 28, 28) and len(y_test) == 10000
    assert x.float().std() > 50  # real images, not zeros


@requires_real_data
def test_cifar10_offline_batches() -> None:
    x, y = load_pool("cifar10", DATA_ROOT, download=False)
    assert x.shape == (30000, 3, 32, 32) and x.dtype == torch.uint8
    assert y[:10].tolist() == [6, 9, 9, 4, 1, 1, 2, 7, 8, 3]  # the official first labels
    x_test, y_test = load_pool("cifar10", DATA_ROOT, download=False, split="test")
    assert x_test.shape == (1000, 3, 32, 32)
    full = json.loads((DATA_ROOT / "cifar-10-batches-py" / "test_labels_full.json").read_text())
    assert y_test.tolist() == full[:1000]


def test_synthetic_is_deterministic_balanced_and_ignores_root(tmp_path: Path) -> None:
    x, y = load_pool("synthetic", tmp_path / "nowhere", download=False)
    x2, y2 = load_pool("synthetic", None, download=False)
    assert x.shape == (6000, 1, 28, 28) and x.dtype == torch.uint8
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert torch.bincount(y).tolist() == [600] * 10
    x_test, y_test = load_pool("synthetic", None, download=False, split="test")
    assert x_test.shape == (1000, 1, 28, 28) and len(y_test) == 1000
    assert not torch.equal(x_test[:10], x[:10])  # fresh noise for the test split


def test_the_schema_counts_the_pools_the_loader_gives() -> None:
    """Validation checks that every client gets a sample from TRAIN_POOL_SIZES, without torch:
    they must be the sizes of the pools loaded (the IDX splits where the offline data has them;
    its CIFAR-10 copy is cut to 30,000 of the official 50,000)."""
    assert len(load_pool("synthetic", None, download=False)[1]) == TRAIN_POOL_SIZES["synthetic"]
    assert set(TRAIN_POOL_SIZES) == set(DATASET_NAMES)
    if (DATA_ROOT / "MNIST" / "raw").is_dir() and (DATA_ROOT / "FashionMNIST" / "raw").is_dir():
        for name in ("mnist", "fashion_mnist"):
            assert len(load_pool(name, DATA_ROOT, download=False)[1]) == TRAIN_POOL_SIZES[name]


@pytest.mark.parametrize(
    ("name", "expected"),
    [("mnist", "MNIST/raw"), ("fashion_mnist", "FashionMNIST/raw"), ("cifar10", "cifar-10")],
)
def test_missing_files_without_download_name_the_path(
    tmp_path: Path, name: str, expected: str
) -> None:
    with pytest.raises(FileNotFoundError, match="FEDSIM_DATA") as info:
        load_pool(name, tmp_path, download=False)
    assert str(tmp_path / expected) in str(info.value)
    assert list(tmp_path.iterdir()) == []  # nothing written


@requires_real_data
@pytest.mark.parametrize(
    ("name", "dataset_class", "folder", "split", "expected_n"),
    [
        ("fashion_mnist", "FashionMNIST", "FashionMNIST/raw", "test", 10000),
        ("cifar10", "CIFAR10", "cifar-10-batches-py", "train", 30000),
    ],
)
def test_download_fetches_through_torchvision_then_parses(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    dataset_class: str,
    folder: str,
    split: str,
    expected_n: int,
) -> None:
    import torchvision.datasets

    calls = []

    def fake_download(root: str, train: bool, download: bool) -> None:
        """Stands in for the network: places the offline files where torchvision would."""
        calls.append((root, train, download))
        shutil.copytree(DATA_ROOT / folder, Path(root) / folder, copy_function=os.symlink)

    monkeypatch.setattr(torchvision.datasets, dataset_class, fake_download)
    x, y = load_pool(name, tmp_path, download=True, split=split)
    assert calls == [(str(tmp_path), split == "train", True)]
    assert len(x) == len(y) == expected_n


def test_unknown_names_list_the_choices() -> None:
    with pytest.raises(ValueError, match="fashion_mnist"):
        load_pool("imagenet", None, download=False)
    with pytest.raises(ValueError, match="label_groups"):
        build_federated_dataset(
            "synthetic", root=None, download=False, num_clients=2, partition="shards"
        )
    assert "synthetic" in DATASET_NAMES


# --- partitions --------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 500), clients=st.integers(1, 50), seed=st.integers(0, 2**32 - 1))
def test_iid_sizes_differ_by_at_most_one(n: int, clients: int, seed: int) -> None:
    labels = np.arange(n) % 10
    if n < clients:
        with pytest.raises(ValueError):
            partition_iid(labels, clients, np.random.default_rng(seed))
        return
    parts = partition_iid(labels, clients, np.random.default_rng(seed))
    assert len(parts) == clients
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1
    assert_disjoint_cover(parts, n)


def test_dirichlet_cover_min_samples_and_skew_grows_as_alpha_shrinks() -> None:
    labels = np.random.default_rng(0).integers(0, 10, size=5000)
    skewed = partition_dirichlet(labels, 20, 0.1, np.random.default_rng(1), min_samples=10)
    mixed = partition_dirichlet(labels, 20, 100.0, np.random.default_rng(1), min_samples=10)
    for parts in (skewed, mixed):
        assert_disjoint_cover(parts, len(labels))
        assert min(len(p) for p in parts) >= 10
    assert label_skew(labels, skewed) > 0.5
    assert label_skew(labels, mixed) < 0.1
    sizes = [len(p) for p in skewed]
    assert max(sizes) > 2 * min(sizes)  # unequal client sizes


def test_dirichlet_impossible_minimum_explains_itself() -> None:
    labels = np.arange(200) % 10
    with pytest.raises(ValueError, match="alpha=0.01"):
        partition_dirichlet(labels, 10, 0.01, np.random.default_rng(0), min_samples=19)
    with pytest.raises(ValueError, match="cannot give"):
        partition_dirichlet(labels, 10, 1.0, np.random.default_rng(0), min_samples=21)


@settings(max_examples=30, deadline=None)
@given(
    clients=st.integers(1, 30),
    groups=st.integers(1, 10),
    balanced=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_label_groups_disjoint_label_sets(
    clients: int, groups: int, balanced: bool, seed: int
) -> None:
    labels = np.random.default_rng(seed).integers(0, 10, size=2000)
    rng = np.random.default_rng(seed)
    if groups > clients:
        with pytest.raises(ValueError, match="num_clients"):
            partition_label_groups(labels, clients, groups, rng, balanced=balanced)
        return
    parts, group_of = partition_label_groups(labels, clients, groups, rng, balanced=balanced)
    assert_disjoint_cover(parts, len(labels))
    assert sorted(set(group_of)) == list(range(groups))  # every group used
    counts = np.bincount(group_of, minlength=groups)
    if balanced:
        assert counts.max() - counts.min() <= 1
    label_sets = [
        set(labels[np.concatenate([p for p, g in zip(parts, group_of, strict=True) if g == k])])
        for k in range(groups)
    ]
    assert [len(s) for s in label_sets] == [10 // groups + (k < 10 % groups) for k in range(groups)]
    for a in range(groups):
        for b in range(a + 1, groups):
            assert not label_sets[a] & label_sets[b]
    for part, g in zip(parts, group_of, strict=True):
        assert set(labels[part]) <= label_sets[g]
        members = [len(p) for p, h in zip(parts, group_of, strict=True) if h == g]
        assert max(members) - min(members) <= 1  # a group's pool is split evenly


def test_label_groups_rejects_more_groups_than_classes() -> None:
    labels = np.arange(100) % 4
    with pytest.raises(ValueError, match="classes"):
        partition_label_groups(labels, 10, 5, np.random.default_rng(0))


# --- federated datasets ------------------------------------------------------------------------


def build_synthetic(**overrides: object):
    kwargs: dict = {"root": None, "download": False, "num_clients": 6, "partition": "iid"}
    return build_federated_dataset("synthetic", **(kwargs | overrides))


def test_local_split_follows_test_fraction() -> None:
    data = build_synthetic(num_samples=1000, test_fraction=0.25, partition="dirichlet")
    assert data.num_classes == 10 and data.input_shape == (1, 28, 28)
    assert sum(s.num_train + s.num_test for s in data.shards) == 1000
    for shard in data.shards:
        n = shard.num_train + shard.num_test
        assert shard.num_test == round(0.25 * n) and shard.num_train >= 1
        assert shard.x_train.shape == (shard.num_train, 1, 28, 28)
        assert shard.x_train.dtype == torch.float32 and shard.y_train.dtype == torch.int64
        assert shard.group == -1


def test_train_fractions_leave_small_shards_of_the_same_partition() -> None:
    """PerFed-CKT's {0.1, 0.3, 0.4}/0.5 split: each client trains on a drawn share, tests on
    half, and its samples are a subset of the client's data without the option."""
    full = build_synthetic(
        num_samples=1200, num_clients=8, partition="dirichlet", seed=3, test_fraction=0.5
    )
    small = build_synthetic(
        num_samples=1200,
        num_clients=8,
        partition="dirichlet",
        seed=3,
        test_fraction=0.5,
        train_fractions=(0.1, 0.3, 0.4),
    )
    shares = set()
    for f, s in zip(full.shards, small.shards, strict=True):
        n = f.num_train + f.num_test
        share = s.num_train / n
        assert min(abs(share - t) for t in (0.1, 0.3, 0.4)) <= 1 / n
        shares.add(min((0.1, 0.3, 0.4), key=lambda t: abs(share - t)))
        assert s.num_test == f.num_test == round(0.5 * n)
        pool = {tuple(x.flatten().tolist()) for x in torch.cat([f.x_train, f.x_test])}
        used = torch.cat([s.x_train, s.x_test])
        assert all(tuple(x.flatten().tolist()) in pool for x in used)
    assert shares == {0.1, 0.3, 0.4}
    assert sum(s.num_train for s in small.shards) < 0.45 * 1200


def test_every_client_keeps_a_test_sample() -> None:
    data = build_synthetic(num_samples=12, num_clients=6, test_fraction=0.01)
    assert all(s.num_test == 1 and s.num_train == 1 for s in data.shards)
    with pytest.raises(ValueError, match="one to train and one to test"):
        build_synthetic(num_samples=11, num_clients=6)
    with pytest.raises(ValueError, match="num_samples"):
        build_synthetic(num_samples=6001)


def test_same_seed_same_shards_other_seed_other_shards() -> None:
    a, b = build_synthetic(seed=7, num_samples=600), build_synthetic(seed=7, num_samples=600)
    c = build_synthetic(seed=8, num_samples=600)
    for sa, sb in zip(a.shards, b.shards, strict=True):
        assert torch.equal(sa.x_train, sb.x_train) and torch.equal(sa.y_test, sb.y_test)
    assert not torch.equal(a.shards[0].x_train[:50], c.shards[0].x_train[:50])


def test_label_group_ids_reach_the_shards() -> None:
    data = build_synthetic(partition="label_groups", num_groups=3, num_clients=7)
    groups = [s.group for s in data.shards]
    assert sorted(set(groups)) == [0, 1, 2]
    label_sets = {g: set() for g in range(3)}
    for shard in data.shards:
        label_sets[shard.group] |= set(torch.cat([shard.y_train, shard.y_test]).tolist())
    assert sum(len(s) for s in label_sets.values()) == 10  # disjoint sets covering all labels


def test_shards_are_slices_of_one_buffer() -> None:
    data = build_synthetic(num_clients=4)
    pointers = {s.x_train.untyped_storage().data_ptr() for s in data.shards}
    assert len(pointers) == 1  # one conversion, no per-client copies
    assert all(s.x_train.is_contiguous() and s.x_test.is_contiguous() for s in data.shards)


@requires_real_data
@pytest.mark.parametrize(("name", "channels"), [("fashion_mnist", 1), ("cifar10", 3)])
def test_real_data_is_normalized(name: str, channels: int) -> None:
    data = build_federated_dataset(
        name, root=DATA_ROOT, download=False, num_clients=3, partition="iid", num_samples=3000
    )
    x = torch.cat([s.x_train for s in data.shards])
    per_channel_mean = x.mean(dim=(0, 2, 3))
    per_channel_std = x.std(dim=(0, 2, 3))
    assert per_channel_mean.shape == (channels,)
    assert per_channel_mean.abs().max() < 0.1
    assert (per_channel_std - 1).abs().max() < 0.1
