"""Every figure a set of runs calls for, in one call: what ``fedsim plot`` and the runner draw.

The figure modules each draw one kind of figure; this module decides which of them the runs'
files support (energy columns, ``async.npz``, ``collaboration.npz``, ``channel.csv``). It does
not read the scenario (of fedsim, ``analysis`` knows only the results contract): whoever has
it passes the target accuracy and the churn events.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from analysis import style
from analysis.aircomp import AIRCOMP_PLOT, over_the_air, plot_aircomp
from analysis.asynchrony import ASYNC_PLOT, plot_async
from analysis.churn import ACTIVE_CLIENTS_PLOT, plot_active_clients
from analysis.energy import (
    ACCURACY_VS_ENERGY_FILE,
    ENERGY_PER_CLIENT_FILE,
    plot_accuracy_vs_energy,
    plot_energy_per_client,
)
from analysis.orbits import VISIBILITY_PLOT, plot_visibility
from analysis.pareto import PARETO_FILE, plot_pareto
from analysis.plots import (
    ACCURACY_VS_BYTES_FILE,
    ACCURACY_VS_SAMPLES_FILE,
    TIME_TO_ACCURACY_FILE,
    plot_accuracy_vs_bytes,
    plot_accuracy_vs_samples,
    plot_time_to_accuracy,
)
from analysis.radio import CHANNEL_PLOT, plot_channel
from analysis.results import (
    Run,
    find_runs,
    group_seeds,
    has_energy,
    has_samples,
    summaries_target,
)
from analysis.weights import plot_collaboration_figures
from fedsim.results.files import (
    ASYNC_FILE,
    CHANNEL_FILE,
    COLLABORATION_FILE,
    METRICS_FILE,
    PASSES_FILE,
)


def plot_runs(
    runs: Sequence[Run], out_dir: Path, target_accuracy: float | None = None
) -> list[Path]:
    """Write the comparison figures of ``runs`` into ``out_dir``; without an explicit target,
    use the one recorded in the runs' summaries if they agree. With a target and at least two
    run labels swept over seeds, also ``pareto.png``; with energy columns, the energy figures;
    with an over-the-air uplink among them, ``aircomp.png``; with training samples counted,
    ``accuracy_vs_samples.png``."""
    out_dir = Path(out_dir)
    if target_accuracy is None:
        target_accuracy = summaries_target(runs)
    written = [
        plot_time_to_accuracy(runs, out_dir / TIME_TO_ACCURACY_FILE, target_accuracy),
        plot_accuracy_vs_bytes(runs, out_dir / ACCURACY_VS_BYTES_FILE),
    ]
    if target_accuracy is not None and sum(group.seeded for group in group_seeds(runs)) >= 2:
        written.append(plot_pareto(runs, out_dir / PARETO_FILE, target_accuracy))

    if over_the_air(runs):
        written.append(plot_aircomp(runs, out_dir / AIRCOMP_PLOT, target_accuracy))
    with_energy = [run for run in runs if has_energy(run)]
    if with_energy:
        written.append(plot_accuracy_vs_energy(with_energy, out_dir / ACCURACY_VS_ENERGY_FILE))
        written.append(plot_energy_per_client(with_energy, out_dir / ENERGY_PER_CLIENT_FILE))
    with_samples = [run for run in runs if has_samples(run)]
    if with_samples:
        written.append(plot_accuracy_vs_samples(with_samples, out_dir / ACCURACY_VS_SAMPLES_FILE))
    return written


SCENARIO_FIGURES = (
    TIME_TO_ACCURACY_FILE, ACCURACY_VS_BYTES_FILE, PARETO_FILE, AIRCOMP_PLOT,
    ACCURACY_VS_ENERGY_FILE, ENERGY_PER_CLIENT_FILE, ACCURACY_VS_SAMPLES_FILE, ASYNC_PLOT,
    ACTIVE_CLIENTS_PLOT,
)  # fmt: skip
"""Every figure ``plot_results`` may draw into a scenario's results folder."""


def plot_results(
    results_dir: Path,
    labels: Sequence[str],
    *,
    target_accuracy: float | None,
    event_times_s: Sequence[float] | None = None,
) -> list[Path]:
    """Redraw a scenario's figures from the runs of ``labels`` finished so far (those with a
    ``metrics.csv``), so the results folder shows what was measured even if the study stops.

    Into ``results_dir``: the comparison figures (``plot_runs``), ``asynchrony.png`` for the
    runs with ``async.npz`` and, unless ``event_times_s`` is None (no churn), the active
    clients with those events. In each run folder: its collaboration figures and its
    ``channel.png``, each only when older than its inputs (finished runs are not redrawn).
    A scenario figure not drawn now (``SCENARIO_FIGURES``: an earlier study's ``pareto.png``
    when these runs do not call for one) is removed, so every figure shows these runs.
    Returns the paths written."""
    results_dir = Path(results_dir)
    done = [
        results_dir / label for label in labels if (results_dir / label / METRICS_FILE).exists()
    ]
    written = _plot_scenario_figures(results_dir, done, target_accuracy, event_times_s)
    for name in SCENARIO_FIGURES:
        if results_dir / name not in written:
            (results_dir / name).unlink(missing_ok=True)
    for run_dir in done:
        if (run_dir / COLLABORATION_FILE).exists():
            written += plot_collaboration_figures(run_dir, only_if_stale=True)
        passes_csv = run_dir / PASSES_FILE
        if passes_csv.exists() and not style.up_to_date(run_dir / VISIBILITY_PLOT, [passes_csv]):
            written.append(plot_visibility(run_dir))
        channel_csv = run_dir / CHANNEL_FILE
        if channel_csv.exists() and not style.up_to_date(run_dir / CHANNEL_PLOT, [channel_csv]):
            written.append(plot_channel(run_dir))
    return written


def _plot_scenario_figures(
    results_dir: Path,
    done: list[Path],
    target_accuracy: float | None,
    event_times_s: Sequence[float] | None,
) -> list[Path]:
    """The figures of the runs ``done`` taken together, into ``results_dir``."""
    if not done:
        return []
    written = plot_runs(find_runs(done), results_dir, target_accuracy)
    asynchronous = [(d.name, d) for d in done if (d / ASYNC_FILE).exists()]
    if asynchronous:
        written.append(plot_async(asynchronous, results_dir / ASYNC_PLOT))
    if event_times_s is not None:
        written.append(
            plot_active_clients(
                [(d.name, d) for d in done], results_dir / ACTIVE_CLIENTS_PLOT, event_times_s
            )
        )
    return written
