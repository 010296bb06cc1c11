"""Training engines: how a trainer trains several clients of its architecture.

Each engine is one module behind one protocol (``base.Engine``): train a chunk of clients,
estimate what a client of a chunk holds in memory, say whether it can run the model (and why
not). ``loop`` trains one client after the other; ``vmap`` stacks the clients with
``torch.func.vmap``; ``stacked`` interprets the model's layers on per-layer stacks, each
client's arithmetic a matrix product of its own. The trainer builds them once and asks the
one ``training.engine`` names, or the one ``auto``'s policy (``policy``) picks.
"""

from fedsim.learn.engines.base import (
    Chunk,
    Distillation,
    Engine,
    Plan,
    Setup,
    TrainResult,
    draw_plan,
)
from fedsim.learn.engines.loop import LoopEngine
from fedsim.learn.engines.policy import auto_engines
from fedsim.learn.engines.stacked import StackedEngine
from fedsim.learn.engines.vmap import VmapEngine

ENGINE_TYPES = (LoopEngine, VmapEngine, StackedEngine)


class EngineRefused(ValueError):
    """An engine named explicitly cannot run the trainer's model (the message says why)."""


def build_engines(setup: Setup) -> dict[str, Engine]:
    """One engine of each kind for the trainer's setup, by name."""
    return {kind.name: kind(setup) for kind in ENGINE_TYPES}


__all__ = [
    "ENGINE_TYPES",
    "Chunk",
    "Distillation",
    "Engine",
    "EngineRefused",
    "Plan",
    "Setup",
    "TrainResult",
    "auto_engines",
    "build_engines",
    "draw_plan",
]
