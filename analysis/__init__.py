"""Post-processing of fedsim results folders: loading runs and drawing comparison plots.

This package only reads what the recorder wrote (``results/<scenario>/<label>/``); it never runs
a simulation, so it can be used on a machine without simpy or torch.
"""

from analysis.churn import Recovery, load_activity, plot_active_clients, recovery_after
from analysis.plots import plot_accuracy_vs_bytes, plot_runs, plot_time_to_accuracy
from analysis.results import Run, SeedAggregate, across_seeds, find_runs, load_run, time_to_target

__all__ = [
    "Recovery",
    "Run",
    "SeedAggregate",
    "across_seeds",
    "find_runs",
    "load_activity",
    "load_run",
    "plot_accuracy_vs_bytes",
    "plot_active_clients",
    "plot_runs",
    "plot_time_to_accuracy",
    "recovery_after",
    "time_to_target",
]
