"""The server's side of a round: which clients it calls, the tasks it gives them, and how
long it waits for what they send back (a part of ``World``).

A server sees who has checked in (online) and samples among them, uniformly or by a selection
policy (``fedsim.world.selection``); it starts each client's work as a task and gathers the
deliveries under its policy: all of them, the first k, or what arrived by a deadline.
Unfinished tasks are then cancelled and their bytes on the air counted as wasted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Generator, Iterable, Mapping
from functools import partial

import numpy as np
import simpy
import torch

from fedsim.config import AlgorithmConfig, ScenarioError, SelectionConfig
from fedsim.learn.trainer import TrainResult
from fedsim.sim.events import EventLog
from fedsim.sim.network import Network
from fedsim.world.energy import DeviceEnergy
from fedsim.world.selection import ChannelReport, ChannelReports, Policy, build_policy
from fedsim.world.tasks import CANCELLED, Rounds, Task, Tasks, interrupt


class ServerPolicy:
    """The World's primitives of a server's round (a part of ``World``, which sets what it
    reads): ``select_clients``, ``start_task``, ``gather`` and what they build on."""

    env: simpy.Environment
    algorithm: AlgorithmConfig
    network: Network
    log: EventLog
    present: set[int]
    online: set[int]
    energy: DeviceEnergy | None
    sampling_rng: np.random.Generator
    tasks: Tasks
    _rounds: Rounds
    _policies: dict[SelectionConfig, Policy]
    _channel_reports: dict[float | None, ChannelReports]

    def select_clients(
        self,
        fraction: float,
        over_selection: float = 0.0,
        selection: SelectionConfig | None = None,
        *,
        by_size: bool = False,
        among: Collection[int] | None = None,
    ) -> Generator[simpy.Event, object, list[int]]:
        """Process body: wait until someone is online, then pick among the online clients.

        The server sees who has checked in (online) when it selects; it wants
        max(1, round(fraction * present)) updates and over-selects by ``over_selection``.
        It samples them uniformly (``by_size``: without replacement with probability ∝ local
        training size), or by the ``selection`` policy (``fedsim.world.selection``).
        ``among``: an edge server's clients (``edge_members``): it picks among those online
        (none when none is) and wants that fraction of those present.
        """
        candidates = yield from self.online_clients()
        if among is not None:
            members = set(among)  # an edge's clients: a lookup per candidate
            candidates = [c for c in candidates if c in members]
            if not candidates:
                return []
        wanted = self.wanted_updates(fraction, among)
        count = min(len(candidates), math.ceil(wanted * (1 + over_selection)))
        if selection is not None and selection.policy != "random":
            return self._policy(selection).choose(candidates, count)
        sizes = np.array([self.num_train(c) for c in candidates], dtype=float) if by_size else None
        chosen = self.sampling_rng.choice(
            candidates, size=count, replace=False, p=None if sizes is None else sizes / sizes.sum()
        )
        return sorted(int(c) for c in chosen)

    def _policy(self, selection: SelectionConfig) -> Policy:
        """The policy's state for this run (built at its first selection)."""
        policy = self._policies.get(selection)
        if policy is None:
            report = partial(self.channel_report, report_period_s=selection.report_period_s)
            policy = build_policy(selection.policy, self.sampling_rng, report)
            self._policies[selection] = policy
        return policy

    def channel_report(self, client: int, report_period_s: float | None = None) -> ChannelReport:
        """What the base station knows of the client's uplink now: the SNR of the pilot it
        answers a call with, or (``report_period_s``) of its last periodic report."""
        reports = self._channel_reports.get(report_period_s)
        if reports is None:
            if self.network.radio is None:
                raise ValueError("no channel to report: add a system.radio section")
            reports = ChannelReports(self.network.radio, report_period_s)
            self._channel_reports[report_period_s] = reports
        return reports.report(client, self.env.now)

    def online_clients(self) -> Generator[simpy.Event, object, list[int]]:
        """Process body: the present clients online now that may take part, ascending (waits
        for the first). With batteries, a client below ``min_fraction`` may not."""
        while not (eligible := self._eligible()):
            offline = [c for c in self.present if c not in self.online]
            yield self.env.any_of([self.until_online(c) for c in offline] or [self.env.event()])
        return eligible

    def _eligible(self) -> list[int]:
        if self.energy is None:
            return sorted(self.online)
        return [c for c in sorted(self.online) if self.energy.can_take_part(c)]

    def wanted_updates(self, fraction: float, among: Collection[int] | None = None) -> int:
        """How many updates a round asks for: max(1, round(fraction * present clients)), of
        an edge server's present clients (``among``), 0 when it has none."""
        if among is None:
            return max(1, round(fraction * len(self.present)))
        present = sum(1 for c in among if c in self.present)
        return max(1, round(fraction * present)) if present else 0

    def start_task(self, client: int, body: Generator, *, timed: bool = True) -> Task:
        """Run ``body`` as work the client does for the server (or for a round).

        If the client goes offline or leaves, the task is interrupted and its ``delivered``
        event never fires: the server has to notice through its deadline. A ``timed`` task
        collects the client's downlink/compute/uplink times for the round breakdown.
        """
        return self.tasks.start(client, body, timed=timed)

    def cancel(self, task: Task) -> None:
        """The server gives up on a task (a timeout): its work and bytes on the air are lost."""
        interrupt(task, CANCELLED)

    def gather(
        self,
        tasks: Mapping[int, Task],
        *,
        deadline_s: float | None = None,
        keep_first: int | None = None,
        take: Callable[[int, object], object] | None = None,
    ) -> Generator[simpy.Event, object, dict[int, object]]:
        """Process body: wait for the tasks under the server's policy; returns what it keeps.

        Wait for all, or for the first ``keep_first`` deliveries (over-selection), or until
        ``deadline_s`` after the round started, whichever comes first. Unfinished tasks are
        then cancelled (their bytes on the air are wasted), extra deliveries dropped.
        ``take(client, update)`` is called on each kept update the moment it arrives, and
        what it returns is kept in its place: a server that folds updates into a running sum
        holds one sum, not every upload of the round.
        """
        kept: list[int] = []
        wanted = len(tasks) if keep_first is None else keep_first
        needed = min(wanted, len(tasks))
        enough = self.env.event()
        closed = False

        def arrive(client: int, update: object) -> object:
            if closed or len(kept) == needed:
                return update  # surplus (dropped below) or late (cancelled at the close)
            kept.append(client)
            if len(kept) == needed:
                enough.succeed()
            return update if take is None else take(client, update)

        def lost(client: int) -> None:  # an upload the base station could not decode
            nonlocal needed
            needed = min(needed, len(tasks) - sum(1 for t in tasks.values() if t.failed))
            if not closed and not enough.triggered and len(kept) >= needed:
                enough.succeed()

        for task in tasks.values():
            task.on_delivery = arrive
            task.on_lost = lost
        if needed == 0:
            enough.succeed()
        if deadline_s is None:
            yield enough
        else:
            started_s = self._rounds.started_s
            if started_s + deadline_s == started_s:
                raise ScenarioError(
                    self.algorithm.run_label,
                    [
                        f"{self.setting('deadline_s')}: {deadline_s:g} s is below what the "
                        f"simulated clock resolves at t = {self.env.now:g} s: every round "
                        "would close the instant it starts"
                    ],
                )
            remaining_s = started_s + deadline_s - self.env.now
            yield enough | self.env.timeout(max(0.0, remaining_s))
        closed = True
        yield from self.cancel_unfinished(tasks.values())
        taken = set(kept)
        for client, task in tasks.items():
            if task.delivered.triggered and client not in taken:
                nbytes = self.uploaded_bytes(client, *_tensors_of(task.delivered.value))
                self.log.update_dropped(
                    client, nbytes, reason="surplus", round_index=self.round_index
                )
        self._rounds.stats.note_gathered(tasks, kept)
        return {client: tasks[client].delivered.value for client in kept}

    def finish_all(
        self, tasks: Mapping[int, Task]
    ) -> Generator[simpy.Event, object, dict[int, object]]:
        """Process body: wait until each task has delivered or stopped (its client went
        offline or left, and holds nobody up); returns the deliveries, noted for the round's
        row. A round barrier without a server (local training in rounds)."""
        yield self.env.all_of([task.process for task in tasks.values()])
        delivered = {c: t.delivered.value for c, t in tasks.items() if t.delivered.triggered}
        self._rounds.stats.note_gathered(tasks, list(delivered))
        return delivered

    def cancel_unfinished(self, tasks: Iterable[Task]) -> Generator[simpy.Event, object, None]:
        """Process body: give up on the tasks that have not delivered, and return once they
        have stopped (at this same instant), so the bytes they had on the air are logged as
        wasted before the round closes, in the round that cut them."""
        stopping = [
            task.process
            for task in tasks
            if not task.delivered.triggered and task.process is not None and task.process.is_alive
        ]
        for process in stopping:
            process.interrupt(CANCELLED)
        if stopping:
            yield self.env.all_of(stopping)


def _tensors_of(value: object) -> tuple[torch.Tensor, ...]:
    """The tensors an update carries (a TrainResult, a tensor, or a tuple of tensors)."""
    if isinstance(value, TrainResult):
        return (value.params,)
    if isinstance(value, torch.Tensor):
        return (value,)
    if isinstance(value, tuple):
        return tuple(v for v in value if isinstance(v, torch.Tensor))
    return ()
