"""Update compression: what a codec puts on the air, bit for bit, and what the receiver gets.

Each codec turns a flat float32 vector into bytes (``encode``) and bytes back into a vector
(``decode``). The bytes are really produced (bit-packed with numpy), so a message's size is
the length of its encoding, headers and scales included; the receiver uses the decoder's
output, so the learning sees exactly the error the channel carries. Bit counts (d numbers,
b buckets, k kept, L layers; scales and values are float32):

- ``cast``: fp16 / bf16, 16·d; int8, 32 per layer (its scale max|x|/127) + 8·d.
- ``qsgd`` (Alistarh et al. 2017): per bucket a float32 norm; per number a level
  l = ⌊s|x|/‖x‖ + u⌋ (stochastic rounding, unbiased) and a sign. ``fixed`` coding spends
  1 + ⌈log2(s+1)⌉ bits on each; ``elias`` codes l + 1 in Elias gamma (2⌊log2(l+1)⌋ + 1
  bits) and a sign bit only where l > 0: 32·b + Σ(2⌊log2(l+1)⌋ + 1) + nnz.
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
    """QSGD with ``levels`` = s quantization levels per bucket of ``bucket_size`` numbers."""

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
            bits = _elias_gamma(levels + 1, sign=np.where(levels > 0, negative, -1))
        return np.concatenate([norms.numpy().view(np.uint8), np.packbits(bits)])

    def decode(self, data: np.ndarray, numel: int, context: Context) -> torch.Tensor:
        num_buckets = self._buckets(numel)
        norms = data[: 4 * num_buckets].view(np.float32)
        bits = np.unpackbits(data[4 * num_buckets :])
        if self.coding == "fixed":
            fields = bits[: numel * (1 + self.level_bits)].reshape(numel, 1 + self.level_bits)
            negative, levels = fields[:, 0].astype(bool), _from_bits(fields[:, 1:])
        else:
            levels, negative = _elias_gamma_decode(bits, numel)
            levels -= 1
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


def _elias_gamma(values: np.ndarray, sign: np.ndarray) -> np.ndarray:
    """The Elias gamma codes of ``values`` (≥ 1), each followed by its ``sign`` bit where
    sign ≥ 0 (−1: none), concatenated: N zeros, then the N + 1 bits of the value."""
    floor_log = np.floor(np.log2(values)).astype(np.int64)
    has_sign = sign >= 0
    lengths = 2 * floor_log + 1 + has_sign
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    bits = np.zeros(int(lengths.sum()), dtype=np.uint8)
    for n in np.unique(floor_log):  # a few code lengths: one vectorised pass each
        rows = np.flatnonzero(floor_log == n)
        body = _to_bits(values[rows], n + 1)
        positions = starts[rows, None] + n + np.arange(n + 1)
        bits[positions] = body
    bits[(starts + lengths - 1)[has_sign]] = sign[has_sign]
    return bits


def _elias_gamma_decode(bits: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` (value, negative) pairs back from ``_elias_gamma``'s stream (a value of 1
    has no sign bit).

    Where each code starts depends on every code before it; instead of a loop over the
    codes, every bit position gets the position its code would end at if one started
    there, and the starts are that map's orbit from 0, by doubling: O(n log n) in numpy.
    """
    n = len(bits)
    ones = np.flatnonzero(bits)
    next_one = np.full(n + 1, n, dtype=np.int64)  # first 1 at or after each position
    next_one[ones] = ones
    next_one = np.minimum.accumulate(next_one[::-1])[::-1]
    zeros = next_one[:n] - np.arange(n)
    max_zeros = int(np.max(zeros[next_one[:n] < n], initial=0))
    width = max_zeros + 1
    padded = np.concatenate([bits, np.zeros(2 * width + 2, dtype=np.uint8)]).astype(np.int64)
    # value if a code started at p: the N + 1 bits from the first 1 on
    value = np.zeros(n, dtype=np.int64)
    for w in range(1, width + 1):
        rows = np.flatnonzero(zeros == w - 1)
        window = padded[next_one[rows, None] + np.arange(w)]
        value[rows] = (window << np.arange(w - 1, -1, -1)).sum(axis=1)
    lengths = 2 * zeros + 1 + (value > 1)
    follow = np.minimum(np.arange(n) + lengths, n)  # where the next code starts
    jump = np.append(follow, n)
    starts = np.array([0], dtype=np.int64) if n else np.zeros(0, dtype=np.int64)
    while len(starts) < count:
        grown = np.unique(np.concatenate([starts, jump[starts]]))
        grown = grown[grown < n][:count]
        if len(grown) == len(starts):
            raise ValueError(f"the stream holds {len(starts)} Elias codes, not {count}")
        starts = grown
        jump = jump[jump]
    starts = np.sort(starts)[:count]
    values = value[starts]
    negative = (values > 1) & (padded[starts + lengths[starts] - 1] == 1)
    return values, negative
