"""Communication and time budgets without training.

The same World and the same algorithm code run with training replaced by its timing:
models are shape-only ("meta") tensors, so every message has its true size while no
arithmetic is done, and evaluation is skipped. What remains is the event model: bytes per
round and direction, and where each round's time goes.

``runs``: one algorithm's timing-only run and its summary (``Budget``); ``closed_forms``: the
round times a closed form knows exactly; ``tables``: the budgets as ``fedsim budget`` prints
them; ``event_load``: warnings of settings that multiply the event model's work.
"""

from fedsim.budget.event_load import event_load_warnings
from fedsim.budget.runs import Budget, budget_algorithm
from fedsim.budget.tables import format_budgets

__all__ = ["Budget", "budget_algorithm", "event_load_warnings", "format_budgets"]
