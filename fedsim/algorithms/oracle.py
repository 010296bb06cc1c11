"""Oracle: FedAvg run separately inside each true group of the partition (groups known).

The upper reference of clustered and personalized FL: one model per group (``shard.group``),
all starting from the common initial model. Each round the server selects clients as
FedAvg does (among everyone online), sends each group's model to that group's selected
members in one multicast (one transmission per group, one after another from the base
station), and averages each group's kept updates by sample count (folded in as they
arrive, then the group's server optimizer steps: plain FedAvg by default); a group without
updates keeps its model. Sent: one model down per group with selected members, one model
up per participant. Evaluation: every client uses its group's model.
"""

from __future__ import annotations

from collections.abc import Generator

import simpy

from fedsim.algorithms._sync import LazyModels, ServerModels, client_update, gather_updates
from fedsim.config import OracleConfig
from fedsim.learn.trainer import TrainResult
from fedsim.world import World


def run(world: World, config: OracleConfig) -> Generator[simpy.Event, object, None]:
    group = {c.id: c.shard.group for c in world.clients}
    if -1 in group.values():
        raise ValueError(
            "oracle needs the clients' true groups and this dataset has none: use a grouped "
            "split, e.g. dataset.partition.kind: label_groups"
        )
    initial = world.initial_params()
    server = ServerModels(
        world, config.server_optimizer, dict.fromkeys(sorted(set(group.values())), initial)
    )
    models = server.models

    def take(client: int, result: TrainResult) -> None:
        server.add(group[client], client, result.params)

    for round_index in world.rounds():
        selected = yield from world.select_clients(
            config.client_fraction, config.over_selection, config.selection
        )
        arrivals, received = {}, {}
        for g, model in models.items():
            members = [c for c in selected if group[c] == g]
            if members:
                sent = world.send_down(members, model)
                arrivals.update(sent.arrivals)
                received[g] = sent.received[0]
        bodies = {c: client_update(world, c, received[group[c]], arrivals[c]) for c in selected}
        kept = yield from gather_updates(world, config, bodies, take=take)
        models = server.step()
        group_models = LazyModels(world, lambda c, models=models: models[group[c]])  # this round's
        world.end_round(round_index, group_models, participants=len(kept))
