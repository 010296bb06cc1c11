"""Metrics and byte accounting, written to the results folder as the run goes.

An interrupted run keeps every evaluation it reached: each row is flushed when it is
measured and ``summary.json`` is rewritten (atomically) after every evaluation.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Protocol

import numpy as np

from fedsim.results.files import (
    ACTIVITY_COLUMNS,
    ACTIVITY_FILE,
    AIR_COLUMNS,
    BACKHAUL_COLUMNS,
    CLIENT_COLUMNS,
    CLIENTS_FILE,
    ENERGY_COLUMNS,
    ENERGY_FILE,
    ENERGY_SPENT,
    ENERGY_TOTALS,
    HIERARCHY_COLUMNS,
    METRICS_COLUMNS,
    METRICS_FILE,
    ROUND_COLUMNS,
    ROUNDS_FILE,
    RUN_FILES,
    SCENARIO_FILE,
    SUMMARY_FILE,
)
from fedsim.results.recovery import recovery_after


class Energy(Protocol):
    """Cumulative joules (``fedsim.sim.energy.EnergyMeter``)."""

    changed: set[int]

    def totals(self) -> dict[str, float]: ...

    def settle_all(self) -> None: ...

    def wasted_of(self, client: int) -> float: ...

    def client_joules(self, client: int) -> Sequence[float]: ...

    def level_j(self, client: int) -> float: ...

    def per_client_j(self) -> Sequence[float]: ...


class Traffic(Protocol):
    """Cumulative byte counters (the event log keeps them)."""

    uplink_bytes: int
    downlink_bytes: int
    d2d_bytes: int
    wasted_bytes: int


@dataclass(frozen=True)
class ClientScore:
    """One client's evaluation on its own test split."""

    client: int
    group: int
    correct: int
    total: int

    @property
    def accuracy(self) -> float:
        return self.correct / self.total


@dataclass(frozen=True)
class TargetReached:
    time_s: float
    uplink_bytes: int
    downlink_bytes: int
    d2d_bytes: int
    energy_j: float | None = None


class Recorder:
    """Pools training loss and writes one run's folder (in memory only if run_dir is None).

    Files: metrics.csv (per evaluation), clients.csv (per client and evaluation),
    rounds.csv (participation and time breakdown per round), activity.csv (present and
    online clients at every change), summary.json.
    """

    def __init__(
        self,
        run_dir: Path | None,
        *,
        scenario_name: str,
        label: str,
        target_accuracy: float | None,
        resolved_scenario_yaml: str,
        churn_times_s: Sequence[float] = (),
        energy: bool = False,
        over_the_air: bool = False,
        backhaul: bool = False,
        hierarchical: bool = False,
    ) -> None:
        """``energy``: the scenario counts energy (metrics.csv gains its columns, energy.csv
        is written); the World attaches the meter as ``self.energy``. ``over_the_air``: the
        uplink aggregates over the air (rounds.csv gains ``AIR_COLUMNS``). ``backhaul``:
        several cells, whose backhaul bytes metrics.csv and rounds.csv count
        (``BACKHAUL_COLUMNS``); ``hierarchical``: edge servers aggregate between the cloud's
        aggregations, which they count (``HIERARCHY_COLUMNS``, ``cloud_rounds``)."""
        self.run_dir = run_dir
        self.scenario_name = scenario_name
        self.label = label
        self.target_accuracy = target_accuracy
        self.churn_times_s = list(churn_times_s)
        self.traffic: Traffic | None = None  # attached by the World (its event log)
        self.energy: Energy | None = None  # attached by the World (with system.energy)
        self.summary_extra: dict = {}  # blocks the World adds (a constellation's)
        # The samples every client's finished work processed so far (attached by the World).
        self.samples_processed: Callable[[], int] = lambda: 0
        self.battery_departures = 0  # clients whose battery ran out (left or went charging)
        extra = (BACKHAUL_COLUMNS if backhaul else ()) + (HIERARCHY_COLUMNS if hierarchical else ())
        self._metrics_columns = METRICS_COLUMNS + (ENERGY_TOTALS if energy else ()) + extra
        self._round_columns = ROUND_COLUMNS + (AIR_COLUMNS if over_the_air else ()) + extra
        self._extra_totals = extra  # the summary's, too
        self.cloud_rounds = 0  # cloud aggregations so far (hierarchical FL)
        self._loss_sum = 0.0
        self._loss_samples = 0
        self._rows: list[dict] = []
        self._target: TargetReached | None = None
        self.round_rows: list[dict] = []
        self._files: list[IO[str]] = []
        if run_dir is None:
            return
        clear_run_folder(run_dir)
        (run_dir / SCENARIO_FILE).write_text(resolved_scenario_yaml)
        self._metrics = self._open_csv(METRICS_FILE, self._metrics_columns)
        if energy:
            self._energy = self._open_csv(ENERGY_FILE, ENERGY_COLUMNS)
        self._clients = self._open_csv(CLIENTS_FILE, CLIENT_COLUMNS)
        self._rounds = self._open_csv(ROUNDS_FILE, self._round_columns)
        self._activity = self._open_csv(ACTIVITY_FILE, ACTIVITY_COLUMNS)
        self._flush()
        self._write_summary(complete=False)

    def _open_csv(self, name: str, columns: tuple[str, ...]) -> csv.writer:
        file = (self.run_dir / name).open("w", newline="")
        self._files.append(file)
        writer = csv.writer(file)
        writer.writerow(columns)
        return writer

    @property
    def uplink_bytes(self) -> int:
        return self.traffic.uplink_bytes if self.traffic else 0

    @property
    def downlink_bytes(self) -> int:
        return self.traffic.downlink_bytes if self.traffic else 0

    def log_activity(self, time_s: float, present: int, online: int) -> None:
        if self.run_dir is not None:
            self._activity.writerow([float(time_s), present, online])

    def log_round(self, **row: float) -> None:
        """One round: participation, time breakdown, cumulative bytes (rounds.csv's columns;
        other keys, e.g. where the dropped tasks were cut, stay in ``round_rows`` for the
        budget)."""
        traffic = self.traffic
        row = {**row, **{k: getattr(traffic, k) for k in ROUND_COLUMNS if k.endswith("_bytes")}}
        row |= self._extra_values()
        row["round"] = row.pop("round_index")
        self.round_rows.append(row)
        if self.run_dir is not None:
            values = (row.get(c, math.nan) for c in self._round_columns)
            self._rounds.writerow(["" if _is_nan(v) else v for v in values])

    def log_energy(self, time_s: float, round_index: int | None) -> None:
        """energy.csv: the cumulative joules of every client whose joules moved since the
        last call (so the file grows with activity, not with clients x rounds)."""
        energy = self.energy
        if energy is None or self.run_dir is None:
            return
        energy.settle_all()  # every client's account up to now
        for client in sorted(energy.changed):
            level_j = energy.level_j(client)
            self._energy.writerow([
                float(time_s), "" if round_index is None else round_index, client,
                *(float(j) for j in energy.client_joules(client)),
                float(energy.wasted_of(client)), "" if math.isinf(level_j) else level_j,
            ])  # fmt: skip
        energy.changed.clear()

    def add_training(self, mean_loss: float, samples: int) -> None:
        self._loss_sum += mean_loss * samples
        self._loss_samples += samples

    def log_evaluation(
        self,
        time_s: float,
        round_index: int,
        scores: list[ClientScore],
        participants: int,
    ) -> dict:
        """Write one metrics row (and the per-client rows); returns the metrics row."""
        traffic = self.traffic
        accuracies = np.array([s.accuracy for s in scores])
        p10, p50, p90 = np.percentile(accuracies, [10, 50, 90])
        train_loss = self._loss_sum / self._loss_samples if self._loss_samples else math.nan
        self._loss_sum, self._loss_samples = 0.0, 0
        row = {
            "time_s": float(time_s),
            "round": round_index,
            "accuracy": sum(s.correct for s in scores) / sum(s.total for s in scores),
            "worst_accuracy": float(accuracies.min()),
            "p10_accuracy": float(p10),
            "p50_accuracy": float(p50),
            "p90_accuracy": float(p90),
            "train_loss": train_loss,
            "uplink_bytes": traffic.uplink_bytes,
            "downlink_bytes": traffic.downlink_bytes,
            "d2d_bytes": traffic.d2d_bytes,
            "wasted_bytes": traffic.wasted_bytes,
            "participants": participants,
            "samples_trained": self.samples_processed(),
        }
        if self.energy is not None:
            row |= self.energy.totals()
        row |= self._extra_values()
        self._metrics.writerow(["" if _is_nan(row[c]) else row[c] for c in self._metrics_columns])
        for s in scores:
            self._clients.writerow(
                [row["time_s"], round_index, s.client, s.group, s.accuracy, s.total]
            )
        self._flush()
        self._rows.append(row)
        reached = self.target_accuracy is not None and row["accuracy"] >= self.target_accuracy
        if self._target is None and reached:
            d2d_bytes = self.traffic.d2d_bytes if self.traffic else 0
            energy_j = sum(row[c] for c in ENERGY_SPENT) if self.energy else None
            self._target = TargetReached(
                time_s, self.uplink_bytes, self.downlink_bytes, d2d_bytes, energy_j
            )
        self._write_summary(complete=False)
        return row

    def close(self, *, complete: bool) -> dict:
        """Final summary; ``complete`` is False when the run was interrupted."""
        summary = self._write_summary(complete=complete)
        for file in self._files:
            file.close()
        return summary

    def _flush(self) -> None:
        for file in self._files:
            file.flush()

    def _recoveries(self) -> list[dict]:
        """Accuracy dip and time to recover after each scheduled arrival or departure."""
        times = np.array([r["time_s"] for r in self._rows])
        accuracy = np.array([r["accuracy"] for r in self._rows])
        return [asdict(recovery_after(times, accuracy, t)) for t in self.churn_times_s]

    def _write_summary(self, *, complete: bool) -> dict:
        last = self._rows[-1] if self._rows else None
        target = self._target
        summary = {
            "scenario": self.scenario_name,
            "algorithm": self.label,
            "target_accuracy": self.target_accuracy,
            "final_accuracy": last["accuracy"] if last else None,
            "best_accuracy": max(r["accuracy"] for r in self._rows) if last else None,
            "final_worst_accuracy": last["worst_accuracy"] if last else None,
            "time_to_target_s": target.time_s if target else None,
            "uplink_bytes_to_target": target.uplink_bytes if target else None,
            "downlink_bytes_to_target": target.downlink_bytes if target else None,
            "d2d_bytes_to_target": target.d2d_bytes if target else None,
            "rounds": last["round"] if last else 0,
            "time_s": last["time_s"] if last else 0.0,
            "uplink_bytes": self.uplink_bytes,
            "downlink_bytes": self.downlink_bytes,
            "d2d_bytes": self.traffic.d2d_bytes if self.traffic else 0,
            "wasted_bytes": self.traffic.wasted_bytes if self.traffic else 0,
            "complete": complete,
            "churn_events": self._recoveries(),
        }
        if self.energy is not None:
            summary |= self._energy_summary()
        summary |= self._extra_values() | self.summary_extra
        if self.run_dir is None:
            return summary
        partial = self.run_dir / f"{SUMMARY_FILE}.part"
        partial.write_text(json.dumps(summary, indent=2) + "\n")
        os.replace(partial, self.run_dir / SUMMARY_FILE)
        return summary

    def _extra_values(self) -> dict[str, int]:
        """The backhaul's bytes and the cloud aggregations so far, where they are columns."""
        values = {"cloud_rounds": self.cloud_rounds}
        if self.traffic is None:  # before the World attaches its log
            return {k: values.get(k, 0) for k in self._extra_totals}
        return {
            k: values[k] if k in values else getattr(self.traffic, k) for k in self._extra_totals
        }

    def _energy_summary(self) -> dict:
        """Joules by category, to the target, and per client (over the clients that spent
        any: max, median), and how many batteries ran out."""
        totals = self.energy.totals()
        per_client = np.asarray(self.energy.per_client_j())
        spent = per_client[per_client > 0]
        target = self._target
        return {
            "energy_j": totals,
            "energy_to_target_j": target.energy_j if target else None,
            "energy_per_client_j": {
                "max": float(spent.max()) if spent.size else 0.0,
                "median": float(np.median(spent)) if spent.size else 0.0,
                "clients": int(spent.size),
            },
            "battery_departures": self.battery_departures,
        }


def clear_run_folder(run_dir: Path) -> None:
    """Make ``run_dir`` a folder without any file a run writes (``RUN_FILES``), so that a run
    started again leaves nothing of an earlier one there (other files are left alone)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    for name in RUN_FILES:
        (run_dir / name).unlink(missing_ok=True)


def _is_nan(value: object) -> bool:
    return isinstance(value, float) and math.isnan(value)
