"""What keeps the cellular model fast (issue 38 §3): the large-scale loss cached per client and
site until the client moves, a scheduling period's work that follows the uploads under way
and not the clients or sites, the same results as without the caches, and `fedsim budget`'s
warning about settings that multiply the event model's work (and its progress display)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import simpy
import yaml

from fedsim.budget import event_load_warnings
from fedsim.cli import main
from fedsim.config import load_scenario
from fedsim.sim.cells import HexGrid
from fedsim.sim.draws import Fading
from fedsim.sim.events import EventLog
from fedsim.sim.link import HarqLinkSettings
from fedsim.sim.network import Network
from fedsim.sim.pathloss import Tr38901
from fedsim.sim.radio import CellSettings, PowerControl, Radio, RadioSettings
from fedsim.sim.scheduler import ProportionalFair, UplinkScheduling
from fedsim.world.network import layout_radius_m
from tests.conftest import REPO, tiny_scenario

GRID = HexGrid(1, 500.0, wrap_around=True)
SITES = GRID.num_sites
UPDATE_S = 0.25  # position updates
SHADOWING_S = 0.5  # shadowing blocks
ACTIVE_AT_M = np.array([(100.0, 50.0), (-150.0, 80.0), (60.0, -200.0)])  # near site 0
ACTIVE = len(ACTIVE_AT_M)  # the clients that upload, the first ones
ACTIVE_SHADOWING = np.array([0.3, -0.8, 1.1])  # their first shadowing, in units of sigma
UPLOAD_BYTES = 1_500_000
PERIOD_S = 0.01  # scheduling periods: 10 per fading block


def cellular_radio(
    env: simpy.Environment, clients: int, *, cache_channel: bool = True, **changes: object
) -> Radio:
    """multicell.yaml's radio in small: 7 wrapped-around UMa cells, open-loop power control,
    harq, walking clients whose shadowing also changes; the ACTIVE clients first, placed and
    shadowed as fixed here (their later draws are hashed from their index), so that the other
    clients change nothing of theirs."""
    settings = RadioSettings(
        path_loss=Tr38901("uma", 3.5e9), fading=Fading("rayleigh", coherence_s=0.1),
        shadowing_db=1.0, shadowing_coherence_s=SHADOWING_S, bs_noise_figure_db=5.0,
        ue_noise_figure_db=9.0,
        uplink_bandwidth_hz=20e6, min_distance_m=35.0, cell_radius_m=layout_radius_m(GRID),
        link=HarqLinkSettings(), power_control=PowerControl(-90.0, 0.8, 30),
        cells=CellSettings(GRID, interference=True, hysteresis_db=3.0), speed_mps=15.0,
        update_s=UPDATE_S,
    )  # fmt: skip
    settings = dataclasses.replace(settings, **changes)
    others = np.random.default_rng(4)
    positions_m = np.concatenate([ACTIVE_AT_M, GRID.place(others, clients, 35.0)])
    normals = np.concatenate([ACTIVE_SHADOWING, others.standard_normal(clients)])
    return Radio(
        settings, lambda: env.now, positions_m, np.full(ACTIVE + clients, 23.0), normals,
        key=11, cache_channel=cache_channel,
    )  # fmt: skip


def upload_on_pf_bands(idle: int, *, cache_channel: bool = True):
    """The ACTIVE clients upload at staggered starts on every site's proportional-fair band,
    scheduled every PERIOD_S, while ``idle`` more clients stand by; their end times, the
    radio and the network."""
    env = simpy.Environment()
    radio = cellular_radio(env, idle, cache_channel=cache_channel)
    network = Network(
        env, {}, log=EventLog(lambda: env.now), radio=radio, latency_s=0.01,
        uplink_sharing=UplinkScheduling("proportional_fair", 30, PERIOD_S),
    )  # fmt: skip
    ends: dict[int, float] = {}

    def upload(client: int):
        yield env.timeout(0.3 * client)
        yield from network.upload(client, UPLOAD_BYTES)
        ends[client] = env.now

    for client in range(ACTIVE):
        env.process(upload(client))
    env.run(until=30.0)
    return ends, radio, network


def counting(cls: type, method: str):
    """Counts the calls of ``cls.method`` (which still runs)."""
    return mock.patch.object(cls, method, autospec=True, side_effect=getattr(cls, method))


def counting_losses():
    """Counts the computations of a large-scale loss (a path loss, LOS and shadowing)."""
    return counting(Radio, "_computed_loss_db")


# --- the large-scale loss cache ---


def test_a_moved_clients_loss_is_a_fresh_computation_and_is_kept_until_it_moves():
    env = simpy.Environment()
    radio = cellular_radio(env, 0)
    with counting_losses() as computed:
        before = [radio.large_scale_loss_db(0, 0.1, site) for site in range(SITES)]
        again = [radio.large_scale_loss_db(0, 0.2, site) for site in range(SITES)]
        assert computed.call_count == SITES  # within the position update: computed once
        moved = [radio.large_scale_loss_db(0, UPDATE_S + 0.01, site) for site in range(SITES)]
        assert computed.call_count == 2 * SITES  # it moved: every site's loss again
    assert again == before
    assert moved != before
    fresh = cellular_radio(simpy.Environment(), 0)  # never asked before: nothing cached
    assert moved == [fresh.large_scale_loss_db(0, UPDATE_S + 0.01, s) for s in range(SITES)]
    uncached = cellular_radio(simpy.Environment(), 0, cache_channel=False)
    assert moved == [uncached.large_scale_loss_db(0, UPDATE_S + 0.01, s) for s in range(SITES)]


def test_a_new_shadowing_block_of_a_still_client_is_a_fresh_computation():
    radio = cellular_radio(simpy.Environment(), 0, speed_mps=None)  # nobody walks
    with counting_losses() as computed:
        first = radio.large_scale_loss_db(1, 0.1, 2)
        assert radio.large_scale_loss_db(1, SHADOWING_S - 0.1, 2) == first
        assert computed.call_count == 1  # the same shadowing block: kept
        second = radio.large_scale_loss_db(1, SHADOWING_S + 0.1, 2)
        assert computed.call_count == 2
    assert first != second
    fresh = cellular_radio(simpy.Environment(), 0, speed_mps=None)
    assert second == fresh.large_scale_loss_db(1, SHADOWING_S + 0.1, 2)


# --- a period's work follows the uploads ---


def test_a_periods_work_does_not_grow_with_idle_clients():
    counts, allocations = {}, {}
    for idle in (0, 60):
        with counting_losses() as computed, counting(ProportionalFair, "allocate") as allocate:
            ends, _, _ = upload_on_pf_bands(idle)
        counts[idle], allocations[idle] = computed.call_count, allocate.call_count
        assert sorted(ends) == list(range(ACTIVE))  # every upload ended within the run
    assert counts[0] == counts[60] and allocations[0] == allocations[60]
    # At most every site's loss, for each active client, in each (position, shadowing) epoch
    # its upload spans.
    last_s = max(ends.values())
    epochs = int(last_s / UPDATE_S) + int(last_s / SHADOWING_S) + 1
    assert 0 < counts[0] <= ACTIVE * SITES * epochs
    assert counts[0] < allocations[0]  # fewer than one per scheduling period
    with counting_losses() as computed:
        upload_on_pf_bands(0, cache_channel=False)
    assert computed.call_count > 20 * counts[0]  # what the cache saves: one per PRB candidate


def test_the_caches_change_no_result_on_a_small_multicell_world():
    cached_ends, cached, cached_network = upload_on_pf_bands(5)
    plain_ends, plain, plain_network = upload_on_pf_bands(5, cache_channel=False)
    assert cached_ends == plain_ends
    for a, b in zip(cached.stats, plain.stats, strict=True):
        assert (a.uplink_bits, a.uplink_air_s, a.uplink_joules, a.handovers) == (
            b.uplink_bits, b.uplink_air_s, b.uplink_joules, b.handovers
        )  # fmt: skip
        assert (a.blocks.sent, a.blocks.failed, a.blocks.mcs_sum) == (
            b.blocks.sent, b.blocks.failed, b.blocks.mcs_sum
        )  # fmt: skip
    given = [band.prbs_given for band in cached_network.uplink_bands]
    assert given == [band.prbs_given for band in plain_network.uplink_bands]
    assert cached.link.adaptation[0].offsets_db == plain.link.adaptation[0].offsets_db
    assert sum(c.handovers for c in cached.stats) > 0  # the walk did hand clients over


# --- the warning about settings that multiply events, and the budget's progress ---


def test_a_scheduling_period_far_below_the_fading_block_is_warned_about():
    scenario = load_scenario(
        REPO / "scenarios" / "multicell.yaml", ["system.radio.uplink_sharing.period_s=0.001"]
    )
    [warning] = event_load_warnings(scenario)
    assert warning.startswith("warning: system.radio.uplink_sharing.period_s = 0.001 s")
    assert "100x shorter" in warning and "coherence_s = 0.1 s" in warning
    assert "7,000 scheduling periods per simulated second" in warning  # 7 cells / 1 ms
    assert "490,000 upload re-plans" in warning  # x 70 clients


def test_position_updates_far_finer_than_a_walk_needs_are_warned_about():
    scenario = load_scenario(
        REPO / "scenarios" / "multicell.yaml", ["system.radio.mobility.update_s=0.01"]
    )
    [warning] = event_load_warnings(scenario)
    assert warning.startswith("warning: system.radio.mobility.update_s = 0.01 s")
    assert "1.5 cm per position update" in warning and "update_s = 0.667 s" in warning


@pytest.mark.parametrize(
    "path", sorted((REPO / "scenarios").glob("**/*.yaml")), ids=lambda p: p.name
)
def test_no_shipped_scenario_is_warned_about(path: Path):
    scenario = load_scenario(path)
    assert [line for v in scenario.variants() for line in event_load_warnings(v)] == []


def one_ms_scheduling(tmp_path: Path, **overrides: object) -> Path:
    """A file of tiny_scenario's 12 clients on a PF scheduler every millisecond."""
    radio = {
        "fading": {"model": "rayleigh", "coherence_s": 0.1},
        "uplink_sharing": {"scheduler": "proportional_fair", "period_s": 0.001},
    }
    data = tiny_scenario(tmp_path, clients={"count": 12}, system={"radio": radio}, **overrides)
    data["system"]["network"] = {"latency_s": 0.01}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_budget_warns_on_stderr_and_shows_progress_only_on_a_terminal(
    tmp_path, capsys, monkeypatch
):
    path = one_ms_scheduling(tmp_path)
    assert main(["budget", str(path)]) == 0
    out, err = capsys.readouterr()
    [line] = err.splitlines()  # no progress: stderr is not a terminal here
    assert line.startswith("warning: system.radio.uplink_sharing.period_s = 0.001 s")
    assert "warning" not in out
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["budget", str(path)]) == 0
    on_terminal, shown = capsys.readouterr()
    assert on_terminal == out  # the printed budget is the same
    assert "runs" in shown and "1/1" in shown  # the study's display: runs done of the total


def test_a_run_warns_at_its_start_as_its_budget_does(tmp_path, capsys):
    path = one_ms_scheduling(tmp_path, run={"rounds": 1}, sweep={"seed": [1, 2]})  # two runs
    assert main(["run", str(path), "--quiet"]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1
    assert warnings[0].startswith("warning: system.radio.uplink_sharing.period_s = 0.001 s")
