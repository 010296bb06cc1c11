"""Which PRBs of a frequency-selective band a transport block holds, per subband: what its
effective SINR (EESM) is taken over. A share a scheduler placed (``Held``) holds the PRBs it
was given, and a block on fewer of them takes those on the strongest subbands; a share no
scheduler placed (equal, fixed and TDMA shares, the downlink, D2D) sits where the channel did
not choose, as ``fading.placement`` says:

- ``contiguous`` (the default): its PRBs in a row from a start drawn per transmission, as NR's
  resource allocation type 1 places them without frequency hopping (TS 38.214 §6.1.2.2.2 for
  PUSCH, §5.1.2.2.2 with the non-interleaved VRB-to-PRB mapping for PDSCH; hopping is off
  unless RRC configures ``frequencyHopping``, TS 38.331 PUSCH-Config);
- ``hopping``: inter-slot frequency hopping (TS 38.214 §6.3.1): even slots at the start, odd
  ones ⌊N/2⌋ PRBs further round the band (the offset half the bandwidth part), each in a row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from fedsim.sim.selective import SubbandGrid

PLACEMENTS = ("contiguous", "hopping")


class Placement(Protocol):
    hops: int  # positions a share's blocks take in turn, slot by slot

    def weights(self, prbs: int, hop: int) -> np.ndarray:
        """The PRBs a block on ``prbs`` PRBs holds on each subband, at the hop."""

    def weights_upto(self, most: int, hop: int) -> np.ndarray:
        """``weights`` of blocks on 1..``most`` PRBs, one row each: (most, subbands)."""


@dataclass(frozen=True, eq=False)
class Held:
    """The PRBs a scheduler gave, per subband; a block on fewer takes them from the strongest
    subband down (``order``: the subbands, strongest first by the transmitter's estimate)."""

    prbs: np.ndarray  # per subband (floats)
    order: np.ndarray
    hops = 1

    def weights(self, prbs: int, hop: int = 0) -> np.ndarray:
        return self.weights_upto(prbs, hop)[prbs - 1]

    def weights_upto(self, most: int, hop: int = 0) -> np.ndarray:
        held = self.prbs[self.order]
        counts = np.arange(1, most + 1, dtype=float)[:, None]
        weights = np.zeros((most, len(self.prbs)))
        weights[:, self.order] = np.clip(counts - (np.cumsum(held) - held), 0.0, held)
        return weights


@dataclass(frozen=True, eq=False)
class InARow:
    """A share no scheduler placed: ``prbs`` PRBs in a row from ``start`` (moved down to fit
    in the band), at one position (contiguous) or at two taking slots in turn (hopping)."""

    grid: SubbandGrid
    start: int
    hops: int = 1

    def weights(self, prbs: int, hop: int = 0) -> np.ndarray:
        return self.weights_upto(prbs, hop)[prbs - 1]

    def weights_upto(self, most: int, hop: int = 0) -> np.ndarray:
        total = self.grid.num_prbs
        counts = np.arange(1, most + 1)
        firsts = np.minimum((self.start + hop * (total // 2)) % total, total - counts)
        return self.grid.overlap(firsts[:, None], counts[:, None])


def unscheduled(name: str, grid: SubbandGrid, u: float) -> InARow:
    """The placement ``name`` (``PLACEMENTS``) of a share no scheduler placed, its start the
    uniform ``u`` of the transmission's draws over the band's PRBs."""
    if name not in PLACEMENTS:
        raise ValueError(f"unknown placement {name!r}: one of {', '.join(PLACEMENTS)}")
    return InARow(grid, int(u * grid.num_prbs), hops=2 if name == "hopping" else 1)
