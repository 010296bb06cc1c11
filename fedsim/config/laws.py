"""Per-client value laws: rates in Mbps (also used for sample counts, CPU frequencies and
battery capacities) and transmit powers in dBm. Each family is a tagged union on ``kind``
whose ``sample(rng, size)`` draws one value per client; a plain number is the constant law.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, BeforeValidator, Field, model_validator

from fedsim.config.base import (
    MAX_LOG_SIGMA,
    MAX_RATE_MBPS,
    MIN_RATE_MBPS,
    NO_BOOL,
    PowerDbm,
    RateMbps,
    _Strict,
    tagged_union,
)


def _number_is_constant(value_key: str, *, any_text: bool) -> BeforeValidator:
    """A plain number is ``{kind: constant, <value_key>: number}``; so are a quoted number, with
    any_text any string, and true/false (the constant's own field then says why it is no
    number)."""

    def constant(value: Any) -> Any:
        if isinstance(value, (bool, int, float)) or (
            isinstance(value, str) and (any_text or _parses_as_float(value))
        ):
            return {"kind": "constant", value_key: value}
        return value

    return BeforeValidator(constant)


def _parses_as_float(text: str) -> bool:
    """``"4"``, but also YAML's bare ``inf`` and ``nan`` (text to PyYAML): the constant's field
    then says why each is refused (quoted, or no finite number)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _low_at_most_high(low: str, high: str) -> Callable[..., Any]:
    """A model check that the field ``high`` is not below the field ``low``."""

    def ordered(model: BaseModel) -> BaseModel:
        if getattr(model, high) < getattr(model, low):
            raise ValueError(
                f"{high} ({getattr(model, high)}) must be >= {low} ({getattr(model, low)})"
            )
        return model

    return model_validator(mode="after")(ordered)


# --- rates (Mbps) -----------------------------------------------------------------------------


class Constant(_Strict):
    """One value for every client (a plain number is this law), in the unit of the key that
    takes the law."""

    kind: Literal["constant"] = "constant"
    value: RateMbps = Field(description="the value")

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return np.full(size, self.value)


class Uniform(_Strict):
    """Each client's value uniform between low and high (the key's unit)."""

    kind: Literal["uniform"] = "uniform"
    low: RateMbps = Field(description="smallest value")
    high: RateMbps = Field(description="largest value (at least low)")

    _ordered = _low_at_most_high("low", "high")

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return rng.uniform(self.low, self.high, size)


class LogNormal(_Strict):
    """Each client's value median · e^(σ Z), Z standard normal, held within the rate bounds."""

    kind: Literal["lognormal"] = "lognormal"
    median: RateMbps = Field(description="the median (the key's unit)")
    sigma: Annotated[float, Field(ge=0, le=MAX_LOG_SIGMA), NO_BOOL] = Field(
        description="σ of the logarithm (e^σ: the spread factor of one standard deviation)"
    )

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """Draws within the bounds of the law's parameters: its tails would otherwise reach
        rates no link has (median 1 Mbps, sigma 3: 1 client in 10,000 below 14 bit/s)."""
        draws = self.median * np.exp(self.sigma * rng.standard_normal(size))
        return np.clip(draws, MIN_RATE_MBPS, MAX_RATE_MBPS)


RATE_LAWS = (Constant, Uniform, LogNormal)
PositiveDistribution = Annotated[
    tagged_union(RATE_LAWS, "kind"), _number_is_constant("value", any_text=False)
]


# --- powers (dBm) -----------------------------------------------------------------------------


class ConstantDbm(_Strict):
    """One power for every client (a plain number is this law)."""

    kind: Literal["constant"] = "constant"
    value_dbm: PowerDbm = Field(description="the power")

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return np.full(size, self.value_dbm)


class UniformDbm(_Strict):
    """Each client's power uniform in dBm between low_dbm and high_dbm."""

    kind: Literal["uniform"] = "uniform"
    low_dbm: PowerDbm = Field(description="lowest power")
    high_dbm: PowerDbm = Field(description="highest power (at least low_dbm)")

    _ordered = _low_at_most_high("low_dbm", "high_dbm")

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return rng.uniform(self.low_dbm, self.high_dbm, size)


class NormalDbm(_Strict):
    """Normal in dB (log-normal in watts), clipped to -30..60 dBm."""

    kind: Literal["normal"] = "normal"
    mean_dbm: PowerDbm = Field(description="mean power")
    std_db: Annotated[float, Field(ge=0, le=20), NO_BOOL] = Field(description="standard deviation")

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return np.clip(self.mean_dbm + self.std_db * rng.standard_normal(size), -30.0, 60.0)


POWER_LAWS = (ConstantDbm, UniformDbm, NormalDbm)
PowerLaw = Annotated[
    tagged_union(POWER_LAWS, "kind"), _number_is_constant("value_dbm", any_text=True)
]
