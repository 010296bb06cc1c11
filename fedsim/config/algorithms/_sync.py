"""A synchronous server's options (``fedsim.algorithms._sync``): client selection, deadline and
over-selection, and the FedAvg family's server optimizer (FedOpt)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from fedsim.config.algorithms._base import _AlgorithmBase
from fedsim.config.base import MAX_LR, NO_BOOL, Fraction, Seconds, _Strict

SelectionPolicy = Literal["random", "round_robin", "proportional_fair", "best_channel", "age_based"]
CHANNEL_AWARE_POLICIES = ("proportional_fair", "best_channel")  # they read channel reports


class SelectionConfig(_Strict):
    """Which clients a synchronous server calls each round (README "Client selection
    policies"): uniformly at random, or by Yang et al.'s scheduling policies (IEEE TCOM 2020)
    from what a base station knows, or by age of update."""

    policy: SelectionPolicy = Field(
        default="random",
        description="random; round_robin (in turn by id); proportional_fair (largest SNR over "
        "mean SNR); best_channel (largest SNR); age_based (longest since last selected)",
    )
    report_period_s: Seconds | None = Field(
        default=None,
        description="channel-aware policies: null, each client's SNR from the pilot it answers "
        "the call with; a period, as of its last periodic report (the latest multiple <= now)",
    )

    @model_validator(mode="after")
    def _reports_serve_channel_aware_policies(self) -> SelectionConfig:
        if self.report_period_s is not None and self.policy not in CHANNEL_AWARE_POLICIES:
            raise ValueError(
                f"report_period_s: {self.policy} reads no channel reports; only "
                f"{' and '.join(CHANNEL_AWARE_POLICIES)} do"
            )
        return self


class SyncServerConfig(_AlgorithmBase):
    """How a synchronous server picks clients and closes a round."""

    client_fraction: Fraction = Field(
        default=1.0, description="share of the present clients selected each round"
    )
    selection: SelectionConfig = Field(
        default=SelectionConfig(), description="which clients it calls (default: random)"
    )
    deadline_s: Seconds | None = Field(
        default=None, description="close the round this long after it starts; drop the late"
    )
    over_selection: Annotated[float, Field(ge=0, le=100), NO_BOOL] = Field(
        default=0.0, description="select (1 + x) times as many (x <= 100), keep the first arrivals"
    )


_Beta = Annotated[float, Field(ge=0, lt=1), NO_BOOL]  # a moment's decay

SERVER_LR_DEFAULTS = {"sgd": 1.0, "momentum": 1.0, "adagrad": 0.1, "adam": 0.01, "yogi": 0.01}


class ServerOptimizerConfig(_Strict):
    """FedOpt (Reddi et al. 2021): the server steps from its model with an optimizer of its
    own on the pseudo-gradient Δ = (sample-weighted) mean client model − its model.

    sgd: x + lr Δ (lr 1 is plain FedAvg); momentum (FedAvgM): v = β₁ v + Δ, x + lr v;
    adagrad, adam, yogi: first moment with β₁, second with β₂ (adam, yogi), x + lr m/(√v + τ).
    Default lr per optimizer: sgd 1, momentum 1, adagrad 0.1, adam and yogi 0.01 (within the
    paper's tuned ranges; tune them), betas (0.9, 0.99), tau 1e-3 as in the paper.
    """

    name: Literal["sgd", "momentum", "adagrad", "adam", "yogi"] = Field(
        default="sgd", description="the server's optimizer"
    )
    lr: Annotated[float, Field(gt=0, le=MAX_LR), NO_BOOL] = Field(
        default=1.0, description="η, the server learning rate (default depends on name)"
    )
    betas: tuple[_Beta, _Beta] = Field(default=(0.9, 0.99), description="β₁ (momentum's β), β₂")
    tau: Annotated[float, Field(gt=0, le=1), NO_BOOL] = Field(
        default=1e-3, description="adaptivity: √v + τ, and v starts at τ²"
    )

    @model_validator(mode="before")
    @classmethod
    def _learning_rate_of_the_optimizer(cls, data: Any) -> Any:
        if isinstance(data, dict) and "lr" not in data:
            name = data.get("name", "sgd")
            known = isinstance(name, str) and name  # else the name's own check reports it
            return {**data, "lr": SERVER_LR_DEFAULTS.get(name, 1.0)} if known else data
        return data


class FedAvgFamilyConfig(SyncServerConfig):
    """A server that averages client models, then steps with its server optimizer."""

    server_optimizer: ServerOptimizerConfig = Field(
        default=ServerOptimizerConfig(), description="default sgd, lr 1: plain averaging"
    )
