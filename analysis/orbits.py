"""A constellation's figures, from a run folder's ``passes.csv``: the visibility timeline
(one row per satellite, its passes as bars over the hours, the passes that carried bytes
darker), and the hours axis the time figures take for satellite runs."""

from __future__ import annotations

import csv
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

from analysis import style
from fedsim.results.files import PASSES_FILE

VISIBILITY_PLOT = "visibility.png"
HOUR_S = 3600.0


def in_hours(ax: Axes) -> None:
    """Label a time axis in seconds as hours (ticks at whole hours where they fit)."""
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x / HOUR_S:g}"))
    ax.set_xlabel("Simulated time (h)")


def plot_visibility(run_dir: Path, out_path: Path | None = None) -> Path:
    """Satellite × time: each pass a bar (light: in sight, dark: it carried bytes up or down)."""
    run_dir = Path(run_dir)
    with (run_dir / PASSES_FILE).open() as f:
        rows = list(csv.DictReader(f))
    satellites = sorted({int(r["satellite"]) for r in rows})
    figure = Figure(figsize=(11, max(3.0, 0.12 * len(satellites) + 1.5)))
    ax = figure.add_subplot()
    for row in rows:
        sat, start, duration = (
            int(row["satellite"]),
            float(row["start_s"]),
            float(row["duration_s"]),
        )
        used = int(row["uplink_bytes"]) or int(row["downlink_bytes"])
        ax.broken_barh(
            [(start / HOUR_S, duration / HOUR_S)], (sat - 0.4, 0.8),
            facecolors="tab:blue" if used else "lightsteelblue", linewidth=0,
        )  # fmt: skip
    ax.set_xlabel("Simulated time (h)")
    ax.set_ylabel("Satellite")
    ax.set_ylim(-1, (max(satellites) + 1) if satellites else 1)
    ax.set_title(f"Visibility: passes over the server's nodes ({len(rows)} passes)")
    ax.legend(
        handles=[Patch(color="lightsteelblue", label="in sight"),
                 Patch(color="tab:blue", label="carried a model")],
        loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small",
    )  # fmt: skip
    ax.grid(True, axis="x", alpha=0.3)
    return style.save(figure, out_path or run_dir / VISIBILITY_PLOT)
