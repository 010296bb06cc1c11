"""Which engine ``training.engine: auto`` takes, per model family and device kind, from what
``benchmarks/gpu.py`` measured (benchmarks/README.md, JSON in benchmarks/results/).

One client always trains in the loop (a batched engine gains nothing on one client). For
several, auto takes the first engine of the family's list that can run the model (the loop,
last, runs any): the lists below, each with the figures behind it.
"""

from __future__ import annotations

FAMILIES = {"mlp": "mlp", "lenet5": "lenet5", "cnn": "cnn", "vgg11": "vgg", "vgg13": "vgg"}
"""fedsim's models by family (``fedsim.learn.models``); another model is family None."""

LOOP_ONLY = ("loop",)

AUTO: dict[str, dict[str | None, tuple[str, ...]]] = {
    # CPU: the loop for every family. vmap over loop, 1 thread, the 2-core development CPU
    # (fedsim.learn.execution): mlp 0.85-1.13, lenet5 0.57-0.75, cnn 0.69-0.74; batching
    # also makes the World run queued trainings early, some for tasks cancelled later.
    # Over the loop in one run side by side (benchmarks/results/cpu/, 2-core AMD EPYC under
    # a load of 4-6, 1 thread, 2026-11-28; 10 and 50 clients, batch 10 and 32): stacked mlp
    # 0.22-0.70, lenet5 0.43-1.00, cnn 0.21-0.49, vgg11 0.83 (5 clients); vmap 0.44-1.23.
    "cpu": {None: LOOP_ONLY},
    "cuda": {
        # H100, 2026-11-26 (results/h100/gpu.json): vmap over loop 3.9-34x at 10-1,000
        # clients. stacked: not measured on a GPU (its matrix products are the vmap
        # engine's bmm plus the loss per client: expected about even).
        "mlp": ("vmap", "stacked", "loop"),
        # vmap over loop 3.4-22x (H100). The stacked formulation with F.unfold (issue 52's
        # prototype) was no faster (67-70k vs 75k client-samples/s, 1,000 clients, batch
        # 10); with the strided im2col it has: not measured on a GPU.
        "lenet5": ("vmap", "stacked", "loop"),
        # issue 52's prototype of the stacked formulation, H100, 1,000 clients, batch 10:
        # 39.3k client-samples/s fp32 against the vmap engine's 6.7k (5.8x); this engine's
        # own figure: not measured on a GPU.
        "cnn": ("stacked", "vmap", "loop"),
        # vmap over loop 1.7x (H100, 10-100 clients, batch 32), 1.6% of the bf16 peak at
        # PerFed-CKT's 15 clients; stacked: not measured on a GPU.
        "vgg": ("vmap", "stacked", "loop"),
        None: ("vmap", "stacked", "loop"),
    },
}


def auto_engines(model: str | None, device_type: str, clients: int) -> tuple[str, ...]:
    """The engines ``auto`` tries, in order, for ``clients`` clients of ``model`` (a name of
    ``fedsim.learn.models``, or None) on a device of ``device_type``."""
    if clients < 2:
        return LOOP_ONLY
    by_family = AUTO.get(device_type, AUTO["cpu"])
    return by_family.get(FAMILIES.get(model or ""), by_family[None])
