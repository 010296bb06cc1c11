"""Oracle's settings (``fedsim.algorithms.oracle``)."""

from __future__ import annotations

from typing import Literal

from fedsim.config.algorithms._sync import FedAvgFamilyConfig


class OracleConfig(FedAvgFamilyConfig):
    """FedAvg inside each true group of the partition (the groups are known)."""

    name: Literal["oracle"]
