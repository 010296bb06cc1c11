"""How a trainer computes: the engine's settings (``fedsim.learn.engines``), the precision of
the forward passes (autocast), and the memory layout of convolution inputs, with the policy the
defaults follow, as measured.

Several clients of one architecture (``train_many``, ``evaluate_each``) run as a loop of
single trainings or batched (vmap, stacked: lockstep steps over per-layer stacks, partial
batches padded and masked). Measured on the shared 2-core development CPU, in one process,
interleaved, SGD with momentum, batch 32, 28x28 inputs, clients of 240 samples, one epoch;
ms per client-step (best of 3-7), loop vs vmap, and the median ratio of paired runs:

- 1 thread: mlp 200-200 (20 clients) 1.05-1.84 vs 1.16-1.97, ratio 0.85-1.13 over four
  sessions (a wash: bmm is no faster than the loop's mm, and the stacked optimizer step is
  memory-bound either way); lenet5 (20) 3.9-4.8 vs 6.3-7.2, 0.57-0.75; FedAvg cnn (10)
  34.6-42.5 vs 50.0-54.5, 0.69-0.74 (vmap turns convolutions into slower grouped ones).
- 2 threads, the default here, under other jobs' load: every engine 2-7x slower than with one
  thread; the loop's many small ops suffer most (mlp ratio 1.2-2.1, lenet5 0.7-1.2).
- evaluation of per-client models (``evaluate_each``, 1 thread): vmap slower for every family
  (loop/vmap 0.62-0.65 mlp, 0.51 lenet5, 0.84 cnn).
- whole FedAvg rounds (20 clients, mlp 200-200, 1 thread, World batching vs one by one):
  1.04-1.26x faster with vmap, within this machine's noise.

Policy of ``engine="auto"`` (``fedsim.learn.engines.policy``): the loop on a CPU for every
family (vmap gains nothing certain there, costs a one-time import of ``torch._dynamo`` by
``torch.func.grad``, 1.5-10 s, and makes the World run queued trainings early, some of them for
tasks cancelled later); a batched engine on a GPU, per family, as measured there.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import torch

EngineName = Literal["auto", "loop", "vmap", "stacked"]
ENGINES: tuple[EngineName, ...] = ("auto", "loop", "vmap", "stacked")
Precision = Literal["fp32", "tf32", "bf16", "fp16"]
PRECISIONS: tuple[Precision, ...] = ("fp32", "tf32", "bf16", "fp16")
CUDA_PRECISIONS: tuple[Precision, ...] = ("tf32", "fp16")
"""Precisions only a CUDA device computes in: TF32 is its matrix units' float32 mode, fp16's
dynamic loss scaling is for GPUs (a CPU has bf16)."""
MemoryFormat = Literal["auto", "contiguous", "channels_last"]
MEMORY_FORMATS: tuple[MemoryFormat, ...] = ("auto", "contiguous", "channels_last")
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
CompileMode = Literal["eager", "default", "reduce-overhead", "graph"]
COMPILE_MODES: tuple[CompileMode, ...] = ("eager", "default", "reduce-overhead", "graph")
"""How a batched engine's training step runs (``training.compile``): eagerly, one kernel
launch per operation, the stack shrinking as clients finish ("eager"); or at fixed shapes (a
chunk's clients and batch width padded to sizes chosen once, masked out:
``engines.lockstep``) with the gradient computation through ``torch.compile`` in the mode of
that name ("default": fused kernels; "reduce-overhead": fused kernels replayed as CUDA graphs)
or the whole eager step, forward, backward and optimizer, captured as one CUDA graph and
replayed ("graph", CUDA only: ``engines.captured``), which removes the launch gaps that bind
small models. Each new shape is compiled (seconds to minutes) or captured (one step) on
first use; the compiled kernels round differently from the eager ones (results equal within
float tolerance), the captured ones do not."""
CUDA_COMPILE_MODES: tuple[CompileMode, ...] = ("graph",)
"""Compile modes only a CUDA device runs: a CUDA graph is a GPU's."""


CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
"""/proc/cpuinfo flags of native bf16 arithmetic: x86's AVX512_BF16 and AMX, ARM's BF16."""


def cpu_has_native_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool | None:
    """Whether this CPU computes in bf16 natively (None: no ``cpuinfo`` to tell, not Linux).
    Without it PyTorch converts to fp32 and back around every operation, so bf16 is slower
    than fp32 (measured 2.4x on a Xeon with AVX-512 but not AVX512_BF16; README)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    flags = {
        flag
        for line in text.splitlines()
        if line.split(":")[0].strip() in ("flags", "Features")
        for flag in line.partition(":")[2].split()
    }
    return any(flag in flags for flag in CPU_BF16_FLAGS)


@contextlib.contextmanager
def tensor_float32(allowed: bool) -> Iterator[None]:
    """CUDA's convolutions (cuDNN) and matrix products (cuBLAS) in TF32 or not, restored after.

    PyTorch's defaults differ by library: cuDNN convolutions in TF32 (a 10-bit mantissa), cuBLAS
    matrix products in float32. So a "float32" convolutional model on an Ampere or newer GPU
    rounds about 1e-3 per operation, where a CPU rounds 1e-7: seen on the H100 (2026-11-26),
    where the FedAvg cnn's loop and vmap engines differed by more than 1e-4 relative until
    TF32 was off. ``precision: fp32`` turns it off everywhere (measured cost: none, 45.9k vs
    47.0k client-samples/s for 100 vmapped ``cnn`` clients at batch 32), ``tf32`` on."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = (matmul.allow_tf32, cudnn.allow_tf32)
    matmul.allow_tf32 = cudnn.allow_tf32 = allowed
    try:
        yield
    finally:
        matmul.allow_tf32, cudnn.allow_tf32 = saved


CUBLAS_WORKSPACE_VARIABLE = "CUBLAS_WORKSPACE_CONFIG"
CUBLAS_WORKSPACE_CONFIG = ":4096:8"
"""cuBLAS picks its reduction order by workspace unless it has a fixed one: this setting (or
":16:8") makes its matrix products reproducible. It is read when CUDA starts its cuBLAS handle,
so it must be in the environment before the process first uses CUDA."""


def configure_determinism(deterministic: bool) -> None:
    """Make this process's training reproducible run after run (``training.deterministic``):
    PyTorch's deterministic algorithms (an operation without one raises instead of running
    nondeterministically), cuDNN without autotuning (which picks kernels by their timing), and
    the cuBLAS workspace fixed. Called at the start of every run, in every process that trains
    (``fedsim run``, each worker, each Ray task), before its first use of CUDA. False turns the
    switches off again (cuDNN may autotune), keeping an environment variable already set.
    On a CPU the switches change neither results nor speed (measured: ratio 0.97-1.00)."""
    if deterministic:
        os.environ.setdefault(CUBLAS_WORKSPACE_VARIABLE, CUBLAS_WORKSPACE_CONFIG)
    torch.use_deterministic_algorithms(deterministic)
    torch.backends.cudnn.deterministic = deterministic
    torch.backends.cudnn.benchmark = not deterministic


MAX_VMAP_CHUNK = 1024
"""The most clients a batched engine stacks into one step. It exists to fill a GPU
that one small client's kernels leave idle; a thousand clients of the small models do, and
beyond that a larger stack only costs memory."""
VMAP_MEMORY_SHARE = 0.5
"""The share of the device's memory a vmapped chunk may plan for: the estimate below counts
parameters, gradients, optimizer state and the layers' outputs, not the allocator's slack, the
kernels' workspaces or what the run keeps beside it (the clients' data, the evaluation)."""
ACTIVATION_COPIES = 4
"""Floats a training step holds per layer output: the output, its gradient, and the
temporaries of the backward (vmap's batched convolutions among them)."""


def vmap_chunk_size(
    setting: int | str,
    clients: int,
    floats_per_client: int,
    device: torch.device,
) -> int:
    """How many of ``clients`` a batched engine runs at once (``training.vmap_chunk``): the
    number given, or ("auto") as many as fit ``VMAP_MEMORY_SHARE`` of the device's memory at
    ``floats_per_client`` float32s each, at most ``MAX_VMAP_CHUNK``. The device's *total*
    memory, not its free memory: the chunking then depends only on the machine, so the same
    run splits its clients the same way every time (a batched kernel may round differently
    for another number of clients)."""
    if clients < 1:
        return 1
    if setting != "auto":
        return min(int(setting), clients)
    fitting = int(VMAP_MEMORY_SHARE * device_memory_bytes(device) // (4 * floats_per_client))
    return max(1, min(fitting, MAX_VMAP_CHUNK, clients))


def device_memory_bytes(device: torch.device) -> int:
    """The device's total memory: the GPU's, or this machine's physical memory for a CPU."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not a POSIX system that says
        return 8 * 2**30


def configure_threads(num_threads: int) -> None:
    """Set torch's intra-op threads (results differ between counts: a run records its own)."""
    if num_threads < 1:
        raise ValueError(f"num_threads must be >= 1, got {num_threads}")
    torch.set_num_threads(num_threads)


def uses_channels_last(
    memory_format: MemoryFormat, precision: Precision, input_channels: int = 3
) -> bool:
    """Whether convolutions get NHWC inputs. "auto" follows the measured policy: with bf16 and
    a first convolution of more than one input channel only. Measured by
    benchmarks/precision.py (2-core AMD EPYC Zen 4, native avx512_bf16, one thread, loop
    engine, best-over-best ratios over 2-3 sessions): on 3x32x32 inputs NHWC over NCHW was
    1.16-1.34x (cnn) and 1.24-1.62x (lenet5) in bf16, bf16+NHWC 1.47-1.88x over fp32 for the
    cnn; on one-channel 28x28 inputs it was 0.85-1.03x (the first convolution stays NCHW: a
    one-channel batch is both layouts), i.e. no gain and up to 15% loss. In fp32 NHWC was
    0.96-1.24x and changes the results (other backward kernels, 2e-4 relative after 10 steps),
    which a default must not do. Under vmap NHWC gained nothing (0.93-1.06x): vmap keeps NCHW."""
    if memory_format == "auto":
        return precision == "bf16" and input_channels > 1
    return memory_format == "channels_last"
