"""The system model against closed forms."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from fedsim.sim import Link, Network, ShiftedExponential, harmonic_number, transfer_time_s
from fedsim.sim.compute import expected_max_completion_s
from fedsim.sim.events import EventLog


def make_network(uplink_medium: str, downlink: str, **options) -> Network:
    env = simpy.Environment()
    log = EventLog(lambda: env.now)
    return Network(
        env, LINKS, log=log, uplink_medium=uplink_medium, downlink_mode=downlink, **options
    )


MB = 1_000_000


def synchronous_round(network: Network, compute_s: dict[int, float], payload: int) -> float:
    """Broadcast, compute, upload for every client; the round time the server sees."""
    env = network.env
    arrivals = network.send_down(list(compute_s), payload)

    def client(c: int):
        yield arrivals[c]
        yield env.timeout(compute_s[c])
        yield from network.upload(c, payload)

    env.run(env.all_of([env.process(client(c)) for c in compute_s]))
    return env.now


LINKS = {
    0: Link(uplink_bps=1e6, downlink_bps=4e6, latency_s=0.01),
    1: Link(uplink_bps=2e6, downlink_bps=8e6, latency_s=0.01),
    2: Link(uplink_bps=0.5e6, downlink_bps=2e6, latency_s=0.01),
}
COMPUTE_S = {0: 1.0, 1: 3.0, 2: 0.5}
PAYLOAD = 250_000  # bytes


def test_transfer_time_is_latency_plus_bits_over_rate():
    assert transfer_time_s(125_000, 1e6, 0.02) == pytest.approx(1.02)
    with pytest.raises(ValueError):
        transfer_time_s(1, 0.0)


def test_parallel_round_lasts_max_of_downlink_compute_uplink():
    network = make_network("parallel", "broadcast")
    t_dl = 0.01 + 8 * PAYLOAD / 2e6  # one broadcast at the slowest receiver's rate
    expected = max(t_dl + COMPUTE_S[c] + 0.01 + 8 * PAYLOAD / LINKS[c].uplink_bps for c in LINKS)
    assert synchronous_round(network, COMPUTE_S, PAYLOAD) == pytest.approx(expected)


def test_tdma_uplink_phase_is_sum_of_uploads_when_all_ready_together():
    network = make_network("tdma", "broadcast")
    t_dl = 0.01 + 8 * PAYLOAD / 2e6
    uploads = sum(0.01 + 8 * PAYLOAD / link.uplink_bps for link in LINKS.values())
    same_compute = dict.fromkeys(LINKS, 2.0)
    assert synchronous_round(network, same_compute, PAYLOAD) == pytest.approx(t_dl + 2.0 + uploads)


def test_tdma_serves_uploads_first_come_first_served():
    network = make_network("tdma", "broadcast")
    t_dl = 0.01 + 8 * PAYLOAD / 2e6
    up = {c: 0.01 + 8 * PAYLOAD / link.uplink_bps for c, link in LINKS.items()}
    # client 2 is ready first (0.5 s), then 0 (1.0 s), then 1 (3.0 s)
    end_2 = t_dl + 0.5 + up[2]
    end_0 = max(end_2, t_dl + 1.0) + up[0]
    end_1 = max(end_0, t_dl + 3.0) + up[1]
    assert synchronous_round(network, COMPUTE_S, PAYLOAD) == pytest.approx(end_1)


def test_unicast_downlink_sends_one_copy_after_another():
    network = make_network("parallel", "unicast")
    env = network.env
    delivered = network.send_down([0, 1, 2], PAYLOAD)
    arrival_s: dict[int, float] = {}

    def watch(c: int):
        yield delivered[c]
        arrival_s[c] = env.now

    for c in delivered:
        env.process(watch(c))
    env.run()
    own = {c: 0.01 + 8 * PAYLOAD / link.downlink_bps for c, link in LINKS.items()}
    assert network.log.downlink_bytes == 3 * PAYLOAD
    assert arrival_s[0] == pytest.approx(own[0])
    assert arrival_s[1] == pytest.approx(own[0] + own[1])
    assert arrival_s[2] == pytest.approx(own[0] + own[1] + own[2])


def test_network_logs_delivered_bytes_per_direction():
    network = make_network("parallel", "unicast")
    synchronous_round(network, COMPUTE_S, PAYLOAD)
    log = network.log
    assert (log.downlink_bytes, log.uplink_bytes, log.wasted_bytes) == (3 * PAYLOAD, 3 * PAYLOAD, 0)


def test_rejects_unknown_media():
    with pytest.raises(ValueError, match="uplink_medium"):
        make_network("shared-ish", "broadcast")
    with pytest.raises(ValueError, match="downlink"):
        make_network("parallel", "multicast-ish")
    with pytest.raises(ValueError, match="capacity"):
        make_network("shared", "broadcast")


def test_expected_max_completion_has_the_harmonic_closed_form_and_matches_monte_carlo():
    assert expected_max_completion_s([2.0] * 50, [1.0] * 50, 1.0, 0.5) == pytest.approx(
        2.0 + 1.0 + harmonic_number(50) * 0.5
    )
    assert expected_max_completion_s([0.0, 3.0], [1.0, 2.0], 1.0, 0.0) == 5.0  # deterministic
    rng = np.random.default_rng(0)
    offsets, scales = rng.uniform(0, 3, 40), rng.uniform(0.5, 2, 40)
    draws = offsets + scales * (1.0 + rng.exponential(0.8, (20_000, 40)))
    monte_carlo = draws.max(axis=1)
    expected = expected_max_completion_s(offsets, scales, 1.0, 0.8)
    assert expected == pytest.approx(monte_carlo.mean(), abs=4 * monte_carlo.std() / 141)


def test_harmonic_numbers():
    assert harmonic_number(1) == 1.0
    assert harmonic_number(20) == pytest.approx(3.5977, abs=1e-4)
    assert harmonic_number(100) == pytest.approx(5.1874, abs=1e-4)


@pytest.mark.parametrize("m", [1, 5, 20, 100])
def test_mean_of_max_of_shifted_exponentials_matches_closed_form(m: int):
    model = ShiftedExponential(t_min_s=2.0, mean_extra_s=1.5)
    rng = np.random.default_rng(m)
    trials = 4000
    maxima = [max(model.sample_s(rng) for _ in range(m)) for _ in range(trials)]
    # std of the max of m exponentials is mean * sqrt(sum 1/r^2) <= mean * pi / sqrt(6)
    tolerance = 4 * 1.5 * (np.pi / np.sqrt(6)) / np.sqrt(trials)
    assert np.mean(maxima) == pytest.approx(model.expected_max_s(m), abs=tolerance)
    assert min(maxima) >= 2.0


def test_fraction_before_deadline_matches_cdf():
    model = ShiftedExponential(t_min_s=1.0, mean_extra_s=2.0)
    rng = np.random.default_rng(0)
    draws = np.array([model.sample_s(rng) for _ in range(20000)])
    for deadline_s in (1.5, 3.0, 6.0):
        expected = 1 - np.exp(-(deadline_s - 1.0) / 2.0)
        assert model.fraction_within(deadline_s) == pytest.approx(expected)
        assert np.mean(draws <= deadline_s) == pytest.approx(expected, abs=0.015)
    assert model.fraction_within(0.5) == 0.0


def test_step_scaling_multiplies_one_draw():
    model = ShiftedExponential(t_min_s=0.1, mean_extra_s=0.0)
    assert model.sample_s(np.random.default_rng(0), work_units=30) == pytest.approx(3.0)


def peer_arrival_s(network: Network, sender: int, receiver: int) -> float:
    """When a peer message of PAYLOAD bytes from sender reaches receiver."""
    env, arrived = network.env, []

    def send():
        delivered = yield from network.send_peer(sender, receiver, PAYLOAD)
        yield delivered
        arrived.append(env.now)

    env.process(send())
    env.run()
    [arrival_s] = arrived
    return arrival_s


def test_peer_messages_use_the_d2d_edge_or_the_base_station_relay():
    import networkx as nx

    graph = nx.Graph()
    graph.add_nodes_from(LINKS)
    graph.add_edge(0, 1, rate_bps=5e6, latency_s=0.002)
    for relay, receiver, expected_s in [
        (False, 1, 0.002 + 8 * PAYLOAD / 5e6),  # direct edge
        (False, 2, 0.01 + 8 * PAYLOAD / 1e6 + 0.01 + 8 * PAYLOAD / 2e6),  # no edge: relayed
        (True, 1, 0.01 + 8 * PAYLOAD / 1e6 + 0.01 + 8 * PAYLOAD / 8e6),  # relaying forced
    ]:
        network = make_network("parallel", "broadcast", graph=graph, relay=relay)
        assert peer_arrival_s(network, 0, receiver) == pytest.approx(expected_s)
        direct = not relay and receiver == 1
        assert network.log.d2d_bytes == (PAYLOAD if direct else 0)
        assert network.log.uplink_bytes == network.log.downlink_bytes == (0 if direct else PAYLOAD)
