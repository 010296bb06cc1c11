"""Settings that multiply the event model's work far beyond what the channel needs: a
warning each, before a run or a budget starts."""

from __future__ import annotations

import math

import numpy as np
import simpy

from fedsim.config import RadioConfig, Scenario
from fedsim.streams import RandomStreams
from fedsim.world.network import build_radio, cell_grid, fading_block_s

HEAVY_RATIO = 10  # a setting this many times finer than the channel needs...
HEAVY_WORK_PER_S = 10_000  # ...and this much work per simulated second: a warning
REFERENCE_MODEL_BITS = 8 * 100_000  # a 100 kB model: what the slow-uplink warning times
MANY_BLOCKS = 100_000  # fading blocks in one such upload: each an event, a warning
POSITION_STEP_M = 1.0  # a position per metre walked tracks path loss and shadowing, which
# change over tens of metres (TR 38.901 Table 7.5-6: shadowing decorrelates over 10-50 m)


def event_load_warnings(scenario: Scenario) -> list[str]:
    """One line per radio setting that multiplies the event model's work far beyond what the
    channel needs, with the field, an estimate of the work and what to change: a PRB
    scheduler's ``period_s`` many times shorter than the fading block, or position updates
    many times finer than a walk changes the path loss, with many clients."""
    radio = scenario.system.radio
    if radio is None:
        return []
    clients = scenario.clients.count
    sites = cell_grid(radio).num_sites if radio.cells is not None else 1
    block_s = fading_block_s(radio)
    block = (
        f"the fading block (system.radio.fading.coherence_s = {block_s:g} s), over which the "
        "channel stays the same"
        if block_s == radio.fading.coherence_s and radio.fading.model != "none"
        else f"the default period without block fading ({block_s:g} s)"
    )
    warnings = []
    sharing = radio.uplink_sharing
    period_s = None if isinstance(sharing, str) else sharing.period_s
    if period_s is not None:
        ratio, periods_per_s = block_s / period_s, sites / period_s
        if ratio >= HEAVY_RATIO and periods_per_s * clients >= HEAVY_WORK_PER_S:
            warnings.append(
                f"warning: system.radio.uplink_sharing.period_s = {period_s:g} s is "
                f"{ratio:.0f}x shorter than {block}: up to {periods_per_s:,.0f} scheduling "
                f"periods per simulated second ({sites} cell{'s' * (sites > 1)} / "
                f"{period_s:g} s), each re-planning the uploads of its cell, up to "
                f"{periods_per_s * clients:,.0f} upload re-plans per simulated second with "
                f"{clients:,} clients: {ratio:.0f}x the scheduling work of period_s = "
                f"{block_s:g} s; leave period_s out (the fading block) unless scheduling within "
                "a block is what you study"
            )
    slow = _weakest_uplink_warning(scenario, radio, block_s)
    if slow is not None:
        warnings.append(slow)
    mobility = radio.mobility
    if mobility is not None:
        step_m = mobility.speed_mps * mobility.update_s
        updates_per_s = 1.0 / mobility.update_s
        work_per_s = updates_per_s * clients * sites
        if (
            step_m * HEAVY_RATIO <= POSITION_STEP_M
            and mobility.update_s < block_s
            and work_per_s >= HEAVY_WORK_PER_S
        ):
            warnings.append(
                f"warning: system.radio.mobility.update_s = {mobility.update_s:g} s moves a "
                f"client {100 * step_m:.3g} cm per position update (speed_mps = "
                f"{mobility.speed_mps:g}), while path loss and shadowing change over metres: "
                f"each update re-plans the client's upload and recomputes its path loss to "
                f"{'each of the ' * (sites > 1)}{sites} site{'s' * (sites > 1)}, up to "
                f"{work_per_s:,.0f} path losses per simulated second with "
                f"{clients:,} clients ({updates_per_s:.0f} updates per second, against "
                f"{1.0 / block_s:.0f} fading blocks); update_s = "
                f"{POSITION_STEP_M / mobility.speed_mps:.3g} s (a position per metre walked) "
                "tracks the path loss as well"
            )
    return warnings


def _weakest_uplink_warning(
    scenario: Scenario, radio_config: RadioConfig, block_s: float
) -> str | None:
    """A warning where the weakest client's uplink, alone on the band and without fading (its
    best case), needs more than ``MANY_BLOCKS`` fading blocks for a 100 kB model: the channel
    changes, and the event model works, once per block of every such upload, so the run takes
    long though nothing is wrong with it. The clients are placed as the run places them. (The
    harq link sends nothing below MCS 0, and ends such an upload as a radio link failure.)"""
    if radio_config.fading.model == "none":
        return None
    if radio_config.link.model == "harq":  # below MCS 0 no block is sent: a link failure
        return None
    clients = scenario.clients.total
    radio = build_radio(radio_config, simpy.Environment(), RandomStreams(scenario.seed), clients)
    bandwidth_hz = radio_config.uplink_bandwidth_hz
    snr_db = radio.mean_snr_db(bandwidth_hz)
    weakest = int(np.argmin(snr_db))
    rate_bps = radio.nominal_rate_bps(False, [weakest], bandwidth_hz)
    if rate_bps <= 0 or REFERENCE_MODEL_BITS / rate_bps < MANY_BLOCKS * block_s:
        return None  # no rate: an outage, which its link model ends
    upload_s = REFERENCE_MODEL_BITS / rate_bps
    x_m, y_m = radio.position_m(weakest)
    return (
        f"warning: system.radio: the weakest client's uplink (client {weakest}, "
        f"{math.hypot(x_m, y_m):,.0f} m from the centre, mean SNR "
        f"{float(snr_db[weakest]):.1f} dB on "
        f"uplink_bandwidth_hz = {bandwidth_hz:g}) carries {rate_bps:.3g} bit/s at best: a "
        f"100 kB model takes {upload_s:.3g} s, {upload_s / block_s:.3g} fading blocks of "
        f"{block_s:g} s, and the event model works once per block: the run will take long; "
        "raise tx_power_dbm, or bring cell_radius_m (or the sites) closer"
    )
