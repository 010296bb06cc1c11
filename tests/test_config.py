"""Scenario schema and the CLI's handling of bad input."""

from __future__ import annotations

import json
import math
import re
import types
import typing
from pathlib import Path

import annotated_types
import pytest
import yaml
from pydantic import BaseModel, Field, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from fedsim.cli import main
from fedsim.config import (
    _TAG_MODELS,
    ALGORITHM_NAMES,
    MAX_CLIENTS,
    Constant,
    Scenario,
    ScenarioError,
    Uniform,
    load_scenario,
    parse_scenario,
)
from fedsim.config.base import BOOL_NOT_NUMBER
from fedsim.config.errors import TAGGED_UNIONS
from tests.conftest import (
    DATA_ROOT,
    REPO,
    requires_real_data,
    run_fedsim,
    run_python,
    tiny_scenario,
)


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


def test_train_fractions_must_fit_beside_the_test_share(tmp_path):
    ok = tiny_scenario(tmp_path, dataset={"test_fraction": 0.5, "train_fractions": [0.1, 0.5]})
    assert parse_scenario(ok).dataset.train_fractions == [0.1, 0.5]
    data = tiny_scenario(tmp_path, dataset={"test_fraction": 0.5, "train_fractions": [0.1, 0.6]})
    [problem] = problems_of(data)
    assert problem.startswith("dataset.train_fractions: 0.6 plus test_fraction")
    [problem] = problems_of(tiny_scenario(tmp_path, dataset={"train_fractions": [0]}))
    assert problem.startswith("dataset.train_fractions[0]: Input should be greater than 0")


def test_wrong_type_and_negative_rate(tmp_path):
    data = tiny_scenario(
        tmp_path, clients={"count": "many"}, system={"network": {"uplink_mbps": -2}}
    )
    problems = problems_of(data)
    assert any(p.startswith("clients.count:") and "integer" in p for p in problems)
    assert any(
        p.startswith("system.network.uplink_mbps:") and "greater than or equal to" in p
        for p in problems
    )


def test_unknown_algorithm_lists_choices(tmp_path):
    data = tiny_scenario(tmp_path, algorithms=[{"name": "fedavgg"}])
    [problem] = problems_of(data)
    assert problem.startswith("algorithms[0].name: unknown 'fedavgg' (did you mean 'fedavg'?); ")
    assert "valid: 'local', 'fedavg', 'fedavgm'," in problem


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        (
            {"dataset": {"partition": {"kind": "dirichle"}}},
            "dataset.partition.kind: unknown 'dirichle' (did you mean 'dirichlet'?); valid: 'iid'",
        ),
        (  # a power law's tags, not the rate laws' ones of the same names
            {"system": {"radio": {"tx_power_dbm": {"kind": "normall", "mean_dbm": 1}}}},
            "system.radio.tx_power_dbm.kind: unknown 'normall' (did you mean 'normal'?); valid: "
            "'constant', 'uniform', 'normal'",
        ),
        ({"algorithms": [{"name": "bogus"}]}, "algorithms[0].name: unknown 'bogus'; valid: "),
        ({"algorithms": [{"name": 5}]}, "algorithms[0].name: unknown '5'; valid: "),
    ],
)
def test_an_unknown_kind_or_name_suggests_the_closest(tmp_path, override, expected):
    [problem] = problems_of(tiny_scenario(tmp_path, **override))
    assert problem.startswith(expected)


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


def _tagged_unions(root: type[BaseModel]) -> list[tuple[str, tuple[type[BaseModel], ...]]]:
    """(tag field, members) of every discriminated union reachable from root."""
    unions = []
    for model in _models(root):
        for field in model.model_fields.values():
            if field.discriminator:
                unions.append((field.discriminator, tuple(_member_models(field.annotation))))
            unions += _annotated_unions(field.annotation)
    return unions


def _annotated_unions(annotation: object) -> list[tuple[str, tuple[type[BaseModel], ...]]]:
    """The discriminated unions nested in an annotation (``list[AlgorithmConfig]``)."""
    found = []
    if typing.get_origin(annotation) is typing.Annotated:
        inner, *metadata = typing.get_args(annotation)
        found += [
            (info.discriminator, tuple(_member_models(inner)))
            for info in metadata
            if isinstance(info, FieldInfo) and info.discriminator
        ]
    return found + [u for arg in typing.get_args(annotation) for u in _annotated_unions(arg)]


def test_every_member_of_every_tagged_union_is_in_the_tag_registry():
    """Error paths drop union tags and list valid keys through the registry: a union or a
    member it did not know (a new path-loss model, say) would get wrong paths and key lists."""
    unions = _tagged_unions(Scenario)
    assert {frozenset(members) for _, members in unions} == {
        frozenset(members) for members, _ in TAGGED_UNIONS
    }
    for discriminator, members in unions:
        for member in members:
            (tag,) = typing.get_args(member.model_fields[discriminator].annotation)
            registered = _TAG_MODELS.get(tag)
            assert registered is not None, f"{member.__name__}: tag {tag!r} is not registered"
            assert typing.get_args(registered.model_fields[discriminator].annotation) == (tag,)
    assert _TAG_MODELS["constant"] is Constant and _TAG_MODELS["uniform"] is Uniform  # rates
    assert tuple(tag for tag in _TAG_MODELS if tag in ALGORITHM_NAMES) == ALGORITHM_NAMES


def test_the_schema_imports_neither_the_simulator_nor_torch():
    """Validation reads the system model's files with fedsim.sim.readers, without simpy."""
    code = "import sys, fedsim.config; print(sorted({'simpy', 'torch'} & set(sys.modules)))"
    done = run_python("-c", code)
    assert done.returncode == 0 and done.stdout.strip() == "[]"


def test_yaml_errors_name_the_line(tmp_path):
    path = write(tmp_path, "name: x\nseed: [1,\n")
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert "invalid YAML: line" in caught.value.problems[0]
    twice = write(tmp_path, "name: x\nseed: 1\nrun:\n  rounds: 2\n  rounds: 3\n", "twice.yaml")
    with pytest.raises(ScenarioError) as caught:
        load_scenario(twice)
    assert caught.value.problems == [
        "invalid YAML: line 5, column 3: key 'rounds' appears twice: lines 4 and 5"
    ]
    with pytest.raises(ScenarioError) as caught:
        load_scenario(write(tmp_path, tiny_scenario(tmp_path)), ["run={rounds: 2, rounds: 3}"])
    assert "key 'rounds' appears twice on line 1" in caught.value.problems[0]
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "missing.yaml")


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
    result = run_fedsim("validate", str(path))
    assert result.returncode == 2
    assert expected in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_validate_accepts_every_shipped_scenario():
    files = sorted(str(p) for p in (REPO / "scenarios").glob("*.yaml"))
    files += sorted(str(p) for p in (REPO / "scenarios" / "papers").glob("*.yaml"))
    assert files, "no scenarios shipped"
    assert any("papers" in f for f in files)
    result = run_fedsim("validate", *files)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(": ok") == len(files)


def test_cli_run_with_missing_data_is_a_clear_error(tmp_path):
    data = tiny_scenario(
        tmp_path, dataset={"name": "mnist", "download": False, "root": str(tmp_path / "nowhere")}
    )
    result = run_fedsim("run", str(write(tmp_path, data)), "--quiet")
    assert result.returncode == 2
    assert "  dataset.root: " in result.stderr and "nowhere does not exist" in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_run_rejects_a_bad_thread_count(tmp_path):
    result = run_fedsim("run", str(write(tmp_path, tiny_scenario(tmp_path))), "--threads", "0")
    assert result.returncode == 2
    assert "--threads" in result.stderr and "Traceback" not in result.stderr


def test_cli_run_over_seeds_prints_each_run_and_the_mean_over_seeds(tmp_path):
    data = tiny_scenario(tmp_path, algorithms=[{"name": "local"}], sweep={"seed": [1, 2]})
    result = run_fedsim("run", str(write(tmp_path, data)), "--quiet", "--threads", "1")
    assert result.returncode == 0, result.stderr
    finals = [float(x) for x in re.findall(r"local@seed=\d: final ([\d.]+)%", result.stdout)]
    assert len(finals) == 2
    mean = re.search(r"local: final ([\d.]+) ± ([\d.]+)% .* over 2 seeds", result.stdout)
    assert mean is not None, result.stdout
    assert float(mean[1]) == pytest.approx(sum(finals) / 2, abs=0.06)


# --- bad input: every problem is exit code 2 and a message naming the field, never a traceback


def cli(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    """fedsim in this process: exit code, stdout, stderr (argparse's usage errors included)."""
    try:
        code = main(list(argv))
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys: pytest.CaptureFixture, path: Path, *expected: str, command: str = "validate"):
    """Assert that the command exits 2, names each expected text on stderr, and shows no
    traceback; returns stderr."""
    code, out, err = cli(capsys, command, str(path))
    assert code == 2, (out, err)
    for text in expected:
        assert text in err, err
    assert "Traceback" not in out + err
    return err


def test_a_binary_file_is_not_a_scenario(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_bytes(b"\xff\xfe\x00\x01name: x\n")
    refused(capsys, path, str(path), "not a UTF-8 text file")


def test_a_key_that_is_a_list_or_a_mapping_is_a_yaml_error(tmp_path, capsys):
    refused(capsys, write(tmp_path, "name: x\n[a, b]: 1\n"), "line 2", "a key must be a plain")
    refused(capsys, write(tmp_path, "name: x\n? {a: 1}\n: 1\n"), "not a dict")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "(top level): the scenario is empty"),
        ("- name: x\n", "(top level): a scenario must be a mapping of keys, not a list"),
        ("just words\n", "not a single value"),
        ("name: x\n---\nname: y\n", "invalid YAML"),
        ("[" * 3000, "invalid YAML"),  # nested deeper than the parser's recursion
        ("seed: " + "9" * 5000 + "\n", "invalid YAML"),  # over Python's int-parsing limit
        ("a: &x [*x]\n", "a: unknown key"),  # a list that contains itself
    ],
)
def test_documents_that_are_not_scenarios(tmp_path, capsys, text, expected):
    refused(capsys, write(tmp_path, text), expected)


def test_a_folder_or_a_missing_file_is_named(tmp_path, capsys):
    refused(capsys, tmp_path, str(tmp_path), "cannot read the file")
    refused(capsys, tmp_path / "missing.yaml", "missing.yaml", "cannot read the file")


@pytest.mark.parametrize("count", [10**30, 1e30, 1e308, MAX_CLIENTS + 1])
def test_client_counts_are_bounded_whether_written_as_int_or_float(tmp_path, capsys, count):
    path = write(tmp_path, tiny_scenario(tmp_path, clients={"count": count}))
    refused(capsys, path, "clients.count:")
    refused(capsys, path, "clients.count:", command="budget")  # refused before any work


def test_clients_and_their_reserve_are_bounded_together(tmp_path, capsys):
    clients = {"count": MAX_CLIENTS, "arrivals": {"reserve": 1}}
    refused(capsys, write(tmp_path, tiny_scenario(tmp_path, clients=clients)), "clients:")


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"training": {"lr": math.inf}}, "training.lr: Input should be a finite number"),
        ({"training": {"lr": math.nan}}, "training.lr: Input should be a finite number"),
        ({"training": {"lr": 1e6}}, "training.lr: Input should be less than or equal to 10"),
        ({"system": {"network": {"uplink_mbps": 1e308}}}, "system.network.uplink_mbps:"),
        ({"system": {"network": {"uplink_mbps": 1e-300}}}, "system.network.uplink_mbps:"),
        ({"system": {"network": {"latency_s": 1e30}}}, "system.network.latency_s:"),
        ({"system": {"network": {"rho": -math.inf}}}, "system.network.rho:"),
        (
            {
                "system": {
                    "network": {"uplink_mbps": {"kind": "lognormal", "median": 1, "sigma": 9}}
                }
            },
            "system.network.uplink_mbps.sigma:",
        ),
        ({"system": {"compute": {"t_min_s": 1e12}}}, "system.compute.t_min_s:"),
        ({"system": {"compute": {"heavy_tail": {"shape": 0.01, "scale_s": 1}}}}, ".shape:"),
        ({"run": {"rounds": 10**8}}, "run.rounds:"),
        ({"run": {"rounds": None, "time_budget_s": math.inf}}, "run.time_budget_s:"),
        ({"seed": 2**64}, "seed:"),
        ({"seed": -1}, "seed:"),
        ({"training": {"lr": [0.1, 0.2]}}, "training.lr: Input should be a valid number"),
        ({"clients": [6]}, "clients: Input should be a mapping of keys"),
        ({"model": {"hidden_sizes": [10**6]}}, "model.hidden_sizes[0]:"),
        (
            {"algorithms": [{"name": "fedavg", "server_optimizer": {"name": ["adam"]}}]},
            "algorithms[0].server_optimizer.name:",  # a list where a name goes: no TypeError
        ),
    ],
)
def test_non_finite_absurd_and_wrongly_typed_numbers_name_their_field(
    tmp_path, capsys, override, field
):
    refused(capsys, write(tmp_path, tiny_scenario(tmp_path, **override)), field)


def test_a_tiny_lognormal_sigma_is_valid_and_budgets_finite_times(tmp_path, capsys):
    law = {"kind": "lognormal", "median": 1.0, "sigma": 1e-300}
    path = write(tmp_path, tiny_scenario(tmp_path, system={"network": {"uplink_mbps": law}}))
    report = tmp_path / "budget.json"
    code, out, err = cli(capsys, "budget", str(path), "--rounds", "2", "--json", str(report))
    assert code == 0, err
    assert not re.search(r"\b(nan|inf)\b", out, re.IGNORECASE), out
    assert all(math.isfinite(v) for b in json.loads(report.read_text()) for v in _floats(b))


def _floats(value: object) -> list[float]:
    if isinstance(value, float):
        return [value]
    if isinstance(value, dict):
        return [f for v in value.values() for f in _floats(v)]
    if isinstance(value, list):
        return [f for v in value for f in _floats(v)]
    return []


def test_over_selection_inf_is_refused(tmp_path, capsys):
    algorithms = [{"name": "fedavg", "over_selection": math.inf}]
    path = write(tmp_path, tiny_scenario(tmp_path, algorithms=algorithms))
    refused(capsys, path, "algorithms[0].over_selection: Input should be a finite number")
    refused(capsys, path, "algorithms[0].over_selection", command="budget")


@pytest.mark.parametrize("rounds", ["0", "-1", "100000000"])
def test_budget_rounds_out_of_range_is_a_clear_error(tmp_path, capsys, rounds):
    path = write(tmp_path, tiny_scenario(tmp_path))
    code, out, err = cli(capsys, "budget", str(path), "--rounds", rounds)
    assert code == 2 and "--rounds" in err and "run.rounds:" in err, err
    assert "Traceback" not in out + err


def test_budget_rounds_is_applied_before_set_is_validated(tmp_path, capsys):
    """A file with a time budget only: --set removes it and --rounds gives the rounds."""
    path = write(tmp_path, tiny_scenario(tmp_path, run={"rounds": None, "time_budget_s": 5.0}))
    report = tmp_path / "budget.json"
    argv = ["budget", str(path), "--rounds", "2", "--set", "run.time_budget_s=null"]
    code, out, err = cli(capsys, *argv, "--json", str(report))
    assert code == 0, err
    assert [budget["rounds"] for budget in json.loads(report.read_text())] == [2]


def test_budget_json_into_a_missing_folder_is_a_clear_error(tmp_path, capsys):
    path = write(tmp_path, tiny_scenario(tmp_path))
    code, _, err = cli(capsys, "budget", str(path), "--json", str(tmp_path / "no" / "b.json"))
    assert code == 2 and "--json" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        (
            {"algorithms": [{"name": "fedavg"}, {"client_fraction": 0.5}]},
            "algorithms[1].name: missing key 'name'; valid: 'local', 'fedavg', ",
        ),
        (
            {"dataset": {"partition": {"alpha": 0.5}}},
            "dataset.partition.kind: missing key 'kind'; valid: 'iid', 'dirichlet', 'label_groups'",
        ),
        (
            {"clients": {"availability": {"mean_online_s": 5}}},
            "clients.availability.kind: missing key 'kind'; valid: 'always', 'renewal', 'trace'",
        ),
        (
            {"system": {"network": {"uplink_mbps": {"low": 1, "high": 2}}}},
            "system.network.uplink_mbps.kind: missing key 'kind'; valid: 'constant', 'uniform', "
            "'lognormal'",
        ),
    ],
)
def test_a_missing_discriminator_lists_the_valid_values(tmp_path, capsys, override, expected):
    data = tiny_scenario(tmp_path, **override)
    if "partition" in override.get("dataset", {}):
        del data["dataset"]["partition"]["kind"]  # tiny_scenario merges the section's kind in
    refused(capsys, write(tmp_path, data), expected)


def test_a_missing_data_root_is_an_error_naming_dataset_root(tmp_path, capsys):
    nowhere = tmp_path / "nowhere"
    data = tiny_scenario(tmp_path, dataset={"name": "mnist", "root": str(nowhere)})
    path = write(tmp_path, data)
    refused(capsys, path, f"dataset.root: {nowhere} does not exist")
    refused(capsys, path, "dataset.root", command="budget")
    assert not nowhere.exists()  # no download attempt created it
    file_root = write(tmp_path, "x", "file.txt")
    refused(capsys, write(tmp_path, {**data, "dataset": {"name": "mnist", "root": str(file_root)}}),
            "dataset.root:", "is not a folder")  # fmt: skip


@pytest.mark.parametrize("root", ["", "  "])
def test_an_empty_data_root_is_refused_not_read_as_the_working_folder(
    tmp_path, capsys, monkeypatch, root
):
    """Path('') is '.': an empty root would pass every check and download into here."""
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, tiny_scenario(tmp_path, dataset={"name": "mnist", "root": root}))
    for command in ("validate", "run", "budget"):
        refused(capsys, path, "dataset.root: an empty path names no folder", command=command)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]  # nothing downloaded


def test_a_missing_fedsim_data_folder_is_named(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FEDSIM_DATA", str(tmp_path / "bogus"))
    path = write(tmp_path, tiny_scenario(tmp_path, dataset={"name": "fashion_mnist"}))
    refused(capsys, path, "FEDSIM_DATA:", "bogus", "does not exist")
    synthetic = write(tmp_path, tiny_scenario(tmp_path), "synthetic.yaml")
    assert cli(capsys, "validate", str(synthetic))[0] == 0  # synthetic data need no folder


def test_a_failed_download_leaves_no_folders_behind(tmp_path, capsys, monkeypatch):
    import torchvision.datasets

    def offline(root: str, train: bool, download: bool) -> None:
        (Path(root) / "FashionMNIST" / "raw").mkdir(parents=True)  # as torchvision does
        raise RuntimeError("no network")

    monkeypatch.setattr(torchvision.datasets, "FashionMNIST", offline)
    monkeypatch.delenv("FEDSIM_DATA")
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, tiny_scenario(tmp_path, dataset={"name": "fashion_mnist"}))
    refused(capsys, path, "dataset:", "download failed", command="budget")
    assert not (tmp_path / "data").exists()  # the default ./data it created is gone again


@requires_real_data
def test_validate_data_checks_the_files_without_downloading(tmp_path, capsys):
    present = write(tmp_path, tiny_scenario(tmp_path, dataset={"name": "mnist"}), "ok.yaml")
    code, out, err = cli(capsys, "validate", "--data", str(present))
    assert code == 0, err
    empty = tmp_path / "empty"
    empty.mkdir()
    lacking = tiny_scenario(tmp_path, dataset={"name": "cifar10", "root": str(empty)})
    code, out, err = cli(capsys, "validate", "--data", str(write(tmp_path, lacking)))
    assert code == 2 and "dataset.root:" in err and "cifar-10-batches-py" in err, err
    assert list(empty.iterdir()) == []  # nothing downloaded
    assert cli(capsys, "validate", str(write(tmp_path, lacking)))[0] == 0  # without --data: ok
    assert DATA_ROOT.is_dir()


TRACE_CLIENTS = {"availability": {"kind": "trace", "path": "avail.csv"}}
TRACE_ALGORITHMS = [{"name": "fedavg", "deadline_s": 5.0}]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "cannot read avail.csv"),
        ("time_s,client\n1,0\n", "the header must be time_s,client,state"),
        ("time_s,client,state\n1,0\n", "avail.csv:2: expected 3 fields"),
        ("time_s,client,state\nnan,0,offline\n", "avail.csv:2: time_s and client must be finite"),
        ("time_s,client,state\n1,0,asleep\n", "state must be online or offline"),
        (b"\xff\xfe\x00", "is not a text file"),
    ],
)
def test_a_missing_or_malformed_trace_names_the_field(
    tmp_path, capsys, monkeypatch, content, expected
):
    monkeypatch.chdir(tmp_path)  # a relative path is relative to the working folder, as at run
    if isinstance(content, str):
        (tmp_path / "avail.csv").write_text(content)
    elif content is not None:
        (tmp_path / "avail.csv").write_bytes(content)
    data = tiny_scenario(tmp_path, clients=TRACE_CLIENTS, algorithms=TRACE_ALGORITHMS)
    refused(capsys, write(tmp_path, data), "clients.availability.path:", expected)


def test_a_valid_trace_relative_to_the_working_folder_passes(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "avail.csv").write_text("time_s,client,state\n1,0,offline\n2,0,online\n")
    data = tiny_scenario(tmp_path, clients=TRACE_CLIENTS, algorithms=TRACE_ALGORITHMS)
    assert cli(capsys, "validate", str(write(tmp_path, data)))[0] == 0


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "cannot read edges.txt"),
        ("0 1\n", "the graph is disconnected"),
        ("0 1\n1 2\n2 3\n3 4\n4 99\n", "node 99 is outside 0..5"),
        ("0 1 inf\n1 2\n2 3\n3 4\n4 5\n", "rate_mbps must be positive and finite"),
        ("0 1 1e9\n1 2\n2 3\n3 4\n4 5\n", "edge 0-1 has rate 1e+09 Mbps"),
        ("0 x\n", "expected 'u v [rate_mbps]'"),
    ],
)
def test_a_missing_or_malformed_edge_list_names_the_field(
    tmp_path, capsys, monkeypatch, content, expected
):
    monkeypatch.chdir(tmp_path)
    if content is not None:
        (tmp_path / "edges.txt").write_text(content)
    d2d = {"d2d": {"graph": "edge_list", "edge_list": "edges.txt"}}
    data = tiny_scenario(tmp_path, system=d2d, algorithms=[{"name": "dsgd"}])
    refused(capsys, write(tmp_path, data), "system.d2d.edge_list:", expected)


@pytest.mark.parametrize(
    ("sweep", "expected"),
    [
        ({"system.network.nope": [1, 2]}, "sweep.system.network.nope: 'nope' is not a key"),
        (
            {"training.lr": [0.1, math.inf]},
            "sweep.training.lr[1]: a sweep value must be a finite number",
        ),
        ({"training.lr": [0.1, -1]}, "sweep.training.lr: the combination lr=-1 is invalid"),
        ({"training.lr": [0.1, 0.1]}, "both labelled 'lr=0.1'"),
        ({"training.lr": [{"a": 1}]}, "a sweep value must be a number, a string"),
        ({"training.lr": 0.1}, "sweep.training.lr: Input should be a valid list"),
        ({"training.lr": []}, "sweep.training.lr:"),
        ({"seed": list(range(40)), "training.lr": [0.01 * k for k in range(1, 41)]}, "1,600"),
    ],
)
def test_bad_sweeps_name_the_swept_key(tmp_path, capsys, sweep, expected):
    refused(capsys, write(tmp_path, tiny_scenario(tmp_path, sweep=sweep)), expected)


def test_a_sweep_over_two_keys_is_valid(tmp_path, capsys):
    sweep = {"seed": [1, 2], "system.network.rho": [1, 2]}
    code, out, err = cli(
        capsys, "validate", str(write(tmp_path, tiny_scenario(tmp_path, sweep=sweep)))
    )
    assert code == 0, err
    labels = [a.run_label for v in parse_scenario(tiny_scenario(tmp_path, sweep=sweep)).variants()
              for a in v.algorithms]  # fmt: skip
    assert "fedavg@seed=2,rho=1" in labels


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ({"name": "sweden_ö"}, "name: the scenario name names a folder"),
        ({"name": ".."}, "name: the scenario name names a folder: it cannot be only dots"),
        ({"name": "x" * 101}, "name: the scenario name names a folder: 1 to 100"),
        ({"algorithms": [{"name": "fedavg", "label": "é"}]}, "algorithms[0].label: a label"),
        ({"algorithms": [{"name": "fedavg", "label": "."}]}, "cannot be only dots"),
        (
            {"algorithms": [{"name": "fedavg"}, {"name": "local", "label": "FedAvg"}]},
            "two runs share the label 'fedavg' (case aside",
        ),
    ],
)
def test_names_and_labels_must_be_distinct_folder_names(tmp_path, capsys, override, expected):
    refused(capsys, write(tmp_path, tiny_scenario(tmp_path, **override)), expected)


def test_unknown_keys_with_odd_characters_are_quoted(tmp_path, capsys):
    err = refused(capsys, write(tmp_path, tiny_scenario(tmp_path, training={"a\nb": 1})), "")
    assert "training.'a\\nb': unknown key" in err


def test_renewal_churn_with_local_needs_a_time_budget(tmp_path, capsys):
    clients = {"availability": {"kind": "renewal", "mean_online_s": 5, "mean_offline_s": 5}}
    data = tiny_scenario(tmp_path, clients=clients, algorithms=[{"name": "local"}])
    refused(capsys, write(tmp_path, data), "run.time_budget_s: required for algorithms[0] (local)")


def _bounded(annotation: object, constraints: list, where: str) -> list[str]:
    """Numbers in an annotation that lack an upper bound (recursing into lists and unions)."""
    constraints = [
        c for m in constraints for c in (m.metadata if isinstance(m, FieldInfo) else [m])
    ]
    if annotation in (int, float):
        has_upper = any(isinstance(c, annotated_types.Le | annotated_types.Lt) for c in constraints)
        return [] if has_upper else [where]
    if typing.get_origin(annotation) is typing.Annotated:
        inner, *extra = typing.get_args(annotation)
        return _bounded(inner, [*constraints, *extra], where)
    if typing.get_origin(annotation) is typing.Literal:
        return []
    return [u for arg in typing.get_args(annotation) for u in _bounded(arg, [], where)]


def _models(root: type[BaseModel]) -> set[type[BaseModel]]:
    found, todo = set(), [root, *_TAG_MODELS.values()]
    while todo:
        model = todo.pop()
        if model in found:
            continue
        found.add(model)
        for field in model.model_fields.values():
            todo += _member_models(field.annotation)
    return found


def _member_models(annotation: object) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _member_models(arg)]


def test_every_number_in_the_schema_is_finite_and_bounded():
    """The promise of validation: no accepted number is inf, nan or beyond what can run."""
    models = _models(Scenario)
    assert len(models) > 30
    unbounded = [
        u
        for model in models
        for name, field in model.model_fields.items()
        for u in _bounded(field.annotation, field.metadata, f"{model.__name__}.{name}")
    ]
    assert not unbounded
    assert all(model.model_config.get("allow_inf_nan") is False for model in models)


def test_numbers_in_yaml_exponent_notation_are_bounded_like_any_other(tmp_path, capsys):
    """PyYAML reads ``1e3`` as text; fedsim's loader reads it as the number YAML 1.2 says, so
    the bounds apply as to any other."""
    text = yaml.safe_dump(tiny_scenario(tmp_path, system={"network": {"uplink_mbps": "RATE"}}))
    ok = write(tmp_path, text.replace("uplink_mbps: RATE", "uplink_mbps: 1e3"), "ok.yaml")
    assert cli(capsys, "validate", str(ok))[0] == 0
    assert load_scenario(ok).system.network.uplink_mbps.value == 1e3
    for bad, expected in (("1e308", "less than or equal to"), ("inf", "finite number")):
        path = write(tmp_path, text.replace("uplink_mbps: RATE", f"uplink_mbps: {bad}"))
        refused(capsys, path, "system.network.uplink_mbps:", expected)
    refused(capsys, write(tmp_path, text.replace("count: 6", "count: 1e30")), "clients.count:")


_SAMPLE_NUMBERS = (1, 10, 0.5, 32)  # one of them fits every number's bounds (or a law's)


def _takes_a_number(annotation: object, adapter: TypeAdapter) -> bool:
    """Whether a field holds a number: an int or a float (or a Literal of them) anywhere in its
    annotation, or a plain number accepted as it is (a law's shorthand for its constant; a
    switch takes 1 and 0 for true and false, and is no number)."""
    if annotation is bool:
        return False
    if _mentions_a_number(annotation):
        return True
    for number in _SAMPLE_NUMBERS:
        try:
            adapter.validate_python(number)
        except ValidationError:
            continue
        return True
    return False


def _mentions_a_number(annotation: object) -> bool:
    if annotation in (int, float):
        return True
    if typing.get_origin(annotation) is typing.Literal:
        return any(type(arg) in (int, float) for arg in typing.get_args(annotation))
    return any(_mentions_a_number(arg) for arg in typing.get_args(annotation))


def _with_booleans(annotation: object, boolean: bool) -> object:
    """A value of the annotation's shape with ``boolean`` at each number's place: a list or a
    tuple gets it as its items, anything else is it."""
    while typing.get_origin(annotation) is typing.Annotated or _is_optional(annotation):
        annotation = typing.get_args(annotation)[0]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is list:
        return [boolean]
    if origin is tuple:
        return (boolean,) if args[-1] is Ellipsis else (boolean,) * len(args)
    return boolean


def _is_optional(annotation: object) -> bool:
    args = typing.get_args(annotation)
    return len(args) == 2 and type(None) in args and isinstance(annotation, types.UnionType)


def test_every_number_in_the_schema_refuses_true_and_false():
    """YAML's true/false are no numbers (pydantic's lax mode would read them as 1 and 0): every
    number of every model, a union's number, a tuple's or a list's items and a law's plain
    number refuse them, each with one problem of its own, so no field can be forgotten."""
    checked, accepted = [], []
    for model in _models(Scenario):
        for name, field in model.model_fields.items():
            annotation = field.annotation
            tag = [Field(discriminator=field.discriminator)] if field.discriminator else []
            metadata = [*tag, *field.metadata]  # the union's tag, the bounds, the checks
            adapter = TypeAdapter(
                typing.Annotated[(annotation, *metadata)] if metadata else annotation
            )
            if not _takes_a_number(annotation, adapter):
                continue
            checked.append(f"{model.__name__}.{name}")
            for boolean in (True, False):
                try:
                    adapter.validate_python(_with_booleans(annotation, boolean))
                except ValidationError as error:
                    if all(e["type"] == BOOL_NOT_NUMBER for e in error.errors()):
                        continue
                accepted.append(f"{model.__name__}.{name}: {boolean}")
    assert not accepted
    assert len(checked) > 120
    assert {"RunConfig.rounds", "UcflConfig.streams", "NetworkConfig.uplink_mbps"} <= set(checked)
    assert {"ModelConfig.hidden_sizes", "ServerOptimizerConfig.betas"} <= set(checked)
    assert {"RadioConfig.tx_power_dbm", "GroupShift.angles_deg", "Scenario.seed"} <= set(checked)


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ({"run": {"rounds": True}}, "run.rounds"),
        ({"dataset": {"num_samples": True}}, "dataset.num_samples"),
        ({"seed": False}, "seed"),
        ({"system": {"network": {"uplink_mbps": True}}}, "system.network.uplink_mbps"),
        ({"system": {"network": {"precision_bits": True}}}, "system.network.precision_bits"),
        ({"system": {"radio": {"tx_power_dbm": True}}}, "system.radio.tx_power_dbm"),
        ({"model": {"hidden_sizes": [32, True]}}, "model.hidden_sizes[1]"),
        ({"algorithms": [{"name": "ucfl", "streams": True}]}, "algorithms[0].streams"),
        (
            {"algorithms": [{"name": "fedavg", "server_optimizer": {"betas": [0.9, False]}}]},
            "algorithms[0].server_optimizer.betas[1]",
        ),
        (
            {
                "dataset": {
                    "group_shift": {"kind": "rotation", "groups": 2, "angles_deg": [0, True]}
                }
            },
            "dataset.group_shift.angles_deg[1]",
        ),
    ],
)
def test_true_or_false_for_a_number_is_one_problem_naming_the_field(
    tmp_path, capsys, override, expected
):
    err = refused(capsys, write(tmp_path, tiny_scenario(tmp_path, **override)), "")
    assert err.splitlines()[1:] == [f"  {expected}: Input should be a number, not true/false"]


def test_booleans_stay_valid_for_switches_and_in_sweeps(tmp_path, capsys):
    sweep = {"dataset.download": [True, False], "output.events": [False, True]}
    data = tiny_scenario(tmp_path, dataset={"download": False}, sweep=sweep)
    assert cli(capsys, "validate", str(write(tmp_path, data)))[0] == 0
    assert [v.dataset.download for v in parse_scenario(data).variants()] == [True] * 2 + [False] * 2
    swept_rounds = tiny_scenario(tmp_path, sweep={"run.rounds": [2, True]})
    refused(
        capsys,
        write(tmp_path, swept_rounds),
        "sweep.run.rounds: the combination rounds=True is invalid: run.rounds: Input should be "
        "a number, not true/false",
    )
