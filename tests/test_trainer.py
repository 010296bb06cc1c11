"""The flat-vector training engine (fedsim.learn.trainer)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn
from torch.nn.utils import parameters_to_vector

from fedsim.learn.data import FederatedDataset, build_federated_dataset
from fedsim.learn.models import build_model
from fedsim.learn.optimizers import OptimizerSpec
from fedsim.learn.trainer import Trainer
from tests.conftest import DATA_ROOT, requires_real_data

SHAPE = (1, 28, 28)


@pytest.fixture(scope="module")
def synthetic() -> FederatedDataset:
    return build_federated_dataset(
        "synthetic", root=None, download=False, num_clients=4, partition="iid", seed=0
    )


def random_batch(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, *SHAPE, generator=g), torch.randint(0, 10, (n,), generator=g)


def mlp_trainer(spec: OptimizerSpec | None = None, batch_size: int = 16) -> Trainer:
    model = build_model("mlp", SHAPE, 10, hidden_sizes=(32,))
    return Trainer(model, spec or OptimizerSpec(), batch_size=batch_size)


def test_init_params_deterministic_per_seed_and_default_init() -> None:
    trainer = mlp_trainer()
    state = torch.random.get_rng_state()
    a, b, c = trainer.init_params(1), trainer.init_params(1), trainer.init_params(2)
    assert torch.equal(torch.random.get_rng_state(), state)  # the global stream is untouched
    assert a.shape == (trainer.num_params,) and a.dtype == torch.float32
    assert trainer.num_params == (784 * 32 + 32) + (32 * 10 + 10)
    assert torch.equal(a, b) and not torch.equal(a, c)
    torch.manual_seed(1)
    fresh = build_model("mlp", SHAPE, 10, hidden_sizes=(32,))
    assert torch.equal(a, parameters_to_vector(fresh.parameters()))


def test_num_steps_arithmetic() -> None:
    trainer = mlp_trainer(batch_size=32)
    assert trainer.num_steps(100, epochs=2) == 8  # ceil(100 / 32) = 4 per epoch
    assert trainer.num_steps(64, epochs=1) == 2
    assert trainer.num_steps(100, steps=7) == 7
    for kwargs in ({}, {"epochs": 1, "steps": 1}, {"epochs": -1}):
        with pytest.raises(ValueError):
            trainer.num_steps(100, **kwargs)


def test_train_counts_steps_and_samples_keeping_the_partial_batch() -> None:
    trainer = mlp_trainer(batch_size=16)
    x, y = random_batch(50)
    params = trainer.init_params(0)
    one_epoch = trainer.train(params, x, y, epochs=1, seed=0)
    assert (one_epoch.steps, one_epoch.samples) == (4, 50)
    cycled = trainer.train(params, x, y, steps=6, seed=0)  # 16+16+16+2, then 16+16
    assert (cycled.steps, cycled.samples) == (6, 82)
    assert math.isfinite(cycled.mean_loss) and cycled.mean_loss > 0


def test_train_leaves_inputs_and_earlier_results_alone() -> None:
    model = build_model("mlp", SHAPE, 10, hidden_sizes=(32,))
    before = parameters_to_vector(model.parameters()).detach().clone()
    trainer = Trainer(model, OptimizerSpec(), batch_size=16)
    x, y = random_batch(40)
    params = trainer.init_params(0)
    snapshot = params.clone()
    first = trainer.train(params, x, y, epochs=1, seed=0)
    kept = first.params.clone()
    trainer.train(first.params, x, y, epochs=1, seed=1)
    trainer.evaluate(snapshot, x, y)
    assert torch.equal(params, snapshot)
    assert torch.equal(first.params, kept)  # results do not alias the trainer's buffers
    assert not torch.equal(first.params, params)
    assert torch.equal(parameters_to_vector(model.parameters()), before)


def test_same_seed_bit_identical_other_seed_different() -> None:
    trainer = mlp_trainer()
    x, y = random_batch(64)
    params = trainer.init_params(0)
    a = trainer.train(params, x, y, epochs=2, seed=5)
    b = trainer.train(params, x, y, epochs=2, seed=5)
    c = trainer.train(params, x, y, epochs=2, seed=6)
    assert torch.equal(a.params, b.params) and a.mean_loss == b.mean_loss
    assert not torch.equal(a.params, c.params)


def reference_run(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    batch_size: int,
    steps: int,
    seed: int,
) -> torch.Tensor:
    """torch.optim on an nn.Module, with the batch order the trainer documents."""
    generator = torch.Generator().manual_seed(seed)
    batches: list[torch.Tensor] = []
    while len(batches) < steps:
        batches += torch.randperm(len(x), generator=generator).split(batch_size)
    for batch in batches[:steps]:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
        optimizer.step()
    return parameters_to_vector(model.parameters()).detach()


@pytest.mark.parametrize(
    ("spec", "make_reference"),
    [
        (
            OptimizerSpec("sgd", lr=0.05, momentum=0.9, weight_decay=1e-3),
            lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-3),
        ),
        (
            OptimizerSpec("adam", lr=1e-3, weight_decay=1e-3, betas=(0.8, 0.99), eps=1e-7),
            lambda p: torch.optim.Adam(p, lr=1e-3, weight_decay=1e-3, betas=(0.8, 0.99), eps=1e-7),
        ),
    ],
    ids=["sgd", "adam"],
)
def test_flat_optimizers_match_torch_optim(spec: OptimizerSpec, make_reference) -> None:
    torch.manual_seed(0)
    model = build_model("lenet5", SHAPE, 10)
    start = parameters_to_vector(model.parameters()).detach().clone()
    x, y = random_batch(40)
    trainer = Trainer(model, spec, batch_size=16)
    ours = trainer.train(start, x, y, steps=5, seed=3).params  # crosses an epoch boundary
    reference = copy.deepcopy(model)
    theirs = reference_run(reference, make_reference(reference.parameters()), x, y, 16, 5, 3)
    assert not torch.allclose(theirs, start, atol=1e-4)  # the steps did move the weights
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)


def test_prox_term_pulls_towards_the_center() -> None:
    trainer = mlp_trainer(OptimizerSpec(lr=0.05))
    x, y = random_batch(64)
    center = trainer.init_params(0)
    free = trainer.train(center, x, y, epochs=3, seed=0)
    unused = trainer.train(center, x, y, epochs=3, seed=0, prox_center=center, prox_mu=0.0)
    held = trainer.train(center, x, y, epochs=3, seed=0, prox_center=center, prox_mu=5.0)
    assert torch.equal(free.params, unused.params)
    assert (held.params - center).norm() < 0.5 * (free.params - center).norm()


def test_mlp_learns_synthetic_data(synthetic: FederatedDataset) -> None:
    shard = synthetic.shards[0]  # 1200 train samples, 300 test samples
    trainer = Trainer(build_model("mlp", SHAPE, 10), OptimizerSpec(lr=0.05), batch_size=16)
    params = trainer.init_params(0)
    before = trainer.evaluate(params, shard.x_test, shard.y_test)
    result = trainer.train(params, shard.x_train, shard.y_train, epochs=2, seed=0)
    after = trainer.evaluate(result.params, shard.x_test, shard.y_test)
    assert before.total == shard.num_test and before.accuracy < 0.3
    assert after.accuracy > 0.8
    assert after.loss_sum < before.loss_sum


def test_evaluate_many_equals_per_client_evaluate(synthetic: FederatedDataset) -> None:
    trainer = mlp_trainer()
    shard = synthetic.shards[0]
    params = trainer.train(trainer.init_params(0), shard.x_train, shard.y_train, steps=40, seed=0)
    xs = [s.x_test for s in synthetic.shards]
    ys = [s.y_test for s in synthetic.shards]
    pooled = trainer.evaluate_many(params.params, xs, ys)
    single = [trainer.evaluate(params.params, x, y) for x, y in zip(xs, ys, strict=True)]
    assert len(pooled) == len(synthetic.shards)
    for p, s in zip(pooled, single, strict=True):
        assert p.total == s.total
        assert abs(p.correct - s.correct) <= 1  # batch sizes differ: a near-tie may flip
        assert p.loss_sum == pytest.approx(s.loss_sum, rel=1e-5)
    assert 0.2 < pooled[0].accuracy < 1.0  # a partly trained model: counts are informative


@requires_real_data
def test_cnn_learns_real_fashion_mnist() -> None:
    data = build_federated_dataset(
        "fashion_mnist",
        root=DATA_ROOT,
        download=False,
        num_clients=1,
        partition="iid",
        num_samples=2000,
        seed=0,
    )
    shard = data.shards[0]
    model = build_model("cnn", data.input_shape, data.num_classes)
    trainer = Trainer(model, OptimizerSpec(lr=0.05, momentum=0.9), batch_size=32)
    result = trainer.train(trainer.init_params(0), shard.x_train, shard.y_train, epochs=2, seed=0)
    assert result.steps == 2 * math.ceil(shard.num_train / 32)
    assert trainer.evaluate(result.params, shard.x_test, shard.y_test).accuracy > 0.6
