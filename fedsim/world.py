"""The World: where the system model (SimPy) and the learning side (torch) meet.

Algorithms speak only through the World's primitives, each of which reads like a step
of a protocol: ``select_clients``, ``send_down`` a model, ``train`` on local data (which
takes the device's compute time), ``upload`` the result, ``gather`` what arrived under the
server's policy, ``end_round``. Time comes from the system model, bytes from the tensors actually
sent, never from how long PyTorch took on this machine.

Churn: a client that goes offline (or leaves for good) has its running tasks interrupted;
whatever it was computing or sending is lost (bytes on the air are counted as wasted), and
a server learns of it only through its own policy (a deadline), never by being told.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import math
import zlib
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import simpy
import torch

from fedsim.config import AlgorithmConfig, Scenario
from fedsim.learn.data import ClientShard, FederatedDataset, build_public_set
from fedsim.learn.trainer import Distillation, Ensemble, EvalResult, Trainer, TrainResult
from fedsim.links import build_network, write_radio_files
from fedsim.power import DeviceEnergy
from fedsim.presence import Presence
from fedsim.recorder import ClientScore, Recorder
from fedsim.sim import readers
from fedsim.sim.compute import ComputeModel, CpuCycles, ShiftedExponential, device_speeds
from fedsim.sim.events import EventLog
from fedsim.sim.network import TransmissionLost
from fedsim.sim.topology import neighbours

ProgressCallback = Callable[[int, float], None]
"""Called with (round, simulated time) after every round."""

Models = torch.Tensor | Mapping[int, torch.Tensor | Ensemble]
"""What clients use to predict: one global model, or each client's own model or ensemble."""

CANCELLED = "cancelled"  # interrupt cause: the server closed the round


class RandomStreams:
    """Independent, reproducible random streams per purpose and key (e.g. client id).

    Keyed derivation (not one shared generator) means that adding a client, an
    algorithm or an extra draw somewhere never shifts the numbers used elsewhere.
    """

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def _sequence(self, purpose: str, keys: tuple[int, ...]) -> np.random.SeedSequence:
        return np.random.SeedSequence(self.seed, spawn_key=(zlib.crc32(purpose.encode()), *keys))

    def generator(self, purpose: str, *keys: int) -> np.random.Generator:
        return np.random.default_rng(self._sequence(purpose, keys))

    def integer_seed(self, purpose: str, *keys: int) -> int:
        """A 63-bit seed (for torch generators and library calls that take an int)."""
        return int(self._sequence(purpose, keys).generate_state(1, np.uint64)[0] >> np.uint64(1))


@dataclass(frozen=True)
class Client:
    id: int
    shard: ClientShard
    speed: float  # compute time is divided by this (device class and straggler slowdown)


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


BREAKDOWN = ("downlink_queue_s", "downlink_s", "compute_s", "uplink_queue_s", "uplink_s")
"""A participant's round time, part by part; ``waiting_s`` (idle until the round closes,
or at a barrier) is the rest."""


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


class World:
    """One algorithm's run on the scenario's world: same clients, links and draws for all."""

    def __init__(
        self,
        scenario: Scenario,
        algorithm: AlgorithmConfig,
        dataset: FederatedDataset,
        trainer: Trainer | Sequence[Trainer],
        recorder: Recorder,
        progress: ProgressCallback | None = None,
        *,
        timing_only: bool = False,
    ) -> None:
        """``trainer``: one for every client, or one per client (model-heterogeneous runs)."""
        self.scenario = scenario
        self.algorithm = algorithm
        per_client = [trainer] * len(dataset.shards) if isinstance(trainer, Trainer) else trainer
        self._trainers = list(per_client)
        self.trainer = self._trainers[0]  # the architecture of homogeneous runs
        self.num_classes = dataset.num_classes
        self.recorder = recorder
        self.timing_only = timing_only
        self.env = simpy.Environment()
        self.streams = RandomStreams(scenario.seed)
        self._progress = progress or (lambda round_index, time_s: None)
        self.round_index: int | None = None
        self._round_started_s = 0.0
        self._round_stats = RoundStats()

        system = scenario.system
        num_clients = len(dataset.shards)
        compute = system.compute
        speeds = device_speeds(
            num_clients,
            self.streams.generator("devices"),
            [(c.fraction, c.speed) for c in compute.device_classes],
            compute.stragglers.fraction,
            compute.stragglers.slowdown,
        )
        self.clients = [
            Client(id=i, shard=shard, speed=float(speed))
            for i, (shard, speed) in enumerate(zip(dataset.shards, speeds, strict=True))
        ]
        self._tasks: dict[int, set[Task]] = {}  # clients with work under way only
        self._current_task: dict[int, Task] = {}
        self.on_join: Callable[[int], None] | None = None  # the algorithm's, if it cares
        self.on_leave: Callable[[int], None] | None = None
        self.on_finish: list[Callable[[], None]] = []  # e.g. save state, also after a time budget

        run_dir = recorder.run_dir
        events_path = run_dir / "events.jsonl" if scenario.output.events and run_dir else None
        self.log = EventLog(lambda: self.env.now, events_path)
        recorder.traffic = self.log
        self.presence = Presence(
            self.env, scenario.clients, num_clients, self.streams, self.log, recorder,
            interrupt=self._interrupt_tasks,
            joined=lambda client: self.on_join and self.on_join(client),
            left=lambda client: self.on_leave and self.on_leave(client),
        )  # fmt: skip
        self.present = self.presence.present  # the same sets, kept up to date by presence
        self.online = self.presence.online
        devices = system.devices
        self._profiles = readers.read_device_profiles(devices.path) if devices else None
        self.network = build_network(
            scenario, self.env, self.log, self.streams, num_clients, self.is_online, self._profiles
        )
        radio = self.network.radio
        if radio is not None and run_dir is not None:
            self.on_finish.append(lambda: write_radio_files(radio, run_dir, self.env.now))
        cycles = compute.cycles
        self._cpu = CpuCycles(cycles.cycles_per_sample, cycles.capacitance)
        self._cpu_hz = cycles.frequency_ghz.sample(self.streams.generator("cpu"), num_clients) * 1e9
        self.energy = None if system.energy is None else DeviceEnergy(
            system.energy, self._cpu, self._cpu_hz, self.env, self.streams, self.network.radio,
            self.presence.battery_empty,
        )  # fmt: skip
        self.network.air_energy = self.energy
        if self.energy is not None:
            self.energy.is_online = self.is_online
            recorder.energy = self.energy.meter
        tail = compute.heavy_tail
        self.compute_model = ComputeModel(
            ShiftedExponential(compute.t_min_s, compute.mean_extra_s),
            heavy_tail_shape=tail.shape if tail else None,
            heavy_tail_scale_s=tail.scale_s if tail else 0.0,
        )
        self._compute_rngs: dict[int, np.random.Generator] = {}  # made on a client's first task
        self._compute_per = compute.per  # round | step | sample: read at every task
        self._compute_per_cycles = compute.model == "cycles"
        self._bits_per_param = system.network.precision_bits
        self._trainings_done = [0] * num_clients
        self._device_queue: dict[int, list[simpy.Event]] = {}  # busy devices: who waits next
        # Trainings whose compute time is running, in the order they started (a set).
        self._training_queue: dict[_QueuedTraining, None] = {}
        self.sampling_rng = self.streams.generator("sampling")
        self._unevaluated: tuple[int, float, Models] | None = None
        self._models: Models | None = None
        self._rounds_completed = 0
        self._participants = 0
        self._last_evaluated_s: float | None = None
        # E[round time] by the algorithm's own closed form, where exact (the budget prints it).
        self.closed_form_round_s: float | None = None

        self.log.emit("run_start", clients=sorted(self.present))
        self.presence.start(self.energy)

    def run(self, algorithm_process: Generator) -> None:
        """Run the algorithm's process to its end or to the scenario's time budget."""
        done = self.env.process(algorithm_process)
        budget_s = self.scenario.run.time_budget_s
        stop = done if budget_s is None else self.env.any_of([done, self.env.timeout(budget_s)])
        every_s = self.scenario.evaluation.every_s
        if every_s is not None and not self.timing_only:
            self.env.process(self._evaluate_every(every_s))
        with _fewer_gc_passes():
            try:
                self.env.run(until=stop)
            except RuntimeError as error:  # nothing left to happen (e.g. every client left)
                if "No scheduled events left" not in str(error):
                    raise

    def _evaluate_every(self, every_s: float) -> Generator[simpy.Event, None, None]:
        while True:
            yield self.env.timeout(every_s)
            if self._models is not None:
                self._unevaluated = (self._rounds_completed, self.env.now, self._models)
                self._evaluate_pending()

    # --- who is there ---

    @property
    def client_ids(self) -> list[int]:
        """Clients present now (joined and not departed), in id order."""
        return sorted(self.present)

    def is_online(self, client: int) -> bool:
        return client in self.online

    def trainer_of(self, client: int) -> Trainer:
        """The trainer of this client's architecture."""
        return self._trainers[client]

    def num_train(self, client: int) -> int:
        return self.clients[client].shard.num_train

    def until_online(self, client: int) -> simpy.Event:
        """An event that fires when the client is (back) online; at once if it is."""
        return self.presence.until_online(client)

    # --- protocol primitives ---

    def rounds(self) -> Iterator[int]:
        """Round numbers 1, 2, ... up to run.rounds (endless with only a time budget).

        The World notes when each round starts, so logs and breakdowns carry the round.
        """
        last = self.scenario.run.rounds
        for round_index in itertools.count(1) if last is None else range(1, last + 1):
            self.round_index = round_index
            self._round_started_s = self.env.now
            self._round_stats = RoundStats()
            self.network.round_index = round_index
            self.log.emit("round_start", round=round_index)
            yield round_index

    def select_clients(
        self, fraction: float, over_selection: float = 0.0, *, by_size: bool = False
    ) -> Generator[simpy.Event, object, list[int]]:
        """Process body: wait until someone is online, then sample among the online clients.

        The server sees who has checked in (online) when it selects; it wants
        max(1, round(fraction * present)) updates and over-selects by ``over_selection``.
        ``by_size`` samples without replacement with probability ∝ local training size.
        """
        candidates = yield from self.online_clients()
        wanted = self.wanted_updates(fraction)
        count = min(len(candidates), math.ceil(wanted * (1 + over_selection)))
        sizes = np.array([self.num_train(c) for c in candidates], dtype=float) if by_size else None
        chosen = self.sampling_rng.choice(
            candidates, size=count, replace=False, p=None if sizes is None else sizes / sizes.sum()
        )
        return sorted(int(c) for c in chosen)

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

    def wanted_updates(self, fraction: float) -> int:
        """How many updates a round asks for: max(1, round(fraction * present clients))."""
        return max(1, round(fraction * len(self.present)))

    def initial_params(self, client: int | None = None) -> torch.Tensor:
        """The same initial model for every algorithm of the scenario (a fair start).

        Until an algorithm sets other models, this is what every client would use. With a
        model mix, ask per client: each architecture has its own initial model.
        """
        trainer = self.trainer if client is None else self.trainer_of(client)
        if self.timing_only:
            return torch.empty(trainer.num_params, device="meta")
        params = trainer.init_params(self.streams.integer_seed("init"))
        if self._models is None and client is None:
            self._models = params
        return params

    def payload_bytes(self, *tensors: torch.Tensor) -> int:
        """Bytes on the air for these tensors at the scenario's precision."""
        return sum(t.numel() for t in tensors) * self._bits_per_param // 8

    def send_down(self, clients: Sequence[int], *tensors: torch.Tensor) -> dict[int, simpy.Event]:
        """The base station sends the same payload to a group; per-client arrival events.

        A client that is offline when the transmission ends misses it: its event never fires.
        """
        arrivals = self.network.send_down(clients, self.payload_bytes(*tensors))
        for client, arrival in arrivals.items():
            arrival.callbacks.append(partial(self._note_downlink, client))
        return arrivals

    def _note_downlink(self, client: int, arrival: simpy.Event) -> None:
        """Charge a model that reached the client before it computes to its timed task."""
        task = self._current_task.get(client)
        if task is not None and task.compute_started_s is None:
            queued_s, air_s = arrival.value
            task.downlink_queue_s += queued_s
            task.downlink_s += air_s

    def upload(self, client: int, *tensors: torch.Tensor) -> Generator[simpy.Event, None, None]:
        """Process body: the client sends these tensors to the base station."""
        started_s = self.env.now
        _, air_s = yield from self.network.upload(client, self.payload_bytes(*tensors))
        task = self._current_task.get(client)
        if task is not None:
            task.uplink_queue_s += self.env.now - started_s - air_s
            task.uplink_s += air_s

    def send_peer(
        self, sender: int, receiver: int, *tensors: torch.Tensor
    ) -> Generator[simpy.Event, None, simpy.Event]:
        """Process body: sender transmits to a peer (D2D edge, or relayed by the base station).

        Returns the receiver's delivery event (it never fires if the receiver is offline).
        """
        return (yield from self.network.send_peer(sender, receiver, self.payload_bytes(*tensors)))

    def send_message(
        self, sender: int, receiver: int, *tensors: torch.Tensor, payload: object = None
    ) -> Task:
        """Start a peer message as the sender's task; ``delivered`` fires with ``payload``
        when the receiver has it.

        It never fires if the sender goes offline mid-transfer (its bytes are wasted) or the
        receiver is offline when it arrives; like a server, a peer notices only by a deadline.
        """

        def body() -> Generator[simpy.Event, None, object]:
            received = yield from self.send_peer(sender, receiver, *tensors)
            yield received  # relayed: the base station forwards it after the upload
            return payload

        return self.start_task(sender, body(), timed=False)

    def peers_of(self, client: int) -> list[int]:
        """The client's present D2D neighbours (the graph of ``system.d2d``), ascending."""
        graph = self.network.graph
        if graph is None:
            raise ValueError("no D2D graph: add a system.d2d section")
        return [c for c in neighbours(graph, client) if c in self.present]

    def work(
        self, client: int, steps: int, samples: int | None = None
    ) -> Generator[simpy.Event, None, None]:
        """Process body: the client's device spends the time ``steps`` local steps take.

        For local work other than training (e.g. computing statistics); ``train`` uses it.
        A device does one computation at a time: concurrent requests (a peer's and one's
        own work in a decentralized round) wait their turn, first come first served.
        """
        if client in self._device_queue:
            turn = self.env.event()
            self._device_queue[client].append(turn)
            try:
                yield turn
            except simpy.Interrupt:
                if turn.triggered:  # the device was handed over just now: pass it on
                    self._release_device(client)
                else:
                    self._device_queue[client].remove(turn)
                raise
        else:
            self._device_queue[client] = []
        try:
            yield from self._compute(client, steps, samples)
        finally:
            self._release_device(client)

    def _release_device(self, client: int) -> None:
        waiting = self._device_queue[client]
        if waiting:
            waiting.pop(0).succeed()
        else:
            del self._device_queue[client]

    def _compute(
        self, client: int, steps: int, samples: int | None
    ) -> Generator[simpy.Event, None, None]:
        # Work other than training (samples None): its steps' worth of batches.
        data = samples if samples is not None else steps * self.scenario.training.batch_size
        speed = self.clients[client].speed
        if self._profiles is not None or self._compute_per_cycles:  # + only the heavy tail
            duration_s = self.compute_model.sample_s(self._compute_rng(client), 0.0, speed)
            if self._profiles is not None:
                duration_s += self._profiles[client].compute_s_per_sample * data / speed
            else:
                duration_s += self._cpu.time_s(data, float(self._cpu_hz[client])) / speed
        else:
            work_units = self._work_units(steps, samples)
            duration_s = self.compute_model.sample_s(self._compute_rng(client), work_units, speed)
        task = self._current_task.get(client)
        if task is not None and task.compute_started_s is None:
            task.compute_started_s = self.env.now
        self.log.emit("train_start", client=client, round=self.round_index, steps=steps)
        draw = self.energy.compute_started(client, data, duration_s) if self.energy else None
        try:
            yield self.env.timeout(duration_s)
        except simpy.Interrupt as stop:
            self.log.emit("train_abort", client=client, reason=stop.cause)
            if draw is not None:
                self.energy.compute_ended(draw, lost=True)
            raise
        self.log.emit("train_end", client=client)
        if draw is not None:
            self.energy.compute_ended(draw, lost=False)
        if task is not None:
            task.compute_s += duration_s

    def _compute_rng(self, client: int) -> np.random.Generator:
        """The client's own stream of compute draws (keyed: the same whenever it is made)."""
        rng = self._compute_rngs.get(client)
        if rng is None:
            rng = self._compute_rngs[client] = self.streams.generator("compute", client)
        return rng

    def _work_units(self, steps: int, samples: int | None) -> int:
        per = self._compute_per
        return 1 if per == "round" else steps if per == "step" else samples or steps

    def compute_scale(self, client: int) -> float:
        """A standard local training's compute time is this x (T_min + Exp(mean)), plus the
        heavy tail if any: its work units (1, its steps or its samples, by compute.per) over
        the device's speed. For an algorithm's model of its own round time."""
        training = self.scenario.training
        trainer = self.trainer_of(client)
        n = self.num_train(client)
        steps = trainer.num_steps(n, epochs=training.local_epochs, steps=training.local_steps)
        units = self._work_units(steps, trainer.samples_processed(n, steps))
        return units / self.clients[client].speed

    def train(
        self,
        client: int,
        params: torch.Tensor,
        *,
        epochs: int | None = None,
        steps: int | None = None,
        train_indices: torch.Tensor | None = None,
        prox_center: torch.Tensor | None = None,
        prox_mu: float = 0.0,
        distill: Distillation | None = None,
        correction: torch.Tensor | None = None,
    ) -> Generator[simpy.Event, None, TrainResult]:
        """Process body: the client's device spends its compute time, then returns its training.

        The duration comes from the compute model (never from PyTorch's wall time here).
        The real training is queued when the compute time starts and runs when it ends, or
        earlier, batched with another client's (see ``_run_queued``); work dropped before it
        ran (a dropout, a deadline) costs nothing. ``epochs``/``steps`` override the scenario's
        local work, ``train_indices`` restricts it to part of the client's training data (e.g.
        with a held-out validation part); the other options are ``Trainer.train``'s.
        """
        training = self.scenario.training
        if epochs is None and steps is None:
            epochs, steps = training.local_epochs, training.local_steps
        shard = self.clients[client].shard
        trainer = self.trainer_of(client)
        n = shard.num_train if train_indices is None else len(train_indices)
        steps = trainer.num_steps(n, epochs=epochs, steps=steps)
        samples = trainer.samples_processed(n, steps)
        if self.timing_only:  # no data is touched: a timing-only client may have none
            yield from self.work(client, steps, samples)
            return TrainResult(params, math.nan, steps, samples)
        x, y = shard.x_train, shard.y_train
        if train_indices is not None:
            x, y = x[train_indices], y[train_indices]
        # Counted in trainings finished (a client trains one model at a time).
        seed = self.streams.integer_seed("batches", client, self._trainings_done[client])
        center = prox_center if prox_mu else None
        job = _QueuedTraining(
            trainer, params, x, y, steps, seed, center, prox_mu, distill, correction
        )
        self._training_queue[job] = None
        try:
            yield from self.work(client, steps, samples)
        except simpy.Interrupt:
            self._training_queue.pop(job, None)  # never run, unless batched with another
            raise
        self._trainings_done[client] += 1
        result = job.result if job.result is not None else self._run_queued(job)
        self.recorder.add_training(result.mean_loss, result.samples)
        return result

    def _run_queued(self, due: _QueuedTraining) -> TrainResult:
        """Run a training whose compute time is over, with the queued ones it batches with.

        Partners share the trainer and the training options but for the prox center; they
        are taken only where the trainer's engine trains them all at once (vmap): a loop
        gains nothing by running them early, and a task cancelled later would waste them.
        """
        queue = self._training_queue
        batch = [due]
        if due.trainer.engine_for(2, distill=due.distill) == "vmap":
            batch = [job for job in queue if job.batches_with(due)]
        engine = due.trainer.engine_for(len(batch), distill=due.distill)
        for job in batch:
            del queue[job]
        results = due.trainer.train_many(
            [job.params for job in batch],
            [(job.x, job.y) for job in batch],
            steps=[job.steps for job in batch],
            seeds=[job.seed for job in batch],
            engine=engine,
            prox_center=[job.prox_center for job in batch] if due.prox_center is not None else None,
            prox_mu=due.prox_mu,
            distill=due.distill,
            correction=[job.correction for job in batch] if due.correction is not None else None,
        )
        for job, result in zip(batch, results, strict=True):
            job.result = result
        return results[batch.index(due)]

    # --- tasks and the server's policy ---

    def start_task(self, client: int, body: Generator, *, timed: bool = True) -> Task:
        """Run ``body`` as work the client does for the server (or for a round).

        If the client goes offline or leaves, the task is interrupted and its ``delivered``
        event never fires: the server has to notice through its deadline. A ``timed`` task
        collects the client's downlink/compute/uplink times for the round breakdown.
        """
        task = Task(client=client, started_s=self.env.now, delivered=self.env.event())
        task.process = self.env.process(self._run_task(task, body, timed))
        return task

    def _run_task(
        self, task: Task, body: Generator, timed: bool
    ) -> Generator[simpy.Event, object, None]:
        self._tasks.setdefault(task.client, set()).add(task)
        if timed:
            self._current_task[task.client] = task
        try:
            value = yield from body
        except (simpy.Interrupt, TransmissionLost):
            return  # lost or cancelled: the primitives logged what was wasted
        finally:
            mine = self._tasks[task.client]
            mine.discard(task)
            if not mine:
                del self._tasks[task.client]
        if task.on_delivery is not None:
            value = task.on_delivery(task.client, value)
        task.delivered.succeed(value)

    def cancel(self, task: Task) -> None:
        """The server gives up on a task (a timeout): its work and bytes on the air are lost."""
        _interrupt(task, CANCELLED)

    def _interrupt_tasks(self, client: int, cause: str) -> None:
        for task in list(self._tasks.get(client, ())):
            _interrupt(task, cause)

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
        needed = len(tasks) if keep_first is None else min(keep_first, len(tasks))
        enough = self.env.event()
        closed = False

        def arrive(client: int, update: object) -> object:
            if closed or len(kept) == needed:
                return update  # surplus (dropped below) or late (cancelled at the close)
            kept.append(client)
            if len(kept) == needed:
                enough.succeed()
            return update if take is None else take(client, update)

        for task in tasks.values():
            task.on_delivery = arrive
        if needed == 0:
            enough.succeed()
        if deadline_s is None:
            yield enough
        else:
            remaining_s = self._round_started_s + deadline_s - self.env.now
            yield enough | self.env.timeout(max(0.0, remaining_s))
        closed = True
        yield from self.cancel_unfinished(tasks.values())
        taken = set(kept)
        for client, task in tasks.items():
            if task.delivered.triggered and client not in taken:
                nbytes = self.payload_bytes(*_tensors_of(task.delivered.value))
                self.log.update_dropped(
                    client, nbytes, reason="surplus", round_index=self.round_index
                )
        self._note_round(tasks, kept)
        return {client: tasks[client].delivered.value for client in kept}

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

    def _note_round(self, tasks: Mapping[int, Task], kept: list[int]) -> None:
        stats = self._round_stats
        stats.selected = len(tasks)
        stats.completed = len(kept)
        stats.dropped = len(tasks) - len(kept)
        stats.finished_tasks = [tasks[c] for c in kept]

    def public_inputs(self, num_samples: int) -> torch.Tensor:
        """Unlabeled inputs known to every client, disjoint from all clients' data.

        Drawn from the dataset's official test split (clients are partitioned from the
        training split), normalized like the clients' data.
        """
        dataset = self.scenario.dataset
        return build_public_set(
            dataset.name,
            root=dataset.resolved_root(),
            download=dataset.download,
            num_samples=num_samples,
            seed=self.streams.integer_seed("public"),
        )

    def save_arrays(self, name: str, **arrays: np.ndarray) -> None:
        """Keep an algorithm's inner state (e.g. collaboration weights) in the run folder."""
        if self.recorder.run_dir is not None:
            np.savez_compressed(self.recorder.run_dir / f"{name}.npz", **arrays)

    # --- rounds and evaluation ---

    def set_models(self, params: Models) -> None:
        """The models clients would use now: one global model, or each client's own (a
        model, or an ``Ensemble`` of models it mixes the predictions of).

        A time-cadence evaluation measures whatever was set last (a mapping may be a live
        dict the algorithm keeps updating; only present clients are evaluated).
        """
        self._models = params

    def end_round(
        self,
        round_index: int,
        params: Models,
        participants: int,
    ) -> None:
        """Close a round; evaluate on the round cadence (and the last round, whenever it ends).

        ``params`` is the global model every present client uses, or each client's own
        model. Evaluation is a measurement: it takes no simulated time.
        """
        self._write_round(round_index)
        self.set_models(params)
        self._rounds_completed, self._participants = round_index, participants
        every_rounds = self.scenario.evaluation.every_rounds
        if every_rounds is not None:
            self._unevaluated = (round_index, self.env.now, params)
            if round_index % every_rounds == 0 or round_index == self.scenario.run.rounds:
                self._evaluate_pending()
        self._progress(round_index, self.env.now)

    def _write_round(self, round_index: int) -> None:
        self.recorder.log_energy(self.env.now, round_index)
        stats = self._round_stats
        now = self.env.now
        duration_s = now - self._round_started_s
        finished = stats.finished_tasks
        if finished:
            parts = np.array([[getattr(t, part) for part in BREAKDOWN] for t in finished])
            # Idle time is what the parts leave of the round: clamp the rounding of a
            # participant that was busy until the very end.
            idle = np.maximum(duration_s - parts.sum(axis=1), 0.0)
            means = [*parts.mean(axis=0), idle.mean()]
            stats.breakdown = dict(zip(stats.breakdown, map(float, means), strict=True))
        self.log.emit("round_end", round=round_index)
        self.recorder.log_round(
            round_index=round_index,
            start_s=self._round_started_s,
            end_s=now,
            selected=stats.selected,
            completed=stats.completed,
            dropped=stats.dropped,
            **stats.breakdown,
        )

    def finish(self, *, complete: bool) -> dict:
        """Evaluate what the cadence has not measured yet; write the summary."""
        for callback in self.on_finish:
            callback()
        timed = self.scenario.evaluation.every_s is not None
        if timed and self._models is not None and self._last_evaluated_s != self.env.now:
            self._unevaluated = (self._rounds_completed, self.env.now, self._models)
        self._evaluate_pending()
        self.recorder.log_energy(self.env.now, self._rounds_completed or None)
        self.log.emit("run_end")
        self.log.close()
        return self.recorder.close(complete=complete)

    def _evaluate_pending(self) -> None:
        if self._unevaluated is None:
            return
        round_index, time_s, params = self._unevaluated
        self._unevaluated = None
        self._last_evaluated_s = time_s
        if self.timing_only:
            return
        clients = [self.clients[c] for c in sorted(self.present)]
        if not clients:
            return
        if isinstance(params, torch.Tensor):
            results = self.trainer.evaluate_many(
                params, [c.shard.x_test for c in clients], [c.shard.y_test for c in clients]
            )
        else:
            clients = [c for c in clients if c.id in params]
            results = self._evaluate_own_models(clients, params)
        scores = [
            ClientScore(client=c.id, group=c.shard.group, correct=r.correct, total=r.total)
            for c, r in zip(clients, results, strict=True)
        ]
        row = self.recorder.log_evaluation(time_s, round_index, scores, self._participants)
        self.log.emit("evaluate", round=round_index, accuracy=row["accuracy"])

    def _evaluate_own_models(
        self, clients: list[Client], params: Mapping[int, torch.Tensor | Ensemble]
    ) -> list[EvalResult]:
        """Each client's own model on its test set, all clients of one architecture at once
        (an ensemble is evaluated on its own)."""
        by_trainer: dict[Trainer, list[int]] = {}
        results: dict[int, EvalResult] = {}
        for i, c in enumerate(clients):
            model = params[c.id]
            if isinstance(model, Ensemble):  # a mix of models: its own pass per client
                results[i] = self.trainer_of(c.id).evaluate_ensemble(
                    model, c.shard.x_test, c.shard.y_test
                )
            else:
                by_trainer.setdefault(self.trainer_of(c.id), []).append(i)
        for trainer, members in by_trainer.items():
            group = [clients[i] for i in members]
            evaluated = trainer.evaluate_each(
                [params[c.id] for c in group],
                [c.shard.x_test for c in group],
                [c.shard.y_test for c in group],
            )
            results.update(zip(members, evaluated, strict=True))
        return [results[i] for i in range(len(clients))]


@dataclass(eq=False)
class _QueuedTraining:
    """A training whose compute time is running; ``result`` is set once it has run."""

    trainer: Trainer
    params: torch.Tensor
    x: torch.Tensor
    y: torch.Tensor
    steps: int
    seed: int
    prox_center: torch.Tensor | None
    prox_mu: float
    distill: Distillation | None
    correction: torch.Tensor | None
    result: TrainResult | None = None

    def batches_with(self, other: _QueuedTraining) -> bool:
        """Same trainer and options (the prox center and correction may differ), so one
        train_many runs both."""
        return (
            self.trainer is other.trainer
            and (self.prox_center is None) == (other.prox_center is None)
            and self.prox_mu == other.prox_mu
            and self.distill is other.distill
            and (self.correction is None) == (other.correction is None)
        )


def _interrupt(task: Task, cause: str) -> None:
    if task.process is not None and task.process.is_alive:
        task.process.interrupt(cause)


@contextlib.contextmanager
def _fewer_gc_passes() -> Iterator[None]:
    """Collect young objects less often while the event loop runs.

    A run keeps tens of thousands of live generators and events; with the default
    threshold the collector rescans them so often that it takes half of a large
    timing-only run (measured: 13.4 s -> 6.4 s for 10,000 clients).
    """
    thresholds = gc.get_threshold()
    gc.set_threshold(50_000, 20, 20)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)


def _tensors_of(value: object) -> tuple[torch.Tensor, ...]:
    """The tensors an update carries (a TrainResult, a tensor, or a tuple of tensors)."""
    if isinstance(value, TrainResult):
        return (value.params,)
    if isinstance(value, torch.Tensor):
        return (value,)
    if isinstance(value, tuple):
        return tuple(v for v in value if isinstance(v, torch.Tensor))
    return ()
