"""Collaboration weights: own-group mass, loading collaboration.npz, and its figures, on
synthetic run folders."""

from __future__ import annotations

import csv
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from analysis.results import METRIC_COLUMNS
from analysis.weights import (
    COLLABORATION_FILE,
    COLLABORATION_PLOT,
    EVOLUTION_PLOT,
    TRAJECTORIES_PLOT,
    load_collaboration,
    own_group_mass,
    plot_collaboration,
    plot_collaboration_evolution,
    plot_collaboration_figures,
    plot_weight_trajectories,
    snapshot_indices,
)
from fedsim.algorithms.federico import training_reliance
from fedsim.cli import main
from fedsim.results.files import CLIENT_COLUMNS

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
GROUPS = np.array([0, 1, 0, 2, 1, 0, 2, 1])  # group sizes 3, 3, 2 among n = 8
CLIENT_IDS = np.array([10, 11, 12, 13, 14, 15, 16, 17])


def _block_weights(groups: np.ndarray, noise: float, rng: np.random.Generator) -> np.ndarray:
    """Row-stochastic weights concentrated on the own group, plus uniform noise everywhere."""
    same = (groups[:, None] == groups[None, :]).astype(float)
    weights = same + noise * rng.random(same.shape)
    return weights / weights.sum(axis=1, keepdims=True)


def _write_npz(run_dir: Path, **arrays: np.ndarray) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(run_dir / COLLABORATION_FILE, **arrays)
    return run_dir


def _history(rng: np.random.Generator, snapshots: int, groups: np.ndarray = GROUPS) -> dict:
    """Weights that go from noise to the group blocks over ``snapshots`` evaluations."""
    history = np.array(
        [_block_weights(groups, noise, rng) for noise in np.geomspace(50, 0.01, snapshots)]
    )
    return {
        "weights": history[-1],
        "history": history,
        "history_times_s": np.linspace(0.0, 120.0, snapshots),
        "history_rounds": np.arange(snapshots) * 5,
    }


def _assert_png(path: Path) -> None:
    assert path.is_file() and path.stat().st_size > 5000
    assert path.read_bytes()[:8] == PNG_MAGIC


# --- own_group_mass ------------------------------------------------------------------------


def test_block_diagonal_weights_concentrate_on_the_own_group() -> None:
    weights = _block_weights(GROUPS, noise=0.01, rng=np.random.default_rng(0))
    assert own_group_mass(weights, GROUPS) == pytest.approx(np.ones(8), abs=0.05)


def test_uniform_weights_give_the_group_share_of_the_others() -> None:
    sizes = np.bincount(GROUPS)[GROUPS]
    expected = (sizes - 1) / (len(GROUPS) - 1)
    assert own_group_mass(np.full((8, 8), 1 / 8), GROUPS) == pytest.approx(expected)


def test_diagonal_is_left_out() -> None:
    weights = np.full((8, 8), 1 / 8)
    heavy = weights + np.diag(np.full(8, 100.0))
    assert own_group_mass(heavy, GROUPS) == pytest.approx(own_group_mass(weights, GROUPS))


def test_nan_entries_are_left_out_and_undefined_rows_are_nan() -> None:
    groups = np.array([0, 0, 0, 1, 1, 2, -1])
    weights = np.ones((7, 7))
    weights[0, 1] = np.nan  # client 0 keeps one known peer (client 2) of its group
    weights[3, 4] = np.nan  # client 3's only peer is unknown
    weights[1, :] = 0.0  # client 1 relies on nobody
    mass = own_group_mass(weights, groups)
    assert mass[0] == pytest.approx(1 / 5)  # client 2 of the 5 known others
    assert mass[2] == pytest.approx(2 / 6)
    assert np.isnan(mass[[1, 3, 5, 6]]).all()  # zero row, unknown peer, lone client, no group
    assert mass[4] == pytest.approx(1 / 6)


def test_without_groups_every_client_is_nan() -> None:
    assert np.isnan(own_group_mass(np.ones((4, 4)), None)).all()


def test_shapes_are_checked() -> None:
    with pytest.raises(ValueError, match="square"):
        own_group_mass(np.ones((3, 4)), np.zeros(3))
    with pytest.raises(ValueError, match="groups must have shape"):
        own_group_mass(np.ones((3, 3)), np.zeros(4))


# --- load_collaboration --------------------------------------------------------------------


def test_load_keeps_the_arrays_and_the_folder_name(tmp_path: Path) -> None:
    arrays = _history(np.random.default_rng(1), snapshots=3)
    run_dir = _write_npz(tmp_path / "cobo", clients=CLIENT_IDS, groups=GROUPS, **arrays)
    collab = load_collaboration(run_dir)
    assert collab.label == "cobo"
    assert np.array_equal(collab.clients, CLIENT_IDS) and np.array_equal(collab.groups, GROUPS)
    assert np.array_equal(collab.weights, arrays["weights"])
    assert collab.history.shape == (3, 8, 8)
    assert np.array_equal(collab.history_rounds, [0, 5, 10])


def test_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=COLLABORATION_FILE):
        load_collaboration(tmp_path)


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"weights": np.ones((3, 3))}, r"missing arrays \['clients'\]"),
        ({"weights": np.ones((3, 2)), "clients": np.arange(3)}, "shape"),
        ({"weights": np.ones((3, 3)), "clients": np.array([1, 1, 2])}, "repeated"),
        ({"weights": -np.ones((2, 2)), "clients": np.arange(2)}, ">= 0"),
        ({"weights": np.ones((2, 2)), "clients": np.arange(2.0)}, "integers"),
        ({"weights": np.ones((2, 2)), "clients": np.arange(2), "groups": np.zeros(3, int)},
         "groups"),
        ({"weights": np.ones((2, 2)), "clients": np.arange(2), "history": np.ones((4, 2, 2))},
         "without"),
        ({"weights": np.ones((2, 2)), "clients": np.arange(2), "history": np.ones((1, 2, 2)),
          "history_times_s": np.zeros(2), "history_rounds": np.zeros(1, int)}, "history_times_s"),
    ],
)  # fmt: skip
def test_malformed_file_is_a_clear_error(tmp_path: Path, arrays: dict, message: str) -> None:
    run_dir = _write_npz(tmp_path / "bad", **arrays)
    with pytest.raises(ValueError, match=message):
        load_collaboration(run_dir)


def test_corrupt_file_is_a_value_error(tmp_path: Path) -> None:
    (tmp_path / COLLABORATION_FILE).write_bytes(b"PK\x03\x04 cut short")
    with pytest.raises(ValueError, match="unreadable"):
        load_collaboration(tmp_path)


def _write_clients_csv(run_dir: Path, groups: dict[int, int]) -> None:
    """Two evaluations in the recorder's clients.csv layout."""
    with (run_dir / "clients.csv").open("w", newline="") as file:
        writer = csv.DictWriter(file, CLIENT_COLUMNS)
        writer.writeheader()
        for round_index in (1, 2):
            for client, group in groups.items():
                writer.writerow({"time_s": 3.0 * round_index, "round": round_index,
                                 "client": client, "group": group, "accuracy": 0.5,
                                 "num_test": 20})  # fmt: skip


def test_groups_come_from_clients_csv_when_the_npz_has_none(tmp_path: Path) -> None:
    run_dir = _write_npz(tmp_path / "ucfl", weights=np.ones((4, 4)), clients=np.array([3, 1, 7, 5]))
    _write_clients_csv(run_dir, {1: 0, 3: 1, 5: 1})  # client 7 was never evaluated
    assert np.array_equal(load_collaboration(run_dir).groups, [1, 0, -1, 1])


def test_groups_in_the_npz_win_over_clients_csv(tmp_path: Path) -> None:
    run_dir = _write_npz(tmp_path / "r", weights=np.ones((2, 2)), clients=np.array([0, 1]),
                         groups=np.array([4, 4]))  # fmt: skip
    _write_clients_csv(run_dir, {0: 0, 1: 1})
    assert np.array_equal(load_collaboration(run_dir).groups, [4, 4])


def test_no_group_anywhere_means_no_grouping(tmp_path: Path) -> None:
    run_dir = _write_npz(tmp_path / "iid", weights=np.ones((3, 3)), clients=np.arange(3))
    assert load_collaboration(run_dir).groups is None
    _write_clients_csv(run_dir, {0: -1, 1: -1, 2: -1})
    assert load_collaboration(run_dir).groups is None


# --- figures -------------------------------------------------------------------------------


def test_snapshot_indices_spread_evenly_with_first_and_last() -> None:
    assert snapshot_indices(4).tolist() == [0, 1, 2, 3]
    assert snapshot_indices(21).tolist() == [0, 4, 8, 12, 16, 20]
    assert snapshot_indices(50, most=1).tolist() == [49]
    with pytest.raises(ValueError):
        snapshot_indices(0)


def test_final_matrix_plot_with_nan_and_without_groups(tmp_path: Path) -> None:
    weights = _block_weights(GROUPS, 0.1, np.random.default_rng(2))
    weights[:, 3] = np.nan  # a client that left
    grouped = _write_npz(tmp_path / "grouped", weights=weights, clients=CLIENT_IDS, groups=GROUPS)
    plain = _write_npz(tmp_path / "plain", weights=weights, clients=CLIENT_IDS)
    for run_dir in (grouped, plain):
        out = plot_collaboration(run_dir, tmp_path / "out" / f"{run_dir.name}.png")
        _assert_png(out)


def test_evolution_and_trajectories_need_a_history(tmp_path: Path) -> None:
    run_dir = _write_npz(tmp_path / "r", weights=np.ones((3, 3)), clients=np.arange(3))
    with pytest.raises(ValueError, match="no history"):
        plot_collaboration_evolution(run_dir, tmp_path / "e.png")
    with pytest.raises(ValueError, match="no history"):
        plot_weight_trajectories(run_dir, tmp_path / "t.png")


def test_trajectories_refuse_too_many_clients(tmp_path: Path, monkeypatch) -> None:
    groups = np.arange(17) % 2
    arrays = _history(np.random.default_rng(3), snapshots=2, groups=groups)
    run_dir = _write_npz(tmp_path / "big", clients=np.arange(17), groups=groups, **arrays)
    with pytest.raises(ValueError, match="16 at most"):
        plot_weight_trajectories(run_dir, tmp_path / "t.png")
    for name in ("plot_collaboration", "plot_collaboration_evolution", "plot_weight_trajectories"):
        monkeypatch.setattr(f"analysis.weights.{name}", lambda collab, out_path: out_path)
    assert [p.name for p in plot_collaboration_figures(run_dir)] == [
        COLLABORATION_PLOT,
        EVOLUTION_PLOT,
    ]


def test_figures_with_history_are_written(tmp_path: Path) -> None:
    groups = np.array([0, 1, 0, 1, 1])
    arrays = _history(np.random.default_rng(4), snapshots=9, groups=groups)
    run_dir = _write_npz(tmp_path / "federico", clients=np.arange(5), groups=groups, **arrays)
    written = plot_collaboration_figures(run_dir)
    assert written == [run_dir / COLLABORATION_PLOT, run_dir / EVOLUTION_PLOT,
                       run_dir / TRAJECTORIES_PLOT]  # fmt: skip
    for path in written:
        _assert_png(path)


def test_figures_are_redrawn_only_when_stale(tmp_path: Path) -> None:
    run_dir = _write_npz(tmp_path / "ucfl", weights=np.ones((3, 3)), clients=np.arange(3))
    assert plot_collaboration_figures(run_dir, only_if_stale=True) == [run_dir / COLLABORATION_PLOT]
    assert plot_collaboration_figures(run_dir, only_if_stale=True) == []
    later = (run_dir / COLLABORATION_FILE).stat().st_mtime + 10
    os.utime(run_dir / COLLABORATION_FILE, (later, later))
    assert plot_collaboration_figures(run_dir, only_if_stale=True) == [run_dir / COLLABORATION_PLOT]


def test_cli_plot_draws_the_collaboration_figures(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr("analysis.plot_runs", lambda runs, out, target: [])  # tested elsewhere
    scenario = tmp_path / "scenario"
    row = ",".join(["1"] * len(METRIC_COLUMNS))
    for label in ("cobo", "fedavg"):
        (scenario / label).mkdir(parents=True)
        (scenario / label / "metrics.csv").write_text(f"{','.join(METRIC_COLUMNS)}\n{row}\n")
    _write_npz(scenario / "cobo", weights=np.ones((3, 3)), clients=np.arange(3))

    assert main(["plot", str(scenario)]) == 0
    _assert_png(scenario / "cobo" / COLLABORATION_PLOT)
    assert not (scenario / "fedavg" / COLLABORATION_PLOT).exists()
    assert str(scenario / "cobo" / COLLABORATION_PLOT) in capsys.readouterr().out

    assert main(["plot", str(scenario), "--out", str(tmp_path / "out")]) == 0
    _assert_png(tmp_path / "out" / "cobo" / COLLABORATION_PLOT)

    (scenario / "cobo" / COLLABORATION_FILE).write_bytes(b"not a zip")
    assert main(["plot", str(scenario)]) == 2
    assert "unreadable" in capsys.readouterr().err


# --- FedeRiCo: reliance by who trains the models --------------------------------------------


def test_training_reliance_reads_a_group_on_another_groups_model_as_its_own():
    """Group A (0, 1) uses the model hosted by client 3 of group B, group B (2, 3) the one
    of client 2: by owner A relies on B only; by who trains the models, on A only."""
    weights = np.zeros((4, 4))
    weights[[0, 1], 3] = 1.0
    weights[[2, 3], 2] = 1.0
    groups = np.array([0, 0, 1, 1])
    assert own_group_mass(weights, groups)[:2] == pytest.approx([0.0, 0.0])
    reliance = training_reliance(weights)
    np.testing.assert_allclose(reliance[0], [0.5, 0.5, 0.0, 0.0])
    np.testing.assert_allclose(reliance[3], [0.0, 0.0, 0.5, 0.5])
    assert own_group_mass(reliance, groups) == pytest.approx(np.ones(4))


def test_training_reliance_by_hand_keeps_rows_summing_to_one_and_absent_clients_nan():
    weights = np.array(
        [[0.5, 0.5, np.nan], [0.2, 0.8, np.nan], [np.nan, np.nan, np.nan]]
    )  # client 2 not present
    reliance = training_reliance(weights)
    # model 0: trainers 0 (0.5) and 1 (0.2) -> shares 5/7, 2/7; model 1: 0.5 / 1.3, 0.8 / 1.3
    expected_0 = [0.5 * 5 / 7 + 0.5 * 0.5 / 1.3, 0.5 * 2 / 7 + 0.5 * 0.8 / 1.3]
    np.testing.assert_allclose(reliance[0, :2], expected_0)
    np.testing.assert_allclose(reliance[:2, :2].sum(axis=1), 1.0)
    assert np.isnan(reliance[2]).all() and np.isnan(reliance[:, 2]).all()


def test_a_collaboration_with_reliance_loads_plots_both_and_checks_its_shape(tmp_path):
    weights = np.full((4, 4), 0.25)
    run_dir = tmp_path / "federico"
    run_dir.mkdir()
    arrays = {"weights": weights, "clients": np.arange(4), "groups": np.array([0, 0, 1, 1])}
    np.savez(run_dir / "collaboration.npz", **arrays, reliance=training_reliance(weights))
    collab = load_collaboration(run_dir)
    np.testing.assert_allclose(collab.reliance, 0.25)
    out = plot_collaboration(collab, tmp_path / "both.png")
    single = plot_collaboration(replace(collab, reliance=None), tmp_path / "one.png")
    from PIL import Image  # matplotlib's own dependency

    assert Image.open(out).width > 1.5 * Image.open(single).width  # two panels side by side
    np.savez(run_dir / "collaboration.npz", **arrays, reliance=np.ones((3, 3)))
    with pytest.raises(ValueError, match="reliance"):
        load_collaboration(run_dir)
