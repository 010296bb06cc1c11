"""Tests of the results loader and the comparison plots, on synthetic results folders."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from analysis import (
    Run,
    find_runs,
    load_run,
    plot_accuracy_vs_bytes,
    plot_runs,
    plot_time_to_accuracy,
    time_to_target,
)
from analysis.results import METRIC_COLUMNS
from analysis.stats import across_seeds

HEADER = ",".join(METRIC_COLUMNS)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _rows(evaluations: int, bytes_per_round: int = 40_000, speed: float = 1.0) -> list[str]:
    """A plausible learning curve: accuracy rising towards 0.9, spread narrowing."""
    rows = []
    for i in range(evaluations):
        accuracy = 0.9 - 0.8 * math.exp(-0.3 * speed * i)
        worst = max(accuracy - 0.2, 0.0)
        rows.append(
            f"{10.0 * i:.1f},{i},{accuracy:.4f},{worst:.4f},{accuracy - 0.1:.4f},"
            f"{accuracy:.4f},{accuracy + 0.05:.4f},{2.0 / (i + 1):.4f},"
            f"{bytes_per_round * i},{2 * bytes_per_round * i},0,0,{5 if i else 0},{1000 * i}"
        )
    return rows


def _write_run(folder: Path, rows: list[str], summary: dict | None = None, tail: str = "") -> Path:
    """Write a run folder; ``tail`` is appended without newline (an interrupted write)."""
    folder.mkdir(parents=True)
    (folder / "metrics.csv").write_text("\n".join([HEADER, *rows]) + "\n" + tail)
    if summary is not None:
        (folder / "summary.json").write_text(json.dumps(summary))
    return folder


def _summary(label: str, target: float | None = 0.8) -> dict:
    return {"scenario": "toy", "algorithm": label, "target_accuracy": target, "complete": True}


def _run(time_s: list[float], accuracy: list[float]) -> Run:
    columns = {name: np.zeros(len(time_s)) for name in METRIC_COLUMNS}
    columns["time_s"] = np.array(time_s)
    columns["accuracy"] = np.array(accuracy)
    return Run(label="hand", path=Path("hand"), columns=columns, summary={})


def _assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 5_000


def test_load_run_parses_columns_and_summary(tmp_path: Path) -> None:
    folder = _write_run(tmp_path / "fedavg", _rows(3), _summary("fedavg"))
    run = load_run(folder)
    assert run.label == "fedavg"
    assert run.path == folder
    assert set(run.columns) == set(METRIC_COLUMNS)
    np.testing.assert_allclose(run.columns["time_s"], [0.0, 10.0, 20.0])
    np.testing.assert_allclose(run.columns["round"], [0, 1, 2])
    np.testing.assert_allclose(run.columns["uplink_bytes"], [0, 40_000, 80_000])
    assert run.columns["accuracy"].dtype == np.float64
    assert run.summary["target_accuracy"] == 0.8


def test_load_run_without_summary_gives_empty_summary(tmp_path: Path) -> None:
    assert load_run(_write_run(tmp_path / "fedavg", _rows(2))).summary == {}


def test_load_run_ignores_truncated_last_line(tmp_path: Path) -> None:
    rows = _rows(4)
    folder = _write_run(tmp_path / "fedavg", rows[:3], tail=rows[3][:25])
    assert load_run(folder).columns["time_s"].size == 3


def test_load_run_ignores_short_last_line_ending_in_newline(tmp_path: Path) -> None:
    rows = _rows(4)
    folder = _write_run(tmp_path / "fedavg", [*rows[:3], rows[3][:25]])
    assert load_run(folder).columns["time_s"].size == 3


def test_load_run_rejects_malformed_row_in_the_middle(tmp_path: Path) -> None:
    rows = _rows(4)
    folder = _write_run(tmp_path / "fedavg", [rows[0], "garbage", *rows[2:]])
    with pytest.raises(ValueError, match="metrics.csv:3"):
        load_run(folder)


def test_a_run_written_before_the_samples_column_loads_and_skips_the_samples_figure(
    tmp_path: Path,
) -> None:
    old_header = HEADER.removesuffix(",samples_trained")
    assert old_header != HEADER
    folder = tmp_path / "old"
    folder.mkdir()
    rows = [row.rsplit(",", 1)[0] for row in _rows(4)]
    (folder / "metrics.csv").write_text("\n".join([old_header, *rows]) + "\n")
    run = load_run(folder)
    assert "samples_trained" not in run.columns
    paths = plot_runs([run], tmp_path / "out")
    assert [path.name for path in paths] == ["time_to_accuracy.png", "accuracy_vs_bytes.png"]


def test_load_run_reads_empty_train_loss_as_nan(tmp_path: Path) -> None:
    row = "5.0,1,0.5,0.3,0.4,0.5,0.6,,1000,2000,0,0,3,640"
    run = load_run(_write_run(tmp_path / "fedavg", [row]))
    assert math.isnan(run.columns["train_loss"][0])
    assert run.columns["participants"][0] == 3


def test_load_run_header_only_gives_empty_columns(tmp_path: Path) -> None:
    run = load_run(_write_run(tmp_path / "fedavg", []))
    assert all(column.size == 0 for column in run.columns.values())


def test_load_run_without_metrics_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="metrics.csv"):
        load_run(tmp_path)


def test_find_runs_on_scenario_folder_sorts_by_name(tmp_path: Path) -> None:
    scenario = tmp_path / "toy"
    for label in ("local", "fedavg", "fedprox"):
        _write_run(scenario / label, _rows(2))
    (scenario / "notes").mkdir()  # not a run folder: ignored
    runs = find_runs([scenario])
    assert [run.label for run in runs] == ["fedavg", "fedprox", "local"]


def test_find_runs_keeps_given_order_and_unique_labels(tmp_path: Path) -> None:
    fast = _write_run(tmp_path / "fast" / "fedavg", _rows(2)).parent
    _write_run(tmp_path / "fast" / "local", _rows(2))
    slow_fedavg = _write_run(tmp_path / "slow" / "fedavg", _rows(2))
    runs = find_runs([slow_fedavg, fast])
    assert [run.label for run in runs] == ["slow/fedavg", "fast/fedavg", "fast/local"]


def test_find_runs_keeps_short_labels_when_unique(tmp_path: Path) -> None:
    fedavg = _write_run(tmp_path / "a" / "fedavg", _rows(2))
    local = _write_run(tmp_path / "b" / "local", _rows(2))
    assert [run.label for run in find_runs([fedavg, local])] == ["fedavg", "local"]


def test_find_runs_loads_a_run_reached_twice_once(tmp_path: Path) -> None:
    fedavg = _write_run(tmp_path / "toy" / "fedavg", _rows(2))
    assert [run.label for run in find_runs([fedavg, tmp_path / "toy"])] == ["fedavg"]


def test_find_runs_on_empty_folder_names_it(tmp_path: Path) -> None:
    empty = tmp_path / "empty_scenario"
    empty.mkdir()
    with pytest.raises(ValueError, match="empty_scenario"):
        find_runs([empty])


def test_find_runs_on_missing_path_names_it(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="nowhere"):
        find_runs([tmp_path / "nowhere"])


def test_time_to_target_returns_first_time_reached() -> None:
    run = _run([0.0, 5.0, 12.5, 20.0, 30.0], [0.1, 0.5, 0.8, 0.7, 0.9])
    assert time_to_target(run, 0.8) == 12.5
    assert time_to_target(run, 0.85) == 30.0
    assert time_to_target(run, 0.1) == 0.0
    assert time_to_target(run, 0.95) is None
    assert time_to_target(_run([], []), 0.5) is None


def test_time_to_target_skips_missing_accuracy() -> None:
    assert time_to_target(_run([0.0, 1.0, 2.0], [0.2, math.nan, 0.6]), 0.5) == 2.0


def _comparison_runs(tmp_path: Path) -> list[Run]:
    scenario = tmp_path / "toy"
    _write_run(scenario / "fedavg", _rows(20), _summary("fedavg"))
    _write_run(scenario / "fedprox", _rows(20, bytes_per_round=30_000, speed=0.7))
    _write_run(scenario / "local", _rows(20, bytes_per_round=0, speed=0.5), _summary("local"))
    _write_run(scenario / "pending", [])
    return find_runs([scenario])


def test_plot_time_to_accuracy_writes_png(tmp_path: Path) -> None:
    runs = _comparison_runs(tmp_path)
    out = plot_time_to_accuracy(runs, tmp_path / "plots" / "time.png", target_accuracy=0.8)
    assert out == tmp_path / "plots" / "time.png"
    _assert_png(out)


def test_time_figure_keeps_its_legend_off_the_data_and_a_full_client_band_faint(
    tmp_path: Path, monkeypatch
) -> None:
    """The quickstart's FedAvg: clients p10-p90 spanning 0-100% (label groups)."""
    figures: list[Figure] = []
    monkeypatch.setattr("analysis.style.save", lambda figure, out_path: figures.append(figure))
    wide = _run([0.0, 10.0, 20.0], [0.2, 0.5, 0.6])
    wide.columns["p90_accuracy"][:] = 1.0  # p10 stays 0
    plot_time_to_accuracy([wide], tmp_path / "time.png", target_accuracy=0.7)
    [ax] = figures[0].axes
    renderer = FigureCanvasAgg(figures[0]).get_renderer()
    legend, axes = ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer)
    assert legend.x0 >= axes.x1  # beside the axes, over no curve
    [band] = ax.collections
    assert band.get_alpha() <= 0.1
    # the band's edge drawn as a thin line, so a faint band keeps its shape
    assert any(list(line.get_ydata()) == [100.0] * 3 for line in ax.get_lines())


@pytest.mark.parametrize("label", ["hand", "hand@seed=1"])
def test_time_figure_marks_the_evaluations_after_each_cloud_aggregation(
    tmp_path: Path, monkeypatch, label: str
) -> None:
    """Hierarchical FL: a triangle where cloud_rounds grew since the previous evaluation, on a
    run's curve (alone, or the one seed of its group)."""
    figures: list[Figure] = []
    monkeypatch.setattr("analysis.style.save", lambda figure, out_path: figures.append(figure))
    run = replace(_run([2.0, 4.0, 6.0, 8.0], [0.2, 0.3, 0.5, 0.6]), label=label)
    run.columns["cloud_rounds"] = np.array([0.0, 1.0, 1.0, 2.0])
    plot_time_to_accuracy([run], tmp_path / "time.png")
    [ax] = figures[0].axes
    [marks] = [line for line in ax.get_lines() if line.get_marker() == "^"]
    assert list(marks.get_xdata()) == [4.0, 8.0]
    assert list(marks.get_ydata()) == [30.0, 60.0]
    assert "after a cloud aggregation" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_plot_time_to_accuracy_without_target_writes_png(tmp_path: Path) -> None:
    _assert_png(plot_time_to_accuracy(_comparison_runs(tmp_path), tmp_path / "time.png"))


def test_plot_accuracy_vs_bytes_writes_png_with_zero_byte_run(tmp_path: Path) -> None:
    runs = _comparison_runs(tmp_path)
    assert np.all(runs[2].columns["uplink_bytes"] == 0)
    _assert_png(plot_accuracy_vs_bytes(runs, tmp_path / "bytes.png"))


def test_plots_handle_a_single_evaluation(tmp_path: Path) -> None:
    runs = find_runs([_write_run(tmp_path / "toy" / "fedavg", _rows(1))])
    _assert_png(plot_time_to_accuracy(runs, tmp_path / "time.png", target_accuracy=0.05))
    _assert_png(plot_accuracy_vs_bytes(runs, tmp_path / "bytes.png"))


def test_plots_reject_no_runs(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no runs"):
        plot_time_to_accuracy([], tmp_path / "time.png")


def test_plot_runs_writes_both_figures(tmp_path: Path) -> None:
    runs = _comparison_runs(tmp_path)
    paths = plot_runs(runs, tmp_path / "out")
    assert paths == [
        tmp_path / "out" / "time_to_accuracy.png",
        tmp_path / "out" / "accuracy_vs_bytes.png",
        tmp_path / "out" / "accuracy_vs_samples.png",
    ]
    for path in paths:
        _assert_png(path)


def test_plot_runs_uses_the_summaries_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    targets: list[float | None] = []

    def record(runs: list[Run], out_path: Path, target_accuracy: float | None = None) -> Path:
        targets.append(target_accuracy)
        return out_path

    monkeypatch.setattr("analysis.figures.plot_time_to_accuracy", record)
    runs = _comparison_runs(tmp_path)
    plot_runs(runs, tmp_path / "out")
    plot_runs(runs, tmp_path / "out", target_accuracy=0.6)
    assert targets == [0.8, 0.6]


def test_plot_runs_draws_no_target_when_summaries_disagree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    targets: list[float | None] = []
    monkeypatch.setattr(
        "analysis.figures.plot_time_to_accuracy",
        lambda runs, out_path, target_accuracy=None: targets.append(target_accuracy) or out_path,
    )
    _write_run(tmp_path / "a" / "fedavg", _rows(3), _summary("fedavg", target=0.8))
    _write_run(tmp_path / "b" / "fedavg", _rows(3), _summary("fedavg", target=0.7))
    runs = find_runs([tmp_path / "a", tmp_path / "b"])
    with pytest.warns(UserWarning, match="different target"):
        plot_runs(runs, tmp_path / "out")
    assert targets == [None]


def test_plot_async_draws_updates_and_staleness(tmp_path):
    from analysis.asynchrony import plot_async

    runs = []
    for label, buffer in (("fedasync", 1), ("fedbuff", 3)):
        run_dir = tmp_path / label
        run_dir.mkdir()
        staleness = np.arange(12 * buffer).reshape(12, buffer) % 5
        np.savez(run_dir / "async.npz", times=np.linspace(1, 30, 12), staleness=staleness,
                 clients=np.zeros_like(staleness))  # fmt: skip
        runs.append((label, run_dir))
    out = plot_async(runs, tmp_path / "asynchrony.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000


def _seed_summary(label: str, final: float, worst: float, time_s: float | None) -> dict:
    return {"algorithm": label, "final_accuracy": final, "final_worst_accuracy": worst,
            "time_to_target_s": time_s}  # fmt: skip


def test_across_seeds_groups_labels_that_differ_only_in_the_seed() -> None:
    summaries = [
        _seed_summary("cobo@seed=1", 0.70, 0.60, 50.0),
        _seed_summary("cobo@seed=2", 0.74, 0.64, None),
        _seed_summary("cobo@seed=3", 0.72, 0.62, 30.0),
        _seed_summary("local@groups=2,seed=1", 0.65, 0.5, 10.0),
        _seed_summary("local@groups=2,seed=2", 0.67, 0.5, 20.0),
        _seed_summary("local@groups=4,seed=1", 0.90, 0.8, 5.0),
        _seed_summary("fedavg", 0.5, 0.4, None),  # not swept over seeds: left out
    ]
    by_label = {a.label: a for a in across_seeds(summaries)}
    assert list(by_label) == ["cobo", "local@groups=2", "local@groups=4"]
    cobo = by_label["cobo"]
    assert (cobo.seeds, cobo.reached) == (3, 2)
    assert cobo.final_mean == pytest.approx(0.72)
    assert cobo.final_std == pytest.approx(0.02)  # sample sd: sqrt((0.02² + 0.02²) / 2)
    assert cobo.worst_mean == pytest.approx(0.62)
    assert cobo.median_time_to_target_s == pytest.approx(40.0)
    assert by_label["local@groups=2"].final_mean == pytest.approx(0.66)
    assert by_label["local@groups=4"].final_std is None  # one seed: no sd
