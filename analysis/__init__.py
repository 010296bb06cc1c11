"""Post-processing of fedsim results folders: loading runs and drawing comparison plots.

This package only reads what the recorder wrote (``results/<scenario>/<label>/``); it never runs
a simulation, so it can be used on a machine without simpy or torch.
"""

from analysis.churn import Recovery, load_activity, plot_active_clients, recovery_after
from analysis.figures import plot_results, plot_runs
from analysis.pareto import plot_pareto
from analysis.plots import plot_accuracy_vs_bytes, plot_accuracy_vs_samples, plot_time_to_accuracy
from analysis.results import (
    MixedScenariosError,
    Run,
    RunGroup,
    find_runs,
    group_seeds,
    load_run,
    time_to_target,
)
from analysis.stats import (
    CompareRow,
    KaplanMeier,
    MeanCurve,
    SeedAggregate,
    across_seeds,
    compare_rows,
    format_table,
    kaplan_meier,
    mean_curve,
)

__all__ = [
    "CompareRow",
    "KaplanMeier",
    "MeanCurve",
    "MixedScenariosError",
    "Recovery",
    "Run",
    "RunGroup",
    "SeedAggregate",
    "across_seeds",
    "compare_rows",
    "find_runs",
    "format_table",
    "group_seeds",
    "kaplan_meier",
    "load_activity",
    "load_run",
    "mean_curve",
    "plot_accuracy_vs_bytes",
    "plot_accuracy_vs_samples",
    "plot_active_clients",
    "plot_pareto",
    "plot_results",
    "plot_runs",
    "plot_time_to_accuracy",
    "recovery_after",
    "time_to_target",
]
