"""CoBo's ``auto`` pair sampling: each pair of present clients meets ``expected_meetings``
times in expectation early in the run, however short the run and however many clients; the
paper's ``mixed`` schedule, made for 40,000 rounds, leaves W untouched in a short one."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from analysis.weights import load_collaboration
from fedsim.algorithms.cobo import pair_probability, weight_step
from fedsim.config import CoboConfig, ScenarioError, parse_scenario
from fedsim.study import run_scenario
from tests.conftest import requires_real_data, tiny_scenario


def cobo_config(**options) -> CoboConfig:
    return CoboConfig(name="cobo", **options)


def schedule(config: CoboConfig, clients: int, rounds: int) -> np.ndarray:
    return np.array([pair_probability(config, t, clients, rounds) for t in range(1, rounds + 1)])


def test_auto_is_the_default_and_its_options_are_checked(tmp_path):
    assert cobo_config().pair_sampling == "auto"
    for bad in ({"expected_meetings": 0}, {"meeting_fraction": 0}, {"meeting_fraction": 1.5}):
        data = tiny_scenario(tmp_path, algorithms=[{"name": "cobo", **bad}])
        with pytest.raises(ScenarioError, match=f"algorithms\\[0\\]\\.{next(iter(bad))}"):
            parse_scenario(data)


@pytest.mark.parametrize("clients", [10, 40, 200])
def test_the_first_quarter_holds_the_promised_meetings_whatever_n(clients):
    """40 rounds: T1 = 10 and p = 4/10 there (the paper's 1/n is lower for n ≥ 10)."""
    probabilities = schedule(cobo_config(), clients, 40)
    assert probabilities[:10] == pytest.approx(np.full(10, 0.4))
    assert probabilities[:10].sum() == pytest.approx(4.0)
    # After T1, p = 4/t: the tail adds 4 (H_40 - H_10) meetings.
    tail = 4 * sum(1 / t for t in range(11, 41))
    assert probabilities[10:].sum() == pytest.approx(tail)
    # Too short a run for the quarter to hold the meetings: T1 = ceil(m) rounds at p = m/T1.
    assert schedule(cobo_config(expected_meetings=2.5), clients, 6)[:3].sum() == pytest.approx(2.5)


@pytest.mark.parametrize(
    ("options", "clients", "rounds"),
    [
        ({}, 10, 40),
        ({}, 40, 300),
        ({"decay": "inverse_sqrt", "expected_meetings": 6.5}, 12, 200),
        ({"pair_probability": 1.0, "switch_fraction": 0.05}, 8, 150),  # mixed wins early
        ({"expected_meetings": 10}, 5, 3),  # shorter than the meetings: every pair, always
    ],
)
def test_auto_is_continuous_non_increasing_and_a_probability(options, clients, rounds):
    config = cobo_config(**options)
    probabilities = schedule(config, clients, rounds)
    assert ((probabilities >= 0) & (probabilities <= 1)).all()
    assert (np.diff(probabilities) <= 1e-15).all()
    # No jump anywhere: from t to t + 1 it falls by at most the 1/t law's own step t/(t+1).
    t = np.arange(1, rounds)
    assert (probabilities[1:] >= probabilities[:-1] * t / (t + 1) - 1e-15).all()
    mixed = schedule(config.model_copy(update={"pair_sampling": "mixed"}), clients, rounds)
    assert (probabilities >= mixed).all()
    window = max(math.ceil(config.meeting_fraction * rounds), math.ceil(config.expected_meetings))
    if window < rounds and probabilities[window - 1] > mixed[window - 1]:  # at the switch
        step = window / (window + 1)
        law = step if config.decay == "inverse" else math.sqrt(step)
        assert probabilities[window] == pytest.approx(probabilities[window - 1] * law)


def test_auto_is_the_papers_schedule_in_the_papers_run():
    """40,000 rounds, 8 clients: mixed gives a pair 1/8 · 80 = 10 meetings in its first 80
    rounds, more than the 4 promised, and stays above 4/t afterwards."""
    mixed = schedule(cobo_config(pair_sampling="mixed"), 8, 40_000)
    assert np.array_equal(schedule(cobo_config(), 8, 40_000), mixed)
    assert mixed.sum() > 4


def test_bernoulli_draws_give_each_present_pair_the_promised_meetings():
    """40 core clients present throughout, up to 10 more coming and going (n changes every
    round): a core pair meets about 4 times in the first 75 of 300 rounds, and nearly every
    pair meets at all; with the paper's schedule a pair meets about 0.16 times in the run."""
    rng = np.random.default_rng(7)
    core, rounds, window = 40, 300, 75
    pairs = core * (core - 1) // 2
    meetings = {"auto": np.zeros(pairs), "mixed": np.zeros(pairs)}
    early = np.zeros(pairs)
    for t in range(1, rounds + 1):
        present = core + int(rng.integers(0, 11))
        for name, counts in meetings.items():
            p = pair_probability(cobo_config(pair_sampling=name), t, present, rounds)
            met = rng.random(pairs) < p
            counts += met
            if name == "auto" and t <= window:
                early += met
    assert early.mean() == pytest.approx(4.0, abs=0.25)  # sd of the mean about 0.07
    assert (meetings["auto"] == 0).mean() < 0.01  # expected e^-9.5 per pair
    assert meetings["mixed"].mean() < 0.3
    assert (meetings["mixed"] == 0).mean() > 0.7


@requires_real_data
def test_auto_cuts_every_cross_cluster_weight_where_mixed_leaves_most_untouched(tmp_path):
    """The cross-silo setting (8 clients, 4 label permutations) for 20 rounds: with ``auto``
    every pair meets early and all 24 cross-cluster weights fall; with the paper's schedule
    (p = 1/8, then 1/(8t)) a pair meets about 0.45 times and most weights stay at W⁰ = 1."""
    cobo = {"name": "cobo", "weight_lr": 0.1, "weight_lr_decay": "none", "penalty": 2.0}
    data = tiny_scenario(
        tmp_path,
        dataset={"name": "fashion_mnist", "num_samples": 2400, "test_fraction": 0.667,
                 "partition": {"kind": "iid"},
                 "group_shift": {"kind": "label_permutation", "groups": 4}},
        model={"name": "mlp", "hidden_sizes": [64]},
        clients={"count": 8},
        system={"compute": {"t_min_s": 0.05, "mean_extra_s": 0.05, "per": "step"},
                "d2d": {"graph": "complete", "rate_mbps": 20.0}},
        training={"optimizer": "sgd", "lr": 0.05, "batch_size": 64, "local_steps": 1,
                  "local_epochs": None},
        algorithms=[cobo | {"label": "auto"}, cobo | {"label": "mixed", "pair_sampling": "mixed"}],
        run={"rounds": 20},
        evaluation={"every_rounds": 20},
    )  # fmt: skip
    results_dir = run_scenario(parse_scenario(data), show_progress=False)
    moved, cross_weights = {}, {}
    for label in ("auto", "mixed"):
        saved = load_collaboration(results_dir / label)
        assert len(saved.history) == 20
        cross = saved.groups[:, None] != saved.groups[None, :]
        moved[label] = int(((saved.history < 1).any(axis=0) & cross).sum()) // 2  # pairs
        cross_weights[label] = saved.weights[cross].mean()
    assert moved["auto"] == 24
    assert cross_weights["auto"] < 0.3
    assert moved["mixed"] < 24 / 2
    assert cross_weights["mixed"] > 0.5


@pytest.mark.parametrize("decay", ["inverse", "inverse_sqrt"])
def test_the_weight_step_decays_after_the_meeting_window_by_the_schedules_law(decay):
    """40 rounds: T1 = 10. γ until then; afterwards γ T1/t (or its square root); 'none' keeps
    γ throughout (the paper's constant step)."""
    config = cobo_config(weight_lr=0.5, weight_lr_decay="after_meetings", decay=decay)
    law = (lambda r: r) if decay == "inverse" else math.sqrt
    steps = [weight_step(config, t, 40) for t in range(1, 41)]
    assert steps[:10] == [0.5] * 10
    assert steps[19] == pytest.approx(0.5 * law(10 / 20))
    assert steps[39] == pytest.approx(0.5 * law(10 / 40))
    constant = config.model_copy(update={"weight_lr_decay": "none"})
    assert {weight_step(constant, t, 40) for t in range(1, 41)} == {0.5}


def test_a_pair_meeting_after_the_window_moves_its_weight_by_the_decayed_step(
    tmp_path, monkeypatch
):
    """Every pair meets every round and each update is clip(w + γ_t <g_i, g_j>) with the
    round's γ_t: with midpoint gradients of ±0.1 (even and odd clients) the weight of 0 and 1
    falls by γ_t / 100 a round, γ until T1 = 4 of the 8 rounds, then γ T1 / t."""
    import fedsim.algorithms.cobo as cobo

    monkeypatch.setattr(
        cobo,
        "midpoint_gradient",
        lambda world, config, client, midpoint, partner: torch.tensor([0.1 - 0.2 * (client % 2)]),
    )
    seen = []
    record = cobo.WeightHistory.record
    monkeypatch.setattr(
        cobo.WeightHistory, "record", lambda self, r, w: (seen.append(w[0, 1]), record(self, r, w))
    )
    options = {"weight_lr": 0.5, "weight_lr_decay": "after_meetings", "pair_sampling": "all"}
    data = tiny_scenario(
        tmp_path, algorithms=[{"name": "cobo", **options}], run={"rounds": 8},
        system={"d2d": {"graph": "complete", "rate_mbps": 20.0}},
    )  # fmt: skip
    scenario = parse_scenario(data)
    run_scenario(scenario, show_progress=False)
    expected, w = [], 1.0
    for t in range(1, 9):
        w -= weight_step(scenario.algorithms[0], t, 8) * 0.01
        expected.append(w)
    assert seen == pytest.approx(expected)
    assert expected[-1] - expected[-2] == pytest.approx(-0.005 * 4 / 8)
