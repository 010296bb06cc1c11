"""Event logs of small scenarios without ``system.radio``, one per medium and policy.

``tests/data/events_without_radio.json`` holds these logs as the simulator wrote them before
the radio existed (commit 160f515); ``test_radio.py`` checks that today's simulator writes the
same ones. Regenerate only for a deliberate change of the fixed-rate model:

    FEDSIM_DATA=../shared/data python -m tests.radio_golden tests/data/events_without_radio.json
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from fedsim.config import parse_scenario
from fedsim.study import run_scenario
from tests.conftest import tiny_scenario

CASES: dict[str, dict] = {
    "parallel_broadcast_deadline": {
        "system": {"network": {"uplink_mbps": {"kind": "lognormal", "median": 1.0, "sigma": 0.5}}},
        "algorithms": [{"name": "fedavg", "client_fraction": 0.5, "deadline_s": 3.0}],
    },
    "tdma_unicast": {
        "system": {"network": {"uplink_medium": "tdma", "downlink": "unicast"}},
        "algorithms": [{"name": "fedavg", "over_selection": 0.5, "client_fraction": 0.5}],
    },
    "shared_cell_churn": {
        "clients": {"availability": {"kind": "renewal", "mean_online_s": 5, "mean_offline_s": 2}},
        "system": {"network": {"uplink_medium": "shared", "cell_capacity_mbps": 2.0}},
        "algorithms": [{"name": "fedavg", "deadline_s": 4.0}],
        "run": {"rounds": 3, "time_budget_s": 30},
    },
    "fedbuff": {
        "algorithms": [{"name": "fedbuff", "max_concurrency": 3, "buffer_size": 2}],
    },
    "dsgd_d2d": {
        "system": {"d2d": {"graph": "ring", "rate_mbps": 5.0, "latency_s": 0.01}},
        "algorithms": [{"name": "dsgd"}],
    },
}
KEPT_FIELDS = ("t", "kind", "client", "round", "transfer", "direction", "bytes", "bytes_sent",
               "sender", "receivers", "reason")  # fmt: skip


def events_of(case: str, workdir: Path) -> list[dict]:
    """The case's event log (without accuracies: they depend on the CPU's arithmetic)."""
    data = tiny_scenario(workdir, **CASES[case])
    data["name"] = case
    data["output"]["events"] = True
    results = run_scenario(parse_scenario(data), show_progress=False)
    [label] = [a["name"] for a in data["algorithms"]]
    lines = (results / label / "events.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k in KEPT_FIELDS} for line in lines]


def main(out_path: str) -> None:
    with tempfile.TemporaryDirectory() as workdir:
        logs = {case: events_of(case, Path(workdir) / case) for case in CASES}
    Path(out_path).write_text(json.dumps(logs, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
