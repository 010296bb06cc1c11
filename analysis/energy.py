"""Energy figures: accuracy against the joules spent, and how the joules fall on the clients.

They read ``metrics.csv``'s cumulative energy columns and each run's ``energy.csv`` (written
when the scenario has ``system.energy``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from analysis import style
from analysis.results import Run, read_columns
from analysis.results import has_energy as has_energy  # where scripts found it before
from fedsim.results.files import ENERGY_COLUMNS, ENERGY_FILE, ENERGY_SPENT

ACCURACY_VS_ENERGY_FILE = "accuracy_vs_energy.png"
ENERGY_PER_CLIENT_FILE = "energy_per_client.png"
SPENT = ENERGY_SPENT  # joules by category; wasted_j is part of these


def plot_accuracy_vs_energy(runs: Sequence[Run], out_path: Path) -> Path:
    """Left: mean accuracy against the joules all clients have spent so far. Right: each
    run's final joules by category (computing, transmitting, receiving, idle), and the part
    of them spent on lost work (hatched)."""
    style.require_runs(runs)
    figure = Figure(figsize=(12, 4.5), layout="constrained")
    curve, bars = figure.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    for index, run in enumerate(runs):
        if not style.has_data(run):
            continue
        spent_j = sum(run.columns[c] for c in SPENT)
        accuracy = style.percent(run, "accuracy")
        curve.plot(spent_j, accuracy, color=style.colour(index), label=style.run_name(run))
    curve.set_xlabel("Energy spent by all clients (J)")
    curve.set_ylabel("Test accuracy (%)")
    curve.grid(True, alpha=0.3)
    curve.legend(loc="lower right", fontsize="small")
    rows = np.arange(len(runs))
    left = np.zeros(len(runs))
    for k, column in enumerate(SPENT):
        joules = np.array([_final(run, column) for run in runs])
        colour = style.colour(k + 5)
        bars.barh(rows, joules, left=left, height=0.55, color=colour, label=column[:-2])
        left += joules
    wasted = np.array([_final(run, "wasted_j") for run in runs])
    bars.barh(rows - 0.4, wasted, height=0.18, color="0.25", label="of which wasted")
    bars.set_yticks(rows, [style.run_name(run) for run in runs], fontsize="small")
    bars.invert_yaxis()  # the runs in the legend's order, top down
    bars.set_xlabel("Energy by the end of the run (J)")
    bars.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    figure.suptitle("Accuracy vs energy")
    return style.save(figure, out_path)


def client_totals_j(run_dir: Path) -> np.ndarray:
    """Every client's joules by the end of the run (its last row in energy.csv)."""
    table = read_columns(Path(run_dir) / ENERGY_FILE, ENERGY_COLUMNS)
    totals: dict[int, float] = {}
    for i, client in enumerate(table["client"].astype(int)):
        totals[client] = float(sum(table[c][i] for c in SPENT))
    return np.array(list(totals.values()))


def plot_energy_per_client(runs: Sequence[Run], out_path: Path) -> Path:
    """Each run's clients sorted by the joules they spent, most first: how evenly an
    algorithm spreads its cost over the devices (a flat line is fair)."""
    style.require_runs(runs)
    figure = Figure(figsize=(7, 4.5))
    ax = figure.subplots()
    for index, run in enumerate(runs):
        totals = np.sort(client_totals_j(run.path))[::-1]
        if totals.size:
            median = float(np.median(totals))
            ax.plot(
                np.arange(1, totals.size + 1), totals, color=style.colour(index),
                label=f"{style.run_name(run)} (max {totals[0]:.3g} J, median {median:.3g} J)",
            )  # fmt: skip
    ax.set_xlabel("Clients, most energy first")
    ax.set_ylabel("Energy spent (J)")
    ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    if ax.lines:  # a run cut before it measured any energy draws nothing
        ax.legend(fontsize="small")
    figure.suptitle("Energy per client")
    return style.save(figure, out_path)


def _final(run: Run, column: str) -> float:
    values = run.columns[column]
    finite = values[np.isfinite(values)]
    return float(finite[-1]) if finite.size else 0.0
