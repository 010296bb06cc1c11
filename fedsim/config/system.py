"""The system model: the network, D2D links, compute, energy and device profiles, with the
radio (``radio.py``) as the optional source of link rates."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from fedsim.config.base import (
    MAX_COMPUTE_S,
    MAX_FACTOR,
    MAX_RATE_MBPS,
    MIN_RATE_MBPS,
    MIN_TAIL_SHAPE,
    NO_BOOL,
    ComputeSeconds,
    Factor,
    Fraction,
    LatencySeconds,
    RateMbps,
    _read_referenced_file,
    _Strict,
)
from fedsim.config.constellation import ConstellationConfig
from fedsim.config.laws import Constant, ConstantDbm, PositiveDistribution, PowerLaw
from fedsim.config.radio import RadioConfig
from fedsim.sim.readers import read_device_profiles


class NetworkConfig(_Strict):
    """Fixed-rate links (without system.radio): each client's rates, the uplink medium and the
    downlink's way of sending."""

    uplink_mbps: PositiveDistribution = Field(
        default=Constant(value=10.0), description="per-client uplink rate (a number or a law)"
    )
    rho: Factor = Field(default=1.0, description="downlink rate / uplink rate (1e-3..1e3)")
    latency_s: LatencySeconds = Field(default=0.0, description="added to every transfer (set-up)")
    uplink_medium: Literal["parallel", "tdma", "shared"] = Field(
        default="parallel",
        description="parallel: each upload at its own rate (FDMA); tdma: one at a time, first "
        "come first served; shared: concurrent uploads split cell_capacity_mbps",
    )
    cell_capacity_mbps: RateMbps | None = Field(
        default=None, description="shared uplink: capacity split among concurrent uploads"
    )
    downlink: Literal["broadcast", "unicast"] = Field(
        default="broadcast",
        description="broadcast: one transmission to a group at its slowest member's rate; "
        "unicast: one copy after another",
    )
    precision_bits: Annotated[Literal[8, 16, 32, 64], NO_BOOL] = Field(
        default=32, description="bits per parameter on the air (without a codec)"
    )

    @model_validator(mode="after")
    def _capacity_for_shared(self) -> NetworkConfig:
        if self.uplink_medium == "shared" and self.cell_capacity_mbps is None:
            raise ValueError("uplink_medium 'shared' needs cell_capacity_mbps")
        return self


class D2DConfig(_Strict):
    """Device-to-device links for decentralized algorithms."""

    graph: Literal["complete", "ring", "erdos_renyi", "random_geometric", "edge_list"] = Field(
        default="complete", description="who has a D2D link with whom"
    )
    p: Annotated[float, Field(gt=0, le=1), NO_BOOL] = Field(
        default=0.3, description="erdos_renyi: each pair's edge probability"
    )
    radius: Annotated[float, Field(gt=0, le=2), NO_BOOL] = Field(
        default=0.3, description="in the unit square (from its diagonal, 1.41, on: complete)"
    )
    edge_list: Path | None = Field(
        default=None, description="file of 'u v [rate_mbps]' lines (relative to the working folder)"
    )
    rate_mbps: PositiveDistribution = Field(
        default=Constant(value=10.0), description="per-link rate (a number or a law)"
    )
    latency_s: LatencySeconds = Field(default=0.0, description="added to every peer message")
    relay: bool = Field(default=False, description="route every peer message via the base station")

    @model_validator(mode="after")
    def _edge_list_file(self) -> D2DConfig:
        if (self.graph == "edge_list") != (self.edge_list is not None):
            raise ValueError("graph 'edge_list' and the edge_list file go together")
        return self


class DeviceClass(_Strict):
    """A share of the clients whose compute runs at a speed of its own."""

    fraction: Fraction = Field(description="share of the clients (the classes' sum to 1)")
    speed: Factor = Field(description="compute time is divided by this (1e-3..1e3)")


class Stragglers(_Strict):
    """A fixed random subset of clients whose compute is slowed down."""

    fraction: Annotated[float, Field(ge=0, le=1), NO_BOOL] = Field(
        default=0.0, description="share of the clients that straggle"
    )
    slowdown: Annotated[float, Field(ge=1, le=MAX_FACTOR), NO_BOOL] = Field(
        default=1.0, description="their compute time is multiplied by this"
    )


class HeavyTail(_Strict):
    """Extra delay per task ~ scale_s * Lomax(shape) (Pareto II; infinite mean if shape <= 1)."""

    shape: Annotated[float, Field(ge=MIN_TAIL_SHAPE, le=1e6), NO_BOOL] = Field(
        description="Lomax shape: the smaller, the heavier the tail"
    )
    scale_s: Annotated[float, Field(gt=0, le=MAX_COMPUTE_S), NO_BOOL] = Field(
        description="scale of the extra delay"
    )


class CyclesConfig(_Strict):
    """A device's CPU: c cycles per sample at f Hz take c·D/f s and κ·c·D·f² J for D samples.

    Defaults from Yang et al. (TWC 2021): κ = 1e-28, c in 1e4..3e4 cycles/sample, f <= 2 GHz.
    """

    frequency_ghz: PositiveDistribution = Field(
        default=Constant(value=1.0), description="per-client CPU frequency (a number or a law)"
    )
    cycles_per_sample: Annotated[float, Field(ge=1, le=1e12), NO_BOOL] = Field(
        default=2e4, description="c: CPU cycles to train on one sample"
    )
    capacitance: Annotated[float, Field(gt=0, le=1e-20), NO_BOOL] = Field(
        default=1e-28, description="effective switched capacitance kappa"
    )


class ComputeConfig(_Strict):
    """Shifted exponential T_min + Exp(mean) per round, per local step or per sample; or the
    cycles model (time c·D/f). The cycles model always gives the compute energy."""

    model: Literal["shifted_exponential", "cycles"] = Field(
        default="shifted_exponential", description="what gives the compute *time*"
    )
    t_min_s: ComputeSeconds = Field(
        default=1.0, description="shifted exponential: the shortest time per unit of work"
    )
    mean_extra_s: ComputeSeconds = Field(
        default=0.0, description="shifted exponential: mean of the exponential part"
    )
    per: Literal["round", "step", "sample"] = Field(
        default="round", description="the unit of work one draw is for (multiplied by the work)"
    )
    device_classes: list[DeviceClass] = Field(
        default=[], description="classes of devices; compute time is divided by a class's speed"
    )
    stragglers: Stragglers = Field(
        default=Stragglers(), description="a fixed share of clients, slowed down"
    )
    heavy_tail: HeavyTail | None = Field(
        default=None, description="a heavy-tailed stall added to every task; null: none"
    )
    cycles: CyclesConfig = Field(
        default=CyclesConfig(), description="the CPU of the cycles model (time and energy)"
    )

    @model_validator(mode="after")
    def _classes_sum_to_one(self) -> ComputeConfig:
        total = sum(c.fraction for c in self.device_classes)
        if self.device_classes and abs(total - 1) > 1e-6:
            raise ValueError(f"device_classes fractions must sum to 1 (they sum to {total:g})")
        return self


# --- energy (optional): joules per client, batteries -------------------------------------------


class ChargingConfig(_Strict):
    """An empty battery recharges offline at power_w until resume_fraction of its capacity."""

    power_w: Annotated[float, Field(gt=0, le=1e4), NO_BOOL] = Field(description="charging power")
    resume_fraction: Annotated[float, Field(gt=0, le=1), NO_BOOL] = Field(
        default=0.8, description="the client comes back online once charged to this fraction"
    )


class BatteryConfig(_Strict):
    """A battery per client: when it empties the client leaves, or goes offline to charge."""

    capacity_j: PositiveDistribution = Field(description="per-client capacity (a number or a law)")
    initial_fraction: Annotated[float, Field(gt=0, le=1), NO_BOOL] = Field(
        default=1.0, description="charge at the start, as a fraction of the capacity"
    )
    min_fraction: Annotated[float, Field(ge=0, lt=1), NO_BOOL] = Field(
        default=0.0, description="a client below this fraction of its capacity is not selected"
    )
    charging: ChargingConfig | None = Field(
        default=None, description="null: an empty client leaves for good"
    )


class EnergyConfig(_Strict):
    """Joules per client: compute (the cycles model), transmit, receive, idle; batteries.

    Defaults: Yang et al.'s model (TWC 2021), compute and transmit energy only."""

    tx_power_dbm: PowerLaw = Field(
        default=ConstantDbm(value_dbm=10.0),
        description="without system.radio (with it, radio.tx_power_dbm)",
    )
    circuit_power_w: Annotated[float, Field(ge=0, le=100), NO_BOOL] = Field(
        default=0.0, description="added while transmitting"
    )
    pa_efficiency: Annotated[float, Field(gt=0, le=1), NO_BOOL] = Field(
        default=1.0,
        description="η of the power amplifier: a transmitter draws its radiated power / η (plus "
        "circuit_power_w); 1: the radiated power alone (e.g. 0.4 for a UE, Björnson et al. 2017)",
    )
    rx_power_w: Annotated[float, Field(ge=0, le=100), NO_BOOL] = Field(
        default=0.0, description="drawn while receiving"
    )
    idle_power_w: Annotated[float, Field(ge=0, le=100), NO_BOOL] = Field(
        default=0.0, description="drawn all the time a client is online"
    )
    battery: BatteryConfig | None = Field(default=None, description="null: no batteries")


class DevicesConfig(_Strict):
    """Per-client device profiles: FedScale's device capacity JSON (ms per sample, kbit/s) or
    a CSV client,compute_ms_per_sample,uplink_kbps[,downlink_kbps]. They give each client's
    compute time (per sample) and link rates (downlink: the file's, else rho x uplink)."""

    path: Path = Field(description="JSON or CSV, relative to the working folder")

    @field_validator("path")
    @classmethod
    def _readable(cls, path: Path) -> Path:
        profiles = _read_referenced_file(path, read_device_profiles)
        for i, profile in enumerate(profiles):
            if not MIN_RATE_MBPS <= profile.uplink_bps / 1e6 <= MAX_RATE_MBPS:
                raise ValueError(f"{path}: entry {i}: uplink outside 1 bit/s..1 Tbit/s")
            if profile.compute_s_per_sample > MAX_COMPUTE_S:
                raise ValueError(f"{path}: entry {i}: over {MAX_COMPUTE_S:g} s per sample")
        return path


class SystemConfig(_Strict):
    """The system model: links, compute, peer links, the radio, energy, device traces and
    satellites."""

    network: NetworkConfig = Field(
        default=NetworkConfig(), description="fixed-rate links (latency only, with the radio)"
    )
    compute: ComputeConfig = Field(default=ComputeConfig(), description="how long local work takes")
    d2d: D2DConfig | None = Field(
        default=None, description="device-to-device links for peer messages; null: none"
    )
    radio: RadioConfig | None = Field(
        default=None, description="rates from a radio channel; null: fixed-rate links"
    )
    energy: EnergyConfig | None = Field(
        default=None, description="joules per client and batteries; null: not counted"
    )
    devices: DevicesConfig | None = Field(
        default=None, description="per-client compute and rates from a device trace"
    )
    constellation: ConstellationConfig | None = Field(
        default=None, description="satellites as the clients; null: none"
    )

    @property
    def uplink_aggregation(self) -> str:
        """digital (each update its own upload; always without a radio), aircomp or obda."""
        return "digital" if self.radio is None else self.radio.uplink_aggregation

    @model_validator(mode="after")
    def _devices_set_rates_and_compute(self) -> SystemConfig:
        """Device profiles give each client's uplink rate and compute time: a rate or a
        compute law given as well would be silently ignored, so it is an error."""
        if self.devices is None:
            return self
        if self.radio is not None:
            raise ValueError(
                "system.devices: device profiles give fixed link rates; system.radio computes "
                "them from the channel: use one of the two"
            )
        given = [
            f"system.network.{name}"
            for name in ("uplink_mbps", "uplink_medium", "cell_capacity_mbps")
            if getattr(self.network, name) != NetworkConfig.model_fields[name].default
        ] + [
            f"system.compute.{name}"
            for name in ("model", "t_min_s", "mean_extra_s", "per")
            if getattr(self.compute, name) != ComputeConfig.model_fields[name].default
        ]
        if given:
            raise ValueError(
                f"{given[0]}: system.devices gives each client's uplink rate and compute time "
                "per sample: remove it"
            )
        return self

    @model_validator(mode="after")
    def _radio_sets_the_rates(self) -> SystemConfig:
        """With the radio, rates (and so rho) come from the channel: a fixed rate given as
        well would be silently ignored, so it is an error."""
        if self.radio is None:
            return self
        # Compared with the defaults, not by fields set: a sweep's variants are dumped in full.
        fixed = [
            f"network.{name}"
            for name in RADIO_REPLACES
            if getattr(self.network, name) != NetworkConfig.model_fields[name].default
        ]
        d2d_default_mbps = D2DConfig.model_fields["rate_mbps"].default
        if self.d2d is not None and self.d2d.rate_mbps != d2d_default_mbps:
            fixed.append("d2d.rate_mbps")
        energy = self.energy
        if (
            energy is not None
            and energy.tx_power_dbm != EnergyConfig.model_fields["tx_power_dbm"].default
        ):
            fixed.append("energy.tx_power_dbm")
        if fixed:
            instead = (
                "the transmit power is system.radio.tx_power_dbm"
                if fixed[0] == "energy.tx_power_dbm"
                else "the rates come from the channel (radio.uplink_sharing sets how uploads "
                "share the band)"
            )
            raise ValueError(f"system.{fixed[0]}: with system.radio {instead}: remove it")
        return self

    @model_validator(mode="after")
    def _constellation_is_the_network(self) -> SystemConfig:
        """A constellation's links come from its passes and budgets: rates, a radio, device
        profiles or batteries given as well would be ignored, so they are errors."""
        if self.constellation is None:
            return self
        for name, given in (("radio", self.radio), ("devices", self.devices),
                            ("energy", self.energy), ("d2d", self.d2d)):  # fmt: skip
            if given is not None:
                instead = " (inter-satellite links: constellation.isl)" if name == "d2d" else ""
                raise ValueError(f"system.{name}: not modelled with system.constellation{instead}")
        for name in (*RADIO_REPLACES, "downlink", "latency_s"):
            if getattr(self.network, name) != NetworkConfig.model_fields[name].default:
                raise ValueError(
                    f"system.network.{name}: with system.constellation the links follow the "
                    "passes (constellation.link): remove it"
                )
        return self


RADIO_REPLACES = ("uplink_mbps", "rho", "uplink_medium", "cell_capacity_mbps")
