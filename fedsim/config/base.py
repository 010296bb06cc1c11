"""The ground every section of the schema stands on: the strict base model, the bounds of
every number, the annotated number types, the checks of names that become folders, and the
reading of files a scenario refers to.
"""

from __future__ import annotations

import csv
import functools
import operator
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, get_args

import numpy as np
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError


class ScenarioError(Exception):
    """Bad scenario input; ``problems`` are ``field.path: reason`` lines."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        # args are the constructor's, so that the error survives a copy (SimPy re-raises a
        # failed process's exception as type(e)(*e.args)) and pickling (worker processes)
        super().__init__(source, problems)

    def __str__(self) -> str:
        return f"{self.source}: " + "; ".join(self.problems)


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
MIN_RATE_MBPS, MAX_RATE_MBPS = 1e-4, 1e6  # 100 bit/s .. 1 Tbit/s (the reasons: BOUND_REASONS)
MAX_LATENCY_S = 60.0  # a transfer's set-up and propagation delay
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

# Why the bounds of a simulated quantity lie where they do, said beside the refusal: keyed by
# the unit a field's name ends with and the bound. A setting past them would make one transfer
# or computation last longer than any study runs (a model crossing a 1e-300 Mbit/s backhaul in
# 1e300 s), not a result anyone can use.
BOUND_REASONS: dict[tuple[str, float], str] = {
    ("_mbps", MIN_RATE_MBPS): "no radio a model is sent over is slower (LoRa's slowest rate is "
    "250 bit/s); at 100 bit/s a 100 kB model already takes over 2 hours",
    ("_mbps", MAX_RATE_MBPS): "1 Tbit/s is faster than any link a client has",
    ("latency_s", MAX_LATENCY_S): "a transfer's set-up and propagation delay: a geostationary "
    "satellite hop takes 0.27 s, a cellular attach under a second",
    ("_s", MAX_TIME_S): "about 116 days, longer than any study simulates",
    ("_s", MAX_COMPUTE_S): "a day of computing per unit of work (a round, a step or a sample)",
    ("_dbm", -30.0): "1 µW: no transmitter that reaches a base station radiates less",
    ("_dbm", 60.0): "1 kW: more than any base station radiates",
    ("_hz", 1e3): "a band narrower than 1 kHz carries no model in a useful time",
}

BOOL_NOT_NUMBER = "bool_not_number"  # the error type of a true/false given for a number
TEXT_NOT_NUMBER = "text_not_number"  # ... of a number given as text ("4", quoted)


def _not_a_boolean(value: Any) -> Any:
    """Refuse YAML's true/false and quoted numbers where a number is due: pydantic's lax mode
    would read them as numbers, so that ``rounds: true`` ran one round and ``cloud_every: "4"``
    four. (YAML's unquoted ``1e3`` is a number: the loader reads it as YAML 1.2 does.) Text
    that is no number passes on, for the unions that also take a word (``vmap_chunk: auto``)."""
    if isinstance(value, bool):
        raise PydanticCustomError(BOOL_NOT_NUMBER, "Input should be a number, not true/false")
    if isinstance(value, str) and _reads_as_number(value):
        raise PydanticCustomError(
            TEXT_NOT_NUMBER,
            "Input should be a number, not text ('{text}'): write it without quotes",
            {"text": value},
        )
    return value


_DIGITS = re.compile(r"\s*[-+]?(\d[\d_]*(\.\d*)?|\.\d+)([eE][-+]?\d+)?\s*")


def _reads_as_number(text: str) -> bool:
    """Whether text is a number written in digits (``"4"``, ``"1e3"``; not ``inf``, which is
    refused as no finite number)."""
    return _DIGITS.fullmatch(text) is not None


# Every number of the schema carries NO_BOOL (tests/test_config.py walks the schema to check).
# It comes after the bounds: before them, pydantic would move the bounds out of the number's
# own schema (the JSON Schema would change) and rename a union's number member in error paths.
# A union holding a number carries it on the whole union too, so true/false is one problem.
NO_BOOL = BeforeValidator(_not_a_boolean)

PositiveInt = Annotated[int, Field(gt=0, le=MAX_COUNT), NO_BOOL]
NonNegativeInt = Annotated[int, Field(ge=0, le=MAX_COUNT), NO_BOOL]
Rounds = Annotated[int, Field(gt=0, le=MAX_ROUNDS), NO_BOOL]
Fraction = Annotated[float, Field(gt=0, le=1), NO_BOOL]
RateMbps = Annotated[float, Field(ge=MIN_RATE_MBPS, le=MAX_RATE_MBPS), NO_BOOL]
Seconds = Annotated[float, Field(gt=0, le=MAX_TIME_S), NO_BOOL]
Instant = Annotated[float, Field(ge=0, le=MAX_TIME_S), NO_BOOL]
LatencySeconds = Annotated[float, Field(ge=0, le=MAX_LATENCY_S), NO_BOOL]
ComputeSeconds = Annotated[float, Field(ge=0, le=MAX_COMPUTE_S), NO_BOOL]
EventRate = Annotated[float, Field(ge=0, le=MAX_EVENT_RATE_PER_S), NO_BOOL]
Factor = Annotated[float, Field(ge=1 / MAX_FACTOR, le=MAX_FACTOR), NO_BOOL]
Weight = Annotated[float, Field(ge=0, le=MAX_WEIGHT), NO_BOOL]
PowerDbm = Annotated[float, Field(ge=-30, le=60), NO_BOOL]  # 1 uW .. 1 kW
BandwidthHz = Annotated[float, Field(ge=1e3, le=1e10), NO_BOOL]
UpdateNorm = Annotated[float, Field(gt=0, le=1e6), NO_BOOL]
UnitInterval = Annotated[float, Field(ge=0, le=1), NO_BOOL]


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


def read_now_by(reader: Callable[[Path], Any]) -> AfterValidator:
    """A path whose file ``reader`` reads at validation, so that a missing or malformed file is
    found by validate, not mid-run."""

    def read(path: Path | None) -> Path | None:
        if path is not None:
            _read_referenced_file(path, reader)
        return path

    return AfterValidator(read)


def tagged_union(members: tuple[type[BaseModel], ...], discriminator: str) -> Any:
    """``Annotated[A | B | ..., Field(discriminator=...)]``: the members are declared once, as a
    tuple, which the error messages' tag registry (``errors.py``) reads as well."""
    return Annotated[functools.reduce(operator.or_, members), Field(discriminator=discriminator)]


def tag_of(member: type[BaseModel], discriminator: str) -> str:
    """The tag of a union member: the one value of its ``Literal`` discriminator field."""
    (tag,) = get_args(member.model_fields[discriminator].annotation)
    return tag
