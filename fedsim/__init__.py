"""fedsim: a discrete-event simulator of wireless federated learning.

Public API: ``load_scenario`` (YAML -> validated Scenario) and ``run_scenario`` (run its
algorithms on one shared world, write results and plots); the ``fedsim`` command wraps both.

The names are resolved on first use, so that importing a part that needs neither (the results
contract ``fedsim.results.files``, which ``analysis`` reads) loads neither pydantic nor torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedsim.config import Scenario, ScenarioError, load_scenario
    from fedsim.study import run_scenario

__all__ = ["Scenario", "ScenarioError", "load_scenario", "run_scenario"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in ("Scenario", "ScenarioError", "load_scenario"):
        import fedsim.config  # pydantic and the schema: only when asked for

        return getattr(fedsim.config, name)
    if name == "run_scenario":
        from fedsim.study import run_scenario  # torch: only when a run is asked for

        return run_scenario
    raise AttributeError(f"module 'fedsim' has no attribute {name!r}")
