"""FedeRiCo (Sui, Wen et al., "Find Your Friends"): decentralized EM over whom to learn from.

No server. Client i owns one model φ_i and, for every client j, a last loss ℓ_ij, its
moving average L̂_ij and a weight w_ij = softmax(−L̂_i)_j. Each round, in lock-step
(Algorithm 1 with the practical protocol of Sec. 3.3):

1. i samples M = ``neighbours`` peers B_i ε-greedily on w_i and sends each a request;
2. each b ∈ B_i answers with its model φ_b (MODEL);
3. E-step: ℓ_ib = loss of φ_b on i's own training data for every φ_b received (and for
   φ_i); the others keep their stale ℓ_ij; L̂_i = (1 − β) L̂_i + β ℓ_i (β weighs the NEW
   loss); w_i = softmax(−L̂_i);
4. M-step: i sends g_bi = w_ib ∇_φb loss(φ_b; a mini-batch of D_i) back to each b (GRADIENT)
   and keeps g_ii;
5. when the round closes, each owner applies Σ_j g_ij, the gradients that reached it, with
   its own optimizer (the scenario's; the paper uses Adam, lr 0.01), whose state persists.

Per round: K·M requests (one number each), K·M models and K·M gradients, so 2·K·M
model-sized messages. Prediction: ĥ_i(x) = Σ_j w_ij softmax(h_φj(x)) over the models i holds
(its own and the last copy of each peer's it received), weights renormalized over those.

Choices where the paper is silent (spec §8), all parameters:
- ε-greedy per slot, without replacement, never i itself, ties in random order; at first all
  L̂ are 0, so greedy picks walk through unexplored peers first (Alg. 1 read literally).
- Self is always included (``include_self``): ℓ_ii is refreshed and g_ii applied every round,
  as Eq. 8's sum over j includes i and "M = 0 ≈ Local Training" requires.
- The E-step loss is summed over the local training set, as Alg. 1 and Eq. 3 write it
  (``loss_reduction``, ``loss_on``: the mean, or the gradient's mini-batch). Measured on
  Fashion-MNIST label splits (8 clients, 2 or 4 groups): with the sum, each group's clients
  all put their weight (nearly one-hot) on one shared model, and no two groups share one
  (co-reliance W Wᵀ is 1 within groups, 0 across). That model is trained by its users (Eq. 8)
  and may be owned by a client of another group: after the first round the optimistic
  L̂ = 0 of unexplored peers leaves every client's own model with w_ii ≈ 0. The mean keeps
  the weights smooth, and because disjoint label sets do not conflict, every model is
  trained by both groups and the weights do not separate (own-group mass 0.47, 0.43 for
  uniform weights); both reach about the same accuracy.
- One gradient step per round on one mini-batch of ``training.batch_size`` (Alg. 1).
- Compute time: one training step per gradient, and each loss pass over n_i samples counted
  as n_i / 3 training samples (a forward pass is about a third of forward + backward).
- Unanswered requests: a sampler waits ``model_timeout_s`` (default half the round's
  deadline) for its models, then goes on with those it has; a peer that did not answer keeps
  its stale loss and gets no gradient. Gradients that miss the round's end are lost (rounds
  stay synchronous); an owner that received none still applies g_ii.
- Membership is known (who is present), availability is not: offline peers are sampled and
  simply do not answer. A newcomer gets ℓ = L̂ = 0 in every row (optimistic, so it is sampled
  soon) and starts from its own random model, as everyone did (Alg. 1, line 1); a client
  that leaves drops out of every softmax and every cache.
- Peers (``peers``): the paper's topology is fully connected *potential* peers (``all``, the
  default; spec §7.1). ``d2d`` (fedsim's, a deviation) draws B_i ε-greedily among the client's
  present D2D neighbours at the round's start (``World.peers_of``: ``system.d2d``'s graph, or
  the ISLs in sight in a constellation, so the graph changes with time): fewer than M: all
  of them; none: a local round (ℓ_ii, g_ii, no message). A peer answers, and a sampler sends
  a gradient, only over a link in reach as the message starts; one that closed meanwhile
  is treated as an unavailable neighbour (stale loss, no gradient), nothing is relayed. w_i
  spans i and its present graph neighbours, in reach or not (the potential peers: 2 on a
  ring, up to 4 over grid ISLs), 0 on the others: a neighbour not yet in sight keeps the
  optimistic L̂ = 0 and its weight until it is first sampled, as unexplored peers do.
- Cached peer models whose weight falls below ``ensemble_min_weight`` are forgotten, so
  memory stays bounded (the paper: dissimilar clients' weights go to ≈ 0).

With a peer codec (``compression.peer``) an owner sends φ_b as the difference to its public
copy (CHOCO-SGD's rule, ``fedsim.world.compression``; a requester that missed a difference
gets the whole copy) and the requester evaluates and differentiates the copy it holds; the
gradients are compressed as they are. This is fedsim's extension: the paper sends models.

The weights w (K × K, all clients ever) are saved every 10 rounds in ``collaboration.npz``,
with ``reliance``: whose *training* each client relies on (``training_reliance``). w_ij is
on the model φ_j, which its users train, not only its owner j: a group that adopted a model
hosted by another group's client reads as relying on that group by w, though it trains and
uses the model alone; ``reliance`` shows the groups as they are.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Generator
from dataclasses import dataclass, field

import numpy as np
import simpy
import torch

from fedsim.algorithms._decentralized import (
    AllPeers,
    RoundMessages,
    WeightHistory,
    peer_policy,
    run_round,
    wait_for,
)
from fedsim.algorithms._sync import LazyModels
from fedsim.config import FedericoConfig
from fedsim.learn.optimizers import make_optimizer
from fedsim.learn.trainer import Ensemble
from fedsim.world import World

FORWARD_SHARE = 1 / 3  # compute of a forward pass relative to a training step's, per sample


@dataclass
class FedericoState:
    """Every client's state; pass one to ``run`` to read it after the run."""

    models: dict[int, torch.Tensor] = field(default_factory=dict)  # φ_i
    last_loss: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))  # ℓ_ij
    ema_loss: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))  # L̂_ij
    cache: dict[int, dict[int, torch.Tensor]] = field(default_factory=dict)  # i -> {j: φ_j}
    optimizers: dict[int, object] = field(default_factory=dict)  # owner-side, persistent
    sampled: list[dict[int, list[int]]] = field(default_factory=list)  # per round: i -> B_i

    def weights(self, client: int, present: list[int]) -> dict[int, float]:
        """w_i over the present clients: softmax(−L̂_i)."""
        exponent = -self.ema_loss[client, present]
        w = np.exp(exponent - exponent.max())
        return dict(zip(present, (w / w.sum()).tolist(), strict=True))

    def weight_matrix(
        self, present: list[int], support: Callable[[int], list[int]] | None = None
    ) -> np.ndarray:
        """Rows of the present clients: w_i over its ``support`` (default: every present
        client), 0 on the other present clients, NaN on absent ones."""
        matrix = np.full(self.ema_loss.shape, np.nan)
        for i in present:
            spans = present if support is None else support(i)
            matrix[i, present] = 0.0
            matrix[i, spans] = list(self.weights(i, spans).values())
        return matrix


def training_reliance(weights: np.ndarray) -> np.ndarray:
    """R_ik = Σ_j w_ij · w_kj / Σ_l w_lj: client i's weight on each model j, split among the
    clients whose gradients train φ_j in proportion to the weight they send them with (g_jk =
    w_kj ∇, Eq. 8; as if every user sent its gradient every round). Rows sum to 1 as w's do;
    NaN rows and columns (clients not present) stay NaN."""
    known = np.isfinite(weights)
    w = np.where(known, weights, 0.0)
    trainers = w.sum(axis=0)
    shares = np.divide(w, trainers, out=np.zeros_like(w), where=trainers > 0)  # [k, j]
    reliance = w @ shares.T
    present = known.any(axis=1)
    reliance[~present, :] = np.nan
    reliance[:, ~present] = np.nan
    return reliance


def run(
    world: World, config: FedericoConfig, state: FedericoState | None = None
) -> Generator[simpy.Event, object, None]:
    state = FedericoState() if state is None else state
    total = len(world.clients)
    state.last_loss, state.ema_loss = np.zeros((total, total)), np.zeros((total, total))
    history = WeightHistory(world, reliance=training_reliance)
    sampling_rng = world.streams.generator("federico_neighbours")
    reach = peer_policy(world, config.peers)

    def join(client: int) -> None:
        state.models[client] = own_initial_model(world, client)
        state.cache[client] = {}
        state.optimizers[client] = make_optimizer(world.trainer.optimizer, state.models[client])
        state.last_loss[:, client] = state.ema_loss[:, client] = 0.0  # optimistic newcomer
        state.last_loss[client, :] = state.ema_loss[client, :] = 0.0

    def leave(client: int) -> None:
        for store in (state.models, state.cache, state.optimizers):
            store.pop(client, None)
        for cached in state.cache.values():
            cached.pop(client, None)

    def predictor(client: int) -> torch.Tensor | Ensemble:
        own = state.models[client]
        if not config.ensemble:
            return own
        members = {client: own} | state.cache[client]
        # w_ij renormalized over the models i holds, as a softmax over just those: the same
        # numbers, but it cannot underflow to 0/0 when the weight sits on a model i lacks
        # (an unexplored peer's optimistic L̂ = 0 against summed losses of hundreds).
        weights = state.weights(client, list(members))
        return Ensemble(tuple(members.values()), tuple(weights.values()))

    world.on_join, world.on_leave = join, leave
    for client in world.client_ids:
        join(client)
    world.set_models(LazyModels(world, predictor))
    for round_index in world.rounds():
        clients = yield from world.online_clients()
        chosen = {
            i: choose_neighbours(
                sampling_rng,
                state.weights(i, reach.support(i)),
                i,
                config.neighbours,
                config.epsilon,
                reach.candidates(i),
            )
            for i in clients
        }
        state.sampled.append(chosen)
        messages = RoundMessages(world)
        own_gradient: dict[int, torch.Tensor] = {}  # g_ii
        models_now = dict(state.models)  # φ^(t−1): what every owner sends this round
        bodies = {
            i: sampler_round(
                world, config, state, i, chosen[i], models_now, messages, own_gradient, reach
            )
            for i in clients
        }
        finished = yield from run_round(world, config, bodies)
        yield from messages.close()
        for owner in list(state.models):
            gradients = list(messages.delivered("gradient", owner).values())
            gradients += [own_gradient[owner]] if owner in own_gradient else []
            if gradients and not world.timing_only:
                params = state.models[owner].clone()  # φ_i^(t−1) may sit in peers' caches
                state.optimizers[owner].step(params, torch.stack(gradients).sum(dim=0))
                state.models[owner] = params
        present = world.client_ids
        history.record(round_index, state.weight_matrix(present, reach.support))
        world.end_round(round_index, LazyModels(world, predictor), participants=len(finished))


def own_initial_model(world: World, client: int) -> torch.Tensor:
    """Every client initializes its own model at random (Alg. 1, line 1)."""
    if world.timing_only:
        return world.initial_params(client)
    return world.trainer.init_params(world.streams.integer_seed("federico_init", client))


def sampler_round(
    world: World,
    config: FedericoConfig,
    state: FedericoState,
    client: int,
    neighbours: list[int],
    models: dict[int, torch.Tensor],
    messages: RoundMessages,
    own_gradient: dict[int, torch.Tensor],
    reach: AllPeers,
) -> Generator[simpy.Event, object, int]:
    """Client i's part of a round: ask for models, E-step, M-step, send the gradients back
    (to the owners it still reaches)."""
    request = torch.zeros(1)
    replies = {
        b: ask_for_model(world, messages, client, b, models, request, reach) for b in neighbours
    }
    timeout_s = config.model_timeout_s
    if timeout_s is None and config.deadline_s is not None:
        timeout_s = config.deadline_s / 2
    arrived: dict[int, torch.Tensor] = yield from wait_for(world, replies, timeout_s)
    evaluated = ({client: models[client]} if config.include_self else {}) | arrived
    shard = world.clients[client].shard
    batch = world.trainer.batch_size
    loss_samples = shard.num_train if config.loss_on == "train_set" else 0
    passes = len(evaluated)
    yield from world.work(
        client,
        steps=passes + math.ceil(passes * loss_samples * FORWARD_SHARE / batch),
        samples=round(passes * (min(batch, shard.num_train) + loss_samples * FORWARD_SHARE)),
    )
    state.cache[client] |= arrived
    support = reach.support(client)
    gradients = e_and_m_steps(world, config, state, client, evaluated, support)
    sends = [
        messages.send("gradient", client, b, gradient)
        for b, gradient in gradients.items()
        if b != client and reach.reaches(client, b)
    ]
    if client in gradients:
        own_gradient[client] = gradients[client]
    weights = state.weights(client, support)
    for j in [j for j in state.cache[client] if weights.get(j, 0.0) < config.ensemble_min_weight]:
        del state.cache[client][j]
    yield world.env.all_of(sends)
    return len(arrived)


def ask_for_model(
    world: World,
    messages: RoundMessages,
    client: int,
    peer: int,
    models: dict[int, torch.Tensor],
    request: torch.Tensor,
    reach: AllPeers,
) -> simpy.Event:
    """Request φ_peer; the returned event fires with φ_peer when the model is in (the peer
    answers if it still reaches the requester)."""
    reply = world.env.event()

    def answer(_: simpy.Event) -> None:
        if peer in models and reach.reaches(peer, client):
            sent = messages.send("model", peer, client, models[peer], own_model=True)
            sent.callbacks.append(lambda e: reply.succeed(e.value))

    messages.send("request", client, peer, request).callbacks.append(answer)
    return reply


def e_and_m_steps(
    world: World,
    config: FedericoConfig,
    state: FedericoState,
    client: int,
    evaluated: dict[int, torch.Tensor],
    support: list[int],
) -> dict[int, torch.Tensor]:
    """Refresh ℓ_ib for the models evaluated, update L̂_i and w_i (over ``support``); the
    w-scaled gradients."""
    if world.timing_only:  # shape-only models: no losses; the messages keep their true size
        return dict(evaluated)
    shard = world.clients[client].shard
    trainer = world.trainer
    rng = world.streams.generator("federico_batch", client, world.round_index or 0)
    rows = torch.from_numpy(
        rng.choice(shard.num_train, min(trainer.batch_size, shard.num_train), replace=False)
    )
    x_batch, y_batch = shard.x_train[rows], shard.y_train[rows]
    x_loss, y_loss = (
        (shard.x_train, shard.y_train) if config.loss_on == "train_set" else (x_batch, y_batch)
    )
    for b, params in evaluated.items():
        result = trainer.evaluate(params, x_loss, y_loss)
        mean = result.loss_sum / result.total
        state.last_loss[client, b] = mean if config.loss_reduction == "mean" else result.loss_sum
    state.ema_loss[client] = (1 - config.beta) * state.ema_loss[client] + (
        config.beta * state.last_loss[client]
    )
    weights = state.weights(client, support)
    return {
        b: weights[b] * trainer.gradient(params, x_batch, y_batch)
        for b, params in evaluated.items()
        if b in weights
    }


def choose_neighbours(
    rng: np.random.Generator,
    weights: dict[int, float],
    client: int,
    count: int,
    epsilon: float,
    candidates: Collection[int] | None = None,
) -> list[int]:
    """ε-greedy, one coin per slot: a uniform pick among the candidates left with probability
    ε, else the highest-weight one left (ties in random order); without replacement, never
    self; fewer candidates (default: every peer weighed) than ``count``: all of them."""
    order = rng.permutation(sorted(weights)).tolist()  # over all: the same draws for any reach
    peers = [j for j in order if j != client and (candidates is None or j in candidates)]
    ranked = sorted(peers, key=lambda j: -weights[j])  # stable: ties keep the random order
    chosen: list[int] = []
    while ranked and len(chosen) < count:
        chosen.append(ranked.pop(int(rng.integers(len(ranked))) if rng.random() < epsilon else 0))
    return chosen
