"""Every rate, power and duration that can make a transfer or a round long, driven to the ends
of its range: past them it is refused, naming the field and the reason; at them the budget and a
real run (with time-cadence evaluation) end, within a number of events bounded by what happens,
not by how long it takes (an evaluation that measured the same models every 4 s of a transfer
of 1e300 s never ended).
"""

from __future__ import annotations

import math

import pytest

from fedsim.algorithms import ALGORITHMS
from fedsim.budget import budget_algorithm, event_load_warnings
from fedsim.config import ScenarioError, parse_scenario
from fedsim.results.recorder import Recorder
from fedsim.runner import build_dataset, build_trainers
from fedsim.sim.clock import ClockStuck
from fedsim.world import World
from tests.conftest import merge_into, tiny_scenario

MAX_EVENTS = 200_000  # far above what one round of six clients needs, whatever its durations

RADIO = {"radio": {"fading": {"model": "none"}}}  # block fading: the warning below
CELLS = {
    "radio": {
        "link": {"model": "harq"},
        "uplink_sharing": {"scheduler": "round_robin"},
        "cells": {"rings": 1, "backhaul_mbps": 100.0},
    }
}
D2D = {"d2d": {"graph": "ring", "rate_mbps": 5.0}}

# (setting, the most extreme value taken, a value past it, the section it needs, algorithm)
EXTREMES = [
    ("system.network.uplink_mbps", 1e-4, 1e-5, {}, "fedavg"),
    ("system.network.uplink_mbps", 1e6, 1e7, {}, "fedavg"),
    ("system.network.rho", 1e-3, 1e-4, {}, "fedavg"),
    ("system.network.latency_s", 60.0, 61.0, {}, "fedavg"),
    ("system.d2d.rate_mbps", 1e-4, 1e-5, D2D, "dsgd"),
    ("system.d2d.latency_s", 60.0, 100.0, D2D, "dsgd"),
    ("system.compute.t_min_s", 86_400.0, 86_401.0, {}, "fedavg"),
    ("system.compute.mean_extra_s", 86_400.0, 1e6, {}, "fedavg"),
    ("system.compute.stragglers.slowdown", 1000.0, 1001.0, {}, "fedavg"),
    ("system.radio.cells.backhaul_mbps", 1e-4, 1e-300, CELLS, "hierfavg"),
    ("system.radio.cells.backhaul_latency_s", 10.0, 11.0, CELLS, "hierfavg"),
    ("system.radio.tx_power_dbm", -30.0, -31.0, RADIO, "fedavg"),
    ("system.radio.cell_radius_m", 1e5, 1e6, RADIO, "fedavg"),
    ("system.radio.uplink_bandwidth_hz", 1e3, 999.0, RADIO, "fedavg"),
    ("system.radio.uplink_bandwidth_hz", 360e3, 359e3, CELLS, "hierfavg"),
    ("algorithms[0].deadline_s", 1e7, 1e8, {}, "fedavg"),
    ("evaluation.every_s", 1e-3, 1e-4, {}, "fedavg"),
]
IDS = [f"{setting}={taken:g}" for setting, taken, *_ in EXTREMES]


def _scenario(tmp_path, setting: str, value: float, system: dict, algorithm: str):
    data = tiny_scenario(tmp_path, algorithms=[{"name": algorithm}])
    data["run"] = {"rounds": 1}
    data["evaluation"] = {"every_s": 4.0, "target_accuracy": 0.5}
    merge_into(data["system"], system)
    if "radio" in system:  # the rates come from the channel
        del data["system"]["network"]["uplink_mbps"], data["system"]["network"]["rho"]
    if setting.startswith("system.compute.stragglers"):
        data["system"]["compute"]["stragglers"] = {"fraction": 1.0}
    node, *path, key = setting.replace("[0]", ".0").split(".")
    place = data[node]
    for part in path:
        place = place[int(part)] if part.isdigit() else place.setdefault(part, {})
    place[key] = value
    return data


@pytest.mark.parametrize(("setting", "taken", "past", "system", "algorithm"), EXTREMES, ids=IDS)
def test_past_its_range_a_setting_is_refused_naming_it(
    tmp_path, setting, taken, past, system, algorithm
):
    with pytest.raises(ScenarioError) as refused:
        parse_scenario(_scenario(tmp_path, setting, past, system, algorithm))
    [problem] = refused.value.problems
    assert problem.startswith(f"{setting}: ") or problem.startswith(f"{setting}."), problem


@pytest.mark.parametrize(("setting", "taken", "past", "system", "algorithm"), EXTREMES, ids=IDS)
def test_at_its_range_a_setting_lets_the_budget_and_a_run_end(
    tmp_path, setting, taken, past, system, algorithm
):
    scenario = parse_scenario(_scenario(tmp_path, setting, taken, system, algorithm))
    config = scenario.algorithms[0]
    timing = build_dataset(scenario, timing_only=True)
    budget = budget_algorithm(
        scenario, config, timing, build_trainers(scenario, timing), max_events=MAX_EVENTS
    )
    assert math.isfinite(budget.time_s) and budget.rounds <= 1

    dataset = build_dataset(scenario)
    recorder = Recorder(scenario.results_dir() / config.run_label, scenario_name="tiny",
                        label=config.run_label, target_accuracy=0.5,
                        resolved_scenario_yaml=scenario.to_yaml([config]))  # fmt: skip
    world = World(scenario, config, dataset, build_trainers(scenario, dataset), recorder)
    try:
        world.run(ALGORITHMS[config.name](world, config), max_events=MAX_EVENTS)
    except ScenarioError as stopped:  # a stop must name a setting, never a bare clock
        assert not isinstance(stopped.__context__, ClockStuck)
        assert all(": " in problem for problem in stopped.problems)
        return
    summary = world.finish(complete=True)
    assert math.isfinite(summary["time_s"])
    rows = (scenario.results_dir() / config.run_label / "metrics.csv").read_text().splitlines()
    # at most two rows per thing that happened (a measurement after it, the last one repeated
    # just before the next), never one per tick of a long wait
    measured = len(rows) - 1
    happened = world.log.emitted - measured  # every row logged an "evaluate" event
    assert measured <= 2 * happened + 2, (measured, happened)


def test_an_uplink_slow_over_many_fading_blocks_is_warned_of(tmp_path):
    """At 10 km a 10 dBm phone's upload spans over 1e5 fading blocks of 0.1 s (each an event):
    the run ends, after long; a warning says so before it starts, naming what to change."""
    faded = {"radio": {"fading": {"model": "rayleigh", "coherence_s": 0.1}}}
    near, far = (
        parse_scenario(_scenario(tmp_path, "system.radio.cell_radius_m", radius, faded, "fedavg"))
        for radius in (1e3, 1e4)
    )
    assert event_load_warnings(near) == []
    [warning] = event_load_warnings(far)
    assert warning.startswith("warning: system.radio: the weakest client's uplink")
    assert "fading blocks of 0.1 s" in warning and "tx_power_dbm" in warning


def test_a_stuck_clock_names_the_span_it_cannot_resolve_or_the_slowest_rate():
    durations = {"system.network.latency_s": 0.01, "algorithms[0].deadline_s": 1e-300}
    rates = {"system.network.uplink_mbps": 10.0, "system.radio.cells.backhaul_mbps": 1e-4}
    at_five = ClockStuck(5.0, 2_000_000).naming(durations, rates, 1e7)
    assert at_five.startswith("algorithms[0].deadline_s: shorter than the clock resolves at t = 5")
    assert "latency_s" not in at_five
    far = ClockStuck(1e300, 2_000_000).naming({"system.network.latency_s": 0.01}, rates, 1e7)
    assert far.startswith("system.radio.cells.backhaul_mbps: the clock reached t = 1e+300 s")
    assert ClockStuck(5.0, 2_000_000).naming({}, rates, 1e7) == str(ClockStuck(5.0, 2_000_000))
