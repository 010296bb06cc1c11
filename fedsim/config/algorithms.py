"""The algorithms a scenario compares: one options model each, a tagged union on ``name``.

Families share their options through base classes: a synchronous server (client selection,
deadline), FedAvg's (a server optimizer, as in FedOpt), an asynchronous server (staleness),
and decentralized clients (D2D rounds)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, Field, StrictBool, model_validator

from fedsim.config.base import (
    MAX_COUNT,
    MAX_LR,
    MAX_ROUNDS,
    MAX_WEIGHT,
    NO_BOOL,
    Fraction,
    NonNegativeInt,
    PositiveInt,
    Seconds,
    UnitInterval,
    UpdateNorm,
    Weight,
    _label_name,
    _Strict,
    tag_of,
    tagged_union,
)
from fedsim.config.compression import CompressionConfig

NOTHING_TO_SEND = {
    "uplink": "sends nothing on the uplink",
    "downlink": "sends nothing on the downlink",
    "peer": "sends no peer messages (peer codecs are for the serverless algorithms)",
}


class _AlgorithmBase(_Strict):
    label: Annotated[str, AfterValidator(_label_name)] | None = Field(
        default=None,
        description="results folder name (letters, digits, _ . + = @ -); default: the algorithm",
    )
    compression: CompressionConfig | None = Field(
        default=None, description="codecs of the uplink and downlink messages; null: none"
    )
    # The directions whose messages are models or updates a codec may compress, and why not.
    compressible: ClassVar[dict[str, str | None]] = {"uplink": None, "downlink": None}

    @model_validator(mode="after")
    def _compressible(self) -> _AlgorithmBase:
        for direction in ("uplink", "downlink", "peer"):
            if self.compression is not None and getattr(self.compression, direction):
                why = self.compressible.get(direction, NOTHING_TO_SEND[direction])
                if why is not None:
                    raise ValueError(f"compression.{direction}: {self.name} {why}")  # type: ignore[attr-defined]
        return self

    @property
    def run_label(self) -> str:
        return self.label or self.name  # type: ignore[attr-defined]


class LocalConfig(_AlgorithmBase):
    """Every client trains alone on its own data: no communication (the floor to beat).

    By default in rounds with a barrier, each round training the clients a synchronous
    server with the same ``client_fraction`` would select (the same call on the same
    sampling stream), so that "equal rounds" means equal training against any server."""

    name: Literal["local"]
    compressible: ClassVar[dict[str, str | None]] = {}
    client_fraction: Fraction = Field(
        default=1.0, description="trained per round, selected as a synchronous server would"
    )
    barrier: StrictBool = Field(
        default=True,
        description="true: round r ends when each selected client has trained (or dropped "
        "out), so after round r nobody trained more than r times; false: every client trains "
        "back to back at its own pace, round r complete once all have trained r times",
    )
    sample_by_size: StrictBool = Field(
        default=False,
        description="select with probability ∝ n_k, as PerFed-CKT's server does (its default)",
    )

    @model_validator(mode="after")
    def _own_pace_trains_everyone(self) -> LocalConfig:
        if self.barrier:
            return self
        field = "sample_by_size: true" if self.sample_by_size else None
        if self.client_fraction < 1.0:
            field = f"client_fraction: {self.client_fraction}"
        if field is not None:
            raise ValueError(
                f"{field} selects clients per round, which needs barrier: true (without it "
                "every client trains at its own pace)"
            )
        return self


SelectionPolicy = Literal["random", "round_robin", "proportional_fair", "best_channel", "age_based"]
CHANNEL_AWARE_POLICIES = ("proportional_fair", "best_channel")  # they read channel reports


class SelectionConfig(_Strict):
    """Which clients a synchronous server calls each round (README "Client selection
    policies"): uniformly at random, or by Yang et al.'s scheduling policies (IEEE TCOM 2020)
    from what a base station knows, or by age of update."""

    policy: SelectionPolicy = Field(
        default="random",
        description="random; round_robin (in turn by id); proportional_fair (largest SNR over "
        "mean SNR); best_channel (largest SNR); age_based (longest since last selected)",
    )
    report_period_s: Seconds | None = Field(
        default=None,
        description="channel-aware policies: null, each client's SNR from the pilot it answers "
        "the call with; a period, as of its last periodic report (the latest multiple <= now)",
    )

    @model_validator(mode="after")
    def _reports_serve_channel_aware_policies(self) -> SelectionConfig:
        if self.report_period_s is not None and self.policy not in CHANNEL_AWARE_POLICIES:
            raise ValueError(
                f"report_period_s: {self.policy} reads no channel reports; only "
                f"{' and '.join(CHANNEL_AWARE_POLICIES)} do"
            )
        return self


class SyncServerConfig(_AlgorithmBase):
    """How a synchronous server picks clients and closes a round."""

    client_fraction: Fraction = 1.0
    selection: SelectionConfig = Field(
        default=SelectionConfig(), description="which clients it calls (default: random)"
    )
    deadline_s: Seconds | None = Field(
        default=None, description="close the round this long after it starts; drop the late"
    )
    over_selection: Annotated[float, Field(ge=0, le=100), NO_BOOL] = Field(
        default=0.0, description="select (1 + x) times as many (x <= 100), keep the first arrivals"
    )


_Beta = Annotated[float, Field(ge=0, lt=1), NO_BOOL]  # a moment's decay

SERVER_LR_DEFAULTS = {"sgd": 1.0, "momentum": 1.0, "adagrad": 0.1, "adam": 0.01, "yogi": 0.01}


class ServerOptimizerConfig(_Strict):
    """FedOpt (Reddi et al. 2021): the server steps from its model with an optimizer of its
    own on the pseudo-gradient Δ = (sample-weighted) mean client model − its model.

    sgd: x + lr Δ (lr 1 is plain FedAvg); momentum (FedAvgM): v = β₁ v + Δ, x + lr v;
    adagrad, adam, yogi: first moment with β₁, second with β₂ (adam, yogi), x + lr m/(√v + τ).
    Default lr per optimizer: sgd 1, momentum 1, adagrad 0.1, adam and yogi 0.01 (within the
    paper's tuned ranges; tune them), betas (0.9, 0.99), tau 1e-3 as in the paper.
    """

    name: Literal["sgd", "momentum", "adagrad", "adam", "yogi"] = "sgd"
    lr: Annotated[float, Field(gt=0, le=MAX_LR), NO_BOOL] = Field(
        default=1.0, description="η, the server learning rate (default depends on name)"
    )
    betas: tuple[_Beta, _Beta] = Field(default=(0.9, 0.99), description="β₁ (momentum's β), β₂")
    tau: Annotated[float, Field(gt=0, le=1), NO_BOOL] = Field(
        default=1e-3, description="adaptivity: √v + τ, and v starts at τ²"
    )

    @model_validator(mode="before")
    @classmethod
    def _learning_rate_of_the_optimizer(cls, data: Any) -> Any:
        if isinstance(data, dict) and "lr" not in data:
            name = data.get("name", "sgd")
            known = isinstance(name, str) and name  # else the name's own check reports it
            return {**data, "lr": SERVER_LR_DEFAULTS.get(name, 1.0)} if known else data
        return data


class FedAvgFamilyConfig(SyncServerConfig):
    """A server that averages client models, then steps with its server optimizer."""

    server_optimizer: ServerOptimizerConfig = Field(
        default=ServerOptimizerConfig(), description="default sgd, lr 1: plain averaging"
    )


class FedAvgConfig(FedAvgFamilyConfig):
    """FedAvg (McMahan et al. 2017): average the selected clients' trained models."""

    name: Literal["fedavg"]


class _FedOptPreset(FedAvgFamilyConfig):
    """FedAvg with the server optimizer its name says (FedOpt's named variants)."""

    preset: ClassVar[str]

    @model_validator(mode="before")
    @classmethod
    def _preset_optimizer(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        chosen = data.get("server_optimizer", {})
        if not isinstance(chosen, dict):
            return data
        name = chosen.get("name", cls.preset)
        if name != cls.preset:
            raise ValueError(
                f"server_optimizer.name: {data.get('name')} is fedavg with the {cls.preset} "
                f"server optimizer; for {name!r} use fedavg with server_optimizer.name {name!r}"
            )
        return {**data, "server_optimizer": {**chosen, "name": name}}


def _preset_optimizer(preset: str) -> Any:
    """A preset's server_optimizer field: the base class's description (default sgd) is not
    true of it. The default object stays the base class's (the schema shows it): validation
    always fills in the preset's name."""
    return Field(
        default=ServerOptimizerConfig(),
        description=f"default {preset}, lr {SERVER_LR_DEFAULTS[preset]:g}: the optimizer its "
        "name says, whose lr, betas and tau may be set",
    )


class FedAvgMConfig(_FedOptPreset):
    """FedAvgM (Hsu et al. 2019): server momentum."""

    name: Literal["fedavgm"]
    preset: ClassVar[str] = "momentum"
    server_optimizer: ServerOptimizerConfig = _preset_optimizer(preset)


class FedAdagradConfig(_FedOptPreset):
    """FedAdagrad (Reddi et al. 2021): Adagrad on the averaged update at the server."""

    name: Literal["fedadagrad"]
    preset: ClassVar[str] = "adagrad"
    server_optimizer: ServerOptimizerConfig = _preset_optimizer(preset)


class FedAdamConfig(_FedOptPreset):
    """FedAdam (Reddi et al. 2021): Adam on the averaged update at the server."""

    name: Literal["fedadam"]
    preset: ClassVar[str] = "adam"
    server_optimizer: ServerOptimizerConfig = _preset_optimizer(preset)


class FedYogiConfig(_FedOptPreset):
    """FedYogi (Reddi et al. 2021): Yogi on the averaged update at the server."""

    name: Literal["fedyogi"]
    preset: ClassVar[str] = "yogi"
    server_optimizer: ServerOptimizerConfig = _preset_optimizer(preset)


class ScaffoldConfig(FedAvgFamilyConfig):
    """SCAFFOLD (Karimireddy et al. 2020): control variates correct each local step."""

    name: Literal["scaffold"]
    control_update: Literal["I", "II"] = Field(
        default="II",
        description="c_i+: I = the gradient of the local training set at x (one more pass of "
        "compute); II = c_i - c + (x - y_i) / (K lr) (the paper's experiments)",
    )


class HierFavgConfig(SyncServerConfig):
    """HierFAVG (Liu, Zhang, Song and Letaief, ICC 2020): client-edge-cloud FL. Every
    client runs κ₁ = ``local_steps`` local updates per edge round; the edge server
    at each base-station site averages its cell's clients' models (by sample count) every
    edge round, and the cloud averages the edge models (by their clients' samples) every κ₂
    edge rounds, over the backhaul. Selection, deadline and over-selection act per edge."""

    name: Literal["hierfavg"]
    local_steps: PositiveInt | None = Field(
        default=None,
        description="κ₁: local SGD steps per edge round (null: training's local work, as FedAvg)",
    )
    association: Literal["serving_cell", "nearest_site", "balanced"] = Field(
        default="serving_cell",
        description="which edge a client belongs to: its serving cell's (follows handovers); "
        "the nearest site's; balanced by count (at most ceil(n / sites) each, nearest first). "
        "A client served by another site than its edge's is relayed over the backhaul",
    )
    cloud_every: Annotated[int, Field(ge=1, le=MAX_ROUNDS), NO_BOOL] = Field(
        default=4,
        description="κ₂: edge aggregations between two cloud aggregations (1: every edge "
        "round). The paper varies it at fixed κ₁κ₂ ((60, 1) to (6, 10)); 4 was the fastest to "
        "the target of (20, 1), (10, 2), (5, 4), (2, 10) on scenarios/hierarchical.yaml",
    )


class FedProxConfig(FedAvgFamilyConfig):
    """FedAvg with the proximal term mu/2 ||w - w_global||^2 in the local objective."""

    name: Literal["fedprox"]
    mu: Weight = Field(default=0.1, description="the papers tune mu in {0.1, 0.5, 1}")


class FedAvgFTConfig(FedAvgFamilyConfig):
    """FedAvg whose clients fine-tune the global model locally before using it."""

    name: Literal["fedavg_ft"]
    finetune_epochs: PositiveInt = 1


class DittoConfig(FedAvgFamilyConfig):
    """Global FedAvg model plus a personal model per client pulled towards it by lam."""

    name: Literal["ditto"]
    lam: Weight = Field(default=0.1, description="the papers tune lam in {0.1, 0.5, 1}")
    personal_epochs: PositiveInt = 1


class OracleConfig(FedAvgFamilyConfig):
    """FedAvg inside each true group of the partition (the groups are known)."""

    name: Literal["oracle"]


class IfcaConfig(FedAvgFamilyConfig):
    """k cluster models broadcast each round; each client trains the one of lowest loss."""

    name: Literal["ifca"]
    clusters: PositiveInt = 4


class CflConfig(FedAvgFamilyConfig):
    """Clustered FL (Sattler et al.): bipartition a cluster by update cosine similarity."""

    name: Literal["cfl"]
    eps1: UpdateNorm = Field(default=0.4, description="split when the mean update norm < eps1")
    eps2: UpdateNorm = Field(default=1.6, description="... and the max update norm > eps2")
    warmup_rounds: Annotated[int, Field(ge=0, le=MAX_ROUNDS), NO_BOOL] = 20
    max_clusters: PositiveInt = 8


class FedFomoConfig(SyncServerConfig):
    """Each client downloads M peer models and weighs them on its validation split."""

    name: Literal["fedfomo"]
    models_per_client: PositiveInt = Field(default=5, description="M")
    epsilon: Annotated[float, Field(ge=0, le=1), NO_BOOL] = Field(
        default=0.3, description="exploration: chance of a random peer instead of a top one"
    )
    validation_fraction: Annotated[float, Field(gt=0, lt=1), NO_BOOL] = 0.2


# UCFL's variance batches K as the paper sets them (§V-F, Fig. 7) per kind of shift.
UCFL_PAPER_BATCHES = {"group_shift": 3, "label": 10}


class UcflConfig(SyncServerConfig):
    """User-centric FL: eq. (9) collaboration weights, k personalized downlink streams.

    The kernel's bandwidth is 2 sigma_i^2, and sigma_i^2 grows with the number K of
    variance batches (about (K - 1) times the noise of g_i): fewer batches, sharper kernel.
    The paper sets the batch size by the kind of shift (§V-F, Fig. 7: 100 of 1,000 samples,
    K = 10, for label shift; N/3, K = 3, for covariate or concept shift): ``variance_batches:
    paper`` (the default) takes that K from the dataset (a ``group_shift``: 3; label shift
    alone: 10), resolved at validation. ``auto`` (fedsim's own) chooses K among
    ``variance_batch_candidates`` from the data: the K whose weights give the lowest
    estimated error of the collaborative gradient (``ucfl.choose_variance_batches``).
    """

    name: Literal["ucfl"]
    streams: Annotated[PositiveInt | Literal["auto", "all"], NO_BOOL] = Field(
        default="auto", description="k: a number, 'all' (k = m), or 'auto' (Algorithm 2)"
    )
    tradeoff: Literal["silhouette", "penalized", "per_round_time"] = Field(
        default="silhouette",
        description="c(k, s_k): s (the authors' code), s - tradeoff_lambda * k, or s / T_round(k)",
    )
    tradeoff_lambda: Weight = 0.01
    max_streams: PositiveInt | None = None
    variance_batches: Annotated[
        Annotated[int, Field(ge=2, le=MAX_COUNT)] | Literal["paper", "auto"], NO_BOOL
    ] = Field(
        default="paper",
        description="K batches of n_i / K samples for sigma_i^2; 'paper': the paper's K for "
        "the dataset's shift (3 for a group_shift, covariate or concept; 10 for label shift "
        "alone), resolved at validation; 'auto': the candidate K of lowest estimated error "
        "of the weighted gradient",
    )
    variance_batch_candidates: list[Annotated[int, Field(ge=2, le=MAX_COUNT), NO_BOOL]] = Field(
        default=[2, 3, 4, 6, 8, 12, 16],
        min_length=1,
        description="the K that variance_batches 'auto' tries (distinct, each >= 2); one pass "
        "over the data serves them all",
    )
    bandwidth: Literal["row", "symmetric"] = Field(
        default="row", description="2 sigma_i^2 (eq. 9) or 2 sqrt(sigma_i^2 sigma_j^2) (code)"
    )
    timing: Literal["pipelined", "barrier"] = Field(
        default="pipelined",
        description="pipelined: a stream's members start computing when their stream arrives "
        "and upload when done; barrier (the paper's T_round): everyone starts when the last "
        "stream is sent and uploads once every participant has computed",
    )

    @model_validator(mode="after")
    def _distinct_candidates(self) -> UcflConfig:
        counts = self.variance_batch_candidates
        repeated = sorted({k for k in counts if counts.count(k) > 1})
        if repeated:
            raise ValueError(f"variance_batch_candidates: {repeated[0]} is listed twice")
        return self


class PerFedCktConfig(SyncServerConfig):
    """PerFed-CKT: clustered co-distillation through outputs on a public unlabeled set."""

    name: Literal["perfed_ckt"]
    compressible: ClassVar[dict[str, str | None]] = dict.fromkeys(
        ("uplink", "downlink"), "sends softmax outputs on the public set, not models or updates"
    )
    clusters: PositiveInt = Field(default=3, description="c (paper: 3 homogeneous, 2 mixed)")
    distill_weight: Weight = Field(default=2.0, description="lambda (paper: 2)")
    public_samples: PositiveInt = Field(default=2000, description="|P| (paper: 2000)")
    public_batch_size: PositiveInt = Field(default=128, description="b' (paper: 128)")
    sample_by_size: bool = Field(default=True, description="selection probability ∝ n_k")

    @model_validator(mode="after")
    def _size_sampling_is_random(self) -> PerFedCktConfig:
        if self.sample_by_size and self.selection.policy != "random":
            raise ValueError(
                f"selection.policy: {self.selection.policy} picks clients by its own rule, "
                "not by sampling ∝ n_k: set sample_by_size: false with it"
            )
        return self


class AsyncServerConfig(_AlgorithmBase):
    """An asynchronous server: no rounds; it dispatches and applies updates as they come.

    A "round" of an asynchronous algorithm is one server model update (run.rounds counts
    them); measure with evaluation.every_s to compare with synchronous runs.
    """

    max_concurrency: PositiveInt = Field(default=10, description="clients training at once")
    staleness: Literal["constant", "polynomial", "hinge"] = Field(
        default="polynomial",
        description="s(tau): 1; (1 + tau)^-a; 1 if tau <= b else 1 / (a (tau - b) + 1)",
    )
    staleness_a: Weight = 0.5
    staleness_b: Annotated[float, Field(ge=0, le=MAX_ROUNDS), NO_BOOL] = 4.0
    max_staleness: Annotated[int, Field(ge=0, le=MAX_ROUNDS), NO_BOOL] | None = Field(
        default=None, description="drop older updates (their bytes count as wasted)"
    )
    task_timeout_s: Seconds | None = Field(
        default=None, description="give up on a dispatched client after this long (frees its slot)"
    )


class FedAsyncConfig(AsyncServerConfig):
    """FedAsync (Xie et al. 2019): x <- (1 - alpha s(tau)) x + alpha s(tau) x_client."""

    name: Literal["fedasync"]
    mixing: Fraction = Field(default=0.6, description="alpha")


class FedBuffConfig(AsyncServerConfig):
    """FedBuff (Nguyen et al. 2022): apply the mean of K staleness-weighted deltas."""

    name: Literal["fedbuff"]
    buffer_size: PositiveInt = Field(default=10, description="K")
    server_optimizer: ServerOptimizerConfig = Field(
        default=ServerOptimizerConfig(),
        description="steps on the staleness-weighted mean delta (sgd, lr: the paper's η_g)",
    )


class DecentralizedConfig(_AlgorithmBase):
    """No server: clients talk over D2D links (or via the base station) in lock-step rounds."""

    compressible: ClassVar[dict[str, str | None]] = {
        "uplink": "has no server: compression.peer compresses its peer messages",
        "downlink": "has no server: compression.peer compresses its peer messages",
        "peer": None,
    }

    deadline_s: Seconds | None = Field(
        default=None,
        description="close a round this long after it starts; messages still on the air are lost",
    )


class FedericoConfig(DecentralizedConfig):
    """FedeRiCo: ε-greedy neighbours, EMA losses, w = softmax(-L), w-scaled gradients back."""

    name: Literal["federico"]
    neighbours: NonNegativeInt = Field(default=3, description="M (paper: 3)")
    epsilon: UnitInterval = Field(default=0.3, description="ε-greedy exploration (paper: 0.3)")
    beta: UnitInterval = Field(default=0.6, description="EMA weight of the NEW loss (paper: 0.6)")
    include_self: bool = Field(
        default=True, description="refresh ℓ_ii and apply g_ii every round (Eq. 8's j = i term)"
    )
    loss_on: Literal["train_set", "batch"] = Field(
        default="train_set", description="E-step loss on the local train set, or on the batch"
    )
    loss_reduction: Literal["sum", "mean"] = Field(
        default="sum", description="ℓ summed over the samples (Alg. 1, Eq. 3) or their mean"
    )
    ensemble: bool = Field(
        default=True, description="predict with Σ_j w_ij softmax(h_φj) over cached models"
    )
    ensemble_min_weight: UnitInterval = Field(
        default=0.01, description="forget cached peer models whose weight falls below this"
    )
    model_timeout_s: Seconds | None = Field(
        default=None,
        description="a sampler waits this long for the models it asked for (default: half of "
        "deadline_s; for all of them without a deadline)",
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


class CoboConfig(DecentralizedConfig):
    """CoBo (Alg. 1): pairwise weights from midpoint gradients; penalty pulls collaborators.

    Pair sampling defaults to ``auto``, which scales with the run: every pair of present
    clients meets ``expected_meetings`` times in expectation within the first
    T1 = max(⌈meeting_fraction · run.rounds⌉, ⌈expected_meetings⌉) rounds, whatever n, then
    p decays by ``decay``; it never samples less than the paper's ``mixed``. ``mixed`` alone
    (p = 1/n for 0.2 % of the run, then 1/t) gives a pair about ln(T)/n meetings in a short
    run (0.16 for 40 clients over 300 rounds), so W never moves.
    """

    name: Literal["cobo"]
    penalty: Weight = Field(default=0.05, description="ρ of the paper (code: 0.05)")
    weight_lr: Annotated[float, Field(gt=0, le=MAX_WEIGHT), NO_BOOL] = Field(
        default=0.01, description="γ, step of the weight ascent"
    )
    pair_sampling: Literal["auto", "constant", "decaying", "mixed", "all"] = Field(
        default="auto",
        description="p_t: auto (mixed, raised so that each pair meets expected_meetings times "
        "early); constant p; decaying p/t; mixed p then p T0/t after T0 rounds (the paper's); "
        "all: every pair",
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


CHOCO_CONSENSUS_STEP = 0.1  # D-SGD's γ under a peer codec unless the scenario sets one


class DsgdConfig(DecentralizedConfig):
    """Decentralized SGD: local training, then gossip averaging with the D2D neighbours."""

    name: Literal["dsgd"]
    consensus_step: Annotated[float, Field(gt=0, le=1), NO_BOOL] | None = Field(
        default=None,
        description="γ of CHOCO-SGD under compression.peer: x_i += γ Σ_j w_ij (x̂_j − x̂_i) "
        "over the public copies; null: 0.1 (the paper tunes it per codec and graph; 0.1 was "
        "stable for QSGD s = 4 and top-k 1-10% in peer_compression.yaml, where 1 diverged). "
        "Without a peer codec D-SGD averages the models it receives (γ = 1)",
    )

    @model_validator(mode="before")
    @classmethod
    def _default_consensus_step(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("consensus_step") is None:
            compression = data.get("compression")
            peer = compression.get("peer") if isinstance(compression, dict) else None
            if peer is not None or getattr(compression, "peer", None) is not None:
                data = data | {"consensus_step": CHOCO_CONSENSUS_STEP}
        return data

    @model_validator(mode="after")
    def _consensus_step_needs_a_peer_codec(self) -> DsgdConfig:
        coded = self.compression is not None and self.compression.peer is not None
        if self.consensus_step is not None and not coded:
            raise ValueError(
                "consensus_step: acts only on the public copies of compression.peer; without "
                "a peer codec D-SGD averages the models it receives"
            )
        return self


ALGORITHMS = (
    LocalConfig,
    FedAvgConfig,
    FedAvgMConfig,
    FedAdagradConfig,
    FedAdamConfig,
    FedYogiConfig,
    ScaffoldConfig,
    FedProxConfig,
    FedAvgFTConfig,
    DittoConfig,
    HierFavgConfig,
    OracleConfig,
    IfcaConfig,
    CflConfig,
    FedFomoConfig,
    UcflConfig,
    PerFedCktConfig,
    FedAsyncConfig,
    FedBuffConfig,
    FedericoConfig,
    CoboConfig,
    DsgdConfig,
)
AlgorithmConfig = tagged_union(ALGORITHMS, "name")
ALGORITHM_NAMES = tuple(tag_of(model, "name") for model in ALGORITHMS)  # in error paths too
_BY_NAME = dict(zip(ALGORITHM_NAMES, ALGORITHMS, strict=True))


def algorithm_model(name: str) -> type[BaseModel]:
    """The options model of an algorithm name (``fedsim algorithms``)."""
    return _BY_NAME[name]
