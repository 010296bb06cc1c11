"""FedBuff (Nguyen et al., 2022) on the wireless clock.

The asynchronous server of ``_async.py``: up to ``max_concurrency`` clients train at once,
each on the model version it was sent (one unicast each); every client uploads its delta
Δ = x_trained − x_dispatched (model-sized). The server buffers K = ``buffer_size``
updates, then applies x ← x + η_g · (1/K) Σ s(τ_i) Δ_i and increments the version:
one round per buffer flush. The paper's s(τ) is 1/sqrt(1 + τ), the polynomial with a = 0.5
(the default); τ_i is counted when Δ_i arrives, which is also its staleness at the flush
since the version only moves at a flush.

Choices where the paper is silent or differs:
- The server optimizer is plain SGD with η_g = ``server_optimizer.lr`` (1) by default; any
  FedOpt optimizer can take its place (the paper also tries momentum). The buffer holds its
  K deltas (K is small; their staleness is recorded) and is plain memory (the paper's
  secure aggregation changes no bytes counted here).
- A dropped (too stale) update does not fill the buffer; the flush waits for K kept ones.
- Churn: see ``_async.py`` (a lost client is noticed through ``task_timeout_s``).
"""

from __future__ import annotations

from collections.abc import Generator

import simpy
import torch

from fedsim.algorithms._async import Update, async_server, staleness_weight
from fedsim.algorithms._sync import server_optimizer
from fedsim.config import FedBuffConfig
from fedsim.world import World


def run(world: World, config: FedBuffConfig) -> Generator[simpy.Event, object, None]:
    optimizer = server_optimizer(config.server_optimizer)

    def step(model: torch.Tensor, updates: list[Update]) -> torch.Tensor:
        weighted = sum(staleness_weight(config, u.staleness) * u.tensor for u in updates)
        return optimizer.step(model, model + weighted / len(updates))

    yield from async_server(world, config, step, buffer_size=config.buffer_size, send_delta=True)
