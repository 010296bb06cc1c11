"""What every benchmark shares: the machine's description, timing, the JSON and the table.

Timings on a shared machine are noisy, so alternatives are measured side by side in one
process, repeated, and summarized by their best (least disturbed) and median runs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def machine() -> dict:
    """CPU, cores, load and library versions: what a figure depends on."""
    import simpy
    import torch

    cpu = platform.processor() or "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                 if line.startswith("model name")]  # fmt: skip
        cpu = names[0] if names else cpu
    return {
        "date": datetime.date.today().isoformat(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "load_average_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "simpy": simpy.__version__,
    }


def timed(fn: Callable[[], object], repeats: int) -> dict:
    """Wall seconds of ``repeats`` calls: best, median and all of them."""
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - start)
    return {"best_s": min(seconds), "median_s": statistics.median(seconds), "runs_s": seconds}


def base_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="folder for the JSON")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch intra-op threads (default: torch's)"
    )
    return parser


def set_threads(threads: int | None) -> None:
    if threads is not None:
        import torch

        torch.set_num_threads(threads)


def write_results(name: str, results: dict, out_dir: Path) -> Path:
    """``<out_dir>/<name>.json`` with the machine description added."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps({"benchmark": name, "machine": machine(), **results}, indent=2))
    return path


def table(rows: Sequence[dict], columns: Sequence[str]) -> str:
    """A plain-text table; floats get 4 significant digits."""

    def cell(value: object) -> str:
        if isinstance(value, float):
            return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
        return "-" if value is None else str(value)

    cells = [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)
