"""A constellation as the system (system.constellation): store and forward to the next pass,
read from the event log; the roles (ground stations, a HAP, a MEO node, ISLs); bad input."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from fedsim.config import ScenarioError, parse_scenario
from fedsim.config.constellation import ConstellationConfig
from fedsim.sim import ntn, orbits
from fedsim.sim.event_check import check_events
from fedsim.sim.orbits import EARTH_RADIUS_M, SPEED_OF_LIGHT_M_S, merge_windows, orbital_speed_m_s
from fedsim.study import run_scenario
from fedsim.world.satellites import ServerLink, rate_function
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


def isl_run(tmp_path: Path, algorithm: dict, rounds: int) -> tuple[Path, list[dict], set]:
    """A decentralized run over 24 satellites (2 planes of 12) with ISLs: its folder, its
    transfers as they started, and the satellite pairs that talked over an ISL."""
    constellation = {
        "walker": {"total": 24, "planes": 2, "phasing": 1, "altitude_km": 600,
                   "inclination_deg": 53},
        "servers": [STATION],
        "isl": {"neighbours": "grid", "rate_mbps": 10},
    }  # fmt: skip
    data = satellites(
        tmp_path, constellation, clients={"count": 24}, algorithms=[algorithm],
        run={"rounds": rounds},
    )  # fmt: skip
    run_dir = run_scenario(parse_scenario(data), show_progress=False) / algorithm["name"]
    assert check_events(run_dir / "events.jsonl").ok
    events = [json.loads(line) for line in (run_dir / "events.jsonl").open()]
    sends = [e for e in events if e["kind"] == "send_start"]
    d2d = {tuple(sorted((e["sender"], e["receivers"][0]))) for e in sends
           if e["direction"] == "d2d"}  # fmt: skip
    return run_dir, sends, d2d


def test_dsgd_over_inter_satellite_links_uses_the_graph_of_the_moment(tmp_path):
    """12 satellites a plane see their ring neighbours (the chord clears the Earth: 6,971 km
    × cos 15° > 6,371 km; with 6 a plane it would not), the two planes' pairs only at times:
    D-SGD's messages go over ISLs in sight, each between two graph neighbours."""
    _, sends, pairs = isl_run(tmp_path, {"name": "dsgd", "deadline_s": 600}, rounds=3)
    assert pairs and all(abs(a - b) in (1, 11, 12) for a, b in pairs)
    assert all(e["direction"] == "d2d" for e in sends)


def test_federico_talks_over_the_isls_in_sight_and_relays_the_rest_through_the_ground(tmp_path):
    """FedeRiCo samples its peers among all satellites (membership is known): a message to an
    ISL neighbour in sight goes over that link, one to any other satellite (or to a neighbour
    out of sight, perhaps for good) up to the station at the sender's pass and down at the
    receiver's; the rounds keep their 10-minute deadline, and the relayed messages that miss
    it are lost."""
    algorithm = {"name": "federico", "neighbours": 3, "deadline_s": 600}
    run_dir, sends, d2d = isl_run(tmp_path, algorithm, rounds=2)
    assert d2d and all(abs(a - b) in (1, 11, 12) for a, b in d2d)
    assert any(e["direction"] == "uplink" for e in sends)  # relayed through the station
    rounds = list(csv.DictReader((run_dir / "rounds.csv").open()))
    assert len(rounds) == 2 and all(float(r["end_s"]) - float(r["start_s"]) <= 600 + 1e-6
                                    for r in rounds)  # fmt: skip


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


def test_passes_csv_doppler_is_the_closed_form_and_an_unfinished_wait_counts(tmp_path):
    """Two polar satellites of one plane over a non-rotating Earth, a station on their ground
    track: satellite 0's first pass is overhead, so its largest Doppler shift is at the mask,
    (v/c)·R/(R+h)·cos ε·f_c at each direction's carrier (Ka: 20 GHz up to the station, 30 GHz
    down), to 1e-6; satellite 1 sees the station only after the time budget, so its model
    waits the whole run and that wait is counted though the transfer never ends."""
    constellation = {
        "walker": {"total": 2, "planes": 1, "altitude_km": 600, "inclination_deg": 90},
        "earth_rotation": False,
        "servers": [{"name": "gs", "lat_deg": 30.0, "lon_deg": 0.0, "min_elevation_deg": 10}],
    }  # fmt: skip
    data = satellites(
        tmp_path, constellation, clients={"count": 2}, run={"time_budget_s": 1800, "rounds": None}
    )
    run_dir = run_scenario(parse_scenario(data), show_progress=False) / "fedavg"
    [first] = list(csv.DictReader((run_dir / "passes.csv").open()))
    h, eps = 600e3, math.radians(10)
    v_over_c = orbital_speed_m_s(h) / SPEED_OF_LIGHT_M_S
    closed = v_over_c * EARTH_RADIUS_M / (EARTH_RADIUS_M + h) * math.cos(eps)
    assert first["satellite"] == "0"
    assert float(first["uplink_max_doppler_hz"]) == pytest.approx(closed * 20e9, rel=1e-6)
    assert float(first["downlink_max_doppler_hz"]) == pytest.approx(closed * 30e9, rel=1e-6)
    rows = list(csv.DictReader((run_dir / "satellites.csv").open()))
    assert float(rows[1]["waiting_s"]) == pytest.approx(1800.0, abs=1e-3)
    assert float(rows[0]["waiting_s"]) == pytest.approx(float(first["start_s"]), abs=1.0)
    summary = json.loads((run_dir / "summary.json").read_text())["constellation"]
    assert summary["transfers"] >= 3  # satellite 0's down and up, satellite 1's unfinished


def constellation_config(**link) -> ConstellationConfig:
    return ConstellationConfig.model_validate({
        "walker": {"total": 8, "planes": 2, "phasing": 1, "altitude_km": 600,
                   "inclination_deg": 53},
        "servers": [STATION], "link": link,
    })  # fmt: skip


def test_nr_rate_is_the_mcs_tables_goodput_below_shannon():
    """rate: nr (the link layer's expected goodput at the BLER target): nothing below the
    lowest MCS (QPSK 120/1024 needs about −6.7 dB), never above Shannon on the band, rising
    with the SNR but for dips under 1% where a higher MCS takes over at its threshold (it fails
    there at the BLER target), and capped by the 64-QAM table's top MCS (5.5547 bit/s/Hz) less
    the reference signals' share; the same pass carries less with it than with Shannon."""
    bandwidth_hz = 400e6
    snr_db = np.arange(-20.0, 40.5, 0.5)
    nr = rate_function(constellation_config(rate={"model": "nr"}), bandwidth_hz)(snr_db)
    shannon = rate_function(constellation_config(), bandwidth_hz)(snr_db)
    assert np.all(nr[snr_db < -7] == 0) and np.all(nr[snr_db >= -6] > 0)
    assert np.all(nr <= shannon) and np.all(np.diff(nr) >= -0.01 * nr[1:])
    assert nr[snr_db == 20][0] > 2 * nr[snr_db == 5][0] > 4 * nr[snr_db == -4][0]
    ceiling = nr[-1] / bandwidth_hz
    assert 0.75 * 5.5547 < ceiling <= 5.5547 and nr[-10] == pytest.approx(nr[-1])
    rates = {}
    for model in ("nr", "shannon"):
        config = constellation_config(rate={"model": model})
        contacts = orbits.Contacts(config.orbits(), config.nodes())
        (start, end), *_ = contacts.windows(0, orbits.DAY_S)
        times = np.linspace(start - 60.0, end - 1e-3, 50)
        rates[model] = ServerLink(config, contacts, 0, True, key=7).rates(times)
    inside = times >= start
    assert np.all(rates["nr"][~inside] == 0) and np.all(rates["shannon"][~inside] == 0)
    assert np.all(rates["nr"][inside] > 0) and np.all(rates["nr"] <= rates["shannon"])


def test_line_of_sight_drawn_by_the_tables_probability():
    """line_of_sight: probability, dense urban Ka (no shadowing, so the LOS draw is all that
    differs): at each instant the SNR is the always-LOS one, or lower by exactly the clutter
    loss of the elevation (NLOS), and the share in LOS is the table's probability at the
    elevations seen (within 4 standard deviations of the binomial count)."""
    common = {"scenario": "dense_urban", "shadowing": False}
    drawn = constellation_config(line_of_sight="probability", **common)
    always = constellation_config(line_of_sight="always", **common)
    contacts = orbits.Contacts(drawn.orbits(), drawn.nodes())
    windows = contacts.windows_of(0, 0, orbits.DAY_S)
    times = np.concatenate([np.arange(a, b, 2.0) for a, b in windows])
    snr = {
        name: ServerLink(config, contacts, 0, True, key=7).snr_db(0, times)
        for name, config in (("drawn", drawn), ("always", always))
    }
    elevation = ServerLink(drawn, contacts, 0, True, key=7).geometry(contacts.nodes[0], times)[0]
    clutter = ntn.clutter_loss_db("dense_urban", "Ka", elevation, False)
    loss = snr["always"] - snr["drawn"]
    nlos = np.isclose(loss, clutter, atol=1e-9)
    assert np.all(nlos | np.isclose(loss, 0.0, atol=1e-9)) and 0 < nlos.sum() < len(times)
    p = ntn.los_probability("dense_urban", elevation)
    expected, sd = p.sum(), math.sqrt((p * (1 - p)).sum())
    assert abs((~nlos).sum() - expected) < 4 * sd
