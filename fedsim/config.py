"""Scenario schema: one typed object from a YAML file, every error naming its field.

Units live in key names (``_s``, ``_mbps``, ``_bits``). Unknown keys are errors, so a
typo never silently falls back to a default.
"""

from __future__ import annotations

import copy
import csv
import difflib
import importlib
import itertools
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

DATA_ENV_VAR = "FEDSIM_DATA"
DEFAULT_DATA_ROOT = Path("data")  # the only data folder fedsim creates itself (for a download)


class ScenarioError(Exception):
    """Bad scenario input; ``problems`` are ``field.path: reason`` lines."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems))


class _Strict(BaseModel):
    # inf and nan are refused everywhere: every number must be one a simulation can run with
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# --- bounds: every number is finite and within what a simulation can run ----------------------
# Each number of the schema has an upper bound (tests/test_config.py checks this), so an absurd
# magnitude is refused here, naming its field, instead of overflowing later (inf/nan times, a
# partition that never ends).
MAX_CLIENTS = 1_000_000  # clients.count + arrivals.reserve: the data are split per client
MAX_COUNT = 1_000_000  # other whole numbers of things: samples, steps, clusters, epochs, ...
MAX_ROUNDS = 10_000_000  # run.rounds and other counts of rounds
MAX_SEED = 2**63 - 1
MAX_THREADS = 1024
MIN_RATE_MBPS, MAX_RATE_MBPS = 1e-6, 1e6  # 1 bit/s .. 1 Tbit/s
MAX_LATENCY_S = 3600.0  # a set-up time of an hour is already no wireless link
MAX_TIME_S = 1e7  # any simulated span (deadline, budget, timeout, schedule): ~116 days
MAX_COMPUTE_S = 86_400.0  # compute per unit of work (a round, a step or a sample): a day
MIN_PERIOD_S = 1.0  # shortest availability period: shorter ones only flood the event loop
MAX_EVENT_RATE_PER_S = 1000.0  # Poisson arrivals / departures
MAX_FACTOR = 1000.0  # ratios of speeds and rates (rho, device speed, straggler slowdown)
MAX_LOG_SIGMA = 3.0  # lognormal rate spread: a factor e^3 = 20 per standard deviation
MIN_TAIL_SHAPE = 0.5  # Lomax shape: below, a few thousand draws reach 1e30 x scale_s and more
MAX_LR = 10.0
MAX_WEIGHT = 1000.0  # penalties and weights of loss terms (mu, lam, rho of CoBo, ...)
MAX_WIDTH = 65_536  # units of a hidden layer
MAX_SWEEP_RUNS = 1000  # combinations of a sweep (each builds its own world)
MAX_NAME_LENGTH = 100  # scenario names and labels (they name folders)

PositiveInt = Annotated[int, Field(gt=0, le=MAX_COUNT)]
NonNegativeInt = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Rounds = Annotated[int, Field(gt=0, le=MAX_ROUNDS)]
Fraction = Annotated[float, Field(gt=0, le=1)]
RateMbps = Annotated[float, Field(ge=MIN_RATE_MBPS, le=MAX_RATE_MBPS)]
Seconds = Annotated[float, Field(gt=0, le=MAX_TIME_S)]
Instant = Annotated[float, Field(ge=0, le=MAX_TIME_S)]
LatencySeconds = Annotated[float, Field(ge=0, le=MAX_LATENCY_S)]
ComputeSeconds = Annotated[float, Field(ge=0, le=MAX_COMPUTE_S)]
EventRate = Annotated[float, Field(ge=0, le=MAX_EVENT_RATE_PER_S)]
Factor = Annotated[float, Field(ge=1 / MAX_FACTOR, le=MAX_FACTOR)]
Weight = Annotated[float, Field(ge=0, le=MAX_WEIGHT)]


def _folder_name(value: str, allowed: str, what: str) -> str:
    """A name that becomes a results folder: plain ASCII, bounded, never '.' or '..'."""
    if not re.fullmatch(rf"[A-Za-z0-9{re.escape(allowed)}]{{1,{MAX_NAME_LENGTH}}}", value):
        raise ValueError(
            f"{what} names a folder: 1 to {MAX_NAME_LENGTH} of the characters A-Z a-z 0-9 "
            f"{' '.join(allowed)}"
        )
    if not value.strip("."):
        raise ValueError(f"{what} names a folder: it cannot be only dots")
    return value


def _scenario_name(value: str) -> str:
    return _folder_name(value, "_.+-", "the scenario name")


def _label_name(value: str) -> str:
    return _folder_name(value, "_.+=@,-", "a label")  # '=@,' for the labels sweeps make


def _sweep_value(value: Any) -> Any:
    """A sweep value also names runs (``<label>@<key>=<value>``), so it must be a plain one."""
    if value is not None and not isinstance(value, (bool, int, float, str)):
        raise ValueError(
            f"a sweep value must be a number, a string, true/false or null, not a "
            f"{type(value).__name__}"
        )
    if isinstance(value, float) and not np.isfinite(value):
        raise ValueError("a sweep value must be a finite number")
    return value


SweepValue = Annotated[Any, AfterValidator(_sweep_value)]


def _read_referenced_file(path: Path, read: Callable[[Path], Any]) -> Any:
    """``read(path)``, with any reason the file cannot be used turned into a field error.

    Relative paths are relative to the working folder, as when the scenario runs.
    """
    where = str(path) if path.is_absolute() else f"{path} (in {Path.cwd()})"
    try:
        return read(path)
    except UnicodeDecodeError:
        raise ValueError(f"{where} is not a text file") from None
    except OSError as error:
        raise ValueError(f"cannot read {where}: {error.strerror or error}") from None
    except csv.Error as error:
        raise ValueError(f"{where}: not a valid CSV file ({error})") from None
    except ValueError as error:  # the readers' own messages name the file and line
        raise ValueError(str(error)) from None


# --- per-client value distributions (rates) -------------------------------------------


class Constant(_Strict):
    kind: Literal["constant"] = "constant"
    value: RateMbps

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return np.full(size, self.value)


class Uniform(_Strict):
    kind: Literal["uniform"] = "uniform"
    low: RateMbps
    high: RateMbps

    @model_validator(mode="after")
    def _ordered(self) -> Uniform:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return rng.uniform(self.low, self.high, size)


class LogNormal(_Strict):
    kind: Literal["lognormal"] = "lognormal"
    median: RateMbps
    sigma: Annotated[float, Field(ge=0, le=MAX_LOG_SIGMA)]

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return self.median * np.exp(self.sigma * rng.standard_normal(size))


def _number_is_constant(value: Any) -> Any:
    """A plain number is a constant rate; so is a numeric string, as YAML reads ``1e3``."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return {"kind": "constant", "value": value}
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return value
        return {"kind": "constant", "value": value}
    return value


PositiveDistribution = Annotated[
    Constant | Uniform | LogNormal,
    Field(discriminator="kind"),
    BeforeValidator(_number_is_constant),
]


# --- data, model, clients ---------------------------------------------------------------


class IidPartition(_Strict):
    kind: Literal["iid"] = "iid"


class DirichletPartition(_Strict):
    """Per class, client shares ~ Dir(alpha); small alpha = strong label skew."""

    kind: Literal["dirichlet"] = "dirichlet"
    alpha: Annotated[float, Field(ge=1e-6, le=1e6)] = 0.5
    min_samples_per_client: PositiveInt = 10


class LabelGroupsPartition(_Strict):
    """FedeRiCo's split: disjoint label sets, one per group; each client in one group."""

    kind: Literal["label_groups"] = "label_groups"
    groups: PositiveInt = 2
    balanced: bool = True


Partition = Annotated[
    IidPartition | DirichletPartition | LabelGroupsPartition, Field(discriminator="kind")
]


class GroupShift(_Strict):
    """Per-group shift on top of the partition: contiguous blocks of clients form the groups.

    label_permutation: group g relabels the classes by its own permutation (concept shift;
    group 0 keeps the identity). rotation: group g's images are rotated by angles_deg[g]
    (covariate shift; default k * 360 / groups).
    """

    kind: Literal["label_permutation", "rotation"]
    groups: PositiveInt = 4
    angles_deg: list[Annotated[float, Field(ge=-360, le=360)]] | None = None
    sizes: list[PositiveInt] | None = Field(
        default=None, description="clients per group, in client order (default: equal blocks)"
    )

    @model_validator(mode="after")
    def _angles(self) -> GroupShift:
        if self.angles_deg is not None:
            if self.kind != "rotation":
                raise ValueError("angles_deg applies to kind 'rotation' only")
            if len(self.angles_deg) != self.groups:
                raise ValueError(f"angles_deg needs one angle per group ({self.groups})")
        if self.sizes is not None and len(self.sizes) != self.groups:
            raise ValueError(f"sizes needs one size per group ({self.groups})")
        return self


class TimingSamples(_Strict):
    """Per-client training sample counts for timing-only runs: used when the clients outnumber
    the data (a million clients need no million-sample dataset to be budgeted), or always."""

    per_client: PositiveDistribution = Field(description="training samples (a number or a law)")
    apply: Literal["when_short", "always"] = Field(
        default="when_short",
        description="when_short: only when the clients outnumber the data; always: every "
        "timing-only run",
    )


class DatasetConfig(_Strict):
    name: Literal["mnist", "fashion_mnist", "cifar10", "synthetic"]
    root: Path | None = Field(
        default=None, description=f"data folder; default ${DATA_ENV_VAR}, else ./data"
    )
    download: bool = True
    num_samples: PositiveInt | None = Field(
        default=None, description="random subset of the training pool shared by all clients"
    )
    test_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.2
    partition: Partition = IidPartition()
    group_shift: GroupShift | None = None
    timing_samples: TimingSamples | None = Field(
        default=None,
        description="timing-only runs (fedsim budget): per-client sample counts from a law",
    )

    @model_validator(mode="after")
    def _one_source_of_groups(self) -> DatasetConfig:
        if self.group_shift is not None and self.partition.kind == "label_groups":
            raise ValueError("group_shift defines its own groups: use it with iid or dirichlet")
        return self

    def resolved_root(self) -> Path:
        if self.root is not None:
            return self.root
        return Path(os.environ.get(DATA_ENV_VAR) or DEFAULT_DATA_ROOT)


def data_root_problem(root: Path) -> str | None:
    """Why a resolved data root cannot be used, naming who chose it; None if it can.

    A folder the user named (dataset.root or $FEDSIM_DATA) must exist: a download into a
    mistyped path would create folders where nobody looks. Only the default ./data may be
    missing, and a download creates it.
    """
    if root.is_dir() or (root == DEFAULT_DATA_ROOT and not root.exists()):
        return None
    env = os.environ.get(DATA_ENV_VAR)
    chosen_by = DATA_ENV_VAR if env and Path(env) == root else "dataset.root"
    what = "is not a folder" if root.exists() else "does not exist"
    return (
        f"{chosen_by}: {root} {what}: correct the path or create the folder (fedsim creates "
        "only the default ./data, for a download)"
    )


ModelName = Literal["mlp", "lenet5", "cnn"]
HiddenSizes = Annotated[tuple[Annotated[int, Field(gt=0, le=MAX_WIDTH)], ...], Field(max_length=64)]


class ModelShare(_Strict):
    name: ModelName
    fraction: Fraction
    hidden_sizes: HiddenSizes = (200, 200)


class ModelConfig(_Strict):
    """One architecture for every client, or a mix (model-heterogeneous clients)."""

    name: ModelName | None = None
    hidden_sizes: HiddenSizes = (200, 200)
    mix: list[ModelShare] = Field(
        default=[], description="architectures and the share of clients that get each"
    )
    assign: Literal["by_size", "random"] = Field(
        default="by_size", description="by_size: the first listed go to the largest datasets"
    )

    @model_validator(mode="after")
    def _name_or_mix(self) -> ModelConfig:
        if (self.name is None) == (not self.mix):
            raise ValueError("give a model name, or a mix of architectures, not both")
        total = sum(share.fraction for share in self.mix)
        if self.mix and abs(total - 1) > 1e-6:
            raise ValueError(f"mix fractions must sum to 1 (they sum to {total:g})")
        return self

    @property
    def architectures(self) -> list[ModelShare]:
        if self.mix:
            return list(self.mix)
        return [ModelShare(name=self.name, fraction=1.0, hidden_sizes=self.hidden_sizes)]


class AlwaysOnline(_Strict):
    kind: Literal["always"] = "always"


class RenewalAvailability(_Strict):
    """On/off renewal process per client; every client starts online."""

    kind: Literal["renewal"] = "renewal"
    mean_online_s: Annotated[float, Field(ge=MIN_PERIOD_S, le=MAX_TIME_S)]
    mean_offline_s: Annotated[float, Field(ge=MIN_PERIOD_S, le=MAX_TIME_S)]
    law: Literal["exponential", "fixed"] = "exponential"


def _read_now_by(module: str, reader: str) -> AfterValidator:
    """A path whose file is read at validation by ``module.reader`` (imported then: the
    system model's readers import simpy), so a missing or malformed file is found by
    validate, not mid-run."""

    def read(path: Path | None) -> Path | None:
        if path is not None:
            _read_referenced_file(path, getattr(importlib.import_module(module), reader))
        return path

    return AfterValidator(read)


class TraceAvailability(_Strict):
    """CSV with header time_s,client,state (state: online|offline); others stay online."""

    kind: Literal["trace"] = "trace"
    path: Annotated[Path, _read_now_by("fedsim.sim.readers", "read_availability_trace")] = Field(
        description="CSV file, relative to the working folder (as when run)"
    )


class IntervalsAvailability(_Strict):
    """Online intervals per client: FedScale's client behaviour JSON (active/inactive lists,
    repeating every finish_time) or a CSV client,start_s,end_s (scenarios/traces/README.md).
    The i-th client of the file, in ascending id order, is client i."""

    kind: Literal["intervals"] = "intervals"
    path: Annotated[Path, _read_now_by("fedsim.sim.readers", "read_availability")] = Field(
        description="JSON or CSV, relative to the working folder"
    )


Availability = Annotated[
    AlwaysOnline | RenewalAvailability | TraceAvailability | IntervalsAvailability,
    Field(discriminator="kind"),
]


class ScheduledChange(_Strict):
    time_s: Instant
    count: Annotated[int, Field(gt=0, le=MAX_CLIENTS)]


class ArrivalsConfig(_Strict):
    """New clients drawn, in order, from a reserve partitioned with the others."""

    reserve: Annotated[int, Field(ge=0, le=MAX_CLIENTS)] = 0
    rate_per_s: EventRate = 0.0
    schedule: list[ScheduledChange] = []

    @model_validator(mode="after")
    def _enough_reserve(self) -> ArrivalsConfig:
        scheduled = sum(change.count for change in self.schedule)
        if scheduled > self.reserve:
            raise ValueError(
                f"the schedule brings {scheduled} clients but reserve is {self.reserve}"
            )
        if self.rate_per_s > 0 and self.reserve == 0:
            raise ValueError("Poisson arrivals need a reserve of clients (set reserve)")
        return self


class DeparturesConfig(_Strict):
    """Clients leaving for good, chosen uniformly among those present."""

    rate_per_s: EventRate = 0.0
    schedule: list[ScheduledChange] = []


class ClientsConfig(_Strict):
    count: Annotated[int, Field(gt=0, le=MAX_CLIENTS)] = Field(
        description=f"clients present at the start; with arrivals.reserve at most {MAX_CLIENTS:,}"
    )
    availability: Availability = AlwaysOnline()
    arrivals: ArrivalsConfig = ArrivalsConfig()
    departures: DeparturesConfig = DeparturesConfig()

    @model_validator(mode="after")
    def _bounded_population(self) -> ClientsConfig:
        if self.total > MAX_CLIENTS:
            raise ValueError(
                f"count + arrivals.reserve = {self.total:,}: at most {MAX_CLIENTS:,} clients"
            )
        return self

    @property
    def total(self) -> int:
        """Clients in the partition: those present at the start plus the reserve."""
        return self.count + self.arrivals.reserve

    @property
    def can_drop_out(self) -> bool:
        departures = self.departures.rate_per_s > 0 or bool(self.departures.schedule)
        return departures or self.availability.kind != "always"


# --- system model -------------------------------------------------------------------------


class NetworkConfig(_Strict):
    uplink_mbps: PositiveDistribution = Field(
        default=Constant(value=10.0), description="per-client uplink rate (a number or a law)"
    )
    rho: Factor = Field(default=1.0, description="downlink rate / uplink rate (1e-3..1e3)")
    latency_s: LatencySeconds = Field(default=0.0, description="added to every transfer (<= 1 h)")
    uplink_medium: Literal["parallel", "tdma", "shared"] = "parallel"
    cell_capacity_mbps: RateMbps | None = Field(
        default=None, description="shared uplink: capacity split among concurrent uploads"
    )
    downlink: Literal["broadcast", "unicast"] = "broadcast"
    precision_bits: Literal[8, 16, 32, 64] = 32

    @model_validator(mode="after")
    def _capacity_for_shared(self) -> NetworkConfig:
        if self.uplink_medium == "shared" and self.cell_capacity_mbps is None:
            raise ValueError("uplink_medium 'shared' needs cell_capacity_mbps")
        return self


class D2DConfig(_Strict):
    """Device-to-device links for decentralized algorithms."""

    graph: Literal["complete", "ring", "erdos_renyi", "random_geometric", "edge_list"] = "complete"
    p: Annotated[float, Field(gt=0, le=1)] = 0.3
    radius: Annotated[float, Field(gt=0, le=2)] = Field(
        default=0.3, description="in the unit square (from its diagonal, 1.41, on: complete)"
    )
    edge_list: Path | None = Field(
        default=None, description="file of 'u v [rate_mbps]' lines (relative to the working folder)"
    )
    rate_mbps: PositiveDistribution = Field(default=Constant(value=10.0))
    latency_s: LatencySeconds = 0.0
    relay: bool = Field(default=False, description="route every peer message via the base station")

    @model_validator(mode="after")
    def _edge_list_file(self) -> D2DConfig:
        if (self.graph == "edge_list") != (self.edge_list is not None):
            raise ValueError("graph 'edge_list' and the edge_list file go together")
        return self


class DeviceClass(_Strict):
    fraction: Fraction
    speed: Factor = Field(description="compute time is divided by this (1e-3..1e3)")


class Stragglers(_Strict):
    """A fixed random subset of clients whose compute is slowed down."""

    fraction: Annotated[float, Field(ge=0, le=1)] = 0.0
    slowdown: Annotated[float, Field(ge=1, le=MAX_FACTOR)] = 1.0


class HeavyTail(_Strict):
    """Extra delay per task ~ scale_s * Lomax(shape) (Pareto II; infinite mean if shape <= 1)."""

    shape: Annotated[float, Field(ge=MIN_TAIL_SHAPE, le=1e6)]
    scale_s: Annotated[float, Field(gt=0, le=MAX_COMPUTE_S)]


class CyclesConfig(_Strict):
    """A device's CPU: c cycles per sample at f Hz take c·D/f s and κ·c·D·f² J for D samples.

    Defaults from Yang et al. (TWC 2021): κ = 1e-28, c in 1e4..3e4 cycles/sample, f <= 2 GHz.
    """

    frequency_ghz: PositiveDistribution = Field(
        default=Constant(value=1.0), description="per-client CPU frequency (a number or a law)"
    )
    cycles_per_sample: Annotated[float, Field(ge=1, le=1e12)] = 2e4
    capacitance: Annotated[float, Field(gt=0, le=1e-20)] = Field(
        default=1e-28, description="effective switched capacitance kappa"
    )


class ComputeConfig(_Strict):
    """Shifted exponential T_min + Exp(mean) per round, per local step or per sample; or the
    cycles model (time c·D/f). The cycles model always gives the compute energy."""

    model: Literal["shifted_exponential", "cycles"] = Field(
        default="shifted_exponential", description="what gives the compute *time*"
    )
    t_min_s: ComputeSeconds = 1.0
    mean_extra_s: ComputeSeconds = 0.0
    per: Literal["round", "step", "sample"] = "round"
    device_classes: list[DeviceClass] = []
    stragglers: Stragglers = Stragglers()
    heavy_tail: HeavyTail | None = None
    cycles: CyclesConfig = CyclesConfig()

    @model_validator(mode="after")
    def _classes_sum_to_one(self) -> ComputeConfig:
        total = sum(c.fraction for c in self.device_classes)
        if self.device_classes and abs(total - 1) > 1e-6:
            raise ValueError(f"device_classes fractions must sum to 1 (they sum to {total:g})")
        return self


# --- the radio (optional): rates from a physical-layer channel ----------------------------------


class MacroPathLoss(_Strict):
    """128.1 + 37.6 log10(d_km) dB: 3GPP TR 36.814 urban macro cell at 2 GHz."""

    kind: Literal["macro"] = "macro"


class LogDistancePathLoss(_Strict):
    """PL(d0) + 10 alpha log10(d / d0) dB (Rappaport)."""

    kind: Literal["log_distance"] = "log_distance"
    reference_loss_db: Annotated[float, Field(ge=0, le=200)] = 40.0
    reference_distance_m: Annotated[float, Field(gt=0, le=1e4)] = 1.0
    exponent: Annotated[float, Field(ge=1, le=8)] = 3.0


class FreeSpacePathLoss(_Strict):
    """Friis: 20 log10(4 pi d f / c) dB."""

    kind: Literal["free_space"] = "free_space"
    carrier_ghz: Annotated[float, Field(ge=0.01, le=300)] = 2.0


def _name_is_kind(value: Any) -> Any:
    """``path_loss: macro`` is ``{kind: macro}`` (its defaults)."""
    return {"kind": value} if isinstance(value, str) else value


PathLossConfig = Annotated[
    MacroPathLoss | LogDistancePathLoss | FreeSpacePathLoss,
    Field(discriminator="kind"),
    BeforeValidator(_name_is_kind),
]
PowerDbm = Annotated[float, Field(ge=-30, le=60)]  # 1 uW .. 1 kW
BandwidthHz = Annotated[float, Field(ge=1e3, le=1e10)]


class ConstantDbm(_Strict):
    kind: Literal["constant"] = "constant"
    value_dbm: PowerDbm

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return np.full(size, self.value_dbm)


class UniformDbm(_Strict):
    kind: Literal["uniform"] = "uniform"
    low_dbm: PowerDbm
    high_dbm: PowerDbm

    @model_validator(mode="after")
    def _ordered(self) -> UniformDbm:
        if self.high_dbm < self.low_dbm:
            raise ValueError(f"high_dbm ({self.high_dbm}) must be >= low_dbm ({self.low_dbm})")
        return self

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return rng.uniform(self.low_dbm, self.high_dbm, size)


class NormalDbm(_Strict):
    """Normal in dB (log-normal in watts), clipped to -30..60 dBm."""

    kind: Literal["normal"] = "normal"
    mean_dbm: PowerDbm
    std_db: Annotated[float, Field(ge=0, le=20)]

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return np.clip(self.mean_dbm + self.std_db * rng.standard_normal(size), -30.0, 60.0)


def _number_is_constant_dbm(value: Any) -> Any:
    """A plain number of dBm is a constant power."""
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        return {"kind": "constant", "value_dbm": value}
    return value


PowerLaw = Annotated[
    ConstantDbm | UniformDbm | NormalDbm,
    Field(discriminator="kind"),
    BeforeValidator(_number_is_constant_dbm),
]


class FadingConfig(_Strict):
    """Small-scale block fading, re-drawn every coherence_s (null: at every transmission)."""

    model: Literal["none", "rayleigh", "rician"] = "none"
    k_factor_db: Annotated[float, Field(ge=-30, le=40)] = Field(
        default=3.0, description="rician: line-of-sight over scattered power, dB"
    )
    coherence_s: Annotated[float, Field(ge=1e-3, le=MAX_TIME_S)] | None = Field(
        default=0.1,
        description="block length (0.1 s: a pedestrian at 2 GHz); null: per transmission",
    )


class OutageConfig(_Strict):
    """A block is lost below an SNR threshold, or with Chen et al.'s q = 1 - exp(-m / SNR)."""

    model: Literal["threshold", "packet_error"] = "threshold"
    snr_threshold_db: Annotated[float, Field(ge=-30, le=60)] = Field(
        default=0.0, description="threshold: the lowest scheme's SNR; it also floors the rate"
    )
    waterfall_m: Annotated[float, Field(gt=0, le=100)] = 0.023
    max_retransmissions: Annotated[int, Field(ge=0, le=100)] = 3


class MobilityConfig(_Strict):
    """Random waypoint in the cell (no pauses)."""

    speed_mps: Annotated[float, Field(gt=0, le=100)]
    update_s: Annotated[float, Field(ge=0.01, le=MAX_TIME_S)] = 1.0


class RadioConfig(_Strict):
    """Link rates from distance, path loss, shadowing, fading and the band (see the README's
    "Radio model"). Defaults: the single-cell setting of Chen et al. and Yang et al. (TWC 2021)."""

    cell_radius_m: Annotated[float, Field(gt=0, le=1e5)] = 500.0
    min_distance_m: Annotated[float, Field(gt=0, le=1e5)] = 10.0
    positions: Annotated[Path | None, _read_now_by("fedsim.sim.readers", "read_positions")] = Field(
        default=None, description="CSV client,x_m,y_m (relative to the working folder)"
    )
    path_loss: PathLossConfig = MacroPathLoss()
    shadowing_db: Annotated[float, Field(ge=0, le=30)] = Field(default=8.0, description="sigma")
    shadowing_coherence_s: Annotated[float, Field(ge=1e-3, le=MAX_TIME_S)] | None = None
    fading: FadingConfig = FadingConfig()
    noise_density_dbm_per_hz: Annotated[float, Field(ge=-220, le=-100)] = -174.0
    noise_figure_db: Annotated[float, Field(ge=0, le=30)] = 0.0
    tx_power_dbm: PowerLaw = Field(
        default=ConstantDbm(value_dbm=10.0),
        description="a number, {kind: uniform, low_dbm, high_dbm} or {kind: normal, mean_dbm, "
        "std_db}",
    )
    base_station_power_dbm: PowerDbm = 30.0
    uplink_bandwidth_hz: BandwidthHz = 20e6
    downlink_bandwidth_hz: BandwidthHz = 20e6
    d2d_bandwidth_hz: BandwidthHz = 10e6
    uplink_sharing: Literal["equal", "fixed", "tdma"] = "equal"
    uplink_subbands: Annotated[int, Field(ge=1, le=MAX_COUNT)] = Field(
        default=10, description="fixed: the band is cut into this many sub-bands, one per upload"
    )
    snr_gap_db: Annotated[float, Field(ge=0, le=20)] = 0.0
    max_bits_per_hz: Annotated[float, Field(gt=0, le=30)] | None = Field(
        default=None, description="cap on spectral efficiency (the highest scheme)"
    )
    outage: OutageConfig | None = None
    mobility: MobilityConfig | None = None

    @model_validator(mode="after")
    def _annulus(self) -> RadioConfig:
        if self.cell_radius_m <= self.min_distance_m:
            raise ValueError(
                f"cell_radius_m ({self.cell_radius_m:g}) must exceed min_distance_m "
                f"({self.min_distance_m:g})"
            )
        return self


# --- energy (optional): joules per client, batteries -------------------------------------------


class ChargingConfig(_Strict):
    """An empty battery recharges offline at power_w until resume_fraction of its capacity."""

    power_w: Annotated[float, Field(gt=0, le=1e4)]
    resume_fraction: Annotated[float, Field(gt=0, le=1)] = 0.8


class BatteryConfig(_Strict):
    capacity_j: PositiveDistribution = Field(description="per-client capacity (a number or a law)")
    initial_fraction: Annotated[float, Field(gt=0, le=1)] = 1.0
    min_fraction: Annotated[float, Field(ge=0, lt=1)] = Field(
        default=0.0, description="a client below this fraction of its capacity is not selected"
    )
    charging: ChargingConfig | None = Field(
        default=None, description="null: an empty client leaves for good"
    )


class EnergyConfig(_Strict):
    """Joules per client: compute (the cycles model), transmit, receive, idle; batteries.

    Defaults: Yang et al.'s model (TWC 2021), compute and transmit energy only."""

    tx_power_dbm: PowerLaw = Field(
        default=ConstantDbm(value_dbm=10.0),
        description="without system.radio (with it, radio.tx_power_dbm)",
    )
    circuit_power_w: Annotated[float, Field(ge=0, le=100)] = Field(
        default=0.0, description="added while transmitting"
    )
    rx_power_w: Annotated[float, Field(ge=0, le=100)] = 0.0
    idle_power_w: Annotated[float, Field(ge=0, le=100)] = Field(
        default=0.0, description="drawn all the time a client is online"
    )
    battery: BatteryConfig | None = None


class DevicesConfig(_Strict):
    """Per-client device profiles: FedScale's device capacity JSON (ms per sample, kbit/s) or
    a CSV client,compute_ms_per_sample,uplink_kbps[,downlink_kbps]. They give each client's
    compute time (per sample) and link rates (downlink: the file's, else rho x uplink)."""

    path: Path = Field(description="JSON or CSV, relative to the working folder")

    @field_validator("path")
    @classmethod
    def _readable(cls, path: Path) -> Path:
        from fedsim.sim.readers import read_device_profiles

        profiles = _read_referenced_file(path, read_device_profiles)
        for i, profile in enumerate(profiles):
            if not MIN_RATE_MBPS <= profile.uplink_bps / 1e6 <= MAX_RATE_MBPS:
                raise ValueError(f"{path}: entry {i}: uplink outside 1 bit/s..1 Tbit/s")
            if profile.compute_s_per_sample > MAX_COMPUTE_S:
                raise ValueError(f"{path}: entry {i}: over {MAX_COMPUTE_S:g} s per sample")
        return path


class SystemConfig(_Strict):
    network: NetworkConfig = NetworkConfig()
    compute: ComputeConfig = ComputeConfig()
    d2d: D2DConfig | None = None
    radio: RadioConfig | None = None
    energy: EnergyConfig | None = None
    devices: DevicesConfig | None = None

    @model_validator(mode="after")
    def _devices_set_rates_and_compute(self) -> SystemConfig:
        """Device profiles give each client's uplink rate and compute time: a rate or a
        compute law given as well would be silently ignored, so it is an error."""
        if self.devices is None:
            return self
        if self.radio is not None:
            raise ValueError(
                "system.devices: device profiles give fixed link rates; system.radio computes "
                "them from the channel: use one of the two"
            )
        given = [
            f"system.network.{name}"
            for name in ("uplink_mbps", "uplink_medium", "cell_capacity_mbps")
            if getattr(self.network, name) != NetworkConfig.model_fields[name].default
        ] + [
            f"system.compute.{name}"
            for name in ("model", "t_min_s", "mean_extra_s", "per")
            if getattr(self.compute, name) != ComputeConfig.model_fields[name].default
        ]
        if given:
            raise ValueError(
                f"{given[0]}: system.devices gives each client's uplink rate and compute time "
                "per sample: remove it"
            )
        return self

    @model_validator(mode="after")
    def _radio_sets_the_rates(self) -> SystemConfig:
        """With the radio, rates (and so rho) come from the channel: a fixed rate given as
        well would be silently ignored, so it is an error."""
        if self.radio is None:
            return self
        # Compared with the defaults, not by fields set: a sweep's variants are dumped in full.
        fixed = [
            f"network.{name}"
            for name in RADIO_REPLACES
            if getattr(self.network, name) != NetworkConfig.model_fields[name].default
        ]
        d2d_default_mbps = D2DConfig.model_fields["rate_mbps"].default
        if self.d2d is not None and self.d2d.rate_mbps != d2d_default_mbps:
            fixed.append("d2d.rate_mbps")
        energy = self.energy
        if (
            energy is not None
            and energy.tx_power_dbm != EnergyConfig.model_fields["tx_power_dbm"].default
        ):
            fixed.append("energy.tx_power_dbm")
        if fixed:
            instead = (
                "the transmit power is system.radio.tx_power_dbm"
                if fixed[0] == "energy.tx_power_dbm"
                else "the rates come from the channel (radio.uplink_sharing sets how uploads "
                "share the band)"
            )
            raise ValueError(f"system.{fixed[0]}: with system.radio {instead}: remove it")
        return self


RADIO_REPLACES = ("uplink_mbps", "rho", "uplink_medium", "cell_capacity_mbps")


class TrainingConfig(_Strict):
    optimizer: Literal["sgd", "adam"] = "sgd"
    lr: Annotated[float, Field(gt=0, le=MAX_LR)] = 0.05
    momentum: Annotated[float, Field(ge=0, lt=1)] = 0.0
    weight_decay: Annotated[float, Field(ge=0, le=1)] = 0.0
    batch_size: PositiveInt = 32
    local_epochs: PositiveInt | None = None
    local_steps: PositiveInt | None = None
    engine: Literal["auto", "loop", "vmap"] = Field(
        default="auto",
        description="how trainings of one architecture run: one by one (loop), vectorized "
        "across clients (vmap), or whichever was measured faster on this device (auto)",
    )
    threads: Annotated[int, Field(gt=0, le=MAX_THREADS)] = Field(
        default=1,
        description="torch intra-op threads per run (1: small models gain nothing from more, "
        "and lose badly when cores are shared); results depend on it",
    )
    device: Literal["cpu", "cuda"] = Field(
        default="cpu", description="where training and evaluation run"
    )
    precision: Literal["fp32", "bf16", "fp16"] = Field(
        default="fp32",
        description="compute precision (autocast; parameters stay fp32): bf16 and fp16 are "
        "faster where the hardware has them and change the numbers; fp16 needs cuda",
    )
    memory_format: Literal["auto", "contiguous", "channels_last"] = Field(
        default="auto",
        description="layout of convolution inputs; auto: channels_last only with bf16 (measured)",
    )

    @model_validator(mode="after")
    def _fp16_on_cuda(self) -> TrainingConfig:
        if self.precision == "fp16" and self.device != "cuda":
            raise ValueError(
                "precision fp16 needs device cuda (its loss scaling is for GPUs); on a CPU use bf16"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _one_work_unit(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        epochs, steps = data.get("local_epochs"), data.get("local_steps")
        if epochs is not None and steps is not None:
            raise ValueError("give local_epochs or local_steps, not both")
        if epochs is None and steps is None:
            return {**data, "local_epochs": 1}
        return data


# --- algorithms ------------------------------------------------------------------------------


class _AlgorithmBase(_Strict):
    label: Annotated[str, AfterValidator(_label_name)] | None = Field(
        default=None,
        description="results folder name (letters, digits, _ . + = @ -); default: the algorithm",
    )

    @property
    def run_label(self) -> str:
        return self.label or self.name  # type: ignore[attr-defined]


class LocalConfig(_AlgorithmBase):
    """Every client trains alone on its own data: no communication (the floor to beat)."""

    name: Literal["local"]


class SyncServerConfig(_AlgorithmBase):
    """How a synchronous server picks clients and closes a round."""

    client_fraction: Fraction = 1.0
    deadline_s: Seconds | None = Field(
        default=None, description="close the round this long after it starts; drop the late"
    )
    over_selection: Annotated[float, Field(ge=0, le=100)] = Field(
        default=0.0, description="select (1 + x) times as many (x <= 100), keep the first arrivals"
    )


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
    lr: Annotated[float, Field(gt=0, le=MAX_LR)] = Field(
        default=1.0, description="η, the server learning rate (default depends on name)"
    )
    betas: tuple[Annotated[float, Field(ge=0, lt=1)], Annotated[float, Field(ge=0, lt=1)]] = Field(
        default=(0.9, 0.99), description="β₁ (momentum's β), β₂"
    )
    tau: Annotated[float, Field(gt=0, le=1)] = Field(
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


class FedAvgMConfig(_FedOptPreset):
    """FedAvgM (Hsu et al. 2019): server momentum."""

    name: Literal["fedavgm"]
    preset: ClassVar[str] = "momentum"


class FedAdagradConfig(_FedOptPreset):
    """FedAdagrad (Reddi et al. 2021): Adagrad on the averaged update at the server."""

    name: Literal["fedadagrad"]
    preset: ClassVar[str] = "adagrad"


class FedAdamConfig(_FedOptPreset):
    """FedAdam (Reddi et al. 2021): Adam on the averaged update at the server."""

    name: Literal["fedadam"]
    preset: ClassVar[str] = "adam"


class FedYogiConfig(_FedOptPreset):
    """FedYogi (Reddi et al. 2021): Yogi on the averaged update at the server."""

    name: Literal["fedyogi"]
    preset: ClassVar[str] = "yogi"


class ScaffoldConfig(FedAvgFamilyConfig):
    """SCAFFOLD (Karimireddy et al. 2020): control variates correct each local step."""

    name: Literal["scaffold"]
    control_update: Literal["I", "II"] = Field(
        default="II",
        description="c_i+: I = the gradient of the local training set at x (one more pass of "
        "compute); II = c_i - c + (x - y_i) / (K lr) (the paper's experiments)",
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


UpdateNorm = Annotated[float, Field(gt=0, le=1e6)]


class CflConfig(FedAvgFamilyConfig):
    """Clustered FL (Sattler et al.): bipartition a cluster by update cosine similarity."""

    name: Literal["cfl"]
    eps1: UpdateNorm = Field(default=0.4, description="split when the mean update norm < eps1")
    eps2: UpdateNorm = Field(default=1.6, description="... and the max update norm > eps2")
    warmup_rounds: Annotated[int, Field(ge=0, le=MAX_ROUNDS)] = 20
    max_clusters: PositiveInt = 8


class FedFomoConfig(SyncServerConfig):
    """Each client downloads M peer models and weighs them on its validation split."""

    name: Literal["fedfomo"]
    models_per_client: PositiveInt = Field(default=5, description="M")
    epsilon: Annotated[float, Field(ge=0, le=1)] = Field(
        default=0.3, description="exploration: chance of a random peer instead of a top one"
    )
    validation_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.2


class UcflConfig(SyncServerConfig):
    """User-centric FL: eq. (9) collaboration weights, k personalized downlink streams."""

    name: Literal["ucfl"]
    streams: PositiveInt | Literal["auto", "all"] = Field(
        default="auto", description="k: a number, 'all' (k = m), or 'auto' (Algorithm 2)"
    )
    tradeoff: Literal["silhouette", "penalized", "per_round_time"] = Field(
        default="silhouette",
        description="c(k, s_k): s (the authors' code), s - tradeoff_lambda * k, or s / T_round(k)",
    )
    tradeoff_lambda: Weight = 0.01
    max_streams: PositiveInt | None = None
    variance_batches: Annotated[int, Field(ge=2, le=MAX_COUNT)] = Field(
        default=3, description="K batches of n_i / K samples for sigma_i^2 (paper: N/3)"
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


class PerFedCktConfig(SyncServerConfig):
    """PerFed-CKT: clustered co-distillation through outputs on a public unlabeled set."""

    name: Literal["perfed_ckt"]
    clusters: PositiveInt = Field(default=3, description="c (paper: 3 homogeneous, 2 mixed)")
    distill_weight: Weight = Field(default=2.0, description="lambda (paper: 2)")
    public_samples: PositiveInt = Field(default=2000, description="|P| (paper: 2000)")
    public_batch_size: PositiveInt = Field(default=128, description="b' (paper: 128)")
    sample_by_size: bool = Field(default=True, description="selection probability ∝ n_k")


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
    staleness_b: Annotated[float, Field(ge=0, le=MAX_ROUNDS)] = 4.0
    max_staleness: Annotated[int, Field(ge=0, le=MAX_ROUNDS)] | None = Field(
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

    deadline_s: Seconds | None = Field(
        default=None,
        description="close a round this long after it starts; messages still on the air are lost",
    )


UnitInterval = Annotated[float, Field(ge=0, le=1)]


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


class CoboConfig(DecentralizedConfig):
    """CoBo (Alg. 1): pairwise weights from midpoint gradients; penalty pulls collaborators."""

    name: Literal["cobo"]
    penalty: Weight = Field(default=0.05, description="ρ of the paper (code: 0.05)")
    weight_lr: Annotated[float, Field(gt=0, le=MAX_WEIGHT)] = Field(
        default=0.01, description="γ, step of the weight ascent"
    )
    pair_sampling: Literal["constant", "decaying", "mixed", "all"] = Field(
        default="mixed", description="p_t: p; p/t; p then p T0/t after T0 rounds; every pair"
    )
    pair_probability: Fraction | None = Field(
        default=None, description="p per unordered pair and round (default 1/n, n clients online)"
    )
    switch_fraction: Fraction = Field(
        default=0.002, description="mixed: T0 = ceil(switch_fraction * run.rounds) (paper: 0.2%)"
    )
    decay: Literal["inverse", "inverse_sqrt"] = Field(
        default="inverse", description="decaying/mixed law: 1/t (paper) or 1/sqrt(t) (code)"
    )
    local_steps: PositiveInt = Field(
        default=1, description="SGD steps per round (paper: 1) with the penalty held fixed"
    )
    weight_batch_size: PositiveInt | None = Field(
        default=None,
        description="mini-batch of each midpoint gradient (default training.batch_size; "
        "capped at the client's training set, which then gives its full gradient)",
    )
    join_weight: UnitInterval = Field(
        default=0.0, description="w between a newcomer and everyone (1 would drag all to it)"
    )
    phase_timeout_s: Seconds | None = Field(
        default=None,
        description="wait this long for a pair's reply and again for the collaborators' models "
        "(default: a third of deadline_s; without a deadline, for all of them)",
    )


class DsgdConfig(DecentralizedConfig):
    """Decentralized SGD: local training, then gossip averaging with the D2D neighbours."""

    name: Literal["dsgd"]


AlgorithmConfig = Annotated[
    LocalConfig
    | FedAvgConfig
    | FedAvgMConfig
    | FedAdagradConfig
    | FedAdamConfig
    | FedYogiConfig
    | ScaffoldConfig
    | FedProxConfig
    | FedAvgFTConfig
    | DittoConfig
    | OracleConfig
    | IfcaConfig
    | CflConfig
    | FedFomoConfig
    | UcflConfig
    | PerFedCktConfig
    | FedAsyncConfig
    | FedBuffConfig
    | FedericoConfig
    | CoboConfig
    | DsgdConfig,
    Field(discriminator="name"),
]


# --- run, evaluation, output -----------------------------------------------------------------


class RunConfig(_Strict):
    rounds: Rounds | None = Field(default=None, description=f"at most {MAX_ROUNDS:,}")
    time_budget_s: Seconds | None = Field(
        default=None, description="simulated s, <= 1e7 (~116 days)"
    )

    @model_validator(mode="after")
    def _bounded(self) -> RunConfig:
        if self.rounds is None and self.time_budget_s is None:
            raise ValueError("set rounds, time_budget_s or both, so the run ends")
        return self


class EvaluationConfig(_Strict):
    """When to measure: every few rounds, or every few simulated seconds (not both).

    A time cadence compares algorithms at the same instants and keeps measuring when
    rounds stall (churn) or do not exist (asynchronous and decentralized algorithms).
    """

    every_rounds: Rounds | None = None
    every_s: Annotated[float, Field(ge=1e-3, le=MAX_TIME_S)] | None = None
    target_accuracy: Fraction | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_cadence(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if data.get("every_rounds") is not None and data.get("every_s") is not None:
            raise ValueError("give every_rounds or every_s, not both")
        if data.get("every_rounds") is None and data.get("every_s") is None:
            return {**data, "every_rounds": 1}
        return data


class OutputConfig(_Strict):
    dir: Path = Path("results")
    events: bool = Field(default=False, description="write every event to events.jsonl")


MIXABLE_ALGORITHMS = ("local", "perfed_ckt")  # they never add up different clients' parameters


class Scenario(_Strict):
    name: Annotated[str, AfterValidator(_scenario_name)] = Field(
        description="results folder name: letters, digits, _ . + -"
    )
    seed: Annotated[int, Field(ge=0, le=MAX_SEED)] = 0
    dataset: DatasetConfig
    model: ModelConfig
    clients: ClientsConfig
    system: SystemConfig = SystemConfig()
    training: TrainingConfig = TrainingConfig()
    algorithms: Annotated[list[AlgorithmConfig], Field(min_length=1)]
    run: RunConfig
    evaluation: EvaluationConfig = EvaluationConfig()
    output: OutputConfig = OutputConfig()
    sweep: dict[str, Annotated[list[SweepValue], Field(min_length=1)]] = Field(
        default={},
        description="dotted key -> values (numbers, strings, booleans, null): every combination "
        f"(at most {MAX_SWEEP_RUNS}) runs on its own world",
    )

    @field_validator("algorithms")
    @classmethod
    def _unique_labels(cls, algorithms: list[AlgorithmConfig]) -> list[AlgorithmConfig]:
        labels = [a.run_label.casefold() for a in algorithms]  # folders: case may not count
        repeated = sorted({label for label in labels if labels.count(label) > 1})
        if repeated:
            raise ValueError(
                f"two runs share the label {repeated[0]!r} (case aside: they name folders): give "
                "each a distinct `label`"
            )
        return algorithms

    @model_validator(mode="after")
    def _oracle_needs_groups(self) -> Scenario:
        grouped = self.dataset.partition.kind == "label_groups" or self.dataset.group_shift
        for i, algorithm in enumerate(self.algorithms):
            if algorithm.name == "oracle" and not grouped:
                raise ValueError(
                    f"algorithms[{i}].name: oracle needs true groups: use partition "
                    "label_groups or a dataset.group_shift"
                )
        return self

    @model_validator(mode="after")
    def _group_sizes_cover_the_clients(self) -> Scenario:
        shift = self.dataset.group_shift
        clients = self.clients.count + self.clients.arrivals.reserve
        if shift is not None and shift.sizes is not None and sum(shift.sizes) != clients:
            raise ValueError(
                f"dataset.group_shift.sizes: they sum to {sum(shift.sizes)}, but there are "
                f"{clients} clients (clients.count plus the arrivals' reserve)"
            )
        return self

    @model_validator(mode="after")
    def _gossip_needs_a_graph(self) -> Scenario:
        for i, algorithm in enumerate(self.algorithms):
            if algorithm.name == "dsgd" and self.system.d2d is None:
                raise ValueError(
                    f"algorithms[{i}].name: dsgd gossips with its D2D neighbours: add a "
                    "system.d2d section (its graph)"
                )
        return self

    @model_validator(mode="after")
    def _cobo_penalty_step_is_stable(self) -> Scenario:
        """CoBo's X-step is an explicit gradient step on ρ Σ_k w_ik ||x_i − x_k||²/2: with
        W⁰ = 1 every client pulls every other, and with SGD the step contracts the models'
        differences only while lr · ρ · (n − 1) < 2 (1 + momentum); beyond that they blow up
        before the W-step can cut the links."""
        training = self.training
        if training.optimizer != "sgd":
            return self
        bound = 2 * (1 + training.momentum)
        for i, algorithm in enumerate(self.algorithms):
            if not isinstance(algorithm, CoboConfig):
                continue
            step = training.lr * algorithm.penalty * (self.clients.count - 1)
            if step >= bound:
                raise ValueError(
                    f"algorithms[{i}].penalty: lr x penalty x (clients - 1) = {step:.3g} with "
                    f"W0 = 1, at or over {bound:g}: the penalized SGD step diverges; use "
                    f"penalty < {bound / (training.lr * max(self.clients.count - 1, 1)):.3g}"
                )
        return self

    @model_validator(mode="after")
    def _mixed_models_do_not_average(self) -> Scenario:
        if not self.model.mix:
            return self
        for i, algorithm in enumerate(self.algorithms):
            if algorithm.name not in MIXABLE_ALGORITHMS:
                raise ValueError(
                    f"algorithms[{i}].name: {algorithm.name} averages parameters, so every client "
                    f"needs the same model; model.mix works with {', '.join(MIXABLE_ALGORITHMS)}"
                )
        return self

    @model_validator(mode="after")
    def _renewal_churn_needs_a_time_budget(self) -> Scenario:
        """On/off renewals never stop. A deadline closes every synchronous round, but Local and
        asynchronous runs count completed work, and work longer than the online periods never
        completes: without a time budget such a run (or its budget) would never end."""
        if self.clients.availability.kind != "renewal" or self.run.time_budget_s is not None:
            return self
        for i, algorithm in enumerate(self.algorithms):
            if isinstance(algorithm, LocalConfig | AsyncServerConfig):
                raise ValueError(
                    f"run.time_budget_s: required for algorithms[{i}] ({algorithm.name}) with "
                    "clients.availability 'renewal': clients go offline and come back forever, "
                    "and work longer than the online periods never completes, so rounds alone "
                    "may never end the run"
                )
        return self

    @model_validator(mode="after")
    def _dropouts_need_deadlines(self) -> Scenario:
        if not self.clients.can_drop_out:
            return self
        for i, algorithm in enumerate(self.algorithms):
            if (
                isinstance(algorithm, SyncServerConfig | DecentralizedConfig)
                and algorithm.deadline_s is None
            ):
                raise ValueError(
                    f"algorithms[{i}].deadline_s: required when clients can go offline or "
                    "leave (a lost update or message is only noticed through the deadline)"
                )
            if isinstance(algorithm, AsyncServerConfig) and algorithm.task_timeout_s is None:
                raise ValueError(
                    f"algorithms[{i}].task_timeout_s: required when clients can go offline or "
                    "leave (a lost client's slot is freed only by the timeout)"
                )
        return self

    @model_validator(mode="after")
    def _traces_cover_the_clients(self) -> Scenario:
        """A device or availability trace must have an entry for every client."""
        from fedsim.sim.readers import read_availability, read_device_profiles

        traces = []
        if self.system.devices is not None:
            traces.append(("system.devices.path", self.system.devices.path, read_device_profiles))
        if self.clients.availability.kind == "intervals":
            traces.append(
                ("clients.availability.path", self.clients.availability.path, read_availability)
            )
        for field_name, path, read in traces:
            entries = len(_read_referenced_file(path, read))
            if entries < self.clients.total:
                raise ValueError(
                    f"{field_name}: {path} has {entries} clients, the scenario "
                    f"{self.clients.total} (clients.count plus the arrivals' reserve)"
                )
        return self

    @model_validator(mode="after")
    def _positions_cover_the_clients(self) -> Scenario:
        radio = self.system.radio
        if radio is None or radio.positions is None:
            return self
        from fedsim.sim.readers import read_positions

        placed = _read_referenced_file(radio.positions, read_positions)
        missing = sorted(set(range(self.clients.total)) - set(placed))
        if missing:
            shown = ", ".join(map(str, missing[:5])) + (", ..." if len(missing) > 5 else "")
            raise ValueError(
                f"system.radio.positions: {radio.positions} places no client {shown} "
                f"({len(missing)} of the {self.clients.total} clients, reserve included)"
            )
        return self

    @model_validator(mode="after")
    def _edge_list_fits_the_clients(self) -> Scenario:
        """Read the D2D edge-list file now (it needs the number of clients): a missing,
        malformed or disconnected one is found by validate, not when the world is built."""
        d2d = self.system.d2d
        if d2d is None or d2d.edge_list is None:
            return self
        from fedsim.sim.topology import build_graph  # networkx: only for edge lists

        def read(path: Path) -> Any:
            rng = np.random.default_rng(0)  # an edge list draws nothing
            return build_graph("edge_list", self.clients.total, rng, edge_list_path=path)

        try:
            graph = _read_referenced_file(d2d.edge_list, read)
        except ValueError as error:
            raise ValueError(f"system.d2d.edge_list: {error}") from None
        for u, v, rate_bps in graph.edges(data="rate_bps"):
            if rate_bps is not None and not MIN_RATE_MBPS <= rate_bps / 1e6 <= MAX_RATE_MBPS:
                raise ValueError(
                    f"system.d2d.edge_list: edge {u}-{v} has rate {rate_bps / 1e6:g} Mbps, "
                    f"outside {MIN_RATE_MBPS:g}..{MAX_RATE_MBPS:g}"
                )
        return self

    @model_validator(mode="after")
    def _sweep_values_are_valid(self) -> Scenario:
        self.variants()  # raises, naming the swept key, if a combination is invalid
        return self

    def variants(self) -> list[Scenario]:
        """One scenario per combination of the sweep (just this one without a sweep).

        Each variant's runs are labelled ``<label>@<key>=<value>`` so that all of them
        land side by side in this scenario's results folder.
        """
        if not self.sweep:
            return [self]
        base = self.model_dump(mode="json", exclude={"sweep"})
        keys = list(self.sweep)
        combinations = int(np.prod([len(self.sweep[k]) for k in keys], dtype=float))
        if combinations > MAX_SWEEP_RUNS:
            raise ValueError(
                f"sweep: {combinations:,} combinations; at most {MAX_SWEEP_RUNS} (each is a run)"
            )
        variants, suffixes = [], set()
        for values in itertools.product(*(self.sweep[k] for k in keys)):
            data = copy.deepcopy(base)
            suffix = ",".join(
                f"{k.rsplit('.', 1)[-1]}={v}" for k, v in zip(keys, values, strict=True)
            )
            if suffix.casefold() in suffixes:  # e.g. [1, 1], or [a, A] on a case-blind disk
                raise ValueError(
                    f"sweep.{keys[0]}: two combinations are both labelled {suffix!r}, so their "
                    "runs would share a results folder: list each value once"
                )
            suffixes.add(suffix.casefold())
            for key, value in zip(keys, values, strict=True):
                _set_dotted(data, key, value)
            for algorithm in data["algorithms"]:
                algorithm["label"] = f"{algorithm['label'] or algorithm['name']}@{suffix}"
            try:
                variants.append(Scenario.model_validate(data))
            except ValidationError as error:
                first = _describe(error.errors()[0])
                raise ValueError(
                    f"sweep.{keys[0]}: the combination {suffix} is invalid: {first}"
                ) from None
        return variants

    def results_dir(self) -> Path:
        return self.output.dir / self.name

    def to_yaml(self, algorithms: list[AlgorithmConfig] | None = None) -> str:
        """The resolved scenario (defaults filled in), optionally narrowed to some runs."""
        data = self.model_dump(mode="json")
        if algorithms is not None:
            data["algorithms"] = [a.model_dump(mode="json") for a in algorithms]
        return yaml.safe_dump(data, sort_keys=False)


def _set_dotted(data: dict, key: str, value: Any) -> None:
    *parents, last = key.split(".")
    node = data
    for part in parents:
        if not isinstance(node.get(part), dict):
            raise ValueError(f"sweep.{key}: {part!r} is not a section of the scenario")
        node = node[part]
    if last not in node:
        raise ValueError(
            f"sweep.{key}: {last!r} is not a key of {'.'.join(parents) or 'the scenario'}"
        )
    node[last] = value


# --- loading and error messages ---------------------------------------------------------------


_TAG_MODELS: dict[str, type[BaseModel]] = {
    "constant": Constant,
    "uniform": Uniform,
    "lognormal": LogNormal,
    "always": AlwaysOnline,
    "renewal": RenewalAvailability,
    "trace": TraceAvailability,
    "intervals": IntervalsAvailability,
    "macro": MacroPathLoss,
    "log_distance": LogDistancePathLoss,
    "free_space": FreeSpacePathLoss,
    "normal": NormalDbm,
    "iid": IidPartition,
    "dirichlet": DirichletPartition,
    "label_groups": LabelGroupsPartition,
    "local": LocalConfig,
    "fedavg": FedAvgConfig,
    "fedavgm": FedAvgMConfig,
    "fedadagrad": FedAdagradConfig,
    "fedadam": FedAdamConfig,
    "fedyogi": FedYogiConfig,
    "scaffold": ScaffoldConfig,
    "fedprox": FedProxConfig,
    "fedavg_ft": FedAvgFTConfig,
    "ditto": DittoConfig,
    "oracle": OracleConfig,
    "ifca": IfcaConfig,
    "cfl": CflConfig,
    "fedfomo": FedFomoConfig,
    "ucfl": UcflConfig,
    "perfed_ckt": PerFedCktConfig,
    "fedasync": FedAsyncConfig,
    "fedbuff": FedBuffConfig,
    "federico": FedericoConfig,
    "cobo": CoboConfig,
    "dsgd": DsgdConfig,
}
_UNION_TAGS = set(_TAG_MODELS)
ALGORITHM_NAMES = tuple(
    tag for tag, model in _TAG_MODELS.items() if issubclass(model, _AlgorithmBase)
)  # pydantic puts these in error paths


def algorithm_model(name: str) -> type[BaseModel]:
    """The options model of an algorithm name (``fedsim algorithms``)."""
    return _TAG_MODELS[name]


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key given twice (PyYAML would keep the last silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, (str, int, float, bool, type(None))):
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"a key must be a plain name, not a {type(key).__name__}",
                    key_node.start_mark,
                )
            if key in seen:
                line = key_node.start_mark.line + 1
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice (line {line})", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _field_path(loc: tuple) -> str:
    path = ""
    for previous, part in zip((None, *loc), loc, strict=False):
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in _UNION_TAGS or (previous == "constant" and part in ("value", "value_dbm")):
            continue  # pydantic's own union bookkeeping; the user never wrote these keys
        else:
            part = _key_text(part)
            path += f".{part}" if path else part
    return path or "(top level)"


def _model_at(loc: tuple) -> type[BaseModel] | None:
    """The model class that holds the field at loc (to list valid keys)."""
    model: Any = Scenario
    annotation: Any = None
    for part in loc:
        if isinstance(part, int):
            continue
        if part in _UNION_TAGS:
            model = _tagged_member(annotation, part)
            continue
        field = model.model_fields.get(part) if isinstance(model, type) else None
        if field is None:
            return None
        annotation = field.annotation
        model = _field_model(annotation)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _tagged_member(annotation: Any, tag: str) -> type[BaseModel]:
    """The member of the union at hand whose tag is ``tag`` (``uniform`` is a rate law in one
    place and a power law in another)."""
    for member in _models_in(annotation):
        for name in ("kind", "name"):
            field = member.model_fields.get(name)
            if field is not None and tag in getattr(field.annotation, "__args__", ()):
                return member
    return _TAG_MODELS[tag]


def _field_model(annotation: Any) -> Any:
    for candidate in getattr(annotation, "__args__", ()) or ():
        found = _field_model(candidate)
        if found is not None:
            return found
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """Every model class an annotation mentions (the members of a union, a list's items)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in getattr(annotation, "__args__", ()) or () for m in _models_in(arg)]


def _union_tags(loc: tuple, discriminator: str) -> list[str]:
    """The valid values of the tag of the union at loc (pydantic lists none when it is missing)."""
    model: Any = Scenario
    annotation: Any = None
    for part in loc:
        if isinstance(part, int):
            continue
        if part in _UNION_TAGS:
            model = _tagged_member(annotation, part)
            continue
        fields = getattr(model, "model_fields", {}) if isinstance(model, type) else {}
        if part not in fields:
            return []
        annotation = fields[part].annotation
        model = _field_model(annotation)
    tags = []
    for member in _models_in(annotation):
        field = member.model_fields.get(discriminator)
        if field is not None:
            tags += [tag for tag in getattr(field.annotation, "__args__", ()) if tag not in tags]
    return tags


def _key_text(key: Any) -> str:
    """A key as written, or quoted when it is not a plain name (spaces, line breaks, ...)."""
    return (
        key
        if isinstance(key, str) and re.fullmatch(r"[\w.-]{1,60}", key, re.ASCII)
        else _shown(key)
    )


def _shown(value: Any) -> str:
    """A short rendering of a bad value (a 5000-digit number would drown the message)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {int(value.bit_length() * 0.30103) + 1} digits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _describe(error: dict) -> str:
    loc = tuple(error["loc"])
    path = _field_path(loc)
    if error["type"] == "extra_forbidden":
        parent = _model_at(loc[:-1])
        valid = sorted(parent.model_fields) if parent else []
        hint = difflib.get_close_matches(str(loc[-1]), valid, n=1)
        suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
        parent_path = _field_path(loc[:-1])  # the unknown key itself is never a union tag
        key = _key_text(loc[-1])
        path = key if parent_path == "(top level)" else f"{parent_path}.{key}"
        return f"{path}: unknown key{suggestion}; valid keys: {', '.join(valid)}"
    if error["type"] == "union_tag_invalid":
        context = error["ctx"]
        return (
            f"{path}.{context['discriminator'].strip(chr(39))}: unknown {_shown(context['tag'])}; "
            f"valid: {context['expected_tags']}"
        )
    if error["type"] == "union_tag_not_found":
        key = error["ctx"]["discriminator"].strip("'")
        valid = ", ".join(repr(tag) for tag in _union_tags(loc, key))
        return f"{path}.{key}: missing key {key!r}; valid: {valid}"
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "int_parsing_size":
        message = "Input is too large for a whole number"
    if error["type"] in ("model_type", "model_attributes_type", "dict_type"):
        message = "Input should be a mapping of keys (a section)"
    if loc and loc[-1] == "[key]":  # a mapping's key, e.g. a sweep key that is not a string
        path, message = _field_path(loc[:-2]), f"key {loc[-2]!r}: {message}"
    if not loc and re.match(r"^[\w.\[\]]+: ", message):
        return message  # a cross-field check that names its own field
    value = error.get("input")
    named = isinstance(value, str) and value in message  # e.g. a file path the message names
    shown = isinstance(value, (int, float, str, bool)) and not named
    if error["type"] != "missing" and shown:
        message += f" (got {_shown(value)})"
    return f"{path}: {message}"


def parse_scenario(data: Any, source: str = "<scenario>") -> Scenario:
    if data is None:
        raise ScenarioError(source, ["(top level): the scenario is empty"])
    if not isinstance(data, dict):
        raise ScenarioError(
            source, [f"(top level): a scenario must be a mapping of keys, not a {_kind(data)}"]
        )
    try:
        return Scenario.model_validate(data)
    except ValidationError as error:
        raise ScenarioError(source, [_describe(e) for e in error.errors()]) from None


def apply_overrides(data: Any, overrides: Sequence[str]) -> Any:
    """The scenario data with ``key=value`` overrides applied (``fedsim run --set``).

    A key is a dotted path (``system.network.rho``), with list indices as ``algorithms[0]``;
    ``sweep.<dotted key>`` sets a sweep's values. A value is read as YAML (``2``, ``true``,
    ``[1, 2, 4]``, ``{kind: uniform, low: 1, high: 3}``); sections that do not exist yet are
    created. The result is validated like the file, so a wrong key or value names its field.
    """
    if not overrides:
        return data
    data = copy.deepcopy(data) if isinstance(data, dict) else {}
    for override in overrides:
        key, equals, text = override.partition("=")
        key = key.strip()
        if not equals or not key:
            raise ScenarioError("--set", [f"--set {override!r}: expected key=value"])
        try:
            value = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (SafeLoader subclass)
        except yaml.YAMLError as error:
            raise ScenarioError(
                "--set", [f"--set {key}: invalid value {text!r}: {error}"]
            ) from None
        if key.startswith("sweep."):
            data.setdefault("sweep", {})
            if not isinstance(data["sweep"], dict):
                raise ScenarioError("--set", [f"--set {key}: sweep is not a mapping"])
            data["sweep"][key.removeprefix("sweep.")] = value
            continue
        _set_path(data, key, value)
    return data


def _set_path(data: dict, key: str, value: Any) -> None:
    """data[a][b][i]... = value for key ``a.b[i]...``; missing sections become mappings."""
    parts: list[str | int] = []
    for name in key.split("."):
        match = re.fullmatch(r"([^\[\]]+)((?:\[\d+\])*)", name)
        if match is None:
            raise ScenarioError("--set", [f"--set {key}: {name!r} is not a key or key[index]"])
        parts.append(match.group(1))
        parts += [int(i) for i in re.findall(r"\[(\d+)\]", match.group(2))]
    node: Any = data
    for i, part in enumerate(parts[:-1]):
        where = ".".join(str(p) for p in parts[: i + 1])
        if isinstance(part, int):
            if not isinstance(node, list) or part >= len(node):
                raise ScenarioError("--set", [f"--set {key}: {where} has no item {part}"])
            node = node[part]
            continue
        if not isinstance(node, dict):
            raise ScenarioError("--set", [f"--set {key}: {where} is not a section"])
        if not isinstance(node.get(part), (dict, list)):
            node[part] = [] if isinstance(parts[i + 1], int) else {}
        node = node[part]
    last = parts[-1]
    if isinstance(last, int):
        if not isinstance(node, list) or last >= len(node):
            raise ScenarioError("--set", [f"--set {key}: no item {last} to set"])
    elif not isinstance(node, dict):
        raise ScenarioError("--set", [f"--set {key}: its parent is not a section"])
    node[last] = value


def load_scenario(path: str | Path, overrides: Sequence[str] = ()) -> Scenario:
    """Read and validate a scenario YAML file, with ``key=value`` overrides applied (see
    ``apply_overrides``); raises ScenarioError on any problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ScenarioError(str(path), [f"cannot read the file: {error.strerror}"]) from None
    except UnicodeDecodeError as error:
        byte = error.object[error.start]
        raise ScenarioError(
            str(path), [f"not a UTF-8 text file (byte {byte:#04x} at offset {error.start})"]
        ) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(error, "problem", None) or str(error)
        raise ScenarioError(str(path), [f"invalid YAML: {where}{problem}"]) from None
    except RecursionError:
        raise ScenarioError(str(path), ["invalid YAML: nested too deeply"]) from None
    except ValueError as error:  # e.g. an integer of more than 4300 digits
        raise ScenarioError(str(path), [f"invalid YAML: {error}"]) from None
    source = str(path) + (" with --set " + " ".join(overrides) if overrides else "")
    return parse_scenario(apply_overrides(data, overrides), source)


def _kind(value: Any) -> str:
    """What a YAML value is, in the file's words."""
    if isinstance(value, list):
        return "list"
    return "single value" if not isinstance(value, dict) else "mapping"
