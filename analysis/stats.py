"""Seed statistics: censored time to target, mean curves with confidence bands, comparison tables,
aggregates over seeds and Pareto fronts over the runs of a seed sweep. Pure numbers: the figures
drawn from them are in ``analysis.plots`` and ``analysis.pareto``.

Time to target is censored: a run that never reached the target accuracy did not take "no time"
and must not be dropped (that would favour the algorithms that fail on hard seeds); it only tells
that its time to target exceeds its last simulated time. The Kaplan–Meier estimator uses exactly
that, so its median time to target stays comparable whatever fraction of the seeds got there.

Confidence intervals, all two-sided at ``confidence`` (95 % by default):

* survival curve: pointwise log-log ("exponential Greenwood", Kalbfleisch–Prentice) band,
  ``S(t) ** exp(±z·sqrt(V(t)))`` with ``V(t) = Σ d/(n(n−d)) / log(S(t))²`` (Greenwood's sum);
  it stays inside [0, 1]. Where S(t) = 0 (every run still at risk reached the target at t) the
  log-log variance is undefined and the band is [0, 0], as in lifelines' KaplanMeierFitter
  (whose survival curve and band these equal on random censored samples).
* KM median: the first time at which S(t) <= 0.5 (when S is exactly 0.5 there, the midpoint
  of it and the next arrival time, if any, so that with nothing censored it is the ordinary
  median); None if S never gets there. Its CI inverts the band (Brookmeyer–Crowley's
  construction, on the log-log band rather than the plain Greenwood one, as R's ``survfit``
  with ``conf.type = "log-log"``): the lower limit is the first time the lower band is <= 0.5, the
  upper limit the first time the upper band is <= 0.5, None when the band never gets there
  (the data do not bound it: read it as infinity).
* mean of a quantity over seeds: Student's t, ``mean ± t(1 − α/2, n−1)·sd/√n`` with the sample
  standard deviation (ddof = 1); no interval for a single seed.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

from analysis.results import Run, group_seeds, has_energy, summaries_target, without_seed
from fedsim.results.files import ENERGY_SPENT, SAMPLES_COLUMN

CONFIDENCE = 0.95
DIRECTIONS = ("uplink", "downlink", "d2d")  # the byte counters: ``<direction>_bytes`` columns
BYTES_PER_MB = 1e6


def _two_sided(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return 1.0 - (1.0 - confidence) / 2.0


# --- Kaplan–Meier ---------------------------------------------------------------------------


@dataclass(frozen=True)
class KaplanMeier:
    """Kaplan–Meier estimate of the fraction of runs still short of the target over time.

    The arrays have one entry per distinct time at which some run reached the target (increasing);
    S(t) is ``survival[i]`` from ``times[i]`` until the next time, and 1 before the first."""

    times: np.ndarray
    at_risk: np.ndarray  # runs neither arrived nor censored just before each time
    events: np.ndarray  # runs that reached the target at each time
    survival: np.ndarray
    lower: np.ndarray  # pointwise log-log band of the survival
    upper: np.ndarray
    median: float | None  # first time with S <= 0.5; None if S never drops that far
    median_ci: tuple[float | None, float | None]  # None: not bounded by the data
    runs: int
    reached: int
    confidence: float = CONFIDENCE

    @property
    def fraction_reached(self) -> float:
        return self.reached / self.runs

    def survival_at(self, time_s: float) -> float:
        """S(time_s): the estimated fraction of runs that have not reached the target by then."""
        passed = np.searchsorted(self.times, time_s, side="right")
        return 1.0 if passed == 0 else float(self.survival[passed - 1])


def _first_time_at_or_below(times: np.ndarray, curve: np.ndarray, level: float) -> float | None:
    """The first time the step curve is <= level; if it is level exactly there and drops below
    later, the midpoint of the two times (so that with nothing censored the KM median is the
    ordinary median: 10, 20, 30, 40 give 25)."""
    tolerance = 1e-12  # 0.8·0.625 is 0.5 up to rounding
    below = np.flatnonzero(curve <= level + tolerance)
    if not below.size:
        return None
    first = below[0]
    if curve[first] >= level - tolerance and first + 1 < times.size:
        return float(times[first] + times[first + 1]) / 2.0
    return float(times[first])


def kaplan_meier(
    times: Sequence[float | None],
    censored_at: Sequence[float | None] | None = None,
    *,
    confidence: float = CONFIDENCE,
) -> KaplanMeier:
    """Kaplan–Meier estimate of the time to target of ``times`` (one per run; None: the run never
    reached the target and is censored at ``censored_at[i]``, its last simulated time).

    A censored run is at risk at every time up to and including its censoring time (a run
    censored at t counts as still short of the target at t). A censoring time of None (or no
    ``censored_at``) is infinity: the run is at risk at every time the others reached the target.
    """
    if censored_at is None:
        censored_at = [None] * len(times)
    if len(censored_at) != len(times):
        raise ValueError(f"{len(times)} times but {len(censored_at)} censoring times")
    if not times:
        raise ValueError("no runs: a Kaplan–Meier estimate needs at least one")
    arrived = np.array([t for t in times if t is not None], dtype=float)
    pairs = zip(times, censored_at, strict=True)
    censored = np.array([math.inf if c is None else c for t, c in pairs if t is None], dtype=float)
    if np.isnan(arrived).any() or np.isnan(censored).any():
        raise ValueError("times to target and censoring times must not be NaN")

    distinct = np.unique(arrived)
    at_risk = np.array(
        [(arrived >= t).sum() + (censored >= t).sum() for t in distinct], dtype=float
    )
    events = np.array([(arrived == t).sum() for t in distinct], dtype=float)
    survival = np.cumprod(1.0 - events / at_risk)
    with np.errstate(divide="ignore"):
        greenwood = np.cumsum(events / (at_risk * (at_risk - events)))
    lower, upper = _log_log_band(survival, greenwood, _two_sided(confidence))

    median = _first_time_at_or_below(distinct, survival, 0.5)
    median_ci = (
        _first_time_at_or_below(distinct, lower, 0.5),
        _first_time_at_or_below(distinct, upper, 0.5),
    )
    return KaplanMeier(
        times=distinct,
        at_risk=at_risk,
        events=events,
        survival=survival,
        lower=lower,
        upper=upper,
        median=median,
        median_ci=median_ci,
        runs=len(times),
        reached=arrived.size,
        confidence=confidence,
    )


def _log_log_band(
    survival: np.ndarray, greenwood: np.ndarray, quantile: float
) -> tuple[np.ndarray, np.ndarray]:
    z = scipy_stats.norm.ppf(quantile)
    lower, upper = np.empty_like(survival), np.empty_like(survival)
    for i, (s, g) in enumerate(zip(survival, greenwood, strict=True)):
        if s <= 0.0:  # every run at risk arrived: no log-log variance, the band closes on 0
            lower[i], upper[i] = 0.0, 0.0
            continue
        theta = math.exp(z * math.sqrt(g) / abs(math.log(s)))
        lower[i], upper[i] = s**theta, s ** (1.0 / theta)
    return lower, upper


# --- mean curves over seeds -----------------------------------------------------------------


@dataclass(frozen=True)
class MeanCurve:
    """Mean of several curves on a common grid, with the pointwise t confidence band of the mean
    (``low`` and ``high`` are NaN for a single curve)."""

    x: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    curves: int


def mean_curve(
    curves: Sequence[tuple[np.ndarray, np.ndarray]], *, confidence: float = CONFIDENCE
) -> MeanCurve:
    """The mean of the curves ``(x, y)`` and its confidence band, only where all curves have
    data: the grid is every curve's x values (rows with a NaN dropped) that lie between the
    largest first x and the smallest last x, each curve linearly interpolated onto it. Where a
    curve repeats an x (cumulative bytes that did not grow between evaluations) its last y
    counts. Curves without any finite point are left out (``curves`` counts those used)."""
    cleaned = []
    for x, y in curves:
        x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        finite = np.isfinite(x) & np.isfinite(y)
        x, y = x[finite], y[finite]
        if not x.size:
            continue
        order = np.argsort(x, kind="stable")
        x, y = x[order], y[order]
        last = np.append(x[1:] != x[:-1], True)  # the last row of each run of equal x
        cleaned.append((x[last], y[last]))
    empty = np.empty(0)
    if not cleaned:
        return MeanCurve(empty, empty, empty, empty, 0)
    start = max(x[0] for x, _ in cleaned)
    stop = min(x[-1] for x, _ in cleaned)
    grid = np.unique(np.concatenate([x[(x >= start) & (x <= stop)] for x, _ in cleaned]))
    values = np.array([np.interp(grid, x, y) for x, y in cleaned]).reshape(len(cleaned), -1)
    mean = values.mean(axis=0)
    half = mean_half_width(values, confidence=confidence)
    return MeanCurve(grid, mean, mean - half, mean + half, len(cleaned))


def mean_half_width(values: np.ndarray, *, confidence: float = CONFIDENCE) -> np.ndarray | float:
    """Half-width of the t confidence interval of the mean of ``values`` along axis 0 (the
    seeds): ``t(1 − α/2, n−1)·sd/√n``; NaN for fewer than two values."""
    values = np.asarray(values, dtype=float)
    n = values.shape[0]
    if n < 2:
        return np.full(values.shape[1:], np.nan) if values.ndim > 1 else math.nan
    t = scipy_stats.t.ppf(_two_sided(confidence), n - 1)
    half = t * values.std(axis=0, ddof=1) / math.sqrt(n)
    return half if values.ndim > 1 else float(half)


# --- one run's outcome ----------------------------------------------------------------------


@dataclass(frozen=True)
class RunOutcome:
    """What a comparison needs of one run: from its summary.json, else from its metrics.csv."""

    final_accuracy: float | None
    final_worst_accuracy: float | None
    last_time_s: float  # where a run that never reached the target is censored
    time_to_target_s: float | None
    bytes_to_target: dict[str, float | None]  # per direction (DIRECTIONS)
    energy_to_target_j: float | None
    samples_to_target: float | None  # training samples processed by then (all clients)
    worst_at_target: float | None  # the worst client's accuracy when the mean first got there
    complete: bool


def run_outcome(run: Run, target_accuracy: float | None) -> RunOutcome:
    """The run's outcome against ``target_accuracy`` (None: no time to target). The summary's
    values are used where it has them for that target; otherwise they are read off metrics.csv
    the way the recorder computes them."""
    summary = run.summary
    accuracy, time = run.columns["accuracy"], run.columns["time_s"]
    measured = np.flatnonzero(np.isfinite(accuracy))
    last = int(measured[-1]) if measured.size else None

    def final(key: str, column: str) -> float | None:
        if key in summary:
            return summary[key]
        return None if last is None else float(run.columns[column][last])

    if "time_s" in summary:
        last_time = float(summary["time_s"])
    else:
        last_time = float(time[last]) if last is not None else 0.0

    reached, spent, moved, samples, worst = None, None, dict.fromkeys(DIRECTIONS), None, None
    hit = np.flatnonzero(accuracy >= target_accuracy) if target_accuracy is not None else []
    row = int(hit[0]) if len(hit) else None  # the first evaluation at the target
    if row is not None and SAMPLES_COLUMN in run.columns:
        samples = float(run.columns[SAMPLES_COLUMN][row])
    if row is not None and "worst_accuracy" in run.columns:
        worst = float(run.columns["worst_accuracy"][row])
    recorded = summary.get("target_accuracy") == target_accuracy and "time_to_target_s" in summary
    if target_accuracy is not None and recorded:
        reached = summary["time_to_target_s"]
        moved = {d: summary.get(f"{d}_bytes_to_target") for d in DIRECTIONS}
        spent = summary.get("energy_to_target_j")
    elif row is not None:
        reached = float(time[row])
        moved = {
            d: float(run.columns[f"{d}_bytes"][row]) if f"{d}_bytes" in run.columns else None
            for d in DIRECTIONS
        }
        if has_energy(run):
            spent = float(sum(run.columns[c][row] for c in ENERGY_SPENT))
    return RunOutcome(
        final_accuracy=final("final_accuracy", "accuracy"),
        final_worst_accuracy=final("final_worst_accuracy", "worst_accuracy"),
        last_time_s=last_time,
        time_to_target_s=reached,
        bytes_to_target=moved,
        energy_to_target_j=spent,
        samples_to_target=samples,
        worst_at_target=worst,
        complete=summary.get("complete") is not False,
    )


def outcomes_km(outcomes: Sequence[RunOutcome], *, confidence: float = CONFIDENCE) -> KaplanMeier:
    """Kaplan–Meier estimate of the outcomes' time to target, each censored at its last time."""
    return kaplan_meier(
        [o.time_to_target_s for o in outcomes],
        [o.last_time_s for o in outcomes],
        confidence=confidence,
    )


# --- comparison table -----------------------------------------------------------------------


@dataclass(frozen=True)
class CompareRow:
    """One algorithm (and sweep point) over its seeds; a run without a seed part is a row alone.

    Byte and energy medians are over the runs that reached the target (None if none did), and
    so is the worst client's accuracy at the evaluation where the mean first reached it: a mean
    can reach a target while a client is left far behind."""

    label: str
    runs: int
    incomplete: int  # runs whose summary says they were interrupted
    target_accuracy: float | None
    final_mean: float | None
    final_ci: float | None  # half-width of the t interval of the mean; None for one run
    worst_mean: float | None
    km: KaplanMeier | None  # None without a target accuracy
    bytes_to_target: dict[str, float | None]  # median per direction (DIRECTIONS)
    total_bytes_to_target: float | None  # median of each run's uplink + downlink + d2d
    energy_to_target_j: float | None
    samples_to_target: float | None = None  # median training samples processed by then
    worst_at_target: float | None = None  # median worst client's accuracy then

    @property
    def median_time_s(self) -> float | None:
        return None if self.km is None else self.km.median


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.median(known)) if known else None


def _mean(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    known = np.array([v for v in values if v is not None], dtype=float)
    if not known.size:
        return None, None
    half = mean_half_width(known)
    return float(known.mean()), None if math.isnan(half) else half


def compare_rows(
    runs: Sequence[Run], target_accuracy: float | None = None, *, confidence: float = CONFIDENCE
) -> list[CompareRow]:
    """One row per run label without its ``seed=N`` part (first-seen order). The target is
    ``target_accuracy`` if given, else the one the group's summaries record."""
    rows = []
    for group in group_seeds(runs):
        target = target_accuracy
        if target is None:
            target = summaries_target(group.runs, f"no time to target for {group.label}")
        outcomes = [run_outcome(run, target) for run in group.runs]
        reached = [o for o in outcomes if o.time_to_target_s is not None]
        final_mean, final_ci = _mean([o.final_accuracy for o in outcomes])
        totals = [
            sum(o.bytes_to_target[d] or 0.0 for d in DIRECTIONS)
            for o in reached
            if any(o.bytes_to_target[d] is not None for d in DIRECTIONS)
        ]
        rows.append(
            CompareRow(
                label=group.label,
                runs=len(outcomes),
                incomplete=sum(not o.complete for o in outcomes),
                target_accuracy=target,
                final_mean=final_mean,
                final_ci=final_ci,
                worst_mean=_mean([o.final_worst_accuracy for o in outcomes])[0],
                km=None if target is None else outcomes_km(outcomes, confidence=confidence),
                bytes_to_target={
                    d: _median([o.bytes_to_target[d] for o in reached]) for d in DIRECTIONS
                },
                total_bytes_to_target=_median(totals),
                energy_to_target_j=_median([o.energy_to_target_j for o in reached]),
                samples_to_target=_median([o.samples_to_target for o in reached]),
                worst_at_target=_median([o.worst_at_target for o in reached]),
            )
        )
    return rows


CSV_COLUMNS = (
    "label", "runs", "incomplete", "target_accuracy", "final_accuracy_mean",
    "final_accuracy_ci95", "worst_accuracy_mean", "km_median_time_to_target_s",
    "km_median_ci95_low_s", "km_median_ci95_high_s", "reached", "fraction_reached",
    "uplink_bytes_to_target", "downlink_bytes_to_target", "d2d_bytes_to_target",
    "total_bytes_to_target", "energy_to_target_j", "samples_to_target",
    "worst_accuracy_at_target",
)  # fmt: skip


def _csv_record(row: CompareRow) -> list[object]:
    km = row.km
    low, high = km.median_ci if km else (None, None)
    return [
        row.label, row.runs, row.incomplete, row.target_accuracy, row.final_mean, row.final_ci,
        row.worst_mean, km and km.median, low, math.inf if km and high is None else high,
        km and km.reached, km and km.fraction_reached,
        *(row.bytes_to_target[d] for d in DIRECTIONS), row.total_bytes_to_target,
        row.energy_to_target_j, row.samples_to_target, row.worst_at_target,
    ]  # fmt: skip


def _text(value: float | None, unit: float = 1.0, digits: int = 1) -> str:
    return "–" if value is None else f"{value / unit:.{digits}f}"


def _md_time(km: KaplanMeier | None) -> str:
    if km is None:
        return "no target"
    low, high = km.median_ci
    median = "not reached" if km.median is None else f"{km.median:.1f}"
    return f"{median} [{_text(low)}, {'∞' if high is None else f'{high:.1f}'}]"


def _md_record(row: CompareRow, with_energy: bool, with_samples: bool) -> list[str]:
    final = _text(row.final_mean, 0.01)
    if row.final_ci is not None:
        final += f" ± {100 * row.final_ci:.1f}"
    label = row.label + (f" ({row.incomplete} incomplete)" if row.incomplete else "")
    km = row.km
    cells = [
        label, str(row.runs), final, _text(row.worst_mean, 0.01), _md_time(km),
        "–" if km is None else f"{km.reached}/{km.runs}", _text(row.worst_at_target, 0.01),
        *(_text(row.bytes_to_target[d], BYTES_PER_MB, 2) for d in DIRECTIONS),
    ]  # fmt: skip
    if with_energy:
        cells.append(_text(row.energy_to_target_j))
    if with_samples:
        cells.append(_text(row.samples_to_target, 1e3))
    return cells


def format_table(rows: Sequence[CompareRow], fmt: str = "md") -> str:
    """The rows as a Markdown table (percent, seconds, MB, joules, thousands of training
    samples; the energy and samples columns only when some row has one) or as CSV
    (fractions, seconds, bytes, joules, samples; empty: not applicable, an unbounded CI
    limit is ``inf``). Ends with a newline."""
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(CSV_COLUMNS)
        for row in rows:
            writer.writerow(["" if v is None else v for v in _csv_record(row)])
        return out.getvalue()
    if fmt != "md":
        raise ValueError(f"unknown table format {fmt!r} (md or csv)")
    with_energy = any(row.energy_to_target_j is not None for row in rows)
    with_samples = any(row.samples_to_target is not None for row in rows)
    header = [
        "run", "runs", "final accuracy % (± 95% CI)", "worst client %",
        "time to target s: KM median [95% CI]", "reached", "worst client % at target",
        "uplink MB to target",
        "downlink MB to target", "d2d MB to target",
    ]  # fmt: skip
    if with_energy:
        header.append("energy to target J")
    if with_samples:
        header.append("samples to target (thousands)")
    lines = [header, ["---"] * len(header)]
    lines += [_md_record(row, with_energy, with_samples) for row in rows]
    return "".join("| " + " | ".join(cells) + " |\n" for cells in lines)


# --- Pareto front ---------------------------------------------------------------------------


def pareto_front(costs: Sequence[float], gains: Sequence[float]) -> np.ndarray:
    """Which points are Pareto-optimal when ``costs`` are to be low and ``gains`` high: no other
    point is at least as good in both and better in one (equal points are all kept)."""
    cost, gain = np.asarray(costs, dtype=float), np.asarray(gains, dtype=float)
    no_worse = (cost[None, :] <= cost[:, None]) & (gain[None, :] >= gain[:, None])
    better = (cost[None, :] < cost[:, None]) | (gain[None, :] > gain[:, None])
    return ~(no_worse & better).any(axis=1)


# --- summaries over seeds -------------------------------------------------------------------


@dataclass(frozen=True)
class SeedAggregate:
    """One run label's summaries over the seeds of a ``seed`` sweep: mean and spread, so a
    ranking can be read without picking a lucky seed."""

    label: str  # the run label without its ``seed=N`` part
    seeds: int
    final_mean: float
    final_std: float | None  # sample standard deviation (ddof 1) over the seeds; None for one
    worst_mean: float
    reached: int  # seeds whose run reached the target accuracy
    median_time_to_target_s: float | None  # over the seeds that reached it
    # Kaplan–Meier median over all the seeds, a run that never reached the target censored at
    # its last simulated time (``time_s``; at infinity when its summary lacks one), and the
    # 95% CI of that median (None: not bounded); see ``kaplan_meier``
    km_median_time_to_target_s: float | None = None
    km_median_ci_s: tuple[float | None, float | None] = (None, None)


def across_seeds(summaries: Sequence[dict]) -> list[SeedAggregate]:
    """Group ``summary.json`` contents whose labels differ only in ``seed=N`` (first-seen order)."""
    groups: dict[str, list[dict]] = {}
    for summary in summaries:
        label = without_seed(summary["algorithm"])
        if label is not None:
            groups.setdefault(label, []).append(summary)
    aggregates = []
    for label, runs in groups.items():
        finals = np.array([r["final_accuracy"] for r in runs], dtype=float)
        worst = np.array([r["final_worst_accuracy"] for r in runs], dtype=float)
        times = [r["time_to_target_s"] for r in runs if r["time_to_target_s"] is not None]
        km = kaplan_meier([r["time_to_target_s"] for r in runs], [r.get("time_s") for r in runs])
        aggregates.append(
            SeedAggregate(
                label=label,
                seeds=len(runs),
                final_mean=float(finals.mean()),
                final_std=float(finals.std(ddof=1)) if finals.size > 1 else None,
                worst_mean=float(worst.mean()),
                reached=len(times),
                median_time_to_target_s=float(np.median(times)) if times else None,
                km_median_time_to_target_s=km.median,
                km_median_ci_s=km.median_ci,
            )
        )
    return aggregates
