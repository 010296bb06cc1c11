"""The radio (``system.radio``, optional): link rates from a physical-layer channel, with its
path-loss laws, fading, link layer and mobility."""

from __future__ import annotations

import warnings
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    StrictBool,
    ValidationInfo,
    field_validator,
    model_validator,
)

from fedsim.config.base import (
    MAX_COUNT,
    MAX_TIME_S,
    NO_BOOL,
    BandwidthHz,
    PowerDbm,
    RateMbps,
    _Strict,
    read_now_by,
    tagged_union,
)
from fedsim.config.laws import ConstantDbm, PowerLaw
from fedsim.sim.readers import read_positions, sionna_tables_folder, sionna_version
from fedsim.sim.scheduler import prb_hz


class MacroPathLoss(_Strict):
    """128.1 + 37.6 log10(d_km) dB: 3GPP TR 36.814 urban macro cell at 2 GHz, specified from
    35 m (TR 36.814 Table A.2.1.1-2): nearer, the loss at 35 m."""

    kind: Literal["macro"] = "macro"


class LogDistancePathLoss(_Strict):
    """PL(d0) + 10 alpha log10(d / d0) dB (Rappaport)."""

    kind: Literal["log_distance"] = "log_distance"
    reference_loss_db: Annotated[float, Field(ge=0, le=200), NO_BOOL] = Field(
        default=40.0, description="PL(d0), the loss at the reference distance"
    )
    reference_distance_m: Annotated[float, Field(gt=0, le=1e4), NO_BOOL] = Field(
        default=1.0, description="d0"
    )
    exponent: Annotated[float, Field(ge=1, le=8), NO_BOOL] = Field(
        default=3.0, description="alpha, the path-loss exponent"
    )


class FreeSpacePathLoss(_Strict):
    """Friis: 20 log10(4 pi d f / c) dB."""

    kind: Literal["free_space"] = "free_space"
    carrier_ghz: Annotated[float, Field(ge=0.01, le=300), NO_BOOL] = Field(
        default=2.0, description="f, the carrier frequency"
    )


def _name_is_kind(value: Any) -> Any:
    """``path_loss: macro`` is ``{kind: macro}`` (its defaults)."""
    return {"kind": value} if isinstance(value, str) else value


class _Tr38901PathLoss(_Strict):
    """3GPP TR 38.901 Table 7.4.1-1 (UMa, UMi street canyon, RMa, InH office) between a client
    and its base station, each client's line of sight drawn (seeded, once per client) from
    Table 7.4.2-1's LOS probability at its distance; the shadowing σ is the table's for that
    state (``system.radio.shadowing_db`` does not apply). Heights: null is the scenario's
    default (TR 38.901 Table 7.2-1: BS 25 m UMa, 10 m UMi, 35 m RMa, 3 m InH; UT 1.5 m, 1 m
    InH)."""

    kind: str
    carrier_ghz: Annotated[float, Field(ge=0.5, le=100), NO_BOOL] = Field(
        default=3.5, description="f_c (RMa is specified up to 30 GHz)"
    )
    bs_height_m: Annotated[float, Field(gt=1, le=150), NO_BOOL] | None = Field(
        default=None, description="base station height (null: the scenario's default)"
    )
    ut_height_m: Annotated[float, Field(ge=1, le=22.5), NO_BOOL] | None = Field(
        default=None, description="client (UT) height (null: the scenario's default)"
    )
    building_height_m: Annotated[float, Field(ge=5, le=50), NO_BOOL] = Field(
        default=5.0, description="rma: h, the average building height"
    )
    street_width_m: Annotated[float, Field(ge=5, le=50), NO_BOOL] = Field(
        default=20.0, description="rma: W, the average street width"
    )
    inh_office: Literal["mixed", "open"] = Field(
        default="mixed", description="inh: the LOS probability of a mixed or an open office"
    )
    los: Literal["probability", "always", "never"] = Field(
        default="probability",
        description="line of sight drawn from the LOS probability, or fixed",
    )
    shadowing: bool = Field(default=True, description="the table's log-normal shadowing")

    @model_validator(mode="after")
    def _rma_up_to_30_ghz(self) -> _Tr38901PathLoss:
        if self.kind == "rma" and self.carrier_ghz > 30:
            raise ValueError("carrier_ghz: RMa is specified from 0.5 to 30 GHz")
        return self


class UmaPathLoss(_Tr38901PathLoss):
    """TR 38.901 urban macro (BS 25 m, ISD 500 m)."""

    kind: Literal["uma"] = "uma"


class UmiPathLoss(_Tr38901PathLoss):
    """TR 38.901 urban micro, street canyon (BS 10 m, ISD 200 m)."""

    kind: Literal["umi"] = "umi"


class RmaPathLoss(_Tr38901PathLoss):
    """TR 38.901 rural macro (BS 35 m, ISD 1732 m)."""

    kind: Literal["rma"] = "rma"


class InhPathLoss(_Tr38901PathLoss):
    """TR 38.901 indoor hotspot, office (BS 3 m on the ceiling, UT 1 m)."""

    kind: Literal["inh"] = "inh"


TR38901_PATH_LOSSES = (UmaPathLoss, UmiPathLoss, RmaPathLoss, InhPathLoss)
TR38901_KINDS = tuple(law.model_fields["kind"].default for law in TR38901_PATH_LOSSES)
PATH_LOSSES = (MacroPathLoss, LogDistancePathLoss, FreeSpacePathLoss, *TR38901_PATH_LOSSES)
PathLossConfig = Annotated[tagged_union(PATH_LOSSES, "kind"), BeforeValidator(_name_is_kind)]


class UmiStreetCanyonPathLoss(_Strict):
    """3GPP TR 38.901 UMi-Street Canyon between two antennas at one height (1.5 m: two
    handsets, as TR 37.885 takes it for vehicle-to-vehicle links), line of sight drawn per
    pair from the LOS probability (or fixed); for device-to-device links."""

    kind: Literal["umi_street_canyon"] = "umi_street_canyon"
    carrier_ghz: Annotated[float, Field(ge=0.5, le=100), NO_BOOL] = Field(
        default=2.0, description="f_c"
    )
    height_m: Annotated[float, Field(ge=1.01, le=100), NO_BOOL] = Field(
        default=1.5, description="both antennas' height"
    )
    los: Literal["probability", "always", "never"] = Field(
        default="probability", description="line of sight drawn per pair, or fixed"
    )


D2D_PATH_LOSSES = (UmiStreetCanyonPathLoss, MacroPathLoss, LogDistancePathLoss, FreeSpacePathLoss)
D2DPathLossConfig = Annotated[tagged_union(D2D_PATH_LOSSES, "kind"), BeforeValidator(_name_is_kind)]


class FadingConfig(_Strict):
    """Small-scale block fading, constant over blocks of coherence_s (null: re-drawn at every
    transmission); blocks independent, or correlated in time by a Doppler frequency."""

    model: Literal["none", "rayleigh", "rician"] = Field(
        default="none", description="|h|²: none (1), Rayleigh (Exp(1)) or Rician (k_factor_db)"
    )
    k_factor_db: Annotated[float, Field(ge=-30, le=40), NO_BOOL] = Field(
        default=3.0, description="rician: line-of-sight over scattered power, dB"
    )
    coherence_s: Annotated[float, Field(ge=1e-3, le=MAX_TIME_S), NO_BOOL] | None = Field(
        default=0.1,
        description="block length (0.1 s: a pedestrian at 2 GHz); null: per transmission",
    )
    doppler_hz: Annotated[float, Field(gt=0, le=10_000), NO_BOOL] | None = Field(
        default=None,
        description="null: independent blocks; else h(t) is Clarke/Jakes's sum of sinusoids "
        "(Zheng and Xiao 2003), correlated as J0(2π f_D τ), sampled at each block's start "
        "(f_D = v·f_c/c: 5.6 Hz for 3 km/h at 2 GHz; blocks well under 1/f_D follow it)",
    )

    profile: Literal["flat", "TDL-A", "TDL-B", "TDL-C"] = Field(
        default="flat",
        description="flat: one gain over the whole band; a TR 38.901 tapped-delay-line profile "
        "(Tables 7.7.2-1..3, NLOS): a gain per subband (PRB group) from the taps, correlated "
        "across frequency by the delay spread and in time by doppler_hz",
    )
    delay_spread_ns: Annotated[float, Field(ge=1, le=5_000), NO_BOOL] = Field(
        default=100.0,
        description="the TDL profile's rms delay spread (TR 38.901 Table 7.7.3-1: 10 very "
        "short, 30 short, 100 nominal, 300 long, 1000 very long)",
    )
    subband_prbs: Annotated[int, Field(ge=1, le=275), NO_BOOL] | None = Field(
        default=None,
        description="PRBs per subband, the resolution of the gains and of the schedulers "
        "(null: TS 38.214's nominal RBG size for the band, Table 6.1.2.2.1-1 configuration 1)",
    )

    @model_validator(mode="after")
    def _profile_needs_rayleigh_blocks(self) -> FadingConfig:
        if self.profile == "flat":
            for name in ("delay_spread_ns", "subband_prbs"):
                if getattr(self, name) != FadingConfig.model_fields[name].default:
                    raise ValueError(f"{name}: only a TDL profile has it (profile is flat)")
            return self
        if self.model != "rayleigh" or self.coherence_s is None:
            raise ValueError(
                f"profile: {self.profile}'s taps are Rayleigh and hold over blocks: it needs "
                "model rayleigh and a coherence_s"
            )
        return self

    @model_validator(mode="after")
    def _doppler_needs_blocks(self) -> FadingConfig:
        if self.doppler_hz is not None and (self.model == "none" or self.coherence_s is None):
            raise ValueError(
                "doppler_hz: correlates fading blocks in time: it needs model rayleigh or "
                "rician and a coherence_s (the blocks it samples h(t) at)"
            )
        return self


class IdealLink(_Strict):
    """Shannon's rate on the band share (with snr_gap_db and max_bits_per_hz), nothing lost."""

    model: Literal["ideal"] = "ideal"


class OllaConfig(_Strict):
    """Outer-loop link adaptation (Sampath et al. 1997; Sionna SYS's OuterLoopLinkAdaptation):
    the SNR offset rises by step_db per failed transport block and falls by
    step_db·target/(1 − target) per delivered one, so the BLER converges to the target."""

    step_db: Annotated[float, Field(gt=0, le=10), NO_BOOL] = Field(
        default=1.0, description="Δ_up per failed block (Sionna's default)"
    )


SIONNA_MISSING = (
    "Sionna's 5G NR BLER tables are not installed here (sionna-no-rt, a dependency of fedsim "
    "on Python 3.11 and later: install fedsim again to get it)"
)


class BlerTablesWarning(UserWarning):
    """``bler_tables: auto`` without Sionna's tables: the built-in curves instead."""


@cache  # once per process
def _warn_builtin_fallback() -> None:
    warnings.warn(
        f"system.radio.link.bler_tables: auto, but {SIONNA_MISSING}: the harq link uses the "
        "built-in curves instead, within 1 dB of Sionna's, so MCS, BLER and times differ from "
        "Sionna's by several percent (bler_tables: builtin chooses them without this warning)",
        BlerTablesWarning,
        stacklevel=2,
    )


class HarqLink(_Strict):
    """NR transport blocks: per fading block, the highest MCS whose BLER at the channel
    estimate meets target_bler; failed blocks sent again (HARQ) while the transfer goes on;
    nothing sent below the lowest MCS. See the README's "Link layer"."""

    model: Literal["harq"] = "harq"
    target_bler: Annotated[float, Field(ge=1e-4, le=0.5), NO_BOOL] = Field(
        default=0.1, description="the block error rate link adaptation aims at"
    )
    mcs_table: Literal["64qam", "256qam"] = Field(
        default="64qam", description="TS 38.214 Table 5.1.3.1-1 (64qam) or -2 (256qam)"
    )
    subcarrier_spacing_khz: Annotated[Literal[15, 30, 60, 120], NO_BOOL] = Field(
        default=30, description="numerology: PRBs of 12 subcarriers, slots of 15/SCS ms"
    )
    bler_tables: Literal["auto", "sionna", "builtin"] = Field(
        default="auto",
        validate_default=True,
        description="BLER curves: Sionna's 5G NR tables (sionna-no-rt, a dependency), or the "
        "built-in finite-length bound; auto: Sionna's, or where they are not found the built-in "
        "ones with a warning (resolved at validation)",
    )
    bler_tables_version: str | None = Field(
        default=None,
        validate_default=True,
        description="recorded, not chosen: the version of sionna-no-rt whose tables the link "
        "reads (null: the built-in curves), filled in at validation from what is installed, so "
        "a value read back (a run's scenario.yaml) becomes this machine's",
    )
    max_transmissions: Annotated[int, Field(ge=1, le=32), NO_BOOL] = Field(
        default=4, description="HARQ transmissions of a block before RLC starts it over"
    )
    combining: Literal["chase", "none"] = Field(
        default="chase",
        description="chase: the k-th transmission of a block decodes at k times the SNR (NR's "
        "HARQ soft-combines); none: every transmission on its own",
    )
    csi_age_blocks: Annotated[int, Field(ge=0, le=100), NO_BOOL] = Field(
        default=0, description="the MCS follows the SNR of this many fading blocks before"
    )
    olla: OllaConfig | None = Field(
        default=OllaConfig(),
        description="outer-loop link adaptation, as 3GPP practice has it (null: the MCS "
        "meets the target at the estimate alone, and the BLER achieved falls well below it)",
    )
    link_failure_s: Annotated[float, Field(ge=0.01, le=MAX_TIME_S), NO_BOOL] = Field(
        default=1.0,
        description="out of reach this long in a row: the radio link has failed and the "
        "transfer to that receiver fails (NR's timer T310: 1 s is a common setting of the "
        "0-6 s TS 38.331 allows)",
    )

    @field_validator("bler_tables")
    @classmethod
    def _tables_here(cls, value: str) -> str:
        installed = sionna_tables_folder() is not None
        if value == "auto":
            if not installed:
                _warn_builtin_fallback()
            return "sionna" if installed else "builtin"
        if value == "sionna" and not installed:
            raise ValueError(f"sionna, but {SIONNA_MISSING}")
        return value

    @field_validator("bler_tables_version", mode="before")
    @classmethod
    def _tables_version(cls, value: Any, info: ValidationInfo) -> str | None:
        return sionna_version() if info.data.get("bler_tables") == "sionna" else None


class PerUploadLink(_Strict):
    """Chen et al. (TWC 2021): each upload is lost whole with q = 1 − exp(−m/SNR) (its SNR
    when it starts), not retried: the round goes on without it. Downlink and D2D are ideal.
    With ``sinr_threshold_db``, Yang et al. (TCOM 2020)'s rule instead: lost iff its SINR
    (interference of other cells included) is below the threshold when it starts.
    The paper lists m = 0.023 "dB": read as dB (m = 1.0053, a waterfall near 0 dB SNR);
    0.023 taken as linear would put the waterfall at −16 dB, below what any code decodes."""

    model: Literal["per_upload"] = "per_upload"
    waterfall_db: Annotated[float, Field(ge=-30, le=30), NO_BOOL] = Field(
        default=0.023, description="m in dB (the paper's 0.023 dB)"
    )
    sinr_threshold_db: Annotated[float, Field(ge=-30, le=60), NO_BOOL] | None = Field(
        default=None,
        description="instead of the waterfall: the upload is decoded iff its SINR when it "
        "starts is at least this (Yang et al., TCOM 2020)",
    )


class WholeTransferLink(_Strict):
    """fedsim's first rule, kept as a pessimistic stress test: a transfer is one codeword,
    lost whole (and sent again, up to max_retransmissions) when any fading block it spans is
    below snr_threshold_db, or with Chen et al.'s q = 1 − exp(−m/SNR) per block."""

    model: Literal["whole_transfer"] = "whole_transfer"
    loss: Literal["threshold", "packet_error"] = Field(
        default="threshold",
        description="threshold: a block below snr_threshold_db loses the transfer; "
        "packet_error: Chen et al.'s q per block",
    )
    snr_threshold_db: Annotated[float, Field(ge=-30, le=60), NO_BOOL] = Field(
        default=0.0, description="threshold: the lowest scheme's SNR; it also floors the rate"
    )
    waterfall_m: Annotated[float, Field(gt=0, le=100), NO_BOOL] = Field(
        default=0.023, description="packet_error: m, linear (as fedsim read it before)"
    )
    max_retransmissions: Annotated[int, Field(ge=0, le=100), NO_BOOL] = Field(
        default=3, description="whole retransmissions before the transfer is given up"
    )


def _link_shorthand(value: Any) -> Any:
    """``link: harq`` is ``{model: harq}``; ``link: {}`` (a loss model asked for) is harq."""
    if isinstance(value, str):
        return {"model": value}
    if isinstance(value, dict) and "model" not in value:
        return {"model": "harq", **value}
    return value


LINKS = (IdealLink, HarqLink, PerUploadLink, WholeTransferLink)
LinkConfig = Annotated[tagged_union(LINKS, "model"), BeforeValidator(_link_shorthand)]
SHANNON_ONLY = ("snr_gap_db", "max_bits_per_hz")  # rates of the ideal link's formula


class MobilityConfig(_Strict):
    """Random waypoint in the cell (no pauses)."""

    speed_mps: Annotated[float, Field(gt=0, le=100), NO_BOOL] = Field(description="walking speed")
    update_s: Annotated[float, Field(ge=0.01, le=MAX_TIME_S), NO_BOOL] = Field(
        default=1.0, description="positions updated this often"
    )


Numerology = Annotated[Literal[15, 30, 60, 120], NO_BOOL]


class PrbScheduling(_Strict):
    """The uplink band as N PRBs (TS 38.101-1 Table 5.3.2-1), given each scheduling period
    (and whenever an upload starts or ends) to the uploads under way by a scheduler: round
    robin (equal PRBs, the left-over ones in turn: ns-3's RrFfMacScheduler), proportional
    fair (rate now over its β-discounted average: Sionna SYS PFSchedulerSUMIMO) or max rate.
    The fading is flat over the band; PF and max rate give each PRB to the upload whose
    (weighted) rate it raises most, seeing that a client's power spreads over its PRBs."""

    scheduler: Literal["round_robin", "proportional_fair", "max_rate"] = Field(
        description="who gets the PRBs each period"
    )
    subcarrier_spacing_khz: Numerology | None = Field(
        default=None, description="PRBs of 12 subcarriers (null: link harq's, else 30 kHz)"
    )
    period_s: Annotated[float, Field(ge=1e-3, le=MAX_TIME_S), NO_BOOL] | None = Field(
        default=None, description="null: the fading block (0.1 s without block fading)"
    )
    pf_beta: Annotated[float, Field(gt=0, lt=1), NO_BOOL] = Field(
        default=0.98, description="proportional_fair: the average's discount per period (Sionna)"
    )
    power_aware: StrictBool = Field(
        default=True,
        description="PF, max rate: a PRB's worth is the rate it adds at the power the client "
        "would send on its PRBs (false: the full band's rate / N per PRB, Sionna's per-PRB view: "
        "a period's band goes to one upload)",
    )


def _sharing_shorthand(value: Any) -> Any:
    """``uplink_sharing: proportional_fair`` is ``{scheduler: proportional_fair}``."""
    if isinstance(value, str) and value in ("round_robin", "proportional_fair", "max_rate"):
        return {"scheduler": value}
    return value


UplinkSharing = Annotated[
    Literal["equal", "fixed", "tdma"] | PrbScheduling, BeforeValidator(_sharing_shorthand)
]


class OpenLoopPowerControl(_Strict):
    """TS 38.213 §7.1.1 open-loop PUSCH power: P = min(P_CMAX, P0 + 10 log10(2^μ M_PRB) + α PL)
    (Δ_TF and the closed loop at 0), with P_CMAX the client's ``tx_power_dbm`` and M_PRB the
    PRBs of its share of the band, re-set whenever the share changes; energy follows P.
    Defaults: Sionna SYS's open_loop_uplink_power_control (full compensation)."""

    p0_dbm: Annotated[float, Field(ge=-202, le=24), NO_BOOL] = Field(
        default=-90.0, description="P_O_PUSCH: the target received power per 180 kHz"
    )
    alpha: Annotated[float, Field(ge=0, le=1), NO_BOOL] = Field(
        default=1.0, description="path-loss compensation (TS 38.213: 0, 0.4, ..., 1)"
    )
    subcarrier_spacing_khz: Numerology | None = Field(
        default=None, description="μ (null: the PRB scheduler's or link harq's, else 30 kHz)"
    )


class CellsConfig(_Strict):
    """Several cells: a hexagonal grid of sites (one omnidirectional base station each), the
    clients placed over it and attached to the site with the least path loss and shadowing
    (handing over when another is stronger by the hysteresis); every cell reuses the whole
    band, and an upload's SINR counts the uploads under way in the other cells (their mean
    power spectral density at its site, fading averaged). One FL server behind all sites."""

    rings: Annotated[int, Field(ge=0, le=2), NO_BOOL] = Field(
        default=1, description="0: one site, 1: 7 sites, 2: 19 sites"
    )
    inter_site_distance_m: Annotated[float, Field(ge=10, le=1e5), NO_BOOL] = Field(
        default=500.0, description="ISD (TR 38.901 Table 7.2-1: UMa 500 m, UMi 200 m)"
    )
    wrap_around: bool = Field(
        default=True, description="edge cells see the interference of a centre cell"
    )
    interference: bool = Field(
        default=True, description="an upload's SINR counts the uploads of the other cells"
    )
    handover_hysteresis_db: Annotated[float, Field(ge=0, le=30), NO_BOOL] = Field(
        default=3.0, description="hand over when another site is stronger by this"
    )
    backhaul_mbps: RateMbps = Field(
        default=1000.0, description="each site's link to the server (the cloud), each way"
    )
    backhaul_latency_s: Annotated[float, Field(ge=0, le=10), NO_BOOL] = Field(
        default=0.005, description="added to every backhaul transfer"
    )
    backhaul_sharing: Literal["shared", "dedicated"] = Field(
        default="shared",
        description="shared: a site's transfers in flight one way share its link fairly (as "
        "TCP flows do); dedicated: each gets the whole rate (a link far faster than the radio)",
    )


class AirCompConfig(_Strict):
    """Over-the-air aggregation (``uplink_aggregation: aircomp | obda``): every transmitter's
    signal arrives at the receive SNR asked for; a client whose channel cannot reach it at its
    full power (gain below g_th = ρ₀ / P) does not transmit (BAA's truncated channel inversion;
    README "Over-the-air aggregation")."""

    receive_snr_db: Annotated[float, Field(ge=-30, le=60), NO_BOOL] = Field(
        default=10.0,
        description="ρ₀/(F·N0·B): each transmitter's received SNR on the whole band, also the "
        "truncation threshold on its full-power SNR (higher: less noise, fewer transmitters)",
    )
    server_lr: Annotated[float, Field(gt=0, le=1), NO_BOOL] = Field(
        default=1e-3, description="obda: η, the server's step along the vote per number (tune it)"
    )


REPLACED_RADIO_KEYS = {
    "outage": "link: `link: {model: harq}` (transport blocks, link adaptation and HARQ: what a "
    "lossy radio does), or `link: {model: whole_transfer, ...}` for the old rule (a whole "
    "transfer lost with any block)",
    "noise_figure_db": "one per receiver: bs_noise_figure_db (the base station's: uplink, over "
    "the air; default 5) and ue_noise_figure_db (the device's: downlink, D2D; default 9), "
    "3GPP's evaluation values",
}


class RadioConfig(_Strict):
    """Link rates from distance, path loss, shadowing, fading and the band (see the README's
    "Radio model"). Defaults: the single-cell setting of Chen et al. and Yang et al. (TWC 2021)."""

    cell_radius_m: Annotated[float, Field(gt=0, le=1e5), NO_BOOL] = Field(
        default=500.0, description="clients placed uniformly in the cell up to this distance"
    )
    min_distance_m: Annotated[float, Field(gt=0, le=1e5), NO_BOOL] = Field(
        default=10.0, description="... and from this distance (35: 3GPP's minimum)"
    )
    positions: Annotated[Path | None, read_now_by(read_positions)] = Field(
        default=None, description="CSV client,x_m,y_m (relative to the working folder)"
    )
    path_loss: PathLossConfig = Field(
        default=MacroPathLoss(), description="the client-to-base-station law (a name or its keys)"
    )
    shadowing_db: Annotated[float, Field(ge=0, le=30), NO_BOOL] = Field(
        default=8.0, description="sigma"
    )
    shadowing_coherence_s: Annotated[float, Field(ge=1e-3, le=MAX_TIME_S), NO_BOOL] | None = Field(
        default=None, description="shadowing re-drawn this often (null: once for the run)"
    )
    fading: FadingConfig = Field(default=FadingConfig(), description="small-scale fading")
    noise_density_dbm_per_hz: Annotated[float, Field(ge=-220, le=-100), NO_BOOL] = Field(
        default=-174.0, description="N0, thermal noise"
    )
    bs_noise_figure_db: Annotated[float, Field(ge=0, le=30), NO_BOOL] = Field(
        default=5.0,
        description="the base station's receiver: uplink and over-the-air slot (3GPP TR 36.814 "
        "Table A.2.1.1-3 and TR 38.802 Table A.2.1-1 below 6 GHz: 5 dB)",
    )
    ue_noise_figure_db: Annotated[float, Field(ge=0, le=30), NO_BOOL] = Field(
        default=9.0,
        description="the device's receiver: downlink and D2D (3GPP TR 36.814 Table A.2.1.1-3 "
        "and TR 38.802 Table A.2.1-1 below 6 GHz: 9 dB)",
    )
    tx_power_dbm: PowerLaw = Field(
        default=ConstantDbm(value_dbm=10.0),
        description="a number, {kind: uniform, low_dbm, high_dbm} or {kind: normal, mean_dbm, "
        "std_db}",
    )
    base_station_power_dbm: PowerDbm = Field(default=30.0, description="downlink transmit power")
    uplink_bandwidth_hz: BandwidthHz = Field(default=20e6, description="the uplink band")
    downlink_bandwidth_hz: BandwidthHz = Field(default=20e6, description="the downlink band")
    d2d_bandwidth_hz: BandwidthHz = Field(default=10e6, description="each D2D message's band")
    uplink_sharing: UplinkSharing = Field(
        default="equal",
        description="equal, fixed (sub-bands), tdma, or a PRB scheduler: round_robin, "
        "proportional_fair, max_rate (or {scheduler: ..., subcarrier_spacing_khz, period_s})",
    )
    uplink_subbands: Annotated[int, Field(ge=1, le=MAX_COUNT), NO_BOOL] = Field(
        default=10, description="fixed: the band is cut into this many sub-bands, one per upload"
    )
    snr_gap_db: Annotated[float, Field(ge=0, le=20), NO_BOOL] = Field(
        default=0.0, description="Γ: the ideal link's rate is b·log2(1 + SNR/Γ)"
    )
    max_bits_per_hz: Annotated[float, Field(gt=0, le=30), NO_BOOL] | None = Field(
        default=None, description="cap on spectral efficiency (the highest scheme)"
    )
    link: LinkConfig = Field(
        default=IdealLink(),
        description="ideal (default), harq ({} or harq: the default of a lossy link), "
        "per_upload or whole_transfer",
    )
    d2d_path_loss: D2DPathLossConfig = Field(
        default=UmiStreetCanyonPathLoss(), description="phone-to-phone links' own law"
    )
    mobility: MobilityConfig | None = Field(
        default=None, description="random-waypoint walks (null: clients stay put)"
    )
    power_control: OpenLoopPowerControl | None = Field(
        default=None, description="open-loop uplink power control (null: always tx_power_dbm)"
    )
    cells: CellsConfig | None = Field(
        default=None, description="several cells (null: one base station at the centre)"
    )
    uplink_aggregation: Literal["digital", "aircomp", "obda"] = Field(
        default="digital",
        description="digital: each update its own upload (OFDMA); aircomp: the synchronous "
        "averaging servers receive the sum of the updates over the air (BAA); obda: of their "
        "signs, one bit each, as a majority vote",
    )
    aircomp: AirCompConfig = Field(
        default=AirCompConfig(), description="the over-the-air slot's settings (aircomp, obda)"
    )

    @model_validator(mode="before")
    @classmethod
    def _replaced_keys(cls, data: Any) -> Any:
        """A key fedsim once had names what replaced it."""
        if isinstance(data, dict):
            for key, replacement in REPLACED_RADIO_KEYS.items():
                if key in data:
                    raise ValueError(f"{key}: replaced by {replacement}")
        return data

    @model_validator(mode="after")
    def _shannon_knobs_need_shannon(self) -> RadioConfig:
        if self.link.model != "harq":
            return self
        for name in SHANNON_ONLY:
            if getattr(self, name) != RadioConfig.model_fields[name].default:
                raise ValueError(
                    f"{name}: with link harq the rates come from the MCS table: remove it"
                )
        return self

    @model_validator(mode="after")
    def _one_numerology(self) -> RadioConfig:
        numerologies = {
            name: value
            for name, value in (
                ("uplink_sharing", getattr(self.uplink_sharing, "subcarrier_spacing_khz", None)),
                ("power_control", getattr(self.power_control, "subcarrier_spacing_khz", None)),
                ("link", getattr(self.link, "subcarrier_spacing_khz", None)),
            )
            if value is not None
        }
        if len(set(numerologies.values())) > 1:
            raise ValueError(
                "subcarrier_spacing_khz differs between "
                + ", ".join(f"{k} ({v} kHz)" for k, v in numerologies.items())
                + ": one numerology for the band"
            )
        return self

    @model_validator(mode="after")
    def _bands_hold_a_prb(self) -> RadioConfig:
        """Where the band is cut into PRBs (link harq, a PRB scheduler), each band holds one:
        found here, naming the field, not as a failed run."""
        if self.link.model != "harq" and not isinstance(self.uplink_sharing, PrbScheduling):
            return self
        width_hz = prb_hz(self.subcarrier_spacing_khz)
        for name in ("uplink_bandwidth_hz", "downlink_bandwidth_hz", "d2d_bandwidth_hz"):
            if getattr(self, name) < width_hz:
                raise ValueError(
                    f"{name}: {getattr(self, name):g} Hz cannot hold one PRB of {width_hz:g} Hz "
                    f"(12 subcarriers of {self.subcarrier_spacing_khz} kHz): at least "
                    f"{width_hz:g} Hz where the band is cut into PRBs"
                )
        return self

    @property
    def subcarrier_spacing_khz(self) -> int:
        """The band's numerology: the PRB scheduler's, power control's or link harq's."""
        for part in (self.uplink_sharing, self.power_control, self.link):
            spacing = getattr(part, "subcarrier_spacing_khz", None)
            if spacing is not None:
                return spacing
        return 30

    @model_validator(mode="after")
    def _shadowing_by_the_standard(self) -> RadioConfig:
        default_db = RadioConfig.model_fields["shadowing_db"].default
        if self.path_loss.kind in TR38901_KINDS and self.shadowing_db != default_db:
            raise ValueError(
                f"shadowing_db: path_loss {self.path_loss.kind} takes TR 38.901's σ per LOS "
                "state: remove it (path_loss.shadowing: false turns shadowing off)"
            )
        return self

    @model_validator(mode="after")
    def _one_cell_over_the_air(self) -> RadioConfig:
        if self.uplink_aggregation != "digital":
            for name in ("cells", "power_control"):
                if getattr(self, name) is not None:
                    raise ValueError(
                        f"{name}: the over-the-air slot ({self.uplink_aggregation}) is one "
                        "cell's, with its own channel inversion: remove one of them"
                    )
        return self

    @model_validator(mode="after")
    def _subbands_need_transport_blocks(self) -> RadioConfig:
        """A frequency-selective channel reaches a rate through one effective SINR per
        transport block (EESM over its PRBs): the harq link's; the other links' Shannon rates
        and the over-the-air slot's channel inversion are of one gain over the band."""
        profile = self.fading.profile
        if profile == "flat":
            return self
        if self.link.model != "harq":
            raise ValueError(
                f"fading.profile: {profile} needs link harq (an effective SINR per transport "
                f"block over its subbands), not {self.link.model}: set link: harq, or profile: flat"
            )
        if sionna_tables_folder() is None:
            raise ValueError(f"fading.profile: {profile}'s taps come from Sionna: {SIONNA_MISSING}")
        if self.uplink_aggregation != "digital":
            raise ValueError(
                f"fading.profile: {profile}: the over-the-air slot ({self.uplink_aggregation}) "
                "inverts one gain over the band: use profile: flat"
            )
        return self

    @model_validator(mode="after")
    def _annulus(self) -> RadioConfig:
        if self.cell_radius_m <= self.min_distance_m:
            raise ValueError(
                f"cell_radius_m ({self.cell_radius_m:g}) must exceed min_distance_m "
                f"({self.min_distance_m:g})"
            )
        return self
