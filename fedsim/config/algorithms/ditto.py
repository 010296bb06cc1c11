"""Ditto's settings (``fedsim.algorithms.ditto``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fedsim.config.algorithms._sync import FedAvgFamilyConfig
from fedsim.config.base import PositiveInt, Weight


class DittoConfig(FedAvgFamilyConfig):
    """Global FedAvg model plus a personal model per client pulled towards it by lam."""

    name: Literal["ditto"]
    lam: Weight = Field(default=0.1, description="the papers tune lam in {0.1, 0.5, 1}")
    personal_epochs: PositiveInt = Field(
        default=1, description="epochs of the personal model per round (a second training)"
    )
