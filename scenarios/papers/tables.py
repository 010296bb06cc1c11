"""Print the tables of scenarios/papers/README.md from the runs.

Run every reproduction first (each writes ``RESULTS/<its name>/``), then this script:

    fedsim run scenarios/papers/<file>.yaml --workers 2        # for each file below
    python scenarios/papers/tables.py [--results results]                  # the main table
    python scenarios/papers/tables.py --table perfed_ckt_regimes           # and the others

Each row of the main table: the final mean accuracy over the clients' local test sets
(``final_accuracy``) of every method, mean ± the half-width of the 95% t interval over the
seeds, then the paired per-seed differences the verdict rests on, with their interval and
the seeds' values. The other tables are studies around a reproduction, each run by the
command its rows name (printed instead of the row while its runs are missing):
``perfed_ckt_regimes`` (PerFed-CKT's regime study and, by thirds of the clients sorted by
training-set size, its difference to Local on the scenario), ``cobo_cross_device_500``
(the cross-device reproduction with the paper's 500 training images per client),
``ucfl_data_size`` (UCFL's variance batches K on 400 and 1,500 images per client) and
``cobo_defaults`` (CoBo's γ and ρ on 40 clients and on the cross-silo world).
``satellite_fl`` is the satellite-FL reproduction's table (issue 54): accuracy against
simulated hours for each server placement, run and data split, each made by the command its
row names (``satellite_fl.yaml`` with ``--set``) while its folder is missing.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from scipy import stats


@dataclass(frozen=True)
class Row:
    """One headline: its scenario folder, the sweep point (a run label's part after '@'
    without the seed), the methods shown (label -> name) and the paired differences."""

    headline: str
    folder: str
    methods: tuple[tuple[str, str], ...]
    paired: tuple[tuple[str, str], ...]  # (label, baseline label)
    point: str = ""


ROWS = (
    Row("FedeRiCo Table 1, 2 distributions", "federico_table1",
        (("federico", "FedeRiCo"), ("local", "Local"), ("fedavg_plus", "FedAvg+"),
         ("fedavg", "FedAvg")), (("federico", "local"),), "groups=2"),
    Row("FedeRiCo Table 1, 4 distributions", "federico_table1",
        (("federico", "FedeRiCo"), ("local", "Local"), ("fedavg_plus", "FedAvg+"),
         ("fedavg", "FedAvg")), (("federico", "local"),), "groups=4"),
    Row("SCAFFOLD vs FedAvg, NIID-Bench", "scaffold_niid_bench",
        (("fedavg", "FedAvg"), ("scaffold", "SCAFFOLD")), (("scaffold", "fedavg"),)),
    Row("CoBo Table 2, cross-device", "cobo_cross_device_paper",
        (("cobo", "CoBo (γ = 0.1)"), ("cobo_gamma05", "CoBo (γ = 0.5)"), ("oracle", "Oracle"),
         ("local", "Local"), ("ditto", "Ditto"), ("fedavg", "FedAvg")),
        (("cobo", "local"), ("cobo_gamma05", "local"))),
    Row("CoBo Table 2, cross-silo", "cobo_cross_silo_paper",
        (("cobo", "CoBo"), ("oracle", "Oracle"), ("local", "Local"), ("ditto", "Ditto"),
         ("fedavg", "FedAvg")), (("cobo", "local"),)),
    Row("UCFL Table I, CIFAR-10 concept shift", "ucfl_table1_cifar10",
        (("ucfl_k4", "k = 4"), ("ucfl_all", "k = m"), ("oracle", "Oracle"), ("local", "Local"),
         ("fedavg", "FedAvg")), (("ucfl_all", "local"), ("ucfl_k4", "local"))),
    Row("PerFed-CKT Table 2, model-heterogeneous", "perfed_ckt_table2",
        (("perfed_ckt", "c = 2"), ("perfed_ckt_c1", "c = 1"), ("local", "Local")),
        (("perfed_ckt", "local"),)),
)  # fmt: skip


def final_accuracies(folder: Path, label: str, point: str) -> dict[int, float]:
    """Seed -> final accuracy (%) of the label's runs at the sweep point."""
    found = {}
    for run in sorted(folder.glob(f"{label}@*")):
        parts = run.name.split("@", 1)[1].split(",")
        seed = next((int(p[5:]) for p in parts if p.startswith("seed=")), None)
        rest = ",".join(p for p in parts if not p.startswith("seed=") and "=" in p)
        if seed is None or not rest.endswith(point) or (point and not rest):
            continue
        summary = json.loads((run / "summary.json").read_text())
        if not summary.get("complete"):
            raise SystemExit(f"{run}: the run is not complete (run it again with --resume)")
        found[seed] = 100.0 * summary["final_accuracy"]
    if not found:
        raise SystemExit(f"{folder}: no runs of {label!r} {point}: run its scenario first")
    return found


def mean_and_half(values: list[float]) -> tuple[float, float]:
    """The mean and the half-width of its 95% t interval."""
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return statistics.mean(values), half


def signed(value: float) -> str:
    return f"{value:+.1f}".replace("-", "−")


def row_text(row: Row, results: Path) -> str:
    folder = results / row.folder
    runs = {label: final_accuracies(folder, label, row.point) for label, _ in row.methods}
    shown = ", ".join(
        "{} {:.1f} ± {:.1f}".format(name, *mean_and_half(list(runs[label].values())))
        for label, name in row.methods
    )
    return f"{shown}; paired {paired_text(runs, dict(row.methods), row.paired)}"


def paired_text(
    runs: dict[str, dict[int, float]], names: dict[str, str], paired: tuple[tuple[str, str], ...]
) -> str:
    """Each (label, baseline): the mean per-seed difference ± its interval, and the seeds'."""
    texts = []
    for label, baseline in paired:
        seeds = sorted(set(runs[label]) & set(runs[baseline]))
        differences = [runs[label][s] - runs[baseline][s] for s in seeds]
        mean, half = mean_and_half(differences)
        texts.append(
            f"{names[label]} − {names[baseline]} {signed(mean)} ± {half:.1f} "
            f"({', '.join(signed(d) for d in differences)})"
        )
    return "; ".join(texts)


@dataclass(frozen=True)
class Study:
    """A row of a study table: its regime, its results folder, the methods shown (label ->
    column), the command that makes the folder (one seed unless it says otherwise) and the
    paired per-seed differences shown after them, if any."""

    regime: str
    folder: str
    methods: tuple[tuple[str, str], ...]
    command: str
    paired: tuple[tuple[str, str], ...] = ()


UCFL_SMALL = "fedsim run scenarios/papers/ucfl_data_size.yaml (3 seeds)"
UCFL_LARGE = (
    "fedsim run scenarios/papers/ucfl_data_size.yaml --set name=ucfl_data_size_1500 "
    "--set dataset.num_samples=37500 --set run.rounds=20 --only ucfl_K3 ucfl_all_K3 "
    "ucfl_all_K2 ucfl_auto oracle local (3 seeds)"
)
UCFL_K3 = (("ucfl_K3", "k by silhouette"), ("ucfl_k4_K3", "k = 4"), ("ucfl_all_K3", "k = m"))
UCFL_AUTO = (("ucfl_auto", "k by silhouette"), ("ucfl_k4_auto", "k = 4"), ("ucfl_all_K2", "k = m"))
UCFL_K15 = (("ucfl_K15", "k by silhouette"), ("ucfl_k4_K15", "k = 4"), ("ucfl_all_K15", "k = m"))
BASELINE_NAMES = {  # a paired difference's baseline that its row does not show
    "local": "Local", "ucfl_K3": "K = 3", "ucfl_k4_K3": "K = 3", "ucfl_all_K3": "K = 3",
}  # fmt: skip
COBO_FILE = "fedsim run scenarios/papers/cobo_defaults.yaml"
COBO_CROSS_SILO = (
    "--set name=cobo_defaults_cross_silo --set clients.count=8 "
    "--set dataset.num_samples=2400 --set dataset.test_fraction=0.667 --set run.rounds=150"
)
COBO_METHODS = (
    ("cobo_code", "γ 0.01, ρ 0.05 (the code's)"), ("cobo_g01", "γ 0.1"), ("cobo_g02", "γ 0.2"),
    ("cobo_g05", "γ 0.5"), ("cobo_g02_decay", "γ 0.2 decaying"),
    ("cobo_g05_decay", "γ 0.5 decaying (the defaults)"), ("oracle", "Oracle"), ("local", "Local"),
)  # fmt: skip
COBO_PAIRED = tuple((label, "local") for label, _ in COBO_METHODS[:6])
PERFED_FILE = "fedsim run scenarios/papers/perfed_ckt_table2.yaml --workers 2"
PERFED_METHODS = (("perfed_ckt", "c = 2"), ("perfed_ckt_c1", "c = 1"), ("local", "Local"))
STUDIES = {
    "perfed_ckt_regimes": (
        Study("the scenario: Dir(0.1), small shards, lr 0.01, λ = 2 (3 seeds)",
              "perfed_ckt_table2", PERFED_METHODS, PERFED_FILE),
        Study("milder skew, shared classes: α = 1", "perfed_ckt_regime_alpha1", PERFED_METHODS,
              f"{PERFED_FILE} --set name=perfed_ckt_regime_alpha1 --set 'sweep.seed=[1]' "
              "--set dataset.partition.alpha=1.0"),
        Study("Local overfitting and a stronger pull: α = 1, lr 0.05, λ = 4",
              "perfed_ckt_regime_overfit", (PERFED_METHODS[0], PERFED_METHODS[2]),
              f"{PERFED_FILE} --only perfed_ckt local --set name=perfed_ckt_regime_overfit "
              "--set 'sweep.seed=[1]' --set dataset.partition.alpha=1.0 "
              "--set training.lr=0.05 --set 'algorithms[0].distill_weight=4'"),
        Study("the larger cnn on every client, the smallest shards (train share 0.1)",
              "perfed_ckt_regime_cnn", (PERFED_METHODS[0], PERFED_METHODS[2]),
              f"{PERFED_FILE} --only perfed_ckt local --set name=perfed_ckt_regime_cnn "
              "--set 'sweep.seed=[1]' --set 'model={name: cnn}' "
              "--set 'dataset.train_fractions=[0.1]'"),
    ),
    "cobo_cross_device_500": (
        Study("500 training and 200 test images per client (3 seeds)", "cobo_cross_device_500",
              ROWS[3].methods,
              "fedsim run scenarios/papers/cobo_cross_device.yaml --workers 2 "
              "--set name=cobo_cross_device_500 --set dataset.num_samples=56000 "
              "--set dataset.test_fraction=0.2857"),
    ),
    "ucfl_data_size": (
        Study("400 images, K = 3 (the paper's)", "ucfl_data_size", UCFL_K3, UCFL_SMALL,
              (("ucfl_K3", "local"), ("ucfl_all_K3", "local"))),
        Study("400 images, auto (it picks K = 2 on every seed; k = m at K = 2)",
              "ucfl_data_size", UCFL_AUTO, UCFL_SMALL,
              (("ucfl_auto", "ucfl_K3"), ("ucfl_k4_auto", "ucfl_k4_K3"),
               ("ucfl_all_K2", "ucfl_all_K3"))),
        Study("400 images, K = 1.5", "ucfl_data_size", UCFL_K15, UCFL_SMALL),
        Study("400 images, baselines", "ucfl_data_size",
              (("oracle", "Oracle"), ("local", "Local"), ("fedavg", "FedAvg")), UCFL_SMALL),
        Study("1,500 images, K = 3 (the paper's)", "ucfl_data_size_1500",
              (UCFL_K3[0], UCFL_K3[2]), UCFL_LARGE,
              (("ucfl_K3", "local"), ("ucfl_all_K3", "local"))),
        Study("1,500 images, auto (K = 2 on two seeds, 3 on one; k = m at K = 2)",
              "ucfl_data_size_1500",
              (UCFL_AUTO[0], UCFL_AUTO[2]), UCFL_LARGE,
              (("ucfl_auto", "ucfl_K3"), ("ucfl_all_K2", "ucfl_all_K3"))),
        Study("1,500 images, baselines", "ucfl_data_size_1500",
              (("oracle", "Oracle"), ("local", "Local")), UCFL_LARGE),
    ),
    "cobo_defaults": (
        Study("40 clients", "cobo_defaults", COBO_METHODS, COBO_FILE, COBO_PAIRED),
        Study("cross-silo", "cobo_defaults_cross_silo", COBO_METHODS,
              f"{COBO_FILE} {COBO_CROSS_SILO}", COBO_PAIRED),
    ),
}  # fmt: skip


@dataclass(frozen=True)
class SatelliteRuns:
    """Runs of the satellite reproduction: where the server is, the data, the results folder,
    the runs shown (label -> name) and the options that make them from ``satellite_fl.yaml``."""

    server: str
    data: str
    folder: str
    methods: tuple[tuple[str, str], ...]
    options: str = ""

    @property
    def command(self) -> str:
        parts = ("fedsim run scenarios/papers/satellite_fl.yaml --workers 2",
                 f"--set name={self.folder}", self.options)  # fmt: skip
        return " ".join(part for part in parts if part)


STATION = "the station (Bremen, 10°)"
MEO = "a MEO node (20,000 km, equatorial)"
SERVERS = (("fedavg", "FedAvg"), ("fedbuff", "FedBuff"), ("fedasync", "FedAsync"))
FEDAVG = SERVERS[:1]
ON_A_HAP = (
    "--only fedavg --set 'system.constellation.servers=[{kind: hap, name: hap, "
    "lat_deg: 53.1, lon_deg: 8.8, min_elevation_deg: 0}]'"
)
ON_A_MEO = (
    "--only fedavg --set 'system.constellation.servers=[{kind: meo, name: meo, "
    "altitude_km: 20000}]'"
)
RELAYED = (
    "--only fedavg --set 'system.constellation.isl={neighbours: ring}' "
    "--set system.constellation.relay=plane"
)
SLOW = "--set system.compute.t_min_s=600"  # a training outlasts a pass (6.6 min)
THREE_HAPS = (  # FedHAP's placements are not offline here: 3 spread 120° in longitude
    "--only fedavg --set 'system.constellation.servers=["
    "{kind: hap, name: bremen, lat_deg: 53.1, lon_deg: 8.8, min_elevation_deg: 0}, "
    "{kind: hap, name: amur, lat_deg: 53.1, lon_deg: 128.8, min_elevation_deg: 0}, "
    "{kind: hap, name: alberta, lat_deg: 53.1, lon_deg: -111.2, min_elevation_deg: 0}]'"
)
OVER_ISLS = (
    "--set 'algorithms=[{name: dsgd, deadline_s: 600}]' "
    "--set 'system.constellation.isl={neighbours: grid}' --set run.time_budget_s=21600"
)
IID = "--set 'dataset.partition={kind: iid}'"
PEERS_OVER_ISLS = (
    "--set 'algorithms=[{name: federico, peers: d2d, deadline_s: 600}, "
    "{name: cobo, peers: d2d, deadline_s: 600}]' "
    "--set 'system.constellation.isl={neighbours: grid}' --set run.time_budget_s=21600"
)
PEERS_ANYWHERE = PEERS_OVER_ISLS.replace("peers: d2d, ", "")
PEERED = (("federico", "FedeRiCo"), ("cobo", "CoBo"))
CIFAR10 = (
    "--set dataset.name=cifar10 --set 'model={name: lenet5}' --set 'sweep.seed=[1]' "
    "--set evaluation.target_accuracy=0.4"
)
SATELLITE_RUNS = (
    SatelliteRuns(STATION, "MNIST Dir(0.5)", "satellite_fl", SERVERS),
    SatelliteRuns(STATION, "MNIST IID", "satellite_fl_iid", SERVERS, IID),
    SatelliteRuns("the station, relayed by plane-mates (ring ISLs)", "MNIST Dir(0.5)",
                  "satellite_fl_relay", FEDAVG, RELAYED),
    SatelliteRuns("the station, 10 min a training", "MNIST Dir(0.5)", "satellite_fl_slow",
                  FEDAVG, f"--only fedavg {SLOW}"),
    SatelliteRuns("the station, 10 min a training, relayed", "MNIST Dir(0.5)",
                  "satellite_fl_slow_relay", FEDAVG, f"{RELAYED} {SLOW}"),
    SatelliteRuns("a HAP over Bremen (20 km, 0°)", "MNIST Dir(0.5)", "satellite_fl_hap", FEDAVG,
                  ON_A_HAP),
    SatelliteRuns("a HAP over Bremen (20 km, 0°)", "MNIST IID", "satellite_fl_hap_iid", FEDAVG,
                  f"{ON_A_HAP} {IID}"),
    SatelliteRuns("3 HAPs 120° apart at 53.1° N (20 km, 0°)", "MNIST Dir(0.5)",
                  "satellite_fl_haps", FEDAVG, THREE_HAPS),
    SatelliteRuns(MEO, "MNIST Dir(0.5)", "satellite_fl_meo", FEDAVG, ON_A_MEO),
    SatelliteRuns(MEO, "MNIST IID", "satellite_fl_meo_iid", FEDAVG, f"{ON_A_MEO} {IID}"),
    SatelliteRuns("none: the ISLs in sight (6 h)", "MNIST Dir(0.5)", "satellite_fl_isl",
                  (("dsgd", "D-SGD"),), OVER_ISLS),
    SatelliteRuns("none: the ISLs in sight (6 h)", "MNIST IID", "satellite_fl_isl_iid",
                  (("dsgd", "D-SGD"),), f"{OVER_ISLS} {IID}"),
    SatelliteRuns("none: the ISLs in sight (6 h)", "MNIST Dir(0.5)", "satellite_fl_peers_d2d",
                  PEERED, PEERS_OVER_ISLS),
    SatelliteRuns("none: any satellite, ISL or via Bremen (6 h)", "MNIST Dir(0.5)",
                  "satellite_fl_peers_all", PEERED, PEERS_ANYWHERE),
    SatelliteRuns(STATION, "CIFAR-10 Dir(0.5)", "satellite_fl_cifar10", SERVERS, CIFAR10),
    SatelliteRuns(MEO, "CIFAR-10 Dir(0.5)", "satellite_fl_meo_cifar10", FEDAVG,
                  f"{ON_A_MEO} {CIFAR10}"),
)  # fmt: skip
SATELLITE_HOURS = (1, 3, 12, 24, 72)


def accuracy_at(rows: list[dict[str, str]], hours: float) -> float | None:
    """The mean accuracy (%) of a run's last evaluation (``rows`` of its metrics.csv) by
    ``hours`` (None past its end)."""
    if not rows or float(rows[-1]["time_s"]) < hours * 3600.0 - 1e-6:
        return None
    by_then = [r for r in rows if float(r["time_s"]) <= hours * 3600.0 + 1e-6]
    return 100.0 * float(by_then[-1]["accuracy"]) if by_then else None


def satellite_rows(results: Path) -> list[str]:
    """The satellite table's rows (markdown): per server placement, data and run, the mean
    accuracy over the seeds at each of SATELLITE_HOURS, the hours each seed took to the
    scenario's target, the rounds (server updates) by the end, and the seeds' largest gap at
    the hours shown; a missing folder prints its command."""
    lines = []
    for runs in SATELLITE_RUNS:
        folder = results / runs.folder
        if not folder.is_dir():
            lines.append(f"| {runs.server} | {runs.data} | not run: `{runs.command}` |")
            continue
        for label, name in runs.methods:
            seeds = sorted(final_accuracies(folder, label, ""))
            paths = [folder / f"{label}@seed={seed}" for seed in seeds]
            lines.append(satellite_row(runs.server, runs.data, name, paths))
    return lines


def satellite_row(server: str, data: str, name: str, runs: list[Path]) -> str:
    metrics = []
    for run in runs:
        with (run / "metrics.csv").open() as file:
            metrics.append(list(csv.DictReader(file)))
    cells, gap = [], 0.0
    for hours in SATELLITE_HOURS:
        values = [accuracy_at(rows, hours) for rows in metrics]
        if None in values:
            cells.append("—")
            continue
        cells.append(f"{statistics.mean(values):.1f}")
        gap = max(gap, max(values) - min(values))
    summaries = [json.loads((run / "summary.json").read_text()) for run in runs]
    to_target = ", ".join(
        f"{s['time_to_target_s'] / 3600:g}" if s["time_to_target_s"] is not None
        else f"> {s['time_s'] / 3600:g}" for s in summaries
    )  # fmt: skip
    rounds = statistics.mean(s["rounds"] for s in summaries)
    spread = f"{gap:.1f}" if len(runs) > 1 else "one seed"
    return (f"| {server} | {data} | {name} | {' | '.join(cells)} | {to_target} | "
            f"{rounds:,.0f} | {spread} |")  # fmt: skip


def satellite_text(results: Path) -> str:
    hours = " | ".join(f"{h} h" for h in SATELLITE_HOURS)
    head = (f"| server | data | run | {hours} | hours to target, per seed | rounds | "
            "seeds' gap |")  # fmt: skip
    rule = "|" + "---|" * (len(SATELLITE_HOURS) + 6)
    return "\n".join([head, rule, *satellite_rows(results)])


def study_text(study: Study, results: Path) -> str:
    """The study's row: each method's final accuracy (mean ± interval over seeds, or the
    one seed's), or the command to run while its folder is missing."""
    folder = results / study.folder
    if not folder.is_dir():
        return f"not run: {study.command}"
    labels = {label for pair in study.paired for label in pair} | dict(study.methods).keys()
    runs = {label: final_accuracies(folder, label, "") for label in labels}
    shown = []
    for label, name in study.methods:
        values = list(runs[label].values())
        shown.append(
            f"{name} {values[0]:.1f}"
            if len(values) == 1
            else "{} {:.1f} ± {:.1f}".format(name, *mean_and_half(values))
        )
    if not study.paired:
        return ", ".join(shown)
    names = {label: BASELINE_NAMES.get(label, label) for label in labels} | dict(study.methods)
    return f"{', '.join(shown)}; paired {paired_text(runs, names, study.paired)}"


def thirds_text(results: Path) -> str:
    """PerFed-CKT (c = 2) − Local on the scenario by thirds of the clients sorted by their
    training-set size: the range over the seeds of the mean difference of each third's final
    accuracies, and on how many of a third's clients (over the seeds) PerFed-CKT is ahead."""
    from fedsim.config import load_scenario  # heavy (torch): only this table needs it
    from fedsim.runner import build_dataset

    folder = results / "perfed_ckt_table2"
    differences: list[list[float]] = [[], [], []]
    ahead, counted = [0, 0, 0], [0, 0, 0]
    for seed in sorted(final_accuracies(folder, "perfed_ckt", "")):
        run = folder / f"perfed_ckt@seed={seed}"
        sizes = [s.num_train for s in build_dataset(load_scenario(run / "scenario.yaml")).shards]
        finals = [last_client_accuracies(folder / f"{label}@seed={seed}") for label in
                  ("perfed_ckt", "local")]  # fmt: skip
        order = sorted(range(len(sizes)), key=lambda c: (sizes[c], c))
        for third, clients in enumerate(split_in_thirds(order)):
            gaps = [finals[0][c] - finals[1][c] for c in clients]
            differences[third].append(100.0 * statistics.mean(gaps))
            ahead[third] += sum(g > 0 for g in gaps)
            counted[third] += len(gaps)
    names = ("smallest", "middle", "largest")
    return "; ".join(
        f"{name} third {signed(min(d))} to {signed(max(d))} (ahead on {a} of {n} clients)"
        for name, d, a, n in zip(names, differences, ahead, counted, strict=True)
    )


def split_in_thirds(order: list[int]) -> list[list[int]]:
    n = len(order)
    return [order[: n // 3], order[n // 3 : 2 * n // 3], order[2 * n // 3 :]]


def last_client_accuracies(run: Path) -> dict[int, float]:
    """Client -> its accuracy at the run's last evaluation (clients.csv)."""
    with (run / "clients.csv").open() as file:
        rows = list(csv.DictReader(file))
    last_time = rows[-1]["time_s"]
    return {int(r["client"]): float(r["accuracy"]) for r in rows if r["time_s"] == last_time}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=Path("results"))
    parser.add_argument("--table", choices=("main", *STUDIES, "satellite_fl"), default="main")
    args = parser.parse_args(argv)
    if args.table == "satellite_fl":
        print(satellite_text(args.results))
        return 0
    if args.table == "main":
        for row in ROWS:
            print(f"{row.headline}: {row_text(row, args.results)}")
        return 0
    for study in STUDIES[args.table]:
        print(f"{study.regime}: {study_text(study, args.results)}")
    if args.table == "perfed_ckt_regimes":
        print(f"c = 2 − Local by training-set size: {thirds_text(args.results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
