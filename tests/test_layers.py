"""The layout's import rules (DESIGN.md, "Layout"), read from every module's imports with ``ast``.

Layers from the bottom up: the package's lazy ``__init__``, streams and results/, sim/, config/,
learn/, world/, algorithms/, runner, budget, study, cli, ``__main__``. A module imports only its
own layer and those below; there are no cycles; ``sim/`` imports no torch, pydantic or config;
``learn/`` no simpy and nothing of sim/world/algorithms; only ``world/`` imports both sim/ and
learn/; ``analysis/`` reads results folders and imports of fedsim only the results contract; an
import inside a function is only for an optional or heavy dependency and says so in a comment on
its line.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO

LAYERS = (
    ("fedsim", "fedsim.streams", "fedsim.results"),  # fedsim/__init__ resolves its API lazily
    ("fedsim.sim",),
    ("fedsim.config",),
    ("fedsim.learn",),
    ("fedsim.world",),
    ("fedsim.algorithms",),
    ("fedsim.runner",),
    ("fedsim.budget",),
    ("fedsim.study",),
    ("fedsim.cli",),
    ("fedsim.__main__",),  # ``python -m fedsim``
)
RESULTS_CONTRACT = ("fedsim.results.files", "fedsim.results.recovery")
# What an import inside a function may bring in: optional extras, and what pulls in torch or
# matplotlib, so that a command or a reader pays for them only when it needs them.
HEAVY_OR_OPTIONAL = (
    "torch",
    "torchvision",
    "ray",
    "sionna",
    "analysis",
    "fedsim.config",  # pydantic and the whole schema: the public API resolves it on first use
    "fedsim.learn",
    "fedsim.runner",
    "fedsim.budget",
    "fedsim.study",
)


@dataclass(frozen=True)
class Import:
    target: str  # the module imported (for ``from m import name``: m.name if that is a module)
    line: int
    in_function: bool
    commented: bool
    type_only: bool = False  # under ``if TYPE_CHECKING:`` (for annotations; never run)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_modules() -> dict[str, Path]:
    paths = sorted((REPO / "fedsim").rglob("*.py")) + sorted((REPO / "analysis").rglob("*.py"))
    return {module_name(path): path for path in paths}


def imports_of(path: Path, known: Mapping[str, Path]) -> list[Import]:
    """Every import of the module, resolved to module names (relative imports included)."""
    text = path.read_text()
    lines = text.splitlines()
    tree = ast.parse(text)
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    inside: set[int] = set()
    type_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            inside |= {id(inner) for inner in ast.walk(node) if inner is not node}
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            type_only |= {id(inner) for inner in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package[: len(package) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                for alias in node.names
            ]
        else:
            continue
        commented = "#" in lines[node.end_lineno - 1]
        found += [
            Import(t, node.lineno, id(node) in inside, commented, id(node) in type_only)
            for t in targets
        ]
    return found


def graph_of(modules: Mapping[str, Path]) -> dict[str, list[Import]]:
    return {name: imports_of(path, modules) for name, path in modules.items()}


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def layer_of(name: str) -> int | None:
    best: tuple[int, int] | None = None  # (length of the matching prefix, layer)
    for level, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if _within(name, prefix) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), level)
    return None if best is None else best[1]


def _ours(target: str) -> bool:
    return _within(target, "fedsim") or _within(target, "analysis")


def cycles(graph: Mapping[str, list[Import]]) -> list[list[str]]:
    """Import cycles among the modules, counting every import: one inside a function or for
    annotations alone ties two modules as much as one at the top."""
    edges = {
        name: sorted({i.target for i in found if i.target in graph})
        for name, found in graph.items()
    }
    found_cycles, state, stack = [], {}, []

    def visit(node: str) -> None:
        state[node] = "open"
        stack.append(node)
        for target in edges[node]:
            if state.get(target) == "open":
                found_cycles.append([*stack[stack.index(target) :], target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return found_cycles


def violations(graph: Mapping[str, list[Import]]) -> list[str]:
    """Every broken rule, as ``module:line: what`` (and the cycles)."""
    problems = [" -> ".join(cycle) + ": an import cycle" for cycle in cycles(graph)]
    for name, found in sorted(graph.items()):
        level = layer_of(name)
        ours = [i for i in found if _ours(i.target)]
        for i in found:
            where = f"{name}:{i.line}: {i.target}"
            if i.in_function and not (
                i.commented and any(_within(i.target, heavy) for heavy in HEAVY_OR_OPTIONAL)
            ):
                problems.append(f"{where}: imported inside a function (only optional or heavy "
                                "dependencies, with a comment saying so)")  # fmt: skip
            if _within(name, "fedsim.sim") and any(
                _within(i.target, banned) for banned in ("torch", "pydantic", "fedsim.config")
            ):
                problems.append(f"{where}: sim/ imports no torch, pydantic or config")
            if _within(name, "fedsim.learn") and any(
                _within(i.target, banned)
                for banned in ("simpy", "fedsim.sim", "fedsim.world", "fedsim.algorithms")
            ):
                problems.append(f"{where}: learn/ imports no simpy, sim, world or algorithms")
            if (
                _within(name, "analysis")
                and _within(i.target, "fedsim")
                and not any(_within(i.target, allowed) for allowed in RESULTS_CONTRACT)
            ):
                problems.append(f"{where}: analysis/ imports of fedsim only the contract")
        for i in ours:
            target_level = layer_of(i.target)
            # the public API resolves its names lazily, and names their types for type checkers
            facade = name == "fedsim" and (i.in_function or i.type_only)
            upward = level is not None and target_level is not None and target_level > level
            if upward and not facade:
                problems.append(f"{name}:{i.line}: {i.target}: an import up the layers")
            if (
                _within(i.target, "analysis")
                and not _within(name, "analysis")
                and name not in ("fedsim.study", "fedsim.cli")
            ):
                problems.append(f"{name}:{i.line}: {i.target}: only study and cli use analysis")
        both = {
            layer
            for i in ours
            for layer in ("fedsim.sim", "fedsim.learn")
            if _within(i.target, layer)
        }
        if len(both) == 2 and not _within(name, "fedsim.world"):
            problems.append(f"{name}: imports both sim/ and learn/ (only world/ may)")
    return list(dict.fromkeys(problems))  # one line per rule broken, not per name imported


@pytest.fixture(scope="module")
def graph() -> dict[str, list[Import]]:
    return graph_of(source_modules())


def test_the_layout_keeps_its_import_rules(graph):
    assert violations(graph) == []


def test_every_module_has_a_layer(graph):
    assert [name for name in graph if _within(name, "fedsim") and layer_of(name) is None] == []


def _synthetic(edges: dict[str, list[str]], in_function: tuple[str, ...] = ()) -> dict:
    return {
        name: [Import(t, 1, f"{name}->{t}" in in_function, False) for t in targets]
        for name, targets in edges.items()
    }


def test_the_checker_finds_the_cycles_and_upward_imports_the_layout_had():
    """Today's rules would have failed on the graph before the redesign (2026-11-24)."""
    before = _synthetic(
        {
            "fedsim.world": ["fedsim.links", "fedsim.power", "fedsim.presence", "fedsim.sim"],
            "fedsim.links": ["fedsim.world", "fedsim.sim.radio"],
            "fedsim.power": ["fedsim.world"],
            "fedsim.presence": ["fedsim.power", "fedsim.world"],
            "fedsim.runner": ["fedsim.study"],
            "fedsim.study": ["fedsim.runner"],
            "fedsim.recorder": ["analysis.churn"],
            "fedsim.sim": [],
            "fedsim.sim.radio": [],
            "analysis.plots": ["analysis.stats"],
            "analysis.stats": ["analysis.plots", "analysis.energy"],
            "analysis.energy": ["analysis.plots"],
            "analysis.churn": ["analysis.plots"],
        }
    )
    found = violations(before)
    cyclic = [p for p in found if p.endswith("an import cycle")]
    assert any("fedsim.links" in p and "fedsim.world" in p for p in cyclic)
    assert any("fedsim.runner" in p and "fedsim.study" in p for p in cyclic)
    assert any("analysis.plots" in p and "analysis.stats" in p for p in cyclic)
    assert "fedsim.runner:1: fedsim.study: an import up the layers" in found
    assert "fedsim.recorder:1: analysis.churn: only study and cli use analysis" in found


def test_the_checker_enforces_each_rule_on_a_synthetic_graph():
    graph = _synthetic(
        {
            "fedsim.sim.radio": ["torch", "fedsim.config"],
            "fedsim.learn.data": ["simpy", "fedsim.world"],
            "fedsim.config": [],
            "fedsim.world": [],
            "fedsim.algorithms.x": ["fedsim.sim.compute", "fedsim.learn.trainer"],
            "fedsim.sim.compute": [],
            "fedsim.learn.trainer": [],
            "analysis.plots": ["fedsim.world", "fedsim.results.files"],
            "fedsim.results.files": [],
            "fedsim.cli": ["json"],
        },
        in_function=("fedsim.cli->json",),
    )
    found = violations(graph)
    assert "fedsim.sim.radio:1: torch: sim/ imports no torch, pydantic or config" in found
    assert "fedsim.sim.radio:1: fedsim.config: an import up the layers" in found
    assert "fedsim.learn.data:1: simpy: learn/ imports no simpy, sim, world or algorithms" in found
    assert "fedsim.algorithms.x: imports both sim/ and learn/ (only world/ may)" in found
    assert "analysis.plots:1: fedsim.world: analysis/ imports of fedsim only the contract" in found
    assert not any("fedsim.results.files: analysis" in p for p in found)
    assert any(p.startswith("fedsim.cli:1: json: imported inside a function") for p in found)
