"""IFCA's settings (``fedsim.algorithms.ifca``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fedsim.config.algorithms._sync import FedAvgFamilyConfig
from fedsim.config.base import PositiveInt


class IfcaConfig(FedAvgFamilyConfig):
    """k cluster models broadcast each round; each client trains the one of lowest loss."""

    name: Literal["ifca"]
    clusters: PositiveInt = Field(default=4, description="k, the cluster models")
