"""Asynchronous runs: server updates over simulated time and the staleness of what was applied.

Reads the ``async.npz`` that asynchronous algorithms keep in their run folder (times of
the server updates, and the staleness of each update applied, one row per server update).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from analysis import style
from fedsim.results.files import ASYNC_FILE

ASYNC_PLOT = "asynchrony.png"


def plot_async(runs: Sequence[tuple[str, Path]], out_path: Path) -> Path:
    """Left: cumulative server updates vs simulated time; right: staleness histogram."""
    figure = Figure(figsize=(11, 4.5))
    updates, staleness = figure.subplots(1, 2)
    largest = 0
    loaded = []
    for label, run_dir in runs:
        data = np.load(Path(run_dir) / ASYNC_FILE)
        loaded.append((label, data["times"], data["staleness"].ravel()))
        largest = max(largest, int(data["staleness"].max(initial=0)))
    bins = np.arange(largest + 2) - 0.5
    for index, (label, times, taus) in enumerate(loaded):
        colour = style.colour(index)
        updates.step(times, np.arange(1, len(times) + 1), where="post", color=colour, label=label)
        mean = f"mean {taus.mean():.1f}" if taus.size else "none applied"
        staleness.hist(taus, bins=bins, histtype="step", color=colour, label=f"{label} ({mean})")
    updates.set(xlabel="Simulated time (s)", ylabel="Server model updates", title="Updates")
    staleness.set(xlabel="Staleness (server versions)", ylabel="Updates applied")
    staleness.set_title("Staleness of applied updates")
    for axes in (updates, staleness):
        axes.grid(alpha=0.3)
        axes.legend(fontsize=8)
    return style.save(figure, out_path)
