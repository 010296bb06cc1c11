"""Shared test set-up: the offline data root and a small scenario builder."""

from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("FEDSIM_DATA", str(REPO.parent / "shared" / "data"))
DATA_ROOT = Path(os.environ["FEDSIM_DATA"])

requires_real_data = pytest.mark.skipif(
    not (DATA_ROOT / "FashionMNIST" / "raw").is_dir(),
    reason=f"offline datasets not found under {DATA_ROOT} (set FEDSIM_DATA)",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``cuda`` are skipped where torch sees no CUDA device."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Every test trains with fedsim's default thread count (results depend on it), also
    those that build a World directly rather than through ``run_scenario``."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def default_signals() -> None:
    """``preexec_fn`` of every child a test starts: SIGINT and SIGTERM at their defaults, as
    a terminal starts a command. A suite started in the background (``cmd &`` in a script, some
    CI runners) runs with SIGINT ignored, which a child inherits through exec; a fedsim started
    so rightly ignores Ctrl-C, and a test that sends it one would wait for nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def ignores_signal(pid: int, signum: int) -> bool:
    """Whether process ``pid`` ignores ``signum`` (Linux's /proc; False where it cannot tell):
    a signal test asserts the opposite first, so that it fails rather than waits for ever."""
    status = Path(f"/proc/{pid}/status")
    if not status.exists():
        return False
    [mask] = [
        line.split()[1] for line in status.read_text().splitlines() if line.startswith("SigIgn:")
    ]
    return bool(int(mask, 16) >> (signum - 1) & 1)


def start_python(
    *args: str, env: dict[str, str] | None = None, **popen: object
) -> subprocess.Popen:
    """``python ARGS...`` in the repository with the default signal dispositions, a headless
    matplotlib and ``env`` added to the environment; ``popen``: more of ``subprocess.Popen``'s
    arguments."""
    environment = {**os.environ, "MPLBACKEND": "Agg", **(env or {})}
    return subprocess.Popen(
        [sys.executable, *args], cwd=REPO, env=environment, preexec_fn=default_signals, **popen
    )


def run_python(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python ARGS...`` to its end (see ``start_python``), its output captured as text."""
    process = start_python(
        *args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    stdout, stderr = process.communicate()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def run_fedsim(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``fedsim ARGS...`` as a user types it, in a child process (see ``run_python``)."""
    return run_python("-m", "fedsim", *args, env=env)


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
