"""Client selection policies: each picks what its definition says on hand-made channel
reports and on the radio's own channels; reports are the channel at the report instant;
random stays the sampling it was; validation; and each policy inside a FedAvg run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedsim.config import parse_scenario
from fedsim.sim.radio import UPLINK
from fedsim.streams import RandomStreams
from fedsim.world.selection import (
    AgeOfUpdate,
    ChannelAware,
    ChannelReport,
    RoundRobin,
    best_channel,
    proportional_fair,
)
from tests.conftest import tiny_scenario
from tests.test_compression import assert_refused
from tests.test_fedavg_world import make_world, run_world

# --- the policies on hand-made inputs ---


def test_round_robin_serves_the_groups_in_turn_each_client_once_per_cycle():
    policy, clients = RoundRobin(), list(range(12))
    rounds = [policy.choose(clients, 4) for _ in range(6)]
    assert rounds[:3] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert rounds[3:] == rounds[:3]  # K/N = 3 rounds cover everyone exactly once
    # a client that is not online is skipped; the cycle goes on after the last one served
    policy = RoundRobin()
    assert policy.choose(clients, 5) == [0, 1, 2, 3, 4]
    assert policy.choose([c for c in clients if c != 6], 5) == [5, 7, 8, 9, 10]
    assert policy.choose(clients, 5) == [0, 1, 2, 3, 11]  # wraps around


def test_age_based_picks_the_clients_selected_longest_ago():
    test_rng = np.random.default_rng(5)
    policy = AgeOfUpdate(np.random.default_rng(0))
    last = dict.fromkeys(range(8), 0)  # the round each client was last selected; never: 0
    for round_index in range(1, 40):
        online = sorted(test_rng.choice(8, size=int(test_rng.integers(3, 9)), replace=False))
        chosen = policy.choose([int(c) for c in online], 3)
        ages = {c: round_index - last[c] for c in online}
        assert min(ages[c] for c in chosen) >= max(
            (ages[c] for c in online if c not in chosen), default=0
        )
        last.update(dict.fromkeys(chosen, round_index))
    # everyone online: each client once every K/N rounds
    policy = AgeOfUpdate(np.random.default_rng(1))
    rounds = [policy.choose(list(range(6)), 2) for _ in range(6)]
    assert sorted(sum(rounds[:3], [])) == list(range(6))
    assert sorted(sum(rounds[3:], [])) == list(range(6))


def fake_reports(snr_db: list[float], mean_snr_db: list[float]) -> dict[int, ChannelReport]:
    return {
        c: ChannelReport(0.0, s, m)
        for c, (s, m) in enumerate(zip(snr_db, mean_snr_db, strict=True))
    }


def test_proportional_fair_picks_fading_peaks_and_best_channel_the_strongest():
    # client 0: the strongest, in a fade; 2: weak, at a peak; 3: weaker, at a higher peak
    reports = fake_reports([25.0, 18.0, 6.0, 2.0], [30.0, 18.0, 0.0, -5.0])
    rng = np.random.default_rng(0)
    pf = ChannelAware(proportional_fair, reports.__getitem__, rng)
    best = ChannelAware(best_channel, reports.__getitem__, rng)
    assert pf.choose([0, 1, 2, 3], 1) == [3]
    assert pf.choose([0, 1, 2, 3], 2) == [2, 3]
    assert pf.choose([0, 1, 2], 2) == [1, 2]  # 1 at its mean beats 0 in its fade
    assert best.choose([0, 1, 2, 3], 2) == [0, 1]
    assert best.choose([1, 2, 3], 1) == [1]


def test_ties_are_broken_by_the_seeded_permutation_not_by_id():
    """Without fading every ratio is exactly 1 (0 dB): the sampling stream's permutation
    decides, so different seeds call different clients."""
    reports = fake_reports([10.0 + c for c in range(8)], [10.0 + c for c in range(8)])
    candidates = [1, 2, 3, 5, 6, 7]
    picks = set()
    for seed in range(6):
        pf = ChannelAware(proportional_fair, reports.__getitem__, np.random.default_rng(seed))
        permutation = np.random.default_rng(seed).permutation(len(candidates))
        chosen = pf.choose(candidates, 2)
        assert chosen == sorted(candidates[i] for i in permutation[:2])
        picks.add(tuple(chosen))
    assert len(picks) > 1


# --- what the server knows: reports from the radio ---

TX_DBM = 20.0
DISTANCES_M = [900, 50, 1500, 300, 1200, 1800]  # the nearest: clients 1, 3, 0
RADIO = {
    "shadowing_db": 0.0,
    "tx_power_dbm": TX_DBM,
    "uplink_bandwidth_hz": 1.0e6,
    "path_loss": {"kind": "log_distance", "reference_loss_db": 40, "exponent": 3.0},
    "cell_radius_m": 2000,
    "min_distance_m": 1,
}


def radio_scenario(tmp_path: Path, policy: str, fading: dict | None = None, **radio) -> dict:
    positions = tmp_path / "positions.csv"
    positions.write_text(
        "client,x_m,y_m\n" + "".join(f"{c},{d},0\n" for c, d in enumerate(DISTANCES_M))
    )
    radio = {**RADIO, "positions": str(positions), "fading": fading or {"model": "none"}, **radio}
    algorithm = {"name": "fedavg", "client_fraction": 0.5, "selection": {"policy": policy}}
    data = tiny_scenario(
        tmp_path,
        system={"compute": {"t_min_s": 0.5, "mean_extra_s": 0.0}, "radio": radio},
        algorithms=[algorithm],
        run={"rounds": 4},
    )
    data["system"]["network"] = {"latency_s": 0.01}  # the rates come from the radio
    data["output"]["events"] = True
    return data


RAYLEIGH = {"model": "rayleigh", "coherence_s": 0.1}


@pytest.mark.parametrize("mobility", [None, {"speed_mps": 20.0, "update_s": 0.5}])
def test_a_report_is_the_radio_channel_at_the_last_report_instant_not_now(tmp_path, mobility):
    world = make_world(
        radio_scenario(tmp_path, "best_channel", RAYLEIGH, mobility=mobility), tmp_path
    )
    radio, bandwidth_hz = world.network.radio, RADIO["uplink_bandwidth_hz"]
    replay = radio.replica()  # the same channel asked at explicit, increasing times
    world.env.run(until=2.57)
    for client in range(6):
        report = world.channel_report(client, report_period_s=1.0)
        assert report.time_s == 2.0
        assert report.snr_db == pytest.approx(replay.uplink_snr_db_at(client, 2.0, bandwidth_hz))
        fading = radio.fading_gain(client, UPLINK, 2.0, 0)
        assert report.snr_db - report.mean_snr_db == pytest.approx(10 * np.log10(fading))
        now = world.channel_report(client)  # the pilot answering a call now
        assert now.time_s == 2.57
        assert now.snr_db == pytest.approx(replay.uplink_snr_db_at(client, 2.57, bandwidth_hz))
        assert abs(now.snr_db - report.snr_db) > 1e-6  # another fading block
    if mobility is None:  # the mean is the radio's SNR without fading
        assert [world.channel_report(c, 1.0).mean_snr_db for c in range(6)] == pytest.approx(
            list(radio.mean_snr_db(bandwidth_hz))
        )


def test_a_world_without_a_radio_has_no_channel_to_report(tmp_path):
    world = make_world(tiny_scenario(tmp_path), tmp_path)
    with pytest.raises(ValueError, match="system.radio"):
        world.channel_report(0)


# --- in a run ---


def selected_per_round(run_dir: Path) -> tuple[dict[int, list[int]], dict[int, float]]:
    """Who trained in each round (with no deadline and no churn: who was selected), and
    when each round started (the selection instant)."""
    chosen: dict[int, list[int]] = {}
    started: dict[int, float] = {}
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event["kind"] == "train_start":
            chosen.setdefault(event["round"], []).append(event["client"])
        elif event["kind"] == "round_start":
            started[event["round"]] = event["t"]
    return {r: sorted(c) for r, c in chosen.items()}, started


def run_policy(tmp_path: Path, data: dict) -> tuple[object, dict, dict]:
    world = make_world(data, tmp_path)
    rows = run_world(world)
    assert len(rows) == data["run"]["rounds"]
    return world, *selected_per_round(tmp_path / "run")


def test_round_robin_and_age_based_runs_call_the_groups_in_turn(tmp_path):
    for policy in ("round_robin", "age_based"):
        data = tiny_scenario(
            tmp_path / policy,
            algorithms=[
                {"name": "fedavg", "client_fraction": 0.5, "selection": {"policy": policy}}
            ],
            run={"rounds": 4},
        )
        data["output"]["events"] = True
        _, chosen, _ = run_policy(tmp_path / policy, data)
        assert sorted(chosen[1] + chosen[2]) == list(range(6))  # everyone once per 2 rounds
        assert chosen[3] == chosen[1] and chosen[4] == chosen[2]
        if policy == "round_robin":
            assert chosen[1] == [0, 1, 2]


def test_best_channel_run_calls_the_strongest_channels(tmp_path):
    _, chosen, _ = run_policy(tmp_path, radio_scenario(tmp_path, "best_channel"))
    assert all(clients == [0, 1, 3] for clients in chosen.values())  # the nearest three


def test_proportional_fair_run_calls_the_fading_peaks_at_the_selection_instant(tmp_path):
    world, chosen, started = run_policy(
        tmp_path, radio_scenario(tmp_path, "proportional_fair", RAYLEIGH)
    )
    radio = world.network.radio
    for round_index, clients in chosen.items():
        gains = [radio.fading_gain(c, UPLINK, started[round_index], 0) for c in range(6)]
        assert clients == sorted(np.argsort(gains)[-3:].tolist())
    assert any(clients != [0, 1, 3] for clients in chosen.values())  # not the strongest means


def test_random_selection_is_the_sampling_it_was_and_writes_the_same_files(tmp_path):
    runs = {}
    for name, selection in (("omitted", None), ("explicit", {"policy": "random"})):
        algorithm = {"name": "fedavg", "client_fraction": 0.5}
        if selection is not None:
            algorithm["selection"] = selection
        data = tiny_scenario(tmp_path, algorithms=[algorithm])  # the same output.dir
        data["output"]["events"] = True
        world, chosen, _ = run_policy(tmp_path / name, data)
        assert "  selection:" not in world.scenario.to_yaml()
        runs[name] = tmp_path / name / "run"
    rng = RandomStreams(data["seed"]).generator("sampling")
    expected = [
        sorted(rng.choice(list(range(6)), size=3, replace=False).tolist()) for _ in range(3)
    ]
    assert list(chosen.values()) == expected
    files = sorted(path.name for path in runs["omitted"].iterdir())
    assert files == sorted(path.name for path in runs["explicit"].iterdir())
    assert {"events.jsonl", "metrics.csv", "rounds.csv", "scenario.yaml"} <= set(files)
    for file in files:
        assert (runs["omitted"] / file).read_bytes() == (runs["explicit"] / file).read_bytes()


def test_a_policy_other_than_random_is_written_to_the_resolved_scenario(tmp_path):
    data = radio_scenario(tmp_path, "proportional_fair", RAYLEIGH)
    data["algorithms"][0]["selection"]["report_period_s"] = 0.5
    scenario = parse_scenario(data)
    yaml_text = scenario.to_yaml()
    assert "policy: proportional_fair" in yaml_text and "report_period_s: 0.5" in yaml_text


# --- what validation refuses ---


@pytest.mark.parametrize(
    ("algorithm", "system", "message"),
    [
        (
            {"name": "fedavg", "selection": {"policy": "proportional_fair"}},
            {},
            "algorithms[0].selection.policy: proportional_fair ranks clients by their uplink SNR",
        ),
        (
            {"name": "scaffold", "selection": {"policy": "best_channel"}},
            {"radio": {"fading": {"model": "rayleigh", "coherence_s": None}}},
            "algorithms[0].selection.policy: best_channel needs block fading",
        ),
        (
            {"name": "fedavg", "selection": {"policy": "round_robin", "report_period_s": 1.0}},
            {},
            "report_period_s: round_robin reads no channel reports",
        ),
        (
            {"name": "perfed_ckt", "selection": {"policy": "age_based"}},
            {},
            "selection.policy: age_based picks clients by its own rule, not by sampling",
        ),
    ],
)
def test_what_selection_cannot_do_is_refused_naming_the_field(tmp_path, algorithm, system, message):
    data = tiny_scenario(tmp_path, system=system)
    if "radio" in system:
        data["system"]["network"] = {"latency_s": 0.01}
    assert_refused(tmp_path, algorithm, message, data)


def test_policies_without_channels_need_no_radio(tmp_path):
    for policy in ("round_robin", "age_based"):
        parse_scenario(
            tiny_scenario(tmp_path, algorithms=[{"name": "cfl", "selection": {"policy": policy}}])
        )
    parse_scenario(
        tiny_scenario(
            tmp_path,
            algorithms=[
                {
                    "name": "perfed_ckt",
                    "sample_by_size": False,
                    "selection": {"policy": "round_robin"},
                }
            ],
        )
    )
