"""Print the "fedsim (3 seeds)" column of scenarios/papers/README.md's table from the runs.

Run every reproduction first (each writes ``RESULTS/<its name>/``), then this script:

    fedsim run scenarios/papers/<file>.yaml --workers 2        # for each file below
    python scenarios/papers/tables.py [--results results]

Each row: the final mean accuracy over the clients' local test sets (``final_accuracy``) of
every method, mean ± the half-width of the 95% t interval over the seeds, then the paired
per-seed differences the verdict rests on, with their interval and the seeds' values.
"""

from __future__ import annotations

import argparse
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
    names = dict(row.methods)
    paired = []
    for label, baseline in row.paired:
        seeds = sorted(set(runs[label]) & set(runs[baseline]))
        differences = [runs[label][s] - runs[baseline][s] for s in seeds]
        mean, half = mean_and_half(differences)
        paired.append(
            f"{names[label]} − {names[baseline]} {signed(mean)} ± {half:.1f} "
            f"({', '.join(signed(d) for d in differences)})"
        )
    return f"{shown}; paired {'; '.join(paired)}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=Path("results"))
    args = parser.parse_args(argv)
    for row in ROWS:
        print(f"{row.headline}: {row_text(row, args.results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
