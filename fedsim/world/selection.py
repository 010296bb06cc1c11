"""Client selection policies: which of the online clients a synchronous server calls.

``random`` is the World's own uniform sampling (``World.select_clients``). The others keep a
number or two per client: Yang, Liu, Quek and Poor's scheduling policies (Scheduling Policies
for Federated Learning in Wireless Networks, IEEE TCOM 2020), round robin and proportional
fair, the best channel, and the age of update. The channel-aware ones know only what a base
station knows: each client's uplink SNR as measured from a pilot or as last reported
(``ChannelReports``), never the channel its upload will meet. Ties are broken in the order of
a seeded random permutation, never by the clients' ids or by float noise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from fedsim.sim.draws import block_of
from fedsim.sim.radio import UPLINK, Radio


@dataclass(frozen=True)
class ChannelReport:
    """A client's uplink as the base station knows it, measured at ``time_s`` on the whole
    uplink band: the SNR (fading included) and the mean SNR (path loss and shadowing then, no
    fading: what the base station averages over time), in dB."""

    time_s: float
    snr_db: float
    mean_snr_db: float


class ChannelReports:
    """The clients' channel reports: with no period, the pilot each client answers the
    server's call with (measured now, as Yang et al.'s access point knows the instantaneous
    SNR when it schedules); with one, the report each client sent at the latest multiple of
    ``report_period_s``. Measured on a replica of the radio, asked at increasing times, so the
    run's own radio (and its mobility) is never queried out of order."""

    def __init__(self, radio: Radio, report_period_s: float | None) -> None:
        self._radio = radio.replica()
        self._bandwidth_hz = radio.settings.uplink_bandwidth_hz
        self._period_s = report_period_s

    def report(self, client: int, now_s: float) -> ChannelReport:
        period_s = self._period_s
        time_s = now_s if period_s is None else block_of(now_s, period_s) * period_s
        snr_db = self._radio.uplink_snr_db_at(client, time_s, self._bandwidth_hz)
        fading = self._radio.fading_gain(client, UPLINK, time_s, 0)  # 1.0 without fading
        return ChannelReport(time_s, snr_db, snr_db - 10.0 * math.log10(fading))


class Policy(Protocol):
    def choose(self, candidates: Sequence[int], count: int) -> list[int]:
        """``count`` (>= 1) of the candidates (ascending ids), ascending."""


def largest(
    candidates: Sequence[int], scores: Sequence[float], count: int, rng: np.random.Generator
) -> list[int]:
    """The ``count`` candidates of the largest scores, ascending: the candidates shuffled by
    ``rng`` (one draw per call, tie or not), then sorted by score, ties keeping that order."""
    shuffled = rng.permutation(len(candidates))
    ranked = shuffled[np.argsort(-np.asarray(scores, dtype=float)[shuffled], kind="stable")]
    return sorted(candidates[i] for i in ranked[:count])


class RoundRobin:
    """Yang et al.'s round robin: the clients in a fixed cyclic order by id, each round the
    next ``count`` after the last one served; with everyone online, the K/N groups in turn."""

    def __init__(self) -> None:
        self._last_served = -1

    def choose(self, candidates: Sequence[int], count: int) -> list[int]:
        after = [c for c in candidates if c > self._last_served]
        chosen = (after + [c for c in candidates if c <= self._last_served])[:count]
        self._last_served = chosen[-1]
        return sorted(chosen)


class AgeOfUpdate:
    """The clients whose last update is the oldest: the age is the rounds since the client
    was last selected (never selected: the rounds so far + 1), a round being a selection."""

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng
        self._round = 0
        self._last_selected: dict[int, int] = {}  # the round of its last selection; never: 0

    def choose(self, candidates: Sequence[int], count: int) -> list[int]:
        self._round += 1
        ages = [self._round - self._last_selected.get(c, 0) for c in candidates]
        chosen = largest(candidates, ages, count, self._rng)
        self._last_selected.update(dict.fromkeys(chosen, self._round))
        return chosen


def proportional_fair(report: ChannelReport) -> float:
    """Yang et al.'s PF metric ρ_k,t / ρ̄_k, in dB: how far the client's channel is above its
    own mean (so a far client at a fading peak beats a near one in a fade)."""
    return report.snr_db - report.mean_snr_db


def best_channel(report: ChannelReport) -> float:
    return report.snr_db


CHANNEL_SCORES: dict[str, Callable[[ChannelReport], float]] = {
    "proportional_fair": proportional_fair,
    "best_channel": best_channel,
}


class ChannelAware:
    """The ``count`` clients of the largest score of their channel report."""

    def __init__(
        self,
        score: Callable[[ChannelReport], float],
        report: Callable[[int], ChannelReport],
        rng: np.random.Generator,
    ) -> None:
        self._score, self._report, self._rng = score, report, rng

    def choose(self, candidates: Sequence[int], count: int) -> list[int]:
        scores = [self._score(self._report(c)) for c in candidates]
        return largest(candidates, scores, count, self._rng)


def build_policy(
    name: str, rng: np.random.Generator, report: Callable[[int], ChannelReport]
) -> Policy:
    """The policy ``name`` (any but random); ``report`` gives a client's channel report now."""
    if name == "round_robin":
        return RoundRobin()
    if name == "age_based":
        return AgeOfUpdate(rng)
    return ChannelAware(CHANNEL_SCORES[name], report, rng)
