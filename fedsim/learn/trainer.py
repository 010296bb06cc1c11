"""The training engine: clients are flat float32 parameter vectors, the model is a template.

Design: the trainer owns a private copy of the architecture whose parameters (and their
``.grad``) are views into two flat buffers, so a step is one ordinary forward/backward and the
gradient lands directly in a flat tensor; optimizers and the proximal term are then a few
vector operations. Measured on the 2-core development CPU (ms per SGD step, batch 32,
28x28 inputs, best of 10 runs, two sessions): the FedAvg cnn 16.6-16.7 with parameter views
vs 17.3-17.9 with ``torch.func.functional_call`` on a flat leaf; the 200-200 mlp 0.60-0.64 vs
0.87-0.92 (functional_call re-binds every parameter per call, and the backward through the
split of the flat leaf costs an extra concat).

Several clients of one architecture run as a loop of the above or vectorized with vmap
(``train_many``, ``evaluate_each``); the measured policy of ``engine="auto"`` is in
``fedsim.learn.execution``.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from fedsim.learn.execution import (
    ACTIVATION_COPIES,
    AUTOCAST_DTYPES,
    COMPILE_MODES,
    CUDA_PRECISIONS,
    ENGINES,
    MEMORY_FORMATS,
    PRECISIONS,
    CompileMode,
    Engine,
    MemoryFormat,
    Precision,
    tensor_float32,
    uses_channels_last,
    vmap_chunk_size,
)
from fedsim.learn.optimizers import (
    SGD,
    Adam,
    LossScaler,
    OptimizerSpec,
    Params,
    as_list,
    make_optimizer,
)

_EVAL_BATCH = 1024
_CPU = torch.device("cpu")


def _corrected_step(
    opt: SGD | Adam,
    spec: OptimizerSpec,
    w: Params,
    g: Params,
    shift: Params | None,
) -> None:
    """One optimizer step of w on g, corrected by ``shift`` (SCAFFOLD's c - c_i): y <- y -
    lr (g + c - c_i). With plain SGD the correction joins the gradient, as the paper writes
    it; with optimizer state (momentum, Adam) it is a step of its own, -lr (c - c_i), outside
    that state, as NIID-Bench's SCAFFOLD does: fed through momentum 0.9 it would be amplified
    tenfold, on top of option II's c_i already measuring momentum-amplified displacements,
    and training diverges (CIFAR-10 Dirichlet(0.5), scenarios/papers/scaffold_niid_bench)."""
    if shift is None:
        opt.step(w, g)
    elif spec.name == "sgd" and not spec.momentum:
        torch._foreach_add_(as_list(g), as_list(shift))
        opt.step(w, g)
    else:
        opt.step(w, g)
        torch._foreach_sub_(as_list(w), as_list(shift), alpha=spec.lr)


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

    def loss(self, model: nn.Module, generator: torch.Generator) -> torch.Tensor:
        rows = torch.randint(len(self.inputs), (self.batch_size,), generator=generator)
        rows = rows.to(self.inputs.device)
        probabilities = F.softmax(model(self.inputs[rows]), dim=1)
        return self.weight * (probabilities - self.targets[rows]).square().sum(dim=1).mean()


@dataclass(frozen=True)
class Ensemble:
    """A personalized predictor that mixes models: p(y|x) = Σ_j weight_j softmax(model_j(x)).

    FedeRiCo's prediction rule (probabilities, not logits, are averaged); weights sum to 1.
    """

    models: tuple[torch.Tensor, ...]
    weights: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.models or len(self.models) != len(self.weights):
            raise ValueError("an ensemble needs one weight per model, and at least one model")
        if any(w < 0 for w in self.weights) or not math.isclose(sum(self.weights), 1.0):
            raise ValueError(f"ensemble weights must be >= 0 and sum to 1, got {self.weights}")


@dataclass(frozen=True)
class TrainResult:
    params: torch.Tensor  # new flat params (a new tensor; the input is never modified in place)
    mean_loss: float  # mean cross-entropy over the steps taken (nan if none); prox term excluded
    steps: int
    samples: int  # samples processed (sum of batch sizes)


@dataclass(frozen=True)
class EvalResult:
    correct: int
    total: int
    loss_sum: float  # summed cross-entropy, so results can be pooled across clients

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else math.nan


def _batches(
    n: int, batch_size: int, steps: int, generator: torch.Generator, device: torch.device
) -> Iterator[torch.Tensor]:
    """The index batches of a training: a fresh permutation per epoch, partial last batch kept.

    Lazy, so that a distillation term drawing from the same generator interleaves as it did.
    """
    done = 0
    while done < steps:
        for batch in torch.randperm(n, generator=generator).to(device).split(batch_size):
            if done == steps:
                return
            yield batch
            done += 1


def _float32_math(method: Callable) -> Callable:
    """Run a trainer's computation with TF32 on or off as its precision says (on a CUDA
    device: ``tensor_float32``), backward passes included."""

    @functools.wraps(method)
    def in_precision(self: Trainer, *args, **kwargs):
        with tensor_float32(self.precision == "tf32"):
            return method(self, *args, **kwargs)

    return in_precision


class Trainer:
    """Trains and evaluates flat parameter vectors of one architecture.

    The model passed in is copied, never modified; its architecture is all that is used.
    ``precision`` bf16 or fp16 runs forward passes under autocast (the parameters, gradients
    and optimizer stay fp32: only the compute is mixed; fp16 needs CUDA and scales the loss);
    fp32 computes in IEEE float32 on every device, tf32 (CUDA) lets convolutions and matrix
    products round to TF32 (``tensor_float32``);
    ``memory_format`` channels_last feeds convolutions NHWC batches ("auto": only where it
    was measured to pay, see ``uses_channels_last``); ``compile`` captures the vmap engine's
    step with ``torch.compile`` (``COMPILE_MODES``).
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: OptimizerSpec,
        batch_size: int,
        device: str | torch.device = "cpu",
        engine: Engine = "auto",
        precision: Precision = "fp32",
        memory_format: MemoryFormat = "auto",
        vmap_chunk: int | Literal["auto"] = "auto",
        compile: CompileMode = "eager",
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if engine not in ENGINES:
            raise ValueError(f"unknown engine {engine!r}; choose one of: {', '.join(ENGINES)}")
        if precision not in PRECISIONS:
            raise ValueError(f"unknown precision {precision!r}; choose one of: {PRECISIONS}")
        if memory_format not in MEMORY_FORMATS:
            raise ValueError(f"unknown memory format {memory_format!r}: {MEMORY_FORMATS}")
        if vmap_chunk != "auto" and not (isinstance(vmap_chunk, int) and vmap_chunk >= 1):
            raise ValueError(
                f"vmap_chunk must be 'auto' or a whole number >= 1, got {vmap_chunk!r}"
            )
        if compile not in COMPILE_MODES:
            raise ValueError(f"unknown compile mode {compile!r}; choose one of: {COMPILE_MODES}")
        self.engine = engine
        self.vmap_chunk = vmap_chunk
        self.compile = compile
        self._activation_floats: dict[tuple[int, ...], int] = {}
        self.optimizer = optimizer
        self.batch_size = batch_size
        self.device = torch.device(device)
        if precision in CUDA_PRECISIONS and self.device.type != "cuda":
            raise ValueError(f"precision {precision} needs a CUDA device; use bf16 on a CPU")
        self.precision = precision
        self._model = copy.deepcopy(model).to(self.device)
        convolutions = [m for m in self._model.modules() if isinstance(m, nn.Conv2d)]
        self.channels_last = bool(convolutions) and uses_channels_last(
            memory_format, precision, convolutions[0].in_channels
        )
        if self.channels_last:
            # Every convolution gets NHWC input: converting only the model's input is not
            # enough, since a 1-channel batch is NCHW and NHWC at once and PyTorch then keeps
            # the first convolution's output (hence all later ones) NCHW.
            for conv in convolutions:
                conv.register_forward_pre_hook(self._nhwc)
        self._vmapping = False  # vmap cannot re-layout its batched tensors: NCHW there
        params = list(self._model.parameters())
        self.num_params = sum(p.numel() for p in params)
        self._flat = torch.zeros(self.num_params, dtype=torch.float32, device=self.device)
        self._grad = torch.zeros_like(self._flat)
        offset = 0
        with torch.no_grad():
            for p in params:
                n = p.numel()
                self._flat[offset : offset + n].copy_(p.reshape(-1))
                p.data = self._flat[offset : offset + n].view_as(p)
                # Backward accumulates in place into an existing .grad: into the flat buffer.
                p.grad = self._grad[offset : offset + n].view_as(p)
                offset += n
        self._names = [name for name, _ in self._model.named_parameters()]
        self._shapes = [p.shape for p in params]
        self._sizes = [p.numel() for p in params]
        # vmap runs the same computation per client only for stateless, deterministic layers.
        self._vmappable = not any(True for _ in self._model.buffers()) and not any(
            isinstance(m, nn.modules.dropout._DropoutNd) for m in self._model.modules()
        )
        self._client_grads = vmap(grad_and_value(self._weighted_loss))
        if compile != "eager":
            self._client_grads = torch.compile(self._client_grads, mode=compile)
        self._client_logits = vmap(self._logits)

    def _nhwc(self, module: nn.Module, args: tuple) -> tuple | None:
        """A convolution's forward pre-hook: its input in NHWC layout (not under vmap)."""
        if self._vmapping:
            return None
        return (args[0].contiguous(memory_format=torch.channels_last), *args[1:])

    @contextlib.contextmanager
    def _vmapped(self) -> Iterator[None]:
        self._vmapping = True
        try:
            yield
        finally:
            self._vmapping = False

    def _mixed(self) -> contextlib.AbstractContextManager:
        """Autocast to the trainer's precision (nothing in fp32)."""
        dtype = AUTOCAST_DTYPES.get(self.precision)
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=dtype)

    @property
    def layer_shapes(self) -> list[torch.Size]:
        """The shapes of the layers a flat parameter vector is made of, in order."""
        return list(self._shapes)

    def init_params(self, seed: int) -> torch.Tensor:
        """PyTorch's default initialization of the architecture under ``manual_seed(seed)``.

        Equals the parameters of the model built right after ``torch.manual_seed(seed)``; the
        global RNG state is left untouched.
        """
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(seed)
            for module in self._model.modules():
                reset = getattr(module, "reset_parameters", None)
                if callable(reset):
                    reset()
            return self._flat.to(_CPU, copy=True)  # clients' state lives on the CPU

    def num_steps(
        self, num_samples: int, *, epochs: int | None = None, steps: int | None = None
    ) -> int:
        """Local steps for a training of ``epochs`` passes or ``steps`` batches (exactly one)."""
        if steps is not None and epochs is None:
            if steps < 0:
                raise ValueError(f"steps must be >= 0, got {steps}")
            return steps
        if epochs is not None and steps is None:
            if epochs < 0 or num_samples < 1:
                raise ValueError(f"need epochs >= 0 and samples >= 1, got {epochs}, {num_samples}")
            return epochs * math.ceil(num_samples / self.batch_size)
        raise ValueError("give exactly one of epochs and steps")

    def samples_processed(self, num_samples: int, steps: int) -> int:
        """Samples a training of ``steps`` batches touches (partial last batch per epoch)."""
        steps_per_epoch = math.ceil(num_samples / self.batch_size)
        epochs, extra_steps = divmod(steps, steps_per_epoch)
        return epochs * num_samples + min(extra_steps * self.batch_size, num_samples)

    @_float32_math
    def train(
        self,
        params: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        epochs: int | None = None,
        steps: int | None = None,
        seed: int,
        prox_center: torch.Tensor | None = None,
        prox_mu: float = 0.0,
        distill: Distillation | None = None,
        correction: torch.Tensor | None = None,
    ) -> TrainResult:
        """Mini-batch training from ``params`` with a fresh optimizer (stateless FL clients).

        Batches follow one permutation per epoch from a generator seeded with ``seed`` (steps
        mode cycles through further permutations); the last partial batch is kept. With
        ``prox_center`` the loss gains prox_mu/2 * ||w - prox_center||^2 (FedProx, Ditto);
        with ``distill`` it gains the co-distillation term on a public batch per step;
        ``correction`` (SCAFFOLD's c - c_i) corrects every step (``_corrected_step``).
        """
        n = len(x)
        if len(y) != n:
            raise ValueError(f"{n} inputs but {len(y)} labels")
        total_steps = self.num_steps(n, epochs=epochs, steps=steps)
        if total_steps and n == 0:
            raise ValueError("cannot train on an empty dataset")
        x, y = x.to(self.device), y.to(self.device)
        center = None if prox_center is None or not prox_mu else prox_center.to(self.device)
        shift = None if correction is None else correction.to(self.device)
        distill = None if distill is None else distill.to(self.device)
        w, g = self._flat, self._grad
        with torch.no_grad():
            w.copy_(params)
        opt = make_optimizer(self.optimizer, w)
        generator = torch.Generator().manual_seed(seed)
        loss_sum = torch.zeros((), device=self.device)
        done = samples = 0
        scaler = LossScaler() if self.precision == "fp16" else None
        self._model.train()
        for batch in _batches(n, self.batch_size, total_steps, generator, self.device):
            g.zero_()
            with self._mixed():
                loss = F.cross_entropy(self._model(x[batch]), y[batch])
                total = loss if distill is None else loss + distill.loss(self._model, generator)
            (total if scaler is None else total * scaler.scale).backward()
            with torch.no_grad():
                if scaler is not None and not scaler.unscale(g):
                    done += 1  # an overflowing fp16 step is skipped, as GradScaler does
                    samples += len(batch)
                    continue
                if center is not None:
                    g.add_(w, alpha=prox_mu).sub_(center, alpha=prox_mu)
                _corrected_step(opt, self.optimizer, w, g, shift)
            loss_sum += loss.detach()
            done += 1
            samples += len(batch)
        mean_loss = loss_sum.item() / done if done else math.nan
        return TrainResult(w.to(_CPU, copy=True), mean_loss, done, samples)

    @_float32_math
    def train_many(
        self,
        params: Sequence[torch.Tensor],
        datasets: Sequence[tuple[torch.Tensor, torch.Tensor]],
        *,
        steps: int | Sequence[int] | None = None,
        epochs: int | None = None,
        seeds: Sequence[int],
        engine: Engine | None = None,
        prox_center: torch.Tensor | Sequence[torch.Tensor] | None = None,
        prox_mu: float = 0.0,
        distill: Distillation | None = None,
        correction: Sequence[torch.Tensor] | None = None,
    ) -> list[TrainResult]:
        """``[train(p, x, y, steps=..., seed=s, ...) for ...]``, equal within fp tolerance.

        ``steps`` may differ per client; ``prox_center`` is one tensor for all or one per
        client, ``correction`` one per client. ``engine`` (default: the trainer's) picks how:
        "loop" trains one client after the other, "vmap" all at once (where the model allows
        it, see ``engine_for``).
        """
        count = len(params)
        if not count:
            return []
        if len(datasets) != count or len(seeds) != count:
            raise ValueError(f"{count} models, {len(datasets)} datasets and {len(seeds)} seeds")
        if steps is None or isinstance(steps, int):
            steps = [steps] * count
        elif len(steps) != count:
            raise ValueError(f"{count} models but {len(steps)} step counts")
        step_counts = [
            self.num_steps(len(y), epochs=epochs, steps=k)
            for (_, y), k in zip(datasets, steps, strict=True)
        ]
        if prox_center is None or isinstance(prox_center, torch.Tensor):
            prox_center = [prox_center] * count
        elif len(prox_center) != count or any(c is None for c in prox_center):
            raise ValueError(f"give one prox center per client ({count}) or a common one")
        shifts = [None] * count if correction is None else list(correction)
        if len(shifts) != count or (correction is not None and any(d is None for d in shifts)):
            raise ValueError(f"give one correction per client ({count})")
        if self.engine_for(count, engine, distill) == "loop":
            return [
                self.train(
                    p, x, y, steps=k, seed=s, prox_center=c, prox_mu=prox_mu, distill=distill,
                    correction=d,
                )
                for p, (x, y), k, s, c, d in zip(
                    params, datasets, step_counts, seeds, prox_center, shifts, strict=True
                )
            ]  # fmt: skip
        centers = prox_center if prox_mu and prox_center[0] is not None else None
        return self._train_vmap(params, datasets, step_counts, seeds, centers, prox_mu, correction)

    def engine_for(
        self, count: int, engine: Engine | None = None, distill: Distillation | None = None
    ) -> Literal["loop", "vmap"]:
        """The engine that trains ``count`` clients: "auto" follows the measured policy.

        vmap needs stateless, deterministic layers (no buffers, no dropout), no distillation
        and no fp16 (whose loss scaling skips steps per client: ``LossScaler``, in the loop);
        elsewhere every engine is the loop. "auto" takes vmap for two or more clients on a GPU;
        on a CPU the loop was faster for every model family (module doc).
        """
        engine = engine or self.engine
        if engine not in ENGINES:
            raise ValueError(f"unknown engine {engine!r}; choose one of: {', '.join(ENGINES)}")
        if engine == "loop" or distill is not None or not self._vmappable:
            return "loop"
        if self.precision == "fp16":  # no per-client loss scaling under vmap
            return "loop"
        if engine == "vmap":
            return "vmap"
        return "vmap" if count > 1 and self.device.type == "cuda" else "loop"

    def _logits(self, tensors: tuple[torch.Tensor, ...], x: torch.Tensor) -> torch.Tensor:
        """The model's outputs with one client's parameters (per layer) swapped in."""
        return functional_call(self._model, dict(zip(self._names, tensors, strict=True)), (x,))

    def _weighted_loss(
        self,
        tensors: tuple[torch.Tensor, ...],
        x: torch.Tensor,
        y: torch.Tensor,
        weight: torch.Tensor,
    ) -> torch.Tensor:
        """Mean cross-entropy of one client's parameters over the rows of weight 1 (padding 0)."""
        logits = self._logits(tensors, x)
        return (F.cross_entropy(logits, y, reduction="none") * weight).sum() / weight.sum()

    def _stacked(self, flats: list[torch.Tensor]) -> list[torch.Tensor]:
        """Flat vectors -> one (clients, *shape) tensor per parameter of the architecture."""
        stack = self._to_device(torch.stack(flats).float())
        return [
            part.reshape(len(flats), *shape).contiguous()
            for part, shape in zip(stack.split(self._sizes, dim=1), self._shapes, strict=True)
        ]

    def _train_vmap(
        self,
        params: Sequence[torch.Tensor],
        datasets: Sequence[tuple[torch.Tensor, torch.Tensor]],
        step_counts: list[int],
        seeds: Sequence[int],
        centers: Sequence[torch.Tensor] | None,
        prox_mu: float,
        corrections: Sequence[torch.Tensor] | None,
    ) -> list[TrainResult]:
        """The clients in chunks of ``vmap_chunk`` (memory stays bounded whatever their
        number), each chunk's steps in lockstep: one vmapped forward/backward and optimizer
        step for all its clients.

        Clients are sorted by step count, so those still training are a prefix of a chunk.
        Batches come from the same seeded permutations as ``train``; partial batches are
        padded to a common width and masked out of the loss (weight 0).
        """
        plans = []
        for (x, y), k, seed in zip(datasets, step_counts, seeds, strict=True):
            if len(x) != len(y):
                raise ValueError(f"{len(x)} inputs but {len(y)} labels")
            if k and not len(y):
                raise ValueError("cannot train on an empty dataset")
            generator = torch.Generator().manual_seed(seed)
            plans.append(list(_batches(len(y), self.batch_size, k, generator, _CPU)))
        order = sorted(range(len(params)), key=lambda i: -step_counts[i])
        width = max((len(b) for plan in plans for b in plan), default=1)
        extra = (centers is not None) + (corrections is not None)
        chunk = self._chunk_size(len(order), self._training_floats(datasets[0][0], width, extra))
        results: dict[int, TrainResult] = {}
        for start in range(0, len(order), chunk):
            rows = order[start : start + chunk]
            trained, losses = self._train_chunk(
                [params[i] for i in rows],
                [datasets[i] for i in rows],
                [plans[i] for i in rows],
                None if centers is None else [centers[i] for i in rows],
                prox_mu,
                None if corrections is None else [corrections[i] for i in rows],
            )
            for i, flat, loss in zip(rows, trained, losses, strict=True):
                k, n = step_counts[i], len(datasets[i][1])
                mean_loss = loss / k if k else math.nan
                samples = self.samples_processed(n, k) if k else 0
                results[i] = TrainResult(flat, mean_loss, k, samples)
        return [results[i] for i in range(len(params))]

    def _train_chunk(
        self,
        params: list[torch.Tensor],
        datasets: list[tuple[torch.Tensor, torch.Tensor]],
        plans: list[list[torch.Tensor]],
        centers: list[torch.Tensor] | None,
        prox_mu: float,
        corrections: list[torch.Tensor] | None,
    ) -> tuple[list[torch.Tensor], list[float]]:
        """One chunk's clients (longest training first) trained in lockstep; their new flat
        parameters (on the CPU, one copy back for the chunk) and summed losses.

        Parameters are kept per layer, (clients, *shape), with one optimizer over all layers
        (elementwise, so the same as one on each flat vector): a flat stack would cost a
        concatenation of every gradient per step."""
        count, total_steps = len(plans), len(plans[0])
        width = max((len(b) for plan in plans for b in plan), default=1)
        index = torch.zeros(count, total_steps, width, dtype=torch.long)
        weight = torch.zeros(count, total_steps, width)
        offset = 0
        for row, plan in enumerate(plans):
            if plan:
                padded = nn.utils.rnn.pad_sequence(plan, batch_first=True)
                index[row, : len(plan), : padded.shape[1]] = padded + offset
                lengths = torch.tensor([len(b) for b in plan])
                weight[row, : len(plan)] = (torch.arange(width) < lengths[:, None]).float()
            offset += len(datasets[row][1])
        x_all = self._to_device(torch.cat([x for x, _ in datasets]))
        y_all = self._to_device(torch.cat([y for _, y in datasets]))
        index, weight = self._to_device(index), self._to_device(weight)
        layers = self._stacked(params)
        center_layers = None if centers is None else self._stacked(centers)
        shift_layers = None if corrections is None else self._stacked(corrections)
        optimizer = make_optimizer(self.optimizer, layers)
        loss_sum = torch.zeros(count, device=self.device)
        active = count
        for step in range(total_steps):
            if len(plans[active - 1]) == step:  # the last clients are done
                active = sum(1 for plan in plans if len(plan) > step)
                optimizer.keep_first(active)
            ws = [layer[:active] for layer in layers]  # views: the stacks are updated in place
            rows = index[:active, step]
            with self._mixed(), self._vmapped():
                gs, loss = self._client_grads(
                    tuple(ws), x_all[rows], y_all[rows], weight[:active, step]
                )
            with torch.no_grad():
                gs = list(gs)
                if center_layers is not None:
                    torch._foreach_add_(gs, ws, alpha=prox_mu)
                    torch._foreach_sub_(gs, [c[:active] for c in center_layers], alpha=prox_mu)
                shifts = None if shift_layers is None else [s[:active] for s in shift_layers]
                _corrected_step(optimizer, self.optimizer, ws, gs, shifts)
            loss_sum[:active] += loss.detach()
        trained = torch.cat([layer.reshape(count, -1) for layer in layers], dim=1).to(_CPU)
        return [flat.clone() for flat in trained], loss_sum.tolist()

    def _to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        """A host tensor on the trainer's device: through pinned memory without waiting on a
        GPU (the copy is ordered before the kernels that read it), as it is on a CPU."""
        if self.device.type != "cuda":
            return tensor.to(self.device)
        return tensor.pin_memory().to(self.device, non_blocking=True)

    def _chunk_size(self, clients: int, floats_per_client: int) -> int:
        return vmap_chunk_size(self.vmap_chunk, clients, floats_per_client, self.device)

    def _training_floats(self, x: torch.Tensor, width: int, extra_states: int) -> int:
        """Float32s a vmapped training step holds per client: parameters, gradients, optimizer
        state and ``extra_states`` more parameter-shaped tensors (prox centers, corrections),
        the batch, and ``ACTIVATION_COPIES`` of every layer's output for the batch."""
        optimizer_states = {"sgd": int(self.optimizer.momentum > 0), "adam": 2}
        states = 2 + optimizer_states[self.optimizer.name] + extra_states
        sample = math.prod(x.shape[1:])
        activations = ACTIVATION_COPIES * self.activation_floats(tuple(x.shape[1:]))
        return self.num_params * states + width * (sample + activations)

    def activation_floats(self, sample_shape: tuple[int, ...]) -> int:
        """Floats of every layer's output for one sample of ``sample_shape``: the model run
        once on the meta device (shapes only, no arithmetic), cached per shape."""
        if sample_shape not in self._activation_floats:
            leaves = [m for m in self._model.modules() if not any(m.children())]
            outputs: list[int] = []
            hooks = [m.register_forward_hook(lambda m, a, out: outputs.append(out.numel()))
                     for m in leaves]  # fmt: skip
            meta = {
                name: torch.empty(shape, device="meta")
                for name, shape in zip(self._names, self._shapes, strict=True)
            }
            try:
                with torch.no_grad():
                    functional_call(
                        self._model, meta, (torch.empty(1, *sample_shape, device="meta"),)
                    )
            finally:
                for hook in hooks:
                    hook.remove()
            self._activation_floats[sample_shape] = sum(outputs)
        return self._activation_floats[sample_shape]

    def evaluate(self, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> EvalResult:
        """Accuracy and summed cross-entropy of ``params`` on one dataset."""
        return self.evaluate_many(params, [x], [y])[0]

    @_float32_math
    def evaluate_many(
        self, params: torch.Tensor, xs: list[torch.Tensor], ys: list[torch.Tensor]
    ) -> list[EvalResult]:
        """One model on several clients' test sets in a single batched pass (a global model)."""
        if len(xs) != len(ys):
            raise ValueError(f"{len(xs)} input sets but {len(ys)} label sets")
        if not xs:
            return []
        sizes = [len(y) for y in ys]
        if any(len(x) != s for x, s in zip(xs, sizes, strict=True)):
            raise ValueError("every input set needs one label per sample")
        with torch.no_grad():
            self._flat.copy_(params)
        self._model.eval()
        x_all = torch.cat(xs) if len(xs) > 1 else xs[0]
        y_all = torch.cat(ys) if len(ys) > 1 else ys[0]
        losses, hits = [], []
        with torch.inference_mode():
            for start in range(0, len(y_all), _EVAL_BATCH):
                xb = x_all[start : start + _EVAL_BATCH].to(self.device)
                yb = y_all[start : start + _EVAL_BATCH].to(self.device)
                with self._mixed():
                    logits = self._model(xb).float()
                losses.append(F.cross_entropy(logits, yb, reduction="none").double())
                hits.append(logits.argmax(dim=1) == yb)
        if not losses:
            return [EvalResult(0, 0, 0.0) for _ in sizes]
        loss_parts = torch.cat(losses).split(sizes)
        hit_parts = torch.cat(hits).split(sizes)
        return [
            EvalResult(int(h.sum()), s, float(lo.sum()))
            for h, lo, s in zip(hit_parts, loss_parts, sizes, strict=True)
        ]

    @_float32_math
    def evaluate_each(
        self,
        params: Sequence[torch.Tensor],
        xs: Sequence[torch.Tensor],
        ys: Sequence[torch.Tensor],
        *,
        engine: Engine | None = None,
    ) -> list[EvalResult]:
        """Each client's own model on its own test set: ``[evaluate(p, x, y) for ...]``.

        With vmap, the models run a chunk at once (``vmap_chunk``) on the chunk's test sets
        padded to a common length.
        """
        if not len(params) == len(xs) == len(ys):
            raise ValueError(f"{len(params)} models, {len(xs)} input sets, {len(ys)} label sets")
        if self.engine_for(len(params), engine) == "loop":
            return [self.evaluate(p, x, y) for p, x, y in zip(params, xs, ys, strict=True)]
        if any(len(x) != len(y) for x, y in zip(xs, ys, strict=True)):
            raise ValueError("every input set needs one label per sample")
        if not params:
            return []
        longest = max(len(y) for y in ys)
        sample = math.prod(xs[0].shape[1:])
        activations = self.activation_floats(tuple(xs[0].shape[1:])) * min(longest, _EVAL_BATCH)
        chunk = self._chunk_size(len(params), self.num_params + longest * sample + activations)
        results: list[EvalResult] = []
        for start in range(0, len(params), chunk):
            end = start + chunk
            results += self._evaluate_chunk(list(params[start:end]), xs[start:end], ys[start:end])
        return results

    def _evaluate_chunk(
        self, params: list[torch.Tensor], xs: Sequence[torch.Tensor], ys: Sequence[torch.Tensor]
    ) -> list[EvalResult]:
        """A chunk's models at once on their test sets padded to a common length."""
        sizes = torch.tensor([len(y) for y in ys])
        layers = self._stacked(params)
        x_pad = self._to_device(nn.utils.rnn.pad_sequence(list(xs), batch_first=True))
        y_pad = self._to_device(nn.utils.rnn.pad_sequence(list(ys), batch_first=True))
        valid = (torch.arange(x_pad.shape[1]) < sizes[:, None]).to(self.device)
        loss_sum = torch.zeros(len(params), dtype=torch.float64, device=self.device)
        correct = torch.zeros(len(params), dtype=torch.long, device=self.device)
        rows = max(1, _EVAL_BATCH // len(params))  # about _EVAL_BATCH samples per pass
        with torch.inference_mode():
            for start in range(0, x_pad.shape[1], rows):
                with self._mixed(), self._vmapped():
                    logits = self._client_logits(layers, x_pad[:, start : start + rows]).float()
                yb, mask = y_pad[:, start : start + rows], valid[:, start : start + rows]
                losses = F.cross_entropy(logits.flatten(0, 1), yb.flatten(), reduction="none")
                loss_sum += (losses.view_as(yb).double() * mask).sum(dim=1)
                correct += ((logits.argmax(dim=2) == yb) & mask).sum(dim=1)
        return [
            EvalResult(c, s, lo)
            for c, s, lo in zip(correct.tolist(), sizes.tolist(), loss_sum.tolist(), strict=True)
        ]

    @_float32_math
    def gradient(self, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy gradient over (x, y) at ``params``, as a flat vector.

        Summed over chunks, so the full-data gradient of a large client fits in memory.
        """
        if len(y) == 0:
            raise ValueError("cannot take a gradient on an empty dataset")
        with torch.no_grad():
            self._flat.copy_(params)
        self._model.eval()  # a gradient at a point: no dropout or batch statistics updates
        self._grad.zero_()
        for start in range(0, len(y), _EVAL_BATCH):
            xb = x[start : start + _EVAL_BATCH].to(self.device)
            yb = y[start : start + _EVAL_BATCH].to(self.device)
            with self._mixed():
                loss = F.cross_entropy(self._model(xb), yb, reduction="sum")
            loss.backward()
        return (self._grad / len(y)).to(_CPU)

    @_float32_math
    def probabilities(self, params: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Softmax outputs of ``params`` on every row of x (PerFed-CKT's "logit matrix")."""
        with torch.no_grad():
            self._flat.copy_(params)
        self._model.eval()
        with torch.inference_mode():
            parts = []
            for start in range(0, len(x), _EVAL_BATCH):
                xb = x[start : start + _EVAL_BATCH].to(self.device)
                with self._mixed():
                    logits = self._model(xb).float()
                parts.append(F.softmax(logits, dim=1))
        return torch.cat(parts).to(_CPU, copy=True)

    @_float32_math
    def evaluate_ensemble(self, ensemble: Ensemble, x: torch.Tensor, y: torch.Tensor) -> EvalResult:
        """Accuracy and summed negative log-likelihood of an ensemble's mixed probabilities."""
        mixed = sum(
            weight * self.probabilities(params, x)
            for params, weight in zip(ensemble.models, ensemble.weights, strict=True)
        )
        y = y.to(self.device)
        likelihood = mixed.gather(1, y.view(-1, 1)).squeeze(1).double().clamp_min(1e-12)
        hits = int((mixed.argmax(dim=1) == y).sum()) if len(y) else 0
        return EvalResult(hits, len(y), float(-likelihood.log().sum()))
