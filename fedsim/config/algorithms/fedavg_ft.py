"""FedAvg+FT's settings (``fedsim.algorithms.fedavg_ft``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fedsim.config.algorithms._sync import FedAvgFamilyConfig
from fedsim.config.base import PositiveInt


class FedAvgFTConfig(FedAvgFamilyConfig):
    """FedAvg whose clients fine-tune the global model locally before using it."""

    name: Literal["fedavg_ft"]
    finetune_epochs: PositiveInt = Field(
        default=1, description="epochs of fine-tuning on the client's data before evaluation"
    )
