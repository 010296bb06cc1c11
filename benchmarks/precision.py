"""Mixed precision and memory format: ms per training step of fp32/bf16 x NCHW/NHWC x engine.

For each model family (28x28x1 inputs, 10 classes) and batch size, every variant of
``Trainer(precision=..., memory_format=...)`` trains on random data (the arithmetic, hence
the speed, does not depend on pixel values): precision fp32 or bf16 (autocast on the forward;
parameters, gradients and optimizer stay fp32), memory format contiguous (NCHW) or
channels_last (NHWC; convolutional models only), engine "loop" (``Trainer.train``, one client)
or "vmap" (``Trainer.train_many(engine="vmap")`` over a few clients, timed per client-step).
The variants of one (model, batch) are timed in rounds, one run of each per round in a
rotating order, so that the load of a shared machine falls on all alike; a variant's figure
is its best run, and its speed-up over fp32/contiguous/loop is given both as best over best
and as the median of the per-round ratios.

Achieved GFLOP/s come from FLOPs counted by ``FlopCounterMode`` on one step (as
``training_throughput`` counts them) and are given as a share of the matmul peak *of the
same dtype*: the best GFLOP/s of a large fp32 ``torch.mm`` and of the same product in bf16,
both measured in this run (before and after the variants; the better of the two). The CPU's
features are detected, not assumed: torch's CPU capability, and whether bf16 is native (the
``avx512_bf16`` or ``amx_bf16`` flags of /proc/cpuinfo; "unknown" where there is none).

    python -m benchmarks.precision --threads 1 [--models mlp lenet5 cnn] [--batch-sizes 10 32]
"""

from __future__ import annotations

import itertools
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import nn
from torch.nn.modules.module import register_module_forward_hook

from benchmarks._common import base_parser, set_threads, table, timed, write_results
from benchmarks.training_throughput import (
    INPUT_SHAPE,
    NUM_CLASSES,
    OPTIMIZER,
    matmul_peak_gflops,
    step_flops,
)
from fedsim.learn.execution import tensor_float32
from fedsim.learn.models import build_model
from fedsim.learn.trainer import Trainer

PRECISIONS = ("fp32", "bf16")
FORMATS = ("contiguous", "channels_last")
ENGINES = ("loop", "vmap")
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16,
           "fp16": torch.float16}  # fmt: skip


def cpu_features() -> dict:
    """torch's CPU capability and whether this CPU computes bf16 natively ("unknown" where
    /proc/cpuinfo cannot tell)."""
    flags: set[str] | None = None
    cpuinfo = Path("/proc/cpuinfo")
    if platform.system() == "Linux" and cpuinfo.is_file():
        lines = [line for line in cpuinfo.read_text().splitlines() if line.startswith("flags")]
        flags = set(lines[0].split(":", 1)[1].split()) if lines else None
    try:
        onednn_bf16 = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        onednn_bf16 = "unknown"
    return {
        "capability": torch.backends.cpu.get_cpu_capability(),
        "bf16_native": "unknown" if flags is None else any(f in flags for f in BF16_FLAGS),
        "bf16_flags": None if flags is None else [f for f in BF16_FLAGS if f in flags],
        "onednn_bf16_supported": onednn_bf16,
    }


def matmul_peak(precision: str, size: int, repeats: int, device: str = "cpu") -> float:
    """Best GFLOP/s of a (size x size) @ (size x size) product in ``precision`` on ``device``
    (the ceiling a training there is measured against): on the CPU, fp32 is
    ``training_throughput.matmul_peak_gflops``; other dtypes and devices the same product in
    that dtype, there (a GPU's timed to the end of its kernels; tf32: float32 with TF32 on,
    fp32 with it off, as the trainer computes)."""
    if precision == "fp32" and device == "cpu":
        return matmul_peak_gflops(size, repeats)
    generator = torch.Generator().manual_seed(0)
    a, b = (
        torch.randn(size, size, generator=generator).to(device, _DTYPES[precision]) for _ in "ab"
    )
    out = torch.mm(a, b)  # warm-up, and the output buffer
    synchronize = torch.cuda.synchronize if device == "cuda" else lambda: None

    def product() -> None:
        torch.mm(a, b, out=out)
        synchronize()

    with tensor_float32(precision == "tf32"):
        product()
        return 2 * size**3 / timed(product, repeats)["best_s"] / 1e9


def matmul_peaks(size: int, repeats: int) -> dict[str, float]:
    return {p: matmul_peak(p, size, repeats) for p in PRECISIONS}


Shape = tuple[int, int, int]


def random_data(count: int, seed: int, shape: Shape) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(count, *shape, generator=generator)
    return x, torch.randint(NUM_CLASSES, (count,), generator=generator)


def convolutional(model: str, shape: Shape) -> bool:
    return any(isinstance(m, nn.Conv2d) for m in build_model(model, shape, NUM_CLASSES).modules())


def variants(model: str, shape: Shape) -> list[tuple[str, str, str]]:
    """(precision, memory format, engine); the memory format only matters with convolutions."""
    formats = FORMATS if convolutional(model, shape) else FORMATS[:1]
    return list(itertools.product(PRECISIONS, formats, ENGINES))


def nhwc_convolutions(trainer: Trainer, shape: Shape) -> str:
    """How many of the convolutions of one ``Trainer.train`` step ran NHWC (their output is
    channels_last), of all: what the memory format really changed. An input of one channel
    is NCHW and NHWC at once, and with NCHW weights torch then picks NCHW."""
    ran_nhwc: list[bool] = []

    def hook(module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        if isinstance(module, nn.Conv2d):
            strict = output.is_contiguous(memory_format=torch.channels_last)
            ran_nhwc.append(strict and not output.is_contiguous())

    x, y = random_data(trainer.batch_size, seed=0, shape=shape)
    handle = register_module_forward_hook(hook)
    try:
        trainer.train(trainer.init_params(0), x, y, steps=1, seed=0)
    finally:
        handle.remove()
    return f"{sum(ran_nhwc)}/{len(ran_nhwc)}"


def step_runner(
    model: str,
    shape: Shape,
    batch_size: int,
    variant: tuple[str, str, str],
    steps: int,
    clients: int,
) -> tuple[Callable[[], float], str | None]:
    """A function that trains once and returns the seconds per (client-)step; and for the
    loop, how many convolutions ran NHWC (``nhwc_convolutions``)."""
    precision, memory_format, engine = variant
    trainer = Trainer(build_model(model, shape, NUM_CLASSES), OPTIMIZER, batch_size,
                      precision=precision, memory_format=memory_format)  # fmt: skip
    if memory_format == "channels_last" and not trainer.channels_last:
        raise RuntimeError(f"{model}: the trainer ignored memory_format channels_last")
    nhwc = None
    if engine == "loop":
        nhwc = nhwc_convolutions(trainer, shape)
        params = trainer.init_params(0)
        x, y = random_data(steps * batch_size, seed=1, shape=shape)

        def work() -> None:
            trainer.train(params, x, y, steps=steps, seed=0)

        client_steps = steps
    else:
        starts = [trainer.init_params(k) for k in range(clients)]
        datasets = [random_data(steps * batch_size, 10 + k, shape) for k in range(clients)]
        seeds = list(range(clients))

        def work() -> None:
            trainer.train_many(starts, datasets, steps=steps, seeds=seeds, engine="vmap")

        client_steps = steps * clients

    def once() -> float:
        start = time.perf_counter()
        work()
        return (time.perf_counter() - start) / client_steps

    once()  # warm-up (vmap: torch.func's first trace; oneDNN: its kernels for these shapes)
    return once, nhwc


def measure(
    model: str,
    shape: Shape,
    batch_size: int,
    steps: int,
    repeats: int,
    clients: int,
    peaks: dict[str, float],
) -> list[dict]:
    """Rows for one (model, batch): every variant, timed in rotating rounds."""
    x, y = random_data(batch_size, seed=1, shape=shape)
    fp32 = Trainer(build_model(model, shape, NUM_CLASSES), OPTIMIZER, batch_size)
    flops = step_flops(fp32, x, y)  # the same FLOPs in every variant
    runners, nhwc, errors = {}, {}, {}
    for variant in variants(model, shape):
        try:
            runners[variant], nhwc[variant] = step_runner(
                model, shape, batch_size, variant, steps, clients
            )
        except (TypeError, ValueError, RuntimeError, NotImplementedError) as error:
            errors[variant] = f"{type(error).__name__}: {error}"
    seconds: dict[tuple, list[float]] = {v: [] for v in runners}
    order = list(runners)
    for round_index in range(repeats):
        shift = round_index % len(order)
        for variant in order[shift:] + order[:shift]:
            seconds[variant].append(runners[variant]())
    baseline = seconds.get(("fp32", "contiguous", "loop"))
    rows = []
    for variant in variants(model, shape):
        precision, memory_format, engine = variant
        row = {"model": model, "input_shape": list(shape), "batch": batch_size,
               "precision": precision, "memory_format": memory_format, "engine": engine,
               "clients": 1 if engine == "loop" else clients,
               "nhwc_convs": nhwc.get(variant)}  # fmt: skip
        if variant in errors:
            rows.append({**row, "error": errors[variant]})
            continue
        runs = seconds[variant]
        best = min(runs)
        gflops = flops / best / 1e9
        row |= {"ms_per_step": best * 1e3, "ms_per_step_median": statistics.median(runs) * 1e3,
                "runs_ms": [s * 1e3 for s in runs], "gflop_per_step": flops / 1e9,
                "gflops": gflops, "share_of_peak": gflops / peaks[precision]}  # fmt: skip
        if baseline:
            row["speedup"] = min(baseline) / best
            row["speedup_paired_median"] = statistics.median(
                b / s for b, s in zip(baseline, runs, strict=True)
            )
        rows.append(row)
    return rows


def run(
    models: Sequence[str] = ("mlp", "lenet5", "cnn"),
    batch_sizes: Sequence[int] = (10, 32),
    steps: int = 20,
    repeats: int = 7,
    clients: int = 4,
    matmul_size: int = 2048,
    shape: Shape = INPUT_SHAPE,
) -> dict:
    before = matmul_peaks(matmul_size, 3)
    rows = []
    for model, batch_size in itertools.product(models, batch_sizes):
        rows += measure(model, shape, batch_size, steps, repeats, clients, before)
    after = matmul_peaks(matmul_size, 3)
    peaks = {p: max(before[p], after[p]) for p in PRECISIONS}
    for row in rows:  # the shares against the better of the two peak measurements
        if "gflops" in row:
            row["share_of_peak"] = row["gflops"] / peaks[row["precision"]]
    return {
        "cpu_features": cpu_features(),
        "matmul_peak_gflops": peaks,
        "matmul_peak_runs_gflops": {p: [before[p], after[p]] for p in PRECISIONS},
        "matmul_size": matmul_size,
        "input_shape": list(shape),
        "steps": steps,
        "repeats": repeats,
        "clients": clients,
        "rows": rows,
    }


COLUMNS = ("model", "batch", "precision", "memory_format", "engine", "nhwc_convs", "ms_per_step",
           "speedup", "speedup_paired_median", "gflops", "share_of_peak")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> dict:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["mlp", "lenet5", "cnn"])
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[10, 32])
    parser.add_argument("--steps", type=int, default=20, help="steps per timed training")
    parser.add_argument("--repeats", type=int, default=7, help="rounds of timed runs")
    parser.add_argument("--clients", type=int, default=4, help="clients per vmap call")
    parser.add_argument("--matmul-size", type=int, default=2048)
    parser.add_argument("--input-shape", nargs=3, type=int, default=list(INPUT_SHAPE),
                        metavar=("C", "H", "W"), help="default 1 28 28 (MNIST)")  # fmt: skip
    args = parser.parse_args(argv)
    set_threads(args.threads)
    results = run(args.models, args.batch_sizes, args.steps, args.repeats, args.clients,
                  args.matmul_size, tuple(args.input_shape))  # fmt: skip
    path = write_results("precision", results, args.out)
    features, peaks = results["cpu_features"], results["matmul_peak_gflops"]
    print(
        f"CPU capability {features['capability']}, bf16 native: {features['bf16_native']} "
        f"(flags {features['bf16_flags']}), oneDNN bf16: {features['onednn_bf16_supported']}"
    )
    print(f"matmul peak ({args.matmul_size}^2): fp32 {peaks['fp32']:.1f}, "
          f"bf16 {peaks['bf16']:.1f} GFLOP/s")  # fmt: skip
    print(table(results["rows"], COLUMNS))
    for row in results["rows"]:
        if "error" in row:
            print(f"{row['model']} b{row['batch']} {row['precision']} {row['memory_format']} "
                  f"{row['engine']}: {row['error']}")  # fmt: skip
    print(f"written: {path}")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
