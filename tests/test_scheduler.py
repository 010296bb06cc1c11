"""Uplink PRB schedulers and open-loop power control: the standard's numbers, fairness
properties, and agreement with Sionna SYS where it is installed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedsim.sim.scheduler import (
    MaxRate,
    ProportionalFair,
    RoundRobin,
    SubbandRates,
    flat_rates,
    make_scheduler,
    num_prbs,
    open_loop_power_dbm,
    prb_hz,
)


@pytest.mark.parametrize(
    ("bandwidth_hz", "scs_khz", "expected"),
    [
        (20e6, 30, 51),
        (20e6, 15, 106),
        (10e6, 15, 52),
        (100e6, 30, 273),
        (5e6, 15, 25),
        (3e6, 15, 15),
        (35e6, 30, 92),
        (40e6, 60, 51),
        (100e6, 60, 135),
    ],
)
def test_num_prbs_table(bandwidth_hz: float, scs_khz: int, expected: int) -> None:
    assert num_prbs(bandwidth_hz, scs_khz) == expected


@pytest.mark.parametrize(
    ("bandwidth_hz", "scs_khz", "expected"),
    [
        (1e6, 15, 5),  # not a channel bandwidth: floor(1e6 / 180e3)
        (1e6, 30, 2),
        (360e3, 30, 1),  # exactly one PRB
        (60e6, 15, 333),  # N/A in the table at 15 kHz
        (5e6, 60, 6),  # N/A in the table at 60 kHz
        (20.5e6, 30, 56),  # between columns
    ],
)
def test_num_prbs_fallback(bandwidth_hz: float, scs_khz: int, expected: int) -> None:
    assert num_prbs(bandwidth_hz, scs_khz) == expected


def test_num_prbs_rejects_a_band_under_one_prb_and_a_bad_scs() -> None:
    with pytest.raises(ValueError, match="cannot hold one PRB"):
        num_prbs(100e3, 15)
    with pytest.raises(ValueError, match="15 \\* 2\\^mu"):
        num_prbs(20e6, 45)


def test_prb_hz() -> None:
    assert prb_hz(15) == 180e3
    assert prb_hz(30) == 360e3
    assert prb_hz(120) == 1.44e6


def _rayleigh_rates(rng: np.random.Generator, snr: np.ndarray, periods: int) -> np.ndarray:
    """[periods, users] rate per PRB, log2(1 + snr |h|^2) with |h|^2 ~ Exp(1)."""
    gain = rng.exponential(1.0, size=(periods, len(snr)))
    return np.log2(1.0 + snr * gain)


def _run(scheduler, users: list[int], rates: np.ndarray, prbs: int) -> np.ndarray:
    """PRBs per user and period, recording the achieved rate after each period."""
    out = np.zeros(rates.shape, dtype=int)
    for t, rate in enumerate(rates):
        allocation = scheduler.allocate(users, flat_rates(list(rate)), prbs)
        assert sum(allocation) == prbs
        out[t] = allocation
        scheduler.record(users, list(np.asarray(allocation) * rate))
    return out


@pytest.mark.parametrize(("n", "prbs"), [(5, 51), (4, 100), (7, 3), (3, 1), (6, 6)])
def test_round_robin_is_exactly_fair(n: int, prbs: int) -> None:
    rng = np.random.default_rng(0)
    users = [2, 5, 9, 11, 20, 31, 40][:n]
    rates = _rayleigh_rates(rng, np.geomspace(1.0, 1e3, n), 4 * n)
    allocation = _run(RoundRobin(), users, rates, prbs)
    assert (allocation.sum(axis=1) == prbs).all()
    assert (allocation.sum(axis=0) == 4 * prbs).all()  # k n periods: k N each
    assert allocation.max() - allocation.min() <= 1  # within a period: floor or floor + 1
    if prbs < n:  # some wait in each period, everyone gets turns
        assert (allocation == 0).any(axis=1).all()
        assert (allocation[:n].sum(axis=0) == prbs).all()


def test_round_robin_rotation_survives_users_entering_and_leaving() -> None:
    scheduler = RoundRobin()
    prbs = 7
    for users in ([1, 2, 3], [1, 3], [0, 1, 2, 3], [3], [0, 4], [0, 1, 2, 3, 4]):
        assert sum(scheduler.allocate(users, flat_rates([1.0] * len(users)), prbs)) == prbs
    users = [0, 1, 2, 4]  # a stable set from wherever the cursor stands: fair again
    totals = np.sum([scheduler.allocate(users, flat_rates([1.0] * 4), prbs) for _ in users], axis=0)
    assert totals.tolist() == [prbs] * 4


def test_proportional_fair_equal_users_share_equally() -> None:
    rng = np.random.default_rng(1)
    n, prbs, periods = 4, 51, 5000
    rates = _rayleigh_rates(rng, np.full(n, 10.0), periods)
    allocation = _run(ProportionalFair(), list(range(n)), rates, prbs)
    assert ((allocation == 0) | (allocation == prbs)).all()  # flat fading: one user a period
    share = allocation.sum(axis=0) / (prbs * periods)
    np.testing.assert_allclose(share, 1.0 / n, atol=0.02)


def test_proportional_fair_favours_a_user_at_its_peak() -> None:
    scheduler = ProportionalFair()
    users, prbs = [0, 1], 10
    means = [1.0, 4.0]  # rate per PRB on average: A (0) low, B (1) high
    scheduler.allocate(users, flat_rates(means), prbs)  # first seen: T = rate on an equal share
    for _ in range(50):  # and both keep achieving their mean over an equal share
        scheduler.record(users, [m * prbs / 2 for m in means])
    np.testing.assert_allclose([scheduler.average_bps[u] for u in users], [5.0, 20.0])
    now = [2.0, 3.0]  # A at twice its mean, B below its mean (though still higher than A)
    assert scheduler.allocate(users, flat_rates(now), prbs) == [prbs, 0]
    assert MaxRate().allocate(users, flat_rates(now), prbs) == [0, prbs]


def test_proportional_fair_serves_a_weak_user_max_rate_starves() -> None:
    rng = np.random.default_rng(2)
    prbs, periods = 24, 3000
    rates = _rayleigh_rates(rng, np.array([100.0, 1.0]), periods)  # 20 dB apart
    pf_weak = _run(ProportionalFair(), [0, 1], rates, prbs)[:, 1].sum() / (prbs * periods)
    max_weak = _run(MaxRate(), [0, 1], rates, prbs)[:, 1].sum() / (prbs * periods)
    assert pf_weak > 0.3
    assert max_weak < 0.03


def test_proportional_fair_first_metric_and_zero_average() -> None:
    scheduler = ProportionalFair()
    assert scheduler.allocate([3, 8], flat_rates([2.0, 1.0]), 4) == [
        4,
        0,
    ]  # metrics 2 and 2: lowest id
    assert dict(scheduler.average_bps) == {3: 4.0, 8: 2.0}
    scheduler.allocate([1, 3], flat_rates([0.0, 5.0]), 4)  # client 1 first seen at rate 0: T = 0
    assert scheduler.average_bps[1] == 0.0
    assert scheduler.allocate([1, 3], flat_rates([0.5, 5.0]), 4) == [4, 0]  # 0.5 / 0: +inf


def test_proportional_fair_idle_clients_keep_their_average() -> None:
    scheduler = ProportionalFair(beta=0.5)
    scheduler.allocate([0, 1], flat_rates([1.0, 1.0]), 2)
    scheduler.record([0, 1], [2.0, 0.0])
    scheduler.record([1], [4.0])  # client 0 had no data: unchanged
    assert dict(scheduler.average_bps) == {0: 1.5, 1: 2.25}
    scheduler.record([7], [6.0])  # never allocated: starts from its achieved rate
    assert scheduler.average_bps[7] == 6.0


def test_proportional_fair_matches_sionna() -> None:
    sionna_sys = pytest.importorskip("sionna.sys")
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    n, prbs, periods, beta = 4, 10, 80, 0.98
    users = list(range(n))
    rates = _rayleigh_rates(rng, np.array([30.0, 10.0, 3.0, 1.0]), periods)
    ours = ProportionalFair(beta)
    theirs = sionna_sys.PFSchedulerSUMIMO(n, prbs, 1, beta=beta, precision="double", device="cpu")
    # Sionna starts T at 1 and updates it before scheduling; a virtual last-slot rate brings
    # it to our first-seen T (the rate on an equal share) in the first call.
    last = (rates[0] * (prbs / n) - beta) / (1.0 - beta)
    winners = set()
    for rate in rates:
        allocation = ours.allocate(users, flat_rates(list(rate)), prbs)
        grid = torch.tensor(np.broadcast_to(rate, (1, prbs, n)).copy(), dtype=torch.float64)
        scheduled = theirs(torch.tensor(last, dtype=torch.float64), grid)  # [1, N, n, 1]
        assert scheduled[0, :, :, 0].sum(dim=0).tolist() == allocation
        average = np.array([ours.average_bps[u] for u in users])
        np.testing.assert_allclose(theirs.rate_achieved_past.numpy(), average, rtol=1e-9)
        np.testing.assert_allclose(theirs.pf_metric[0, 0].numpy(), rate / average, rtol=1e-9)
        last = np.asarray(allocation) * rate
        ours.record(users, list(last))
        winners.add(int(np.argmax(allocation)))
    assert len(winners) == n  # the trace exercises every user winning


def test_max_rate_picks_the_best() -> None:
    scheduler = MaxRate()
    assert scheduler.allocate([0, 4, 6, 9], flat_rates([1.0, 5.0, 5.0, 2.0]), 12) == [0, 12, 0, 0]
    assert scheduler.allocate([3], flat_rates([0.0]), 5) == [5]


def _power_limited(gain_hz: list[float], width_hz: float = 1.0):
    """Shannon rate of a client with p g / N0 = gain_hz[i] spread over m PRBs of width_hz:
    m w log2(1 + G / (m w)), concave in m."""
    return lambda i, m: m * width_hz * math.log2(1.0 + gain_hz[i] / (m * width_hz)) if m else 0.0


def _best_allocation(rate_bps, weights: list[float], prbs: int) -> tuple[float, list[int]]:
    """max sum_i w_i R_i(m_i) over every split of prbs PRBs, by enumeration."""
    best: tuple[float, list[int]] = (-math.inf, [])

    def splits(n: int, total: int):
        if n == 1:
            yield [total]
            return
        for first in range(total + 1):
            for rest in splits(n - 1, total - first):
                yield [first, *rest]

    for split in splits(len(weights), prbs):
        value = sum(w * rate_bps(i, m) for i, (w, m) in enumerate(zip(weights, split, strict=True)))
        best = max(best, (value, split), key=lambda pair: pair[0])
    return best


@pytest.mark.parametrize(
    ("gains", "expected", "over_one_winner"),
    [
        ([2.0, 8.0, 30.0], [1, 2, 6], 1.1),  # the strong one most, the others a little
        ([0.5, 0.5, 40.0], [0, 0, 9], 1.0),  # weak ones add less than the strong one's 9th
        ([5.0, 5.0, 5.0], [3, 3, 3], 2.2),  # equal: an equal split, over twice one winner
    ],
)
def test_power_limited_max_rate_reaches_the_sum_rate_optimum(gains, expected, over_one_winner):
    prbs = 9
    rate = _power_limited(gains)
    allocation = MaxRate().allocate([0, 1, 2], rate, prbs)
    optimum, best = _best_allocation(rate, [1.0] * 3, prbs)
    assert allocation == best == expected
    sum_rate = sum(rate(i, m) for i, m in enumerate(allocation))
    assert sum_rate == pytest.approx(optimum, rel=1e-12)
    one_winner = max(rate(i, prbs) for i in range(3))
    assert sum_rate >= over_one_winner * one_winner


def test_power_limited_proportional_fair_maximises_the_weighted_rate_and_splits_the_band():
    scheduler = ProportionalFair()
    users, prbs = [4, 7, 9], 12
    gains = [3.0, 12.0, 1.0]
    rate = _power_limited(gains)
    first = scheduler.allocate(users, rate, prbs)  # T: each one's rate on 4 PRBs
    averages = [scheduler.average_bps[u] for u in users]
    np.testing.assert_allclose(averages, [rate(i, 4) for i in range(3)], rtol=1e-12)
    weights = [1.0 / t for t in averages]
    optimum, _ = _best_allocation(rate, weights, prbs)
    value = sum(w * rate(i, m) for i, (w, m) in enumerate(zip(weights, first, strict=True)))
    assert value == pytest.approx(optimum, rel=1e-12)
    assert min(first) > 0  # everyone served in one period, unlike with flat rates
    # The same per-PRB rates seen as flat (Sionna's view): one user takes the period.
    flat = ProportionalFair().allocate(
        users, flat_rates([rate(i, prbs) / prbs for i in range(3)]), prbs
    )
    assert sorted(flat) == [0, 0, prbs]


def test_power_limited_proportional_fair_shares_evenly_among_identical_users():
    rng = np.random.default_rng(5)
    n, prbs, periods = 4, 24, 2000
    scheduler = ProportionalFair()
    totals = np.zeros(n)
    for _ in range(periods):
        gains = list(rng.exponential(20.0, size=n))  # Rayleigh: identical statistics
        rate = _power_limited(gains)
        allocation = scheduler.allocate(list(range(n)), rate, prbs)
        totals += allocation
        scheduler.record(list(range(n)), [rate(i, m) for i, m in enumerate(allocation)])
    np.testing.assert_allclose(totals / totals.sum(), 1.0 / n, atol=0.02)


def test_greedy_ties_go_to_the_lowest_id_and_an_infinite_weight_comes_first() -> None:
    same = _power_limited([4.0, 4.0])
    assert MaxRate().allocate([2, 5], same, 3) == [2, 1]  # the odd PRB: the lower id
    scheduler = ProportionalFair()
    scheduler.allocate([1, 3], flat_rates([0.0, 5.0]), 4)  # T(1) = 0
    assert scheduler.allocate([1, 3], _power_limited([0.01, 50.0]), 4) == [4, 0]


def test_allocate_checks_its_inputs() -> None:
    for scheduler in (RoundRobin(), ProportionalFair(), MaxRate()):
        with pytest.raises(ValueError):
            scheduler.allocate([], flat_rates([]), 5)
        with pytest.raises(ValueError):
            scheduler.allocate([2, 1], flat_rates([1.0, 1.0]), 5)
        with pytest.raises(ValueError):
            scheduler.allocate([1, 2], flat_rates([1.0, 1.0]), 0)
    for scheduler in (ProportionalFair(), MaxRate()):  # a rate function gone wrong
        for bad in (-1.0, math.nan):
            with pytest.raises(ValueError, match="rate on"):
                scheduler.allocate([1, 2], flat_rates([1.0, bad]), 5)


def test_make_scheduler() -> None:
    assert isinstance(make_scheduler("round_robin"), RoundRobin)
    assert isinstance(make_scheduler("max_rate"), MaxRate)
    pf = make_scheduler("proportional_fair", pf_beta=0.9)
    assert isinstance(pf, ProportionalFair)
    assert pf.beta == 0.9
    with pytest.raises(ValueError, match="unknown scheduler"):
        make_scheduler("fifo")
    with pytest.raises(ValueError, match="beta"):
        make_scheduler("proportional_fair", pf_beta=1.0)


def test_open_loop_power_by_hand() -> None:
    # -90 + 10 log10(10) + 0.8 * 100 = 0 dBm
    assert open_loop_power_dbm(-90.0, 0.8, 100.0, 10, 23.0) == pytest.approx(0.0)
    # 30 kHz: 2^1 * 10 PRBs -> +3.01 dB
    assert open_loop_power_dbm(-90.0, 0.8, 100.0, 10, 23.0, 30) == pytest.approx(10 * math.log10(2))
    # -100 + 10 log10(4 * 25) + 1.0 * 95 = 15 dBm at 60 kHz
    assert open_loop_power_dbm(-100.0, 1.0, 95.0, 25, 23.0, 60) == pytest.approx(15.0)
    assert open_loop_power_dbm(-90.0, 1.0, 140.0, 10, 23.0) == 23.0  # capped at P_CMAX
    assert isinstance(open_loop_power_dbm(-90.0, 1.0, 100.0, 1, 23.0), float)
    assert open_loop_power_dbm(-90.0, 1.0, 100.0, 0, 23.0) == -math.inf  # no PRBs, no power


def test_open_loop_power_vectorizes() -> None:
    path_loss_db = np.array([80.0, 100.0, 120.0, 140.0])
    prbs = np.array([1, 10, 51, 0])
    max_dbm = np.array([23.0, 23.0, 20.0, 23.0])
    power = open_loop_power_dbm(-80.0, 0.7, path_loss_db, prbs, max_dbm, 30)
    assert isinstance(power, np.ndarray)
    with np.errstate(divide="ignore"):
        expected = -80.0 + 10 * np.log10(2 * prbs) + 0.7 * path_loss_db
    np.testing.assert_allclose(power, np.minimum(max_dbm, expected))
    assert power[2] == 20.0 and power[3] == -math.inf


def test_open_loop_power_checks_its_inputs() -> None:
    with pytest.raises(ValueError, match="alpha"):
        open_loop_power_dbm(-90.0, 1.2, 100.0, 10, 23.0)
    with pytest.raises(ValueError, match="non-negative"):
        open_loop_power_dbm(-90.0, 1.0, 100.0, -1, 23.0)
    with pytest.raises(ValueError, match="15 \\* 2\\^mu"):
        open_loop_power_dbm(-90.0, 1.0, 100.0, 10, 23.0, 20)


def test_open_loop_power_matches_sionna() -> None:
    sionna_sys = pytest.importorskip("sionna.sys")
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    path_loss_db = rng.uniform(70.0, 130.0, 50)
    prbs = rng.integers(1, 100, 50)
    alpha, p0_dbm, max_dbm = 0.8, -85.0, 23.0
    watts = sionna_sys.open_loop_uplink_power_control(
        torch.tensor(10 ** (path_loss_db / 10), dtype=torch.float64),
        torch.tensor(12 * prbs),  # Sionna takes subcarriers
        alpha=alpha,
        p0_dbm=p0_dbm,
        ut_max_power_dbm=max_dbm,
        precision="double",
    ).numpy()
    sionna_dbm = 10 * np.log10(watts * 1e3)
    ours = open_loop_power_dbm(p0_dbm, alpha, path_loss_db, prbs, max_dbm)
    assert (ours == max_dbm).any() and (ours < max_dbm).any()  # both regimes exercised
    np.testing.assert_allclose(ours, sionna_dbm, atol=1e-9)  # 15 kHz: the same definition
    # Sionna has no 2^mu: at 30 kHz the standard is 3.01 dB higher below the cap
    ours_30 = open_loop_power_dbm(p0_dbm, alpha, path_loss_db, prbs, max_dbm, 30)
    uncapped = ours_30 < max_dbm
    np.testing.assert_allclose(
        ours_30[uncapped] - sionna_dbm[uncapped], 10 * np.log10(2), atol=1e-9
    )


# --- per-subband scheduling

SUBBAND_PRBS = [4] * 12 + [3]  # 51 PRBs (20 MHz at 30 kHz) in 13 subbands


def fixed(rates) -> SubbandRates:
    """Rates per subband that do not depend on how many a user holds: a fixed power per PRB."""
    rows = np.asarray(rates, dtype=float)
    return lambda i, held: rows[i]


def _subband_rates(rng: np.random.Generator, users: int, subbands: int = 13) -> np.ndarray:
    """[users, subbands] rate on each whole subband: i.i.d. Rayleigh per subband."""
    return _rayleigh_rates(rng, np.full(users, 10.0), subbands).T * 4


@pytest.mark.parametrize("users", [1, 3, 20, 60])  # 60: more users than PRBs
def test_subband_columns_hold_every_prb(users: int) -> None:
    rng = np.random.default_rng(6)
    for scheduler in (RoundRobin(), ProportionalFair(), MaxRate()):
        for _ in range(3):
            allocation = scheduler.allocate_subbands(
                list(range(users)), fixed(_subband_rates(rng, users)), SUBBAND_PRBS
            )
            assert allocation.shape == (users, 13) and allocation.dtype.kind == "i"
            assert (allocation >= 0).all()
            assert allocation.sum(axis=0).tolist() == SUBBAND_PRBS


def test_round_robin_per_subband_places_its_counts_contiguously() -> None:
    rng = np.random.default_rng(7)
    flat, per_subband = RoundRobin(), RoundRobin()
    boundaries = np.cumsum(SUBBAND_PRBS)[:-1]
    for users in ([1, 2, 3], [1, 3], [0, 1, 2, 3], [3], [0, 4], list(range(60)), [0, 1, 2, 4]):
        counts = flat.allocate(users, flat_rates([1.0] * len(users)), 51)
        allocation = per_subband.allocate_subbands(
            users, fixed(_subband_rates(rng, len(users))), SUBBAND_PRBS
        )
        assert allocation.sum(axis=1).tolist() == counts  # the rotation carries on alike
        owner = np.repeat(np.arange(len(users)), counts)  # PRB 0..50, user 0 first
        expected = [np.bincount(o, minlength=len(users)) for o in np.split(owner, boundaries)]
        np.testing.assert_array_equal(allocation, np.array(expected).T)


def test_proportional_fair_per_subband_by_hand() -> None:
    scheduler = ProportionalFair()
    rates = np.array([[4.0, 1.0, 2.0, 0.0], [2.0, 3.0, 2.0, 1.0], [1.0, 3.5, 6.0, 4.0]])
    prbs = [2, 3, 4, 1]
    # First seen: T = row sum / 3 = 7/3, 8/3, 14.5/3; r / T per subband:
    # [1.71 0.43 0.86 0], [0.75 1.13 0.75 0.38], [0.21 0.72 1.24 0.83]
    allocation = scheduler.allocate_subbands([2, 5, 7], fixed(rates), prbs)
    np.testing.assert_allclose(
        [scheduler.average_bps[u] for u in (2, 5, 7)], rates.sum(axis=1) / 3, rtol=1e-15
    )
    np.testing.assert_array_equal(allocation, [[2, 0, 0, 0], [0, 3, 0, 0], [0, 0, 4, 1]])
    # max rate gives subband 1 to the third user (3.5 > 3), PF to the second
    np.testing.assert_array_equal(
        MaxRate().allocate_subbands([2, 5, 7], fixed(rates), prbs),
        [[2, 0, 0, 0], [0, 0, 0, 0], [0, 3, 4, 1]],
    )


def test_proportional_fair_per_subband_zero_average_and_ties() -> None:
    scheduler = ProportionalFair()
    scheduler.allocate_subbands([1, 3], fixed([[0.0, 0.0], [5.0, 5.0]]), [2, 2])
    assert scheduler.average_bps[1] == 0.0  # first seen at rate 0: T = 0
    allocation = scheduler.allocate_subbands([1, 3], fixed([[0.1, 0.0], [5.0, 5.0]]), [2, 2])
    np.testing.assert_array_equal(allocation, [[2, 0], [0, 2]])  # 0.1 / 0: +inf; 0 / 0: 0
    tied = ProportionalFair().allocate_subbands([4, 6], fixed(np.ones((2, 3))), [1, 1, 1])
    np.testing.assert_array_equal(tied, [[1, 1, 1], [0, 0, 0]])  # ties: the lowest id


def test_proportional_fair_per_subband_gives_each_user_its_peaks() -> None:
    rates = np.ones((4, 8))
    for u in range(4):
        rates[u, 2 * u : 2 * u + 2] = 10.0  # equal sums: equal T
    allocation = ProportionalFair().allocate_subbands([0, 1, 2, 3], fixed(rates), [3] * 8)
    np.testing.assert_array_equal(allocation, 3 * (rates == 10.0))


def test_proportional_fair_per_subband_is_fair_in_the_long_run() -> None:
    rng = np.random.default_rng(8)
    n, periods = 4, 2000
    prbs = np.array(SUBBAND_PRBS)
    users = list(range(n))
    scheduler = ProportionalFair()
    held = np.zeros(n)
    for _ in range(periods):
        rates = _subband_rates(rng, n)
        allocation = scheduler.allocate_subbands(users, fixed(rates), SUBBAND_PRBS)
        held += (allocation > 0).sum(axis=1)
        scheduler.record(users, list((rates * allocation / prbs).sum(axis=1)))
    np.testing.assert_allclose(held / (13 * periods), 1.0 / n, atol=0.02)


def test_max_rate_per_subband_picks_each_column_maximum() -> None:
    rng = np.random.default_rng(9)
    rates = rng.integers(0, 4, size=(6, 13)).astype(float)  # small integers: many ties
    allocation = MaxRate().allocate_subbands([0, 2, 3, 5, 8, 9], fixed(rates), SUBBAND_PRBS)
    owners = allocation.argmax(axis=0)
    np.testing.assert_array_equal(owners, rates.argmax(axis=0))  # first maximum: lowest id
    np.testing.assert_array_equal(allocation[owners, np.arange(13)], SUBBAND_PRBS)


def test_per_subband_scales_to_thousands_of_users() -> None:
    rng = np.random.default_rng(10)
    users = list(range(0, 4000, 2))
    rates = _subband_rates(rng, len(users))
    for scheduler in (RoundRobin(), ProportionalFair(), MaxRate()):
        for _ in range(3):
            allocation = scheduler.allocate_subbands(users, fixed(rates), SUBBAND_PRBS)
            assert allocation.sum(axis=0).tolist() == SUBBAND_PRBS


def test_a_power_limited_user_takes_no_more_subbands_than_it_gains_from() -> None:
    """User 0's power is all it has: spread over k subbands, each carries 10/k (its rate stays
    10 however many it holds), while user 1 gets 3 on each whatever it holds. The first
    subband goes to user 0; a second would add 10/2 + (5 − 10) = 0 to it and 3 to user 1, so
    user 1 takes the rest (a per-subband metric alone would give user 0 everything)."""

    def rates_of(i: int, held: int) -> np.ndarray:
        return np.full(4, 10.0 / held) if i == 0 else np.full(4, 3.0)

    for scheduler in (MaxRate(), ProportionalFair()):
        allocation = scheduler.allocate_subbands([0, 1], rates_of, [2, 2, 2, 2])
        np.testing.assert_array_equal(allocation, [[2, 0, 0, 0], [0, 2, 2, 2]])


def test_allocate_subbands_checks_its_inputs() -> None:
    rates = np.ones((2, 3))
    for scheduler in (RoundRobin(), ProportionalFair(), MaxRate()):
        with pytest.raises(ValueError, match="ascending"):
            scheduler.allocate_subbands([2, 1], fixed(rates), [1, 2, 3])
        with pytest.raises(ValueError, match="no users"):
            scheduler.allocate_subbands([], fixed(np.ones((0, 3))), [1, 2, 3])
        for bad_prbs in ([1, 0, 3], [1.0, 2.0, 3.0], []):
            with pytest.raises(ValueError, match="subband_prbs"):
                scheduler.allocate_subbands([1, 2], fixed(rates), bad_prbs)
    for scheduler in (ProportionalFair(), MaxRate()):  # round robin never asks the rates
        with pytest.raises(ValueError, match="one per subband"):
            scheduler.allocate_subbands([1, 2], fixed(rates.T), [1, 2, 3])
        for bad in (-1.0, math.nan):
            wrong = rates.copy()
            wrong[1, 2] = bad
            with pytest.raises(ValueError, match="user 2's rate on subband 2"):
                scheduler.allocate_subbands([1, 2], fixed(wrong), [1, 2, 3])
