"""Scenario schema and the CLI's handling of bad input."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fedsim.config import (
    _TAG_MODELS,
    Scenario,
    ScenarioError,
    load_scenario,
    parse_scenario,
)
from tests.conftest import REPO, tiny_scenario


def write(tmp_path: Path, data: dict | str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def problems_of(data: dict) -> list[str]:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(data)
    return caught.value.problems


def test_defaults_are_filled_in(tmp_path):
    scenario = parse_scenario(tiny_scenario(tmp_path))
    assert scenario.training.local_epochs == 1
    assert scenario.system.network.uplink_medium == "parallel"
    assert scenario.system.network.uplink_mbps.kind == "constant"
    assert scenario.algorithms[0].run_label == "fedavg"


def test_unknown_key_names_the_field_and_suggests(tmp_path):
    data = tiny_scenario(tmp_path, dataset={"partiton": {"kind": "iid"}})
    [problem] = problems_of(data)
    assert problem.startswith("dataset.partiton: unknown key")
    assert "did you mean 'partition'" in problem


def test_key_of_another_partition_kind_is_rejected(tmp_path):
    data = tiny_scenario(tmp_path, dataset={"partition": {"kind": "dirichlet", "groups": 3}})
    [problem] = problems_of(data)
    assert problem.startswith("dataset.partition.groups: unknown key")


def test_wrong_type_and_negative_rate(tmp_path):
    data = tiny_scenario(
        tmp_path, clients={"count": "many"}, system={"network": {"uplink_mbps": -2}}
    )
    problems = problems_of(data)
    assert any(p.startswith("clients.count:") and "integer" in p for p in problems)
    assert any(
        p.startswith("system.network.uplink_mbps:") and "greater than 0" in p for p in problems
    )


def test_unknown_algorithm_lists_choices(tmp_path):
    data = tiny_scenario(tmp_path, algorithms=[{"name": "fedavgg"}])
    [problem] = problems_of(data)
    assert problem.startswith("algorithms[0].name: unknown 'fedavgg'")
    assert "'fedavg'" in problem


def test_duplicate_labels_and_unbounded_run(tmp_path):
    data = tiny_scenario(tmp_path, algorithms=[{"name": "fedavg"}, {"name": "fedavg"}], run={})
    data["run"] = {}
    problems = problems_of(data)
    assert any(p.startswith("algorithms:") and "label" in p for p in problems)
    assert any(p.startswith("run:") for p in problems)


def test_rate_laws(tmp_path):
    data = tiny_scenario(
        tmp_path, system={"network": {"uplink_mbps": {"kind": "uniform", "low": 1, "high": 5}}}
    )
    law = parse_scenario(data).system.network.uplink_mbps
    import numpy as np

    draws = law.sample(np.random.default_rng(0), 1000)
    assert draws.min() >= 1 and draws.max() <= 5 and abs(draws.mean() - 3) < 0.2
    bad = tiny_scenario(
        tmp_path, system={"network": {"uplink_mbps": {"kind": "uniform", "low": 5, "high": 1}}}
    )
    assert "must be >= low" in problems_of(bad)[0]


def test_union_tags_never_shadow_field_names():
    """The error formatter drops union tags from paths; a field with a tag's name would vanish."""

    def fields(model, seen):
        for name, field in model.model_fields.items():
            seen.add(name)
            for arg in getattr(field.annotation, "__args__", ()) or (field.annotation,):
                if isinstance(arg, type) and hasattr(arg, "model_fields") and arg not in seen:
                    seen.add(arg)
                    fields(arg, seen)
        return seen

    names = fields(Scenario, set())
    for model in _TAG_MODELS.values():
        names |= set(model.model_fields)
    assert not (set(_TAG_MODELS) & {n for n in names if isinstance(n, str)})


def test_yaml_errors_name_the_line(tmp_path):
    path = write(tmp_path, "name: x\nseed: [1,\n")
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert "invalid YAML: line" in caught.value.problems[0]
    twice = write(tmp_path, "name: x\nname: y\n", "twice.yaml")
    with pytest.raises(ScenarioError) as caught:
        load_scenario(twice)
    assert "'name' appears twice" in caught.value.problems[0]
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "missing.yaml")


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fedsim", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ({"dataset": {"nme": "mnist"}}, "dataset.nme: unknown key"),
        ({"clients": {"count": "ten"}}, "clients.count:"),
        ({"system": {"network": {"uplink_mbps": -1}}}, "system.network.uplink_mbps:"),
    ],
)
def test_cli_validate_reports_field_and_exits_2(tmp_path, override, expected):
    path = write(tmp_path, tiny_scenario(tmp_path, **override))
    result = run_cli("validate", str(path))
    assert result.returncode == 2
    assert expected in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_validate_accepts_every_shipped_scenario():
    files = sorted(str(p) for p in (REPO / "scenarios").glob("*.yaml"))
    assert files, "no scenarios shipped"
    result = run_cli("validate", *files)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(": ok") == len(files)


def test_cli_run_with_missing_data_is_a_clear_error(tmp_path):
    data = tiny_scenario(
        tmp_path, dataset={"name": "mnist", "download": False, "root": str(tmp_path / "nowhere")}
    )
    result = run_cli("run", str(write(tmp_path, data)), "--quiet")
    assert result.returncode == 2
    assert "dataset:" in result.stderr and "nowhere" in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_run_rejects_a_bad_thread_count(tmp_path):
    result = run_cli("run", str(write(tmp_path, tiny_scenario(tmp_path))), "--threads", "0")
    assert result.returncode == 2
    assert "--threads" in result.stderr and "Traceback" not in result.stderr


def test_cli_run_over_seeds_prints_each_run_and_the_mean_over_seeds(tmp_path):
    data = tiny_scenario(tmp_path, algorithms=[{"name": "local"}], sweep={"seed": [1, 2]})
    result = run_cli("run", str(write(tmp_path, data)), "--quiet", "--threads", "1")
    assert result.returncode == 0, result.stderr
    finals = [float(x) for x in re.findall(r"local@seed=\d: final ([\d.]+)%", result.stdout)]
    assert len(finals) == 2
    mean = re.search(r"local: final ([\d.]+) ± ([\d.]+)% .* over 2 seeds", result.stdout)
    assert mean is not None, result.stdout
    assert float(mean[1]) == pytest.approx(sum(finals) / 2, abs=0.06)
