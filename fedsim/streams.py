"""Seeded random streams, one per purpose and key: the bottom layer every other one draws from."""

from __future__ import annotations

import zlib

import numpy as np


class RandomStreams:
    """Independent, reproducible random streams per purpose and key (e.g. client id).

    Keyed derivation (not one shared generator) means that adding a client, an
    algorithm or an extra draw somewhere never shifts the numbers used elsewhere.
    """

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def _sequence(self, purpose: str, keys: tuple[int, ...]) -> np.random.SeedSequence:
        return np.random.SeedSequence(self.seed, spawn_key=(zlib.crc32(purpose.encode()), *keys))

    def generator(self, purpose: str, *keys: int) -> np.random.Generator:
        return np.random.default_rng(self._sequence(purpose, keys))

    def integer_seed(self, purpose: str, *keys: int) -> int:
        """A 63-bit seed (for torch generators and library calls that take an int)."""
        return int(self._sequence(purpose, keys).generate_state(1, np.uint64)[0] >> np.uint64(1))
