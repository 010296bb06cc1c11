"""What a newcomer types wrong: a folder that cannot be written, a quoted number, a union's
value, several --set; each is one line naming the field or the path, exit 2, found before any
work starts (and before torch is imported)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fedsim.cli import main
from fedsim.config import ScenarioError, load_scenario, parse_scenario
from tests.conftest import run_python, tiny_scenario


def _write(tmp_path: Path, data: dict, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def unwritable(tmp_path: Path) -> Iterator[Path]:
    """A folder that refuses new files even to root: read-only by its bits, and immutable
    where the bits do not stop us (root); skipped where neither can be had."""
    folder = tmp_path / "locked"
    folder.mkdir()
    (folder / "old.txt").write_text("kept")
    folder.chmod(0o555)
    immutable = False
    if _takes_files(folder) and shutil.which("chattr"):
        immutable = (
            subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0
        )
    try:
        if _takes_files(folder):
            pytest.skip("no way to make a folder read-only here")
        yield folder
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        folder.chmod(0o755)


def _takes_files(folder: Path) -> bool:
    try:
        (folder / "probe").write_text("")
    except OSError:
        return False
    (folder / "probe").unlink()
    return True


def _error(capsys, *argv: str) -> list[str]:
    assert main(list(argv)) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return captured.err.strip().splitlines()


def test_every_command_refuses_an_unwritable_folder_before_any_work(tmp_path, unwritable, capsys):
    scenario = _write(tmp_path, tiny_scenario(tmp_path))
    cannot = f"{unwritable} cannot be written"
    err = _error(capsys, "run", str(scenario), "--output", str(unwritable / "out"))
    assert err[1].startswith(f"  --output: {cannot}") and "out/tiny cannot be made" in err[1]
    err = _error(capsys, "validate", str(scenario), "--set", f"output.dir={unwritable}")
    assert err[1].startswith(f"  output.dir: {cannot}")
    assert _error(capsys, "budget", str(scenario), "--json", str(unwritable / "b.json")) == [
        f"error: --json: {cannot} ({os.strerror(_refusal(unwritable))})"
    ]
    results = tmp_path / "results" / "tiny"
    assert main(["run", str(scenario), "--quiet"]) == 0
    capsys.readouterr()
    err = _error(capsys, "plot", str(results), "--out", str(unwritable / "plots"))
    assert err[1].startswith(f"  --out: {cannot}")
    err = _error(capsys, "compare", str(results), "--out", str(unwritable / "table.md"))
    assert err[1].startswith(f"  --out: {cannot}")
    assert (unwritable / "old.txt").read_text() == "kept" and not (unwritable / "out").exists()


def test_an_existing_results_folder_that_cannot_be_written_is_refused(tmp_path, unwritable, capsys):
    data = tiny_scenario(tmp_path)
    data["output"] = {"dir": str(unwritable.parent)}
    data["name"] = unwritable.name  # the results go into the locked folder itself
    err = _error(capsys, "run", str(_write(tmp_path, data)))
    assert err[1].startswith(f"  output.dir: {unwritable} cannot be written")


def _refusal(folder: Path) -> int:
    try:
        (folder / "probe").write_text("")
    except OSError as error:
        return error.errno
    raise AssertionError("the folder took a file")


def test_run_and_budget_report_bad_input_without_importing_torch(tmp_path):
    bad = _write(tmp_path, {**tiny_scenario(tmp_path), "rounds": 3})
    for command in ("run", "budget"):
        probe = (
            "import sys; from fedsim.cli import main; "
            f"code = main([{command!r}, {str(bad)!r}]); "
            "print(code, 'torch' in sys.modules)"
        )
        done = run_python("-c", probe)
        assert done.stdout.split() == ["2", "False"], (command, done.stderr)
        assert "rounds: unknown key" in done.stderr


def test_a_problem_that_names_its_source_is_not_prefixed_twice(tmp_path, capsys):
    data = tiny_scenario(tmp_path)
    data["dataset"] = {"name": "mnist", "root": str(tmp_path / "nowhere"), "num_samples": 1200}
    err = _error(capsys, "run", str(_write(tmp_path, data)))
    assert err == [
        f"error: {tmp_path / 's.yaml'}:",
        f"  dataset.root: {tmp_path / 'nowhere'} does not exist: correct the path or create the "
        "folder (fedsim creates only the default ./data, for a download)",
    ]
    good = _write(tmp_path, tiny_scenario(tmp_path), "good.yaml")
    assert _error(capsys, "run", str(good), "--workers", "0") == [
        "error: --workers: at least 1, got 0"
    ]


def test_a_number_given_as_text_is_refused_and_an_exponent_is_a_number(tmp_path):
    data = tiny_scenario(tmp_path, algorithms=[{"name": "fedavg", "deadline_s": "4"}])
    with pytest.raises(ScenarioError) as refused:
        parse_scenario(data)
    assert refused.value.problems == [
        "algorithms[0].deadline_s: Input should be a number, not text ('4'): write it without "
        "quotes"
    ]
    text = yaml.safe_dump(tiny_scenario(tmp_path)).replace("rounds: 3", "rounds: 1e1")
    (tmp_path / "e.yaml").write_text(text.replace("uplink_mbps: 1.0", "uplink_mbps: 2e0"))
    scenario = load_scenario(tmp_path / "e.yaml")
    assert scenario.system.network.uplink_mbps.value == 2.0
    with pytest.raises(ScenarioError) as refused:  # 1e1 is the float 10.0, no whole number
        load_scenario(tmp_path / "e.yaml", ["run.rounds=3", "evaluation.every_rounds='2'"])
    assert refused.value.problems[0].startswith("evaluation.every_rounds: Input should be a number")
    assert refused.value.source.endswith(
        "with --set run.rounds=3 --set evaluation.every_rounds='2'"
    )


def test_a_union_of_a_number_and_a_word_is_one_line(tmp_path):
    data = tiny_scenario(tmp_path, training={"vmap_chunk": -3})
    with pytest.raises(ScenarioError) as refused:
        parse_scenario(data)
    assert refused.value.problems == [
        "training.vmap_chunk: Input should be greater than 0, or 'auto' (got -3)"
    ]


def test_a_bound_says_why_it_is_there(tmp_path):
    data = tiny_scenario(tmp_path, system={"network": {"uplink_mbps": 1e-6, "latency_s": 120}})
    with pytest.raises(ScenarioError) as refused:
        parse_scenario(data)
    rate, latency = refused.value.problems
    assert rate.startswith("system.network.uplink_mbps: Input should be greater than or equal to")
    assert "LoRa" in rate
    assert latency.startswith("system.network.latency_s: Input should be less than or equal to 60")
    assert "satellite" in latency


def test_a_budget_of_a_model_mix_names_every_architecture(tmp_path, capsys):
    data = tiny_scenario(tmp_path, algorithms=[{"name": "local"}])
    data["model"] = {
        "mix": [
            {"name": "mlp", "fraction": 0.25, "hidden_sizes": [8]},
            {"name": "mlp", "fraction": 0.75, "hidden_sizes": [64]},
        ]
    }
    assert main(["budget", str(_write(tmp_path, data)), "--rounds", "1"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert header.startswith("scenario tiny: 6 clients, models mlp 25%, mlp 75% (")
    assert "None" not in header
