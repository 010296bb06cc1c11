"""Every algorithm survives a radio that lets nothing through (issue 38 §2): for ever, for ever
on the uplink only (the issue's case), or for the first rounds (a blackout) after which
messages pass again.

The radio: a macro cell of 100 km radius, no shadowing or fading, NR transport blocks with a
short radio-link-failure timer. A client placed 90 km from the base station (path loss about
202 dB) is far below the lowest MCS, up, down and to a peer 90 km away: every transfer to or
from it fails. A client 50 m away gets through. "dead": every client is far. "uplink_dead":
every client 1 km away transmits at -30 dBm: the base station's models reach it, nothing it
sends reaches anyone. "blackout": the far clients are there from the start and the near ones
arrive at ``BLACKOUT_END_S`` (new clients rather than clients offline at first: those would
still be called at t = 0, before an availability trace turns them off). The downlink is
unicast: a harq multicast goes at the MCS of its weakest member in reach, and a member out of
reach whose radio link has not failed yet when it ends is counted as having decoded it (left
to the radio's owners). The D2D graph is two triangles, the far clients' and the near ones',
joined by one edge.

What a run records when nothing arrives (the algorithms' docstrings): a server keeps its
model and closes the round with participants = 0 (UCFL repeats its statistics round, each
attempt a round of its own); a serverless round is recorded with no peer message delivered,
its participants being the clients whose part of the round finished (CoBo and FedeRiCo: alone,
after their timeouts; decentralized SGD waits for every neighbour's model, so none); Local
never sends anything; an asynchronous server records no round (a round is a server update)
and goes on dispatching until the time budget; over the air, a slot nobody transmits in
leaves the model as it was (rounds.csv: air_transmitters 0). Without a time budget (run.rounds
alone) an asynchronous server stops with a message naming system.radio, and a serverless round
without a deadline, which would wait for ever for messages nobody knows are lost, with one
naming deadline_s: exit code 2, the summary written as incomplete, no traceback.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from fedsim.algorithms import ALGORITHMS
from fedsim.budget import budget_algorithm
from fedsim.cli import main
from fedsim.config import (
    AsyncServerConfig,
    DecentralizedConfig,
    ScenarioError,
    SyncServerConfig,
    algorithm_model,
    parse_scenario,
)
from fedsim.config.scenario import OVER_THE_AIR_ALGORITHMS
from fedsim.results.files import SUMMARY_FILE
from fedsim.runner import build_dataset, build_trainers, run_algorithm
from tests.conftest import tiny_scenario
from tests.test_fedavg_world import make_world

# A dead radio's figures draw without complaint (its channel.png has no log scale to take).
pytestmark = pytest.mark.filterwarnings("error::UserWarning")

CLIENTS = 6
FAR = (0, 1, 2)  # in the blackout; every client is far when the radio is dead
FAR_M = 90_000.0  # 128.1 + 37.6 log10(90) = 201.6 dB: an SNR near -90 dB, up and down
MIDDLE_M = 1_000.0  # 128.1 dB: at 30 dBm the downlink SNR is 3 dB, at -30 dBm uplinks -57 dB
NEAR_M = 50.0  # 79.2 dB: an SNR over 20 dB
WEAK_TX_DBM = -30.0  # the issue's system.radio.tx_power_dbm
BLACKOUT_END_S = 0.3  # the near clients arrive: a round lost to the radio is 0.21 s
RADIOS = ("dead", "uplink_dead", "blackout")
ROUNDS = 3
TIME_BUDGET_S = 30.0  # ends an asynchronous run that gets no update
DEADLINE_S = 5.0
MAX_EVENTS = 1_024  # the clock looks this often; these stalled runs stop within 100 events
OPTIONS = {  # beyond a deadline (or task timeout): what keeps each run small and budgetable
    "ucfl": {"streams": 2},  # a budget needs a number of streams
    "perfed_ckt": {"public_samples": 64, "clusters": 2},
    "fedasync": {"max_concurrency": 2},
    "fedbuff": {"max_concurrency": 2, "buffer_size": 2},
}


def algorithm(name: str, *, deadline: bool = True) -> dict:
    """The algorithm's defaults, plus a deadline (or a task timeout) where it takes one."""
    options = algorithm_model(name).model_fields
    limits = {"deadline_s": DEADLINE_S, "task_timeout_s": 2 * DEADLINE_S} if deadline else {}
    return {
        "name": name,
        **{k: v for k, v in limits.items() if k in options},
        **OPTIONS.get(name, {}),
    }


def radio_scenario(
    tmp_path: Path, name: str, radio: str, *, deadline: bool = True, budget: bool = True
) -> dict:
    """tiny_scenario on a radio of the module docstring, ``name`` its only algorithm."""
    distance_m = {"dead": FAR_M, "uplink_dead": MIDDLE_M, "blackout": FAR_M}[radio]
    positions = tmp_path / "positions.csv"
    rows = []
    for client in range(CLIENTS):
        radius_m = NEAR_M if radio == "blackout" and client not in FAR else distance_m
        angle = 2 * math.pi * client / CLIENTS  # clients as far apart as from the base station
        rows.append(f"{client},{radius_m * math.cos(angle):.3f},{radius_m * math.sin(angle):.3f}")
    positions.write_text("client,x_m,y_m\n" + "\n".join(rows) + "\n")
    graph = tmp_path / "d2d.txt"
    graph.write_text("0 1\n0 2\n1 2\n2 3\n3 4\n3 5\n4 5\n")  # far and near triangles
    data = tiny_scenario(
        tmp_path,
        dataset={"partition": {"kind": "label_groups", "groups": 2}},  # oracle needs groups
        clients={"count": CLIENTS},
        algorithms=[algorithm(name, deadline=deadline)],
        run={"rounds": ROUNDS, "time_budget_s": TIME_BUDGET_S if budget else None},
    )
    data["system"] = {
        "network": {"latency_s": 0.01, "downlink": "unicast"},
        "compute": {"t_min_s": 0.5, "mean_extra_s": 0.5},
        "radio": {
            "cell_radius_m": 1e5,
            "positions": str(positions),
            "shadowing_db": 0.0,
            "link": {"model": "harq", "link_failure_s": 0.2},
        },
        "d2d": {"graph": "edge_list", "edge_list": str(graph)},
    }
    if radio == "uplink_dead":
        data["system"]["radio"]["tx_power_dbm"] = WEAK_TX_DBM
    if radio == "blackout":  # the near clients are the reserve, arriving when it ends
        near = CLIENTS - len(FAR)
        data["clients"] = {
            "count": len(FAR),
            "arrivals": {"reserve": near, "schedule": [{"time_s": BLACKOUT_END_S, "count": near}]},
        }
    data["output"]["events"] = True
    return data


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def transfers(events_path: Path) -> tuple[int, list[tuple[float, str]]]:
    """How many transfers started, and (time, direction) of each that got through: an upload
    to the base station, a transfer to clients that reached one of them."""
    started: dict[int, dict] = {}
    delivered = []
    for line in events_path.open():
        event = json.loads(line)
        if event["kind"] == "send_start":
            started[event["transfer"]] = event
        elif event["kind"] == "send_end":
            start = started[event["transfer"]]
            if event["receivers"] or not start["receivers"]:
                delivered.append((event["t"], start["direction"]))
    return len(started), delivered


def delivered_bytes(row: dict) -> int:
    """Bytes delivered up to the end of a round (a rounds.csv row, or a summary)."""
    return sum(int(row[f"{direction}_bytes"]) for direction in ("uplink", "downlink", "d2d"))


def run_one(tmp_path: Path, data: dict) -> tuple[dict, Path]:
    """Run the scenario's algorithm as ``fedsim run`` does (without the plots): its summary
    and its run folder."""
    scenario = parse_scenario(data)
    config = scenario.algorithms[0]
    dataset = build_dataset(scenario)
    summary = run_algorithm(scenario, config, dataset, build_trainers(scenario, dataset), False)
    return summary, scenario.results_dir() / config.run_label


def has_server(name: str) -> bool:
    return issubclass(algorithm_model(name), SyncServerConfig | AsyncServerConfig)


@pytest.mark.parametrize("radio", RADIOS)
@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_every_algorithm_trains_on_a_radio_that_lets_nothing_through(tmp_path, name, radio):
    summary, run_dir = run_one(tmp_path, radio_scenario(tmp_path, name, radio))
    config = algorithm_model(name)
    assert json.loads((run_dir / SUMMARY_FILE).read_text()) == summary
    assert summary["complete"] is True
    rounds = read_csv(run_dir / "rounds.csv")
    metrics = read_csv(run_dir / "metrics.csv")
    asynchronous = issubclass(config, AsyncServerConfig)
    recorded = [int(row["round"]) for row in rounds]
    assert [int(row["round"]) for row in metrics] == recorded  # each evaluated (every_rounds 1)
    started, delivered = transfers(run_dir / "events.jsonl")
    assert bool(started) == (name != "local")  # Local never sends anything
    if radio != "blackout":  # nothing went up or between clients, for ever
        assert summary["uplink_bytes"] == summary["d2d_bytes"] == 0
        got_models = radio == "uplink_dead" and has_server(name)
        assert (summary["downlink_bytes"] > 0) == got_models
        assert {direction for _, direction in delivered} == ({"downlink"} if got_models else set())
        assert recorded == ([] if asynchronous else list(range(1, ROUNDS + 1)))
        if issubclass(config, SyncServerConfig):  # the server kept nothing, every round
            assert all(row["completed"] == "0" for row in rounds)
            assert all(row["participants"] == "0" for row in metrics)
        return
    # Blackout: nothing got through before the near clients arrived, then rounds pass.
    assert recorded == list(range(1, ROUNDS + 1))
    assert int(metrics[-1]["participants"]) > 0
    if name == "local":
        return
    assert delivered and min(t for t, _ in delivered) > BLACKOUT_END_S
    assert delivered_bytes(rounds[-1]) > 0
    if name == "ucfl":  # what it lost to the radio was its setup, before round 1
        return
    if issubclass(config, SyncServerConfig | DecentralizedConfig):
        assert delivered_bytes(rounds[0]) == 0  # round 1 was lost to the radio
    if issubclass(config, SyncServerConfig):
        assert rounds[0]["completed"] == metrics[0]["participants"] == "0"


@pytest.mark.parametrize("radio", RADIOS)
@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_every_algorithm_budgets_a_radio_that_lets_nothing_through(tmp_path, name, radio):
    scenario = parse_scenario(radio_scenario(tmp_path, name, radio))
    config = scenario.algorithms[0]
    dataset = build_dataset(scenario, timing_only=True)
    budget = budget_algorithm(scenario, config, dataset, build_trainers(scenario, dataset))
    asynchronous = isinstance(config, AsyncServerConfig)
    assert budget.rounds == (0 if asynchronous and radio != "blackout" else ROUNDS)
    if radio != "blackout":
        assert budget.uplink_bytes == budget.d2d_bytes == 0
        assert (budget.downlink_bytes > 0) == (radio == "uplink_dead" and has_server(name))
        if isinstance(config, SyncServerConfig):
            assert budget.empty_rounds == ROUNDS and budget.participants_per_round == 0
        return
    assert budget.participants_per_round > 0
    total_bytes = budget.uplink_bytes + budget.downlink_bytes + budget.d2d_bytes
    assert (total_bytes > 0) == (name != "local")
    if isinstance(config, SyncServerConfig) and name != "ucfl":  # UCFL: its setup was lost
        assert budget.empty_rounds >= 1  # round 1 was lost to the radio


@pytest.mark.parametrize(
    ("name", "mode"),
    [
        (name, mode)
        for mode in ("aircomp", "obda")
        for name in OVER_THE_AIR_ALGORITHMS
        if name != "scaffold" or mode == "aircomp"  # its control variates need the average
    ],
)
def test_an_over_the_air_uplink_nobody_reaches_leaves_the_model(tmp_path, name, mode):
    """The issue's radio with the updates sent over the air: the models come down, no slot
    has a transmitter (BAA: the side information sent digitally before it is lost first)."""
    data = radio_scenario(tmp_path, name, "uplink_dead")
    data["system"]["radio"]["uplink_aggregation"] = mode
    summary, run_dir = run_one(tmp_path, data)
    rounds = read_csv(run_dir / "rounds.csv")
    assert [int(row["round"]) for row in rounds] == list(range(1, ROUNDS + 1))
    assert summary["uplink_bytes"] == 0
    assert all(row["air_transmitters"] in ("", "0") for row in rounds)
    if mode == "obda" and name != "local":  # every update kept, every one truncated
        assert all(row["air_truncated"] == str(CLIENTS) for row in rounds)
    accuracy = {row["accuracy"] for row in read_csv(run_dir / "metrics.csv")}
    assert len(accuracy) == 1 or name in ("local", "ditto", "fedavg_ft")  # global model kept


def test_ucfl_repeats_its_statistics_round_until_statistics_arrive(tmp_path):
    """The issue's crash: UCFL's setup got no statistics (the far clients' models are lost).
    Round 1 repeats it with everyone present by then, and the near clients answer; rounds 2
    and 3 train."""
    _, run_dir = run_one(tmp_path, radio_scenario(tmp_path, "ucfl", "blackout"))
    rounds = read_csv(run_dir / "rounds.csv")
    near_clients = [c for c in range(CLIENTS) if c not in FAR]
    assert [int(row["completed"]) for row in rounds] == [len(near_clients)] * ROUNDS
    assert [int(row["selected"]) for row in rounds] == [CLIENTS] * ROUNDS
    events = [json.loads(line) for line in (run_dir / "events.jsonl").open()]
    work = {
        r: sorted(e["client"] for e in events if e["kind"] == "train_start" and e.get("round") == r)
        for r in (None, 1, 2, 3)
    }
    # Nothing reached anyone before round 1; then statistics (a pass of gradient work) in
    # round 1 and training in rounds 2 and 3, by the near clients alone.
    assert work == {None: [], 1: near_clients, 2: near_clients, 3: near_clients}
    saved = np.load(run_dir / "collaboration.npz")
    assert saved["clients"].tolist() == near_clients  # W of those whose statistics arrived


@pytest.mark.parametrize(
    "name", [n for n in ALGORITHMS if issubclass(algorithm_model(n), AsyncServerConfig)]
)
def test_an_asynchronous_run_without_a_time_budget_stops_with_a_message(tmp_path, name, capsys):
    data = radio_scenario(tmp_path, name, "dead", budget=False)
    path = tmp_path / "dead.yaml"
    path.write_text(json.dumps(data))  # JSON is YAML
    assert main(["run", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "system.radio: by t = " in err and "tasks since the last update" in err
    assert "Traceback" not in err
    summary = json.loads((tmp_path / "results" / "tiny" / name / SUMMARY_FILE).read_text())
    assert summary["complete"] is False and summary["rounds"] == 0
    assert main(["budget", str(path)]) == 2
    assert "run.time_budget_s" in capsys.readouterr().err


@pytest.mark.parametrize(
    "name", [n for n in ALGORITHMS if issubclass(algorithm_model(n), DecentralizedConfig)]
)
def test_a_serverless_round_without_a_deadline_stops_with_a_message(tmp_path, name):
    """A peer never learns that a message to it was lost: without a deadline the round would
    wait for ever. Nothing else is left to happen, so the run stops and names the field."""
    data = radio_scenario(tmp_path, name, "dead", deadline=False, budget=False)
    scenario = parse_scenario(data)
    dataset = build_dataset(scenario, timing_only=True)
    with pytest.raises(ScenarioError) as stopped:
        budget_algorithm(
            scenario, scenario.algorithms[0], dataset, build_trainers(scenario, dataset)
        )
    [problem] = stopped.value.problems
    assert problem.startswith("algorithms[0].deadline_s: at t = ")
    assert "in round 1" in problem and "waits for messages lost on the way" in problem


@pytest.mark.parametrize(
    "name", [n for n in ALGORITHMS if issubclass(algorithm_model(n), DecentralizedConfig)]
)
def test_a_wait_for_ever_stops_even_with_evaluations_on_the_clock(tmp_path, name):
    """The same, evaluated every second: the evaluations stop ticking once nothing else can
    happen, rather than measuring the same models for ever (bounded here by an event count)."""
    data = radio_scenario(tmp_path, name, "dead", deadline=False, budget=False)
    data["evaluation"] = {"every_s": 1.0, "target_accuracy": 0.5}
    world = make_world(data, tmp_path)
    with pytest.raises(ScenarioError) as stopped:
        world.run(ALGORITHMS[name](world, world.algorithm), max_events=MAX_EVENTS)
    assert stopped.value.problems[0].startswith("algorithms[0].deadline_s: at t = ")
    world.finish(complete=False)
    evaluated_s = [float(row["time_s"]) for row in read_csv(world.recorder.run_dir / "metrics.csv")]
    # Every second until the first tick after the last event of the run, then no more.
    assert evaluated_s == [float(t) for t in range(1, round(world.env.now) + 1)]
    assert 1 <= len(evaluated_s) < 10
