"""Command line: ``fedsim run | validate | budget | check-events | plot | compare | schema |
algorithms``.

Bad input (a scenario field, a missing data folder, a results path) is reported as
``field: reason`` lines on stderr with exit code 2 and no traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from fedsim import __version__
from fedsim.config import (
    ALGORITHM_NAMES,
    Scenario,
    ScenarioError,
    algorithm_model,
    data_root_problem,
    load_scenario,
    parse_scenario,
)
from fedsim.results.files import COLLABORATION_FILE, SUMMARY_FILE
from fedsim.results.places import file_problem, folder_problem, tree_problem
from fedsim.sim.event_check import check_events, format_report, not_an_events_file

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C
EXIT_TERMINATED = 143  # 128 + SIGTERM
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports `yes | head -1`'s writer
THREADS_ENV_VAR = "FEDSIM_THREADS"


def _report(error: ScenarioError) -> int:
    """``error: <source>:`` and a problem per line; where every problem names the source
    already (``--workers: ...``), the problems alone, each as an ``error:`` line."""
    if all(problem.startswith(error.source) for problem in error.problems):
        for problem in error.problems:
            print(f"error: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"error: {error.source}:", file=sys.stderr)
    for problem in error.problems:
        print(f"  {problem}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _validate(args: argparse.Namespace) -> int:
    status = 0
    for path in args.files:
        try:
            scenario = load_scenario(path, args.set)
            problems = _results_problems(scenario) + _data_problems(scenario, with_files=args.data)
        except ScenarioError as error:
            status = _report(error)
            continue
        if problems:
            status = _report(ScenarioError(str(path), problems))
            continue
        labels = ", ".join(a.run_label for a in scenario.algorithms)
        print(f"{path}: ok (scenario {scenario.name!r}; runs: {labels})")
    return status


def _results_problems(scenario: Scenario, source: str = "output.dir") -> list[str]:
    """The results folder (``<output.dir>/<name>``) must be a folder, or be creatable, and take
    files, and so must the run folders of this study that are there already."""
    labels = [algorithm.run_label for v in scenario.variants() for algorithm in v.algorithms]
    problem = tree_problem(scenario.results_dir(), labels)
    return [] if problem is None else [f"{source}: {problem} (results go to <output.dir>/<name>)"]


def _data_problems(scenario: Scenario, with_files: bool) -> list[str]:
    """A data folder the user named must exist; ``with_files``: the dataset files each run
    reads must be under the resolved root too (validate never downloads)."""
    if with_files:
        from fedsim.runner import missing_data  # torch: only when the files are asked for
    problems: list[str] = []
    for variant in scenario.variants():  # a sweep may change the dataset or its root
        dataset = variant.dataset
        if dataset.name == "synthetic":
            continue
        root = dataset.resolved_root()
        problem = data_root_problem(root)
        if problem is None and with_files:
            problem = missing_data(variant, root)
        if problem is not None and problem not in problems:
            problems.append(problem)
    return problems


def _with_threads(scenario: Scenario, args: argparse.Namespace) -> Scenario:
    """The scenario with the thread count asked for outside the file, if any: --threads, else
    $FEDSIM_THREADS (validated like training.threads in the file)."""
    if args.threads is not None:
        source, threads = "--threads", args.threads
    elif os.environ.get(THREADS_ENV_VAR, "").strip():
        source, value = THREADS_ENV_VAR, os.environ[THREADS_ENV_VAR].strip()
        if not value.isdigit():
            raise ScenarioError(source, [f"must be a whole number >= 1, got {value!r}"])
        threads = int(value)
    else:
        return scenario
    return _override(scenario, "training", "threads", threads, source)


def _override(scenario: Scenario, section: str, key: str, value: object, source: str) -> Scenario:
    """The scenario with one field set from the command line, validated like the file's."""
    data = scenario.model_dump(mode="json")
    data[section][key] = value
    return parse_scenario(data, source)


def _run(args: argparse.Namespace) -> int:
    scenario = _with_threads(load_scenario(args.file, args.set), args)
    if args.output is not None:
        output = scenario.output.model_copy(update={"dir": args.output})
        scenario = scenario.model_copy(update={"output": output})
    source = "output.dir" if args.output is None else "--output"
    problems = _results_problems(scenario, source) + _data_problems(scenario, with_files=False)
    if problems:
        raise ScenarioError(str(args.file), problems)
    from fedsim import study  # torch (seconds to import): once the input is known to be good

    study.terminate_as_interrupt()
    results_dir = scenario.results_dir()
    try:
        study.run_study(
            scenario, only=args.only, workers=args.workers, resume=args.resume,
            use_ray=args.ray is not None, ray_address=args.ray or None,
            show_progress=not args.quiet,
        )  # fmt: skip
    except KeyboardInterrupt as stop:
        terminated = isinstance(stop, study.Terminated)
        by = " by SIGTERM" if terminated else ""
        print(f"\ninterrupted{by}: what was measured is in {results_dir}", file=sys.stderr)
        return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
    summaries = [  # this study's runs only, not the run folders an earlier one left there
        json.loads((results_dir / label / SUMMARY_FILE).read_text())
        for label in sorted(study.study_labels(results_dir) or [])
        if (results_dir / label / SUMMARY_FILE).exists()
    ]
    for summary in summaries:
        print(_summary_line(summary))
    _print_across_seeds(summaries)
    print(f"results: {results_dir}")
    return 0


def _print_across_seeds(summaries: list[dict]) -> None:
    from analysis.stats import across_seeds  # matplotlib (analysis): only after a run

    aggregates = across_seeds(summaries)
    if aggregates:
        print("across seeds (mean ± sample sd of the final mean accuracy):")
    for a in sorted(aggregates, key=lambda a: -a.final_mean):
        time = (
            ""
            if a.km_median_time_to_target_s is None
            else f", KM median {a.km_median_time_to_target_s:.1f}s"
        )
        spread = "% (no sd: one seed)" if a.final_std is None else f" ± {100 * a.final_std:.1f}%"
        print(
            f"{a.label:>16}: final {100 * a.final_mean:.1f}{spread} "
            f"(worst client {100 * a.worst_mean:.1f}%) over {a.seeds} seed{'s' * (a.seeds > 1)}, "
            f"target reached in {a.reached}/{a.seeds} ({a.reached / a.seeds:.0%}){time}"
        )


def _summary_line(summary: dict) -> str:
    def pct(value: float | None) -> str:
        return "-" if value is None else f"{100 * value:.1f}%"

    target = summary["time_to_target_s"]
    reached = "not reached" if target is None else f"{target:.1f}s"
    return (
        f"{summary['algorithm']:>12}: final {pct(summary['final_accuracy'])} "
        f"(worst client {pct(summary['final_worst_accuracy'])}), target {reached}, "
        f"up {summary['uplink_bytes'] / 1e6:.2f} MB, "
        f"down {summary['downlink_bytes'] / 1e6:.2f} MB, "
        + (f"d2d {summary['d2d_bytes'] / 1e6:.2f} MB, " if summary.get("d2d_bytes") else "")
        + f"{summary['time_s']:.1f}s simulated"
    )


def _budget(args: argparse.Namespace) -> int:
    problem = None if args.json is None else file_problem(args.json)
    if problem is not None:
        raise ScenarioError("--json", [f"--json: {problem}"])
    rounds = {} if args.rounds is None else {f"--rounds {args.rounds}": f"run.rounds={args.rounds}"}
    scenario = load_scenario(args.file, args.set, rounds)  # --set checked with --rounds applied
    # torch, seconds to import: once the input is known to be good
    from fedsim.budget import budget_algorithm, event_load_warnings, format_budgets  # torch
    from fedsim.runner import build_dataset, build_trainers, select_algorithms  # torch
    from fedsim.study import Progress  # torch (the display of `fedsim run`'s studies)

    runs = [(variant, select_algorithms(variant, args.only)) for variant in scenario.variants()]
    for line in dict.fromkeys(line for variant, _ in runs for line in event_load_warnings(variant)):
        print(line, file=sys.stderr)
    # Runs done of the total and the simulated time of the one under way, on a terminal only:
    # never in the budget printed.
    display = Progress(sum(len(algorithms) for _, algorithms in runs), 0, sys.stderr.isatty())
    budgets, skipped = [], []
    try:
        for variant, algorithms in runs:
            dataset = build_dataset(variant, timing_only=True)
            trainers = build_trainers(variant, dataset, timing_only=True)
            for algorithm in algorithms:
                label = algorithm.run_label
                try:
                    budgets.append(
                        budget_algorithm(
                            variant, algorithm, dataset, trainers, progress=display.updater(label)
                        )
                    )
                except ValueError as error:  # a choice that only the data can make
                    skipped.append(f"{label}: no budget: {error}")
                display.done(label)
    finally:
        display.close()
    largest = max(trainer.num_params for trainer in trainers)  # a mix: its largest model
    model_bytes = largest * scenario.system.network.precision_bits // 8
    print(format_budgets(scenario, budgets, model_bytes))
    for line in skipped:
        print(line)
    if args.json is not None:
        args.json.write_text(json.dumps([b.as_dict() for b in budgets], indent=2) + "\n")
    return 0


def _check_events(args: argparse.Namespace) -> int:
    status = 0
    for path in args.files:
        problem = "no such events file" if not path.is_file() else not_an_events_file(path)
        if problem is not None:
            status = _report(ScenarioError(str(path), [problem]))
            continue
        report = check_events(path)
        print(f"{path}:\n{format_report(report)}")
        status = status or (0 if report.ok else 1)
    return status


def _plot(args: argparse.Namespace) -> int:
    """Comparison plots into --out (default: the one folder given, else here), and each run's
    collaboration figures into its own folder (under --out, in a folder per run label)."""
    from analysis import find_runs, plot_runs  # matplotlib: only to draw
    from analysis.weights import plot_collaboration_figures  # matplotlib: only to draw

    out = args.out or (args.dirs[0] if len(args.dirs) == 1 else Path("."))
    problem = folder_problem(out)
    if problem is not None:
        return _report(ScenarioError("plot", [f"--out: {problem}"]))
    left_out: list[Path] = []
    try:
        runs = find_runs(args.dirs, left_out)
        _say_left_out(left_out)
        # without --out, a run's collaboration figures go into its own folder
        unwritable = [] if args.out is not None else [
            f"{run.path}: {refused}"
            for run in runs
            if (run.path / COLLABORATION_FILE).is_file()
            and (refused := folder_problem(run.path)) is not None
        ]  # fmt: skip
        if unwritable:
            return _report(ScenarioError("plot", unwritable))
        written = plot_runs(runs, out, args.target)  # first: it refuses mixed seed groups
        collaborative = [run for run in runs if (run.path / COLLABORATION_FILE).is_file()]
        written += [
            path
            for run in collaborative
            for path in plot_collaboration_figures(
                run.path, None if args.out is None else args.out / run.label
            )
        ]
    except (ValueError, FileNotFoundError) as error:  # e.g. seeds of different scenarios
        return _report(ScenarioError("plot", [str(error)]))
    for path in written:
        print(path)
    return 0


def _schema(args: argparse.Namespace) -> int:
    """The scenario schema as JSON Schema (pydantic's), every key with its type, bounds,
    default and description."""
    print(json.dumps(Scenario.model_json_schema(), indent=2))
    return 0


def _algorithms(args: argparse.Namespace) -> int:
    """Every algorithm name with what it is and its options: type, default, description."""
    for name in ALGORITHM_NAMES:
        model = algorithm_model(name)
        defaults = model.model_validate({"name": name}).model_dump(mode="json")
        print(f"{name}: {(model.__doc__ or '').strip().splitlines()[0]}")
        for field_name, field in model.model_fields.items():
            if field_name in ("name", "label"):
                continue
            about = f"  ({field.description})" if field.description else ""
            print(f"    {field_name} = {json.dumps(defaults[field_name])}{about}")
    return 0


def _add_set(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario field (dotted key, e.g. system.network.rho=2, "
        "'algorithms[0].deadline_s=5', 'sweep.seed=[1,2,3]'; the value is YAML; quote what "
        "holds brackets, which zsh and other shells expand); repeatable",
    )


def _compare(args: argparse.Namespace) -> int:
    """One row per run label over its seeds (Kaplan–Meier time to target, 95% CIs), printed or
    written to --out."""
    from analysis import compare_rows, find_runs, format_table  # matplotlib (analysis)

    problem = None if args.out is None else file_problem(args.out)
    if problem is not None:
        return _report(ScenarioError("compare", [f"--out: {problem}"]))
    left_out: list[Path] = []
    try:
        runs = find_runs(args.dirs, left_out)
        _say_left_out(left_out)
        table = format_table(compare_rows(runs), args.format)
        if args.out is not None:
            args.out.write_text(table)
    except (ValueError, OSError) as error:
        return _report(ScenarioError("compare", [str(error)]))
    print(table.rstrip("\n") if args.out is None else args.out)
    return 0


def _say_left_out(left_out: list[Path]) -> None:
    """One line per scenario folder whose earlier studies' run folders were not read."""
    by_folder: dict[Path, list[str]] = {}
    for run_dir in left_out:
        by_folder.setdefault(run_dir.parent, []).append(run_dir.name)
    for folder, names in by_folder.items():
        print(
            f"{folder}: {len(names)} run folder{'s' * (len(names) > 1)} of an earlier study "
            f"left out (not in its study.json, or other settings): {', '.join(names)}; "
            "name a run folder to read it",
            file=sys.stderr,
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fedsim", description="Discrete-event simulator of wireless federated learning."
    )
    parser.add_argument("--version", action="version", version=f"fedsim {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run a scenario and write results and plots")
    run.add_argument("file", type=Path, help="scenario YAML file")
    run.add_argument("--only", nargs="+", metavar="LABEL", help="run only these algorithm labels")
    run.add_argument("--output", type=Path, help="results root (overrides output.dir)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument(
        "--threads",
        type=int,
        help=f"torch threads per run (default: ${THREADS_ENV_VAR}, else the scenario's "
        "training.threads, 1: small models gain nothing from more threads and lose badly when "
        "cores are shared); results depend on the count",
    )
    run.add_argument(
        "--workers",
        type=int,
        default=1,
        help="run the independent runs (algorithms x sweep points x seeds) in this many "
        "processes, each with the scenario's training.threads (1): the same files as one",
    )
    run.add_argument(
        "--resume",
        action="store_true",
        help="skip runs whose summary.json says complete; rerun the others from the start",
    )
    run.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="run each run as a Ray task (pip install -e '.[ray]'): on a local Ray, or the "
        "cluster at ADDRESS (e.g. ray://head:10001, or auto)",
    )
    _add_set(run)
    run.set_defaults(handler=_run)

    validate = commands.add_parser("validate", help="check scenario files without running")
    validate.add_argument("files", type=Path, nargs="+")
    validate.add_argument(
        "--data",
        action="store_true",
        help="also check that the dataset files are under the resolved data root (no download)",
    )
    _add_set(validate)
    validate.set_defaults(handler=_validate)

    budget = commands.add_parser(
        "budget", help="bytes and round-time breakdown per algorithm, without training"
    )
    budget.add_argument("file", type=Path, help="scenario YAML file")
    budget.add_argument("--only", nargs="+", metavar="LABEL", help="only these algorithm labels")
    budget.add_argument("--rounds", type=int, help="override run.rounds")
    budget.add_argument("--json", type=Path, help="also write the budgets as JSON")
    _add_set(budget)
    budget.set_defaults(handler=_budget)

    check = commands.add_parser("check-events", help="verify an events.jsonl against invariants")
    check.add_argument("files", type=Path, nargs="+")
    check.set_defaults(handler=_check_events)

    plot = commands.add_parser("plot", help="redraw and overlay runs from results folders")
    plot.add_argument("dirs", type=Path, nargs="+", help="run folders or scenario folders")
    plot.add_argument("--out", type=Path, help="folder for the PNG files")
    plot.add_argument("--target", type=float, help="target accuracy line (fraction)")
    plot.set_defaults(handler=_plot)

    compare = commands.add_parser(
        "compare", help="table of the runs over their seeds: accuracy, time and bytes to target"
    )
    compare.add_argument("dirs", type=Path, nargs="+", help="run folders or scenario folders")
    compare.add_argument("--format", choices=("md", "csv"), default="md", help="default: md")
    compare.add_argument("--out", type=Path, help="write the table to this file, not stdout")
    compare.set_defaults(handler=_compare)

    schema = commands.add_parser("schema", help="print the scenario schema (JSON Schema)")
    schema.set_defaults(handler=_schema)
    algorithms = commands.add_parser("algorithms", help="list the algorithms and their options")
    algorithms.set_defaults(handler=_algorithms)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except ScenarioError as error:
        return _report(error)
    except KeyboardInterrupt:  # e.g. while torch loads; a run says more itself (_run)
        print("\ninterrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader left (`fedsim schema | head -1`): stop quietly
        _discard_stdout()
        return EXIT_BROKEN_PIPE


def _discard_stdout() -> None:
    """Point stdout at the null device, so that the interpreter's last flush of what is still
    buffered for the closed pipe fails nowhere (it would print a second error at exit)."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, sys.stdout.fileno())
    os.close(null)


if __name__ == "__main__":
    sys.exit(main())
