"""The World: the primitives algorithms speak, where the system model (SimPy) and the
learning side (torch) meet.

Algorithms speak only through these primitives, each of which reads like a step of a
protocol: ``select_clients``, ``send_down`` a model, ``train`` on local data (which takes the
device's compute time), ``upload`` the result, ``gather`` what arrived under the server's
policy, ``end_round``. Time comes from the system model, bytes from the tensors actually
sent, never from how long PyTorch took on this machine. The parts live beside this file:
the devices and their queue (``devices``), the batched trainings (``training``), evaluation
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
from collections.abc import (
    Callable,
    Collection,
    Generator,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import numpy as np
import simpy
import torch

from fedsim.config import MAX_TIME_S, AlgorithmConfig, Scenario, ScenarioError
from fedsim.config.algorithms import SelectionConfig
from fedsim.learn.data import ClientShard, FederatedDataset, build_public_set
from fedsim.learn.trainer import Distillation, Trainer, TrainResult
from fedsim.results.files import EVENTS_FILE
from fedsim.results.recorder import Recorder
from fedsim.sim import clock, readers
from fedsim.sim.compute import CpuCycles, device_speeds
from fedsim.sim.events import EventLog
from fedsim.sim.topology import neighbours
from fedsim.streams import RandomStreams
from fedsim.world.aircomp import OverTheAir
from fedsim.world.compression import SERVER, Compression
from fedsim.world.devices import Devices
from fedsim.world.edges import ASSOCIATIONS, Association
from fedsim.world.energy import DeviceEnergy
from fedsim.world.evaluation import Evaluation, Models
from fedsim.world.network import build_network, write_radio_files
from fedsim.world.presence import Presence
from fedsim.world.selection import ChannelReport, ChannelReports, Policy, build_policy
from fedsim.world.tasks import CANCELLED, Rounds, Task, Tasks, interrupt
from fedsim.world.training import QueuedTraining, TrainingQueue

ProgressCallback = Callable[[int, float], None]
"""Called with (round, simulated time) after every round."""


@dataclass(frozen=True)
class Client:
    id: int
    shard: ClientShard
    speed: float  # compute time is divided by this (device class and straggler slowdown)


class Downlink(NamedTuple):
    """A transmission of the base station: when each client has it, and what it decodes."""

    arrivals: dict[int, simpy.Event]
    received: tuple[torch.Tensor, ...]


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

    # --- edge servers (hierarchical FL) ---

    @property
    def sites(self) -> list[int]:
        """The base-station sites, where edge servers sit: every site of the cells, or the
        one base station (site 0, where the server is when there are no cells)."""
        radio = self.network.radio
        return list(range(radio.num_sites)) if self.network.backhaul is not None else [0]

    def association(self, rule: str) -> Association:
        """The run's association of clients to edge servers by ``rule`` (``ASSOCIATIONS``)."""
        association = self._associations.get(rule)
        if association is None:
            association = self._associations[rule] = ASSOCIATIONS[rule](self.network.radio)
        return association

    def edge_members(self, rule: str = "serving_cell") -> dict[int, list[int]]:
        """Each site's present clients now by the association ``rule``, ascending (without
        cells, every present client at site 0)."""
        present = sorted(self.present)
        if self.network.backhaul is None:
            return {0: present}
        return self.association(rule).members(present, self.env.now)

    def edge_destination(self, rule: str, client: int, selected_by: int) -> int:
        """The edge a client's update goes to now, selected by the edge at ``selected_by``
        (``fedsim.world.edges``; site 0 without cells)."""
        if self.network.backhaul is None:
            return 0
        return self.association(rule).destination(client, selected_by, self.env.now)

    def over_backhaul(
        self, sites: Sequence[int], *tensors: torch.Tensor, up: bool
    ) -> Generator[simpy.Event, None, None]:
        """Process body: each of the sites sends tensors of these sizes to the cloud (``up``),
        or the cloud sends them to each site, over the backhaul, all at once, as they are (at
        the scenario's precision; codecs are for the radio). Nothing to send without cells:
        the one edge server is where the cloud is."""
        backhaul = self.network.backhaul
        if backhaul is not None and sites:
            nbytes = self.payload_bytes(*tensors)
            started_s = self.env.now
            yield from backhaul.send(sites, nbytes, up=up, round_index=self.round_index)
            self._rounds.stats.backhaul_s += self.env.now - started_s

    def note_cloud_round(self) -> None:
        """The cloud aggregated the edge servers' models (metrics count it)."""
        self.recorder.cloud_rounds += 1

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

    def payload_bytes(self, *tensors: torch.Tensor) -> int:
        """Bytes on the air for these tensors sent as they are, at the scenario's precision."""
        return self.compression.raw_bytes(tensors)

    def uploaded_bytes(self, client: int, *tensors: torch.Tensor) -> int:
        """Bytes of the client's last upload, which carried these tensors (as encoded)."""
        if self.compression.active or self.air is not None:
            return self._uploaded_bytes[client]
        return self.payload_bytes(*tensors)

    def model_message_bytes(self, direction: str) -> int:
        """Bytes of one model message in ``direction`` ("uplink", "downlink") as its codec
        encodes it (an update of the model's shape, on the uplink)."""
        return self.compression.model_message_bytes(direction, self.trainer.num_params)

    def send_down(
        self, clients: Sequence[int], *tensors: torch.Tensor, site: int | None = None
    ) -> Downlink:
        """The base station sends the same payload to a group: per-client arrival events, and
        the tensors as the clients decode them (the same, without a downlink codec). From
        the server, or from the edge server at ``site`` (with cells; without, the edge
        server is the server), relayed to the clients another site serves.

        A client that is offline when the transmission ends misses it: its event never fires.
        """
        nbytes, received = self.compression.send("downlink", SERVER, tensors)
        from_site = site if self.network.backhaul is not None else None
        arrivals = self.network.send_down(clients, nbytes, site=from_site)
        decode_s = self.compression.codec_s(self.compression.coded_numel(tensors), "downlink")
        for client, arrival in arrivals.items():
            arrival.callbacks.append(partial(self._note_downlink, client, decode_s))
        return Downlink(arrivals, received)

    def _note_downlink(self, client: int, decode_s: float, arrival: simpy.Event) -> None:
        """Charge a model that reached the client before it computes to its timed task; its
        device decodes it (``decode_s``) before its next training."""
        if arrival.ok and decode_s:
            self._to_decode[client] = decode_s
        task = self.tasks.timed.get(client)
        if arrival.ok and task is not None and task.compute_started_s is None:
            queued_s, air_s = arrival.value
            task.downlink_queue_s += queued_s
            task.downlink_s += air_s

    def _codec_work(self, client: int, seconds: float) -> Generator[simpy.Event, None, None]:
        """Process body: the client's device encodes or decodes for ``seconds`` (compute time
        of its timed task)."""
        if seconds:
            yield self.env.timeout(seconds)
            task = self.tasks.timed.get(client)
            if task is not None:
                task.compute_s += seconds

    def upload(
        self,
        client: int,
        *tensors: torch.Tensor,
        reference: torch.Tensor | None = None,
        to_edge: int | None = None,
    ) -> Generator[simpy.Event, None, tuple[torch.Tensor, ...]]:
        """Process body: the client sends these tensors to the base station; returns them as
        the server decodes them (the same, without an uplink codec). ``to_edge``: to the edge
        server at that site instead of the cloud (relayed when another site serves it).

        ``reference``: the model the client received, when the first tensor is its trained
        model: an uplink codec then compresses the update (the model minus the reference).
        Over the air, the client sends only its side information now and returns its tensors
        as they are: they reach the server in the round's slot (``over_the_air``).
        """
        if self.air is not None:
            nbytes = self.compression.number_bytes(self.air.side_numbers(tensors))
            if nbytes:
                yield from self._timed_upload(client, nbytes)
            self._uploaded_bytes[client] = nbytes
            return tensors
        nbytes, received = self.compression.send("uplink", client, tensors, (reference,))
        yield from self._codec_work(
            client, self.compression.codec_s(sum(t.numel() for t in tensors))
        )
        yield from self._timed_upload(client, nbytes, to_edge)
        self._uploaded_bytes[client] = nbytes
        return received

    def _timed_upload(
        self, client: int, nbytes: int, to_edge: int | None = None
    ) -> Generator[simpy.Event, None, None]:
        """Process body: an upload, its times charged to the client's timed task."""
        started_s = self.env.now
        _, air_s = yield from self.network.upload(client, nbytes, to_site=to_edge)
        task = self.tasks.timed.get(client)
        if task is not None:
            task.uplink_queue_s += self.env.now - started_s - air_s
            task.uplink_s += air_s

    def over_the_air(
        self, updates: Mapping[int, tuple[torch.Tensor, ...]], weights: Mapping[int, float]
    ) -> Generator[simpy.Event, object, tuple[torch.Tensor, ...] | None]:
        """Process body: the round's aggregation slot for the updates its server kept (each
        client's tensors, as ``upload`` returned them as differences to the server's model);
        returns the server's estimate of their average weighted by ``weights`` (obda: the
        step along the majority vote of their signs), or None when nobody transmitted.

        The slot's seconds count as uplink time of the clients that transmitted.
        """
        if not updates:
            return None
        estimate, transmitters, slot_s = yield from self.air.aggregate(
            updates, weights, self.round_index
        )
        sent = set(transmitters)
        for task in self._rounds.stats.finished_tasks:
            if task.client in sent:
                task.uplink_s += slot_s
        self._rounds.stats.air = vars(self.air.last)
        return estimate

    def send_message(
        self, sender: int, receiver: int, *tensors: torch.Tensor, own_model: bool = False
    ) -> Task:
        """Start a peer message (a D2D edge, or relayed by the base station) as the sender's
        task; ``delivered`` fires with the tensors as the receiver decodes them (the same,
        without a peer codec). ``own_model``: the first tensor is the sender's current
        model, which a peer codec sends against the sender's public copy.

        It never fires if the sender goes offline mid-transfer (its bytes are wasted) or the
        receiver is offline when it arrives; like a server, a peer notices only by a deadline.
        """
        message = self.compression.send_peer(sender, receiver, tensors, own_model)

        def body() -> Generator[simpy.Event, None, tuple[torch.Tensor, ...]]:
            encode_s = self.compression.codec_s(message.encoded_numel, "peer")
            if encode_s:
                yield self.env.timeout(encode_s)  # the sender's device encodes first
            received = yield from self.network.send_peer(sender, receiver, message.nbytes)
            yield received  # relayed: the base station forwards it after the upload
            decode_s = self.compression.codec_s(self.compression.coded_numel(tensors), "peer")
            if decode_s:
                yield self.env.timeout(decode_s)  # the receiver decodes before it uses it
            self.compression.delivered(sender, receiver, message.version)
            return message.received

        return self.start_task(sender, body(), timed=False)

    def public_model(self, client: int, like: torch.Tensor) -> torch.Tensor:
        """x̂: the client's model as its peers hold it under a peer codec (zeros, like
        ``like``, before its first message)."""
        copy = self.compression.public_model(client)
        return torch.zeros_like(like) if copy is None else copy.to(like.device, like.dtype)

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

    # --- tasks and the server's policy ---

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


def _tensors_of(value: object) -> tuple[torch.Tensor, ...]:
    """The tensors an update carries (a TrainResult, a tensor, or a tuple of tensors)."""
    if isinstance(value, TrainResult):
        return (value.params,)
    if isinstance(value, torch.Tensor):
        return (value,)
    if isinstance(value, tuple):
        return tuple(v for v in value if isinstance(v, torch.Tensor))
    return ()
