"""The model architectures used in the FL literature this simulator reproduces.

Models are plain ``nn.Sequential`` templates: the trainer keeps each client's weights as a
flat vector, so one module per architecture serves every client.
"""

from __future__ import annotations

from torch import nn

MODEL_NAMES = ("mlp", "lenet5", "cnn", "vgg11", "vgg13")

# CIFAR-style VGG feature stacks: channel counts, "M" a 2x2 max pool.
_VGG_LAYERS: dict[str, tuple[int | str, ...]] = {
    "vgg11": (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    "vgg13": (64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
}


def _mlp(input_shape: tuple[int, int, int], num_classes: int, hidden: tuple[int, ...]) -> nn.Module:
    c, h, w = input_shape
    layers: list[nn.Module] = [nn.Flatten()]
    width = c * h * w
    for size in hidden:
        layers += [nn.Linear(width, size), nn.ReLU()]
        width = size
    layers.append(nn.Linear(width, num_classes))
    return nn.Sequential(*layers)


def _lenet5(input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    """LeNet-5 as in the user-centric FL paper's code (valid convolutions, average pooling)."""
    c, h, w = input_shape
    side_h, side_w = ((h - 4) // 2 - 4) // 2, ((w - 4) // 2 - 4) // 2
    if side_h < 1 or side_w < 1:
        raise ValueError(f"lenet5 needs inputs of at least 16x16, got {h}x{w}")
    return nn.Sequential(
        nn.Conv2d(c, 6, 5),
        nn.ReLU(),
        nn.AvgPool2d(2),
        nn.Conv2d(6, 16, 5),
        nn.ReLU(),
        nn.AvgPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * side_h * side_w, 120),
        nn.ReLU(),
        nn.Linear(120, 84),
        nn.ReLU(),
        nn.Linear(84, num_classes),
    )


def _cnn(input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    """The FedAvg paper's CNN (1,663,370 parameters on 28x28 MNIST)."""
    c, h, w = input_shape
    if h < 4 or w < 4:
        raise ValueError(f"cnn needs inputs of at least 4x4, got {h}x{w}")
    return nn.Sequential(
        nn.Conv2d(c, 32, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * (h // 4) * (w // 4), 512),
        nn.ReLU(),
        nn.Linear(512, num_classes),
    )


def _vgg(name: str, input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    """CIFAR-style VGG (3x3 convolutions, a 512-512-512-classes head): the models PerFed-CKT's
    communication counts imply (VGG11: 9,756,426 parameters on CIFAR-10).

    Deviation: GroupNorm (32 groups) where the paper has BatchNorm. The trainer keeps each
    client as a flat parameter vector, and BatchNorm's running statistics are state outside
    it; GroupNorm has the same affine parameters, no running state, and is the usual choice
    under non-IID data (Hsieh et al., ICML 2020)."""
    c, h, w = input_shape
    if h < 32 or w < 32:
        raise ValueError(f"{name} needs inputs of at least 32x32, got {h}x{w}")
    layers: list[nn.Module] = []
    for spec in _VGG_LAYERS[name]:
        if spec == "M":
            layers.append(nn.MaxPool2d(2))
            h, w = h // 2, w // 2
        else:
            width = int(spec)
            layers += [nn.Conv2d(c, width, 3, padding=1), nn.GroupNorm(32, width), nn.ReLU()]
            c = width
    layers += [nn.Flatten(), nn.Linear(c * h * w, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(512, num_classes))


def build_model(
    name: str,
    input_shape: tuple[int, int, int],
    num_classes: int,
    hidden_sizes: tuple[int, ...] = (200, 200),
) -> nn.Module:
    """A freshly initialized model that outputs logits; ``hidden_sizes`` applies to mlp only."""
    if name == "mlp":
        return _mlp(input_shape, num_classes, tuple(hidden_sizes))
    if name == "lenet5":
        return _lenet5(input_shape, num_classes)
    if name == "cnn":
        return _cnn(input_shape, num_classes)
    if name in _VGG_LAYERS:
        return _vgg(name, input_shape, num_classes)
    raise ValueError(f"unknown model {name!r}; choose one of: {', '.join(MODEL_NAMES)}")
