"""The clients' devices: how long a computation takes on each, and the rule that a device does
one computation at a time."""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence

import numpy as np
import simpy

from fedsim.config import ComputeConfig
from fedsim.sim.compute import (
    ComputeModel,
    CpuCycles,
    ShiftedExponential,
    expected_max_completion_s,
)
from fedsim.sim.events import EventLog
from fedsim.sim.readers import DeviceProfile
from fedsim.streams import RandomStreams
from fedsim.world.energy import DeviceEnergy
from fedsim.world.tasks import Task


class DeviceQueue:
    """One computation at a time per device: concurrent requests (a peer's and one's own work
    in a decentralized round) wait their turn, first come first served."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self._waiting: dict[int, list[simpy.Event]] = {}  # busy devices: who waits next

    def acquire(self, client: int) -> Generator[simpy.Event, None, None]:
        """Process body: return once the device is this caller's (at once if it is idle)."""
        if client not in self._waiting:
            self._waiting[client] = []
            return
        turn = self.env.event()
        self._waiting[client].append(turn)
        try:
            yield turn
        except simpy.Interrupt:
            if turn.triggered:  # the device was handed over just now: pass it on
                self.release(client)
            else:
                self._waiting[client].remove(turn)
            raise

    def release(self, client: int) -> None:
        waiting = self._waiting[client]
        if waiting:
            waiting.pop(0).succeed()
        else:
            del self._waiting[client]


class Devices:
    """Each client's compute: the shifted exponential per round, step or sample (scaled by the
    device's speed), or the cycles model's c·D/f, or its trace profile's time per sample; the
    heavy tail on top. Durations come from these models, never from how long PyTorch took."""

    def __init__(
        self,
        env: simpy.Environment,
        compute: ComputeConfig,
        speeds: Sequence[float],
        cpu: CpuCycles,
        cpu_hz: np.ndarray,
        profiles: Sequence[DeviceProfile] | None,
        batch_size: int,
        streams: RandomStreams,
        log: EventLog,
        energy: DeviceEnergy | None,
        timed_tasks: Mapping[int, Task],
        round_index: Callable[[], int | None],
    ) -> None:
        """``timed_tasks``: each client's timed task, if any, which its compute time is
        charged to; ``round_index``: the round now, for the log."""
        self.env = env
        self.speeds = speeds
        self.cpu = cpu
        self.cpu_hz = cpu_hz
        self.profiles = profiles
        self.batch_size = batch_size
        self.streams = streams
        self.log = log
        self.energy = energy
        self.timed_tasks = timed_tasks
        self.round_index = round_index
        tail = compute.heavy_tail
        self.compute_model = ComputeModel(
            ShiftedExponential(compute.t_min_s, compute.mean_extra_s),
            heavy_tail_shape=tail.shape if tail else None,
            heavy_tail_scale_s=tail.scale_s if tail else 0.0,
        )
        self.queue = DeviceQueue(env)
        self._rngs: dict[int, np.random.Generator] = {}  # made on a client's first task
        self._per = compute.per  # round | step | sample: read at every task
        self._per_cycles = compute.model == "cycles"
        self.samples_processed = 0  # by every client's finished work: metrics.csv's count

    def work(
        self, client: int, steps: int, samples: int | None
    ) -> Generator[simpy.Event, None, None]:
        """Process body: wait for the device, then spend the time ``steps`` local steps take
        (``samples``: the samples they process; None for work other than training)."""
        yield from self.queue.acquire(client)
        try:
            yield from self._compute(client, steps, samples)
        finally:
            self.queue.release(client)

    def _compute(
        self, client: int, steps: int, samples: int | None
    ) -> Generator[simpy.Event, None, None]:
        # Work other than training (samples None): its steps' worth of batches.
        data = samples if samples is not None else steps * self.batch_size
        speed = self.speeds[client]
        if self.profiles is not None or self._per_cycles:  # + only the heavy tail
            duration_s = self.compute_model.sample_s(self._rng(client), 0.0, speed)
            if self.profiles is not None:
                duration_s += self.profiles[client].compute_s_per_sample * data / speed
            else:
                duration_s += self.cpu.time_s(data, float(self.cpu_hz[client])) / speed
        else:
            work_units = self.work_units(steps, samples)
            duration_s = self.compute_model.sample_s(self._rng(client), work_units, speed)
        task = self.timed_tasks.get(client)
        if task is not None and task.compute_started_s is None:
            task.compute_started_s = self.env.now
        self.log.emit("train_start", client=client, round=self.round_index(), steps=steps)
        energy = self.energy
        draw = energy.compute_started(client, data, duration_s) if energy else None
        try:
            yield self.env.timeout(duration_s)
        except simpy.Interrupt as stop:
            self.log.emit("train_abort", client=client, reason=stop.cause)
            if draw is not None:
                energy.compute_ended(draw, lost=True)
            raise
        self.log.emit("train_end", client=client)
        self.samples_processed += data
        if draw is not None:
            energy.compute_ended(draw, lost=False)
        if task is not None:
            task.compute_s += duration_s
            task.computed = True

    def _rng(self, client: int) -> np.random.Generator:
        """The client's own stream of compute draws (keyed: the same whenever it is made)."""
        rng = self._rngs.get(client)
        if rng is None:
            rng = self._rngs[client] = self.streams.generator("compute", client)
        return rng

    def minimum_s(self, client: int, steps: int, samples: int) -> float:
        """The least time ``steps`` local steps over ``samples`` samples can take on the
        client's device: no exponential extra, no stall of the heavy tail."""
        speed = self.speeds[client]
        if self.profiles is not None:
            return self.profiles[client].compute_s_per_sample * samples / speed
        if self._per_cycles:
            return self.cpu.time_s(samples, float(self.cpu_hz[client])) / speed
        t_min_s = self.compute_model.base.t_min_s
        return self.work_units(steps, samples) * t_min_s / speed

    def expected_max_completion_s(
        self, offsets_s: Sequence[float], scales: Sequence[float]
    ) -> float:
        """E[max_i (offset_i + scale_i (T_min + X_i))] under the shifted exponential (no heavy
        tail): the closed form an algorithm models its round time with."""
        base = self.compute_model.base
        return expected_max_completion_s(offsets_s, scales, base.t_min_s, base.mean_extra_s)

    def work_units(self, steps: int, samples: int | None) -> int:
        """What the shifted exponential is multiplied by: 1, the steps or the samples."""
        per = self._per
        return 1 if per == "round" else steps if per == "step" else samples or steps
