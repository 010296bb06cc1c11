"""Clustered FL's settings (``fedsim.algorithms.cfl``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from fedsim.config.algorithms._sync import FedAvgFamilyConfig
from fedsim.config.base import MAX_ROUNDS, NO_BOOL, PositiveInt, UpdateNorm


class CflConfig(FedAvgFamilyConfig):
    """Clustered FL (Sattler et al.): bipartition a cluster by update cosine similarity."""

    name: Literal["cfl"]
    eps1: UpdateNorm = Field(default=0.4, description="split when the mean update norm < eps1")
    eps2: UpdateNorm = Field(default=1.6, description="... and the max update norm > eps2")
    warmup_rounds: Annotated[int, Field(ge=0, le=MAX_ROUNDS), NO_BOOL] = Field(
        default=20, description="no split before this round"
    )
    max_clusters: PositiveInt = Field(default=8, description="no split beyond this many clusters")
