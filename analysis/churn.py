"""How runs cope with clients coming and going.

``recovery_after`` measures the accuracy dip after an event (clients leaving, a partition) and
how long the run takes to win back its level; ``plot_active_clients`` shows how many clients
were present and online over time, from the ``activity.csv`` a run folder holds (one row per
change: ``time_s,present,online``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from analysis import style
from analysis.results import read_columns
from fedsim.results.files import ACTIVITY_COLUMNS, ACTIVITY_FILE
from fedsim.results.recovery import Recovery, recovery_after

__all__ = [
    "ACTIVE_CLIENTS_PLOT",
    "ACTIVITY_COLUMNS",
    "ACTIVITY_FILE",
    "Recovery",
    "load_activity",
    "plot_active_clients",
    "recovery_after",
]

ACTIVE_CLIENTS_PLOT = "active_clients.png"


def load_activity(path: Path) -> dict[str, np.ndarray]:
    """Read an ``activity.csv`` into float arrays, one per column (a cut-off last line is
    ignored, as in ``metrics.csv``)."""
    return read_columns(Path(path), ACTIVITY_COLUMNS)


def plot_active_clients(
    runs: Sequence[tuple[str, Path]], out_path: Path, event_times_s: Sequence[float] = ()
) -> Path:
    """Step plot of the present (solid) and online (dashed) clients of each (label, run folder)
    over simulated time, with the given events as dotted vertical lines.

    A count holds until the next change, so each run's last count is drawn to the right edge
    of the figure (``activity.csv`` does not say when the run stopped).
    """
    style.require_runs(runs)
    activities = [(label, load_activity(Path(folder) / ACTIVITY_FILE)) for label, folder in runs]
    end_s = max(
        [float(a["time_s"].max()) for _, a in activities if a["time_s"].size]
        + [float(t) for t in event_times_s]
        + [0.0]
    )

    figure = Figure(figsize=(7, 4.5))
    ax = figure.add_subplot()
    for index, (label, activity) in enumerate(activities):
        colour = style.colour(index)
        if not activity["time_s"].size:
            ax.plot([], [], color=colour, label=f"{label} (no data)")
            continue
        time_s = np.append(activity["time_s"], end_s)
        present = np.append(activity["present"], activity["present"][-1])
        online = np.append(activity["online"], activity["online"][-1])
        ax.step(time_s, present, where="post", color=colour, label=label)
        ax.step(time_s, online, where="post", color=colour, linestyle="--")
    for event_s in event_times_s:
        ax.axvline(event_s, color="black", linestyle=":", linewidth=1)

    explanation = [
        Line2D([], [], color=style.EXPLANATION_COLOUR, label="present"),
        Line2D([], [], color=style.EXPLANATION_COLOUR, linestyle="--", label="online"),
    ]
    if len(event_times_s):
        explanation.append(Line2D([], [], color="black", linestyle=":", label="event"))
    handles, _ = ax.get_legend_handles_labels()
    ax.legend(handles=handles + explanation, loc="best", fontsize="small")
    ax.set_xlabel("Simulated time (s)")
    ax.set_ylabel("Clients")
    ax.set_ylim(bottom=0)
    ax.set_title("Active clients vs simulated time")
    ax.grid(True, alpha=0.3)
    return style.save(figure, out_path)
