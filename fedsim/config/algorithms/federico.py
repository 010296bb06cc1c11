"""FedeRiCo's settings (``fedsim.algorithms.federico``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fedsim.config.algorithms._decentralized import DecentralizedConfig, Peers
from fedsim.config.base import NonNegativeInt, Seconds, UnitInterval


class FedericoConfig(DecentralizedConfig):
    """FedeRiCo: ε-greedy neighbours, EMA losses, w = softmax(-L), w-scaled gradients back."""

    name: Literal["federico"]
    neighbours: NonNegativeInt = Field(default=3, description="M (paper: 3)")
    peers: Peers = Field(
        default="all",
        description="whom the M peers are drawn among: all present clients (the paper's fully "
        "connected potential peers) or d2d: the client's D2D neighbours at the moment "
        "(system.d2d's graph, or the ISLs in sight); fewer than M: all of them, none: a local "
        "round; nothing goes to a peer out of reach",
    )
    epsilon: UnitInterval = Field(default=0.3, description="ε-greedy exploration (paper: 0.3)")
    beta: UnitInterval = Field(default=0.6, description="EMA weight of the NEW loss (paper: 0.6)")
    include_self: bool = Field(
        default=True, description="refresh ℓ_ii and apply g_ii every round (Eq. 8's j = i term)"
    )
    loss_on: Literal["train_set", "batch"] = Field(
        default="train_set", description="E-step loss on the local train set, or on the batch"
    )
    loss_reduction: Literal["sum", "mean"] = Field(
        default="sum", description="ℓ summed over the samples (Alg. 1, Eq. 3) or their mean"
    )
    ensemble: bool = Field(
        default=True, description="predict with Σ_j w_ij softmax(h_φj) over cached models"
    )
    ensemble_min_weight: UnitInterval = Field(
        default=0.01, description="forget cached peer models whose weight falls below this"
    )
    model_timeout_s: Seconds | None = Field(
        default=None,
        description="a sampler waits this long for the models it asked for (default: half of "
        "deadline_s; for all of them without a deadline)",
    )
