"""The set-up as a newcomer meets it (the README and the site's install page): the CPU-only
install pins a torch/torchvision pair inside fedsim's ranges, which admit PyTorch's CPU builds
(versions with a ``+cpu`` local label), so installing fedsim afterwards keeps the CPU build
instead of pulling the CUDA wheels; the documented commands survive zsh and name scenario files
that exist; fedsim runs where torchvision is missing or broken."""

from __future__ import annotations

import importlib
import os
import re
from types import SimpleNamespace

import pytest
import tomllib
import torch
import yaml
from packaging.requirements import Requirement

from fedsim.cli import main
from tests.conftest import REPO, requires_real_data, run_fedsim, run_python, tiny_scenario

CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _requirements() -> dict[str, Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return {r.name: r for r in map(Requirement, project["dependencies"])}


def _cpu_install_lines() -> list[str]:
    """Every line of the documents that installs from PyTorch's CPU index."""
    return [
        line
        for _, text in _documented_commands()
        for line in text.splitlines()
        if CPU_INDEX in line and line.startswith("pip install")
    ]


def torchvision_for(torch_version: str) -> str:
    """The torchvision minor release built for a torch 2.x release: 0.(x + 15)."""
    major, minor = (int(part) for part in torch_version.split(".")[:2])
    assert major == 2
    return f"0.{minor + 15}"


def test_the_cpu_install_pins_a_torch_torchvision_pair_within_fedsims_ranges():
    lines = _cpu_install_lines()
    readme = [line for line in (REPO / "README.md").read_text().splitlines() if CPU_INDEX in line]
    assert len(readme) == 1 and readme[0] in lines and len(lines) >= 2  # README and the site
    for line in lines:
        pinned = {r.name: r for r in map(Requirement, (w for w in line.split() if "==" in w))}
        assert set(pinned) == {"torch", "torchvision"}
        versions = {name: next(iter(r.specifier)).version for name, r in pinned.items()}
        assert versions["torchvision"].startswith(torchvision_for(versions["torch"]) + ".")
        required = _requirements()
        for name, version in versions.items():
            assert required[name].specifier.contains(version), name
            assert required[name].specifier.contains(f"{version}+cpu"), name
        assert line.endswith(f"--index-url {CPU_INDEX}")


def test_fedsims_torch_ranges_end_at_pairs():
    required = _requirements()
    for operator in (">=", "<="):
        ends = {
            name: next(s.version for s in required[name].specifier if s.operator == operator)
            for name in ("torch", "torchvision")
        }
        assert ends["torchvision"].startswith(torchvision_for(ends["torch"])), operator


def test_fedsims_torch_ranges_admit_cpu_builds():
    required = _requirements()
    for name in ("torch", "torchvision"):
        upper = next(s.version for s in required[name].specifier if s.operator == "<=")
        assert required[name].specifier.contains(f"{upper}+cpu"), name
        assert not required[name].specifier.contains("99.0+cpu"), name  # a range, not "any"


GLOB_CHARACTERS = re.compile(r"[][*?{}]")
SET_VALUE = re.compile(r"--set[ =](\S+)")


def _documented_commands() -> list[tuple[str, str]]:
    """(file, text) of every document a user copies commands from: the READMEs, the site's
    pages (docs/), the scenario files' headers."""
    paths = [REPO / "README.md", *REPO.glob("*/README.md"), *REPO.glob("scenarios/**/*.md")]
    paths += [*REPO.glob("docs/**/*.md"), *REPO.glob("scenarios/**/*.yaml")]
    return [(str(p.relative_to(REPO)), p.read_text()) for p in sorted(set(paths))]


def test_every_documented_set_value_with_brackets_is_quoted_for_zsh():
    """zsh expands an unquoted `sweep.seed=[1,2,3]` as a pattern and stops: 'no matches'."""
    bare = [
        f"{name}: --set {value}"
        for name, text in _documented_commands()
        for value in SET_VALUE.findall(text)
        if value[0] not in "'\"" and GLOB_CHARACTERS.search(value)
    ]
    assert bare == []
    assert any("--set 'sweep.seed=[" in text for _, text in _documented_commands())  # seen
    assert any(name.startswith("docs/") for name, _ in _documented_commands())


SCENARIO_PATH = re.compile(r"\bscenarios/[\w./-]+\.(?:yaml|py|csv|json)\b")


def test_every_scenario_file_a_document_names_exists():
    """A command copied from the README or the site runs a file that is there."""
    missing = [
        f"{name}: {path}"
        for name, text in _documented_commands()
        for path in SCENARIO_PATH.findall(text)
        if not (REPO / path).exists()
    ]
    assert missing == []


def test_the_set_help_quotes_its_examples(capsys):
    from fedsim.cli import main

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "'sweep.seed=[1,2,3]'" in text and " sweep.seed=[" not in text


# --- torchvision: needed only to download datasets and to rotate by arbitrary angles ---

BROKEN_TORCHVISION = (
    'raise RuntimeError("operator torchvision::nms does not exist")  # built for another torch\n'
)


@requires_real_data
def test_fedsim_runs_on_offline_data_where_torchvision_is_broken(tmp_path):
    """A torchvision built for another PyTorch fails at import: fedsim never needs it here."""
    shadow = tmp_path / "shadow" / "torchvision"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(BROKEN_TORCHVISION)
    data = tiny_scenario(tmp_path, dataset={"name": "mnist", "num_samples": 600}, run={"rounds": 1})
    path = tmp_path / "mnist.yaml"
    path.write_text(yaml.safe_dump(data))
    env = {"PYTHONPATH": f"{shadow.parent}{os.pathsep}{REPO}"}
    cannot = run_python("-c", "import torchvision", env=env)
    assert "torchvision::nms does not exist" in cannot.stderr  # the shadow is what it imports
    done = run_fedsim("run", str(path), "--quiet", env=env)
    assert done.returncode == 0, done.stderr
    assert "final" in done.stdout and "Traceback" not in done.stderr


def broken_torchvision(name: str) -> object:
    if name.startswith("torchvision"):
        raise RuntimeError("operator torchvision::nms does not exist")
    return importlib.import_module(name)


@pytest.mark.parametrize(
    ("dataset", "needed_for"),
    [
        ({"name": "mnist", "download": True}, "dataset: downloading MNIST needs torchvision"),
        (
            {
                "name": "synthetic",
                "group_shift": {"kind": "rotation", "groups": 2, "angles_deg": [0, 45]},
            },
            "dataset: rotating images by 45 degrees (not a multiple of 90) needs torchvision",
        ),
    ],
    ids=["download", "rotation"],
)
def test_what_needs_torchvision_says_so_where_it_is_broken(
    tmp_path, monkeypatch, capsys, dataset, needed_for
):
    monkeypatch.setattr(
        "fedsim.learn.datasets.importlib", SimpleNamespace(import_module=broken_torchvision)
    )
    (tmp_path / "empty").mkdir()  # a data folder without the dataset: it is downloaded
    data = tiny_scenario(tmp_path, dataset={**dataset, "root": str(tmp_path / "empty")})
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["run", str(path), "--quiet"]) == 2
    error = capsys.readouterr().err
    assert needed_for in error and "torchvision::nms" in error
    minor = int(torch.__version__.split(".")[1])
    assert f"torchvision 0.{minor + 15}, from the same index as torch" in error


MARKDOWN_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)")


def test_every_relative_link_of_the_readmes_leads_to_a_file():
    """The README points into docs/; mkdocs build --strict checks the site's own links."""
    broken = [
        f"{readme.relative_to(REPO)}: {target}"
        for readme in [
            REPO / "README.md",
            *REPO.glob("*/README.md"),
            *REPO.glob("scenarios/**/*.md"),
        ]
        for target in MARKDOWN_LINK.findall(readme.read_text())
        if "://" not in target and not (readme.parent / target).exists()
    ]
    assert broken == []
    assert "docs/index.md" in (REPO / "README.md").read_text()
