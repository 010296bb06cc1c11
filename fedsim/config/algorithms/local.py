"""Local training's settings (``fedsim.algorithms.local``)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, StrictBool, model_validator

from fedsim.config.algorithms._base import _AlgorithmBase
from fedsim.config.base import Fraction


class LocalConfig(_AlgorithmBase):
    """Every client trains alone on its own data: no communication (the floor to beat).

    By default in rounds with a barrier, each round training the clients a synchronous
    server with the same ``client_fraction`` would select (the same call on the same
    sampling stream), so that "equal rounds" means equal training against any server."""

    name: Literal["local"]
    compressible: ClassVar[dict[str, str | None]] = {}
    client_fraction: Fraction = Field(
        default=1.0, description="trained per round, selected as a synchronous server would"
    )
    barrier: StrictBool = Field(
        default=True,
        description="true: round r ends when each selected client has trained (or dropped "
        "out), so after round r nobody trained more than r times; false: every client trains "
        "back to back at its own pace, round r complete once all have trained r times",
    )
    sample_by_size: StrictBool = Field(
        default=False,
        description="select with probability ∝ n_k, as PerFed-CKT's server does (its default)",
    )

    @model_validator(mode="after")
    def _own_pace_trains_everyone(self) -> LocalConfig:
        if self.barrier:
            return self
        field = "sample_by_size: true" if self.sample_by_size else None
        if self.client_fraction < 1.0:
            field = f"client_fraction: {self.client_fraction}"
        if field is not None:
            raise ValueError(
                f"{field} selects clients per round, which needs barrier: true (without it "
                "every client trains at its own pace)"
            )
        return self
