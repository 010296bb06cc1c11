"""FedeRiCo and CoBo with ``peers: d2d``: candidates are the client's D2D neighbours at the
moment (a graph on the ground, the ISLs in sight in a constellation); every message crosses
a D2D link, read from the event log. ``peers: all`` (the papers') relays the rest."""

from __future__ import annotations

import json

import numpy as np
import pytest

from analysis.weights import load_collaboration
from fedsim.algorithms.cobo import CoboState
from fedsim.algorithms.cobo import run as run_cobo
from fedsim.algorithms.federico import FedericoState, choose_neighbours
from fedsim.algorithms.federico import run as run_federico
from tests.conftest import run_fedsim, tiny_scenario
from tests.test_decentralized import decentralized, run_with_state
from tests.test_satellites import isl_run

RING = {"d2d": {"graph": "ring", "rate_mbps": 5.0}}
RING_EDGES = {(i, (i + 1) % 6) for i in range(6)} | {((i + 1) % 6, i) for i in range(6)}
RING_PAIRS = sorted((min(e), max(e)) for e in RING_EDGES if e[0] < e[1])
OFF_RING = [(i, j) for i in range(6) for j in range(6) if i != j and (i, j) not in RING_EDGES]
FEDERICO = {"name": "federico", "neighbours": 3}
COBO = {"name": "cobo", "pair_sampling": "all", "weight_lr": 5.0, "penalty": 0.1}


def sends(run_dir) -> list[dict]:
    with (run_dir / "events.jsonl").open() as f:
        return [r for r in map(json.loads, f) if r["kind"] == "send_start"]


def ring_run(tmp_path, algorithm: dict, peers: str):
    data = decentralized(tmp_path, {**algorithm, "peers": peers}, system=RING, run={"rounds": 3})
    state = FedericoState() if algorithm["name"] == "federico" else CoboState()
    run = run_federico if algorithm["name"] == "federico" else run_cobo
    world = run_with_state(data, tmp_path, run, state)
    return world, state, sends(world.recorder.run_dir)


@pytest.mark.parametrize("algorithm", [FEDERICO, COBO], ids=lambda a: a["name"])
def test_d2d_peers_only_ever_message_ring_neighbours(tmp_path, algorithm):
    """On a ring of 6, every message goes to a ring neighbour over its D2D link; with
    ``all`` some go to a non-neighbour, relayed by the base station (the check has teeth)."""
    world, state, d2d = ring_run(tmp_path / "d2d", algorithm, "d2d")
    assert d2d and all(s["direction"] == "d2d" for s in d2d)
    assert {(s["sender"], s["receivers"][0]) for s in d2d} <= RING_EDGES
    if algorithm["name"] == "federico":  # M = 3 > 2 neighbours: both, every round
        assert all(sorted(b) == sorted({(i - 1) % 6, (i + 1) % 6})
                   for chosen in state.sampled for i, b in chosen.items())  # fmt: skip
        saved = load_collaboration(world.recorder.run_dir).weights  # 0 off the ring
        assert all(saved[i, j] == 0.0 for i, j in OFF_RING)
        assert saved.sum(axis=1) == pytest.approx(np.ones(6))
    else:  # every pair sampled: the ring's 6 edges, each round
        assert all(sorted(pairs) == RING_PAIRS for pairs in state.pairs)
        assert all(state.weights[i, j] == 0.0 for i, j in OFF_RING)  # they never collaborate
    _, _, every = ring_run(tmp_path / "all", algorithm, "all")
    assert any(s["direction"] == "uplink" for s in every)  # relayed to a non-neighbour


def test_federico_without_a_neighbour_present_trains_alone(tmp_path, tmp_path_factory):
    """A path 0-4-1-2-3-5 over 6 clients, 4 and 5 held back (the reserve, not yet arrived):
    client 0 has no present neighbour (local rounds: no message, its own gradient only),
    client 1 one (fewer than M: that one), 2 and 3 both theirs."""
    edges = tmp_path_factory.mktemp("graph") / "path.txt"
    edges.write_text("0 4\n4 1\n1 2\n2 3\n3 5\n")
    clients = {"count": 4, "arrivals": {"reserve": 2, "schedule": [{"time_s": 1e6, "count": 2}]}}
    data = decentralized(
        tmp_path, {**FEDERICO, "peers": "d2d"}, clients=clients, run={"rounds": 3},
        system={"d2d": {"graph": "edge_list", "edge_list": str(edges), "rate_mbps": 5.0}},
    )  # fmt: skip
    state = FedericoState()
    world = run_with_state(data, tmp_path, run_federico, state)
    expected = {0: [], 1: [2], 2: [1, 3], 3: [2]}
    assert [{i: sorted(b) for i, b in chosen.items()} for chosen in state.sampled] == [expected] * 3
    messages = sends(world.recorder.run_dir)
    assert messages and not any(0 in (s["sender"], *s["receivers"]) for s in messages)
    assert state.ema_loss[0, 0] > 0  # client 0 still evaluates and steps on its own model
    assert not np.array_equal(state.models[0], world.trainer.init_params(
        world.streams.integer_seed("federico_init", 0)))  # fmt: skip


def test_choose_neighbours_stays_among_the_candidates():
    rng = np.random.default_rng(0)
    weights = {j: 0.2 for j in range(5)}
    for _ in range(50):
        assert set(choose_neighbours(rng, weights, 0, 3, 0.5, {0, 2, 4})) == {2, 4}
    assert choose_neighbours(rng, weights, 0, 3, 0.5, set()) == []


@pytest.mark.parametrize("name", ["federico", "cobo"])
def test_d2d_peers_without_a_graph_is_refused_naming_the_field(tmp_path, name):
    path = tmp_path / "scenario.yaml"
    data = tiny_scenario(tmp_path, algorithms=[{"name": "local"}, {"name": name, "peers": "d2d"}])
    path.write_text(json.dumps(data))
    result = run_fedsim("validate", str(path))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "algorithms[1].peers: d2d picks peers among the D2D neighbours" in result.stderr


@pytest.mark.parametrize("algorithm", [FEDERICO, COBO], ids=lambda a: a["name"])
def test_d2d_peers_talk_only_over_isls_in_sight(tmp_path, algorithm):
    """Over 24 satellites (2 planes of 12, grid ISLs; the planes' pairs in sight only at
    times), every message of ``peers: d2d`` crosses an ISL: the constellation's network
    takes the ISL only when the pair is in sight as the message starts, and relays anything
    else through the station (``all`` does: test_satellites). CoBo's X-step pulls only
    towards the collaborators in sight: its W⁰ = 1 spans every ISL neighbour."""
    run_dir, messages, pairs = isl_run(
        tmp_path, {**algorithm, "peers": "d2d", "deadline_s": 600}, 2
    )
    assert messages and all(s["direction"] == "d2d" for s in messages)
    assert pairs and all(abs(a - b) in (1, 11, 12) for a, b in pairs)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["uplink_bytes"] == summary["downlink_bytes"] == 0
