"""A run's codecs between an algorithm's tensors and the bytes on the air.

The World's send primitives hand every message here: a tensor with as many numbers as a
model of the run (a model, an update, a gradient, a control variate) is encoded by the
direction's codec, and the message's bytes are the encodings' lengths; anything else (a
cluster index, mixing weights, a variance) travels at the scenario's ``precision_bits``.
The receiver gets what the decoder produced. On the uplink the codec compresses the
*update*, the tensor minus the ``reference`` its sender received, and the receiver adds the
reference back; without a reference (an update already, or the downlink's models) it
compresses the tensor itself.

Peer messages (``peer``) carry a sender's model the way CHOCO-SGD does (Koloskova, Stich,
Jaggi, ICML 2019): every sender has a *public copy* x̂ of its model, which its neighbours
hold too (zero at first). A new model x goes out, once for all its receivers, as
q = C(x − x̂), and both ends set x̂ ← x̂ + q; the receiver uses x̂. The compression error
stays with the sender in x − x̂ and goes out with a later difference, so the copy needs no
residual of its own. The rule needs a contractive codec, E‖x − x̂_new‖² < ‖x − x̂‖²: an
unbiased one with variance factor ω (QSGD, rescaled rand-k) is applied as C(·)/(1 + ω), as
in the paper's examples of compression operators; unscaled, the copy of a QSGD s = 4
sender drifts away geometrically (ω ≈ 5.7 for buckets of 512). A receiver that missed one
of the sender's differences (a lost message, a peer it never heard from) cannot apply the
next: it gets the whole copy x̂ at the scenario's precision instead (its bytes count), which
puts it back in step. Other model-sized tensors of a peer message (a gradient) are
compressed as they are, with a residual per (sender, receiver) under ``error_feedback``.

Error feedback keeps one flat float32 residual per (sender, tensor of the message), made at
its first message and dropped when the client leaves; PowerSGD's warm start and the public
copies likewise. A timing-only run (meta tensors) counts each codec's bytes once per shape:
exact for every codec whose size depends only on the shape; QSGD's Elias coding depends on the
values, so it is counted on a real model and update when the budget gives them (``size_on``:
a seeded short training, ``fedsim.budget.representative_update``), else on a seeded
standard-normal tensor, which a trained update's heavier tails code 1.5–2.4× smaller.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass

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
    involves,
)

SERVER = -1  # the sender of the downlink's messages
DIRECTIONS = ("uplink", "downlink", "peer")


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


@dataclass
class PublicCopy:
    """x̂, a sender's model as its neighbours hold it, and the difference last sent."""

    value: torch.Tensor  # flat float32 (meta in a timing-only run)
    version: int = 0  # how many differences have gone out
    model: weakref.ref | None = None  # the model behind the last difference (not kept alive)
    delta_bytes: int = 0


@dataclass
class PeerMessage:
    """One encoded peer message: its bytes, the tensors the receiver decodes, how many
    numbers were newly encoded for it, and the public copy's version it brings."""

    nbytes: int
    received: tuple[torch.Tensor, ...]
    encoded_numel: int = 0
    version: int | None = None


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
        self.feedback: dict[str, ErrorFeedback] = {}
        if config is not None:
            for direction in DIRECTIONS:
                options = getattr(config, direction)
                if options is not None:
                    self.codecs[direction] = make_codec(options)
                    if options.error_feedback:
                        self.feedback[direction] = ErrorFeedback()
        self._layouts = {sum(s.numel() for s in shapes): list(shapes) for shapes in layouts}
        self._generator = torch.Generator().manual_seed(seed)
        self._states: dict[tuple[int, ...], dict] = {}
        self._stand_in_bytes: dict[tuple[str, int], int] = {}
        self._samples: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # numel -> model, update
        self._public: dict[int, PublicCopy] = {}
        self._known: dict[tuple[int, int], int] = {}  # (sender, receiver) -> version held

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
        return self.number_bytes(sum(t.numel() for t in tensors))

    def number_bytes(self, count: int) -> int:
        """Bytes of ``count`` numbers sent as they are, at the scenario's precision."""
        return count * self._bits_per_param // 8

    def codec_s(self, numel: int, direction: str = "uplink") -> float:
        """Seconds a device spends encoding or decoding ``numel`` numbers (0: free)."""
        if self.codecs[direction] is None or self.config is None:
            return 0.0
        return self.config.codec_s_per_mparam * numel / 1e6

    def coded_numel(self, tensors: Sequence[torch.Tensor]) -> int:
        """How many numbers of a message a codec encodes (those of model-sized tensors)."""
        return sum(t.numel() for t in tensors if t.numel() in self._layouts)

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
            size, decoded = self._tensor(direction, (sender, position), tensor, reference)
            nbytes += size
            received.append(decoded)
        return nbytes, tuple(received)

    def send_peer(
        self, sender: int, receiver: int, tensors: Sequence[torch.Tensor], own_model: bool
    ) -> PeerMessage:
        """One peer message; ``own_model``: the first tensor is the sender's current model,
        which goes out against its public copy."""
        codec = self.codecs["peer"]
        if codec is None:
            return PeerMessage(self.raw_bytes(tensors), tuple(tensors))
        message = PeerMessage(0, ())
        if own_model and tensors[0].numel() in self._layouts:
            message = self._public_copy(codec, sender, receiver, tensors[0])
            tensors = tensors[1:]
        received = list(message.received)
        for position, tensor in enumerate(tensors, start=len(received)):
            size, decoded = self._tensor("peer", (sender, position, receiver), tensor, None)
            message.nbytes += size
            received.append(decoded)
        message.received = tuple(received)
        message.encoded_numel += self.coded_numel(tensors)
        return message

    def _public_copy(
        self, codec: Codec, sender: int, receiver: int, model: torch.Tensor
    ) -> PeerMessage:
        """The sender's model as its public copy: a new difference if the model is new, and
        the whole copy for a receiver that is not one difference behind."""
        copy = self._public.get(sender)
        if copy is None:
            zeros = torch.zeros(model.numel(), device="meta" if model.is_meta else "cpu")
            copy = self._public[sender] = PublicCopy(zeros)
        fresh = copy.model is None or copy.model() is not model
        if fresh:
            shapes = self._layouts[model.numel()]
            if model.is_meta:
                copy.delta_bytes, copy.value = self._stand_in("peer", codec, shapes), model
            else:
                x = model.detach().to("cpu", torch.float32) - copy.value
                copy.delta_bytes, q = self._roundtrip(codec, (sender,), x, shapes)
                shrink = 1 + codec.variance_factor(x.numel())  # unbiased codecs: C(x)/(1 + ω)
                copy.value = copy.value + q / shrink
            copy.version += 1
            copy.model = weakref.ref(model)
        in_step = self._known.get((sender, receiver), 0) >= copy.version - 1
        nbytes = copy.delta_bytes if in_step else self.raw_bytes([model])
        decoded = copy.value if model.is_meta else copy.value.to(model.device, model.dtype)
        return PeerMessage(nbytes, (decoded,), model.numel() if fresh else 0, copy.version)

    def delivered(self, sender: int, receiver: int, version: int | None) -> None:
        """A peer message reached its receiver, which now holds that version of the copy."""
        if version is not None:
            self._known[sender, receiver] = version

    def public_model(self, sender: int) -> torch.Tensor | None:
        """x̂: the sender's model as its neighbours hold it (None before its first one)."""
        copy = self._public.get(sender)
        return None if copy is None else copy.value

    def _tensor(
        self,
        direction: str,
        key: tuple[int, ...],
        tensor: torch.Tensor,
        reference: torch.Tensor | None,
    ) -> tuple[int, torch.Tensor]:
        """One tensor of a message: (its bytes, as decoded)."""
        codec = self.codecs[direction]
        shapes = self._layouts.get(tensor.numel())
        if codec is None or shapes is None:  # not a model: sent as it is
            return self.raw_bytes([tensor]), tensor
        if tensor.is_meta:
            return self._stand_in(direction, codec, shapes), tensor
        feedback = self.feedback.get(direction) if key[0] != SERVER else None
        return self._encode(codec, key, tensor, reference, shapes, feedback)

    def _encode(
        self,
        codec: Codec,
        key: tuple[int, ...],
        tensor: torch.Tensor,
        reference: torch.Tensor | None,
        shapes: list[torch.Size],
        feedback: ErrorFeedback | None,
    ) -> tuple[int, torch.Tensor]:
        x = tensor.detach().to("cpu", torch.float32)
        if reference is not None:
            reference = reference.detach().to("cpu", torch.float32)
            x = x - reference
        if feedback is not None:
            x = feedback.corrected(key, x)
        size, decoded = self._roundtrip(codec, key, x, shapes)
        if feedback is not None:
            feedback.keep(key, x, decoded)
        if reference is not None:
            decoded = reference + decoded
        return size, decoded.to(tensor.device, tensor.dtype)

    def _roundtrip(
        self, codec: Codec, key: tuple[int, ...], x: torch.Tensor, shapes: list[torch.Size]
    ) -> tuple[int, torch.Tensor]:
        """Encode x with the key's codec state: (its bytes, what the receiver decodes)."""
        context = Context(shapes, self._generator, self._states.setdefault(key, {}))
        data = codec.encode(x, context)
        return len(data), codec.decode(data, x.numel(), context)

    @property
    def sized_by_values(self) -> bool:
        """Whether a codec's size depends on the values it encodes (QSGD's Elias coding), so
        that a timing-only run needs a real model and update to count it (``size_on``)."""
        return any(isinstance(codec, QSGD) for codec in self.codecs.values())

    def size_on(self, model: torch.Tensor, update: torch.Tensor) -> None:
        """Count a timing-only run's messages of this many numbers on these tensors: the model
        where the downlink sends models, the update where the uplink and peers send updates
        and differences; other shapes stay on a standard-normal stand-in."""
        self._samples[model.numel()] = (model.flatten(), update.flatten())
        self._stand_in_bytes.clear()

    def _stand_in(self, direction: str, codec: Codec, shapes: list[torch.Size]) -> int:
        numel = sum(s.numel() for s in shapes)
        if (direction, numel) not in self._stand_in_bytes:
            generator = torch.Generator().manual_seed(numel)
            sample = self._samples.get(numel)
            if sample is None:
                x = torch.randn(numel, generator=generator)
            else:
                x = sample[0] if direction == "downlink" else sample[1]
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
        """A client left for good: its residuals, codec state and public copy go with it,
        and so do what its peers kept for it."""
        for feedback in self.feedback.values():
            feedback.forget(client)
        for key in [k for k in self._states if involves(k, client)]:
            del self._states[key]
        self._public.pop(client, None)
        for key in [k for k in self._known if client in k]:
            del self._known[key]

    def state_bytes(self) -> int:
        """Memory of the residuals and codec states kept for the senders."""
        states = sum(
            q.numel() * q.element_size()
            for state in self._states.values()
            for factors in state.values()
            for q in factors
            if q is not None
        )
        copies = sum(c.value.numel() * c.value.element_size() for c in self._public.values())
        return states + copies + sum(f.nbytes() for f in self.feedback.values())
