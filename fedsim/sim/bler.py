"""Block error rate of an NR code block at an SNR, per MCS and code-block size: the curves a
link layer picks its MCS and draws its transport-block failures from.

Two sources, each read or computed once at start:
- ``sionna``: the PUSCH/PDSCH BLER tables NVIDIA's Sionna (``sionna-no-rt``, Apache-2.0)
  ships for 5G NR (LDPC, QAM, simulated on AWGN), read from its package folder without
  importing it (its import pulls in torch), and read as Sionna's ``PHYAbstraction`` reads
  them: log10 BLER bilinear in (code-block size, SNR dB), the edge curve beyond (code blocks
  above 2000 bits use the 2000-bit curve), the SNR rounded to 0.1 dB within [-5, 30] dB and
  the size to 100 bits.
  The MCS the tables lack (0-2 of the 64QAM table: the lowest, where coverage ends) take the
  built-in curves, so the link keeps NR's whole MCS range.
- ``builtin``, chosen, or the fallback where Sionna's tables are not found (``auto`` then
  warns: ``fedsim.config.link``): the normal approximation of the finite-length Gaussian
  channel (Polyanskiy, Poor and Verdú, IEEE Trans. IT 2010), a code block of K bits at spectral
  efficiency η using n = K/η channel uses: BLER = Q((n(C − η) + ½log2 n) / √(nV)), C and V
  the capacity and dispersion at SNR/L, with L a loss per modulation order fitted to Sionna
  2.2's tables (mean shift at BLER 10% over code blocks of 100 bits and more; sd 0.3 dB;
  ``LOSS_DB``): what practical LDPC and QAM give away to the bound.
The SNR is per resource element, over the band the transmission occupies. Every curve is
tabulated once on a 0.1 dB grid from -20 to 40 dB (``GRID_SNR_DB``), so that the link reads
a transport block's error rate with one index, the SNR rounded to the grid as Sionna does.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache

import numpy as np
from scipy.special import ndtr

from fedsim.sim.nr import MCS_TABLE_INDEX, Mcs, mcs_table
from fedsim.sim.readers import sionna_tables_folder

SNR_STEP_DB = 0.1  # curves are read at SNRs rounded to this grid (Sionna's default)
CBS_STEP = 100  # ... and code-block sizes rounded to 24 + 100 k bits (likewise)
SIONNA_SNR_DB = (-5.0, 30.0)  # ... Sionna's tables within these bounds (its default grid)
GRID_SNR_RANGE_DB = (-20.0, 40.0)  # ... the built-in curves within these: below, no MCS works
CBS_RANGE = (24, 8424)
SOURCES = ("sionna", "builtin")
BUILTIN_CBS = (24, 100, 500, 1000, 2000, 4000, 8448)  # the bound is exact for any size
BUILTIN_SNR_DB = np.arange(-20.0, 40.01, 0.25)
# dB given away to the finite-length bound, per direction and modulation order (builtin
# source): fitted to Sionna 2.2's PUSCH table 1 (uplink) and PDSCH tables 1-2 (downlink).
LOSS_DB = {
    "uplink": {2: 0.8, 4: 1.2, 6: 2.7, 8: 2.1},
    "downlink": {2: 0.8, 4: 1.2, 6: 1.9, 8: 2.1},
}
# Sionna's file per direction and MCS table. Its PUSCH table 2 lies some 9 dB below the
# finite-length bound of the Gaussian channel (no code can beat it: it was simulated with
# other MCS than 38.214's Table 5.1.3.1-2), so a 256QAM uplink uses PDSCH table 2's curves.
SIONNA_FILES = {
    ("uplink", "64qam"): "PUSCH_table1.json",
    ("uplink", "256qam"): "PDSCH_table2.json",
    ("downlink", "64qam"): "PDSCH_table1.json",
    ("downlink", "256qam"): "PDSCH_table2.json",
}


@dataclass(frozen=True)
class Curve:
    """log10 BLER of one MCS on a grid of code-block sizes (rows) and SNRs in dB (columns)."""

    cbs: np.ndarray
    snr_db: np.ndarray
    log_bler: np.ndarray
    zero_below: float = -math.inf  # a table's zeros: interpolated values under its least one
    clamp_db: tuple[float, float] = (-math.inf, math.inf)  # SNRs read at the nearest bound

    def at(self, snr_db: np.ndarray, cb_size: float) -> np.ndarray:
        """Bilinear in (code-block size, SNR dB) of log10 BLER; the edge values beyond."""
        i, u = _cell(self.cbs, cb_size)
        row = self.log_bler[i] + u * (self.log_bler[i + 1] - self.log_bler[i])
        log_bler = np.interp(np.clip(snr_db, *self.clamp_db), self.snr_db, row)
        return np.where(log_bler < self.zero_below, 0.0, 10.0**log_bler)


def _cell(grid: np.ndarray, value: float) -> tuple[int, float]:
    """The grid cell holding value (clamped to the grid) and the position within it."""
    value = min(max(value, grid[0]), grid[-1])
    i = min(int(np.searchsorted(grid, value, side="right")) - 1, len(grid) - 2)
    return i, (value - grid[i]) / (grid[i + 1] - grid[i])


class BlerCurves:
    """Code-block BLER per MCS of one table and direction."""

    def __init__(self, direction: str, table: str, source: str) -> None:
        if source not in SOURCES:
            raise ValueError(f"BLER source must be one of {SOURCES}, got {source!r}")
        self.direction, self.table, self.source = direction, table, source
        self.mcs = mcs_table(table)
        self.curves: dict[int, Curve] = (
            self._from_sionna() if source == "sionna" else self._from_bound()
        )

    def _from_sionna(self) -> dict[int, Curve]:
        folder = sionna_tables_folder()
        if folder is None:
            raise ValueError("Sionna's BLER tables are not installed (sionna-no-rt)")
        document = json.loads((folder / SIONNA_FILES[self.direction, self.table]).read_text())
        [category] = document["category"].values()
        [index] = category["index"].values()
        curves = {}
        for key, entry in index["MCS"].items():
            sizes = sorted(entry["CBS"], key=int)
            bler = np.array([entry["CBS"][cbs]["BLER"] for cbs in sizes], dtype=float)
            least = np.log10(bler[bler > 0].min()) if (bler > 0).any() else -12.0
            zeros = bool((bler == 0).any())  # as Sionna: 100 times below the least, then 0
            log_bler = np.where(bler > 0, np.log10(np.maximum(bler, 1e-300)), least - 2)
            curves[int(key)] = Curve(
                np.array(sizes, dtype=float), np.asarray(entry["SNR_db"], dtype=float),
                log_bler, least if zeros else -math.inf, SIONNA_SNR_DB,
            )  # fmt: skip
        bound = self._from_bound()  # the MCS the tables lack (0-2 of the 64QAM table, ...)
        return {mcs.index: curves.get(mcs.index, bound[mcs.index]) for mcs in self.mcs}

    def _from_bound(self) -> dict[int, Curve]:
        curves = {}
        for mcs in self.mcs:
            loss_db = LOSS_DB[self.direction][mcs.modulation_order]
            snr = 10.0 ** ((BUILTIN_SNR_DB - loss_db) / 10.0)
            rows = [finite_length_bler(snr, mcs.spectral_efficiency, cbs) for cbs in BUILTIN_CBS]
            curves[mcs.index] = Curve(
                np.array(BUILTIN_CBS, dtype=float), BUILTIN_SNR_DB, np.log10(np.array(rows))
            )
        return curves

    def bler(self, snr_db: float, mcs: int, cb_size: int) -> float:
        """One code block's error probability, as Sionna's ``PHYAbstraction.get_bler`` reads
        it: the SNR rounded to 0.1 dB and the size to 24 + 100 k bits, within its grid."""
        return self._code_block_table(mcs, cb_size)[snr_step(snr_db)]

    def transport_bler(self, snr_db: float, mcs: int, cb_size: int, blocks: int) -> float:
        """A transport block fails when any of its code blocks does."""
        return self.transport_table(mcs, cb_size, blocks)[snr_step(snr_db)]

    def transport_table(self, mcs: int, cb_size: int, blocks: int) -> list[float]:
        """The transport BLER at each SNR of the 0.1 dB grid (index: ``snr_step``): the
        link reads it per period, so it is worked out once per transport-block shape."""
        return _transport_table(self, mcs, cb_size, blocks)

    def _code_block_table(self, mcs: int, cb_size: int) -> list[float]:
        low_cbs, high_cbs = CBS_RANGE
        size = min(max(cb_size, low_cbs), high_cbs)
        return _code_block_table(self, mcs, low_cbs + CBS_STEP * round((size - low_cbs) / CBS_STEP))

    def threshold_db(self, mcs: int, cb_size: int, blocks: int, target: float) -> float:
        """The lowest SNR of the 0.1 dB grid at which the transport BLER is at most
        ``target``; inf when none is."""
        return _threshold_db(self, mcs, cb_size, blocks, target)


def snr_step(snr_db: float) -> int:
    """The index of the 0.1 dB grid point nearest to snr_db, within the grid."""
    low_db, high_db = GRID_SNR_RANGE_DB
    return round((min(max(snr_db, low_db), high_db) - low_db) / SNR_STEP_DB)


def snr_steps(snr_db: np.ndarray) -> np.ndarray:
    """``snr_step`` of each SNR (numpy rounds halves to even, as Python's round)."""
    low_db, high_db = GRID_SNR_RANGE_DB
    return np.rint((np.clip(snr_db, low_db, high_db) - low_db) / SNR_STEP_DB).astype(int)


GRID_SNR_DB = GRID_SNR_RANGE_DB[0] + SNR_STEP_DB * np.arange(snr_step(GRID_SNR_RANGE_DB[1]) + 1)


@cache
def _code_block_table(curves: BlerCurves, mcs: int, size: int) -> list[float]:
    return np.minimum(curves.curves[mcs].at(GRID_SNR_DB, size), 1.0).tolist()


@cache
def _transport_table(curves: BlerCurves, mcs: int, cb_size: int, blocks: int) -> list[float]:
    bler = np.minimum(curves._code_block_table(mcs, cb_size), 1 - 1e-12)
    return (-np.expm1(blocks * np.log1p(-bler))).tolist()


@cache
def _threshold_db(curves: BlerCurves, mcs: int, cb_size: int, blocks: int, target: float) -> float:
    table = curves.transport_table(mcs, cb_size, blocks)
    if table[-1] > target:
        return math.inf
    low, high = 0, len(table) - 1
    while low < high:  # BLER falls with the SNR: bisect the grid
        middle = (low + high) // 2
        if table[middle] <= target:
            high = middle
        else:
            low = middle + 1
    return float(GRID_SNR_DB[low])


def finite_length_bler(snr: np.ndarray, rate: float, bits: int) -> np.ndarray:
    """Normal approximation of the error probability of the best code of ``bits``
    information bits at ``rate`` bits per channel use on the complex Gaussian channel
    (Polyanskiy, Poor, Verdú 2010, eq. 296 with the log term)."""
    uses = bits / rate
    capacity = np.log2(1.0 + snr)
    dispersion = snr * (snr + 2.0) / (snr + 1.0) ** 2 * math.log2(math.e) ** 2
    z = (uses * (capacity - rate) + 0.5 * math.log2(uses)) / np.sqrt(uses * dispersion)
    return np.clip(ndtr(-z), 1e-12, 1.0)


def curves_for(direction: str, table: str, source: str) -> BlerCurves:
    """The curves of a direction and MCS table, built once per process."""
    return _curves(direction, table, source)


@cache
def _curves(direction: str, table: str, source: str) -> BlerCurves:
    return BlerCurves(direction, table, source)


__all__ = ["BlerCurves", "MCS_TABLE_INDEX", "Mcs", "curves_for", "finite_length_bler"]
