"""A study's runs on worker processes, on Ray and resumed after SIGTERM give the same files
as one after another in one process."""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import yaml

from fedsim.cli import main
from fedsim.config import ScenarioError, parse_scenario
from fedsim.learn.execution import CUBLAS_WORKSPACE_VARIABLE
from fedsim.study import _start_worker, _work, plan, run_study
from tests.conftest import ignores_signal, run_fedsim, start_python, tiny_scenario


def sweep(tmp_path: Path, out: str, rounds: int = 3) -> dict:
    data = tiny_scenario(tmp_path, run={"rounds": rounds})
    data["sweep"] = {"seed": [1, 2, 3]}
    data["output"] = {"dir": str(tmp_path / out)}
    return data


def files_of(results: Path) -> dict[str, bytes]:
    """Every file of a results folder, its own output folder blanked out of scenario.yaml."""
    files = {}
    for path in sorted(results.rglob("*")):
        if path.is_file():
            content = path.read_bytes()
            if path.name == "scenario.yaml":
                content = content.replace(str(results.parent).encode(), b"<out>")
            files[str(path.relative_to(results))] = content
    return files


def test_two_workers_write_the_same_files_as_one(tmp_path):
    one = run_study(parse_scenario(sweep(tmp_path, "one")), show_progress=False)
    two = run_study(parse_scenario(sweep(tmp_path, "two")), workers=2, show_progress=False)
    assert files_of(one) == files_of(two)
    assert len([name for name in files_of(one) if name.endswith("summary.json")]) == 3


def test_ray_tasks_write_the_same_files_as_one_process(tmp_path):
    ray = pytest.importorskip("ray")
    one = run_study(parse_scenario(sweep(tmp_path, "one")), show_progress=False)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        on_ray = run_study(parse_scenario(sweep(tmp_path, "ray")), use_ray=True,
                           show_progress=False)  # fmt: skip
    finally:
        ray.shutdown()
    assert files_of(one) == files_of(on_ray)


def wait_for(done: Callable[[], bool], process: subprocess.Popen) -> None:
    """Until ``done()`` holds (a state the child reaches, never a time), or the child ended."""
    while process.poll() is None and not done():
        time.sleep(0.05)


def test_a_sweep_stopped_by_sigterm_and_resumed_equals_an_uninterrupted_one(tmp_path):
    rounds = 40
    whole = run_study(parse_scenario(sweep(tmp_path, "whole", rounds)), show_progress=False)
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(sweep(tmp_path, "cut", rounds)))
    held = tmp_path / "held"  # the second run has measured 3 rows and waits for the signal
    command = ["run", str(path), "--quiet"]
    process = start_python(
        "-m", "tests.held_run", str(held), "fedavg@seed=2", "3", *command,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    wait_for(held.exists, process)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate()
    assert process.returncode == 143  # 128 + SIGTERM, not Ctrl-C's 130
    assert b"Traceback" not in stderr and b"interrupted by SIGTERM" in stderr
    summaries = {
        p.parent.name: json.loads(p.read_text()) for p in (tmp_path / "cut").rglob("summary.json")
    }
    assert {label: s["complete"] for label, s in summaries.items()} == {
        "fedavg@seed=1": True, "fedavg@seed=2": False
    }  # fmt: skip
    resumed = run_fedsim(*command, "--resume")
    assert resumed.returncode == 0 and "Traceback" not in resumed.stderr
    assert files_of(tmp_path / "cut" / "tiny") == files_of(whole)


def test_ctrl_c_of_a_study_on_workers_prints_one_line_and_every_run_flushes(tmp_path):
    """A terminal's Ctrl-C reaches every process of the group: the workers print nothing.
    The runs are too long to end before it (a million rounds)."""
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(sweep(tmp_path, "cut", rounds=1_000_000)))
    process = start_python(
        "-m", "fedsim", "run", str(path), "--quiet", "--workers", "2",
        stderr=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    results = tmp_path / "cut" / "tiny"
    started = [results / f"fedavg@seed={seed}" / "metrics.csv" for seed in (1, 2)]
    wait_for(lambda: all(m.exists() and m.read_text().count("\n") > 2 for m in started), process)
    assert not ignores_signal(process.pid, signal.SIGINT)  # else it would run its million rounds
    os.killpg(process.pid, signal.SIGINT)  # as the terminal does
    _, stderr = process.communicate()
    assert process.returncode == 130
    lines = [line for line in stderr.decode().splitlines() if line.strip()]
    assert lines == [f"interrupted: what was measured is in {results}"]
    summaries = [json.loads((m.parent / "summary.json").read_text()) for m in started]
    assert [s["complete"] for s in summaries] == [False, False]  # both flushed before exiting
    assert all(s["rounds"] >= 2 for s in summaries)


def test_workers_must_be_at_least_one(tmp_path, capsys):
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(sweep(tmp_path, "x")))
    assert main(["run", str(path), "--quiet", "--workers", "0"]) == 2
    assert "--workers" in capsys.readouterr().err


# --- a results folder that holds an earlier study ---


def two_algorithms(tmp_path: Path) -> Path:
    """fedavg and local over seeds 1 and 2, two rounds, with event logs."""
    data = tiny_scenario(tmp_path, run={"rounds": 2}, output={"events": True})
    data["algorithms"] = [{"name": "fedavg"}, {"name": "local"}]
    data["sweep"] = {"seed": [1, 2]}
    data["output"] = {"dir": str(tmp_path / "results"), "events": True}
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_rerun_with_other_settings_says_what_it_found_and_sums_up_only_its_runs(
    tmp_path, capsys, monkeypatch
):
    path = two_algorithms(tmp_path)
    assert main(["run", str(path), "--quiet"]) == 0
    capsys.readouterr()
    drawn: list[list[str]] = []
    monkeypatch.setattr(
        "fedsim.study.plot_results", lambda folder, labels, **_: drawn.append(list(labels))
    )
    again = ["--set", "sweep.seed=[1]", "--set", "run.rounds=1", "--set", "output.events=false"]
    assert main(["run", str(path), "--quiet", *again, "--only", "local"]) == 0
    captured = capsys.readouterr()
    found = captured.err.splitlines()
    results = tmp_path / "results" / "tiny"
    assert found == [
        f"{results}: 3 run folders from an earlier study are kept but are not part of this "
        "study: fedavg@seed=1, fedavg@seed=2, local@seed=2",
        f"{results}: 1 run folder of an earlier study with other settings is replaced: "
        "local@seed=1 (run.rounds is 2 there, 1 now)",
    ]
    summary_lines = [line for line in captured.out.splitlines() if ": final" in line]
    assert len(summary_lines) == 2 and "local@seed=1: final" in summary_lines[0]
    assert "over 1 seed" in summary_lines[1]  # local alone, not with the old local@seed=2
    assert drawn and all(labels == ["local@seed=1"] for labels in drawn)
    manifest = json.loads((results / "study.json").read_text())
    assert list(manifest["runs"]) == ["local@seed=1"] and len(manifest["scenario_sha256"]) == 64
    # the replaced run keeps nothing of the earlier one; the others are left as they were
    assert not (results / "local@seed=1" / "events.jsonl").exists()
    assert (results / "local@seed=2" / "events.jsonl").exists()


def test_compare_and_the_figures_of_a_folder_show_only_the_study_last_started_there(
    tmp_path, capsys
):
    """An earlier study's run folders stay (they are kept, see above) but are neither
    tabulated beside this study's runs nor left in its figures (its pareto.png)."""
    path = two_algorithms(tmp_path)
    assert main(["run", str(path), "--quiet"]) == 0
    results = tmp_path / "results" / "tiny"
    assert (results / "pareto.png").exists()  # two labels over two seeds
    again = ["--set", "sweep.seed=[1]", "--set", "run.rounds=1", "--set", "output.events=false"]
    assert main(["run", str(path), "--quiet", *again, "--only", "local"]) == 0
    assert not (results / "pareto.png").exists()  # one label, one seed: none drawn now
    assert (results / "time_to_accuracy.png").exists()
    capsys.readouterr()

    assert main(["compare", str(results), "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    assert [line.split(",")[0] for line in out.splitlines()[1:]] == ["local"]
    assert err.splitlines() == [
        f"{results}: 3 run folders of an earlier study left out (not in its study.json, or "
        "other settings): fedavg@seed=1, fedavg@seed=2, local@seed=2; name a run folder to "
        "read it"
    ]
    named = [str(results / "fedavg@seed=1"), str(results / "local@seed=1")]
    assert main(["compare", *named, "--format", "csv"]) == 0  # named: read whatever they are
    out, err = capsys.readouterr()
    assert [line.split(",")[0] for line in out.splitlines()[1:]] == ["fedavg", "local"]
    assert err == ""


def test_resume_refuses_runs_of_other_settings_and_keeps_those_of_the_same(tmp_path, capsys):
    path = two_algorithms(tmp_path)
    assert main(["run", str(path), "--quiet", "--only", "local"]) == 0
    results = tmp_path / "results" / "tiny"
    manifest = (results / "study.json").read_text()
    capsys.readouterr()

    assert main(["run", str(path), "--quiet", "--resume", "--set", "run.rounds=3"]) == 2
    error = capsys.readouterr().err
    assert "--resume" in error and "Traceback" not in error
    assert "local@seed=1: run.rounds is 2 there, 3 now" in error
    assert "local@seed=2: run.rounds is 2 there, 3 now" in error
    assert (results / "study.json").read_text() == manifest  # nothing started

    metrics = results / "local@seed=1" / "metrics.csv"
    written = metrics.stat().st_mtime_ns
    # the same settings under another spelling of the same results root: kept
    moved = ["--output", f"{tmp_path}/./results"]
    assert main(["run", str(path), "--quiet", "--resume", *moved]) == 0
    err = capsys.readouterr().err
    assert "2 run folders of complete runs with the same settings are kept (--resume)" in err
    assert metrics.stat().st_mtime_ns == written
    assert list(json.loads((results / "study.json").read_text())["runs"]) == [
        "fedavg@seed=1", "local@seed=1", "fedavg@seed=2", "local@seed=2"
    ]  # fmt: skip


def test_scenario_errors_cross_process_boundaries_whole():
    """A worker's ScenarioError reaches the study whole: unpickling one used to fail (it was
    rebuilt from its message alone), which left `fedsim run --workers N` hanging."""
    error = pickle.loads(pickle.dumps(ScenarioError("training.device", ["training.device: no"])))
    assert (error.source, error.problems) == ("training.device", ["training.device: no"])


# --- determinism switches: set in every process that trains, before it uses CUDA ---


def determinism_switches() -> tuple:
    """In the process that calls it: the cuBLAS workspace variable and torch's switches."""
    return (
        os.environ.get(CUBLAS_WORKSPACE_VARIABLE),
        torch.are_deterministic_algorithms_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
    )


@pytest.mark.parametrize("deterministic", [True, False])
def test_a_worker_sets_the_determinism_switches_before_it_trains(
    tmp_path, monkeypatch, deterministic
):
    """What a pool worker (and a Ray task, which runs the same ``_work``) has when it trains."""
    monkeypatch.delenv(CUBLAS_WORKSPACE_VARIABLE, raising=False)  # the worker inherits none
    data = tiny_scenario(tmp_path, training={"deterministic": deterministic}, run={"rounds": 1})
    [job] = plan(parse_scenario(data))
    with multiprocessing.get_context("spawn").Pool(1, _start_worker, (None,)) as pool:
        assert pool.apply(determinism_switches)[0] is None
        assert pool.apply(_work, (job.payload(),)) == job.label
        switches = pool.apply(determinism_switches)
    if deterministic:
        assert switches == (":4096:8", True, True, False)
    else:
        assert switches == (None, False, False, True)


def test_a_run_in_this_process_sets_the_switches_of_its_scenario(tmp_path, monkeypatch):
    monkeypatch.delenv(CUBLAS_WORKSPACE_VARIABLE, raising=False)
    for deterministic in (False, True):
        data = tiny_scenario(tmp_path, training={"deterministic": deterministic})
        run_study(parse_scenario({**data, "run": {"rounds": 1}}), show_progress=False)
        switches = determinism_switches()
        assert switches[1:] == (deterministic, deterministic, not deterministic)
    assert os.environ[CUBLAS_WORKSPACE_VARIABLE] == ":4096:8"
