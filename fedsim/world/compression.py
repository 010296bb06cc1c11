"""A run's codecs between an algorithm's tensors and the bytes on the air.

The World's send primitives hand every message here: a tensor with as many numbers as a
model of the run (a model, an update, a gradient, a control variate) is encoded by the
direction's codec, and the message's bytes are the encodings' lengths; anything else (a
cluster index, mixing weights, a variance) travels at the scenario's ``precision_bits``.
The receiver gets what the decoder produced. On the uplink the codec compresses the
*update*, the tensor minus the ``reference`` its sender received, and the receiver adds the
reference back; without a reference (an update already, or the downlink's models) it
compresses the tensor itself.

Error feedback keeps one flat float32 residual per (sender, tensor of the message), made at
its first message and dropped when the client leaves; PowerSGD's warm start likewise. A
timing-only run (meta tensors) counts each codec's bytes on a seeded standard-normal tensor
of the model's shape, once per shape: exact for every codec whose size depends only on the
shape, a typical figure for QSGD's Elias coding.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from fedsim.config import CodecConfig, CompressionConfig
from fedsim.learn.codecs import (
    QSGD,
    Cast,
    Codec,
    Context,
    ErrorFeedback,
    PowerSGD,
    RandK,
    ScaledSign,
    SignSGD,
    TopK,
)

SERVER = -1  # the sender of the downlink's messages
DIRECTIONS = ("uplink", "downlink")


def make_codec(config: CodecConfig) -> Codec:
    """The codec a scenario's options describe."""
    match config.codec:
        case "cast":
            return Cast(config.dtype)
        case "qsgd":
            return QSGD(config.levels, config.bucket_size, config.coding)
        case "topk":
            return TopK(config.fraction, config.count)
        case "randk":
            return RandK(config.fraction, config.count, config.rescale)
        case "signsgd":
            return SignSGD(config.server_lr)
        case "ef_signsgd":
            return ScaledSign()
        case "powersgd":
            return PowerSGD(config.rank)
    raise ValueError(f"unknown codec {config.codec!r}")


class Compression:
    """Encodes the messages of one run; ``send`` returns (bytes on the air, what arrives)."""

    def __init__(
        self,
        config: CompressionConfig | None,
        bits_per_param: int,
        layouts: Sequence[Sequence[torch.Size]],
        seed: int,
    ) -> None:
        self.config = config
        self._bits_per_param = bits_per_param
        self.codecs: dict[str, Codec | None] = dict.fromkeys(DIRECTIONS)
        self.feedback: ErrorFeedback | None = None
        if config is not None:
            for direction in DIRECTIONS:
                options = getattr(config, direction)
                if options is not None:
                    self.codecs[direction] = make_codec(options)
            if config.uplink is not None and config.uplink.error_feedback:
                self.feedback = ErrorFeedback()
        self._layouts = {sum(s.numel() for s in shapes): list(shapes) for shapes in layouts}
        self._generator = torch.Generator().manual_seed(seed)
        self._states: dict[tuple[int, int], dict] = {}
        self._stand_in_bytes: dict[tuple[str, int], int] = {}

    @property
    def active(self) -> bool:
        return any(self.codecs.values())

    @property
    def vote_step(self) -> float | None:
        """signSGD's uplink: a FedAvg-family server steps this far along the majority vote."""
        codec = self.codecs["uplink"]
        return codec.server_lr if isinstance(codec, SignSGD) else None

    def raw_bytes(self, tensors: Sequence[torch.Tensor]) -> int:
        """Bytes of tensors sent as they are, at the scenario's precision."""
        return sum(t.numel() for t in tensors) * self._bits_per_param // 8

    def encode_s(self, tensors: Sequence[torch.Tensor]) -> float:
        """Seconds the sender's device spends encoding an uplink message (0: free)."""
        if self.codecs["uplink"] is None or self.config is None:
            return 0.0
        return self.config.codec_s_per_mparam * sum(t.numel() for t in tensors) / 1e6

    def send(
        self,
        direction: str,
        sender: int,
        tensors: Sequence[torch.Tensor],
        references: Sequence[torch.Tensor | None] = (),
    ) -> tuple[int, tuple[torch.Tensor, ...]]:
        """(bytes on the air, the tensors the receiver decodes) of one message."""
        codec = self.codecs[direction]
        if codec is None:
            return self.raw_bytes(tensors), tuple(tensors)
        references = list(references) + [None] * (len(tensors) - len(references))
        nbytes, received = 0, []
        for position, (tensor, reference) in enumerate(zip(tensors, references, strict=True)):
            shapes = self._layouts.get(tensor.numel())
            if shapes is None:  # not a model: sent as it is
                nbytes += self.raw_bytes([tensor])
                received.append(tensor)
            elif tensor.is_meta:
                nbytes += self._stand_in(direction, codec, shapes)
                received.append(tensor)
            else:
                size, decoded = self._encode(codec, (sender, position), tensor, reference, shapes)
                nbytes += size
                received.append(decoded)
        return nbytes, tuple(received)

    def _encode(
        self,
        codec: Codec,
        key: tuple[int, int],
        tensor: torch.Tensor,
        reference: torch.Tensor | None,
        shapes: list[torch.Size],
    ) -> tuple[int, torch.Tensor]:
        x = tensor.detach().to("cpu", torch.float32)
        if reference is not None:
            reference = reference.detach().to("cpu", torch.float32)
            x = x - reference
        feedback = self.feedback if key[0] != SERVER else None
        if feedback is not None:
            x = feedback.corrected(key, x)
        context = Context(shapes, self._generator, self._states.setdefault(key, {}))
        data = codec.encode(x, context)
        decoded = codec.decode(data, x.numel(), context)
        if feedback is not None:
            feedback.keep(key, x, decoded)
        if reference is not None:
            decoded = reference + decoded
        return len(data), decoded.to(tensor.device, tensor.dtype)

    def _stand_in(self, direction: str, codec: Codec, shapes: list[torch.Size]) -> int:
        numel = sum(s.numel() for s in shapes)
        if (direction, numel) not in self._stand_in_bytes:
            generator = torch.Generator().manual_seed(numel)
            x = torch.randn(numel, generator=generator)
            data = codec.encode(x, Context(shapes, generator))
            self._stand_in_bytes[direction, numel] = len(data)
        return self._stand_in_bytes[direction, numel]

    def model_message_bytes(self, direction: str, numel: int) -> int:
        """Bytes of one message of a model of ``numel`` numbers in ``direction``."""
        codec = self.codecs[direction]
        if codec is None:
            return numel * self._bits_per_param // 8
        return self._stand_in(direction, codec, self._layouts[numel])

    def forget(self, client: int) -> None:
        """A client left for good: its residuals and codec state go with it."""
        if self.feedback is not None:
            self.feedback.forget(client)
        for key in [k for k in self._states if k[0] == client]:
            del self._states[key]

    def state_bytes(self) -> int:
        """Memory of the residuals and codec states kept for the senders."""
        states = sum(
            q.numel() * q.element_size()
            for state in self._states.values()
            for factors in state.values()
            for q in factors
            if q is not None
        )
        return states + (self.feedback.nbytes() if self.feedback is not None else 0)
