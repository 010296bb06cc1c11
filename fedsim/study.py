"""A scenario's runs (algorithms x sweep points x seeds) as independent jobs: one after another
in this process, on a pool of worker processes (``workers``), or as Ray tasks (``ray``), each
run writing its own folder exactly as it would alone; ``resume`` skips the runs whose
``summary.json`` says complete and reruns the others from the start.

One run stays one process, one World, one seed: parallelism is across runs only, so a run's
files do not depend on how many run beside it. Each worker trains with the scenario's
``training.threads`` (default 1): more threads per run would change the numbers (results depend
on the count) and small models gain little from them, while N workers x 1 thread use N cores.
"""

from __future__ import annotations

import json
import multiprocessing
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from analysis.figures import plot_results
from fedsim.config import AlgorithmConfig, Scenario, ScenarioError, parse_scenario
from fedsim.learn.execution import configure_threads
from fedsim.runner import (
    build_dataset,
    build_trainers,
    churn_times_s,
    require_a_sample_per_client,
    run_algorithm,
    select_algorithms,
)

RAY_EXTRA = 'pip install -e ".[ray]"'


@dataclass(frozen=True)
class Job:
    """One run: an algorithm on one variant (sweep point) of the scenario."""

    variant: Scenario
    algorithm: AlgorithmConfig

    @property
    def label(self) -> str:
        return self.algorithm.run_label

    def payload(self) -> tuple[dict, str]:
        """What a worker needs to run it: the variant as plain data, and the label."""
        return self.variant.model_dump(mode="json"), self.label


def plan(scenario: Scenario, only: Sequence[str] | None = None) -> list[Job]:
    return [Job(v, a) for v in scenario.variants() for a in select_algorithms(v, only)]


def is_complete(results_dir: Path, label: str) -> bool:
    """Whether the run's folder holds a finished run (its summary says so)."""
    try:
        return json.loads((results_dir / label / "summary.json").read_text())["complete"] is True
    except (OSError, ValueError, KeyError, TypeError):
        return False


def run_scenario(
    scenario: Scenario, *, only: Sequence[str] | None = None, show_progress: bool = True
) -> Path:
    """Run the scenario's algorithms (for every sweep value) one after another, in this
    process (``run_study`` also runs them on workers or Ray, and resumes).

    Each run's folder is complete (metrics, summary, plots of the runs so far) before the
    next run starts, so an interrupted scenario keeps what it measured.
    """
    return run_study(scenario, only=only, show_progress=show_progress)


def run_study(
    scenario: Scenario,
    *,
    only: Sequence[str] | None = None,
    workers: int = 1,
    resume: bool = False,
    ray_address: str | None = None,
    use_ray: bool = False,
    show_progress: bool = True,
) -> Path:
    """Run the scenario's jobs; returns its results folder. Plots are redrawn as runs finish.

    Raises KeyboardInterrupt (also on SIGTERM, see ``terminate_as_interrupt``) after the runs
    in progress have flushed what they measured (``"complete": false``).
    """
    if workers < 1:
        raise ScenarioError("--workers", [f"--workers: at least 1, got {workers}"])
    jobs = plan(scenario, only)
    for job in jobs:  # before any folder is written or worker started
        require_a_sample_per_client(job.variant)
    results_dir = scenario.results_dir()
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / "scenario.yaml").write_text(scenario.to_yaml())
    labels = [job.label for job in jobs]
    todo = [job for job in jobs if not (resume and is_complete(results_dir, job.label))]
    display = _Progress(len(jobs), len(jobs) - len(todo), show_progress)

    def finished(label: str) -> None:
        display.done(label)
        draw_figures(scenario, results_dir, labels)

    threads = torch.get_num_threads()  # a run sets its own; the caller's comes back after
    try:
        if use_ray:
            _on_ray(todo, ray_address, results_dir, finished)
        elif workers > 1 and len(todo) > 1:
            _on_pool(todo, workers, display, finished)
        else:
            _in_process(todo, display, finished)
    finally:
        display.close()
        configure_threads(threads)
        draw_figures(scenario, results_dir, labels)  # what was measured, cut runs marked
    return results_dir


def draw_figures(scenario: Scenario, results_dir: Path, labels: Sequence[str]) -> None:
    """The scenario's figures from the runs finished so far: comparisons, asynchrony, active
    clients when the population changes, and each run's collaboration and channel figures."""
    clients = scenario.clients
    churn = clients.can_drop_out or clients.arrivals.reserve
    plot_results(
        results_dir,
        labels,
        target_accuracy=scenario.evaluation.target_accuracy,
        event_times_s=churn_times_s(scenario) if churn else None,
    )


# --- in this process ---


def _in_process(jobs: list[Job], display: _Progress, finished: Callable[[str], None]) -> None:
    """One run after another; consecutive variants with the same data share one dataset."""
    cached: tuple[str, tuple] | None = None
    for job in jobs:
        key = _data_key(job.variant)
        if cached is None or cached[0] != key:
            cached = None  # drop the previous dataset first: one in memory at a time
            dataset = build_dataset(job.variant)
            cached = (key, (dataset, build_trainers(job.variant, dataset)))
        run_algorithm(
            job.variant, job.algorithm, *cached[1], show_progress=display.bars,
            progress=display.updater(job.label),
        )  # fmt: skip
        finished(job.label)


def _data_key(variant: Scenario) -> str:
    return json.dumps(
        variant.model_dump(mode="json", include={"seed", "dataset", "clients", "model"})
    )


# --- a pool of worker processes ---

_worker_progress: dict | None = None


def _start_worker(progress: dict | None) -> None:
    """In each worker: SIGTERM interrupts like Ctrl-C (the run flushes and says incomplete)."""
    global _worker_progress
    _worker_progress = progress
    terminate_as_interrupt()


def _work(payload: tuple[dict, str]) -> str:
    """Run one job in a worker process (its own dataset: runs share nothing)."""
    data, label = payload
    variant = parse_scenario(data, label)
    [algorithm] = [a for a in variant.algorithms if a.run_label == label]
    dataset = build_dataset(variant)
    progress = None
    if _worker_progress is not None:
        shared = _worker_progress

        def progress(round_index: int, time_s: float) -> None:
            shared[label] = time_s

    run_algorithm(
        variant, algorithm, dataset, build_trainers(variant, dataset), show_progress=False,
        progress=progress,
    )  # fmt: skip
    return label


def _on_pool(
    jobs: list[Job], workers: int, display: _Progress, finished: Callable[[str], None]
) -> None:
    context = multiprocessing.get_context("spawn")  # no forked torch state in the workers
    with context.Manager() as manager:
        shared = manager.dict() if display.enabled else None
        display.watch(shared)
        pool = context.Pool(min(workers, len(jobs)), _start_worker, (shared,))
        try:
            labels = pool.imap_unordered(_work, [job.payload() for job in jobs])
            for _ in jobs:
                while True:
                    try:
                        label = labels.next(timeout=0.5)
                        break
                    except multiprocessing.TimeoutError:
                        display.refresh()
                if shared is not None:
                    shared.pop(label, None)
                finished(label)
            pool.close()
        except BaseException:
            pool.terminate()  # SIGTERM to every worker: each run in progress flushes
            raise
        finally:
            pool.join()
            display.watch(None)


# --- Ray ---


def _on_ray(
    jobs: list[Job], address: str | None, results_dir: Path, finished: Callable[[str], None]
) -> None:
    """Each job a Ray task (CPUs: its threads; a GPU share when it trains on CUDA). The task
    runs into a folder of its own and returns its files, which the driver writes here: the
    cluster's nodes need no shared file system."""
    try:
        import ray  # optional: the ray extra
    except ImportError:
        raise ScenarioError("--ray", [f"--ray: Ray is not installed ({RAY_EXTRA})"]) from None
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    try:
        pending = {}
        for job in jobs:
            training = job.variant.training
            task = ray.remote(_ray_task).options(
                num_cpus=training.threads, num_gpus=0.5 if training.device == "cuda" else 0
            )
            pending[task.remote(job.payload())] = job
        while pending:
            [ready], _ = ray.wait(list(pending), num_returns=1)
            job = pending.pop(ready)
            files = ray.get(ready)
            # the run's resolved scenario as here (the task ran into a temporary folder)
            files["scenario.yaml"] = job.variant.to_yaml([job.algorithm]).encode()
            _write_files(results_dir / job.label, files)
            finished(job.label)
    finally:
        if started_here:
            ray.shutdown()


def _ray_task(payload: tuple[dict, str]) -> dict[str, bytes]:
    """On a Ray worker: run the job into a temporary results root; return its folder's files."""
    data, label = payload
    with tempfile.TemporaryDirectory() as root:
        data = {**data, "output": {**data["output"], "dir": root}}
        _work((data, label))
        run_dir = parse_scenario(data, label).results_dir() / label
        return {
            str(path.relative_to(run_dir)): path.read_bytes()
            for path in sorted(run_dir.rglob("*"))
            if path.is_file()
        }


def _write_files(run_dir: Path, files: dict[str, bytes]) -> None:
    for name, content in files.items():
        path = run_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


# --- signals and progress ---


def terminate_as_interrupt() -> None:
    """Handle SIGTERM like SIGINT: raise KeyboardInterrupt, so a run flushes its rows and
    writes ``"complete": false`` before the process exits."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)


class _Progress:
    """One display for the whole study: runs done of the total, and the simulated time each
    run in progress has reached."""

    def __init__(self, total: int, done: int, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self._log_lines = enabled and not self.enabled  # no terminal: a line per run instead
        self.bars = False  # per-run bars: never, the study's own display stands for them
        self._running: dict[str, float] = {}
        self._done, self._total = done, total
        self._shared: dict | None = None
        self._bar = tqdm(
            total=total, initial=done, desc="runs", unit="run", disable=not self.enabled,
            file=sys.stderr,
        )  # fmt: skip
        self._last_refresh = 0.0

    def updater(self, label: str) -> Callable[[int, float], None]:
        def update(round_index: int, time_s: float) -> None:
            self._running[label] = time_s
            self.refresh()

        return update

    def watch(self, shared: dict | None) -> None:
        """Read the workers' simulated times from this shared dict (None: stop)."""
        self._shared = shared

    def done(self, label: str) -> None:
        self._running.pop(label, None)
        self._done += 1
        self._bar.update(1)
        if self._log_lines:
            print(f"[{self._done}/{self._total}] {label} done", file=sys.stderr)
        self.refresh(force=True)

    def refresh(self, force: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (not force and now - self._last_refresh < 0.5):
            return
        self._last_refresh = now
        running = dict(self._shared) if self._shared is not None else self._running
        self._bar.set_postfix_str(
            ", ".join(f"{label} t={t:.0f}s" for label, t in sorted(running.items())), refresh=True
        )

    def close(self) -> None:
        self._bar.close()
