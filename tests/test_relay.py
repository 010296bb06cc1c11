"""Messages relayed by plane-mates over the ring's ISLs to the server (``relay: plane``,
FedISL's intra-plane relaying): a closed form on a constructed plane, and the event log of
a run read against the direct route; several HAPs as one server (FedHAP)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import simpy

from fedsim.config import ScenarioError, parse_scenario
from fedsim.config.constellation import ConstellationConfig
from fedsim.sim.event_check import check_events
from fedsim.sim.events import EventLog
from fedsim.sim.orbits import (
    EARTH_RADIUS_M,
    SPEED_OF_LIGHT_M_S,
    merge_windows,
    orbital_period_s,
)
from fedsim.streams import RandomStreams
from fedsim.study import run_scenario
from fedsim.world.satellites import build_satellite_network
from tests.test_satellites import MAX_DELAY_S, STATION, satellites, windows_by_satellite

ALTITUDE_M = 600e3
PER_PLANE = 12  # 30° apart: the ring's chords clear the Earth (6,971 km × cos 15°)
MESSAGE_BYTES = 100_000
ISL_MBPS, SERVER_MBPS = 10.0, 50.0


def one_plane(relay: str) -> ConstellationConfig:
    """12 satellites in one equatorial-node plane over a non-rotating Earth, a station under
    satellite 0 at time 0 (the only one it sees then: a 10° mask reaches 15.8° of arc),
    fixed rates."""
    return ConstellationConfig.model_validate({
        "walker": {"total": PER_PLANE, "planes": 1, "altitude_km": ALTITUDE_M / 1e3,
                   "inclination_deg": 53},
        "earth_rotation": False,
        "servers": [{"name": "under", "lat_deg": 0.0, "lon_deg": 0.0, "min_elevation_deg": 10}],
        "link": {"rate": {"model": "fixed", "mbps": SERVER_MBPS}},
        "isl": {"neighbours": "ring", "rate_mbps": ISL_MBPS},
        "relay": relay,
    })  # fmt: skip


def network_of(config: ConstellationConfig, seed: int = 0):
    env = simpy.Environment()
    log = EventLog(lambda: env.now)
    return env, build_satellite_network(config, env, log, RandomStreams(seed), lambda _c: True)


def station_range_m(time_s: float) -> float:
    """Satellite 0's range from the station it was over at time 0 (the angle between them is
    the orbit's arc since then)."""
    arc = 2.0 * math.pi * time_s / orbital_period_s(ALTITUDE_M)
    orbit_m = EARTH_RADIUS_M + ALTITUDE_M
    return math.sqrt(EARTH_RADIUS_M**2 + orbit_m**2 - 2 * EARTH_RADIUS_M * orbit_m * math.cos(arc))


def test_a_relayed_message_arrives_by_the_closed_form():
    """Satellite 2 (60° along) is out of sight; two hops back to satellite 0, overhead the
    station, deliver it: arrival = 2·(8S/R_isl + d/c) + 8S/R_up + r/c, d the ring's chord,
    r satellite 0's range as its last bit leaves; and the server's message to satellite 2
    goes down to satellite 0 and two hops on. Without relaying it waits for its own pass."""
    bits = 8.0 * MESSAGE_BYTES
    chord_s = 2 * (EARTH_RADIUS_M + ALTITUDE_M) * math.sin(math.pi / PER_PLANE) / SPEED_OF_LIGHT_M_S
    hops_s = 2 * (bits / (ISL_MBPS * 1e6) + chord_s)
    last_bit_s = hops_s + bits / (SERVER_MBPS * 1e6)
    expected_up_s = last_bit_s + station_range_m(last_bit_s) / SPEED_OF_LIGHT_M_S
    down_s = bits / (SERVER_MBPS * 1e6)
    expected_down_s = down_s + station_range_m(down_s) / SPEED_OF_LIGHT_M_S + hops_s

    env, network = network_of(one_plane("plane"))
    assert network.upload_route(2, bits, 0.0) == ([2, 1, 0], pytest.approx(expected_up_s))
    arrived = {}

    def upload():
        yield from network.upload(2, MESSAGE_BYTES)
        arrived["up"] = env.now

    env.process(upload())
    delivered = network.send_down([2], MESSAGE_BYTES)[2]
    delivered.callbacks.append(lambda _event: arrived.setdefault("down", env.now))
    env.run()
    assert arrived["up"] == pytest.approx(expected_up_s, rel=0, abs=1e-9)
    assert arrived["down"] == pytest.approx(expected_down_s, rel=0, abs=1e-9)
    assert (network.messages, network.relayed, network.hops) == (2, 2, 4)
    assert network.log.d2d_bytes == 4 * MESSAGE_BYTES  # each hop's bytes are sent traffic

    env, direct = network_of(one_plane("none"))
    env.process(direct.upload(2, MESSAGE_BYTES))
    env.run()
    assert env.now > 600.0  # its own pass: minutes later, not milliseconds


def test_relayed_messages_never_arrive_later_than_direct_and_hop_in_sight(tmp_path: Path):
    """Two rounds of FedAvg over 2 planes of 12 with relaying: every message to or from the
    server arrives no later than its satellite's own pass would deliver it (the same links,
    recomputed), some much sooner; each ISL leg runs inside one window of its pair's line of
    sight; the log's invariants hold with the relayed bytes credited to their satellite."""
    constellation = {
        "walker": {"total": 24, "planes": 2, "phasing": 1, "altitude_km": 600,
                   "inclination_deg": 53},
        "servers": [STATION],
        "isl": {"neighbours": "ring", "rate_mbps": 10},
        "relay": "plane",
    }  # fmt: skip
    data = satellites(tmp_path, constellation, clients={"count": 24}, run={"rounds": 2})
    scenario = parse_scenario(data)
    run_dir = run_scenario(scenario, show_progress=False) / "fedavg"
    assert check_events(run_dir / "events.jsonl").ok
    events = [json.loads(line) for line in (run_dir / "events.jsonl").open()]
    ends = {e["transfer"]: e["t"] for e in events if e["kind"] == "send_end"}
    _, network = network_of(scenario.system.constellation, scenario.seed)
    links, contacts = network.satellites, network.contacts

    messages: dict[tuple, list[dict]] = {}
    for e in (e for e in events if e["kind"] == "send_start" and e["transfer"] in ends):
        if e["direction"] == "d2d":
            a, b = e["sender"], e["receivers"][0]
            windows = merge_windows(contacts.pair_windows(a, b, ends[e["transfer"]]))
            assert any(w0 <= e["t"] and ends[e["transfer"]] - 0.02 <= w1 for w0, w1 in windows)
        if "relayed_for" in e:
            messages.setdefault((e["relayed_for"], e["round"]), []).append(e)
    sooner = 0
    for (sat, _), legs in messages.items():
        legs.sort(key=lambda leg: leg["t"])  # the round's download, then its upload
        own_hops = [k for k, leg in enumerate(legs) if leg["direction"] == "d2d" and
                    leg["sender"] == sat]  # fmt: skip
        split = own_hops[0] if own_hops else len(legs)  # the upload's first hop is its own
        for message in (legs[:split], legs[split:]):
            if not message:
                continue
            up = message[-1]["direction"] == "uplink"
            link = links.uplinks[sat] if up else links.downlinks[sat]
            sent_s, arrived_s = message[0]["t"], ends[message[-1]["transfer"]]
            direct_s = link.arrival_s(sent_s, 8.0 * message[0]["bytes"])
            assert arrived_s <= direct_s + 1e-9
            sooner += arrived_s < direct_s - 60.0
    assert len(messages) >= 8 and sooner >= 8


def test_relay_needs_a_walker_plane_its_isls_and_no_churn(tmp_path: Path):
    data = satellites(tmp_path)
    data["system"]["constellation"]["relay"] = "plane"
    with pytest.raises(ScenarioError, match="relay: plane relays over a plane's ring"):
        parse_scenario(data)
    data["system"]["constellation"]["isl"] = {"neighbours": "ring"}
    parse_scenario(data)
    data["clients"]["departures"] = {"rate_per_s": 1e-4}
    with pytest.raises(ScenarioError, match="relay: plane relays through every satellite"):
        parse_scenario(data)


def test_several_haps_spread_out_are_one_server(tmp_path: Path):
    """Three HAPs 120° apart in longitude are one server: each satellite's passes are over
    any of them (passes.csv names all three), every transfer ends inside one of them (plus
    d/c) and never while none is in sight, and synchronous rounds end sooner than with the
    one HAP over Bremen."""
    haps = [{"kind": "hap", "name": name, "lat_deg": 53.1, "lon_deg": lon,
             "min_elevation_deg": 0} for name, lon in (("bremen", 8.8), ("amur", 128.8),
                                                       ("alberta", -111.2))]  # fmt: skip
    ends = {}
    for count in (1, 3):
        constellation = {
            "walker": {"total": 8, "planes": 2, "phasing": 1, "altitude_km": 600,
                       "inclination_deg": 53},
            "servers": haps[:count],
        }  # fmt: skip
        data = satellites(tmp_path / str(count), constellation, run={"rounds": 2})
        run_dir = run_scenario(parse_scenario(data), show_progress=False) / "fedavg"
        ends[count] = json.loads((run_dir / "summary.json").read_text())["time_s"]
    assert check_events(run_dir / "events.jsonl").ok
    nodes = {row.split(",")[1] for row in (run_dir / "passes.csv").read_text().splitlines()[1:]}
    assert nodes == {"bremen", "amur", "alberta"}
    windows = windows_by_satellite(run_dir)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").open()]
    starts = {e["transfer"]: e for e in events if e["kind"] == "send_start"}
    for end in (e for e in events if e["kind"] == "send_end"):
        start = starts[end["transfer"]]
        sat = start["sender"] if start["direction"] == "uplink" else start["receivers"][0]
        assert any(a <= end["t"] <= b + MAX_DELAY_S for a, b in windows[sat])
    assert ends[3] < 0.7 * ends[1]
