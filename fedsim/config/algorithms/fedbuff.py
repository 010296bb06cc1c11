"""FedBuff's settings (``fedsim.algorithms.fedbuff``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fedsim.config.algorithms._async import AsyncServerConfig
from fedsim.config.algorithms._sync import ServerOptimizerConfig
from fedsim.config.base import PositiveInt


class FedBuffConfig(AsyncServerConfig):
    """FedBuff (Nguyen et al. 2022): apply the mean of K staleness-weighted deltas."""

    name: Literal["fedbuff"]
    buffer_size: PositiveInt = Field(default=10, description="K")
    server_optimizer: ServerOptimizerConfig = Field(
        default=ServerOptimizerConfig(),
        description="steps on the staleness-weighted mean delta (sgd, lr: the paper's η_g)",
    )
