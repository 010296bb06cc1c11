"""FedAvg (McMahan et al., 2017) on the wireless clock.

Each synchronous round the server samples clients among those online and sends them
the global model (one broadcast, or one unicast each); every selected client trains on
its own data, spends its compute time and uploads its model. The server closes the round
by its policy: wait for all, keep the first k (over-selection), or a deadline after which
late updates are dropped; it averages what it kept, weighted by local sample counts, folding
each update into a running sum as it arrives. With a ``server_optimizer`` (FedOpt, Reddi et
al. 2021) the server steps from its model towards that average with its own optimizer;
``fedavgm``, ``fedadagrad``, ``fedadam`` and ``fedyogi`` are FedAvg with that optimizer preset.
Without dropouts and with a parallel uplink, a round lasts max_i (T_dl + T_i + T_ul,i).

Churn: a newcomer simply becomes eligible for selection and starts from the global model
it is sent; a client that leaves takes nothing with it (the server holds the model).
"""

from __future__ import annotations

from collections.abc import Generator
from functools import partial

import simpy

from fedsim.algorithms._sync import client_update, fedavg_server
from fedsim.config import FedAvgConfig
from fedsim.world import World


def run(world: World, config: FedAvgConfig) -> Generator[simpy.Event, object, None]:
    """The round itself (select, broadcast, gather under the policy, average by sample
    count) is ``fedavg_server``, which the FedAvg-family baselines share."""
    yield from fedavg_server(world, config, partial(client_update, world))
