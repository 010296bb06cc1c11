"""HierFAVG's settings (``fedsim.algorithms.hierfavg``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from fedsim.config.algorithms._sync import SyncServerConfig
from fedsim.config.base import MAX_ROUNDS, NO_BOOL, PositiveInt


class HierFavgConfig(SyncServerConfig):
    """HierFAVG (Liu, Zhang, Song and Letaief, ICC 2020): client-edge-cloud FL. Every
    client runs κ₁ = ``local_steps`` local updates per edge round; the edge server
    at each base-station site averages its cell's clients' models (by sample count) every
    edge round, and the cloud averages the edge models (by their clients' samples) every κ₂
    edge rounds, over the backhaul. Selection, deadline and over-selection act per edge."""

    name: Literal["hierfavg"]
    local_steps: PositiveInt | None = Field(
        default=None,
        description="κ₁: local SGD steps per edge round (null: training's local work, as FedAvg)",
    )
    association: Literal["serving_cell", "nearest_site", "balanced"] = Field(
        default="serving_cell",
        description="which edge a client belongs to: its serving cell's (follows handovers); "
        "the nearest site's; balanced by count (at most ceil(n / sites) each, nearest first). "
        "A client served by another site than its edge's is relayed over the backhaul",
    )
    cloud_every: Annotated[int, Field(ge=1, le=MAX_ROUNDS), NO_BOOL] = Field(
        default=4,
        description="κ₂: edge aggregations between two cloud aggregations (1: every edge "
        "round). The paper varies it at fixed κ₁κ₂ ((60, 1) to (6, 10)); 4 was the fastest to "
        "the target of (20, 1), (10, 2), (5, 4), (2, 10) on scenarios/hierarchical.yaml",
    )
