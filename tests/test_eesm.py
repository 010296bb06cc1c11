"""EESM effective SNR: its limits, its weights, Sionna's β table, and agreement with Sionna
SYS's own EESM where it is installed."""

from __future__ import annotations

import numpy as np
import pytest

from fedsim.sim.link import eesm
from fedsim.sim.link.eesm import eesm_betas, effective_snr
from fedsim.sim.nr import MCS_TABLE_INDEX
from fedsim.sim.readers import sionna_tables_folder

needs_sionna = pytest.mark.skipif(sionna_tables_folder() is None, reason="sionna-no-rt absent")
BETAS = np.array([0.5, 1.6, 10.0, 132.5])


@pytest.mark.parametrize("snr", [1e-3, 0.7, 3.0, 1e3])
def test_a_flat_channel_keeps_its_snr(snr: float) -> None:
    eff = effective_snr(np.full(5, snr), np.array([1.0, 4.0, 0.0, 2.0, 7.0]), BETAS)
    np.testing.assert_allclose(eff, snr, rtol=1e-12)


def test_between_the_least_and_the_weighted_mean() -> None:
    rng = np.random.default_rng(0)
    for _ in range(100):
        snr = rng.exponential(10.0, 13)
        weights = rng.integers(0, 5, 13).astype(float)
        weights[rng.integers(13)] += 1.0
        eff = effective_snr(snr, weights, np.geomspace(0.1, 1e3, 30))
        least, mean = snr[weights > 0].min(), np.average(snr, weights=weights)
        assert (eff >= least * (1 - 1e-12)).all() and (eff <= mean * (1 + 1e-12)).all()
        assert (np.diff(eff) >= -1e-9 * mean).all()  # a larger β forgives deep fades more


def test_limits_in_beta() -> None:
    snr, weights = np.array([2.0, 50.0, 400.0]), np.array([1.0, 3.0, 2.0])
    low, high = effective_snr(snr, weights, np.array([1e-3, 1e9]))
    assert low == pytest.approx(2.0 + 1e-3 * np.log(6.0), rel=1e-12)  # β -> 0: the worst one
    assert high == pytest.approx(np.average(snr, weights=weights), rel=1e-6)  # β -> inf: the mean


def test_large_snr_over_beta_does_not_underflow() -> None:
    eff = effective_snr(np.array([1e4, 2e4]), np.array([1.0, 1.0]), np.array([1.0]))
    assert eff[0] == pytest.approx(1e4 + np.log(2.0))  # -ln((1 + e^-1e4) / 2), exactly


def test_weights_matter_and_a_zero_weight_is_ignored() -> None:
    snr = np.array([1.0, 20.0, 0.01])
    eff = effective_snr(snr, np.array([1.0, 1.0, 0.0]), BETAS)
    np.testing.assert_allclose(eff, effective_snr(snr[:2], np.ones(2), BETAS), rtol=1e-12)
    np.testing.assert_allclose(eff, effective_snr(snr[:2], np.array([5.0, 5.0]), BETAS))
    more_on_the_good_one = effective_snr(snr, np.array([1.0, 3.0, 0.0]), BETAS)
    assert (more_on_the_good_one > eff).all()


def test_many_blocks_at_once_are_each_blocks_own() -> None:
    """``eesm_rows`` (every PRB count of a share at once) gives each row's ``effective_snr``."""
    rng = np.random.default_rng(1)
    snr = rng.exponential(10.0, (9, 12)) * np.geomspace(1e-2, 1e3, 9)[:, None]
    weights = rng.integers(0, 3, (9, 12)).astype(float)
    weights[np.arange(9), rng.integers(12, size=9)] += 1.0
    rows = eesm.eesm_rows(snr, weights, BETAS)
    for row in range(9):
        np.testing.assert_allclose(
            rows[row], effective_snr(snr[row], weights[row], BETAS), rtol=1e-12
        )


def test_checks_its_inputs() -> None:
    one = np.ones(2)
    for snr, weights, betas in [
        (np.ones(3), one, one),  # lengths differ
        (np.array([1.0, np.nan]), one, one),
        (np.array([1.0, -1.0]), one, one),
        (one, np.zeros(2), one),
        (one, np.array([1.0, -1.0]), one),
        (one, one, np.array([1.0, 0.0])),
    ]:
        with pytest.raises(ValueError):
            effective_snr(snr, weights, betas)


@needs_sionna
@pytest.mark.parametrize(("table", "entries"), [("64qam", 29), ("256qam", 28)])
def test_beta_table(table: str, entries: int) -> None:
    betas = eesm_betas(table)
    assert len(betas) == entries
    assert all(beta > 0 for beta in betas)
    assert list(betas) == sorted(betas)  # Sionna 2.2's table: non-decreasing in the MCS
    assert eesm_betas(table) is betas  # read once


def test_beta_table_of_an_unknown_mcs_table() -> None:
    with pytest.raises(ValueError, match="unknown MCS table"):
        eesm_betas("1024qam")


def test_beta_table_missing(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    eesm_betas.cache_clear()
    try:
        for folder in (None, tmp_path / "sys" / "bler_tables"):  # no Sionna; no table by its own
            monkeypatch.setattr(eesm, "sionna_tables_folder", lambda folder=folder: folder)
            with pytest.raises(ValueError, match="EESM beta table .* is not installed"):
                eesm_betas("64qam")
    finally:
        eesm_betas.cache_clear()  # the real table again for later tests


@needs_sionna
@pytest.mark.parametrize("table", ["64qam", "256qam"])
def test_matches_sionna(table: str) -> None:
    sionna_sys = pytest.importorskip("sionna.sys")
    torch = pytest.importorskip("torch")
    eesm = sionna_sys.EESM(
        sinr_eff_min_db=-100.0, sinr_eff_max_db=100.0, precision="double", device="cpu"
    )  # no clamping: the mapping alone
    betas = np.array(eesm_betas(table))
    users = len(betas)  # Sionna's user u at MCS u: every β at once
    rng = np.random.default_rng(1)
    for _ in range(5):
        snr = 10 ** rng.uniform(-0.5, 2.5, 13)  # -5 to 25 dB
        weights = rng.integers(0, 4, 13)
        weights[0] = max(weights[0], 1)
        # Sionna averages over used resource elements: w_s subcarriers at SNR_s (0 = unused)
        grid = np.repeat(snr, weights)
        sinr = torch.tensor(np.broadcast_to(grid[None, :, None, None], (1, grid.size, users, 1)))
        theirs = eesm(
            sinr.contiguous(),
            torch.arange(users, dtype=torch.int32),
            mcs_table_index=MCS_TABLE_INDEX[table],
        ).numpy()
        ours = effective_snr(snr, weights.astype(float), betas)
        np.testing.assert_allclose(ours, theirs, rtol=1e-4)
        assert theirs.max() - theirs.min() > 0.1 * theirs.min()  # β does matter here
