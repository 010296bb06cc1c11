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


def write_hours(folder: Path, name: str, accuracies: list[float], **summary) -> None:
    """A run evaluated every hour (1 h, 2 h, ...) at these accuracies."""
    write_run(folder, name, accuracies[-1])
    rows = "".join(f"{3600.0 * (h + 1)},0,{a}\n" for h, a in enumerate(accuracies))
    (folder / name / "metrics.csv").write_text(f"time_s,round,accuracy\n{rows}")
    document = json.loads((folder / name / "summary.json").read_text())
    document |= {"time_s": 3600.0 * len(accuracies), **summary}
    (folder / name / "summary.json").write_text(json.dumps(document))


def test_the_satellite_table_reads_accuracy_at_the_hours_and_names_missing_runs(tmp_path):
    tables = load_tables()
    isl, isl_iid = (r for r in tables.SATELLITE_RUNS if r.folder.startswith("satellite_fl_isl"))
    first = [0.5, 0.6, 0.7, 0.8, 0.9, 0.9]  # six hours: nothing at 12, 24 or 72 h
    write_hours(tmp_path / isl.folder, "dsgd@seed=1", first, time_to_target_s=14400.0, rounds=30)
    write_hours(tmp_path / isl.folder, "dsgd@seed=2", [a - 0.02 for a in first],
                time_to_target_s=None, rounds=32)  # fmt: skip
    cifar = tmp_path / "satellite_fl_cifar10"
    for label, level in (("fedavg", 0.1), ("fedbuff", 0.3), ("fedasync", 0.35)):
        write_hours(cifar, f"{label}@seed=1", [level] * 72, time_to_target_s=None, rounds=7)
    lines = tables.satellite_text(tmp_path).splitlines()
    assert lines[0].count("|") == lines[1].count("|") == 12
    assert (
        f"| {isl.server} | MNIST Dir(0.5) | D-SGD | 49.0 | 69.0 | — | — | — | 4, > 6 | 31 | 2.0 |"
        in lines
    )
    assert f"| {isl.server} | MNIST IID | not run: `{isl_iid.command}` |" in lines
    assert "--set name=satellite_fl_isl_iid" in isl_iid.command and "{kind: iid}" in isl_iid.command
    assert ("| the station (Bremen, 10°) | CIFAR-10 Dir(0.5) | FedBuff | 30.0 | 30.0 | 30.0 | "
            "30.0 | 30.0 | > 72 | 7 | one seed |") in lines  # fmt: skip
    (cifar / "fedasync@seed=1" / "summary.json").unlink()
    (cifar / "fedasync@seed=1").rename(cifar / "fedasync_old")
    with pytest.raises(SystemExit, match="no runs of 'fedasync'"):
        tables.satellite_text(tmp_path)


def test_a_study_row_with_paired_differences_names_the_baseline(tmp_path):
    """The UCFL data-size row: each method's mean over the seeds, then auto − K = 3 per seed
    (the baseline, a column of another row, named by BASELINE_NAMES)."""
    tables = load_tables()
    auto_row = next(
        s for s in tables.STUDIES["ucfl_data_size"] if s.regime.startswith("400 images, auto")
    )
    folder = tmp_path / auto_row.folder
    for seed, (k3, auto) in enumerate([(0.60, 0.62), (0.70, 0.75), (0.80, 0.80)], 1):
        for label, value in (
            ("ucfl_K3", k3),
            ("ucfl_auto", auto),
            ("ucfl_k4_K3", k3),
            ("ucfl_k4_auto", auto),
            ("ucfl_all_K3", k3),
            ("ucfl_all_K2", auto),
        ):
            write_run(folder, f"{label}@seed={seed}", value)  # fmt: skip
    text = tables.study_text(auto_row, tmp_path)
    assert text.startswith("k by silhouette 72.3 ± ")
    assert "; paired k by silhouette − K = 3 +2.3 ± " in text
    assert text.endswith("k = m − K = 3 +2.3 ± 6.3 (+2.0, +5.0, +0.0)")


def test_the_relay_and_several_haps_rows_commands_are_valid_scenarios():
    """The satellite table's relayed and three-HAP rows: their commands' --set values make
    valid scenarios of satellite_fl.yaml (FedAvg relayed over the ring; three HAPs as one
    server, each seeing satellites in the first day)."""
    import shlex

    from fedsim.config.loading import load_scenario

    tables = load_tables()
    runs = {r.folder: r for r in tables.SATELLITE_RUNS}
    for folder in ("satellite_fl_relay", "satellite_fl_haps"):
        words = shlex.split(runs[folder].command)
        overrides = [words[k + 1] for k, word in enumerate(words) if word == "--set"]
        scenario = load_scenario(SCRIPT.parent / "satellite_fl.yaml", overrides)
        constellation = scenario.system.constellation
        assert scenario.name == folder and words[words.index("--only") + 1] == "fedavg"
        if folder == "satellite_fl_relay":
            assert constellation.relay == "plane" and constellation.isl.neighbours == "ring"
        else:
            assert [s.kind for s in constellation.servers] == ["hap"] * 3
