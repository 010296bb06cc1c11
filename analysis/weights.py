"""Collaboration weights of personalized FL runs: who relies on whom, and whether it is the
clients that share a distribution.

Algorithms that learn collaboration weights keep them in their run folder as
``collaboration.npz``: ``weights`` [n, n] (row i: how much client ``clients[i]`` relies on
client ``clients[j]``; NaN where an entry does not apply), ``clients`` [n], optionally
``groups`` [n] (true group per client, -1 for none; else taken from ``clients.csv``) and
``history`` [T, n, n] with ``history_times_s`` [T] and ``history_rounds`` [T], and where the
weights are on models that others train too (FedeRiCo) ``reliance`` [n, n] (whose training
client i relies on) with ``reliance_history`` [T, n, n]: the figures then show both, and the
own-group mass over time is the reliance's, so that a group that adopted a model hosted by
another group's client does not read as relying on that group. The figures
follow the papers: the final matrix with clients sorted by group so that the block-diagonal
oracle shows (CoBo Fig. 6/8, diagonal masked), its evolution over the run, and per-client
weight trajectories (FedeRiCo Fig. 3).
"""

from __future__ import annotations

import math
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.image import AxesImage
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from analysis import style
from analysis.results import read_columns
from fedsim.results.files import CLIENT_COLUMNS, CLIENTS_FILE, COLLABORATION_FILE

COLLABORATION_PLOT = "collaboration.png"
EVOLUTION_PLOT = "collaboration_evolution.png"
TRAJECTORIES_PLOT = "collaboration_trajectories.png"
MAX_SNAPSHOTS = 6
MAX_TRAJECTORY_CLIENTS = 16  # one panel per client stays readable up to a 4 x 4 grid
MAX_TICKED_CLIENTS = 30  # above this, client ids on the axes would overlap
OFF_DIAGONAL_FLOOR = 1e-12  # of a row's total: less is underflow noise, not reliance
_NO_GROUP_COLOUR = "0.55"
_BLOCK_COLOUR = "red"


@dataclass(frozen=True)
class Collaboration:
    """One run's ``collaboration.npz``, validated; ``groups`` is None without any grouping
    and the three ``history`` fields are None when the algorithm kept no snapshots."""

    label: str
    path: Path
    weights: np.ndarray
    clients: np.ndarray
    groups: np.ndarray | None
    history: np.ndarray | None = None
    history_times_s: np.ndarray | None = None
    history_rounds: np.ndarray | None = None
    reliance: np.ndarray | None = None  # whose training each client relies on (FedeRiCo)
    reliance_history: np.ndarray | None = None


def _check_weights(name: str, values: np.ndarray, shape: tuple[int, ...], where: Path) -> None:
    if values.shape != shape:
        raise ValueError(f"{where}: {name} has shape {values.shape}, expected {shape}")
    if not np.issubdtype(values.dtype, np.floating) and not np.issubdtype(values.dtype, np.integer):
        raise ValueError(f"{where}: {name} must be numeric, got {values.dtype}")
    if np.isinf(values).any() or (values < 0).any():
        raise ValueError(f"{where}: {name} must be >= 0 (or NaN where an entry does not apply)")


def _check_ids(name: str, values: np.ndarray, length: int, where: Path) -> None:
    if values.shape != (length,) or not np.issubdtype(values.dtype, np.integer):
        raise ValueError(
            f"{where}: {name} must be {length} integers, got {values.dtype} {values.shape}"
        )


def _groups_from_clients_csv(run_dir: Path, clients: np.ndarray) -> np.ndarray | None:
    """Each client's group as the recorder logged it with its evaluations (-1 if never)."""
    path = run_dir / CLIENTS_FILE
    if not path.is_file():
        return None
    table = read_columns(path, CLIENT_COLUMNS)
    known = np.isfinite(table["client"]) & np.isfinite(table["group"])
    ids, groups = table["client"][known].astype(int), table["group"][known].astype(int)
    lookup = dict(zip(ids, groups, strict=True))
    return np.array([lookup.get(int(c), -1) for c in clients], dtype=int)


def load_collaboration(run_dir: Path) -> Collaboration:
    """Read and validate ``run_dir/collaboration.npz`` (labelled with the folder name).

    Raises FileNotFoundError without the file and ValueError when it is unreadable or its
    arrays do not fit together, naming the file, so a bad run is found at once."""
    run_dir = Path(run_dir)
    path = run_dir / COLLABORATION_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir}: no {COLLABORATION_FILE} (no collaboration weights)")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
        raise ValueError(f"{path}: unreadable: {error}") from error
    missing = [key for key in ("weights", "clients") if key not in arrays]
    if missing:
        raise ValueError(f"{path}: missing arrays {missing} (has {sorted(arrays)})")

    clients = arrays["clients"]
    if clients.ndim != 1:
        raise ValueError(f"{path}: clients must be 1-D, got shape {clients.shape}")
    n = len(clients)
    _check_ids("clients", clients, n, path)
    if len(np.unique(clients)) != n:
        raise ValueError(f"{path}: clients holds repeated ids")
    weights = arrays["weights"]
    _check_weights("weights", weights, (n, n), path)

    if "groups" in arrays:
        groups = arrays["groups"]
        _check_ids("groups", groups, n, path)
    else:
        groups = _groups_from_clients_csv(run_dir, clients)
    if groups is not None and not (groups >= 0).any():
        groups = None  # every client without a group: nothing to compare against

    history = arrays.get("history")
    times = rounds = None
    if history is not None:
        if history.ndim != 3 or not len(history):
            raise ValueError(f"{path}: history must be [T, {n}, {n}], got {history.shape}")
        _check_weights("history", history, (len(history), n, n), path)
        absent = [key for key in ("history_times_s", "history_rounds") if key not in arrays]
        if absent:
            raise ValueError(f"{path}: history comes without {absent}")
        times = arrays["history_times_s"].astype(float)
        rounds = arrays["history_rounds"]
        if times.shape != (len(history),):
            raise ValueError(f"{path}: history_times_s must be [{len(history)}], {times.shape}")
        _check_ids("history_rounds", rounds, len(history), path)

    reliance, reliance_history = arrays.get("reliance"), arrays.get("reliance_history")
    if reliance is not None:
        _check_weights("reliance", reliance, (n, n), path)
    if reliance_history is not None:
        if history is None or reliance is None:
            raise ValueError(f"{path}: reliance_history comes without history and reliance")
        _check_weights("reliance_history", reliance_history, history.shape, path)

    return Collaboration(
        label=run_dir.name,
        path=run_dir,
        weights=weights.astype(float),
        clients=clients.astype(int),
        groups=None if groups is None else groups.astype(int),
        history=None if history is None else history.astype(float),
        history_times_s=times,
        history_rounds=None if rounds is None else rounds.astype(int),
        reliance=None if reliance is None else reliance.astype(float),
        reliance_history=None if reliance_history is None else reliance_history.astype(float),
    )


def own_group_mass(weights: np.ndarray, groups: np.ndarray | None) -> np.ndarray:
    """Per client (row), the share of its off-diagonal weight on clients of its own group.

    1 means it relies only on clients of its own distribution; uniform weights give
    (g - 1) / (n - 1) for a group of g among n clients. NaN entries are left out. NaN where
    the share means nothing: no groups, a client without a group or without a peer of its
    group with a known weight, or no off-diagonal weight at all (less than 1e-12 of the row's
    total: whether an underflowed weight is 0 or denormal noise depends on the CPU).
    """
    weights = np.asarray(weights, dtype=float)
    if weights.ndim != 2 or weights.shape[0] != weights.shape[1]:
        raise ValueError(f"weights must be a square matrix, got shape {weights.shape}")
    n = len(weights)
    mass = np.full(n, np.nan)
    if groups is None:
        return mass
    groups = np.asarray(groups)
    if groups.shape != (n,):
        raise ValueError(f"groups must have shape ({n},), got {groups.shape}")
    known = np.isfinite(weights) & ~np.eye(n, dtype=bool)
    off_diagonal = np.where(known, weights, 0.0)
    peers = known & (groups[:, None] == groups[None, :]) & (groups[:, None] >= 0)
    total = off_diagonal.sum(axis=1)
    row_total = np.where(np.isfinite(weights), np.abs(weights), 0.0).sum(axis=1)
    defined = peers.any(axis=1) & (total > OFF_DIAGONAL_FLOOR * row_total)
    own = np.where(peers, off_diagonal, 0.0).sum(axis=1)
    mass[defined] = own[defined] / total[defined]
    return mass


def _mean(values: np.ndarray) -> float:
    """Mean of the finite values, NaN (without numpy's empty-slice warning) if there is none."""
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else math.nan


def _lowest(values: np.ndarray) -> float:
    """Smallest finite value, NaN if there is none."""
    finite = values[np.isfinite(values)]
    return float(finite.min()) if finite.size else math.nan


def _uniform_baseline(weights: np.ndarray, groups: np.ndarray | None) -> float:
    """Mean own-group mass if every client spread its weight evenly over the known entries."""
    return _mean(own_group_mass(np.where(np.isfinite(weights), 1.0, np.nan), groups))


def _as_collaboration(run: Path | Collaboration) -> Collaboration:
    return run if isinstance(run, Collaboration) else load_collaboration(run)


def _order(collab: Collaboration) -> np.ndarray:
    """Clients sorted by group (clients without one last), then by id."""
    if collab.groups is None:
        return np.argsort(collab.clients, kind="stable")
    key = np.where(collab.groups < 0, collab.groups.max() + 1, collab.groups)
    return np.lexsort((collab.clients, key))


def _group_colour(group: int) -> tuple[float, ...] | str:
    return style.colour(group) if group >= 0 else _NO_GROUP_COLOUR


def _shown(matrix: np.ndarray, order: np.ndarray, mask_diagonal: bool) -> np.ndarray:
    shown = matrix[np.ix_(order, order)].astype(float)
    if mask_diagonal:
        np.fill_diagonal(shown, np.nan)
    return shown


def _colour_max(*matrices: np.ndarray) -> float:
    """Top of the colour scale: the largest weight drawn (1 if nothing positive is drawn)."""
    finite = np.concatenate([m[np.isfinite(m)] for m in matrices])
    top = float(finite.max()) if finite.size else 0.0
    return top if top > 0 else 1.0


def _draw_matrix(
    ax: Axes,
    shown: np.ndarray,
    collab: Collaboration,
    order: np.ndarray,
    vmax: float,
    label_clients: bool = True,
) -> AxesImage:
    """Heatmap of a sorted matrix with each group's diagonal block outlined; masked and
    not-applicable entries are grey. Client ids label the axes only where asked and few
    enough to read (small multiples leave them out, as the papers' figures do)."""
    cmap = colormaps["viridis"].with_extremes(bad="0.85")
    image = ax.imshow(shown, cmap=cmap, vmin=0.0, vmax=vmax, interpolation="nearest")
    n = len(order)
    if collab.groups is not None:
        sorted_groups = collab.groups[order]
        starts = np.flatnonzero(np.r_[True, sorted_groups[1:] != sorted_groups[:-1]])
        for start, stop in zip(starts, np.r_[starts[1:], n], strict=True):
            if sorted_groups[start] >= 0:
                size = stop - start
                ax.add_patch(
                    Rectangle(
                        (start - 0.5, start - 0.5),
                        size,
                        size,
                        fill=False,
                        edgecolor=_BLOCK_COLOUR,
                        linewidth=1.5,
                    )
                )
    if label_clients and n <= MAX_TICKED_CLIENTS:
        ids = [str(c) for c in collab.clients[order]]
        ax.set_xticks(range(n), ids, fontsize=6, rotation=90)
        ax.set_yticks(range(n), ids, fontsize=6)
    else:
        ax.set_xticks([])
        ax.set_yticks([])
    return image


def _mass_text(weights: np.ndarray, groups: np.ndarray | None) -> str:
    mass = _mean(own_group_mass(weights, groups))
    if math.isnan(mass):
        return "own-group mass undefined (no groups)"
    return f"mean own-group mass {mass:.2f} (uniform {_uniform_baseline(weights, groups):.2f})"


def plot_collaboration(
    run_dir: Path | Collaboration, out_path: Path, *, mask_diagonal: bool = True
) -> Path:
    """Heatmap of the final weights, clients sorted by group with each group's block
    outlined, so weights that found the true groups show as the outlined blocks. With a
    ``reliance`` matrix (weights on models others train too), a second heatmap beside it:
    whose training each client relies on."""
    collab = _as_collaboration(run_dir)
    order = _order(collab)
    panels = [("weights", "client j (relied on)", collab.weights)]
    if collab.reliance is not None:
        panels = [
            ("weights: whose model i uses", "model of client j", collab.weights),
            ("reliance: whose training i uses", "client j (trains it)", collab.reliance),
        ]
    shown = [_shown(matrix, order, mask_diagonal) for _, _, matrix in panels]
    n = len(order)
    side = min(max(4.0, 0.25 * n), 10.0)
    figure = Figure(figsize=(len(panels) * side + 1.5, side + 0.4))
    axes = figure.subplots(1, len(panels), squeeze=False)[0]
    vmax = _colour_max(*shown)
    for ax, (title, xlabel, matrix), matrix_shown in zip(axes, panels, shown, strict=True):
        image = _draw_matrix(ax, matrix_shown, collab, order, vmax)
        ax.set_xlabel(f"{xlabel}, sorted by group")
        ax.set_title(f"{title}\n{_mass_text(matrix, collab.groups)}", fontsize="medium")
    axes[0].set_ylabel("client i (relying)")
    figure.colorbar(
        image, ax=list(axes), label="weight" + (" (diagonal masked)" if mask_diagonal else "")
    )
    figure.suptitle(f"{collab.label}: collaboration weights")
    return style.save(figure, out_path)


def snapshot_indices(count: int, most: int = MAX_SNAPSHOTS) -> np.ndarray:
    """Up to ``most`` snapshot indices evenly spread over ``count``, first and last included."""
    if count < 1 or most < 1:
        raise ValueError(f"need at least one snapshot and one panel, got {count} and {most}")
    if most == 1:
        return np.array([count - 1])
    return np.unique(np.round(np.linspace(0, count - 1, min(count, most))).astype(int))


def _require_history(collab: Collaboration) -> np.ndarray:
    if collab.history is None:
        raise ValueError(f"{collab.path / COLLABORATION_FILE}: no history of the weights")
    return collab.history


def plot_collaboration_evolution(
    run_dir: Path | Collaboration, out_path: Path, *, mask_diagonal: bool = True
) -> Path:
    """Top: the matrix at up to six evenly spread snapshots on one colour scale; bottom: the
    clients' mean (solid) and lowest (dotted) own-group mass over simulated time, against
    uniform weights (dashed), to see when the weights find the groups."""
    collab = _as_collaboration(run_dir)
    history = _require_history(collab)
    times = collab.history_times_s
    picked = snapshot_indices(len(history))
    order = _order(collab)
    shown = [_shown(history[t], order, mask_diagonal) for t in picked]
    vmax = _colour_max(*shown)

    figure = Figure(figsize=(2.4 * len(picked) + 1.2, 5.0))
    grid = figure.add_gridspec(2, len(picked), height_ratios=[1.0, 0.8], hspace=0.35, top=0.86)
    panels = [figure.add_subplot(grid[0, k]) for k in range(len(picked))]
    for ax, t, matrix in zip(panels, picked, shown, strict=True):
        image = _draw_matrix(ax, matrix, collab, order, vmax, label_clients=False)
        ax.set_title(f"round {collab.history_rounds[t]}\nt = {times[t]:.1f} s", fontsize="small")
    figure.colorbar(image, ax=panels, label="weight", shrink=0.9)

    ax = figure.add_subplot(grid[1, :])
    measured = history if collab.reliance_history is None else collab.reliance_history
    masses = np.array([own_group_mass(h, collab.groups) for h in measured])
    if np.isfinite(masses).any():
        points = style.lone_point_style(len(history))
        ax.plot(times, [_mean(m) for m in masses], color=style.colour(0), label="mean", **points)
        ax.plot(
            times,
            [_lowest(m) for m in masses],
            color=style.colour(0),
            linestyle=":",
            label="lowest client",
            **points,
        )
        ax.plot(
            times,
            [_uniform_baseline(h, collab.groups) for h in measured],
            color="black",
            linestyle="--",
            linewidth=1,
            label="uniform weights",
        )
        ax.plot(
            times[picked],
            [_mean(masses[t]) for t in picked],
            linestyle="none",
            marker="s",
            color="black",
            markersize=4,
            label="snapshots above",
        )
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize="small", loc="lower right")
    else:
        ax.text(
            0.5,
            0.5,
            "own-group mass undefined (no groups)",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
    ax.set_xlabel("Simulated time (s)")
    ax.set_ylabel("Own-group mass" + ("" if measured is history else "\n(whose training)"))
    ax.grid(True, alpha=0.3)
    figure.suptitle(f"{collab.label}: collaboration weights over the run")
    return style.save(figure, out_path)


def plot_weight_trajectories(run_dir: Path | Collaboration, out_path: Path) -> Path:
    """One panel per client (at most 16): its weight on every other client over simulated
    time, each line in the colour of that other client's group, as in FedeRiCo Fig. 3."""
    collab = _as_collaboration(run_dir)
    history = _require_history(collab)
    n = len(collab.clients)
    if n > MAX_TRAJECTORY_CLIENTS:
        raise ValueError(f"{n} clients: trajectories drawn for {MAX_TRAJECTORY_CLIENTS} at most")
    groups = collab.groups if collab.groups is not None else np.full(n, -1)
    times = collab.history_times_s
    order = _order(collab)
    columns = min(4, n)
    rows = math.ceil(n / columns)
    figure = Figure(figsize=(3.0 * columns, 2.2 * rows + 0.5))
    axes = figure.subplots(
        rows, columns, sharex=True, sharey=True, squeeze=False, gridspec_kw={"hspace": 0.35}
    ).ravel()
    points = style.lone_point_style(len(history))
    for ax, i in zip(axes, order, strict=False):
        for j in order:
            if j != i:
                ax.plot(
                    times,
                    history[:, i, j],
                    color=_group_colour(groups[j]),
                    linewidth=1,
                    alpha=0.85,
                    **points,
                )
        group = f", group {groups[i]}" if groups[i] >= 0 else ""
        ax.set_title(
            f"client {collab.clients[i]}{group}", fontsize="small", color=_group_colour(groups[i])
        )
        ax.grid(True, alpha=0.3)
    for ax in axes[n:]:
        ax.set_visible(False)
    for ax in axes[(rows - 1) * columns :]:
        ax.set_xlabel("Simulated time (s)")
    for ax in axes[::columns]:
        ax.set_ylabel("weight")
    present = [g for g in np.unique(groups) if g >= 0]
    legend = [Patch(color=_group_colour(g), label=f"group {g}") for g in present]
    if (groups < 0).any():
        legend.append(Line2D([], [], color=_NO_GROUP_COLOUR, label="no group"))
    figure.legend(
        handles=legend,
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        ncols=min(len(legend), 8),
        fontsize="small",
        title="weight on a client of",
    )
    figure.suptitle(f"{collab.label}: each client's weight on the others")
    return style.save(figure, out_path)


def plot_collaboration_figures(
    run_dir: Path, out_dir: Path | None = None, *, only_if_stale: bool = False
) -> list[Path]:
    """Write every collaboration figure the run supports into ``out_dir`` (default: the run
    folder): the final matrix, and with a history its evolution and, for at most 16 clients,
    the per-client trajectories. ``only_if_stale`` skips figures newer than their inputs, so
    the pipeline does not redraw finished runs after every new one. Returns the paths written.
    """
    run_dir = Path(run_dir)
    out_dir = run_dir if out_dir is None else Path(out_dir)
    collab = load_collaboration(run_dir)  # milliseconds: cheaper than guessing what it holds
    wanted = [(COLLABORATION_PLOT, plot_collaboration)]
    if collab.history is not None:
        wanted.append((EVOLUTION_PLOT, plot_collaboration_evolution))
        if len(collab.clients) <= MAX_TRAJECTORY_CLIENTS:
            wanted.append((TRAJECTORIES_PLOT, plot_weight_trajectories))
    inputs = [run_dir / COLLABORATION_FILE, run_dir / CLIENTS_FILE]
    return [
        plot(collab, out_dir / name)
        for name, plot in wanted
        if not (only_if_stale and style.up_to_date(out_dir / name, inputs))
    ]
