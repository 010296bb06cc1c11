"""Shared test set-up: the offline data root and a small scenario builder."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("FEDSIM_DATA", str(REPO.parent / "shared" / "data"))
DATA_ROOT = Path(os.environ["FEDSIM_DATA"])

requires_real_data = pytest.mark.skipif(
    not (DATA_ROOT / "FashionMNIST" / "raw").is_dir(),
    reason=f"offline datasets not found under {DATA_ROOT} (set FEDSIM_DATA)",
)


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Every test trains with fedsim's default thread count (results depend on it), also
    those that build a World directly rather than through ``run_scenario``."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


TINY_SCENARIO: dict = {
    "name": "tiny",
    "seed": 3,
    "dataset": {"name": "synthetic", "num_samples": 1200, "partition": {"kind": "iid"}},
    "model": {"name": "mlp", "hidden_sizes": [32]},
    "clients": {"count": 6},
    "system": {
        "network": {"uplink_mbps": 1.0, "rho": 4.0, "latency_s": 0.01},
        "compute": {"t_min_s": 0.5, "mean_extra_s": 0.5},
    },
    "training": {"lr": 0.1, "batch_size": 32, "local_epochs": 1},
    "algorithms": [{"name": "fedavg"}],
    "run": {"rounds": 3},
    "evaluation": {"every_rounds": 1, "target_accuracy": 0.5},
}


def tiny_scenario(tmp_path: Path, **overrides: dict) -> dict:
    """TINY_SCENARIO with sections merged from overrides and output under tmp_path."""
    data = copy.deepcopy(TINY_SCENARIO)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            merge_into(data[key], value)
        else:
            data[key] = copy.deepcopy(value)
    data["output"] = {"dir": str(tmp_path / "results")}
    return data


def merge_into(into: dict, extra: dict) -> None:
    """Merge ``extra`` into ``into``, section by section (a non-dict value replaces).

    Values are copied, so later merges never write into the caller's (e.g. a module's) dicts.
    """
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge_into(into[key], value)
        else:
            into[key] = copy.deepcopy(value)
