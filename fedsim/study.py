"""A scenario's runs (algorithms x sweep points x seeds) as independent jobs: one after another
in this process, on a pool of worker processes (``workers``), or as Ray tasks (``ray``), each
run writing its own folder exactly as it would alone; ``resume`` skips the runs whose
``summary.json`` says complete and whose resolved scenario is the one it would run now, and
reruns the others from the start.

Before the runs start, the study says what it found in its results folder (run folders of an
earlier study, runs replaced or kept) and writes its manifest (``study.json``: its labels and
the hash of each run's resolved scenario), so its summary, its figures and a reader of the folder
can tell its runs from those an earlier study left there.

One run stays one process, one World, one seed: parallelism is across runs only, so a run's
files do not depend on how many run beside it. Each worker trains with the scenario's
``training.threads`` (default 1): more threads per run would change the numbers (results depend
on the count) and small models gain little from them, while N workers x 1 thread use N cores.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import torch
from tqdm import tqdm

from analysis.figures import plot_results
from analysis.results import first_difference, load_yaml, read_scenario
from fedsim.budget import event_load_warnings
from fedsim.config import AlgorithmConfig, Scenario, ScenarioError, parse_scenario
from fedsim.learn.execution import (
    configure_determinism,
    configure_threads,
    cpu_has_native_bf16,
)
from fedsim.results.files import (
    METRICS_FILE,
    SCENARIO_FILE,
    STUDY_FILE,
    SUMMARY_FILE,
    scenario_identity,
    scenario_sha256,
)
from fedsim.results.recorder import clear_run_folder
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

    @cached_property
    def resolved_yaml(self) -> str:
        """The run's ``scenario.yaml``, as the runner writes it."""
        return self.variant.to_yaml([self.algorithm])

    @cached_property
    def sha256(self) -> str:
        """``scenario_sha256`` of ``resolved_yaml`` read back, as a reader of the file gets it."""
        return scenario_sha256(load_yaml(self.resolved_yaml))


def plan(scenario: Scenario, only: Sequence[str] | None = None) -> list[Job]:
    return [Job(v, a) for v in scenario.variants() for a in select_algorithms(v, only)]


def is_complete(results_dir: Path, label: str) -> bool:
    """Whether the run's folder holds a finished run (its summary says so)."""
    try:
        return json.loads((results_dir / label / SUMMARY_FILE).read_text())["complete"] is True
    except (OSError, ValueError, KeyError, TypeError):
        return False


@dataclass
class Found:
    """What a study found in its results folder before it started, by run label."""

    others: list[str] = field(default_factory=list)  # run folders of no run of this study: kept
    kept: list[str] = field(default_factory=list)  # --resume: complete, same scenario: skipped
    again: list[str] = field(default_factory=list)  # this study's, same (or unknown) scenario
    changed: dict[str, str] = field(default_factory=dict)  # label: "key is a there, b now"

    def lines(self, results_dir: Path) -> list[str]:
        """One line per kind of thing found, for the user before the study starts."""
        example = ""
        if self.changed:
            label, difference = next(iter(self.changed.items()))
            example = (
                f" ({difference})" if len(self.changed) == 1 else f" (e.g. {label}: {difference})"
            )
        kinds = [
            (self.others, "from an earlier study {are} kept but {are} not part of this study", ""),
            (list(self.changed), "of an earlier study with other settings {are} replaced", example),
            (self.again, "of this study's runs {are} run again from the start", ""),
            (self.kept, "of complete runs with the same settings {are} kept (--resume)", ""),
        ]
        lines = []
        for labels, what, note in kinds:
            if labels:
                verb = "are" if len(labels) > 1 else "is"
                folders = f"{len(labels)} run folder{'s' if len(labels) > 1 else ''}"
                what = what.format(are=verb)
                lines.append(f"{results_dir}: {folders} {what}: {_few(labels)}{note}")
        return lines


def survey(results_dir: Path, jobs: Sequence[Job], resume: bool) -> Found:
    """What ``results_dir`` holds already: run folders of no job, and for each job's folder
    whether it is kept (``resume``, complete, the same ``scenario_sha256``), run again, or holds
    a run of other settings (with the first key that differs). Raises ScenarioError if a file
    stands where a run folder goes."""
    found = Found()
    labels = {job.label for job in jobs}
    for job in jobs:
        run_dir = results_dir / job.label
        if not run_dir.exists():
            continue
        if not run_dir.is_dir():
            problem = f"output.dir: {run_dir} is a file where the run {job.label} writes its folder"
            raise ScenarioError("output.dir", [problem + ": move it away"])
        if not _holds_a_run(run_dir):
            continue
        try:
            there = read_scenario(run_dir)
        except ValueError:
            there = None  # unreadable: its settings are unknown, it is run again
        if there is not None and scenario_sha256(there) != job.sha256:
            now = load_yaml(job.resolved_yaml)
            key, before, after = first_difference(
                scenario_identity(there), scenario_identity(now)
            ) or ("(unknown)", "", "")
            found.changed[job.label] = f"{key} is {before} there, {after} now"
        elif resume and there is not None and is_complete(results_dir, job.label):
            found.kept.append(job.label)
        else:
            found.again.append(job.label)
    if results_dir.is_dir():
        found.others = sorted(
            child.name
            for child in results_dir.iterdir()
            if child.name not in labels and child.is_dir() and _holds_a_run(child)
        )
    return found


def _holds_a_run(folder: Path) -> bool:
    return any((folder / name).is_file() for name in (SCENARIO_FILE, METRICS_FILE, SUMMARY_FILE))


def _few(labels: Sequence[str], most: int = 6) -> str:
    shown = ", ".join(labels[:most])
    return shown if len(labels) <= most else f"{shown} and {len(labels) - most} more"


def write_manifest(scenario: Scenario, jobs: Sequence[Job], results_dir: Path) -> None:
    """``study.json``: the study's runs and the hash of each one's resolved scenario."""
    manifest = {
        "scenario": scenario.name,
        "scenario_sha256": scenario_sha256(load_yaml(scenario.to_yaml())),
        "runs": {job.label: job.sha256 for job in jobs},
    }
    (results_dir / STUDY_FILE).write_text(json.dumps(manifest, indent=2) + "\n")


def study_labels(results_dir: Path) -> list[str] | None:
    """The run labels of the study last started in ``results_dir`` (its manifest); None
    without a readable one."""
    try:
        return list(json.loads((results_dir / STUDY_FILE).read_text())["runs"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


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

    First says on stderr what the folder already holds (``survey``) and writes the manifest;
    with ``resume``, refuses (ScenarioError) a folder holding runs of this study's labels with
    other settings, since resuming would mix two studies. The figures draw only this study's
    runs: a run folder left by an earlier study is drawn only once this study has rewritten it.

    Raises KeyboardInterrupt (``Terminated`` on SIGTERM, see ``terminate_as_interrupt``) after
    the runs in progress have flushed what they measured (``"complete": false``).
    """
    if workers < 1:
        raise ScenarioError("--workers", [f"--workers: at least 1, got {workers}"])
    jobs = plan(scenario, only)
    for job in jobs:  # before any folder is written or worker started
        require_a_sample_per_client(job.variant)
    results_dir = scenario.results_dir()
    found = survey(results_dir, jobs, resume)
    if resume and found.changed:
        raise ScenarioError("--resume", _refusal(results_dir, found))
    load = dict.fromkeys(line for job in jobs for line in event_load_warnings(job.variant))
    for line in [*found.lines(results_dir), *_emulated_bf16(jobs), *load]:
        print(line, file=sys.stderr)
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / SCENARIO_FILE).write_text(scenario.to_yaml())
    write_manifest(scenario, jobs, results_dir)
    resolved = {job.label: job.resolved_yaml for job in jobs}
    todo = [job for job in jobs if job.label not in found.kept]
    display = Progress(len(jobs), len(jobs) - len(todo), show_progress)

    def ours() -> list[str]:
        """The labels whose folder holds this study's run (kept, or written by it)."""
        return [
            label
            for label, text in resolved.items()
            if label in found.kept or _text(results_dir / label / SCENARIO_FILE) == text
        ]

    def finished(label: str) -> None:
        display.done(label)
        draw_figures(scenario, results_dir, ours())

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
        draw_figures(scenario, results_dir, ours())  # what was measured, cut runs marked
    return results_dir


def _emulated_bf16(jobs: Sequence[Job]) -> list[str]:
    """A warning when runs train in bf16 on a CPU that does not compute in it natively (slower
    than fp32 there), once for the study."""
    on_cpu = any(
        job.variant.training.precision == "bf16" and job.variant.training.device == "cpu"
        for job in jobs
    )
    if not on_cpu or cpu_has_native_bf16() is not False:
        return []
    return [
        "warning: training.precision bf16: this CPU has no native bf16 arithmetic (no "
        "AVX512_BF16 or AMX on x86, no BF16 on ARM), so PyTorch converts around every operation "
        "and trains slower than in fp32 (2.4x measured); use fp32 here (README, Performance)"
    ]


def _refusal(results_dir: Path, found: Found) -> list[str]:
    """Why --resume will not go on: the runs whose settings differ, and what to do."""
    changed = list(found.changed.items())
    return [
        f"--resume: {results_dir} holds runs with other settings than this study would run "
        "(resuming would mix two studies):",
        *(f"{label}: {difference}" for label, difference in changed[:10]),
        *([f"and {len(changed) - 10} more"] if len(changed) > 10 else []),
        "run with the settings those runs had, without --resume to replace them, or with "
        "another --output",
    ]


def _text(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


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


def _in_process(jobs: list[Job], display: Progress, finished: Callable[[str], None]) -> None:
    """One run after another; consecutive variants with the same data share one dataset."""
    cached: tuple[str, tuple] | None = None
    for job in jobs:
        configure_determinism(job.variant.training.deterministic)  # before CUDA starts
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


_worker_running = False  # in a worker: whether a run is in progress (it has files to flush)


def _start_worker(progress: dict | None) -> None:
    """In each worker: Ctrl-C is ignored (a terminal sends it to every process of its group;
    the driver answers it with SIGTERM), and SIGTERM stops the run in progress like Ctrl-C (it
    flushes and says incomplete), then ends the worker quietly: the driver's one line says
    what happened, not a traceback per worker."""
    global _worker_progress
    _worker_progress = progress
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _worker_terminated)


def _worker_terminated(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: another must not cut the flush short
    if _worker_running:
        raise Terminated(f"signal {signum}")
    raise SystemExit(128 + signal.SIGTERM)  # between runs: nothing to flush


def _work(payload: tuple[dict, str]) -> str:
    """Run one job in a worker process (its own dataset: runs share nothing)."""
    global _worker_running
    data, label = payload
    variant = parse_scenario(data, label)
    configure_determinism(variant.training.deterministic)  # before this process uses CUDA
    [algorithm] = [a for a in variant.algorithms if a.run_label == label]
    dataset = build_dataset(variant)
    progress = None
    if _worker_progress is not None:
        shared = _worker_progress

        def progress(round_index: int, time_s: float) -> None:
            shared[label] = time_s

    _worker_running = True
    try:
        run_algorithm(
            variant, algorithm, dataset, build_trainers(variant, dataset), show_progress=False,
            progress=progress,
        )  # fmt: skip
    except KeyboardInterrupt:  # the run has flushed; a SystemExit ends the worker quietly
        raise SystemExit(128 + signal.SIGTERM) from None
    finally:
        _worker_running = False
    return label


def _on_pool(
    jobs: list[Job], workers: int, display: Progress, finished: Callable[[str], None]
) -> None:
    context = multiprocessing.get_context("spawn")  # no forked torch state in the workers
    with _children_ignore_ctrl_c():
        manager_context = context.Manager()
    with manager_context as manager:
        shared = manager.dict() if display.enabled else None
        display.watch(shared)
        with _children_ignore_ctrl_c():
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
    clear_run_folder(run_dir)
    for name, content in files.items():
        path = run_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


# --- signals and progress ---


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that the runs flush; the command exits 143, not 130."""


def terminate_as_interrupt() -> None:
    """Handle SIGTERM like SIGINT: raise ``Terminated`` (a KeyboardInterrupt), so a run flushes
    its rows and writes ``"complete": false`` before the process exits. Only the first: a
    second SIGTERM (e.g. sent to the whole process group and again by the driver) must not cut
    the flush short."""

    def interrupt(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)


@contextlib.contextmanager
def _children_ignore_ctrl_c() -> Iterator[None]:
    """Processes started inside inherit SIGINT ignored (Python keeps an ignored SIGINT through
    exec), so a Ctrl-C while a spawned worker is still importing torch does not print its
    traceback; the driver misses a Ctrl-C only during these few milliseconds."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers; a study run from a thread keeps them
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class Progress:
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
