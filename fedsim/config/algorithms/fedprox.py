"""FedProx's settings (``fedsim.algorithms.fedprox``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fedsim.config.algorithms._sync import FedAvgFamilyConfig
from fedsim.config.base import Weight


class FedProxConfig(FedAvgFamilyConfig):
    """FedAvg with the proximal term mu/2 ||w - w_global||^2 in the local objective."""

    name: Literal["fedprox"]
    mu: Weight = Field(default=0.1, description="the papers tune mu in {0.1, 0.5, 1}")
