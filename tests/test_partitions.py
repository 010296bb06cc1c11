"""Group-wise shift transforms on top of the partitions, and the public unlabeled set."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedsim.learn.data import (
    ClientShard,
    FederatedDataset,
    build_federated_dataset,
    build_public_set,
)
from fedsim.learn.datasets import load_pool
from fedsim.learn.partitions import contiguous_groups, group_label_permutations, rotate_images
from tests.conftest import DATA_ROOT, requires_real_data


def build(name: str = "synthetic", **overrides: object) -> FederatedDataset:
    kwargs: dict = {
        "root": DATA_ROOT,
        "download": False,
        "num_clients": 8,
        "partition": "iid",
        "num_samples": 1600,
        "seed": 4,
    }
    return build_federated_dataset(name, **(kwargs | overrides))


def labels_of(shard: ClientShard) -> torch.Tensor:
    return torch.cat([shard.y_train, shard.y_test])


def public(**overrides: object) -> torch.Tensor:
    kwargs: dict = {"root": None, "download": False, "num_samples": 300, "seed": 1}
    return build_public_set("synthetic", **(kwargs | overrides))


def row_keys(images: torch.Tensor) -> set[bytes]:
    """Synthetic images are only scaled to [0, 1]: map back to uint8 rows to compare sources."""
    pixels = images if images.dtype == torch.uint8 else (images * 255).round().to(torch.uint8)
    return {row.numpy().tobytes() for row in pixels}


# --- groups --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("clients", "groups"), [(20, 4), (10, 4), (7, 7), (5, 1), (103, 4)])
def test_contiguous_groups_are_near_equal_blocks(clients: int, groups: int) -> None:
    ids = contiguous_groups(clients, groups)
    assert ids == sorted(ids) and set(ids) == set(range(groups))
    sizes = np.bincount(ids)
    assert sizes.max() - sizes.min() <= 1
    assert contiguous_groups(20, 4) == [g for g in range(4) for _ in range(5)]  # authors' layout


@pytest.mark.parametrize("transform", ["label_permutation", "rotation"])
def test_transform_groups_override_the_partition_group(transform: str) -> None:
    data = build(num_clients=10, group_transform=transform)
    assert [s.group for s in data.shards] == contiguous_groups(10, 4)  # not iid's -1


def test_label_permutation_tables() -> None:
    tables = group_label_permutations(10, 4, np.random.default_rng(0))
    assert tables.shape == (4, 10) and tables[0].tolist() == list(range(10))
    assert all(sorted(t) == list(range(10)) for t in tables.tolist())
    assert len({tuple(t) for t in tables.tolist()}) == 4
    again = group_label_permutations(10, 4, np.random.default_rng(0))
    assert np.array_equal(tables, again)  # deterministic per seed
    every = group_label_permutations(3, 6, np.random.default_rng(1))
    assert len({tuple(t) for t in every.tolist()}) == 6  # all of 3!, none repeated
    with pytest.raises(ValueError, match="only 6 permutations"):
        group_label_permutations(3, 7, np.random.default_rng(1))


# --- concept shift -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "clients"),
    [("synthetic", 8), pytest.param("cifar10", 20, marks=requires_real_data)],  # paper: m = 20
)
def test_label_permutation_relabels_each_group_consistently(name: str, clients: int) -> None:
    base = build(name, num_clients=clients)
    shifted = build(name, num_clients=clients, group_transform="label_permutation")
    maps: dict[int, dict[int, int]] = {}
    for b, s in zip(base.shards, shifted.shards, strict=True):
        assert torch.equal(b.x_train, s.x_train) and torch.equal(b.x_test, s.x_test)
        mapping = maps.setdefault(s.group, {})
        # One function per group, shared by its clients and by their train and test labels.
        for old, new in zip(labels_of(b).tolist(), labels_of(s).tolist(), strict=True):
            assert mapping.setdefault(old, new) == new
    assert sorted(maps) == [0, 1, 2, 3]
    assert all(old == new for old, new in maps[0].items())  # group 0 keeps the identity
    for group in (1, 2, 3):
        mapping = maps[group]
        assert sorted(mapping) == sorted(mapping.values()) == list(range(10))  # a bijection
        assert any(old != new for old, new in mapping.items())
    tables = {tuple(sorted(m.items())) for m in maps.values()}
    assert len(tables) == 4  # distinct permutations


# --- covariate shift -----------------------------------------------------------------------------


# A real dataset adds normalization, which rotation must commute with exactly.
@pytest.mark.parametrize(
    "name", ["synthetic", pytest.param("fashion_mnist", marks=requires_real_data)]
)
def test_rotation_groups_turn_images_by_exact_quarter_turns(name: str) -> None:
    base, turned = build(name), build(name, group_transform="rotation")
    for b, t in zip(base.shards, turned.shards, strict=True):
        k = t.group  # default angles 0, 90, 180, 270
        assert torch.equal(t.x_train, torch.rot90(b.x_train, k, dims=(2, 3)))
        assert torch.equal(t.x_test, torch.rot90(b.x_test, k, dims=(2, 3)))
        assert torch.equal(labels_of(t), labels_of(b))
        assert k == 0 or not torch.equal(t.x_train, b.x_train)


def test_arbitrary_angles_resample_through_torchvision() -> None:
    import torchvision.transforms.functional as tvf

    base = build(num_clients=4)
    angles: dict = {"transform_groups": 2, "rotation_angles": (0.0, 45.0)}
    turned = build(num_clients=4, group_transform="rotation", **angles)
    assert [s.group for s in turned.shards] == [0, 0, 1, 1]
    bilinear = tvf.InterpolationMode.BILINEAR
    for b, t in zip(base.shards, turned.shards, strict=True):
        expected = tvf.rotate(b.x_train, 45.0, bilinear) if t.group else b.x_train
        assert torch.allclose(t.x_train, expected, atol=1e-6)
    x = base.shards[0].x_train[:5]
    assert torch.equal(rotate_images(x, 90), tvf.rotate(x, 90.0))  # one direction: anticlockwise
    assert torch.equal(rotate_images(x, -90), rotate_images(x, 270))
    assert torch.equal(rotate_images(x, 360.0), x)


def test_dirichlet_with_rotation_keeps_the_label_skew() -> None:
    common: dict = {"partition": "dirichlet", "alpha": 0.3, "num_samples": 3000}
    base, mixed = build(**common), build(**common, group_transform="rotation")
    sizes = [s.num_train + s.num_test for s in mixed.shards]
    assert max(sizes) > 2 * min(sizes)  # still dirichlet-sized clients
    for b, m in zip(base.shards, mixed.shards, strict=True):
        assert torch.equal(torch.bincount(labels_of(m)), torch.bincount(labels_of(b)))
        assert torch.equal(m.x_test, torch.rot90(b.x_test, m.group, dims=(2, 3)))


# --- unchanged defaults and memory ---------------------------------------------------------------


@pytest.mark.parametrize("partition", ["dirichlet", "label_groups"])
def test_no_transform_gives_the_same_shards(partition: str) -> None:
    before = build(partition=partition, num_groups=3)
    explicit = build(partition=partition, num_groups=3, group_transform=None, transform_groups=4)
    for a, b in zip(before.shards, explicit.shards, strict=True):
        assert a.group == b.group
        for field in ("x_train", "y_train", "x_test", "y_test"):
            assert torch.equal(getattr(a, field), getattr(b, field))
    assert len(build(num_clients=2).shards) == 2  # transform_groups is ignored without a transform


@pytest.mark.parametrize("transform", ["label_permutation", "rotation"])
def test_transformed_shards_are_still_slices_of_one_buffer(transform: str) -> None:
    data = build(group_transform=transform)
    for field in ("x_train", "x_test", "y_train", "y_test"):
        pointers = {getattr(s, field).untyped_storage().data_ptr() for s in data.shards}
        assert len(pointers) == 1


# --- public set ----------------------------------------------------------------------------------


def test_public_set_comes_from_the_test_split_only() -> None:
    images = public()
    assert images.shape == (300, 1, 28, 28) and images.dtype == torch.float32
    keys = row_keys(images)
    assert len(keys) == 300  # drawn without replacement
    assert keys <= row_keys(load_pool("synthetic", None, download=False, split="test")[0])
    clients = build(num_samples=None)
    client_keys = row_keys(torch.cat([torch.cat([s.x_train, s.x_test]) for s in clients.shards]))
    assert not keys & client_keys


def test_public_set_is_deterministic_per_seed() -> None:
    first = public(seed=5)
    assert torch.equal(first, public(seed=5))
    assert not torch.equal(first, public(seed=6))


def test_public_set_too_large_explains_itself() -> None:
    with pytest.raises(ValueError, match=r"1\.\.1000 \(the synthetic test split\).*exclude_client"):
        public(num_samples=1001)
    with pytest.raises(ValueError, match="got 0"):
        public(num_samples=0)
    train = public(num_samples=2000, exclude_client_data=False)
    assert row_keys(train) <= row_keys(load_pool("synthetic", None, download=False)[0])


@requires_real_data
def test_cifar10_public_set_is_normalized_test_images() -> None:
    kwargs: dict = {"root": DATA_ROOT, "download": False, "seed": 0}
    images = build_public_set("cifar10", num_samples=1000, **kwargs)
    assert images.shape == (1000, 3, 32, 32)
    assert images.mean(dim=(0, 2, 3)).abs().max() < 0.1
    with pytest.raises(ValueError, match="1001"):
        build_public_set("cifar10", num_samples=1001, **kwargs)


# --- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"group_transform": "blur"}, "label_permutation, rotation"),
        ({"group_transform": "rotation", "num_clients": 3}, r"1\.\.3 \(the clients\), got 4"),
        ({"group_transform": "rotation", "transform_groups": 0}, "got 0"),
        ({"group_transform": "rotation", "rotation_angles": (0, 90)}, "2 angles for 4"),
        ({"rotation_angles": (0, 90, 180, 270)}, "only apply to group_transform='rotation'"),
        (
            {"group_transform": "label_permutation", "partition": "label_groups"},
            "both define the client groups",
        ),
    ],
)
def test_bad_transform_settings_fail_before_loading(
    tmp_path: Path, overrides: dict, message: str
) -> None:
    with pytest.raises(ValueError, match=message):  # a ValueError, not the missing-files error
        build("cifar10", root=tmp_path, **overrides)
