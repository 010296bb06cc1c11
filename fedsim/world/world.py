"""The World: the primitives algorithms speak, where the system model (SimPy) and the
learning side (torch) meet.

Algorithms speak only through these primitives, each of which reads like a step of a
protocol: ``select_clients``, ``send_down`` a model, ``train`` on local data (which takes the
device's compute time), ``upload`` the result, ``gather`` what arrived under the server's
policy, ``end_round``. Time comes from the system model, bytes from the tensors actually
sent, never from how long PyTorch took on this machine. The primitives come in parts, each
a class of its own module that ``World`` combines: the server's round (``server``: select,
start tasks, gather), what goes on the air (``transfers``) and the edge servers of
hierarchical FL (``edges``). The parts it is built from live beside this file too: the
devices and their queue (``devices``), the batched trainings (``training``), evaluation
(``evaluation``), tasks (``tasks``), the selection policies (``selection``), and what is
built from the scenario: the network (``network``), the energy model (``energy``) and who is
present (``presence``).

Churn: a client that goes offline (or leaves for good) has its running tasks interrupted;
whatever it was computing or sending is lost (bytes on the air are counted as wasted), and
a server learns of it only through its own policy (a deadline), never by being told.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import simpy
import torch

from fedsim.config import MAX_TIME_S, AlgorithmConfig, Scenario, ScenarioError, SelectionConfig
from fedsim.learn.data import ClientShard, FederatedDataset, build_public_set
from fedsim.learn.trainer import Distillation, Trainer, TrainResult
from fedsim.results.files import EVENTS_FILE
from fedsim.results.recorder import Recorder
from fedsim.sim import clock, readers
from fedsim.sim.compute import CpuCycles, device_speeds
from fedsim.sim.events import EventLog
from fedsim.sim.orbits import NeverVisible
from fedsim.sim.passes import SatelliteNetwork
from fedsim.streams import RandomStreams
from fedsim.world.aircomp import OverTheAir
from fedsim.world.compression import Compression
from fedsim.world.devices import Devices
from fedsim.world.edges import Association, EdgeServers
from fedsim.world.energy import DeviceEnergy
from fedsim.world.evaluation import Evaluation, Models
from fedsim.world.network import build_network, write_radio_files
from fedsim.world.presence import Presence
from fedsim.world.satellites import write_satellite_files
from fedsim.world.selection import ChannelReports, Policy
from fedsim.world.server import ServerPolicy
from fedsim.world.tasks import Rounds, Tasks
from fedsim.world.training import QueuedTraining, TrainingQueue
from fedsim.world.transfers import Transfers

ProgressCallback = Callable[[int, float], None]
"""Called with (round, simulated time) after every round."""


@dataclass(frozen=True)
class Client:
    id: int
    shard: ClientShard
    speed: float  # compute time is divided by this (device class and straggler slowdown)


class World(ServerPolicy, Transfers, EdgeServers):
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
        self.tasks = Tasks(self.env)
        self.on_join: Callable[[int], None] | None = None  # the algorithm's, if it cares
        self.on_leave: Callable[[int], None] | None = None
        self.on_finish: list[Callable[[], None]] = []  # e.g. save state, also after a time budget

        run_dir = recorder.run_dir
        events_path = run_dir / EVENTS_FILE if scenario.output.events and run_dir else None
        self.log = EventLog(lambda: self.env.now, events_path)
        recorder.traffic = self.log
        self.presence = Presence(
            self.env, scenario.clients, num_clients, self.streams, self.log, recorder,
            interrupt=self.tasks.interrupt_client,
            joined=lambda client: self.on_join and self.on_join(client),
            left=self._left,
        )  # fmt: skip
        self.present = self.presence.present  # the same sets, kept up to date by presence
        self.online = self.presence.online
        devices = system.devices
        profiles = readers.read_device_profiles(devices.path) if devices else None
        self.network = build_network(
            scenario, self.env, self.log, self.streams, num_clients, self.is_online, profiles
        )
        self._rounds = Rounds(
            self.env, scenario.run, self.log, self.network, recorder, algorithm.run_label
        )
        radio = self.network.radio
        if radio is not None and run_dir is not None:
            self.on_finish.append(lambda: write_radio_files(radio, run_dir, self.env.now))
        if isinstance(self.network, SatelliteNetwork):  # passes.csv, satellites.csv, summary
            satellites = self.network
            self.on_finish.append(lambda: self.recorder.summary_extra.update(
                write_satellite_files(satellites, run_dir, self.env.now)))  # fmt: skip
        cycles = compute.cycles
        cpu = CpuCycles(cycles.cycles_per_sample, cycles.capacitance)
        cpu_hz = cycles.frequency_ghz.sample(self.streams.generator("cpu"), num_clients) * 1e9
        self.energy = None if system.energy is None else DeviceEnergy(
            system.energy, cpu, cpu_hz, self.env, self.streams, self.network.radio,
            self.presence.battery_empty,
        )  # fmt: skip
        self.network.air_energy = self.energy
        if self.energy is not None:
            self.energy.is_online = self.is_online
            recorder.energy = self.energy.meter
        self.devices = Devices(
            self.env, compute, [c.speed for c in self.clients], cpu, cpu_hz, profiles,
            scenario.training.batch_size, self.streams, self.log, self.energy,
            timed_tasks=self.tasks.timed, round_index=lambda: self.round_index,
        )  # fmt: skip
        recorder.samples_processed = lambda: self.devices.samples_processed
        self.compression = Compression(
            algorithm.compression,
            system.network.precision_bits,
            [t.layer_shapes for t in {id(t): t for t in self._trainers}.values()],
            self.streams.integer_seed("compression"),
        )
        self.air = None  # the over-the-air uplink, when the scenario asks for one
        if system.uplink_aggregation != "digital":
            self.air = OverTheAir(
                system.uplink_aggregation, system.radio.aircomp, self.env,
                self.network.radio, self.log, self.energy, self.is_online,
                self.streams.integer_seed("aircomp"),
            )  # fmt: skip
        self._uploaded_bytes: dict[int, int] = {}  # each client's last upload, as encoded
        self._to_decode: dict[int, float] = {}  # seconds to decode a received model, by client
        self._trainings_done = [0] * num_clients
        self.trainings = TrainingQueue()
        self.sampling_rng = self.streams.generator("sampling")
        self._policies: dict[SelectionConfig, Policy] = {}  # selection policies other than random
        self._associations: dict[str, Association] = {}  # clients to edge servers, by rule
        self._channel_reports: dict[float | None, ChannelReports] = {}  # by report period
        self.evaluation = Evaluation(
            scenario.evaluation, scenario.run.rounds, dataset.shards, self.trainer,
            self.trainer_of, self.present, recorder, self.log, timing_only=timing_only,
        )  # fmt: skip
        self._closed_form_round_s: float | None = None

        self.log.emit("run_start", clients=sorted(self.present))
        self.presence.start(self.energy)

    def run(self, algorithm_process: Generator, *, max_events: int | None = None) -> None:
        """Run the algorithm's process to its end or to the scenario's time budget.

        A loop of the model that spins without advancing the clock stops the run with a
        ScenarioError, and so does a wait nothing will end (``_deadlock``); ``max_events``
        (for tests) bounds the events processed in all.
        """
        done = self.env.process(algorithm_process)
        budget_s = self.scenario.run.time_budget_s
        stop = done if budget_s is None else self.env.any_of([done, self.env.timeout(budget_s)])
        if self.scenario.evaluation.every_s is not None and not self.timing_only:
            self.env.process(self.evaluation.every_s(self.env))
        try:
            clock.run(self.env, stop, actors=len(self.clients), max_events=max_events)
        except clock.ClockStuck as stuck:
            settings = self.scenario.settings
            named = stuck.naming(settings("_s"), settings("_mbps"), MAX_TIME_S)
            raise ScenarioError(self.algorithm.run_label, [named]) from None
        except NeverVisible as never:  # a satellite no node will see again (a decayed TLE)
            raise ScenarioError(
                "system.constellation", [f"a transfer waits for ever: {never}"]
            ) from None
        except RuntimeError as error:  # nothing left to happen (e.g. every client left)
            if "No scheduled events left" not in str(error):
                raise
            waiting = [client for client in self.tasks.busy_clients() if self.is_online(client)]
            if waiting:  # not the end of the run: a wait that nothing will ever end
                raise self._deadlock(waiting) from None

    def _deadlock(self, waiting: list[int]) -> ScenarioError:
        """Nothing is left to happen, yet online clients' work waits: for a message lost on
        the way that nobody was told of (a peer learns of a lost D2D message only by a
        deadline; a model given up on without the base station knowing). Only the
        algorithm's deadline (an asynchronous server's task timeout) ends such a wait."""
        option = "task_timeout_s" if hasattr(self.algorithm, "task_timeout_s") else "deadline_s"
        index = self.round_index
        where = "before the first round" if index is None else f"in round {index}"
        shown = ", ".join(map(str, waiting[:5])) + (", ..." if len(waiting) > 5 else "")
        return ScenarioError(
            self.algorithm.run_label,
            [
                f"{self.setting(option)}: at t = {self.env.now:g} s, {where}, the work of "
                f"client(s) {shown} waits for messages lost on the way, of which nobody is "
                "told, and nothing else is left to happen: without it the round waits for "
                "ever; set it, so that a round closes without what did not arrive"
            ],
        )

    def setting(self, name: str) -> str:
        """The field path of this run's algorithm option ``name``, for error messages."""
        for index, algorithm in enumerate(self.scenario.algorithms):
            if algorithm.run_label == self.algorithm.run_label:
                return f"algorithms[{index}].{name}"
        return f"{self.algorithm.run_label}.{name}"

    # --- who is there ---

    @property
    def client_ids(self) -> list[int]:
        """Clients present now (joined and not departed), in id order."""
        return sorted(self.present)

    def _left(self, client: int) -> None:
        """A client left for good: what the codecs kept for it goes, then the algorithm's say."""
        self.compression.forget(client)
        self._to_decode.pop(client, None)
        self._uploaded_bytes.pop(client, None)
        if self.on_leave:
            self.on_leave(client)

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
        return self._rounds.numbers()

    @property
    def round_index(self) -> int | None:
        """The round under way (None before the first)."""
        return self._rounds.index

    def initial_params(self, client: int | None = None) -> torch.Tensor:
        """The same initial model for every algorithm of the scenario (a fair start).

        Until an algorithm sets other models, this is what every client would use. With a
        model mix, ask per client: each architecture has its own initial model.
        """
        trainer = self.trainer if client is None else self.trainer_of(client)
        if self.timing_only:
            return torch.empty(trainer.num_params, device="meta")
        params = trainer.init_params(self.streams.integer_seed("init"))
        if self.evaluation.models is None and client is None:
            self.evaluation.models = params
        return params

    def work(
        self, client: int, steps: int, samples: int | None = None
    ) -> Generator[simpy.Event, None, None]:
        """Process body: the client's device spends the time ``steps`` local steps take.

        For local work other than training (e.g. computing statistics); ``train`` uses it.
        A device does one computation at a time: concurrent requests (a peer's and one's
        own work in a decentralized round) wait their turn, first come first served.
        """
        yield from self.devices.work(client, steps, samples)

    def compute_scale(self, client: int) -> float:
        """A standard local training's compute time is this x (T_min + Exp(mean)), plus the
        heavy tail if any: its work units (1, its steps or its samples, by compute.per) over
        the device's speed. For an algorithm's model of its own round time."""
        steps, samples = self._standard_training(client)
        return self.devices.work_units(steps, samples) / self.clients[client].speed

    def minimum_task_s(self, client: int, down_bytes: int, up_bytes: int) -> float:
        """A lower bound of a receive-train-upload task of the client: the downlink and the
        uplink alone at their fastest, and the shortest standard local training."""
        fastest = self.network.fastest_transfer_s
        return (
            fastest(client, down_bytes, downlink=True)
            + self.devices.minimum_s(client, *self._standard_training(client))
            + fastest(client, up_bytes, downlink=False)
        )

    def _standard_training(self, client: int) -> tuple[int, int]:
        """(steps, samples) of the scenario's local training on the client's data."""
        training = self.scenario.training
        trainer = self.trainer_of(client)
        n = self.num_train(client)
        steps = trainer.num_steps(n, epochs=training.local_epochs, steps=training.local_steps)
        return steps, trainer.samples_processed(n, steps)

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
        model_arrives: simpy.Event | None = None,
    ) -> Generator[simpy.Event, None, TrainResult]:
        """Process body: the client's device spends its compute time, then returns its training.

        The duration comes from the compute model (never from PyTorch's wall time here).
        The real training is queued as soon as it is known and runs when its compute time
        ends, or earlier, batched with another client's (``TrainingQueue``); work dropped before
        it ran (a dropout, a deadline) costs nothing. ``model_arrives``: the event of the
        arrival of ``params`` (a model on its way down): the compute time starts then, but the
        training is known, and queued, from now, so that clients whose models arrive one after
        another still train in one batch. ``epochs``/``steps`` override the scenario's local
        work, ``train_indices`` restricts it to part of the client's training data (e.g. with
        a held-out validation part); the other options are ``Trainer.train``'s.
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
            if model_arrives is not None:
                yield model_arrives
            yield from self._codec_work(client, self._to_decode.pop(client, 0.0))
            yield from self.work(client, steps, samples)
            return TrainResult(params, math.nan, steps, samples)
        x, y = shard.x_train, shard.y_train
        if train_indices is not None:
            x, y = x[train_indices], y[train_indices]
        # Counted in trainings finished (a client trains one model at a time).
        seed = self.streams.integer_seed("batches", client, self._trainings_done[client])
        center = prox_center if prox_mu else None
        job = QueuedTraining(
            trainer, params, x, y, steps, seed, center, prox_mu, distill, correction
        )
        self.trainings.add(job)
        try:
            if model_arrives is not None:
                yield model_arrives
            yield from self._codec_work(client, self._to_decode.pop(client, 0.0))
            yield from self.work(client, steps, samples)
        except simpy.Interrupt:
            self.trainings.discard(job)  # never run, unless batched with another
            raise
        self._trainings_done[client] += 1
        result = self.trainings.result(job)
        self.recorder.add_training(result.mean_loss, result.samples)
        return result

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

    def save_arrays(self, file_name: str, **arrays: np.ndarray) -> None:
        """Keep an algorithm's inner state (e.g. collaboration weights) in the run folder, as
        ``file_name`` (an ``.npz`` name of ``fedsim.results.files``). Written whole and then
        renamed: a study's figures, drawn while other runs go on, never read half a file."""
        if self.recorder.run_dir is not None:
            path = self.recorder.run_dir / file_name
            partial = path.with_name(f"{path.name}.part")
            with partial.open("wb") as file:
                np.savez_compressed(file, **arrays)
            os.replace(partial, path)

    def note_closed_form_round_s(self, expected_s: float) -> None:
        """An algorithm that knows its exact E[round time] by a closed form states it here
        (``fedsim budget`` prints it beside the measured mean: ``closed_form_round_s()``)."""
        self._closed_form_round_s = expected_s

    def closed_form_round_s(self) -> float | None:
        """The algorithm's own closed form of E[round time], if it stated one."""
        return self._closed_form_round_s

    # --- rounds and evaluation ---

    @property
    def models(self) -> Models | None:
        """What clients would use now (the last ``set_models``, or the initial model)."""
        return self.evaluation.models

    def set_models(self, params: Models) -> None:
        """The models clients would use now: one global model, or each client's own (a
        model, or an ``Ensemble`` of models it mixes the predictions of).

        A time-cadence evaluation measures whatever was set last (a mapping may be a live
        dict the algorithm keeps updating; only present clients are evaluated).
        """
        self.evaluation.models = params

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
        self._rounds.close(round_index, participants)
        self.evaluation.round_ended(round_index, self.env.now, params, participants)
        self._progress(round_index, self.env.now)

    def finish(self, *, complete: bool) -> dict:
        """Evaluate what the cadence has not measured yet; write the summary."""
        for callback in self.on_finish:
            callback()
        self.evaluation.finish(self.env.now)
        self.recorder.log_energy(self.env.now, self.evaluation.rounds_completed or None)
        self.log.emit("run_end")
        self.log.close()
        return self.recorder.close(complete=complete)
