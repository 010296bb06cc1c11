"""The NTN channel (fedsim.sim.ntn) against openntn 2.0.0, TR 38.811's reference in PyTorch,
on a grid of elevations, scenarios and bands (skipped where openntn is not installed: it is
no dependency of fedsim, see the README), and the link budget by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedsim.sim import ntn
from fedsim.sim.orbits import slant_range_m

ELEVATIONS_DEG = (10.0, 14.9, 15.0, 23.0, 30.0, 45.0, 61.0, 75.0, 90.0)
BANDS_HZ = {"S": 2.0e9, "Ka": 20.0e9}
SCENARIOS = {"dense_urban": "DenseUrbanScenario", "urban": "UrbanScenario",
             "suburban": "SubUrbanScenario"}  # fmt: skip


def openntn_values(scenario: str, carrier_hz: float, elevation_deg: float, los: bool) -> dict:
    openntn = pytest.importorskip("openntn")
    torch = pytest.importorskip("torch")

    def array():
        return openntn.PanelArray(
            num_rows_per_panel=1, num_cols_per_panel=1, polarization="single",
            polarization_type="V", antenna_pattern="omni", carrier_frequency=carrier_hz,
        )  # fmt: skip

    model = getattr(openntn, SCENARIOS[scenario])(
        carrier_hz, array(), array(), "downlink", elevation_deg
    )
    ut, bs, zero = torch.zeros(1, 1, 3), torch.zeros(1, 1, 3), torch.zeros(1, 1, 3)
    ut[..., 2], bs[..., 2] = 1.5, 600e3
    model.set_topology(ut, bs, zero, zero, zero, torch.zeros(1, 1, dtype=torch.bool), los=los)
    return {
        "distance_m": float(model.distance_3d),
        "fspl_db": float(model.free_space_pathloss),
        "basic_db": float(model.basic_pathloss),
        "gas_db": float(model.gas_pathloss),
        "scintillation_db": float(model.scintillation_pathloss),
        "los_probability": float(model.los_probability),
        "sigma_db": float(model.get_param("sigmaSF")),
    }


@pytest.mark.parametrize("band", list(BANDS_HZ))
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_path_loss_shadowing_and_los_equal_openntn(scenario: str, band: str) -> None:
    carrier_hz = BANDS_HZ[band]
    for elevation in ELEVATIONS_DEG:
        for los in (True, False):
            ref = openntn_values(scenario, carrier_hz, elevation, los)
            distance_m = slant_range_m(600e3, math.radians(elevation))
            assert distance_m == pytest.approx(ref["distance_m"], rel=1e-6)
            fspl = ntn.free_space_loss_db(distance_m, carrier_hz)
            assert fspl == pytest.approx(ref["fspl_db"], abs=1e-4)
            clutter = ntn.clutter_loss_db(scenario, band, elevation, los)
            assert fspl + clutter == pytest.approx(ref["basic_db"], abs=1e-4)
            assert ntn.gas_loss_db(carrier_hz, elevation) == pytest.approx(ref["gas_db"], rel=1e-5)
            assert ntn.scintillation_loss_db(carrier_hz, elevation, 47.0) == pytest.approx(
                ref["scintillation_db"], abs=1e-6
            )
            assert ntn.los_probability(scenario, elevation) == pytest.approx(
                ref["los_probability"], abs=1e-6
            )
            sigma = ntn.shadowing_sigma_db(scenario, band, elevation, los)
            assert sigma == pytest.approx(ref["sigma_db"], abs=1e-5)


def test_rural_reads_the_suburban_tables_and_bands_are_s_and_ka() -> None:
    for elevation in ELEVATIONS_DEG:
        for los in (True, False):
            assert ntn.clutter_loss_db("rural", "Ka", elevation, los) == ntn.clutter_loss_db(
                "suburban", "Ka", elevation, los
            )
    assert ntn.los_probability("rural", 10.0) == 0.782
    assert ntn.band_of(2.0e9) == "S" and ntn.band_of(30e9) == "Ka"
    with pytest.raises(ValueError, match="neither S"):
        ntn.band_of(10e9)
    with pytest.raises(ValueError, match="scenario"):
        ntn.los_probability("desert", 30.0)


def test_link_budget_by_hand() -> None:
    """C/N = EIRP + G/T - L + 228.6 - 10 log10 B, and the Doppler and delay of a link."""
    budget = ntn.LinkBudget(eirp_dbw=30.0, gt_db_per_k=15.9, bandwidth_hz=400e6)
    loss = 180.0
    expected = 30.0 + 15.9 - 180.0 + 228.6 - 10 * math.log10(400e6)
    assert budget.snr_db(np.array(loss)) == pytest.approx(expected, abs=1e-12)
    assert ntn.doppler_hz(20e9, -7000.0) == pytest.approx(20e9 * 7000 / 299_792_458.0)
    assert ntn.propagation_delay_s(299_792_458.0) == pytest.approx(1.0)
