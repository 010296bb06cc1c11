"""The data: which dataset, how it is split among the clients (partitions, group shifts), and
per-client sample counts for timing-only runs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from fedsim.config.base import NO_BOOL, PositiveInt, _Strict, tagged_union
from fedsim.config.laws import PositiveDistribution

DATA_ENV_VAR = "FEDSIM_DATA"
DEFAULT_DATA_ROOT = Path("data")  # the only data folder fedsim creates itself (for a download)
# Samples of each dataset's training split (synthetic: the set fedsim generates), the pool the
# clients share. Here, not in learn/data.py, so that validation can count without torch.
TRAIN_POOL_SIZES = {"mnist": 60_000, "fashion_mnist": 60_000, "cifar10": 50_000, "synthetic": 6_000}
SUGGESTED_TIMING_SAMPLES = 600  # per client, as MNIST among 100 clients (McMahan et al.)


def pool_size(name: str, num_samples: int | None) -> int:
    """How many training samples the clients share: the subset asked for, else the split."""
    return num_samples or TRAIN_POOL_SIZES[name]


class IidPartition(_Strict):
    """Every client gets an equal share of the pool, drawn at random."""

    kind: Literal["iid"] = "iid"


class DirichletPartition(_Strict):
    """Per class, client shares ~ Dir(alpha); small alpha = strong label skew."""

    kind: Literal["dirichlet"] = "dirichlet"
    alpha: Annotated[float, Field(ge=1e-6, le=1e6), NO_BOOL] = Field(
        default=0.5, description="concentration: small is strong label skew, large near iid"
    )
    min_samples_per_client: PositiveInt = Field(
        default=10, description="redraw the split until every client holds at least this many"
    )


class LabelGroupsPartition(_Strict):
    """FedeRiCo's split: disjoint label sets, one per group; each client in one group."""

    kind: Literal["label_groups"] = "label_groups"
    groups: PositiveInt = Field(default=2, description="label sets (and client groups)")
    balanced: bool = Field(
        default=True, description="equal numbers of clients and labels per group"
    )


PARTITIONS = (IidPartition, DirichletPartition, LabelGroupsPartition)
Partition = tagged_union(PARTITIONS, "kind")


class GroupShift(_Strict):
    """Per-group shift on top of the partition: contiguous blocks of clients form the groups.

    label_permutation: group g relabels the classes by its own permutation (concept shift;
    group 0 keeps the identity). rotation: group g's images are rotated by angles_deg[g]
    (covariate shift; default k * 360 / groups).
    """

    kind: Literal["label_permutation", "rotation"] = Field(
        description="label_permutation: each group relabels the classes (concept shift); "
        "rotation: each group's images are rotated (covariate shift)"
    )
    groups: PositiveInt = Field(default=4, description="groups of contiguous clients")
    angles_deg: list[Annotated[float, Field(ge=-360, le=360), NO_BOOL]] | None = Field(
        default=None, description="rotation: one angle per group (default k · 360 / groups)"
    )
    sizes: list[PositiveInt] | None = Field(
        default=None, description="clients per group, in client order (default: equal blocks)"
    )

    @model_validator(mode="after")
    def _angles(self) -> GroupShift:
        if self.angles_deg is not None:
            if self.kind != "rotation":
                raise ValueError("angles_deg applies to kind 'rotation' only")
            if len(self.angles_deg) != self.groups:
                raise ValueError(f"angles_deg needs one angle per group ({self.groups})")
        if self.sizes is not None and len(self.sizes) != self.groups:
            raise ValueError(f"sizes needs one size per group ({self.groups})")
        return self


class TimingSamples(_Strict):
    """Per-client training sample counts for timing-only runs: used when the clients outnumber
    the data (a million clients need no million-sample dataset to be budgeted), or always."""

    per_client: PositiveDistribution = Field(description="training samples (a number or a law)")
    apply: Literal["when_short", "always"] = Field(
        default="when_short",
        description="when_short: only when the clients outnumber the data; always: every "
        "timing-only run",
    )


def _names_a_folder(value: Any) -> Any:
    """An empty path is no folder the user chose: as a Path it is ``.``, the working folder,
    which would pass every check and receive a download."""
    if isinstance(value, str) and not value.strip():
        raise ValueError(
            f"an empty path names no folder: leave root out (or null) for ${DATA_ENV_VAR}, "
            "else ./data"
        )
    return value


class DatasetConfig(_Strict):
    name: Literal["mnist", "fashion_mnist", "cifar10", "synthetic"] = Field(
        description="the dataset (synthetic: a small generated set, no files)"
    )
    root: Annotated[Path | None, BeforeValidator(_names_a_folder)] = Field(
        default=None, description=f"data folder; default ${DATA_ENV_VAR}, else ./data"
    )
    download: bool = Field(
        default=True, description="download with torchvision when the files are missing"
    )
    num_samples: PositiveInt | None = Field(
        default=None, description="random subset of the training pool shared by all clients"
    )
    test_fraction: Annotated[float, Field(gt=0, lt=1), NO_BOOL] = Field(
        default=0.2, description="share of each client's data kept as its local test set"
    )
    train_fractions: list[Annotated[float, Field(gt=0, lt=1), NO_BOOL]] | None = Field(
        default=None,
        min_length=1,
        description=(
            "each client trains on a share of its data drawn uniformly from this list and "
            "leaves the rest beside the test share unused (PerFed-CKT: [0.1, 0.3, 0.4] with "
            "test_fraction 0.5); default: all but the test share"
        ),
    )
    partition: Partition = Field(
        default=IidPartition(), description="how the pool is split among the clients"
    )
    group_shift: GroupShift | None = Field(
        default=None, description="a shift per group of clients on top of the partition"
    )
    timing_samples: TimingSamples | None = Field(
        default=None,
        description="timing-only runs (fedsim budget): per-client sample counts from a law",
    )

    @model_validator(mode="after")
    def _train_and_test_fit(self) -> DatasetConfig:
        if self.train_fractions and max(self.train_fractions) + self.test_fraction > 1 + 1e-9:
            raise ValueError(
                f"train_fractions: {max(self.train_fractions)} plus test_fraction "
                f"{self.test_fraction} exceeds a client's data (their sum must be at most 1)"
            )
        return self

    @model_validator(mode="after")
    def _one_source_of_groups(self) -> DatasetConfig:
        if self.group_shift is not None and self.partition.kind == "label_groups":
            raise ValueError("group_shift defines its own groups: use it with iid or dirichlet")
        return self

    def resolved_root(self) -> Path:
        if self.root is not None:
            return self.root
        return Path(os.environ.get(DATA_ENV_VAR) or DEFAULT_DATA_ROOT)


def sample_shortage(dataset: DatasetConfig, count: int, reserve: int) -> str | None:
    """``clients.count: ...`` saying that ``count`` clients plus the ``reserve`` outnumber the
    training samples of ``dataset`` (each client needs one), or None when they do not."""
    total, pool = count + reserve, pool_size(dataset.name, dataset.num_samples)
    if total <= pool:
        return None
    reserve_note = " (with the arrivals' reserve)" if reserve else ""
    subset = " (dataset.num_samples)" if dataset.num_samples else ""
    return (
        f"clients.count: {total:,} clients{reserve_note} but dataset {dataset.name} has "
        f"{pool:,} samples{subset}, at least one per client"
    )


def data_root_problem(root: Path) -> str | None:
    """Why a resolved data root cannot be used, naming who chose it; None if it can.

    A folder the user named (dataset.root or $FEDSIM_DATA) must exist: a download into a
    mistyped path would create folders where nobody looks. Only the default ./data may be
    missing, and a download creates it.
    """
    if root.is_dir() or (root == DEFAULT_DATA_ROOT and not root.exists()):
        return None
    env = os.environ.get(DATA_ENV_VAR)
    chosen_by = DATA_ENV_VAR if env and Path(env) == root else "dataset.root"
    what = "is not a folder" if root.exists() else "does not exist"
    return (
        f"{chosen_by}: {root} {what}: correct the path or create the folder (fedsim creates "
        "only the default ./data, for a download)"
    )
