"""Over-the-air aggregation's figure, ``aircomp.png``: the uplinks of a study (digital,
aircomp, obda: each run's ``system.radio.uplink_aggregation``) side by side as the number of
clients grows (``clients.count``). Top: accuracy against simulated time, one panel per client
count, the mean over seeds per uplink. Bottom: the mean round duration and the share of the
participants whose update reached the sum, against the number of clients."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from analysis import style
from analysis.results import Run, read_columns
from fedsim.results.files import AIR_COLUMNS, ROUNDS_FILE

AIRCOMP_PLOT = "aircomp.png"
UPLINKS = ("digital", "aircomp", "obda")


def uplink_of(run: Run) -> str | None:
    """The run's uplink aggregation (digital when its radio does not say; None without a
    radio or a scenario.yaml)."""
    radio = ((run.scenario or {}).get("system") or {}).get("radio")
    return None if radio is None else radio.get("uplink_aggregation", "digital")


def over_the_air(runs: Sequence[Run]) -> bool:
    """Whether the runs compare an over-the-air uplink (the figure is drawn for them)."""
    return any(uplink_of(run) in ("aircomp", "obda") for run in runs)


def _rounds(run: Run) -> dict[str, np.ndarray]:
    columns = ["start_s", "end_s", "completed"]
    if uplink_of(run) != "digital":
        columns += list(AIR_COLUMNS)
    return read_columns(run.path / ROUNDS_FILE, columns)


def plot_aircomp(runs: Sequence[Run], out_path: Path, target_accuracy: float | None = None) -> Path:
    style.require_runs(runs)
    cells: dict[tuple[int, str], list[Run]] = {}
    for run in runs:
        uplink = uplink_of(run)
        if uplink is not None and style.has_data(run):
            cells.setdefault((int(run.scenario["clients"]["count"]), uplink), []).append(run)
    counts = sorted({count for count, _ in cells})
    if not counts:
        raise ValueError("no run with a radio and an evaluation to plot")
    uplinks = [u for u in UPLINKS if any(u == uplink for _, uplink in cells)]
    figure = Figure(figsize=(4.2 * max(len(counts), 2), 7.5))
    grid = figure.add_gridspec(2, max(len(counts), 2))
    round_s = figure.add_subplot(grid[1, : max(len(counts), 2) // 2])
    reached = figure.add_subplot(grid[1, max(len(counts), 2) // 2 :])
    for column, count in enumerate(counts):
        ax = figure.add_subplot(grid[0, column])
        for index, uplink in enumerate(uplinks):
            members = cells.get((count, uplink), [])
            if not members:
                continue
            length = min(run.columns["accuracy"].size for run in members)
            accuracy = np.mean([style.percent(run, "accuracy")[:length] for run in members], 0)
            ax.plot(
                members[0].columns["time_s"][:length], accuracy, color=style.colour(index),
                label=f"{uplink} ({len(members)} seed{'s' * (len(members) > 1)})",
            )  # fmt: skip
        if target_accuracy is not None:
            ax.axhline(100 * target_accuracy, color=style.EXPLANATION_COLOUR, ls=":", lw=0.8)
        ax.set_title(f"{count} clients")
        ax.set_xlabel("simulated time (s)")
        ax.set_ylabel("mean accuracy (%)")
        ax.legend(fontsize=8)
    for index, uplink in enumerate(uplinks):
        shown = [c for c in counts if (c, uplink) in cells]
        rounds = {c: [_rounds(run) for run in cells[(c, uplink)]] for c in shown}
        duration = [np.mean([np.mean(r["end_s"] - r["start_s"]) for r in rounds[c]]) for c in shown]
        round_s.plot(shown, duration, "o-", color=style.colour(index), label=uplink)
        if uplink == "digital":
            share = [1.0] * len(shown)  # every kept update reaches the server whole
        else:
            share = [
                np.mean([np.nanmean(r["air_transmitters"] / r["completed"]) for r in rounds[c]])
                for c in shown
            ]
        reached.plot(shown, 100 * np.asarray(share), "o-", color=style.colour(index), label=uplink)
    round_s.set_yscale("log")
    round_s.set_xlabel("clients")
    round_s.set_ylabel("mean round duration (s)")
    round_s.legend(fontsize=8)
    reached.set_xlabel("clients")
    reached.set_ylabel("participants in the sum (%)")
    reached.set_ylim(0, 105)
    reached.legend(fontsize=8)
    figure.suptitle("over-the-air aggregation against a digital uplink")
    figure.tight_layout()
    return style.save(figure, out_path)
