"""The options every algorithm has: its label and its codecs, and which of its messages a codec may
compress."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import AfterValidator, Field, model_validator

from fedsim.config.base import _label_name, _Strict
from fedsim.config.compression import CompressionConfig

NOTHING_TO_SEND = {
    "uplink": "sends nothing on the uplink",
    "downlink": "sends nothing on the downlink",
    "peer": "sends no peer messages (peer codecs are for the serverless algorithms)",
}


class _AlgorithmBase(_Strict):
    label: Annotated[str, AfterValidator(_label_name)] | None = Field(
        default=None,
        description="results folder name (letters, digits, _ . + = @ -); default: the algorithm",
    )
    compression: CompressionConfig | None = Field(
        default=None, description="codecs of the uplink and downlink messages; null: none"
    )
    # The directions whose messages are models or updates a codec may compress, and why not.
    compressible: ClassVar[dict[str, str | None]] = {"uplink": None, "downlink": None}

    @model_validator(mode="after")
    def _compressible(self) -> _AlgorithmBase:
        for direction in ("uplink", "downlink", "peer"):
            if self.compression is not None and getattr(self.compression, direction):
                why = self.compressible.get(direction, NOTHING_TO_SEND[direction])
                if why is not None:
                    raise ValueError(f"compression.{direction}: {self.name} {why}")  # type: ignore[attr-defined]
        return self

    @property
    def run_label(self) -> str:
        return self.label or self.name  # type: ignore[attr-defined]
