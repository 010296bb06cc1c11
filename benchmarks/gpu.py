"""The many-clients engines on their device: client-samples per second, memory, share of peak.

For every model x batch x client count x precision, ``Trainer.train_many`` trains that many
clients for a few steps with each engine (``loop``: one client after the other; ``vmap`` and
``stacked``: the clients batched, in chunks of ``training.vmap_chunk``), from seeded random
data of the model's input shape (MNIST's 1x28x28; 3x32x32 for VGG), side by side in one
process. Reported per row:

- ``client_samples_per_s``: clients x steps x batch over the best of ``--repeats`` timed calls
  (on a GPU, timed to the end of its kernels: the results come back to the host);
- ``peak_mb``: the device's peak allocated memory during the calls (CUDA only: a CPU's peak
  cannot be reset within a process), beside ``estimate_mb``, what a batched engine plans for
  one client (its ``training_floats``: the basis of ``vmap_chunk: auto``) times the chunk;
- ``chunk``: the clients a batched engine stacked at once;
- ``over_loop``: a batched row's rate over the loop's; ``stacked_over_vmap``: a stacked row's
  rate over the vmap row's of the same model, batch, clients, precision and compile mode;
- ``share_of_peak``: the FLOPs of the training (``FlopCounterMode`` on one client's step, x
  clients x steps) per second over the matmul peak of the same dtype on the same device;
- ``first_call_s``: the untimed first call (allocations, kernel choice, vmap's trace, and with
  ``--compile`` the compilation or the capture: what a run pays once per shape);
- ``gpu_busy_s``, ``gpu_busy_share`` (CUDA): the time the GPU was busy during one more call,
  profiled (the union of its kernels' and copies' intervals, ``torch.profiler``), and that
  time over the best timed call's wall time: how far the host, not the GPU, sets the pace.

``--compile MODE`` runs the batched engines' steps at fixed shapes (``training.compile``):
through ``torch.compile`` (``default``, ``reduce-overhead``) or captured as CUDA graphs
(``graph``); their rows are engine ``vmap+MODE``, ``stacked+MODE``. ``--loop-max-clients N``
skips the loop above N clients (it scales linearly in the clients; over_loop then divides by
the loop's rate at the largest count measured of that model, batch and precision).

    python -m benchmarks.gpu [--device cuda] [--models mlp lenet5 cnn vgg11]
        [--batch-sizes 10 32] [--clients 10 100 1000] [--precisions fp32 bf16] [--steps 5]
        [--engines loop vmap stacked] [--compile graph] [--loop-max-clients 100]

On a CPU it runs at whatever sizes it is given (the suite runs it tiny, ``--quick`` in
``run_all``); its ratios between engines are the CPU's (benchmarks/README.md).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import torch

from benchmarks._common import base_parser, set_threads, table, timed, write_results
from benchmarks.precision import matmul_peak
from benchmarks.training_throughput import step_flops
from fedsim.learn.execution import (
    COMPILE_MODES,
    CUDA_COMPILE_MODES,
    PRECISIONS,
    configure_determinism,
)
from fedsim.learn.models import build_model
from fedsim.learn.optimizers import OptimizerSpec
from fedsim.learn.trainer import Trainer

NUM_CLASSES = 10
OPTIMIZER = OptimizerSpec("sgd", lr=0.05, momentum=0.9)
ENGINES = ("loop", "vmap", "stacked")


def input_shape(model: str) -> tuple[int, int, int]:
    return (3, 32, 32) if model.startswith("vgg") else (1, 28, 28)


def synchronizer(device: str) -> Callable[[], None]:
    return torch.cuda.synchronize if device == "cuda" else lambda: None


def measure(
    model: str,
    batch: int,
    clients: int,
    precision: str,
    steps: int,
    repeats: int,
    device: str,
    engines: Sequence[str] = ENGINES,
    compile_mode: str = "eager",
) -> list[dict]:
    """One row per engine for ``clients`` clients of ``model`` at ``batch`` in ``precision``."""
    shape = input_shape(model)
    trainer = Trainer(
        build_model(model, shape, NUM_CLASSES), OPTIMIZER, batch, device=device,
        precision=precision, compile=compile_mode,
    )  # fmt: skip
    generator = torch.Generator().manual_seed(0)
    data = [
        (torch.randn(steps * batch, *shape, generator=generator),
         torch.randint(NUM_CLASSES, (steps * batch,), generator=generator))
        for _ in range(clients)
    ]  # fmt: skip
    starts = [trainer.init_params(0)] * clients
    flops = step_flops(trainer, *data[0])
    synchronize = synchronizer(device)
    base = {"model": model, "batch": batch, "clients": clients, "precision": precision,
            "params": trainer.num_params}  # fmt: skip
    rows = []
    for engine in engines:

        def train(engine: str = engine) -> None:
            trainer.train_many(starts, data, steps=steps, seeds=list(range(clients)),
                               engine=engine)  # fmt: skip
            synchronize()

        label = (
            engine if engine == "loop" or compile_mode == "eager" else f"{engine}+{compile_mode}"
        )
        row = {**base, "engine": label}
        try:
            row["first_call_s"] = timed(train, 1)["best_s"]
            if device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            best_s = timed(train, repeats)["best_s"]
        except (RuntimeError, ValueError) as error:  # e.g. out of memory
            rows.append({**row, "error": f"{type(error).__name__}: {error}"[:200]})
            if device == "cuda":
                torch.cuda.empty_cache()
            continue
        if device == "cuda":
            row["peak_mb"] = torch.cuda.max_memory_allocated() / 2**20
            row["gpu_busy_s"] = gpu_busy_s(train)
            row["gpu_busy_share"] = row["gpu_busy_s"] / best_s
        row["client_samples_per_s"] = clients * steps * batch / best_s
        row["gflops"] = flops * clients * steps / best_s / 1e9
        chosen = trainer.engine_for(clients, engine)
        if chosen.batched:
            floats = chosen.training_floats(shape, batch, extra=0)  # full batches: any mode
            row["chunk"] = trainer._chunk_size(clients, floats)
            row["estimate_mb"] = row["chunk"] * floats * 4 / 2**20
        rows.append(row)
    return rows


def busy_seconds(intervals: Sequence[tuple[float, float]]) -> float:
    """The length of the union of (start, end) intervals: time something ran."""
    busy, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            busy += end - max(start, reach)
            reach = end
    return busy


def gpu_busy_s(call: Callable[[], None]) -> float:
    """Seconds the GPU was busy during one profiled ``call``: its kernels, copies and sets."""
    activities = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as profile:
        call()
    device = torch.autograd.DeviceType.CUDA
    intervals = [(e.time_range.start, e.time_range.end)
                 for e in profile.events() if e.device_type == device]  # fmt: skip
    return busy_seconds(intervals) / 1e6


def add_ratios(rows: list[dict]) -> None:
    """Each batched row's rate over the loop's at the same model, batch and precision: at the
    same client count, or the largest the loop was measured at (its rate per client-sample
    does not grow with the clients: one client after the other); each stacked row's over the
    vmap row's of the same configuration."""
    loops: dict[tuple, list[dict]] = {}
    rates = {(r["model"], r["batch"], r["clients"], r["precision"], r["engine"]): r
             for r in rows if "client_samples_per_s" in r}  # fmt: skip
    for row in rates.values():
        if row["engine"] == "loop":
            loops.setdefault((row["model"], row["batch"], row["precision"]), []).append(row)
    for (model, batch, clients, precision, engine), row in rates.items():
        measured = loops.get((model, batch, precision))
        if engine == "loop" or not measured:
            continue
        same = [r for r in measured if r["clients"] == clients]
        loop = same[0] if same else max(measured, key=lambda r: r["clients"])
        row["over_loop"] = row["client_samples_per_s"] / loop["client_samples_per_s"]
        vmap = rates.get((model, batch, clients, precision, engine.replace("stacked", "vmap")))
        if engine.startswith("stacked") and vmap is not None:
            row["stacked_over_vmap"] = row["client_samples_per_s"] / vmap["client_samples_per_s"]


COLUMNS = ("model", "batch", "clients", "precision", "engine", "chunk", "client_samples_per_s",
           "over_loop", "stacked_over_vmap", "gflops", "share_of_peak", "gpu_busy_share",
           "peak_mb", "estimate_mb", "first_call_s")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> dict:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None,
                        help="default: cuda where there is one")  # fmt: skip
    parser.add_argument("--models", nargs="+", default=["mlp", "lenet5", "cnn", "vgg11"])
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[10, 32])
    parser.add_argument("--clients", nargs="+", type=int, default=[10, 100, 1000])
    parser.add_argument("--precisions", nargs="+", choices=PRECISIONS,
                        default=["fp32", "bf16"])  # fmt: skip
    parser.add_argument("--steps", type=int, default=5, help="steps per client per call")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--matmul-size", type=int, default=4096)
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    parser.add_argument("--compile", choices=COMPILE_MODES, default="eager",
                        help="the batched engines' step (training.compile)")  # fmt: skip
    parser.add_argument("--loop-max-clients", type=int, default=None,
                        help="no loop rows above this many clients")  # fmt: skip
    parser.add_argument("--nondeterministic", action="store_true",
                        help="training.deterministic false (default: true, as runs)")  # fmt: skip
    args = parser.parse_args(argv)
    set_threads(args.threads)
    configure_determinism(not args.nondeterministic)  # before CUDA starts, as a run does
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.compile in CUDA_COMPILE_MODES and device != "cuda":
        parser.error(f"--compile {args.compile} needs --device cuda")
    peaks = {p: matmul_peak(p, args.matmul_size, args.repeats, device) for p in args.precisions}
    rows = []
    for model in args.models:
        for batch in args.batch_sizes:
            for clients in args.clients:
                for precision in args.precisions:
                    engines = [
                        e for e in args.engines
                        if e != "loop" or args.loop_max_clients is None
                        or clients <= args.loop_max_clients
                    ]  # fmt: skip
                    for row in measure(model, batch, clients, precision, args.steps,
                                       args.repeats, device, engines, args.compile):  # fmt: skip
                        if "gflops" in row:
                            row["share_of_peak"] = row["gflops"] / peaks[precision]
                        rows.append(row)
                        print(table([row], COLUMNS).splitlines()[-1], flush=True)
    add_ratios(rows)
    gpu = torch.cuda.get_device_name() if device == "cuda" else None
    results = {"device": device, "gpu": gpu, "cuda": torch.version.cuda,
               "torch": torch.__version__, "compile": args.compile,
               "deterministic": not args.nondeterministic,
               "matmul_peak_gflops": peaks, "rows": rows}  # fmt: skip
    path = write_results("gpu", results, args.out)
    print(", ".join(f"{p} matmul peak {g:,.0f} GFLOP/s on {device}" for p, g in peaks.items()))
    print(table(rows, COLUMNS))
    print(f"written: {path}")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
