"""Which BLER tables a harq run read, and which Sionna: recorded in each run's scenario.yaml
(``bler_tables`` and ``bler_tables_version``), which validates again as it is written, and
printed by ``fedsim budget``; the built-in curves as a fallback that warns (once per process)
where Sionna's tables are not found; the tables installed are the ones pyproject's range of
``sionna-no-rt`` was checked for."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import warnings

import pytest
import tomllib
import yaml
from packaging.requirements import Requirement

import fedsim.config.link as link_config
from fedsim.budget import budget_algorithm, format_budgets
from fedsim.config import ScenarioError, parse_scenario
from fedsim.config.link import BlerTablesWarning
from fedsim.config.loading import load_scenario
from fedsim.results.files import SCENARIO_FILE
from fedsim.runner import build_dataset, build_trainers
from fedsim.sim.bler import SIONNA_FILES
from fedsim.sim.readers import sionna_tables_folder, sionna_version
from fedsim.study import run_scenario
from tests.conftest import REPO, tiny_scenario

HAS_TABLES = sionna_tables_folder() is not None
needs_sionna = pytest.mark.skipif(not HAS_TABLES, reason="sionna-no-rt not installed")

# sha256 of the table files of sionna-no-rt 1.0.0 to 2.2.0: the same in every release.
SIONNA_TABLES_SHA256 = {
    "PDSCH_table1.json": "cf37d854d13c71a66da439982ff4918f22fd32d425248be0f77429776116b43a",
    "PDSCH_table2.json": "c00b608a5f04d8f76e0f50fdf3524e5ce5129936078e5ad2d7db570ec80758e3",
    "PUSCH_table1.json": "f9c4f7be878cdab5b9c20a082f6dc568cd513b9df0c130a0d0c7d964fb1c6c06",
}

HARQ_CELL = {
    "network": {"latency_s": 0.01},
    "radio": {
        "fading": {"model": "rayleigh", "coherence_s": 0.05},
        "shadowing_db": 4.0, "uplink_bandwidth_hz": 10e6, "link": {"model": "harq"},
    },
}  # fmt: skip


def harq_scenario(tmp_path, **link) -> dict:
    data = tiny_scenario(tmp_path, run={"rounds": 2})
    data["system"] = {**HARQ_CELL, "radio": {**HARQ_CELL["radio"], "link": {"model": "harq"}}}
    data["system"]["radio"]["link"].update(link)
    return data


def expected_tables() -> tuple[str, str | None]:
    if HAS_TABLES:
        return "sionna", importlib.metadata.version("sionna-no-rt")
    return "builtin", None


@pytest.fixture
def no_sionna(monkeypatch):
    """Sionna's tables not found, and the once-per-process warning not yet given."""
    monkeypatch.setattr(link_config, "sionna_tables_folder", lambda: None)
    link_config._warn_builtin_fallback.cache_clear()
    yield
    link_config._warn_builtin_fallback.cache_clear()


# --- recorded in the run's scenario.yaml --------------------------------------------------------


def test_a_harq_run_records_its_tables_and_the_file_validates_again(tmp_path):
    scenario = parse_scenario(harq_scenario(tmp_path))
    run_dir = run_scenario(scenario, show_progress=False) / "fedavg"
    written = (run_dir / SCENARIO_FILE).read_text()
    link = yaml.safe_load(written)["system"]["radio"]["link"]
    source, version = expected_tables()
    assert (link["bler_tables"], link["bler_tables_version"]) == (source, version)
    assert f"bler_tables_version: {version or 'null'}\n" in written  # a reader sees it
    # what `fedsim run` of that file does: it validates, and writes the same text again
    again = load_scenario(run_dir / SCENARIO_FILE)
    assert again.system.radio.link.bler_tables_version == version
    assert again.to_yaml() == written
    # run to run, the same bytes (determinism)
    first = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    run_scenario(scenario, show_progress=False)
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == first


def test_the_version_is_this_machines_whatever_a_file_says(tmp_path):
    data = harq_scenario(tmp_path, bler_tables_version="0.0.1")
    assert parse_scenario(data).system.radio.link.bler_tables_version == expected_tables()[1]
    data = harq_scenario(tmp_path, bler_tables="builtin", bler_tables_version="2.2.0")
    link = parse_scenario(data).system.radio.link
    assert (link.bler_tables, link.bler_tables_version) == ("builtin", None)


# --- printed by fedsim budget -------------------------------------------------------------


def test_budget_prints_the_tables_it_read(tmp_path):
    scenario = parse_scenario(harq_scenario(tmp_path))
    dataset = build_dataset(scenario, timing_only=True)
    trainers = build_trainers(scenario, dataset, timing_only=True)
    budget = budget_algorithm(scenario, scenario.algorithms[0], dataset, trainers)
    source, version = expected_tables()
    assert budget.bler_tables == {"source": source, "version": version}
    text = format_budgets(scenario, [budget], 1)
    said = f"sionna (sionna-no-rt {version})" if version else "builtin (the finite-length bound"
    [line] = [line for line in text.splitlines() if "BLER tables" in line]
    assert said in line
    # a sweep of bler_tables: each run's own
    other = dataclasses.replace(
        budget, algorithm="other", bler_tables={"source": "builtin", "version": None}
    )
    if source == "builtin":
        other = dataclasses.replace(other, bler_tables={"source": "sionna", "version": "2.2.0"})
    lines = [line for line in format_budgets(scenario, [budget, other], 1).splitlines()]
    assert sum("BLER tables:" in line for line in lines) == 2


def test_budget_without_harq_prints_no_tables(tmp_path):
    data = harq_scenario(tmp_path)
    data["system"]["radio"]["link"] = {"model": "ideal"}
    scenario = parse_scenario(data)
    dataset = build_dataset(scenario, timing_only=True)
    trainers = build_trainers(scenario, dataset, timing_only=True)
    budget = budget_algorithm(scenario, scenario.algorithms[0], dataset, trainers)
    assert budget.bler_tables is None
    assert "BLER tables" not in format_budgets(scenario, [budget], 1)


# --- the built-in curves: a fallback that warns -----------------------------------------------


def test_auto_without_sionnas_tables_warns_once_and_takes_the_builtin_curves(tmp_path, no_sionna):
    with pytest.warns(BlerTablesWarning, match="built-in curves") as caught:
        link = parse_scenario(harq_scenario(tmp_path)).system.radio.link
    assert len(caught) == 1
    assert "bler_tables: auto" in str(caught[0].message)
    assert (link.bler_tables, link.bler_tables_version) == ("builtin", None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process: no second warning
        parse_scenario(harq_scenario(tmp_path, bler_tables="auto"))


def test_builtin_chosen_does_not_warn(tmp_path, no_sionna):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        link = parse_scenario(harq_scenario(tmp_path, bler_tables="builtin")).system.radio.link
    assert (link.bler_tables, link.bler_tables_version) == ("builtin", None)


def test_sionna_chosen_without_its_tables_is_refused(tmp_path, no_sionna):
    with pytest.raises(ScenarioError) as refused:
        parse_scenario(harq_scenario(tmp_path, bler_tables="sionna"))
    assert "sionna-no-rt" in refused.value.problems[0]


# --- the tables the version range was checked for ---------------------------------------------


@needs_sionna
def test_the_installed_tables_are_the_ones_the_range_was_checked_for():
    folder = sionna_tables_folder()
    read = {name for name in SIONNA_FILES.values()}
    assert read <= set(SIONNA_TABLES_SHA256)
    for name in read:
        digest = hashlib.sha256((folder / name).read_bytes()).hexdigest()
        assert digest == SIONNA_TABLES_SHA256[name], name
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    [sionna] = [r for r in map(Requirement, project["dependencies"]) if r.name == "sionna-no-rt"]
    assert sionna.specifier.contains(sionna_version())
    assert sionna.marker is not None and sionna.marker.evaluate()  # here: Python 3.11 or later
