"""The radio (``system.radio``, optional): link rates from a physical-layer channel, with its
fading, scheduling, power control, cells and mobility; its path-loss laws are in ``pathloss``,
its link models in ``link``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    StrictBool,
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
)
from fedsim.config.laws import ConstantDbm, PowerLaw
from fedsim.config.link import (
    SHANNON_ONLY,
    SIONNA_MISSING,
    IdealLink,
    LinkConfig,
)
from fedsim.config.pathloss import (
    TR38901_KINDS,
    D2DPathLossConfig,
    MacroPathLoss,
    PathLossConfig,
    UmiStreetCanyonPathLoss,
)
from fedsim.sim.readers import read_positions, sionna_tables_folder
from fedsim.sim.scheduler import prb_hz


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
    placement: Literal["contiguous", "hopping"] = Field(
        default="contiguous",
        description="where the PRBs of a share no scheduler placed sit (equal, fixed, tdma, the "
        "downlink, D2D): contiguous, in a row from a start drawn per transmission (NR's "
        "resource allocation type 1 without frequency hopping, TS 38.214 6.1.2.2.2, hopping "
        "being off unless configured); hopping, alternate slots half the band apart (inter-slot "
        "frequency hopping, TS 38.214 6.3.1)",
    )

    @model_validator(mode="after")
    def _profile_needs_rayleigh_blocks(self) -> FadingConfig:
        """A TDL profile's own keys (delay_spread_ns, subband_prbs, placement) mean nothing
        with flat fading; they are taken (unused), so that a sweep over the profile sets them
        once, and a flat run's scenario.yaml leaves them out."""
        if self.profile == "flat":
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
