"""Fuzz the shipped scenarios: a mutated file is either valid or a clear error, never a traceback.

Every shipped scenario is mutated (a key deleted, a value replaced by a random number, text,
boolean, null, list or mapping, an unknown key added, a value wrapped in a list or unwrapped,
a discriminator changed, the text cut short) and given to ``fedsim validate``: it must exit 0
or 2 without an exception or a traceback. A mutation that validates also gets a 2-round
``fedsim budget``, which must exit 0 or 2 and print finite numbers only: validation promises
that every accepted value can run.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import tempfile
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from fedsim.cli import main
from fedsim.config import _TAG_MODELS, Scenario, load_scenario
from tests.conftest import REPO, requires_real_data

SCENARIOS = sorted((REPO / "scenarios").glob("*.yaml"))
ORIGINALS = {path.name: yaml.safe_load(path.read_text()) for path in SCENARIOS}

# Training pool per dataset as stored offline (CIFAR-10: 3 of the 5 training batches).
POOL_SIZES = {"mnist": 60_000, "fashion_mnist": 60_000, "cifar10": 30_000, "synthetic": 6_000}
TAGS = sorted(
    {*_TAG_MODELS, "label_permutation", "rotation", *POOL_SIZES, "mlp", "lenet5", "cnn", "nope"}
)
BUDGET_MAX_CLIENTS = 100  # above, a 2-round budget of the bigger scenarios takes too long

NUMBERS = st.one_of(
    st.integers(-10, 1000),
    st.sampled_from([0, -1, 2**31, 2**63, 10**30, -(10**30), 10**400]),
    st.floats(allow_nan=True, allow_infinity=True),  # subnormals, 1e308, -0.0, ...
    st.sampled_from([math.inf, -math.inf, math.nan, 1e308, 1e-300, 1e30, -1.5, 1e-9, 0.5]),
)
SCALARS = st.one_of(NUMBERS, st.text(max_size=12), st.booleans(), st.none())
VALUES = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=6,
)
MUTATIONS = ("delete", "replace", "fill", "add_key", "wrap", "unwrap", "retag", "truncate")


def places(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key of a mapping and index of a list in the document, as paths from the top."""
    found = []
    if isinstance(node, dict):
        items = node.items()
    elif isinstance(node, list):
        items = enumerate(node)
    else:
        return found
    for key, value in items:
        found.append((*prefix, key))
        found += places(value, (*prefix, key))
    return found


def members(annotation: Any) -> list[type[BaseModel]]:
    """The schema models an annotation allows (a union's members, a list's items)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in members(arg)]


def choose(models: list[type[BaseModel]], node: Any) -> type[BaseModel] | None:
    """The model a mapping is meant to be: the only one allowed, or the one its tag names."""
    if len(models) == 1:
        return models[0]
    for model in models:
        for tag in ("kind", "name"):
            field = model.model_fields.get(tag)
            tags = () if field is None else typing.get_args(field.annotation)
            if isinstance(node, dict) and node.get(tag) in tags:
                return model
    return None


def model_at(document: Any, path: tuple) -> type[BaseModel] | None:
    """The schema model of the mapping at path in the document, if it is one."""
    annotation: Any = Scenario
    node = document
    for key in path:
        if not isinstance(key, int):
            model = choose(members(annotation), node)
            if model is None or key not in model.model_fields:
                return None
            annotation = model.model_fields[key].annotation
        node = node[key]
    return choose(members(annotation), node) if isinstance(node, dict) else None


def known_value(annotation: Any, depth: int = 2) -> st.SearchStrategy:
    """A random value for a field: any value, or a section with some of its real keys."""
    models = members(annotation)
    if not models or depth == 0:
        return VALUES
    return st.one_of(VALUES, *(section(model, depth - 1) for model in models))


def section(model: type[BaseModel], depth: int) -> st.SearchStrategy:
    fields = model.model_fields
    tags = {
        tag: st.sampled_from(typing.get_args(fields[tag].annotation))
        for tag in ("kind", "name")
        if tag in fields and typing.get_origin(fields[tag].annotation) is typing.Literal
    }
    optional = {
        name: known_value(field.annotation, depth)
        for name, field in fields.items()
        if name not in tags
    }
    return st.fixed_dictionaries(tags, optional=optional)


def mutate(document: Any, data: st.DataObject) -> str:
    """One random mutation of the document (in place), returned as YAML text."""
    kind = data.draw(st.sampled_from(MUTATIONS), label="mutation")
    paths = places(document)
    if kind == "truncate":
        text = yaml.safe_dump(document, sort_keys=False)
        return text[: data.draw(st.integers(0, len(text)), label="cut at")]
    if kind == "fill":  # a real key of a section, with a random value
        sections = [p for p in [(), *paths] if model_at(document, p) is not None]
        path = data.draw(st.sampled_from(sections), label="section")
        model = model_at(document, path)
        target = document
        for key in path:
            target = target[key]
        name = data.draw(st.sampled_from(sorted(model.model_fields)), label="key")
        target[name] = data.draw(known_value(model.model_fields[name].annotation), label="value")
        return yaml.safe_dump(document, sort_keys=False)
    if kind == "retag":
        tagged = [p for p in paths if p[-1] in ("kind", "name")]
        path = data.draw(st.sampled_from(tagged), label="path")
        value: Any = data.draw(st.sampled_from(TAGS), label="tag")
    else:
        path = data.draw(st.sampled_from([(), *paths]), label="path")
    if not path:  # the document itself
        document = data.draw(VALUES, label="document") if kind == "replace" else [document]
        return yaml.safe_dump(document)
    parent = document
    for key in path[:-1]:
        parent = parent[key]
    key, old = path[-1], parent[path[-1]]
    if kind == "delete":
        del parent[key]
    elif kind == "replace":
        parent[key] = data.draw(VALUES, label="value")
    elif kind == "add_key":
        target = old if isinstance(old, dict) else parent
        if isinstance(target, dict):
            target[data.draw(st.text(min_size=1, max_size=10), label="new key")] = data.draw(
                VALUES, label="its value"
            )
    elif kind == "wrap":
        parent[key] = [old]
    elif kind == "unwrap" and isinstance(old, (list, dict)) and old:
        parent[key] = old[0] if isinstance(old, list) else next(iter(old.values()))
    elif kind == "retag":
        parent[key] = value
    return yaml.safe_dump(document, sort_keys=False)


def call(argv: list[str]) -> tuple[int, str, str]:
    """fedsim's exit code and output, in this process: an exception escaping main fails."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_:  # argparse's own usage errors
            code = exit_.code if isinstance(exit_.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def samples(scenario: Scenario) -> int:
    dataset = scenario.dataset
    return dataset.num_samples or POOL_SIZES[dataset.name]


def budget_is_cheap(mutated: Scenario, original: Scenario) -> bool:
    """Skip the budget (only to keep the test fast) for mutants much bigger than the original;
    also when the data root changed, where a budget would try a download."""
    return (
        mutated.clients.total <= max(BUDGET_MAX_CLIENTS, original.clients.total)
        and samples(mutated) <= 2 * samples(original)
        and len(mutated.variants()) <= len(original.variants())
        and mutated.dataset.root == original.dataset.root
    )


def finite_everywhere(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(finite_everywhere(v) for v in value.values())
    if isinstance(value, list):
        return all(finite_everywhere(v) for v in value)
    return True


NON_FINITE = re.compile(r"(?<![\w@=.+,-])[-+]?(nan|inf|infinity)(?![\w@=.+,-])", re.IGNORECASE)


def check_mutant(name: str, data: st.DataObject) -> None:
    document = yaml.safe_load(yaml.safe_dump(ORIGINALS[name]))  # a fresh copy
    text = mutate(document, data)
    note(text)
    with tempfile.TemporaryDirectory() as folder, contextlib.chdir(folder):
        path = Path(folder) / name
        path.write_text(text)
        code, out, err = call(["validate", str(path)])
        assert code in (0, 2), (code, out, err)
        assert "Traceback" not in out + err
        if code == 2:
            assert err.strip(), "exit code 2 without saying why"
            return
        mutated, original = load_scenario(path), load_scenario(REPO / "scenarios" / name)
        if not budget_is_cheap(mutated, original):
            return
        report = Path(folder) / "budget.json"
        code, out, err = call(["budget", str(path), "--rounds", "2", "--json", str(report)])
        assert code in (0, 2), (code, out, err)
        assert "Traceback" not in out + err
        if code == 2:
            return
        assert finite_everywhere(json.loads(report.read_text())), report.read_text()
        words = [mutated.name, *(a.run_label for v in mutated.variants() for a in v.algorithms)]
        if not any(NON_FINITE.search(word) for word in words):  # a label may be called 'inf'
            assert not NON_FINITE.search(out), out


FUZZ = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@requires_real_data
@pytest.mark.parametrize("name", [path.name for path in SCENARIOS])
@settings(FUZZ, max_examples=4)
@given(data=st.data())
def test_mutated_scenario_is_valid_or_a_clear_error(name: str, data: st.DataObject) -> None:
    check_mutant(name, data)


@pytest.mark.slow
@requires_real_data
@pytest.mark.parametrize("name", [path.name for path in SCENARIOS])
@settings(FUZZ, max_examples=42)  # about 500 in all
@given(data=st.data())
def test_many_mutated_scenarios_are_valid_or_clear_errors(name: str, data: st.DataObject) -> None:
    check_mutant(name, data)


NASTY = [None, True, -1, 0, 10**30, 1e308, math.inf, -math.inf, math.nan, 1e-300, "", "x"]
NASTY += [[], [1], [[1]], ["fedavg"], {}, {"a": 1}, {"name": ["x"]}, {"kind": {}}]


def all_models() -> list[type[BaseModel]]:
    found: list[type[BaseModel]] = []
    todo = [Scenario, *_TAG_MODELS.values()]
    while todo:
        model = todo.pop()
        if model not in found:
            found.append(model)
            todo += [m for field in model.model_fields.values() for m in members(field.annotation)]
    return sorted(found, key=lambda model: model.__name__)


@pytest.mark.parametrize("model", all_models(), ids=lambda model: model.__name__)
def test_every_field_of_every_section_takes_any_value_without_an_exception(model):
    """Each section's own checks, fed odd values key by key: a validation error or a valid
    section, never another exception (which would escape as a traceback)."""
    fields = model.model_fields
    tags = {
        tag: typing.get_args(fields[tag].annotation)[0]
        for tag in ("kind", "name")
        if tag in fields and typing.get_origin(fields[tag].annotation) is typing.Literal
    }
    for name in fields:
        for value in NASTY:
            with contextlib.suppress(ValidationError):
                model.model_validate({**tags, name: value})
