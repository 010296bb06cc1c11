"""User-centric FL's kernel bandwidth: variance_batches 'auto' picks K from the data."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch

from analysis.weights import own_group_mass
from fedsim.algorithms.ucfl import (
    choose_variance_batches,
    gradient_distances,
    relative_risk,
    variance_estimates,
)
from fedsim.config import ScenarioError, parse_scenario
from fedsim.study import run_scenario
from tests.conftest import requires_real_data, tiny_scenario
from tests.test_fedavg_world import MLP_32_PARAMS

CANDIDATES = [2, 3, 4, 6, 8, 12, 16]


def test_one_pass_over_the_data_gives_every_splits_variance():
    rng = np.random.default_rng(0)
    samples = torch.tensor(rng.normal(size=(50, 3)))
    seen: list[np.ndarray] = []

    def gradient_of(batch: np.ndarray) -> torch.Tensor:
        seen.append(batch)
        return samples[batch].mean(dim=0)

    full, order = samples.mean(dim=0), rng.permutation(50)
    counts = [2, 3, 4, 6, 60]  # 60 batches of 50 samples: not computed
    sigma2 = variance_estimates(gradient_of, full, order, counts)
    assert np.array_equal(np.sort(np.concatenate(seen)), np.arange(50))  # each sample once
    for count, value in zip(counts[:-1], sigma2[:-1], strict=True):
        direct = [samples[b].mean(dim=0) for b in np.array_split(order, count)]
        expected = np.mean([float((g - full).square().sum()) for g in direct])
        assert value == pytest.approx(expected, rel=1e-9)
    assert np.isnan(sigma2[-1])
    # a fractional K: floor(K) batches of round(n / K) samples, the rest left out
    seen.clear()
    sigma2 = variance_estimates(gradient_of, full, order, [1.5, 2.5, 3])
    # cut points 0, 33 (1.5); 0, 20, 40 (2.5); 0, 17, 34, 50 (3): six pieces, each sample once
    assert sorted(map(len, seen)) == [1, 3, 6, 10, 13, 17]
    for count, size, value in ((1.5, 33, sigma2[0]), (2.5, 20, sigma2[1])):
        direct = [samples[order[k * size : (k + 1) * size]].mean(dim=0) for k in range(int(count))]
        expected = np.mean([float((g - full).square().sum()) for g in direct])
        assert value == pytest.approx(expected, rel=1e-9)
    assert np.isnan(variance_estimates(gradient_of, full, order[:2], [1.9, 3.9])).tolist() == [
        False,
        True,  # 3 batches of round(2 / 3.9) = 1 sample do not fit in 2
    ]
    # a single K splits into its own batches: eq. (10) exactly as it was computed before
    seen.clear()
    [alone] = variance_estimates(gradient_of, full, order, [3])
    assert len(seen) == 3
    direct = [samples[b].mean(dim=0) for b in np.array_split(order, 3)]
    assert alone == np.mean([float((g - full).square().sum()) for g in direct])


def test_risk_estimate_is_unbiased_for_fixed_weights():
    """E[R_i] = ||sum_j w_ij mu_j - mu_i||^2 + sum_j w_ij^2 v (clients' noise independent)."""
    rng = np.random.default_rng(1)
    m, d, v = 4, 30, 0.5
    means = rng.normal(size=(m, d)) * 0.1  # bias about v: a wrong noise term would show
    weights = rng.dirichlet(np.ones(m), size=m)
    bias = (((weights @ means) - means) ** 2).sum(axis=1)
    truth = np.mean((bias + (weights**2).sum(axis=1) * v) / v)
    draws = [
        relative_risk(
            weights,
            gradient_distances(torch.tensor(means + rng.normal(size=(m, d)) * np.sqrt(v / d))),
            np.full(m, v),
        )
        for _ in range(3000)
    ]
    assert np.mean(draws) == pytest.approx(truth, rel=0.02)


def _groups(separation: float, rng: np.random.Generator) -> tuple[torch.Tensor, float]:
    """Two groups of four clients at +-separation / 2, each g_i = its group's mean + noise of
    E||e||^2 = v: the gradients and v."""
    d, v = 200, 1.0
    centre = np.zeros(d)
    centre[0] = separation / 2
    means = np.array([centre] * 4 + [-centre] * 4)
    return torch.tensor(means + rng.normal(size=(8, d)) * np.sqrt(v / d)), v


@pytest.mark.parametrize(("separation", "expected"), [(0.0, 16), (3.0, 2)])
def test_the_least_estimated_error_wins(separation, expected):
    """Same data everywhere: the flatter kernel (FedAvg-like) errs less; two distant groups:
    the sharper keeps them apart. sigma_i^2 of K batches is (K - 1) v."""
    gradients, v = _groups(separation, np.random.default_rng(2))
    counts = [2, 16]
    sigma2 = np.tile([(k - 1) * v for k in counts], (8, 1))
    delta = gradient_distances(gradients)
    best, weights, risks = choose_variance_batches(delta, sigma2, np.ones(8), counts, "row")
    assert counts[best] == expected
    assert risks[best] == np.min(risks) < np.max(risks) - 0.01  # measured: 0.014, 1.45
    assert weights.sum(axis=1) == pytest.approx(np.ones(8))


def test_ties_go_to_the_fewest_batches_and_uncomputed_candidates_are_skipped():
    gradients, v = _groups(3.0, np.random.default_rng(3))
    delta = gradient_distances(gradients)
    counts = [6, 3, 4]  # the same sigma_i^2 for each: equal weights, equal errors
    sigma2 = np.full((8, 3), 2.0 * v)
    best, _, risks = choose_variance_batches(delta, sigma2, np.ones(8), counts, "row")
    assert counts[best] == 3
    assert risks[0] == pytest.approx(risks[1])
    sigma2[5, 1] = np.nan  # one client has fewer than 3 samples: K = 3 is not a candidate
    best, _, risks = choose_variance_batches(delta, sigma2, np.ones(8), counts, "row")
    assert counts[best] == 4
    assert np.isnan(risks[1])
    with pytest.raises(ValueError, match="fewer training samples"):
        choose_variance_batches(delta, np.full((8, 3), np.nan), np.ones(8), counts, "row")


@requires_real_data
def test_auto_sharpens_the_kernel_for_small_shards(tmp_path):
    """12 MNIST clients of 320 training images in 4 label-permutation groups: with 3 batches
    the kernel spreads a third of each row over other groups; auto keeps rows within groups.
    Measured (seeds 1, 2, 3, 5, 7): auto K = 2, own-group mass 0.84-0.93; K = 3: 0.57-0.67;
    uniform 3 / 11 = 0.18."""
    data = tiny_scenario(
        tmp_path,
        dataset={
            "name": "mnist",
            "num_samples": 4800,
            "partition": {"kind": "iid"},
            "group_shift": {"kind": "label_permutation", "groups": 4},
        },
        clients={"count": 12},
        algorithms=[
            {"name": "ucfl", "label": "auto", "variance_batches": "auto"},
            {"name": "ucfl", "label": "fixed", "variance_batches": 3},
        ],
        run={"rounds": 1},
    )
    results_dir = run_scenario(parse_scenario(data), show_progress=False)
    mass, state = {}, {}
    for label in ("auto", "fixed"):
        state[label] = np.load(results_dir / label / "collaboration.npz")
        with (results_dir / label / "clients.csv").open() as f:
            group = {int(r["client"]): int(r["group"]) for r in csv.DictReader(f)}
        groups = np.array([group[c] for c in state[label]["clients"]])
        mass[label] = float(own_group_mass(state[label]["weights"], groups).mean())
    assert mass["auto"] > 0.75  # > 4 x uniform
    assert mass["fixed"] < 0.75
    assert mass["auto"] > mass["fixed"] + 0.15
    auto = state["auto"]
    assert auto["variance_batches"].tolist() == CANDIDATES
    chosen = CANDIDATES.index(int(auto["variance_batches_chosen"]))
    assert auto["variance_risk"][chosen] == np.min(auto["variance_risk"])
    assert int(state["fixed"]["variance_batches_chosen"]) == 3


def test_every_client_uploads_one_variance_per_candidate(tmp_path):
    ucfl = {"name": "ucfl", "streams": 2, "variance_batches": "auto"}
    data = tiny_scenario(tmp_path, algorithms=[ucfl], run={"rounds": 1})
    results_dir = run_scenario(parse_scenario(data), show_progress=False)
    with (results_dir / "ucfl" / "rounds.csv").open() as f:
        [row] = list(csv.DictReader(f))
    setup_up = 6 * (MLP_32_PARAMS + len(CANDIDATES) + 1) * 4  # g_i, the sigma_i^2, n_i
    assert int(row["uplink_bytes"]) == setup_up + 6 * MLP_32_PARAMS * 4


def _ucfl(tmp_path, **options: object):
    return parse_scenario(tiny_scenario(tmp_path, algorithms=[{"name": "ucfl", **options}]))


def test_a_number_or_auto_fixes_k_and_the_candidates_default(tmp_path):
    auto = _ucfl(tmp_path, variance_batches="auto").algorithms[0]
    assert auto.variance_batches == "auto" and auto.variance_batch_candidates == CANDIDATES
    assert _ucfl(tmp_path, variance_batches=4).algorithms[0].variance_batches == 4


@pytest.mark.parametrize(
    ("candidates", "expected"),
    [
        ([2, 1], "algorithms[0].variance_batch_candidates[1]: Input should be greater than"),
        ([], "algorithms[0].variance_batch_candidates: List should have at least 1 item"),
        ([3, 2, 3], "algorithms[0].variance_batch_candidates: 3 is listed twice"),
    ],
)
def test_a_bad_candidate_list_is_refused_naming_the_field(tmp_path, candidates, expected):
    with pytest.raises(ScenarioError) as caught:
        _ucfl(tmp_path, variance_batch_candidates=candidates)
    [problem] = caught.value.problems
    assert problem.startswith(expected)


@pytest.mark.parametrize(
    "dataset, expected",
    [
        (
            {
                "partition": {"kind": "iid"},
                "group_shift": {"kind": "label_permutation", "groups": 2},
            },
            3,
        ),
        ({"partition": {"kind": "iid"}, "group_shift": {"kind": "rotation", "groups": 2}}, 3),
        ({"partition": {"kind": "dirichlet", "alpha": 0.4}}, 10),
    ],
)
def test_paper_takes_the_papers_k_for_the_kind_of_shift(tmp_path, dataset, expected):
    """§V-F: N/3 for covariate or concept shift, 100 of 1,000 samples for label shift;
    resolved at validation, so scenario.yaml records it; the default is auto."""
    paper = {"name": "ucfl", "label": "paper", "variance_batches": "paper"}
    data = tiny_scenario(tmp_path, dataset=dataset, algorithms=[paper, {"name": "ucfl"}])
    paper, default = parse_scenario(data).algorithms
    assert paper.variance_batches == expected and default.variance_batches == "auto"


def test_saved_arrays_appear_whole_under_their_name(tmp_path, monkeypatch):
    """collaboration.npz is written as a partial file and renamed: a study drawing its figures
    while other runs go on never reads half of it (it crashed a CoBo study once)."""
    import fedsim.world.world as world_module

    renamed = []
    real_replace = world_module.os.replace

    def replace(source, target):
        renamed.append((str(source), str(target)))
        real_replace(source, target)

    monkeypatch.setattr(world_module.os, "replace", replace)
    data = tiny_scenario(tmp_path, algorithms=[{"name": "ucfl", "streams": 2}], run={"rounds": 1})
    results_dir = run_scenario(parse_scenario(data), show_progress=False)
    saved = results_dir / "ucfl" / "collaboration.npz"
    assert (str(saved) + ".part", str(saved)) in renamed
    assert not list((results_dir / "ucfl").glob("*.part"))
    assert "weights" in np.load(saved).files
