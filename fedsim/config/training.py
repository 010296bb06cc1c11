"""The model each client trains (one architecture or a mix) and how it trains locally."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StrictBool, model_validator

from fedsim.config.base import (
    MAX_LR,
    MAX_THREADS,
    MAX_WIDTH,
    NO_BOOL,
    Fraction,
    PositiveInt,
    _Strict,
)

ModelName = Literal["mlp", "lenet5", "cnn", "vgg11", "vgg13"]
HiddenSizes = Annotated[
    tuple[Annotated[int, Field(gt=0, le=MAX_WIDTH), NO_BOOL], ...], Field(max_length=64)
]


class ModelShare(_Strict):
    """One architecture of a mix and the share of the clients that train it."""

    name: ModelName = Field(description="the architecture")
    fraction: Fraction = Field(description="share of the clients (the mix's sum to 1)")
    hidden_sizes: HiddenSizes = Field(default=(200, 200), description="mlp: hidden layer widths")


class ModelConfig(_Strict):
    """One architecture for every client, or a mix (model-heterogeneous clients)."""

    name: ModelName | None = Field(
        default=None,
        description="every client's architecture (mlp; lenet5; cnn, FedAvg's; vgg11, vgg13 "
        "CIFAR-style with GroupNorm); null with a mix",
    )
    hidden_sizes: HiddenSizes = Field(default=(200, 200), description="mlp: hidden layer widths")
    mix: list[ModelShare] = Field(
        default=[], description="architectures and the share of clients that get each"
    )
    assign: Literal["by_size", "random"] = Field(
        default="by_size", description="by_size: the first listed go to the largest datasets"
    )

    @model_validator(mode="after")
    def _name_or_mix(self) -> ModelConfig:
        if (self.name is None) == (not self.mix):
            raise ValueError("give a model name, or a mix of architectures, not both")
        total = sum(share.fraction for share in self.mix)
        if self.mix and abs(total - 1) > 1e-6:
            raise ValueError(f"mix fractions must sum to 1 (they sum to {total:g})")
        return self

    @property
    def architectures(self) -> list[ModelShare]:
        if self.mix:
            return list(self.mix)
        return [ModelShare(name=self.name, fraction=1.0, hidden_sizes=self.hidden_sizes)]


class TrainingConfig(_Strict):
    """How a client trains locally, and where and how the training runs on this machine."""

    optimizer: Literal["sgd", "adam"] = Field(
        default="sgd", description="local optimizer, fresh every round"
    )
    lr: Annotated[float, Field(gt=0, le=MAX_LR), NO_BOOL] = Field(
        default=0.05, description="local learning rate"
    )
    momentum: Annotated[float, Field(ge=0, lt=1), NO_BOOL] = Field(
        default=0.0, description="sgd momentum"
    )
    weight_decay: Annotated[float, Field(ge=0, le=1), NO_BOOL] = Field(
        default=0.0, description="L2 weight decay"
    )
    batch_size: PositiveInt = Field(default=32, description="local mini-batch size")
    local_epochs: PositiveInt | None = Field(
        default=None,
        description="passes over the local training set per round (1 when neither this nor "
        "local_steps is given)",
    )
    local_steps: PositiveInt | None = Field(
        default=None, description="mini-batch steps per round instead of epochs (not both)"
    )
    engine: Literal["auto", "loop", "vmap", "stacked"] = Field(
        default="auto",
        description="how trainings of one architecture run: one by one (loop), vectorized "
        "across clients by torch.func.vmap (vmap) or by a matrix product per client and layer "
        "over the clients' stacked parameters (stacked), or as measured fastest for the "
        "model family on this device kind (auto: fedsim.learn.engines.policy); an engine "
        "that cannot run the model is refused, naming the layer",
    )
    threads: Annotated[int, Field(gt=0, le=MAX_THREADS), NO_BOOL] = Field(
        default=1,
        description="torch intra-op threads per run (1: small models gain nothing from more, "
        "and lose badly when cores are shared); results depend on it",
    )
    device: Literal["cpu", "cuda"] = Field(
        default="cpu", description="where training and evaluation run"
    )
    precision: Literal["fp32", "tf32", "bf16", "fp16"] = Field(
        default="fp32",
        description="compute precision: fp32 IEEE float32 everywhere (TF32 off on a GPU); tf32 "
        "(cuda) convolutions and matrix products in the GPU's TF32; bf16 and fp16 autocast "
        "(parameters stay fp32), faster where the hardware has them; all but fp32 change "
        "the numbers; fp16 needs cuda",
    )
    memory_format: Literal["auto", "contiguous", "channels_last"] = Field(
        default="auto",
        description="layout of convolution inputs; auto: channels_last only with bf16 (measured)",
    )
    deterministic: StrictBool = Field(
        default=True,
        description="deterministic algorithms (torch.use_deterministic_algorithms), no cuDNN "
        "autotuning and CUBLAS_WORKSPACE_CONFIG=:4096:8 set before CUDA starts: the same "
        "files run after run on a GPU too (no cost measured on a CPU); false trades that "
        "for speed on a GPU",
    )
    vmap_chunk: Annotated[PositiveInt | Literal["auto"], NO_BOOL] = Field(
        default="auto",
        description="clients a batched engine (vmap, stacked) trains or evaluates at once: "
        "auto from the model's size, the batch width and half the device's total memory (at most "
        "fedsim.learn.execution.MAX_VMAP_CHUNK), or a number; results equal within float "
        "tolerance whatever the chunk",
    )
    compile: Literal["eager", "default", "reduce-overhead", "graph"] = Field(
        default="eager",
        description="how a batched engine's step runs: eager, or at fixed shapes (clients "
        "and batch padded, masked) with its gradients through torch.compile in this mode "
        "(default; reduce-overhead: replayed as CUDA graphs; the first step of each shape "
        "compiles, seconds to minutes; results equal eager ones within float tolerance) or "
        "the whole step captured as one CUDA graph and replayed (graph: cuda only)",
    )

    @model_validator(mode="after")
    def _gpu_precisions_on_cuda(self) -> TrainingConfig:
        if self.precision in ("tf32", "fp16") and self.device != "cuda":
            raise ValueError(
                f"precision {self.precision} needs device cuda (TF32 is a GPU mode, fp16's "
                "loss scaling is for GPUs); on a CPU use fp32 or bf16"
            )
        if self.compile == "graph" and self.device != "cuda":
            raise ValueError("compile graph captures CUDA graphs: it needs device cuda")
        return self

    @model_validator(mode="after")
    def _batched_engines_without_fp16(self) -> TrainingConfig:
        if self.precision == "fp16" and self.engine in ("vmap", "stacked"):
            raise ValueError(
                f"engine {self.engine} cannot train in fp16: its loss scaling skips steps per "
                "client, which only the loop engine does; use loop, auto or bf16"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _one_work_unit(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        epochs, steps = data.get("local_epochs"), data.get("local_steps")
        if epochs is not None and steps is not None:
            raise ValueError("give local_epochs or local_steps, not both")
        if epochs is None and steps is None:
            return {**data, "local_epochs": 1}
        return data
