"""FedAvg's settings and FedOpt's named variants, FedAvg with a preset server optimizer
(``fedsim.algorithms.fedavg``)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from fedsim.config.algorithms._sync import (
    SERVER_LR_DEFAULTS,
    FedAvgFamilyConfig,
    ServerOptimizerConfig,
)


class FedAvgConfig(FedAvgFamilyConfig):
    """FedAvg (McMahan et al. 2017): average the selected clients' trained models."""

    name: Literal["fedavg"]


class _FedOptPreset(FedAvgFamilyConfig):
    """FedAvg with the server optimizer its name says (FedOpt's named variants)."""

    preset: ClassVar[str]

    @model_validator(mode="before")
    @classmethod
    def _preset_optimizer(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        chosen = data.get("server_optimizer", {})
        if not isinstance(chosen, dict):
            return data
        name = chosen.get("name", cls.preset)
        if name != cls.preset:
            raise ValueError(
                f"server_optimizer.name: {data.get('name')} is fedavg with the {cls.preset} "
                f"server optimizer; for {name!r} use fedavg with server_optimizer.name {name!r}"
            )
        return {**data, "server_optimizer": {**chosen, "name": name}}


def _preset_optimizer(preset: str) -> Any:
    """A preset's server_optimizer field: the base class's default (sgd) is not true of it.
    Validation always fills in the preset's name; the default object is the preset's so that the
    schema (and the reference generated from it) says what a run gets."""
    return Field(
        default=ServerOptimizerConfig(name=preset),  # type: ignore[arg-type]
        description=f"default {preset}, lr {SERVER_LR_DEFAULTS[preset]:g}: the optimizer its "
        "name says, whose lr, betas and tau may be set",
    )


class FedAvgMConfig(_FedOptPreset):
    """FedAvgM (Hsu et al. 2019): server momentum."""

    name: Literal["fedavgm"]
    preset: ClassVar[str] = "momentum"
    server_optimizer: ServerOptimizerConfig = _preset_optimizer(preset)


class FedAdagradConfig(_FedOptPreset):
    """FedAdagrad (Reddi et al. 2021): Adagrad on the averaged update at the server."""

    name: Literal["fedadagrad"]
    preset: ClassVar[str] = "adagrad"
    server_optimizer: ServerOptimizerConfig = _preset_optimizer(preset)


class FedAdamConfig(_FedOptPreset):
    """FedAdam (Reddi et al. 2021): Adam on the averaged update at the server."""

    name: Literal["fedadam"]
    preset: ClassVar[str] = "adam"
    server_optimizer: ServerOptimizerConfig = _preset_optimizer(preset)


class FedYogiConfig(_FedOptPreset):
    """FedYogi (Reddi et al. 2021): Yogi on the averaged update at the server."""

    name: Literal["fedyogi"]
    preset: ClassVar[str] = "yogi"
    server_optimizer: ServerOptimizerConfig = _preset_optimizer(preset)
