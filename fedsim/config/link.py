"""The radio's link models (``system.radio.link``): what a transmitter does with its channel
(ideal Shannon, NR transport blocks with HARQ, per-upload loss, whole-transfer loss)."""

from __future__ import annotations

import warnings
from functools import cache
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator

from fedsim.config.base import MAX_TIME_S, NO_BOOL, _Strict, tagged_union
from fedsim.sim.readers import sionna_tables_folder, sionna_version


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
