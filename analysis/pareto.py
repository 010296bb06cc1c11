"""``pareto.png``: each run label's final accuracy against what it cost to reach the target
(KM median time, median bytes), the Pareto-optimal labels filled and joined by a staircase.
The front and the rows are computed in ``analysis.stats``; this module only draws them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from analysis import style
from analysis.results import Run
from analysis.stats import BYTES_PER_MB, CompareRow, compare_rows, pareto_front

PARETO_FILE = "pareto.png"


def _pareto_panel(
    ax: Axes, rows: Sequence[CompareRow], costs: Sequence[float | None], xlabel: str
) -> None:
    """One point per row that has a cost and a final accuracy, its colour its place in rows."""
    shown = [
        i for i, cost in enumerate(costs) if cost is not None and rows[i].final_mean is not None
    ]
    left_out = [row.label for i, row in enumerate(rows) if i not in shown]
    x = np.array([costs[i] for i in shown], dtype=float)
    y = np.array([100 * rows[i].final_mean for i in shown], dtype=float)
    optimal = pareto_front(x, y)
    order = np.argsort(x[optimal], kind="stable")
    staircase = {"where": "post", "color": "black", "linewidth": 1, "alpha": 0.6}
    ax.step(x[optimal][order], y[optimal][order], zorder=1, **staircase)
    for i, xi, yi, best in zip(shown, x, y, optimal, strict=True):
        row, colour = rows[i], style.colour(i)
        if row.final_ci is not None:
            bar = {"color": colour, "alpha": 0.5, "linewidth": 1, "capsize": 2}
            ax.errorbar(xi, yi, yerr=100 * row.final_ci, zorder=2, **bar)
        face = colour if best else "white"
        marker = {"marker": "o", "markersize": 8, "markeredgecolor": "black"}
        ax.plot(xi, yi, linestyle="none", color=colour, markerfacecolor=face, zorder=3, **marker)
        ax.annotate(row.label, (xi, yi), textcoords="offset points", xytext=(5, 4))
    if left_out:
        note = "not shown (KM median time to target not reached): " + ", ".join(left_out)
        ax.text(0.01, 0.01, note, transform=ax.transAxes, fontsize="x-small", color="0.35")
    # Costs start at 0: a lone point would be centred in an axis reaching below it (-MB, -s).
    right = ax.get_xlim()[1] if x.size == 0 else max(ax.get_xlim()[1], 1.15 * x.max())
    ax.set_xlim(0.0, right)
    ax.set_xlabel(xlabel)
    ax.grid(True, alpha=0.3)


def plot_pareto(
    rows_or_runs: Sequence[CompareRow] | Sequence[Run],
    out_path: Path,
    target_accuracy: float | None = None,
) -> Path:
    """Final mean accuracy against the KM median time to target (left) and against the median
    bytes to target, all directions together (right), one point per row of ``compare_rows``;
    the Pareto-optimal points (no other point both cheaper and more accurate) are filled and
    joined by the staircase of the best accuracy reachable at each cost; vertical bars are the
    95% CI of the final accuracy. Rows whose KM median time to target is not reached (fewer
    than about half of their seeds got there) are left out of both panels and named below."""
    rows = list(rows_or_runs)
    if rows and isinstance(rows[0], Run):
        rows = compare_rows(rows, target_accuracy)
    style.require_runs(rows)
    figure = Figure(figsize=(12, 4.8), layout="constrained")
    by_time, by_bytes = figure.subplots(1, 2, sharey=True)
    times = [row.median_time_s for row in rows]
    _pareto_panel(by_time, rows, times, "Time to target, KM median over seeds (s)")
    megabytes = [  # the same points as on the left: bytes alone would flatter a rare success
        None
        if row.median_time_s is None or row.total_bytes_to_target is None
        else row.total_bytes_to_target / BYTES_PER_MB
        for row in rows
    ]
    _pareto_panel(by_bytes, rows, megabytes, "Bytes to target, median (MB, up + down + d2d)")
    by_time.set_ylabel("Final test accuracy, mean over seeds (%)")
    targets = {row.target_accuracy for row in rows if row.target_accuracy is not None}
    title = "Pareto front: accuracy vs cost"
    if len(targets) == 1:
        title += f" (target {targets.pop():.0%}; filled: Pareto-optimal)"
    figure.suptitle(title)
    return style.save(figure, out_path)
