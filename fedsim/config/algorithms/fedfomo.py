"""FedFomo's settings (``fedsim.algorithms.fedfomo``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from fedsim.config.algorithms._sync import SyncServerConfig
from fedsim.config.base import NO_BOOL, PositiveInt


class FedFomoConfig(SyncServerConfig):
    """Each client downloads M peer models and weighs them on its validation split."""

    name: Literal["fedfomo"]
    models_per_client: PositiveInt = Field(default=5, description="M")
    epsilon: Annotated[float, Field(ge=0, le=1), NO_BOOL] = Field(
        default=0.3, description="exploration: chance of a random peer instead of a top one"
    )
    validation_fraction: Annotated[float, Field(gt=0, lt=1), NO_BOOL] = Field(
        default=0.2, description="share of the client's training samples held out to weigh peers"
    )
