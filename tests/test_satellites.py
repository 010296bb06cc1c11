"""A constellation as the system (system.constellation): store and forward to the next pass,
read from the event log; the roles (ground stations, a HAP, a MEO node, ISLs); bad input."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from fedsim.config import ScenarioError, parse_scenario
from fedsim.sim.event_check import check_events
from fedsim.sim.orbits import merge_windows
from fedsim.study import run_scenario
from tests.conftest import run_fedsim, tiny_scenario

STATION = {"name": "bremen", "lat_deg": 53.1, "lon_deg": 8.8, "min_elevation_deg": 10}
MAX_DELAY_S = 0.02  # d/c at the longest slant range of these orbits: under 10 ms


def satellites(tmp_path: Path, constellation: dict | None = None, **sections) -> dict:
    sections.setdefault("clients", {"count": 8})
    data = tiny_scenario(
        tmp_path, system={"compute": {"t_min_s": 60.0, "mean_extra_s": 0.0}}, **sections
    )
    del data["system"]["network"]
    data["system"]["constellation"] = constellation or {
        "walker": {"total": 8, "planes": 2, "phasing": 1, "altitude_km": 600,
                   "inclination_deg": 53},
        "servers": [STATION],
    }  # fmt: skip
    data["output"]["events"] = True
    return data


def windows_by_satellite(run_dir: Path) -> dict[int, list[tuple[float, float]]]:
    rows = list(csv.DictReader((run_dir / "passes.csv").open()))
    windows: dict[int, list] = {}
    for row in rows:
        windows.setdefault(int(row["satellite"]), []).append(
            (float(row["start_s"]), float(row["end_s"]))
        )
    return {sat: merge_windows(w) for sat, w in windows.items()}


def test_a_model_sent_out_of_sight_arrives_at_the_next_pass_never_while_unseen(tmp_path):
    """Every transfer to or from a satellite ends inside one of its passes (plus d/c), at
    the first pass after it started when it started out of sight: the event log, read
    against passes.csv."""
    data = satellites(tmp_path, run={"rounds": 3})
    root = run_scenario(parse_scenario(data), show_progress=False)
    run_dir = root / "fedavg"
    assert check_events(run_dir / "events.jsonl").ok
    windows = windows_by_satellite(run_dir)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").open()]
    starts = {e["transfer"]: e for e in events if e["kind"] == "send_start"}
    checked = out_of_sight = 0
    for end in (e for e in events if e["kind"] == "send_end"):
        start = starts[end["transfer"]]
        sat = start["sender"] if start["direction"] == "uplink" else start["receivers"][0]
        t0, t1 = start["t"], end["t"]
        assert any(a <= t1 <= b + MAX_DELAY_S for a, b in windows[sat]), (sat, t1)
        if not any(a <= t0 < b for a, b in windows[sat]):
            next_start = min(a for a, _ in windows[sat] if a > t0)
            assert next_start <= t1 <= next_start + 600.0  # in that pass, not a later one
            out_of_sight += 1
        checked += 1
    assert checked >= 8 * 3 * 2 and out_of_sight >= 8
    rounds = list(csv.DictReader((run_dir / "rounds.csv").open()))
    assert float(rounds[0]["end_s"]) > 3600  # a round waits hours for every pass
    summary = json.loads((run_dir / "summary.json").read_text())["constellation"]
    assert summary["waiting_for_visibility_s"] > 0 and summary["passes_per_satellite_per_day"] > 3


def test_same_scenario_same_files(tmp_path):
    data = satellites(tmp_path, run={"rounds": 2})
    first = run_scenario(parse_scenario(data), show_progress=False) / "fedavg"
    copy = (tmp_path / "first").resolve()
    first.rename(copy)
    second = run_scenario(parse_scenario(data), show_progress=False) / "fedavg"
    for name in ("metrics.csv", "rounds.csv", "events.jsonl", "passes.csv", "satellites.csv"):
        assert (copy / name).read_bytes() == (second / name).read_bytes(), name


@pytest.mark.parametrize(
    "server",
    [
        {"kind": "hap", "name": "hap", "lat_deg": 53.1, "lon_deg": 8.8, "min_elevation_deg": 0},
        {"kind": "meo", "name": "meo", "altitude_km": 10000, "inclination_deg": 53},
    ],
)
def test_a_hap_or_meo_server_sees_more_than_a_station(tmp_path, server):
    """A platform (horizon at 0°) and a MEO node see the satellites for longer than a ground
    station at 10°: the same rounds end sooner."""
    times = {}
    for name, node in (("station", STATION), ("raised", server)):
        constellation = {
            "walker": {"total": 8, "planes": 2, "phasing": 1, "altitude_km": 600,
                       "inclination_deg": 53},
            "servers": [node],
        }  # fmt: skip
        data = satellites(tmp_path / name, constellation, run={"rounds": 2})
        root = run_scenario(parse_scenario(data), show_progress=False)
        times[name] = json.loads((root / "fedavg" / "summary.json").read_text())["time_s"]
    assert times["raised"] < times["station"]


def test_dsgd_over_inter_satellite_links_uses_the_graph_of_the_moment(tmp_path):
    """12 satellites a plane see their ring neighbours (the chord clears the Earth: 6,971 km
    × cos 15° > 6,371 km; with 6 a plane it would not), the two planes' pairs only at times:
    D-SGD's messages go over ISLs in sight, each between two graph neighbours."""
    constellation = {
        "walker": {"total": 24, "planes": 2, "phasing": 1, "altitude_km": 600,
                   "inclination_deg": 53},
        "servers": [STATION],
        "isl": {"neighbours": "grid", "rate_mbps": 10},
    }  # fmt: skip
    data = satellites(
        tmp_path, constellation, clients={"count": 24},
        algorithms=[{"name": "dsgd", "deadline_s": 600}], run={"rounds": 3},
    )  # fmt: skip
    root = run_scenario(parse_scenario(data), show_progress=False)
    run_dir = root / "dsgd"
    events = [json.loads(line) for line in (run_dir / "events.jsonl").open()]
    d2d = [e for e in events if e["kind"] == "send_start" and e["direction"] == "d2d"]
    pairs = {tuple(sorted((e["sender"], e["receivers"][0]))) for e in d2d}
    assert pairs and all(abs(a - b) in (1, 11, 12) for a, b in pairs)
    assert check_events(run_dir / "events.jsonl").ok


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"servers": [{**STATION, "min_elevation_deg": 95}]}, "min_elevation_deg"),
        ({"walker": {"total": 8, "planes": 2, "altitude_km": -10}}, "walker.altitude_km"),
        ({"servers": [{**STATION, "lat_deg": 85}]}, "servers[0]: bremen sees no satellite"),
        (
            {
                "walker": {"total": 8, "planes": 2, "altitude_km": 600, "inclination_deg": 0},
                "servers": [{**STATION, "lat_deg": 60}],
            },
            "servers[0]",
        ),  # fmt: skip
    ],
)
def test_bad_constellations_are_refused_naming_the_field(tmp_path, change, field):
    data = satellites(tmp_path)
    data["system"]["constellation"].update(change)
    with pytest.raises(ScenarioError, match=field.replace("[", r"\[").replace("]", r"\]")):
        parse_scenario(data)


def test_a_tle_that_does_not_parse_and_nothing_visible_exit_2(tmp_path):
    import yaml

    tle = tmp_path / "bad.tle"
    tle.write_text("1 25544U 98067A   24001.50000000  .00016717  00000-0  10270-3 0  9000\n")
    data = satellites(tmp_path)
    data["system"]["constellation"] = {"tle": str(tle), "servers": [STATION]}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    result = run_fedsim("validate", str(path))
    assert result.returncode == 2 and "system.constellation.tle" in result.stderr
    assert "Traceback" not in result.stderr
    nothing = satellites(tmp_path, run={"time_budget_s": 7200})
    nothing["system"]["constellation"]["walker"]["inclination_deg"] = 0
    nothing["system"]["constellation"]["servers"] = [{**STATION, "lat_deg": 70}]
    path.write_text(yaml.safe_dump(nothing))
    result = run_fedsim("run", str(path))
    assert result.returncode == 2 and "sees no satellite" in result.stderr
