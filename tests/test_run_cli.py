"""`fedsim run` as a user types it: thread count, interrupted runs, version."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
import yaml

import analysis.figures
import analysis.style
from fedsim import __version__
from fedsim.cli import THREADS_ENV_VAR, main
from fedsim.results.files import METRICS_COLUMNS
from fedsim.results.recorder import Recorder
from tests.conftest import start_python, tiny_scenario


def write_scenario(tmp_path: Path, **overrides: object) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(tiny_scenario(tmp_path, **overrides)))
    return path


def resolved_threads(tmp_path: Path, label: str = "fedavg") -> int:
    resolved = yaml.safe_load((tmp_path / "results" / "tiny" / label / "scenario.yaml").read_text())
    return resolved["training"]["threads"]


@pytest.mark.parametrize(
    ("in_file", "env", "flag", "expected"),
    [(None, None, None, 1), (3, None, None, 3), (3, "2", None, 2), (3, "2", 4, 4)],
)
def test_thread_count_defaults_to_one_is_overridden_and_recorded(
    tmp_path, monkeypatch, in_file, env, flag, expected
):
    path = write_scenario(tmp_path, training={} if in_file is None else {"threads": in_file})
    if env is None:
        monkeypatch.delenv(THREADS_ENV_VAR, raising=False)
    else:
        monkeypatch.setenv(THREADS_ENV_VAR, env)
    seen: list[int] = []
    original = Recorder.add_training

    def note_threads(self, mean_loss: float, samples: int) -> None:
        seen.append(torch.get_num_threads())
        original(self, mean_loss, samples)

    monkeypatch.setattr(Recorder, "add_training", note_threads)
    before = torch.get_num_threads()
    flags = [] if flag is None else ["--threads", str(flag)]
    assert main(["run", str(path), "--quiet", *flags]) == 0
    assert set(seen) == {expected}  # what torch trained with
    assert resolved_threads(tmp_path) == expected  # and what the run folder says
    assert torch.get_num_threads() == before  # the caller's setting is given back


@pytest.mark.parametrize(("env", "flag"), [("two", None), (None, 0)])
def test_a_bad_thread_count_is_refused(tmp_path, monkeypatch, capsys, env, flag):
    path = write_scenario(tmp_path)
    if env is None:
        monkeypatch.delenv(THREADS_ENV_VAR, raising=False)
    else:
        monkeypatch.setenv(THREADS_ENV_VAR, env)
    flags = [] if flag is None else ["--threads", str(flag)]
    assert main(["run", str(path), "--quiet", *flags]) == 2
    error = capsys.readouterr().err
    assert (THREADS_ENV_VAR if env else "--threads") in error and "Traceback" not in error


def test_an_interrupted_scenario_redraws_its_plots_with_the_cut_run_marked(
    tmp_path, monkeypatch, capsys
):
    path = write_scenario(
        tmp_path, algorithms=[{"name": "local"}, {"name": "fedavg"}], run={"rounds": 4}
    )
    original = Recorder.log_evaluation

    def cut_after_two(self, time_s, round_index, scores, participants):
        row = original(self, time_s, round_index, scores, participants)
        if self.label == "fedavg" and round_index == 2:
            raise KeyboardInterrupt
        return row

    drawn: list[list[str]] = []
    plot_runs = analysis.figures.plot_runs

    def record(runs, out_dir, target_accuracy=None):
        drawn.append([analysis.style.run_name(run) for run in runs])
        return plot_runs(runs, out_dir, target_accuracy)

    monkeypatch.setattr(Recorder, "log_evaluation", cut_after_two)
    monkeypatch.setattr(analysis.figures, "plot_runs", record)
    assert main(["run", str(path), "--quiet"]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert drawn == [["local"], ["local", "fedavg (incomplete)"]]
    assert (tmp_path / "results" / "tiny" / "time_to_accuracy.png").stat().st_size > 0


def test_version(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"fedsim {__version__}"


@pytest.mark.parametrize("command", ["run", "budget"])
def test_a_d2d_graph_that_cannot_be_connected_is_a_clear_error(tmp_path, capsys, command):
    path = write_scenario(
        tmp_path,
        clients={"count": 30},
        system={"d2d": {"graph": "erdos_renyi", "p": 0.001}},
        algorithms=[{"name": "dsgd"}],
    )
    assert main([command, str(path), *(["--quiet"] if command == "run" else [])]) == 2
    error = capsys.readouterr().err
    assert "system.d2d.graph" in error and "disconnected" in error and "Traceback" not in error


@pytest.mark.parametrize(
    ("argv", "named", "where"),
    [
        (["run", "{scenario}", "--quiet", "--output", "{file}"], "--output", "{file}"),
        (["run", "{scenario}", "--quiet", "--output", "{file}/sub"], "--output", "{file}"),
        (["run", "{scenario}", "--quiet"], "output.dir", "{out}/tiny"),
        (["validate", "{scenario}"], "output.dir", "{out}/tiny"),
        (["validate", "{scenario}", "--set", "output.dir={file}"], "output.dir", "{file}"),
        (["plot", "{run}", "--out", "{file}"], "--out", "{file}"),
    ],
)
def test_a_results_path_that_is_a_file_is_named_not_a_traceback(
    tmp_path, capsys, argv, named, where
):
    """--output or output.dir (or the scenario's folder in it) being a file, or plot's --out."""
    path = write_scenario(tmp_path)
    out = tmp_path / "results"
    places = {"scenario": path, "file": tmp_path / "afile", "out": out, "run": tmp_path / "run"}
    places["file"].write_text("not a folder")
    run = places["run"]
    run.mkdir()
    (run / "metrics.csv").write_text(",".join(METRICS_COLUMNS) + "\n")
    if named == "output.dir":
        out.mkdir()
        (out / "tiny").write_text("a file named like the scenario")
    assert main([arg.format(**places) for arg in argv]) == 2
    error = capsys.readouterr().err
    assert f"{named}: {where.format(**places)} is a file, not a folder" in error
    assert "Traceback" not in error
    assert not list(tmp_path.rglob("study.json"))  # no study started


def test_check_events_tells_a_file_that_is_no_event_log_from_a_log_with_violations(
    tmp_path, capsys
):
    yaml_file, empty, bad_log = tmp_path / "s.yaml", tmp_path / "e.jsonl", tmp_path / "b.jsonl"
    yaml_file.write_text("name: tiny\nseed: 3\n")
    empty.write_text("\n")
    bad_log.write_text('{"t": 1, "kind": "run_start", "clients": [0]}\n{"t": 0, "kind": "x"}\n')
    for path in (yaml_file, empty):
        assert main(["check-events", str(path)]) == 2
        error = capsys.readouterr().err
        assert f"error: {path}:" in error and "not an events file" in error
    assert main(["check-events", str(bad_log)]) == 1
    assert "time goes backwards" in capsys.readouterr().out


@pytest.mark.parametrize("command", [["schema"], ["budget", "SCENARIO"]])
def test_a_reader_that_leaves_early_ends_the_command_quietly(tmp_path, command):
    """`fedsim schema | head -1`: the pipe closes under the writer; no traceback, exit 141."""
    path = write_scenario(tmp_path)
    args = [str(path) if arg == "SCENARIO" else arg for arg in command]
    process = start_python(
        "-m", "fedsim", *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )  # fmt: skip
    assert process.stdout.readline()  # as head -1 does: one line, then the pipe is closed
    process.stdout.close()
    stderr = process.stderr.read().decode()
    process.wait()
    assert process.returncode in (0, 141)  # 0: everything fitted in the pipe before it closed
    assert stderr == ""


def test_a_writer_whose_pipe_is_closed_exits_141_without_a_traceback(monkeypatch, capsys):
    """What a full pipe does when its reader left: print raises BrokenPipeError."""

    def closed_pipe(args: object) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("fedsim.cli._schema", closed_pipe)
    monkeypatch.setattr("fedsim.cli._discard_stdout", lambda: None)  # pytest owns stdout
    assert main(["schema"]) == 141
    assert capsys.readouterr().err == ""


def test_a_budget_trains_nothing_so_a_gpu_scenario_budgets_without_one(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    path = write_scenario(tmp_path, training={"device": "cuda", "precision": "fp16"})
    assert main(["run", str(path), "--quiet"]) == 2  # training does need the GPU
    assert "training.device: cuda, but this machine has no CUDA device" in capsys.readouterr().err
    assert main(["budget", str(path)]) == 0
    assert "fedavg" in capsys.readouterr().out


def test_a_budget_whose_server_never_steps_says_so_instead_of_dividing_by_one_round(
    tmp_path, capsys
):
    """FedBuff's buffer of 100 is never filled by 6 clients in 20 simulated seconds."""
    algorithm = {"name": "fedbuff", "max_concurrency": 6, "buffer_size": 100}
    path = write_scenario(
        tmp_path, algorithms=[algorithm], run={"rounds": None, "time_budget_s": 20.0},
        evaluation={"every_rounds": None, "every_s": 5.0},
    )  # fmt: skip
    out = tmp_path / "budget.json"
    assert main(["budget", str(path), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    [budget] = json.loads(out.read_text())
    assert budget["rounds"] == 0 and budget["uplink_bytes"] > 0  # updates went up, unused
    assert budget["uplink_bytes_per_round"] is None and budget["participants_per_round"] is None
    assert budget["simulated_s"] == pytest.approx(20.0)
    [row] = [line for line in text.splitlines() if line.split()[:2] == ["fedbuff", "0"]]
    assert row.split()[2] == "n/a"  # kept per round
    assert "fedbuff: the server never stepped: no round completed in the 20.0 s simulated" in text
