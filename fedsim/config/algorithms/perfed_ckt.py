"""PerFed-CKT's settings (``fedsim.algorithms.perfed_ckt``)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from fedsim.config.algorithms._sync import SyncServerConfig
from fedsim.config.base import PositiveInt, Weight


class PerFedCktConfig(SyncServerConfig):
    """PerFed-CKT: clustered co-distillation through outputs on a public unlabeled set."""

    name: Literal["perfed_ckt"]
    compressible: ClassVar[dict[str, str | None]] = dict.fromkeys(
        ("uplink", "downlink"), "sends softmax outputs on the public set, not models or updates"
    )
    clusters: PositiveInt = Field(default=3, description="c (paper: 3 homogeneous, 2 mixed)")
    distill_weight: Weight = Field(default=2.0, description="lambda (paper: 2)")
    public_samples: PositiveInt = Field(default=2000, description="|P| (paper: 2000)")
    public_batch_size: PositiveInt = Field(default=128, description="b' (paper: 128)")
    sample_by_size: bool = Field(default=True, description="selection probability ∝ n_k")

    @model_validator(mode="after")
    def _size_sampling_is_random(self) -> PerFedCktConfig:
        if self.sample_by_size and self.selection.policy != "random":
            raise ValueError(
                f"selection.policy: {self.selection.policy} picks clients by its own rule, "
                "not by sampling ∝ n_k: set sample_by_size: false with it"
            )
        return self
