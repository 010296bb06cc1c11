"""The radio's fixed parameters (``radio.Radio``): its laws, band, link model, power control
and cells, as the World builds them from the scenario."""

from __future__ import annotations

from dataclasses import dataclass

from fedsim.sim.cells import HexGrid
from fedsim.sim.draws import Fading
from fedsim.sim.link import IdealSettings, LinkSettings
from fedsim.sim.pathloss import PathLoss, Tr38901, UmiStreetCanyon
from fedsim.sim.selective import SelectiveFading


@dataclass(frozen=True)
class PowerControl:
    """Open-loop uplink power (TS 38.213 §7.1.1): min(P_max, P0 + 10 log10(2^μ M_PRB) + α PL)
    on the PRBs M_PRB of the transmitter's share of the band, PL its large-scale loss."""

    p0_dbm: float = -90.0
    alpha: float = 1.0
    subcarrier_spacing_khz: int = 30


@dataclass(frozen=True)
class CellSettings:
    """Several sites (``fedsim.sim.cells``): attachment with hysteresis, other cells' uploads
    as interference on the uplink, a backhaul from every site to the server."""

    grid: HexGrid
    interference: bool = True
    hysteresis_db: float = 3.0
    backhaul_bps: float = 1e9
    backhaul_latency_s: float = 0.005
    backhaul_shared: bool = True  # a site's transfers share its link (``fedsim.sim.backhaul``)


@dataclass(frozen=True)
class RadioSettings:
    """The radio's fixed parameters (the per-client draws are given to ``Radio``)."""

    path_loss: PathLoss | Tr38901 = PathLoss()
    line_of_sight: str = "probability"  # a TR 38.901 law: probability | always | never
    fading: Fading = Fading()
    # A gain per subband from a TDL profile (``fedsim.sim.selective``) instead of one over the
    # band; ``fading`` keeps its model and block. ``subband_prbs``: None, the RBG size.
    selective: SelectiveFading | None = None
    subband_prbs: int | None = None
    placement: str = "contiguous"  # of a share no scheduler placed (``link.placement``)
    shadowing_db: float = 0.0
    shadowing_coherence_s: float | None = None  # None: one draw per client for the run
    noise_density_dbm_per_hz: float = -174.0
    bs_noise_figure_db: float = 0.0  # the base station's receiver: uplink (and over the air)
    ue_noise_figure_db: float = 0.0  # the device's receiver: downlink and D2D
    base_station_power_dbm: float = 30.0
    uplink_bandwidth_hz: float = 20e6
    downlink_bandwidth_hz: float = 20e6
    d2d_bandwidth_hz: float = 10e6
    min_distance_m: float = 1.0
    cell_radius_m: float = 500.0
    link: LinkSettings = IdealSettings()  # the link model's (``fedsim.sim.link``)
    d2d_path_loss: PathLoss | UmiStreetCanyon = UmiStreetCanyon()
    speed_mps: float | None = None  # random waypoint mobility, when set
    update_s: float = 1.0
    power_control: PowerControl | None = None
    cells: CellSettings | None = None
