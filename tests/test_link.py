"""The link layer against the standard, the reference and closed forms: NR MCS tables,
transport block sizes and code-block segmentation (TS 38.214/38.212, and Sionna's where it is
installed), BLER curves equal to Sionna's PHYAbstraction, the built-in bound; HARQ's goodput
rate·(1 − BLER) and 1/(1 − BLER) transmissions per block, the outer loop driving the BLER to its
target, long transfers never lost whole, per_upload's 1 − exp(−m/SNR), the accounting of
retransmitted bytes and wasted joules, and the configuration of the link."""

from __future__ import annotations

import csv
import importlib.util
import math

import numpy as np
import pytest
import simpy

from fedsim.budget import budget_algorithm, format_budgets
from fedsim.config import ScenarioError, parse_scenario
from fedsim.runner import build_dataset, build_trainers
from fedsim.sim.bler import LOSS_DB, BlerCurves, finite_length_bler
from fedsim.sim.draws import Fading
from fedsim.sim.event_check import check_events
from fedsim.sim.link import Harq, HarqLink, HarqLinkSettings, HarqSettings, PerUploadSettings
from fedsim.sim.link.adaptation import Use
from fedsim.sim.link.views import FlatSnr
from fedsim.sim.medium import TransmissionLost
from fedsim.sim.nr import DATA_RE_PER_PRB, code_blocks, mcs_table, transport_block_bits
from fedsim.sim.pathloss import UmiStreetCanyon
from fedsim.sim.radio import UPLINK, RadioSettings
from fedsim.study import run_scenario
from tests.conftest import tiny_scenario
from tests.test_radio import BAND_HZ, macro_snr, make_network, make_radio, upload_ends

HAS_SIONNA = importlib.util.find_spec("sionna") is not None
needs_sionna = pytest.mark.skipif(not HAS_SIONNA, reason="sionna-no-rt not installed")


def harq(**settings) -> Harq:
    """The uplink's link adaptation, with the outer loop unless ``olla_step_db=None``."""
    link = HarqLink(HarqSettings(**{"bler_source": "builtin", **settings}))
    return link.adaptation[UPLINK]


# --- the standard ---------------------------------------------------------------------------


def test_mcs_tables_and_transport_blocks_by_hand():
    table = mcs_table("64qam")
    assert len(table) == 29 and len(mcs_table("256qam")) == 28
    assert (table[0].modulation_order, table[0].code_rate) == (2, 120 / 1024)
    assert table[28].spectral_efficiency == pytest.approx(5.5547, abs=1e-4)
    assert mcs_table("256qam")[27].spectral_efficiency == pytest.approx(7.4063, abs=1e-4)
    # MCS 9 on 10 PRBs: N_info = 1560 x 679/1024 x 2 = 2068.8 -> n = 5, 2048 -> TBS 2088 (table)
    assert transport_block_bits(DATA_RE_PER_PRB * 10, table[9]) == 2088
    assert code_blocks(2088, table[9].code_rate) == (2104, 1)  # a 16-bit CRC, one block
    # MCS 20 on 51 PRBs: N_info = 7956 x 567/1024 x 6 = 26432 -> n = 9: 26624 -> TBS 26632;
    # base graph 1: 26656 bits with the CRC, in ceil(26656 / 8424) = 4 code blocks
    tbs = transport_block_bits(DATA_RE_PER_PRB * 51, table[20])
    assert tbs == 26632
    assert code_blocks(tbs, table[20].code_rate) == (6688, 4)


@needs_sionna
def test_transport_blocks_equal_sionnas():
    from sionna.phy.nr.utils import calculate_tb_size  # torch: only for this reference

    for name in ("64qam", "256qam"):
        for mcs in mcs_table(name):
            for prbs in (1, 3, 8, 25, 51, 106, 273):
                out = calculate_tb_size(mcs.modulation_order, mcs.code_rate, num_prbs=prbs,
                                        num_ofdm_symbols=14, num_dmrs_per_prb=12)  # fmt: skip
                tbs = transport_block_bits(DATA_RE_PER_PRB * prbs, mcs)
                assert (int(out[0]), int(out[1]), int(out[2])) == (
                    tbs,
                    *code_blocks(tbs, mcs.code_rate),
                )


# --- BLER curves ----------------------------------------------------------------------------


@needs_sionna
@pytest.mark.parametrize(("direction", "table", "category", "index"), [
    ("uplink", "64qam", 0, 1), ("downlink", "64qam", 1, 1), ("downlink", "256qam", 1, 2),
])  # fmt: skip
def test_bler_equals_sionnas_phy_abstraction(direction, table, category, index):
    import torch  # only for Sionna's reference
    from sionna.sys import PHYAbstraction

    reference = PHYAbstraction()
    ours = BlerCurves(direction, table, "sionna")
    rng = np.random.default_rng(5)
    checked = 0
    for _ in range(600):
        mcs = int(rng.integers(0, len(ours.mcs)))
        cb_size, snr_db = int(rng.integers(24, 8448)), float(rng.uniform(-8.0, 32.0))
        theirs = float(
            reference.get_bler(mcs, index, category, cb_size, torch.tensor(10 ** (snr_db / 10)))
        )
        if math.isfinite(theirs):  # Sionna has no curve for the lowest MCS of some tables
            assert ours.bler(snr_db, mcs, cb_size) == pytest.approx(theirs, abs=1e-6)
            checked += 1
    assert checked > 400


def test_builtin_curves_are_the_finite_length_bound_with_their_loss():
    curves = BlerCurves("uplink", "64qam", "builtin")
    mcs = mcs_table("64qam")[12]  # 16QAM
    loss_db = LOSS_DB["uplink"][4]
    for snr_db in (2.0, 4.0, 6.0):  # points of the curve's own grid
        snr = np.array([10 ** ((snr_db - loss_db) / 10)])
        bound = finite_length_bler(snr, mcs.spectral_efficiency, 1000)
        assert curves.curves[12].at(snr_db, 1000.0) == pytest.approx(float(bound[0]), rel=1e-9)
    # a longer code block has the steeper waterfall: above it, fewer errors
    assert curves.bler(5.5, 12, 2000) < curves.bler(5.5, 12, 100) < 1.0


@needs_sionna
def test_builtin_curves_lie_within_a_db_of_sionnas_at_the_target():
    builtin, sionna = (BlerCurves("uplink", "64qam", source) for source in ("builtin", "sionna"))
    gaps = [
        builtin.threshold_db(m, 2000, 1, 0.1) - sionna.threshold_db(m, 2000, 1, 0.1)
        for m in range(3, 28)
    ]
    assert max(abs(g) for g in gaps) < 1.0, gaps


# --- counts drawn from one uniform ----------------------------------------------------------


def only_on(prbs: int, snr_db: float) -> FlatSnr:
    """A flat channel on which only blocks of ``prbs`` PRBs carry anything (no power on fewer):
    link adaptation can but send on that count."""
    return FlatSnr(snr_db, snr_db, np.where(np.arange(1, prbs + 1) < prbs, -100.0, 0.0))


def test_goodput_is_rate_times_one_minus_bler_and_blocks_take_one_over_one_minus_bler():
    """A fixed SNR and MCS (no outer loop), each transmission on its own, on 13 whole PRBs:
    many periods of many blocks."""
    link = harq(combining="none", target_bler=0.3, olla_step_db=None)
    prbs = 13
    shape = link.shapes(prbs)[5]
    snr_db = shape.threshold_db + 10 * math.log10(prbs)  # over one PRB: it just meets the target
    p = link.failure_probability(shape.threshold_db, shape)
    assert 0.1 < p <= 0.3
    sent, failed, speeds = 0, 0, []
    for k in range(600):
        period = link.plan(0.0, 0, only_on(prbs, snr_db), prbs * link.settings.prb_hz, 1e9, 0.05,
                           (k + 0.5) / 600)  # fmt: skip
        assert period.shape == shape and period.sent == 100  # 0.05 s of 0.5 ms slots
        speeds.append(period.speed_bps)
        sent, failed = sent + period.sent, failed + period.failed
    speeds = np.array(speeds)
    raw_bps = shape.bits / link.settings.slot_s
    assert speeds.mean() == pytest.approx(raw_bps * (1 - p), abs=4 * speeds.std() / math.sqrt(600))
    assert sent / (sent - failed) == pytest.approx(1 / (1 - p), rel=0.02)


def test_a_transfer_ending_in_its_period_needs_one_over_one_minus_bler_transmissions():
    link = harq(combining="none", target_bler=0.3, olla_step_db=None)
    shape = link.shapes(20)[8]
    p = link.failure_probability(shape.threshold_db, shape)
    snr_db = shape.threshold_db + 10 * math.log10(20)
    needed = 40
    totals = [
        link.plan(0.0, 0, only_on(20, snr_db), 20 * link.settings.prb_hz, needed * shape.bits,
                  math.inf, (k + 0.5) / 2000).sent
        for k in range(2000)
    ]  # fmt: skip
    assert np.mean(totals) == pytest.approx(needed / (1 - p), rel=0.02)


def test_chase_combining_needs_fewer_transmissions_than_none():
    plain, chase = harq(combining="none"), harq(combining="chase")
    alone, combined = plain.shapes(10)[-1], chase.shapes(10)[-1]  # the lowest MCS
    snr_db = alone.threshold_db - 2.0  # 2 dB short of its target SNR
    p = [plain.curves.transport_bler(snr_db + 10 * math.log10(k), alone.mcs, alone.cb_size,
                                     alone.blocks) for k in (1, 2, 3, 4)]  # fmt: skip
    expected_transmissions = 1 + p[0] + p[0] * p[1] + p[0] * p[1] * p[2]
    delivered = 1 - p[0] * p[1] * p[2] * p[3]
    assert plain.failure_probability(snr_db, alone) == pytest.approx(p[0])
    assert chase.failure_probability(snr_db, combined) == pytest.approx(
        1 - delivered / expected_transmissions
    )
    assert chase.failure_probability(snr_db, combined) < p[0] - 0.1


@pytest.mark.parametrize("error_db", [2.0, -2.0])
def test_the_outer_loop_drives_the_bler_to_its_target_whatever_the_estimates_error(error_db):
    """The estimate is off by error_db (and noisy): alone, the achieved BLER is far from the
    target (over it when optimistic, well under when pessimistic); the outer loop brings it
    to the target."""
    rng = np.random.default_rng(3)
    snr_db = 22 + 3 * rng.standard_normal(6000)  # over one PRB: 8 dB over the 10 MHz
    estimate_db = snr_db + error_db + 0.5 * rng.standard_normal(6000)
    achieved = {}
    for name, olla in (("none", None), ("olla", 1.0)):
        link = harq(combining="none", olla_step_db=olla)
        sent = failed = 0.0
        for block in range(len(snr_db)):
            period = link.plan(
                0.0,
                0,
                FlatSnr(snr_db[block], estimate_db[block]),
                10e6,
                1e12,
                0.01,
                rng.uniform(),
            )
            tally = link.settle(period, 0.01, 0)
            sent, failed = sent + tally.sent, failed + tally.failed
        achieved[name] = failed / sent
    assert abs(achieved["none"] - 0.1) > 0.08
    assert achieved["olla"] == pytest.approx(0.1, abs=0.01)


def test_a_long_upload_over_many_fading_blocks_is_never_lost_whole():
    env = simpy.Environment()
    radio = make_radio(
        env, [(350.0, 0.0)], fading=Fading("rayleigh", coherence_s=0.01),
        link=HarqLinkSettings(HarqSettings(bler_source="builtin")),
    )  # fmt: skip
    network = make_network(env, radio)
    ends = upload_ends(env, network, 0, 20_000_000)
    env.run()
    assert len(ends) == 1 and ends[0] != "lost"
    retransmitted = network.log.retransmitted_bytes
    assert 0 < retransmitted < 0.25 * 20_000_000  # of the order of the target BLER
    blocks = radio.stats[0].blocks
    assert blocks.sent > 1000 and 0.05 < blocks.failed / blocks.sent < 0.15  # the outer loop


def test_a_fractional_share_alternates_whole_prbs_and_radiates_no_more_than_it_has():
    """A share of b PRBs sends each slot's block on ⌊b⌋ PRBs or, in a fraction b − ⌊b⌋ of
    the slots, on ⌈b⌉, the power spread over them: the rate is the mix of the two whole
    counts', continuous at whole b and non-decreasing in b (issue 40: 1.99 PRBs carried
    1.545 Mbit/s with the power of 2 on 1 PRB, 2.00 PRBs 1.273)."""
    link = HarqLink(HarqSettings(bler_source="builtin"))
    prb_hz = link.settings.prb_hz
    for gain_db in (65.0, 70.0, 80.0):  # p·g/N0 in Hz: the SNR over one PRB is this / PRB
        gain_hz = 10 ** (gain_db / 10)

        def rate(prbs: float, gain_hz: float = gain_hz) -> float:
            return link.rate_bps(prbs * prb_hz, gain_hz / (prbs * prb_hz), UPLINK)

        shares = np.arange(0.05, 6.0, 0.01)
        rates = np.array([rate(b) for b in shares])
        assert np.all(np.diff(rates) >= 0), gain_db
        assert rate(1.99) <= rate(2.0) and rate(2.0) == pytest.approx(rate(1.99999), rel=1e-4)
        assert rate(2.25) == pytest.approx(0.75 * rate(2.0) + 0.25 * rate(3.0))
    adaptation = link.adaptation[UPLINK]
    period = adaptation.plan(0.0, 0, FlatSnr(30.0, 30.0), 2.25 * prb_hz, 1e12, 0.1, 0.5)
    on_three = [k for k in range(period.sent) if (k + 1) // 4 > k // 4]
    assert len(on_three) == period.sent // 4  # a quarter of the blocks on 3 PRBs


def test_a_re_split_that_keeps_the_allocation_changes_only_the_slots():
    """Within a period, a share under one PRB that grows (another upload left) keeps its
    blocks and their failures: they go on at the new rate; the blocks counted are those of
    each rate for its time, and the period runs again when its planned blocks are used up."""
    link = harq()
    prb_hz = link.settings.prb_hz
    period = link.plan(0.0, 0, FlatSnr(12.0, 12.0), 0.25 * prb_hz, 1e9, 0.1, 0.3)
    assert period.use == Use(0, 1, 0.25) and period.blocks_per_s == pytest.approx(500)
    assert period.sent == 50 and period.review_s == math.inf
    speed = period.speed_bps
    grown, _ = link.best_use(period.channel, 0.5 * prb_hz)
    assert grown.same_blocks(period.use)
    period.rescale(0.04, link.blocks_per_s(grown))  # 20 blocks sent, now 1,000/s
    assert period.speed_bps == pytest.approx(2 * speed)
    assert period.review_s == pytest.approx(0.04 + 30 / 1000)  # the 30 left, at the new rate
    tally = link.settle(period, 0.06, 0)
    assert tally.sent == 0.04 * 500 + 0.02 * 1000
    assert tally.failed == period.trace[39][1]


def test_a_share_under_one_prb_radiates_in_its_share_of_the_slots():
    """Six fixed sub-bands of 3 PRBs: each upload has half a PRB, so it sends on one PRB in
    half the slots, and radiates half its power on average."""
    env = simpy.Environment()
    radio = make_radio(
        env, [(100.0, 0.0)], uplink_bandwidth_hz=1.08e6,
        link=HarqLinkSettings(HarqSettings(bler_source="builtin")),
    )  # fmt: skip
    network = make_network(env, radio, uplink_sharing="fixed", uplink_subbands=6)
    ends = upload_ends(env, network, 0, 100_000)
    env.run()
    stats = radio.stats[0]
    assert ends[0] != "lost" and stats.uplink_air_s > 0
    assert stats.uplink_joules == pytest.approx(0.5 * radio.tx_power_w[0] * stats.uplink_air_s)


def test_equal_sharing_counts_the_carriers_prbs_with_harq():
    """10 MHz at 30 kHz holds 24 PRBs (TS 38.101-1 Table 5.3.2-1), not 27.8: the band the
    uploads share; the Shannon models keep the whole carrier."""
    env = simpy.Environment()
    nr = make_radio(env, [(100.0, 0.0)], uplink_bandwidth_hz=10e6,
                    link=HarqLinkSettings(HarqSettings(bler_source="builtin")))  # fmt: skip
    assert make_network(env, nr).uplink_bands[0].bandwidth_hz == pytest.approx(24 * 360e3)
    shannon = make_radio(env, [(100.0, 0.0)], uplink_bandwidth_hz=10e6)
    assert make_network(env, shannon).uplink_bands[0].bandwidth_hz == 10e6


@pytest.mark.parametrize("csi_age_blocks", [0, 1])
def test_the_outer_loop_per_harq_feedback_meets_the_target_with_perfect_and_stale_csi(
    csi_age_blocks,
):
    """A 20 MB upload over independent Rayleigh blocks of 0.1 s, the MCS picked at the
    previous block's SNR (stale) or the block's own: the outer loop, updated at every block's
    feedback, holds the BLER at the 10 % target (updated once per fading block it settled at
    +6…+11 dB and 5-7 % with stale CSI, at a quarter of the goodput)."""
    env = simpy.Environment()
    settings = HarqSettings(bler_source="builtin", csi_age_blocks=csi_age_blocks)
    radio = make_radio(
        env, [(200.0, 0.0)], fading=Fading("rayleigh", coherence_s=0.1),
        link=HarqLinkSettings(settings),
    )  # fmt: skip
    network = make_network(env, radio)
    ends = upload_ends(env, network, 0, 20_000_000)
    env.run()
    blocks = radio.stats[0].blocks
    assert blocks.sent > 5000
    assert blocks.failed / blocks.sent == pytest.approx(0.1, abs=0.02)
    assert 8 * 20_000_000 / ends[0] > 25e6  # about 30 Mbit/s either way


def test_a_share_under_one_prb_time_shares_a_prb_at_the_prbs_snr():
    """A tenth of a PRB is one PRB in a tenth of the slots, its power on the whole PRB: the
    SNR the curves read is over the PRB (10 dB under that of the narrow share)."""
    env = simpy.Environment()
    radio = make_radio(
        env, [(200.0, 0.0)], link=HarqLinkSettings(HarqSettings(bler_source="builtin"))
    )
    prb_hz = radio.link.adaptation[UPLINK].settings.prb_hz
    snr_on_prb = 10 ** (12 / 10)
    narrow = radio.rate_bps(0.1 * prb_hz, 10 * snr_on_prb)  # the SNR over the tenth
    assert narrow == pytest.approx(
        0.1 * radio.link.adaptation[UPLINK].best_use(FlatSnr(12.0, 12.0), prb_hz)[1]
    )
    assert narrow == pytest.approx(0.1 * radio.rate_bps(prb_hz, snr_on_prb))


def test_an_mcs_whose_blocks_all_fail_is_given_up_on_a_static_channel():
    """An outer loop run far too optimistic (offset -15 dB) on a channel that never changes
    picks an MCS whose every block fails: the failures raise the offset until blocks get
    through, instead of the transfer waiting for a channel change that never comes."""
    env = simpy.Environment()
    settings = HarqSettings(bler_source="builtin")
    radio = make_radio(env, [(300.0, 0.0)], link=HarqLinkSettings(settings))  # 2.5 dB
    radio.link.adaptation[UPLINK].offsets_db[0] = -15.0
    network = make_network(env, radio)
    ends = upload_ends(env, network, 0, 1_000_000)
    env.run(until=100.0)
    assert len(ends) == 1 and ends[0] != "lost" and ends[0] < 10.0
    assert radio.link.adaptation[UPLINK].offsets_db[0] > -10.0  # the failures raised it
    assert radio.stats[0].blocks.failed > 0


def test_below_the_lowest_mcs_nothing_is_sent_until_the_channel_improves():
    link = harq()
    period = link.plan(0.0, 0, FlatSnr(-30.0, -30.0), 1e6, 1e6, 0.1, 0.5)
    assert period.shape is None and period.speed_bps == 0.0
    assert link.settle(period, 0.1, 0).sent == 0.0


def test_a_radio_link_failure_reaches_the_sender_known_to_the_base_station():
    """A client the lowest MCS never reaches loses its radio link after link_failure_s
    (T310): the sender's process gets the loss as known, so a server need not wait for a
    deadline (SimPy throws a copy of the exception: ``known`` must survive it)."""
    env = simpy.Environment()
    settings = HarqSettings(bler_source="builtin")
    radio = make_radio(env, [(20_000.0, 0.0)], link=HarqLinkSettings(settings))
    network = make_network(env, radio)
    caught = []

    def sender():
        try:
            yield from network.upload(0, 1_000_000)
        except TransmissionLost as lost:
            caught.append((env.now, lost.known, str(lost)))

    env.process(sender())
    env.run(until=100.0)
    assert len(caught) == 1
    when_s, known, message = caught[0]
    assert 1.0 <= when_s < 1.1 and known and message == "radio link failure"


def test_per_upload_losses_follow_one_minus_exp_of_minus_m_over_snr_and_are_not_retried():
    env = simpy.Environment()
    radio = make_radio(env, [(300.0, 0.0)], link=PerUploadSettings(waterfall_m=1.0))
    network = make_network(env, radio)
    ends = []

    def uploads():
        for _ in range(3000):
            ends.append(upload_ends(env, network, 0, 100))
            yield env.timeout(1.0)

    env.process(uploads())
    env.run()
    outcomes = [outcome for end in ends for outcome in end]
    assert len(outcomes) == 3000
    lost = outcomes.count("lost") / len(outcomes)
    q = 1 - math.exp(-1.0 / macro_snr(300.0, 10.0, BAND_HZ))
    assert 0.1 < q < 0.9
    assert lost == pytest.approx(q, abs=4 * math.sqrt(q * (1 - q) / len(outcomes)))
    assert network.log.transmissions["uplink"] == 3000  # one transmission each: no retry


# --- a cell with the harq link, through runs --------------------------------------------------


HARQ_CELL = {
    "network": {"latency_s": 0.01},
    "radio": {
        "fading": {"model": "rayleigh", "coherence_s": 0.05},
        "shadowing_db": 4.0, "uplink_bandwidth_hz": 10e6, "link": {"bler_tables": "builtin"},
    },
}  # fmt: skip


def test_bytes_and_joules_add_up_with_retransmitted_blocks(tmp_path):
    data = tiny_scenario(tmp_path)
    data["system"] = {**HARQ_CELL, "energy": {"circuit_power_w": 0.1}}
    data["output"]["events"] = True
    scenario = parse_scenario(data)
    dataset = build_dataset(scenario, timing_only=True)
    budget = budget_algorithm(
        scenario, scenario.algorithms[0], dataset, build_trainers(scenario, dataset)
    )
    assert budget.retransmitted_bytes > 0
    assert budget.wasted_bytes >= budget.retransmitted_bytes
    assert 0 < budget.energy_j["wasted_j"] < 0.3 * budget.energy_j["tx_j"]
    text = format_budgets(scenario, [budget], 1)
    assert "delivered_MB" in text and "retx_MB" in text and "BLER" in text
    results = run_scenario(scenario, show_progress=False) / "fedavg"
    report = check_events(results / "events.jsonl")
    assert report.ok, report.violations
    assert report.sent_bytes == report.received_bytes + report.wasted_bytes + report.in_flight_bytes
    with (results / "radio.csv").open() as f:
        rows = list(csv.DictReader(f))
    used = [r for r in rows if r["blocks"]]
    assert used and all(
        0 <= float(r["bler"]) < 0.5 and 0 <= float(r["mean_mcs"]) <= 28 for r in used
    )
    assert sum(float(r["harq_retransmissions"]) for r in used) > 0


# --- D2D and configuration --------------------------------------------------------------------


def test_umi_street_canyon_by_hand():
    law = UmiStreetCanyon(carrier_hz=2e9, height_m=1.5)
    # breakpoint 4 x 0.5 x 0.5 x 2e9 / c = 6.67 m: beyond it the 40 log10 d branch
    breakpoint_m = 4 * 0.5 * 0.5 * 2e9 / 299_792_458.0
    for d in (20.0, 100.0, 400.0):
        los = 32.4 + 40 * math.log10(d) + 20 * math.log10(2.0) - 9.5 * math.log10(breakpoint_m**2)
        nlos = 35.3 * math.log10(d) + 22.4 + 21.3 * math.log10(2.0)
        assert law.db(d, True) == pytest.approx(los)
        assert law.db(d, False) == pytest.approx(max(los, nlos))
    assert law.los_probability(10.0) == 1.0
    assert law.los_probability(100.0) == pytest.approx(0.18 + math.exp(-100 / 36) * 0.82)


def test_d2d_links_use_their_own_law():
    settings = RadioSettings()
    assert isinstance(settings.d2d_path_loss, UmiStreetCanyon)


def test_the_link_configuration_names_its_choices(tmp_path):
    def radio(**link) -> dict:
        data = tiny_scenario(tmp_path)
        data["system"] = {**HARQ_CELL, "radio": {**HARQ_CELL["radio"], **link}}
        return data

    assert parse_scenario(radio(link={})).system.radio.link.model == "harq"
    assert parse_scenario(radio(link="per_upload")).system.radio.link.waterfall_db == 0.023
    assert parse_scenario(radio(link={"model": "ideal"})).system.radio.link.model == "ideal"
    resolved = parse_scenario(radio(link={"bler_tables": "auto"})).system.radio.link.bler_tables
    assert resolved == ("sionna" if HAS_SIONNA else "builtin")
    for bad, words in (
        ({"outage": {"snr_threshold_db": -5}}, "outage: replaced by link"),
        ({"max_bits_per_hz": 5.0}, "max_bits_per_hz: with link harq"),
        ({"link": {"model": "harqq"}}, "harqq"),
    ):
        with pytest.raises(ScenarioError) as refused:
            parse_scenario(radio(**bad))
        assert words in refused.value.problems[0]
