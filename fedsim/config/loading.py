"""Reading a scenario: YAML (no key given twice), ``--set`` overrides, validation, and every
problem reported as a ``ScenarioError`` of ``field.path: reason`` lines."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from fedsim.config.base import ScenarioError
from fedsim.config.errors import describe_all, key_outside_schema
from fedsim.config.scenario import Scenario


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key given twice (PyYAML would keep the last silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict = {}  # key -> the line it first appears on
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, (str, int, float, bool, type(None))):
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"a key must be a plain name, not a {type(key).__name__}",
                    key_node.start_mark,
                )
            line = key_node.start_mark.line + 1
            if key in seen:
                where = (
                    f" on line {line}" if seen[key] == line else f": lines {seen[key]} and {line}"
                )
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice{where}", key_node.start_mark
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


# YAML 1.2 reads ``1e3`` and ``2.5E-4`` as numbers; PyYAML (YAML 1.1) reads them as text unless
# they have a dot and a signed exponent. Numbers given as text are refused (``"4"`` quoted), so
# the loader reads every number as YAML 1.2 does.
_UniqueKeyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def parse_scenario(data: Any, source: str = "<scenario>") -> Scenario:
    if data is None:
        raise ScenarioError(source, ["(top level): the scenario is empty"])
    if not isinstance(data, dict):
        raise ScenarioError(
            source, [f"(top level): a scenario must be a mapping of keys, not a {_kind(data)}"]
        )
    try:
        return Scenario.model_validate(data)
    except ValidationError as error:
        raise ScenarioError(source, describe_all(error.errors(), Scenario)) from None


def apply_overrides(data: Any, overrides: Sequence[str]) -> Any:
    """The scenario data with ``key=value`` overrides applied (``fedsim run --set``).

    A key is a dotted path (``system.network.rho``), with list indices as ``algorithms[0]``;
    ``sweep.<dotted key>`` sets a sweep's values. A value is read as YAML (``2``, ``true``,
    ``[1, 2, 4]``, ``{kind: uniform, low: 1, high: 3}``); sections that do not exist yet are
    created. The result is validated like the file, so a wrong key or value names its field.
    """
    if not overrides:
        return data
    data = copy.deepcopy(data) if isinstance(data, dict) else {}
    for override in overrides:
        key, equals, text = override.partition("=")
        key = key.strip()
        if not equals or not key:
            raise ScenarioError("--set", [f"--set {override!r}: expected key=value"])
        try:
            value = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (SafeLoader subclass)
        except yaml.YAMLError as error:
            raise ScenarioError(
                "--set", [f"--set {key}: invalid value {text!r}: {error}"]
            ) from None
        if key.startswith("sweep."):
            outside = key_outside_schema(key.removeprefix("sweep.").split("."), data, Scenario)
            if outside is not None:
                raise ScenarioError("--set", [f"--set {key}: {outside.reason}"])
            data.setdefault("sweep", {})
            if not isinstance(data["sweep"], dict):
                raise ScenarioError("--set", [f"--set {key}: sweep is not a mapping"])
            data["sweep"][key.removeprefix("sweep.")] = value
            continue
        _set_path(data, key, value)
    return data


def _set_path(data: dict, key: str, value: Any) -> None:
    """data[a][b][i]... = value for key ``a.b[i]...``; missing sections become mappings.

    A key that leaves the schema is refused here, naming it, where the override could not
    build it as written (a list index after it, or keys under a field that holds a value); one
    that builds as sections is left to validation, which names it as in a file
    (``a.b: unknown key (did you mean ...)``)."""
    parts: list[str | int] = []
    for name in key.split("."):
        match = re.fullmatch(r"([^\[\]]+)((?:\[\d+\])*)", name)
        if match is None:
            raise ScenarioError("--set", [f"--set {key}: {name!r} is not a key or key[index]"])
        parts.append(match.group(1))
        parts += [int(i) for i in re.findall(r"\[(\d+)\]", match.group(2))]
    outside = key_outside_schema(parts, data, Scenario)
    if outside is not None and (
        outside.value or any(isinstance(part, int) for part in parts[outside.at :])
    ):
        raise ScenarioError("--set", [f"--set {key}: {outside.reason}"])
    node: Any = data
    for i, part in enumerate(parts[:-1]):
        where = ".".join(str(p) for p in parts[: i + 1])
        if isinstance(part, int):
            if not isinstance(node, list) or part >= len(node):
                raise ScenarioError("--set", [f"--set {key}: {where} has no item {part}"])
            node = node[part]
            continue
        if not isinstance(node, dict):
            raise ScenarioError("--set", [f"--set {key}: {where} is not a section"])
        if not isinstance(node.get(part), (dict, list)):
            node[part] = [] if isinstance(parts[i + 1], int) else {}
        node = node[part]
    last = parts[-1]
    if isinstance(last, int):
        if not isinstance(node, list) or last >= len(node):
            raise ScenarioError("--set", [f"--set {key}: no item {last} to set"])
    elif not isinstance(node, dict):
        raise ScenarioError("--set", [f"--set {key}: its parent is not a section"])
    node[last] = value


def load_scenario(
    path: str | Path, overrides: Sequence[str] = (), flags: Mapping[str, str] | None = None
) -> Scenario:
    """Read and validate a scenario YAML file, with ``key=value`` overrides applied (see
    ``apply_overrides``), then those of other options (``flags``: ``{"--rounds 2":
    "run.rounds=2"}``, named so in the errors): all before the one validation, so no value
    is checked without the others; raises ScenarioError on any problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ScenarioError(str(path), [f"cannot read the file: {error.strerror}"]) from None
    except UnicodeDecodeError as error:
        byte = error.object[error.start]
        raise ScenarioError(
            str(path), [f"not a UTF-8 text file (byte {byte:#04x} at offset {error.start})"]
        ) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(error, "problem", None) or str(error)
        raise ScenarioError(str(path), [f"invalid YAML: {where}{problem}"]) from None
    except RecursionError:
        raise ScenarioError(str(path), ["invalid YAML: nested too deeply"]) from None
    except ValueError as error:  # e.g. an integer of more than 4300 digits
        raise ScenarioError(str(path), [f"invalid YAML: {error}"]) from None
    flags = flags or {}
    given = [f"--set {override}" for override in overrides] + list(flags)  # as typed
    source = str(path) + (f" with {' '.join(given)}" if given else "")
    return parse_scenario(apply_overrides(data, [*overrides, *flags.values()]), source)


def _kind(value: Any) -> str:
    """What a YAML value is, in the file's words."""
    if isinstance(value, list):
        return "list"
    return "single value" if not isinstance(value, dict) else "mapping"
