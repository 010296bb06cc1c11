"""Uplink resource-block schedulers and NR open-loop uplink power control.

Pure functions and small stateful objects (no simpy, no torch): the event model asks a
scheduler, once per scheduling period, how to split the physical resource blocks (PRBs) of
the band among the clients that have data, then tells it what each achieved, and sets each
client's transmit power with :func:`open_loop_power_dbm`.

Fading is flat across the band: a client's achievable rate is the same on every PRB, so a
scheduler only decides how many PRBs each client gets, not which ones.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
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


class Scheduler(ABC):
    """Splits num_prbs PRBs of one scheduling period among the active users."""

    @abstractmethod
    def allocate(
        self, users: Sequence[int], rate_per_prb_bps: Sequence[float], num_prbs: int
    ) -> list[int]:
        """PRBs per user for this period, summing to ``num_prbs``.

        ``users``: client ids with data now, ascending; ``rate_per_prb_bps``: each one's
        achievable rate on one PRB now (the same on every PRB: flat fading).
        """

    def record(self, users: Sequence[int], achieved_bps: Sequence[float]) -> None:
        """The rate each active user achieved over the period that ends (bits delivered /
        period length). Schedulers without memory of rates ignore it."""
        del users, achieved_bps


def _check(users: Sequence[int], rate_per_prb_bps: Sequence[float], num_prbs: int) -> None:
    if not users:
        raise ValueError("no users to schedule")
    if len(rate_per_prb_bps) != len(users):
        raise ValueError(f"{len(users)} users but {len(rate_per_prb_bps)} rates")
    if any(a >= b for a, b in zip(users[:-1], users[1:], strict=True)):
        raise ValueError(f"users must be ascending and distinct: {list(users)}")
    if num_prbs < 1:
        raise ValueError(f"num_prbs must be at least 1, got {num_prbs}")


def _all_to(winner: int, n: int, num_prbs: int) -> list[int]:
    prbs = [0] * n
    prbs[winner] = num_prbs
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
    leaving never leave it undefined.
    """

    def __init__(self) -> None:
        self._next_id = 0

    def allocate(
        self, users: Sequence[int], rate_per_prb_bps: Sequence[float], num_prbs: int
    ) -> list[int]:
        _check(users, rate_per_prb_bps, num_prbs)
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

    Metric of user u: achievable rate / T(u), with T the beta-discounted average of the rate
    u achieved, T(u) <- beta T(u) + (1 - beta) R(u) after each period (beta = 0.98 as Sionna).
    Each PRB goes to the highest metric (ties: the lowest id); as the rate is the same on
    every PRB (flat fading), the whole period goes to one user.

    Differences from Sionna, which schedules a full buffer (every user every slot):

    * only the users active in a period have T updated (:meth:`record`): a client with no
      data keeps its T rather than decaying towards 0, so it does not come back from an idle
      spell (e.g. local training) with an inflated metric that would starve the others;
    * a client first seen starts with T = its rate on an equal share (rate per PRB * N / n),
      so its first metric is n, where Sionna starts every T at 1 (bps);
    * a T of 0 (a client first seen with rate 0) gives metric +inf for a positive rate, 0
      for a zero rate (Sionna divides as is).
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

    def allocate(
        self, users: Sequence[int], rate_per_prb_bps: Sequence[float], num_prbs: int
    ) -> list[int]:
        _check(users, rate_per_prb_bps, num_prbs)
        n = len(users)
        best, best_metric = 0, -math.inf
        for i, (user, rate) in enumerate(zip(users, rate_per_prb_bps, strict=True)):
            average = self._average_bps.setdefault(user, rate * num_prbs / n)
            metric = rate / average if average > 0 else (math.inf if rate > 0 else 0.0)
            if metric > best_metric:  # strict: a tie keeps the lower id
                best, best_metric = i, metric
        return _all_to(best, n, num_prbs)

    def record(self, users: Sequence[int], achieved_bps: Sequence[float]) -> None:
        """Update T of the active users; one never allocated starts from its achieved rate."""
        for user, rate in zip(users, achieved_bps, strict=True):
            average = self._average_bps.get(user, rate)
            self._average_bps[user] = self.beta * average + (1.0 - self.beta) * rate


class MaxRate(Scheduler):
    """Every PRB to the highest achievable rate (ties: the lowest id): the sum-rate optimum
    for one period, which starves users with a weaker channel."""

    def allocate(
        self, users: Sequence[int], rate_per_prb_bps: Sequence[float], num_prbs: int
    ) -> list[int]:
        _check(users, rate_per_prb_bps, num_prbs)
        best = max(range(len(users)), key=lambda i: (rate_per_prb_bps[i], -i))
        return _all_to(best, len(users), num_prbs)


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
    numerology, the scheduling period and the proportional-fair discount."""

    scheduler: str
    subcarrier_spacing_khz: int = 30
    period_s: float = 0.1
    pf_beta: float = 0.98
