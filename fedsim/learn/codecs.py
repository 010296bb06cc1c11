"""Update compression: what a codec puts on the air, bit for bit, and what the receiver gets.

Each codec turns a flat float32 vector into bytes (``encode``) and bytes back into a vector
(``decode``). The bytes are really produced (bit-packed with numpy), so a message's size is
the length of its encoding, headers and scales included; the receiver uses the decoder's
output, so the learning sees exactly the error the channel carries. Bit counts (d numbers,
b buckets, k kept, L layers; scales and values are float32):

- ``cast``: fp16 / bf16, 16·d; int8, 32 per layer (its scale max|x|/127) + 8·d.
- ``qsgd`` (Alistarh et al. 2017): per bucket a float32 norm; per number a level
  l = ⌊s|x|/‖x‖ + u⌋ (stochastic rounding, unbiased) and a sign. ``fixed`` coding spends
  1 + ⌈log2(s+1)⌉ bits on each. ``elias`` is the paper's code (its Section 3.1): only the
  numbers with l > 0, each as the Elias recursive (ω) code of its distance from the
  previous one, a sign bit and ω(l), then ω(distance from the last to d + 1) to end:
  32·b + Σ_{l>0} (|ω(gap)| + 1 + |ω(l)|) + |ω(end)|, where |ω(k)| is 1 plus the bit
  lengths of k, ⌊log2 k⌋, ⌊log2 ⌊log2 k⌋⌋, ... while they exceed 1 (|ω(1)| = 1,
  |ω(2)| = |ω(3)| = 3, |ω(4..7)| = 6); ``QSGD`` says what the paper leaves open.
- ``topk``: the k largest magnitudes; k indices at ⌈log2 d⌉ bits each + k float32 values.
- ``randk`` (Stich et al. 2018): k numbers at indices drawn from a 32-bit seed sent along
  (32 + 32·k); scaled by d/k, unbiased, when ``rescale``.
- ``signsgd`` (Bernstein et al. 2018): one bit per number; decodes to ±``server_lr``
  (the step of the server's majority vote).
- ``ef_signsgd`` (Karimireddy et al. 2019): the scaled sign (‖x‖₁/d)·sign(x): 32 + d.
- ``powersgd`` (Vogels et al. 2019): each matrix-shaped layer (n × m, convolutions as
  out × rest) as rank-r factors P (n × r) and Q (m × r) from one power iteration warm-started
  at the sender's last Q: 32·r·(n + m); other layers (biases, or where the factors would
  not be smaller) as float32.

A codec is *biased* when E[decode(encode(x))] ≠ x (topk, signsgd, powersgd, and randk
without ``rescale``); error feedback (``ErrorFeedback``) corrects those.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

FLOAT_BITS = 32  # scales, norms and kept values travel as float32
SEED_BITS = 32


@dataclass
class Context:
    """What both ends know beside the bytes: the layers of a model-shaped vector (else
    one layer), the sender's random stream and its codec state (PowerSGD's warm start)."""

    shapes: Sequence[torch.Size]
    generator: torch.Generator
    state: dict[str, object] = field(default_factory=dict)


class Codec:
    """Encode a flat float32 vector to bytes and back."""

    name = "none"

    def encode(self, x: torch.Tensor, context: Context) -> np.ndarray:
        raise NotImplementedError

    def decode(self, data: np.ndarray, numel: int, context: Context) -> torch.Tensor:
        raise NotImplementedError

    def variance_factor(self, numel: int) -> float:
        """ω of an unbiased codec, E‖D(C(x)) − x‖² ≤ ω‖x‖² (0: a biased, contractive one).
        D(C(x))/(1 + ω) is then contractive, as CHOCO-SGD's public copies need."""
        return 0.0


class Cast(Codec):
    """fp16 / bf16 (rounded to nearest), or int8 with a symmetric scale per layer."""

    name = "cast"

    def __init__(self, dtype: str) -> None:
        if dtype not in ("fp16", "bf16", "int8"):
            raise ValueError(f"cast: dtype must be fp16, bf16 or int8, not {dtype!r}")
        self.dtype = dtype

    def encode(self, x: torch.Tensor, context: Context) -> np.ndarray:
        if self.dtype != "int8":
            half = x.to(torch.float16 if self.dtype == "fp16" else torch.bfloat16)
            return half.view(torch.int16).numpy().view(np.uint8).copy()
        parts = []
        for layer in _layers(x, context.shapes):
            scale = layer.abs().max() / 127 if layer.numel() else torch.tensor(0.0)
            scale = scale.reshape(1).to(torch.float32)
            codes = torch.round(layer / scale) if scale.item() > 0 else torch.zeros_like(layer)
            parts += [scale.numpy().view(np.uint8), codes.to(torch.int8).numpy().view(np.uint8)]
        return np.concatenate(parts)

    def decode(self, data: np.ndarray, numel: int, context: Context) -> torch.Tensor:
        if self.dtype != "int8":
            half = torch.from_numpy(data.view(np.int16).copy())
            return half.view(torch.float16 if self.dtype == "fp16" else torch.bfloat16).float()
        out, at = [], 0
        for size in _sizes(numel, context.shapes):
            scale = torch.from_numpy(data[at : at + 4].view(np.float32).copy())
            codes = torch.from_numpy(data[at + 4 : at + 4 + size].view(np.int8).copy())
            out.append(codes.float() * scale)
            at += 4 + size
        return torch.cat(out)


class QSGD(Codec):
    """QSGD with ``levels`` = s quantization levels per bucket of ``bucket_size`` numbers.

    ``elias`` is the code of Alistarh et al. (NeurIPS 2017, Section 3.1, "Efficient Coding
    of Gradients"): the norm in 32 bits; then "the position of the first nonzero entry" in
    Elias recursive coding, a bit for its sign and Elias(level); then for each further
    nonzero "the distance from the current coordinate to the next nonzero", its sign and
    its level the same way. Positions count from 1, so a distance is the run of zeros
    before the nonzero plus 1, and a level coded is ≥ 1. Elias recursive coding is Elias's
    ω code (Elias 1975; ``_elias_omega``): the binary of k preceded, recursively, by the
    code of its length, |Elias(k)| = log k + log log k + ... + 1.

    What the paper leaves open, and the choice made here:

    - Buckets (the paper's Section 4 quantizes each independently): the b norms come first,
      as float32 bytes, then one string for the whole vector whose distances run on across
      the buckets' boundaries (the receiver knows which bucket a position is in). The
      same bits as a norm before each bucket's nonzeros; restarting the distances at each
      bucket would need an end per bucket.
    - The end: the paper's decoder reads until its string ends; here the string ends with
      the ω code of the distance from the last nonzero to the position d + 1 (no sign, no
      level; ω(d + 1) for a vector of zero levels), so the zeros padding the message to
      whole bytes are never read as codes.
    - A sign bit of 1 is negative.

    The message is 4·b + ⌈bits/8⌉ bytes for the code's bits, exactly what ``encode``
    produces: bits = Σ over the nonzeros (|ω(gap)| + 1 + |ω(l)|) + |ω(end)|.
    """

    name = "qsgd"

    def __init__(self, levels: int, bucket_size: int | None, coding: str) -> None:
        if coding not in ("fixed", "elias"):
            raise ValueError(f"qsgd: coding must be fixed or elias, not {coding!r}")
        self.levels = levels
        self.bucket_size = bucket_size
        self.coding = coding
        self.level_bits = math.ceil(math.log2(levels + 1))

    def _buckets(self, numel: int) -> int:
        return 1 if not self.bucket_size else -(-numel // self.bucket_size)

    def quantize(
        self, x: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(norm per bucket, level per number, negative per number)."""
        numel = x.numel()
        width = numel if not self.bucket_size else self.bucket_size
        padded = torch.zeros(self._buckets(numel) * width)
        padded[:numel] = x
        buckets = padded.view(-1, width)
        norms = buckets.norm(dim=1).to(torch.float32)
        safe = torch.where(norms > 0, norms, torch.ones_like(norms))
        # A diverged update (inf, NaN) keeps its non-finite norm, which decodes to NaN.
        scaled = torch.nan_to_num(buckets.abs() / safe[:, None] * self.levels, nan=0.0)
        uniform = torch.rand(scaled.shape, generator=generator)
        levels = torch.floor(scaled + uniform).clamp_(max=self.levels).to(torch.int64)
        return norms, levels.reshape(-1)[:numel], (padded < 0)[:numel]

    def variance_factor(self, numel: int) -> float:
        width = min(numel, self.bucket_size or numel)  # the paper's bound, per bucket
        return min(width / self.levels**2, math.sqrt(width) / self.levels)

    def encode(self, x: torch.Tensor, context: Context) -> np.ndarray:
        norms, levels, negative = self.quantize(x, context.generator)
        levels, negative = levels.numpy(), negative.numpy()
        if self.coding == "fixed":
            bits = np.concatenate(
                [negative[:, None], _to_bits(levels, self.level_bits)], axis=1
            ).reshape(-1)
        else:
            bits = _qsgd_code(levels, negative)
        return np.concatenate([norms.numpy().view(np.uint8), np.packbits(bits)])

    def decode(self, data: np.ndarray, numel: int, context: Context) -> torch.Tensor:
        num_buckets = self._buckets(numel)
        norms = data[: 4 * num_buckets].view(np.float32)
        bits = np.unpackbits(data[4 * num_buckets :])
        if self.coding == "fixed":
            fields = bits[: numel * (1 + self.level_bits)].reshape(numel, 1 + self.level_bits)
            negative, levels = fields[:, 0].astype(bool), _from_bits(fields[:, 1:])
        else:
            levels, negative = _qsgd_decode(bits, numel, self.levels)
        width = numel if not self.bucket_size else self.bucket_size
        norm_of = np.repeat(norms, width)[:numel].astype(np.float64)
        with np.errstate(invalid="ignore"):  # a non-finite norm: NaN, as it was sent
            values = norm_of * levels / self.levels * np.where(negative, -1.0, 1.0)
        return torch.from_numpy(values.astype(np.float32))


class TopK(Codec):
    """Keep the k numbers of largest magnitude: their indices and values."""

    name = "topk"

    def __init__(self, fraction: float | None, count: int | None) -> None:
        self.fraction, self.count = fraction, count

    def kept(self, numel: int) -> int:
        k = self.count if self.count is not None else round(self.fraction * numel)
        return max(1, min(numel, k))

    def encode(self, x: torch.Tensor, context: Context) -> np.ndarray:
        k = self.kept(x.numel())
        indices = torch.topk(x.abs(), k, sorted=False).indices.sort().values
        index_bits = _to_bits(indices.numpy(), _index_bits(x.numel())).reshape(-1)
        return np.concatenate([x[indices].numpy().view(np.uint8), np.packbits(index_bits)])

    def decode(self, data: np.ndarray, numel: int, context: Context) -> torch.Tensor:
        k = self.kept(numel)
        values = torch.from_numpy(data[: 4 * k].view(np.float32).copy())
        width = _index_bits(numel)
        index_bits = np.unpackbits(data[4 * k :])[: k * width].reshape(k, width)
        out = torch.zeros(numel)
        out[torch.from_numpy(_from_bits(index_bits))] = values
        return out


class RandK(TopK):
    """Keep k numbers at random indices; the receiver draws the same indices from the seed."""

    name = "randk"

    def __init__(self, fraction: float | None, count: int | None, rescale: bool) -> None:
        super().__init__(fraction, count)
        self.rescale = rescale

    def variance_factor(self, numel: int) -> float:
        return numel / self.kept(numel) - 1 if self.rescale else 0.0

    def _indices(self, seed: int, numel: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(seed)
        return torch.randperm(numel, generator=generator)[: self.kept(numel)].sort().values

    def encode(self, x: torch.Tensor, context: Context) -> np.ndarray:
        seed = int(torch.randint(0, 2**32, (1,), generator=context.generator))
        values = x[self._indices(seed, x.numel())]
        return np.concatenate([np.array([seed], dtype=np.uint32).view(np.uint8),
                               values.numpy().view(np.uint8)])  # fmt: skip

    def decode(self, data: np.ndarray, numel: int, context: Context) -> torch.Tensor:
        seed = int(data[:4].view(np.uint32)[0])
        values = torch.from_numpy(data[4:].view(np.float32).copy())
        out = torch.zeros(numel)
        out[self._indices(seed, numel)] = values * (numel / values.numel() if self.rescale else 1)
        return out


class SignSGD(Codec):
    """One bit per number, sign(x) (0 counts as +); decodes to ±``server_lr``."""

    name = "signsgd"

    def __init__(self, server_lr: float) -> None:
        self.server_lr = server_lr

    def encode(self, x: torch.Tensor, context: Context) -> np.ndarray:
        return np.packbits((x >= 0).numpy())

    def decode(self, data: np.ndarray, numel: int, context: Context) -> torch.Tensor:
        positive = np.unpackbits(data)[:numel].astype(np.float32)
        return torch.from_numpy((2 * positive - 1) * np.float32(self.server_lr))


class ScaledSign(Codec):
    """EF-signSGD's compressor: (‖x‖₁/d)·sign(x), a float32 scale and one bit per number."""

    name = "ef_signsgd"

    def encode(self, x: torch.Tensor, context: Context) -> np.ndarray:
        scale = (x.abs().sum() / max(1, x.numel())).reshape(1).to(torch.float32)
        return np.concatenate([scale.numpy().view(np.uint8), np.packbits((x >= 0).numpy())])

    def decode(self, data: np.ndarray, numel: int, context: Context) -> torch.Tensor:
        scale = data[:4].view(np.float32)[0]
        positive = np.unpackbits(data[4:])[:numel].astype(np.float32)
        return torch.from_numpy((2 * positive - 1) * scale)


class PowerSGD(Codec):
    """Rank-``rank`` factors of each matrix-shaped layer by one warm-started power iteration."""

    name = "powersgd"

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def _factored(self, shape: torch.Size) -> tuple[int, int] | None:
        if len(shape) < 2:
            return None
        n, m = shape[0], math.prod(shape[1:])
        return (n, m) if self.rank * (n + m) < n * m else None

    def encode(self, x: torch.Tensor, context: Context) -> np.ndarray:
        shapes = _shapes(x.numel(), context.shapes)
        warm: list = context.state.setdefault("powersgd_q", [None] * len(shapes))
        parts = []
        for index, (layer, shape) in enumerate(zip(_layers(x, shapes), shapes, strict=True)):
            matrix = self._factored(shape)
            if matrix is None:
                parts.append(layer)
                continue
            m = layer.view(matrix)
            q = warm[index]
            if q is None:
                q = torch.randn(matrix[1], self.rank, generator=context.generator)
            p = torch.linalg.qr(m @ q).Q
            q = m.T @ p
            warm[index] = q
            parts += [p.reshape(-1), q.reshape(-1)]
        return torch.cat(parts).to(torch.float32).numpy().view(np.uint8).copy()

    def decode(self, data: np.ndarray, numel: int, context: Context) -> torch.Tensor:
        values = torch.from_numpy(data.view(np.float32).copy())
        out, at = [], 0
        for shape in _shapes(numel, context.shapes):
            matrix = self._factored(shape)
            if matrix is None:
                size = math.prod(shape)
                out.append(values[at : at + size])
                at += size
                continue
            n, m = matrix
            p = values[at : at + n * self.rank].view(n, self.rank)
            at += n * self.rank
            q = values[at : at + m * self.rank].view(m, self.rank)
            at += m * self.rank
            out.append((p @ q.T).reshape(-1))
        return torch.cat(out)


def involves(key: tuple[int, ...], client: int) -> bool:
    """Whether a sender's state key, (sender, tensor[, receiver]), names the client."""
    return key[0] == client or key[2:] == (client,)


class ErrorFeedback:
    """The sender's residual e (Seide et al. 2014; Karimireddy et al. 2019): it sends
    C(x + e) and keeps e ← x + e − D(C(x + e)), what the codec left out so far.

    One flat float32 vector per key (sender, tensor of its message[, receiver]), made at the
    key's first message (a newcomer starts at zero) and dropped when a client it names leaves
    (``forget``).
    """

    def __init__(self) -> None:
        self.residuals: dict[tuple[int, ...], torch.Tensor] = {}

    def corrected(self, key: tuple[int, ...], x: torch.Tensor) -> torch.Tensor:
        residual = self.residuals.get(key)
        return x if residual is None else x + residual

    def keep(self, key: tuple[int, ...], corrected: torch.Tensor, decoded: torch.Tensor) -> None:
        self.residuals[key] = corrected - decoded

    def forget(self, client: int) -> None:
        for key in [k for k in self.residuals if involves(k, client)]:
            del self.residuals[key]

    def nbytes(self) -> int:
        return sum(r.numel() * r.element_size() for r in self.residuals.values())


# -- bits ---------------------------------------------------------------------------------


def _layers(x: torch.Tensor, shapes: Sequence[torch.Size]) -> list[torch.Tensor]:
    return list(x.split(_sizes(x.numel(), shapes)))


def _shapes(numel: int, shapes: Sequence[torch.Size]) -> list[torch.Size]:
    """The layers of a vector of ``numel`` numbers: ``shapes`` if they add up, else one."""
    if sum(math.prod(shape) for shape in shapes) == numel:
        return list(shapes)
    return [torch.Size([numel])]


def _sizes(numel: int, shapes: Sequence[torch.Size]) -> list[int]:
    return [math.prod(shape) for shape in _shapes(numel, shapes)]


def _index_bits(numel: int) -> int:
    return max(1, math.ceil(math.log2(numel)))


def _to_bits(values: np.ndarray, width: int) -> np.ndarray:
    """Each value as ``width`` bits, most significant first: shape (n, width)."""
    shifts = np.arange(width - 1, -1, -1, dtype=np.int64)
    return ((values.astype(np.int64)[:, None] >> shifts) & 1).astype(np.uint8)


def _from_bits(bits: np.ndarray) -> np.ndarray:
    width = bits.shape[1]
    return (bits.astype(np.int64) << np.arange(width - 1, -1, -1, dtype=np.int64)).sum(axis=1)


def _bit_length(values: np.ndarray) -> np.ndarray:
    """The bits of each positive integer (< 2^53): ⌊log2 k⌋ + 1, exactly (frexp, no log)."""
    return np.frexp(values.astype(np.float64))[1].astype(np.int64)


def _pack(values: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """Each value in its width of bits, most significant first, concatenated in order (the
    arrays' row-major order); a width of 0 writes nothing."""
    used = widths.reshape(-1) > 0
    values, widths = values.reshape(-1)[used], widths.reshape(-1)[used].astype(np.int32)
    ends = np.cumsum(widths, dtype=np.int64)
    if not len(ends):
        return np.zeros(0, dtype=np.uint8)
    index = np.int32 if ends[-1] < 2**31 else np.int64
    field = np.repeat(np.arange(len(widths), dtype=index), widths)  # each bit's field
    shift = ends.astype(index)[field] - 1 - np.arange(len(field), dtype=index)  # from the right
    return ((values[field] >> shift) & 1).astype(np.uint8)


def _elias_omega(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Elias's recursive (ω) codes of ``values`` (≥ 1), as fields for ``_pack``: one row per
    value of (value, width) fields, ω(k) = [ω-groups of the length] k in binary, 0.

    The code ends in a 0; before it k in binary (if k > 1), before that the bit length of
    k minus 1 in binary (if that is > 1), and so on: ω(1) = 0, ω(2) = 10 0, ω(3) = 11 0,
    ω(4) = 10 100 0, ω(11) = 11 1011 0, ω(16) = 10 100 10000 0. Its length is 1 plus the
    bit lengths of the groups: about log k + log log k + ... + 1 (Elias 1975)."""
    groups = [values.astype(np.int64)]  # k, then bit length − 1 while it is > 1
    while (groups[-1] > 1).any():
        groups.append(np.where(groups[-1] > 1, _bit_length(groups[-1]) - 1, 1))
    groups = groups[:-1][::-1]  # the innermost length first, k last
    numbers = np.stack([*groups, np.zeros_like(values, dtype=np.int64)], axis=1)
    widths = np.where(numbers > 1, _bit_length(np.maximum(numbers, 1)), 0)
    widths[:, -1] = 1  # the closing 0
    return numbers, widths


def _elias_omega_parse(bits: np.ndarray, max_width: int) -> tuple[np.ndarray, np.ndarray]:
    """(end, value) of the ω code that would start at each bit position: where it ends (the
    next code's start) and its number; ``len(bits)`` and 0 where none can start (it runs
    past the stream, or a group is wider than ``max_width`` bits, more than any number the
    stream holds). Both arrays have two more entries, ``len(bits)`` and 0, for the ends.

    ω decodes from N = 1: a 0 ends the code with N; a 1 starts a group of N + 1 bits whose
    number is the next N. Every position at once, a group at a time (at most 5 for any
    64-bit number), reading a group from a 64-bit window of the bytes at each position."""
    if max_width > 56:
        raise ValueError(f"Elias groups of {max_width} bits: more than 56")
    m = len(bits)
    raw = np.concatenate([np.packbits(bits), np.zeros(9, dtype=np.uint8)])
    words = np.ndarray((len(raw) - 7,), dtype=">u8", buffer=raw, strides=(1,))
    words = words.astype(np.uint64)  # the 64 bits from each byte on
    end = np.full(m + 2, m, dtype=np.int64)
    value = np.zeros(m + 2, dtype=np.int64)
    at = np.arange(m, dtype=np.int64)  # the codes' starts still being read
    pos, number = at.copy(), np.ones(m, dtype=np.int64)
    while len(at):
        inside = pos < m
        at, pos, number = at[inside], pos[inside], number[inside]
        closed = bits[pos] == 0
        end[at[closed]] = pos[closed] + 1
        value[at[closed]] = number[closed]
        more = ~closed & (number < max_width)  # its group of number + 1 bits fits the width
        at, pos, number = at[more], pos[more], number[more]
        width = (number + 1).astype(np.uint64)
        window = words[pos >> 3] << (pos & 7).astype(np.uint64)  # ≥ 57 bits from pos on
        number = (window >> (np.uint64(64) - width)).astype(np.int64)
        pos = pos + width.astype(np.int64)
    return end, value


def _qsgd_code(levels: np.ndarray, negative: np.ndarray) -> np.ndarray:
    """Alistarh et al.'s string for the levels and signs of a vector (its norms apart): for
    each nonzero level, ω(distance from the previous nonzero, or position + 1 for the first),
    its sign bit (1: negative), ω(level); then ω(distance to position d + 1), the end."""
    nonzero = np.flatnonzero(levels)
    gaps = np.diff(nonzero, prepend=-1, append=len(levels))  # the last one: to d + 1
    gap_numbers, gap_widths = _elias_omega(gaps)
    level_numbers, level_widths = _elias_omega(np.append(levels[nonzero], 1))
    level_widths[-1] = 0  # the end has no sign and no level
    sign = np.append(negative[nonzero], 0).astype(np.int64)[:, None]
    numbers = np.concatenate([gap_numbers, sign, level_numbers], axis=1)
    widths = np.concatenate([gap_widths, np.ones_like(sign), level_widths], axis=1)
    widths[-1, gap_widths.shape[1]] = 0
    return _pack(numbers, widths)


def _qsgd_decode(bits: np.ndarray, count: int, levels: int) -> tuple[np.ndarray, np.ndarray]:
    """(level, negative) of each of ``count`` numbers back from ``_qsgd_code``'s bits (and
    any padding after them).

    Where each nonzero's record (gap, sign, level) starts depends on every record before
    it; instead of a loop over the records, every bit position gets the position the next
    record would start at if one started there, and the records' starts are that map's
    orbit from 0, by doubling: O(m log nnz) in numpy for m bits."""
    m = len(bits)
    max_width = max(1, int(_bit_length(np.array([max(count + 1, levels)]))[0]))
    end, value = _elias_omega_parse(bits, max_width)
    sign_at = end  # after the gap's code
    jump = end[sign_at + 1]  # after the level's code: the next record (m: none)
    jump = jump.astype(np.int32 if m < 2**31 - 2 else np.int64)
    starts = np.zeros(1, dtype=jump.dtype)  # the first 2^k records, then (jump) J^(2^k)
    while starts[-1] < m:
        starts = np.concatenate([starts, jump[starts]])
        if starts[-1] < m:
            jump = jump[jump]
    starts = starts[: np.searchsorted(starts, m)]
    positions = np.cumsum(value[starts])  # 1-based; the end's is count + 1
    nonzeros = int(np.searchsorted(positions, count + 1))
    if nonzeros == len(positions) or positions[nonzeros] != count + 1:
        raise ValueError(f"the stream holds no QSGD code of {count} numbers")
    starts, positions = starts[:nonzeros], positions[:nonzeros] - 1
    level = value[sign_at[starts] + 1]
    if len(level) and not 1 <= level.min() <= level.max() <= levels:
        raise ValueError(f"the stream holds levels outside 1..{levels}")
    out_levels = np.zeros(count, dtype=np.int64)
    out_negative = np.zeros(count, dtype=bool)
    out_levels[positions] = level
    out_negative[positions] = bits[sign_at[starts]] == 1  # before m: its level followed
    return out_levels, out_negative
