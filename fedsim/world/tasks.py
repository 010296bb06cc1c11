"""Work a client does for a server, and what a synchronous round measures of it."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import simpy

from fedsim.config import MAX_ROUNDS, RunConfig, ScenarioError
from fedsim.results.files import BREAKDOWN
from fedsim.results.recorder import Recorder
from fedsim.sim.events import EventLog
from fedsim.sim.network import Network, TransmissionLost

CANCELLED = "cancelled"  # interrupt cause: the server closed the round
QUICK_ROUNDS = 1_000  # rounds in a row too short for the time budget to ever end: a spin


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
    on_lost: Callable[[int], None] | None = None  # the server's: an upload it knows is lost
    failed: bool = False  # its upload was lost, and the base station knows
    compute_started_s: float | None = None
    computed: bool = False  # its training (compute) finished
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
    # Where the tasks the server did not keep were when it closed the round (CUT_AT).
    cut_at: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CUT_AT, 0))
    air: dict[str, float] = field(default_factory=dict)  # the round's over-the-air slot
    backhaul_s: float = 0.0  # the round's time on the backhaul between edges and cloud

    def note_gathered(self, tasks: Mapping[int, Task], kept: list[int]) -> None:
        """The server gathered these tasks and kept the updates of ``kept`` (several
        servers of one round, edge servers, each add theirs)."""
        self.selected += len(tasks)
        self.completed += len(kept)
        self.dropped += len(tasks) - len(kept)
        self.finished_tasks += [tasks[c] for c in kept]
        taken = set(kept)
        for client, task in tasks.items():
            if client not in taken:
                self.cut_at[_where(task)] += 1

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


CUT_AT = ("cut_before_model", "cut_computing", "cut_uploading", "cut_after_delivery")
"""Where a task the server did not keep was when the round closed: still waiting for its
model (or for its device), training, sending its update, or delivered but not kept (a surplus
of over-selection). A client that went offline is counted where it was cut."""


def _where(task: Task) -> str:
    if task.delivered.triggered:
        return "cut_after_delivery"
    if task.compute_started_s is None:
        return "cut_before_model"
    return "cut_uploading" if task.computed else "cut_computing"


class Rounds:
    """The round under way: its number, when it started and what it measured (a row of
    rounds.csv when it closes). With only a time budget to end the run, rounds so short that
    the budget would need more than ``MAX_ROUNDS`` of them never end it: a thousand in a row
    stop the run."""

    def __init__(
        self,
        env: simpy.Environment,
        run: RunConfig,
        log: EventLog,
        network: Network,
        recorder: Recorder,
        label: str,
    ) -> None:
        self.env = env
        self.last = run.rounds
        budget_s = run.time_budget_s
        self.shortest_s = budget_s / MAX_ROUNDS if budget_s is not None and not run.rounds else 0
        self.log = log
        self.network = network
        self.recorder = recorder
        self.label = label
        self.index: int | None = None
        self.started_s = 0.0
        self.stats = RoundStats()

    def numbers(self) -> Iterator[int]:
        """Round numbers 1, 2, ... up to ``last`` (endless without)."""
        quick = 0  # rounds in a row shorter than ``shortest_s``
        for index in itertools.count(1) if self.last is None else range(1, self.last + 1):
            quick = (
                quick + 1 if index > 1 and self.env.now - self.started_s < self.shortest_s else 0
            )
            if quick == QUICK_ROUNDS:
                raise ScenarioError(
                    self.label,
                    [
                        f"run.time_budget_s: {QUICK_ROUNDS:,} rounds in a row lasted under "
                        f"{self.shortest_s:.3g} s each (by t = {self.env.now:g} s): at that pace "
                        f"the budget needs more than {MAX_ROUNDS:,} rounds; set run.rounds, or "
                        "give the rounds a duration (the algorithm's deadline_s and timeouts, "
                        "system.compute)"
                    ],
                )
            self.index = index
            self.started_s = self.env.now
            self.stats = RoundStats()
            self.network.round_index = index
            self.log.emit("round_start", round=index)
            yield index

    def close(self, index: int, participants: int) -> None:
        """The round ends now with ``participants`` updates kept: its energy, its end in the
        log, its row of rounds.csv."""
        self.recorder.log_energy(self.env.now, index)
        stats = self.stats
        now = self.env.now
        stats.close(now - self.started_s)
        self.log.emit("round_end", round=index)
        self.recorder.log_round(
            round_index=index,
            start_s=self.started_s,
            end_s=now,
            selected=stats.selected,
            completed=stats.completed,
            dropped=stats.dropped,
            **stats.breakdown,
            **stats.cut_at,
            **stats.air,
            backhaul_s=stats.backhaul_s,
            participants=participants,
        )


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
        except simpy.Interrupt:
            return  # cancelled, or the client went away: the primitives logged what was wasted
        except TransmissionLost as lost:
            if lost.known:
                task.failed = True
                if task.on_lost is not None:
                    task.on_lost(task.client)  # the base station failed to decode it: no wait
            return
        finally:
            mine = self._running[task.client]
            mine.discard(task)
            if not mine:
                del self._running[task.client]
        if task.on_delivery is not None:
            value = task.on_delivery(task.client, value)
        task.delivered.succeed(value)

    def busy_clients(self) -> list[int]:
        """Clients with work under way (waiting included), ascending."""
        return sorted(self._running)

    def interrupt_client(self, client: int, cause: str) -> None:
        """The client's work is lost (it went offline or left)."""
        for task in list(self._running.get(client, ())):
            interrupt(task, cause)


def interrupt(task: Task, cause: str) -> None:
    """Stop the task's process if it still runs (its work and bytes on the air are lost)."""
    if task.process is not None and task.process.is_alive:
        task.process.interrupt(cause)
