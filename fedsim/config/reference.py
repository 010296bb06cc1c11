"""The scenario reference, read from the schema (``Scenario.model_json_schema()``, what
``fedsim schema`` prints): every section of a scenario file with, for each key, its type,
default, unit, allowed values and description. The documentation site renders it
(``docs/hooks.py``), so a setting is documented where it is defined, by its ``description``;
tests/test_reference.py checks that no key goes without one.

A section is one model of the schema, listed once, at the first path where a scenario meets it
(depth first, in the order of the keys); the other paths that use it are listed with it. A
tagged union's members are sections of their own, one per tag (``kind: uniform``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import BaseModel

# A key's unit is in its name (DESIGN: units in every key); the longest suffix wins.
UNITS = (
    ("_dbm_per_hz", "dBm/Hz"),
    ("_db_per_k", "dB/K"),
    ("_s_per_mparam", "s per 10⁶ numbers"),
    ("_bits_per_hz", "bit/s/Hz"),
    ("_per_s", "1/s"),
    ("_mbps", "Mbit/s"),
    ("_mhz", "MHz"),
    ("_ghz", "GHz"),
    ("_khz", "kHz"),
    ("_hz", "Hz"),
    ("_dbm", "dBm"),
    ("_dbw", "dBW"),
    ("_db", "dB"),
    ("_ns", "ns"),
    ("_s", "s"),
    ("_mps", "m/s"),
    ("_km", "km"),
    ("_m", "m"),
    ("_w", "W"),
    ("_j", "J"),
    ("_deg", "degrees"),
    ("_bits", "bits"),
    ("_prbs", "PRBs"),
    ("_blocks", "fading blocks"),
)
INLINE_DEFAULT_CHARS = 60  # a section's default longer than this is shown as its own keys


def unit_of(key: str) -> str:
    """The unit a key's name ends with, or '' for a count, a fraction or a choice."""
    for suffix, unit in UNITS:
        if key.endswith(suffix):
            return unit
    return ""


@dataclass(frozen=True)
class Key:
    """One key of a section, as a reader of the reference needs it."""

    name: str
    type: str  # Markdown: links to the sections it holds
    default: str  # YAML, or "required"
    unit: str
    allowed: str
    description: str
    is_tag: bool = False  # a union member's tag (kind, name, codec, model): its section says it


@dataclass
class Section:
    """One model of the schema at the first path where a scenario meets it."""

    definition: str  # the schema's name for it ($defs key; "Scenario" for the root)
    path: str  # e.g. "system.radio.fading"; "" for the root
    tag: tuple[str, str] | None  # (tag key, value) for a union member
    doc: str
    keys: list[Key] = field(default_factory=list)
    also_at: list[str] = field(default_factory=list)

    @property
    def shared(self) -> bool:
        """Met at several paths (a law, a codec): named by its model, not by one path."""
        return bool(self.also_at)

    @property
    def title(self) -> str:
        where = self.definition if self.shared else self.path or "scenario file (top level)"
        return f"{where} ({self.tag[0]}: {self.tag[1]})" if self.tag else where

    @property
    def anchor(self) -> str:
        where = self.definition if self.shared else self.path or "top-level"
        return anchor_of(where, self.tag[1] if self.tag else None)

    @property
    def paths(self) -> list[str]:
        return [self.path, *self.also_at]


def anchor_of(path: str, tag: str | None = None) -> str:
    text = f"{path}-{tag}" if tag else path
    return re.sub(r"[^a-z0-9_]+", "-", text.lower()).strip("-")


class Reference:
    """Every section of a schema (a JSON Schema as pydantic writes it), in reading order."""

    def __init__(self, schema: dict[str, Any], root: str = "Scenario") -> None:
        self.definitions: dict[str, dict[str, Any]] = {**schema.get("$defs", {}), root: schema}
        self.sections: list[Section] = []
        self._by_definition: dict[str, Section] = {}
        self._visit(root, "", None)
        for section in self.sections:  # once every section is known, so each link finds it
            schema = self.definitions[section.definition]
            required = schema.get("required", ())
            section.keys = [
                self._key(name, prop, section.tag, required)
                for name, prop in schema.get("properties", {}).items()
            ]

    @classmethod
    def of(cls, model: type[BaseModel]) -> Reference:
        return cls(model.model_json_schema(), model.__name__)

    def section(self, definition: str) -> Section:
        return self._by_definition[definition]

    # --- the walk -------------------------------------------------------------------------

    def _visit(self, definition: str, path: str, tag: tuple[str, str] | None) -> None:
        if definition in self._by_definition:
            seen = self._by_definition[definition]
            if path not in seen.paths:
                seen.also_at.append(path)
            return
        schema = self.definitions[definition]
        section = Section(definition, path, tag, " ".join(schema.get("description", "").split()))
        self._by_definition[definition] = section
        self.sections.append(section)
        for name, prop in schema.get("properties", {}).items():
            for child, child_path, child_tag in self._sections_in(
                prop, f"{path}.{name}" if path else name
            ):
                self._visit(child, child_path, child_tag)

    def _sections_in(self, prop: dict[str, Any], path: str) -> list[tuple[str, str, Any]]:
        """The (definition, path, tag) of every model a key holds, directly or in a list, a
        union or a mapping."""
        found: list[tuple[str, str, Any]] = []
        if "$ref" in prop:
            found.append((_ref_name(prop["$ref"]), path, None))
        if "discriminator" in prop:
            tag_key = prop["discriminator"]["propertyName"]
            for value, ref in _members(prop):
                found.append((_ref_name(ref), path, (tag_key, value)))
            return found
        for member in prop.get("anyOf", []) + prop.get("oneOf", []):
            found += self._sections_in(member, path)
        if isinstance(prop.get("items"), dict):
            found += self._sections_in(prop["items"], f"{path}[]")
        for item in prop.get("prefixItems", []):
            found += self._sections_in(item, f"{path}[]")
        if isinstance(prop.get("additionalProperties"), dict):
            found += self._sections_in(prop["additionalProperties"], f"{path}.*")
        return found

    def _key(
        self, name: str, prop: dict[str, Any], tag: tuple[str, str] | None, required: Any
    ) -> Key:
        is_tag = tag is not None and name == tag[0]
        if "default" in prop:
            default = _yaml(prop["default"])
            if len(default) > INLINE_DEFAULT_CHARS and self._sections_in(prop, name):
                default = "its keys' defaults"
        else:
            default = "required" if name in required else "none"
        return Key(
            name=name,
            type=self.type_of(prop),
            default=default,
            unit=unit_of(name),
            allowed=allowed_of(prop),
            description=" ".join(prop.get("description", "").split()),
            is_tag=is_tag,
        )

    # --- types ----------------------------------------------------------------------------

    def type_of(self, prop: dict[str, Any]) -> str:
        """A key's type in words, each model it holds a link to its section (#anchor)."""
        if "$ref" in prop:
            return self._link(_ref_name(prop["$ref"]))
        if "discriminator" in prop:
            tag_key = prop["discriminator"]["propertyName"]
            members = [
                self._link(_ref_name(ref), f"{tag_key}: {value}") for value, ref in _members(prop)
            ]
            return "one of " + " | ".join(members)
        for union in ("anyOf", "oneOf"):
            if union in prop:
                members = [self.type_of(m) for m in prop[union]]
                return " or ".join(dict.fromkeys(members))  # an order kept, repeats dropped
        if "const" in prop:
            return _yaml(prop["const"])
        kind = prop.get("type")
        if kind == "array":
            if "prefixItems" in prop:
                return "[" + ", ".join(self.type_of(item) for item in prop["prefixItems"]) + "]"
            items = prop.get("items") or {}
            return f"list of {self.type_of(items) if items else 'values'}"
        if kind == "object" and isinstance(prop.get("additionalProperties"), dict):
            return f"mapping: key → {self.type_of(prop['additionalProperties'])}"
        if prop.get("format") == "path":
            return "path"
        words = {"integer": "integer", "number": "number", "string": "text", "boolean": "bool"}
        if "enum" in prop:
            return words.get(kind, "value")
        return words.get(kind, "null" if kind == "null" else "any")

    def _link(self, definition: str, text: str | None = None) -> str:
        section = self._by_definition[definition]
        return f"[{text or section.title}](#{section.anchor})"


def allowed_of(prop: dict[str, Any]) -> str:
    """The values a key takes: its choices, its bounds, its lengths (null where it may be)."""
    parts: list[str] = []
    members = prop.get("anyOf", []) or [prop]
    for member in members:
        if "enum" in member:
            parts.append(" | ".join(f"`{_yaml(value)}`" for value in member["enum"]))
        bounds = _bounds(member)
        if bounds:
            parts.append(bounds)
        items = member.get("items")
        if isinstance(items, dict) and (_bounds(items) or "enum" in items):
            choices = " | ".join(f"`{_yaml(value)}`" for value in items.get("enum", []))
            parts.append("each " + (_bounds(items) or choices))
        lengths = _lengths(member)
        if lengths:
            parts.append(lengths)
    if any(member.get("type") == "null" for member in members):
        parts.append("null")
    return "; ".join(parts)


def _bounds(prop: dict[str, Any]) -> str:
    low = (
        f"{_number(prop['minimum'])} ≤ "
        if "minimum" in prop
        else f"{_number(prop['exclusiveMinimum'])} < "
        if "exclusiveMinimum" in prop
        else ""
    )
    high = (
        f" ≤ {_number(prop['maximum'])}"
        if "maximum" in prop
        else f" < {_number(prop['exclusiveMaximum'])}"
        if "exclusiveMaximum" in prop
        else ""
    )
    return f"{low}x{high}" if low or high else ""


def _lengths(prop: dict[str, Any]) -> str:
    low, high = prop.get("minItems"), prop.get("maxItems")
    if low is None and high is None or "prefixItems" in prop:
        return ""
    if low == high:
        return _items(low)
    return " and ".join(
        part
        for part in (f"at least {_items(low)}" if low else "", f"at most {high}" if high else "")
        if part
    )


def _items(count: int) -> str:
    return f"{count} item" if count == 1 else f"{count} items"


def _number(value: float) -> str:
    if float(value).is_integer() and abs(value) < 1e19:
        return f"{int(value):,}" if abs(value) >= 10_000 else str(int(value))
    return f"{value:g}"


def _yaml(value: Any) -> str:
    """A value as a scenario file writes it (YAML flow style)."""
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10_000)
    return text.strip().removesuffix("...").strip()


def _members(union: dict[str, Any]) -> list[tuple[str, str]]:
    """(tag, $ref) of a tagged union's members in the order the schema declares them (the
    discriminator's mapping is sorted by tag)."""
    tag_of = {ref: value for value, ref in union["discriminator"]["mapping"].items()}
    return [(tag_of[member["$ref"]], member["$ref"]) for member in union["oneOf"]]


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]
