"""Pydantic's validation errors as ``field.path: reason`` lines, in the user's words: the keys
as written (pydantic's union tags dropped), the valid keys or tags listed, a near miss named.

The functions that walk the schema take its root model as an argument, so that this module
does not import the scenario (whose sweeps report their errors through it).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from fedsim.config.algorithms import ALGORITHMS
from fedsim.config.base import (
    BOOL_NOT_NUMBER,
    BOUND_REASONS,
    TEXT_NOT_NUMBER,
    _not_a_boolean,
    tag_of,
)
from fedsim.config.clients import AVAILABILITIES
from fedsim.config.compression import CODECS
from fedsim.config.data import PARTITIONS
from fedsim.config.laws import POWER_LAWS, RATE_LAWS
from fedsim.config.link import LINKS
from fedsim.config.pathloss import D2D_PATH_LOSSES, PATH_LOSSES

# Every tagged union of the schema, with its tag field. Two unions may share a tag (``constant``
# and ``uniform`` are rate laws and power laws): the registry keeps the first, the rate law, and
# ``_tagged_member`` finds the right one from the union at hand.
TAGGED_UNIONS: tuple[tuple[tuple[type[BaseModel], ...], str], ...] = (
    (RATE_LAWS, "kind"),
    (AVAILABILITIES, "kind"),
    (PATH_LOSSES, "kind"),
    (D2D_PATH_LOSSES, "kind"),
    (LINKS, "model"),
    (POWER_LAWS, "kind"),
    (PARTITIONS, "kind"),
    (ALGORITHMS, "name"),
    (CODECS, "codec"),
)


def _registry() -> dict[str, type[BaseModel]]:
    """Tag -> model of every member of every tagged union (the first, where tags repeat)."""
    models: dict[str, type[BaseModel]] = {}
    for members, discriminator in TAGGED_UNIONS:
        for member in members:
            models.setdefault(tag_of(member, discriminator), member)
    return models


_TAG_MODELS = _registry()
_UNION_TAGS = set(_TAG_MODELS)
# pydantic names a union's number member after its true/false check too ("function-before[
# _not_a_boolean(), constrained-int]"): paths show the member's own name, as before that check.
_NO_BOOL_MEMBER = re.compile(rf"function-before\[{_not_a_boolean.__name__}\(\), (.*)\]")


# How pydantic names the members of a union that are no model (``vmap_chunk: int | 'auto'``):
# ``constrained-int``, ``literal['auto']``. A path leaves them out: the user wrote one key.
_UNION_MEMBER = re.compile(
    r"(constrained-)?(int|float|str|bool)|literal\[.*\]|(function|lax-or-strict)-?\w*\[.*\]"
)


def _field_path(loc: tuple) -> str:
    path = ""
    for previous, part in zip((None, *loc), loc, strict=False):
        member = _NO_BOOL_MEMBER.fullmatch(part) if isinstance(part, str) else None
        if member is not None:
            part = member.group(1)
        if isinstance(part, str) and _UNION_MEMBER.fullmatch(part):
            continue
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in _UNION_TAGS or (previous == "constant" and part in ("value", "value_dbm")):
            continue  # pydantic's own union bookkeeping; the user never wrote these keys
        else:
            part = _key_text(part)
            path += f".{part}" if path else part
    return path or "(top level)"


def _walk(loc: tuple, root: type[BaseModel]) -> tuple[Any, Any] | None:
    """(model, annotation) of the field at loc, from root; None where loc leaves the schema."""
    model: Any = root
    annotation: Any = None
    for part in loc:
        if isinstance(part, int):
            continue
        if part in _UNION_TAGS:
            model = _tagged_member(annotation, part)
            continue
        field = model.model_fields.get(part) if isinstance(model, type) else None
        if field is None:
            return None
        annotation = field.annotation
        model = _field_model(annotation)
    return model, annotation


def _model_at(loc: tuple, root: type[BaseModel]) -> type[BaseModel] | None:
    """The model class that holds the field at loc (to list valid keys)."""
    model = (_walk(loc, root) or (None, None))[0]
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _tagged_member(annotation: Any, tag: str) -> type[BaseModel]:
    """The member of the union at hand whose tag is ``tag`` (``uniform`` is a rate law in one
    place and a power law in another)."""
    for member in _models_in(annotation):
        for name in ("kind", "name"):
            field = member.model_fields.get(name)
            if field is not None and tag in getattr(field.annotation, "__args__", ()):
                return member
    return _TAG_MODELS[tag]


def _field_model(annotation: Any) -> Any:
    for candidate in getattr(annotation, "__args__", ()) or ():
        found = _field_model(candidate)
        if found is not None:
            return found
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """Every model class an annotation mentions (the members of a union, a list's items)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in getattr(annotation, "__args__", ()) or () for m in _models_in(arg)]


def _union_tags(loc: tuple, discriminator: str, root: type[BaseModel]) -> list[str]:
    """The valid values of the tag of the union at loc (pydantic lists none when it is missing)."""
    found = _walk(loc, root)
    if found is None:
        return []
    tags = []
    for member in _models_in(found[1]):
        field = member.model_fields.get(discriminator)
        if field is not None:
            tags += [tag for tag in getattr(field.annotation, "__args__", ()) if tag not in tags]
    return tags


def _key_text(key: Any) -> str:
    """A key as written, or quoted when it is not a plain name (spaces, line breaks, ...)."""
    return (
        key
        if isinstance(key, str) and re.fullmatch(r"[\w.-]{1,60}", key, re.ASCII)
        else _shown(key)
    )


def _shown(value: Any) -> str:
    """A short rendering of a bad value (a 5000-digit number would drown the message)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {int(value.bit_length() * 0.30103) + 1} digits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class OutsideSchema:
    """Where a key path leaves the schema: ``parts[at]`` is no key there (``value``: the path
    goes on under a field that holds a value, not a section); ``reason`` says so."""

    at: int
    reason: str
    value: bool


def key_outside_schema(
    parts: Sequence[str | int], data: Any, root: type[BaseModel]
) -> OutsideSchema | None:
    """Where the key path ``parts`` (names, and list indices as ints) leaves the schema of
    ``root``, or None where it stays in it (or goes where the schema holds free keys).

    ``data`` (the scenario as written) picks a union's member by its tag, so that the keys of
    ``algorithms[0]`` are those of the algorithm named there; without a known tag, any
    member's key will do. Sections absent from ``data`` are walked in the schema alone.
    """
    models: list[type[BaseModel]] = [root]
    annotation: Any = root
    node = data
    for at, part in enumerate(parts):
        where = _key_path(parts[:at])
        if isinstance(part, int):
            node = node[part] if isinstance(node, list) and 0 <= part < len(node) else None
            models = _tagged_as(_models_in(annotation), node)
            continue
        if not models:
            if _free_keys(annotation):
                return None
            return OutsideSchema(at, f"{where} is a value, not a section", value=True)
        # every candidate's keys; where two share one, the first member's field describes it
        fields = {name: m.model_fields[name] for m in reversed(models) for name in m.model_fields}
        if part not in fields:
            valid = sorted(fields)
            listed = f"; valid keys: {', '.join(valid)}" if len(models) == 1 else ""
            inside = f" in {where}" if where else ""
            reason = f"no key {part!r}{inside}{did_you_mean(part, valid)}{listed}"
            return OutsideSchema(at, reason, value=False)
        annotation = fields[part].annotation
        node = node.get(part) if isinstance(node, dict) else None
        models = _tagged_as(_models_in(annotation), node)
    return None


def _tagged_as(models: list[type[BaseModel]], node: Any) -> list[type[BaseModel]]:
    """The union members whose tag ``node`` (a section as written) gives, else them all."""
    if len(models) < 2 or not isinstance(node, dict):
        return models
    tagged = [
        model
        for model in models
        for name in ("kind", "name")
        if name in model.model_fields
        and node.get(name) in getattr(model.model_fields[name].annotation, "__args__", ())
    ]
    return tagged or models


def _free_keys(annotation: Any) -> bool:
    """Whether an annotation is (or may be) a mapping of free keys, e.g. ``sweep``."""
    if getattr(annotation, "__origin__", None) is dict:
        return True
    return any(_free_keys(arg) for arg in getattr(annotation, "__args__", ()) or ())


def _key_path(parts: Sequence[str | int]) -> str:
    """``algorithms[0].deadline_s`` from its parts."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts).lstrip(".")


def did_you_mean(word: Any, choices: list[str]) -> str:
    """`` (did you mean 'x'?)`` with the choice closest to a misspelled key or name, or ''."""
    hint = difflib.get_close_matches(str(word), choices, n=1)
    return f" (did you mean {hint[0]!r}?)" if hint else ""


def describe(error: dict, root: type[BaseModel]) -> str:
    """One pydantic error (of ``error.errors()``) of a ``root`` model as ``field.path: reason``."""
    loc = tuple(error["loc"])
    path = _field_path(loc)
    if error["type"] == "extra_forbidden":
        parent = _model_at(loc[:-1], root)
        valid = sorted(parent.model_fields) if parent else []
        suggestion = did_you_mean(loc[-1], valid)
        parent_path = _field_path(loc[:-1])  # the unknown key itself is never a union tag
        key = _key_text(loc[-1])
        path = key if parent_path == "(top level)" else f"{parent_path}.{key}"
        return f"{path}: unknown key{suggestion}; valid keys: {', '.join(valid)}"
    if error["type"] == "union_tag_invalid":
        context = error["ctx"]
        key = context["discriminator"].strip("'")
        suggestion = did_you_mean(context["tag"], _union_tags(loc, key, root))
        return (
            f"{path}.{key}: unknown {_shown(context['tag'])}{suggestion}; "
            f"valid: {context['expected_tags']}"
        )
    if error["type"] == "union_tag_not_found":
        key = error["ctx"]["discriminator"].strip("'")
        valid = ", ".join(repr(tag) for tag in _union_tags(loc, key, root))
        return f"{path}.{key}: missing key {key!r}; valid: {valid}"
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "int_parsing_size":
        message = "Input is too large for a whole number"
    if error["type"] in ("model_type", "model_attributes_type", "dict_type"):
        message = "Input should be a mapping of keys (a section)"
    if loc and loc[-1] == "[key]":  # a mapping's key, e.g. a sweep key that is not a string
        path, message = _field_path(loc[:-2]), f"key {loc[-2]!r}: {message}"
    if not loc and re.match(r"^[\w.\[\]]+: ", message):
        return message  # a cross-field check that names its own field
    if re.match(rf"^{re.escape(path)}[.\[][\w.\[\]]*: ", message):
        return message  # a section's check naming a field inside it by its whole path
    own = re.match(r"^(\w+): ", message)  # a section's check naming one of its fields
    section = _model_at(loc, root) if own and error["type"] == "value_error" else None
    if section is not None and own.group(1) in section.model_fields:
        return f"{path}.{message}"
    value = error.get("input")
    named = isinstance(value, str) and value in message  # e.g. a file path the message names
    shown = isinstance(value, (int, float, str, bool)) and not named
    said = ("missing", BOOL_NOT_NUMBER, TEXT_NOT_NUMBER)  # the message shows the value itself
    if error["type"] not in said and shown:
        message += f" (got {_shown(value)})"
    reason = _bound_reason(path, error)
    if reason is not None:
        message += f": {reason}"
    return f"{path}: {message}"


# ``latency_s`` before ``_s``: a key takes the reason of the longest unit it ends with
_BOUND_REASONS_LONGEST_UNIT_FIRST = sorted(BOUND_REASONS.items(), key=lambda r: -len(r[0][0]))
_BOUND_ERRORS = {"greater_than": "gt", "greater_than_equal": "ge", "less_than": "lt",
                 "less_than_equal": "le"}  # fmt: skip


def _bound_reason(path: str, error: dict) -> str | None:
    """Why a bound of a simulated quantity is where it is (``BOUND_REASONS``), by the unit of
    the last key of ``path`` that has one (``uplink_mbps`` of ``uplink_mbps.low``)."""
    bound = _BOUND_ERRORS.get(error["type"])
    if bound is None:
        return None
    limit = float(error["ctx"][bound])
    for key in reversed(re.sub(r"\[\d+\]", "", path).split(".")):
        for (unit, at), reason in _BOUND_REASONS_LONGEST_UNIT_FIRST:
            if key.endswith(unit) and at == limit:
                return reason
    return None


def describe_all(errors: Sequence[dict], root: type[BaseModel]) -> list[str]:
    """Every pydantic error as ``field.path: reason``, the alternatives of one union said as
    one line (``vmap_chunk: Input should be greater than 0, or 'auto' (got -3)``)."""
    lines: dict[str, list[str]] = {}
    for error in errors:
        path, _, reason = describe(error, root).partition(": ")
        lines.setdefault(path, []).append(reason)
    return [f"{path}: {_one_of(reasons)}" for path, reasons in lines.items()]


def _one_of(reasons: list[str]) -> str:
    """Reasons of one field joined: the value said once, at the end."""
    if len(reasons) == 1:
        return reasons[0]
    got = re.compile(r" \(got .*\)$")
    found = [got.search(reason) for reason in reasons]
    tail = next((m.group(0) for m in found if m is not None), "")
    bare = [got.sub("", reason) for reason in reasons]
    rest = [reason.removeprefix("Input should be ") for reason in bare[1:]]
    return ", or ".join([bare[0], *rest]) + tail
