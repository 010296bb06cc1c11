"""User-centric FL (Mestoukirdi, Zecchin, Gesbert, Li): personalized aggregation, k streams.

Setup round (Algorithm 1, lines 1-6): the server broadcasts theta0; every client computes
its full gradient g_i at theta0 and a noise estimate sigma_i^2 (eq. 10: mean squared
distance of K mini-batch gradients from g_i) and uploads {g_i, sigma_i^2, n_i}; the server
computes the collaboration weights of eq. (9),
    w_ij ∝ n_j exp(-||g_i - g_j||^2 / (2 sigma_i^2)),   rows summing to 1,
once, in the log domain. The bandwidth grows with K (sigma_i^2 is about K - 1 times the noise
v_i of g_i), and the paper tunes it by hand (Fig. 7). With ``variance_batches: auto`` every
client sends sigma_i^2 for each candidate K (one pass over its data serves them all) and the
server keeps the K of lowest estimated error of the weighted gradient sum_j w_ij g_j as an
estimate of client i's expected gradient (``choose_variance_batches``). Not the silhouette
of W: it is scale-free, and a flat kernel's rows (uniform plus a small tilt shaped like Δ)
separate as well as a sharp kernel's, so it picked the flattest K on MNIST label permutations.

Why W flattens on small data (issue 53; each step checked against eqs. 8-10, and measured on
Fashion-MNIST, 4 label-permutation groups of 5, scenarios/papers/ucfl_data_size.yaml): with
v_i the noise of g_i (its squared error, about 1/n_i), sigma_i^2 = (K - 1) v_i (measured
within 5%), two clients of one group sit Δ ≈ 2v apart and of two groups 2v + D, with D the
squared distance of the groups' expected gradients at theta0. A row then puts exp(-1/(K-1))
of its own weight on each group-mate and exp(-D/(2(K-1)v)) of a mate's on each client of
another group: only D/v decides, and it grows with n_i as v falls: 3.4-7.5 at 400 images per
client (own-group mass 0.40-0.66 at K = 3, 0.61-0.88 at K = 2), about 4 times that at 1,500
(0.83-1.00 and 0.97-1.00).
No K separates more without turning the rows to the client itself (K = 1.5: self weight
0.66-0.77), whose near one-hot rows k-means can no longer group. A stream's model is eq. (8)
with its centroid, the mean of its members' rows: streams that are the true groups still take
half of each model from the other groups when those rows do (k = 4, 66.3 against the Oracle's
76.7 at K = 3 on one seed). The steps follow the paper; the data size is the cause.
Communication-efficient variant (Section IV-C, Algorithm 2):
k-means on the rows of W gives k streams; k is the argmax over K = 2..m-1 of the trade-off
c(K, s_K) of the silhouette s_K (``streams: auto``), or given.
Rounds (lines 7-12): the server multicasts each stream model theta_(n) to its members
(k group-casts; with ``streams: all`` each client is its own stream: m unicasts), every
client trains from its stream model and uploads it, and the server sets
theta_(n) = sum_j c_nj theta_j over the arrived uploads, renormalized (spec §7.4 2a; a
stream none of whose weight arrived keeps its model).

Timing (``timing``): with ``pipelined`` (default) the k multicasts leave the base station one
after another and a stream's members start computing as soon as their own stream arrives,
then upload when done: this is what the World runs for every downlink. ``barrier`` is the
paper's T_round(k) = k T_dl + E[max compute] + T_ul phase (spec §4, readings R1 with a
parallel uplink and R2 with TDMA, as in the authors' plotting code): everyone starts
computing when the last stream has been sent, and uploads once every participant has
computed (a participant that is lost stops holding the others). The trade-off
``per_round_time`` divides by E[round time] of the chosen timing, computed from the World's
links, compute model and stream order (``expected_round_s``); the budget prints it where it
is exact.

Choices where the paper is silent (documented parameters or here): the setup round takes
the time of one local epoch of gradient work plus its transfers and is part of the clock;
a setup in which no statistics arrive (a radio that lets nothing through, a deadline that
nobody meets) gives no W to compute, so it is repeated, each attempt a round of its own
(evaluated on theta0, its participants the statistics that arrived), until some arrive;
the training rounds follow (a run whose rounds end first keeps theta0);
n_i travels with sigma_i^2 (one float per K computed, plus one); clients without a row of W
(they missed the setup or joined later) follow the largest stream and their uploads carry no
weight; with ``bandwidth: symmetric`` the authors' code's 2 sqrt(sigma_i^2 sigma_j^2) replaces
2 sigma_i^2.
Saved in ``collaboration.npz``: the weights, clients, streams, centroids and silhouette curve
(``silhouette_k``, ``silhouette``), the candidate K (``variance_batches``: the one given, or
the candidates), the relative error of each (``variance_risk``, NaN where not every client
could split its data so) and the K used (``variance_batches_chosen``).
A timing-only run (``fedsim budget``) has no gradients, hence no weights: a given k becomes k
streams of consecutive clients of equal size (within one), so the budget sends what k streams
send; ``streams: auto`` cannot be budgeted.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import replace
from itertools import pairwise

import numpy as np
import simpy
import torch

from fedsim.algorithms._sync import Barrier, client_update, gather_updates
from fedsim.config import UcflConfig
from fedsim.learn.aggregate import RunningAverage
from fedsim.learn.clustering import kmeans, silhouette
from fedsim.learn.trainer import TrainResult
from fedsim.results.files import COLLABORATION_FILE
from fedsim.world import World

SIGMA_FLOOR = 1e-12  # sigma_i^2 = 0 (a client whose batches all equal its data) would divide by 0
# A stream whose arrived uploads carry less of its (unit) weight keeps its model: whether an
# exp(-huge) weight is exactly 0 or a denormal depends on the CPU's exp and BLAS rounding.
MIN_STREAM_MASS = 1e-9
TIE_REL_TOL = 1e-9  # trade-off values this close count as equal: the fewest streams win
RISK_TIE_TOL = 1e-9  # relative errors (order 1) this close count as equal: the fewest batches win


def run(world: World, config: UcflConfig) -> Generator[simpy.Event, object, None]:
    if world.timing_only and config.streams == "auto":
        raise ValueError("ucfl: streams 'auto' depends on the data; give a number for a budget")
    theta0 = world.initial_params()

    # --- setup round: statistics at theta0, collaboration weights, streams ---
    reports = yield from gather_statistics(world, theta0, config)
    rounds = world.rounds()
    while not reports:  # nothing arrived: the setup is repeated, as a round of its own
        round_index = next(rounds, None)
        if round_index is None:
            return  # the run's rounds are over before any statistics arrived
        reports = yield from gather_statistics(world, theta0, config)
        world.end_round(round_index, theta0, participants=len(reports))
    reporters = sorted(reports)
    counts = variance_batch_counts(config)
    gradients = torch.stack([reports[c][0] for c in reporters])
    sigma2 = np.array([reports[c][1] for c in reporters])  # (clients, candidate K)
    sizes = np.array([reports[c][2] for c in reporters])
    if world.timing_only:  # no gradients: uniform weights whatever the K (and nothing saved)
        chosen, risks = 0, np.full(len(counts), np.nan)
        weights = collaboration_weights(gradients, sigma2[:, 0], sizes, config.bandwidth)
    else:
        chosen, weights, risks = choose_variance_batches(
            gradient_distances(gradients), sigma2, sizes, counts, config.bandwidth
        )
    model_bytes = world.model_message_bytes("downlink"), world.model_message_bytes("uplink")
    k, labels, centroids, scores = choose_streams(weights, reporters, config, world, model_bytes)
    if round_time_is_exact(world, config):
        world.note_closed_form_round_s(
            expected_round_s(world, reporters, labels, model_bytes, config.timing)
        )
    stream_of = dict(zip(reporters, labels.tolist(), strict=True))
    column = {c: j for j, c in enumerate(reporters)}  # of W and of the centroids
    largest = int(np.bincount(labels).argmax())
    streams = [theta0] * k
    world.save_arrays(
        COLLABORATION_FILE,
        weights=weights,
        clients=np.array(reporters),
        streams=labels,
        centroids=centroids,
        silhouette_k=np.array(list(scores), dtype=int),
        silhouette=np.array(list(scores.values())),
        variance_batches=np.array(counts),
        variance_risk=risks,
        variance_batches_chosen=np.array(counts[chosen]),
    )

    # --- training rounds: k group-casts down, m models up, centroid-weighted aggregation ---
    for round_index in rounds:
        selected = yield from world.select_clients(
            config.client_fraction, config.over_selection, config.selection
        )
        arrivals, start = {}, {}  # start: each member's stream as it decoded it
        for n in range(k):
            members = [c for c in selected if stream_of.get(c, largest) == n]
            if members:
                sent = world.send_down(members, streams[n])
                arrivals |= sent.arrivals
                start |= dict.fromkeys(members, sent.received[0])
        if config.timing == "barrier":
            barriers = (all_sent, all_computed) = (Barrier(world), Barrier(world))
            bodies = {
                c: barrier_update(world, c, start[c], arrivals[c], all_sent, all_computed)
                for c in selected
            }
        else:
            barriers = ()
            bodies = {c: client_update(world, c, start[c], arrivals[c]) for c in selected}
        sums = [RunningAverage() for _ in range(k)]

        def take(client: int, result: TrainResult, sums: list[RunningAverage] = sums) -> None:
            """Fold the upload into every stream's weighted sum as it arrives."""
            if client in column:  # a client without a row of W carries no weight
                for n, total in enumerate(sums):
                    total.add(result.params, float(centroids[n, column[client]]))

        kept = yield from gather_updates(world, config, bodies, barriers, take)
        for n, total in enumerate(sums):
            if total.weight > MIN_STREAM_MASS:  # else none of its weight arrived (underflow)
                streams[n] = total.result()
        models = {c: streams[stream_of.get(c, largest)] for c in world.present}
        world.end_round(round_index, models, participants=len(kept))


def gather_statistics(
    world: World, theta0: torch.Tensor, config: UcflConfig
) -> Generator[simpy.Event, object, dict[int, tuple[torch.Tensor, np.ndarray, int]]]:
    """Process body of the setup: broadcast theta0 to every present client, gather their
    statistics under the round's deadline; client -> (g_i, sigma_i^2 per K, n_i)."""
    everyone = world.client_ids
    arrivals, (theta0_received,) = world.send_down(everyone, theta0)
    tasks = {
        c: world.start_task(c, report_statistics(world, c, theta0_received, arrivals[c], config))
        for c in everyone
    }
    return (yield from world.gather(tasks, deadline_s=config.deadline_s))


def barrier_update(
    world: World,
    client: int,
    params: torch.Tensor,
    model_arrived: simpy.Event,
    all_sent: Barrier,
    all_computed: Barrier,
) -> Generator[simpy.Event, object, TrainResult]:
    """The paper's timing: start computing once every stream is out, upload once every
    participant has computed."""
    yield model_arrived
    yield all_sent.reach(client)
    result = yield from world.train(client, params)
    yield all_computed.reach(client)
    (sent,) = yield from world.upload(client, result.params, reference=params)
    return replace(result, params=sent)


def report_statistics(
    world: World, client: int, theta0: torch.Tensor, arrived: simpy.Event, config: UcflConfig
) -> Generator[simpy.Event, object, tuple[torch.Tensor, np.ndarray, int]]:
    """Client side of the setup: g_i and sigma_i^2 at theta0 (eq. 10), one per candidate K,
    uploaded with n_i."""
    yield arrived
    shard = world.clients[client].shard
    n = shard.num_train
    counts = variance_batch_counts(config)
    yield from world.work(client, steps=world.trainer.num_steps(n, epochs=1), samples=n)
    if world.timing_only:
        gradient, sigma2 = torch.empty_like(theta0), np.ones(len(counts))
    else:
        gradient = world.trainer.gradient(theta0, shard.x_train, shard.y_train)
        order = world.streams.generator("ucfl-batches", client).permutation(n)
        sigma2 = variance_estimates(
            lambda b: world.trainer.gradient(theta0, shard.x_train[b], shard.y_train[b]),
            gradient,
            order,
            counts,
        )
    stats = torch.tensor([*sigma2.tolist(), float(n)])
    received, _ = yield from world.upload(client, gradient, stats)
    return received, sigma2, n


def variance_batch_counts(config: UcflConfig) -> list[float]:
    """The K a client computes sigma_i^2 for: the one given, or the candidates (ascending)."""
    if config.variance_batches == "auto":
        return sorted(config.variance_batch_candidates)
    return [config.variance_batches]


def batch_cuts(n: int, count: float) -> list[int] | None:
    """The bounds of eq. (10)'s batches in a permutation of n samples for K = ``count``, the
    data over the batch size n_k: an integer K splits all n into K batches
    (``np.array_split``); a fractional K > 1 takes floor(K) batches of round(n / K) samples and
    leaves the rest out (the paper's Fig. 7 goes up to n_k = 660 of 1,000, one batch: K about
    1.5). None where a batch would be empty."""
    if count == int(count):
        if count > n:
            return None
        return [0, *np.cumsum([len(b) for b in np.array_split(np.arange(n), int(count))]).tolist()]
    size = round(n / count)
    bounds = [size * k for k in range(int(count) + 1)]
    return bounds if size >= 1 and bounds[-1] <= n else None


def variance_estimates(
    gradient_of: Callable[[np.ndarray], torch.Tensor],
    full: torch.Tensor,
    order: np.ndarray,
    counts: Sequence[float],
) -> np.ndarray:
    """Eq. (10) for each K of ``counts``: the mean squared distance from ``full`` of the
    gradients of the K batches of ``order`` (``batch_cuts``); NaN where a batch would be empty.

    Every K's batches are unions of the pieces between all the K's cut points, and a batch's
    gradient is the size-weighted mean of its pieces' gradients: one pass over the data serves
    every K (a batch of one piece is that piece's gradient, so a single K is eq. 10 as is).
    """
    n = len(order)
    cuts = {count: bounds for count in counts if (bounds := batch_cuts(n, count)) is not None}
    edges = sorted({edge for bounds in cuts.values() for edge in bounds})
    pieces = {start: (end - start, gradient_of(order[start:end])) for start, end in pairwise(edges)}
    sigma2 = np.full(len(counts), np.nan)
    for index, count in enumerate(counts):
        if count not in cuts:
            continue
        batches = []
        for low, high in pairwise(cuts[count]):
            parts = [pieces[start] for start in edges if low <= start < high]
            if len(parts) == 1:
                batches.append(parts[0][1])
            else:
                batches.append(sum(size * g for size, g in parts) / sum(s for s, _ in parts))
        sigma2[index] = np.mean([float((g - full).square().sum()) for g in batches])
    return sigma2


def choose_variance_batches(
    delta: np.ndarray, sigma2: np.ndarray, sizes: np.ndarray, counts: Sequence[int], bandwidth: str
) -> tuple[int, np.ndarray, np.ndarray]:
    """The index in ``counts`` of the K to use, its weights, and each K's relative error.

    ``sigma2[i, c]``: client i's eq. (10) with ``counts[c]`` batches. Each K every client could
    compute gives weights (eq. 9); the one of least ``relative_risk`` wins, (near-)ties going
    to the fewest batches. The noise v_i of g_i is pooled over those K: E[sigma_i^2] =
    (K - 1) v_i for K equal batches.
    """
    usable = np.flatnonzero(np.isfinite(sigma2).all(axis=0))
    if not len(usable):
        raise ValueError(
            f"ucfl: a client has fewer training samples than the fewest variance batches "
            f"({min(counts)}): no sigma_i^2 to compute"
        )
    noise = sigma2[:, usable].sum(axis=1) / sum(counts[c] - 1 for c in usable)
    noise = np.maximum(noise, SIGMA_FLOOR)
    weights = {c: kernel_weights(delta, sigma2[:, c], sizes, bandwidth) for c in usable}
    risks = np.full(len(counts), np.nan)
    for c, w in weights.items():
        risks[c] = relative_risk(w, delta, noise)
    low = np.nanmin(risks)
    best = min((c for c in usable if risks[c] <= low + RISK_TIE_TOL), key=lambda c: counts[c])
    return int(best), weights[best], risks


def relative_risk(weights: np.ndarray, delta: np.ndarray, noise: np.ndarray) -> float:
    """Mean over clients of R_i / v_i: the estimated E||sum_j w_ij g_j - E[g_i]||^2 relative to
    v_i = E||g_i - E[g_i]||^2, the error of learning alone (1), as in Theorem 1's bias and
    variance. R_i = ||sum_j w_ij (g_j - g_i)||^2 + (2 w_ii - 1) v_i is unbiased for fixed
    weights and independent clients (the first term compares with the noisy g_i: it gains v_i,
    and loses 2 w_ii v_i through g_i's share of the sum); its squared norm is
    sum_j w_ij Δ_ij - 1/2 sum_jk w_ij w_ik Δ_jk, from the distances alone.
    """
    bias = (weights * delta).sum(axis=1) - 0.5 * ((weights @ delta) * weights).sum(axis=1)
    risk = np.maximum(bias, 0.0) + (2 * np.diag(weights) - 1) * noise
    return float(np.mean(risk / noise))


def gradient_distances(gradients: torch.Tensor) -> np.ndarray:
    """Δ_ij = ||g_i - g_j||^2 in float64 (Δ_ii = 0 exactly)."""
    g = gradients.double()
    squared = g.square().sum(dim=1)
    delta = (squared[:, None] + squared[None, :] - 2 * g @ g.T).clamp_min(0).numpy()
    np.fill_diagonal(delta, 0.0)
    return delta


def collaboration_weights(
    gradients: torch.Tensor, sigma2: np.ndarray, sizes: np.ndarray, bandwidth: str = "row"
) -> np.ndarray:
    """Eq. (9) from the clients' gradients (uniform in a timing-only run: no gradients)."""
    if gradients.is_meta:  # timing-only: the size of the problem is all there is
        return np.full((len(sizes), len(sizes)), 1.0 / len(sizes))
    return kernel_weights(gradient_distances(gradients), sigma2, sizes, bandwidth)


def kernel_weights(
    delta: np.ndarray, sigma2: np.ndarray, sizes: np.ndarray, bandwidth: str = "row"
) -> np.ndarray:
    """Eq. (9): w_ij ∝ n_j exp(-Δ_ij / (2 σ_i²)), each row a softmax in the log domain."""
    sigma2 = np.maximum(sigma2, SIGMA_FLOOR)
    scale = 2 * sigma2[:, None] if bandwidth == "row" else 2 * np.sqrt(np.outer(sigma2, sigma2))
    logits = np.log(sizes)[None, :] - delta / scale
    logits -= logits.max(axis=1, keepdims=True)
    weights = np.exp(logits)
    return weights / weights.sum(axis=1, keepdims=True)


def choose_streams(
    weights: np.ndarray,
    clients: Sequence[int],
    config: UcflConfig,
    world: World,
    model_bytes: tuple[int, int],
) -> tuple[int, np.ndarray, np.ndarray, dict[int, float]]:
    """k, each client's stream, the k centroid weight vectors, and the silhouette per K tried
    (``clients``: the clients of the rows of ``weights``)."""
    m = len(weights)
    rng = world.streams.generator("ucfl-kmeans")
    if config.streams == "all" or m == 1:
        return m, np.arange(m), weights.copy(), {}
    if config.streams != "auto":
        k = min(config.streams, m)
        if world.timing_only:  # no weights to cluster: k equal streams of consecutive clients
            return k, np.arange(m) * k // m, weights[:k].copy(), {}
        result = kmeans(weights, k, rng)
        return k, result.labels, result.centroids, {}
    largest_k = min(m - 1, config.max_streams or m - 1)
    fits = {K: kmeans(weights, K, rng) for K in range(2, largest_k + 1)}
    scores = {K: silhouette(weights, fit.labels) for K, fit in fits.items()}
    if not scores:  # m = 2: one shared stream or none to compare; keep both clients apart
        return m, np.arange(m), weights.copy(), {}

    def tradeoff(K: int) -> float:
        """c(K, s_K): the authors' code takes s; alternatives penalize K or divide by
        E[T_round(K)] of the streams K-means found."""
        if config.tradeoff == "silhouette":
            return scores[K]
        if config.tradeoff == "penalized":
            return scores[K] - config.tradeoff_lambda * K
        round_s = expected_round_s(world, clients, fits[K].labels, model_bytes, config.timing)
        return max(scores[K], 0.0) / round_s

    values = {K: tradeoff(K) for K in scores}
    top = max(values.values())
    # Among (near-)equal values the smallest K, whatever the last bits of a CPU's rounding.
    best = min(K for K, value in values.items() if value >= top - TIE_REL_TOL * abs(top))
    return best, fits[best].labels, fits[best].centroids, scores


def expected_round_s(
    world: World,
    clients: Sequence[int],
    labels: np.ndarray,
    model_bytes: tuple[int, int],
    timing: str,
) -> float:
    """E[round time] when every client of W takes part, from the World's time model.

    The base station's transmitter sends stream after stream in stream order (unicast: one
    copy per member, the streams taking turns as the World's transmitter queues them).
    ``pipelined``: client i is done at a_i + C_i + U_i (its stream's arrival, its compute
    scale_i (T_min + Exp(mean)), its upload alone on the air); ``barrier``: the last stream's
    end + E[max_i C_i] + the upload phase (max_i U_i, or Σ_i U_i under TDMA). Exact with a
    parallel uplink (pipelined) or a parallel or TDMA uplink (barrier), no heavy tail, and
    everyone selected (``round_time_is_exact``); otherwise a model of it. ``model_bytes``:
    a model message's bytes down and up.
    """
    down_bytes, up_bytes = model_bytes
    network = world.network
    streams = range(int(labels.max()) + 1)
    members = [[c for c, n in zip(clients, labels, strict=True) if n == s] for s in streams]
    broadcast = network.downlink_mode == "broadcast"
    turns = deque([group] if broadcast else [[c] for c in group] for group in members if group)
    arrival_s: dict[int, float] = {}
    sent_s = 0.0
    while turns:
        copies = turns.popleft()
        receivers = copies.pop(0)
        sent_s += network.group_downlink_time_s(receivers, down_bytes)
        arrival_s |= dict.fromkeys(receivers, sent_s)
        if copies:
            turns.append(copies)
    uplink_s = np.array([network.uplink_time_s(c, up_bytes) for c in clients])
    scales = [world.compute_scale(c) for c in clients]
    if timing == "barrier":
        compute_s = world.devices.expected_max_completion_s(np.zeros(len(clients)), scales)
        tdma = world.scenario.system.network.uplink_medium == "tdma"
        return sent_s + compute_s + float(uplink_s.sum() if tdma else uplink_s.max())
    offsets_s = [arrival_s[c] + u for c, u in zip(clients, uplink_s, strict=True)]
    return world.devices.expected_max_completion_s(offsets_s, scales)


def round_time_is_exact(world: World, config: UcflConfig) -> bool:
    """Whether ``expected_round_s`` is the exact E[round time] of this run."""
    scenario = world.scenario
    medium = scenario.system.network.uplink_medium
    return (
        scenario.system.radio is None
        and (medium == "parallel" or (medium == "tdma" and config.timing == "barrier"))
        and scenario.system.compute.heavy_tail is None
        and not scenario.clients.can_drop_out
        and scenario.clients.arrivals.reserve == 0
        and config.client_fraction == 1
        and config.over_selection == 0
        and config.deadline_s is None
        and world.compression.config is None  # a codec's bytes may vary with the update
    )
