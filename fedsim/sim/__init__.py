"""The system model: links, media and compute delays on a SimPy clock.

Nothing in here imports torch: payloads arrive as byte counts, work as step counts,
so the timing model can be checked (and budgeted) without any training.

The names below are resolved on first use (PEP 562), so that importing one submodule, such
as ``fedsim.sim.readers`` for the scenario schema, does not import simpy with all the others.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedsim.sim.compute import ComputeModel, ShiftedExponential, harmonic_number
    from fedsim.sim.event_check import check_events
    from fedsim.sim.events import EventLog
    from fedsim.sim.medium import DedicatedMedium, FifoMedium, SharedMedium
    from fedsim.sim.network import Link, Network, transfer_time_s

_HOMES = {
    "ComputeModel": "compute",
    "DedicatedMedium": "medium",
    "EventLog": "events",
    "FifoMedium": "medium",
    "Link": "network",
    "Network": "network",
    "SharedMedium": "medium",
    "ShiftedExponential": "compute",
    "check_events": "event_check",
    "harmonic_number": "compute",
    "transfer_time_s": "network",
}

__all__ = [
    "ComputeModel",
    "DedicatedMedium",
    "EventLog",
    "FifoMedium",
    "Link",
    "Network",
    "SharedMedium",
    "ShiftedExponential",
    "check_events",
    "harmonic_number",
    "transfer_time_s",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
