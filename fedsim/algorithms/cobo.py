"""CoBo (Collaborative learning via Bilevel Optimization, Algorithm 1): pairwise weights.

Every client i has a model x_i (all start from the common x⁰) and its view of a row of
collaboration weights w_ij ∈ [0, 1] (all 1 at first: everyone collaborates). Each round, in
lock-step:

1. W-step (client selection). Each unordered pair {i, j} of online clients is sampled with
   probability p_t. For a sampled pair (i < j): i sends x_i to j (PROBE); j forms the midpoint
   z = (x_i + x_j)/2, takes ∇f_j(z) on a mini-batch of its data and sends x_j and ∇f_j(z) to
   i (REPLY); i takes ∇f_i(z) on its own mini-batch, sets
   w_ij ← clip(w_ij + γ ⟨∇f_i(z), ∇f_j(z)⟩, 0, 1) and sends the new w_ij to j (WEIGHT).
   Unsampled pairs keep their weight.
2. X-step. Client i needs x_k for every k with w_ik > 0; a pair that just met already holds
   both models, every other such pair exchanges them (MODEL). Then
   x_i ← x_i − η (∇f_i(x_i) + ρ Σ_k w_ik (x_i − x_k)) on a mini-batch of its data.

The penalty Σ_k w_ik (x_i − x_k) = (Σ_k w_ik)(x_i − x̄_i) with x̄_i the w-weighted mean of
the collaborators' models, so the X-step is a proximal step towards x̄_i with strength
ρ Σ_k w_ik (the trainer's proximal term), with the scenario's optimizer (the paper: SGD).
Per round: 3 model-sized tensors and one number per sampled pair, plus one model per
direction for every other pair with w > 0 (spec §3).

Pair sampling, p = ``pair_probability`` (default 1/n, n the present clients):
``constant`` p; ``decaying`` p/t (or p/√t); ``mixed`` (the paper's best, Table 1) p for the
first T0 = ⌈``switch_fraction`` · rounds⌉ rounds, then p·T0/t (or p·√(T0/t)), continuous at
the switch; ``all`` every pair every round (Table 1's "no sampling"). ``auto`` (the default,
fedsim's) is ``mixed`` raised where it is too sparse for the run: over the first
T1 = max(⌈``meeting_fraction`` · rounds⌉, ⌈m⌉) rounds p = m/T1, so that each pair of present
clients meets m = ``expected_meetings`` times in expectation, whatever n, then m/T1 · T1/t
(the same law: ≈ m ln(T/T1) more meetings, so the tail needs no constant floor, which would
keep O(n) pairs a round to the end). It never goes below ``mixed``: in the paper's runs
(40,000 rounds) ``mixed`` is the larger throughout and ``auto`` equals it, while in 300
rounds with 40 clients ``mixed`` gives a pair about 0.16 meetings and W never moves.

The X-step is the paper's explicit step, taken by every client at once from the same models:
at W⁰ = 1 (the worst case) one round multiplies the models' differences by
``fedsim.config.algorithms.cobo.cobo_round_factor`` (derived there), and the scenario check refuses
a penalty that makes it 1 or more in size (the models would blow up before the W-step cuts
any link): lr · ρ · n < 2 for the paper's one step per round, whatever the momentum (the
optimizer is fresh each round, so its first step is plain SGD; none persists across rounds);
lr · ρ · (n − 1) < 2 for two plain steps; momentum lowers the bound of more steps. A larger n
needs a smaller ρ. The bound is the penalty's alone: the loss's curvature L takes its share of
the step (lr (ρ n + L) < 2 on a quadratic), so a ρ close to it can still diverge (8 clients of
Fashion-MNIST with an MLP, lr 0.05, one step: lr ρ n = 1.9 diverged after a dozen rounds,
1.7 stayed bounded, 1.5 trained).

Choices where the paper is silent (spec §7–8), all parameters (γ, ρ and the step's decay:
``fedsim.config.algorithms.cobo.CoboConfig``, set for runs of 10² rounds):
- ``weight_batch_size`` (default ``full``, a deviation: the paper's pseudocode takes
  "stochastic gradients", ``null`` here, the training batch size): the samples of each
  midpoint gradient; Theorem 1 (B) asks for a large enough batch. On full local gradients
  the inner products stop reopening links the first meetings closed; measured on both paper
  files, three seeds (scenarios/papers/README.md): CoBo − Local +2.5 against +1.8 on
  cross-silo, +1.1 against −0.1 on cross-device at γ = 0.5 (−6.3 against −5.9 at γ = 0.1).
- Weights are symmetric: the lower id of a pair computes the update and tells the other.
  If that WEIGHT message is lost, the two views differ until the pair meets again.
- ``local_steps`` > 1 (a deviation; the paper takes one step per round) repeats the X-step's
  gradient step with the collaborators' models held fixed. The optimizer is fresh each round.
- Timeouts: a pair whose REPLY has not come within ``phase_timeout_s`` (default a third of
  the round's deadline) is skipped (its weight unchanged, as if not sampled); a collaborator
  whose model has not come within ``phase_timeout_s`` after the W-step is left out of this
  round's penalty.
- Peers (``peers``): the paper samples pairs among all clients and pulls towards every
  client with w_ik > 0 (``all``, the default; where no D2D link joins two clients their
  messages are relayed, in a constellation through the ground). ``d2d`` (fedsim's, a
  deviation: the graph at a time is who sees whom) keeps everything on the D2D links of the
  moment (``World.peers_of``: ``system.d2d``'s graph, or the ISLs in sight): W⁰ = 1 only
  between graph neighbours (0 elsewhere, for good: they never meet), each pair of
  neighbours in reach at the round's start is sampled with p_t (so a client meets about
  p_t·degree partners a round, not p_t·n), and the X-step pulls towards the collaborators
  with w_ik > 0 it reaches as it takes the step; a message whose link closed since (a
  reply, a weight) is not sent and counts as lost. The stability bound at W⁰ holds (a
  subgraph's Laplacian is below the complete graph's).
- Elasticity: a newcomer starts from x⁰ with w = ``join_weight`` to and from everyone. The
  default 0 keeps it from pulling every client towards its untrained model (with 1, as W⁰,
  each of the n others is dragged by ηρ(x_new − x_k) at once); pair sampling raises its
  weights where the gradients agree, by the round's γ_t (after the meeting window a late
  newcomer's links move more slowly: ``weight_lr_decay: none`` keeps γ for runs where
  clients arrive late). A client that leaves drops out of every sum; the others'
  weights are not renormalized (box domain).

Late erosion of W (issue 53, measured with full midpoint gradients): once the groups are found,
late meetings undo some of it in two ways. (1) Cross-group links reopen: at the midpoint of
two models trained apart on conflicting labels the averaged network is confidently wrong
for both clients, and both gradients push the same wrong logits down; the output layer's
share of <∇f_i(z), ∇f_j(z)> turns positive (median +2.8 on the reopening meetings of 40
clients of Fashion-MNIST after round 40, against −0.06 in the first 10 rounds) and outweighs
the hidden layer's conflict in 1.5% of late cross-group meetings. (2) With little data
(``cobo_cross_silo``, 100 images) two mates' empirical losses have no common minimum, so at
the midpoint of two models near them their gradients conflict (the paper's Fig. 1, case B)
and the mates disconnect. Both follow the paper's rule; its theory assumes neither (mates
share stationary points, separated clients stay separated), and at the code's γ = 0.01 one
meeting moves a weight by about 0.01-0.05, so W integrates many meetings and a stray sign
barely shows. At a γ that decides a pair in one or two meetings one late meeting would undo
the decision: ``weight_lr_decay: after_meetings`` (the default) shrinks γ as T1/t after the
meeting window (40 clients, γ = 0.5: 16 of 40 clients below 0.95 own-group mass at the end
without it, 2 with it; the mixed schedule's fewer late meetings serve the same end).

With a peer codec (``compression.peer``) each x_i goes out once per round as the difference
to its public copy (CHOCO-SGD's rule, ``fedsim.world.compression``), and the partner's
midpoint and penalty use the copy it holds; the midpoint gradients are compressed as they
are. This is fedsim's extension: the paper sends models.

The simplex-domain variant (the paper's LLM experiment) is not implemented. The weights are
saved every 10 rounds in ``collaboration.npz``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
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
from fedsim.config import CoboConfig
from fedsim.learn.aggregate import weighted_average
from fedsim.world import World


@dataclass
class CoboState:
    """Models and each client's view of its weights; pass one to ``run`` to read it after."""

    models: dict[int, torch.Tensor] = field(default_factory=dict)  # x_i
    weights: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))  # row i: i's view
    pairs: list[list[tuple[int, int]]] = field(default_factory=list)  # sampled, per round

    def weight_matrix(self, present: list[int]) -> np.ndarray:
        matrix = np.full(self.weights.shape, np.nan)
        matrix[np.ix_(present, present)] = self.weights[np.ix_(present, present)]
        return matrix


def pair_probability(config: CoboConfig, round_index: int, clients: int, rounds: int) -> float:
    """p_t of the configured schedule for round t = round_index (1-based).

    ``auto`` is ``mixed`` lifted to m / T1 for t ≤ T1 (m = ``expected_meetings``), then
    m/T1 · decay(T1/t): a pair present through the first T1 rounds meets m times in
    expectation, whatever n. T1 ≥ ⌈m⌉ keeps m / T1 ≤ 1, so the promise holds in any run.
    """
    p = config.pair_probability if config.pair_probability is not None else 1 / max(clients, 1)
    decay = decay_law(config)
    if config.pair_sampling == "all":
        return 1.0
    if config.pair_sampling == "constant":
        return min(1.0, p)
    if config.pair_sampling == "decaying":
        return min(1.0, p * decay(1 / round_index))
    switch = max(1, math.ceil(config.switch_fraction * rounds))
    mixed = min(1.0, p if round_index <= switch else p * decay(switch / round_index))
    if config.pair_sampling == "mixed":
        return mixed
    window = meeting_window(config, rounds)
    guaranteed = (
        config.expected_meetings
        / window
        * (1 if round_index <= window else decay(window / round_index))
    )
    return max(mixed, guaranteed)


def decay_law(config: CoboConfig) -> Callable[[float], float]:
    """The configured ``decay`` of a ratio T/t: T/t itself, or its square root."""
    return (lambda ratio: ratio) if config.decay == "inverse" else math.sqrt


def meeting_window(config: CoboConfig, rounds: int) -> int:
    """T1 = max(⌈meeting_fraction · rounds⌉, ⌈expected_meetings⌉): the rounds in which
    ``auto`` has each pair meet ``expected_meetings`` times."""
    return max(math.ceil(config.meeting_fraction * rounds), math.ceil(config.expected_meetings))


def weight_step(config: CoboConfig, round_index: int, rounds: int) -> float:
    """γ_t: ``weight_lr`` throughout, or with ``weight_lr_decay: after_meetings`` γ up to the
    meeting window T1 and γ · decay(T1 / t) after it, so that a late meeting nudges a weight
    the early ones decided instead of deciding it again."""
    window = meeting_window(config, rounds)
    if config.weight_lr_decay == "none" or round_index <= window:
        return config.weight_lr
    return config.weight_lr * decay_law(config)(window / round_index)


def run(
    world: World, config: CoboConfig, state: CoboState | None = None
) -> Generator[simpy.Event, object, None]:
    state = CoboState() if state is None else state
    reach = peer_policy(world, config.peers)
    links = reach.link_mask()  # 1 where two clients may ever collaborate
    state.weights = links.copy()  # W⁰ = 1 between potential peers
    initial = world.initial_params()
    history = WeightHistory(world)
    pair_rng = world.streams.generator("cobo_pairs")
    rounds = world.scenario.run.rounds or 1

    def join(client: int) -> None:
        state.models[client] = initial
        state.weights[client, :] = config.join_weight * links[client]
        state.weights[:, client] = config.join_weight * links[:, client]

    def leave(client: int) -> None:
        state.models.pop(client, None)

    world.on_join, world.on_leave = join, leave
    state.models |= {c: initial for c in world.client_ids}
    world.set_models(state.models)
    for round_index in world.rounds():
        clients = yield from world.online_clients()
        p = pair_probability(config, round_index, len(world.present), rounds)
        near = {i: reach.candidates(i) for i in clients}
        pairs = [
            (i, j)
            for a, i in enumerate(clients)
            for j in clients[a + 1 :]
            if pair_rng.random() < p and j in near[i]
        ]
        state.pairs.append(pairs)
        messages = RoundMessages(world)
        models_now = dict(state.models)  # x^t: the W-step and the penalty use these
        step = weight_step(config, round_index, rounds)
        bodies = {
            i: client_round(world, config, state, i, pairs, models_now, messages, reach, step)
            for i in clients
        }
        finished = yield from run_round(world, config, bodies)
        yield from messages.close()
        history.record(round_index, state.weight_matrix(world.client_ids))
        world.end_round(round_index, dict(state.models), participants=len(finished))


def client_round(
    world: World,
    config: CoboConfig,
    state: CoboState,
    client: int,
    pairs: list[tuple[int, int]],
    models: dict[int, torch.Tensor],
    messages: RoundMessages,
    reach: AllPeers,
    step: float,
) -> Generator[simpy.Event, object, int]:
    """Client i's round: its pairs' weight updates by the round's γ_t (``step``), then the
    penalized model step (every message to a peer it reaches as the message starts)."""
    timeout_s = config.phase_timeout_s
    if timeout_s is None and config.deadline_s is not None:
        timeout_s = config.deadline_s / 3
    x_i = models[client]
    leads = [j for i, j in pairs if i == client]  # pairs where i computes the weight
    follows = [i for i, j in pairs if j == client]
    for j in leads:
        messages.send("probe", client, j, x_i, own_model=True)
    held = {}  # models of this round's partners, received in the W-step
    # As the follower: answer each probe with x_i and ∇f_i(midpoint), then await the weight.
    answers = {
        i: world.start_task(
            client,
            answer_probe(world, config, state, client, i, x_i, messages, reach),
            timed=False,
        ).delivered
        for i in follows
    }
    replies = {j: messages.expect("reply", j, client) for j in leads}
    got = yield from wait_for(world, replies, timeout_s)
    if got:
        batch = weight_batch_size(world, config, client)
        yield from world.work(client, steps=len(got), samples=len(got) * batch)
    for j, (x_j, g_j) in got.items():
        held[j] = x_j
        midpoint = (x_i + x_j) / 2
        if not world.timing_only:
            g_i = midpoint_gradient(world, config, client, midpoint, j)
            state.weights[client, j] = float(
                np.clip(state.weights[client, j] + step * float(g_i @ g_j), 0, 1)
            )
        weight = torch.tensor([state.weights[client, j]], dtype=torch.float32)
        if reach.reaches(client, j):
            messages.send("weight", client, j, weight)
    held |= yield from wait_for(world, answers, timeout_s)
    # X-step: exchange models with every other collaborator, then the penalized step.
    present = world.client_ids
    collaborators = [
        k
        for k in present
        if k != client and state.weights[client, k] > 0 and reach.reaches(client, k)
    ]
    for k in collaborators:
        if k not in held and k in models:
            messages.send("model", client, k, x_i, own_model=True)
    wanted = {k: messages.expect("model", k, client) for k in collaborators if k not in held}
    held |= yield from wait_for(world, wanted, timeout_s)
    pulled_by = [k for k in collaborators if k in held]
    pull = sum(float(state.weights[client, k]) for k in pulled_by)
    center = None
    if pulled_by and pull > 0 and not world.timing_only:
        center = weighted_average(
            [held[k] for k in pulled_by], [float(state.weights[client, k]) for k in pulled_by]
        )
    result = yield from world.train(
        client,
        x_i,
        steps=config.local_steps,
        prox_center=center,
        prox_mu=config.penalty * pull,
    )
    if client in state.models:
        state.models[client] = result.params
    return len(pulled_by)


def answer_probe(
    world: World,
    config: CoboConfig,
    state: CoboState,
    client: int,
    leader: int,
    x_i: torch.Tensor,
    messages: RoundMessages,
    reach: AllPeers,
) -> Generator[simpy.Event, object, torch.Tensor]:
    """The follower's part of a pair: x_i and ∇f_i(midpoint) to the leader, then adopt the
    weight the leader computed (so both views agree); returns the leader's model. A leader
    out of reach by then gets no reply (its pair is skipped, as on a timeout)."""
    x_leader = yield messages.expect("probe", leader, client)
    yield from world.work(client, steps=1, samples=weight_batch_size(world, config, client))
    midpoint = (x_leader + x_i) / 2
    gradient = (
        midpoint
        if world.timing_only
        else midpoint_gradient(world, config, client, midpoint, leader)
    )
    if not reach.reaches(client, leader):
        return x_leader
    messages.send("reply", client, leader, x_i, gradient, own_model=True)
    state.weights[client, leader] = float((yield messages.expect("weight", leader, client)))
    return x_leader


def weight_batch_size(world: World, config: CoboConfig, client: int) -> int:
    """Samples behind one midpoint gradient (at most the client's whole training set)."""
    num_train = world.clients[client].shard.num_train
    if config.weight_batch_size == "full":
        return num_train
    return min(config.weight_batch_size or world.trainer.batch_size, num_train)


def midpoint_gradient(
    world: World, config: CoboConfig, client: int, midpoint: torch.Tensor, partner: int
) -> torch.Tensor:
    """∇f_client at the pair's midpoint, on a mini-batch of the client's training data or
    on all of it."""
    shard = world.clients[client].shard
    if config.weight_batch_size == "full":
        return world.trainer.gradient(midpoint, shard.x_train, shard.y_train)
    rng = world.streams.generator("cobo_batch", client, partner, world.round_index or 0)
    size = weight_batch_size(world, config, client)
    rows = torch.from_numpy(rng.choice(shard.num_train, size, replace=False))
    return world.trainer.gradient(midpoint, shard.x_train[rows], shard.y_train[rows])
