"""One file per algorithm; each exposes ``run(world, config)``, a SimPy process body.

Modules are imported when an algorithm is first run, so a scenario only pays for (and
only depends on) the algorithms it uses.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Generator, Mapping

from fedsim.config import ALGORITHM_NAMES

AlgorithmProcess = Callable[..., Generator]

# FedOpt's named variants are FedAvg with a preset server optimizer.
ALIASES = dict.fromkeys(("fedavgm", "fedadagrad", "fedadam", "fedyogi"), "fedavg")
ALGORITHM_MODULES: dict[str, str] = {
    name: f"fedsim.algorithms.{ALIASES.get(name, name)}" for name in ALGORITHM_NAMES
}


class _Registry(Mapping[str, AlgorithmProcess]):
    """name -> the module's ``run``, imported on first use."""

    def __getitem__(self, name: str) -> AlgorithmProcess:
        return importlib.import_module(ALGORITHM_MODULES[name]).run

    def __iter__(self):
        return iter(ALGORITHM_MODULES)

    def __len__(self) -> int:
        return len(ALGORITHM_MODULES)


ALGORITHMS: Mapping[str, AlgorithmProcess] = _Registry()
