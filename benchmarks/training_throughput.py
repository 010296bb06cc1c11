"""Local-training throughput: samples/s and achieved GFLOP/s against this machine's peak.

One ``Trainer.train`` step is forward + backward + optimizer update on a mini-batch drawn by
the trainer itself (permutation, gather), i.e. exactly what a client does in a simulation.
FLOPs are counted by ``torch.utils.flop_counter.FlopCounterMode`` on one such step (matmuls
and convolutions, forward and backward; the optimizer's vector updates are not counted). The
peak is the best GFLOP/s of a large fp32 ``torch.mm`` with the same thread count, measured in
the same run. Inputs are random tensors of the dataset's shape: the arithmetic, hence the
speed, does not depend on pixel values. Where the trainer has ``train_many`` (several clients
at once), its "loop" and "vmap" engines are measured too.

    python -m benchmarks.training_throughput [--models cnn mlp] [--batch-sizes 32 64]
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks._common import base_parser, set_threads, table, timed, write_results
from fedsim.learn.models import build_model
from fedsim.learn.optimizers import OptimizerSpec
from fedsim.learn.trainer import Trainer

INPUT_SHAPE = (1, 28, 28)  # Fashion-MNIST
NUM_CLASSES = 10
OPTIMIZER = OptimizerSpec(name="sgd", lr=0.05, momentum=0.9)


def matmul_peak_gflops(size: int, repeats: int) -> float:
    """Best GFLOP/s of an fp32 (size x size) @ (size x size) product: the machine's ceiling."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=generator)
    b = torch.randn(size, size, generator=generator)
    out = torch.empty(size, size)
    torch.mm(a, b, out=out)  # warm-up
    best_s = timed(lambda: torch.mm(a, b, out=out), repeats)["best_s"]
    return 2 * size**3 / best_s / 1e9


def step_flops(trainer: Trainer, x: torch.Tensor, y: torch.Tensor) -> int:
    """FLOPs of one training step on one batch (forward, backward), as torch counts them."""
    params = trainer.init_params(0)
    with FlopCounterMode(display=False) as counter:
        trainer.train(params, x[: trainer.batch_size], y[: trainer.batch_size], steps=1, seed=0)
    return counter.get_total_flops()


def random_data(count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(count, *INPUT_SHAPE, generator=generator)
    return x, torch.randint(NUM_CLASSES, (count,), generator=generator)


def measure(
    model: str, batch_size: int, steps: int, repeats: int, clients: int, peak: float
) -> list[dict]:
    """Rows for one (model, batch): Trainer.train, then train_many's engines if present."""
    trainer = Trainer(build_model(model, INPUT_SHAPE, NUM_CLASSES), OPTIMIZER, batch_size)
    x, y = random_data(steps * batch_size, seed=1)
    flops = step_flops(trainer, x, y)
    params = trainer.init_params(0)
    trainer.train(params, x, y, steps=1, seed=0)  # warm-up
    timing = timed(lambda: trainer.train(params, x, y, steps=steps, seed=0), repeats)
    base = {"model": model, "batch": batch_size, "params": trainer.num_params,
            "gflop_per_sample": flops / batch_size / 1e9}  # fmt: skip
    rows = [{**base, "path": "train", "clients": 1, **_rates(flops, steps, timing, peak)}]
    if not hasattr(trainer, "train_many"):
        return rows
    starts = [trainer.init_params(k) for k in range(clients)]
    datasets = [random_data(steps * batch_size, seed=10 + k) for k in range(clients)]
    for engine in ("loop", "vmap"):
        row = {**base, "path": f"train_many[{engine}]", "clients": clients}
        try:

            def train_many(engine: str = engine) -> None:
                trainer.train_many(
                    starts, datasets, steps=steps, seeds=list(range(clients)), engine=engine
                )

            train_many()  # warm-up (and a check that the engine runs this model)
            row.update(_rates(flops * clients, steps, timed(train_many, repeats), peak))
        except (TypeError, ValueError, RuntimeError, NotImplementedError) as error:
            row["error"] = f"{type(error).__name__}: {error}"
        rows.append(row)
    return rows


def _rates(flops_per_step: int, steps: int, timing: dict, peak: float) -> dict:
    """GFLOP/s of the best run and its share of the matmul peak."""
    return {
        "seconds_best": timing["best_s"],
        "steps": steps,
        "gflops": flops_per_step * steps / timing["best_s"] / 1e9,
        "share_of_peak": flops_per_step * steps / timing["best_s"] / 1e9 / peak,
        "median_s": timing["median_s"],
    }


def run(
    models: Sequence[str] = ("cnn", "mlp"),
    batch_sizes: Sequence[int] = (32, 64),
    steps: int = 20,
    repeats: int = 3,
    clients: int = 4,
    matmul_size: int = 2048,
) -> dict:
    peak = matmul_peak_gflops(matmul_size, repeats)
    rows = []
    for model in models:
        for batch_size in batch_sizes:
            for row in measure(model, batch_size, steps, repeats, clients, peak):
                if "seconds_best" in row:
                    samples = row["clients"] * row["steps"] * batch_size
                    row["samples_per_s"] = samples / row["seconds_best"]
                    row["samples_per_s_median"] = samples / row["median_s"]
                rows.append(row)
    return {
        "matmul_peak_gflops": peak,
        "matmul_size": matmul_size,
        "train_many_available": hasattr(Trainer, "train_many"),
        "rows": rows,
    }


COLUMNS = ("model", "batch", "path", "clients", "samples_per_s", "gflops", "share_of_peak")


def main(argv: Sequence[str] | None = None) -> dict:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["cnn", "mlp"])
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[32, 64])
    parser.add_argument("--steps", type=int, default=20, help="steps per timed training")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--clients", type=int, default=4, help="clients per train_many call")
    parser.add_argument("--matmul-size", type=int, default=2048)
    args = parser.parse_args(argv)
    set_threads(args.threads)
    results = run(
        args.models, args.batch_sizes, args.steps, args.repeats, args.clients, args.matmul_size
    )
    path = write_results("training_throughput", results, args.out)
    print(f"fp32 matmul peak ({args.matmul_size}^2): {results['matmul_peak_gflops']:.1f} GFLOP/s")
    print(table(results["rows"], COLUMNS))
    for row in results["rows"]:
        if "error" in row:
            print(f"{row['model']} b{row['batch']} {row['path']}: {row['error']}")
    print(f"written: {path}")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
