"""What the serverless algorithms (FedeRiCo, CoBo, decentralized SGD) share.

A decentralized round is lock-step, as in the papers' pseudocode: every online client runs
its part of the round as a task; the round closes when every part is done or at the
deadline (``deadline_s``), and peer messages still on the air then are lost (their bytes
count as wasted). Nobody is told that a peer went offline: a missing message is noticed
only because it has not arrived when it is needed.

A round in which no message arrives (a radio that lets nothing through) is recorded like any
other: each algorithm's clients go on with what they hold, and its participants are the
clients whose part of the round finished. Without a deadline, a part waiting for a message
lost on the way (nobody is told of it) would hold the round for ever: when nothing else is
left to happen the World stops the run, naming ``deadline_s`` (``World.run``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Generator, Mapping

import numpy as np
import simpy
import torch

from fedsim.config import DecentralizedConfig
from fedsim.results.files import COLLABORATION_FILE
from fedsim.world import Task, World

MAX_HISTORY_FLOATS = 20_000_000  # 160 MB of float64 snapshots at most; sparser beyond


class RoundMessages:
    """The peer messages of one round, addressed by (kind, sender, receiver).

    A receiver waits on ``expect``; the event fires with the message's tensors, as the
    receiver decodes them, once the message is in (one tensor: the tensor itself).
    Messages not delivered when the round closes are cancelled.
    """

    def __init__(self, world: World) -> None:
        self.world = world
        self._tasks: list[Task] = []
        self._inbox: dict[tuple[str, int], dict[int, simpy.Event]] = {}  # (kind, to) -> sender

    def expect(self, kind: str, sender: int, receiver: int) -> simpy.Event:
        slots = self._inbox.setdefault((kind, receiver), {})
        if sender not in slots:
            slots[sender] = self.world.env.event()
        return slots[sender]

    def send(
        self, kind: str, sender: int, receiver: int, *tensors: torch.Tensor, own_model: bool = False
    ) -> simpy.Event:
        """Start a message; returns the receiver's event (``expect``). ``own_model``: the
        first tensor is the sender's current model (see ``World.send_message``)."""
        task = self.world.send_message(sender, receiver, *tensors, own_model=own_model)
        self._tasks.append(task)
        slot = self.expect(kind, sender, receiver)

        def arrived(event: simpy.Event) -> None:
            slot.succeed(event.value[0] if len(event.value) == 1 else event.value)

        task.delivered.callbacks.append(arrived)
        return slot

    def delivered(self, kind: str, receiver: int) -> dict[int, object]:
        """sender -> what the messages of this kind that reached the receiver so far carried."""
        slots = self._inbox.get((kind, receiver), {})
        return {sender: slot.value for sender, slot in slots.items() if slot.triggered}

    def close(self) -> Generator[simpy.Event, object, None]:
        """Process body: cancel the messages still on the air (their bytes are this round's
        waste)."""
        yield from self.world.cancel_unfinished(self._tasks)
        self._tasks.clear()


class AllPeers:
    """Whom a client may pick and message: every present client, the papers' fully connected
    potential peers (``peers: all``). What no D2D link carries goes through the base station,
    or, in a constellation, up to a ground station at one pass and down at another."""

    def __init__(self, world: World) -> None:
        self.world = world

    def support(self, client: int) -> list[int]:
        """The client's potential peers, itself included: whom its weights span."""
        return self.world.client_ids

    def link_mask(self) -> np.ndarray:
        """1 where two clients (all, present or not) may ever collaborate, else 0."""
        return np.ones((len(self.world.clients),) * 2)

    def candidates(self, client: int) -> Collection[int]:
        """The clients ``client`` may pick now (itself among them: callers skip it)."""
        return set(self.world.client_ids)

    def reaches(self, sender: int, receiver: int) -> bool:
        """Whether a message from ``sender`` may go to ``receiver`` now."""
        return True


class D2DPeers(AllPeers):
    """``peers: d2d``: only the client's present D2D neighbours at the moment
    (``World.peers_of``: ``system.d2d``'s graph, or the ISLs in sight in a constellation), so
    the topology varies with time; a message to a peer out of reach when it would start is
    not sent (as if lost: its receiver notices by a timeout), so nothing takes the ground.
    The potential peers (whom weights span, who may ever collaborate) are the graph's
    neighbours, their link up now or not."""

    def support(self, client: int) -> list[int]:
        """The client and its present graph neighbours, in reach now or not."""
        linked = self.world.linked_peers_of(client)
        return sorted({client, *(j for j in linked if j in self.world.present)})

    def link_mask(self) -> np.ndarray:
        mask = np.eye(len(self.world.clients))
        for client in range(len(mask)):
            mask[client, self.world.linked_peers_of(client)] = 1.0
        return mask

    def candidates(self, client: int) -> Collection[int]:
        return set(self.world.peers_of(client))

    def reaches(self, sender: int, receiver: int) -> bool:
        return receiver in self.world.peers_of(sender)


def peer_policy(world: World, peers: str) -> AllPeers:
    """The configured ``peers`` choice, chosen once per run."""
    return D2DPeers(world) if peers == "d2d" else AllPeers(world)


def wait_for(
    world: World, events: Mapping[int, simpy.Event], timeout_s: float | None
) -> Generator[simpy.Event, object, dict[int, object]]:
    """Process body: wait for every event, or until ``timeout_s``; key -> the values that
    came."""
    if events:
        everything = world.env.all_of(list(events.values()))
        yield everything if timeout_s is None else everything | world.env.timeout(timeout_s)
    return {key: event.value for key, event in events.items() if event.processed}


def run_round(
    world: World, config: DecentralizedConfig, bodies: Mapping[int, Generator]
) -> Generator[simpy.Event, object, dict[int, object]]:
    """Process body: run each online client's part of the round under the round's deadline;
    returns the results of the parts that finished."""
    tasks = {client: world.start_task(client, body) for client, body in bodies.items()}
    return (yield from world.gather(tasks, deadline_s=config.deadline_s))


class WeightHistory:
    """A collaboration matrix over the run, kept in ``collaboration.npz`` (``analysis.weights``).

    Rows and columns are all clients (including the reserve of later arrivals); entries of
    clients not present are NaN. Saved every ``save_every_rounds`` rounds and when the run
    finishes (also at a time budget), so an interrupted run keeps what it had. Where the
    weights are on *models* that others train (FedeRiCo), ``reliance`` maps them to whose
    training each client relies on; it is saved beside them (``reliance``, its history).
    """

    def __init__(
        self,
        world: World,
        save_every_rounds: int = 10,
        reliance: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> None:
        self.world = world
        self.reliance = reliance
        n = len(world.clients)
        rounds = world.scenario.run.rounds or 1000
        matrices = 1 if reliance is None else 2  # a reliance snapshot beside each
        self.stride = max(1, -(-rounds * n * n * matrices // MAX_HISTORY_FLOATS))
        self.save_every_rounds = save_every_rounds
        self.snapshots: list[np.ndarray] = []
        self.reliance_snapshots: list[np.ndarray] = []  # computed once, as each is taken
        self.times_s: list[float] = []
        self.rounds: list[int] = []
        self.latest: np.ndarray | None = None
        world.on_finish.append(self.save)

    def record(self, round_index: int, weights: np.ndarray) -> None:
        self.latest = np.array(weights, dtype=float)
        if round_index % self.stride == 0:
            self.snapshots.append(self.latest)  # never written to: a new array each round
            if self.reliance is not None:
                self.reliance_snapshots.append(self.reliance(self.latest))
            self.times_s.append(self.world.env.now)
            self.rounds.append(round_index)
        if round_index % self.save_every_rounds == 0:
            self.save()

    def save(self) -> None:
        if self.world.timing_only or self.latest is None:
            return
        history = np.stack(self.snapshots) if self.snapshots else self.latest[None]
        extra = {}
        if self.reliance is not None:
            latest = self.reliance(self.latest)
            snapshots = self.reliance_snapshots or [latest]
            extra = {"reliance": latest, "reliance_history": np.stack(snapshots)}
        self.world.save_arrays(
            COLLABORATION_FILE,
            weights=self.latest,
            clients=np.arange(len(self.world.clients)),
            groups=np.array([c.shard.group for c in self.world.clients]),
            history=history,
            history_times_s=np.array(self.times_s),
            history_rounds=np.array(self.rounds),
            **extra,
        )
