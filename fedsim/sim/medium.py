"""Radio media: how concurrent transfers share the air, with one interface.

A transfer of S bytes is a *flow* of 8 S bits with its own link rate (its cap).
- ``DedicatedMedium``: every flow runs at its own rate, independently (FDMA uplink,
  D2D edges).
- ``FifoMedium``: one flow at a time at its own rate, first come first served (TDMA).
- ``SharedMedium``: processor sharing of one capacity among the active flows, max-min
  fair, each flow capped by its own rate.

Any flow can be cancelled mid-way (its sender went offline, or the server gave up on
it); ``cancel`` returns the bytes it had already sent, so the caller can count them
as wasted air time. A flow may have a setup time (the link latency) before its first
bit: in a FIFO medium it holds the slot meanwhile (a TDMA slot includes its set-up), on a
dedicated link it only delays, and in a shared cell it takes no capacity until it starts.

SimPy cannot unschedule a timeout, so a wake-up made stale by a cancel or a re-plan
stays queued and fires as a no-op later; ``env.run()`` without ``until`` therefore
may end after the last completion. Run until an event or a horizon instead.
"""

from __future__ import annotations

import bisect
import math
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from functools import partial

import simpy

# Flows of one shared medium whose completions fall within this relative distance
# of the earliest one end together, so float noise never splits a simultaneous end.
SIMULTANEOUS_REL_TOL = 1e-9


class TransmissionLost(Exception):
    """A transfer lost to outage more often than its retransmissions allow, or an upload lost
    whole (``per_upload``); ``known``: the base station knows (it failed to decode it), so a
    server need not wait for it."""

    def __init__(self, message: str, known: bool = False) -> None:
        # Both in args: SimPy throws a copy, type(error)(*error.args), into the waiting process.
        super().__init__(message, known)
        self.message = message
        self.known = known

    def __str__(self) -> str:
        return self.message


class Flow:
    """One transfer in a medium.

    ``done`` succeeds (value None) when the last bit has arrived; it never triggers
    for a cancelled flow. ``started_s`` is when the flow entered the medium, queue
    included; ``served_s`` when it got the medium (its set-up began): the two differ only
    in a FIFO medium, where a flow waits for those ahead of it.
    Slots: a run creates one flow per transfer, tens of thousands of them.
    """

    __slots__ = (
        "num_bytes", "rate_bps", "setup_s", "done", "started_s", "served_s", "queued",
        "on_served", "_env", "_medium", "_seq", "_bits", "_mark_s", "_speed_bps", "_cancelled",
    )  # fmt: skip

    def __init__(
        self, medium: Medium, num_bytes: int, rate_bps: float, seq: int, setup_s: float = 0.0
    ) -> None:
        env = medium.env
        self.num_bytes = num_bytes
        self.rate_bps = rate_bps
        self.setup_s = setup_s
        self.done = env.event()
        self.started_s = self.served_s = env.now
        self.queued = False  # waiting for the medium (FIFO media): not on the air yet
        self.on_served: Callable[[], None] | None = None  # called when a queued flow gets it
        self._env = env
        self._medium = medium
        self._seq = seq  # arrival order within its medium: FIFO order and tie-breaks
        # Piecewise-linear progress: _bits moved by _mark_s, then _speed_bps since.
        self._bits = 0.0
        self._mark_s = env.now
        self._speed_bps = 0.0
        self._cancelled = False

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def bytes_sent(self) -> float:
        """Bytes moved so far, exact at the current simulated instant."""
        bits = self._bits + self._speed_bps * (self._env.now - self._mark_s)
        return min(bits, 8.0 * self.num_bytes) / 8.0

    def _serve(self) -> None:
        """The flow gets the medium now (after queueing)."""
        self.served_s = self._env.now
        self.queued = False
        if self.on_served is not None:
            self.on_served()

    def _set_speed(self, speed_bps: float) -> None:
        now = self._env.now
        self._bits += self._speed_bps * (now - self._mark_s)
        self._mark_s = now
        self._speed_bps = speed_bps

    def _remaining_bits(self) -> float:
        """Bits left as of the last _set_speed (call it first)."""
        return max(8.0 * self.num_bytes - self._bits, 0.0)

    def _finish(self) -> None:
        self._set_speed(0.0)
        self._bits = 8.0 * self.num_bytes
        self.done.succeed()

    def _stop(self) -> float:
        """Freeze a cancelled flow; returns the bytes it had sent."""
        sent = self.bytes_sent()
        self._set_speed(0.0)
        self._cancelled = True
        return sent


class Medium(ABC):
    """Common checks and bookkeeping; subclasses decide who sends at which speed."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self._arrivals = 0

    @property
    @abstractmethod
    def active(self) -> int:
        """Flows in the medium now (queued ones included), finished and cancelled ones not."""

    def start(self, num_bytes: int, rate_bps: float, setup_s: float = 0.0) -> Flow:
        """Put a flow of num_bytes capped at its own link rate rate_bps into the medium.

        ``setup_s`` passes before the first bit. A zero-byte flow without set-up needs no
        air time: it is done at once and never enters.
        """
        if num_bytes < 0:
            raise ValueError(f"num_bytes must be >= 0, got {num_bytes}")
        if not (rate_bps > 0 and math.isfinite(rate_bps)):
            raise ValueError(f"rate_bps must be positive and finite, got {rate_bps}")
        if not (setup_s >= 0 and math.isfinite(setup_s)):
            raise ValueError(f"setup_s must be >= 0 and finite, got {setup_s}")
        flow = Flow(self, num_bytes, rate_bps, self._arrivals, setup_s)
        self._arrivals += 1
        if num_bytes == 0 and setup_s == 0:
            flow.done.succeed()
        else:
            self._admit(flow)
        return flow

    def cancel(self, flow: Flow) -> float:
        """Remove an unfinished flow; returns the bytes it had sent (wasted air time)."""
        if flow._medium is not self:
            raise ValueError("flow belongs to another medium")
        if flow.cancelled:
            raise ValueError("flow was already cancelled")
        if flow.done.triggered:
            raise ValueError("flow has already finished")
        return self._withdraw(flow)

    def _wake_at(self, delay_s: float, callback: Callable[[simpy.Event | None], None]) -> None:
        """Call callback(the timeout event) after delay_s: no wrapper, one call per wake-up."""
        self.env.timeout(max(delay_s, 0.0)).callbacks.append(callback)

    def _after_setup(self, flow: Flow, begin: Callable[[simpy.Event | None], None]) -> None:
        """Call begin once the flow's set-up time has passed (at once, with None, if none)."""
        if flow.setup_s:
            self._wake_at(flow.setup_s, begin)
        else:
            begin(None)

    @abstractmethod
    def _admit(self, flow: Flow) -> None: ...

    @abstractmethod
    def _withdraw(self, flow: Flow) -> float: ...


class DedicatedMedium(Medium):
    """Every flow at its own rate, independently: it ends 8 S / R after it starts."""

    def __init__(self, env: simpy.Environment) -> None:
        super().__init__(env)
        self._flows: set[Flow] = set()

    @property
    def active(self) -> int:
        return len(self._flows)

    def _admit(self, flow: Flow) -> None:
        self._flows.add(flow)
        self._after_setup(flow, partial(self._transmit, flow))

    def _transmit(self, flow: Flow, _wake: simpy.Event | None = None) -> None:
        if flow in self._flows:  # else it was cancelled during its set-up
            flow._set_speed(flow.rate_bps)
            self._wake_at(8.0 * flow.num_bytes / flow.rate_bps, partial(self._complete, flow))

    def _complete(self, flow: Flow, _wake: simpy.Event | None = None) -> None:
        if flow in self._flows:  # else it was cancelled: a stale wake-up
            self._flows.remove(flow)
            flow._finish()

    def _withdraw(self, flow: Flow) -> float:
        self._flows.remove(flow)
        return flow._stop()


class FifoMedium(Medium):
    """One flow at a time at its own rate, first come first served; queued flows send nothing."""

    def __init__(self, env: simpy.Environment) -> None:
        super().__init__(env)
        self._serving: Flow | None = None
        self._queue: deque[Flow] = deque()

    @property
    def active(self) -> int:
        return len(self._queue) + (self._serving is not None)

    def _admit(self, flow: Flow) -> None:
        if self._serving is None:
            self._serve(flow)
        else:
            flow.queued = True
            self._queue.append(flow)

    def _serve(self, flow: Flow) -> None:
        self._serving = flow
        flow._serve()
        self._after_setup(flow, partial(self._transmit, flow))

    def _transmit(self, flow: Flow, _wake: simpy.Event | None = None) -> None:
        if flow is self._serving:  # else it was cancelled during its set-up
            flow._set_speed(flow.rate_bps)
            self._wake_at(8.0 * flow.num_bytes / flow.rate_bps, partial(self._complete, flow))

    def _serve_next(self) -> None:
        self._serving = None
        if self._queue:
            self._serve(self._queue.popleft())

    def _complete(self, flow: Flow, _wake: simpy.Event | None = None) -> None:
        if flow is self._serving:  # else it was cancelled: a stale wake-up
            flow._finish()
            self._serve_next()

    def _withdraw(self, flow: Flow) -> float:
        sent = flow._stop()
        if flow is self._serving:
            self._serve_next()
        else:
            self._queue.remove(flow)
        return sent


class SharedMedium(Medium):
    """Processor sharing of capacity_bps: max-min fair (water-filling) under per-flow caps.

    Rates are re-split whenever a flow starts, ends or is cancelled; between those
    instants every flow's speed is constant, so progress and completion times are exact.
    Flows are kept sorted by cap, which makes each water-filling one O(n) pass.
    One wake-up is pending at a time, for the earliest completion; a generation
    counter turns every earlier wake-up into a no-op.
    """

    def __init__(self, env: simpy.Environment, capacity_bps: float) -> None:
        if not (capacity_bps > 0 and math.isfinite(capacity_bps)):
            raise ValueError(f"capacity_bps must be positive and finite, got {capacity_bps}")
        super().__init__(env)
        self.capacity_bps = capacity_bps
        self._flows: list[Flow] = []  # ascending (cap, arrival)
        self._in_setup: set[Flow] = set()  # admitted, not yet sending: they take no capacity
        self._generation = 0

    @property
    def active(self) -> int:
        return len(self._flows) + len(self._in_setup)

    def _admit(self, flow: Flow) -> None:
        self._in_setup.add(flow)
        self._after_setup(flow, partial(self._enter, flow))

    def _enter(self, flow: Flow, _wake: simpy.Event | None = None) -> None:
        if flow in self._in_setup:  # else it was cancelled during its set-up
            self._in_setup.remove(flow)
            bisect.insort(self._flows, flow, key=_cap_order)
            self._replan()

    def _withdraw(self, flow: Flow) -> float:
        sent = flow._stop()
        if flow in self._in_setup:
            self._in_setup.remove(flow)
            return sent
        del self._flows[bisect.bisect_left(self._flows, _cap_order(flow), key=_cap_order)]
        self._replan()
        return sent

    def _replan(self) -> None:
        """Water-fill the capacity, then wake up at the earliest completion."""
        self._generation += 1
        if not self._flows:
            return
        # Ascending caps: a flow whose cap is below the equal share of what is left
        # takes its cap; once one does not, none after it does, and they split the rest.
        left_bps = self.capacity_bps
        for i, flow in enumerate(self._flows):
            share_bps = left_bps / (len(self._flows) - i)
            speed_bps = min(flow.rate_bps, share_bps)
            flow._set_speed(speed_bps)
            left_bps -= speed_bps
        left_s = [flow._remaining_bits() / flow._speed_bps for flow in self._flows]
        first_s = min(left_s)
        tol_s = SIMULTANEOUS_REL_TOL * (abs(self.env.now) + first_s)
        ending = [f for f, s in zip(self._flows, left_s, strict=True) if s - first_s <= tol_s]
        generation = self._generation
        self._wake_at(first_s, partial(self._complete, ending, generation))

    def _complete(
        self, ending: list[Flow], generation: int, _wake: simpy.Event | None = None
    ) -> None:
        if generation != self._generation:
            return  # superseded by a later re-plan
        ended = set(ending)
        self._flows = [f for f in self._flows if f not in ended]
        for flow in sorted(ending, key=lambda f: f._seq):
            flow._finish()
        self._replan()


def _cap_order(flow: Flow) -> tuple[float, int]:
    return (flow.rate_bps, flow._seq)
