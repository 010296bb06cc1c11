"""How a run recovers from a change of its population: the accuracy dip after clients arrive
or leave, and the simulated time it takes to win back its level. The recorder writes these
figures into ``summary.json``; ``analysis.churn`` reads them with the same definition."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Recovery:
    """The accuracy around one event; None where the evaluations do not say."""

    event_time_s: float
    accuracy_before: float | None
    lowest_after: float | None
    dip: float | None
    recovery_s: float | None


def recovery_after(
    time_s: np.ndarray, accuracy: np.ndarray, event_time_s: float, tolerance: float = 0.0
) -> Recovery:
    """Dip and recovery time of the accuracy series after ``event_time_s``.

    The level to win back is the last evaluation at or before the event; the run has recovered
    at the first later evaluation within ``tolerance`` of it, and ``lowest_after`` is the worst
    evaluation from the event up to that point (to the end if it never recovers). Evaluations
    with a NaN accuracy are skipped. Without an evaluation before the event there is no level to
    recover, so every field but the event time is None.
    """
    time_s = np.asarray(time_s, dtype=float)
    accuracy = np.asarray(accuracy, dtype=float)
    if time_s.shape != accuracy.shape or time_s.ndim != 1:
        raise ValueError(f"time_s {time_s.shape} and accuracy {accuracy.shape} must be 1-D alike")
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    known = np.isfinite(accuracy)
    time_s, accuracy = time_s[known], accuracy[known]
    order = np.argsort(time_s, kind="stable")
    time_s, accuracy = time_s[order], accuracy[order]

    before = np.flatnonzero(time_s <= event_time_s)
    after = np.flatnonzero(time_s > event_time_s)
    if not before.size:
        return Recovery(event_time_s, None, None, None, None)
    accuracy_before = float(accuracy[before[-1]])
    if not after.size:
        return Recovery(event_time_s, accuracy_before, None, None, None)

    recovered = np.flatnonzero(accuracy[after] >= accuracy_before - tolerance)
    until = after[: recovered[0] + 1] if recovered.size else after
    lowest_after = float(accuracy[until].min())
    recovery_s = float(time_s[after[recovered[0]]] - event_time_s) if recovered.size else None
    return Recovery(
        event_time_s=event_time_s,
        accuracy_before=accuracy_before,
        lowest_after=lowest_after,
        dip=max(accuracy_before - lowest_after, 0.0),
        recovery_s=recovery_s,
    )
