"""CoBo's settings (``fedsim.algorithms.cobo``), and the stability of its X-step that the scenario
checks its penalty against."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Literal

from pydantic import Field

from fedsim.config.algorithms._decentralized import DecentralizedConfig, Peers
from fedsim.config.base import (
    MAX_ROUNDS,
    MAX_WEIGHT,
    NO_BOOL,
    Fraction,
    PositiveInt,
    Seconds,
    UnitInterval,
    Weight,
)


def cobo_round_factor(step: float, clients: int, local_steps: int, momentum: float) -> float:
    """What one round of CoBo's X-step multiplies the clients' differences by, at W = 1 (the
    worst case), with ``step`` = lr x ρ, SGD of ``momentum`` restarted every round (fedsim's
    clients keep no optimizer state across rounds) and the collaborators' models held fixed
    during the round's ``local_steps``. Stable while |factor| < 1.

    Derivation (the penalty alone; the loss's own curvature is the learning rate's usual
    limit). Client i pulls towards the mean m_i of the n − 1 others with strength ρ (n − 1):
    with a = lr ρ (n − 1) and y = x_i − m_i, each step is y ← y − lr·buf with buf = g on the
    first step and β buf + g after, g = ρ (n − 1) y; after K steps y = r y₀ (r = 1 − a for
    one step, (1 − a)^K for plain SGD). All clients step at once from the same models, so with
    e_i = x_i − x̄ and m_i − x̄ = −e_i / (n − 1): e_i ← r e_i − (1 − r) e_i / (n − 1), i.e.
    factor = (r n − 1) / (n − 1). One step: factor = 1 − lr ρ n, stable while lr ρ n < 2 (the
    largest eigenvalue of the complete graph's Laplacian is n), whatever the momentum (a
    fresh buffer's first step is plain SGD). Two or more plain steps: (1 − a)^K n − 1 > −(n − 1)
    always for even K, so the bound is a < 2, lr ρ (n − 1) < 2. Any W ≤ 1 has a Laplacian below
    the complete graph's (each edge's Laplacian is positive semi-definite), so W = 1 bounds
    it; a newcomer joins with ``join_weight`` ≤ 1, within the same bound."""
    pull = step * (clients - 1)  # lr x ρ x the weights' sum at W = 1
    y, moved = 1.0, 0.0  # moved: lr x buf
    for t in range(local_steps):
        moved = pull * y if t == 0 else momentum * moved + pull * y
        y -= moved
    return (y * clients - 1) / (clients - 1)


def cobo_largest_penalty(lr: float, clients: int, local_steps: int, momentum: float) -> float:
    """The ρ up to which (to 0.1% of 4 / (lr (n − 1))) ``cobo_round_factor`` stays under 1 in
    size: 2 / (lr n) for one local step. With momentum and a few steps the pull overshoots
    (0.77 for 5 steps with momentum 0.9, lr 0.05, 8 clients, against 5.0 for one step)."""
    if local_steps == 1:
        return 2.0 / (lr * clients)
    top = 4.0 / (lr * (clients - 1))
    for k in range(1, 1001):
        if abs(cobo_round_factor(lr * top * k / 1000, clients, local_steps, momentum)) >= 1:
            return top * (k - 1) / 1000
    return top


# ``penalty: auto``: this share of the largest ρ whose X-step is stable at W⁰ = 1. Measured
# (issue 53): lr ρ n = 0.8 for one step, the ρ that the shipped cross-silo (2.0 with 8
# clients at lr 0.05) and a 40-client world (0.4) were tuned to.
COBO_PENALTY_SHARE = 0.4
COBO_CODE_PENALTY = 0.05  # the authors' code's ρ (vision README), for optimizers other than SGD


def cobo_auto_penalty(
    lr: float, clients: int, step_counts: Iterable[int], momentum: float, sgd: bool
) -> float:
    """ρ for ``penalty: auto``: ``COBO_PENALTY_SHARE`` of the largest stable ρ
    (``cobo_largest_penalty``, the smallest over the round's possible local step counts),
    rounded to 4 significant digits (at most ``MAX_WEIGHT``), with SGD; else the authors'
    code's 0.05 (the bound is SGD's). The paper's code runs 40,000 steps at lr 0.1 with
    ρ = 0.05 (lr ρ n = 0.04 for 8 clients): a weak pull that so many steps integrate; in
    10²-round runs a pull that weak leaves every client alone (CoBo = Local), so the pull is
    set against the stability bound, which scales it with 1 / (lr n)."""
    if not sgd:
        return COBO_CODE_PENALTY
    largest = min(cobo_largest_penalty(lr, clients, k, momentum) for k in step_counts)
    return min(float(f"{COBO_PENALTY_SHARE * largest:.4g}"), MAX_WEIGHT)


class CoboConfig(DecentralizedConfig):
    """CoBo (Alg. 1): pairwise weights from midpoint gradients; penalty pulls collaborators.

    Pair sampling defaults to ``auto``, which scales with the run: every pair of present
    clients meets ``expected_meetings`` times in expectation within the first
    T1 = max(⌈meeting_fraction · run.rounds⌉, ⌈expected_meetings⌉) rounds, whatever n, then
    p decays by ``decay``; it never samples less than the paper's ``mixed``. ``mixed`` alone
    (p = 1/n for 0.2 % of the run, then 1/t) gives a pair about ln(T)/n meetings in a short
    run (0.16 for 40 clients over 300 rounds), so W never moves.

    γ and ρ (the paper reports neither) are set for runs of 10² rounds, where a pair meets a
    few times (``auto``: 4 in T1), not the hundreds of the authors' 40,000 iterations at
    γ = 0.01, ρ = 0.05 (their code): γ = 0.5, so that one or two meetings decide a pair
    (midpoint inner products early are of order 1: −0.6 to −1.5 across groups, +2 to +4 within,
    for an MLP on Fashion-MNIST), decaying as γ T1/t after the meeting window, so that a late
    meeting nudges what the early ones decided (``weight_lr_decay``); ρ = 0.4 of the largest
    stable ρ (``penalty: auto``, ``cobo_auto_penalty``). Measured (issue 53,
    scenarios/papers/cobo_defaults.yaml, 3 seeds): on 40 clients in 4 groups the code's
    values leave W near uniform (own-group mass 0.33-0.35) and CoBo 3.5 points below Local;
    these find the groups (0.96-0.99) and end 1.5 above; on the cross-silo world (8 clients)
    0.2 and 1.6 above (own-group mass 0.21-0.25 against 0.83-0.93); with 80 clients
    (cobo_cross_device, one seed) γ = 0.5 decaying ends 3.4 above Local, γ = 0.2 decaying 1.1.
    """

    name: Literal["cobo"]
    penalty: Annotated[Weight | Literal["auto"], NO_BOOL] = Field(
        default="auto",
        description="ρ of the paper (not reported; code: 0.05); auto: 0.4 of the largest ρ "
        "whose X-step is stable at W0 = 1 (lr ρ n = 0.8 for one SGD step), resolved at "
        "validation",
    )
    weight_lr: Annotated[float, Field(gt=0, le=MAX_WEIGHT), NO_BOOL] = Field(
        default=0.5,
        description="γ, step of the weight ascent (not reported; code: 0.01 for 40,000 "
        "iterations); 0.5: one or two meetings decide a pair",
    )
    weight_lr_decay: Literal["after_meetings", "none"] = Field(
        default="after_meetings",
        description="after_meetings: γ until the meeting window T1 (as pair_sampling auto's), "
        "then γ decay(T1/t) by `decay`; none: γ throughout (the paper's constant step)",
    )
    pair_sampling: Literal["auto", "constant", "decaying", "mixed", "all"] = Field(
        default="auto",
        description="p_t: auto (mixed, raised so that each pair meets expected_meetings times "
        "early); constant p; decaying p/t; mixed p then p T0/t after T0 rounds (the paper's); "
        "all: every pair",
    )
    peers: Peers = Field(
        default="all",
        description="pairs among all present clients (the paper's) or d2d: only between D2D "
        "neighbours at the round's start (system.d2d's graph, or the ISLs in sight), and the "
        "X-step pulls only towards the collaborators in reach then",
    )
    pair_probability: Fraction | None = Field(
        default=None, description="p per unordered pair and round (default 1/n, n clients online)"
    )
    switch_fraction: Fraction = Field(
        default=0.002, description="mixed: T0 = ceil(switch_fraction * run.rounds) (paper: 0.2%)"
    )
    expected_meetings: Annotated[float, Field(gt=0, le=MAX_ROUNDS), NO_BOOL] = Field(
        default=4.0,
        description="auto: expected meetings of each pair of present clients within the first "
        "T1 = max(ceil(meeting_fraction * run.rounds), ceil(expected_meetings)) rounds "
        "(p = expected_meetings / T1 there, then p T1/t by `decay`; never below mixed)",
    )
    meeting_fraction: Fraction = Field(
        default=0.25,
        description="auto: the share of run.rounds that holds the meetings (the first quarter; "
        "without run.rounds, a time budget, T1 = ceil(expected_meetings))",
    )
    decay: Literal["inverse", "inverse_sqrt"] = Field(
        default="inverse", description="decaying/mixed/auto law: 1/t (paper) or 1/sqrt(t) (code)"
    )
    local_steps: PositiveInt = Field(
        default=1, description="SGD steps per round (paper: 1) with the penalty held fixed"
    )
    weight_batch_size: Annotated[PositiveInt | Literal["full"], NO_BOOL] | None = Field(
        default="full",
        description="the samples of each midpoint gradient: 'full' (the client's whole "
        "training set; measured better on both CoBo paper files, scenarios/papers/README.md), "
        "a mini-batch of this size (capped at the training set), or null (training."
        "batch_size, the paper's 'stochastic gradients')",
    )
    join_weight: UnitInterval = Field(
        default=0.0, description="w between a newcomer and everyone (1 would drag all to it)"
    )
    phase_timeout_s: Seconds | None = Field(
        default=None,
        description="wait this long for a pair's reply and again for the collaborators' models "
        "(default: a third of deadline_s; without a deadline, for all of them)",
    )
