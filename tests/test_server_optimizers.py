"""Server optimizers (FedOpt) against hand-computed rounds, and SCAFFOLD's gradient correction."""

from __future__ import annotations

import math

import pytest
import torch

from fedsim.learn.aggregate import RunningAverage, weighted_average
from fedsim.learn.models import build_model
from fedsim.learn.optimizers import OptimizerSpec
from fedsim.learn.server_optimizers import ServerOptimizer, ServerOptimizerSpec
from fedsim.learn.trainer import Trainer


def two_rounds(spec: ServerOptimizerSpec, x0: list[float], averages: list[list[float]]):
    optimizer = ServerOptimizer(spec)
    x = torch.tensor(x0)
    steps = []
    for average in averages:
        x = optimizer.step(x, torch.tensor(average))
        steps.append(x.tolist())
    return steps


def test_sgd_with_server_lr_one_is_the_average_itself():
    x, average = torch.randn(1000), torch.randn(1000)
    assert torch.equal(ServerOptimizer(ServerOptimizerSpec()).step(x, average), average)
    half = ServerOptimizer(ServerOptimizerSpec(lr=0.5)).step(x, average)
    assert half == pytest.approx((x + 0.5 * (average - x)).tolist(), abs=1e-6)


def test_fedavgm_without_momentum_steps_by_the_server_lr():
    # x1 = [0, 1] + 0.5 ([1, 3] - [0, 1]) = [0.5, 2];  x2 = x1 + 0.5 ([1.5, 0] - x1) = [1, 1]
    spec = ServerOptimizerSpec(name="momentum", lr=0.5, beta1=0.0)
    assert two_rounds(spec, [0, 1], [[1, 3], [1.5, 0]]) == [[0.5, 2], [1, 1]]


def test_fedavgm_accumulates_its_momentum():
    # v1 = Δ1 = [1, 2], x1 = [1, 3]; Δ2 = [2, 2] - x1 = [1, -1], v2 = 0.5 v1 + Δ2 = [1.5, 0]
    spec = ServerOptimizerSpec(name="momentum", lr=1.0, beta1=0.5)
    assert two_rounds(spec, [0, 1], [[1, 3], [2, 2]]) == [[1, 3], [2.5, 3]]


@pytest.mark.parametrize("name", ["adam", "yogi", "adagrad"])
def test_adaptive_rules_over_two_rounds(name):
    b1, b2, tau, lr = 0.9, 0.99, 0.1, 0.1
    spec = ServerOptimizerSpec(name=name, lr=lr, beta1=b1, beta2=b2, tau=tau)
    # one coordinate by hand: x0 = 0, averages 1 then 0.5
    m, v, x = 0.0, tau**2, 0.0
    expected = []
    for average in (1.0, 0.5):
        delta = average - x
        m = b1 * m + (1 - b1) * delta
        if name == "adam":
            v = b2 * v + (1 - b2) * delta**2
        elif name == "yogi":
            v = v - (1 - b2) * delta**2 * math.copysign(1.0, v - delta**2)
        else:
            v = v + delta**2
        x = x + lr * m / (math.sqrt(v) + tau)
        expected.append([x])
    assert two_rounds(spec, [0.0], [[1.0], [0.5]]) == [pytest.approx(e, rel=1e-6) for e in expected]
    # and the numbers of the first Adam round: m = 0.1, v = 0.99 * 0.01 + 0.01 = 0.0199
    if name == "adam":
        assert expected[0][0] == pytest.approx(0.1 * 0.1 / (math.sqrt(0.0199) + 0.1))


def test_bad_specs_are_refused():
    with pytest.raises(ValueError, match="unknown server optimizer"):
        ServerOptimizerSpec(name="lamb")
    with pytest.raises(ValueError):
        ServerOptimizerSpec(name="adam", beta2=1.0)


# --- the running average the servers fold updates into -------------------------------------


def test_running_average_is_the_weighted_mean_whatever_the_arrival_order():
    generator = torch.Generator().manual_seed(0)
    vectors = [torch.randn(2000, generator=generator) for _ in range(50)]
    weights = [float(w) for w in torch.randint(1, 600, (50,), generator=generator)]
    exact = sum(w * v.double() for v, w in zip(vectors, weights, strict=True)) / sum(weights)
    results = []
    for order in (range(50), reversed(range(50)), torch.randperm(50, generator=generator)):
        average = RunningAverage()
        for i in order:
            average.add(vectors[int(i)], weights[int(i)])
        results.append(average.result())
        assert average.weight == sum(weights)
    assert results[0].dtype == torch.float32
    assert torch.allclose(results[0].double(), exact, rtol=0, atol=1e-7)  # rounded once
    assert torch.equal(results[0], results[1]) and torch.equal(results[0], results[2])
    assert torch.equal(weighted_average(vectors, weights), results[0])


def test_running_average_of_shapes_only_and_bad_input():
    average = RunningAverage()
    average.add(torch.empty(7, device="meta"), 3.0)
    assert average.result().is_meta and average.result().shape == (7,)
    with pytest.raises(ValueError):
        RunningAverage().result()
    with pytest.raises(ValueError):
        RunningAverage().add(torch.ones(2), -1.0)


# --- SCAFFOLD's correction in the trainer ----------------------------------------------------


def test_a_correction_shifts_each_sgd_step_and_batches_like_one_by_one():
    trainer = Trainer(
        build_model("mlp", (1, 28, 28), 10, hidden_sizes=(16,)), OptimizerSpec(lr=0.1), batch_size=8
    )
    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(40, 1, 28, 28, generator=generator), torch.randint(0, 10, (40,))
    params = trainer.init_params(0)
    shift = 0.01 * torch.randn(trainer.num_params, generator=generator)
    plain = trainer.train(params, x, y, steps=1, seed=3).params
    corrected = trainer.train(params, x, y, steps=1, seed=3, correction=shift).params
    assert torch.allclose(corrected, plain - 0.1 * shift, atol=1e-7)  # w - lr (g + d)
    shifts = [shift, -shift]
    for engine in ("loop", "vmap"):
        many = trainer.train_many(
            [params, params], [(x, y), (x[:20], y[:20])], steps=3, seeds=[3, 4],
            engine=engine, correction=shifts,
        )  # fmt: skip
        one = [
            trainer.train(params, xs, ys, steps=3, seed=s, correction=d).params
            for (xs, ys), s, d in zip([(x, y), (x[:20], y[:20])], [3, 4], shifts, strict=True)
        ]
        for result, expected in zip(many, one, strict=True):
            assert torch.allclose(result.params, expected, atol=1e-5)


def test_with_momentum_the_correction_is_a_step_of_its_own_outside_the_momentum():
    """NIID-Bench's SCAFFOLD: buf <- m buf + g; w <- w - lr buf; w <- w - lr (c - c_i). Fed
    through the momentum instead, the correction would grow towards 1 / (1 - m) times."""
    spec = OptimizerSpec(lr=0.1, momentum=0.9)
    trainer = Trainer(build_model("mlp", (1, 28, 28), 10, hidden_sizes=(16,)), spec, batch_size=40)
    generator = torch.Generator().manual_seed(2)
    x, y = torch.randn(40, 1, 28, 28, generator=generator), torch.randint(0, 10, (40,))
    params = trainer.init_params(0)
    shift = 0.01 * torch.randn(trainer.num_params, generator=generator)
    # By hand with full-batch gradients (one batch of all 40: no shuffling matters).
    w, buffer = params.clone(), None
    for _ in range(3):
        g = trainer.gradient(w, x, y)
        buffer = g if buffer is None else 0.9 * buffer + g
        w = w - 0.1 * buffer - 0.1 * shift
    corrected = trainer.train(params, x, y, steps=3, seed=0, correction=shift).params
    assert torch.allclose(corrected, w, atol=1e-6)
    for engine in ("loop", "vmap"):
        [many] = trainer.train_many(
            [params], [(x, y)], steps=3, seeds=[0], engine=engine, correction=[shift]
        )
        assert torch.allclose(many.params, w, atol=1e-5)
