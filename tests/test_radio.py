"""The radio against closed forms: Shannon by hand, Rayleigh ergodic capacity and outage,
exact transfers across fading blocks, equal band sharing; then through whole runs: outage
retries as waste, invariants with fading, mobility and churn, determinism, bad input, and
the fixed-rate model unchanged without ``system.radio``."""

from __future__ import annotations

import csv
import json
import math

import networkx as nx
import numpy as np
import pytest
import simpy
from scipy.special import exp1

from fedsim.budget import budget_algorithm, format_budgets
from fedsim.cli import main
from fedsim.config import ScenarioError, parse_scenario
from fedsim.runner import build_dataset, build_trainers
from fedsim.sim.draws import Fading
from fedsim.sim.event_check import check_events
from fedsim.sim.events import EventLog
from fedsim.sim.geometry import RandomWaypoint
from fedsim.sim.link import IdealSettings, Outage, Shannon, WholeTransferSettings
from fedsim.sim.network import Network, TransmissionLost
from fedsim.sim.pathloss import PathLoss
from fedsim.sim.radio import UPLINK, Radio, RadioSettings
from fedsim.sim.topology import assign_edge_rates
from fedsim.study import run_scenario
from tests.conftest import REPO, tiny_scenario
from tests.radio_golden import CASES, events_of

BAND_HZ = 20e6
NOISE_DBM_PER_HZ = -174.0


def make_radio(env: simpy.Environment, positions_m, *, tx_dbm: float = 10.0, **settings) -> Radio:
    count = len(positions_m)
    return Radio(
        RadioSettings(**settings), lambda: env.now, np.array(positions_m, dtype=float),
        np.full(count, tx_dbm), np.zeros(count), key=7,
    )  # fmt: skip


def make_network(env: simpy.Environment, radio: Radio, **options) -> Network:
    return Network(env, {}, log=EventLog(lambda: env.now), radio=radio, **options)


def macro_snr(distance_m: float, power_dbm: float, bandwidth_hz: float) -> float:
    """p·g / (N0·b) by hand, with the macro-cell path loss and no fading."""
    loss_db = 128.1 + 37.6 * math.log10(distance_m / 1000)
    noise_dbm = NOISE_DBM_PER_HZ + 10 * math.log10(bandwidth_hz)
    return 10 ** ((power_dbm - loss_db - noise_dbm) / 10)


def upload_ends(env: simpy.Environment, network: Network, client: int, num_bytes: int) -> list:
    """Start an upload; the list gets its end time (or 'lost')."""
    outcome: list = []

    def body():
        try:
            yield from network.upload(client, num_bytes)
            outcome.append(env.now)
        except TransmissionLost:
            outcome.append("lost")

    env.process(body())
    return outcome


def one_after_another(env: simpy.Environment, network: Network, attempts: int) -> list[str]:
    """Client 0 uploads 1 kB that many times in a row, alone on the band; 'ok' or 'lost' each."""
    outcomes: list[str] = []

    def uploads():
        for _ in range(attempts):
            try:
                yield from network.upload(0, 1000)
                outcomes.append("ok")
            except TransmissionLost:
                outcomes.append("lost")

    env.process(uploads())
    env.run()
    return outcomes


# --- the channel by hand ---------------------------------------------------------------------


def test_path_loss_laws_match_their_formulas():
    assert PathLoss("macro").db(1000.0) == pytest.approx(128.1)
    assert PathLoss("macro").db(100.0) == pytest.approx(128.1 - 37.6)
    log_distance = PathLoss("log_distance", reference_loss_db=40, exponent=3)
    assert log_distance.db(100.0) == pytest.approx(40 + 60)
    # Friis at 100 m and 2.4 GHz: 80.05 dB
    assert PathLoss("free_space", carrier_hz=2.4e9).db(100.0) == pytest.approx(80.05, abs=0.01)


def test_the_macro_law_is_never_evaluated_below_its_35_m():
    """TR 36.814's law is specified from 35 m (Table A.2.1.1-2): nearer, its loss at 35 m, in
    the law itself and for a client the scenario placed at 20 m."""
    macro = PathLoss("macro")
    at_35_db = 128.1 + 37.6 * math.log10(0.035)
    assert macro.db(20.0) == macro.db(35.0) == pytest.approx(at_35_db, abs=1e-12)
    assert macro.db(np.array([1.0, 20.0, 35.0, 100.0])) == pytest.approx(
        [at_35_db, at_35_db, at_35_db, 128.1 - 37.6]
    )
    env = simpy.Environment()
    radio = make_radio(env, [(20.0, 0.0), (0.0, 35.0)], min_distance_m=10.0)
    assert radio.large_scale_loss_db(0) == radio.large_scale_loss_db(1) == pytest.approx(at_35_db)


def test_an_upload_alone_takes_eight_s_over_the_shannon_rate_by_hand():
    env = simpy.Environment()
    network = make_network(env, make_radio(env, [(0.0, 250.0)]))
    ends = upload_ends(env, network, 0, 1_000_000)
    env.run()
    rate_bps = BAND_HZ * math.log2(1 + macro_snr(250.0, 10.0, BAND_HZ))
    assert ends == [pytest.approx(8e6 / rate_bps, rel=1e-12)]


def test_snr_gap_spectral_cap_and_outage_floor_shape_the_rate_as_written():
    env = simpy.Environment()
    assert make_radio(env, [(1, 1)]).rate_bps(1e6, 15.0) == pytest.approx(4e6)
    gap = make_radio(env, [(1, 1)], link=IdealSettings(Shannon(snr_gap_db=10 * math.log10(5))))
    assert gap.rate_bps(1e6, 15.0) == pytest.approx(2e6)
    capped = make_radio(env, [(1, 1)], link=IdealSettings(Shannon(max_bits_per_hz=3.0)))
    assert capped.rate_bps(1e6, 15.0) == pytest.approx(3e6)
    floor = make_radio(
        env, [(1, 1)], link=WholeTransferSettings(Outage(snr_threshold_db=10 * math.log10(3)))
    )
    assert floor.rate_bps(1e6, 0.01) == pytest.approx(2e6)  # the lowest scheme's rate


def rayleigh_radio(env, distance_m: float, **settings) -> Radio:
    fading = Fading("rayleigh", coherence_s=settings.pop("coherence_s", 1.0))
    return make_radio(env, [(distance_m, 0.0)], fading=fading, **settings)


def test_rayleigh_mean_rate_is_the_ergodic_capacity_and_a_long_upload_gets_it_exactly():
    env = simpy.Environment()
    radio = rayleigh_radio(env, 300.0)
    blocks = 20_000
    snr = macro_snr(300.0, 10.0, BAND_HZ)
    rates = np.array([
        radio.rate_bps(BAND_HZ, snr * radio.fading_gain(0, UPLINK, k + 0.5, 0))
        for k in range(blocks)
    ])  # fmt: skip
    ergodic_bps = BAND_HZ * math.log2(math.e) * math.exp(1 / snr) * exp1(1 / snr)
    standard_error = rates.std() / math.sqrt(blocks)
    assert abs(rates.mean() - ergodic_bps) < 4 * standard_error
    # An upload over the first 50 blocks moves exactly the bits of their rates, block by block.
    num_bytes = int(rates[:50].sum() / 8) - 1
    ends = upload_ends(env, make_network(env, radio), 0, num_bytes)
    env.run()
    [end_s] = ends
    assert 49 < end_s < 50
    assert 8 * num_bytes == pytest.approx(rates[:49].sum() + (end_s - 49) * rates[49], rel=1e-12)


def test_rayleigh_outage_fraction_is_one_minus_exp_of_minus_threshold_over_snr():
    env = simpy.Environment()
    threshold_db = 0.0
    radio = rayleigh_radio(
        env, 400.0, coherence_s=None,  # a new fade at every transmission
        link=WholeTransferSettings(Outage(snr_threshold_db=threshold_db, max_retransmissions=0)),
    )  # fmt: skip
    outcomes = one_after_another(env, make_network(env, radio), attempts := 4000)
    lost = outcomes.count("lost") / attempts
    expected = 1 - math.exp(-(10 ** (threshold_db / 10)) / macro_snr(400.0, 10.0, BAND_HZ))
    assert 0.1 < expected < 0.9
    assert lost == pytest.approx(expected, abs=4 * math.sqrt(expected * (1 - expected) / attempts))
    assert radio.stats[0].outages == outcomes.count("lost")


def test_a_transfer_across_a_fading_change_ends_when_the_hand_integrated_bits_are_in():
    env = simpy.Environment()
    radio = rayleigh_radio(env, 200.0)
    snr = macro_snr(200.0, 10.0, BAND_HZ)
    r0, r1 = (radio.rate_bps(BAND_HZ, snr * radio.fading_gain(0, UPLINK, t, 0)) for t in (0.5, 1.5))
    num_bytes = int((0.7 * r0 + 0.4 * r1) / 8)  # starts at 0.3 s: 0.7 s in block 0, then block 1
    network = make_network(env, radio)
    started: list = []

    def later():
        yield env.timeout(0.3)
        started.append(upload_ends(env, network, 0, num_bytes))

    env.process(later())
    env.run()
    [ends] = started
    assert ends == [pytest.approx(1.0 + (8 * num_bytes - 0.7 * r0) / r1, rel=1e-12)]


@pytest.mark.parametrize("n", [1, 3, 8])
def test_identical_clients_splitting_the_band_end_together_at_the_closed_form(n):
    env = simpy.Environment()
    network = make_network(env, make_radio(env, [(0.0, 300.0)] * n))
    num_bytes = 500_000
    ends = [upload_ends(env, network, client, num_bytes) for client in range(n)]
    env.run()
    share_hz = BAND_HZ / n
    expected_s = 8 * num_bytes / (share_hz * math.log2(1 + macro_snr(300.0, 10.0, share_hz)))
    assert [e for [e] in ends] == pytest.approx([expected_s] * n, rel=1e-9)


def test_fixed_subbands_queue_the_extra_upload_and_tdma_sends_one_at_a_time():
    num_bytes = 200_000
    for sharing, subbands, expected_ends in [
        ("fixed", 2, lambda t: [t, t, 2 * t]),  # two sub-bands of B/2; the third waits
        ("tdma", 1, lambda t: [t, 2 * t, 3 * t]),
    ]:
        env = simpy.Environment()
        network = make_network(
            env, make_radio(env, [(0.0, 300.0)] * 3), uplink_sharing=sharing,
            uplink_subbands=subbands,
        )  # fmt: skip
        ends = [upload_ends(env, network, client, num_bytes) for client in range(3)]
        env.run()
        share_hz = BAND_HZ / subbands
        one_s = 8 * num_bytes / (share_hz * math.log2(1 + macro_snr(300.0, 10.0, share_hz)))
        assert [e for [e] in ends] == pytest.approx(expected_ends(one_s), rel=1e-12)


def test_a_broadcast_goes_at_the_weakest_members_snr_and_a_d2d_link_by_its_distance():
    env = simpy.Environment()
    radio = make_radio(
        env, [(0.0, 100.0), (0.0, 450.0), (0.0, 150.0)], d2d_path_loss=PathLoss("macro")
    )
    graph = nx.complete_graph(3)
    assign_edge_rates(graph, [1.0] * 3, 0.0)  # rates the radio replaces
    network = make_network(env, radio, graph=graph)
    arrivals = network.send_down([0, 1], 1_000_000)
    env.run()
    weakest_bps = BAND_HZ * math.log2(1 + macro_snr(450.0, 30.0, BAND_HZ))
    for client in (0, 1):
        _, air_s = arrivals[client].value
        assert air_s == pytest.approx(8e6 / weakest_bps, rel=1e-12)
    d2d_hz = radio.settings.d2d_bandwidth_hz
    d2d_bps = d2d_hz * math.log2(1 + macro_snr(50.0, 10.0, d2d_hz))  # clients 0 and 2: 50 m
    start_s = env.now
    delivered = env.process(network.send_peer(2, 0, 100_000))
    env.run(delivered)
    assert env.now - start_s == pytest.approx(8e5 / d2d_bps, rel=1e-12)


def test_random_waypoint_moves_at_its_speed_and_stays_in_the_cell():
    walker = RandomWaypoint(key=3, client=0, start_xy=(100.0, 0.0), radius_m=200.0,
                            min_distance_m=10.0, speed_mps=5.0, update_s=0.5)  # fmt: skip
    positions = np.array([walker.position(t) for t in np.arange(0.0, 600.0, 0.5)])
    steps = np.hypot(*np.diff(positions, axis=0).T)
    assert steps.max() <= 5.0 * 0.5 + 1e-9
    assert steps.mean() > 0.9 * 2.5  # turning at waypoints cuts a corner now and then
    assert np.hypot(*positions.T).max() <= 200.0 + 1e-9
    # Between two position updates nothing moves: the path loss changes only at updates.
    assert walker.position(600.2) == walker.position(600.0)


# --- whole runs --------------------------------------------------------------------------------

RADIO = {
    "cell_radius_m": 400.0,
    "shadowing_db": 6.0,
    "fading": {"model": "rayleigh", "coherence_s": 0.05},
    "link": {"model": "whole_transfer", "snr_threshold_db": 5.0, "max_retransmissions": 1},
    "mobility": {"speed_mps": 2.0, "update_s": 0.5},
}


def radio_scenario(tmp_path, **overrides) -> dict:
    data = tiny_scenario(
        tmp_path,
        clients={"count": 8,
                 "availability": {"kind": "renewal", "mean_online_s": 6, "mean_offline_s": 2}},
        system={"network": {"latency_s": 0.01}, "radio": RADIO},
        algorithms=[{"name": "fedavg", "client_fraction": 0.5, "deadline_s": 3.0}],
        run={"rounds": 6, "time_budget_s": 40},
        **overrides,
    )  # fmt: skip
    data["system"]["network"] = {"latency_s": 0.01}  # no fixed rates with the radio
    data["output"]["events"] = True
    return data


def test_outage_retries_are_wasted_and_the_log_holds_its_invariants_with_fading_mobility_churn(
    tmp_path,
):
    results = run_scenario(parse_scenario(radio_scenario(tmp_path)), show_progress=False)
    run_dir = results / "fedavg"
    report = check_events(run_dir / "events.jsonl")
    assert report.ok, report.violations
    events = [json.loads(line) for line in (run_dir / "events.jsonl").open()]
    outages = [e for e in events if e["kind"] == "send_abort" and e["reason"] == "outage"]
    assert outages and all(e["bytes_sent"] > 0 for e in outages)
    assert report.wasted_bytes >= sum(e["bytes_sent"] for e in outages)
    assert any(e["kind"] == "offline" for e in events)
    rows = list(csv.DictReader((run_dir / "radio.csv").open()))
    assert len(rows) == 8
    assert sum(int(r["outages"]) for r in rows) >= len(outages)
    assert sum(int(r["retransmissions"]) for r in rows) > 0
    uploaders = [r for r in rows if r["uplink_mbps"]]
    assert uploaders and all(float(r["uplink_mbps"]) > 0 for r in uploaders)
    assert (run_dir / "channel.png").stat().st_size > 0


def test_same_seed_same_files_with_the_radio_on(tmp_path):
    files = ("metrics.csv", "rounds.csv", "events.jsonl", "radio.csv", "channel.csv")
    runs = []
    for name in ("a", "b"):
        data = radio_scenario(tmp_path / name)
        results = run_scenario(parse_scenario(data), show_progress=False)
        runs.append({f: (results / "fedavg" / f).read_bytes() for f in files})
    assert runs[0] == runs[1]


def test_without_the_radio_the_fixed_rate_event_logs_are_unchanged(tmp_path):
    """The logs that the simulator wrote before the radio existed (tests/radio_golden.py)."""
    before = json.loads((REPO / "tests" / "data" / "events_without_radio.json").read_text())
    assert set(before) == set(CASES)
    for case, events in before.items():
        now = events_of(case, tmp_path / case)
        assert [{k: v for k, v in e.items() if k != "t"} for e in now] == [
            {k: v for k, v in e.items() if k != "t"} for e in events
        ], case
        assert [e["t"] for e in now] == pytest.approx([e["t"] for e in events], rel=1e-9), case


@pytest.mark.parametrize(
    ("radio", "field"),
    [
        ({"uplink_bandwidth_hz": -1e6}, "system.radio.uplink_bandwidth_hz"),
        ({"path_loss": "okumura"}, "system.radio.path_loss"),
        ({"cell_radius_m": 5.0, "min_distance_m": 10.0}, "system.radio"),
        ({"tx_power_dbm": -50}, "system.radio.tx_power_dbm"),
        ({"fading": {"model": "nakagami"}}, "system.radio.fading.model"),
    ],
)
def test_bad_radio_input_names_the_field(tmp_path, radio, field):
    data = radio_scenario(tmp_path)
    data["system"]["radio"] = radio
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(data)
    assert any(p.startswith(field) for p in caught.value.problems), caught.value.problems


def test_a_fixed_rate_beside_the_radio_is_an_error(tmp_path):
    data = radio_scenario(tmp_path)
    data["system"]["network"]["rho"] = 4.0
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(data)
    assert "system.network.rho" in " ".join(caught.value.problems)


def test_positions_file_that_misses_clients_exits_2_naming_the_field(tmp_path, capsys):
    positions = tmp_path / "positions.csv"
    positions.write_text("client,x_m,y_m\n" + "".join(f"{c},{50 * c + 20},0\n" for c in range(6)))
    data = radio_scenario(tmp_path)
    data["system"]["radio"] = {"positions": str(positions)}
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps(data))
    assert main(["validate", str(path)]) == 2
    error = capsys.readouterr().err
    assert "system.radio.positions" in error and "6, 7" in error and "Traceback" not in error
    positions.write_text("client,x_m\n0,1\n")
    assert main(["validate", str(path)]) == 2
    assert "client,x_m,y_m" in capsys.readouterr().err


def test_positions_file_places_the_clients(tmp_path):
    positions = tmp_path / "positions.csv"
    positions.write_text("client,x_m,y_m\n" + "".join(f"{c},0,{30 * c + 20}\n" for c in range(8)))
    data = radio_scenario(tmp_path)
    data["system"]["radio"] = {"positions": str(positions), "shadowing_db": 0}
    data["clients"] = {"count": 8}
    results = run_scenario(parse_scenario(data), show_progress=False)
    rows = list(csv.DictReader((results / "fedavg" / "radio.csv").open()))
    assert [float(r["distance_m"]) for r in rows] == pytest.approx([30 * c + 20 for c in range(8)])
    snr_db = [float(r["uplink_snr_db"]) for r in rows]
    assert snr_db == sorted(snr_db, reverse=True)  # farther, weaker


def test_budget_reports_the_rate_distribution_and_no_closed_form(tmp_path):
    data = radio_scenario(tmp_path)
    data["clients"] = {"count": 8}
    data["algorithms"] = [{"name": "fedavg"}]
    scenario = parse_scenario(data)
    dataset = build_dataset(scenario)
    [budget] = [
        budget_algorithm(scenario, a, dataset, build_trainers(scenario, dataset))
        for a in scenario.algorithms
    ]
    assert budget.closed_form_round_s is None  # rates vary: no closed form to offer
    radio = budget.radio
    for key in ("uplink_snr_db", "uplink_mbps", "downlink_mbps", "rho"):
        p10, p50, p90 = radio[key]
        assert p10 <= p50 <= p90
    assert radio["uplink_mbps"][0] > 0
    text = format_budgets(scenario, [budget], 1000)
    assert "SNR dB p10/p50/p90" in text and "outages" in text


def test_a_sweep_over_a_radio_field_gives_valid_variants(tmp_path):
    data = radio_scenario(tmp_path)
    data["sweep"] = {"system.radio.cell_radius_m": [200, 800]}
    variants = parse_scenario(data).variants()
    assert [v.system.radio.cell_radius_m for v in variants] == [200, 800]


def test_rician_power_gain_has_mean_one_and_the_closed_form_variance():
    k = 10 ** (6 / 10)  # K = 6 dB
    fading = Fading("rician", k_factor=k, coherence_s=1.0)
    gains = np.array([fading.power_gain(5, 2, 0, 0, block) for block in range(20_000)])
    error = gains.std() / math.sqrt(len(gains))
    assert abs(gains.mean() - 1.0) < 4 * error
    assert gains.var() == pytest.approx((2 * k + 1) / (k + 1) ** 2, rel=0.05)


def test_packet_error_outage_follows_chens_law():
    env = simpy.Environment()
    snr = macro_snr(300.0, 10.0, BAND_HZ)
    waterfall_m = -snr * math.log(0.7)  # q = 1 - exp(-m / SNR) = 0.3
    radio = make_radio(
        env, [(300.0, 0.0)],
        link=WholeTransferSettings(
            Outage(model="packet_error", waterfall_m=waterfall_m, max_retransmissions=0)
        ),
    )  # fmt: skip
    outcomes = one_after_another(env, make_network(env, radio), attempts := 3000)
    lost = outcomes.count("lost") / attempts
    assert radio.stats[0].given_up == outcomes.count("lost")
    assert lost == pytest.approx(0.3, abs=4 * math.sqrt(0.3 * 0.7 / attempts))


def test_planning_times_use_the_snr_without_fading():
    env = simpy.Environment()
    radio = make_radio(
        env, [(0.0, 200.0), (0.0, 400.0)], fading=Fading("rayleigh", coherence_s=0.1)
    )
    network = make_network(env, radio, uplink_sharing="fixed", uplink_subbands=4)
    share_hz = BAND_HZ / 4
    assert network.uplink_time_s(1, 10_000) == pytest.approx(
        8e4 / (share_hz * math.log2(1 + macro_snr(400.0, 10.0, share_hz)))
    )
    assert network.group_downlink_time_s([0, 1], 10_000) == pytest.approx(
        8e4 / (BAND_HZ * math.log2(1 + macro_snr(400.0, 30.0, BAND_HZ)))
    )


def test_a_misspelt_key_of_a_power_law_lists_the_power_laws_keys(tmp_path):
    data = radio_scenario(tmp_path)
    data["system"]["radio"] = {"tx_power_dbm": {"kind": "uniform", "low": 1, "high": 3}}
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(data)
    text = "\n".join(caught.value.problems)
    assert "system.radio.tx_power_dbm.low: unknown key (did you mean 'low_dbm'?)" in text
