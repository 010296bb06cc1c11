"""An asynchronous server's options (``fedsim.algorithms._async``): concurrency and staleness."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from fedsim.config.algorithms._base import _AlgorithmBase
from fedsim.config.base import MAX_ROUNDS, NO_BOOL, PositiveInt, Seconds, Weight


class AsyncServerConfig(_AlgorithmBase):
    """An asynchronous server: no rounds; it dispatches and applies updates as they come.

    A "round" of an asynchronous algorithm is one server model update (run.rounds counts
    them); measure with evaluation.every_s to compare with synchronous runs.
    """

    max_concurrency: PositiveInt = Field(default=10, description="clients training at once")
    staleness: Literal["constant", "polynomial", "hinge"] = Field(
        default="polynomial",
        description="s(tau): 1; (1 + tau)^-a; 1 if tau <= b else 1 / (a (tau - b) + 1)",
    )
    staleness_a: Weight = Field(default=0.5, description="a of the staleness function")
    staleness_b: Annotated[float, Field(ge=0, le=MAX_ROUNDS), NO_BOOL] = Field(
        default=4.0, description="b of the hinge"
    )
    max_staleness: Annotated[int, Field(ge=0, le=MAX_ROUNDS), NO_BOOL] | None = Field(
        default=None, description="drop older updates (their bytes count as wasted)"
    )
    task_timeout_s: Seconds | None = Field(
        default=None, description="give up on a dispatched client after this long (frees its slot)"
    )
