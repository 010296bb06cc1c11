"""Discrete-event overhead: SimPy events per second, and the share of a full run outside torch.

1. A timing-only run (what ``fedsim budget`` does: shape-only "meta" models, no arithmetic)
   of FedAvg with a deadline on 10,000 clients under churn (renewal on/off availability,
   Poisson arrivals from a reserve and departures). Every SimPy event the environment
   processes is counted by a subclass of ``simpy.Environment`` that the World is built with
   in a reference run; the timed runs (same seed, so the same events) use SimPy's own. About
   as many bare SimPy events (processes that only wait on timeouts) are timed alongside, as
   this machine's ceiling for any SimPy model, and the same run with SimPy's own ``run``
   instead of fedsim's guarded loop (``fedsim.sim.clock``, which looks at the clock every
   1,024 events so that a model that stops time cannot spin forever): the guard's cost.
2. A full run of a real scenario (default ``scenarios/quickstart.yaml``: real Fashion-MNIST,
   real training): total wall time of the runs against the time spent inside ``Trainer``
   calls (training, evaluation, ...). Everything else, i.e. the event loop, the protocol, the
   recorder writing its files and the aggregation, counts as overhead.

    python -m benchmarks.event_throughput [--clients 10000] [--rounds 30] [--scenario FILE]
"""

from __future__ import annotations

import functools
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from unittest import mock

import simpy

from benchmarks._common import base_parser, set_threads, table, write_results
from fedsim.algorithms import ALGORITHMS
from fedsim.config import Scenario, load_scenario, parse_scenario
from fedsim.learn.data import FederatedDataset
from fedsim.learn.trainer import Trainer
from fedsim.results.recorder import Recorder
from fedsim.runner import build_dataset, build_trainers, run_algorithm
from fedsim.sim import clock
from fedsim.world import World

REPO = Path(__file__).resolve().parents[1]
TARGET_EVENTS_PER_S = 200_000
TARGET_OVERHEAD_SHARE = 0.05


class CountingEnvironment(simpy.Environment):
    """A SimPy environment that counts the events it processes."""

    def __init__(self, initial_time: float = 0) -> None:
        super().__init__(initial_time)
        self.events_processed = 0

    def step(self) -> None:
        self.events_processed += 1
        super().step()


def churn_scenario(clients: int, rounds: int, dataset: str = "fashion_mnist") -> Scenario:
    """10,000 clients (a tenth more in reserve) that go offline and come back, arrive and
    leave; FedAvg samples 10% of them per round and closes each round at a deadline."""
    return parse_scenario(
        {
            "name": "event_throughput",
            "seed": 0,
            "dataset": {"name": dataset, "partition": {"kind": "iid"}, "download": False},
            "model": {"name": "lenet5"},
            "clients": {
                "count": clients,
                "availability": {"kind": "renewal", "mean_online_s": 600, "mean_offline_s": 120},
                "arrivals": {"reserve": clients // 10, "rate_per_s": 0.5},
                "departures": {"rate_per_s": 0.5},
            },
            "system": {
                "network": {"uplink_mbps": {"kind": "lognormal", "median": 2.0, "sigma": 0.5},
                            "rho": 4.0, "latency_s": 0.02},
                "compute": {"t_min_s": 2.0, "mean_extra_s": 1.0},
            },
            "algorithms": [{"name": "fedavg", "client_fraction": 0.1, "deadline_s": 8.0}],
            "run": {"rounds": rounds},
        }
    )  # fmt: skip


def _simpy_run(env: simpy.Environment, until: simpy.Event, **_: object) -> None:
    """SimPy's own loop (with the same garbage-collection setting), for the guard's cost."""
    with clock._fewer_gc_passes():
        env.run(until=until)


def timing_only_run(
    sc: Scenario,
    dataset: FederatedDataset,
    trainers: list[Trainer],
    environment: type[simpy.Environment] = simpy.Environment,
    *,
    unguarded: bool = False,
) -> dict:
    """One timing-only run: seconds in the event loop and in total, and what it simulated
    (``events`` where ``environment`` counts them); ``unguarded``: with SimPy's own loop."""
    algorithm = sc.algorithms[0]
    recorder = Recorder(None, scenario_name=sc.name, label=algorithm.run_label,
                        target_accuracy=None, resolved_scenario_yaml="")  # fmt: skip
    start = time.perf_counter()
    with mock.patch.object(simpy, "Environment", environment):  # the World builds its own
        world = World(sc, algorithm, dataset, trainers, recorder, timing_only=True)
    built = time.perf_counter()
    cpu = time.process_time()
    with mock.patch.object(clock, "run", _simpy_run) if unguarded else ExitStack():
        world.run(ALGORITHMS[algorithm.name](world, algorithm))
    loop_cpu_s = time.process_time() - cpu
    loop_s = time.perf_counter() - built
    world.finish(complete=True)
    rows = recorder.round_rows
    return {
        "events": getattr(world.env, "events_processed", None),
        "loop_s": loop_s,
        "loop_cpu_s": loop_cpu_s,
        "total_s": time.perf_counter() - start,
        "fingerprint": (world.env.now, len(rows), world.log.sent_bytes, world.log.wasted_bytes),
        "participants_per_round": sum(r["completed"] for r in rows) / max(len(rows), 1),
        "selected_per_round": sum(r["selected"] for r in rows) / max(len(rows), 1),
    }


def bare_simpy_run(
    processes: int, until_s: float, environment: type[simpy.Environment] = simpy.Environment
) -> tuple[float, int | None]:
    """Processes that do nothing but wait on timeouts (SimPy's own ceiling on this machine):
    seconds, and the events processed where ``environment`` counts them."""

    def wait(env: simpy.Environment, period_s: float) -> Iterator[simpy.Event]:
        while True:
            yield env.timeout(period_s)

    env = environment()
    for k in range(processes):
        env.process(wait(env, 1.0 + k / processes))
    start = time.perf_counter()
    env.run(until=until_s)
    return time.perf_counter() - start, getattr(env, "events_processed", None)


def event_rate(clients: int, rounds: int, repeats: int, dataset: str) -> dict:
    """Events are counted in one reference run of each kind, then the same (deterministic)
    runs are timed with SimPy's own environment, so the count costs the timing nothing."""
    sc = churn_scenario(clients, rounds, dataset)
    data = build_dataset(sc)
    trainers = build_trainers(sc, data)
    reference = timing_only_run(sc, data, trainers, CountingEnvironment)
    events = reference["events"]
    bare_until_s = max(2.0, 1.5 * events / clients)  # about as many events as the run
    _, bare_events = bare_simpy_run(clients, bare_until_s, CountingEnvironment)
    runs, plain, bare_s = [], [], []
    for _ in range(repeats):  # alternate, so that all see the same machine load
        runs.append(timing_only_run(sc, data, trainers))
        plain.append(timing_only_run(sc, data, trainers, unguarded=True))
        bare_s.append(bare_simpy_run(clients, bare_until_s)[0])
        if {runs[-1]["fingerprint"], plain[-1]["fingerprint"]} != {reference["fingerprint"]}:
            raise RuntimeError("timing-only runs of one seed differ: not deterministic")
    best = min(runs, key=lambda r: r["loop_s"])
    bare_rate = bare_events / min(bare_s)
    simulated_s, rounds_done, _, _ = reference["fingerprint"]
    return {
        "clients": clients,
        "reserve": clients // 10,
        "rounds": rounds_done,
        "events": events,
        "simulated_s": simulated_s,
        "selected_per_round": reference["selected_per_round"],
        "participants_per_round": reference["participants_per_round"],
        "loop_s_best": best["loop_s"],
        "loop_s_runs": [r["loop_s"] for r in runs],
        "events_per_s": events / best["loop_s"],
        "events_per_cpu_s": events / min(r["loop_cpu_s"] for r in runs),
        "events_per_s_with_setup": events / min(r["total_s"] for r in runs),
        "bare_simpy_events": bare_events,
        "bare_simpy_events_per_s": bare_rate,
        "share_of_bare_simpy": events / best["loop_s"] / bare_rate,
        "simpy_run_loop_s_best": min(r["loop_s"] for r in plain),
        "guarded_over_simpy_run": best["loop_s"] / min(r["loop_s"] for r in plain),
        "target_events_per_s": TARGET_EVENTS_PER_S,
    }


@contextmanager
def trainer_timer() -> Iterator[dict]:
    """Time spent inside Trainer's public methods (outermost calls only: no double count)."""
    spent = {"seconds": 0.0, "calls": 0}
    depth = [0]

    def timed_method(method: Callable) -> Callable:
        @functools.wraps(method)
        def wrapper(*args, **kwargs):
            depth[0] += 1
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                depth[0] -= 1
                if depth[0] == 0:
                    spent["seconds"] += time.perf_counter() - start
                    spent["calls"] += 1

        return wrapper

    names = [n for n, v in vars(Trainer).items() if callable(v) and not n.startswith("_")]
    with ExitStack() as stack:
        for name in names:
            patched = timed_method(getattr(Trainer, name))
            stack.enter_context(mock.patch.object(Trainer, name, patched))
        yield spent


def full_run_overhead(scenario_path: Path, rounds: int | None) -> dict:
    """Wall time of every algorithm's run of the scenario vs time inside Trainer calls."""
    sc = load_scenario(scenario_path)
    with tempfile.TemporaryDirectory() as out:
        output = sc.output.model_copy(update={"dir": Path(out)})
        run = sc.run if rounds is None else sc.run.model_copy(update={"rounds": rounds})
        sc = sc.model_copy(update={"output": output, "run": run})
        start = time.perf_counter()
        dataset = build_dataset(sc)
        trainers = build_trainers(sc, dataset)
        build_s = time.perf_counter() - start
        per_algorithm = []
        for algorithm in sc.algorithms:
            with trainer_timer() as spent:
                start = time.perf_counter()
                run_algorithm(sc, algorithm, dataset, trainers, show_progress=False)
                total_s = time.perf_counter() - start
            per_algorithm.append({"algorithm": algorithm.run_label, "total_s": total_s,
                                  "torch_s": spent["seconds"], "trainer_calls": spent["calls"],
                                  "overhead_share": 1 - spent["seconds"] / total_s})  # fmt: skip
    total = sum(a["total_s"] for a in per_algorithm)
    torch_s = sum(a["torch_s"] for a in per_algorithm)
    return {
        "scenario": str(scenario_path),
        "rounds": sc.run.rounds,
        "dataset_build_s": build_s,
        "total_s": total,
        "torch_s": torch_s,
        "overhead_s": total - torch_s,
        "overhead_share": 1 - torch_s / total,
        "per_algorithm": per_algorithm,
        "target_overhead_share": TARGET_OVERHEAD_SHARE,
    }


TIMING_COLUMNS = ("clients", "rounds", "events", "loop_s_best", "events_per_s", "events_per_cpu_s",
                  "bare_simpy_events_per_s", "share_of_bare_simpy",
                  "guarded_over_simpy_run")  # fmt: skip
FULL_RUN_COLUMNS = ("algorithm", "total_s", "torch_s", "trainer_calls", "overhead_share")


def main(argv: Sequence[str] | None = None) -> dict:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=30, help="rounds of the timing-only run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dataset", default="fashion_mnist", help="of the timing-only run")
    parser.add_argument("--scenario", type=Path, default=REPO / "scenarios" / "quickstart.yaml")
    parser.add_argument("--scenario-rounds", type=int, default=None, help="override run.rounds")
    parser.add_argument("--skip-full-run", action="store_true")
    args = parser.parse_args(argv)
    set_threads(args.threads)
    results = {"timing_only": event_rate(args.clients, args.rounds, args.repeats, args.dataset)}
    if not args.skip_full_run:
        results["full_run"] = full_run_overhead(args.scenario, args.scenario_rounds)
    path = write_results("event_throughput", results, args.out)
    print(table([results["timing_only"]], TIMING_COLUMNS))
    if "full_run" in results:
        print(table(results["full_run"]["per_algorithm"], FULL_RUN_COLUMNS))
        print(f"overhead outside torch: {results['full_run']['overhead_share']:.1%} of the run")
    print(f"written: {path}")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
