"""Who is there: availability (on/off), arrivals and departures, as SimPy processes.

The processes only decide *when* something happens; the World applies it (interrupting
the work of a client that goes offline, bringing in a reserve client, ...), so these stay
free of any learning concern.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence

import numpy as np
import simpy


def renewal_availability(
    env: simpy.Environment,
    rng: np.random.Generator,
    mean_online_s: float,
    mean_offline_s: float,
    law: str,
    set_online: Callable[[bool], bool],
) -> Generator[simpy.Event, None, None]:
    """Alternate online/offline periods; stops when set_online reports the client gone.

    With the ``fixed`` law the first online period starts at a uniformly random phase,
    so that clients do not all drop out at the same instant.
    """

    def duration(mean_s: float) -> float:
        return rng.exponential(mean_s) if law == "exponential" else mean_s

    first_online_s = (
        duration(mean_online_s) if law == "exponential" else rng.uniform(0, mean_online_s)
    )
    yield env.timeout(first_online_s)
    while set_online(False):
        yield env.timeout(duration(mean_offline_s))
        if not set_online(True):
            return
        yield env.timeout(duration(mean_online_s))


def replay_trace(
    env: simpy.Environment,
    rows: Sequence[tuple[float, int, bool]],
    set_online: Callable[[int, bool], bool],
) -> Generator[simpy.Event, None, None]:
    for time_s, client, online in rows:
        yield env.timeout(time_s - env.now)
        set_online(client, online)


def change_times(
    rng: np.random.Generator, rate_per_s: float, schedule: Sequence[tuple[float, int]]
) -> Generator[float, None, None]:
    """Times of single arrivals (or departures): the schedule merged with a Poisson stream."""
    planned = sorted(t for time_s, count in schedule for t in [time_s] * count)
    next_poisson_s = rng.exponential(1 / rate_per_s) if rate_per_s > 0 else np.inf
    while planned or np.isfinite(next_poisson_s):
        if planned and planned[0] <= next_poisson_s:
            yield planned.pop(0)
        else:
            yield next_poisson_s
            next_poisson_s += rng.exponential(1 / rate_per_s)


def apply_at(
    env: simpy.Environment, times_s: Generator[float, None, None], apply: Callable[[], bool]
) -> Generator[simpy.Event, None, None]:
    """Call ``apply`` at each time; stop when it reports nothing left to do."""
    for time_s in times_s:
        yield env.timeout(max(0.0, time_s - env.now))
        if not apply():
            return
