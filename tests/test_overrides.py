"""``--set`` overrides (nested fields, list items, lists, sweeps) validated like the file, and
the discovery commands ``fedsim schema`` and ``fedsim algorithms``."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from fedsim.cli import main
from fedsim.config import ALGORITHM_NAMES, ScenarioError, load_scenario
from tests.conftest import tiny_scenario


@pytest.fixture
def scenario_file(tmp_path):
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(tiny_scenario(tmp_path)))
    return path


def test_nested_fields_list_items_lists_and_sweeps(scenario_file):
    scenario = load_scenario(
        scenario_file,
        [
            "system.network.rho=2",
            "seed=7",
            "algorithms[0].deadline_s=5",
            "system.network.uplink_mbps={kind: uniform, low: 1, high: 3}",
            "system.d2d.graph=ring",  # a section the file does not have
            "sweep.system.network.latency_s=[0.0, 0.1]",
            "sweep.seed=[1, 2]",
        ],
    )
    assert scenario.system.network.rho == 2.0 and scenario.seed == 7
    assert scenario.algorithms[0].deadline_s == 5.0
    assert scenario.system.network.uplink_mbps.kind == "uniform"
    assert scenario.system.d2d.graph == "ring"
    assert scenario.sweep == {"system.network.latency_s": [0.0, 0.1], "seed": [1, 2]}
    assert len(scenario.variants()) == 4


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("system.network.rhoo=2", "system.network.rhoo: unknown key (did you mean 'rho'?)"),
        ("system.network.rho=-1", "system.network.rho"),
        ("algorithms[3].deadline_s=5", "algorithms[3]"),
        ("seed", "expected key=value"),
        ("sweep.system.network.nope=[1, 2]", "nope"),
        ("training.lr=[1", "invalid value"),
    ],
)
def test_a_bad_override_names_the_field(scenario_file, override, named):
    with pytest.raises(ScenarioError) as caught:
        load_scenario(scenario_file, [override])
    assert named in "\n".join(caught.value.problems)


@pytest.mark.parametrize(
    ("override", "problem"),
    [
        (
            "algorithm[1].deadline_s=5",
            "--set algorithm[1].deadline_s: no key 'algorithm' (did you mean 'algorithms'?); "
            "valid keys: algorithms, clients, dataset, evaluation, model, name, output, run, seed, "
            "sweep, system, training",
        ),
        (  # the keys of the algorithm the file names at that index
            "algorithms[0].nme[0]=x",
            "--set algorithms[0].nme[0]: no key 'nme' in algorithms[0] (did you mean 'name'?); "
            "valid keys: client_fraction, compression, deadline_s, label, name, "
            "over_selection, selection, server_optimizer",
        ),
        (
            "sweep.trainig.lr=[0.1, 0.2]",
            "--set sweep.trainig.lr: no key 'trainig' (did you mean 'training'?); valid keys: "
            "algorithms,",
        ),
        (
            "sweep.system.netwrk.rho=[1, 2]",
            "--set sweep.system.netwrk.rho: no key 'netwrk' in system (did you mean 'network'?)",
        ),
        ("run.rounds.x=1", "--set run.rounds.x: run.rounds is a value, not a section"),
    ],
)
def test_a_set_key_outside_the_schema_is_refused_naming_the_closest(
    scenario_file, override, problem
):
    with pytest.raises(ScenarioError) as caught:
        load_scenario(scenario_file, [override])
    assert caught.value.source == "--set"
    [found] = caught.value.problems
    assert found.startswith(problem)


def test_set_keys_follow_the_schema_not_only_the_file(tmp_path):
    """Sections the file leaves out are valid to set; a union's keys are those of the member
    the file (or an earlier --set) names; a key that builds as sections is named by validation,
    as in a file."""
    data = tiny_scenario(tmp_path)
    del data["system"]["network"]  # fixed rates and the radio exclude each other
    path = tmp_path / "no_radio.yaml"
    path.write_text(yaml.safe_dump(data))
    scenario = load_scenario(
        path,
        [
            "system.radio.fading.model=rayleigh",
            "system.radio.path_loss.exponent=3.5",  # a member's key, the tag set below
            "system.radio.path_loss.kind=log_distance",
            "algorithms[0].name=ucfl",
            "algorithms[0].streams=2",
        ],
    )
    assert scenario.system.radio.fading.model == "rayleigh"
    assert scenario.system.radio.path_loss.exponent == 3.5
    assert scenario.algorithms[0].streams == 2
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path, ["algorithms[0].mu=1"])  # fedprox has mu, fedavg has not
    assert caught.value.problems[0].startswith("algorithms[0].mu: unknown key; valid keys: ")
    assert "with --set algorithms[0].mu=1" in caught.value.source


def test_run_and_budget_take_set_and_report_bad_ones_with_exit_2(scenario_file, capsys):
    assert main(["validate", str(scenario_file), "--set", "run.rounds=2"]) == 0
    assert main(["budget", str(scenario_file), "--set", "run.rounds=2"]) == 0
    assert "fedavg" in capsys.readouterr().out
    assert main(["run", str(scenario_file), "--quiet", "--set", "run.roundz=2"]) == 2
    error = capsys.readouterr().err
    assert "run.roundz" in error and "Traceback" not in error


def test_schema_is_json_schema_of_the_scenario(capsys):
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert set(schema["required"]) >= {"name", "dataset", "model", "clients", "algorithms", "run"}
    radio = schema["$defs"]["RadioConfig"]["properties"]
    assert radio["cell_radius_m"]["default"] == 500.0


def test_algorithms_lists_every_algorithm_with_its_defaults(capsys):
    assert main(["algorithms"]) == 0
    out = capsys.readouterr().out
    for name in ALGORITHM_NAMES:
        assert f"\n{name}: " in f"\n{out}"
    fedadam = out.split("\nfedadam: ")[1].split("\nfedyogi: ")[0]
    assert '"name": "adam"' in fedadam  # the preset, not the base class's sgd


def test_each_server_optimizer_description_tells_its_own_default(capsys):
    """The presets (fedavgm, fedadagrad, fedadam, fedyogi) do not default to sgd: no listing
    may say so under them."""
    assert main(["algorithms"]) == 0
    told = re.findall(
        r'server_optimizer = \{"name": "(\w+)", "lr": ([\d.]+),.*\(default (\w+), lr ([\d.]+)',
        capsys.readouterr().out,
    )
    assert len(told) == 12  # fedavg and every algorithm built on it
    assert {name for name, *_ in told} == {"sgd", "momentum", "adagrad", "adam", "yogi"}
    for name, lr, said_name, said_lr in told:
        assert (said_name, float(said_lr)) == (name, float(lr))
