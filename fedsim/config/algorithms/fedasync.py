"""FedAsync's settings (``fedsim.algorithms.fedasync``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fedsim.config.algorithms._async import AsyncServerConfig
from fedsim.config.base import Fraction


class FedAsyncConfig(AsyncServerConfig):
    """FedAsync (Xie et al. 2019): x <- (1 - alpha s(tau)) x + alpha s(tau) x_client."""

    name: Literal["fedasync"]
    mixing: Fraction = Field(default=0.6, description="alpha")
