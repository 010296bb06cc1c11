"""HierFAVG over the cells: FedAvg where there is one edge, the paper's two averages, the
closed form of a cloud round, the backhaul's bytes, handover, churn and deadlines at the edge."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

import fedsim.algorithms.hierfavg as hierfavg
from fedsim.algorithms._sync import ServerModels
from fedsim.budget import budget_algorithm
from fedsim.config import ScenarioError, parse_scenario
from fedsim.runner import build_dataset, build_trainers
from fedsim.sim.event_check import check_events
from fedsim.study import run_scenario
from tests.conftest import tiny_scenario

MLP_32_BYTES = 4 * ((784 * 32 + 32) + (32 * 10 + 10))  # the tiny scenario's model, float32

FIXED_RADIO = {  # every duration fixed: the closed form is exact
    "fading": {"model": "none"},
    "shadowing_db": 0.0,
    "tx_power_dbm": 23,
    "uplink_bandwidth_hz": 5.0e6,
    "cells": {
        "rings": 1, "inter_site_distance_m": 300, "interference": False,
        "backhaul_mbps": 100, "backhaul_latency_s": 0.01,
    },
    "uplink_sharing": "fixed",
    "uplink_subbands": 8,
    "link": {"model": "ideal"},
}  # fmt: skip


def cellular(tmp_path: Path, radio: dict, algorithms: list[dict], **sections) -> dict:
    data = tiny_scenario(
        tmp_path, clients={"count": 14}, system={"radio": radio}, algorithms=algorithms, **sections
    )
    data["system"]["network"] = {"latency_s": 0.01}
    return data


def without_column(path: Path, column: str) -> list[list[str]]:
    rows = list(csv.reader(path.open()))
    keep = [i for i, name in enumerate(rows[0]) if name != column]
    return [[row[i] for i in keep] for row in rows]


@pytest.mark.parametrize(
    "server",
    [
        {"client_fraction": 0.5, "deadline_s": 3.0},
        {"client_fraction": 0.5, "over_selection": 0.5},
    ],
)
def test_one_edge_where_the_cloud_is_is_fedavg_file_for_file(tmp_path, server):
    """Without cells the one edge server is the cloud: HierFAVG, whatever κ₂, writes FedAvg's
    files (with its count of cloud rounds besides)."""
    data = tiny_scenario(
        tmp_path,
        algorithms=[{"name": "fedavg", **server}, {"name": "hierfavg", "cloud_every": 3, **server}],
        run={"rounds": 4},
    )
    data["output"]["events"] = True
    root = run_scenario(parse_scenario(data), show_progress=False)
    for name in ("metrics.csv", "rounds.csv"):
        assert without_column(root / "hierfavg" / name, "cloud_rounds") == without_column(
            root / "fedavg" / name, "cloud_rounds"
        )
    for name in ("clients.csv", "activity.csv", "events.jsonl"):
        assert (root / "hierfavg" / name).read_text() == (root / "fedavg" / name).read_text()
    flat, hierarchical = (
        json.loads((root / label / "summary.json").read_text()) for label in ("fedavg", "hierfavg")
    )
    assert hierarchical.pop("cloud_rounds") == 1  # rounds 3 of 4
    assert {**hierarchical, "algorithm": "fedavg"} == flat


def test_the_edges_average_their_clients_and_the_cloud_the_edges_by_samples(tmp_path, monkeypatch):
    """Algorithm 1: every edge round each edge's model becomes the sample-weighted mean of
    the updates it got; every κ₂-th the cloud's is the |D^ℓ|-weighted mean of the edges', and
    every edge takes it."""
    seen: list[dict] = []
    cloud_aggregation = hierfavg.cloud_aggregation

    def watched(world, edges, members):
        before = {site: model.clone() for site, model in edges.models.items()}
        cloud = yield from cloud_aggregation(world, edges, members)
        weights = {s: sum(world.num_train(c) for c in m) for s, m in members.items() if m}
        seen.append({"before": before, "after": dict(edges.models), "cloud": cloud, "w": weights})
        return cloud

    monkeypatch.setattr(hierfavg, "cloud_aggregation", watched)
    data = cellular(
        tmp_path, FIXED_RADIO, [{"name": "hierfavg", "cloud_every": 2}], run={"rounds": 4}
    )
    run_scenario(parse_scenario(data), show_progress=False)
    assert len(seen) == 2  # rounds 2 and 4
    for step in seen:
        weights = step["w"]
        assert len(weights) > 1  # several edges with clients
        expected = sum(step["before"][s] * w for s, w in weights.items()) / sum(weights.values())
        torch.testing.assert_close(step["cloud"], expected, rtol=1e-5, atol=1e-6)
        assert all(model is step["cloud"] for model in step["after"].values())
        edge_models = [step["before"][s] for s in weights]
        assert any(not torch.equal(edge_models[0], m) for m in edge_models[1:])  # edges differ


@pytest.mark.parametrize(
    ("compute", "hierfavg", "dataset"),
    [
        ({"t_min_s": 0.5}, {}, {}),
        ({"t_min_s": 0.1, "per": "step"}, {"local_steps": 5}, {}),  # 0.5 s of compute
        # per sample, clients of different sizes: each its own compute before its upload
        ({"t_min_s": 0.006, "per": "sample"}, {}, {"partition": {"kind": "dirichlet"}}),
    ],
)
def test_a_cloud_round_is_k2_edge_rounds_plus_the_backhaul_both_ways(
    tmp_path, compute, hierfavg, dataset
):
    """Fixed durations: an edge round is the slowest edge's multicast + max over its clients
    of compute + upload, a cloud round κ₂ of them plus one model up and one down the backhaul
    (latency + 8S/R); compute deterministic per round, per step or per sample."""
    data = cellular(
        tmp_path, FIXED_RADIO, [{"name": "hierfavg", "cloud_every": 3, **hierfavg}],
        run={"rounds": 6}, dataset=dataset,
    )  # fmt: skip
    data["system"]["compute"] = {"mean_extra_s": 0.0, **compute}
    scenario = parse_scenario(data)
    dataset = build_dataset(scenario, timing_only=True)
    budget = budget_algorithm(
        scenario, scenario.algorithms[0], dataset, build_trainers(scenario, dataset)
    )
    backhaul_s = 0.01 + 8 * MLP_32_BYTES / 100e6
    cloud = budget.cloud
    assert cloud["cloud_rounds"] == 2 and cloud["edge_rounds_per_cloud"] == 3
    assert cloud["backhaul_s"] == pytest.approx(2 * backhaul_s, rel=1e-9)
    assert cloud["cloud_round_s"] == pytest.approx(cloud["closed_form_cloud_round_s"], rel=1e-9)
    edge_round_s = (cloud["closed_form_cloud_round_s"] - 2 * backhaul_s) / 3
    assert 0.5 < edge_round_s < 1.0  # t_min plus radio transfers of 101,800 bytes
    assert budget.round_s == pytest.approx(budget.closed_form_round_s, rel=1e-9)
    # The backhaul carries one model per edge with clients up, and one per site down.
    edges_with_clients = budget.backhaul["up_transmissions"] // 2
    assert budget.backhaul["up_bytes"] == 2 * edges_with_clients * MLP_32_BYTES
    assert budget.backhaul["down_bytes"] == 2 * 7 * MLP_32_BYTES
    assert budget.downlink_transmissions_per_round == edges_with_clients  # a multicast per edge


def test_flat_fedavg_over_cells_counts_each_upload_and_each_sites_copy_on_the_backhaul(tmp_path):
    data = cellular(tmp_path, FIXED_RADIO, [{"name": "fedavg"}], run={"rounds": 2})
    run_dir = run_scenario(parse_scenario(data), show_progress=False) / "fedavg"
    last = list(csv.DictReader((run_dir / "metrics.csv").open()))[-1]
    assert int(last["backhaul_up_bytes"]) == int(last["uplink_bytes"])  # each upload forwarded
    sites = len({row["site"] for row in csv.DictReader((run_dir / "radio.csv").open())})
    assert int(last["backhaul_down_bytes"]) == 2 * sites * MLP_32_BYTES  # a copy per site
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["backhaul_up_bytes"] == int(last["backhaul_up_bytes"])


def test_a_client_handed_over_mid_round_carries_its_model_to_the_new_edge(tmp_path, monkeypatch):
    """Fast walkers cross cells during rounds: each such update is averaged by the edge of the
    cell it was uploaded through, not by the edge that sent the model."""
    added: list[tuple[int, int]] = []
    add = ServerModels.add

    def watched_add(self, key, client, params):
        added.append((key, client))
        add(self, key, client, params)

    sent_from: dict[int, list[int]] = {}
    send_down = hierfavg.World.send_down

    def watched_send_down(self, clients, *tensors, site=None):
        for client in clients:
            sent_from.setdefault(client, []).append(site)
        return send_down(self, clients, *tensors, site=site)

    monkeypatch.setattr(ServerModels, "add", watched_add)
    monkeypatch.setattr(hierfavg.World, "send_down", watched_send_down)
    radio = {**FIXED_RADIO, "mobility": {"speed_mps": 60.0, "update_s": 0.05}}
    data = cellular(tmp_path, radio, [{"name": "hierfavg", "cloud_every": 2}], run={"rounds": 12})
    data["output"]["events"] = True
    data["system"]["compute"] = {"t_min_s": 2.0, "mean_extra_s": 1.0}
    run_dir = run_scenario(parse_scenario(data), show_progress=False) / "hierfavg"
    by_round: dict[int, list[int]] = {}
    for key, client in added:
        by_round.setdefault(client, []).append(key)
    carried = [
        client
        for client, keys in by_round.items()
        for sent, got in zip(sent_from[client], keys, strict=True)
        if sent != got
    ]
    assert carried  # some updates went to another edge than the one that sent the model
    assert check_events(run_dir / "events.jsonl").ok


def test_churn_and_deadlines_at_the_edge(tmp_path, monkeypatch):
    """Clients come and go and the edges close their rounds at a deadline: the log holds its
    invariants, and an edge that kept nothing passes its model on unchanged."""
    unchanged = []
    step = ServerModels.step

    def watched_step(self):
        before = dict(self.models)
        after = step(self)
        unchanged.extend(key for key in before if after[key] is before[key])
        return after

    monkeypatch.setattr(ServerModels, "step", watched_step)
    data = cellular(
        tmp_path, FIXED_RADIO,
        [{"name": "hierfavg", "cloud_every": 2, "deadline_s": 1.6, "client_fraction": 0.5}],
        run={"rounds": 8},
    )  # fmt: skip
    data["output"]["events"] = True
    data["clients"]["availability"] = {"kind": "renewal", "mean_online_s": 3, "mean_offline_s": 2}
    run_dir = run_scenario(parse_scenario(data), show_progress=False) / "hierfavg"
    report = check_events(run_dir / "events.jsonl")
    assert report.ok, report.violations
    rounds = list(csv.DictReader((run_dir / "rounds.csv").open()))
    backhaul_s = 0.01 + 8 * MLP_32_BYTES / 100e6  # after every second round: up, then down
    assert all(
        float(r["end_s"]) - float(r["start_s"]) <= 1.6 + 2 * backhaul_s + 1e-9 for r in rounds
    )
    assert any(int(r["dropped"]) > 0 for r in rounds)  # the deadline or churn cut someone
    assert unchanged  # some edge kept no update in some round and kept its model
    assert int(rounds[-1]["cloud_rounds"]) == 4


@pytest.mark.parametrize(
    ("option", "field"),
    [({"cloud_every": 0}, "cloud_every"), ({"association": "closest"}, "association")],
)
def test_bad_hierfavg_options_name_the_field(tmp_path, option, field):
    data = tiny_scenario(tmp_path, algorithms=[{"name": "hierfavg", **option}])
    with pytest.raises(ScenarioError, match=rf"algorithms\[0\]\.{field}"):
        parse_scenario(data)


@pytest.mark.parametrize("association", ["nearest_site", "balanced"])
def test_other_associations_relay_the_clients_served_elsewhere(tmp_path, association, monkeypatch):
    """With shadowing a client's strongest site is not always its nearest: under nearest_site
    (or a count-balanced assignment) its edge's traffic crosses the core, each relayed model
    once up and once down the backhaul; balanced edges differ in size by at most one."""
    sizes: list[list[int]] = []
    edge_members = hierfavg.World.edge_members

    def watched(self, rule="serving_cell"):
        members = edge_members(self, rule)
        sizes.append([len(m) for m in members.values()])
        return members

    monkeypatch.setattr(hierfavg.World, "edge_members", watched)
    radio = {**FIXED_RADIO, "shadowing_db": 8.0}
    data = cellular(
        tmp_path, radio, [{"name": "hierfavg", "cloud_every": 2, "association": association}],
        run={"rounds": 2},
    )  # fmt: skip
    data["output"]["events"] = True
    run_dir = run_scenario(parse_scenario(data), show_progress=False) / "hierfavg"
    events = [json.loads(line) for line in (run_dir / "events.jsonl").open()]
    relayed_up = [
        e for e in events if e["kind"] == "send_start" and e["direction"] == "backhaul_up"
        and e.get("round") == 1
    ]  # fmt: skip
    assert relayed_up  # round 1 has no cloud aggregation: every backhaul transfer is a relay
    round_1 = [e for e in events if e["kind"] == "send_start" and e.get("round") == 1]
    downs = sum(e["direction"] == "backhaul_down" for e in round_1)
    assert downs == len(relayed_up)  # each relay: up from one site, down to the other
    assert check_events(run_dir / "events.jsonl").ok
    if association == "balanced":
        assert all(max(s) - min(s) <= 1 and sum(s) == 14 for s in sizes)
    else:
        assert any(max(s) - min(s) > 1 for s in sizes)  # geometry, not counts
