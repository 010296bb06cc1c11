"""Uplink resource-block schedulers and NR open-loop uplink power control.

Pure functions and small stateful objects (no simpy, no torch): the event model asks a
scheduler, once per scheduling period, how to split the physical resource blocks (PRBs) of
the band among the clients that have data, then tells it what each achieved, and sets each
client's transmit power with :func:`open_loop_power_dbm`.

Fading is flat across the band, or flat within each subband (a group of PRBs) where the
caller uses :meth:`Scheduler.allocate_subbands`.

Flat: a client's achievable rate is the same on every PRB, so a scheduler only decides how
many PRBs each client gets, not which ones. It sees each client's rate as a function of its
PRB count (:data:`RateOnPrbs`): a client's transmit power spreads over its PRBs, so on a
power-limited uplink its rate grows less than linearly with them, and PF and max rate give
each PRB where it adds the most (:func:`_greedy`).

Per subband: the scheduler sees each client's rate on each whole subband (at a reference
power per PRB) and returns the PRBs each client gets on each subband. PF and max rate give
each subband whole to its best client, as frequency-domain schedulers do (NR's resource
allocation type 0 lets a client hold non-contiguous groups); round robin places its counts
contiguously.
"""

from __future__ import annotations

import heapq
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from fedsim.sim.nr import SUBCARRIERS_PER_PRB

# TS 38.101-1 Table 5.3.2-1: maximum transmission bandwidth configuration N_RB (FR1) per
# subcarrier spacing [kHz] and channel bandwidth [MHz]; N/A entries are left out.
_FR1_NRB: dict[int, dict[int, int]] = {
    15: {3: 15, 5: 25, 10: 52, 15: 79, 20: 106, 25: 133, 30: 160, 35: 188, 40: 216, 45: 242,
         50: 270},
    30: {5: 11, 10: 24, 15: 38, 20: 51, 25: 65, 30: 78, 35: 92, 40: 106, 45: 119, 50: 133,
         60: 162, 70: 189, 80: 217, 90: 245, 100: 273},
    60: {10: 11, 15: 18, 20: 24, 25: 31, 30: 38, 35: 44, 40: 51, 45: 58, 50: 65, 60: 79,
         70: 93, 80: 107, 90: 121, 100: 135},
}  # fmt: skip


def _numerology(subcarrier_spacing_khz: float) -> int:
    """mu with SCS = 15 * 2^mu kHz (TS 38.211 Table 4.2-1: mu = 0..6)."""
    for mu in range(7):
        if subcarrier_spacing_khz == 15 * 2**mu:
            return mu
    raise ValueError(f"subcarrier spacing {subcarrier_spacing_khz} kHz is not 15 * 2^mu, mu 0..6")


def prb_hz(subcarrier_spacing_khz: int) -> float:
    """The bandwidth of one PRB: 12 subcarriers (TS 38.211 §4.4.4.1)."""
    _numerology(subcarrier_spacing_khz)
    return SUBCARRIERS_PER_PRB * subcarrier_spacing_khz * 1e3


def num_prbs(bandwidth_hz: float, subcarrier_spacing_khz: int) -> int:
    """The PRBs a carrier of ``bandwidth_hz`` holds.

    A channel bandwidth that TS 38.101-1 Table 5.3.2-1 lists for this SCS gets its N_RB (the
    guard bands take the rest, e.g. 20 MHz at 30 kHz: 51 PRBs, not 55); any other bandwidth
    (e.g. 1 MHz, or 60 MHz at 15 kHz where the table says N/A) is taken as all PRBs:
    floor(bandwidth / PRB width). Raises ValueError if the band cannot hold one PRB.
    """
    width_hz = prb_hz(subcarrier_spacing_khz)
    bandwidth_mhz = round(bandwidth_hz / 1e6)
    if abs(bandwidth_hz - bandwidth_mhz * 1e6) < 1.0:  # a whole number of MHz (float-safe)
        listed = _FR1_NRB.get(int(subcarrier_spacing_khz), {}).get(bandwidth_mhz)
        if listed is not None:
            return listed
    prbs = math.floor(bandwidth_hz / width_hz + 1e-9)  # 1e-9: an exact multiple stays whole
    if prbs < 1:
        raise ValueError(
            f"{bandwidth_hz} Hz cannot hold one PRB of {width_hz} Hz "
            f"({subcarrier_spacing_khz} kHz subcarriers)"
        )
    return prbs


RateOnPrbs = Callable[[int, float], float]
"""rate_bps(i, m): what the i-th user could send at now on m PRBs [bit/s] (0 on 0 PRBs);
non-decreasing in m. ``m`` may be fractional (an equal share)."""


SubbandRates = Callable[[int, int], np.ndarray]
"""rates_of(i, k): what the i-th user could send at now on each whole subband [bit/s], when it
holds k subbands (its power spread over them); >= 0."""


class FlatRates:
    """Rates proportional to the PRBs: a fixed power per PRB, Sionna's schedulers' view.
    A PRB adds exactly ``rate_per_prb_bps[i]`` (so ties stay exact ties)."""

    def __init__(self, rate_per_prb_bps: Sequence[float]) -> None:
        self.rate_per_prb_bps = list(rate_per_prb_bps)

    def __call__(self, i: int, prbs: float) -> float:
        return self.rate_per_prb_bps[i] * prbs


def flat_rates(rate_per_prb_bps: Sequence[float]) -> FlatRates:
    """The rate function of users with these rates on one PRB and a fixed power per PRB."""
    return FlatRates(rate_per_prb_bps)


class Scheduler(ABC):
    """Splits num_prbs PRBs of one scheduling period among the active users."""

    @abstractmethod
    def allocate(self, users: Sequence[int], rate_bps: RateOnPrbs, num_prbs: int) -> list[int]:
        """PRBs per user for this period, summing to ``num_prbs``.

        ``users``: client ids with data now, ascending; ``rate_bps(i, m)``: the i-th one's
        achievable rate on m PRBs now (flat fading: which PRBs does not matter).
        """

    def record(self, users: Sequence[int], achieved_bps: Sequence[float]) -> None:
        """The rate each active user achieved over the period that ends (bits delivered /
        period length). Schedulers without memory of rates ignore it."""
        del users, achieved_bps

    def allocate_subbands(
        self, users: Sequence[int], rates_of: SubbandRates, subband_prbs: Sequence[int]
    ) -> np.ndarray:
        """PRBs each user gets on each subband: an int array (len(users), len(subband_prbs)),
        each column summing to ``subband_prbs[s]``.

        ``rates_of(i, k)``: the i-th user's rate on each whole subband now when it holds k
        subbands (its power spread over them), >= 0. By default the PRB counts of
        :meth:`allocate` with each user's rate per PRB on one subband's worth, placed
        contiguously in user order from PRB 0: what a scheduler that does not look at the
        frequency axis does (the rates are asked only if it looks at them).
        """
        prbs = _check_subbands(users, subband_prbs)
        total = int(prbs.sum())

        def on_prbs(i: int, m: float) -> float:
            return float(_subband_rates(users, rates_of, 1, len(prbs), [i]).sum()) / total * m

        counts = self.allocate(users, on_prbs, total)
        return _place_contiguously(np.array(counts), prbs)


def _check(users: Sequence[int], num_prbs: int) -> None:
    if not users:
        raise ValueError("no users to schedule")
    if any(a >= b for a, b in zip(users[:-1], users[1:], strict=True)):
        raise ValueError(f"users must be ascending and distinct: {list(users)}")
    if num_prbs < 1:
        raise ValueError(f"num_prbs must be at least 1, got {num_prbs}")


def _check_subbands(users: Sequence[int], subband_prbs: Sequence[int]) -> np.ndarray:
    """The PRBs per subband as an int array, once checked with the users."""
    prbs = np.asarray(subband_prbs)
    if prbs.ndim != 1 or prbs.size == 0 or prbs.dtype.kind not in "iu" or (prbs < 1).any():
        raise ValueError(f"subband_prbs must be whole numbers >= 1, got {list(subband_prbs)}")
    _check(users, int(prbs.sum()))
    return prbs


def _subband_rates(
    users: Sequence[int], rates_of: SubbandRates, held: int, subbands: int,
    among: Sequence[int] | None = None,
) -> np.ndarray:  # fmt: skip
    """The rows of ``rates_of(i, held)`` for the users ``among`` (default: all), stacked and
    checked at once (a scheduler asks thousands of users each period)."""
    among = range(len(users)) if among is None else among
    rows = np.array([rates_of(i, held) for i in among], dtype=float).reshape(len(among), -1)
    if rows.shape[1] != subbands:
        raise ValueError(f"rates must be one per subband ({subbands}), got {rows.shape[1]}")
    if not (rows >= 0.0).all():  # also NaN
        row, column = np.argwhere(~(rows >= 0.0))[0]
        raise ValueError(
            f"user {users[among[row]]}'s rate on subband {column} is {rows[row, column]} bit/s"
        )
    return rows


def _place_contiguously(counts: np.ndarray, subband_prbs: np.ndarray) -> np.ndarray:
    """Per-subband PRBs of users holding ``counts`` PRBs each, contiguous in user order from
    PRB 0: each user's range split over the subbands it overlaps."""
    user_end = np.cumsum(counts)
    subband_end = np.cumsum(subband_prbs)
    overlap = np.minimum(user_end[:, None], subband_end[None, :]) - np.maximum(
        (user_end - counts)[:, None], (subband_end - subband_prbs)[None, :]
    )
    return np.maximum(overlap, 0)


def _greedy_subbands(
    users: Sequence[int], rates_of: SubbandRates, averages_bps: np.ndarray, subband_prbs: np.ndarray
) -> np.ndarray:
    """Each subband in turn to the (user, subband) pair whose R_i / T_i it raises most, as
    :func:`_greedy` does PRB by PRB; every subband is given. R_i(A) = Σ_{s∈A} r_i,s(|A|):
    a user's power spreads over the subbands it holds, so a subband it adds also lowers its
    rate on those it had (the loss term), and a power-limited user stops taking subbands
    that another uses better. T_i = 0 ranks above every T > 0 (among themselves, by the
    marginal rate) while the subband adds a positive rate; ties: the lowest index."""
    n, count = len(averages_bps), len(subband_prbs)
    held = np.zeros((n, count), dtype=bool)
    taken = np.zeros(count, dtype=bool)
    marginal = _subband_rates(users, rates_of, 1, count)
    now = marginal.copy()  # each user's rates at the subbands it holds (1 while it holds 0)
    zero = averages_bps <= 0.0
    scale = np.where(zero, 1.0, averages_bps)[:, None]
    for _ in range(count):
        gain = np.where(taken[None, :], -np.inf, marginal)
        infinite = zero[:, None] & (gain > 0.0)
        if infinite.any():
            scores = np.where(infinite, gain, -np.inf)
        else:
            scores = np.where(zero[:, None], -np.inf, gain / scale)
        i, s = np.unravel_index(int(np.argmax(scores)), scores.shape)
        held[i, s] = taken[s] = True
        k = int(held[i].sum())
        after = _subband_rates(users, rates_of, k + 1, count, [i])[0]
        marginal[i] = after + float((after - now[i])[held[i]].sum())
        now[i] = after
    return np.where(held, subband_prbs[None, :], 0)


def _rate(rate_bps: RateOnPrbs, i: int, prbs: float) -> float:
    rate = rate_bps(i, prbs)
    if not rate >= 0.0:  # also NaN
        raise ValueError(f"user {i}'s rate on {prbs} PRBs is {rate} bit/s")
    return rate


def _greedy(rate_bps: RateOnPrbs, averages_bps: Sequence[float], num_prbs: int) -> list[int]:
    """Each PRB in turn to the user whose R_i(m_i) / T_i it raises most (ties: the lowest
    index); every PRB is given. T_i = 0 ranks above every T > 0 (among themselves, by the
    marginal rate alone) while the PRB adds a positive rate.

    This maximises sum_i R_i(m_i) / T_i over integer allocations when every R_i is concave
    in m (Federgruen & Groenevelt, Oper. Res. 1986): the gradient scheduler's per-period
    problem (T the average rate: proportional fair; T = 1: max rate). With rates linear in
    m (a fixed power per PRB) every PRB goes to the largest r_i / T_i, as per-PRB metrics
    do (exactly, for ``FlatRates``: ties stay ties); when a user's power spreads over its
    PRBs its marginal rate falls and the next PRB goes to another user. With an MCS
    table's steps R_i is not concave and this is a heuristic.
    """

    def key(i: int, gain_bps: float) -> tuple[bool, float, int]:
        average = averages_bps[i]
        if average > 0.0:
            return (True, -gain_bps / average, i)
        return (gain_bps <= 0.0, -gain_bps, i)

    n = len(averages_bps)
    if n == 1:  # a lone user takes every PRB, one by one below: no rate needs asking
        return [num_prbs]
    prbs = [0] * n
    if isinstance(rate_bps, FlatRates):  # every PRB adds the same: the best takes them all
        for i in range(n):
            _rate(rate_bps, i, 1)
        best = min(range(n), key=lambda i: key(i, rate_bps.rate_per_prb_bps[i]))
        prbs[best] = num_prbs
        return prbs
    rate_now = [0.0] * n
    rate_next = [_rate(rate_bps, i, 1) for i in range(n)]
    heap = [key(i, rate_next[i]) for i in range(n)]
    heapq.heapify(heap)
    for _ in range(num_prbs):
        i = heapq.heappop(heap)[2]
        prbs[i] += 1
        rate_now[i] = rate_next[i]
        rate_next[i] = _rate(rate_bps, i, prbs[i] + 1)
        heapq.heappush(heap, key(i, rate_next[i] - rate_now[i]))
    return prbs


class RoundRobin(Scheduler):
    """Frequency-domain round robin, as the uplink of ns-3's RrFfMacScheduler.

    Each of the n active users gets floor(N/n) PRBs; the N mod n left over go one each to
    the next users of a rotation that resumes, every period, after the last user that got
    one (ns-3 keeps the same cursor as ``m_nextRntiUl``; unlike ns-3 there is no 3-RB
    minimum and no PRB stays unused). Over n periods of the same users each gets exactly N
    PRB-periods, whatever the rates: exactly fair in resources. With N < n, N users get one
    PRB each per period and the others wait their turn.

    The cursor is a client id (the first to get a left-over PRB next period, or the next
    higher id if it is no longer active, wrapping to the lowest), so users entering or
    leaving never leave it undefined. Per subband (:meth:`Scheduler.allocate_subbands`): the
    same counts, each user's PRBs contiguous, in user order from PRB 0.
    """

    def __init__(self) -> None:
        self._next_id = 0

    def allocate(self, users: Sequence[int], rate_bps: RateOnPrbs, num_prbs: int) -> list[int]:
        del rate_bps  # blind to the channel
        _check(users, num_prbs)
        n = len(users)
        base, extra = divmod(num_prbs, n)
        start = next((i for i, u in enumerate(users) if u >= self._next_id), 0)
        prbs = [base] * n
        for k in range(extra):
            prbs[(start + k) % n] += 1
        self._next_id = users[(start + extra) % n]
        return prbs


class ProportionalFair(Scheduler):
    """Proportional fair, with the definitions of Sionna SYS ``PFSchedulerSUMIMO``.

    Metric of user u on a PRB: the rate the PRB adds to u / T(u), with T the beta-discounted
    average of the rate u achieved, T(u) <- beta T(u) + (1 - beta) R(u) after each period
    (beta = 0.98 as Sionna). Each PRB goes to the highest metric (:func:`_greedy`). With
    rates linear in the PRBs (``flat_rates``) this is Sionna's per-PRB metric rate / T and
    the whole period goes to one user (flat fading); when u's power spreads over its PRBs,
    u's metric falls with each PRB it gets and the band is split, as the gradient scheduler
    of a power-limited uplink does.

    Differences from Sionna, which schedules a full buffer (every user every slot):

    * only the users active in a period have T updated (:meth:`record`): a client with no
      data keeps its T rather than decaying towards 0, so it does not come back from an idle
      spell (e.g. local training) with an inflated metric that would starve the others;
    * a client first seen starts with T = its rate on an equal share (N / n PRBs), so its
      first metric is about n, where Sionna starts every T at 1 (bps);
    * a T of 0 (a client first seen with rate 0) gives metric +inf for a positive rate, 0
      for a zero rate (Sionna divides as is).

    Per subband (:meth:`allocate_subbands`): each subband whole to its highest rate / T, the
    frequency-domain PF of ns-3's PfFfMacScheduler (per RBG) and of Lee et al. (INFOCOM 2009)
    for the uplink, without the latter's contiguity constraint: NR's resource allocation
    type 0 lets a client hold non-contiguous groups. A user peaking on different subbands
    than the others gets its peaks: frequency diversity on top of PF's time diversity.
    """

    def __init__(self, beta: float = 0.98) -> None:
        if not 0.0 < beta < 1.0:
            raise ValueError(f"discount factor beta must be in (0, 1), got {beta}")
        self.beta = beta
        self._average_bps: dict[int, float] = {}

    @property
    def average_bps(self) -> Mapping[int, float]:
        """T per client seen so far [bit/s] (read-only view)."""
        return MappingProxyType(self._average_bps)

    def allocate(self, users: Sequence[int], rate_bps: RateOnPrbs, num_prbs: int) -> list[int]:
        _check(users, num_prbs)
        equal_share = num_prbs / len(users)
        for i, user in enumerate(users):
            if user not in self._average_bps:
                self._average_bps[user] = _rate(rate_bps, i, equal_share)
        return _greedy(rate_bps, [self._average_bps[u] for u in users], num_prbs)

    def allocate_subbands(
        self, users: Sequence[int], rates_of: SubbandRates, subband_prbs: Sequence[int]
    ) -> np.ndarray:
        """Subband by subband to the largest gain in R(u) / T(u) (:func:`_greedy_subbands`);
        a user first seen starts with T = its rate on 1/n of every subband, its power
        spread over an equal share (S/n subbands, at least one)."""
        prbs = _check_subbands(users, subband_prbs)
        n = len(users)
        new = [i for i, user in enumerate(users) if user not in self._average_bps]
        if new:
            share = max(1, round(len(prbs) / n))
            first = _subband_rates(users, rates_of, share, len(prbs), new).sum(axis=1) / n
            for i, average in zip(new, first.tolist(), strict=True):
                self._average_bps[users[i]] = average
        averages = np.array([self._average_bps[u] for u in users])
        return _greedy_subbands(users, rates_of, averages, prbs)

    def record(self, users: Sequence[int], achieved_bps: Sequence[float]) -> None:
        """Update T of the active users; one never allocated starts from its achieved rate."""
        for user, rate in zip(users, achieved_bps, strict=True):
            average = self._average_bps.get(user, rate)
            self._average_bps[user] = self.beta * average + (1.0 - self.beta) * rate


class MaxRate(Scheduler):
    """Each PRB to the user whose rate it raises most (ties: the lowest id): the period's
    sum-rate optimum for concave rates, which starves users with a weaker channel. With
    rates linear in the PRBs, every PRB goes to the highest rate per PRB; per subband, each
    subband to the highest rate on it."""

    def allocate(self, users: Sequence[int], rate_bps: RateOnPrbs, num_prbs: int) -> list[int]:
        _check(users, num_prbs)
        return _greedy(rate_bps, [1.0] * len(users), num_prbs)

    def allocate_subbands(
        self, users: Sequence[int], rates_of: SubbandRates, subband_prbs: Sequence[int]
    ) -> np.ndarray:
        """Subband by subband to the largest gain in the sum rate (ties: the lowest id)."""
        prbs = _check_subbands(users, subband_prbs)
        return _greedy_subbands(users, rates_of, np.ones(len(users)), prbs)


def make_scheduler(name: str, pf_beta: float = 0.98) -> Scheduler:
    """The scheduler called ``name``: "round_robin", "proportional_fair" or "max_rate"."""
    if name == "round_robin":
        return RoundRobin()
    if name == "proportional_fair":
        return ProportionalFair(pf_beta)
    if name == "max_rate":
        return MaxRate()
    raise ValueError(f"unknown scheduler {name!r}: round_robin, proportional_fair or max_rate")


def open_loop_power_dbm(
    p0_dbm: float,
    alpha: float,
    path_loss_db: float | np.ndarray,
    prbs: float | np.ndarray,
    max_dbm: float | np.ndarray,
    subcarrier_spacing_khz: int = 15,
) -> float | np.ndarray:
    """PUSCH transmit power of TS 38.213 §7.1.1, open loop [dBm]:

        min(P_CMAX, P_O_PUSCH + 10 log10(2^mu * M_RB) + alpha * PL)

    with Delta_TF = 0 and closed-loop f = 0; mu from the SCS (15 * 2^mu kHz), ``prbs`` = M_RB,
    ``max_dbm`` = P_CMAX, ``p0_dbm`` = P_O_PUSCH (the received power targeted per 180 kHz, a
    PRB at 15 kHz), ``alpha`` in [0, 1] the path-loss compensation. A user with 0 PRBs sends
    nothing: -inf dBm.

    Sionna SYS ``open_loop_uplink_power_control`` leaves out the 2^mu factor (it takes
    subcarriers, not the SCS): the two agree at 15 kHz and this one is 10 log10(2^mu) dB
    higher otherwise (below the cap), as the standard says: the same power spectral density
    at every numerology.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    prbs_array = np.asarray(prbs, dtype=float)
    if np.any(prbs_array < 0):
        raise ValueError("prbs must be non-negative")
    mu = _numerology(subcarrier_spacing_khz)
    with np.errstate(divide="ignore"):  # 0 PRBs: log10(0) = -inf on purpose
        bandwidth_db = 10.0 * np.log10(2.0**mu * prbs_array)
    power_dbm = np.minimum(
        max_dbm, p0_dbm + bandwidth_db + alpha * np.asarray(path_loss_db, dtype=float)
    )
    return float(power_dbm) if np.ndim(power_dbm) == 0 else power_dbm


@dataclass(frozen=True)
class UplinkScheduling:
    """How the uplink's PRBs are scheduled (``ScheduledMedium``): the scheduler's name, the
    numerology, the scheduling period, the proportional-fair discount, and whether the
    scheduler sees that a client's power spreads over its PRBs (``power_aware``; False: a
    rate per PRB of the full band's rate / N, the per-PRB view of Sionna's schedulers)."""

    scheduler: str
    subcarrier_spacing_khz: int = 30
    period_s: float = 0.1
    pf_beta: float = 0.98
    power_aware: bool = True
