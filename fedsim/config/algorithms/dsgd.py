"""D-SGD's settings (``fedsim.algorithms.dsgd``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from fedsim.config.algorithms._decentralized import DecentralizedConfig
from fedsim.config.base import NO_BOOL

CHOCO_CONSENSUS_STEP = 0.1  # D-SGD's γ under a peer codec unless the scenario sets one


class DsgdConfig(DecentralizedConfig):
    """Decentralized SGD: local training, then gossip averaging with the D2D neighbours."""

    name: Literal["dsgd"]
    consensus_step: Annotated[float, Field(gt=0, le=1), NO_BOOL] | None = Field(
        default=None,
        description="γ of CHOCO-SGD under compression.peer: x_i += γ Σ_j w_ij (x̂_j − x̂_i) "
        "over the public copies; null: 0.1 (the paper tunes it per codec and graph; 0.1 was "
        "stable for QSGD s = 4 and top-k 1-10% in peer_compression.yaml, where 1 diverged). "
        "Without a peer codec D-SGD averages the models it receives (γ = 1)",
    )

    @model_validator(mode="before")
    @classmethod
    def _default_consensus_step(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("consensus_step") is None:
            compression = data.get("compression")
            peer = compression.get("peer") if isinstance(compression, dict) else None
            if peer is not None or getattr(compression, "peer", None) is not None:
                data = data | {"consensus_step": CHOCO_CONSENSUS_STEP}
        return data

    @model_validator(mode="after")
    def _consensus_step_needs_a_peer_codec(self) -> DsgdConfig:
        coded = self.compression is not None and self.compression.peer is not None
        if self.consensus_step is not None and not coded:
            raise ValueError(
                "consensus_step: acts only on the public copies of compression.peer; without "
                "a peer codec D-SGD averages the models it receives"
            )
        return self
