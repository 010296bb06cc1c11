"""24 simulated hours of the 40-satellite FedAvg with real training (issue 54): wall time,
and the event log's size against the passes and the transfers (no time steps).

``scenarios/satellite.yaml``'s synchronous FedAvg at one station, as ``fedsim run --only
fedavg_station`` runs it, with the event log on: its wall time, its logged events, the
passes of the run and the transfers. The events are bounded by passes and messages when
events / transfers stays a small constant as the time budget grows.

    FEDSIM_DATA=../shared/data python -m benchmarks.satellites [--hours 24 48]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from fedsim.config import load_scenario
from fedsim.study import run_scenario

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "satellite.yaml"


def measure(hours: float) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        scenario = load_scenario(SCENARIO)
        data = scenario.model_dump(mode="json")
        data["algorithms"] = [a for a in data["algorithms"] if a["label"] == "fedavg_station"]
        data["run"] = {"time_budget_s": hours * 3600.0, "rounds": None}
        data["output"] = {"dir": folder, "events": True}
        started = time.perf_counter()
        root = run_scenario(type(scenario).model_validate(data), show_progress=False)
        wall_s = time.perf_counter() - started
        run_dir = root / "fedavg_station"
        events = sum(1 for _ in (run_dir / "events.jsonl").open())
        summary = json.loads((run_dir / "summary.json").read_text())
        passes = sum(1 for _ in (run_dir / "passes.csv").open()) - 1
    transfers = summary["constellation"]["transfers"]
    return {"hours": hours, "wall_s": round(wall_s, 1), "rounds": summary["rounds"],
            "events": events, "passes": passes, "transfers": transfers,
            "events_per_transfer": round(events / max(transfers, 1), 2)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, nargs="+", default=[24.0])
    for hours in parser.parse_args().hours:
        print(json.dumps(measure(hours)))


if __name__ == "__main__":
    main()
