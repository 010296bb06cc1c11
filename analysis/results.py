"""Load fedsim results folders written by the recorder.

A run folder holds ``metrics.csv`` (one row per evaluation, appended while the run goes),
``scenario.yaml`` (the run's resolved scenario) and, once the run ends, ``summary.json``. Runs may
be read while they are still going or after they were interrupted, so an incomplete last line of
``metrics.csv`` is ignored rather than fatal. File names and columns come from
``fedsim.results.files``, the contract the recorder writes to. The scenario is read as plain YAML
(this package does not import fedsim's schema).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from fedsim.results.files import (
    ENERGY_SPENT,
    METRICS_COLUMNS,
    METRICS_FILE,
    SAMPLES_COLUMN,
    SCENARIO_FILE,
    STUDY_FILE,
    SUMMARY_FILE,
    scenario_sha256,
)

METRIC_COLUMNS = METRICS_COLUMNS  # the name scripts imported before the contract existed


@dataclass(frozen=True)
class Run:
    """One algorithm's results in one scenario.

    ``columns`` maps every ``metrics.csv`` column to a float array (integers included, so that
    missing values can be NaN); ``summary`` is ``summary.json`` or ``{}`` while the run has none;
    ``scenario`` its ``scenario.yaml`` as plain data (None without one).
    """

    label: str
    path: Path
    columns: dict[str, np.ndarray]
    summary: dict
    scenario: dict | None = field(default=None, repr=False)


def read_columns(path: Path, columns: Sequence[str]) -> dict[str, np.ndarray]:
    """Parse a CSV the recorder appends to into float arrays, one per column.

    Empty cells become NaN (``train_loss`` has none between evaluations without training);
    every column in ``columns`` must be in the header."""
    text = path.read_text()
    lines = text.splitlines()
    if lines and not text.endswith(("\n", "\r")):
        # The recorder writes whole lines, so a last line without its newline is a write that
        # was cut short (run interrupted or still being appended to).
        lines.pop()
    if not lines:
        return {name: np.empty(0) for name in columns}

    header = [name.strip() for name in lines[0].split(",")]
    missing = [name for name in columns if name not in header]
    if missing:
        raise ValueError(f"{path}: header lacks columns {missing}")

    rows: list[list[float]] = []
    body = lines[1:]
    for index, fields in enumerate(csv.reader(body)):
        if not fields:
            continue
        try:
            if len(fields) != len(header):
                raise ValueError(f"expected {len(header)} fields, got {len(fields)}")
            rows.append([float(field) if field.strip() else np.nan for field in fields])
        except ValueError as error:
            if index == len(body) - 1:
                continue  # a truncated last line that happens to end at a newline
            raise ValueError(f"{path}:{index + 2}: malformed row: {error}") from error

    table = np.array(rows, dtype=float).reshape(len(rows), len(header))
    return {name: table[:, i].copy() for i, name in enumerate(header)}


def _read_summary(path: Path) -> dict:
    """Read ``summary.json``; a missing or half-written one means the run has not finished."""
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        warnings.warn(f"ignoring unreadable {path}: {error}", stacklevel=3)
        return {}


def read_scenario(run_dir: Path) -> dict | None:
    """The run's ``scenario.yaml`` as plain data; None if it has none (the run cannot be told
    apart by its settings). Raises ValueError naming the file if it is not a YAML mapping."""
    path = Path(run_dir) / SCENARIO_FILE
    if not path.is_file():
        return None
    try:
        document = load_yaml(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not a readable scenario ({error})") from None
    if not isinstance(document, dict):
        raise ValueError(f"{path}: not a scenario (a YAML mapping of keys)")
    return document


def load_yaml(text: str) -> Any:
    """YAML text as plain data, safely; with libyaml's loader where PyYAML has it (about 7x
    faster: a study reads one scenario per run)."""
    return yaml.load(text, Loader=_LOADER)  # noqa: S506 (a safe loader)


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_run(path: Path) -> Run:
    """Load the run folder ``path``, labelled with the folder name."""
    path = Path(path)
    metrics = path / METRICS_FILE
    if not metrics.is_file():
        raise FileNotFoundError(f"{path} is not a fedsim run folder: {METRICS_FILE} not found")
    return Run(
        label=path.name,
        path=path,
        columns=read_columns(metrics, [c for c in METRICS_COLUMNS if c != SAMPLES_COLUMN]),
        summary=_read_summary(path / SUMMARY_FILE),
        scenario=read_scenario(path),
    )


def _is_run_folder(path: Path) -> bool:
    return (path / METRICS_FILE).is_file()


def _unique_labels(paths: Sequence[Path]) -> list[str]:
    """Shortest path suffixes that tell the runs apart: the run folder name alone when it is
    unique, else ``<scenario folder>/<run folder>`` (more parents only if still ambiguous)."""
    parts = [path.resolve().parts for path in paths]
    depth = 1
    while True:
        labels = ["/".join(p[-depth:]) for p in parts]
        if len(set(labels)) == len(labels) or depth >= max(len(p) for p in parts):
            return labels
        depth += 1


def find_runs(paths: Sequence[Path], left_out: list[Path] | None = None) -> list[Run]:
    """Load the runs in ``paths``: run folders, or scenario folders whose direct subfolders are
    run folders (taken in name order). A run folder reached twice is loaded once.

    A scenario folder with a ``study.json`` gives the runs of the study last started there
    only: a run folder an earlier study left (its label is not in the manifest, or its
    resolved scenario is not the one the manifest lists) is not loaded but appended to
    ``left_out``, since its settings are not the study's. A run folder given by name is
    always loaded."""
    folders: list[Path] = []
    seen: set[Path] = set()
    for given in map(Path, paths):
        if _is_run_folder(given):
            found = [given]
        elif given.is_dir():
            found = sorted(
                (child for child in given.iterdir() if _is_run_folder(child)),
                key=lambda child: child.name,
            )
            listed = _last_study_runs(given)
            earlier = [folder for folder in found if not _of_the_study(folder, listed)]
            if earlier and len(earlier) == len(found):
                raise ValueError(
                    f"{given} holds no run of the study last started there ({STUDY_FILE}); "
                    f"name run folders to read those of earlier studies"
                )
            found = [folder for folder in found if folder not in earlier]
            if left_out is not None:
                left_out += earlier
        else:
            raise ValueError(f"{given} does not exist or is not a folder")
        if not found:
            raise ValueError(
                f"{given} holds no run folder (no {METRICS_FILE} in it or its subfolders)"
            )
        for folder in found:
            if folder.resolve() not in seen:
                seen.add(folder.resolve())
                folders.append(folder)

    labels = _unique_labels(folders) if folders else []
    return [
        dataclasses.replace(load_run(folder), label=label)
        for folder, label in zip(folders, labels, strict=True)
    ]


def _last_study_runs(scenario_dir: Path) -> dict | None:
    """The runs of the study last started in ``scenario_dir`` (``study.json``: label -> hash
    of its resolved scenario); None without a readable manifest."""
    try:
        runs = json.loads((scenario_dir / STUDY_FILE).read_text())["runs"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return runs if isinstance(runs, dict) else None


def _of_the_study(run_dir: Path, runs: dict | None) -> bool:
    """Whether ``run_dir`` holds one of ``runs`` with the settings listed there; True without
    a manifest (nothing to tell the runs apart)."""
    if runs is None:
        return True
    if run_dir.name not in runs:
        return False
    scenario = read_scenario(run_dir)
    return scenario is not None and scenario_sha256(scenario) == runs[run_dir.name]


def time_to_target(run: Run, target: float) -> float | None:
    """Simulated time at which the mean accuracy first reaches ``target``, or None if never."""
    reached = np.flatnonzero(run.columns["accuracy"] >= target)
    return float(run.columns["time_s"][reached[0]]) if reached.size else None


def has_samples(run: Run) -> bool:
    """Whether the run counts the training samples it processed (runs before the column
    existed, and timing-only ones, do not)."""
    samples = run.columns.get(SAMPLES_COLUMN)
    return samples is not None and bool(np.nanmax(samples, initial=0.0) > 0)


def has_energy(run: Run) -> bool:
    """Whether the run's metrics.csv has the energy columns (scenarios with ``system.energy``)."""
    return all(column in run.columns for column in ENERGY_SPENT)


def summaries_target(runs: Sequence[Run], otherwise: str = "not drawing a target") -> float | None:
    """The target accuracy the runs' summaries share; None (with a warning that ends with
    ``otherwise``) if they differ."""
    targets = {
        float(run.summary["target_accuracy"])
        for run in runs
        if run.summary.get("target_accuracy") is not None
    }
    if len(targets) > 1:
        warnings.warn(
            f"runs have different target accuracies {sorted(targets)}; {otherwise}",
            stacklevel=3,
        )
    return targets.pop() if len(targets) == 1 else None


def without_seed(label: str) -> str | None:
    """``cobo@groups=2,seed=3`` -> ``cobo@groups=2``; None if the label has no seed part."""
    name, _, suffix = label.partition("@")
    parts = suffix.split(",") if suffix else []
    kept = [p for p in parts if not p.startswith("seed=")]
    if len(kept) == len(parts):
        return None
    return f"{name}@{','.join(kept)}" if kept else name


@dataclass(frozen=True)
class RunGroup:
    """Runs whose labels differ only in ``seed=N`` (``seeded``), or a run without a seed part
    alone."""

    label: str  # the runs' label without its seed part
    runs: tuple[Run, ...]
    seeded: bool


class MixedScenariosError(ValueError):
    """Runs whose labels differ only in ``seed=N`` but whose scenarios differ in more: their
    mean would mix experiments, so they are not grouped."""


def group_seeds(runs: Sequence[Run]) -> list[RunGroup]:
    """The runs grouped by their label without ``seed=N`` (first-seen order); a run whose label
    has no seed part is a group of its own, even if a seeded group has its label.

    The runs shown under one label (a group, and a run without a seed part of that label)
    must be runs of one scenario: their ``scenario.yaml`` may differ only in what a seed sweep
    changes (``seed_free``); otherwise MixedScenariosError names two of them and the first key
    they differ in (e.g. runs of an earlier study with other ``run.rounds`` left in the folder).
    Runs without a ``scenario.yaml`` are not checked."""
    groups: dict[tuple[str, int | None], list[Run]] = {}
    shown_as: dict[str, list[Run]] = {}
    for index, run in enumerate(runs):
        unseeded = without_seed(run.label)
        key = (run.label, index) if unseeded is None else (unseeded, None)
        groups.setdefault(key, []).append(run)
        shown_as.setdefault(key[0], []).append(run)
    for label, members in shown_as.items():
        _check_one_scenario(label, members)
    return [
        RunGroup(label=label, runs=tuple(members), seeded=alone is None)
        for (label, alone), members in groups.items()
    ]


def seed_free(scenario: dict) -> dict:
    """A run's resolved scenario without what differs between the seeds of one study: the
    ``seed``, the algorithms' ``label``, ``output`` and the ``sweep`` bookkeeping."""
    kept = {k: v for k, v in scenario.items() if k not in ("seed", "output", "sweep")}
    algorithms = kept.get("algorithms")
    if isinstance(algorithms, list):
        kept["algorithms"] = [
            {k: v for k, v in a.items() if k != "label"} if isinstance(a, dict) else a
            for a in algorithms
        ]
    return kept


def _check_one_scenario(label: str, runs: Sequence[Run]) -> None:
    known = [run for run in runs if run.scenario is not None]
    for run in known[1:]:
        difference = first_difference(seed_free(known[0].scenario), seed_free(run.scenario))
        if difference is not None:
            key, first, other = difference
            raise MixedScenariosError(
                f"{label}: the runs {known[0].label} and {run.label} ({run.path.parent}) are of "
                f"different scenarios, not seeds of one ({key}: {first} vs {other}): move one "
                "study's run folders elsewhere, or run them again with one scenario"
            )


_ABSENT = object()


def first_difference(a: Any, b: Any, key: str = "") -> tuple[str, str, str] | None:
    """The first key where two YAML documents differ (dotted, list items as ``[i]``; keys in
    ``a``'s order, then those only ``b`` has) and the two values there, shortened; None if the
    documents are equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        for name in [*a, *(name for name in b if name not in a)]:
            found = first_difference(
                a.get(name, _ABSENT), b.get(name, _ABSENT), f"{key}.{name}" if key else str(name)
            )
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            found = first_difference(x, y, f"{key}[{index}]")
            if found is not None:
                return found
        return None
    if a is not _ABSENT and b is not _ABSENT and type(a) is type(b) and a == b:
        return None
    return key or "(the whole scenario)", _shown(a), _shown(b)


def _shown(value: Any) -> str:
    if value is _ABSENT:
        return "(absent)"
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."
