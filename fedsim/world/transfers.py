"""What goes on the air, as the codecs encode it (a part of ``World``): a model sent down to
a group, an update uploaded to the server or to an edge, the over-the-air slot, peer messages.

Bytes come from the tensors actually sent, encoded by the run's codecs
(``fedsim.world.compression``); the time each transfer took is charged to the client's timed
task (queueing and on the air, each way), and a device's encoding and decoding to its compute.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from functools import partial
from typing import NamedTuple

import simpy
import torch

from fedsim.learn.trainer import Trainer
from fedsim.sim.network import Network
from fedsim.sim.topology import neighbours
from fedsim.world.aircomp import OverTheAir
from fedsim.world.compression import SERVER, Compression
from fedsim.world.tasks import Rounds, Task, Tasks


class Downlink(NamedTuple):
    """A transmission of the base station: when each client has it, and what it decodes."""

    arrivals: dict[int, simpy.Event]
    received: tuple[torch.Tensor, ...]


class Transfers:
    """The World's primitives of sending (a part of ``World``, which sets what it reads):
    ``send_down``, ``upload``, ``over_the_air``, ``send_message`` and their bytes."""

    env: simpy.Environment
    network: Network
    present: set[int]
    trainer: Trainer
    compression: Compression
    air: OverTheAir | None
    tasks: Tasks
    _rounds: Rounds
    _uploaded_bytes: dict[int, int]
    _to_decode: dict[int, float]

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
        if self.network.graph is None:
            raise ValueError("no D2D graph: add a system.d2d section")
        return [c for c in self.network.peers(client) if c in self.present]

    def linked_peers_of(self, client: int) -> list[int]:
        """Every D2D neighbour of the client in the graph, present or not, its link up now or
        not (a constellation's ISL pairs, in sight or not), ascending."""
        graph = self.network.graph
        if graph is None:
            raise ValueError("no D2D graph: add a system.d2d section")
        return neighbours(graph, client)
