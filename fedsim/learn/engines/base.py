"""What every training engine shares: the trainer's model as flat parameter views (``Setup``),
the batches a training draws (``draw_plan``), the co-distillation term, and one call's clients
(``Chunk``)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple, Protocol

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from fedsim.learn.execution import AUTOCAST_DTYPES, CompileMode, Precision
from fedsim.learn.optimizers import OptimizerSpec

CPU = torch.device("cpu")


@dataclass(frozen=True)
class Distillation:
    """weight * mean_x ||softmax(f(x)) - target(x)||^2 over a random public batch per step.

    PerFed-CKT's co-distillation term (eq. 1): squared L2 between probability vectors, no
    temperature; ``targets`` has one row per public input.
    """

    inputs: torch.Tensor
    targets: torch.Tensor
    weight: float
    batch_size: int = 128

    def to(self, device: torch.device) -> Distillation:
        """The same term with its public inputs and targets on ``device`` (the clients' state
        stays on the host; the trainer moves what one training reads)."""
        return replace(self, inputs=self.inputs.to(device), targets=self.targets.to(device))

    def draw(self, generator: torch.Generator) -> torch.Tensor:
        """The public rows of one step (from the training's own generator, after its batch)."""
        return torch.randint(len(self.inputs), (self.batch_size,), generator=generator)

    def loss(self, model: nn.Module, rows: torch.Tensor) -> torch.Tensor:
        rows = rows.to(self.inputs.device)
        probabilities = F.softmax(model(self.inputs[rows]), dim=1)
        return self.weight * (probabilities - self.targets[rows]).square().sum(dim=1).mean()

    def batches_with(self, other: Distillation | None) -> bool:
        """The same public set (the same tensor), weight and batch size: clients with their
        own targets (their nearest centroid) still train in one batch."""
        return (
            other is not None
            and self.inputs is other.inputs
            and (self.weight, self.batch_size) == (other.weight, other.batch_size)
        )


class Plan(NamedTuple):
    """The index batches of one training, and its public rows per step (with distillation)."""

    batches: list[torch.Tensor]
    public_rows: list[torch.Tensor]


def draw_plan(
    n: int, batch_size: int, steps: int, seed: int, distill: Distillation | None = None
) -> Plan:
    """A fresh permutation per epoch (steps mode cycles through further ones), the partial
    last batch kept; with ``distill`` each step then draws its public rows from the same
    generator, so every engine sees the draws of the loop as it always drew them."""
    generator = torch.Generator().manual_seed(seed)
    batches: list[torch.Tensor] = []
    public_rows: list[torch.Tensor] = []
    while len(batches) < steps:
        for batch in torch.randperm(n, generator=generator).split(batch_size):
            if len(batches) == steps:
                break
            batches.append(batch)
            if distill is not None:
                public_rows.append(distill.draw(generator))
    return Plan(batches, public_rows)


@dataclass
class Chunk:
    """Clients an engine trains in one go, longest training first: their start parameters,
    data, plans and options (a prox center and a correction each, or none; distillation
    terms that batch together); ``capacity``: the most clients the trainer puts in a chunk
    of this call (what a fixed-shape step pads to)."""

    params: list[torch.Tensor]
    datasets: list[tuple[torch.Tensor, torch.Tensor]]
    plans: list[Plan]
    centers: list[torch.Tensor | None]
    prox_mu: float
    corrections: list[torch.Tensor | None]
    distills: list[Distillation | None]
    capacity: int

    def rows(self, rows: Sequence[int], capacity: int) -> Chunk:
        pick = lambda items: [items[i] for i in rows]  # noqa: E731
        return Chunk(
            pick(self.params), pick(self.datasets), pick(self.plans), pick(self.centers),
            self.prox_mu, pick(self.corrections), pick(self.distills), capacity,
        )  # fmt: skip


class Setup:
    """The trainer's one copy of the architecture, its parameters (and their ``.grad``) views
    into two flat buffers, and how it computes: what every engine reads.

    A step is then one ordinary forward/backward whose gradient lands in a flat tensor, and
    an optimizer a few vector operations. Measured on the 2-core development CPU (ms per SGD
    step, batch 32, 28x28 inputs, best of 10 runs, two sessions): the FedAvg cnn 16.6-16.7
    with parameter views vs 17.3-17.9 with ``torch.func.functional_call`` on a flat leaf; the
    200-200 mlp 0.60-0.64 vs 0.87-0.92 (functional_call re-binds every parameter per call,
    and the backward through the split of the flat leaf costs an extra concat)."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: OptimizerSpec,
        batch_size: int,
        device: torch.device,
        precision: Precision,
        compile: CompileMode,
    ) -> None:
        self.optimizer = optimizer
        self.batch_size = batch_size
        self.device = device
        self.precision = precision
        self.compile = compile
        self.vmapping = False  # vmap cannot re-layout its batched tensors: NCHW there
        self.module = model
        params = list(model.parameters())
        self.num_params = sum(p.numel() for p in params)
        self.flat = torch.zeros(self.num_params, dtype=torch.float32, device=device)
        self.grad = torch.zeros_like(self.flat)
        offset = 0
        with torch.no_grad():
            for p in params:
                n = p.numel()
                self.flat[offset : offset + n].copy_(p.reshape(-1))
                p.data = self.flat[offset : offset + n].view_as(p)
                # Backward accumulates in place into an existing .grad: into the flat buffer.
                p.grad = self.grad[offset : offset + n].view_as(p)
                offset += n
        self.names = [name for name, _ in model.named_parameters()]
        self.shapes = [p.shape for p in params]
        self.sizes = [p.numel() for p in params]
        self._layers_seen: dict[tuple[int, ...], list[tuple[nn.Module, torch.Size, int]]] = {}

    def mixed(self) -> contextlib.AbstractContextManager:
        """Autocast to the trainer's precision (nothing in fp32 or tf32); without its cache of
        cast weights in a captured step (CUDA graphs cannot hold it)."""
        dtype = AUTOCAST_DTYPES.get(self.precision)
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=dtype, cache_enabled=self.compile != "graph")

    @contextlib.contextmanager
    def vmapped(self) -> Iterator[None]:
        self.vmapping = True
        try:
            yield
        finally:
            self.vmapping = False

    def to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        """A host tensor on the trainer's device: through pinned memory without waiting on a
        GPU (the copy is ordered before the kernels that read it), as it is on a CPU."""
        if self.device.type != "cuda":
            return tensor.to(self.device)
        return tensor.pin_memory().to(self.device, non_blocking=True)

    def stack(self, flats: Sequence[torch.Tensor], rows: int | None = None) -> list[torch.Tensor]:
        """Flat vectors -> one (clients, *shape) tensor per parameter of the architecture;
        ``rows`` pads the clients with zeros to that many (a captured step's fixed shape)."""
        stack = torch.stack(list(flats)).float()
        if rows is not None and rows > len(flats):
            stack = torch.cat([stack, stack.new_zeros(rows - len(flats), stack.shape[1])])
        stack = self.to_device(stack)
        return [
            part.reshape(len(stack), *shape).contiguous()
            for part, shape in zip(stack.split(self.sizes, dim=1), self.shapes, strict=True)
        ]

    @staticmethod
    def unstack(layers: Sequence[torch.Tensor], count: int) -> list[torch.Tensor]:
        """The first ``count`` clients' flat vectors, on the CPU, each with its own storage (a
        client's result does not hold its chunk's memory): one copy back for the chunk."""
        flats = torch.cat([layer[:count].reshape(count, -1) for layer in layers], dim=1)
        return [flat.clone() for flat in flats.to(CPU)]

    def layers_seen(self, sample_shape: tuple[int, ...]) -> list[tuple[nn.Module, torch.Size, int]]:
        """Every leaf layer run, with its input's shape and its output's size, for one sample of
        ``sample_shape``: the model run once on the meta device (shapes only, no arithmetic),
        cached per shape."""
        if sample_shape not in self._layers_seen:
            leaves = [m for m in self.module.modules() if not any(m.children())]
            seen: list[tuple[nn.Module, torch.Size, int]] = []
            hooks = [m.register_forward_hook(
                lambda m, a, out: seen.append((m, a[0].shape, out.numel()))) for m in leaves
            ]  # fmt: skip
            meta = {
                name: torch.empty(shape, device="meta")
                for name, shape in zip(self.names, self.shapes, strict=True)
            }
            try:
                with torch.no_grad():
                    functional_call(
                        self.module, meta, (torch.empty(1, *sample_shape, device="meta"),)
                    )
            finally:
                for hook in hooks:
                    hook.remove()
            self._layers_seen[sample_shape] = seen
        return self._layers_seen[sample_shape]

    def activation_floats(self, sample_shape: tuple[int, ...]) -> int:
        """Floats of every layer's output for one sample of ``sample_shape``."""
        return sum(size for _, _, size in self.layers_seen(sample_shape))


def client_floats(
    setup: Setup, sample_shape: tuple[int, ...], width: int, extra: int, held_per_sample: int
) -> int:
    """Float32s one client holds during a step at ``width`` samples: its parameter-sized
    tensors (parameters, gradient, optimizer state and ``extra`` more: prox centers,
    corrections), and per sample its input and ``held_per_sample``."""
    spec = setup.optimizer
    states = 2 + {"sgd": int(spec.momentum > 0), "adam": 2}[spec.name] + extra
    return setup.num_params * states + width * (math.prod(sample_shape) + held_per_sample)


@dataclass(frozen=True)
class TrainResult:
    params: torch.Tensor  # new flat params (a new tensor; the input is never modified in place)
    mean_loss: float  # mean cross-entropy over the steps taken (nan if none); prox term excluded
    steps: int
    samples: int  # samples processed (sum of batch sizes)


def result_of(params: torch.Tensor, loss_sum: float, plan: Plan) -> TrainResult:
    """A training's result from its summed loss over the plan's steps."""
    steps = len(plan.batches)
    mean_loss = loss_sum / steps if steps else math.nan
    return TrainResult(params, mean_loss, steps, sum(len(b) for b in plan.batches))


class Engine(Protocol):
    """How a trainer trains several clients of its architecture (``training.engine``)."""

    name: str
    batched: bool  # trains a chunk's clients at once: worth running queued trainings early

    def cannot_run(self) -> str | None:
        """Why this engine cannot train the trainer's model (the layer, or the precision);
        None where it can."""

    def training_floats(self, sample_shape: tuple[int, ...], width: int, extra: int) -> int:
        """Float32s one client of a chunk holds on the device during a step at ``width``
        samples (the basis of ``training.vmap_chunk: auto``)."""

    def train_chunk(self, chunk: Chunk) -> list[TrainResult]:
        """Train the chunk's clients; their results in the chunk's order."""
