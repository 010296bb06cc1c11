"""No loop of the event model spins without advancing time: every setting either runs to its
end or stops the run with a clear error naming what to change (never a hang).

The fuzz bounds each budget by a number of events (``max_events``), not by wall-clock time:
a run that would spin forever exceeds it, and the test fails.
"""

from __future__ import annotations

import itertools
import random

import pytest

from fedsim.budget import budget_algorithm
from fedsim.config import ScenarioError, parse_scenario
from fedsim.runner import build_dataset, build_trainers
from fedsim.sim.clock import EventLimit
from tests.conftest import tiny_scenario

MAX_EVENTS = 3_000_000  # far above what any of these small budgets needs to finish
TINY = (1e-300, 1e-12)  # shorter than the clock can resolve
SHORT = (1e-3, 0.05)
LONG = (2.0, 50.0)

ALGORITHMS = {
    "fedavg_deadline": lambda t: {"name": "fedavg", "deadline_s": t},
    "fedbuff_timeout": lambda t: {
        "name": "fedbuff",
        "max_concurrency": 3,
        "buffer_size": 2,
        "task_timeout_s": t,
    },  # fmt: skip
    "local": lambda t: {"name": "local"},
    "dsgd_deadline": lambda t: {"name": "dsgd", "deadline_s": t},
    "cobo_phases": lambda t: {"name": "cobo", "deadline_s": 5.0, "phase_timeout_s": t},
}
SYSTEMS = {
    "fixed": {"network": {"uplink_mbps": 1.0, "rho": 4.0, "latency_s": 0.01}},
    "fixed_no_latency": {"network": {"uplink_mbps": 50.0, "latency_s": 0.0}},
    "radio_blocks": {"radio": {"fading": {"model": "rayleigh", "coherence_s": 1e-3}}},
    "radio_per_transmission": {"radio": {"fading": {"model": "rayleigh", "coherence_s": None}}},
}
COMPUTE = {
    "zero": {"t_min_s": 0.0, "mean_extra_s": 0.0},
    "tiny": {"t_min_s": 1e-12, "mean_extra_s": 0.0},
    "usual": {"t_min_s": 0.5, "mean_extra_s": 0.5},
}
RUNS = {"rounds": {"rounds": 3}, "budget": {"time_budget_s": 30.0}}


def _cases(count: int, seed: int) -> list[tuple]:
    """A fixed sample of the product (the same on every run), every timing value included."""
    product = list(itertools.product(ALGORITHMS, (*TINY, *SHORT, *LONG), SYSTEMS, COMPUTE, RUNS))
    return random.Random(seed).sample(product, count)


def _budget(tmp_path, algorithm: str, time_s: float, system: str, compute: str, run: str):
    data = tiny_scenario(tmp_path, algorithms=[ALGORITHMS[algorithm](time_s)])
    data["run"] = RUNS[run]
    data["system"] = {**SYSTEMS[system], "compute": COMPUTE[compute]}
    if algorithm.startswith(("dsgd", "cobo")):  # a D2D graph: its links' rates, or the radio's
        data["system"]["d2d"] = {"graph": "ring", **({} if "radio" in system else {"rate_mbps": 5})}
    scenario = parse_scenario(data)
    dataset = build_dataset(scenario, timing_only=True)
    trainers = build_trainers(scenario, dataset)
    return budget_algorithm(
        scenario, scenario.algorithms[0], dataset, trainers, max_events=MAX_EVENTS
    )


@pytest.mark.parametrize("case", _cases(48, seed=2026), ids=lambda case: "-".join(map(str, case)))
def test_every_timing_setting_finishes_or_names_what_to_change(tmp_path, case):
    algorithm, time_s, system, compute, run = case
    try:
        budget = _budget(tmp_path, algorithm, time_s, system, compute, run)
    except ScenarioError as error:  # refused: the message names a field and the reason
        assert error.problems and all(": " in problem for problem in error.problems)
        assert "with system.radio" not in error.problems[0]  # the case itself is valid
        return
    except EventLimit:  # pragma: no cover - the failure this test exists for
        pytest.fail(f"{case}: over {MAX_EVENTS:,} events without finishing (a spin)")
    assert budget.time_s >= 0


def test_a_timeout_no_task_can_beat_is_refused_at_the_start(tmp_path):
    """The reported livelock: FedBuff whose tasks always time out re-dispatched forever."""
    with pytest.raises(ScenarioError) as refused:
        _budget(tmp_path, "fedbuff_timeout", 0.5, "fixed", "usual", "rounds")
    [problem] = refused.value.problems
    assert problem.startswith("algorithms[0].task_timeout_s: 0.5 s, but the fastest task")


def test_rounds_too_short_for_the_time_budget_stop_the_run(tmp_path):
    """A deadline no task can beat closes every round empty, 1e-300 s after it started: the
    clock moves, but the budget would need some 3e301 rounds."""
    with pytest.raises(ScenarioError) as refused:
        _budget(tmp_path, "fedavg_deadline", 1e-300, "fixed", "usual", "budget")
    assert refused.value.problems[0].startswith("run.time_budget_s: 1,000 rounds in a row")
    empty = _budget(tmp_path, "fedavg_deadline", 1e-300, "fixed", "usual", "rounds")
    assert (empty.rounds, empty.participants_per_round, empty.empty_rounds) == (3, 0, 3)
    assert empty.empty_rounds_cut_at["cut_before_model"] == 3 * 6  # everyone, every round


def test_a_timeout_the_clock_cannot_tell_from_zero_stops_the_run(tmp_path):
    """Nothing bounds a task from below here (no compute, no latency, no cap on the radio's
    rate), so the timeout passes the start; the server still never spins."""
    with pytest.raises(ScenarioError) as refused:
        _budget(tmp_path, "fedbuff_timeout", 1e-300, "radio_per_transmission", "zero", "budget")
    assert refused.value.problems[0].startswith("algorithms[0].task_timeout_s: ")


def test_rounds_that_take_no_time_stop_a_time_budget(tmp_path):
    with pytest.raises(ScenarioError) as refused:
        _budget(tmp_path, "local", 0.0, "fixed", "zero", "budget")
    assert refused.value.problems[0].startswith("run.time_budget_s: 1,000 rounds in a row")


def test_instant_rounds_with_a_round_count_simply_finish(tmp_path):
    budget = _budget(tmp_path, "local", 0.0, "fixed", "zero", "rounds")
    assert (budget.rounds, budget.time_s) == (3, 0.0)


def test_tasks_that_keep_timing_out_stop_the_run(tmp_path):
    """Above the fastest possible task (a radio without a rate cap: only the compute bounds
    it), below what the channel really gives: no update ever arrives."""
    with pytest.raises(ScenarioError) as refused:
        _budget(tmp_path, "fedbuff_timeout", 0.5001, "radio_blocks", "usual", "rounds")
    assert "tasks all timed out" in refused.value.problems[0]
