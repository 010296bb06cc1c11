"""The backhaul by hand: a site's transfers share its link (or each gets all of it), both
directions are counted apart, and a cut transfer wastes what it had sent."""

from __future__ import annotations

import pytest
import simpy

from fedsim.sim.backhaul import Backhaul
from fedsim.sim.events import EventLog

RATE_BPS = 8e6  # 1 MB/s
LATENCY_S = 0.05


def sending(shared: bool, sites_and_bytes: list[tuple[list[int], int, bool]]):
    env = simpy.Environment()
    log = EventLog(lambda: env.now)
    backhaul = Backhaul(env, log, RATE_BPS, LATENCY_S, shared=shared)
    ends: list[float] = []

    def send(sites, num_bytes, up):
        yield from backhaul.send(sites, num_bytes, up=up)
        ends.append(env.now)

    for sites, num_bytes, up in sites_and_bytes:
        env.process(send(sites, num_bytes, up))
    env.run()
    return ends, log


def test_two_uploads_of_one_site_share_its_link_and_other_sites_do_not_slow_them():
    ends, log = sending(
        True, [([0], 1_000_000, True), ([0], 1_000_000, True), ([1], 1_000_000, True)]
    )
    # Site 0: two flows of 1 MB at 0.5 MB/s each; site 1's flow alone at 1 MB/s.
    assert ends == pytest.approx([LATENCY_S + 1.0, LATENCY_S + 2.0, LATENCY_S + 2.0])
    assert log.backhaul_up_bytes == 3_000_000 and log.backhaul_down_bytes == 0
    assert log.transmissions["backhaul_up"] == 3 and log.uplink_bytes == 0


def test_up_and_down_are_separate_links_and_dedicated_gives_each_transfer_the_whole_rate():
    ends, log = sending(True, [([0], 1_000_000, True), ([0], 1_000_000, False)])
    assert ends == pytest.approx([LATENCY_S + 1.0, LATENCY_S + 1.0])  # full duplex
    assert (log.backhaul_up_bytes, log.backhaul_down_bytes) == (1_000_000, 1_000_000)
    ends, _ = sending(False, [([0], 1_000_000, True), ([0], 1_000_000, True)])
    assert ends == pytest.approx([LATENCY_S + 1.0, LATENCY_S + 1.0])


def test_a_cut_transfer_is_wasted_for_what_it_had_sent():
    env = simpy.Environment()
    log = EventLog(lambda: env.now)
    backhaul = Backhaul(env, log, RATE_BPS, LATENCY_S)
    process = env.process(backhaul.send([0, 1], 1_000_000, up=True))

    def cut():
        yield env.timeout(LATENCY_S + 0.25)
        process.interrupt("offline")

    env.process(cut())
    with pytest.raises(simpy.Interrupt):
        env.run(process)
    assert log.wasted_bytes == pytest.approx(2 * 250_000, abs=2)
    assert log.backhaul_up_bytes == 0
