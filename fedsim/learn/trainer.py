"""The trainer: clients are flat float32 parameter vectors, the model is a template.

It owns a private copy of the architecture whose parameters (and their ``.grad``) are views
into two flat buffers (``engines.Setup``), the optimizer's settings, the precision, and the
evaluation. Training goes through an engine (``fedsim.learn.engines``): ``train`` is one
client in the loop engine; ``train_many`` asks the engine ``training.engine`` names, or the
one ``auto``'s measured policy picks, for the clients in chunks that fit the device's memory.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from fedsim.learn.engines import (
    Chunk,
    Distillation,
    Engine,
    EngineRefused,
    Plan,
    Setup,
    TrainResult,
    auto_engines,
    build_engines,
    draw_plan,
)
from fedsim.learn.engines.batched import BatchedEngine
from fedsim.learn.execution import (
    COMPILE_MODES,
    CUDA_COMPILE_MODES,
    CUDA_PRECISIONS,
    ENGINES,
    MEMORY_FORMATS,
    PRECISIONS,
    CompileMode,
    EngineName,
    MemoryFormat,
    Precision,
    tensor_float32,
    uses_channels_last,
    vmap_chunk_size,
)
from fedsim.learn.optimizers import OptimizerSpec

__all__ = ["Distillation", "Ensemble", "EvalResult", "Trainer", "TrainResult"]

_EVAL_BATCH = 1024
_CPU = torch.device("cpu")


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
class EvalResult:
    correct: int
    total: int
    loss_sum: float  # summed cross-entropy, so results can be pooled across clients

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else math.nan


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
    was measured to pay, see ``uses_channels_last``); ``engine`` trains several clients
    (``fedsim.learn.engines``; "auto" by ``family``, a name of ``fedsim.learn.models``, and
    the device); ``compile`` runs a batched engine's step at fixed shapes, compiled or
    captured (``COMPILE_MODES``). An engine named that cannot run the model is refused here
    (``EngineRefused``, naming the layer).
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: OptimizerSpec,
        batch_size: int,
        device: str | torch.device = "cpu",
        engine: EngineName = "auto",
        precision: Precision = "fp32",
        memory_format: MemoryFormat = "auto",
        vmap_chunk: int | Literal["auto"] = "auto",
        compile: CompileMode = "eager",
        family: str | None = None,
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
        self.device = torch.device(device)
        if precision in CUDA_PRECISIONS and self.device.type != "cuda":
            raise ValueError(f"precision {precision} needs a CUDA device; use bf16 on a CPU")
        if compile in CUDA_COMPILE_MODES and self.device.type != "cuda":
            raise ValueError(f"compile {compile} captures CUDA graphs: it needs a CUDA device")
        self.engine = engine
        self.family = family
        self.vmap_chunk = vmap_chunk
        self.compile = compile
        self.optimizer = optimizer
        self.batch_size = batch_size
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
        self._setup = Setup(self._model, optimizer, batch_size, self.device, precision, compile)
        self.num_params = self._setup.num_params
        self._engines = build_engines(self._setup)
        if engine != "auto":
            self.engine_for(2, engine)  # refused now if it cannot run the model

    def _nhwc(self, module: nn.Module, args: tuple) -> tuple | None:
        """A convolution's forward pre-hook: its input in NHWC layout (not under vmap)."""
        if self._setup.vmapping:
            return None
        return (args[0].contiguous(memory_format=torch.channels_last), *args[1:])

    @property
    def layer_shapes(self) -> list[torch.Size]:
        """The shapes of the layers a flat parameter vector is made of, in order."""
        return list(self._setup.shapes)

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
            return self._setup.flat.to(_CPU, copy=True)  # clients' state lives on the CPU

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
        ``correction`` (SCAFFOLD's c - c_i) corrects every step (``corrected_step``).
        """
        plan = self._plan(x, y, epochs, steps, seed, distill)
        loop = self._engines["loop"]
        return loop.train_one(params, x, y, plan, prox_center, prox_mu, distill, correction)

    def _plan(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        epochs: int | None,
        steps: int | None,
        seed: int,
        distill: Distillation | None,
    ) -> Plan:
        """The batches (and public rows) of one training, its arguments checked."""
        n = len(x)
        if len(y) != n:
            raise ValueError(f"{n} inputs but {len(y)} labels")
        total_steps = self.num_steps(n, epochs=epochs, steps=steps)
        if total_steps and n == 0:
            raise ValueError("cannot train on an empty dataset")
        return draw_plan(n, self.batch_size, total_steps, seed, distill)

    @_float32_math
    def train_many(
        self,
        params: Sequence[torch.Tensor],
        datasets: Sequence[tuple[torch.Tensor, torch.Tensor]],
        *,
        steps: int | Sequence[int] | None = None,
        epochs: int | None = None,
        seeds: Sequence[int],
        engine: EngineName | None = None,
        prox_center: torch.Tensor | Sequence[torch.Tensor] | None = None,
        prox_mu: float = 0.0,
        distill: Distillation | Sequence[Distillation] | None = None,
        correction: Sequence[torch.Tensor] | None = None,
    ) -> list[TrainResult]:
        """``[train(p, x, y, steps=..., seed=s, ...) for ...]``, equal within fp tolerance.

        ``steps`` may differ per client; ``prox_center`` and ``distill`` are one for all or
        one per client (distillation terms that share their public set, weight and batch
        size), ``correction`` one per client. ``engine`` (default: the trainer's) picks how
        (``engine_for``); a batched engine trains the clients in chunks that fit the device.
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
        centers = _per_client(prox_center, count, "prox center")
        distills = _per_client(distill, count, "distillation term")
        if any(not d.batches_with(distills[0]) for d in distills if d is not None):
            raise ValueError("distillation terms must share their public set, weight and batch")
        shifts = [None] * count if correction is None else list(correction)
        if len(shifts) != count or (correction is not None and any(d is None for d in shifts)):
            raise ValueError(f"give one correction per client ({count})")
        plans = [
            self._plan(x, y, epochs, k, seed, d)
            for (x, y), k, seed, d in zip(datasets, steps, seeds, distills, strict=True)
        ]
        chosen = self.engine_for(count, engine)
        everyone = Chunk(list(params), list(datasets), plans, centers, prox_mu, shifts, distills,
                         count)  # fmt: skip
        if not isinstance(chosen, BatchedEngine):
            return chosen.train_chunk(everyone)
        order = sorted(range(count), key=lambda i: -len(plans[i].batches))
        width = max((len(b) for plan in plans for b in plan.batches), default=1)
        if chosen.fixed_shapes:
            width = self.batch_size
        if distills[0] is not None:
            width += distills[0].batch_size
        extra = (prox_mu != 0 and centers[0] is not None) + (correction is not None)
        shape = tuple(datasets[0][0].shape[1:])
        chunk = self._chunk_size(count, chosen.training_floats(shape, width, extra))
        results: dict[int, TrainResult] = {}
        for start in range(0, count, chunk):
            rows = order[start : start + chunk]
            results.update(zip(rows, chosen.train_chunk(everyone.rows(rows, chunk)), strict=True))
        return [results[i] for i in range(count)]

    def engine_for(self, count: int, engine: EngineName | None = None) -> Engine:
        """The engine that trains ``count`` clients: the one named (refused, naming the layer,
        if it cannot run the model), or ("auto") the first of the policy's that can
        (``engines.policy``: measured per model family and device kind)."""
        name = engine or self.engine
        if name not in ENGINES:
            raise ValueError(f"unknown engine {name!r}; choose one of: {', '.join(ENGINES)}")
        if name == "auto":
            names = auto_engines(self.family, self.device.type, count)
            return next(e for n in names if (e := self._engines[n]).cannot_run() is None)
        chosen = self._engines[name]
        why = chosen.cannot_run()
        if why is not None:
            raise EngineRefused(f"the {name} engine cannot run this model: {why}")
        return chosen

    def _chunk_size(self, clients: int, floats_per_client: int) -> int:
        return vmap_chunk_size(self.vmap_chunk, clients, floats_per_client, self.device)

    def activation_floats(self, sample_shape: tuple[int, ...]) -> int:
        """Floats of every layer's output for one sample of ``sample_shape``."""
        return self._setup.activation_floats(sample_shape)

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
            self._setup.flat.copy_(params)
        self._model.eval()
        x_all = torch.cat(xs) if len(xs) > 1 else xs[0]
        y_all = torch.cat(ys) if len(ys) > 1 else ys[0]
        losses, hits = [], []
        with torch.inference_mode():
            for start in range(0, len(y_all), _EVAL_BATCH):
                xb = x_all[start : start + _EVAL_BATCH].to(self.device)
                yb = y_all[start : start + _EVAL_BATCH].to(self.device)
                with self._setup.mixed():
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
        engine: EngineName | None = None,
    ) -> list[EvalResult]:
        """Each client's own model on its own test set: ``[evaluate(p, x, y) for ...]``.

        With a batched engine, the models run a chunk at once (``vmap_chunk``) on the chunk's
        test sets padded to a common length.
        """
        if not len(params) == len(xs) == len(ys):
            raise ValueError(f"{len(params)} models, {len(xs)} input sets, {len(ys)} label sets")
        chosen = self.engine_for(len(params), engine)
        if not isinstance(chosen, BatchedEngine):
            return [self.evaluate(p, x, y) for p, x, y in zip(params, xs, ys, strict=True)]
        if any(len(x) != len(y) for x, y in zip(xs, ys, strict=True)):
            raise ValueError("every input set needs one label per sample")
        if not params:
            return []
        longest = max(len(y) for y in ys)
        shape = tuple(xs[0].shape[1:])
        held = chosen.evaluation_floats(shape) * min(longest, _EVAL_BATCH)
        chunk = self._chunk_size(len(params), self.num_params + longest * math.prod(shape) + held)
        results: list[EvalResult] = []
        for start in range(0, len(params), chunk):
            end = start + chunk
            part = (list(params[start:end]), xs[start:end], ys[start:end])
            results += self._evaluate_chunk(chosen, *part)
        return results

    def _evaluate_chunk(
        self,
        engine: BatchedEngine,
        params: list[torch.Tensor],
        xs: Sequence[torch.Tensor],
        ys: Sequence[torch.Tensor],
    ) -> list[EvalResult]:
        """A chunk's models at once on their test sets padded to a common length."""
        setup = self._setup
        sizes = torch.tensor([len(y) for y in ys])
        layers = setup.stack(params)
        x_pad = setup.to_device(nn.utils.rnn.pad_sequence(list(xs), batch_first=True))
        y_pad = setup.to_device(nn.utils.rnn.pad_sequence(list(ys), batch_first=True))
        valid = (torch.arange(x_pad.shape[1]) < sizes[:, None]).to(self.device)
        loss_sum = torch.zeros(len(params), dtype=torch.float64, device=self.device)
        correct = torch.zeros(len(params), dtype=torch.long, device=self.device)
        rows = max(1, _EVAL_BATCH // len(params))  # about _EVAL_BATCH samples per pass
        with torch.inference_mode():
            for start in range(0, x_pad.shape[1], rows):
                with setup.mixed():
                    logits = engine.logits(layers, x_pad[:, start : start + rows]).float()
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
            self._setup.flat.copy_(params)
        self._model.eval()  # a gradient at a point: no dropout or batch statistics updates
        self._setup.grad.zero_()
        for start in range(0, len(y), _EVAL_BATCH):
            xb = x[start : start + _EVAL_BATCH].to(self.device)
            yb = y[start : start + _EVAL_BATCH].to(self.device)
            with self._setup.mixed():
                loss = F.cross_entropy(self._model(xb), yb, reduction="sum")
            loss.backward()
        return (self._setup.grad / len(y)).to(_CPU)

    @_float32_math
    def probabilities(self, params: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Softmax outputs of ``params`` on every row of x (PerFed-CKT's "logit matrix")."""
        with torch.no_grad():
            self._setup.flat.copy_(params)
        self._model.eval()
        with torch.inference_mode():
            parts = []
            for start in range(0, len(x), _EVAL_BATCH):
                xb = x[start : start + _EVAL_BATCH].to(self.device)
                with self._setup.mixed():
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


def _per_client(value, count: int, what: str) -> list:
    """One value per client from one for all (or None) or a sequence of ``count``."""
    if value is None or isinstance(value, (torch.Tensor, Distillation)):
        return [value] * count
    values = list(value)
    if len(values) != count or any(v is None for v in values):
        raise ValueError(f"give one {what} per client ({count}) or a common one")
    return values
