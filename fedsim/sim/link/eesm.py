"""Exponential effective SINR mapping (EESM): one SNR per transport block over the subbands
it occupies, so that a frequency-selective channel can be read off the AWGN BLER curves.

    SNR_eff(β) = −β ln( Σ_s w_s exp(−SNR_s / β) / Σ_s w_s )

with linear SNRs, w_s the PRBs the block holds on subband s, and β calibrated per MCS
(Brueninghaus et al., "Link performance models for system level simulations of broadband
radio access systems", PIMRC 2005). The β are Sionna SYS's (``EffectiveSINR``/``EESM`` in
sionna/sys/effective_sinr.py, table sys/esm_params/eesm_beta_table.json), read from the
installed sionna-no-rt without importing it (its import pulls in torch); the mapping is
Sionna's with PRB weights in place of its count of resource elements and without its clamp
to [-30, 30] dB (the BLER curves bound the SNR they read). A flat channel's effective SNR
is its SNR exactly, for every β, so flat fading reads the curves as before.
"""

from __future__ import annotations

import functools
import json

import numpy as np

from fedsim.sim.nr import MCS_TABLE_INDEX
from fedsim.sim.nr import mcs_table as mcs_entries
from fedsim.sim.readers import sionna_tables_folder

BETA_TABLE = ("esm_params", "eesm_beta_table.json")  # under Sionna's sys/, by its BLER tables


@functools.cache
def eesm_betas(mcs_table: str) -> tuple[float, ...]:
    """β per MCS index (0, 1, ...) of MCS table ``mcs_table`` ("64qam" or "256qam"), from
    the installed Sionna's table; read once per process. Raises ValueError where the table,
    or a list of the right length for that MCS table, is not there."""
    if mcs_table not in MCS_TABLE_INDEX:
        raise ValueError(f"unknown MCS table {mcs_table!r}: one of {list(MCS_TABLE_INDEX)}")
    folder = sionna_tables_folder()
    path = None if folder is None else folder.parent.joinpath(*BETA_TABLE)
    if path is None or not path.is_file():
        raise ValueError(
            "Sionna's EESM beta table (sys/esm_params/eesm_beta_table.json) is not installed: "
            "install sionna-no-rt to map frequency-selective SNRs to an effective SNR"
        )
    betas = json.loads(path.read_text())["index"].get(str(MCS_TABLE_INDEX[mcs_table]))
    expected = len(mcs_entries(mcs_table))
    if betas is None or len(betas) != expected or not all(beta > 0 for beta in betas):
        raise ValueError(
            f"{path}: expected {expected} positive betas for MCS table {mcs_table!r} "
            f"(index {MCS_TABLE_INDEX[mcs_table]})"
        )
    return tuple(float(beta) for beta in betas)


def effective_snr(snr: np.ndarray, weights: np.ndarray, betas: np.ndarray) -> np.ndarray:
    """The EESM effective SNR (linear) for each β: (M,) from ``snr`` (S,) linear SNRs per
    subband (finite, >= 0), ``weights`` (S,) PRBs held per subband (>= 0, not all 0; a
    subband of weight 0 is ignored) and ``betas`` (M,) > 0.

    Factored about the least SNR of the held subbands, so that large SNR / β cannot
    underflow every term: SNR_eff = min + (−β ln Σ w exp(−(SNR − min)/β) / Σ w), the sum
    at least that subband's weight; expm1/log1p keep equal SNRs exact and SNR_eff − min
    accurate as β grows (where it tends to the weighted mean).
    """
    snr = np.asarray(snr, dtype=float)
    weights = np.asarray(weights, dtype=float)
    betas = np.asarray(betas, dtype=float)
    if snr.ndim != 1 or weights.shape != snr.shape or betas.ndim != 1:
        raise ValueError(
            f"snr and weights must be 1-D of one length, betas 1-D: got {snr.shape}, "
            f"{weights.shape}, {betas.shape}"
        )
    if not (np.isfinite(snr).all() and (snr >= 0).all()):
        raise ValueError(f"SNRs must be finite and >= 0, got {snr}")
    if not ((weights >= 0).all() and weights.sum() > 0):
        raise ValueError(f"weights must be >= 0 and not all 0, got {weights}")
    if not (betas > 0).all():
        raise ValueError(f"betas must be > 0, got {betas}")
    return eesm(snr, weights, betas)


def eesm(snr: np.ndarray, weights: np.ndarray, betas: np.ndarray) -> np.ndarray:
    """``effective_snr`` without its checks: the link layer's per-period call, whose inputs
    are the channel's own (float arrays, SNRs finite and >= 0, weights a PRB placement)."""
    if not weights.all():
        held = weights > 0
        snr, weights = snr[held], weights[held]
    least = snr.min()
    terms = np.expm1((least - snr)[None, :] / betas[:, None])  # (M, S'), in (-1, 0]
    return least - betas * np.log1p(terms @ weights / weights.sum())


def eesm_rows(snr: np.ndarray, weights: np.ndarray, betas: np.ndarray) -> np.ndarray:
    """``eesm`` of many blocks at once: (K, M) effective SNRs (linear) from ``snr`` (K, S), the
    SNR per PRB of each block on each subband, ``weights`` (K, S), the PRBs each holds there
    (each row not all 0), and ``betas`` (M,): one row per block, factored about its least held
    SNR as ``eesm`` is."""
    held = weights > 0
    least = np.where(held, snr, np.inf).min(axis=1)  # (K,)
    gaps = np.where(held, least[:, None] - snr, 0.0)  # (K, S), <= 0 where held
    terms = np.expm1(gaps[:, None, :] / betas[None, :, None])  # (K, M, S), in (-1, 0]
    mean = (terms * weights[:, None, :]).sum(axis=2) / weights.sum(axis=1)[:, None]
    return least[:, None] - betas[None, :] * np.log1p(mean)
