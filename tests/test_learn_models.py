"""Model architectures (fedsim.learn.models): sizes the papers report, and output shapes."""

from __future__ import annotations

import pytest
import torch

from fedsim.learn.models import MODEL_NAMES, build_model
from fedsim.learn.optimizers import OptimizerSpec
from fedsim.learn.trainer import Trainer

MNIST_SHAPE, CIFAR_SHAPE = (1, 28, 28), (3, 32, 32)


def num_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(("shape", "expected"), [(MNIST_SHAPE, 44_426), (CIFAR_SHAPE, 62_006)])
def test_lenet5_parameter_count(shape: tuple[int, int, int], expected: int) -> None:
    assert num_params(build_model("lenet5", shape, 10)) == expected


# conv1 + conv2 + fc(64 * (side/4)^2 -> 512) + fc(512 -> 10), weights plus biases.
CNN_28 = (1 * 32 * 25 + 32) + (32 * 64 * 25 + 64) + (64 * 7 * 7 * 512 + 512) + (512 * 10 + 10)
CNN_32 = (3 * 32 * 25 + 32) + (32 * 64 * 25 + 64) + (64 * 8 * 8 * 512 + 512) + (512 * 10 + 10)


@pytest.mark.parametrize(("shape", "expected"), [(MNIST_SHAPE, CNN_28), (CIFAR_SHAPE, CNN_32)])
def test_cnn_parameter_count(shape: tuple[int, int, int], expected: int) -> None:
    assert num_params(build_model("cnn", shape, 10)) == expected
    assert CNN_28 == 1_663_370  # the FedAvg paper's figure for MNIST


@pytest.mark.parametrize(("name", "expected"), [("vgg11", 9_756_426), ("vgg13", 9_941_322)])
def test_vgg_has_the_size_perfed_ckt_counts_imply(name: str, expected: int) -> None:
    """PerFed-CKT's communication costs are 200 (m + 1) n with n = 9,756,426 (spec §3.2):
    the CIFAR-style VGG11 with a 512-512-512-10 head, norm affine parameters included."""
    model = build_model(name, CIFAR_SHAPE, 10)
    assert num_params(model) == expected
    assert not any(True for _ in model.buffers())  # GroupNorm: no running statistics
    with pytest.raises(ValueError, match="at least 32x32"):
        build_model(name, MNIST_SHAPE, 10)


def test_mlp_follows_hidden_sizes() -> None:
    model = build_model("mlp", MNIST_SHAPE, 10, hidden_sizes=(32,))
    assert num_params(model) == (784 * 32 + 32) + (32 * 10 + 10)
    assert num_params(build_model("mlp", CIFAR_SHAPE, 7)) == (
        (3072 * 200 + 200) + (200 * 200 + 200) + (200 * 7 + 7)
    )


@pytest.mark.parametrize(
    ("name", "shape"),
    [
        (name, shape)
        for name in MODEL_NAMES
        for shape in (MNIST_SHAPE, CIFAR_SHAPE)
        if not (name.startswith("vgg") and shape == MNIST_SHAPE)
    ],  # five pools need 32x32
)
def test_forward_gives_logits_per_class(name: str, shape: tuple[int, int, int]) -> None:
    model = build_model(name, shape, 10)
    logits = model(torch.randn(5, *shape))
    assert logits.shape == (5, 10)
    assert torch.isfinite(logits).all()


def test_unknown_model_lists_the_choices() -> None:
    with pytest.raises(ValueError, match="mlp, lenet5, cnn"):
        build_model("resnet18", MNIST_SHAPE, 10)


def test_vgg11_trains_as_a_flat_vector() -> None:
    """The trainer keeps a VGG as one flat vector (no buffers): steps on a fixed batch of
    CIFAR-shaped inputs lower its loss there, and the input vector is left untouched."""
    torch.manual_seed(0)
    trainer = Trainer(build_model("vgg11", CIFAR_SHAPE, 10), OptimizerSpec("sgd", lr=0.05), 8)
    params = trainer.init_params(seed=1)
    x, y = torch.randn(8, *CIFAR_SHAPE), torch.arange(8) % 10
    before = trainer.evaluate(params, x, y)
    result = trainer.train(params, x, y, steps=5, seed=2)
    after = trainer.evaluate(result.params, x, y)
    assert params.numel() == 9_756_426 and not torch.equal(result.params, params)
    assert after.loss_sum < before.loss_sum
