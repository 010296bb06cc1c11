"""The scenario reference generated from the schema (fedsim.config.reference, drawn into the
documentation site by docs/hooks.py): every field described, every field listed once with its
type, default, unit and bounds, and every algorithm's options on a page of the site."""

from __future__ import annotations

import re

import pytest

from fedsim.config import Scenario
from fedsim.config.algorithms import ALGORITHM_NAMES, FedAdamConfig, algorithm_model
from fedsim.config.reference import Reference, unit_of
from tests.conftest import REPO

SCHEMA = Scenario.model_json_schema()
REFERENCE = Reference(SCHEMA)


def _union_tags() -> dict[str, str]:
    """Definition -> its tag key, for every member of a tagged union anywhere in the schema."""
    tags: dict[str, str] = {}

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if "discriminator" in node:
                for ref in node["discriminator"]["mapping"].values():
                    tags[ref.rsplit("/", 1)[-1]] = node["discriminator"]["propertyName"]
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(SCHEMA)
    return tags


def test_every_field_of_the_schema_has_a_description():
    """A field's description is its documentation: none may be missing. A tagged union's tag
    (kind, name, model, codec) is documented by its member's docstring instead."""
    tags = _union_tags()
    definitions = {"Scenario": SCHEMA, **SCHEMA["$defs"]}
    undescribed = []
    for name, definition in definitions.items():
        for field, prop in definition.get("properties", {}).items():
            if prop.get("description", "").strip():
                continue
            if tags.get(name) == field and definition.get("description", "").strip():
                continue
            undescribed.append(f"{name}.{field}")
    assert undescribed == []
    assert len(definitions) > 80  # the walk saw the whole schema


def test_the_reference_lists_every_field_of_the_schema_once():
    listed = [(s.definition, key.name) for s in REFERENCE.sections for key in s.keys]
    assert len(listed) == len(set(listed))
    in_schema = {
        (name, field)
        for name, definition in {"Scenario": SCHEMA, **SCHEMA["$defs"]}.items()
        for field in definition.get("properties", {})
    }
    assert set(listed) == in_schema
    assert {s.definition for s in REFERENCE.sections} == {"Scenario", *SCHEMA["$defs"]}


def _key(definition: str, name: str):
    return next(key for key in REFERENCE.section(definition).keys if key.name == name)


def test_a_key_says_its_type_default_unit_and_bounds():
    rho = _key("NetworkConfig", "rho")
    assert (rho.type, rho.default, rho.unit) == ("number", "1.0", "")
    assert rho.allowed == "0.001 ≤ x ≤ 1000"
    latency = _key("NetworkConfig", "latency_s")
    assert (latency.unit, latency.allowed) == ("s", "0 ≤ x ≤ 60")
    medium = _key("NetworkConfig", "uplink_medium")
    assert medium.allowed == "`parallel` | `tdma` | `shared`"
    capacity = _key("NetworkConfig", "cell_capacity_mbps")
    assert capacity.type == "number or null" and capacity.allowed.endswith("; null")
    assert capacity.unit == "Mbit/s"
    assert _key("Scenario", "name").default == "required"
    assert _key("RunConfig", "rounds").allowed == "0 < x ≤ 10,000,000; null"


def test_a_tagged_union_links_each_member_to_its_own_section():
    rate = _key("NetworkConfig", "uplink_mbps")
    for member, tag in (("Constant", "constant"), ("Uniform", "uniform")):
        anchor = REFERENCE.section(member).anchor
        assert f"[kind: {tag}](#{anchor})" in rate.type
    assert REFERENCE.section("Uniform").tag == ("kind", "uniform")
    # a law met at several paths is named by its model and lists them all
    assert "system.network.uplink_mbps" in REFERENCE.section("Uniform").paths
    assert REFERENCE.section("FadingConfig").title == "system.radio.fading"


def test_defaults_are_what_a_run_gets():
    """A FedOpt preset's server optimizer is its own (validation fills in the name; the schema
    said sgd before)."""
    optimizer = _key("FedAdamConfig", "server_optimizer")
    assert optimizer.default.startswith("{name: adam, lr: 0.01")
    resolved = FedAdamConfig.model_validate({"name": "fedadam"}).server_optimizer
    assert (resolved.name, resolved.lr) == ("adam", 0.01)


@pytest.mark.parametrize(
    ("key", "unit"),
    [
        ("noise_density_dbm_per_hz", "dBm/Hz"),
        ("tx_power_dbm", "dBm"),
        ("shadowing_db", "dB"),
        ("uplink_bandwidth_hz", "Hz"),
        ("carrier_ghz", "GHz"),
        ("deadline_s", "s"),
        ("speed_mps", "m/s"),
        ("cell_radius_m", "m"),
        ("codec_s_per_mparam", "s per 10⁶ numbers"),
        ("rate_per_s", "1/s"),
        ("client_fraction", ""),
    ],
)
def test_the_unit_is_read_from_the_key_name(key, unit):
    assert unit_of(key) == unit


MARKER = re.compile(r"<!-- fedsim:algorithm-options((?: [a-z_0-9]+)+) -->")


def test_every_algorithm_of_the_registry_has_its_options_on_one_page():
    shown = [
        name
        for page in sorted((REPO / "docs").rglob("*.md"))
        for match in MARKER.finditer(page.read_text())
        for name in match.group(1).split()
    ]
    assert sorted(shown) == sorted(ALGORITHM_NAMES)
    for name in ALGORITHM_NAMES:  # the registry's model is the reference's section
        assert REFERENCE.section(algorithm_model(name).__name__).tag == ("name", name)


def test_the_site_draws_the_reference_and_the_algorithm_tables():
    pytest.importorskip("mkdocs")
    from docs import hooks

    markdown = hooks.reference_markdown()
    for section in REFERENCE.sections:
        assert f"{{#{section.anchor}}}" in markdown
    assert "| `rho` | number | `1.0` |  | 0.001 ≤ x ≤ 1000 |" in markdown
    table = hooks.algorithm_options_markdown("fedadam", "algorithms/synchronous.md")
    assert "](../scenarios/reference.md#algorithms-server_optimizer)" in table
    assert "`label`" not in table and "`compression`" not in table  # said once per page
