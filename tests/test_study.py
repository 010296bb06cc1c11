"""A study's runs on worker processes, on Ray and resumed after SIGTERM give the same files
as one after another in one process."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from fedsim.cli import main
from fedsim.config import ScenarioError, parse_scenario
from fedsim.study import run_study
from tests.conftest import tiny_scenario


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


def test_a_sweep_stopped_by_sigterm_and_resumed_equals_an_uninterrupted_one(tmp_path):
    rounds = 40  # each run lasts a second or two: the signal lands inside one
    whole = run_study(parse_scenario(sweep(tmp_path, "whole", rounds)), show_progress=False)
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(sweep(tmp_path, "cut", rounds)))
    command = [sys.executable, "-m", "fedsim", "run", str(path), "--quiet"]
    env = {**os.environ, "MPLBACKEND": "Agg"}
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    second = tmp_path / "cut" / "tiny" / "fedavg@seed=2" / "metrics.csv"
    while process.poll() is None and not (second.exists() and second.read_text().count("\n") > 2):
        time.sleep(0.05)  # until the second run has measured something
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode != 0
    assert b"Traceback" not in stderr and b"interrupted" in stderr
    summaries = [json.loads(p.read_text()) for p in (tmp_path / "cut").rglob("summary.json")]
    assert any(s["complete"] is False for s in summaries)  # the run cut short says so
    resumed = subprocess.run([*command, "--resume"], env=env, capture_output=True, check=True)
    assert b"Traceback" not in resumed.stderr
    assert files_of(tmp_path / "cut" / "tiny") == files_of(whole)


def test_workers_must_be_at_least_one(tmp_path, capsys):
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(sweep(tmp_path, "x")))
    assert main(["run", str(path), "--quiet", "--workers", "0"]) == 2
    assert "--workers" in capsys.readouterr().err


def test_scenario_errors_cross_process_boundaries_whole():
    """A worker's ScenarioError reaches the study whole: unpickling one used to fail (it was
    rebuilt from its message alone), which left `fedsim run --workers N` hanging."""
    error = pickle.loads(pickle.dumps(ScenarioError("training.device", ["training.device: no"])))
    assert (error.source, error.problems) == ("training.device", ["training.device: no"])
