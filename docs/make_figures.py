"""The site's figures: the plots ``fedsim run`` draws, from shipped scenarios shrunk by a few
``--set`` overrides, copied into ``docs/assets/figures/<study>/`` as palette PNGs (a fifth of
the size, the same picture). About 10 minutes on 2 cores, so the PNGs are committed and the
site builds without data, torch or time; run it again when a plot or a scenario changes:

    FEDSIM_DATA=../shared/data python docs/make_figures.py [--only quickstart seeds ...]

Each study runs this checkout's fedsim (``python -m fedsim``) into a temporary folder, with
one torch thread, as ``fedsim run`` does by default.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / "docs" / "assets" / "figures"


@dataclass(frozen=True)
class Study:
    scenario: str
    figures: tuple[str, ...]  # paths inside the scenario's results folder
    overrides: tuple[str, ...] = ()
    only: tuple[str, ...] = ()


STUDIES = {
    # Getting started: the quickstart exactly as shipped.
    "quickstart": Study(
        "scenarios/quickstart.yaml",
        ("time_to_accuracy.png", "accuracy_vs_bytes.png", "accuracy_vs_samples.png"),
    ),
    # Seeds: bands of the mean over three seeds, the Kaplan-Meier median, the Pareto front.
    "seeds": Study(
        "scenarios/fedopt_scaffold.yaml",
        ("time_to_accuracy.png", "accuracy_vs_bytes.png", "pareto.png"),
    ),
    # The radio and energy: a radio cell with batteries, one sweep point, 60 simulated s.
    "energy": Study(
        "scenarios/energy_tradeoff.yaml",
        ("accuracy_vs_energy.png", "energy_per_client.png", "fedavg_c0.5/channel.png"),
        ("sweep={}", "run.time_budget_s=60"),
        ("fedavg_c0.5", "ditto"),
    ),
    # Several cells: the channel figure's map of sites, 30 simulated s of one run.
    "multicell": Study(
        "scenarios/multicell.yaml",
        ("fedavg_deadline/channel.png",),
        ("sweep={}", "run.time_budget_s=30"),
        ("fedavg_deadline",),
    ),
    # Collaboration weights: CoBo on 8 clients in 4 clusters, 40 rounds of one seed.
    "collaboration": Study(
        "scenarios/cobo_cross_silo.yaml",
        (
            "cobo/collaboration.png",
            "cobo/collaboration_evolution.png",
            "cobo/collaboration_trajectories.png",
        ),
        ("sweep={}", "run.rounds=40"),
        ("cobo", "local"),
    ),
    # Churn: clients leave at 150 s and newcomers arrive at 300 s.
    "churn": Study(
        "scenarios/churn_elasticity.yaml", ("time_to_accuracy.png", "active_clients.png")
    ),
    # Satellites: 40 LEO satellites over a day, the passes and accuracy against hours.
    "satellites": Study(
        "scenarios/satellite.yaml",
        ("time_to_accuracy.png", "fedavg_station/visibility.png"),
    ),
    # Asynchrony: FedAsync's and FedBuff's updates over time and their staleness, 120 s.
    "asynchrony": Study(
        "scenarios/async_vs_sync.yaml",
        ("asynchrony.png",),
        ("run.time_budget_s=120",),
        ("fedasync", "fedbuff"),
    ),
}


def run(name: str, study: Study, work: Path) -> list[Path]:
    command = [sys.executable, "-m", "fedsim", "run", study.scenario, "--quiet"]
    command += ["--output", str(work)]
    for override in study.overrides:
        command += ["--set", override]
    if study.only:
        command += ["--only", *study.only]
    print(f"{name}: {' '.join(command[2:])}", flush=True)
    subprocess.run(command, cwd=ROOT, check=True)
    scenario_name = next(p for p in work.iterdir() if p.is_dir())
    written = []
    for figure in study.figures:
        out = FIGURES / name / Path(figure).name
        out.parent.mkdir(parents=True, exist_ok=True)
        palette(scenario_name / figure, out)
        written.append(out)
    return written


def palette(source: Path, out: Path) -> None:
    """A 256-colour PNG: plots have few colours, so nothing visible is lost."""
    image = Image.open(source).convert("RGB")
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(out, optimize=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=sorted(STUDIES), help="these studies")
    args = parser.parse_args(argv)
    for name in args.only or STUDIES:
        with tempfile.TemporaryDirectory() as work:
            for path in run(name, STUDIES[name], Path(work)):
                print(f"  {path.relative_to(ROOT)} ({path.stat().st_size // 1024} kB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
