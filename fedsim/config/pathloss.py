"""The radio's path-loss laws (``system.radio.path_loss`` and ``d2d_path_loss``): the classic
single-cell laws, TR 38.901's, and the D2D links' own."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from fedsim.config.base import NO_BOOL, _Strict, tagged_union


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
