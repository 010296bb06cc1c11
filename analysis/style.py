"""What every figure shares, so that a run looks the same in all of them.

Figures are built on ``matplotlib.figure.Figure`` and rendered by the Agg canvas, with no pyplot
state, so plotting works headless and from several threads or tests. Run ``i`` is drawn in
colour ``i`` of the tab10 cycle in every figure, so a run is recognisable across figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from analysis.results import Run

DPI = 120
PALETTE = colormaps["tab10"].colors
EXPLANATION_COLOUR = "0.45"  # legend entries that explain a line style rather than name a run


def colour(index: int) -> tuple[float, ...]:
    """Colour ``index`` of the tab10 cycle (it wraps after ten)."""
    return PALETTE[index % len(PALETTE)]


def percent(run: Run, column: str) -> np.ndarray:
    """A fraction column of ``metrics.csv`` in percent, as the axes show it."""
    return run.columns[column] * 100.0


def run_name(run: Run) -> str:
    """The run's label, marked when its summary says it did not finish (interrupted)."""
    return run.label + (" (incomplete)" if run.summary.get("complete") is False else "")


def has_data(run: Run) -> bool:
    """Whether the run has evaluated at least once (a run just started has nothing to draw)."""
    return bool(np.isfinite(run.columns["accuracy"]).any())


def lone_point_style(count: int) -> dict:
    """Markers for a curve of ``count`` points: a line through one point would not show."""
    return {"marker": "o", "markersize": 3} if count == 1 else {}


def line_style(run: Run) -> dict:
    """Show points when there are too few for a line to be visible (a single evaluation)."""
    return lone_point_style(run.columns["accuracy"].size)


def require_runs(runs: Sequence[object]) -> None:
    """An empty figure would hide a caller's mistake: refuse it."""
    if not runs:
        raise ValueError("no runs to plot")


def save(figure: Figure, out_path: Path) -> Path:
    """Render ``figure`` with Agg into ``out_path`` (its folder created) and return the path."""
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(figure)  # render with Agg whatever the session's default backend is
    figure.savefig(out_path, dpi=DPI, bbox_inches="tight")
    return out_path


def up_to_date(out_path: Path, inputs: Sequence[Path]) -> bool:
    """Whether the figure ``out_path`` exists and is no older than any of its ``inputs`` that
    exist, so a pipeline redrawing after every run can skip it."""
    if not out_path.is_file():
        return False
    written = out_path.stat().st_mtime
    return all(written >= p.stat().st_mtime for p in inputs if p.is_file())
