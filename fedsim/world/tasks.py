"""Work a client does for a server, and what a synchronous round measures of it."""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field

import numpy as np
import simpy

from fedsim.results.files import BREAKDOWN
from fedsim.sim.network import TransmissionLost

CANCELLED = "cancelled"  # interrupt cause: the server closed the round


@dataclass(eq=False, slots=True)
class Task:
    """A piece of work a client does for the server; ``delivered`` fires only on success.

    A timed task sums where its time went: its downlink transmissions waiting for the base
    station's transmitter (``downlink_queue_s``) and on the air (``downlink_s``), its compute,
    its uploads waiting for the medium (a TDMA slot) and on the air.
    """

    client: int
    started_s: float
    delivered: simpy.Event
    process: simpy.Process | None = None
    on_delivery: Callable[[int, object], object] | None = None  # the server's, as it arrives
    compute_started_s: float | None = None
    downlink_queue_s: float = 0.0
    downlink_s: float = 0.0
    compute_s: float = 0.0
    uplink_queue_s: float = 0.0
    uplink_s: float = 0.0


@dataclass
class RoundStats:
    """Participation and the per-participant time breakdown of one synchronous round
    (means over the participants the server kept; NaN when there were none)."""

    selected: int = 0
    completed: int = 0
    dropped: int = 0
    breakdown: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys((*BREAKDOWN, "waiting_s"), math.nan)
    )
    finished_tasks: list[Task] = field(default_factory=list)

    def note_gathered(self, tasks: Mapping[int, Task], kept: list[int]) -> None:
        """The server gathered these tasks and kept the updates of ``kept``."""
        self.selected = len(tasks)
        self.completed = len(kept)
        self.dropped = len(tasks) - len(kept)
        self.finished_tasks = [tasks[c] for c in kept]

    def close(self, duration_s: float) -> None:
        """The round lasted ``duration_s``: the mean kept participant's time, part by part."""
        finished = self.finished_tasks
        if finished:
            parts = np.array([[getattr(t, part) for part in BREAKDOWN] for t in finished])
            # Idle time is what the parts leave of the round: clamp the rounding of a
            # participant that was busy until the very end.
            idle = np.maximum(duration_s - parts.sum(axis=1), 0.0)
            means = [*parts.mean(axis=0), idle.mean()]
            self.breakdown = dict(zip(self.breakdown, map(float, means), strict=True))


class Tasks:
    """Every client's tasks under way, and the timed one its times are charged to.

    If the client goes offline or leaves, its tasks are interrupted and their ``delivered``
    events never fire: a server notices only through its own policy (a deadline).
    """

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.timed: dict[int, Task] = {}  # each client's latest timed task
        self._running: dict[int, set[Task]] = {}  # clients with work under way only

    def start(self, client: int, body: Generator, *, timed: bool) -> Task:
        task = Task(client=client, started_s=self.env.now, delivered=self.env.event())
        task.process = self.env.process(self._run(task, body, timed))
        return task

    def _run(
        self, task: Task, body: Generator, timed: bool
    ) -> Generator[simpy.Event, object, None]:
        self._running.setdefault(task.client, set()).add(task)
        if timed:
            self.timed[task.client] = task
        try:
            value = yield from body
        except (simpy.Interrupt, TransmissionLost):
            return  # lost or cancelled: the primitives logged what was wasted
        finally:
            mine = self._running[task.client]
            mine.discard(task)
            if not mine:
                del self._running[task.client]
        if task.on_delivery is not None:
            value = task.on_delivery(task.client, value)
        task.delivered.succeed(value)

    def interrupt_client(self, client: int, cause: str) -> None:
        """The client's work is lost (it went offline or left)."""
        for task in list(self._running.get(client, ())):
            interrupt(task, cause)


def interrupt(task: Task, cause: str) -> None:
    """Stop the task's process if it still runs (its work and bytes on the air are lost)."""
    if task.process is not None and task.process.is_alive:
        task.process.interrupt(cause)
