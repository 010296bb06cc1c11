"""The radio (``system.radio``, optional): link rates from a physical-layer channel, with its
path-loss laws, fading, outage and mobility."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from fedsim.config.base import (
    MAX_COUNT,
    MAX_TIME_S,
    NO_BOOL,
    BandwidthHz,
    PowerDbm,
    _Strict,
    read_now_by,
    tagged_union,
)
from fedsim.config.laws import ConstantDbm, PowerLaw
from fedsim.sim.readers import read_positions


class MacroPathLoss(_Strict):
    """128.1 + 37.6 log10(d_km) dB: 3GPP TR 36.814 urban macro cell at 2 GHz."""

    kind: Literal["macro"] = "macro"


class LogDistancePathLoss(_Strict):
    """PL(d0) + 10 alpha log10(d / d0) dB (Rappaport)."""

    kind: Literal["log_distance"] = "log_distance"
    reference_loss_db: Annotated[float, Field(ge=0, le=200), NO_BOOL] = 40.0
    reference_distance_m: Annotated[float, Field(gt=0, le=1e4), NO_BOOL] = 1.0
    exponent: Annotated[float, Field(ge=1, le=8), NO_BOOL] = 3.0


class FreeSpacePathLoss(_Strict):
    """Friis: 20 log10(4 pi d f / c) dB."""

    kind: Literal["free_space"] = "free_space"
    carrier_ghz: Annotated[float, Field(ge=0.01, le=300), NO_BOOL] = 2.0


def _name_is_kind(value: Any) -> Any:
    """``path_loss: macro`` is ``{kind: macro}`` (its defaults)."""
    return {"kind": value} if isinstance(value, str) else value


PATH_LOSSES = (MacroPathLoss, LogDistancePathLoss, FreeSpacePathLoss)
PathLossConfig = Annotated[tagged_union(PATH_LOSSES, "kind"), BeforeValidator(_name_is_kind)]


class FadingConfig(_Strict):
    """Small-scale block fading, re-drawn every coherence_s (null: at every transmission)."""

    model: Literal["none", "rayleigh", "rician"] = "none"
    k_factor_db: Annotated[float, Field(ge=-30, le=40), NO_BOOL] = Field(
        default=3.0, description="rician: line-of-sight over scattered power, dB"
    )
    coherence_s: Annotated[float, Field(ge=1e-3, le=MAX_TIME_S), NO_BOOL] | None = Field(
        default=0.1,
        description="block length (0.1 s: a pedestrian at 2 GHz); null: per transmission",
    )


class OutageConfig(_Strict):
    """A block is lost below an SNR threshold, or with Chen et al.'s q = 1 - exp(-m / SNR)."""

    model: Literal["threshold", "packet_error"] = "threshold"
    snr_threshold_db: Annotated[float, Field(ge=-30, le=60), NO_BOOL] = Field(
        default=0.0, description="threshold: the lowest scheme's SNR; it also floors the rate"
    )
    waterfall_m: Annotated[float, Field(gt=0, le=100), NO_BOOL] = 0.023
    max_retransmissions: Annotated[int, Field(ge=0, le=100), NO_BOOL] = 3


class MobilityConfig(_Strict):
    """Random waypoint in the cell (no pauses)."""

    speed_mps: Annotated[float, Field(gt=0, le=100), NO_BOOL]
    update_s: Annotated[float, Field(ge=0.01, le=MAX_TIME_S), NO_BOOL] = 1.0


class RadioConfig(_Strict):
    """Link rates from distance, path loss, shadowing, fading and the band (see the README's
    "Radio model"). Defaults: the single-cell setting of Chen et al. and Yang et al. (TWC 2021)."""

    cell_radius_m: Annotated[float, Field(gt=0, le=1e5), NO_BOOL] = 500.0
    min_distance_m: Annotated[float, Field(gt=0, le=1e5), NO_BOOL] = 10.0
    positions: Annotated[Path | None, read_now_by(read_positions)] = Field(
        default=None, description="CSV client,x_m,y_m (relative to the working folder)"
    )
    path_loss: PathLossConfig = MacroPathLoss()
    shadowing_db: Annotated[float, Field(ge=0, le=30), NO_BOOL] = Field(
        default=8.0, description="sigma"
    )
    shadowing_coherence_s: Annotated[float, Field(ge=1e-3, le=MAX_TIME_S), NO_BOOL] | None = None
    fading: FadingConfig = FadingConfig()
    noise_density_dbm_per_hz: Annotated[float, Field(ge=-220, le=-100), NO_BOOL] = -174.0
    noise_figure_db: Annotated[float, Field(ge=0, le=30), NO_BOOL] = 0.0
    tx_power_dbm: PowerLaw = Field(
        default=ConstantDbm(value_dbm=10.0),
        description="a number, {kind: uniform, low_dbm, high_dbm} or {kind: normal, mean_dbm, "
        "std_db}",
    )
    base_station_power_dbm: PowerDbm = 30.0
    uplink_bandwidth_hz: BandwidthHz = 20e6
    downlink_bandwidth_hz: BandwidthHz = 20e6
    d2d_bandwidth_hz: BandwidthHz = 10e6
    uplink_sharing: Literal["equal", "fixed", "tdma"] = "equal"
    uplink_subbands: Annotated[int, Field(ge=1, le=MAX_COUNT), NO_BOOL] = Field(
        default=10, description="fixed: the band is cut into this many sub-bands, one per upload"
    )
    snr_gap_db: Annotated[float, Field(ge=0, le=20), NO_BOOL] = 0.0
    max_bits_per_hz: Annotated[float, Field(gt=0, le=30), NO_BOOL] | None = Field(
        default=None, description="cap on spectral efficiency (the highest scheme)"
    )
    outage: OutageConfig | None = None
    mobility: MobilityConfig | None = None

    @model_validator(mode="after")
    def _annulus(self) -> RadioConfig:
        if self.cell_radius_m <= self.min_distance_m:
            raise ValueError(
                f"cell_radius_m ({self.cell_radius_m:g}) must exceed min_distance_m "
                f"({self.min_distance_m:g})"
            )
        return self
