"""A power-limited transmitter fills the PRBs it can (issue 50): link adaptation sends a share
on the PRB count that delivers the most, power control computes with the PRBs used, the rate
is non-decreasing in the share, equal shares and PF hand the PRBs left unused on (round robin
does not), a transmitter waiting below MCS 0 radiates nothing, and a share no scheduler placed
is decoded over the PRBs it holds."""

from __future__ import annotations

import math

import numpy as np
import pytest
import simpy

from fedsim.sim.cells import HexGrid
from fedsim.sim.draws import Fading
from fedsim.sim.events import EventLog
from fedsim.sim.link import HarqLink, HarqLinkSettings, HarqSettings
from fedsim.sim.link.adaptation import Use
from fedsim.sim.link.eesm import effective_snr
from fedsim.sim.link.views import FlatSnr
from fedsim.sim.network import Network
from fedsim.sim.pathloss import PathLoss
from fedsim.sim.radio import D2D, DOWNLINK, UPLINK, CellSettings, PowerControl, Radio, RadioSettings
from fedsim.sim.scheduler import UplinkScheduling, open_loop_power_dbm
from fedsim.sim.selective import SelectiveFading, tdl_profile

SETTINGS = HarqSettings(bler_source="builtin")
PRB_HZ = SETTINGS.prb_hz
BAND_HZ = 10e6  # 24 PRBs at 30 kHz (TS 38.101-1)
NOISE_DBM_PER_PRB = -174.0 + 10 * math.log10(PRB_HZ)


def distance_for(snr_on_prb_db: float, tx_dbm: float = 10.0) -> float:
    """The distance at which a client at tx_dbm has this uplink SNR with its whole power on one
    PRB (the macro law, no shadowing, no fading, no noise figure)."""
    loss_db = tx_dbm - NOISE_DBM_PER_PRB - snr_on_prb_db
    return 1000.0 * 10 ** ((loss_db - 128.1) / 37.6)


def radio_at(env, snrs_db, *, tx_dbm: float = 10.0, positions=None, **settings) -> Radio:
    """Clients at the distances that give them these one-PRB uplink SNRs (or at
    ``positions``), 24 PRBs, the harq link with the built-in curves."""
    if positions is None:
        positions = [(distance_for(snr, tx_dbm), 0.0) for snr in snrs_db]
    settings = {"uplink_bandwidth_hz": BAND_HZ, "link": HarqLinkSettings(SETTINGS), **settings}
    return Radio(
        RadioSettings(**settings), lambda: env.now, np.array(positions, dtype=float),
        np.full(len(positions), tx_dbm), np.zeros(len(positions)), key=5,
    )  # fmt: skip


def network_of(env, radio, sharing) -> Network:
    if sharing in ("equal", "tdma", "fixed"):
        options = {"uplink_sharing": sharing}
    else:
        options = {"uplink_sharing": UplinkScheduling(sharing, 30, 0.1)}
    return Network(env, {}, log=EventLog(lambda: env.now), radio=radio, **options)


def ends_of(env, network, sizes: dict[int, int], until_s: float = 100.0) -> dict[int, object]:
    ends: dict[int, object] = {}

    def body(client, num_bytes):
        try:
            yield from network.upload(client, num_bytes)
            ends[client] = env.now
        except Exception as error:  # noqa: BLE001 - a lost upload is an outcome here
            ends[client] = str(error)

    for client, num_bytes in sizes.items():
        env.process(body(client, num_bytes))
    env.run(until=until_s)
    return ends


# --- the rate on a share ------------------------------------------------------------------------


def test_the_rate_on_a_share_never_falls_as_the_share_grows():
    """On a grid of shares up to 51 PRBs and one-PRB SNRs from -4 to 30 dB, at a constant
    power and with open-loop power control: the rate never falls (spreading the power over
    every PRB of the share, 8 -> 9 PRBs lost 17 % at 10 dB, 11 -> 12 lost 13 % at 15 dB)."""
    link = HarqLink(SETTINGS)
    shares = np.arange(0.05, 51.0001, 0.05)
    powers_dbm = open_loop_power_dbm(-95.0, 1.0, 120.0, np.arange(1, 52), 10.0, 30)
    power_db = powers_dbm - 10.0  # under the 10 dBm it has at most
    adaptation = link.adaptation[UPLINK]
    for snr_db in np.arange(-4.0, 30.1, 2.0):
        gain_hz = 10 ** (snr_db / 10) * PRB_HZ  # p·g/N0: over one PRB this SNR
        constant = [link.rate_bps(b * PRB_HZ, gain_hz / (b * PRB_HZ), UPLINK) for b in shares]
        view = FlatSnr(snr_db, snr_db, power_db)
        controlled = [adaptation.best_use(view, b * PRB_HZ)[1] for b in shares]
        for rates in (constant, controlled):
            assert np.all(np.diff(rates) >= 0.0), snr_db
        assert constant[-1] > 0 and constant[0] > 0  # -4 dB on one PRB: MCS 0 there


def test_a_share_is_filled_on_the_count_that_delivers_the_most():
    """At 5 dB with the whole power on one PRB, 24 PRBs carry nothing (below MCS 0 at
    -8.8 dB per PRB) and 13 carry the most (the most PRBs whose SNR still clears MCS 0: at low
    SNR a rate grows nearly as the power, whatever the band); a strong link fills every PRB;
    half a PRB is one PRB in half the slots."""
    adaptation = HarqLink(SETTINGS).adaptation[UPLINK]
    weak = FlatSnr(5.0, 5.0)
    use, rate_bps = adaptation.best_use(weak, 24 * PRB_HZ)
    by_count = [adaptation.best_use(FlatSnr(5.0, 5.0), m * PRB_HZ)[1] for m in range(1, 25)]
    assert use == Use(13, 13, 0.0) and rate_bps == max(by_count) > 0
    spread_db = 5.0 - 10 * math.log10(24)  # the SNR per PRB with the power over all 24
    assert adaptation.best_use(FlatSnr(spread_db, spread_db), PRB_HZ)[1] == 0.0
    assert adaptation.best_use(FlatSnr(45.0, 45.0), 24 * PRB_HZ)[0] == Use(24, 24, 0.0)
    assert adaptation.best_use(weak, 0.5 * PRB_HZ)[0] == Use(0, 1, 0.5)


# --- in the event loop ----------------------------------------------------------------------------


@pytest.mark.parametrize("sharing", ["equal", "tdma", "round_robin", "proportional_fair"])
def test_a_phone_at_5_db_on_one_prb_sends_alone_on_24_prbs(sharing):
    """Before, its power spread over the 24 PRBs left it below MCS 0 and its radio link failed
    after link_failure_s: 0 blocks sent. Now it sends 100 kB at the rate of the PRB count it
    fills (1.36 s on 2 PRBs in the issue's measurement)."""
    env = simpy.Environment()
    radio = radio_at(env, [5.0])
    ends = ends_of(env, network_of(env, radio, sharing), {0: 100_000})
    assert isinstance(ends[0], float) and radio.stats[0].blocks.sent > 0, ends
    rate_bps = radio.link.adaptation[UPLINK].best_use(FlatSnr(5.0, 5.0), 24 * PRB_HZ)[1]
    assert ends[0] == pytest.approx(8 * 100_000 / rate_bps, rel=0.1)


def test_d2d_fills_the_prbs_its_power_reaches_and_the_downlink_its_band():
    """A D2D sender 5 dB over one PRB fills few PRBs at a higher power spectral density,
    where the whole band was below MCS 0 (a device's power, as the sidelink's power control
    has it). A base station keeps its power per PRB (a gNB's fixed EPRE): fewer PRBs do not
    raise it, so it fills the band, or waits where MCS 0 is out of reach (35 dB over one PRB
    with its power over 24: 21.2 dB on each; 5 dB: -8.8 dB on each)."""
    env = simpy.Environment()
    far = distance_for(5.0)
    radio = radio_at(
        env, [], positions=[(far, 0.0), (2 * far, 0.0)], base_station_power_dbm=10.0,
        downlink_bandwidth_hz=BAND_HZ, d2d_bandwidth_hz=BAND_HZ, d2d_path_loss=PathLoss("macro"),
    )  # fmt: skip
    d2d = radio.d2d(0, 1)
    assert d2d.direction == D2D and d2d.speed_bps(24 * PRB_HZ, 1e9) > 0
    assert d2d.sending and 1 <= d2d._period.use.high < 24
    down = radio.downlink([0])
    assert down.direction == DOWNLINK and down.speed_bps(24 * PRB_HZ, 1e9) == 0.0
    near = radio_at(env, [35.0], base_station_power_dbm=10.0, downlink_bandwidth_hz=BAND_HZ)
    down = near.downlink([0])
    assert down.speed_bps(24 * PRB_HZ, 1e9) > 0 and down._period.use == Use(24, 24, 0.0)
    rate_bps = near.rate_bps(24 * PRB_HZ, 10 ** ((35 - 10 * math.log10(24)) / 10), DOWNLINK)
    assert rate_bps == pytest.approx(down.achievable_bps(24 * PRB_HZ))


def test_power_control_computes_with_the_prbs_used():
    """TS 38.213 §7.1.1 with M_RB the PRBs the block is sent on: on a 24-PRB share filled on
    m PRBs, P(m); on half a PRB, the one PRB it sends on in half the slots, P(1) (before:
    P(24) and P(0.5), 3 dB under P(1)), radiating half of it on average."""
    env = simpy.Environment()
    control = PowerControl(p0_dbm=-120.0, alpha=1.0, subcarrier_spacing_khz=30)
    radio = radio_at(env, [5.0], power_control=control)
    loss_db = radio.large_scale_loss_db(0)

    def formula_w(prbs: float) -> float:
        return 10 ** (open_loop_power_dbm(-120.0, 1.0, loss_db, prbs, 10.0, 30) / 10) / 1000

    link = radio.uplink(0)
    assert link.speed_bps(24 * PRB_HZ, 1e9) > 0
    used = link._period.use
    assert used.low == used.high < 24
    assert link.tx_power_w == pytest.approx(formula_w(used.high), rel=1e-12)
    half = radio.uplink(0)
    assert half.speed_bps(0.5 * PRB_HZ, 1e9) > 0
    assert half.tx_power_w == pytest.approx(formula_w(1), rel=1e-12)
    assert half.radiated_w == pytest.approx(0.5 * formula_w(1), rel=1e-12)
    assert 10 * math.log10(formula_w(1) / formula_w(0.5)) == pytest.approx(3.01, abs=0.01)


def test_equal_shares_and_pf_hand_the_unused_prbs_on_and_round_robin_does_not():
    """A weak upload (0 dB on one PRB: it fills 4) beside a strong one on 24 PRBs: equal
    shares give the strong one the 20 others, so it ends as it would alone on 20 PRBs; PF's
    metric does the same; round robin's 12 each leave the weak one's unused PRBs idle, and the
    strong one ends later."""
    sizes = {0: 4_000_000, 1: 1_000_000}  # the weak one still sends when the strong one ends

    def strong_end(sharing: str) -> float:
        env = simpy.Environment()
        radio = radio_at(env, [40.0, 0.0])
        return ends_of(env, network_of(env, radio, sharing), sizes)[0]

    env = simpy.Environment()
    alone = radio_at(env, [40.0], uplink_bandwidth_hz=20 * PRB_HZ)
    alone_s = ends_of(env, network_of(env, alone, "equal"), {0: sizes[0]})[0]
    equal_s, pf_s, rr_s = (strong_end(s) for s in ("equal", "proportional_fair", "round_robin"))
    assert equal_s == pytest.approx(alone_s, rel=0.02)
    assert pf_s <= alone_s * 1.02
    assert rr_s > 1.3 * equal_s  # on 12 PRBs
    weak = HarqLink(SETTINGS).adaptation[UPLINK].best_use(FlatSnr(0.0, 0.0), 24 * PRB_HZ)[0]
    assert weak == Use(4, 4, 0.0)


def test_a_transmitter_waiting_below_mcs_0_radiates_nothing():
    """A client below MCS 0 even on one PRB waits until its radio link fails: radio.csv's
    radiated joules stay 0 (before: its power times the wait) and the other cells see no
    interference from it."""
    env = simpy.Environment()
    cells = CellSettings(HexGrid(1, 500.0, wrap_around=True))
    at_200_m = -15.0 + 128.1 + 37.6 * math.log10(0.2) + NOISE_DBM_PER_PRB  # -15 dB on one PRB
    radio = radio_at(env, [], tx_dbm=at_200_m, positions=[(200.0, 0.0)], cells=cells)
    network = network_of(env, radio, "equal")
    seen = []
    env.process(_watch(env, radio, seen))
    ends = ends_of(env, network, {0: 100_000})
    assert ends[0] == "radio link failure"
    assert radio.stats[0].uplink_joules == 0.0
    assert seen and not any(seen)  # never on the air for the other sites


def _watch(env, radio, seen):
    for _ in range(10):
        yield env.timeout(0.1)
        seen.append(radio.transmitting)


# --- frequency-selective: the PRBs a block holds ------------------------------------------------


@pytest.mark.parametrize("placement", ["contiguous", "hopping"])
def test_a_share_no_scheduler_placed_is_decoded_over_the_prbs_it_holds(placement):
    """Twelve fixed sub-bands of 2 PRBs over TDL-C: a 2-PRB block's EESM is over its own two
    PRBs in a row (one RBG, or two halves), at a start drawn per transmission, and with
    hopping at a second place 12 PRBs on in alternate slots; before, every block averaged
    all 12 RBGs, whatever PRBs it held."""
    env = simpy.Environment()
    radio = radio_at(
        env, [25.0] * 40, fading=Fading("rayleigh", coherence_s=0.05),
        selective=SelectiveFading(tdl_profile("TDL-C", 300e-9), 0.05), placement=placement,
    )  # fmt: skip
    harq = radio.link.adaptation[UPLINK]
    starts = set()
    for client in range(40):
        link = radio.uplink(client)
        assert link.speed_bps(2 * PRB_HZ, 1e9) > 0
        view = link._period.channel
        assert view.hops == (2 if placement == "hopping" else 1)
        firsts = []
        for hop in range(view.hops):
            weights = view.placement.weights(2, hop)
            held = np.flatnonzero(weights)
            assert weights.sum() == 2.0 and len(held) <= 2 and np.ptp(held) <= 1  # in a row
            snr = view.snr[0] / 2  # the power of the slot on its 2 PRBs
            by_hand = effective_snr(snr, weights, harq.betas_of(2))
            np.testing.assert_allclose(
                view.effective_db(harq, 2, hop, estimate=False), 10 * np.log10(by_hand),
                rtol=1e-12,
            )  # fmt: skip
            first = 2 * held[0] + (2 - weights[held[0]])  # its first PRB
            firsts.append(first)
            starts.add(first)
        if placement == "hopping":
            assert abs((firsts[1] - firsts[0]) % 24 - 12) <= 1  # half the band on (in the band)
    assert len(starts) > 10  # drawn over the band
