"""Which client holds which samples: partitions of a pool over the clients (iid, Dirichlet
label skew, FedeRiCo's label groups), and the group-wise shifts on top of them (concept shift
by relabelling, covariate shift by rotation). Every random choice comes from the generator
passed in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from fedsim.learn.datasets import check_choice, torchvision_module

PARTITION_NAMES = ("iid", "dirichlet", "label_groups")
GROUP_TRANSFORMS = ("label_permutation", "rotation")


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


def check_group_transform(
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
    check_choice("group_transform", group_transform, GROUP_TRANSFORMS)
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
