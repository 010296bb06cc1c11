"""3GPP TR 38.901 path loss, LOS probability and shadowing σ (``fedsim.sim.pathloss.Tr38901``).

Checked against the standard's formulas written out below from Table 7.4.1-1 (path loss,
σ_SF) and Table 7.4.2-1 (LOS probability), scalar ``math`` only, and against NVIDIA Sionna's
TR 38.901 scenarios where ``sionna-no-rt`` is installed.
"""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest

from fedsim.sim.pathloss import Tr38901

C_MPS = 3.0e8  # Table 7.4.1-1 notes 1 and 5


# --- Table 7.4.1-1, written out (f in GHz, distances and heights in m) ----------------------


def ref_uma_db(d2: float, los: bool, f: float, h_bs: float = 25.0, h_ut: float = 1.5) -> float:
    d2 = max(d2, 10.0)
    d3 = math.sqrt(d2**2 + (h_bs - h_ut) ** 2)
    d_bp = 4.0 * (h_bs - 1.0) * (h_ut - 1.0) * f * 1e9 / C_MPS  # h_E = 1 m
    if d2 <= d_bp:
        pl_los = 28.0 + 22.0 * math.log10(d3) + 20.0 * math.log10(f)
    else:
        pl_los = (
            28.0
            + 40.0 * math.log10(d3)
            + 20.0 * math.log10(f)
            - 9.0 * math.log10(d_bp**2 + (h_bs - h_ut) ** 2)
        )
    if los:
        return pl_los
    pl_nlos = 13.54 + 39.08 * math.log10(d3) + 20.0 * math.log10(f) - 0.6 * (h_ut - 1.5)
    return max(pl_los, pl_nlos)


def ref_umi_db(d2: float, los: bool, f: float, h_bs: float = 10.0, h_ut: float = 1.5) -> float:
    d2 = max(d2, 10.0)
    d3 = math.sqrt(d2**2 + (h_bs - h_ut) ** 2)
    d_bp = 4.0 * (h_bs - 1.0) * (h_ut - 1.0) * f * 1e9 / C_MPS
    if d2 <= d_bp:
        pl_los = 32.4 + 21.0 * math.log10(d3) + 20.0 * math.log10(f)
    else:
        pl_los = (
            32.4
            + 40.0 * math.log10(d3)
            + 20.0 * math.log10(f)
            - 9.5 * math.log10(d_bp**2 + (h_bs - h_ut) ** 2)
        )
    if los:
        return pl_los
    pl_nlos = 35.3 * math.log10(d3) + 22.4 + 21.3 * math.log10(f) - 0.3 * (h_ut - 1.5)
    return max(pl_los, pl_nlos)


def ref_rma_db(
    d2: float,
    los: bool,
    f: float,
    h_bs: float = 35.0,
    h_ut: float = 1.5,
    h: float = 5.0,
    w: float = 20.0,
) -> float:
    d2 = max(d2, 10.0)
    d3 = math.sqrt(d2**2 + (h_bs - h_ut) ** 2)
    d_bp = 2.0 * math.pi * h_bs * h_ut * f * 1e9 / C_MPS

    def pl1(d: float) -> float:
        return (
            20.0 * math.log10(40.0 * math.pi * d * f / 3.0)
            + min(0.03 * h**1.72, 10.0) * math.log10(d)
            - min(0.044 * h**1.72, 14.77)
            + 0.002 * math.log10(h) * d
        )

    pl_los = pl1(d3) if d2 <= d_bp else pl1(d_bp) + 40.0 * math.log10(d3 / d_bp)
    if los:
        return pl_los
    pl_nlos = (
        161.04
        - 7.1 * math.log10(w)
        + 7.5 * math.log10(h)
        - (24.37 - 3.7 * (h / h_bs) ** 2) * math.log10(h_bs)
        + (43.42 - 3.1 * math.log10(h_bs)) * (math.log10(d3) - 3.0)
        + 20.0 * math.log10(f)
        - (3.2 * (math.log10(11.75 * h_ut)) ** 2 - 4.97)
    )
    return max(pl_los, pl_nlos)


def ref_inh_db(d2: float, los: bool, f: float, h_bs: float = 3.0, h_ut: float = 1.0) -> float:
    d3 = max(math.sqrt(d2**2 + (h_bs - h_ut) ** 2), 1.0)  # 1 m <= d_3D
    pl_los = 32.4 + 17.3 * math.log10(d3) + 20.0 * math.log10(f)
    if los:
        return pl_los
    pl_nlos = 38.3 * math.log10(d3) + 17.30 + 24.9 * math.log10(f)
    return max(pl_los, pl_nlos)


# --- Table 7.4.2-1, written out --------------------------------------------------------------


def ref_uma_p(d: float, h_ut: float = 1.5) -> float:
    if d <= 18.0:
        return 1.0
    c_prime = 0.0 if h_ut <= 13.0 else ((h_ut - 13.0) / 10.0) ** 1.5
    base = 18.0 / d + math.exp(-d / 63.0) * (1.0 - 18.0 / d)
    p = base * (1.0 + c_prime * 5.0 / 4.0 * (d / 100.0) ** 3 * math.exp(-d / 150.0))
    # With C' > 0 the printed product is above 1 for 18 m < d_2D < ~18.5 m: a probability, capped
    return min(p, 1.0)


def ref_umi_p(d: float) -> float:
    return 1.0 if d <= 18.0 else 18.0 / d + math.exp(-d / 36.0) * (1.0 - 18.0 / d)


def ref_rma_p(d: float) -> float:
    return 1.0 if d <= 10.0 else math.exp(-(d - 10.0) / 1000.0)


def ref_inh_mixed_p(d: float) -> float:
    if d <= 1.2:
        return 1.0
    if d < 6.5:
        return math.exp(-(d - 1.2) / 4.7)
    return math.exp(-(d - 6.5) / 32.6) * 0.32


def ref_inh_open_p(d: float) -> float:
    if d <= 5.0:
        return 1.0
    if d <= 49.0:
        return math.exp(-(d - 5.0) / 70.8)
    return math.exp(-(d - 49.0) / 211.7) * 0.54


OUTDOOR_M = [0.0, 5.0, 10.0, 18.0, 20.0, 150.0, 600.0, 3000.0, 5000.0]
INDOOR_M = [0.0, 0.5, 1.0, 1.2, 3.0, 5.0, 6.5, 40.0, 49.0, 100.0, 150.0]


# (model, reference law, distances): defaults, then other frequencies and heights. The
# distances straddle each breakpoint (UMa 560 m, UMi 210 m, RMa 3848.45 m at 3.5 GHz).
LAW_CASES = [
    (Tr38901("uma"), lambda d, s: ref_uma_db(d, s, 3.5), OUTDOOR_M + [559.0, 561.0]),
    (
        Tr38901("uma", carrier_hz=28e9, bs_height_m=30.0, ut_height_m=8.0),
        lambda d, s: ref_uma_db(d, s, 28.0, 30.0, 8.0),
        OUTDOOR_M + [500.0],
    ),
    (
        Tr38901("uma", carrier_hz=0.7e9, ut_height_m=18.0),  # h_E = 1 m branch
        lambda d, s: ref_uma_db(d, s, 0.7, 25.0, 18.0),
        OUTDOOR_M + [951.0, 953.0],
    ),
    (Tr38901("umi"), lambda d, s: ref_umi_db(d, s, 3.5), OUTDOOR_M + [209.0, 211.0]),
    (
        Tr38901("umi", carrier_hz=2e9, bs_height_m=12.0, ut_height_m=4.0),
        lambda d, s: ref_umi_db(d, s, 2.0, 12.0, 4.0),
        OUTDOOR_M + [879.0, 881.0],
    ),
    (
        Tr38901("rma"),
        lambda d, s: ref_rma_db(d, s, 3.5),
        OUTDOOR_M + [3848.0, 3849.0, 6000.0, 10000.0],
    ),
    (
        Tr38901(
            "rma",
            carrier_hz=0.8e9,
            bs_height_m=45.0,
            ut_height_m=2.0,
            building_height_m=12.0,
            street_width_m=30.0,
        ),
        lambda d, s: ref_rma_db(d, s, 0.8, 45.0, 2.0, 12.0, 30.0),
        OUTDOOR_M + [1500.0, 1510.0],  # d_BP = 2π·45·2·0.8e9/3e8 = 1507.96 m
    ),
    (Tr38901("inh", ut_height_m=1.0), lambda d, s: ref_inh_db(d, s, 3.5), INDOOR_M),
    (
        Tr38901("inh", carrier_hz=60e9, bs_height_m=2.5, ut_height_m=2.0),
        lambda d, s: ref_inh_db(d, s, 60.0, 2.5, 2.0),
        INDOOR_M,
    ),
]


@pytest.mark.parametrize(("model", "reference", "distances_m"), LAW_CASES)
@pytest.mark.parametrize("los", [True, False])
def test_path_loss_is_the_tables_formula(model, reference, distances_m, los):
    for d in distances_m:
        assert model.db(d, los) == pytest.approx(reference(d, los), abs=1e-9), d
    vectorised = model.db(np.array(distances_m), los)
    expected = [reference(d, los) for d in distances_m]
    np.testing.assert_allclose(vectorised, expected, rtol=0, atol=1e-9)


def test_breakpoints_at_3p5_ghz():
    assert Tr38901("uma").breakpoint_m == pytest.approx(560.0)  # 4·24·0.5·3.5e9/3e8
    assert Tr38901("umi").breakpoint_m == pytest.approx(210.0)  # 4·9·0.5·3.5e9/3e8
    rma_bp_m = 2.0 * math.pi * 35.0 * 1.5 * 3.5e9 / 3e8  # 2π·612.5 = 3848.45 m
    assert Tr38901("rma").breakpoint_m == pytest.approx(rma_bp_m)
    assert Tr38901("inh").breakpoint_m == math.inf


def test_pinned_values_worked_by_hand():
    # UMa LOS 150 m, 3.5 GHz: d3 = √(150² + 23.5²) = 151.8297; 28 + 22·2.181356 + 20·0.544068
    assert Tr38901("uma").db(150.0, True) == pytest.approx(86.8712, abs=1e-3)
    # UMa LOS 600 m > d'_BP = 560: d3 = 600.4601; 28 + 40·2.778484 + 10.881361
    #   − 9·log10(560² + 23.5²) = 28 + 111.13937 + 10.88136 − 49.47427
    assert Tr38901("uma").db(600.0, True) == pytest.approx(100.5465, abs=1e-3)
    # UMi NLOS 600 m: d3 = 600.0602; 22.4 + 35.3·2.778195 + 21.3·0.544068 (> PL_LOS 110.28)
    assert Tr38901("umi").db(600.0, False) == pytest.approx(132.0589, abs=1e-3)
    # InH LOS 40 m (3 m / 1 m): d3 = √1604 = 40.04997; 32.4 + 17.3·1.602602 + 10.881361
    assert Tr38901("inh", ut_height_m=1.0).db(40.0, True) == pytest.approx(71.0064, abs=1e-3)
    # UMa/UMi LOS: PL1 = PL2 at d_2D = d'_BP (d_3D² = d'_BP² + Δh² there)
    for scenario in ("uma", "umi"):
        model = Tr38901(scenario)
        bp = model.breakpoint_m
        assert model.db(bp - 1e-9, True) == pytest.approx(model.db(bp + 1e-9, True), abs=1e-6)


@pytest.mark.parametrize("h_ut", [1.5, 13.0, 15.0, 18.0, 22.5, 23.0])
def test_uma_los_probability_with_c_prime(h_ut):
    model = Tr38901("uma", ut_height_m=h_ut)
    for d in [0.0, 10.0, 18.0, 18.5, 20.0, 50.0, 150.0, 450.0, 600.0, 3000.0]:
        assert model.los_probability(d) == pytest.approx(ref_uma_p(d, h_ut), abs=1e-12), d
    if h_ut > 13.0:  # the C' term raises the LOS probability at mid range
        assert model.los_probability(450.0) > Tr38901("uma").los_probability(450.0)
    assert np.all(model.los_probability(np.linspace(0.0, 100.0, 1001)) <= 1.0)
    if h_ut >= 19.0:  # uncapped: ((h_UT − 13)/10)^1.5 · 5/4 · 0.181³ · e^(−0.1207) lifts it > 1
        assert model.los_probability(18.1) == 1.0


def test_los_probability_is_the_tables_formula():
    outdoor = [0.0, 5.0, 10.0, 10.5, 18.0, 20.0, 150.0, 600.0, 3000.0]
    cases = [
        (Tr38901("umi"), ref_umi_p, outdoor),
        (Tr38901("rma"), ref_rma_p, outdoor),
        (Tr38901("inh", ut_height_m=1.0), ref_inh_mixed_p, INDOOR_M),
        (Tr38901("inh", ut_height_m=1.0, inh_office="open"), ref_inh_open_p, INDOOR_M),
    ]
    for model, reference, distances in cases:
        for d in distances:
            assert model.los_probability(d) == pytest.approx(reference(d), abs=1e-12)
        probabilities = model.los_probability(np.array(distances))
        np.testing.assert_allclose(probabilities, [reference(d) for d in distances], atol=1e-12)
    # by hand: UMi 150 m: 0.12 + e^(−4.1667)·0.88 = 0.12 + 0.015500·0.88; RMa 600 m: e^(−0.59)
    assert Tr38901("umi").los_probability(150.0) == pytest.approx(0.133643, abs=1e-6)
    assert Tr38901("rma").los_probability(600.0) == pytest.approx(0.554327, abs=1e-6)
    # InH mixed 40 m: 0.32·e^(−33.5/32.6); open 40 m: e^(−35/70.8); open 100 m: 0.54·e^(−51/211.7)
    inh = Tr38901("inh", ut_height_m=1.0)
    assert inh.los_probability(40.0) == pytest.approx(0.114516, abs=1e-6)
    open_office = Tr38901("inh", ut_height_m=1.0, inh_office="open")
    assert open_office.los_probability(40.0) == pytest.approx(0.609967, abs=1e-6)
    assert open_office.los_probability(100.0) == pytest.approx(0.424394, abs=1e-6)


def test_shadowing_sigma_of_the_table():
    for scenario, los_db, nlos_db in [("uma", 4.0, 6.0), ("umi", 4.0, 7.82), ("inh", 3.0, 8.03)]:
        model = Tr38901(scenario)
        for d in [0.0, 20.0, 150.0, 600.0, 3000.0]:
            assert model.shadowing_std_db(d, True) == los_db
            assert model.shadowing_std_db(d, False) == nlos_db
    rma = Tr38901("rma")  # d_BP = 3848.45 m
    assert rma.shadowing_std_db(np.array([5.0, 600.0, 3848.0]), True).tolist() == [4.0] * 3
    assert rma.shadowing_std_db(np.array([3849.0, 6000.0]), True).tolist() == [6.0] * 2
    assert rma.shadowing_std_db(np.array([600.0, 6000.0]), False).tolist() == [8.0] * 2
    mixed = Tr38901("uma").shadowing_std_db(np.array([20.0, 20.0]), np.array([True, False]))
    assert mixed.tolist() == [4.0, 6.0]


@pytest.mark.parametrize("scenario", ["uma", "umi", "rma"])
def test_outdoor_distances_below_10_m_are_10_m(scenario):
    model = Tr38901(scenario)
    for los in (True, False):
        at_minimum = model.db(10.0, los)
        assert model.db(0.0, los) == at_minimum
        assert model.db(np.array([0.0, 3.0, 9.99]), los).tolist() == [at_minimum] * 3
        assert model.db(10.5, los) > at_minimum


def test_inh_3d_distances_below_1_m_are_1_m():
    model = Tr38901("inh", bs_height_m=3.0, ut_height_m=2.5)  # d_3D = √(d_2D² + 0.25)
    at_minimum = 32.4 + 20.0 * math.log10(3.5)  # PL at d_3D = 1 m: log10(1) = 0
    assert model.db(0.0, True) == pytest.approx(at_minimum)
    assert model.db(math.sqrt(0.75), True) == pytest.approx(at_minimum)  # d_3D exactly 1 m
    assert model.db(0.5, True) == pytest.approx(at_minimum)
    nlos_prime_at_minimum = 17.30 + 24.9 * math.log10(3.5)  # 30.85 dB < PL_LOS: max() is LOS
    assert model.db(0.2, False) == pytest.approx(max(at_minimum, nlos_prime_at_minimum))
    assert model.db(2.0, True) > at_minimum


@pytest.mark.parametrize(
    "model",
    [
        Tr38901("uma"),
        Tr38901("uma", carrier_hz=28e9, ut_height_m=20.0),
        Tr38901("umi"),
        Tr38901("umi", carrier_hz=0.5e9, ut_height_m=1.0),
        Tr38901("rma"),
        Tr38901("rma", carrier_hz=30e9, bs_height_m=10.0, building_height_m=50.0),
        Tr38901("inh", ut_height_m=1.0),
        Tr38901("inh", carrier_hz=100e9, bs_height_m=3.0, ut_height_m=3.0),
    ],
)
def test_nlos_never_below_los(model):
    d = np.geomspace(0.1, 12_000.0, 400)
    los_db, nlos_db = model.db(d, True), model.db(d, False)
    assert np.all(nlos_db >= los_db)
    assert np.any(nlos_db > los_db)
    assert np.all(np.isfinite(los_db)) and np.all(np.isfinite(nlos_db))


def test_scalar_in_float_out_array_in_array_out():
    model = Tr38901("umi")
    assert type(model.db(100.0, True)) is float
    assert type(model.db(np.float64(100.0), np.bool_(False))) is float
    assert type(model.los_probability(100.0)) is float
    assert type(model.shadowing_std_db(100.0, True)) is float
    out = model.db(np.array([100.0, 200.0]), np.array([True, False]))
    assert isinstance(out, np.ndarray) and out.shape == (2,)
    assert model.db(100.0, np.array([True, False])).shape == (2,)
    assert model.shadowing_std_db(np.array([[1.0, 2.0]]), False).shape == (1, 2)
    assert model.los_probability(np.array([10.0, 20.0])).shape == (2,)


def test_default_bs_heights():
    defaults = {"uma": 25.0, "umi": 10.0, "rma": 35.0, "inh": 3.0}
    for scenario, h_bs in defaults.items():
        assert Tr38901(scenario).resolved_bs_height_m == h_bs
        assert Tr38901(scenario, bs_height_m=h_bs).db(150.0, False) == Tr38901(scenario).db(
            150.0, False
        )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"scenario": "uma2"}, "unknown TR 38.901 scenario"),
        ({"scenario": "UMa"}, "unknown TR 38.901 scenario"),
        ({"scenario": "inh", "inh_office": "closed"}, "inh_office"),
        ({"scenario": "uma", "carrier_hz": 0.0}, "carrier_hz"),
        ({"scenario": "uma", "carrier_hz": math.nan}, "carrier_hz"),
        ({"scenario": "umi", "bs_height_m": -10.0}, "bs_height_m"),
        ({"scenario": "inh", "ut_height_m": 0.0}, "ut_height_m"),
        ({"scenario": "rma", "building_height_m": 0.0}, "building_height_m"),
        ({"scenario": "rma", "street_width_m": -1.0}, "street_width_m"),
        ({"scenario": "umi", "ut_height_m": 0.5}, "h_E"),
        ({"scenario": "uma", "bs_height_m": 0.9}, "h_E"),
        ({"scenario": "uma", "ut_height_m": 25.0}, "at most 23 m"),
    ],
)
def test_invalid_inputs_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Tr38901(**kwargs)


def test_invalid_distances_raise():
    model = Tr38901("uma")
    for bad in (-1.0, math.nan, math.inf, np.array([10.0, -5.0])):
        with pytest.raises(ValueError, match="distance_2d_m"):
            model.db(bad, True)
        with pytest.raises(ValueError, match="distance_2d_m"):
            model.los_probability(bad)


# --- against NVIDIA Sionna (sionna-no-rt), where installed -----------------------------------
#
# Sionna 2.2 follows TR 38.901 V19.2 (or V16.1) for these laws; its formulas agree with the
# standard's (and with ours, to the last bit) except:
# - its breakpoints use c = 299 792 458 m/s where the table's notes say c = 3.0e8 m/s, so its
#   d_BP is 0.07 % longer: beyond it Sionna's LOS path loss is lower by 0.0054 dB (UMa,
#   9·log10 of d'_BP²), 0.0057 dB (UMi, 9.5·) and 0.0006-0.003 dB (RMa PL2), and its RMa LOS
#   σ_SF switches from 4 to 6 dB ~3 m later. The tight comparison patches Sionna's constant
#   to 3.0e8; the last test checks the gap with Sionna as shipped;
# - UMa LOS probability, h_UT > 13 m: Sionna sets 1 only for d_2D < 18 m, so at 18 m (and up
#   to ~18.5 m) it returns the printed product, which is above 1 (1.006 at 18 m for
#   h_UT = 22.5 m); the table says 1 for d_2D <= 18 m, and we cap the product at 1;
# - Sionna draws UMa's h_E at random for h_UT >= 13 m (the standard's procedure; ours keeps
#   h_E = 1 m), so its UMa path loss is compared at h_UT < 13 m only, its (deterministic) LOS
#   probability at any h_UT.

SIONNA_CASES = [
    ("uma", 3.5e9, 25.0, 1.5, {}, [10.0, 20.0, 150.0, 559.0, 561.0, 600.0, 3000.0]),
    ("uma", 28e9, 30.0, 8.0, {}, [20.0, 150.0, 600.0, 3000.0, 5000.0]),
    ("umi", 3.5e9, 10.0, 1.5, {}, [10.0, 20.0, 150.0, 209.0, 211.0, 600.0, 3000.0]),
    ("umi", 2e9, 12.0, 4.0, {}, [20.0, 150.0, 600.0, 879.0, 881.0, 3000.0]),
    ("rma", 3.5e9, 35.0, 1.5, {}, [10.0, 20.0, 150.0, 600.0, 3000.0, 3848.0, 3849.0, 6000.0]),
    (
        "rma",
        0.8e9,
        45.0,
        2.0,
        {"building_height_m": 12.0, "street_width_m": 30.0},
        [20.0, 150.0, 600.0, 1500.0, 1510.0, 3000.0, 9000.0],
    ),
    ("inh", 3.5e9, 3.0, 1.0, {"inh_office": "mixed"}, [1.0, 5.0, 6.5, 40.0, 100.0, 150.0]),
    ("inh", 28e9, 3.0, 1.0, {"inh_office": "open"}, [1.0, 5.0, 40.0, 49.0, 100.0, 150.0]),
]


@pytest.fixture(scope="module")
def sionna_tr38901():
    pytest.importorskip("torch")
    return pytest.importorskip("sionna.phy.channel.tr38901")


def _sionna_links(tr38901, scenario, carrier_hz, h_bs, h_ut, extra, distances_m, los):
    """Sionna's basic path loss, LOS probability and σ_SF for one BS and UTs on a line."""
    import torch

    dtype = torch.float64
    array = tr38901.PanelArray(
        num_rows_per_panel=1,
        num_cols_per_panel=1,
        polarization="single",
        polarization_type="V",
        antenna_pattern="omni",
        carrier_frequency=carrier_hz,
        precision="double",
        device="cpu",
    )
    common = {"precision": "double", "device": "cpu"}
    if scenario == "uma":
        sim = tr38901.UMaScenario(carrier_hz, "low", array, array, "downlink", **common)
    elif scenario == "umi":
        sim = tr38901.UMiScenario(carrier_hz, "low", array, array, "downlink", **common)
    elif scenario == "rma":
        sim = tr38901.RMaScenario(
            carrier_hz,
            array,
            array,
            "downlink",
            average_street_width=extra.get("street_width_m", 20.0),
            average_building_height=extra.get("building_height_m", 5.0),
            **common,
        )
    else:
        office = extra["inh_office"]
        sim = tr38901.InHScenario(carrier_hz, office, array, array, "downlink", **common)
    n = len(distances_m)
    ut_loc = torch.zeros(1, n, 3, dtype=dtype)
    ut_loc[0, :, 0] = torch.tensor(distances_m, dtype=dtype)
    ut_loc[0, :, 2] = h_ut
    bs_loc = torch.tensor([[[0.0, 0.0, h_bs]]], dtype=dtype)
    sim.set_topology(
        ut_loc=ut_loc,
        bs_loc=bs_loc,
        ut_orientations=torch.zeros(1, n, 3, dtype=dtype),
        bs_orientations=torch.zeros(1, 1, 3, dtype=dtype),
        ut_velocities=torch.zeros(1, n, 3, dtype=dtype),
        in_state=torch.full((1, n), scenario == "inh", dtype=torch.bool),
        los=los,
    )
    assert torch.allclose(sim.distance_2d[0, 0], torch.tensor(distances_m, dtype=dtype))
    return (
        sim.basic_pathloss[0, 0].numpy(),
        sim.los_probability[0, 0].numpy(),
        10.0 * sim.lsp_log_std[0, 0, :, 3].numpy(),  # σ_SF, stored as σ/10 (log10 domain)
    )


def _model(scenario, carrier_hz, h_bs, h_ut, extra):
    return Tr38901(scenario, carrier_hz=carrier_hz, bs_height_m=h_bs, ut_height_m=h_ut, **extra)


@pytest.fixture
def sionna_with_standard_c(sionna_tr38901, monkeypatch):
    for name in ("uma_scenario", "umi_scenario", "rma_scenario"):
        module = importlib.import_module(f"sionna.phy.channel.tr38901.{name}")
        monkeypatch.setattr(module, "SPEED_OF_LIGHT", C_MPS)
    return sionna_tr38901


@pytest.mark.parametrize("case", SIONNA_CASES, ids=lambda c: f"{c[0]}-{c[1] / 1e9:g}GHz")
def test_matches_sionna(sionna_with_standard_c, case):
    scenario, carrier_hz, h_bs, h_ut, extra, distances_m = case
    model = _model(scenario, carrier_hz, h_bs, h_ut, extra)
    d = np.array(distances_m)
    for los in (True, False):
        loss_db, probability, sigma_db = _sionna_links(
            sionna_with_standard_c, scenario, carrier_hz, h_bs, h_ut, extra, distances_m, los
        )
        np.testing.assert_allclose(model.db(d, los), loss_db, rtol=0, atol=1e-6)
        np.testing.assert_allclose(model.los_probability(d), probability, rtol=0, atol=1e-9)
        np.testing.assert_allclose(model.shadowing_std_db(d, los), sigma_db, rtol=0, atol=1e-9)


@pytest.mark.parametrize("h_ut", [1.5, 13.0, 16.0, 19.0, 22.5])
def test_uma_los_probability_matches_sionna(sionna_tr38901, h_ut):
    # From 20 m: with h_UT > 13 m, Sionna's value at d_2D = 18 m and just above is the
    # uncapped product (> 1; e.g. 1.006 at 18 m for h_UT = 22.5 m, where the table says
    # Pr_LOS = 1 for d_2D <= 18 m and we cap at 1).
    distances_m = [20.0, 25.0, 60.0, 150.0, 300.0, 450.0, 900.0, 3000.0]
    _, probability, _ = _sionna_links(
        sionna_tr38901, "uma", 3.5e9, 25.0, h_ut, {}, distances_m, True
    )
    model = Tr38901("uma", ut_height_m=h_ut)
    np.testing.assert_allclose(model.los_probability(np.array(distances_m)), probability, atol=1e-9)


def test_sionna_codata_c_gap_is_small(sionna_tr38901):
    """Unpatched Sionna (c = 299 792 458 m/s): identical before the breakpoint, < 0.01 dB after."""
    for scenario, carrier_hz, h_bs, h_ut, extra, distances_m in SIONNA_CASES[:6]:
        model = _model(scenario, carrier_hz, h_bs, h_ut, extra)
        loss_db, _, _ = _sionna_links(
            sionna_tr38901, scenario, carrier_hz, h_bs, h_ut, extra, distances_m, True
        )
        gap_db = np.abs(model.db(np.array(distances_m), True) - loss_db)
        before = np.array(distances_m) < 0.999 * model.breakpoint_m
        assert np.all(gap_db[before] < 1e-9)
        assert np.all(gap_db < 0.01)
