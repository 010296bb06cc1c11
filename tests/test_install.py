"""The README's set-up: the CPU-only install pins exactly fedsim's PyTorch ranges, and those
ranges admit PyTorch's CPU builds (versions with a ``+cpu`` local label), so installing fedsim
afterwards keeps the CPU build instead of pulling the CUDA wheels."""

from __future__ import annotations

import re

import tomllib
from packaging.requirements import Requirement

from tests.conftest import REPO

CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _requirements() -> dict[str, Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return {r.name: r for r in map(Requirement, project["dependencies"])}


def _cpu_install_line() -> str:
    [line] = [line for line in (REPO / "README.md").read_text().splitlines() if CPU_INDEX in line]
    return line


def test_the_cpu_install_pins_fedsims_own_torch_ranges():
    pinned = {r.name: r for r in map(Requirement, re.findall(r'"([^"]+)"', _cpu_install_line()))}
    assert set(pinned) == {"torch", "torchvision"}
    required = _requirements()
    for name, requirement in pinned.items():
        assert requirement.specifier == required[name].specifier, name
    assert _cpu_install_line().endswith(f"--index-url {CPU_INDEX}")


def test_fedsims_torch_ranges_admit_cpu_builds():
    required = _requirements()
    for name in ("torch", "torchvision"):
        upper = next(s.version for s in required[name].specifier if s.operator == "<=")
        assert required[name].specifier.contains(f"{upper}+cpu"), name
        assert not required[name].specifier.contains("99.0+cpu"), name  # a range, not "any"
