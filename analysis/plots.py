"""Accuracy against simulated time, communicated bytes and training samples, one curve per run.

In a seed sweep (labels that differ only in ``seed=N``) these figures draw each run label's
mean over its seeds instead, with the 95% confidence band of that mean, in the colour of the
label's place among the labels; ``pareto.png`` (``analysis.pareto.plot_pareto``) sets the
labels' final accuracy against their time and bytes to the target. Colours, saving and the
other conventions shared by every figure are in ``analysis.style``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from matplotlib import colors
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from analysis import style
from analysis.orbits import in_hours
from analysis.results import Run, RunGroup, group_seeds, time_to_target
from analysis.stats import BYTES_PER_MB, mean_curve, outcomes_km, run_outcome
from fedsim.results.files import PASSES_FILE, SAMPLES_COLUMN

TIME_TO_ACCURACY_FILE = "time_to_accuracy.png"
ACCURACY_VS_BYTES_FILE = "accuracy_vs_bytes.png"
ACCURACY_VS_SAMPLES_FILE = "accuracy_vs_samples.png"
SAMPLES_PER_UNIT = 1e3  # the samples axis in thousands
_SEED_BAND = "95% CI of the mean over seeds"
_CLIENT_BAND_ALPHA = 0.08


def _draw_groups(
    runs: Sequence[Run],
    draw_seeds: Callable[[RunGroup, tuple[float, ...]], None],
    draw_run: Callable[[Run, tuple[float, ...]], None],
) -> list[RunGroup]:
    """Draw each run label swept over seeds with ``draw_seeds`` and each run without a seed part
    with ``draw_run``, in the colour of its place (with no seeds: run ``i`` in colour ``i``)."""
    groups = group_seeds(runs)
    for index, group in enumerate(groups):
        if group.seeded:
            draw_seeds(group, style.colour(index))
        else:
            draw_run(group.runs[0], style.colour(index))
    return groups


def _draw_run_against_time(ax: Axes, run: Run, colour, target_accuracy: float | None) -> None:
    """One run: its mean accuracy, client p10–p90 band, worst client, first time at target."""
    if not style.has_data(run):
        ax.plot([], [], color=colour, label=f"{style.run_name(run)} (no data)")
        return
    time = run.columns["time_s"]
    accuracy, name = style.percent(run, "accuracy"), style.run_name(run)
    ax.plot(time, accuracy, color=colour, label=name, zorder=3, **style.line_style(run))
    # Faint, with thin edges: under label skew the clients' band can span 0-100% and would
    # otherwise bury the mean lines of every run.
    low, high = style.percent(run, "p10_accuracy"), style.percent(run, "p90_accuracy")
    ax.fill_between(time, low, high, color=colour, alpha=_CLIENT_BAND_ALPHA, linewidth=0)
    for edge in (low, high):
        ax.plot(time, edge, color=colour, alpha=0.5, linewidth=0.6)
    ax.plot(time, style.percent(run, "worst_accuracy"), color=colour, linestyle=":", linewidth=0.9)
    _mark_cloud_rounds(ax, run, accuracy, colour)
    if target_accuracy is not None:
        _mark_target(ax, time_to_target(run, target_accuracy), target_accuracy, colour, "o")


def _mark_cloud_rounds(ax: Axes, run: Run, accuracy: np.ndarray, colour) -> None:
    """Hierarchical FL: a triangle on each evaluation that follows a cloud aggregation (the
    edges' models averaged by the cloud since the previous one)."""
    cloud_rounds = run.columns.get("cloud_rounds")
    if cloud_rounds is None:
        return
    after = np.diff(cloud_rounds, prepend=0.0) > 0
    ax.plot(
        run.columns["time_s"][after], accuracy[after], linestyle="none", marker="^",
        markersize=4, color=colour, zorder=4,
    )  # fmt: skip


def _mark_target(ax: Axes, time_s: float | None, target: float, colour, marker: str) -> None:
    if time_s is not None:
        ax.plot(
            time_s,
            target * 100.0,
            marker=marker,
            markersize=7,
            markeredgecolor="black",
            color=colour,
            zorder=3,
        )


def _seeds_name(group: RunGroup, used: int, note: str = "") -> str:
    """``cobo (3 seeds)``: how many seeds had data when not all, and interrupted runs."""
    total = len(group.runs)
    seeds = f"{total} seed{'s' if total != 1 else ''}"
    if used != total:
        seeds = f"{used} of {seeds}"
    incomplete = sum(run.summary.get("complete") is False for run in group.runs)
    notes = [seeds, f"{incomplete} incomplete" if incomplete else "", note]
    return f"{group.label} ({', '.join(n for n in notes if n)})"


def _draw_seed_mean(ax: Axes, group: RunGroup, colour, column: str, x_scale: float) -> bool:
    """A seed group's mean accuracy over its seeds against ``column`` (divided by ``x_scale``)
    and the 95% confidence band of that mean, where every seed has data
    (``analysis.stats.mean_curve``); False if the seeds have no data in common."""
    curve = mean_curve(
        [(run.columns[column] / x_scale, style.percent(run, "accuracy")) for run in group.runs]
    )
    if not curve.x.size:
        ax.plot([], [], color=colour, label=f"{group.label} (no data in common)")
        return False
    points = style.lone_point_style(curve.x.size)
    ax.plot(curve.x, curve.mean, color=colour, label=_seeds_name(group, curve.curves), **points)
    if curve.curves > 1:  # drawn within the accuracies there can be (few seeds: wide bands)
        low, high = np.clip(curve.low, 0.0, 100.0), np.clip(curve.high, 0.0, 100.0)
        ax.fill_between(curve.x, low, high, color=colour, alpha=0.2, linewidth=0)
    return True


def _draw_seeds_against_time(
    ax: Axes, group: RunGroup, colour, target_accuracy: float | None
) -> None:
    """A seed group's mean curve and band, and its KM median time to target on the target;
    a group of one seed, its cloud aggregations (its curve is that run's)."""
    drawn = _draw_seed_mean(ax, group, colour, "time_s", 1.0)
    if drawn and len(group.runs) == 1:
        [run] = group.runs
        _mark_cloud_rounds(ax, run, style.percent(run, "accuracy"), colour)
    if drawn and target_accuracy is not None:
        km = outcomes_km([run_outcome(run, target_accuracy) for run in group.runs])
        _mark_target(ax, km.median, target_accuracy, colour, "D")


def plot_time_to_accuracy(
    runs: Sequence[Run], out_path: Path, target_accuracy: float | None = None
) -> Path:
    """Plot mean accuracy versus simulated time, with each run's client spread (p10 to p90
    band, worst client dotted) and, if a target is given, where each run first reaches it.

    Runs whose labels differ only in ``seed=N`` are one curve instead: the mean over the seeds,
    the 95% confidence band of that mean, and their Kaplan–Meier median time to target."""
    style.require_runs(runs)
    figure = Figure(figsize=(9, 4.5))  # 7 x 4.5 of axes and the legend to their right
    ax = figure.add_subplot()
    groups = _draw_groups(
        runs,
        lambda group, colour: _draw_seeds_against_time(ax, group, colour, target_accuracy),
        lambda run, colour: _draw_run_against_time(ax, run, colour, target_accuracy),
    )

    seeded = any(group.seeded for group in groups)
    explanation = []
    if not all(group.seeded for group in groups):
        explanation += [
            Patch(
                facecolor=(*colors.to_rgb(style.EXPLANATION_COLOUR), 3 * _CLIENT_BAND_ALPHA),
                edgecolor=style.EXPLANATION_COLOUR,
                linewidth=0.6,
                label="clients p10–p90",
            ),
            Line2D([], [], color=style.EXPLANATION_COLOUR, linestyle=":", label="worst client"),
        ]
    if seeded:
        explanation.append(Patch(color=style.EXPLANATION_COLOUR, alpha=0.3, label=_SEED_BAND))
    if any("cloud_rounds" in group.runs[0].columns for group in groups if len(group.runs) == 1):
        explanation.append(
            Line2D([], [], color=style.EXPLANATION_COLOUR, linestyle="none", marker="^",
                   markersize=4, label="after a cloud aggregation")
        )  # fmt: skip
    if target_accuracy is not None:
        ax.axhline(target_accuracy * 100.0, color="black", linestyle="--", linewidth=1)
        reached = "KM median over seeds" if seeded else "first reached"
        explanation.append(
            Line2D(
                [],
                [],
                color="black",
                linestyle="--",
                marker="D" if seeded else "o",
                markerfacecolor=style.EXPLANATION_COLOUR,
                label=f"target {target_accuracy:.0%} ({reached})",
            )
        )
    handles, _ = ax.get_legend_handles_labels()
    # Beside the axes, not over the curves (a run's band may fill the whole plot).
    ax.legend(
        handles=handles + explanation,
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        borderaxespad=0.0,
        fontsize="small",
    )
    ax.set_xlabel("Simulated time (s)")
    if runs and all((run.path / PASSES_FILE).exists() for run in runs):  # satellites: hours
        in_hours(ax)
    ax.set_ylabel("Test accuracy (%)")
    ax.set_title("Accuracy vs simulated time")
    ax.grid(True, alpha=0.3)
    return style.save(figure, out_path)


def _draw_run_against(
    ax: Axes, run: Run, colour, column: str, scale: float, idle_note: str
) -> None:
    if not style.has_data(run):
        ax.plot([], [], color=colour, label=f"{style.run_name(run)} (no data)")
        return
    amounts = run.columns[column] / scale
    accuracy = style.percent(run, "accuracy")
    if not np.nanmax(amounts, initial=0.0) > 0:
        final = accuracy[np.isfinite(accuracy)][-1]
        ax.plot(
            0.0,
            final,
            marker="D",
            linestyle="none",
            color=colour,
            label=f"{style.run_name(run)} ({idle_note})",
        )
        return
    ax.plot(amounts, accuracy, color=colour, label=style.run_name(run), **style.line_style(run))


def _draw_seeds_against(
    ax: Axes, group: RunGroup, colour, column: str, scale: float, idle_note: str
) -> None:
    """A seed group's mean curve and band; seeds whose counter never moved (nothing sent on
    this link) are one marker at 0 at their mean final accuracy."""
    measured = [run for run in group.runs if style.has_data(run)]
    if measured and not any(np.nanmax(run.columns[column], initial=0.0) > 0 for run in measured):
        finals = [style.percent(run, "accuracy") for run in measured]
        ax.plot(
            0.0,
            float(np.mean([final[np.isfinite(final)][-1] for final in finals])),
            marker="D",
            linestyle="none",
            color=colour,
            label=_seeds_name(group, len(measured), idle_note),
        )
        return
    _draw_seed_mean(ax, group, colour, column, scale)


def _plot_against(
    ax: Axes,
    runs: Sequence[Run],
    column: str,
    scale: float = BYTES_PER_MB,
    idle_note: str = "no communication",
) -> None:
    """Draw accuracy against one cumulative counter (bytes on a link, samples trained); a run
    whose counter never moved is a single marker at 0 at its final accuracy, so it is not
    lost on the y axis. The seeds of one run label are one mean curve with its 95% band, as
    in the time figure."""
    groups = _draw_groups(
        runs,
        lambda group, colour: _draw_seeds_against(ax, group, colour, column, scale, idle_note),
        lambda run, colour: _draw_run_against(ax, run, colour, column, scale, idle_note),
    )
    handles, _ = ax.get_legend_handles_labels()
    if any(group.seeded for group in groups):
        handles.append(Patch(color=style.EXPLANATION_COLOUR, alpha=0.3, label=_SEED_BAND))
    ax.grid(True, alpha=0.3)
    ax.legend(handles=handles, loc="lower right", fontsize="small")


def plot_accuracy_vs_bytes(runs: Sequence[Run], out_path: Path) -> Path:
    """Plot mean accuracy against cumulative uplink and downlink traffic, side by side, to
    compare algorithms by what they cost the wireless links rather than by time."""
    style.require_runs(runs)
    figure = Figure(figsize=(11, 4.5))
    uplink, downlink = figure.subplots(1, 2, sharey=True)
    _plot_against(uplink, runs, "uplink_bytes")
    _plot_against(downlink, runs, "downlink_bytes")
    uplink.set_xlabel("Cumulative uplink traffic (MB)")
    downlink.set_xlabel("Cumulative downlink traffic (MB)")
    uplink.set_ylabel("Test accuracy (%)")
    uplink.set_title("Uplink")
    downlink.set_title("Downlink")
    figure.suptitle("Accuracy vs communicated bytes")
    return style.save(figure, out_path)


def plot_accuracy_vs_samples(runs: Sequence[Run], out_path: Path) -> Path:
    """Plot mean accuracy against the training samples every client processed so far: the
    fair axis between algorithms that train different numbers of clients per round (Local,
    a fraction C, async servers). Runs without the count are left out."""
    style.require_runs(runs)
    figure = Figure(figsize=(6.5, 4.5))
    ax = figure.subplots()
    _plot_against(ax, runs, SAMPLES_COLUMN, SAMPLES_PER_UNIT, "no training")
    ax.set_xlabel("Training samples processed, all clients (thousands)")
    ax.set_ylabel("Test accuracy (%)")
    ax.set_title("Accuracy vs training work")
    return style.save(figure, out_path)
