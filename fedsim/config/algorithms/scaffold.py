"""SCAFFOLD's settings (``fedsim.algorithms.scaffold``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fedsim.config.algorithms._sync import FedAvgFamilyConfig


class ScaffoldConfig(FedAvgFamilyConfig):
    """SCAFFOLD (Karimireddy et al. 2020): control variates correct each local step."""

    name: Literal["scaffold"]
    control_update: Literal["I", "II"] = Field(
        default="II",
        description="c_i+: I = the gradient of the local training set at x (one more pass of "
        "compute); II = c_i - c + (x - y_i) / (K lr) (the paper's experiments)",
    )
