"""Seed statistics (analysis.stats) and `fedsim compare`, on hand-made data and results folders
written the way the recorder writes them (no simulation)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from matplotlib.figure import Figure

import analysis.style
from analysis import compare_rows, find_runs, format_table, kaplan_meier, mean_curve, plot_runs
from analysis.pareto import plot_pareto
from analysis.results import MixedScenariosError, group_seeds
from analysis.stats import CSV_COLUMNS, across_seeds, pareto_front
from fedsim.cli import _print_across_seeds, main
from fedsim.results.files import ENERGY_COLUMNS, ENERGY_TOTALS, METRICS_COLUMNS

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TARGET = 0.8
UP, DOWN = 100_000, 200_000  # bytes per evaluation in the hand-made runs
SAMPLES = 800  # training samples per evaluation in the hand-made runs
Z95 = 1.959963984540054  # standard normal 97.5% quantile
T95 = {1: 12.706204736, 2: 4.302652730}  # Student t 97.5% quantile by degrees of freedom


# --- Kaplan–Meier ---------------------------------------------------------------------------


def test_kaplan_meier_matches_a_hand_computation() -> None:
    # Runs reach the target at 10, 20, 20 and 30 s; one never does and stops at 25 s.
    #   t=10: 5 at risk, 1 arrives:  S = 4/5           = 0.8
    #   t=20: 4 at risk, 2 arrive:   S = 0.8 · (1-2/4)  = 0.4
    #   (t=25: the censored run leaves the risk set)
    #   t=30: 1 at risk, 1 arrives:  S = 0
    # KM median: first S <= 0.5 -> 20 s. Reached 4/5.
    # Greenwood sums: t=10: 1/(5·4) = 0.05; t=20: 0.05 + 2/(4·2) = 0.3.
    # Log-log band S^exp(±z·sqrt(g)/|ln S|):
    #   t=10: theta = exp(1.959964·sqrt(0.05)/0.223144) = exp(1.964026) = 7.128;
    #         lower = 0.8^7.128 = 0.203809, upper = 0.8^(1/7.128) = 0.969180
    #   t=20: theta = exp(1.959964·sqrt(0.3)/0.916291) = exp(1.171589) = 3.2271;
    #         lower = 0.4^3.2271 = 0.051976, upper = 0.4^(1/3.2271) = 0.752816
    #   t=30: S = 0, band [0, 0]
    # Median CI: the lower band is <= 0.5 first at 10; the upper band first at 30.
    km = kaplan_meier([10.0, 20.0, 20.0, None, 30.0], [None, None, None, 25.0, None])
    np.testing.assert_array_equal(km.times, [10.0, 20.0, 30.0])
    np.testing.assert_array_equal(km.at_risk, [5, 4, 1])
    np.testing.assert_array_equal(km.events, [1, 2, 1])
    np.testing.assert_allclose(km.survival, [0.8, 0.4, 0.0])
    np.testing.assert_allclose(km.lower, [0.203809, 0.051976, 0.0], atol=2e-6)
    np.testing.assert_allclose(km.upper, [0.969180, 0.752816, 0.0], atol=2e-6)
    assert km.median == 20.0
    assert km.median_ci == (10.0, 30.0)
    assert (km.runs, km.reached, km.fraction_reached) == (5, 4, 0.8)
    assert [km.survival_at(t) for t in (0.0, 10.0, 19.9, 25.0, 30.0)] == [1.0, 0.8, 0.8, 0.4, 0.0]


def test_kaplan_meier_keeps_a_run_censored_at_an_arrival_time_at_risk() -> None:
    # t=10: 3 at risk (the run censored at 10 s counts), 1 arrives: S = 2/3 (not 1/2).
    km = kaplan_meier([10.0, None, 20.0], [None, 10.0, None])
    np.testing.assert_array_equal(km.at_risk, [3, 1])
    np.testing.assert_allclose(km.survival, [2 / 3, 0.0])
    assert km.median == 20.0
    # Dropping the censored run instead would make S(10) = 1/2 and the median 15 s.
    assert kaplan_meier([10.0, 20.0]).median == 15.0


@pytest.mark.parametrize("times", [[40.0, 10.0, 30.0, 20.0], [30.0, 10.0, 20.0], [7.0]])
def test_kaplan_meier_median_without_censoring_is_the_ordinary_median(times) -> None:
    assert kaplan_meier(times).median == pytest.approx(np.median(times))


def test_kaplan_meier_when_no_run_reaches_the_target() -> None:
    km = kaplan_meier([None, None], [30.0, 40.0])
    assert (km.median, km.median_ci, km.reached, km.fraction_reached) == (None, (None, None), 0, 0)
    assert km.survival_at(1e9) == 1.0
    # One of three reaching it leaves S at 2/3: no median, and its CI has no upper limit.
    km = kaplan_meier([None, 10.0, None], [50.0, None, 50.0])
    assert km.median is None and km.median_ci[1] is None


def test_kaplan_meier_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="no runs"):
        kaplan_meier([])
    with pytest.raises(ValueError, match="censoring times"):
        kaplan_meier([1.0, None], [3.0])


# --- mean curves ----------------------------------------------------------------------------


def test_mean_curve_band_matches_a_hand_computation() -> None:
    # Three seeds at x = 0 and 10: accuracies 0.1/0.2/0.3 then 0.5/0.6/0.7.
    # mean 0.2 and 0.6; sample sd 0.1 at both; half-width = t(0.975, 2)·0.1/√3
    #   = 4.302653 · 0.057735 = 0.248414.
    curves = [([0, 10], [0.1, 0.5]), ([0, 10], [0.2, 0.6]), ([0, 10], [0.3, 0.7])]
    curve = mean_curve(curves)
    half = T95[2] * 0.1 / math.sqrt(3)
    assert half == pytest.approx(0.248414, abs=1e-6)
    np.testing.assert_allclose(curve.x, [0, 10])
    np.testing.assert_allclose(curve.mean, [0.2, 0.6])
    np.testing.assert_allclose(curve.low, [0.2 - half, 0.6 - half])
    np.testing.assert_allclose(curve.high, [0.2 + half, 0.6 + half])
    assert curve.curves == 3


def test_mean_curve_is_drawn_only_where_every_seed_has_data() -> None:
    # Seed a spans 0..20, seed b 5..15 (its x=10 evaluated twice: the later value counts), so
    # the common range is 5..15 and the grid every x of either seed inside it: 5, 10, 15.
    # a at 5, 10, 15 (interpolated): 0.25, 0.5, 0.6; b: 0.2, 0.4, 0.8.
    a = ([0, 10, 20], [0.0, 0.5, 0.7])
    b = ([5, 10, 10, 15], [0.2, 0.3, 0.4, 0.8])
    curve = mean_curve([a, b, ([np.nan], [np.nan])])  # a seed without data is left out
    np.testing.assert_allclose(curve.x, [5, 10, 15])
    np.testing.assert_allclose(curve.mean, [0.225, 0.45, 0.7])
    # Two seeds: half-width = t(0.975, 1)·sd/√2 = 12.706205·|a−b|/2.
    np.testing.assert_allclose(curve.high - curve.mean, T95[1] * np.array([0.05, 0.1, 0.2]) / 2)
    assert curve.curves == 2

    alone = mean_curve([a])
    np.testing.assert_allclose(alone.mean, a[1])
    assert np.isnan(alone.low).all() and np.isnan(alone.high).all()
    assert mean_curve([([0, 1], [0.1, 0.2]), ([2, 3], [0.1, 0.2])]).x.size == 0  # disjoint


# --- results folders, written as the recorder writes them -----------------------------------


def _write_run(
    scenario: Path,
    label: str,
    times: list[float],
    accuracy: list[float],
    *,
    energy: bool = False,
    summary: bool = True,
    complete: bool = True,
) -> Path:
    """metrics.csv with the recorder's header (0.1 MB uplink and 0.2 MB downlink, 10 J of each
    energy category, per evaluation), energy.csv, and the summary.json the recorder writes."""
    folder = scenario / label
    folder.mkdir(parents=True)
    columns = METRICS_COLUMNS + (ENERGY_TOTALS if energy else ())
    rows = []
    for i, (time_s, acc) in enumerate(zip(times, accuracy, strict=True)):
        row = {
            "time_s": time_s, "round": i, "accuracy": acc, "worst_accuracy": acc - 0.1,
            "p10_accuracy": acc - 0.05, "p50_accuracy": acc, "p90_accuracy": acc + 0.05,
            "train_loss": "" if i == 0 else 1.0 / i, "uplink_bytes": UP * i,
            "downlink_bytes": DOWN * i, "d2d_bytes": 0, "wasted_bytes": 0, "participants": 4,
            "samples_trained": SAMPLES * i,
        } | {name: 10.0 * i for name in ENERGY_TOTALS}  # fmt: skip
        rows.append(",".join(str(row[c]) for c in columns))
    (folder / "metrics.csv").write_text("\n".join([",".join(columns), *rows]) + "\n")
    if energy:  # two clients, each with half the joules
        lines = [",".join(ENERGY_COLUMNS)] + [
            f"{time_s},{i},{client},{5.0 * i},{5.0 * i},{5.0 * i},{5.0 * i},0.0,"
            for i, time_s in enumerate(times)
            for client in (0, 1)
        ]
        (folder / "energy.csv").write_text("\n".join(lines) + "\n")
    if not summary:
        return folder
    reached = next((i for i, acc in enumerate(accuracy) if acc >= TARGET), None)
    data = {
        "scenario": "toy", "algorithm": label, "target_accuracy": TARGET,
        "final_accuracy": accuracy[-1], "best_accuracy": max(accuracy),
        "final_worst_accuracy": accuracy[-1] - 0.1,
        "time_to_target_s": None if reached is None else times[reached],
        "uplink_bytes_to_target": None if reached is None else UP * reached,
        "downlink_bytes_to_target": None if reached is None else DOWN * reached,
        "d2d_bytes_to_target": None if reached is None else 0,
        "rounds": len(times) - 1, "time_s": times[-1], "uplink_bytes": UP * (len(times) - 1),
        "downlink_bytes": DOWN * (len(times) - 1), "d2d_bytes": 0, "wasted_bytes": 0,
        "complete": complete, "churn_events": [],
    }  # fmt: skip
    if energy:
        data["energy_j"] = {name: 10.0 * (len(times) - 1) for name in ENERGY_TOTALS}
        data["energy_to_target_j"] = None if reached is None else 40.0 * reached
    (folder / "summary.json").write_text(json.dumps(data, indent=2) + "\n")
    return folder


def _sweep(tmp_path: Path, *, summary: bool = True) -> Path:
    """fedavg over 3 seeds (the third never reaches 0.8 and stops at 25 s), cobo over 2 seeds
    (with energy), and local without a seed part that never reaches the target."""
    toy = tmp_path / "toy"
    kw = {"summary": summary}
    _write_run(toy, "fedavg@seed=1", [0, 10, 20, 30, 40], [0.1, 0.5, 0.8, 0.82, 0.85], **kw)
    _write_run(toy, "fedavg@seed=2", [0, 10, 20, 30, 40], [0.1, 0.4, 0.7, 0.8, 0.83], **kw)
    _write_run(toy, "fedavg@seed=3", [0, 10, 20, 25], [0.1, 0.3, 0.6, 0.75], **kw)
    _write_run(toy, "local", [0, 10, 20], [0.1, 0.2, 0.3], **kw)
    _write_run(toy, "zcobo@seed=1", [0, 10, 20], [0.2, 0.8, 0.9], energy=True, **kw)
    _write_run(toy, "zcobo@seed=2", [0, 10, 20], [0.2, 0.6, 0.85], energy=True, **kw)
    return toy


def test_compare_rows_match_a_hand_computation(tmp_path: Path) -> None:
    rows = {row.label: row for row in compare_rows(find_runs([_sweep(tmp_path)]))}
    assert list(rows) == ["fedavg", "local", "zcobo"]

    fedavg = rows["fedavg"]
    # finals 0.85, 0.83, 0.75: mean 0.81, sample sd sqrt((0.04² + 0.02² + 0.06²)/2)
    #   = sqrt(0.0028) = 0.052915; half-width 4.302653 · 0.052915/√3 = 0.131448
    assert (fedavg.runs, fedavg.incomplete, fedavg.target_accuracy) == (3, 0, TARGET)
    assert fedavg.final_mean == pytest.approx(0.81)
    assert fedavg.final_ci == pytest.approx(T95[2] * math.sqrt(0.0028) / math.sqrt(3))
    assert fedavg.final_ci == pytest.approx(0.131448, abs=1e-6)
    assert fedavg.worst_mean == pytest.approx(0.71)
    # Reached at 20 and 30 s, the third censored at 25 s:
    #   t=20: 3 at risk, S = 2/3; t=30: 1 at risk (seed 3 left at 25), S = 0 -> median 30 s.
    #   Band at 20: g = 1/(3·2); theta = exp(1.959964·0.408248/0.405465) = 7.1946,
    #   lower = (2/3)^7.1946 = 0.0541 <= 0.5 -> CI low 20; at 30 the band is [0, 0] -> high 30.
    km = fedavg.km
    np.testing.assert_allclose(km.survival, [2 / 3, 0.0])
    assert km.lower[0] == pytest.approx(0.0541, abs=1e-4)
    assert (km.median, km.median_ci, km.reached, km.runs) == (30.0, (20.0, 30.0), 2, 3)
    # Bytes to target: medians over the two seeds that got there (rows 2 and 3).
    assert fedavg.bytes_to_target == {"uplink": 250_000.0, "downlink": 500_000.0, "d2d": 0.0}
    assert fedavg.total_bytes_to_target == 750_000.0
    assert fedavg.energy_to_target_j is None
    # The worst client where the mean first reached 0.8 (0.8 - 0.1 on both), not at the end.
    assert fedavg.worst_at_target == pytest.approx(0.7)

    local = rows["local"]
    assert (local.runs, local.final_mean, local.final_ci) == (1, 0.3, None)
    assert (local.km.median, local.km.median_ci, local.km.reached) == (None, (None, None), 0)
    assert local.bytes_to_target == {"uplink": None, "downlink": None, "d2d": None}

    cobo = rows["zcobo"]
    # Reached at 10 and 20 s: S = 1/2 at 10 then 0: median midway, 15 s (the plain median).
    assert cobo.final_mean == pytest.approx(0.875)
    assert cobo.final_ci == pytest.approx(T95[1] * np.std([0.9, 0.85], ddof=1) / math.sqrt(2))
    assert cobo.km.median == 15.0
    assert cobo.energy_to_target_j == 60.0  # 40 J per evaluation: 40 and 80
    assert cobo.worst_at_target == pytest.approx(0.725)  # 0.7 and 0.75 when the mean got there


def test_compare_rows_without_summaries_read_the_metrics(tmp_path: Path) -> None:
    with_summaries = compare_rows(find_runs([_sweep(tmp_path / "a")]))
    without = compare_rows(find_runs([_sweep(tmp_path / "b", summary=False)]), TARGET)
    for expected, got in zip(with_summaries, without, strict=True):
        assert got.label == expected.label
        assert got.final_mean == pytest.approx(expected.final_mean)
        assert got.worst_mean == pytest.approx(expected.worst_mean)
        assert (got.km.median, got.km.median_ci) == (expected.km.median, expected.km.median_ci)
        assert got.bytes_to_target == expected.bytes_to_target
        assert got.energy_to_target_j == expected.energy_to_target_j
    # No target anywhere: no time to target at all.
    assert all(row.km is None for row in compare_rows(find_runs([tmp_path / "b" / "toy"])))


def test_compare_rows_count_interrupted_runs(tmp_path: Path) -> None:
    toy = tmp_path / "toy"
    _write_run(toy, "fedavg@seed=1", [0, 10], [0.5, 0.9])
    _write_run(toy, "fedavg@seed=2", [0, 10], [0.5, 0.6], complete=False)
    (row,) = compare_rows(find_runs([toy]))
    assert (row.runs, row.incomplete, row.km.reached) == (2, 1, 1)
    assert "fedavg (1 incomplete)" in format_table([row])


def test_format_table_md_and_csv(tmp_path: Path) -> None:
    rows = compare_rows(find_runs([_sweep(tmp_path)]))
    md = format_table(rows).splitlines()
    assert md[0].startswith("| run | runs | final accuracy % (± 95% CI) |")
    assert md[0].endswith("| energy to target J | samples to target (thousands) |")
    assert md[1] == "| " + " | ".join(["---"] * 12) + " |"
    assert md[2] == (
        "| fedavg | 3 | 81.0 ± 13.1 | 71.0 | 30.0 [20.0, 30.0] | 2/3 | 70.0 | 0.25 | 0.50 | 0.00 "
        "| – | 2.0 |"
    )  # samples: the median of 800 x 2 and 800 x 3 evaluations
    assert md[3] == (
        "| local | 1 | 30.0 | 20.0 | not reached [–, ∞] | 0/1 | – | – | – | – | – | – |"
    )
    # zcobo: at 10 s the lower band is 0.5^7.385 = 0.006 -> CI low 10; S = 0 at 20 -> high 20.
    assert md[4] == (
        "| zcobo | 2 | 87.5 ± 31.8 | 77.5 | 15.0 [10.0, 20.0] | 2/2 | 72.5 | 0.15 | 0.30 | 0.00 "
        "| 60.0 | 1.2 |"
    )

    lines = format_table(rows, "csv").splitlines()
    assert lines[0] == ",".join(CSV_COLUMNS)
    fedavg = dict(zip(CSV_COLUMNS, lines[1].split(","), strict=True))
    assert float(fedavg["final_accuracy_mean"]) == pytest.approx(0.81)
    assert float(fedavg["km_median_time_to_target_s"]) == 30.0
    assert (fedavg["km_median_ci95_low_s"], fedavg["km_median_ci95_high_s"]) == ("20.0", "30.0")
    assert (fedavg["reached"], fedavg["uplink_bytes_to_target"]) == ("2", "250000.0")
    assert fedavg["energy_to_target_j"] == ""
    assert fedavg["samples_to_target"] == "2000.0"
    assert float(fedavg["worst_accuracy_at_target"]) == pytest.approx(0.7)
    local = dict(zip(CSV_COLUMNS, lines[2].split(","), strict=True))
    assert (local["km_median_time_to_target_s"], local["km_median_ci95_high_s"]) == ("", "inf")
    assert local["final_accuracy_ci95"] == ""
    with pytest.raises(ValueError, match="unknown table format"):
        format_table(rows, "tex")


# --- fedsim compare ---------------------------------------------------------------------------


def test_fedsim_compare_prints_markdown_and_writes_csv(tmp_path: Path, capsys) -> None:
    toy = _sweep(tmp_path)
    assert main(["compare", str(toy)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| run | runs |") and "| fedavg | 3 | 81.0 ± 13.1 |" in out

    table = tmp_path / "table.csv"
    # Run folders given one by one are compared the same way.
    seeds = [str(toy / f"fedavg@seed={seed}") for seed in (1, 2, 3)]
    assert main(["compare", *seeds, "--format", "csv", "--out", str(table)]) == 0
    assert capsys.readouterr().out.strip() == str(table)
    lines = table.read_text().splitlines()
    assert lines[0] == ",".join(CSV_COLUMNS) and len(lines) == 2
    assert lines[1].startswith("fedavg,3,0,0.8,")


@pytest.mark.parametrize("problem", ["missing", "empty", "not a run", "out folder"])
def test_fedsim_compare_reports_bad_folders(tmp_path: Path, capsys, problem: str) -> None:
    toy = _sweep(tmp_path)
    (tmp_path / "empty").mkdir()
    (tmp_path / "stray").mkdir()
    (tmp_path / "stray" / "notes.txt").write_text("no metrics here")
    argv = {
        "missing": ["compare", str(tmp_path / "nowhere")],
        "empty": ["compare", str(tmp_path / "empty")],
        "not a run": ["compare", str(toy), str(tmp_path / "stray")],
        "out folder": ["compare", str(toy), "--out", str(tmp_path / "no" / "table.md")],
    }[problem]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: compare:") and "Traceback" not in captured.err
    assert captured.out == ""
    if problem == "out folder":  # the flag and the folder named, not an errno text
        assert f"--out: no folder {tmp_path / 'no'} to write into" in captured.err


def _resolved(folder: Path, seed: int, rounds: int) -> None:
    """A scenario.yaml as a run of a seed sweep writes it (the parts that matter here)."""
    scenario = {
        "name": "toy", "seed": seed, "run": {"rounds": rounds},
        "algorithms": [{"name": "fedavg", "label": folder.name}],
        "output": {"dir": str(folder.parent.parent / f"out{seed}"), "events": False},
        "sweep": {},
    }  # fmt: skip
    (folder / "scenario.yaml").write_text(yaml.safe_dump(scenario, sort_keys=False))


def test_seeds_of_different_scenarios_are_not_one_row(tmp_path: Path, capsys) -> None:
    toy = _sweep(tmp_path)
    for seed in (1, 2, 3):  # seed, label and output differ: one scenario's seeds
        _resolved(toy / f"fedavg@seed={seed}", seed, rounds=4)
    assert [len(group.runs) for group in group_seeds(find_runs([toy]))] == [3, 1, 2]
    _resolved(toy / "fedavg@seed=3", 3, rounds=3)  # an earlier study's run left in the folder
    with pytest.raises(MixedScenariosError, match=r"run\.rounds: 4 vs 3"):
        group_seeds(find_runs([toy]))
    for command in (["compare", str(toy)], ["plot", str(toy), "--out", str(tmp_path / "png")]):
        assert main(command) == 2
        captured = capsys.readouterr()
        assert "fedavg: the runs fedavg@seed=1 and fedavg@seed=3" in captured.err
        assert "run.rounds: 4 vs 3" in captured.err and "Traceback" not in captured.err
        assert captured.out == ""
    assert not (tmp_path / "png" / "time_to_accuracy.png").exists()


def test_a_run_without_seed_and_a_seed_group_of_its_label_must_be_one_scenario(
    tmp_path: Path,
) -> None:
    """`fedsim run quickstart.yaml --set sweep.seed=[1] --set run.rounds=3 --only local` after
    a full run: ``local`` (30 rounds) and ``local@seed=1`` (3) would be two rows "local"."""
    toy = tmp_path / "toy"
    for label, rounds in (("local", 30), ("local@seed=1", 3)):
        _write_run(toy, label, [0, 10, 20], [0.1, 0.2, 0.3])
        _resolved(toy / label, 1, rounds)
    with pytest.raises(MixedScenariosError, match=r"the runs local and local@seed=1 .*30 vs 3"):
        compare_rows(find_runs([toy]))
    _resolved(toy / "local@seed=1", 2, 30)  # the same scenario, another seed: two rows
    assert [row.label for row in compare_rows(find_runs([toy]))] == ["local", "local"]


def test_fedsim_compare_refuses_an_unknown_format(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["compare", str(_sweep(tmp_path)), "--format", "tex"])
    assert stop.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_fedsim_run_prints_the_km_median_across_seeds(capsys) -> None:
    summaries = [
        {"algorithm": f"cobo@seed={seed}", "final_accuracy": 0.7, "final_worst_accuracy": 0.6,
         "time_to_target_s": reached, "time_s": 40.0}
        for seed, reached in ((1, 10.0), (2, None), (3, 30.0))
    ]  # fmt: skip
    (aggregate,) = across_seeds(summaries)
    # t=10: 3 at risk, S = 2/3; t=30: 2 at risk (the censored seed lasts to 40 s), S = 1/3.
    assert aggregate.km_median_time_to_target_s == 30.0
    assert aggregate.median_time_to_target_s == 20.0  # over the seeds that got there only
    _print_across_seeds(summaries)
    out = capsys.readouterr().out
    assert "target reached in 2/3 (67%), KM median 30.0s" in out


def test_fedsim_run_prints_the_sample_sd_across_seeds_and_none_for_one_seed(capsys) -> None:
    summaries = [
        {"algorithm": label, "final_accuracy": final, "final_worst_accuracy": 0.5,
         "time_to_target_s": None, "time_s": 40.0}
        for label, final in (("cobo@seed=1", 0.70), ("cobo@seed=2", 0.74), ("local@seed=1", 0.6))
    ]  # fmt: skip
    _print_across_seeds(summaries)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "across seeds (mean ± sample sd of the final mean accuracy):"
    # sample sd of 0.70 and 0.74: 0.02·√2 = 2.8 points (the population sd would say 2.0)
    assert "cobo: final 72.0 ± 2.8% (worst client 50.0%) over 2 seeds" in lines[1]
    assert "local: final 60.0% (no sd: one seed) (worst client 50.0%) over 1 seed," in lines[2]


# --- figures ----------------------------------------------------------------------------------


def _assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 5_000


def test_pareto_front_by_hand() -> None:
    # (cost, gain): b is cheaper and better than c; a is cheapest; d equals b.
    costs, gains = [1.0, 2.0, 3.0, 2.0, 4.0], [0.5, 0.8, 0.7, 0.8, 0.9]
    assert pareto_front(costs, gains).tolist() == [True, True, False, True, True]


def test_plot_runs_draws_seed_means_bands_and_a_pareto_front(tmp_path: Path, monkeypatch) -> None:
    figures: list[Figure] = []
    save = analysis.style.save

    def keep(figure: Figure, out_path: Path) -> Path:
        figures.append(figure)
        return save(figure, out_path)

    monkeypatch.setattr("analysis.style.save", keep)
    paths = plot_runs(find_runs([_sweep(tmp_path)]), tmp_path / "out")
    names = [path.name for path in paths]
    assert names[:3] == ["time_to_accuracy.png", "accuracy_vs_bytes.png", "pareto.png"]
    for path in paths:
        _assert_png(path)

    time_axes = figures[0].axes[0]
    labels = [text.get_text() for text in time_axes.get_legend().get_texts()]
    assert labels[:3] == ["fedavg (3 seeds)", "local", "zcobo (2 seeds)"]
    assert "95% CI of the mean over seeds" in labels
    fedavg = time_axes.get_lines()[0]  # the mean of the three seeds over 0..25 s
    np.testing.assert_allclose(fedavg.get_xdata(), [0, 10, 20, 25])
    # at 25 s: seeds 1 and 2 interpolated (0.81, 0.75), seed 3 measured (0.75)
    np.testing.assert_allclose(fedavg.get_ydata(), [10, 40, 70, 77])
    uplink_labels = [t.get_text() for t in figures[1].axes[0].get_legend().get_texts()]
    assert uplink_labels[:3] == ["fedavg (3 seeds)", "local", "zcobo (2 seeds)"]


def test_plot_runs_without_seeds_draws_no_pareto(tmp_path: Path) -> None:
    toy = tmp_path / "toy"
    _write_run(toy, "fedavg", [0, 10, 20], [0.1, 0.8, 0.9])
    _write_run(toy, "local", [0, 10, 20], [0.1, 0.2, 0.3])
    paths = plot_runs(find_runs([toy]), tmp_path / "out")
    assert [path.name for path in paths] == [
        "time_to_accuracy.png", "accuracy_vs_bytes.png", "accuracy_vs_samples.png"
    ]  # fmt: skip
    for path in paths:
        _assert_png(path)


def test_pareto_costs_start_at_zero_with_a_single_point(tmp_path: Path, monkeypatch) -> None:
    """One label reaching the target: matplotlib would centre the axes on its point, showing
    negative seconds and megabytes."""
    figures: list[Figure] = []
    monkeypatch.setattr("analysis.style.save", lambda figure, out_path: figures.append(figure))
    toy = _sweep(tmp_path)
    for seed in (1, 2):
        shutil.rmtree(toy / f"zcobo@seed={seed}")  # fedavg alone reaches the target
    plot_pareto(find_runs([toy]), tmp_path / "pareto.png")
    by_time, by_bytes = figures[0].axes
    for ax in (by_time, by_bytes):
        [x] = {float(line.get_xdata()[0]) for line in ax.get_lines() if line.get_marker() == "o"}
        low, high = ax.get_xlim()
        assert low == 0.0 and x < high


def test_plot_pareto_from_rows_and_from_runs(tmp_path: Path) -> None:
    toy = _sweep(tmp_path)
    runs = find_runs([toy])
    _assert_png(plot_pareto(compare_rows(runs), tmp_path / "rows.png"))
    _assert_png(plot_pareto(runs, tmp_path / "runs.png"))
    shutil.rmtree(toy / "local")  # every row placed on both panels
    _assert_png(plot_pareto(find_runs([toy]), tmp_path / "placed.png"))
    with pytest.raises(ValueError, match="no runs"):
        plot_pareto([], tmp_path / "none.png")
