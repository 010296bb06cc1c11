"""Run every benchmark in turn and collect their results in ``results/all.json``.

    python -m benchmarks.run_all [--threads N] [--quick]

``--quick`` runs each at a tiny size on one thread (a smoke test of the scripts; its figures
mean nothing).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence

from benchmarks import (
    event_throughput,
    gpu,
    memory,
    naive_vs_fedsim,
    precision,
    radio_throughput,
    training_throughput,
    whole_run,
)
from benchmarks._common import base_parser, machine

BENCHMARKS = {
    "training_throughput": training_throughput.main,
    "naive_vs_fedsim": naive_vs_fedsim.main,
    "event_throughput": event_throughput.main,
    "memory": memory.main,
    "radio_throughput": radio_throughput.main,
    "precision": precision.main,
    "whole_run": whole_run.main,
    "gpu": gpu.main,
}
QUICK_ARGS = {
    "training_throughput": ["--models", "mlp", "--batch-sizes", "8", "--steps", "2",
                            "--repeats", "1", "--clients", "2", "--matmul-size", "128"],
    "naive_vs_fedsim": ["--models", "mlp", "--clients", "4", "--num-samples", "400"],
    "event_throughput": ["--clients", "100", "--rounds", "2", "--repeats", "1",
                         "--dataset", "synthetic", "--scenario-rounds", "1"],
    "memory": ["--clients", "10", "--dataset", "synthetic"],
    "radio_throughput": ["--clients", "100", "--rounds", "2", "--repeats", "1",
                         "--dataset", "synthetic", "--selective-clients", "100"],
    "precision": ["--models", "lenet5", "--batch-sizes", "4", "--steps", "1", "--repeats", "1",
                  "--clients", "2", "--matmul-size", "128"],
    "whole_run": ["--batch-sizes", "8", "--rounds", "1", "--num-samples", "400",
                  "--matmul-size", "128"],
    "gpu": ["--device", "cpu", "--models", "mlp", "lenet5", "--batch-sizes", "4",
            "--clients", "3", "5", "--loop-max-clients", "3", "--precisions", "fp32",
            "--steps", "2", "--repeats", "1", "--matmul-size", "128"],
}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> dict:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    parser.add_argument("--only", nargs="+", choices=list(BENCHMARKS), default=list(BENCHMARKS))
    args = parser.parse_args(argv)
    threads = 1 if args.quick and args.threads is None else args.threads
    common = ["--out", str(args.out)] + ([] if threads is None else ["--threads", str(threads)])
    results = {"machine": machine(), "quick": args.quick}
    for name in args.only:
        print(f"\n=== {name} ===", flush=True)
        start = time.perf_counter()
        results[name] = BENCHMARKS[name]([*common, *(QUICK_ARGS[name] if args.quick else [])])
        results[name]["benchmark_wall_s"] = time.perf_counter() - start
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "all.json"
    path.write_text(json.dumps(results, indent=2))
    print(f"\nwritten: {path}")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
