"""The SimPy process that replays a client's on/off availability trace (read by
``fedsim.sim.readers.read_availability`` from FedScale's JSON or a CSV of intervals).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Generator, Iterable, Iterator

import simpy

from fedsim.sim.readers import AvailabilityTrace, merge_touching


def replay_availability(
    env: simpy.Environment, trace: AvailabilityTrace, set_online: Callable[[bool], bool]
) -> Generator[simpy.Event, None, None]:
    """Process body switching one client on and off along the trace, in the trace's time
    (from the run's start).

    Every client starts (or joins) online, so the first call puts it in the trace's state at
    that instant: set_online(False) at 0 unless the first interval starts at 0; for a client
    that joins later, set_online(False) on joining if the trace has it offline then. Stops
    when set_online returns False (the client has left for good). A switch off and on at one
    instant (touching intervals, or the last interval reaching the period's end and the first
    starting at 0) is not made.
    """
    intervals_s = merge_touching(trace.intervals_s)
    if trace.period_s is not None and intervals_s == [(0.0, trace.period_s)]:
        return  # online all the time
    joined_s = env.now
    online_on_joining = True  # the trace's state when the client joined (at 0: online)
    caught_up = False
    for time_s, online in _without_instant_pairs(_switches(intervals_s, trace.period_s)):
        if time_s < joined_s:
            online_on_joining = online
            continue
        if not caught_up:
            caught_up = True
            if not online_on_joining and time_s > joined_s and not set_online(False):
                return  # it joined while the trace has it offline
        yield env.timeout(time_s - env.now)
        if not set_online(online):
            return
    if not caught_up and not online_on_joining:
        set_online(False)


def _switches(
    intervals_s: list[tuple[float, float]], period_s: float | None
) -> Iterator[tuple[float, bool]]:
    """(time, online) alternating from offline at 0, endless when the trace repeats."""
    yield 0.0, False
    if not intervals_s:
        return
    if period_s is None:
        for start_s, end_s in intervals_s:
            yield start_s, True
            yield end_s, False
        return
    for repeat in itertools.count():
        for start_s, end_s in intervals_s:
            yield repeat * period_s + start_s, True
            # an end at the period's end is the next repeat's 0, to the bit (k p + p may
            # differ from (k + 1) p), so that it cancels with a start at 0
            end_at_s = (repeat + 1) * period_s if end_s == period_s else repeat * period_s + end_s
            yield end_at_s, False


def _without_instant_pairs(switches: Iterable[tuple[float, bool]]) -> Iterator[tuple[float, bool]]:
    """Drop two consecutive switches at the same instant (they alternate, so cancel out)."""
    pending: tuple[float, bool] | None = None
    for switch in switches:
        if pending is not None and pending[0] == switch[0]:
            pending = None
            continue
        if pending is not None:
            yield pending
        pending = switch
    if pending is not None:
        yield pending
