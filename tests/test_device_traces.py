"""Device profiles and availability traces (``system.devices``, ``availability: intervals``)
through whole runs: the rates and compute times the World uses are the files', clients go
on and offline at the trace's instants, and bad or short traces exit 2 naming the field."""

from __future__ import annotations

import csv
import json

import pytest
import simpy

from fedsim.cli import main
from fedsim.config import parse_scenario
from fedsim.sim.event_check import check_events
from fedsim.sim.readers import read_availability, read_device_profiles
from fedsim.sim.traces import replay_availability
from fedsim.study import run_scenario
from tests.conftest import REPO, tiny_scenario
from tests.test_fedavg_world import MLP_32_PARAMS

TRACES = REPO / "scenarios" / "traces"
PAYLOAD_BYTES = MLP_32_PARAMS * 4
TRAIN_SAMPLES = 160


def traced_scenario(tmp_path, devices: str = "devices.json", **overrides) -> dict:
    data = tiny_scenario(tmp_path, **overrides)
    data["system"] = {"network": {"rho": 4.0, "latency_s": 0.0},
                      "devices": {"path": str(TRACES / devices)}}  # fmt: skip
    data["output"]["events"] = True
    return data


@pytest.mark.parametrize("devices", ["devices.json", "devices.csv"])
def test_device_profiles_give_each_clients_compute_time_and_rates(tmp_path, devices):
    results = run_scenario(parse_scenario(traced_scenario(tmp_path, devices)), show_progress=False)
    run_dir = results / "fedavg"
    profiles = read_device_profiles(TRACES / devices)[:6]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").open()]
    started = {e["transfer"]: e for e in events if e["kind"] == "send_start"}
    for e in events:
        if e["kind"] != "send_end" or started[e["transfer"]]["direction"] != "uplink":
            continue
        client = started[e["transfer"]]["sender"]
        expected_s = 8 * PAYLOAD_BYTES / profiles[client].uplink_bps
        assert e["t"] - started[e["transfer"]]["t"] == pytest.approx(expected_s, rel=1e-9)
    trainings = {}
    for e in events:
        if e["kind"] == "train_start":
            trainings[e["client"]] = e["t"]
        elif e["kind"] == "train_end":
            compute_s = profiles[e["client"]].compute_s_per_sample * TRAIN_SAMPLES
            assert e["t"] - trainings.pop(e["client"]) == pytest.approx(compute_s, rel=1e-9)
    rows = list(csv.DictReader((run_dir / "rounds.csv").open()))
    slowest_s = max(p.compute_s_per_sample for p in profiles) * TRAIN_SAMPLES
    assert max(float(r["end_s"]) - float(r["start_s"]) for r in rows) > slowest_s


@pytest.mark.parametrize("availability", ["availability.json", "availability.csv"])
def test_an_interval_trace_switches_clients_at_its_instants(tmp_path, availability):
    data = traced_scenario(
        tmp_path,
        clients={"count": 6, "availability": {"kind": "intervals",
                                              "path": str(TRACES / availability)}},
        algorithms=[{"name": "fedavg", "deadline_s": 30.0}],
        run={"rounds": 200, "time_budget_s": 3000},
    )  # fmt: skip
    run_dir = run_scenario(parse_scenario(data), show_progress=False) / "fedavg"
    assert check_events(run_dir / "events.jsonl").ok
    events = [json.loads(line) for line in (run_dir / "events.jsonl").open()]
    end_s = max(e["t"] for e in events)
    for client, trace in enumerate(read_availability(TRACES / availability)[:6]):
        switches = [(e["t"], e["kind"] == "online") for e in events
                    if e["kind"] in ("online", "offline") and e["client"] == client]  # fmt: skip
        assert switches == replayed(trace, until_s=end_s)
    assert sum(e["kind"] == "offline" for e in events) >= 3  # the trace did switch clients


def replayed(trace, until_s: float) -> list[tuple[float, bool]]:
    """The switches the trace makes on its own (a client that starts online)."""
    env = simpy.Environment()
    calls, online = [], [True]

    def set_online(state: bool) -> bool:
        if state != online[0]:
            calls.append((env.now, state))
            online[0] = state
        return True

    env.process(replay_availability(env, trace, set_online))
    env.run(until=until_s + 1e-9)
    return calls


def write_scenario(tmp_path, data: dict):
    path = tmp_path / "scenario.yaml"
    path.write_text(json.dumps(data))
    return path


def test_a_trace_that_misses_clients_exits_2_naming_the_field(tmp_path, capsys):
    short = tmp_path / "devices.csv"
    short.write_text("client,compute_ms_per_sample,uplink_kbps\n1,10,1000\n2,12,2000\n")
    data = traced_scenario(tmp_path)
    data["system"]["devices"]["path"] = str(short)
    assert main(["validate", str(write_scenario(tmp_path, data))]) == 2
    error = capsys.readouterr().err
    assert "system.devices.path" in error and "2 clients" in error and "Traceback" not in error


def test_a_malformed_trace_exits_2_naming_the_field(tmp_path, capsys):
    broken = tmp_path / "availability.json"
    broken.write_text('{"7": {"active": [0, 50], "inactive": [100], "finish_time": 200}}')
    data = tiny_scenario(tmp_path, clients={"count": 1, "availability": {
        "kind": "intervals", "path": str(broken)}})  # fmt: skip
    assert main(["validate", str(write_scenario(tmp_path, data))]) == 2
    error = capsys.readouterr().err
    assert "clients.availability" in error and "Traceback" not in error


def test_device_profiles_and_fixed_rates_together_are_an_error(tmp_path, capsys):
    data = traced_scenario(tmp_path)
    data["system"]["network"]["uplink_mbps"] = 5.0
    assert main(["validate", str(write_scenario(tmp_path, data))]) == 2
    assert "system.network.uplink_mbps" in capsys.readouterr().err
