"""fedsim: a discrete-event simulator of wireless federated learning.

Public API: ``load_scenario`` (YAML -> validated Scenario) and ``run_scenario`` (run its
algorithms on one shared world, write results and plots); the ``fedsim`` command wraps both.
"""

from fedsim.config import Scenario, ScenarioError, load_scenario

__all__ = ["Scenario", "ScenarioError", "load_scenario", "run_scenario"]
__version__ = "0.1.0"


def __getattr__(name: str):  # torch is imported only when a run is asked for
    if name == "run_scenario":
        from fedsim.study import run_scenario

        return run_scenario
    raise AttributeError(f"module 'fedsim' has no attribute {name!r}")
