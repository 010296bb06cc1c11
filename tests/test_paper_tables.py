"""scenarios/papers/tables.py: the README's fedsim column from run folders, by hand."""

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
from scipy import stats

SCRIPT = Path(__file__).resolve().parents[1] / "scenarios" / "papers" / "tables.py"


def load_tables():
    spec = importlib.util.spec_from_file_location("paper_tables", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def write_run(folder: Path, name: str, accuracy: float, complete: bool = True) -> None:
    (folder / name).mkdir(parents=True)
    summary = {"final_accuracy": accuracy, "complete": complete}
    (folder / name / "summary.json").write_text(json.dumps(summary))


def test_a_row_is_the_seeds_mean_interval_and_paired_differences(tmp_path):
    tables = load_tables()
    folder = tmp_path / "scaffold_niid_bench"
    for seed, (fedavg, scaffold) in enumerate([(0.45, 0.50), (0.44, 0.46), (0.47, 0.50)], 1):
        write_run(folder, f"fedavg@seed={seed}", fedavg)
        write_run(folder, f"scaffold@seed={seed}", scaffold)
    [row] = [r for r in tables.ROWS if r.folder == "scaffold_niid_bench"]
    t = stats.t.ppf(0.975, 2) / math.sqrt(3)
    fedavg_half = t * 1.5275252316519468  # the sample sd of 45, 44, 47
    paired_half = t * 1.5275252316519468  # of +5, +2, +3
    assert tables.row_text(row, tmp_path) == (
        f"FedAvg 45.3 ± {fedavg_half:.1f}, SCAFFOLD 48.7 ± {t * 2.3094010767585034:.1f}; "
        f"paired SCAFFOLD − FedAvg +3.3 ± {paired_half:.1f} (+5.0, +2.0, +3.0)"
    )


def test_a_sweep_point_picks_its_runs_and_an_unfinished_run_is_refused(tmp_path):
    tables = load_tables()
    folder = tmp_path / "federico_table1"
    labels = ("federico", "local", "fedavg_plus", "fedavg")
    for groups, level in ((2, 0.5), (4, 0.7)):
        for seed in (1, 2, 3):
            for i, label in enumerate(labels):
                write_run(
                    folder, f"{label}@groups={groups},seed={seed}", level - 0.1 * i + 0.01 * seed
                )
    two, four = (r for r in tables.ROWS if r.folder == "federico_table1")
    assert tables.row_text(two, tmp_path).startswith("FedeRiCo 52.0 ± ")
    assert tables.row_text(four, tmp_path).startswith("FedeRiCo 72.0 ± ")
    write_run(folder, "federico@groups=2,seed=4", 0.5, complete=False)
    with pytest.raises(SystemExit, match="not complete"):
        tables.row_text(two, tmp_path)


def test_a_study_row_shows_one_seed_as_it_is_and_names_its_command_until_it_is_run(tmp_path):
    tables = load_tables()
    alpha1, overfit = tables.STUDIES["perfed_ckt_regimes"][1:3]
    assert tables.study_text(alpha1, tmp_path) == f"not run: {alpha1.command}"
    assert "--set name=perfed_ckt_regime_alpha1" in alpha1.command
    folder = tmp_path / overfit.folder
    write_run(folder, "perfed_ckt@seed=1", 0.326)
    write_run(folder, "local@seed=1", 0.35)
    assert tables.study_text(overfit, tmp_path) == "c = 2 32.6, Local 35.0"


def test_clients_split_in_thirds_by_size_and_their_last_accuracies(tmp_path):
    tables = load_tables()
    assert tables.split_in_thirds([4, 2, 0, 1, 3, 5, 6]) == [[4, 2], [0, 1], [3, 5, 6]]
    run = tmp_path / "perfed_ckt@seed=1"
    run.mkdir()
    (run / "clients.csv").write_text(
        "time_s,round,client,group,accuracy,num_test\n"
        "5.0,5,0,-1,0.2,10\n5.0,5,1,-1,0.3,10\n9.5,10,0,-1,0.4,10\n9.5,10,1,-1,0.5,10\n"
    )
    assert tables.last_client_accuracies(run) == {0: 0.4, 1: 0.5}
