"""What an algorithm's messages are compressed with (``compression: {uplink, downlink}``):
one options model per codec, a tagged union on ``codec`` (``fedsim.learn.codecs`` says
each one's bits)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from fedsim.config.base import (
    MAX_COUNT,
    NO_BOOL,
    PositiveInt,
    _Strict,
    tag_of,
    tagged_union,
)

_KeptFraction = Annotated[float, Field(gt=0, le=1), NO_BOOL]


class _CodecBase(_Strict):
    error_feedback: bool = Field(
        default=False,
        description="keep what the codec left out and add it to the next update (uplink only; "
        "Seide et al. 2014, Karimireddy et al. 2019)",
    )


class CastCodec(_CodecBase):
    """Each number in fewer bits: fp16 or bf16 (16), int8 with a float32 scale per layer."""

    codec: Literal["cast"]
    dtype: Literal["fp16", "bf16", "int8"] = Field(
        default="fp16", description="the number format on the air"
    )


class QsgdCodec(_CodecBase):
    """QSGD (Alistarh et al. 2017): norm, signs and stochastically rounded levels."""

    codec: Literal["qsgd"]
    levels: Annotated[int, Field(ge=1, le=2**15), NO_BOOL] = Field(
        default=4, description="s, the quantization levels"
    )
    bucket_size: Annotated[int, Field(ge=1, le=MAX_COUNT), NO_BOOL] | None = Field(
        default=512,
        description="numbers per norm (the paper's experiments: 512); null: one norm for all",
    )
    coding: Literal["elias", "fixed"] = Field(
        default="elias",
        description="elias: the paper's code (its Section 3.1): each nonzero level as the "
        "Elias recursive (omega) codes of its distance from the previous nonzero and of the "
        "level, and a sign bit (zeros cost nothing but the distances); fixed: "
        "1 + ceil(log2(s + 1)) bits per number",
    )


class _Sparse(_CodecBase):
    fraction: _KeptFraction | None = Field(default=None, description="share of numbers kept")
    count: PositiveInt | None = Field(default=None, description="numbers kept (instead)")

    @model_validator(mode="after")
    def _one_size(self) -> _Sparse:
        if (self.fraction is None) == (self.count is None):
            raise ValueError("give exactly one of fraction and count")
        return self


class TopkCodec(_Sparse):
    """The k largest magnitudes: indices (ceil(log2 d) bits each) and float32 values."""

    codec: Literal["topk"]


class RandkCodec(_Sparse):
    """k numbers at indices drawn from a 32-bit seed sent along (Stich et al. 2018)."""

    codec: Literal["randk"]
    rescale: bool = Field(default=True, description="scale by d/k: unbiased")


class SignsgdCodec(_CodecBase):
    """signSGD (Bernstein et al. 2018): one bit per number; FedAvg-family servers take the
    majority vote and step ``server_lr`` along it."""

    codec: Literal["signsgd"]
    server_lr: Annotated[float, Field(gt=0, le=1), NO_BOOL] = Field(
        default=1e-3, description="η, the step along the vote per number (tune it)"
    )


class EfSignsgdCodec(_CodecBase):
    """EF-signSGD (Karimireddy et al. 2019): (‖x‖₁/d)·sign(x), with error feedback."""

    codec: Literal["ef_signsgd"]
    error_feedback: bool = Field(default=True, description="the method is defined with it")


class PowersgdCodec(_CodecBase):
    """PowerSGD (Vogels et al. 2019): rank-r factors of each matrix, warm-started."""

    codec: Literal["powersgd"]
    rank: Annotated[int, Field(ge=1, le=1024), NO_BOOL] = Field(
        default=2, description="r, the rank of each layer's factors"
    )


CODECS = (CastCodec, QsgdCodec, TopkCodec, RandkCodec, SignsgdCodec, EfSignsgdCodec, PowersgdCodec)
CodecConfig = tagged_union(CODECS, "codec")
CODEC_NAMES = tuple(tag_of(model, "codec") for model in CODECS)


class CompressionConfig(_Strict):
    """The codec of each direction; a direction without one sends at the scenario's
    ``precision_bits``. What a codec compresses: a client's update (its model minus the
    model it received) on the uplink, the model itself on the downlink, and between peers
    a sender's model as the difference to its public copy (CHOCO-SGD), a gradient as it is."""

    uplink: CodecConfig | None = Field(
        default=None, description="codec of the clients' uploads (their updates); null: none"
    )
    downlink: CodecConfig | None = Field(
        default=None, description="codec of the models sent down; null: none"
    )
    peer: CodecConfig | None = Field(
        default=None, description="peer messages of the serverless algorithms (D2D or relayed)"
    )
    codec_s_per_mparam: Annotated[float, Field(ge=0, le=3600), NO_BOOL] = Field(
        default=0.0,
        description="seconds of a client's device to encode or decode a message, per million "
        "coded numbers (0: free, as most papers assume; the server's are free)",
    )

    @model_validator(mode="after")
    def _directions(self) -> CompressionConfig:
        if self.downlink is not None and self.downlink.error_feedback:
            raise ValueError(
                "downlink.error_feedback: error feedback keeps a residual per client for its "
                "uplink updates; the downlink sends models"
            )
        if self.uplink is not None and self.uplink.codec == "signsgd" and self.downlink:
            raise ValueError(
                "downlink: signsgd's server votes on the signs of the updates against its own "
                "model, which the clients must receive as it is (no downlink codec)"
            )
        if self.peer is not None and self.peer.codec == "signsgd":
            raise ValueError(
                "peer.codec: signsgd is defined with a server's majority vote; between peers "
                "use ef_signsgd (signs scaled by the mean magnitude)"
            )
        return self
